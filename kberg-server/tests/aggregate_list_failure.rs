//! An HTTP upstream that accepts `initialize` but fails `tools/list` with an error quoting the
//! credential it was sent (as backends that echo a rejected token do): the reason the
//! aggregator stores (which callers and operators are shown) and the log carry the credential
//! redacted, on the first listing and on a re-listing after `list_changed`; an upstream whose
//! `prompts/list` and `resources/list` fail that way is logged without the credential too.
//!
//! The upstream is a stand-in written here from the Streamable HTTP transport's documented
//! shapes: JSON-RPC over POST, each request answered with one JSON body, or with a
//! `text/event-stream` body when a notification goes before the result; notifications
//! answered 202; no session id, so the client opens no stream of its own (GET answers 405).

#![allow(clippy::unwrap_used)] // Tests fail loudly.

mod peers;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kberg_core::{CallOptions, PromptRegistry, ResourceRegistry, ToolRegistry};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, Backoff, Forward, UpstreamConfig, UpstreamStatus,
    UpstreamTransport,
};
use kberg_testkit::log::LogBuffer;
use peers::*;
use serde_json::{Value, json};

const CANARY: &str = "canary-list-token-8d3f1a6c";

/// Whether `tools/list` fails now, for the `/flip` endpoint (it starts listing fine and fails
/// after its tool was called).
#[derive(Clone, Default)]
struct Stand {
    flipped: Arc<AtomicBool>,
}

fn json_answer(body: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `/fail` fails every `tools/list`; `/long` fails it with a message of 200,000 characters; `/flip` fails it once its `ping_me` tool was called,
/// whose answer carries `notifications/tools/list_changed` before the result; `/lists` offers
/// prompts and resources and fails to list them.
async fn mcp(
    State(stand): State<Stand>,
    Path(mode): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
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
            "capabilities": if mode == "lists" {
                json!({"tools": {}, "prompts": {}, "resources": {}})
            } else {
                json!({"tools": {"listChanged": true}})
            },
            "serverInfo": {"name": "echo", "version": "1"},
        }))),
        "prompts/list" | "resources/list" | "resources/templates/list" if mode == "lists" => {
            json_answer(json!({
                "jsonrpc": "2.0", "id": id,
                "error": {"code": -32603, "message": format!("`{auth}` may not list this")},
            }))
        }
        "tools/list" if mode == "long" => json_answer(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": -32603, "message": "x".repeat(200_000)},
        })),
        "tools/list" if mode == "fail" || stand.flipped.load(Ordering::SeqCst) => {
            json_answer(json!({
                "jsonrpc": "2.0", "id": id,
                "error": {"code": -32603, "message": format!("`{auth}` may not list tools")},
            }))
        }
        "tools/list" => json_answer(result(json!({"tools": [{
            "name": "ping_me",
            "description": "Answers pong.",
            "inputSchema": {"type": "object"},
        }]}))),
        "tools/call" => {
            stand.flipped.store(true, Ordering::SeqCst);
            let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
            let done = result(json!({"content": [{"type": "text", "text": "pong"}]}));
            (
                [(header::CONTENT_TYPE, "text/event-stream")],
                format!("data: {changed}\n\ndata: {done}\n\n"),
            )
                .into_response()
        }
        "ping" => json_answer(result(json!({}))),
        _ => json_answer(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": "Method not found"},
        })),
    }
}

async fn start_stand() -> String {
    let app = Router::new()
        .route(
            "/{mode}",
            post(mcp).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .with_state(Stand::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn upstream(namespace: &str, url: String) -> UpstreamConfig {
    UpstreamConfig::new(
        namespace,
        UpstreamTransport::http(url).header("authorization", format!("Bearer {CANARY}")),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn a_listing_error_quoting_the_credential_is_stored_and_logged_redacted() {
    let captured = LogBuffer::default();
    // rmcp traces message bodies at TRACE; an embedding server caps it below that (the
    // gateway does), so the log read here is everything up to DEBUG.
    let _guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::DEBUG));
    let base = start_stand().await;
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new()
        .upstream(upstream("fail", format!("{base}/fail")))
        .upstream(upstream("flip", format!("{base}/flip")))
        .connect_timeout(Duration::from_secs(10))
        .backoff(Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(1),
        });
    let agg = Aggregator::start(config, registry.clone()).expect("valid");

    // The first listing fails: the stored reason names the failure, not the token.
    let mut status = agg.status_changes("fail").unwrap();
    let reached = status.wait_for(|s| matches!(s, UpstreamStatus::Unavailable { .. }));
    let reason = match tokio::time::timeout(WAIT, reached).await {
        Ok(Ok(s)) => match &*s {
            UpstreamStatus::Unavailable { reason } => reason.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("no failure reported: {other:?}"),
    };
    assert!(reason.contains("listing its tools failed"), "{reason}");
    assert!(reason.contains("may not list tools"), "{reason}");
    assert!(!reason.contains(CANARY), "{reason}");
    captured.wait_for("upstream unavailable").await;

    // A re-listing after `list_changed` fails the same way: logged without the token.
    assert!(
        agg.wait_connected("flip", 1, WAIT).await,
        "{:?}",
        agg.status("flip")
    );
    let out = registry
        .call(
            &reader(),
            "flip__ping_me",
            json!({}),
            CallOptions::default(),
        )
        .await
        .expect("forwarded");
    assert_eq!(out.all_text(), "pong");
    let text = captured.wait_for("re-listing tools failed").await;
    assert!(
        !text.contains(CANARY),
        "the credential reached the log:\n{text}"
    );
    assert!(!format!("{:?}", agg.status("fail")).contains(CANARY));
}

#[tokio::test(flavor = "current_thread")]
async fn prompt_and_resource_listing_errors_are_logged_redacted() {
    let captured = LogBuffer::default();
    let _guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::DEBUG));
    let base = start_stand().await;
    let config = AggregatorConfig::new()
        .upstream(upstream("lists", format!("{base}/lists")))
        .connect_timeout(Duration::from_secs(10));
    let _agg = Aggregator::start_with(
        config,
        ToolRegistry::new(),
        Forward::new()
            .prompts(PromptRegistry::new())
            .resources(ResourceRegistry::new()),
    )
    .expect("valid");
    let prompts = captured.wait_for("listing prompts failed").await;
    let resources = captured.wait_for("listing resources failed").await;
    for text in [prompts, resources] {
        assert!(text.contains("may not list this"), "{text}");
        assert!(
            !text.contains(CANARY),
            "the credential reached the log:\n{text}"
        );
    }
}

/// A listing error of any length is stored (and shown, and logged) as the reason cut short,
/// as a refusal quotes an upstream's message.
#[tokio::test(flavor = "current_thread")]
async fn a_listing_error_of_any_length_is_stored_cut_short() {
    let base = start_stand().await;
    let config = AggregatorConfig::new()
        .upstream(upstream("long", format!("{base}/long")))
        .connect_timeout(Duration::from_secs(10));
    let agg = Aggregator::start(config, ToolRegistry::new()).expect("valid");
    let mut status = agg.status_changes("long").unwrap();
    let reached = status.wait_for(|s| matches!(s, UpstreamStatus::Unavailable { .. }));
    let reason = match tokio::time::timeout(WAIT, reached).await {
        Ok(Ok(s)) => match &*s {
            UpstreamStatus::Unavailable { reason } => reason.clone(),
            other => panic!("{other:?}"),
        },
        other => panic!("no failure reported: {other:?}"),
    };
    assert!(reason.contains("listing its tools failed"), "{reason}");
    assert!(reason.ends_with("..."), "{reason}");
    assert!(reason.len() < 2_000, "{} bytes", reason.len());
}
