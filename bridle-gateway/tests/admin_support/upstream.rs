//! A stand-in upstream MCP server on 127.0.0.1 that records the credential of every request
//! it gets, for the tests of credential injection around revocation and disabling.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// A JSON answer of a stand-in upstream.
pub fn json_answer(body: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Every `Authorization` header the stand-in got, with the method of its request.
pub type Seen = Arc<Mutex<Vec<(String, String)>>>;

async fn stand_in(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let method = msg["method"].as_str().unwrap_or_default().to_string();
    seen.lock().unwrap().push((auth, method.clone()));
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method.as_str() {
        "initialize" => json!({
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "up", "version": "1"},
        }),
        "tools/list" => json!({"tools": [{
            "name": "ping",
            "description": "Answers pong.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true},
        }]}),
        "tools/call" => json!({"content": [{"type": "text", "text": "pong"}]}),
        _ => json!({}),
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string(),
    )
        .into_response()
}

/// Serves the stand-in upstream on a free loopback port, recording into `seen`.
pub async fn serve_stand_in(seen: Seen) -> std::net::SocketAddr {
    let app = Router::new()
        .route(
            "/mcp",
            post(stand_in).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}
