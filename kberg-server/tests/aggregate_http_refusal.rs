//! An HTTP upstream that refuses one request at the HTTP level (a `500` from a tool that
//! crashed its server's handler, a `413` for a body over its limit) has refused that request,
//! not dropped its connection: the call fails (`tool_failed`, as for a JSON-RPC error the
//! upstream answers) saying what the upstream answered, in words that name no client-library
//! type, and the connection with every other call on it carries on. Before, such an answer was taken for a broken transport: the call
//! answered `upstream_unavailable` ("is not connected (Transport send error: Transport
//! [rmcp::transport::worker::WorkerTransport<...>] error: HTTP 500)") and the aggregator
//! reconnected, cutting off the calls still running there.

mod peers;

use peers::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use kberg_core::{CallOptions, GateError, ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, UpstreamConfig, UpstreamStatus, UpstreamTransport,
};
use kberg_server::{McpApp, router};
use kberg_testkit::serve::loopback;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

/// Answers a call of `explode` with `500` and of `toolarge` with `413` before the MCP endpoint
/// sees it, and counts the `initialize` requests that pass.
async fn refusing(initializes: Arc<AtomicUsize>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let text = String::from_utf8_lossy(&bytes);
    if text.contains(r#""name":"explode""#) {
        return (StatusCode::INTERNAL_SERVER_ERROR, "internal failure").into_response();
    }
    if text.contains(r#""name":"toolarge""#) {
        return (StatusCode::PAYLOAD_TOO_LARGE, "too large").into_response();
    }
    if text.contains(r#""method":"initialize""#) {
        initializes.fetch_add(1, Ordering::SeqCst);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

struct Upstream {
    url: String,
    initializes: Arc<AtomicUsize>,
    /// One message per `wait` call that started.
    started: mpsc::UnboundedReceiver<()>,
    /// A permit lets one `wait` call finish.
    release: Arc<Semaphore>,
    _stop: StopOnDrop,
}

async fn upstream() -> Upstream {
    let (started_tx, started) = mpsc::unbounded_channel();
    let release = Arc::new(Semaphore::new(0));
    let tools = ToolRegistry::new();
    let gate = Arc::clone(&release);
    tools
        .register(ToolBuilder::new("wait").raw_handler(
            json!({"type": "object"}),
            move |_a, _ctx| {
                let (started, gate) = (started_tx.clone(), Arc::clone(&gate));
                async move {
                    let _ = started.send(());
                    let _permit = gate.acquire().await;
                    Ok(ToolOutput::text("waited"))
                }
            },
        ))
        .expect("register");
    for name in ["explode", "toolarge", "echo"] {
        tools
            .register(
                ToolBuilder::new(name).raw_handler(json!({"type": "object"}), |_a, _c| async {
                    Ok(ToolOutput::text("ran"))
                }),
            )
            .expect("register");
    }
    let config = loopback();
    let shutdown = config.shutdown.clone();
    let initializes = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&initializes);
    let app = router(
        McpApp::builder("upstream", "1").tools(tools).build(),
        &config,
    )
    .expect("router")
    .layer(axum::middleware::from_fn(move |req, next| {
        refusing(Arc::clone(&counted), req, next)
    }));
    let (url, stop) = serve_router(app, shutdown).await;
    Upstream {
        url,
        initializes,
        started,
        release,
        _stop: stop,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_refusal_of_one_call_leaves_the_connection_and_other_calls_alone() {
    let mut up = upstream().await;
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(
        AggregatorConfig::new().upstream(UpstreamConfig::new(
            "up",
            UpstreamTransport::http(up.url.clone()),
        )),
        registry.clone(),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );

    // A call that is running at the upstream while the others are refused.
    let waiting = {
        let registry = registry.clone();
        tokio::spawn(async move {
            registry
                .call(&reader(), "up__wait", json!({}), CallOptions::default())
                .await
        })
    };
    tokio::time::timeout(WAIT, up.started.recv())
        .await
        .expect("the wait tool started in time")
        .expect("started");

    for (tool, status) in [("up__explode", "500"), ("up__toolarge", "413")] {
        // The upstream's own failure, as for a JSON-RPC error it answers: `tool_failed` with
        // what it answered.
        let failed = registry
            .call(&reader(), tool, json!({}), CallOptions::default())
            .await;
        let Err(GateError::ToolFailed { message, .. }) = &failed else {
            panic!("{tool}: {failed:?}");
        };
        assert!(message.contains(status), "{tool}: {message}");
        for internal in [
            "rmcp::",
            "WorkerTransport",
            "Transport send error",
            "not connected",
        ] {
            assert!(!message.contains(internal), "{tool}: {message}");
        }
    }

    up.release.add_permits(1);
    let out = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("the running call answered in time")
        .expect("joined")
        .expect("the gate lets the call through");
    assert_eq!(out.all_text(), "waited", "{out:?}");

    let out = registry
        .call(&reader(), "up__echo", json!({}), CallOptions::default())
        .await
        .expect("the gate lets the call through");
    assert_eq!(out.all_text(), "ran", "{out:?}");
    assert_eq!(
        agg.status("up"),
        Some(UpstreamStatus::Connected { generation: 1 }),
        "the first connection still serves"
    );
    assert_eq!(up.initializes.load(Ordering::SeqCst), 1, "no reconnection");
}
