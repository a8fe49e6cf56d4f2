//! The admin API over real HTTP on 127.0.0.1: authentication (admins only, never agents),
//! problem details for every failure, and every resource's success and failure paths against
//! a real data directory and SQLite file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::GatewayContext;
use bridle_gateway::admin::{AdminServer, AdminState, AdminTokens};
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir, read_secret};
use bridle_rules::{ChangeRequest, Origin, Severity};
use reqwest::StatusCode;
use serde_json::{Value, json};

const ALICE: &str = "alice-admin-token-0123456789";
const BOB: &str = "bob-admin-token-9876543210";

/// A running admin API over a fresh data directory with the demo project.
struct Api {
    tmp: tempfile::TempDir,
    ctx: Arc<GatewayContext>,
    base: String,
    http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Api {
    async fn start() -> Self {
        Self::start_with(|s| s).await
    }

    async fn start_with(configure: impl FnOnce(AdminState) -> AdminState) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir(tmp.path()).unwrap();
        let config = GatewayConfig::load(tmp.path()).unwrap();
        let ctx = GatewayContext::open(tmp.path(), config).unwrap();
        ctx.store.create("demo", &demo_document(), "test").unwrap();
        let mut admins = AdminTokens::new().unwrap();
        admins.insert("alice", ALICE).unwrap();
        admins.insert("bob", BOB).unwrap();
        let state = configure(AdminState::new(Arc::clone(&ctx), Arc::new(admins)));
        let server = AdminServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), state)
            .await
            .unwrap();
        let base = server.url();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self {
            tmp,
            ctx,
            base,
            http: reqwest::Client::new(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(ALICE)
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(self.url(path)).bearer_auth(ALICE)
    }

    fn put(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.put(self.url(path)).bearer_auth(ALICE)
    }

    /// Every configured agent's bearer token, from the data directory.
    fn agent_tokens(&self) -> Vec<(String, String)> {
        let secrets = self.ctx.config.secrets_path(self.tmp.path());
        self.ctx
            .config
            .agents
            .iter()
            .map(|(name, a)| {
                (
                    name.clone(),
                    read_secret(&secrets, &a.token_secret).unwrap(),
                )
            })
            .collect()
    }

    fn propose_guardrail(&self, id: &str) -> u64 {
        self.ctx
            .store
            .propose(
                "demo",
                &Origin::agent("claude", Some("sess-1".into())),
                &ChangeRequest::Guardrail {
                    id: id.into(),
                    statement: format!("Statement for {id}."),
                    severity: Severity::HardInstruction,
                    applies_to: vec!["all_agents".into()],
                },
                None,
            )
            .unwrap()
            .id
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("the server stops")
                .unwrap();
        }
    }
}

async fn json_ok(resp: reqwest::Response, status: StatusCode) -> Value {
    assert_eq!(resp.status(), status, "unexpected status");
    resp.json().await.unwrap()
}

/// Checks the problem-details shape and returns the body.
async fn problem(resp: reqwest::Response, status: StatusCode, code: &str) -> Value {
    let got = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(got, status, "status of {body}");
    assert_eq!(content_type, "application/problem+json", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    assert_eq!(body["type"], format!("urn:bridle:problem:{code}"));
    assert!(body["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(body["detail"].as_str().is_some_and(|t| !t.is_empty()));
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_admins_get_in_and_agents_never_do() {
    let api = Api::start().await;
    // No credential.
    let resp = api.http.get(api.url("/projects")).send().await.unwrap();
    let www = resp.headers().get("www-authenticate").cloned();
    problem(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert!(www.unwrap().to_str().unwrap().starts_with("Bearer"));
    // A wrong one, another scheme, an empty one.
    for request in [
        api.http
            .get(api.url("/projects"))
            .bearer_auth("not-a-token"),
        api.http
            .get(api.url("/projects"))
            .basic_auth("alice", Some(ALICE)),
        api.http
            .get(api.url("/projects"))
            .header("authorization", "Bearer "),
        api.http
            .get(api.url("/projects"))
            .bearer_auth(&ALICE[..ALICE.len() - 1]),
    ] {
        let resp = request.send().await.unwrap();
        assert!(resp.headers().contains_key("www-authenticate"));
        problem(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    // Every agent's token, on reads and on changes: 401, and nothing changes.
    let id = api.propose_guardrail("agents-cannot-approve");
    let agents = api.agent_tokens();
    assert!(agents.len() >= 2, "the demo data directory has agents");
    for (agent, token) in &agents {
        for request in [
            api.http.get(api.url("/projects")).bearer_auth(token),
            api.http.get(api.url("/queue")).bearer_auth(token),
            api.http
                .post(api.url(&format!("/queue/{id}/approve")))
                .bearer_auth(token),
        ] {
            let resp = request.send().await.unwrap();
            assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "agent {agent}");
            problem(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
        }
    }
    assert_eq!(
        api.ctx.store.proposal(id).unwrap().status,
        bridle_rules::ProposalStatus::Pending
    );
    // Admins get in.
    let body = json_ok(api.get("/projects").send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(body["items"][0]["name"], "demo");
    let resp = api
        .http
        .get(api.url("/projects"))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_methods_bodies_and_queries_fail_as_problem_details() {
    let api = Api::start_with(|s| s.body_limit(4096)).await;
    problem(
        api.get("/nothing-here").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_route",
    )
    .await;
    problem(
        api.http
            .delete(api.url("/projects"))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap(),
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
    )
    .await;
    // Malformed JSON.
    problem(
        api.post("/projects")
            .header("content-type", "application/json")
            .body("{\"name\": \"x\",")
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "malformed_json",
    )
    .await;
    // Wrong types and unknown fields.
    problem(
        api.put("/projects/demo")
            .json(&json!({"base_revision": "one", "yaml": "x"}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request",
    )
    .await;
    problem(
        api.post("/projects")
            .json(&json!({"name": "x", "yaml": "a: 1", "colour": "red"}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request",
    )
    .await;
    // Not JSON at all.
    problem(
        api.post("/projects")
            .header("content-type", "text/plain")
            .body("name=x")
            .send()
            .await
            .unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    // Oversize, with and without a JSON content type.
    let big = "#".repeat(10_000);
    problem(
        api.post("/projects")
            .json(&json!({"name": "big", "yaml": big}))
            .send()
            .await
            .unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    )
    .await;
    let t = api
        .ctx
        .store
        .request_scope("demo", "claude", None, "push", "needed")
        .unwrap();
    problem(
        api.post(&format!("/scope-tickets/{}/approve", t.id))
            .body(big.clone())
            .send()
            .await
            .unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    )
    .await;
    // Bad paging.
    problem(
        api.get("/projects?limit=0").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;
    problem(
        api.get("/projects?limit=lots").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;
    problem(
        api.get("/queue?cursor=%21%21").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;
    problem(
        api.get("/queue?status=maybe").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;
    // An id that cannot be one.
    problem(
        api.get("/queue/abc").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    // The server is still fine.
    assert_eq!(
        api.get("/projects").send().await.unwrap().status(),
        StatusCode::OK
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_are_listed_created_read_replaced_rendered_diffed_and_their_history_kept() {
    let api = Api::start().await;
    // Create from JSON and from YAML.
    let mut doc = serde_json::to_value(demo_document()).unwrap();
    doc["project"]["name"] = json!("Alpha");
    let saved = json_ok(
        api.post("/projects")
            .json(&json!({"name": "alpha", "document": doc}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(saved, json!({"project": "alpha", "revision": 1}));
    let yaml = bridle_rules::to_yaml(&bridle_rules::RulesDocument::new("Beta")).unwrap();
    json_ok(
        api.post("/projects")
            .json(&json!({"name": "beta", "yaml": yaml}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    problem(
        api.post("/projects")
            .json(&json!({"name": "beta", "yaml": yaml}))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "change_refused",
    )
    .await;
    problem(
        api.post("/projects")
            .json(&json!({"name": "Bad Name", "yaml": yaml}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_name",
    )
    .await;
    problem(
        api.post("/projects")
            .json(&json!({"name": "gamma"}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request",
    )
    .await;

    // Paged and filtered list.
    let p1 = json_ok(
        api.get("/projects?limit=2").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let names: Vec<&str> = p1["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    let cursor = p1["next_cursor"].as_str().unwrap();
    let p2 = json_ok(
        api.get(&format!("/projects?limit=2&cursor={cursor}"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(p2["items"][0]["name"], "demo");
    assert!(p2.get("next_cursor").is_none());
    let filtered = json_ok(
        api.get("/projects?q=alp").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(filtered["items"].as_array().unwrap().len(), 1);
    assert_eq!(filtered["items"][0]["title"], "Alpha");

    // Read as JSON and as YAML, with the revision as ETag.
    let resp = api.get("/projects/alpha").send().await.unwrap();
    assert_eq!(resp.headers()["etag"], "\"1\"");
    let got = json_ok(resp, StatusCode::OK).await;
    assert_eq!(got["revision"], 1);
    assert_eq!(got["document"]["project"]["name"], "Alpha");
    let resp = api
        .get("/projects/alpha")
        .header("accept", "application/yaml")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/yaml");
    let text = resp.text().await.unwrap();
    assert_eq!(text, got["yaml"].as_str().unwrap());
    assert!(text.contains("name: Alpha"));
    problem(
        api.get("/projects/nope").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_project",
    )
    .await;

    // Replace against the base revision; a stale base is 409 with the current revision.
    let edited = text.replace("name: Alpha", "name: Alpha Two");
    let saved = json_ok(
        api.put("/projects/alpha")
            .json(&json!({"base_revision": 1, "yaml": edited, "summary": "rename"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(saved["revision"], 2);
    let stale = problem(
        api.put("/projects/alpha")
            .json(&json!({"base_revision": 1, "yaml": text}))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "revision_conflict",
    )
    .await;
    assert_eq!(stale["current_revision"], 2);
    problem(
        api.put("/projects/nope")
            .json(&json!({"base_revision": 1, "yaml": text}))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_project",
    )
    .await;

    // Invalid YAML: line and column of the mistake.
    let broken = "schema_version: 2\nproject:\n  name: [unclosed\n";
    let bad = problem(
        api.put("/projects/alpha")
            .json(&json!({"base_revision": 2, "yaml": broken}))
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_yaml",
    )
    .await;
    let e = &bad["errors"][0];
    assert!(e["line"].as_u64().is_some_and(|l| l >= 3), "{bad}");
    assert!(e["column"].as_u64().is_some(), "{bad}");
    // A document that parses but fails the checks.
    let mut invalid = got["document"].clone();
    invalid["guardrails"] = json!([{"id": "", "statement": "", "severity": "hard-instruction", "applies_to": ["nobody"], "provenance": {"source": "user"}}]);
    let bad = problem(
        api.put("/projects/alpha")
            .json(&json!({"base_revision": 2, "document": invalid}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_document",
    )
    .await;
    assert!(!bad["errors"].as_array().unwrap().is_empty(), "{bad}");
    assert_eq!(api.ctx.store.load("alpha").unwrap().document.revision, 2);

    // Render for an agent type.
    let r = json_ok(
        api.get("/projects/alpha/render/claude")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(r["path"], "CLAUDE.md");
    assert!(r["content"].as_str().unwrap().contains("Alpha Two"));
    problem(
        api.get("/projects/alpha/render/nobody")
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_agent_type",
    )
    .await;

    // Diff two revisions.
    let d = json_ok(
        api.get("/projects/alpha/diff?from=1&to=2")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let diff = d["diff"].as_str().unwrap();
    assert!(diff.contains("-  name: Alpha\n"), "{diff}");
    assert!(diff.contains("+  name: Alpha Two\n"), "{diff}");
    let same = json_ok(
        api.get("/projects/alpha/diff?from=2").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(same["to"], 2);
    assert_eq!(same["diff"], "");
    problem(
        api.get("/projects/alpha/diff?from=7").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    problem(
        api.get("/projects/alpha/diff").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;

    // The history names the admin through the API.
    let h = json_ok(
        api.get("/projects/alpha/history").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let items = h["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["summary"], "create project");
    assert_eq!(items[1]["summary"], "rename");
    for i in items {
        assert_eq!(i["source"], "user");
        assert_eq!(i["actor"], "admin:alice@api");
    }
    let h = json_ok(
        api.get("/projects/alpha/history?limit=1")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(h["items"].as_array().unwrap().len(), 1);
    assert!(h["next_cursor"].is_string());
    let h = json_ok(
        api.get("/projects/demo/history?actor=admin:alice@api")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(h["items"].as_array().unwrap().is_empty());
    problem(
        api.get("/projects/nope/history").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_project",
    )
    .await;
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_queue_shows_provenance_and_diffs_and_decides_once() {
    let api = Api::start().await;
    let first = api.propose_guardrail("tests-first");
    let second = api.propose_guardrail("small-commits");
    let vendor = api
        .ctx
        .store
        .propose(
            "demo",
            &Origin::vendor("claude", "https://example.invalid/guide"),
            &ChangeRequest::Pattern {
                standard: Some("hexagonal".into()),
                custom: None,
            },
            None,
        )
        .unwrap()
        .id;

    let list = json_ok(api.get("/queue").send().await.unwrap(), StatusCode::OK).await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["origin"]["source"], "agent");
    assert_eq!(items[0]["origin"]["proposed_by"], "claude");
    assert_eq!(items[0]["origin"]["agent_session"], "sess-1");
    assert_eq!(items[2]["origin"]["source"], "vendor");
    assert_eq!(
        items[2]["origin"]["source_ref"],
        "https://example.invalid/guide"
    );
    let vendors = json_ok(
        api.get("/queue?source=vendor").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(vendors["items"].as_array().unwrap().len(), 1);
    assert_eq!(vendors["items"][0]["id"], vendor);
    let paged = json_ok(
        api.get("/queue?limit=2").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let cursor = paged["next_cursor"].as_str().unwrap();
    let rest = json_ok(
        api.get(&format!("/queue?limit=2&cursor={cursor}"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(rest["items"][0]["id"], vendor);

    // One item with the diff it would make.
    let one = json_ok(
        api.get(&format!("/queue/{first}")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(one["status"], "pending");
    let diff = one["diff"].as_str().unwrap();
    assert!(
        diff.contains("+- id: tests-first")
            || diff.contains("+  id: tests-first")
            || diff.contains("tests-first"),
        "{diff}"
    );
    assert!(
        diff.lines()
            .any(|l| l.starts_with('+') && l.contains("tests-first")),
        "{diff}"
    );
    problem(
        api.get("/queue/999").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;

    // Reject needs a reason; then it is decided for good.
    problem(
        api.post(&format!("/queue/{second}/reject"))
            .json(&json!({"reason": "  "}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request",
    )
    .await;
    problem(
        api.post(&format!("/queue/{second}/reject"))
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request",
    )
    .await;
    let rejected = json_ok(
        api.post(&format!("/queue/{second}/reject"))
            .json(&json!({"reason": "too vague"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(rejected["status"], "rejected");
    assert_eq!(rejected["decision_note"], "too vague");
    assert_eq!(rejected["decided_by"], "admin:alice@api");
    problem(
        api.post(&format!("/queue/{second}/reject"))
            .json(&json!({"reason": "again"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "already_decided",
    )
    .await;
    problem(
        api.post(&format!("/queue/{second}/approve"))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "already_decided",
    )
    .await;
    problem(
        api.post("/queue/999/approve").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;

    // Two admins approve the same item at once: exactly one wins.
    let approve = |token: &'static str| {
        let req = api
            .http
            .post(api.url(&format!("/queue/{first}/approve")))
            .bearer_auth(token);
        async move { req.send().await.unwrap() }
    };
    let (a, b) = tokio::join!(approve(ALICE), approve(BOB));
    let mut statuses = [a.status(), b.status()];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT]);
    let (winner, loser) = if a.status() == StatusCode::OK {
        (a, b)
    } else {
        (b, a)
    };
    let won = json_ok(winner, StatusCode::OK).await;
    assert_eq!(won["status"], "approved");
    assert_eq!(won["applied_revision"], 2);
    problem(loser, StatusCode::CONFLICT, "already_decided").await;
    let doc = api.ctx.store.load("demo").unwrap().document;
    assert_eq!(doc.revision, 2);
    assert_eq!(
        doc.guardrails
            .iter()
            .filter(|g| g.id == "tests-first")
            .count(),
        1
    );
    // A decided item has no diff to show.
    let one = json_ok(
        api.get(&format!("/queue/{first}")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(one.get("diff").is_none());
    // Filters by status.
    let decided = json_ok(
        api.get("/queue?status=all").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(decided["items"].as_array().unwrap().len(), 3);
    let approved = json_ok(
        api.get("/queue?status=approved").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(approved["items"][0]["id"], first);

    // The history records the agent's proposal approved by the admin through the API.
    let h = json_ok(
        api.get("/projects/demo/history?source=agent")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let entry = &h["items"][0];
    assert_eq!(entry["proposal_id"], first);
    assert!(entry["actor"] == "admin:alice@api" || entry["actor"] == "admin:bob@api");
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scope_tickets_are_listed_approved_and_denied() {
    let api = Api::start().await;
    let push = api
        .ctx
        .store
        .request_scope("demo", "claude", Some("s1"), "push to main", "hotfix")
        .unwrap();
    let delete = api
        .ctx
        .store
        .request_scope("demo", "codex", None, "delete a branch", "cleanup")
        .unwrap();
    let list = json_ok(
        api.get("/scope-tickets").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    assert_eq!(list["items"][0]["action"], "push to main");
    let codex = json_ok(
        api.get("/scope-tickets?agent=codex").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(codex["items"].as_array().unwrap().len(), 1);
    assert_eq!(codex["items"][0]["id"], delete.id);

    let approved = json_ok(
        api.post(&format!("/scope-tickets/{}/approve", push.id))
            .json(&json!({"note": "once"}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(approved["status"], "approved");
    assert_eq!(approved["note"], "once");
    assert_eq!(approved["decided_by"], "admin:alice@api");
    // An empty body is fine for a decision.
    let denied = json_ok(
        api.post(&format!("/scope-tickets/{}/deny", delete.id))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(denied["status"], "denied");
    problem(
        api.post(&format!("/scope-tickets/{}/deny", push.id))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "already_decided",
    )
    .await;
    problem(
        api.post("/scope-tickets/77/approve").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    problem(
        api.post(&format!("/scope-tickets/{}/approve", push.id))
            .json(&json!({"note": 5}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request",
    )
    .await;
    let one = json_ok(
        api.get(&format!("/scope-tickets/{}", delete.id))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(one["status"], "denied");
    problem(
        api.get("/scope-tickets/77").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "not_found",
    )
    .await;
    let pending = json_ok(
        api.get("/scope-tickets").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(pending["items"].as_array().unwrap().is_empty());
    let all = json_ok(
        api.get("/scope-tickets?status=all").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(all["items"].as_array().unwrap().len(), 2);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_listens_on_loopback_only_unless_exposed() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir(tmp.path()).unwrap();
    let ctx = GatewayContext::open(tmp.path(), GatewayConfig::load(tmp.path()).unwrap()).unwrap();
    let state = AdminState::new(ctx, Arc::new(AdminTokens::new().unwrap()));
    let err = AdminServer::bind(SocketAddr::from(([0, 0, 0, 0], 0)), state)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("loopback"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_served_without_credentials() {
    let api = Api::start().await;
    let doc = json_ok(
        api.http.get(api.url("/openapi.json")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(doc, bridle_gateway::admin::openapi::document());
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    api.stop().await;
}
