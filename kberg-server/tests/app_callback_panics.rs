//! An app's callbacks that panic, over real HTTP on 127.0.0.1: a `ToolVisibility`,
//! `ResourceVisibility`, `ConfirmPolicy`, `AuditSink` or `Authenticator` that panics leaves no
//! request unanswered. The request gets `-32603` with `data.code = "internal_error"` (a
//! visibility), the refusal of a failed call (a confirmation policy: the call does not run), or
//! `500 internal_error` (an authenticator); an audit sink that panics does not fail the call
//! that already ran. Each panic is logged once, without the request's arguments. Before, the
//! panic ended the request's task and the client waited for an answer that never came.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use axum::http::HeaderMap;
use common::{READER, Raw};
use kberg_core::{
    AuditEvent, AuditSink, Caller, ConfirmRequest, Principal, ResourceDescriptor, ResourceRegistry,
    ToolBuilder, ToolOutput, ToolRegistry, ToolRegistryBuilder, ToolSpec,
};
use kberg_server::{AuthError, Authenticator, BearerTokens, McpApp};
use kberg_testkit::log::LogBuffer;
use kberg_testkit::serve::{RunningServer, loopback};
use serde_json::{Value, json};

/// A value in the arguments that no log line may quote.
const CANARY: &str = "canary-7f3a-arguments";

fn logs() -> &'static LogBuffer {
    LogBuffer::global(tracing::Level::INFO)
}

/// The number of lines logged so far that contain each of `what` (the tests of this binary
/// log to one buffer at once, so each counts the lines of its own callback).
fn lines_with(what: &[&str]) -> usize {
    logs()
        .text()
        .lines()
        .filter(|l| what.iter().all(|w| l.contains(w)))
        .count()
}

/// Held by the tests whose panics log the same line (the two that make a tool visibility
/// panic log "tools/call"), so that one's count does not take in the other's line.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// A registry built by `builder` with the `echo` tool, which counts its runs.
fn tools(builder: ToolRegistryBuilder, runs: Arc<AtomicUsize>) -> ToolRegistry {
    let tools = builder.build();
    tools
        .register(ToolBuilder::new("echo").raw_handler(
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            move |a, _ctx| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok(ToolOutput::text(
                        a["text"].as_str().unwrap_or("").to_string(),
                    ))
                }
            },
        ))
        .expect("echo");
    tools
}

async fn serve(app: McpApp) -> RunningServer {
    let auth = BearerTokens::new().with_token(READER, Principal::new("reader"));
    RunningServer::start(app, loopback().auth(auth)).await
}

/// Sends `method` with `params` on a new 2025-11-25 session; the answer, which must come.
async fn ask(url: &str, method: &str, params: Value) -> Value {
    let c = Raw::new(url, Some(READER));
    let sid = c.initialize().await;
    let r = tokio::time::timeout(
        kberg_testkit::WAIT,
        c.post(
            json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
            Some(&sid),
        ),
    )
    .await
    .expect("the request was answered");
    r.reply(7)
}

fn assert_internal_error(r: &Value) {
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert_eq!(r["error"]["data"]["code"], "internal_error", "{r}");
    assert!(!r.to_string().contains(CANARY), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_visibility_answers_internal_error() {
    let _alone = one_at_a_time().await;
    logs();
    let builder = ToolRegistry::builder()
        .tool_visibility(|_t: &ToolSpec, _c: &Caller| -> bool { panic!("tool visibility broke") });
    let runs = Arc::new(AtomicUsize::new(0));
    let app = McpApp::builder("t", "1")
        .tools(tools(builder, Arc::clone(&runs)))
        .build();
    let s = serve(app).await;
    let mine = ["app's code panicked", "tools/"];
    let before = lines_with(&mine);
    assert_internal_error(&ask(&s.url, "tools/list", json!({})).await);
    assert_internal_error(
        &ask(
            &s.url,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": CANARY}}),
        )
        .await,
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(lines_with(&mine) - before, 2, "{}", logs().text());
    assert!(!logs().text().contains(CANARY), "{}", logs().text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_resource_visibility_answers_internal_error() {
    logs();
    let resources = ResourceRegistry::new();
    resources
        .register_text(ResourceDescriptor::new("notes://1", "one"), "the note")
        .expect("register");
    resources
        .set_visibility(|_uri: &str, _c: &Caller| -> bool { panic!("resource visibility broke") });
    let app = McpApp::builder("t", "1").resources(resources).build();
    let s = serve(app).await;
    assert_internal_error(&ask(&s.url, "resources/list", json!({})).await);
    assert_internal_error(&ask(&s.url, "resources/read", json!({"uri": "notes://1"})).await);
    assert_internal_error(&ask(&s.url, "resources/subscribe", json!({"uri": "notes://1"})).await);
}

/// `subscriptions/listen` asks the visibility before rmcp acknowledges the filter, where no
/// error can be answered: a visibility that panics there leaves every resource out (as hidden
/// ones are) and the stream is acknowledged, its list changes still delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_resource_visibility_leaves_a_listen_filter_without_resources() {
    logs();
    let resources = ResourceRegistry::new();
    resources
        .register_text(ResourceDescriptor::new("notes://1", "one"), "the note")
        .expect("register");
    resources
        .register_text(
            ResourceDescriptor::new("notes://listen-only", "two"),
            "the other note",
        )
        .expect("register");
    resources.set_visibility(|uri: &str, _c: &Caller| -> bool {
        if uri.contains("listen-only") {
            panic!("resource visibility broke")
        }
        true
    });
    let app = McpApp::builder("t", "1").resources(resources).build();
    let s = serve(app).await;
    let mine = ["app's code panicked", "subscriptions/listen"];
    let before = lines_with(&mine);
    let uris = ["notes://1", "notes://listen-only"].map(String::from);
    let (ack, _stream) =
        tokio::time::timeout(kberg_testkit::WAIT, common::listen(&s.url, READER, &uris))
            .await
            .expect("the listen was acknowledged");
    let accepted = ack["params"].to_string();
    assert!(!accepted.contains("notes://"), "{ack}");
    assert_eq!(lines_with(&mine) - before, 1, "{}", logs().text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_confirm_policy_refuses_the_call_without_running_it() {
    logs();
    let builder = ToolRegistry::builder().confirm_policy(
        |_t: &ToolSpec, _a: &Value, _c: &Caller| -> Option<ConfirmRequest> {
            panic!("confirm policy broke")
        },
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let app = McpApp::builder("t", "1")
        .tools(tools(builder, Arc::clone(&runs)))
        .build();
    let s = serve(app).await;
    let mine = ["confirmation policy panicked"];
    let before = lines_with(&mine);
    let r = ask(
        &s.url,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": CANARY}}),
    )
    .await;
    let res = &r["result"];
    assert_eq!(res["isError"], true, "{r}");
    assert_eq!(res["structuredContent"]["code"], "tool_failed", "{r}");
    assert!(!r.to_string().contains(CANARY), "{r}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the call ran");
    assert_eq!(lines_with(&mine) - before, 1, "{}", logs().text());
}

/// Panics on every event.
struct BrokenSink;

impl AuditSink for BrokenSink {
    fn record(&self, _event: &AuditEvent) {
        panic!("audit sink broke");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_audit_sink_does_not_fail_the_call_that_ran() {
    logs();
    let builder = ToolRegistry::builder().audit_sink(Arc::new(BrokenSink));
    let runs = Arc::new(AtomicUsize::new(0));
    let app = McpApp::builder("t", "1")
        .tools(tools(builder, Arc::clone(&runs)))
        .build();
    let s = serve(app).await;
    for _ in 0..2 {
        let r = ask(
            &s.url,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "ran"}}),
        )
        .await;
        assert_eq!(r["result"]["content"][0]["text"], "ran", "{r}");
        assert_ne!(r["result"]["isError"], true, "{r}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(
        lines_with(&["audit sink panicked"]) >= 2,
        "{}",
        logs().text()
    );
}

/// Panics on every request.
struct BrokenAuth;

#[async_trait]
impl Authenticator for BrokenAuth {
    async fn authenticate(&self, _headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        panic!("authenticator broke");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_authenticator_answers_500_internal_error() {
    logs();
    let app = McpApp::builder("t", "1").build();
    let s = RunningServer::start(app, loopback().auth(BrokenAuth)).await;
    let c = Raw::new(&s.url, Some("secret-bearer-value"));
    let mine = ["authenticator panicked"];
    let before = lines_with(&mine);
    let r = tokio::time::timeout(
        kberg_testkit::WAIT,
        c.post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": common::PROTO_OLD, "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}}),
            None,
        ),
    )
    .await
    .expect("the request was answered");
    assert_eq!(r.status, 500, "{}", r.text);
    let body: Value = serde_json::from_str(&r.text).expect("a JSON body");
    assert_eq!(body["error"], "internal_error", "{body}");
    assert_eq!(lines_with(&mine) - before, 1, "{}", logs().text());
    assert!(!logs().text().contains("secret-bearer-value"));
}

/// On 2026-07-28 rmcp looks a tool up (for its `Mcp-Param-*` headers) before the call reaches
/// the handler, and the lookup asks the visibility: a panic there is contained too, and the
/// call is answered as any other whose visibility panicked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_visibility_is_contained_in_the_header_lookup() {
    let _alone = one_at_a_time().await;
    logs();
    let builder = ToolRegistry::builder()
        .tool_visibility(|_t: &ToolSpec, _c: &Caller| -> bool { panic!("tool visibility broke") });
    let tools = builder.build();
    tools
        .register(ToolBuilder::new("regional").raw_handler(
            json!({"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}}, "required": ["region"]}),
            |_a, _ctx| async move { Ok(ToolOutput::text("ran")) },
        ))
        .expect("register");
    let app = McpApp::builder("t", "1").tools(tools).build();
    let s = serve(app).await;
    let c = Raw::new(&s.url, Some(READER));
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "regional", "arguments": {"region": "eu"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": common::PROTO_NEW,
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let r = tokio::time::timeout(
        kberg_testkit::WAIT,
        c.post_with(
            body.to_string(),
            &[
                ("mcp-protocol-version", common::PROTO_NEW),
                ("mcp-method", "tools/call"),
                ("mcp-name", "regional"),
                ("mcp-param-region", "eu"),
            ],
        ),
    )
    .await
    .expect("the request was answered");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_internal_error(&r.reply(4));
}
