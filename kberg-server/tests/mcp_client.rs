//! A real MCP client (rmcp's, over Streamable HTTP with `initialize`, and over an in-process
//! byte stream for stdio) against a Kberg app: subscribe then receive exactly the subscribed
//! updates, server-initiated elicitation answered by the client, progress, `list_changed`,
//! cancellation, and the 2026-07-28 `subscriptions/listen` stream.

// resources/subscribe is legacy-only (2025-11-25), which is exactly what these tests drive.
#![allow(deprecated)]

mod common;

use common::*;
use kberg_core::{Principal, ResourceDescriptor, ToolBuilder, ToolOutput};
use rmcp::model::{
    CallToolRequestParams, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ProgressNotificationParam, ReadResourceRequestParams, ResourceUpdatedNotificationParam,
    SubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

#[derive(Clone)]
struct Recorder {
    updates: mpsc::UnboundedSender<String>,
    progress: mpsc::UnboundedSender<f64>,
    tools_changed: mpsc::UnboundedSender<()>,
}

struct Inbox {
    updates: mpsc::UnboundedReceiver<String>,
    progress: mpsc::UnboundedReceiver<f64>,
    tools_changed: mpsc::UnboundedReceiver<()>,
}

fn recorder() -> (Recorder, Inbox) {
    let (u, ur) = mpsc::unbounded_channel();
    let (p, pr) = mpsc::unbounded_channel();
    let (t, tr) = mpsc::unbounded_channel();
    (
        Recorder {
            updates: u,
            progress: p,
            tools_changed: t,
        },
        Inbox {
            updates: ur,
            progress: pr,
            tools_changed: tr,
        },
    )
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": PROTO_OLD,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "kberg-server-tests", "version": "0"}
        }))
        .expect("client config")
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.updates.send(params.uri);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.progress.send(params.progress);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.tools_changed.send(());
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let asked = serde_json::to_value(&request).unwrap_or_default();
        assert_eq!(asked["message"], "What is your name?");
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"name": "Grace"})))
    }
}

async fn connect(url: &str, token: &str) -> (RunningService<RoleClient, Recorder>, Inbox) {
    let (rec, inbox) = recorder();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    );
    let client = rec.serve(transport).await.expect("client connects");
    (client, inbox)
}

fn call(name: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_string());
    if let Value::Object(o) = args {
        p = p.with_arguments(o);
    }
    p
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = Option<T>>) -> T {
    // A generous bound so a lost notification fails the test instead of hanging CI; the
    // duration is not what is being tested.
    tokio::time::timeout(kberg_testkit::WAIT, f)
        .await
        .unwrap_or_else(|_| panic!("{what} never arrived"))
        .unwrap_or_else(|| panic!("{what}: channel closed"))
}

#[tokio::test]
async fn updates_reach_exactly_the_subscribers() {
    let s = start().await;
    let (a, mut a_in) = connect(&s.url, READER).await;
    let (b, mut b_in) = connect(&s.url, WRITER).await;
    a.subscribe(SubscribeRequestParams::new("notes://1"))
        .await
        .expect("a subscribes to notes://1");
    b.subscribe(SubscribeRequestParams::new("notes://2"))
        .await
        .expect("b subscribes to notes://2");
    let err = a
        .subscribe(SubscribeRequestParams::new("nowhere://x"))
        .await
        .expect_err("unknown resource");
    assert!(err.to_string().contains("nowhere://x"), "{err}");

    assert_eq!(s.app.resources().notify_updated("notes://1"), 1);
    assert_eq!(within("a's update", a_in.updates.recv()).await, "notes://1");
    assert_eq!(s.app.resources().notify_updated("notes://2"), 1);
    assert_eq!(within("b's update", b_in.updates.recv()).await, "notes://2");
    // Neither saw the other's update.
    assert!(a_in.updates.try_recv().is_err());
    assert!(b_in.updates.try_recv().is_err());

    // Unsubscribed, a no longer hears about notes://1.
    a.unsubscribe(rmcp::model::UnsubscribeRequestParams::new("notes://1"))
        .await
        .expect("unsubscribe");
    assert_eq!(s.app.resources().notify_updated("notes://1"), 0);

    // Ending a session ends its subscriptions.
    b.cancel().await.expect("b closes");
    kberg_testkit::eventually_async("the closed session's subscription to end", || async {
        (s.app.resources().subscriber_count("notes://2") == 0).then_some(())
    })
    .await;
    a.cancel().await.expect("a closes");
}

#[tokio::test]
async fn list_changed_progress_elicitation_and_reads() {
    let s = start().await;
    let (c, mut inbox) = connect(&s.url, READER).await;

    let tools = c.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "echo"));

    s.app
        .tools()
        .register(
            ToolBuilder::new("late")
                .description("Registered later")
                .raw_handler(json!({"type": "object"}), |_a, _c| async {
                    Ok(ToolOutput::text("late"))
                }),
        )
        .expect("register late");
    within("tools/list_changed", inbox.tools_changed.recv()).await;
    let tools = c.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "late"));

    let mut params = call("count", json!({}));
    params.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(
        rmcp::model::ProgressToken(rmcp::model::NumberOrString::Number(7)),
    ));
    let r = c.call_tool(params).await.expect("count");
    assert_eq!(
        serde_json::to_value(&r).expect("json")["content"][0]["text"],
        "counted"
    );
    assert_eq!(within("progress 1", inbox.progress.recv()).await, 1.0);
    assert_eq!(within("progress 2", inbox.progress.recv()).await, 2.0);

    // The tool asks; the client answers; the tool finishes with the answer.
    let r = c
        .call_tool(call("ask_name", json!({})))
        .await
        .expect("ask_name");
    assert_eq!(
        serde_json::to_value(&r).expect("json")["content"][0]["text"],
        "hello Grace"
    );

    let r = c
        .read_resource(ReadResourceRequestParams::new("notes://1"))
        .await
        .expect("read");
    assert_eq!(
        serde_json::to_value(&r).expect("json")["contents"][0]["text"],
        "the first note"
    );
    c.cancel().await.expect("close");
}

/// `list_changed` reaches every open session through the one fan-out, also after another
/// session ended (its entry is gone, the others are still told), and a session that never
/// subscribed to a resource still gets its resource updates once it does.
#[tokio::test]
async fn list_changed_reaches_every_session_after_one_ended() {
    let s = start().await;
    let (a, mut a_in) = connect(&s.url, READER).await;
    let (b, mut b_in) = connect(&s.url, WRITER).await;
    let (c, _c_in) = connect(&s.url, READER).await;
    let register = |name: &str| {
        s.app
            .tools()
            .register(
                ToolBuilder::new(name).raw_handler(json!({"type": "object"}), |_a, _c| async {
                    Ok(ToolOutput::text("x"))
                }),
            )
            .expect("register");
    };
    register("first_late");
    within("a: tools/list_changed", a_in.tools_changed.recv()).await;
    within("b: tools/list_changed", b_in.tools_changed.recv()).await;

    // c ends its session (DELETE); a and b are still told about the next change.
    c.cancel().await.expect("c closes");
    register("second_late");
    within("a: second tools/list_changed", a_in.tools_changed.recv()).await;
    within("b: second tools/list_changed", b_in.tools_changed.recv()).await;

    // b subscribes only now: its subscription task starts and delivers the update.
    b.subscribe(SubscribeRequestParams::new("notes://1"))
        .await
        .expect("b subscribes");
    s.app.resources().notify_updated("notes://1");
    assert_eq!(
        within("b: resources/updated", b_in.updates.recv()).await,
        "notes://1"
    );
    a.cancel().await.expect("a closes");
    b.cancel().await.expect("b closes");
}

#[tokio::test]
async fn client_cancellation_reaches_the_tool() {
    let s = start().await;
    let (c, _inbox) = connect(&s.url, READER).await;
    let handle = c
        .send_cancellable_request(
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(call(
                "slow",
                json!({}),
            ))),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .expect("sent");
    within("slow tool start", async {
        s.probe.started.lock().await.recv().await
    })
    .await;
    handle
        .cancel(Some("changed my mind".into()))
        .await
        .expect("cancel sent");
    within("tool saw cancellation", async {
        s.probe.cancelled.lock().await.recv().await
    })
    .await;
    // The session keeps working.
    let r = c
        .call_tool(call("echo", json!({"text": "after"})))
        .await
        .expect("echo");
    assert_eq!(
        serde_json::to_value(&r).expect("json")["content"][0]["text"],
        "after"
    );
    c.cancel().await.expect("close");
}

#[tokio::test]
async fn stdio_round_trip_with_a_fixed_principal() {
    let (app, _probe) = app();
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (sr, sw) = tokio::io::split(server_io);
    let server_app = app.clone();
    let server = tokio::spawn(async move {
        kberg_server::serve_io(server_app, Principal::new("stdio-user"), sr, sw).await
    });
    let (rec, mut inbox) = recorder();
    let (cr, cw) = tokio::io::split(client_io);
    let c = rec.serve((cr, cw)).await.expect("stdio client connects");

    let tools = c.list_all_tools().await.expect("list");
    assert!(tools.iter().any(|t| t.name == "add_note"));
    let r = c
        .call_tool(call("add_note", json!({"title": "x", "priority": 2})))
        .await
        .expect("call");
    let v = serde_json::to_value(&r).expect("json");
    assert_eq!(v["structuredContent"]["code"], "capability_required", "{v}");
    let r = c
        .call_tool(call("add_note", json!({"title": 1})))
        .await
        .expect("call");
    let v = serde_json::to_value(&r).expect("json");
    assert_eq!(
        v["structuredContent"]["code"], "capability_required",
        "permission before arguments: {v}"
    );
    let r = c
        .call_tool(call("echo", json!({"text": 5})))
        .await
        .expect("call");
    let v = serde_json::to_value(&r).expect("json");
    assert_eq!(v["structuredContent"]["code"], "invalid_arguments", "{v}");
    assert_eq!(v["structuredContent"]["errors"][0]["pointer"], "/text");

    c.subscribe(SubscribeRequestParams::new("notes://1"))
        .await
        .expect("subscribe");
    app.resources().notify_updated("notes://1");
    assert_eq!(
        within("stdio update", inbox.updates.recv()).await,
        "notes://1"
    );
    let r = c.call_tool(call("ask_name", json!({}))).await.expect("ask");
    assert_eq!(
        serde_json::to_value(&r).expect("json")["content"][0]["text"],
        "hello Grace"
    );

    c.cancel().await.expect("close");
    let ended = tokio::time::timeout(kberg_testkit::WAIT, server)
        .await
        .expect("server ends when the client closes")
        .expect("join");
    assert!(ended.is_ok(), "{ended:?}");
}

#[tokio::test]
async fn listen_stream_carries_opted_in_notifications() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let body = json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": {
        "_meta": meta,
        "notifications": {"toolsListChanged": true, "resourceSubscriptions": ["notes://1", "nowhere://x"]}
    }});
    let resp = c
        .http
        .post(&c.url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {READER}"))
        .header("mcp-protocol-version", PROTO_NEW)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .expect("listen");
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let mut messages: Vec<Value> = Vec::new();
    let mut next_message = async || -> Value {
        use futures::StreamExt;
        loop {
            if let Some(pos) = buf.find("\n\n") {
                let event: String = buf.drain(..pos + 2).collect();
                if let Some(v) = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                {
                    return v;
                }
                continue;
            }
            let chunk = tokio::time::timeout(kberg_testkit::WAIT, stream.next())
                .await
                .expect("a message in time")
                .expect("stream open")
                .expect("chunk");
            buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    let ack = next_message().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let accepted = ack["params"].to_string();
    assert!(
        accepted.contains("notes://1") && !accepted.contains("nowhere://x"),
        "{ack}"
    );

    s.app.resources().notify_updated("notes://2"); // not subscribed: not delivered
    s.app.resources().notify_updated("notes://1");
    let m = next_message().await;
    assert_eq!(m["method"], "notifications/resources/updated", "{m}");
    assert_eq!(m["params"]["uri"], "notes://1");
    messages.push(m);

    s.app
        .resources()
        .register_text(ResourceDescriptor::new("notes://3", "third"), "3")
        .expect("register");
    s.app
        .tools()
        .register(
            ToolBuilder::new("late2").raw_handler(json!({"type": "object"}), |_a, _c| async {
                Ok(ToolOutput::text("x"))
            }),
        )
        .expect("register");
    // resources/list_changed was not requested; the next message is the tools one.
    let m = next_message().await;
    assert_eq!(m["method"], "notifications/tools/list_changed", "{m}");
    assert_eq!(
        m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "listen-1",
        "{m}"
    );

    // Closing the stream ends the subscription.
    assert_eq!(s.app.resources().subscriber_count("notes://1"), 1);
    drop(stream);
    kberg_testkit::eventually_async("the listen subscription to end with its stream", || async {
        (s.app.resources().subscriber_count("notes://1") == 0).then_some(())
    })
    .await;
}

/// A client that never answers elicitation and records what the server cancels.
#[derive(Clone)]
struct Stalling {
    asked: mpsc::UnboundedSender<()>,
    cancelled: mpsc::UnboundedSender<String>,
}

impl ClientHandler for Stalling {
    fn get_info(&self) -> ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": PROTO_OLD,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "stalling", "version": "0"}
        }))
        .expect("client config")
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let _ = self.asked.send(());
        std::future::pending::<()>().await;
        Ok(ElicitResult::new(ElicitationAction::Cancel))
    }

    async fn on_cancelled(
        &self,
        params: rmcp::model::CancelledNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let id = params
            .request_id
            .map(|id| serde_json::to_value(id).unwrap_or_default().to_string())
            .unwrap_or_default();
        let _ = self.cancelled.send(id);
    }
}

#[tokio::test]
async fn the_server_cancels_what_it_asked_when_the_call_is_cancelled() {
    let s = start().await;
    let (asked_tx, mut asked) = mpsc::unbounded_channel();
    let (cancel_tx, mut cancelled) = mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(s.url.as_str()).auth_header(READER),
    );
    let c = Stalling {
        asked: asked_tx,
        cancelled: cancel_tx,
    }
    .serve(transport)
    .await
    .expect("connect");
    let handle = c
        .send_cancellable_request(
            rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(call(
                "ask_name",
                json!({}),
            ))),
            rmcp::service::PeerRequestOptions::no_options(),
        )
        .await
        .expect("sent");
    within("the elicitation request", asked.recv()).await;
    handle
        .cancel(Some("no longer needed".into()))
        .await
        .expect("cancel");
    let id = within("the server's cancellation of its request", cancelled.recv()).await;
    assert!(
        !id.is_empty(),
        "the cancellation names the server's request"
    );
    let r = c
        .call_tool(call("echo", json!({"text": "fine"})))
        .await
        .expect("echo");
    assert_eq!(
        serde_json::to_value(&r).expect("json")["content"][0]["text"],
        "fine"
    );
    c.cancel().await.expect("close");
}
