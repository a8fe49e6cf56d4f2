//! The OpenAPI document lists the answers the API gives outside the bad-input sweep: every
//! operation of the secrets and agent-token resources answers 503 `vault_unavailable` on an API
//! started without the vault, and the guard in front of every operation answers 429
//! `too_many_attempts` (any operation) and 403 `read_only` (any change). A client generated from
//! the document knows each of them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::{Api, problem};
use bridle_gateway::admin::LoginLimits;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn documented(doc: &Value, method: &str, template: &str) -> Vec<String> {
    doc["paths"][template][method]["responses"]
        .as_object()
        .unwrap_or_else(|| panic!("{method} {template} is not in the document"))
        .keys()
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_vault_operation_documents_its_answer_without_a_vault() {
    let api = Api::start().await;
    // An agent of vault-issued tokens, as one created through the API is.
    api.ctx
        .agents
        .create(api.ctx.renderer.catalog(), "bot", "claude", Vec::new())
        .unwrap();
    let doc: Value = api
        .http
        .get(api.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cases = [
        ("get", "/secrets", "/secrets", None),
        (
            "post",
            "/secrets",
            "/secrets",
            Some(json!({"name": "s", "value": "v"})),
        ),
        ("get", "/secrets/{name}", "/secrets/s", None),
        (
            "post",
            "/secrets/{name}/rotate",
            "/secrets/s/rotate",
            Some(json!({"value": "v"})),
        ),
        (
            "post",
            "/secrets/{name}/versions/{version}/revoke",
            "/secrets/s/versions/1/revoke",
            None,
        ),
        (
            "post",
            "/agents",
            "/agents",
            Some(json!({"name": "newbot", "type": "claude"})),
        ),
        ("post", "/agents/{name}/token", "/agents/bot/token", None),
        ("post", "/agents/{name}/rotate", "/agents/bot/rotate", None),
        ("post", "/agents/{name}/revoke", "/agents/bot/revoke", None),
    ];
    let mut undocumented = Vec::new();
    for (method, template, path, body) in cases {
        let mut req = api
            .http
            .request(method.to_uppercase().parse().unwrap(), api.url(path))
            .bearer_auth(admin_support::ALICE);
        if let Some(body) = &body {
            req = req.json(body);
        }
        problem(
            req.send().await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE,
            "vault_unavailable",
        )
        .await;
        let template = format!("/admin/api/v1{template}");
        if !documented(&doc, method, &template).contains(&"503".to_string()) {
            undocumented.push(format!("{method} {template}"));
        }
    }
    assert!(
        undocumented.is_empty(),
        "answer 503 vault_unavailable without documenting it: {undocumented:?}"
    );
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guards_answers_are_documented_on_every_operation_they_guard() {
    // One refused token is enough to be throttled; a watcher is refused every change.
    let api = Api::start_with(|s| {
        s.watcher("bob")
            .login_limits(LoginLimits::new(1, 1, std::time::Duration::from_secs(3600)))
    })
    .await;
    problem(
        api.http
            .post(api.url("/secrets"))
            .bearer_auth(admin_support::BOB)
            .json(&json!({"name": "s", "value": "v"}))
            .send()
            .await
            .unwrap(),
        StatusCode::FORBIDDEN,
        "read_only",
    )
    .await;
    for expected in [StatusCode::UNAUTHORIZED, StatusCode::TOO_MANY_REQUESTS] {
        let resp = api
            .http
            .get(api.url("/secrets"))
            .bearer_auth("not-an-admin-token")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), expected);
    }
    let doc = bridle_gateway::admin::openapi::document();
    let mut missing = Vec::new();
    for (template, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if op.get("security").is_none() {
                continue;
            }
            let listed = documented(&doc, method, template);
            let mut must = vec!["401", "429"];
            if method != "get" {
                must.push("403");
            }
            for status in must {
                if !listed.iter().any(|s| s == status) {
                    missing.push(format!("{method} {template}: {status}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "undocumented guard answers: {missing:?}"
    );
    api.stop().await;
}
