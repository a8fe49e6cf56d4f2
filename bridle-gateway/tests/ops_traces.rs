//! OpenTelemetry traces (feature `traces`), collected by the SDK's in-memory exporter: one
//! `tools/call` through the gateway to a Kberg upstream on loopback (which traces its own
//! endpoint the same way) is one connected trace under the caller's `traceparent`: the
//! gateway's server span, its client span for the forwarded call, and the upstream's server
//! span, parent to child, with the MCP conventions' names and attributes and no argument value
//! anywhere. Without traces the gateway makes no span and still passes the caller's trace
//! context on; a collector that never answers does not hold calls up; a bad `traces:` section
//! is refused with its code.
//!
//! Each test runs on a current-thread runtime with the trace layer as its thread's default
//! subscriber, so the gateway, the upstream and their spawned tasks all report to it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod ops_support;

use std::sync::{Arc, Mutex};

use bridle_gateway::telemetry::{Telemetry, TracesSection, http::trace_requests};
use kberg_core::{ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::{HttpConfig, HttpServer, McpApp, OpenAccess};
use kberg_testkit::{eventually_async, eventually_async_ok};
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use ops_support::{bind, data_dir, run, token};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;

const ARG_CANARY: &str = "argument-canary-5d1c";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
/// The credential the gateway injects into the `tickets` upstream's requests, shaped as a
/// refusal code would be.
const CREDENTIAL_CANARY: &str = "tkn_credential_canary_7e31";

#[derive(Debug, Deserialize, JsonSchema)]
struct EchoArgs {
    text: String,
}

/// A Kberg upstream on loopback with `echo` and `fail` tools, its endpoint traced (`traced`)
/// or not; every `_meta` its tools receive is kept.
struct Upstream {
    url: String,
    stop: CancellationToken,
    metas: Arc<Mutex<Vec<Value>>>,
}

async fn upstream(traced: bool) -> Upstream {
    let metas = Arc::new(Mutex::new(Vec::new()));
    let tools = ToolRegistry::new();
    let seen = Arc::clone(&metas);
    tools
        .register(
            ToolBuilder::new("echo")
                .description("Answers its text.")
                .read()
                .handler(move |a: EchoArgs, ctx| {
                    let seen = Arc::clone(&seen);
                    async move {
                        seen.lock()
                            .unwrap()
                            .push(ctx.meta().cloned().unwrap_or(Value::Null));
                        Ok(ToolOutput::text(format!("{} chars", a.text.len())))
                    }
                }),
        )
        .unwrap();
    tools
        .register(
            ToolBuilder::new("fail")
                .description("Always answers an error result.")
                .read()
                .handler(|_a: EchoArgs, _ctx| async move {
                    Ok(ToolOutput::error_with(
                        "it failed",
                        json!({"detail": "none"}),
                    ))
                }),
        )
        .unwrap();
    tools
        .register(
            ToolBuilder::new("leak")
                .description("Answers an error result whose code is the credential it was sent.")
                .read()
                .handler(|_a: EchoArgs, _ctx| async move {
                    Ok(ToolOutput::error_with(
                        "refused",
                        json!({"code": CREDENTIAL_CANARY}),
                    ))
                }),
        )
        .unwrap();
    let app = McpApp::builder("tickets", "1.0").tools(tools).build();
    let config = HttpConfig::new("127.0.0.1:0".parse().unwrap())
        .path("/mcp")
        .auth(OpenAccess::anonymous());
    let max_body = config.limits.max_body_bytes;
    let mut server = HttpServer::bind(app, config).await.unwrap();
    if traced {
        server = server.map_router(|r| trace_requests(r, "/mcp", max_body));
    }
    let url = format!("http://{}/mcp", server.local_addr());
    let stop = server.shutdown_token();
    let s = stop.clone();
    tokio::spawn(async move {
        let _ = server.run(async move { s.cancelled().await }).await;
    });
    Upstream { url, stop, metas }
}

/// One raw 2026-07-28 `tools/call` as claude, with the caller's trace context in `_meta`.
async fn call(url: &str, bearer: &str, tool: &str, traceparent: Option<&str>) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    if let Some(tp) = traceparent {
        meta["traceparent"] = json!(tp);
        meta["tracestate"] = json!("probe=1");
    }
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(bearer)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .json(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": tool, "arguments": {"text": ARG_CANARY}, "_meta": meta}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    // A JSON answer, or one SSE event carrying it.
    let json = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(&text)
        .trim()
        .to_string();
    serde_json::from_str(&json).unwrap()
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

/// Waits (at most [`WAIT`](kberg_testkit::WAIT)) until the exporter holds a span of each name,
/// and returns them.
async fn spans_named(exporter: &InMemorySpanExporter, names: &[&str]) -> Vec<SpanData> {
    eventually_async_ok(&format!("spans {names:?} to end"), || {
        let spans = exporter.get_finished_spans().unwrap();
        let seen = if names.iter().all(|n| spans.iter().any(|s| s.name == *n)) {
            Ok(spans)
        } else {
            Err(format!(
                "got {:?}",
                spans.iter().map(|s| s.name.clone()).collect::<Vec<_>>()
            ))
        };
        async move { seen }
    })
    .await
}

fn one<'a>(spans: &'a [SpanData], name: &str, kind: SpanKind) -> &'a SpanData {
    let found: Vec<_> = spans
        .iter()
        .filter(|s| s.name == name && s.span_kind == kind)
        .collect();
    assert_eq!(found.len(), 1, "one {kind:?} span `{name}` in {spans:#?}");
    found[0]
}

#[tokio::test]
async fn one_tools_call_through_the_gateway_is_one_connected_trace() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter(exporter.clone(), "bridle-test");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let _default = tracing::subscriber::set_default(subscriber);

    let up = upstream(true).await;
    let tmp = data_dir(Some(&up.url), "");
    let t = telemetry.clone();
    let bound = bind(tmp.path(), move |b| b.telemetry(t)).await;
    bound
        .gateway()
        .upstreams()
        .wait_offered("tickets", kberg_testkit::WAIT)
        .await;
    let gw = run(bound);
    let claude = token(tmp.path(), "claude");
    let caller = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");

    let answer = call(&gw.url, &claude, "tickets__echo", Some(&caller)).await;
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");

    let spans = spans_named(&exporter, &["tools/call tickets__echo", "tools/call echo"]).await;
    let server = one(&spans, "tools/call tickets__echo", SpanKind::Server);
    let client = one(&spans, "tools/call echo", SpanKind::Client);
    // The upstream's server span has the same name as the client span, on the other side.
    let spans = eventually_async("an upstream span", || {
        let spans = exporter.get_finished_spans().unwrap();
        let found = spans
            .iter()
            .any(|s| s.name == "tools/call echo" && s.span_kind == SpanKind::Server)
            .then_some(spans);
        async move { found }
    })
    .await;
    let upstream_server = one(&spans, "tools/call echo", SpanKind::Server);

    // One trace, the caller's: caller -> gateway server -> gateway client -> upstream server.
    for s in [server, client, upstream_server] {
        assert_eq!(s.span_context.trace_id().to_string(), TRACE_ID, "{s:#?}");
    }
    assert_eq!(server.parent_span_id.to_string(), CALLER_SPAN);
    assert!(server.parent_span_is_remote);
    assert_eq!(client.parent_span_id, server.span_context.span_id());
    assert_eq!(
        upstream_server.parent_span_id,
        client.span_context.span_id()
    );
    assert!(upstream_server.parent_span_is_remote);

    // The conventions' attributes.
    assert_eq!(
        attr(server, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        attr(server, "gen_ai.tool.name").as_deref(),
        Some("tickets__echo")
    );
    assert_eq!(
        attr(server, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        attr(server, "mcp.protocol.version").as_deref(),
        Some("2026-07-28")
    );
    assert_eq!(attr(server, "jsonrpc.request.id").as_deref(), Some("7"));
    assert_eq!(
        attr(client, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(attr(client, "gen_ai.tool.name").as_deref(), Some("echo"));
    assert_eq!(
        attr(upstream_server, "gen_ai.tool.name").as_deref(),
        Some("echo")
    );
    for s in [server, client, upstream_server] {
        assert_eq!(attr(s, "error.type"), None, "{s:#?}");
        assert_eq!(s.status, Status::Unset);
    }

    // The upstream's tool runs under the upstream's server span (whose parent, the gateway's
    // client span, came in the forwarded `_meta`), and the caller's tracestate came along.
    let metas = up.metas.lock().unwrap().clone();
    let meta = metas.last().unwrap();
    assert_eq!(
        meta["traceparent"],
        json!(format!(
            "00-{TRACE_ID}-{}-01",
            upstream_server.span_context.span_id()
        ))
    );
    assert_eq!(meta["tracestate"], json!("probe=1"));

    // A tool error is `error.type` on the client span and on both server spans.
    exporter.reset();
    let answer = call(&gw.url, &claude, "tickets__fail", Some(&caller)).await;
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    let spans = spans_named(&exporter, &["tools/call tickets__fail", "tools/call fail"]).await;
    let server = one(&spans, "tools/call tickets__fail", SpanKind::Server);
    let client = one(&spans, "tools/call fail", SpanKind::Client);
    assert_eq!(attr(client, "error.type").as_deref(), Some("tool_error"));
    assert_eq!(attr(server, "error.type").as_deref(), Some("tool_error"));
    assert!(matches!(server.status, Status::Error { .. }));

    // A call without trace context starts a trace of its own at the gateway.
    exporter.reset();
    call(&gw.url, &claude, "tickets__echo", None).await;
    let spans = spans_named(&exporter, &["tools/call tickets__echo"]).await;
    let server = one(&spans, "tools/call tickets__echo", SpanKind::Server);
    assert_ne!(server.span_context.trace_id().to_string(), TRACE_ID);
    assert!(!server.parent_span_is_remote);

    // No argument value and no token anywhere in any span.
    let all = exporter.get_finished_spans().unwrap();
    let dump = format!("{all:?}{spans:?}");
    assert!(!dump.contains(ARG_CANARY), "an argument value in a span");
    assert!(!dump.contains(&claude), "a token in a span");

    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
    up.stop.cancel();
}

/// A 2025-11-25 session as claude (initialize, then initialized), its session id returned.
async fn session(url: &str, bearer: &str) -> String {
    let http = reqwest::Client::new();
    let r = http
        .post(url)
        .bearer_auth(bearer)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let id = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    r.text().await.unwrap();
    let r = http
        .post(url)
        .bearer_auth(bearer)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &id)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    id
}

#[tokio::test]
async fn a_tool_error_answered_as_an_sse_stream_is_error_type_on_the_server_span() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter(exporter.clone(), "bridle-test");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let _default = tracing::subscriber::set_default(subscriber);

    let up = upstream(false).await;
    let tmp = data_dir(Some(&up.url), "");
    let t = telemetry.clone();
    let bound = bind(tmp.path(), move |b| b.telemetry(t)).await;
    bound
        .gateway()
        .upstreams()
        .wait_offered("tickets", kberg_testkit::WAIT)
        .await;
    let gw = run(bound);
    let claude = token(tmp.path(), "claude");
    let id = session(&gw.url, &claude).await;

    for (tool, error) in [
        ("tickets__fail", Some("tool_error")),
        ("tickets__echo", None),
    ] {
        exporter.reset();
        let r = reqwest::Client::new()
            .post(&gw.url)
            .bearer_auth(&claude)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &id)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": tool, "arguments": {"text": ARG_CANARY}}}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let streamed = r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream");
        assert!(streamed, "a 2025-11-25 call is answered as an SSE stream");
        let text = r.text().await.unwrap();
        let answer: Value = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("result").is_some())
            .unwrap_or_else(|| panic!("no answer event in {text}"));
        assert_eq!(
            answer["result"]["isError"],
            json!(error.is_some()),
            "{answer}"
        );

        let name = format!("tools/call {tool}");
        let spans = spans_named(&exporter, &[name.as_str()]).await;
        let server = one(&spans, &name, SpanKind::Server);
        assert_eq!(attr(server, "error.type").as_deref(), error, "{server:#?}");
        assert_eq!(
            attr(server, "mcp.protocol.version").as_deref(),
            Some("2025-11-25")
        );
        assert_eq!(attr(server, "mcp.session.id").as_deref(), Some(id.as_str()));
        if error.is_some() {
            assert!(matches!(server.status, Status::Error { .. }));
        } else {
            assert_eq!(server.status, Status::Unset);
        }
    }

    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
    up.stop.cancel();
}

#[tokio::test]
async fn without_traces_no_span_is_made_and_the_callers_context_passes_on() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter(exporter.clone(), "bridle-test");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let _default = tracing::subscriber::set_default(subscriber);

    let up = upstream(false).await;
    let tmp = data_dir(Some(&up.url), "");
    // The gateway is not given the telemetry: traces are off for it.
    let bound = bind(tmp.path(), |b| b).await;
    bound
        .gateway()
        .upstreams()
        .wait_offered("tickets", kberg_testkit::WAIT)
        .await;
    let gw = run(bound);
    let caller = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let answer = call(
        &gw.url,
        &token(tmp.path(), "claude"),
        "tickets__echo",
        Some(&caller),
    )
    .await;
    assert_eq!(answer["result"]["isError"], json!(false), "{answer}");

    let metas = up.metas.lock().unwrap().clone();
    assert_eq!(metas.len(), 1);
    assert_eq!(metas[0]["traceparent"], json!(caller));
    assert_eq!(metas[0]["tracestate"], json!("probe=1"));
    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
    up.stop.cancel();
    assert!(exporter.get_finished_spans().unwrap().is_empty());
}

#[tokio::test]
async fn a_collector_that_never_answers_does_not_hold_calls_up() {
    // A listener nobody accepts from: connections queue in its backlog and no answer comes.
    let blackhole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut section = TracesSection::otlp(format!(
        "http://{}/v1/traces",
        blackhole.local_addr().unwrap()
    ));
    section.otlp.timeout_secs = 1;
    let telemetry = Telemetry::otlp(&section).unwrap();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let _default = tracing::subscriber::set_default(subscriber);

    let up = upstream(true).await;
    let tmp = data_dir(Some(&up.url), "");
    let t = telemetry.clone();
    let bound = bind(tmp.path(), move |b| b.telemetry(t)).await;
    bound
        .gateway()
        .upstreams()
        .wait_offered("tickets", kberg_testkit::WAIT)
        .await;
    let gw = run(bound);
    let claude = token(tmp.path(), "claude");
    for _ in 0..20 {
        let answer = call(&gw.url, &claude, "tickets__echo", None).await;
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
    }
    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
    up.stop.cancel();
    // Stopping the exporter gives up on the dead collector (off the async threads).
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();
    drop(blackhole);
}

/// What an OTLP/HTTP collector stand-in received: each POST's path, content type and body.
type Received = Arc<Mutex<Vec<(String, String, Vec<u8>)>>>;

/// A collector on loopback that takes OTLP/HTTP exports the way the OTLP specification says a
/// collector answers them (`200` with an empty `ExportTraceServiceResponse`, protobuf).
async fn collector() -> (String, Received, CancellationToken) {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, Uri};
    let received: Received = Arc::default();
    let r = Arc::clone(&received);
    let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
        let r = Arc::clone(&r);
        async move {
            let ct = headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            r.lock()
                .unwrap()
                .push((uri.path().to_string(), ct, body.to_vec()));
            (
                [("content-type", "application/x-protobuf")],
                Vec::<u8>::new(),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { s.cancelled().await })
            .await;
    });
    (url, received, stop)
}

#[tokio::test]
async fn spans_leave_over_otlp_http_protobuf() {
    let (base, received, stop_collector) = collector().await;
    let section = TracesSection::otlp(bridle_gateway::telemetry::traces_url_of_base(&base));
    let telemetry = Telemetry::otlp(&section).unwrap();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let _default = tracing::subscriber::set_default(subscriber);

    let up = upstream(false).await;
    let tmp = data_dir(Some(&up.url), "");
    let t = telemetry.clone();
    let bound = bind(tmp.path(), move |b| b.telemetry(t)).await;
    bound
        .gateway()
        .upstreams()
        .wait_offered("tickets", kberg_testkit::WAIT)
        .await;
    let gw = run(bound);
    let caller = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    call(
        &gw.url,
        &token(tmp.path(), "claude"),
        "tickets__echo",
        Some(&caller),
    )
    .await;
    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
    up.stop.cancel();
    // The batch exporter sends from its own thread; flush and stop it off the async threads.
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();

    let got = received.lock().unwrap().clone();
    assert!(!got.is_empty(), "the collector received nothing");
    let all: Vec<u8> = got.iter().flat_map(|(_, _, b)| b.clone()).collect();
    for (path, ct, _) in &got {
        assert_eq!(path, "/v1/traces");
        assert_eq!(ct, "application/x-protobuf");
    }
    // Protobuf keeps strings as they are: the span names, the service name and the trace id
    // (16 raw bytes) are in the export; the argument value is not.
    let has = |needle: &[u8]| all.windows(needle.len()).any(|w| w == needle);
    assert!(has(b"tools/call tickets__echo"));
    assert!(has(b"tools/call echo"));
    assert!(has(b"bridle"));
    let trace_id: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&TRACE_ID[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    assert!(has(&trace_id));
    assert!(!has(ARG_CANARY.as_bytes()));
    stop_collector.cancel();
}

#[test]
fn a_bad_traces_section_is_refused_with_its_code() {
    let e = Telemetry::otlp(&TracesSection::otlp("collector:4318")).unwrap_err();
    assert_eq!(e.code(), "traces_invalid");
    assert!(e.to_string().contains("not an http"), "{e}");
}

#[tokio::test]
async fn a_method_outside_mcp_is_one_span_name_not_one_per_request() {
    // A client names its request's method itself: copied into the span name, each made-up
    // method would be a new span name in the trace store. Outside the MCP methods it is
    // `_OTHER`, as the OpenTelemetry conventions name an unknown method.
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter(exporter.clone(), "bridle-test");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let _default = tracing::subscriber::set_default(subscriber);
    let tmp = data_dir(None, "");
    let t = telemetry.clone();
    let gw = run(bind(tmp.path(), move |b| b.telemetry(t)).await);
    let claude = token(tmp.path(), "claude");
    for n in 0..3 {
        let r = reqwest::Client::new()
            .post(&gw.url)
            .bearer_auth(&claude)
            .header("accept", "application/json, text/event-stream")
            .json(
                &json!({"jsonrpc": "2.0", "id": n, "method": format!("made/up-{n}"), "params": {}}),
            )
            .send()
            .await
            .unwrap();
        let _ = r.text().await;
    }
    let spans = spans_named(&exporter, &["_OTHER"]).await;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert!(!names.iter().any(|n| n.contains("made/up")), "{names:?}");
    let other = spans.iter().find(|s| s.name == "_OTHER").unwrap();
    assert_eq!(attr(other, "mcp.method.name").as_deref(), Some("_OTHER"));
}

/// An upstream's error result whose `code` quotes the credential the gateway injected (the
/// upstream received it) never makes that code a span attribute: the client span says
/// `tool_error`, as for a result without a code, and no span holds the credential.
#[tokio::test]
async fn a_result_code_quoting_the_injected_credential_is_no_span_attribute() {
    let exporter = InMemorySpanExporter::default();
    let telemetry = Telemetry::with_exporter(exporter.clone(), "bridle-test");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let _default = tracing::subscriber::set_default(subscriber);

    let up = upstream(false).await;
    let tmp = data_dir(None, "");
    ops_support::append_config(
        tmp.path(),
        &format!(
            "upstreams:\n  tickets:\n    http: {{url: '{}'}}\n    credential: {{secret: tickets-token, format: 'token {{secret}}'}}\n",
            up.url
        ),
    );
    std::fs::write(tmp.path().join("secrets/tickets-token"), CREDENTIAL_CANARY).unwrap();
    let t = telemetry.clone();
    let bound = bind(tmp.path(), move |b| b.telemetry(t)).await;
    bound
        .gateway()
        .upstreams()
        .wait_offered("tickets", kberg_testkit::WAIT)
        .await;
    let gw = run(bound);
    let claude = token(tmp.path(), "claude");

    let answer = call(&gw.url, &claude, "tickets__leak", None).await;
    assert_eq!(answer["result"]["isError"], json!(true), "{answer}");
    assert!(
        !answer.to_string().contains(CREDENTIAL_CANARY),
        "the credential reached the agent: {answer}"
    );
    let spans = spans_named(&exporter, &["tools/call tickets__leak", "tools/call leak"]).await;
    let client = one(&spans, "tools/call leak", SpanKind::Client);
    assert_eq!(attr(client, "error.type").as_deref(), Some("tool_error"));
    let all = exporter.get_finished_spans().unwrap();
    let dump = format!("{all:?}{spans:?}");
    assert!(
        !dump.contains(CREDENTIAL_CANARY),
        "the credential in a span"
    );

    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
    up.stop.cancel();
}
