//! The memory page at the HTML level: session memories browsed by filter and searched, pattern
//! chunks searched, purges by filter and by tag confirmed by typing the project or the tag (and
//! refused when it is not typed, from another site, or by a watcher); a gateway without memory
//! says so.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod panel_support;

use axum::http::StatusCode;
use bridle_memory::{MemoryFilter, MemoryService};
use panel_support::{
    Caller, Client, Fixture, WATCHER, panel_config, remember, signed_in, stocked_memory as stocked,
};

async fn count(m: &MemoryService, project: &str) -> usize {
    let filter = MemoryFilter {
        project: Some(project.into()),
        ..MemoryFilter::default()
    };
    m.session.list(&filter, None, 1000).await.unwrap().0.len()
}

#[tokio::test]
async fn session_memories_are_browsed_by_filter_and_searched() {
    let (memory, _repo) = stocked().await;
    let fixture = Fixture::with_memory(memory).await;
    let c = signed_in(&fixture).await;

    let all = c.get("/panel/memory").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    assert!(all.body.contains(r#"aria-current="page">Memory<"#));
    for text in ["We use SQLite", "The other project uses Postgres."] {
        assert!(all.body.contains(text), "{text}");
    }
    // Memory text is shown, never run.
    assert!(!all.body.contains("<script>alert(1)"));
    assert!(all.body.contains("&lt;script&gt;alert(1)"));
    // No purge without a project.
    assert!(!all.body.contains("/panel/memory/purge"));
    assert!(all.body.contains("show the memories of one project"));
    for label in [
        "m-q",
        "m-project",
        "m-agent",
        "m-kind",
        "m-session",
        "m-tag",
        "p-q",
    ] {
        assert!(
            all.body.contains(&format!(r#"<label for="{label}">"#)),
            "{label}"
        );
    }

    let demo = c.get("/panel/memory?project=demo&agent=&tag=").await;
    assert_eq!(demo.status, StatusCode::OK);
    assert!(demo.body.contains("We use SQLite"));
    assert!(!demo.body.contains("Postgres"));
    // A purge of exactly this filter, behind a dialog that wants the project typed.
    assert!(demo.body.contains(r#"action="/panel/memory/purge""#));
    assert!(demo.body.contains(r#"<dialog id="purge-memories""#));
    assert!(demo.body.contains(r#"name="project" value="demo""#));
    assert!(demo.body.contains(r#"pattern="demo""#));

    let tagged = c.get("/panel/memory?project=demo&tag=ops").await;
    assert!(tagged.body.contains("exponentially"));
    assert!(!tagged.body.contains("We use SQLite"));
    assert!(tagged.body.contains(r#"name="tag" value="ops""#));

    let none = c.get("/panel/memory?project=nowhere").await;
    assert!(none.body.contains(r#"id="memories-empty""#));

    // A search ranks, shows scores, and offers no purge (a search is not a filter).
    let found = c.get("/panel/memory?q=SQLite+queue&project=demo").await;
    assert_eq!(found.status, StatusCode::OK, "{}", found.body);
    assert!(found.body.contains("We use SQLite"));
    assert!(found.body.contains(r#"<th scope="col">Score</th>"#));
    assert!(!found.body.contains("/panel/memory/purge"));

    // A cursor the API never gave is the API's own 400, shown in the page.
    let bad = c.get("/panel/memory?cursor=not-a-cursor").await;
    assert_eq!(bad.status, StatusCode::OK);
    assert!(bad.body.contains("invalid_query"), "{}", bad.body);
}

#[tokio::test]
async fn pattern_chunks_are_searched_and_an_example_is_purged_by_its_typed_tag() {
    let (memory, _repo) = stocked().await;
    let fixture = Fixture::with_memory(memory.clone()).await;
    let c = signed_in(&fixture).await;

    let hits = c.get("/panel/memory?pq=retry+backoff").await;
    assert_eq!(hits.status, StatusCode::OK, "{}", hits.body);
    assert!(hits.body.contains("retry.rs:"), "{}", hits.body);
    assert!(hits.body.contains("retry_with_backoff"));
    assert!(hits.body.contains("retry-example"));
    let action = "/panel/memory/patterns/retry-example/purge";
    // (minijinja writes `/` in attributes as `&#x2f;`; a browser reads both alike.)
    assert!(hits.body.replace("&#x2f;", "/").contains(action));
    assert!(hits.body.contains(r#"pattern="retry-example""#));
    let arch = c
        .get("/panel/memory?pq=retry&arch_tag=nothing-like-it")
        .await;
    assert!(arch.body.contains(r#"id="chunks-empty""#), "{}", arch.body);

    // Not typed, mistyped: nothing removed.
    for typed in ["", "retry"] {
        let r = c.post(action, &[("confirm", typed)]).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{typed}");
        assert!(r.body.contains("type `retry-example` to confirm"));
    }
    // From another site: refused before anything runs.
    let r = c
        .post_as(
            action,
            &[("confirm", "retry-example")],
            Caller::CrossSite,
            false,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // An unknown tag is the API's 404.
    let r = c
        .post(
            "/panel/memory/patterns/nothing/purge",
            &[("confirm", "nothing")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    assert!(r.body.contains("unknown_tag"));
    assert!(
        !memory
            .patterns
            .search("retry backoff", None, 5)
            .await
            .unwrap()
            .is_empty()
    );

    let r = c.post(action, &[("confirm", "retry-example")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(
        r.location()
            .starts_with("/panel/memory?notice=chunks_purged&id=")
    );
    let after = c.get(r.location()).await;
    assert!(after.body.contains("indexed chunk"), "{}", after.body);
    assert!(
        memory
            .patterns
            .search("retry backoff", None, 5)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn session_memories_are_purged_by_filter_once_the_project_is_typed() {
    let (memory, _repo) = stocked().await;
    let fixture = Fixture::with_memory(memory.clone()).await;
    let c = signed_in(&fixture).await;
    let form = |confirm: &'static str| {
        [
            ("project", "demo"),
            ("agent", "claude"),
            ("kind", ""),
            ("session", ""),
            ("tag", "db"),
            ("confirm", confirm),
        ]
    };

    for typed in ["", "other", "dem"] {
        let r = c.post("/panel/memory/purge", &form(typed)).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{typed}");
        assert!(r.body.contains("type `demo` to confirm"), "{}", r.body);
    }
    let r = c
        .post("/panel/memory/purge", &[("project", " "), ("confirm", " ")])
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.body.contains("a purge names a project"));
    let r = c
        .post_as(
            "/panel/memory/purge",
            &form("demo"),
            Caller::ForeignOriginOnly,
            false,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(count(&memory, "demo").await, 2, "nothing was removed");

    // A watcher sees the page but no purge, and a purge it posts is refused.
    let mut watcher = Client::new(fixture.router(panel_config()));
    watcher.login(WATCHER).await;
    let page = watcher.get("/panel/memory?project=demo").await;
    assert!(!page.body.contains("/panel/memory/purge"));
    let r = watcher.post("/panel/memory/purge", &form("demo")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(r.body.contains("read_only"));

    let r = c.post("/panel/memory/purge", &form("demo")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location(),
        "/panel/memory?notice=memories_purged&id=1&project=demo"
    );
    let after = c.get(r.location()).await;
    assert!(after.body.contains("1 session memory removed."));
    assert!(!after.body.contains("We use SQLite"));
    assert!(after.body.contains("exponentially"), "codex's memory stays");
    assert_eq!(count(&memory, "demo").await, 1);
    assert_eq!(count(&memory, "other").await, 1);
    // Recorded as the admin through the panel.
    let audit = c.get("/panel/audit").await;
    assert!(
        audit.body.contains("removed 1 session memories"),
        "{}",
        audit.body
    );
}

/// After the embedder changed, a search says why it found nothing and offers to embed the
/// memories again (not to a watcher); once done, the search answers.
#[tokio::test]
async fn memories_of_another_model_are_embedded_again_from_the_page() {
    let store = std::sync::Arc::new(bridle_memory::EmbeddedStore::open_in_memory().unwrap());
    let old = MemoryService::with(
        store.clone(),
        std::sync::Arc::new(bridle_memory::ConstantEmbedder::new(8)),
        bridle_memory::PatternIndexConfig::default(),
    );
    for (agent, text) in [
        ("claude", "We use SQLite for the queue."),
        ("codex", "Retries back off exponentially."),
        ("codex", "Tokens are hashed before they are stored."),
    ] {
        remember(&old, "demo", agent, "db", text).await;
    }
    let memory = MemoryService::with(
        store,
        std::sync::Arc::new(bridle_memory::ConstantEmbedder::new(8).named("other-model")),
        bridle_memory::PatternIndexConfig::default(),
    );
    let fixture = Fixture::with_memory(memory.clone()).await;
    let c = signed_in(&fixture).await;

    let page = c.get("/panel/memory?q=queue").await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("model_mismatch"), "{}", page.body);
    assert!(page.body.contains(r#"id="reembed-memories""#));
    let mut watcher = Client::new(fixture.router(panel_config()));
    watcher.login(WATCHER).await;
    let seen = watcher.get("/panel/memory?q=queue").await;
    assert!(seen.body.contains("model_mismatch"));
    assert!(!seen.body.contains(r#"id="reembed-memories""#));
    let r = watcher.post("/panel/memory/reembed", &[("x", "")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = c
        .post_as(
            "/panel/memory/reembed",
            &[("x", "")],
            Caller::ForeignOriginOnly,
            false,
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);

    let r = c.post("/panel/memory/reembed", &[("x", "")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location(),
        "/panel/memory?notice=memories_reembedded&id=3"
    );
    let after = c.get(r.location()).await;
    assert!(
        after
            .body
            .contains("3 session memories embedded again with the configured model."),
        "{}",
        after.body
    );
    let found = c.get("/panel/memory?q=queue").await;
    assert!(!found.body.contains("model_mismatch"), "{}", found.body);
    assert!(found.body.contains("We use SQLite"), "{}", found.body);
}

#[tokio::test]
async fn a_gateway_without_memory_says_so() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let r = c.get("/panel/memory?pq=anything").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(r.body.contains(r#"id="memory-off""#));
    assert!(r.body.contains("memory:"));
    assert!(!r.body.contains(r#"id="m-q""#));
    let r = c
        .post(
            "/panel/memory/purge",
            &[("project", "demo"), ("confirm", "demo")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert!(r.body.contains("memory_off"));
}
