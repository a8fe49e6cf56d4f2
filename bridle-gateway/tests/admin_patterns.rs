//! Patterns and example repositories over real HTTP: a pattern and an example added (each a
//! revision, a history entry and a `user` audit entry), an index triggered with its progress
//! read from the Server-Sent Events stream as a client reads it, a second trigger refused with
//! 409 while the first runs (the embedder holds it on a gate, released by the test), and
//! `last_indexed` written back through the normal change path; a repository that can no longer
//! be read ends with an `error` event and leaves the previous index and `last_indexed` intact,
//! as does one grown past the byte limit `memory.indexing` in `bridle.yaml` sets;
//! removal purges the chunks; the indexing gauges on `/metrics` follow the run. Index runs a
//! browser can follow: started with 202 and a `Location`, followed over GET with every event
//! replayed from the start (and after `Last-Event-ID`), and shared with the MCP tool
//! `refresh_pattern_example` (a run the tool started is listed, followed and holds the tag
//! against the API, and the tool is refused while the API's run holds it). Every failure path: no or wrong credential, agents' tokens, unknown
//! projects, patterns and examples, duplicates, bad names, wrong types, malformed JSON, an
//! oversize body, a gateway without memory.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;
#[path = "common/audit_fault.rs"]
mod audit_fault;

use std::sync::Arc;

use admin_support::gateway::Gw;
use admin_support::{Events, json_ok, problem};
use async_trait::async_trait;
use bridle_memory::{ConstantEmbedder, EmbeddedStore, Embedder, MemoryService, PatternIndexConfig};
use kberg_testkit::eventually_async;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// A constant embedder that answers only once the test opens its gate.
struct GatedEmbedder {
    inner: ConstantEmbedder,
    gate: Arc<Semaphore>,
}

#[async_trait]
impl Embedder for GatedEmbedder {
    fn dimension(&self) -> usize {
        self.inner.dimension()
    }
    fn model(&self) -> &str {
        self.inner.model()
    }
    async fn embed(&self, texts: &[String]) -> bridle_memory::Result<Vec<Vec<f32>>> {
        let _open = self.gate.acquire().await.unwrap();
        self.inner.embed(texts).await
    }
}

fn service(gate: Arc<Semaphore>) -> MemoryService {
    service_with(gate, PatternIndexConfig::default())
}

fn service_with(gate: Arc<Semaphore>, patterns: PatternIndexConfig) -> MemoryService {
    MemoryService::with(
        Arc::new(EmbeddedStore::open_in_memory().unwrap()),
        Arc::new(GatedEmbedder {
            inner: ConstantEmbedder::new(8),
            gate,
        }),
        patterns,
    )
}

fn example_repo() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("retry.rs"),
        "/// Retries with exponential backoff.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
    )
    .unwrap();
    repo
}

/// The gateway's Prometheus page (`/metrics` beside its MCP endpoint).
/// Adds the `retry` pattern to the `demo` project and the example repository at `repo` to it
/// (reference tag `retry-example`); returns the document's revision after the two changes.
async fn add_retry_example(gw: &Gw, repo: &tempfile::TempDir) -> u64 {
    let mut revision = 0;
    for (path, body) in [
        (
            "/projects/demo/patterns",
            json!({"name": "retry", "description": "Retries with backoff."}),
        ),
        (
            "/projects/demo/patterns/retry/examples",
            json!({"url": repo.path().display().to_string(), "reference_tag": "retry-example"}),
        ),
    ] {
        let added = json_ok(
            gw.post(path).json(&body).send().await.unwrap(),
            StatusCode::CREATED,
        )
        .await;
        revision = added["revision"].as_u64().unwrap();
    }
    revision
}

async fn metrics(gw: &Gw) -> String {
    let url = gw.mcp.trim_end_matches("/mcp").to_string() + "/metrics";
    let r = gw.http.get(url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.text().await.unwrap()
}

async fn document(gw: &Gw) -> Value {
    json_ok(
        gw.get("/projects/demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await
}

const INDEX: &str = "/projects/demo/patterns/retry/examples/retry-example/index";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_are_added_indexed_with_streamed_progress_written_back_and_removed() {
    let gate = Arc::new(Semaphore::new(0));
    let gw = Gw::start_with(|b| b.memory(service(Arc::clone(&gate)))).await;
    let repo = example_repo();
    let r0 = document(&gw).await["revision"].as_u64().unwrap();

    assert_eq!(
        add_retry_example(&gw, &repo).await,
        r0 + 2,
        "one revision each"
    );
    let listed = json_ok(
        gw.get("/projects/demo/patterns").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let ex = &listed["custom"][0]["example_repos"][0];
    assert_eq!(ex["arch_tag"], "retry");
    assert_eq!(ex["indexing"], false);
    assert!(ex.get("last_indexed").is_none());

    // Triggered: progress streams; the embedder holds the run on its gate.
    let resp = gw.post(INDEX).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut events = Events::new(resp);
    let started = events.until("started").await;
    assert_eq!(started["reference_tag"], "retry-example");
    loop {
        let p = events.until("progress").await;
        if p["step"] == "chunked" {
            assert!(p["total"].as_f64().unwrap() >= 1.0, "{p}");
            break;
        }
    }
    // While it runs: it says so, a second trigger and a removal are refused.
    let listed = json_ok(
        gw.get("/projects/demo/patterns").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(listed["custom"][0]["example_repos"][0]["indexing"], true);
    // The indexing gauges follow a run started through the API.
    let page = metrics(&gw).await;
    assert!(
        page.contains(r#"bridle_indexing_active{repo="retry-example"} 1"#),
        "{page}"
    );
    problem(
        gw.post(INDEX).send().await.unwrap(),
        StatusCode::CONFLICT,
        "index_running",
    )
    .await;
    problem(
        gw.delete("/projects/demo/patterns/retry/examples/retry-example")
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "index_running",
    )
    .await;

    gate.add_permits(1_000);
    let done = events.until("done").await;
    assert!(done["report"]["chunks"].as_u64().unwrap() >= 1, "{done}");
    assert_eq!(done["revision"], r0 + 3);
    let page = metrics(&gw).await;
    assert!(
        page.contains(r#"bridle_indexing_active{repo="retry-example"} 0"#),
        "{page}"
    );
    let chunks = done["report"]["chunks"].as_u64().unwrap();
    assert!(
        page.contains(&format!(
            r#"bridle_indexing_chunks_done{{repo="retry-example"}} {chunks}"#
        )),
        "{page}"
    );
    let last_indexed = done["report"]["last_indexed"].as_str().unwrap().to_string();
    let doc = document(&gw).await;
    assert_eq!(doc["revision"], r0 + 3);
    assert_eq!(
        doc["document"]["patterns"]["custom"][0]["example_repos"][0]["last_indexed"],
        last_indexed.as_str()
    );
    assert!(gw.pattern_hits("retry%20backoff").await >= 1);
    let history = json_ok(
        gw.get("/projects/demo/history?actor=admin:alice@api")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let summaries: Vec<&str> = history["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["summary"].as_str().unwrap())
        .collect();
    assert_eq!(summaries.len(), 3, "{history}");
    assert!(summaries[2].contains("retry-example"), "{summaries:?}");

    // The repository can no longer be read: an error event, the previous index kept.
    drop(repo);
    let mut events = Events::new(gw.post(INDEX).send().await.unwrap());
    let failed = events.until("error").await;
    assert!(!failed["code"].as_str().unwrap().is_empty(), "{failed}");
    let doc = document(&gw).await;
    assert_eq!(doc["revision"], r0 + 3, "nothing written back");
    assert_eq!(
        doc["document"]["patterns"]["custom"][0]["example_repos"][0]["last_indexed"],
        last_indexed.as_str()
    );
    assert!(
        gw.pattern_hits("retry%20backoff").await >= 1,
        "the previous index is intact"
    );

    // The audit log: each change as alice through the API; the failed run with its code.
    let audit = json_ok(
        gw.get("/audit?kind=pattern_change&source=user")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let items = audit["items"].as_array().unwrap();
    assert_eq!(items.len(), 4, "{audit}");
    for e in items {
        assert_eq!(e["source"]["admin"], "alice");
        assert_eq!(e["project"], "demo");
    }
    assert_eq!(items[2]["outcome"]["status"], "ok", "{}", items[2]);
    assert_eq!(items[3]["outcome"]["status"], "error", "{}", items[3]);

    // Removed: the example (its chunks purged), then the pattern.
    let removed = json_ok(
        gw.delete("/projects/demo/patterns/retry/examples/retry-example")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(removed["chunks_removed"].as_u64().unwrap() >= 1);
    assert_eq!(gw.pattern_hits("retry%20backoff").await, 0);
    json_ok(
        gw.delete("/projects/demo/patterns/retry")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let listed = json_ok(
        gw.get("/projects/demo/patterns").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(listed["custom"], json!([]));
    gw.stop().await;
}

/// A gateway with memory whose demo project's `retry` pattern lists `retry-example`, indexed;
/// and the example's repository.
async fn indexed_retry_example() -> (Gw, tempfile::TempDir) {
    let gate = Arc::new(Semaphore::new(1_000));
    let gw = Gw::start_with(|b| b.memory(service(gate))).await;
    let repo = example_repo();
    add_retry_example(&gw, &repo).await;
    let mut events = Events::new(gw.post(INDEX).send().await.unwrap());
    events.until("done").await;
    assert!(gw.pattern_hits("retry%20backoff").await >= 1);
    (gw, repo)
}

/// A project `name` with the demo project's document (its patterns and examples too), broken
/// by hand afterwards when `broken`.
fn copy_demo(gw: &Gw, name: &str, broken: bool) {
    let demo = gw.ctx.store.load("demo").unwrap().document;
    gw.ctx.store.create(name, &demo, "test").unwrap();
    if broken {
        let path = gw.ctx.store.project_path(name).unwrap();
        std::fs::write(path, "schema_version: 2\nproject: [unclosed\n").unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_whose_tag_another_project_lists_keeps_the_chunks_without_a_warning() {
    let (gw, _repo) = indexed_retry_example().await;
    // `other` does not load and comes first; `zeta` lists the tag, which settles it.
    copy_demo(&gw, "other", true);
    copy_demo(&gw, "zeta", false);
    let removed = json_ok(
        gw.delete("/projects/demo/patterns/retry/examples/retry-example")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(removed["chunks_removed"], 0, "{removed}");
    assert!(removed.get("warning").is_none(), "{removed}");
    assert!(gw.pattern_hits("retry%20backoff").await >= 1, "kept");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_keeps_the_chunks_another_projects_broken_document_may_list() {
    let (gw, _repo) = indexed_retry_example().await;
    // Another project, broken by hand: whether it lists the tag cannot be read.
    copy_demo(&gw, "other", true);

    // The removal is made and answered as made; the chunks are kept.
    let removed = json_ok(
        gw.delete("/projects/demo/patterns/retry/examples/retry-example")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(removed["chunks_removed"], 0, "{removed}");
    let warning = removed["warning"].as_str().unwrap();
    assert!(
        warning.contains("`retry-example`") && warning.contains("project `other`"),
        "{warning}"
    );
    let doc = document(&gw).await;
    assert_eq!(doc["revision"], removed["revision"]);
    assert_eq!(
        doc["document"]["patterns"]["custom"][0]["example_repos"],
        json!([]),
        "{doc}"
    );
    assert!(gw.pattern_hits("retry%20backoff").await >= 1, "kept");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_patterns_resource_refuses_what_it_must_and_changes_nothing() {
    let gate = Arc::new(Semaphore::new(1_000));
    let gw = Gw::start_with(|b| b.memory(service(gate))).await;
    let repo = example_repo();
    json_ok(
        gw.post("/projects/demo/patterns")
            .json(&json!({"name": "retry"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    json_ok(
        gw.post("/projects/demo/patterns/retry/examples")
            .json(&json!({"url": repo.path().display().to_string(), "reference_tag": "retry-example"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let revision = document(&gw).await["revision"].clone();

    // No credential, a wrong one, every agent's token.
    let mut tokens = vec![None, Some("wrong".to_string())];
    tokens.extend(gw.all_agent_tokens().into_iter().map(|(_, t)| Some(t)));
    for t in tokens {
        for req in [
            gw.http.get(gw.url("/projects/demo/patterns")),
            gw.http
                .post(gw.url("/projects/demo/patterns"))
                .json(&json!({"name": "x"})),
            gw.http.post(gw.url(INDEX)),
            gw.http.post(gw.url(RUNS)),
            gw.http.get(gw.url("/index-runs/x")),
            gw.http.get(gw.url("/index-runs/x/events")),
            gw.http.delete(gw.url("/projects/demo/patterns/retry")),
        ] {
            let req = match &t {
                Some(t) => req.bearer_auth(t),
                None => req,
            };
            problem(
                req.send().await.unwrap(),
                StatusCode::UNAUTHORIZED,
                "unauthorized",
            )
            .await;
        }
    }

    // Unknown projects, patterns, examples.
    for (req, code) in [
        (gw.get("/projects/nope/patterns"), "unknown_project"),
        (
            gw.post("/projects/nope/patterns")
                .json(&json!({"name": "x"})),
            "unknown_project",
        ),
        (
            gw.post("/projects/demo/patterns/nope/examples")
                .json(&json!({"url": "/tmp", "reference_tag": "t"})),
            "unknown_pattern",
        ),
        (gw.delete("/projects/demo/patterns/nope"), "unknown_pattern"),
        (
            gw.delete("/projects/demo/patterns/retry/examples/nope"),
            "unknown_example",
        ),
        (
            gw.post("/projects/demo/patterns/retry/examples/nope/index"),
            "unknown_example",
        ),
        (
            gw.post("/projects/demo/patterns/nope/examples/retry-example/index"),
            "unknown_pattern",
        ),
    ] {
        problem(req.send().await.unwrap(), StatusCode::NOT_FOUND, code).await;
    }

    // Duplicates.
    problem(
        gw.post("/projects/demo/patterns")
            .json(&json!({"name": "retry"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "pattern_exists",
    )
    .await;
    problem(
        gw.post("/projects/demo/patterns/retry/examples")
            .json(&json!({"url": "/elsewhere", "reference_tag": "retry-example"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "example_exists",
    )
    .await;

    // Bad names, wrong types, unknown fields, an empty URL.
    for (p, bad, code) in [
        (
            "/projects/demo/patterns",
            json!({"name": "Bad Name"}),
            "invalid_name",
        ),
        (
            "/projects/demo/patterns/retry/examples",
            json!({"url": "/tmp", "reference_tag": "../x"}),
            "invalid_name",
        ),
        (
            "/projects/demo/patterns",
            json!({"name": 7}),
            "invalid_request",
        ),
        (
            "/projects/demo/patterns",
            json!({"title": "x"}),
            "invalid_request",
        ),
        (
            "/projects/demo/patterns/retry/examples",
            json!({"url": "  ", "reference_tag": "t"}),
            "invalid_request",
        ),
        (
            "/projects/demo/patterns/retry/examples",
            json!({"url": ["/tmp"], "reference_tag": "t"}),
            "invalid_request",
        ),
    ] {
        problem(
            gw.post(p).json(&bad).send().await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            code,
        )
        .await;
    }
    // Malformed JSON, not JSON, an oversize body.
    problem(
        gw.post("/projects/demo/patterns")
            .header("content-type", "application/json")
            .body("{\"name\": ")
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "malformed_json",
    )
    .await;
    problem(
        gw.post("/projects/demo/patterns")
            .header("content-type", "text/plain")
            .body("retry")
            .send()
            .await
            .unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    problem(
        gw.post("/projects/demo/patterns")
            .header("content-type", "application/json")
            .body(format!(
                "{{\"name\": \"x\", \"description\": \"{}\"}}",
                "x".repeat(2 << 20)
            ))
            .send()
            .await
            .unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    )
    .await;
    assert_eq!(document(&gw).await["revision"], revision, "nothing changed");
    gw.stop().await;

    // A gateway without memory: listing and editing work, indexing is 503.
    let gw = Gw::start().await;
    json_ok(
        gw.post("/projects/demo/patterns")
            .json(&json!({"name": "retry"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    for req in [gw.post(INDEX), gw.post(RUNS)] {
        problem(
            req.send().await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE,
            "memory_off",
        )
        .await;
    }
    gw.stop().await;
}

const RUNS: &str = "/projects/demo/patterns/retry/examples/retry-example/index-runs";

/// A whole SSE body (the stream ends with the run): each event's name, id and data.
async fn whole_stream(resp: reqwest::Response) -> Vec<(String, u64, Value)> {
    assert_eq!(resp.status(), StatusCode::OK);
    let body = tokio::time::timeout(std::time::Duration::from_secs(30), resp.text())
        .await
        .expect("the stream ends with its run")
        .unwrap();
    body.split("\n\n")
        .filter_map(|block| {
            let (mut name, mut id, mut data) = (None, None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = Some(v.trim().to_string());
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse::<u64>().ok();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                }
            }
            Some((name?, id?, serde_json::from_str(&data).unwrap()))
        })
        .collect()
}

async fn example_view(gw: &Gw) -> Value {
    let listed = json_ok(
        gw.get("/projects/demo/patterns").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    listed["custom"][0]["example_repos"][0].clone()
}

/// Lets claude re-index pattern examples in the demo project (`permissions.claude.memory`).
fn grant_index(gw: &Gw) {
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let base = doc.revision;
    doc.permissions.get_mut("claude").unwrap().memory.index = true;
    gw.ctx
        .store
        .save_edit("demo", &doc, base, "test", "claude may re-index")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_runs_are_started_followed_by_replay_and_shared_with_the_refresh_tool() {
    let gate = Arc::new(Semaphore::new(0));
    let gw = Gw::start_with(|b| b.memory(service(Arc::clone(&gate)))).await;
    let repo = example_repo();
    add_retry_example(&gw, &repo).await;
    grant_index(&gw);
    let claude =
        kberg_agent::McpSurface::connect_http_with_bearer(&gw.mcp, &gw.file_token("claude"))
            .await
            .unwrap();
    let claude = Arc::new(claude);
    let refresh = |c: Arc<kberg_agent::McpSurface>| async move {
        use kberg_agent::ToolSurface;
        c.call(
            "refresh_pattern_example",
            json!({"reference_tag": "retry-example"}),
            tokio_util::sync::CancellationToken::new(),
        )
        .await
    };

    // Started: 202, its id, a Location of its status, where its events are.
    let resp = gw.post(RUNS).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::ACCEPTED);
    let location = resp.headers()["location"].to_str().unwrap().to_string();
    let started = resp.json::<Value>().await.unwrap();
    let id = started["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/admin/api/v1/index-runs/{id}"));
    assert_eq!(started["status_url"], location.as_str());
    assert_eq!(started["events_url"], format!("{location}/events").as_str());
    assert_eq!(started["run"]["state"], "running");
    assert_eq!(started["run"]["origin"], "api");
    assert_eq!(started["run"]["actor"], "admin:alice@api");
    let status_path = location.trim_start_matches("/admin/api/v1");
    let status = json_ok(gw.get(status_path).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(status["reference_tag"], "retry-example");
    assert_eq!(status["project"], "demo");
    assert_eq!(example_view(&gw).await["run_id"], id.as_str());

    // While it runs: a second start (either way), the tool and a removal are refused.
    let refused = problem(
        gw.post(RUNS).send().await.unwrap(),
        StatusCode::CONFLICT,
        "index_running",
    )
    .await;
    assert!(
        refused["detail"].as_str().unwrap().contains(&id),
        "{refused}"
    );
    problem(
        gw.post(INDEX).send().await.unwrap(),
        StatusCode::CONFLICT,
        "index_running",
    )
    .await;
    let r = refresh(Arc::clone(&claude)).await.unwrap();
    assert!(r.is_error, "{r:?}");
    let s = r.structured.clone().unwrap();
    assert_eq!(s["code"], "index_running", "{r:?}");
    assert_eq!(s["run_id"], id.as_str());

    // A follower now: replay, then live, to the end.
    let mut live = Events::new(
        gw.get(&format!("{status_path}/events"))
            .send()
            .await
            .unwrap(),
    );
    assert_eq!(live.until("started").await["run_id"], id.as_str());
    loop {
        if live.until("progress").await["step"] == "chunked" {
            break;
        }
    }
    gate.add_permits(1_000);
    let done = live.until("done").await;
    assert!(done["report"]["chunks"].as_u64().unwrap() >= 1, "{done}");

    // A late follower gets every event from the start, in order, and the stream ends.
    let all = whole_stream(
        gw.get(&format!("{status_path}/events"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let names: Vec<&str> = all.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"started"), "{names:?}");
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    assert!(names.contains(&"progress"), "{names:?}");
    let ids: Vec<u64> = all.iter().map(|(_, i, _)| *i).collect();
    assert_eq!(ids, (0..ids.len() as u64).collect::<Vec<_>>());
    assert_eq!(all.last().unwrap().2, done);
    // Resumed after event 1.
    let resumed = whole_stream(
        gw.get(&format!("{status_path}/events"))
            .header("last-event-id", "1")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(resumed.first().unwrap().1, 2);
    assert_eq!(resumed.len(), all.len() - 2);
    let status = json_ok(gw.get(status_path).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(status["state"], "done");
    assert!(example_view(&gw).await.get("run_id").is_none());

    // A run the tool starts is one of the registry's: listed, refused to the API, followed.
    let all_permits = gate.acquire_many(1_000).await.unwrap();
    all_permits.forget();
    let tool_call = tokio::spawn(refresh(Arc::clone(&claude)));
    let tool_run = eventually_async("the tool's run to show", || async {
        example_view(&gw).await["run_id"]
            .as_str()
            .map(str::to_string)
    })
    .await;
    assert_ne!(tool_run, id);
    let status = json_ok(
        gw.get(&format!("/index-runs/{tool_run}"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(status["origin"], "tool");
    assert_eq!(status["actor"], "claude");
    for req in [gw.post(RUNS), gw.post(INDEX)] {
        problem(
            req.send().await.unwrap(),
            StatusCode::CONFLICT,
            "index_running",
        )
        .await;
    }
    problem(
        gw.delete("/projects/demo/patterns/retry/examples/retry-example")
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "index_running",
    )
    .await;
    let follow = gw
        .get(&format!("/index-runs/{tool_run}/events"))
        .send()
        .await
        .unwrap();
    gate.add_permits(1_000);
    let r = tool_call.await.unwrap().unwrap();
    assert!(!r.is_error, "{r:?}");
    let events = whole_stream(follow).await;
    assert_eq!(events.first().unwrap().0, "started");
    assert_eq!(events.last().unwrap().0, "done");
    assert!(example_view(&gw).await.get("run_id").is_none());
    // The tool's run wrote last_indexed back as before.
    assert!(example_view(&gw).await["last_indexed"].is_string());

    // Unknown runs, a bad Last-Event-ID.
    for p in [
        "/index-runs/nope",
        "/index-runs/nope/events",
        "/index-runs/a%20b",
    ] {
        problem(
            gw.get(p).send().await.unwrap(),
            StatusCode::NOT_FOUND,
            "unknown_index_run",
        )
        .await;
    }
    // Not a number, or the largest id (no event can follow it).
    for last in ["two", "18446744073709551615", "18446744073709551616", "-1"] {
        problem(
            gw.get(&format!("/index-runs/{id}/events"))
                .header("last-event-id", last)
                .send()
                .await
                .unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        )
        .await;
    }
    problem(
        gw.post("/projects/demo/patterns/retry/examples/nope/index-runs")
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_example",
    )
    .await;
    gw.stop().await;
}

/// An index whose write-back the audit log cannot record: the index and `last_indexed` stand,
/// and the stream ends with `error` `audit_unavailable` carrying the report and the revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_the_audit_log_cannot_record_ends_with_its_report_and_the_code() {
    let gate = Arc::new(Semaphore::new(1_000));
    let gw = Gw::start_with(|b| b.memory(service(gate))).await;
    let repo = example_repo();
    let before = add_retry_example(&gw, &repo).await;
    audit_fault::break_audit(gw.tmp.path());

    let resp = gw.post(INDEX).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "the stream starts");
    let ended = Events::new(resp).until("error").await;
    assert_eq!(ended["code"], "audit_unavailable", "{ended}");
    assert!(
        ended["detail"]
            .as_str()
            .unwrap()
            .starts_with("the index was made, but the audit log could not record it"),
        "{ended}"
    );
    assert_eq!(ended["revision"], before + 1, "{ended}");
    assert!(ended["report"]["chunks"].as_u64().unwrap() >= 1, "{ended}");
    let doc = document(&gw).await;
    assert_eq!(doc["revision"], before + 1);
    assert_eq!(
        doc["document"]["patterns"]["custom"][0]["example_repos"][0]["last_indexed"],
        ended["report"]["last_indexed"]
    );
    assert!(
        gw.pattern_hits("retry%20backoff").await >= 1,
        "the index is searchable"
    );
    gw.stop().await;
}

/// The limits in `memory.indexing` of `bridle.yaml` are the ones an index runs under: an example
/// that grows past the configured `max_total_bytes` fails with `index_too_large` naming the
/// limit, and its previous index stays searchable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_example_over_the_configured_byte_limit_fails_and_keeps_its_previous_index() {
    const MEMORY: &str = "memory:\n  embedder:\n    ollama: {url: \"http://127.0.0.1:9\", model: m}\n  indexing:\n    max_file_bytes: 1024\n    max_total_bytes: 2048\n";
    let gw = Gw::start_with_config(MEMORY, |b, dir, config| {
        let section = config
            .memory
            .as_ref()
            .expect("bridle.yaml has the memory section");
        let memory = section.to_config(dir, &config.secrets_path(dir)).unwrap();
        b.memory(service_with(
            Arc::new(Semaphore::new(1_000)),
            memory.patterns,
        ))
    })
    .await;
    let repo = example_repo();
    add_retry_example(&gw, &repo).await;
    let done = Events::new(gw.post(INDEX).send().await.unwrap())
        .until("done")
        .await;
    let last_indexed = done["report"]["last_indexed"].clone();
    let revision = document(&gw).await["revision"].clone();
    assert!(gw.pattern_hits("retry%20backoff").await >= 1);

    // Three files under the per-file limit, together past the total.
    for n in 0..3 {
        let body: String = (0..30)
            .map(|i| format!("pub fn step_{n}_{i}() -> u32 {{ {i} }}\n"))
            .collect();
        assert!(body.len() < 1024 && body.len() > 700, "{}", body.len());
        std::fs::write(repo.path().join(format!("steps_{n}.rs")), body).unwrap();
    }
    let failed = Events::new(gw.post(INDEX).send().await.unwrap())
        .until("error")
        .await;
    assert_eq!(failed["code"], "index_too_large", "{failed}");
    assert!(
        failed["detail"]
            .as_str()
            .unwrap()
            .contains("more than 2048 bytes"),
        "{failed}"
    );
    assert!(
        failed["detail"]
            .as_str()
            .unwrap()
            .contains("`memory.indexing.max_total_bytes` in bridle.yaml"),
        "the error names the key to raise: {failed}"
    );
    let doc = document(&gw).await;
    assert_eq!(doc["revision"], revision, "nothing written back");
    assert_eq!(
        doc["document"]["patterns"]["custom"][0]["example_repos"][0]["last_indexed"],
        last_indexed
    );
    assert!(
        gw.pattern_hits("retry%20backoff").await >= 1,
        "the previous index is searchable"
    );
    gw.stop().await;
}
