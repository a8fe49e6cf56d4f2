//! A project document broken where it is stored (a file edited by hand, one written by a newer
//! build) is the state a request met, not the request: every route that reads it answers
//! 409 `stored_document_invalid` with the stored document's problems and lines, never the
//! request's codes (`invalid_yaml`, `invalid_document`, ...). Nothing is written meanwhile, a
//! proposal waiting stays pending, the project list still shows the project, and the routes
//! answer as before once the file is fixed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::{Api, json_ok, problem};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The stored-document answer of `resp`, checked: 409, the code, the project and the store's
/// code in the detail.
async fn stored(resp: reqwest::Response, store_code: &str) -> Value {
    let body = problem(resp, StatusCode::CONFLICT, "stored_document_invalid").await;
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("`demo`"), "{body}");
    assert!(detail.contains(store_code), "{body}");
    body
}

/// Every route that reads the demo project's stored document and submits none of its own,
/// answered `stored_document_invalid` while the document does not load.
async fn every_reader_refuses(api: &Api, store_code: &str, proposal: u64) -> Vec<Value> {
    let mut bodies = Vec::new();
    for path in [
        "/projects/demo",
        "/projects/demo/render/claude",
        "/projects/demo/diff?from=1",
        "/projects/demo/patterns",
        &format!("/queue/{proposal}"),
    ] {
        let resp = api.get(path).send().await.unwrap();
        bodies.push(stored(resp, store_code).await);
    }
    let yaml = api
        .get("/projects/demo")
        .header(reqwest::header::ACCEPT, "application/yaml")
        .send()
        .await
        .unwrap();
    bodies.push(stored(yaml, store_code).await);
    for path in [
        "/projects/demo/upgrade",
        "/projects/demo/profile-suggestions",
        &format!("/queue/{proposal}/approve"),
    ] {
        let resp = api.post(path).send().await.unwrap();
        bodies.push(stored(resp, store_code).await);
    }
    bodies
}

/// The admin API over the demo project with a proposal waiting: the API, the proposal's id and
/// the project's file.
async fn demo_with_a_proposal() -> (Api, u64, std::path::PathBuf) {
    let api = Api::start().await;
    let proposal = api.propose_guardrail("wait-for-review");
    let path = api.ctx.store.project_path("demo").unwrap();
    (api, proposal, path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_broken_by_hand_is_the_stored_documents_fault_not_the_requests() {
    let (api, proposal, path) = demo_with_a_proposal().await;
    let good = json_ok(
        api.get("/projects/demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let revision = good["revision"].as_u64().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();

    // A file that no longer parses: its line and column are given, as the store found them.
    std::fs::write(&path, "schema_version: 2\nproject:\n  name: [unclosed\n").unwrap();
    for body in every_reader_refuses(&api, "parse_error", proposal).await {
        let e = &body["errors"][0];
        assert_eq!(e["code"], "parse_error", "{body}");
        assert!(e["line"].as_u64().is_some_and(|l| l >= 3), "{body}");
        assert!(e["column"].as_u64().is_some(), "{body}");
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.contains("projects/demo.yaml") && detail.contains(" at line 3, column "),
            "the detail says where to fix it: {body}"
        );
    }

    // Replacing it through the API is refused the same way: the edit cannot be checked
    // against a revision that does not load, and nothing is written.
    let replace = api
        .put("/projects/demo")
        .json(&json!({"base_revision": revision, "document": good["document"]}))
        .send()
        .await
        .unwrap();
    stored(replace, "parse_error").await;
    // A submitted document that is itself broken is still the request's fault, first.
    problem(
        api.put("/projects/demo")
            .json(&json!({"base_revision": revision, "yaml": "project: [unclosed\n"}))
            .send()
            .await
            .unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_yaml",
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "schema_version: 2\nproject:\n  name: [unclosed\n",
        "nothing was written over the broken file"
    );

    // The list still shows the project, so an admin finds it to fix.
    let list = json_ok(api.get("/projects").send().await.unwrap(), StatusCode::OK).await;
    let listed = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "demo")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(listed["problem"], "parse_error", "{list}");

    // Fixed by hand: every route answers as before, and the proposal waited.
    std::fs::write(&path, &text).unwrap();
    let back = json_ok(
        api.get("/projects/demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(back["revision"], revision);
    let list = json_ok(api.get("/projects").send().await.unwrap(), StatusCode::OK).await;
    assert!(list["items"][0].get("problem").is_none(), "{list}");
    let waiting = json_ok(
        api.get(&format!("/queue/{proposal}")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(waiting["status"], "pending", "{waiting}");
    json_ok(
        api.post(&format!("/queue/{proposal}/approve"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_document_that_fails_its_checks_lists_each_problem() {
    let (api, proposal, path) = demo_with_a_proposal().await;
    let mut doc = api.ctx.store.load("demo").unwrap().document;
    let mut bad = doc.guardrails[0].clone();
    bad.id = "Not An Id".into();
    bad.applies_to = vec!["nobody-at-all".into()];
    doc.guardrails.push(bad);
    std::fs::write(&path, bridle_rules::to_yaml(&doc).unwrap()).unwrap();

    for body in every_reader_refuses(&api, "invalid_document", proposal).await {
        let errors = body["errors"].as_array().unwrap();
        assert!(errors.len() >= 2, "each problem is listed: {body}");
        assert!(
            errors.iter().all(|e| e["field"]
                .as_str()
                .is_some_and(|f| f.starts_with("guardrails"))),
            "{body}"
        );
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_document_from_a_newer_build_says_to_upgrade_the_gateway() {
    let (api, proposal, path) = demo_with_a_proposal().await;
    let text = std::fs::read_to_string(&path).unwrap();
    let newer = text.replacen("schema_version: 2", "schema_version: 999", 1);
    assert_ne!(newer, text, "the fixture names its schema version");
    std::fs::write(&path, newer).unwrap();

    for body in every_reader_refuses(&api, "schema_too_new", proposal).await {
        let detail = body["detail"].as_str().unwrap();
        assert!(detail.contains("999"), "{body}");
        assert!(detail.contains("upgrade this gateway"), "{body}");
    }
    api.stop().await;
}
