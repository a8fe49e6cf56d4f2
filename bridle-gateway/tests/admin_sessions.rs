//! The sessions resource over real HTTP: the live registry listed and read, a session ended
//! (its next request is refused), and the Server-Sent Events stream of connects, calls and
//! disconnects, read as a real client reads it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use admin_support::{ALICE, Events, json_ok, problem};
use kberg_agent::{McpSurface, ToolSurface};
use reqwest::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_listed_streamed_and_ended() {
    let gw = Gw::start().await;
    let resp = gw.get("/sessions/events").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut events = Events::new(resp);
    assert_eq!(events.next().await.0, "ready");

    let claude = McpSurface::connect_http_with_bearer(&gw.mcp, &gw.file_token("claude"))
        .await
        .unwrap();
    let connected = events.until("connect").await;
    assert_eq!(connected["session"]["agent"], "claude");
    let id = connected["session"]["id"].as_str().unwrap().to_string();

    let r = claude
        .call("list_projects", json!({}), CancellationToken::new())
        .await
        .unwrap();
    assert!(!r.is_error);
    let call = events.until("call").await;
    assert_eq!(call["agent"], "claude");
    assert_eq!(call["tool"], "list_projects");
    assert_eq!(call["outcome"], "ok");

    let page = json_ok(
        gw.get("/sessions?agent=claude").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert_eq!(page["items"][0]["id"], id.as_str());
    let none = json_ok(
        gw.get("/sessions?agent=codex").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(none["items"], json!([]));
    let one = json_ok(
        gw.get(&format!("/sessions/{id}")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(one["agent"], "claude");
    assert!(one["client_name"].as_str().is_some());

    let ended = json_ok(
        gw.post(&format!("/sessions/{id}/end"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(ended["agent"], "claude");
    let gone = events.until("disconnect").await;
    assert_eq!(gone["id"], id.as_str());
    assert_eq!(gone["reason"], "ended");
    match claude
        .call("list_projects", json!({}), CancellationToken::new())
        .await
    {
        Err(_) => {}
        Ok(r) => assert!(r.is_error, "an ended session still served: {r:?}"),
    }
    problem(
        gw.get(&format!("/sessions/{id}")).send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_session",
    )
    .await;
    problem(
        gw.post(&format!("/sessions/{id}/end"))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_session",
    )
    .await;
    // A stateless client's id has a slash: URL-encoded, it is one path segment.
    problem(
        gw.get("/sessions/claude%2Fstateless").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_session",
    )
    .await;

    // The end is in the audit log, by alice, about claude.
    let audit = json_ok(
        gw.get("/audit?kind=session_end").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(audit["items"][0]["source"]["admin"], "alice");
    assert_eq!(audit["items"][0]["agent"], "claude");

    // The stream and the listing need an admin.
    gw.refuses_agents(reqwest::Method::GET, "/sessions/events")
        .await;
    problem(
        gw.http
            .get(gw.url("/sessions/events"))
            .send()
            .await
            .unwrap(),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    problem(
        gw.get("/sessions?limit=nine").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;
    let _ = ALICE;
    // Shutting down ends open streams (the gateway stops within the deadline in stop()).
    gw.stop().await;
}
