//! Refusals that depend on the path a request takes through the endpoint: the guard reads the
//! body of a session-less legacy request itself, and hands requests in a session and
//! 2026-07-28 requests with an `Mcp-Method` header to rmcp unread. Either way a client gets the
//! same documented answer, `{"error": "<code>", "message": "<sentence>"}` with the status and
//! code of its fault.

mod common;

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `request` as it is on a new connection and returns the status line, the headers
/// (names in lower case) and the body, read until the server closes the connection.
async fn exchange(addr: std::net::SocketAddr, request: &str) -> (String, String, String) {
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    socket.write_all(request.as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    tokio::time::timeout(kberg_testkit::WAIT, socket.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection after a broken body")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer).to_string();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (
        status.to_string(),
        headers.to_ascii_lowercase(),
        body.to_string(),
    )
}

/// A chunked body whose second chunk's size line is not a number: the body breaks off after
/// its first bytes, on every path, is `400 bad_body` and closes the connection (the rest of
/// the body cannot be told from the next request).
#[tokio::test]
async fn a_broken_body_is_400_bad_body_on_every_path() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let session = format!("Mcp-Session-Id: {sid}\r\nMCP-Protocol-Version: {PROTO_OLD}\r\n");
    let modern = format!("MCP-Protocol-Version: {PROTO_NEW}\r\nMcp-Method: tools/list\r\n");
    for (path, headers) in [
        ("in a session", session.as_str()),
        ("2026-07-28 with Mcp-Method", modern.as_str()),
        ("without a session", ""),
    ] {
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {READER}\r\n\
             Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\n{headers}\r\n5\r\n{{\"jso\r\nzz\r\n\r\n"
        );
        let (status, headers, body) = exchange(s.addr, &request).await;
        assert!(status.contains(" 400 "), "{path}: {status}\n{body}");
        assert!(
            headers.contains("content-type: application/json"),
            "{path}: {headers}"
        );
        assert!(headers.contains("connection: close"), "{path}: {headers}");
        let v: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert_eq!(v["error"], "bad_body", "{path}: {v}");
    }
    let r = c.call_old(&sid, 2, "echo", json!({"text": "alive"})).await;
    assert_eq!(r["result"]["content"][0]["text"], "alive", "{r}");
}

/// An unsupported `MCP-Protocol-Version` is `unsupported_protocol_version` however long the
/// value, and the sentence that quotes it stays short.
#[tokio::test]
async fn a_long_unsupported_protocol_version_keeps_its_code() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    for len in [20, 5_000, 60_000] {
        let version = "9".repeat(len);
        let r = c
            .post_with(
                list.clone(),
                &[("mcp-session-id", &sid), ("mcp-protocol-version", &version)],
            )
            .await;
        assert_eq!(r.status, 400, "{len}: {}", r.text);
        let v: Value = serde_json::from_str(&r.text).expect("a JSON refusal");
        assert_eq!(v["error"], "unsupported_protocol_version", "{len}: {v}");
        let message = v["message"].as_str().expect("a sentence");
        assert!(message.contains("MCP-Protocol-Version"), "{len}: {message}");
        assert!(message.len() <= 4_200, "{len}: {} bytes", message.len());
    }
}

/// A `Host` that is missing or not a host (a port that is not a number) is a malformed
/// request, `400 bad_request`; a well-formed host that is not allowed is `403 forbidden`.
#[tokio::test]
async fn a_malformed_host_is_400_bad_request_and_a_foreign_one_403_forbidden() {
    let s = start().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    for (host, want_status, want_code) in [
        ("Host: localhost:notaport\r\n", " 400 ", "bad_request"),
        ("", " 400 ", "bad_request"),
        ("Host: evil.example\r\n", " 403 ", "forbidden"),
    ] {
        let version = if host.is_empty() { "1.0" } else { "1.1" };
        let request = format!(
            "POST /mcp HTTP/{version}\r\n{host}Authorization: Bearer {READER}\r\n\
             Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
             Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let (status, _, answer) = exchange(s.addr, &request).await;
        assert!(status.contains(want_status), "{host:?}: {status}\n{answer}");
        let v: Value =
            serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{host:?}: {e}: {answer}"));
        assert_eq!(v["error"], want_code, "{host:?}: {v}");
    }
}
