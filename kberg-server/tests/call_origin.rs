//! kberg-server fills each call's origin (`CallOptions::origin`) over real Streamable HTTP: on a
//! 2025-11-25 session the `Mcp-Session-Id` and the `initialize`'s clientInfo, one shared value
//! for every call of the session; on 2026-07-28 no session and the clientInfo of the request's
//! `_meta`, or nothing at all when it carries none. The tool sees it (`ToolContext::session`,
//! `ToolContext::client`) and so does the audit sink (`AuditEvent::origin`), for calls that
//! ran and calls the gate refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::sync::{Arc, Mutex};

use kberg_core::{ClientInfo, MemoryAuditSink, Principal, ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::{McpApp, OpenAccess};
use kberg_testkit::serve::{RunningServer, loopback};
use serde_json::{Value, json};

type Seen = Arc<Mutex<Vec<(Option<String>, Option<ClientInfo>)>>>;

async fn server() -> (RunningServer, Arc<MemoryAuditSink>, Seen) {
    let seen: Seen = Arc::default();
    let s = Arc::clone(&seen);
    let sink = Arc::new(MemoryAuditSink::new());
    let tools = ToolRegistry::builder().audit_sink(sink.clone()).build();
    tools
        .register(ToolBuilder::new("whoami").raw_handler(
            json!({"type": "object"}),
            move |_a, ctx| {
                s.lock()
                    .unwrap()
                    .push((ctx.session().map(str::to_string), ctx.client().cloned()));
                async { Ok(ToolOutput::text("seen")) }
            },
        ))
        .unwrap();
    let server = RunningServer::start(
        McpApp::builder("origin", "1").tools(tools).build(),
        loopback().auth(OpenAccess::as_principal(Principal::new("agent"))),
    )
    .await;
    (server, sink, seen)
}

/// One JSON-RPC POST; the answer's body as text and its `Mcp-Session-Id`.
async fn post(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, Option<String>, String) {
    let mut req = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let sid = r
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_string());
    (status, sid, r.text().await.unwrap())
}

/// A 2025-11-25 session (`initialize` with `client_info`, then `notifications/initialized`);
/// its id.
async fn open_session(http: &reqwest::Client, url: &str, client_info: Value) -> String {
    let (status, sid, text) = post(
        http,
        url,
        &[],
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info}}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let sid = sid.expect("a session id");
    let h = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let (status, _, _) = post(
        http,
        url,
        &h,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    sid
}

fn call(id: u64, tool: &str, meta: Option<Value>) -> Value {
    let mut params = json!({"name": tool, "arguments": {}});
    if let Some(m) = meta {
        params["_meta"] = m;
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_names_its_id_and_client_on_every_call_and_in_the_audit() {
    let (server, sink, seen) = server().await;
    let http = reqwest::Client::new();
    let sid = open_session(
        &http,
        &server.url,
        json!({"name": "probe", "version": "1.2"}),
    )
    .await;
    let h = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    for id in [2, 3] {
        let (status, _, text) = post(&http, &server.url, &h, call(id, "whoami", None)).await;
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("seen"), "{text}");
    }
    let (_, _, text) = post(&http, &server.url, &h, call(4, "no_such_tool", None)).await;
    assert!(text.contains("error"), "{text}");

    let probe = ClientInfo::new("probe", "1.2");
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (Some(sid.clone()), Some(probe.clone())),
            (Some(sid.clone()), Some(probe.clone())),
        ]
    );
    let events = sink.events();
    assert_eq!(events.len(), 3, "{events:?}");
    for e in &events {
        let o = e.origin.as_ref().expect("an origin");
        assert_eq!(o.session.as_deref(), Some(sid.as_str()));
        assert_eq!(o.client.as_ref(), Some(&probe));
    }
    assert_eq!(events[2].tool, "no_such_tool");
    assert!(e_is_error(&events[2]));
    // One origin for the whole session, shared rather than copied per call.
    assert!(Arc::ptr_eq(
        events[0].origin.as_ref().unwrap(),
        events[1].origin.as_ref().unwrap()
    ));
    let record = events[0].to_record();
    assert_eq!(record["session"], sid.as_str());
    assert_eq!(record["client"]["name"], "probe");
}

fn e_is_error(e: &kberg_core::AuditEvent) -> bool {
    matches!(e.outcome, kberg_core::AuditOutcome::Error(_))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_request_gives_only_the_client_its_meta_carries() {
    let (server, sink, seen) = server().await;
    let http = reqwest::Client::new();
    let h = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "whoami"),
    ];
    let with = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2.1.0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let without = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    for (id, meta) in [(1, with), (2, without)] {
        let (status, sid, text) =
            post(&http, &server.url, &h, call(id, "whoami", Some(meta))).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(sid, None);
    }
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (None, Some(ClientInfo::new("claude-code", "2.1.0"))),
            (None, None)
        ]
    );
    let events = sink.events();
    assert_eq!(events.len(), 2, "{events:?}");
    let first = events[0]
        .origin
        .as_ref()
        .expect("the request named its client");
    assert_eq!(first.session, None);
    assert_eq!(
        first.client.as_ref().map(|c| c.name.as_str()),
        Some("claude-code")
    );
    assert!(events[1].origin.is_none(), "{:?}", events[1]);
    assert_eq!(events[1].to_record()["client"], Value::Null);
    assert_eq!(events[1].to_record()["session"], Value::Null);
}

/// A client's self-reported name, version and title are kept cut (to 256 characters each): a
/// session's `initialize` of megabytes of clientInfo was repeated whole in the audit record of
/// every call of that session, and a 2026-07-28 request's in the record of its call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_client_info_is_kept_cut() {
    let (server, sink, seen) = server().await;
    let http = reqwest::Client::new();
    let big = |c: &str| c.repeat(100_000);
    let sid = open_session(
        &http,
        &server.url,
        json!({"name": big("n"), "version": big("v"), "title": big("t")}),
    )
    .await;
    let h = [
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let (status, _, text) = post(&http, &server.url, &h, call(2, "whoami", None)).await;
    assert_eq!(status, 200, "{text}");
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": big("n"), "version": big("v"), "title": big("t")},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let stateless = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "whoami"),
    ];
    let (status, _, text) = post(
        &http,
        &server.url,
        &stateless,
        call(3, "whoami", Some(meta)),
    )
    .await;
    assert_eq!(status, 200, "{text}");

    let events = sink.events();
    assert_eq!(events.len(), 2, "{events:?}");
    let mut clients: Vec<ClientInfo> = events
        .iter()
        .map(|e| {
            e.origin
                .as_ref()
                .and_then(|o| o.client.clone())
                .expect("a client")
        })
        .collect();
    clients.extend(seen.lock().unwrap().iter().filter_map(|(_, c)| c.clone()));
    assert_eq!(clients.len(), 4);
    for c in clients {
        for (field, letter) in [(&c.name, 'n'), (&c.version, 'v')] {
            assert!(field.chars().count() <= 259, "{}", field.len());
            assert!(field.starts_with(letter) && field.ends_with("..."));
        }
        let title = c.title.expect("a title");
        assert!(title.chars().count() <= 259 && title.starts_with('t'));
    }
}
