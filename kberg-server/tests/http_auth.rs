//! Connection guardrails over real HTTP: bearer-token auth (401 with a `WWW-Authenticate:
//! Bearer` challenge, RFC 6750), DNS-rebinding protection (403 for a foreign `Host` or
//! `Origin`, checked before credentials), configurable allow-lists, session ownership, and
//! open mode.

mod common;

use std::net::SocketAddr;

use common::*;
use kberg_core::Principal;
use kberg_server::{HttpConfig, OpenAccess};
use serde_json::json;

fn init_body() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTO_OLD, "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}})
    .to_string()
}

#[tokio::test]
async fn missing_and_bad_tokens_get_401_with_a_bearer_challenge() {
    let s = start().await;
    let anon = Raw::new(&s.url, None);
    let r = anon.post_with(init_body(), &[]).await;
    assert_eq!(r.status, 401, "{}", r.text);
    let challenge = r.header("www-authenticate").expect("challenge");
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    assert!(!challenge.contains("invalid_token"), "{challenge}");

    for bad in [
        "Bearer nope",
        "Bearer reader-token-x",
        "Basic cmVhZGVyOng=",
        "Bearer",
    ] {
        let r = anon.post_with(init_body(), &[("authorization", bad)]).await;
        assert_eq!(r.status, 401, "{bad}: {}", r.text);
        let challenge = r.header("www-authenticate").expect("challenge");
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    }

    // GET and DELETE are guarded too.
    let r = read(
        anon.http
            .get(&s.url)
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("GET"),
    )
    .await;
    assert_eq!(r.status, 401);
    let r = read(anon.http.delete(&s.url).send().await.expect("DELETE")).await;
    assert_eq!(r.status, 401);

    // Stateless requests as well.
    let r = anon.stateless(1, "tools/list", json!({})).await;
    assert_eq!(r.status, 401);

    // The right token works.
    let ok = Raw::new(&s.url, Some(READER));
    let sid = ok.initialize().await;
    let r = ok.call_old(&sid, 1, "echo", json!({"text": "in"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "in");
}

#[tokio::test]
async fn foreign_host_or_origin_is_refused_before_auth() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let r = c.post_with(init_body(), &[("host", "evil.example")]).await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = c
        .post_with(
            init_body(),
            &[("host", "evil.example"), ("authorization", "")],
        )
        .await;
    assert_eq!(r.status, 403, "403 comes before 401: {}", r.text);
    let r = c
        .post_with(init_body(), &[("origin", "http://evil.example")])
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
    let r = c.post_with(init_body(), &[("origin", "null")]).await;
    assert_eq!(r.status, 403, "{}", r.text);
    // A local page (any port) is allowed.
    let r = c
        .post_with(init_body(), &[("origin", "http://localhost:5173")])
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c.post_with(init_body(), &[("host", "localhost")]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Unknown paths are not the endpoint.
    let r = read(
        c.http
            .get(format!("http://{}/other", s.addr))
            .send()
            .await
            .expect("GET"),
    )
    .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn allow_lists_are_configurable() {
    let config = HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)))
        .auth(auth())
        .allowed_hosts(["mcp.example"])
        .allowed_origins(["https://app.example"]);
    let s = start_config(config).await;
    let c = Raw::new(&s.url, Some(READER));
    let r = c.post_with(init_body(), &[]).await;
    assert_eq!(r.status, 403, "127.0.0.1 is no longer allowed: {}", r.text);
    let r = c.post_with(init_body(), &[("host", "mcp.example")]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c
        .post_with(
            init_body(),
            &[("host", "mcp.example"), ("origin", "https://app.example")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c
        .post_with(
            init_body(),
            &[("host", "mcp.example"), ("origin", "http://localhost:3000")],
        )
        .await;
    assert_eq!(r.status, 403, "{}", r.text);
}

#[tokio::test]
async fn a_session_belongs_to_its_principal() {
    let s = start().await;
    let writer = Raw::new(&s.url, Some(WRITER));
    let sid = writer.initialize().await;
    let reader = Raw::new(&s.url, Some(READER));
    let r = reader
        .post(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "add_note", "arguments": {"title": "x", "priority": 1}}}),
            Some(&sid),
        )
        .await;
    assert_eq!(
        r.status, 404,
        "another principal's session is unknown: {}",
        r.text
    );
    let r = writer
        .call_old(&sid, 2, "add_note", json!({"title": "x", "priority": 1}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "created x (p1)");
}

#[tokio::test]
async fn open_mode_serves_the_anonymous_principal() {
    let config = HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)))
        .auth(OpenAccess::as_principal(Principal::anonymous()));
    let s = start_config(config).await;
    let c = Raw::new(&s.url, None);
    let sid = c.initialize().await;
    let r = c.call_old(&sid, 1, "echo", json!({"text": "open"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "open");
    let r = c
        .call_old(&sid, 2, "add_note", json!({"title": "x", "priority": 1}))
        .await;
    assert_eq!(
        r["result"]["structuredContent"]["code"],
        "capability_required"
    );
}
