//! The patterns page at the HTML level (`oneshot`): the list with last indexed, adding a
//! pattern and an example, a re-index started from the page (a redirect that names its run) and
//! its progress stream as the bar's HTML ending with `end`, a late follower's replay, removals
//! checked against the typed name, and the refusals: a watcher, a cross-site post, a bad form, an
//! unknown run, a gateway without memory.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod panel_support;

use axum::http::StatusCode;
use panel_support::{Caller, Client, Fixture, WATCHER, memory_service, panel_config, signed_in};

fn example_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("retry.rs"),
        "/// Retries with exponential backoff.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
    )
    .unwrap();
    repo
}

/// The SSE events (name, data) of a whole stream body.
fn events(body: &str) -> Vec<(String, String)> {
    body.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = Some(v.trim().to_string());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            Some((name?, data))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_are_listed_added_reindexed_with_progress_and_removed() {
    let fixture = Fixture::with_memory(memory_service()).await;
    let repo = example_repo();
    let c = signed_in(&fixture).await;

    let page = c.get("/panel/patterns").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("No custom patterns."));
    assert!(page.body.contains("aria-current=\"page\">Patterns"));

    // Added: a pattern, an example.
    let r = c
        .post(
            "/panel/patterns/demo",
            &[("name", "retry"), ("description", "Retries with backoff.")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location(),
        "/panel/patterns?notice=pattern_added#pattern-demo-retry"
    );
    let url = repo.path().display().to_string();
    let r = c
        .post(
            "/panel/patterns/demo/retry/examples",
            &[
                ("url", url.as_str()),
                ("reference_tag", "retry-example"),
                ("arch_tag", ""),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let page = c.get("/panel/patterns").await;
    assert!(page.body.contains("id=\"example-retry-example\""));
    assert!(page.body.contains("never"));
    assert!(page.body.contains("Retries with backoff."));

    // Bad forms: the API's refusals shown, nothing changed.
    let r = c
        .post("/panel/patterns/demo", &[("name", "Bad Name")])
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    assert!(r.body.contains("invalid_name"), "{}", r.body);
    let r = c.post("/panel/patterns/demo", &[("name", "retry")]).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    let r = c.post("/panel/patterns/nope", &[("name", "x")]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);

    // Re-indexed from the page: the redirect names the run; its stream is the bar's HTML.
    let r = c
        .post(
            "/panel/patterns/demo/retry/examples/retry-example/index",
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let location = r.location().to_string();
    assert!(
        location.starts_with("/panel/patterns?notice=index_started&run="),
        "{location}"
    );
    assert!(
        location.ends_with("&tag=retry-example#example-retry-example"),
        "{location}"
    );
    let run = location
        .split("run=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap()
        .to_string();
    let page = c.get(&location).await;
    assert!(page.body.contains("Re-index started"));
    assert!(
        page.body.contains(&format!(
            "sse-connect=\"/panel/patterns/runs/{run}/events\""
        )),
        "{}",
        page.body
    );
    let stream = c.get(&format!("/panel/patterns/runs/{run}/events")).await;
    assert_eq!(stream.status, StatusCode::OK);
    assert!(
        stream
            .header("content-type")
            .unwrap()
            .starts_with("text/event-stream")
    );
    let evs = events(&stream.body);
    let (last_name, _) = evs.last().unwrap();
    assert_eq!(last_name, "end", "{evs:?}");
    let (_, full) = &evs[evs.len() - 2];
    assert!(full.contains("run-done"), "{full}");
    assert!(full.contains("100%"), "{full}");
    assert!(full.contains("<progress"), "{full}");
    assert!(evs.iter().all(|(n, _)| n == "progress" || n == "end"));
    assert!(evs.len() >= 3, "started, steps, done: {evs:?}");
    // Followed again after the end: the same story.
    let again = c.get(&format!("/panel/patterns/runs/{run}/events")).await;
    assert_eq!(events(&again.body).len(), evs.len());
    let page = c.get("/panel/patterns").await;
    assert!(!page.body.contains("never"), "last indexed is shown");

    // Unknown runs.
    let r = c.get("/panel/patterns/runs/nope/events").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(r.body.contains("unknown_index_run"));
    let page = c
        .get("/panel/patterns?run=%3Cscript%3E&tag=retry-example")
        .await;
    assert!(!page.body.contains("<script>"));
    assert!(!page.body.contains("sse-connect"));

    // Refused: a watcher, a cross-site post, a removal without the typed name.
    let mut watcher = Client::new(fixture.router(panel_config()));
    watcher.login(WATCHER).await;
    let seen = watcher.get("/panel/patterns").await;
    assert!(seen.body.contains("retry-example"));
    assert!(!seen.body.contains("reindex-retry-example"));
    for path in [
        "/panel/patterns/demo/retry/examples/retry-example/index",
        "/panel/patterns/demo",
    ] {
        let r = watcher.post(path, &[("name", "x")]).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{path}");
    }
    let r = c
        .post_as(
            "/panel/patterns/demo/retry/examples/retry-example/remove",
            &[("confirm", "retry-example")],
            Caller::CrossSite,
            false,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = c
        .post(
            "/panel/patterns/demo/retry/examples/retry-example/remove",
            &[("confirm", "retry")],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        c.get("/panel/patterns")
            .await
            .body
            .contains("retry-example")
    );

    // Removed: the example, then the pattern.
    let r = c
        .post(
            "/panel/patterns/demo/retry/examples/retry-example/remove",
            &[("confirm", "retry-example")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let page = c.get(r.location()).await;
    assert!(page.body.contains("Example removed"));
    assert!(!page.body.contains("id=\"example-retry-example\""));
    let r = c
        .post("/panel/patterns/demo/retry/remove", &[("confirm", "retry")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(
        c.get("/panel/patterns")
            .await
            .body
            .contains("No custom patterns.")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_that_keeps_indexed_chunks_says_so() {
    let fixture = Fixture::with_memory(memory_service()).await;
    let repo = example_repo();
    let c = signed_in(&fixture).await;
    let r = c
        .post(
            "/panel/patterns/demo",
            &[("name", "retry"), ("description", "Retries with backoff.")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let url = repo.path().display().to_string();
    let r = c
        .post(
            "/panel/patterns/demo/retry/examples",
            &[("url", url.as_str()), ("reference_tag", "retry-example")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    // Another project, broken by hand: it may list the tag, so the chunks are kept.
    let store = &fixture.ctx.store;
    store
        .create("other", &store.load("demo").unwrap().document, "test")
        .unwrap();
    std::fs::write(
        store.project_path("other").unwrap(),
        "schema_version: 2\nproject: [unclosed\n",
    )
    .unwrap();

    let r = c
        .post(
            "/panel/patterns/demo/retry/examples/retry-example/remove",
            &[("confirm", "retry-example")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(
        r.location().contains("notice=example_removed_chunks_kept"),
        "{}",
        r.location()
    );
    let page = c.get(r.location()).await;
    assert!(
        page.body
            .contains("Example removed, but indexed chunks were kept"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("id=\"example-retry-example\""));
    // The broken project is on the page with what is wrong; the others' patterns beside it.
    assert!(
        page.body.contains("data-code=\"stored_document_invalid\""),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("id=\"pattern-demo-retry\""),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn without_memory_a_reindex_says_memory_is_off() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let r = c.post("/panel/patterns/demo", &[("name", "retry")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let r = c
        .post(
            "/panel/patterns/demo/retry/examples",
            &[("url", "/nowhere"), ("reference_tag", "t")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let r = c
        .post("/panel/patterns/demo/retry/examples/t/index", &[])
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert!(r.body.contains("memory_off"), "{}", r.body);
}
