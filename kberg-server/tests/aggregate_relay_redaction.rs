//! An upstream that says back the credential the aggregator gave it (a chatty server quoting
//! its backend's error, or a compromised one) cannot get it to the aggregator's clients through
//! the relay: in a log message (its `logger`, and nested in its `data`), a progress message, an
//! elicitation request (its message and its schema), and a task's question, every occurrence
//! reaches the client as `[redacted]` while the ordinary text around it arrives as it was sent.
//!
//! Both transports are covered: a child process over stdio with the credential in its
//! environment (`aggregate_raw_upstream.py`'s `leak` tool, which reads it from there), and a
//! Kberg server over Streamable HTTP with the credentials in a header and the URL's query
//! (its tools know them as the endpoint behind them would). The client is rmcp's, connected to
//! a Kberg server whose registry is the aggregator's; each test waits for the messages to
//! arrive, never for time to pass.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.
#![allow(deprecated)] // logging is deprecated by a later revision, still part of 2025-11-25

mod peers;

use std::sync::{Arc, Mutex};

use kberg_core::{
    Principal, TaskSupport, ToolBuilder, ToolContext, ToolError, ToolOutput, ToolRegistry,
};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, REDACTED, UpstreamConfig, UpstreamTransport,
};
use kberg_server::{McpApp, OpenAccess};
use kberg_testkit::serve::{RunningServer, loopback};
use peers::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, ErrorData, Implementation, LoggingMessageNotificationParam,
    NumberOrString, ProgressNotificationParam, ProgressToken, RequestMetaObject,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The child's credential, in its environment.
const CHILD_TOKEN: &str = "CANARY-aggregate-env-7c1e9a04d2";
/// The HTTP upstream's bearer token, in a header.
const HEADER_TOKEN: &str = "CANARY-aggregate-header-4b8d2f61";
/// The HTTP upstream's API key, in the URL's query.
const QUERY_KEY: &str = "CANARY-aggregate-query-9e3a5c17";

/// What reached the downstream client: the method it came as, and its params.
type Seen = (&'static str, Value);

/// The aggregator's client: declares elicitation, and hands each log message, progress report
/// and question it gets to the test. It accepts every question; to one that starts with
/// `Finished` (an upstream's question after its log and progress messages) it answers
/// `{"ok": true}` only if both have arrived: the upstream says them again otherwise (one sent
/// before the aggregator had recorded its call may have gone nowhere, and one may still be on
/// its way), so the call ends only once the client has them.
#[derive(Clone)]
struct Client {
    seen: mpsc::UnboundedSender<Seen>,
    notified: Arc<Mutex<Vec<&'static str>>>,
}

impl Client {
    fn note(&self, method: &'static str, params: Value) {
        let _ = self.seen.send((method, params));
        self.notified.lock().unwrap().push(method);
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let capabilities =
            serde_json::from_value::<ClientCapabilities>(json!({"elicitation": {"form": {}}}))
                .unwrap_or_default();
        ClientConfig::new(capabilities, Implementation::new("redaction-test", "1"))
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.note(
            "notifications/message",
            serde_json::to_value(params).unwrap(),
        );
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.note(
            "notifications/progress",
            serde_json::to_value(params).unwrap(),
        );
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let params = serde_json::to_value(request).unwrap();
        let last = params["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Finished"));
        self.note("elicitation/create", params);
        let told = {
            let n = self.notified.lock().unwrap();
            n.contains(&"notifications/message") && n.contains(&"notifications/progress")
        };
        if last {
            return Ok(
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"ok": told}))
            );
        }
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"ok": true})))
    }
}

/// The aggregator (one upstream, `config`, connected) served by a Kberg server, and an rmcp
/// client connected to it whose messages come out of the returned channel.
async fn client_of(
    config: UpstreamConfig,
) -> (
    Aggregator,
    RunningService<RoleClient, Client>,
    mpsc::UnboundedReceiver<Seen>,
    StopOnDrop,
) {
    let ns = config.namespace.clone();
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(AggregatorConfig::new().upstream(config), registry.clone())
        .expect("valid");
    assert!(
        agg.wait_connected(&ns, 1, WAIT).await,
        "{:?}",
        agg.status(&ns)
    );
    let server = RunningServer::start(
        McpApp::builder("aggregate", "1").tools(registry).build(),
        loopback().auth(OpenAccess::as_principal(Principal::new("agent"))),
    )
    .await;
    let (tx, rx) = mpsc::unbounded_channel();
    let client = Client {
        seen: tx,
        notified: Arc::new(Mutex::new(Vec::new())),
    }
    .serve(StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(server.url.clone()),
    ))
    .await
    .expect("client connects");
    (agg, client, rx, server.into_guard())
}

/// Calls `tool` with a progress token; returns its result and, in the order they came, all
/// the client was sent meanwhile (handed over before the client answered, so all of it is
/// there once the call has ended).
async fn call(
    client: &RunningService<RoleClient, Client>,
    seen: &mut mpsc::UnboundedReceiver<Seen>,
    tool: &str,
) -> (CallToolResult, Vec<Seen>) {
    let mut p = CallToolRequestParams::new(tool.to_string());
    p.meta = Some(RequestMetaObject::with_progress_token(ProgressToken(
        NumberOrString::Number(1),
    )));
    let out = tokio::time::timeout(WAIT, client.call_tool(p)).await;
    let mut got = Vec::new();
    while let Ok(one) = seen.try_recv() {
        got.push(one);
    }
    let out = out
        .unwrap_or_else(|_| panic!("the call did not end; the client got {got:?}"))
        .expect("a tool result");
    (out, got)
}

/// The params of each message of `method` the client got; none of them, nor anything else it
/// got, holds a credential.
fn of<'a>(got: &'a [Seen], method: &str) -> Vec<&'a Value> {
    for (m, params) in got {
        let text = params.to_string();
        assert!(
            !text.contains("CANARY"),
            "a credential reached the client in {m}: {text}"
        );
    }
    got.iter()
        .filter(|(m, _)| *m == method)
        .map(|(_, p)| p)
        .collect()
}

fn text_of(r: &CallToolResult) -> String {
    serde_json::to_value(&r.content).unwrap().to_string()
}

fn redacted(before: &str, after: &str) -> String {
    format!("{before}{REDACTED}{after}")
}

/// Checks what the client got from an upstream's `leak` tool (see `aggregate_raw_upstream.py`
/// and [`leaky_endpoint`]): every message, however many rounds it took, with each credential
/// `[redacted]` and its ordinary text (and numbers, and shape) as the upstream sent it.
fn assert_leak_redacted(got: &[Seen], first_question: &str) {
    let asked = of(got, "elicitation/create");
    assert!(asked.len() >= 2, "{got:?}");
    assert_eq!(
        asked[0]["message"],
        redacted(first_question, " for this call?"),
        "{got:?}"
    );
    assert_eq!(
        asked[0]["requestedSchema"]["properties"]["ok"],
        json!({"type": "boolean", "description": redacted("allow ", "")}),
        "{got:?}"
    );
    for later in &asked[1..] {
        assert_eq!(later["message"], redacted("Finished with ", "?"), "{got:?}");
    }
    let logs = of(got, "notifications/message");
    assert!(!logs.is_empty(), "{got:?}");
    for log in logs {
        assert_eq!(log["level"], "warning", "{got:?}");
        assert_eq!(log["logger"], redacted("backend ", ""), "{got:?}");
        assert_eq!(
            log["data"],
            json!({
                "note": "the backend refused the call",
                "detail": {"error": redacted("invalid token ", ""), "tried": ["plain text", REDACTED]},
                "attempts": 3,
            }),
            "{got:?}"
        );
    }
    let progress = of(got, "notifications/progress");
    assert!(!progress.is_empty(), "{got:?}");
    for p in progress {
        assert_eq!(
            p["message"],
            redacted("signed in with ", ", fetching"),
            "{got:?}"
        );
        let (figure, total) = (p["progress"].as_f64(), p["total"].as_f64());
        assert!(
            figure.is_some_and(|f| f >= 1.0) && total == figure.map(|f| f + 1.0),
            "{got:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_credential_is_redacted_from_what_it_relays() {
    let config = UpstreamConfig::new(
        "raw",
        raw_upstream()
            .env("RAW_LEAK_TOKEN", CHILD_TOKEN)
            // A value too short to be taken for a credential (a switch): the word it matches
            // ("the call") is left in the text.
            .env("RAW_UNIT", "call"),
    );
    let (agg, client, mut seen, _stop) = client_of(config).await;
    let (out, got) = call(&client, &mut seen, "raw__leak").await;
    assert_ne!(out.is_error, Some(true), "{out:?}; the client got {got:?}");
    assert!(text_of(&out).contains("told in "), "{}", text_of(&out));
    assert_leak_redacted(&got, "Use the token ");
    client.cancel().await.expect("close");
    agg.shutdown().await;
}

/// Asks the calling client through the aggregator, once: the upstream asks the moment its
/// call starts, and the aggregator records the request before it relays what comes about it,
/// so the question is never refused as being about "no call in flight".
async fn elicit(ctx: &ToolContext, message: &str, schema: Value) -> Result<Value, ToolError> {
    Ok(ctx.elicit(message, schema).await?)
}

/// A Kberg server that knows the credentials its aggregator sends it and says them back from
/// its tools: `leak` (as `aggregate_raw_upstream.py`'s: a question; once it is answered, a log
/// and a progress message and a question, again until the client has them) and `leak_task` (a
/// question, as a task).
async fn leaky_endpoint() -> (String, StopOnDrop) {
    let tools = ToolRegistry::new();
    let schema = json!({"type": "object", "properties": {
        "ok": {"type": "boolean", "description": format!("allow {HEADER_TOKEN}")}}});
    tools
        .register(
            ToolBuilder::new("leak")
                .description("Says its credentials back to the client")
                .raw_handler(json!({"type": "object"}), move |_a, ctx| {
                    let schema = schema.clone();
                    async move {
                        let msg = format!("Use the key {QUERY_KEY} for this call?");
                        elicit(&ctx, &msg, schema.clone()).await?;
                        // Said again until the client has it all (see `Client`).
                        let mut round = 0u32;
                        loop {
                            round += 1;
                            ctx.log(
                                "warning",
                                Some(&format!("backend {QUERY_KEY}")),
                                json!({
                                    "note": "the backend refused the call",
                                    "detail": {
                                        "error": format!("invalid token {HEADER_TOKEN}"),
                                        "tried": ["plain text", format!("Bearer {HEADER_TOKEN}")],
                                    },
                                    "attempts": 3,
                                }),
                            )
                            .await?;
                            ctx.progress(
                                f64::from(round),
                                Some(f64::from(round + 1)),
                                Some(&format!("signed in with {HEADER_TOKEN}, fetching")),
                            )
                            .await?;
                            let msg = format!("Finished with {QUERY_KEY}?");
                            let a = elicit(&ctx, &msg, schema.clone()).await?;
                            if a["content"]["ok"] == true {
                                break;
                            }
                        }
                        Ok(ToolOutput::text(format!("told in {round} rounds")))
                    }
                }),
        )
        .expect("register leak");
    tools
        .register(
            ToolBuilder::new("leak_task")
                .description("Asks with its credential in the question, as a task")
                .task_support(TaskSupport::Required)
                .raw_handler(json!({"type": "object"}), |_a, ctx| async move {
                    let a = ctx
                        .elicit(
                            &format!("Task: use the token {HEADER_TOKEN}?"),
                            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
                        )
                        .await?;
                    Ok(ToolOutput::text(format!("task answer: {}", a["action"])))
                }),
        )
        .expect("register leak_task");
    let server = RunningServer::start(
        McpApp::builder("upstream", "1").tools(tools).build(),
        loopback().auth(OpenAccess::as_principal(Principal::new("aggregator"))),
    )
    .await;
    let url = server.url.clone();
    (url, server.into_guard())
}

/// The HTTP upstream's configuration: its credentials in the URL's query and a header.
fn endpoint_config(url: &str) -> UpstreamConfig {
    UpstreamConfig::new(
        "up",
        UpstreamTransport::http(format!("{url}?api_key={QUERY_KEY}"))
            .header("authorization", format!("Bearer {HEADER_TOKEN}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoints_header_and_url_credentials_are_redacted_from_what_it_relays() {
    let (url, _upstream) = leaky_endpoint().await;
    let (agg, client, mut seen, _stop) = client_of(endpoint_config(&url)).await;
    let (out, got) = call(&client, &mut seen, "up__leak").await;
    assert_ne!(out.is_error, Some(true), "{out:?}; the client got {got:?}");
    assert!(text_of(&out).contains("told in "), "{}", text_of(&out));
    // The whole header value (`Bearer` and the token) is replaced as one.
    assert_leak_redacted(&got, "Use the key ");
    client.cancel().await.expect("close");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_tasks_question_is_redacted_too() {
    let (url, _upstream) = leaky_endpoint().await;
    let (agg, client, mut seen, _stop) = client_of(endpoint_config(&url)).await;
    let (out, got) = call(&client, &mut seen, "up__leak_task").await;
    assert_ne!(out.is_error, Some(true), "{out:?}; the client got {got:?}");
    assert!(
        text_of(&out).contains(r#"task answer: \"accept\""#),
        "{}",
        text_of(&out)
    );
    let asked = of(&got, "elicitation/create");
    assert_eq!(asked.len(), 1, "{got:?}");
    assert_eq!(
        asked[0]["message"],
        redacted("Task: use the token ", "?"),
        "{got:?}"
    );
    client.cancel().await.expect("close");
    agg.shutdown().await;
}
