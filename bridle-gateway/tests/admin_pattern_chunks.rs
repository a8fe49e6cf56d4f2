//! A pattern's indexed chunks and its description over real HTTP: the chunks of a project's
//! pattern listed page by page behind an opaque cursor, filtered by example, type and file,
//! only that pattern's examples, a source URL's credentials never shown (a canary); a
//! description changed against a base revision, a stale one refused with 409 and the current
//! revision, nothing saved. Every failure path: unknown project, pattern or example (404), a
//! bad cursor or limit (400), agents' tokens and no credential (401), a gateway without memory
//! (503), wrong types and unknown fields (422).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::collections::BTreeSet;
use std::sync::Arc;

use admin_support::gateway::Gw;
use admin_support::{json_ok, problem};
use bridle_memory::{
    ConstantEmbedder, EmbeddedStore, ExampleRepo, MemoryService, NoProgress, PatternIndexConfig,
    VectorStore,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

const CANARY: &str = "chunk-canary-5e0d81";

fn service() -> MemoryService {
    service_and_store().0
}

/// A memory service and its store (to write a payload as another gateway's index left it).
fn service_and_store() -> (MemoryService, Arc<EmbeddedStore>) {
    let store = Arc::new(EmbeddedStore::open_in_memory().unwrap());
    let memory = MemoryService::with(
        store.clone(),
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    );
    (memory, store)
}

/// A folder of `files` small Rust files, one item each.
fn repo(files: usize, word: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for n in 0..files {
        std::fs::write(
            dir.path().join(format!("{word}{n}.rs")),
            format!("/// {word} number {n}.\npub fn {word}_{n}() -> u32 {{\n    {n}\n}}\n"),
        )
        .unwrap();
    }
    dir
}

/// Indexes the folder `dir` under `tag`, as pattern `arch`.
async fn index(memory: &MemoryService, dir: &std::path::Path, tag: &str, arch: &str) {
    memory
        .patterns
        .index(
            &ExampleRepo {
                url: dir.display().to_string(),
                reference_tag: tag.into(),
                arch_tag: arch.into(),
            },
            &NoProgress,
        )
        .await
        .unwrap();
}

/// The demo project with pattern `retry` (examples `retry-a`, `retry-b`), pattern `cqrs`
/// (example `cqrs-a`) and pattern `empty` (no example).
async fn with_patterns(gw: &Gw, urls: [&str; 3]) {
    for (name, description) in [
        ("retry", "Retries."),
        ("cqrs", "Commands and queries."),
        ("empty", ""),
    ] {
        json_ok(
            gw.post("/projects/demo/patterns")
                .json(&json!({ "name": name, "description": description }))
                .send()
                .await
                .unwrap(),
            StatusCode::CREATED,
        )
        .await;
    }
    for ((pattern, tag), url) in [
        ("retry", "retry-a"),
        ("retry", "retry-b"),
        ("cqrs", "cqrs-a"),
    ]
    .into_iter()
    .zip(urls)
    {
        json_ok(
            gw.post(&format!("/projects/demo/patterns/{pattern}/examples"))
                .json(&json!({ "url": url, "reference_tag": tag }))
                .send()
                .await
                .unwrap(),
            StatusCode::CREATED,
        )
        .await;
    }
}

fn ids(page: &Value) -> Vec<u64> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patterns_chunks_are_paged_and_filtered() {
    let memory = service();
    let (a, b, c) = (repo(5, "alpha"), repo(2, "beta"), repo(3, "gamma"));
    index(&memory, a.path(), "retry-a", "retry").await;
    index(&memory, b.path(), "retry-b", "retry").await;
    index(&memory, c.path(), "cqrs-a", "cqrs").await;
    let m = memory.clone();
    let gw = Gw::start_with(move |b| b.memory(m)).await;
    let urls = [a.path(), b.path(), c.path()].map(|p| p.display().to_string());
    with_patterns(&gw, [&urls[0], &urls[1], &urls[2]]).await;

    // Page by page, three at a time: every chunk of `retry` once, none of `cqrs`.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/projects/demo/patterns/retry/chunks?limit=3&cursor={c}"),
            None => "/projects/demo/patterns/retry/chunks?limit=3".to_string(),
        };
        let page = json_ok(gw.get(&path).send().await.unwrap(), StatusCode::OK).await;
        assert_eq!(page["project"], "demo");
        assert_eq!(page["pattern"], "retry");
        for c in page["items"].as_array().unwrap() {
            let tag = c["reference_tag"].as_str().unwrap();
            assert!(tag == "retry-a" || tag == "retry-b", "{c}");
            assert!(c["snippet"].as_str().unwrap().contains("pub fn"), "{c}");
            assert!(c["start_line"].as_u64().unwrap() >= 1);
        }
        seen.extend(ids(&page));
        pages += 1;
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 7, "{seen:?}");
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 7);
    assert_eq!(pages, 3);

    // Filters: one example, one file, a type.
    let only_b = json_ok(
        gw.get("/projects/demo/patterns/retry/chunks?tag=retry-b")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(ids(&only_b).len(), 2);
    assert!(only_b.get("next_cursor").is_none(), "{only_b}");
    let one_file = json_ok(
        gw.get("/projects/demo/patterns/retry/chunks?file=alpha3.rs")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(ids(&one_file).len(), 1, "{one_file}");
    assert_eq!(one_file["items"][0]["file_path"], "alpha3.rs");
    let kind = one_file["items"][0]["chunk_type"]
        .as_str()
        .unwrap()
        .to_string();
    let typed = json_ok(
        gw.get(&format!(
            "/projects/demo/patterns/cqrs/chunks?chunk_type={kind}"
        ))
        .send()
        .await
        .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(ids(&typed).len(), 3, "{typed}");
    let none = json_ok(
        gw.get("/projects/demo/patterns/cqrs/chunks?chunk_type=section")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(ids(&none).is_empty());
    // A pattern without examples: an empty page, not every example's chunks.
    let empty = json_ok(
        gw.get("/projects/demo/patterns/empty/chunks")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(ids(&empty).is_empty(), "{empty}");

    // Refusals.
    problem(
        gw.get("/projects/nope/patterns/retry/chunks")
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_project",
    )
    .await;
    problem(
        gw.get("/projects/demo/patterns/nope/chunks")
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_pattern",
    )
    .await;
    // Another pattern's example is not one of this pattern's.
    problem(
        gw.get("/projects/demo/patterns/retry/chunks?tag=cqrs-a")
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_example",
    )
    .await;
    for bad in ["!!", "bm9wZQ", "%00"] {
        problem(
            gw.get(&format!(
                "/projects/demo/patterns/retry/chunks?cursor={bad}"
            ))
            .send()
            .await
            .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_query",
        )
        .await;
    }
    for bad in ["0", "501", "-1", "many"] {
        problem(
            gw.get(&format!("/projects/demo/patterns/retry/chunks?limit={bad}"))
                .send()
                .await
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_query",
        )
        .await;
    }
    let r = gw
        .http
        .get(gw.url("/projects/demo/patterns/retry/chunks"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    for (agent, token) in gw.all_agent_tokens() {
        let r = gw
            .http
            .get(gw.url("/projects/demo/patterns/retry/chunks"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{agent}");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_urls_credential_is_never_listed_with_the_chunks_or_the_search() {
    let (memory, store) = service_and_store();
    let dir = repo(1, "delta");
    // The chunks of an example whose source was given with a credential in its URL (the store
    // keeps the URL as given, so that a refresh can fetch it again).
    let secret_url = format!("https://bot:{CANARY}@git.invalid/delta.git");
    index(&memory, dir.path(), "delta-a", "retry").await;
    rewrite_source(&store, "delta-a", &secret_url).await;
    let m = memory.clone();
    let gw = Gw::start_with(move |b| b.memory(m)).await;
    json_ok(
        gw.post("/projects/demo/patterns")
            .json(&json!({ "name": "retry" }))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    json_ok(
        gw.post("/projects/demo/patterns/retry/examples")
            .json(&json!({ "url": secret_url, "reference_tag": "delta-a" }))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    for path in [
        "/projects/demo/patterns/retry/chunks",
        "/memory/patterns?q=delta",
        "/projects/demo/patterns",
    ] {
        let r = gw.get(path).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let text = r.text().await.unwrap();
        assert!(!text.contains(CANARY), "{path}: {text}");
        assert!(text.contains("git.invalid"), "{path}: {text}");
    }
    gw.stop().await;
}

/// Re-stores a tag's chunks with `url` as their source (as an index of that URL leaves them).
async fn rewrite_source(store: &EmbeddedStore, tag: &str, url: &str) {
    let collection = PatternIndexConfig::default().collection;
    let filter = bridle_memory::Filter::eq("reference_tag", tag);
    let (records, _) = store
        .scroll(&collection, Some(&filter), None, 100)
        .await
        .unwrap();
    assert!(!records.is_empty());
    let points = records
        .into_iter()
        .map(|mut r| {
            r.payload.insert("source_repo".into(), json!(url));
            bridle_memory::Point {
                id: r.id,
                vector: vec![1.0; 8],
                payload: r.payload,
            }
        })
        .collect();
    store.upsert(&collection, points).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_description_is_changed_against_its_base_revision_and_a_stale_one_is_refused() {
    let gw = Gw::start().await;
    let created = json_ok(
        gw.post("/projects/demo/patterns")
            .json(&json!({ "name": "retry", "description": "Retries." }))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let base = created["revision"].as_u64().unwrap();
    let changed = json_ok(
        gw.patch("/projects/demo/patterns/retry")
            .json(&json!({ "base_revision": base, "description": "  Retries with backoff. " }))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(changed["revision"], base + 1);
    let list = json_ok(
        gw.get("/projects/demo/patterns").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(list["custom"][0]["description"], "Retries with backoff.");
    // In the history under the admin, and in the audit log as a pattern change by a user.
    let history = json_ok(
        gw.get("/projects/demo/history").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(
        history
            .to_string()
            .contains("pattern `retry` description changed"),
        "{history}"
    );
    let audit = json_ok(
        gw.get("/audit?project=demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let entry = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["kind"] == "pattern_change"
                && e["subject"]
                    .as_str()
                    .is_some_and(|s| s.contains("description"))
        })
        .unwrap_or_else(|| panic!("{audit}"))
        .clone();
    assert_eq!(entry["source"]["type"], "user");
    assert_eq!(entry["source"]["admin"], "alice");

    // The same base again is stale now: 409 with the current revision, nothing saved.
    let p = problem(
        gw.patch("/projects/demo/patterns/retry")
            .json(&json!({ "base_revision": base, "description": "Mine." }))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "revision_conflict",
    )
    .await;
    assert_eq!(p["current_revision"], base + 1);
    let list = json_ok(
        gw.get("/projects/demo/patterns").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(list["custom"][0]["description"], "Retries with backoff.");
    assert_eq!(list["revision"], base + 1);

    // Refusals.
    let now = base + 1;
    problem(
        gw.patch("/projects/demo/patterns/nope")
            .json(&json!({ "base_revision": now, "description": "x" }))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_pattern",
    )
    .await;
    problem(
        gw.patch("/projects/nope/patterns/retry")
            .json(&json!({ "base_revision": now, "description": "x" }))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_project",
    )
    .await;
    for body in [
        json!({ "description": "x" }),
        json!({ "base_revision": "one", "description": "x" }),
        json!({ "base_revision": now, "description": "x", "title": "other" }),
    ] {
        problem(
            gw.patch("/projects/demo/patterns/retry")
                .json(&body)
                .send()
                .await
                .unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        )
        .await;
    }
    let r = gw
        .http
        .patch(gw.url("/projects/demo/patterns/retry"))
        .json(&json!({ "base_revision": now, "description": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let list = json_ok(
        gw.get("/projects/demo/patterns").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(list["revision"], now, "nothing refused was saved");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_memory_the_chunk_listing_says_so() {
    let gw = Gw::start().await;
    json_ok(
        gw.post("/projects/demo/patterns")
            .json(&json!({ "name": "retry" }))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    json_ok(
        gw.post("/projects/demo/patterns/retry/examples")
            .json(&json!({ "url": "/nowhere", "reference_tag": "retry-a" }))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    problem(
        gw.get("/projects/demo/patterns/retry/chunks")
            .send()
            .await
            .unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "memory_off",
    )
    .await;
    // An unknown pattern is still 404 without memory.
    problem(
        gw.get("/projects/demo/patterns/nope/chunks")
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_pattern",
    )
    .await;
    gw.stop().await;
}
