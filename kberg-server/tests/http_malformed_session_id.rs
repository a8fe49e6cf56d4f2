//! An `Mcp-Session-Id` that is not visible ASCII (the only characters a session id may hold,
//! 2025-11-25) names no session this server gave: like any other id it does not know, it is
//! `404 session_not_found`, on which a client starts a new session, whatever the method. Not
//! `400 session_required`, which told a client that sent an id to send one. A 2026-07-28
//! request ignores the header.

mod common;

use common::*;
use reqwest::header::HeaderValue;
use serde_json::{Value, json};

#[tokio::test]
async fn a_session_id_that_is_not_visible_ascii_is_not_found() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let malformed = HeaderValue::from_bytes(b"s\xe9ssion").expect("obs-text is a header value");
    let send = |method: reqwest::Method, body: Option<Value>| {
        let mut rb = c
            .http
            .request(method, &c.url)
            .header("authorization", format!("Bearer {READER}"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTO_OLD)
            .header("mcp-session-id", malformed.clone());
        if let Some(body) = body {
            rb = rb
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        async move { read(rb.send().await.expect("sent")).await }
    };
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let init = json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": PROTO_OLD, "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}});
    for (what, r) in [
        ("a request", send(reqwest::Method::POST, Some(list)).await),
        (
            "a notification",
            send(reqwest::Method::POST, Some(note)).await,
        ),
        (
            "an initialize",
            send(reqwest::Method::POST, Some(init)).await,
        ),
        ("GET", send(reqwest::Method::GET, None).await),
        ("DELETE", send(reqwest::Method::DELETE, None).await),
    ] {
        assert_eq!(r.status, 404, "{what}: {}", r.text);
        let v: Value = serde_json::from_str(&r.text).expect("a JSON refusal");
        assert_eq!(v["error"], "session_not_found", "{what}: {v}");
        assert!(
            r.header("mcp-session-id").is_none(),
            "{what}: no new session"
        );
    }

    // A 2026-07-28 request ignores the header.
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let r = read(
        c.http
            .post(&c.url)
            .header("authorization", format!("Bearer {READER}"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", PROTO_NEW)
            .header("mcp-method", "tools/list")
            .header("mcp-session-id", malformed.clone())
            .body(body.to_string())
            .send()
            .await
            .expect("sent"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.reply(3)["result"]["tools"].is_array(), "{}", r.text);

    let r = c.call_old(&sid, 4, "echo", json!({"text": "alive"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "alive", "{r}");
}
