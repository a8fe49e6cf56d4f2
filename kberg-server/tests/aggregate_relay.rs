//! Requests an upstream sends to its client in the middle of a call (sampling, elicitation)
//! relayed through the aggregator to the client of that call, against the real
//! `@modelcontextprotocol/server-everything` (its `trigger-sampling-request` and
//! `trigger-elicitation-request` tools, which it offers only to clients declaring those
//! capabilities, as the aggregator now does). The downstream client is rmcp's, connected to a
//! Kberg server whose registry is the aggregator's. When two calls are in flight to the upstream
//! the aggregator cannot tell whose request it is, and refuses it rather than guess.

#![allow(deprecated)] // sampling is deprecated by a later revision, still part of 2025-11-25

mod peers;

use kberg_testkit::serve::{RunningServer, loopback};

use peers::*;
use std::sync::Arc;

use kberg_core::Principal;
use kberg_server::aggregate::Aggregator;
use kberg_server::{McpApp, OpenAccess};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, ErrorData, Implementation, SamplingMessage,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::{Notify, mpsc};

/// A downstream client that can sample and be asked for input. Each sampling request is
/// reported on `entered` and answered once `release` is notified (or at once when `hold` is
/// false).
#[derive(Clone)]
struct Human {
    entered: mpsc::UnboundedSender<String>,
    release: Arc<Notify>,
    hold: bool,
}

impl ClientHandler for Human {
    fn get_info(&self) -> ClientConfig {
        let capabilities = serde_json::from_value::<ClientCapabilities>(
            json!({"sampling": {}, "elicitation": {"form": {}}}),
        )
        .unwrap_or_default();
        ClientConfig::new(capabilities, Implementation::new("human", "1"))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let asked = serde_json::to_value(&params.messages).unwrap_or_default();
        let _ = self.entered.send(asked.to_string());
        if self.hold {
            self.release.notified().await;
        }
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text("a relayed answer"),
            "test-model".into(),
        ))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let _ = self.entered.send(format!("{request:?}"));
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": "Ada"})))
    }
}

/// server-everything behind an aggregator, served by a Kberg server; a connected client.
async fn setup(
    hold: bool,
) -> (
    Aggregator,
    RunningService<RoleClient, Human>,
    mpsc::UnboundedReceiver<String>,
    Arc<Notify>,
    StopOnDrop,
) {
    let (agg, url, stop) = serve_aggregator().await;
    let (tx, rx) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let human = Human {
        entered: tx,
        release: Arc::clone(&release),
        hold,
    };
    let client = human
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url),
        ))
        .await
        .expect("client connects");
    (agg, client, rx, release, stop)
}

/// server-everything behind an aggregator, served by a Kberg server on 127.0.0.1.
async fn serve_aggregator() -> (Aggregator, String, StopOnDrop) {
    let (agg, registry) = connected("ev", everything_stdio()).await;
    let server = RunningServer::start(
        McpApp::builder("aggregate", "1").tools(registry).build(),
        loopback().auth(OpenAccess::as_principal(Principal::new("agent"))),
    )
    .await;
    let url = server.url.clone();
    let stop = server.into_guard();
    (agg, url, stop)
}

fn text_of(r: &CallToolResult) -> String {
    serde_json::to_value(&r.content)
        .unwrap_or_default()
        .to_string()
}

async fn call(
    client: &RunningService<RoleClient, Human>,
    tool: &str,
    args: serde_json::Value,
) -> CallToolResult {
    let mut p = CallToolRequestParams::new(tool.to_string());
    p.arguments = args.as_object().cloned();
    tokio::time::timeout(WAIT, client.call_tool(p))
        .await
        .expect("the call ends")
        .expect("a tool result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_and_elicitation_reach_the_calling_client() {
    let (agg, client, mut entered, _release, _stop) = setup(false).await;
    // The upstream offers its capability-dependent tools: the aggregator declared them.
    let names: Vec<String> = client
        .list_all_tools()
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(
        names.contains(&"ev__trigger-sampling-request".to_string()),
        "{names:?}"
    );

    let out = call(
        &client,
        "ev__trigger-sampling-request",
        json!({"prompt": "say hi", "maxTokens": 10}),
    )
    .await;
    assert_ne!(out.is_error, Some(true), "{out:?}");
    assert!(
        text_of(&out).contains("a relayed answer"),
        "{}",
        text_of(&out)
    );
    let asked = entered.recv().await.expect("the client was asked");
    assert!(asked.contains("say hi"), "{asked}");

    let out = call(&client, "ev__trigger-elicitation-request", json!({})).await;
    assert_ne!(out.is_error, Some(true), "{out:?}");
    assert!(text_of(&out).contains("Ada"), "{}", text_of(&out));
    let asked = entered.recv().await.expect("the client was asked");
    assert!(asked.contains("provide inputs"), "{asked}");

    client.cancel().await.expect("close");
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_could_belong_to_two_calls_is_refused_not_guessed() {
    let (agg, client, mut entered, release, _stop) = setup(true).await;
    let client = Arc::new(client);
    // Call A: its sampling request is relayed (the only call in flight) and held by the client.
    let a = {
        let client = Arc::clone(&client);
        tokio::spawn(async move {
            call(
                &client,
                "ev__trigger-sampling-request",
                json!({"prompt": "first", "maxTokens": 10}),
            )
            .await
        })
    };
    let asked = tokio::time::timeout(WAIT, entered.recv())
        .await
        .expect("A's request reaches the client")
        .expect("open");
    assert!(asked.contains("first"), "{asked}");
    // Call B while A is in flight: its sampling request could be either call's, so the
    // aggregator refuses it and the upstream reports the failure in B's result.
    let b = call(
        &client,
        "ev__trigger-sampling-request",
        json!({"prompt": "second", "maxTokens": 10}),
    )
    .await;
    assert_eq!(b.is_error, Some(true), "{b:?}");
    assert!(
        text_of(&b).contains("cannot tell which client"),
        "{}",
        text_of(&b)
    );
    // The client never saw B's question.
    release.notify_one();
    let a = tokio::time::timeout(WAIT, a)
        .await
        .expect("A ends")
        .expect("task");
    assert_ne!(a.is_error, Some(true), "{a:?}");
    assert!(text_of(&a).contains("a relayed answer"), "{}", text_of(&a));
    assert!(
        entered.try_recv().is_err(),
        "the client was asked B's question"
    );
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_sampling_gets_a_clear_refusal_relayed() {
    let (agg, url, _stop) = serve_aggregator().await;
    // rmcp's bare client declares no sampling capability.
    let client = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url),
        ))
        .await
        .expect("client connects");
    let mut p = CallToolRequestParams::new("ev__trigger-sampling-request".to_string());
    p.arguments = json!({"prompt": "hi", "maxTokens": 5}).as_object().cloned();
    let out = tokio::time::timeout(WAIT, client.call_tool(p))
        .await
        .expect("the call ends")
        .expect("a tool result");
    assert_eq!(out.is_error, Some(true), "{out:?}");
    let text = text_of(&out);
    assert!(text.contains("does not support sampling"), "{text}");
    client.cancel().await.expect("close");
    agg.shutdown().await;
}

/// One SSE response read event by event: the JSON of each `data:` line.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn next(&mut self) -> serde_json::Value {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim)
                    .collect();
                if !data.is_empty() {
                    return serde_json::from_str(&data).expect("a JSON message");
                }
                continue;
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk())
                .await
                .expect("an event in time")
                .expect("the stream reads")
                .expect("the stream is open");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// A client that opens no GET stream (the specification allows it) gets the upstream's request
/// on the stream of the call it belongs to: the upstream numbers its requests itself, and its
/// number must not decide which of the client's streams carries the question.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_request_rides_the_stream_of_its_call() {
    let (agg, url, _stop) = serve_aggregator().await;
    let http = reqwest::Client::new();
    let post = |body: serde_json::Value, session: Option<&str>| {
        let mut b = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json");
        if let Some(s) = session {
            b = b
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25");
        }
        b.body(body.to_string()).send()
    };
    let init = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}},
            "clientInfo": {"name": "no-get", "version": "0"}}}),
        None,
    )
    .await
    .expect("initialize");
    let sid = init
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session")
        .to_string();
    drop(init);
    let n = post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        Some(&sid),
    )
    .await
    .expect("initialized");
    assert_eq!(n.status(), 202);
    // An id the upstream's own first request id (0 or 1) cannot be.
    let response = post(
        json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {
            "name": "ev__trigger-sampling-request",
            "arguments": {"prompt": "say hi", "maxTokens": 10}}}),
        Some(&sid),
    )
    .await
    .expect("the call");
    let mut events = Events {
        response,
        buffer: String::new(),
    };
    let asked = loop {
        let m = events.next().await;
        if m["method"] == "sampling/createMessage" {
            break m;
        }
        assert!(
            m.get("id") != Some(&json!(77)),
            "answered before asking: {m}"
        );
    };
    let answer = post(
        json!({"jsonrpc": "2.0", "id": asked["id"], "result": {
            "role": "assistant", "model": "test-model",
            "content": {"type": "text", "text": "a relayed answer"}}}),
        Some(&sid),
    )
    .await
    .expect("the answer");
    assert_eq!(answer.status(), 202);
    let done = loop {
        let m = events.next().await;
        if m["id"] == json!(77) {
            break m;
        }
    };
    assert!(
        done["result"].to_string().contains("a relayed answer"),
        "{done}"
    );
    agg.shutdown().await;
}

/// A client that turns every sampling request down, as a user who rejects it.
#[derive(Clone)]
struct Refuser;

impl ClientHandler for Refuser {
    fn get_info(&self) -> ClientConfig {
        let capabilities = serde_json::from_value::<ClientCapabilities>(json!({"sampling": {}}))
            .unwrap_or_default();
        ClientConfig::new(capabilities, Implementation::new("refuser", "1"))
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        Err(ErrorData::new(
            rmcp::model::ErrorCode(-1),
            "User rejected sampling request",
            None,
        ))
    }
}

/// The client's refusal reaches the upstream with its own code (sampling's `-1`, a user's
/// rejection), not as an internal error of the aggregator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_refusal_is_relayed_with_its_code() {
    let (agg, url, _stop) = serve_aggregator().await;
    let client = Refuser
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url),
        ))
        .await
        .expect("client connects");
    let mut p = CallToolRequestParams::new("ev__trigger-sampling-request".to_string());
    p.arguments = json!({"prompt": "hi", "maxTokens": 5}).as_object().cloned();
    let out = tokio::time::timeout(WAIT, client.call_tool(p))
        .await
        .expect("the call ends");
    let shown = match out {
        Ok(r) => text_of(&r),
        Err(e) => e.to_string(),
    };
    assert!(shown.contains("User rejected sampling request"), "{shown}");
    assert!(!shown.contains("-32603"), "{shown}");
    client.cancel().await.expect("close");
    agg.shutdown().await;
}
