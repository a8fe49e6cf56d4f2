//! The admin API over real HTTP on 127.0.0.1: authentication (admins only, never agents),
//! problem details for every failure of routing, bodies and queries, the loopback default and
//! the served OpenAPI document.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod admin_support;

use std::net::SocketAddr;
use std::sync::Arc;

use admin_support::{ALICE, Api, BOB, json_ok, problem};
use bridle_gateway::GatewayContext;
use bridle_gateway::admin::{AdminServer, AdminState, AdminTokens};
use bridle_gateway::config::{GatewayConfig, init_data_dir_with_token_files};
use reqwest::StatusCode;
use serde_json::json;

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
async fn the_admin_api_listens_on_loopback_only_unless_exposed() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
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
