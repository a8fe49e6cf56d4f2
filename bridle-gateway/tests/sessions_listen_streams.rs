//! A 2025-11-25 session's listen stream (its `GET`, answered with Server-Sent Events) over real
//! HTTP: an operator ending the session (or revoking its agent, which ends its sessions) ends
//! the stream too, rather than leaving the agent listening to notifications on a session whose
//! every request is refused.
//!
//! The gateway is the shared `Gw` (`GatewayBuilder` and `bind`), whose MCP endpoint has
//! [`bridle_gateway::sessions::track`] around the transport's router.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
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
