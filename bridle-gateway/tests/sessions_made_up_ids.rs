//! Session ids an agent makes up, over real HTTP: the transport answers each `404`, and none of
//! them is listed as a live session; the session a real client opens is listed, and an ended
//! one is still refused on its next request.
//!
//! Both tests run the gateway itself (the shared `Gw`: `GatewayBuilder` and `bind`), whose MCP
//! endpoint has [`bridle_gateway::sessions::track`] around the transport's router.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use kberg_agent::{McpSurface, ToolSurface};
use reqwest::StatusCode;
use serde_json::json;

/// A request of a 2025-11-25 client in the session `id`.
async fn in_session(http: &reqwest::Client, url: &str, token: &str, id: &str) -> StatusCode {
    http.post(url)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_session_ids_are_not_listed_as_live_sessions() {
    let gw = Gw::start().await;
    let (url, sessions) = (gw.mcp.clone(), gw.ctx.sessions.clone());
    let token = gw.file_token("claude");
    let token = token.as_str();

    let client = reqwest::Client::new();
    for i in 0..20 {
        let id = format!("made-up-{i}");
        assert_eq!(
            in_session(&client, &url, token, &id).await,
            StatusCode::NOT_FOUND
        );
    }
    let live = sessions.sessions();
    assert!(live.is_empty(), "made-up ids listed as live: {live:?}");

    // A real session is listed, with every request it made after `initialize`.
    let claude = McpSurface::connect_http_with_bearer(&url, token)
        .await
        .unwrap();
    assert!(!claude.tools().await.unwrap().is_empty());
    let live = sessions.sessions();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].agent, "claude");
    assert_eq!(live[0].agent_type.as_deref(), Some("claude"));
    assert!(live[0].requests >= 2, "{live:?}");

    // Ended by an operator: refused on its next request, and not listed again.
    assert!(sessions.end(&live[0].id));
    assert_eq!(
        in_session(&client, &url, token, &live[0].id).await,
        StatusCode::UNAUTHORIZED
    );
    assert!(sessions.sessions().is_empty());

    gw.stop().await;
}

/// A 2026-07-28 request has no session on the wire: the transport serves it whatever
/// `Mcp-Session-Id` it carries. Made-up ids on such requests are answered, and the agent is
/// listed once, as its stateless entry, never under the ids it sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_ids_on_stateless_requests_are_not_listed_as_sessions() {
    let gw = Gw::start().await;
    let (url, sessions) = (gw.mcp.clone(), gw.ctx.sessions.clone());
    let token = gw.file_token("claude");

    let client = reqwest::Client::new();
    for i in 0..20 {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let status = client
            .post(&url)
            .bearer_auth(token.trim())
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/list")
            .header("mcp-session-id", format!("made-up-{i}"))
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, StatusCode::OK);
    }
    let live = sessions.sessions();
    let ids: Vec<&str> = live.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["claude/stateless"], "{live:?}");
    assert_eq!(live[0].requests, 20);
    assert_eq!(
        live[0].generation,
        bridle_gateway::sessions::Generation::Stateless
    );

    gw.stop().await;
}
