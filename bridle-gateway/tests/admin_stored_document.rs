//! A project document broken where it is stored (a file edited by hand, one written by a newer
//! build) is the state a request met, not the request: every route that reads it answers
//! 409 `stored_document_invalid` with the stored document's problems and lines, never the
//! request's codes (`invalid_yaml`, `invalid_document`, ...). Nothing is written meanwhile, a
//! proposal waiting stays pending, the project list still shows the project, and the routes
//! answer as before once the file is fixed, or once it is replaced whole with `repair`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
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

/// A stored document broken by hand is replaced through the API with `repair`: the revision to
/// base it on is the newest the history shows, the kept copy of that revision reads as a
/// starting point, and a stale base is refused with the revision to use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_broken_by_hand_is_replaced_whole_with_repair() {
    let (api, proposal, path) = demo_with_a_proposal().await;
    let good = json_ok(
        api.get("/projects/demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let revision = good["revision"].as_u64().unwrap();
    let broken = "schema_version: 2\nproject:\n  name: [unclosed\n";
    std::fs::write(&path, broken).unwrap();
    let refused = stored(
        api.get("/projects/demo").send().await.unwrap(),
        "parse_error",
    )
    .await;
    assert!(
        refused["detail"].as_str().unwrap().contains("`repair`"),
        "the answer names the way out: {refused}"
    );
    assert_eq!(
        refused["current_revision"], revision,
        "and the revision to base a repair on: {refused}"
    );

    // The history names the newest revision, and its kept copy reads, as JSON and as YAML.
    let history = json_ok(
        api.get("/projects/demo/history").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let last = history["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["revision"], revision, "{history}");
    let kept = json_ok(
        api.get(&format!("/projects/demo/revisions/{revision}"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(kept["revision"], revision);
    assert_eq!(kept["document"], good["document"]);
    let yaml = api
        .get(&format!("/projects/demo/revisions/{revision}"))
        .header(reqwest::header::ACCEPT, "application/yaml")
        .send()
        .await
        .unwrap();
    assert_eq!(yaml.status(), StatusCode::OK);
    assert_eq!(yaml.text().await.unwrap(), good["yaml"].as_str().unwrap());

    // A stale base is a conflict naming the revision to use; nothing is written.
    let stale = api
        .put("/projects/demo")
        .json(&json!({"base_revision": revision - 1, "document": kept["document"], "repair": true}))
        .send()
        .await
        .unwrap();
    let conflict = problem(stale, StatusCode::CONFLICT, "revision_conflict").await;
    assert_eq!(conflict["current_revision"], revision, "{conflict}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), broken);

    let mut document = kept["document"].clone();
    document["project"]["overview"] = json!("repaired through the API");
    let saved = json_ok(
        api.put("/projects/demo")
            .json(
                &json!({"base_revision": revision, "document": document, "repair": true,
                          "summary": "restore the broken file"}),
            )
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(saved["revision"], revision + 1, "{saved}");
    assert_eq!(saved["replaced"], "parse_error", "{saved}");
    let now = json_ok(
        api.get("/projects/demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(now["revision"], revision + 1);
    assert_eq!(
        now["document"]["project"]["overview"],
        "repaired through the API"
    );
    // The proposal waited through it all.
    let waiting = json_ok(
        api.get(&format!("/queue/{proposal}")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(waiting["status"], "pending", "{waiting}");

    // The same request again is an edit like any other now: stale.
    let again = api
        .put("/projects/demo")
        .json(&json!({"base_revision": revision, "document": document, "repair": true}))
        .send()
        .await
        .unwrap();
    problem(again, StatusCode::CONFLICT, "revision_conflict").await;
    api.stop().await;
}

/// `repair` never replaces a document a newer build wrote, a revision that is not a number or
/// that the store keeps no copy of is not found, and `repair` must be a boolean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_refuses_what_it_cannot_replace_or_read() {
    let (api, _proposal, path) = demo_with_a_proposal().await;
    let good = json_ok(
        api.get("/projects/demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let revision = good["revision"].as_u64().unwrap();
    let put = |body: Value| api.put("/projects/demo").json(&body).send();

    let wrong_type =
        put(json!({"base_revision": revision, "document": good["document"], "repair": "yes"}));
    problem(
        wrong_type.await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request",
    )
    .await;
    for (path, status, code) in [
        (
            "/projects/demo/revisions/999",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "/projects/demo/revisions/abc",
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "/projects/nope/revisions/1",
            StatusCode::NOT_FOUND,
            "unknown_project",
        ),
    ] {
        problem(api.get(path).send().await.unwrap(), status, code).await;
    }

    // A kept copy that does not load (kept as it was broken by hand) names that copy, and
    // sends the reader to another revision, not to the project's file or a repair.
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, "project:\n  name: [unclosed\n").unwrap();
    let db = path.parent().unwrap().parent().unwrap().join("bridle.db");
    let changed = rusqlite::Connection::open(db)
        .unwrap()
        .execute(
            "UPDATE revisions SET document = 'project:\n  name: [kept' \
             WHERE project = 'demo' AND revision = ?1",
            [revision as i64],
        )
        .unwrap();
    assert_eq!(changed, 1);
    let body = stored(
        api.get(&format!("/projects/demo/revisions/{revision}"))
            .send()
            .await
            .unwrap(),
        "parse_error",
    )
    .await;
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!(
            "the kept copy of revision {revision} of project `demo`"
        )),
        "{body}"
    );
    assert!(detail.contains("another revision"), "{body}");
    assert!(
        !detail.contains("repair") && !detail.contains(".yaml"),
        "{body}"
    );
    std::fs::write(&path, &text).unwrap();

    let newer = text.replacen("schema_version: 2", "schema_version: 999", 1);
    std::fs::write(&path, &newer).unwrap();
    let refused =
        put(json!({"base_revision": revision, "document": good["document"], "repair": true}));
    let body = stored(refused.await.unwrap(), "schema_too_new").await;
    assert!(
        body.get("current_revision").is_none(),
        "no revision to repair from is offered: {body}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), newer);
    api.stop().await;
}

/// The audit entry of a repair says that a stored document that did not load was replaced and
/// why, by the store's code; never the broken text, which a hand edit may have filled with
/// anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_is_audited_by_its_code_never_the_broken_text() {
    let gw = Gw::start().await;
    let good = json_ok(
        gw.get("/projects/demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let revision = good["revision"].as_u64().unwrap();
    const CANARY: &str = "hand-edit-canary-7f3a";
    let path = gw.ctx.store.project_path("demo").unwrap();
    std::fs::write(&path, format!("project:\n  name: [{CANARY}\n")).unwrap();
    let saved = json_ok(
        gw.put("/projects/demo")
            .json(&json!({"base_revision": revision, "document": good["document"], "repair": true}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(saved["replaced"], "parse_error", "{saved}");
    let audit = json_ok(
        gw.get("/audit?kind=rules_change").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let entry = audit["items"].as_array().unwrap().last().unwrap();
    assert_eq!(
        entry["subject"], "document replaced; the stored one did not load (parse_error)",
        "{audit}"
    );
    assert!(!gw.audit_export().await.contains(CANARY));
    gw.stop().await;
}
