//! Hosting: the router mounted beside an app's own routes at a custom path, graceful shutdown
//! of `serve` while a client holds an SSE stream open, and a 2026-07-28 call cancelled by the
//! client closing its request.

mod common;

use std::net::SocketAddr;

use axum::routing::get;
use common::*;
use kberg_server::{HttpConfig, Limits};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn router_mounts_beside_the_apps_own_routes() {
    let (app, _probe) = app();
    let config = HttpConfig::default().auth(auth()).path("/api/mcp");
    let mcp = kberg_server::router(app, &config).expect("router");
    let router = axum::Router::new()
        .route("/health", get(|| async { "ok" }))
        .merge(mcp);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stopped.cancelled().await })
            .await
    });
    let _guard = stop.clone().drop_guard();

    let health = reqwest::get(format!("http://{addr}/health"))
        .await
        .expect("health");
    assert_eq!(health.text().await.expect("body"), "ok");
    let c = Raw::new(&format!("http://{addr}/api/mcp"), Some(READER));
    let sid = c.initialize().await;
    let r = c
        .call_old(&sid, 1, "echo", json!({"text": "mounted"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "mounted");
    // The guard layer covers only the MCP route.
    let r = read(
        reqwest::get(format!("http://{addr}/mcp"))
            .await
            .expect("GET"),
    )
    .await;
    assert_eq!(r.status, 404);

    config.shutdown.cancel();
    stop.cancel();
    server.await.expect("join").expect("served");
}

#[tokio::test]
async fn bad_paths_are_configuration_errors() {
    let (app, _probe) = app();
    let err = kberg_server::router(app.clone(), &HttpConfig::default().path("mcp"))
        .expect_err("relative path");
    assert_eq!(err.code(), "invalid_config");
    let err = kberg_server::router(
        app,
        &HttpConfig::default().limits(Limits::default().max_calls_per_principal(0)),
    )
    .expect_err("zero calls");
    assert_eq!(err.code(), "invalid_config");
}

#[tokio::test]
async fn serve_shuts_down_gracefully_with_open_streams() {
    let (app, _probe) = app();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let config = HttpConfig::new(addr).auth(auth());
    let server = kberg_server::HttpServer::from_listener(listener, app, config).expect("server");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run(async move {
        let _ = rx.await;
    }));

    let c = Raw::new(&format!("http://{addr}/mcp"), Some(READER));
    let sid = c.initialize().await;
    let stream = c
        .http
        .get(&c.url)
        .header("accept", "text/event-stream")
        .header("authorization", format!("Bearer {READER}"))
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", PROTO_OLD)
        .send()
        .await
        .expect("GET stream");
    assert_eq!(stream.status().as_u16(), 200);

    tx.send(()).expect("signal");
    let result = tokio::time::timeout(kberg_testkit::WAIT, running)
        .await
        .expect("serve returned although a stream was open")
        .expect("join");
    assert!(result.is_ok(), "{result:?}");
    // The server ended the stream (its body completes, cleanly or cut).
    tokio::time::timeout(kberg_testkit::WAIT, stream.bytes())
        .await
        .expect("the SSE stream was ended by the shutdown")
        .ok();
    // Nothing listens any more.
    assert!(reqwest::get(format!("http://{addr}/mcp")).await.is_err());
}

#[tokio::test]
async fn closing_a_stateless_request_cancels_the_tool() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let call = tokio::spawn({
        let c = c.clone();
        async move {
            c.stateless(1, "tools/call", json!({"name": "slow", "arguments": {}}))
                .await
        }
    });
    tokio::time::timeout(kberg_testkit::WAIT, async {
        s.probe.started.lock().await.recv().await
    })
    .await
    .expect("slow tool started in time")
    .expect("started");
    call.abort();
    tokio::time::timeout(kberg_testkit::WAIT, async {
        s.probe.cancelled.lock().await.recv().await
    })
    .await
    .expect("the tool saw the disconnect as a cancellation")
    .expect("cancelled");
    let r = c
        .stateless(
            2,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "next"}}),
        )
        .await;
    assert_eq!(r.reply(2)["result"]["content"][0]["text"], "next");
}
