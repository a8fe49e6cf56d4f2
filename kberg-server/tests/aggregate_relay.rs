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
