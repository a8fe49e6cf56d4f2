//! An upstream that quotes the credential the gateway injects in an encoded form, over real
//! HTTP on 127.0.0.1. A token with characters a URL or JSON writes differently (`/`, `+`, `=`:
//! a base64 API key) reaches an upstream's answer percent-encoded (an HTTP library's error
//! that names the URL it called, `?key=ab%2Fcd%2B...`, or a user part) or JSON-escaped (`\/`,
//! `\u002b`, from a backend's error body relayed as text), whole or only some of its
//! characters (an encoder that leaves `+` or `=` alone). Every such form is the token to
//! whoever reads it: none may reach the agent's answer, the audit log or the log. The gateway
//! scrubs the answers, and the aggregator under it (given the token only as it is) the errors
//! and log lines, with one search for the encoded forms.
//!
//! The upstream is a stand-in written from the Streamable HTTP transport's documented shapes:
//! JSON-RPC over POST, each request answered with one JSON body, notifications with 202, no
//! session id (GET answers 405).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;
use std::time::Duration;

use admin_support::gateway::Gw;
use admin_support::upstream::json_answer;
use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bridle_gateway::upstreams::FolderSecrets;
use bridle_rules::ReadWrite;
use kberg_testkit::eventually_async;
use kberg_testkit::log::LogBuffer;
use serde_json::{Value, json};

/// The secret the upstream's connection carries: a base64-style key, with `/`, `+` and `=`.
const CANARY: &str = "canary/Enc+Tok=9Qw/Xy==";

/// Every byte that is not a letter or a digit written `%XX`, as a URL's query is written.
fn percent(text: &str, upper: bool) -> String {
    text.bytes()
        .map(|b| match b {
            b if b.is_ascii_alphanumeric() => (b as char).to_string(),
            b if upper => format!("%{b:02X}"),
            b => format!("%{b:02x}"),
        })
        .collect()
}

/// The forms of [`CANARY`] the upstream quotes, and that none of the outputs may hold.
fn encoded_forms() -> Vec<String> {
    vec![
        CANARY.to_string(),
        percent(CANARY, true),
        percent(CANARY, false),
        // As PHP's json_encode writes it inside a string.
        CANARY.replace('/', "\\/"),
        // As an encoder that escapes `+` and `=` (Go's HTML-safe JSON escapes some) writes it.
        CANARY.replace('+', "\\u002b").replace('=', "\\u003D"),
        // Percent-encoded by a user-part encoder that leaves `+` and `=` as they are.
        CANARY.replace('/', "%2F"),
        // Partly encoded: some characters escaped, in either case, the others as they are.
        partly_percent(CANARY),
        partly_escaped(CANARY),
    ]
}

/// `text` with its `/` and `=` percent-encoded (`=` in lower case), `+` as it is.
fn partly_percent(text: &str) -> String {
    text.replace('/', "%2F").replace('=', "%3d")
}

/// `text` with its `/` JSON-escaped and its `+` percent-encoded, `=` as it is.
fn partly_escaped(text: &str) -> String {
    text.replace('/', "\\/").replace('+', "%2B")
}

/// Offers `fetch`, whose result quotes the token in every encoded form, as a text block (an
/// HTTP library's error naming the URL, a relayed JSON body) and in the structured content.
async fn stand_in(headers: HeaderMap, body: Bytes) -> Response {
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
    let token = auth.strip_prefix("Bearer ").unwrap_or(&auth).to_string();
    let result = |r: Value| json!({"jsonrpc": "2.0", "id": id, "result": r});
    match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json_answer(result(json!({
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "encoded", "version": "1"},
        }))),
        "tools/list" => json_answer(result(json!({"tools": [{
            "name": "fetch",
            "description": "Fetches from the backend.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": true},
        }]}))),
        "tools/call" => {
            // The forms are built from the header the stand-in was sent, not from the constant:
            // what it quotes is what the gateway injected.
            let forms = vec![
                percent(&token, true),
                percent(&token, false),
                token.replace('/', "\\/"),
                token.replace('+', "\\u002b").replace('=', "\\u003D"),
                token.replace('/', "%2F"),
                partly_percent(&token),
                partly_escaped(&token),
            ];
            let text = forms
                .iter()
                .map(|f| {
                    format!(
                        "Client error '401 Unauthorized' for url 'https://api.example/v1?key={f}'"
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            json_answer(result(json!({
                "content": [
                    {"type": "text", "text": text},
                    {"type": "resource_link", "uri": format!("https://bot:{}@api.example/", forms[4]), "name": "api"},
                ],
                "structuredContent": {"errors": forms},
            })))
        }
        "ping" => json_answer(result(json!({}))),
        _ => json_answer(json!({
            "jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": "Method not found"},
        })),
    }
}

/// Fails every `tools/list` with an error quoting the token in every encoded form (an HTTP
/// library's error naming the URL it called with the key), answers `initialize` and the rest.
async fn broken(headers: HeaderMap, body: Bytes) -> Response {
    let Ok(msg) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if msg["method"] != "tools/list" {
        return stand_in(headers, body).await;
    }
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let token = auth.strip_prefix("Bearer ").unwrap_or(auth);
    let forms = [
        percent(token, true),
        percent(token, false),
        token.replace('/', "\\/"),
        partly_percent(token),
        partly_escaped(token),
    ];
    json_answer(json!({
        "jsonrpc": "2.0", "id": msg["id"],
        "error": {"code": -32603, "message": format!("backend refused: {}", forms.join(" | "))},
    }))
}

async fn start_stand_in() -> String {
    let app = Router::new()
        .route(
            "/mcp",
            post(stand_in).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        )
        .route(
            "/broken",
            post(broken).get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

/// One stateless `tools/call` (protocol 2026-07-28) as `agent`: the raw body.
async fn call_raw(gw: &Gw, agent: &str, tool: &str) -> String {
    let r = gw.send_stateless_call(agent, tool, json!({})).await;
    r.text().await.unwrap()
}

fn assert_clean(what: &str, text: &str) {
    for form in encoded_forms() {
        assert!(
            !text.contains(&form),
            "{what} holds the token as `{form}`:\n{text}"
        );
        // The same form as it appears inside a JSON string (a backslash doubled).
        let in_json = form.replace('\\', "\\\\");
        assert!(
            !text.contains(&in_json),
            "{what} holds the token as `{in_json}`:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encoded_credential_an_upstream_quotes_reaches_no_agent_audit_or_log() {
    let logs = LogBuffer::default();
    logs.install_global(bridle_gateway::logging::log_targets("trace"));

    let url = start_stand_in().await;
    let secrets = tempfile::tempdir().unwrap();
    std::fs::write(secrets.path().join("api-key"), format!("{CANARY}\n")).unwrap();
    let broken = url.replace("/mcp", "/broken");
    let yaml = format!(
        "upstreams:\n  api:\n    http: {{url: '{url}'}}\n    credential: {{secret: api-key}}\n  down:\n    http: {{url: '{broken}'}}\n    credential: {{secret: api-key}}\n"
    );
    let folder = Arc::new(FolderSecrets::new(secrets.path()));
    let gw = Gw::start_with_yaml(&yaml, |b| {
        b.secrets(folder).connect_timeout(Duration::from_secs(3))
    })
    .await;
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let revision = doc.revision;
    doc.permissions.get_mut("claude").unwrap().tools.insert(
        "api".into(),
        ReadWrite {
            read: true,
            write: false,
        },
    );
    gw.ctx
        .store
        .save_edit("demo", &doc, revision, "test", "claude reads api")
        .unwrap();

    let raw = eventually_async("the upstream's tool is offered", || async {
        let raw = call_raw(&gw, "claude", "api__fetch").await;
        raw.contains("Client error").then_some(raw)
    })
    .await;
    assert!(raw.contains("[redacted]"), "{raw}");
    assert_clean("claude's answer", &raw);

    // An upstream whose listing fails quoting the token encoded: the operator's view, the
    // probe anyone may read, and the log name the failure without it.
    let integrations = eventually_async("down's error reported", || async {
        let list: Value = gw
            .get("/integrations")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        list.to_string()
            .contains("backend refused")
            .then(|| list.to_string())
    })
    .await;
    assert_clean("the admin API's integrations", &integrations);
    let readyz = gw.mcp.trim_end_matches("/mcp").to_string() + "/readyz";
    let body = gw
        .http
        .get(readyz)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("backend refused"), "{body}");
    assert_clean("/readyz", &body);
    assert_clean("the audit log", &gw.audit_export().await);
    assert_clean("the log", &logs.text());
    gw.stop().await;
}
