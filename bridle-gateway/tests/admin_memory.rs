//! The memory resource over real HTTP: session memories listed with a cursor, searched and
//! purged by filter; indexed pattern examples searched and purged by tag; every purge in the
//! audit log; the failure paths (agents' tokens, a purge without a project, unknown and invalid
//! tags, bad queries, a gateway without memory).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;

use admin_support::gateway::Gw;
use admin_support::{json_ok, problem};
use bridle_memory::{
    ConstantEmbedder, EmbeddedStore, ExampleRepo, MemoryService, NewMemory, NoProgress,
    PatternIndexConfig,
};
use reqwest::StatusCode;
use serde_json::json;

fn service() -> MemoryService {
    MemoryService::with(
        Arc::new(EmbeddedStore::open_in_memory().unwrap()),
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    )
}

async fn remember(m: &MemoryService, project: &str, agent: &str, text: &str) {
    m.session
        .remember(NewMemory {
            kind: "decision".into(),
            text: text.into(),
            project: project.into(),
            agent: Some(agent.into()),
            session: Some("s-1".into()),
            tags: vec!["db".into()],
        })
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_and_pattern_examples_are_browsed_searched_and_purged() {
    let memory = service();
    remember(&memory, "demo", "claude", "We use SQLite for the queue.").await;
    remember(&memory, "demo", "claude", "Retries back off exponentially.").await;
    remember(
        &memory,
        "other",
        "codex",
        "The other project uses Postgres.",
    )
    .await;
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("retry.rs"),
        "/// Retries with exponential backoff.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
    )
    .unwrap();
    let report = memory
        .patterns
        .index(
            &ExampleRepo {
                url: repo.path().display().to_string(),
                reference_tag: "retry-example".into(),
                arch_tag: "retry".into(),
            },
            &NoProgress,
        )
        .await
        .unwrap();
    assert!(report.chunks > 0);
    let m = memory.clone();
    let gw = Gw::start_with(move |b| b.memory(m)).await;

    // Listed with a cursor.
    let page = json_ok(
        gw.get("/memory/sessions?project=demo&limit=1")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let cursor = page["next_cursor"].as_str().unwrap().to_string();
    let next = json_ok(
        gw.get(&format!(
            "/memory/sessions?project=demo&limit=1&cursor={cursor}"
        ))
        .send()
        .await
        .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(next["items"].as_array().unwrap().len(), 1);
    assert_ne!(next["items"][0]["id"], page["items"][0]["id"]);
    let all = json_ok(
        gw.get("/memory/sessions").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        all["items"].as_array().unwrap().len(),
        3,
        "an admin sees every project"
    );
    // Searched.
    let hits = json_ok(
        gw.get("/memory/sessions?q=queue&project=demo")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let hits = hits["items"].as_array().unwrap();
    assert_eq!(hits.len(), 2);
    assert!(
        hits.iter()
            .all(|h| h["project"] == "demo" && h["score"].is_number())
    );

    // Purged by filter; the other project keeps its memory.
    let purged = json_ok(
        gw.post("/memory/sessions/purge")
            .json(&json!({"project": "demo", "agent": "claude"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(purged["removed"], 2);
    let left = json_ok(
        gw.get("/memory/sessions").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(left["items"].as_array().unwrap().len(), 1);
    assert_eq!(left["items"][0]["project"], "other");

    // Pattern examples: searched, purged by tag.
    let found = json_ok(
        gw.get("/memory/patterns?q=retry%20backoff&arch_tag=retry")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let found = found["items"].as_array().unwrap();
    assert!(!found.is_empty());
    assert_eq!(found[0]["reference_tag"], "retry-example");
    let purged = json_ok(
        gw.post("/memory/patterns/retry-example/purge")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(purged["removed"].as_u64().unwrap() as usize, report.chunks);
    problem(
        gw.post("/memory/patterns/retry-example/purge")
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_tag",
    )
    .await;

    // Both purges are in the audit log, by alice.
    let audit = json_ok(
        gw.get("/audit?kind=memory_purge").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let entries = audit["items"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert!(entries.iter().all(|e| e["source"]["admin"] == "alice"));
    assert_eq!(entries[0]["project"], "demo");
    assert_eq!(entries[0]["agent"], "claude");

    // Failure paths.
    for (_, token) in gw.all_agent_tokens() {
        for req in [
            gw.http.get(gw.url("/memory/sessions")).bearer_auth(&token),
            gw.http
                .post(gw.url("/memory/sessions/purge"))
                .bearer_auth(&token)
                .json(&json!({"project": "other"})),
        ] {
            problem(
                req.send().await.unwrap(),
                StatusCode::UNAUTHORIZED,
                "unauthorized",
            )
            .await;
        }
    }
    for body in [
        json!({}),
        json!({"project": ""}),
        json!({"project": 3}),
        json!({"project": "other", "x": 1}),
    ] {
        problem(
            gw.post("/memory/sessions/purge")
                .json(&body)
                .send()
                .await
                .unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        )
        .await;
    }
    problem(
        gw.post("/memory/sessions/purge")
            .header("content-type", "application/json")
            .body("{\"project\"")
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "malformed_json",
    )
    .await;
    problem(
        gw.post("/memory/sessions/purge")
            .header("content-type", "application/json")
            .body(format!("{{\"project\": \"{}\"}}", "p".repeat(2 << 20)))
            .send()
            .await
            .unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    )
    .await;
    problem(
        gw.post(&format!("/memory/patterns/{}/purge", "t".repeat(201)))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request",
    )
    .await;
    for q in [
        "/memory/patterns",
        "/memory/patterns?q=x&limit=0",
        "/memory/sessions?limit=0",
        "/memory/sessions?cursor=abc",
        "/memory/sessions?q=x&limit=101",
    ] {
        problem(
            gw.get(q).send().await.unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_query",
        )
        .await;
    }
    // The other project's memory is untouched by all of it.
    let left = json_ok(
        gw.get("/memory/sessions").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(left["items"].as_array().unwrap().len(), 1);
    gw.stop().await;
}

/// After the embedder changed, a search of session memories answers 409 `model_mismatch`
/// naming the remedy; `POST /memory/sessions/reembed` embeds them again (once: a second run
/// changes nothing), is recorded as `memory_reembed`, and the search works again. Agents may
/// not call it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_memories_of_another_model_are_embedded_again_on_request() {
    let store: Arc<EmbeddedStore> = Arc::new(EmbeddedStore::open_in_memory().unwrap());
    let old = MemoryService::with(
        store.clone(),
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    );
    remember(&old, "demo", "claude", "We use SQLite for the queue.").await;
    remember(&old, "demo", "claude", "Retries back off exponentially.").await;
    let current = MemoryService::with(
        store,
        Arc::new(ConstantEmbedder::new(8).named("other-model")),
        PatternIndexConfig::default(),
    );
    let gw = Gw::start_with(move |b| b.memory(current)).await;

    let refused = problem(
        gw.get("/memory/sessions?project=demo&q=queue")
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "model_mismatch",
    )
    .await;
    let detail = refused["detail"].as_str().unwrap();
    assert!(
        detail.contains("`constant`") && detail.contains("/memory/sessions/reembed"),
        "{detail}"
    );

    gw.refuses_agents(reqwest::Method::POST, "/memory/sessions/reembed")
        .await;
    let done = json_ok(
        gw.post("/memory/sessions/reembed").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(done, json!({"reembedded": 2, "unchanged": 0}));
    let again = json_ok(
        gw.post("/memory/sessions/reembed").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(again, json!({"reembedded": 0, "unchanged": 2}));

    let found = json_ok(
        gw.get("/memory/sessions?project=demo&q=queue")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(found["items"].as_array().unwrap().len(), 2);

    let audit = json_ok(
        gw.get("/audit?kind=memory_reembed").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let entries = audit["items"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert!(entries.iter().all(|e| e["source"]["admin"] == "alice"));
    assert!(
        entries
            .iter()
            .any(|e| e["detail"].as_str().unwrap().contains("embedded 2 session")),
        "{entries:?}"
    );
    gw.stop().await;
}

/// A model of the same dimension whose second request fails (a server gone for a moment).
#[derive(Debug, Default)]
struct FlakyModel(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl bridle_memory::Embedder for FlakyModel {
    fn dimension(&self) -> usize {
        8
    }
    fn model(&self) -> &str {
        "flaky-model"
    }
    async fn embed(&self, texts: &[String]) -> bridle_memory::Result<Vec<Vec<f32>>> {
        if self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            return Err(bridle_memory::MemoryError::EmbedderUnavailable {
                endpoint: "http://127.0.0.1:1/v1".into(),
                reason: "connection refused".into(),
            });
        }
        let mut v = vec![0.0; 8];
        v[2] = 1.0;
        Ok(vec![v; texts.len()])
    }
}

/// A re-embedding that fails part-way keeps what it did, answers the error, and is audited with
/// the error and what it did before it; running it again finishes the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reembed_that_fails_part_way_is_audited_and_resumes() {
    let store: Arc<EmbeddedStore> = Arc::new(EmbeddedStore::open_in_memory().unwrap());
    let old = MemoryService::with(
        store.clone(),
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    );
    // More than one batch (32 memories a request).
    for i in 0..40 {
        remember(&old, "demo", "claude", &format!("decision number {i}")).await;
    }
    let current = MemoryService::with(
        store,
        Arc::new(FlakyModel::default()),
        PatternIndexConfig::default(),
    );
    let gw = Gw::start_with(move |b| b.memory(current)).await;
    problem(
        gw.post("/memory/sessions/reembed").send().await.unwrap(),
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
    )
    .await;
    let audit = json_ok(
        gw.get("/audit?kind=memory_reembed").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let entries = audit["items"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["outcome"]["status"], "error");
    assert_eq!(entries[0]["outcome"]["code"], "embedder_unavailable");
    assert!(
        entries[0]["detail"].as_str().unwrap().contains(
            "embedded 32 session memories again with the configured model before it failed"
        ),
        "{entries:?}"
    );
    let done = json_ok(
        gw.post("/memory/sessions/reembed").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(done, json!({"reembedded": 8, "unchanged": 32}));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_memory_the_resource_says_so() {
    let gw = Gw::start().await;
    problem(
        gw.get("/memory/sessions").send().await.unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "memory_off",
    )
    .await;
    problem(
        gw.post("/memory/patterns/x/purge").send().await.unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "memory_off",
    )
    .await;
    problem(
        gw.post("/memory/sessions/reembed").send().await.unwrap(),
        StatusCode::SERVICE_UNAVAILABLE,
        "memory_off",
    )
    .await;
    gw.stop().await;
}
