//! The request that ends an HTTP upstream's session (`DELETE`) after the credential its
//! connection was started with was rotated or revoked: it carries the current credential, or
//! none at all, never the old one. The upstream is a Kberg server over real HTTP on 127.0.0.1
//! behind a layer that records each request's method and `Authorization` header and signals
//! each `DELETE`, so the test waits on that signal, not on time.

mod peers;

use peers::*;
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use kberg_core::{Principal, ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::aggregate::{Aggregator, AggregatorConfig, UpstreamConfig, UpstreamTransport};
use kberg_server::{BearerTokens, McpApp, router};
use kberg_testkit::serve::loopback;
use serde_json::json;
use tokio::sync::mpsc;

const OLD: &str = "Bearer old-upstream-token";
const NEW: &str = "Bearer new-upstream-token";

/// What the upstream saw: each request's method and `Authorization` header.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

struct Upstream {
    url: String,
    seen: Seen,
    /// One message per `DELETE`, with its `Authorization` header.
    deletes: mpsc::UnboundedReceiver<Option<String>>,
    _stop: StopOnDrop,
}

async fn recording(
    seen: Seen,
    deletes: mpsc::UnboundedSender<Option<String>>,
    req: Request,
    next: Next,
) -> Response {
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Ok(mut s) = seen.lock() {
        s.push((req.method().to_string(), auth.clone()));
    }
    if req.method() == axum::http::Method::DELETE {
        let _ = deletes.send(auth);
    }
    next.run(req).await
}

/// A Kberg server that takes both the old and the new token, behind the recording layer.
async fn upstream() -> Upstream {
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("echo").raw_handler(json!({"type": "object"}), |_a, _c| async {
                Ok(ToolOutput::text("ran"))
            }),
        )
        .expect("register");
    let auth = BearerTokens::new()
        .with_token(&OLD["Bearer ".len()..], Principal::new("aggregator"))
        .with_token(&NEW["Bearer ".len()..], Principal::new("aggregator"));
    let config = loopback().auth(auth);
    let shutdown = config.shutdown.clone();
    let seen: Seen = Arc::default();
    let (tx, deletes) = mpsc::unbounded_channel();
    let recorded = Arc::clone(&seen);
    let app = router(
        McpApp::builder("upstream", "1").tools(tools).build(),
        &config,
    )
    .expect("router")
    .layer(axum::middleware::from_fn(move |req, next| {
        recording(Arc::clone(&recorded), tx.clone(), req, next)
    }));
    let (url, stop) = serve_router(app, shutdown).await;
    Upstream {
        url,
        seen,
        deletes,
        _stop: stop,
    }
}

async fn aggregate(url: &str) -> Aggregator {
    let config = AggregatorConfig::new().upstream(UpstreamConfig::new(
        "up",
        UpstreamTransport::http(url.to_string()).header("authorization", OLD),
    ));
    let agg = Aggregator::start(config, ToolRegistry::new()).expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );
    agg
}

async fn next_delete(up: &mut Upstream) -> Option<String> {
    tokio::time::timeout(WAIT, up.deletes.recv())
        .await
        .expect("the session was ended upstream")
        .expect("the recorder is alive")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rotation_the_session_is_ended_with_the_current_credential() {
    let mut up = upstream().await;
    let agg = aggregate(&up.url).await;
    agg.close_with_headers("up", vec![("authorization".into(), NEW.into())])
        .expect("an HTTP upstream");
    agg.shutdown().await;
    assert_eq!(next_delete(&mut up).await.as_deref(), Some(NEW));
    // Everything before the close went with the credential the connection was started with.
    let seen = up.seen.lock().expect("not poisoned").clone();
    assert!(
        seen.iter()
            .filter(|(m, _)| m != "DELETE")
            .all(|(_, a)| a.as_deref() == Some(OLD)),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_revocation_the_old_credential_is_not_sent_again() {
    let mut up = upstream().await;
    let agg = aggregate(&up.url).await;
    agg.close_with_headers("up", Vec::new())
        .expect("an HTTP upstream");
    // Dropped rather than shut down, as a connection whose credential is gone is.
    drop(agg);
    assert_eq!(next_delete(&mut up).await, None);
}

#[tokio::test]
async fn closing_headers_are_checked() {
    let up = upstream().await;
    let agg = aggregate(&up.url).await;
    assert!(agg.close_with_headers("nope", Vec::new()).is_err());
    assert!(
        agg.close_with_headers("up", vec![("authorization".into(), "a\nb".into())])
            .is_err()
    );
    agg.shutdown().await;
}
