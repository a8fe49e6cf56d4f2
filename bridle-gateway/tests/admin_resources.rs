//! The admin API's resources over real HTTP on 127.0.0.1 against a real data directory and
//! SQLite file: projects, the review queue (two concurrent approvals of one item) and scope
//! tickets, success and failure paths.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod admin_support;

use admin_support::{ALICE, Api, BOB, json_ok, problem};
use bridle_gateway::config::demo_document;
use bridle_rules::{ChangeRequest, Origin};
use reqwest::StatusCode;
use serde_json::json;

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
