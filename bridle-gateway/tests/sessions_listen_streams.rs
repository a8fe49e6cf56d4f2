//! A 2025-11-25 session's listen stream (its `GET`, answered with Server-Sent Events) over real
//! HTTP: an operator ending the session (or revoking its agent, which ends its sessions) ends
//! the stream too, rather than leaving the agent listening to notifications on a session whose
//! every request is refused.
//!
//! A client ending its own session (`DELETE`, answered `200` by the transport) leaves the
//! listing at once, with one `disconnect` event and its stream ended, and is not reported as
//! ended by an operator: its id is answered the transport's own `404` from then on. A `DELETE`
//! the transport refused forgets nothing.
//!
//! The gateway is the shared `Gw` (`GatewayBuilder` and `bind`), whose MCP endpoint has
//! [`bridle_gateway::sessions::track`] around the transport's router.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use admin_support::{Events, json_ok};
use kberg_testkit::eventually_async;
use reqwest::StatusCode;
use serde_json::json;

/// Opens a 2025-11-25 session with `token` (initialize, then the initialized notification
/// under the id the gateway assigned) and returns its id.
async fn open_session(http: &reqwest::Client, url: &str, token: &str) -> String {
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "listen-test", "version": "1"}
        }
    });
    let r = http
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let r = http
        .post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    id
}

/// Opens the session's listen stream and reads its first event (the transport's priming one).
async fn listen(http: &reqwest::Client, url: &str, token: &str, id: &str) -> reqwest::Response {
    let mut stream = http
        .get(url)
        .bearer_auth(token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let first = tokio::time::timeout(kberg_testkit::WAIT, stream.chunk())
        .await
        .expect("the stream's first event within the deadline")
        .unwrap();
    assert!(first.is_some_and(|c| !c.is_empty()));
    stream
}

/// Reads `stream` until it ends (an error, such as the connection closing, ends it too).
async fn until_ended(mut stream: reqwest::Response) {
    tokio::time::timeout(kberg_testkit::WAIT, async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await
    .expect("the listen stream of an ended session to end within the deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_ends_its_listen_stream() {
    let gw = Gw::start().await;
    let (url, sessions) = (gw.mcp.clone(), gw.ctx.sessions.clone());
    let token = gw.file_token("claude");
    let http = reqwest::Client::new();

    let id = open_session(&http, &url, &token).await;
    let stream = listen(&http, &url, &token, &id).await;
    let other = open_session(&http, &url, &token).await;
    let other_stream = listen(&http, &url, &token, &other).await;
    assert!(sessions.session(&id).is_some());

    // Ended by an operator: its stream ends, the other session's goes on.
    assert!(sessions.end(&id));
    until_ended(stream).await;
    let r = http
        .get(&url)
        .bearer_auth(&token)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "no stream re-opened");
    assert!(sessions.session(&other).is_some());

    // Every session of the agent ended (as its revocation does): the other stream ends too.
    assert_eq!(sessions.end_agent("claude"), 1);
    until_ended(other_stream).await;

    gw.stop().await;
}

/// A 2025-11-25 request of `method` naming the session `id`, with `token`.
fn in_session(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    id: &str,
) -> reqwest::RequestBuilder {
    http.request(method, url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", "2025-11-25")
}

/// The ids the admin API lists for `agent`.
async fn listed(gw: &Gw, agent: &str) -> Vec<String> {
    let page = json_ok(
        gw.get(&format!("/sessions?agent={agent}"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits (with the shared deadline) until the admin API's listing of `agent` holds `id` or not.
async fn until_listed(gw: &Gw, agent: &str, id: &str, held: bool) {
    eventually_async(
        &format!("the admin API to list {id}: {held}"),
        || async move { (listed(gw, agent).await.iter().any(|s| s == id) == held).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_its_client_deleted_leaves_the_listing_at_once() {
    let gw = Gw::start().await;
    let url = gw.mcp.clone();
    let token = gw.file_token("claude");
    let codex = gw.file_token("codex");
    let http = reqwest::Client::new();
    let mut events = Events::new(gw.get("/sessions/events").send().await.unwrap());
    assert_eq!(events.next().await.0, "ready");

    let id = open_session(&http, &url, &token).await;
    assert_eq!(events.until("connect").await["session"]["id"], id.as_str());
    let stream = listen(&http, &url, &token, &id).await;
    until_listed(&gw, "claude", &id, true).await;

    // Another agent's DELETE naming it, and one naming an id nobody was given, are refused by
    // the transport: they forget nothing.
    let r = in_session(&http, reqwest::Method::DELETE, &url, &codex, &id)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = in_session(&http, reqwest::Method::DELETE, &url, &token, "made-up")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(listed(&gw, "claude").await.contains(&id));
    assert!(gw.ctx.sessions.session(&id).is_some());

    // Its client ends it: it leaves the listing, its stream ends, one disconnect is published.
    let r = in_session(&http, reqwest::Method::DELETE, &url, &token, &id)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    until_listed(&gw, "claude", &id, false).await;
    until_ended(stream).await;
    let gone = events.until("disconnect").await;
    assert_eq!(gone["id"], id.as_str());
    assert_eq!(gone["reason"], "closed", "{gone}");
    // The next event is the next session's connect, not a second disconnect of this one.
    let next = open_session(&http, &url, &token).await;
    let (name, data) = events.next().await;
    assert_eq!(
        (name.as_str(), &data["session"]["id"]),
        ("connect", &serde_json::json!(next))
    );

    // Not ended by an operator: its id is answered the transport's 404, not refused 401.
    let r = in_session(&http, reqwest::Method::POST, &url, &token, &id)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(!gw.ctx.sessions.end(&id), "nothing left to end");
    assert!(gw.ctx.sessions.session(&id).is_none(), "not listed again");

    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ended_by_an_operator_is_still_refused_after_its_clients_delete() {
    let gw = Gw::start().await;
    let url = gw.mcp.clone();
    let token = gw.file_token("claude");
    let http = reqwest::Client::new();

    let id = open_session(&http, &url, &token).await;
    until_listed(&gw, "claude", &id, true).await;
    assert!(gw.ctx.sessions.end(&id));
    for method in [reqwest::Method::DELETE, reqwest::Method::POST] {
        let r = in_session(&http, method, &url, &token, &id)
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    assert!(listed(&gw, "claude").await.is_empty());

    gw.stop().await;
}
