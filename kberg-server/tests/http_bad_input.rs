//! Bad input over raw HTTP: each malformed request gets the answer the MCP Streamable HTTP
//! specification prescribes (2025-11-25 and 2026-07-28), and the server keeps serving.
//!
//! Shapes reproduced: JSON-RPC 2.0 error objects (`-32700` parse error, `-32600` invalid
//! request, `-32601` method not found, `-32602` invalid params); HTTP `406` for an `Accept`
//! without both `application/json` and `text/event-stream`, `415` for a non-JSON content type,
//! `413` for an oversized body, `404` for an unknown session, `400` for a missing session or an
//! unsupported / contradictory `MCP-Protocol-Version`.

mod common;

use common::*;
use kberg_server::Limits;
use serde_json::{Value, json};

async fn still_serves(c: &Raw, sid: &str) {
    let r = c.call_old(sid, 999, "echo", json!({"text": "alive"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "alive", "{r}");
    let r = c
        .stateless(
            998,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "alive"}}),
        )
        .await;
    assert_eq!(
        r.reply(998)["result"]["content"][0]["text"],
        "alive",
        "{}",
        r.text
    );
}

fn error_message(r: &Resp) -> String {
    r.messages()
        .into_iter()
        .find_map(|m| m["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn error_code(r: &Resp) -> Value {
    r.messages()
        .into_iter()
        .find_map(|m| m.get("error").map(|e| e["code"].clone()))
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn malformed_json_is_a_parse_error() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    for body in ["{not json", "", "[1, 2", "\"just a string\""] {
        let r = c.post_with(body.to_string(), &[]).await;
        assert_eq!(r.status, 400, "{body:?}: {}", r.text);
        let r = c
            .post_with(
                body.to_string(),
                &[
                    ("mcp-session-id", &sid),
                    ("mcp-protocol-version", PROTO_OLD),
                ],
            )
            .await;
        assert_eq!(r.status, 400, "{body:?} in a session: {}", r.text);
    }
    let r = c.post_with("{not json".to_string(), &[]).await;
    assert_eq!(error_code(&r), json!(-32700), "{}", r.text);
    let r = c
        .post_with(
            "{not json".to_string(),
            &[
                ("mcp-session-id", &sid),
                ("mcp-protocol-version", PROTO_OLD),
            ],
        )
        .await;
    assert_eq!(error_code(&r), json!(-32700), "in a session: {}", r.text);
    // A 2026-07-28 request (its method in the Mcp-Method header) gets the same answers.
    let modern = [
        ("mcp-protocol-version", PROTO_NEW),
        ("mcp-method", "tools/list"),
    ];
    let r = c.post_with("{not json".to_string(), &modern).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(error_code(&r), json!(-32700), "{}", r.text);
    let r = c
        .post_with(
            json!({"jsonrpc": "1.0", "id": 1, "method": "tools/list"}).to_string(),
            &modern,
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(error_code(&r), json!(-32600), "{}", r.text);
    let r = c
        .post_with(
            "[{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"ping\"}]".to_string(),
            &[],
        )
        .await;
    assert_eq!(r.status, 400, "batch: {}", r.text);
    assert_eq!(error_code(&r), json!(-32600), "batch: {}", r.text);
    still_serves(&c, &sid).await;
}

#[tokio::test]
async fn wrong_jsonrpc_version_is_rejected() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let r = c
        .post(
            json!({"jsonrpc": "1.0", "id": 1, "method": "tools/list"}),
            Some(&sid),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(error_code(&r), json!(-32600), "{}", r.text);
    let r = c
        .post(json!({"id": 1, "method": "tools/list"}), Some(&sid))
        .await;
    assert_eq!(r.status, 400, "missing jsonrpc: {}", r.text);
    assert_eq!(error_code(&r), json!(-32600), "{}", r.text);
    still_serves(&c, &sid).await;
}

#[tokio::test]
async fn accept_and_content_type_are_checked() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let session = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", PROTO_OLD),
    ];
    for accept in ["application/json", "text/event-stream", "text/html", ""] {
        let mut h = session.to_vec();
        h.push(("accept", accept));
        let r = c.post_with(body.clone(), &h).await;
        assert_eq!(r.status, 406, "accept {accept:?}: {}", r.text);
    }
    for ct in ["text/plain", "application/x-www-form-urlencoded", ""] {
        let mut h = session.to_vec();
        h.push(("content-type", ct));
        let r = c.post_with(body.clone(), &h).await;
        assert_eq!(r.status, 415, "content-type {ct:?}: {}", r.text);
    }
    // GET without accepting SSE.
    let r = read(
        c.http
            .get(&c.url)
            .header("authorization", format!("Bearer {READER}"))
            .header("accept", "application/json")
            .header("mcp-session-id", &sid)
            .send()
            .await
            .expect("GET"),
    )
    .await;
    assert_eq!(r.status, 406, "{}", r.text);
    // Methods other than GET, POST, DELETE.
    let r = read(
        c.http
            .put(&c.url)
            .header("authorization", format!("Bearer {READER}"))
            .send()
            .await
            .expect("PUT"),
    )
    .await;
    assert_eq!(r.status, 405, "{}", r.text);
    still_serves(&c, &sid).await;
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let s = start_with(Limits::default().max_body_bytes(4096)).await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "echo", "arguments": {"text": "x".repeat(10_000)}}});
    let r = c.post(big.clone(), Some(&sid)).await;
    assert_eq!(r.status, 413, "in a session: {}", r.text);
    // The unread rest of the body ends the connection; the client is told not to reuse it.
    assert_eq!(r.headers["connection"], "close");
    let r = c.post(big.clone(), None).await;
    assert_eq!(r.status, 413, "without a session: {}", r.text);
    let r = c.stateless(1, "tools/call", big["params"].clone()).await;
    assert_eq!(r.status, 413, "stateless: {}", r.text);
    // Just under the limit still works.
    let ok = c
        .call_old(&sid, 2, "echo", json!({"text": "x".repeat(3000)}))
        .await;
    assert_eq!(
        ok["result"]["content"][0]["text"].as_str().map(str::len),
        Some(3000)
    );
    still_serves(&c, &sid).await;
}

#[tokio::test]
async fn unknown_and_missing_sessions() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let r = c.post(list.clone(), Some("no-such-session")).await;
    assert_eq!(r.status, 404, "{}", r.text);
    // A legacy request without a session id (and without 2026-07-28 metadata).
    let r = c.post(list.clone(), None).await;
    assert_eq!(r.status, 400, "{}", r.text);
    // DELETE ends the session; it is unknown afterwards.
    let r = read(
        c.http
            .delete(&c.url)
            .header("authorization", format!("Bearer {READER}"))
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", PROTO_OLD)
            .send()
            .await
            .expect("DELETE"),
    )
    .await;
    assert!(
        r.status == 200 || r.status == 202 || r.status == 204,
        "{} {}",
        r.status,
        r.text
    );
    let r = c.post(list, Some(&sid)).await;
    assert_eq!(r.status, 404, "{}", r.text);
    // Ending it again, or ending a session that never was, is 404 like any other request.
    for gone in [sid.as_str(), "no-such-session"] {
        let r = read(
            c.http
                .delete(&c.url)
                .header("authorization", format!("Bearer {READER}"))
                .header("mcp-session-id", gone)
                .header("mcp-protocol-version", PROTO_OLD)
                .send()
                .await
                .expect("DELETE"),
        )
        .await;
        assert_eq!(r.status, 404, "{gone}: {}", r.text);
    }
    let sid = c.initialize().await;
    still_serves(&c, &sid).await;
}

#[tokio::test]
async fn unsupported_and_contradictory_protocol_versions() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();

    // Unsupported header version in a session.
    let r = c
        .post_with(
            list.clone(),
            &[
                ("mcp-session-id", &sid),
                ("mcp-protocol-version", "1999-01-01"),
            ],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);

    // initialize with an unknown version negotiates a supported one (not an error).
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
            "protocolVersion": "1999-01-01", "capabilities": {},
            "clientInfo": {"name": "old", "version": "0"}}}),
            None,
        )
        .await;
    let v = r.reply(2)["result"]["protocolVersion"].clone();
    assert!(v.as_str().is_some_and(|v| v >= "2024-11-05"), "{}", r.text);

    // 2026-07-28: _meta names a version the server does not support.
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2099-01-01",
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let r = c
        .post_with(
            body.to_string(),
            &[
                ("mcp-protocol-version", "2099-01-01"),
                ("mcp-method", "tools/list"),
            ],
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);

    // Header and _meta disagree.
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": PROTO_OLD,
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let r = c
        .post_with(
            body.to_string(),
            &[
                ("mcp-protocol-version", PROTO_NEW),
                ("mcp-method", "tools/list"),
            ],
        )
        .await;
    assert_eq!(r.status, 400, "header vs _meta: {}", r.text);

    // Mcp-Method header and body disagree.
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let r = c
        .post_with(
            body.to_string(),
            &[
                ("mcp-protocol-version", PROTO_NEW),
                ("mcp-method", "tools/call"),
            ],
        )
        .await;
    assert_eq!(r.status, 400, "Mcp-Method vs body: {}", r.text);

    // 2026-07-28 without the required _meta.
    let body = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": PROTO_NEW}}});
    let r = c
        .post_with(
            body.to_string(),
            &[
                ("mcp-protocol-version", PROTO_NEW),
                ("mcp-method", "tools/list"),
            ],
        )
        .await;
    assert_eq!(
        error_code(&r),
        json!(-32602),
        "missing clientCapabilities: {}",
        r.text
    );
    still_serves(&c, &sid).await;
}

#[tokio::test]
async fn unknown_methods_and_invalid_params() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/explode"}),
            Some(&sid),
        )
        .await;
    assert_eq!(error_code(&r), json!(-32601), "{}", r.text);
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": 5}}),
            Some(&sid),
        )
        .await;
    assert_eq!(error_code(&r), json!(-32602), "{}", r.text);
    // The message says what is wrong with the params.
    assert!(
        error_message(&r)
            .starts_with("invalid params for `tools/call`: invalid type: integer `5`, expected"),
        "{}",
        r.text
    );
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {}}),
            Some(&sid),
        )
        .await;
    assert_eq!(error_code(&r), json!(-32602), "{}", r.text);
    assert_eq!(
        error_message(&r),
        "invalid params for `resources/read`: missing field `uri`",
        "{}",
        r.text
    );
    let r = c
        .post(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"cursor": "garbage"}}), Some(&sid))
        .await;
    assert_eq!(error_code(&r), json!(-32602), "bad cursor: {}", r.text);
    let r = c
        .post(json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/get", "params": {"name": "greet", "arguments": {"name": 7}}}), Some(&sid))
        .await;
    assert_eq!(
        error_code(&r),
        json!(-32602),
        "non-string prompt argument: {}",
        r.text
    );
    // A long key and a large value are not quoted back whole.
    let key = "k".repeat(10_000);
    let value = json!({"blob": "v".repeat(100_000)});
    let r = c
        .post(json!({"jsonrpc": "2.0", "id": 7, "method": "prompts/get", "params": {"name": "greet", "arguments": {key.clone(): value}}}), Some(&sid))
        .await;
    assert_eq!(
        error_code(&r),
        json!(-32602),
        "{}",
        &r.text[..200.min(r.text.len())]
    );
    assert!(
        r.text.len() < 1_000,
        "the error quotes the client's input: {} bytes",
        r.text.len()
    );
    assert!(r.text.contains("got an object"), "{}", r.text);
    let r = c.stateless(6, "tools/explode", json!({})).await;
    assert_eq!(
        error_code(&r),
        json!(-32601),
        "stateless unknown method: {}",
        r.text
    );
    still_serves(&c, &sid).await;
}

#[tokio::test]
async fn batches_and_scalars_in_a_session_are_invalid_requests() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let session = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", PROTO_OLD),
    ];
    for body in [
        r#"[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]"#,
        "42",
        r#"{"jsonrpc": "2.0", "id": {"nested": true}, "method": "ping"}"#,
    ] {
        let r = c.post_with(body.to_string(), &session).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(error_code(&r), json!(-32600), "{body}: {}", r.text);
    }
    still_serves(&c, &sid).await;
}

/// `{"jsonrpc":"2.0"}` is valid JSON and names the version, but it is neither a request (no
/// `method`) nor a response (no `id` with `result` or `error`): JSON-RPC calls that an invalid
/// request, `400` with `-32600`, on every path a POST can take (with and without a session,
/// both protocol generations, with and without `Mcp-Method`), never rmcp's `415`.
#[tokio::test]
async fn a_message_that_is_neither_request_nor_response_is_an_invalid_request() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let bodies = [
        r#"{"jsonrpc":"2.0"}"#,
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
    ];
    let paths: [(&str, Vec<(&str, &str)>); 4] = [
        ("no session", vec![]),
        (
            "in a session",
            vec![
                ("mcp-session-id", sid.as_str()),
                ("mcp-protocol-version", PROTO_OLD),
            ],
        ),
        (
            "2026-07-28 with Mcp-Method",
            vec![
                ("mcp-protocol-version", PROTO_NEW),
                ("mcp-method", "tools/list"),
            ],
        ),
        (
            "2026-07-28 without Mcp-Method",
            vec![("mcp-protocol-version", PROTO_NEW)],
        ),
    ];
    for body in bodies {
        for (path, headers) in &paths {
            let r = c.post_with(body.to_string(), headers).await;
            assert_eq!(r.status, 400, "{body} ({path}): {}", r.text);
            assert_eq!(error_code(&r), json!(-32600), "{body} ({path}): {}", r.text);
        }
    }
    still_serves(&c, &sid).await;
}

#[tokio::test]
async fn initialize_under_an_unknown_protocol_version_header_is_a_bad_request() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    for version in ["2099-01-01", "zzz", "9"] {
        let r = c
            .post_with(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": PROTO_OLD, "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"}}})
                .to_string(),
                &[("mcp-protocol-version", version)],
            )
            .await;
        assert_eq!(r.status, 400, "{version}: {}", r.text);
        assert!(r.header("mcp-session-id").is_none(), "{version}: a session");
    }
    // The known 2026-07-28 version still learns that initialize is gone there.
    let r = c
        .post_with(
            json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
                "protocolVersion": PROTO_NEW, "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}})
            .to_string(),
            &[("mcp-protocol-version", PROTO_NEW)],
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(error_code(&r), json!(-32601), "{}", r.text);
}

#[tokio::test]
async fn a_second_initialize_in_a_session_is_refused_and_changes_nothing() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let again = c
        .post(
            json!({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {
                "protocolVersion": PROTO_NEW, "capabilities": {},
                "clientInfo": {"name": "other", "version": "1"}}}),
            Some(&sid),
        )
        .await;
    assert_eq!(again.reply(9)["error"]["code"], -32600, "{}", again.text);
    // The session is still served as the 2025-11-25 session it was negotiated as: `ping`
    // (which 2026-07-28 removed) is answered.
    let ping = c
        .post(
            json!({"jsonrpc": "2.0", "id": 10, "method": "ping"}),
            Some(&sid),
        )
        .await;
    assert_eq!(ping.reply(10)["result"], json!({}), "{}", ping.text);
    still_serves(&c, &sid).await;
}

#[tokio::test]
async fn a_prompts_list_cursor_the_server_never_gave_is_invalid_params() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/list",
                   "params": {"cursor": "made-up"}}),
            Some(&sid),
        )
        .await;
    assert_eq!(r.reply(1)["error"]["code"], -32602, "{}", r.text);
    let r = c
        .stateless(2, "prompts/list", json!({"cursor": "made-up"}))
        .await;
    assert_eq!(error_code(&r), json!(-32602), "{}", r.text);
    // Without one, the whole list.
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 3, "method": "prompts/list"}),
            Some(&sid),
        )
        .await;
    assert!(r.reply(3)["result"]["prompts"].is_array(), "{}", r.text);
}

/// The code and sentence of a refusal answered at the HTTP level: JSON
/// `{"error": "<code>", "message": "<sentence>"}`, never a bare text body.
fn http_refusal(r: &Resp) -> (String, String) {
    let ct = r.header("content-type").unwrap_or_default();
    assert!(
        ct.starts_with("application/json"),
        "{} answered as {ct:?}: {}",
        r.status,
        r.text
    );
    let v: Value = serde_json::from_str(&r.text).expect("a JSON refusal");
    let code = v["error"].as_str().expect("a code").to_string();
    let message = v["message"].as_str().expect("a sentence").to_string();
    assert!(!message.is_empty(), "{v}");
    (code, message)
}

/// rmcp answers its HTTP-level refusals in plain text; the endpoint answers every refusal in
/// its own JSON shape, with a stable code, the status and rmcp's sentence kept.
#[tokio::test]
async fn every_http_level_refusal_is_json_with_a_stable_code() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let session = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", PROTO_OLD),
    ];
    let with = |extra: (&'static str, &'static str)| {
        let mut h = session.to_vec();
        h.push(extra);
        h
    };
    let cases = [
        (
            c.post_with(list.to_string(), &with(("accept", "text/html")))
                .await,
            406,
            "not_acceptable",
        ),
        (
            c.post_with(list.to_string(), &with(("content-type", "text/plain")))
                .await,
            415,
            "unsupported_media_type",
        ),
        (
            c.post_with(
                list.to_string(),
                &with(("mcp-protocol-version", "2099-01-01")),
            )
            .await,
            400,
            "unsupported_protocol_version",
        ),
        (
            c.post(list.clone(), Some("no-such-session")).await,
            404,
            "session_not_found",
        ),
        (c.post(list.clone(), None).await, 400, "session_required"),
    ];
    for (r, status, code) in &cases {
        assert_eq!(r.status, *status, "{code}: {}", r.text);
        assert_eq!(http_refusal(r).0, *code, "{}", r.text);
    }
    let get = |accept: &'static str, session: &str| {
        c.http
            .get(&c.url)
            .header("authorization", format!("Bearer {READER}"))
            .header("accept", accept)
            .header("mcp-session-id", session.to_string())
            .send()
    };
    let r = read(get("application/json", &sid).await.expect("GET")).await;
    assert_eq!(r.status, 406, "{}", r.text);
    assert_eq!(http_refusal(&r).0, "not_acceptable");
    let r = read(
        get("text/event-stream", "no-such-session")
            .await
            .expect("GET"),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(http_refusal(&r).0, "session_not_found");
    let r = read(
        c.http
            .put(&c.url)
            .header("authorization", format!("Bearer {READER}"))
            .send()
            .await
            .expect("PUT"),
    )
    .await;
    assert_eq!(r.status, 405, "{}", r.text);
    assert_eq!(http_refusal(&r).0, "method_not_allowed");
    assert_eq!(r.header("allow").as_deref(), Some("GET, POST, DELETE"));
    still_serves(&c, &sid).await;
}

/// An `initialize` whose params are not an initialize request's is `-32602` naming what is
/// wrong, with the request's id and no session; rmcp alone read it as some other request and
/// answered that a session is required.
#[tokio::test]
async fn an_initialize_with_malformed_params_is_invalid_params() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let client = json!({"name": "t", "version": "0"});
    for (params, names) in [
        (
            json!({"protocolVersion": 5, "capabilities": {}, "clientInfo": client}),
            "protocolVersion",
        ),
        (
            json!({"protocolVersion": PROTO_OLD, "capabilities": {}}),
            "clientInfo",
        ),
        (
            json!({"protocolVersion": PROTO_OLD, "capabilities": [], "clientInfo": client}),
            "capabilities",
        ),
        (json!("initialize"), "params must be an object"),
        (Value::Null, "no params"),
    ] {
        let mut body = json!({"jsonrpc": "2.0", "id": "init-1", "method": "initialize"});
        if !params.is_null() {
            body["params"] = params.clone();
        }
        let r = c.post(body, None).await;
        assert_eq!(r.status, 400, "{params}: {}", r.text);
        assert_eq!(error_code(&r), json!(-32602), "{params}: {}", r.text);
        let message = error_message(&r);
        assert!(
            message.contains("initialize") && message.contains(names),
            "{params}: {message}"
        );
        let ids: Vec<Value> = r.messages().iter().map(|m| m["id"].clone()).collect();
        assert_eq!(ids, [json!("init-1")], "{}", r.text);
        assert!(r.header("mcp-session-id").is_none(), "{params}: a session");
    }
    // A sound initialize still opens a session.
    let sid = c.initialize().await;
    still_serves(&c, &sid).await;
}

/// An array is never one message, even one serde could read field by field.
#[tokio::test]
async fn arrays_are_batches_whatever_they_hold() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    for body in [
        "[]",
        r#"["2.0", "initialize"]"#,
        r#"["2.0", "tools/list", 1]"#,
    ] {
        let r = c.post_with(body.to_string(), &[]).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        assert_eq!(error_code(&r), json!(-32600), "{body}: {}", r.text);
        assert!(error_message(&r).contains("batches"), "{body}: {}", r.text);
    }
}
