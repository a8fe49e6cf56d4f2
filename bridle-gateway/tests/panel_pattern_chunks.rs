//! A pattern's indexed chunks and its description at the HTML level (`oneshot`): the chunk
//! page opened from the patterns page, paged with next and first links that keep the filter,
//! filtered by example, type and file, a snippet's markup escaped; its error pages (unknown
//! pattern 404, a bad cursor 400, no memory 503). The description form saved against the
//! page's revision, a stale one shown as the conflict with both descriptions and resolved;
//! a watcher and a cross-site post refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod panel_support;

use axum::http::StatusCode;
use panel_support::{Caller, Client, Fixture, WATCHER, memory_service, panel_config, signed_in};

/// A folder of `files` small Rust files, one item each; the first holds markup in a comment.
fn repo(files: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for n in 0..files {
        std::fs::write(
            dir.path().join(format!("retry{n}.rs")),
            format!(
                "/// Retries, variant {n}{}.\npub fn retry_{n}(attempts: u32) -> u32 {{\n    attempts * {n}\n}}\n",
                if n == 0 { " <script>alert(1)</script>" } else { "" }
            ),
        )
        .unwrap();
    }
    dir
}

/// A fixture whose demo project has pattern `retry` with example `retry-example` (indexed,
/// `files` chunks) and pattern `cqrs` without examples.
async fn fixture(files: usize) -> (Fixture, tempfile::TempDir) {
    let memory = memory_service();
    let dir = repo(files);
    memory
        .patterns
        .index(
            &bridle_memory::ExampleRepo {
                url: dir.path().display().to_string(),
                reference_tag: "retry-example".into(),
                arch_tag: "retry".into(),
            },
            &bridle_memory::NoProgress,
        )
        .await
        .unwrap();
    let f = Fixture::with_memory(memory).await;
    let mut doc = f.ctx.store.load("demo").unwrap().document;
    doc.patterns.custom.push(bridle_rules::CustomPattern {
        name: "retry".into(),
        description: "Retries with backoff.".into(),
        example_repos: vec![bridle_rules::ExampleRepo {
            url: dir.path().display().to_string(),
            reference_tag: "retry-example".into(),
            arch_tag: "retry".into(),
            last_indexed: None,
        }],
    });
    doc.patterns.custom.push(bridle_rules::CustomPattern {
        name: "cqrs".into(),
        description: String::new(),
        example_repos: Vec::new(),
    });
    f.ctx
        .store
        .save_edit("demo", &doc, doc.revision, "test", "patterns")
        .unwrap();
    (f, dir)
}

/// The ids of the chunk articles on a page, in order.
fn chunk_ids(html: &str) -> Vec<String> {
    html.match_indices("<article class=\"card chunk\" id=\"chunk-")
        .map(|(at, m)| {
            let rest = &html[at + m.len()..];
            rest[..rest.find('"').unwrap()].to_string()
        })
        .collect()
}

/// The `href` of the link with this id.
fn href(html: &str, id: &str) -> Option<String> {
    let at = html.find(&format!("id=\"{id}\""))?;
    let start = html[..at].rfind("href=\"")? + 6;
    let end = start + html[start..].find('"')?;
    Some(html[start..end].replace("&amp;", "&"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chunks_of_a_pattern_are_browsed_page_by_page_and_filtered() {
    let (f, _dir) = fixture(25).await;
    let c = signed_in(&f).await;

    // Linked from the patterns page.
    let page = c.get("/panel/patterns").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(
        href(&page.body, "chunks-demo-retry").as_deref(),
        Some("/panel/patterns/demo/retry/chunks")
    );

    // Twenty a page, then the rest; the next link keeps the filter, the first link drops the
    // cursor.
    let first = c.get("/panel/patterns/demo/retry/chunks").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert!(first.body.contains("Indexed chunks of retry"));
    assert!(first.body.contains("Retries with backoff."));
    assert!(first.body.contains("aria-current=\"page\">Patterns"));
    let ids1 = chunk_ids(&first.body);
    assert_eq!(ids1.len(), 20);
    assert!(!first.body.contains("id=\"first-page\""));
    let next = href(&first.body, "next-page").expect("a next page");
    assert!(
        next.starts_with("/panel/patterns/demo/retry/chunks?cursor="),
        "{next}"
    );
    let second = c.get(&next).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.body);
    let ids2 = chunk_ids(&second.body);
    assert_eq!(ids2.len(), 5);
    assert!(ids2.iter().all(|i| !ids1.contains(i)));
    assert!(!second.body.contains("id=\"next-page\""));
    assert_eq!(
        href(&second.body, "first-page").as_deref(),
        Some("/panel/patterns/demo/retry/chunks")
    );

    // A snippet's markup is text.
    let all = [first.body.as_str(), second.body.as_str()].concat();
    assert!(all.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"));
    assert!(!all.contains("<script>alert(1)"));

    // Filtered by file; by example and type, kept on the next link.
    let one = c
        .get("/panel/patterns/demo/retry/chunks?file=retry7.rs")
        .await;
    assert_eq!(chunk_ids(&one.body).len(), 1, "{}", one.body);
    assert!(one.body.contains("retry7.rs:1"));
    assert!(one.body.contains("value=\"retry7.rs\""));
    let typed = c
        .get("/panel/patterns/demo/retry/chunks?tag=retry-example&chunk_type=function")
        .await;
    assert_eq!(typed.status, StatusCode::OK, "{}", typed.body);
    let next = href(&typed.body, "next-page").expect("a next page");
    assert!(
        next.contains("tag=retry-example") && next.contains("chunk_type=function"),
        "{next}"
    );
    assert!(
        typed
            .body
            .contains("<option value=\"retry-example\" selected>")
    );
    let none = c
        .get("/panel/patterns/demo/retry/chunks?chunk_type=section")
        .await;
    assert_eq!(none.status, StatusCode::OK);
    assert!(none.body.contains("id=\"no-chunks\""));
    assert!(none.body.contains("match this filter"));
    // A pattern without examples.
    let empty = c.get("/panel/patterns/demo/cqrs/chunks").await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.body);
    assert!(empty.body.contains("id=\"no-chunks\""));

    // Error pages.
    for (path, status, code) in [
        (
            "/panel/patterns/demo/nope/chunks",
            StatusCode::NOT_FOUND,
            "unknown_pattern",
        ),
        (
            "/panel/patterns/nope/retry/chunks",
            StatusCode::NOT_FOUND,
            "unknown_project",
        ),
        (
            "/panel/patterns/demo/retry/chunks?tag=other",
            StatusCode::NOT_FOUND,
            "unknown_example",
        ),
        (
            "/panel/patterns/demo/retry/chunks?cursor=!!",
            StatusCode::BAD_REQUEST,
            "invalid_query",
        ),
    ] {
        let r = c.get(path).await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert!(
            r.body.contains(&format!("data-code=\"{code}\"")),
            "{path}: {}",
            r.body
        );
    }
    // Signed out: the log-in page.
    let anon = Client::new(f.router(panel_config()));
    let r = anon.get("/panel/patterns/demo/retry/chunks").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(r.location().contains("/panel/login"), "{}", r.location());
}

#[tokio::test]
async fn without_memory_the_chunk_page_says_memory_is_off() {
    let f = Fixture::new().await;
    let mut doc = f.ctx.store.load("demo").unwrap().document;
    doc.patterns.custom.push(bridle_rules::CustomPattern {
        name: "retry".into(),
        description: String::new(),
        example_repos: vec![bridle_rules::ExampleRepo {
            url: "/nowhere".into(),
            reference_tag: "retry-example".into(),
            arch_tag: "retry".into(),
            last_indexed: None,
        }],
    });
    f.ctx
        .store
        .save_edit("demo", &doc, doc.revision, "test", "a pattern")
        .unwrap();
    let c = signed_in(&f).await;
    let r = c.get("/panel/patterns/demo/retry/chunks").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert!(r.body.contains("data-code=\"memory_off\""), "{}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_description_is_saved_and_a_stale_one_shows_the_conflict() {
    let (f, _dir) = fixture(1).await;
    let c = signed_in(&f).await;
    let page = c.get("/panel/patterns").await;
    let base = f.revision();
    assert!(
        page.body
            .contains(&format!("name=\"base_revision\" value=\"{base}\"")),
        "{}",
        page.body
    );
    assert!(page.body.contains("id=\"edit-description-demo-retry\""));
    assert!(page.body.contains("id=\"save-description-demo-retry\""));

    let base_s = base.to_string();
    let r = c
        .post(
            "/panel/patterns/demo/retry/change",
            &[
                ("base_revision", base_s.as_str()),
                ("description", "Retries, with jitter."),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location(),
        "/panel/patterns?notice=description_changed#pattern-demo-retry"
    );
    let page = c.get("/panel/patterns?notice=description_changed").await;
    assert!(page.body.contains("Description saved."));
    assert!(page.body.contains("Retries, with jitter."));
    assert_eq!(f.revision(), base + 1);
    let changes = f.ctx.store.changes(Some("demo"), 0).unwrap();
    let last = changes.last().unwrap();
    assert_eq!(last.actor, "admin:alice@panel");
    assert_eq!(last.summary, "pattern `retry` description changed");

    // The form still says `base`: someone else's save came first. The conflict page shows the
    // current description and the admin's, and offers it again based on the new revision.
    let r = c
        .post(
            "/panel/patterns/demo/retry/change",
            &[
                ("base_revision", base_s.as_str()),
                ("description", "Mine <b>bold</b>."),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(r.body.contains("Someone else saved demo first"));
    assert!(r.body.contains("data-code=\"revision_conflict\""));
    assert!(r.body.contains(&format!(
        "<span id=\"current-revision\">{}</span>",
        base + 1
    )));
    assert!(
        r.body.contains("Retries, with jitter."),
        "theirs: {}",
        r.body
    );
    assert!(
        r.body.contains("Mine &lt;b&gt;bold&lt;&#x2f;b&gt;."),
        "mine: {}",
        r.body
    );
    assert!(
        r.body
            .contains(&format!("name=\"base_revision\" value=\"{}\"", base + 1)),
        "{}",
        r.body
    );
    assert_eq!(f.revision(), base + 1, "nothing was saved");
    let now = f.ctx.store.load("demo").unwrap().document;
    assert_eq!(now.patterns.custom[0].description, "Retries, with jitter.");

    // Resolved: saved against the new revision.
    let next = (base + 1).to_string();
    let r = c
        .post(
            "/panel/patterns/demo/retry/change",
            &[("base_revision", next.as_str()), ("description", "Mine.")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let now = f.ctx.store.load("demo").unwrap().document;
    assert_eq!(now.patterns.custom[0].description, "Mine.");
    assert_eq!(now.revision, base + 2);

    // An unknown pattern; a form without its revision.
    let r = c
        .post(
            "/panel/patterns/demo/nope/change",
            &[("base_revision", next.as_str()), ("description", "x")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(r.body.contains("data-code=\"unknown_pattern\""));
    let r = c
        .post(
            "/panel/patterns/demo/retry/change",
            &[("base_revision", "many"), ("description", "x")],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);

    // A cross-site post and a watcher are refused; nothing changes.
    let current = f.revision().to_string();
    let form = [
        ("base_revision", current.as_str()),
        ("description", "Evil."),
    ];
    let r = c
        .post_as(
            "/panel/patterns/demo/retry/change",
            &form,
            Caller::CrossSite,
            false,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let mut w = Client::new(f.router(panel_config()));
    w.login(WATCHER).await;
    let page = w.get("/panel/patterns").await;
    assert!(!page.body.contains("save-description-demo-retry"));
    let r = w.post("/panel/patterns/demo/retry/change", &form).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.body);
    let now = f.ctx.store.load("demo").unwrap().document;
    assert_eq!(now.patterns.custom[0].description, "Mine.");
}
