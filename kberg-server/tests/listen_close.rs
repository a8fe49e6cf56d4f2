//! A 2026-07-28 client that ends its `subscriptions/listen` by closing the stream (the normal
//! way) leaves no ERROR in the server's log, and the listen's subscriptions end.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use kberg_testkit::log::LogBuffer;
use serde_json::json;

// One thread: the subscriber set below sees every task of the server.
#[tokio::test(flavor = "current_thread")]
async fn closing_a_listen_stream_logs_no_error() {
    let captured = LogBuffer::default();
    let _guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::DEBUG));

    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let body = json!({"jsonrpc": "2.0", "id": "listen-close", "method": "subscriptions/listen", "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
            "io.modelcontextprotocol/clientCapabilities": {},
        },
        "notifications": {"toolsListChanged": true, "resourceSubscriptions": ["notes://1"]}
    }});
    let resp = c
        .http
        .post(&c.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {READER}"))
        .header("mcp-protocol-version", PROTO_NEW)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .expect("listen");
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = resp.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("notifications/subscriptions/acknowledged") {
        let chunk = tokio::time::timeout(kberg_testkit::WAIT, stream.next())
            .await
            .expect("the acknowledgement in time")
            .expect("stream open")
            .expect("chunk");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(s.app.resources().subscriber_count("notes://1"), 1);

    drop(stream);
    // rmcp logs "serve finished" when the request's service has ended (after its drain).
    let log = tokio::time::timeout(kberg_testkit::WAIT, async {
        loop {
            let text = captured.text();
            if text.contains("serve finished")
                && s.app.resources().subscriber_count("notes://1") == 0
            {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the listen never ended; log so far:\n{}", captured.text()));
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(
        errors.is_empty(),
        "ERROR lines on a normal close: {errors:#?}"
    );
    assert!(
        !log.contains("task cancelled"),
        "the listen was cancelled rather than ended:\n{log}"
    );
}
