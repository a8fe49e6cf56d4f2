//! An upstream with a secret per agent and none shared lists its tools through one agent's
//! connection. When that agent's secret is missing (revoked, deleted, never stored), the
//! upstream's tools must still be listed through another agent's, so that one agent's
//! credential does not take the tools from every other agent. Over real HTTP on 127.0.0.1.
//!
//! The upstream is a stand-in written from the Streamable HTTP transport's documented shapes:
//! JSON-RPC over POST, each request answered with one JSON body, notifications with 202, no
//! session id (GET answers 405).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;
use std::time::Duration;

use admin_support::gateway::{Gw, answer_in};
use admin_support::upstream::json_answer;
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bridle_gateway::upstreams::FolderSecrets;
use bridle_rules::ReadWrite;
use kberg_testkit::eventually_async;
use serde_json::{Value, json};

/// Offers `hello`, which answers with the token it was called with.
async fn stand_in(headers: HeaderMap, body: Bytes) -> Response {
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let result = |r: Value| json!({"jsonrpc": "2.0", "id": id, "result": r});
    match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json_answer(result(json!({
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "per-agent", "version": "1"},
        }))),
        "tools/list" => json_answer(result(json!({"tools": [{
            "name": "hello",
            "description": "Says hello.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true},
        }]}))),
        "tools/call" => json_answer(result(json!({
            "content": [{"type": "text", "text": format!("hello, {}", auth.len())}],
        }))),
        "ping" => json_answer(result(json!({}))),
        _ => json_answer(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": "Method not found"},
        })),
    }
}

/// One stateless `tools/call` (protocol 2026-07-28) as `agent`: the JSON-RPC answer.
async fn call(gw: &Gw, agent: &str, tool: &str) -> Value {
    let r = gw.send_stateless_call(agent, tool, json!({})).await;
    answer_in(&r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agents_missing_secret_does_not_take_the_tools_from_the_others() {
    let app = Router::new().route(
        "/mcp",
        post(stand_in).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    // claude (the mapping's first agent) has no secret stored; codex has.
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(secrets.path().join("up-codex"), "codex-up-token\n").unwrap();
    let yaml = format!(
        "upstreams:\n  up:\n    http: {{url: 'http://{addr}/mcp'}}\n    credential:\n      per_agent: {{claude: up-claude, codex: up-codex}}\n"
    );
    let folder = Arc::new(FolderSecrets::new(secrets.path()));
    let gw = Gw::start_with_yaml(&yaml, |b| {
        b.secrets(folder).connect_timeout(Duration::from_secs(3))
    })
    .await;
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let revision = doc.revision;
    for agent in ["claude", "codex"] {
        doc.permissions.get_mut(agent).unwrap().tools.insert(
            "up".into(),
            ReadWrite {
                read: true,
                write: false,
            },
        );
    }
    gw.ctx
        .store
        .save_edit("demo", &doc, revision, "test", "claude and codex read up")
        .unwrap();

    let answer = eventually_async(
        "codex's call of up__hello answered by the upstream",
        || async {
            let answer = call(&gw, "codex", "up__hello").await;
            (answer["result"]["content"][0]["text"] == "hello, 21").then_some(answer)
        },
    )
    .await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // `/metrics` reads the connection that lists (codex's), not the first agent's.
    let metrics = gw.mcp.trim_end_matches("/mcp").to_string() + "/metrics";
    let page = gw
        .http
        .get(metrics)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.lines()
            .any(|l| l == r#"bridle_upstream_up{namespace="up"} 1"#),
        "{page}"
    );

    // claude, whose secret is missing, is refused for that, nothing sent.
    let answer = call(&gw, "claude", "up__hello").await;
    assert_eq!(
        answer["result"]["structuredContent"]["code"], "credential_missing",
        "{answer}"
    );
    gw.stop().await;
}
