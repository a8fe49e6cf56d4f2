//! Memory opened for a server while its embedding server is away
//! ([`MemoryService::open_lazily_with`]): it opens, its tools answer the retryable
//! `embedder_unavailable`, and once the server answers the same calls succeed. The stand-in
//! speaks the OpenAI-compatible `POST /v1/embeddings` and answers 503 (or 401) until told
//! otherwise; its request counter says when a probe went out (no test waits on a clock).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use bridle_memory::tools::{MemoryTools, register};
use bridle_memory::{
    EmbedderConfig, ExampleRepo, HttpEmbedderConfig, MemoryConfig, MemoryService, NoProgress,
    PatternIndexConfig, StoreConfig,
};
use kberg_core::{CallOptions, Caller, Grants, Principal, ToolRegistry};
use serde_json::{Value, json};
use tokio::net::TcpListener;

const DIM: usize = 8;

/// The stand-in: answers `status` (a 5xx, a 4xx) until `up`, then embeddings.
#[derive(Clone, Default)]
struct StandIn {
    up: Arc<AtomicBool>,
    status: Arc<AtomicU16>,
    calls: Arc<AtomicUsize>,
}

async fn embeddings(
    State(s): State<StandIn>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    s.calls.fetch_add(1, Ordering::SeqCst);
    if !s.up.load(Ordering::SeqCst) {
        let status = StatusCode::from_u16(s.status.load(Ordering::SeqCst))
            .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        return (
            status,
            Json(json!({"error": {"message": "model loading", "type": "server_error"}})),
        );
    }
    let n = body["input"].as_array().map_or(1, Vec::len);
    let data: Vec<Value> = (0..n)
        .map(|i| {
            let mut v = vec![0.0f32; DIM];
            v[i % DIM] = 1.0;
            json!({"object": "embedding", "index": i, "embedding": v})
        })
        .collect();
    (
        StatusCode::OK,
        Json(json!({"object": "list", "data": data, "model": "m"})),
    )
}

/// The stand-in on a free port, answering `status` until `up`; aborted when dropped.
struct Server {
    url: String,
    state: StandIn,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn stand_in(status: u16) -> Server {
    let state = StandIn::default();
    state.status.store(status, Ordering::SeqCst);
    let router = axum::Router::new()
        .route("/v1/embeddings", post(embeddings))
        .with_state(state.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Server { url, state, task }
}

fn config(dir: &std::path::Path, base_url: &str) -> MemoryConfig {
    MemoryConfig {
        store: StoreConfig::Embedded {
            path: dir.join("memory.db"),
        },
        embedder: EmbedderConfig::OpenAi(HttpEmbedderConfig::new(base_url, "m")),
        patterns: PatternIndexConfig::default(),
        max_memories_per_project: bridle_memory::DEFAULT_MAX_PER_PROJECT,
    }
}

fn registry(memory: &MemoryService) -> ToolRegistry {
    let registry = ToolRegistry::new();
    let tools: MemoryTools = memory.tools();
    register(&registry, tools).expect("register");
    registry
}

async fn call(registry: &ToolRegistry, tool: &str, args: Value) -> kberg_core::ToolOutput {
    let caller = Caller::new(
        Principal::new("agent").with_grants(Grants::of(["memory.write", "memory.index"])),
    );
    registry
        .call(&caller, tool, args, CallOptions::default())
        .await
        .expect("the gate lets it through")
}

/// Checks `out` is the retryable `embedder_unavailable` refusal.
fn unavailable(out: &kberg_core::ToolOutput) {
    assert!(out.is_error, "{}", out.all_text());
    let s = out.structured.as_ref().expect("structured content");
    assert_eq!(s["code"], "embedder_unavailable", "{s}");
    assert_eq!(s["retryable"], true, "{s}");
}

fn remember_args() -> Value {
    json!({"kind": "decision", "text": "Alpha stores its state in SQLite.", "project": "alpha"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_opens_while_the_embedder_answers_503_and_works_once_it_answers() {
    let server = stand_in(503).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &server.url);

    // The strict form (command lines) still fails at once.
    let strict = MemoryService::open(&config).await.expect_err("503 at open");
    assert_eq!(strict.code(), "embedder_unavailable", "{strict}");
    assert_eq!(server.state.calls.load(Ordering::SeqCst), 1);

    let memory = MemoryService::open_lazily_with(&config, Duration::ZERO)
        .await
        .expect("memory opens without its embedder");
    assert_eq!(server.state.calls.load(Ordering::SeqCst), 2);
    let tools = registry(&memory);

    unavailable(&call(&tools, "remember", remember_args()).await);
    assert_eq!(server.state.calls.load(Ordering::SeqCst), 3, "probed again");

    server.state.up.store(true, Ordering::SeqCst);
    let out = call(&tools, "remember", remember_args()).await;
    assert!(!out.is_error, "{}", out.all_text());
    let out = call(
        &tools,
        "recall",
        json!({"query": "where is alpha's state", "project": "alpha"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.all_text());
    assert!(out.all_text().contains("SQLite"), "{}", out.all_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recall_before_the_embedder_answers_is_retryable_then_succeeds() {
    let server = stand_in(503).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), &server.url);
    let memory = MemoryService::open_lazily_with(&config, Duration::ZERO)
        .await
        .expect("memory opens without its embedder");
    // Something to recall, so the recall embeds its query.
    server.state.up.store(true, Ordering::SeqCst);
    memory
        .session
        .remember(bridle_memory::NewMemory {
            kind: "decision".into(),
            text: "Alpha stores its state in SQLite.".into(),
            project: "alpha".into(),
            ..Default::default()
        })
        .await
        .expect("remembered once connected");
    let tools = registry(&memory);
    let out = call(
        &tools,
        "recall",
        json!({"query": "where is alpha's state", "project": "alpha"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.all_text());

    // A fresh service over the same store, its embedder away again.
    server.state.up.store(false, Ordering::SeqCst);
    let memory = MemoryService::open_lazily_with(&config, Duration::ZERO)
        .await
        .expect("memory opens without its embedder");
    let tools = registry(&memory);
    let args = json!({"query": "where is alpha's state", "project": "alpha"});
    unavailable(&call(&tools, "recall", args.clone()).await);
    server.state.up.store(true, Ordering::SeqCst);
    let out = call(&tools, "recall", args).await;
    assert!(!out.is_error, "{}", out.all_text());
    assert!(out.all_text().contains("SQLite"), "{}", out.all_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedder_away_is_probed_at_most_once_per_backoff() {
    let server = stand_in(503).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let memory = MemoryService::open_lazily_with(
        &config(dir.path(), &server.url),
        Duration::from_secs(3600),
    )
    .await
    .expect("memory opens without its embedder");
    assert_eq!(server.state.calls.load(Ordering::SeqCst), 1);
    let tools = registry(&memory);
    for _ in 0..3 {
        unavailable(&call(&tools, "remember", remember_args()).await);
    }
    assert_eq!(
        server.state.calls.load(Ordering::SeqCst),
        1,
        "no probe within the backoff"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_opens_memory_and_indexing_waits_for_the_embedder_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let memory = MemoryService::open_lazily_with(
        &config(dir.path(), &kberg_testkit::net::closed_port_url()),
        Duration::ZERO,
    )
    .await
    .expect("memory opens without its embedder");
    let repo = dir.path().join("repo");
    common::write_tree(&repo, &[("src/lib.rs", "pub fn answer() -> u32 { 42 }\n")]);
    let err = memory
        .patterns
        .index(
            &ExampleRepo {
                url: repo.display().to_string(),
                reference_tag: "demo".into(),
                arch_tag: "rust".into(),
            },
            &NoProgress,
        )
        .await
        .expect_err("no embedder yet");
    // Not a collection of dimension 0 refused as bad input: the embedder is away.
    assert_eq!(err.code(), "embedder_unavailable", "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexing_before_the_embedder_connected_takes_its_dimension_then() {
    let server = stand_in(503).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let memory = MemoryService::open_lazily_with(&config(dir.path(), &server.url), Duration::ZERO)
        .await
        .expect("memory opens without its embedder");
    server.state.up.store(true, Ordering::SeqCst);
    let repo = dir.path().join("repo");
    common::write_tree(&repo, &[("src/lib.rs", "pub fn answer() -> u32 { 42 }\n")]);
    let report = memory
        .patterns
        .index(
            &ExampleRepo {
                url: repo.display().to_string(),
                reference_tag: "demo".into(),
                arch_tag: "rust".into(),
            },
            &NoProgress,
        )
        .await
        .expect("indexed once the embedder answers");
    assert!(report.chunks > 0, "{report:?}");
    let hits = memory
        .patterns
        .search("answer", Some("rust"), 3)
        .await
        .expect("search");
    assert!(!hits.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lasting_refusal_at_open_still_fails_the_start() {
    let server = stand_in(401).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let err = MemoryService::open_lazily_with(&config(dir.path(), &server.url), Duration::ZERO)
        .await
        .expect_err("a 401 does not pass by waiting");
    assert!(err.to_string().contains("401"), "{err}");
}
