//! Test support shared by the provider tests: a scripted HTTP server on 127.0.0.1 that records
//! every request and answers with prepared replies (status, headers, a body sent in timed pieces,
//! optionally cut off mid-body), the app registry the agent scenarios drive, and the scenarios
//! themselves (a repair turn that succeeds, a refusal the model accepts, a cancellation while a
//! tool runs), written once and run against each provider's wire.
//!
//! The replies are built by each test file from its provider's documented response shapes; this
//! module knows no provider wire.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too
#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use kberg_agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, InferenceProvider, LocalSurface, Message,
    StopReason,
};
use kberg_core::{
    Caller, ErrorCode, Grants, Principal, ToolBuilder, ToolOutput, ToolRegistry, WriteCapability,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

/// One prepared reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Pieces of the body, each sent after its delay.
    pub chunks: Vec<(Duration, String)>,
    /// Break the connection after the last piece instead of ending the body.
    pub abort: bool,
}

impl Reply {
    pub fn json(status: u16, body: &Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![(Duration::ZERO, body.to_string())],
            abort: false,
        }
    }

    pub fn stream(content_type: &str, pieces: Vec<String>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            chunks: pieces.into_iter().map(|p| (Duration::ZERO, p)).collect(),
            abort: false,
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }

    /// Waits `delay` before every piece.
    pub fn paced(mut self, delay: Duration) -> Self {
        for c in &mut self.chunks {
            c.0 = delay;
        }
        self
    }

    pub fn aborted(mut self) -> Self {
        self.abort = true;
        self
    }

    /// Keeps only the first `n` pieces.
    pub fn truncated(mut self, n: usize) -> Self {
        self.chunks.truncate(n);
        self
    }
}

#[derive(Default)]
struct State {
    requests: Mutex<Vec<Recorded>>,
    replies: Mutex<VecDeque<Reply>>,
}

/// A scripted server on 127.0.0.1; stopped when dropped (also when a test fails).
pub struct MockServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.stop.cancel();
        self.task.abort();
    }
}

impl MockServer {
    pub async fn start(replies: Vec<Reply>) -> Self {
        let state = Arc::new(State {
            requests: Mutex::default(),
            replies: Mutex::new(replies.into()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let st = Arc::clone(&state);
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: axum::body::Bytes| {
                let st = Arc::clone(&st);
                async move { answer(st, method, uri, headers, body) }
            },
        );
        let stop = CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { s.cancelled().await })
                .await;
        });
        Self {
            addr,
            state,
            stop,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn push(&self, reply: Reply) {
        self.state.replies.lock().unwrap().push_back(reply);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }
}

fn answer(
    st: Arc<State>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    st.requests.lock().unwrap().push(Recorded {
        method: method.to_string(),
        path: uri.path().to_string(),
        headers,
        body: json,
    });
    let Some(reply) = st.replies.lock().unwrap().pop_front() else {
        return Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("the test script has no reply for this request"))
            .unwrap();
    };
    let abort = reply.abort;
    let pieces = futures::stream::unfold(
        (reply.chunks.into_iter(), abort, false),
        |(mut it, abort, ended)| async move {
            if ended {
                return None;
            }
            match it.next() {
                Some((delay, piece)) => {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    Some((Ok::<_, std::io::Error>(piece), (it, abort, false)))
                }
                None if abort => Some((
                    // Let the pieces reach the client before the connection breaks.
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Err(std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "cut off",
                        ))
                    },
                    (it, abort, true),
                )),
                None => None,
            }
        },
    );
    let mut b = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        b = b.header(k, v);
    }
    b.body(Body::from_stream(pieces)).unwrap()
}

/// A free port with nothing listening on it.
pub async fn closed_port_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

/// Bounded like a real app's input: servers that constrain generation by the schema (llama.cpp
/// grammars) then cannot let a model ramble inside a string.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddNote {
    #[schemars(length(min = 1, max = 40))]
    title: String,
    #[schemars(range(min = 1, max = 5))]
    priority: u8,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Wait {
    seconds: u64,
}

/// The app the scenarios drive, seen by a caller granted `notes.write`.
pub fn app_surface() -> LocalSurface {
    LocalSurface::new(
        app_surface_registry(),
        Caller::new(Principal::new("tester").with_grants(Grants::of(["notes.write"]))),
    )
}

/// The app's registry: `add_note` (Write `notes.write`), `wait` (Read, long), and the refusal
/// `delete_all_notes`.
pub fn app_surface_registry() -> ToolRegistry {
    let tools = ToolRegistry::new();
    let write = WriteCapability::new("notes.write", "Create notes");
    tools.declare(write.clone()).unwrap();
    tools
        .register(
            ToolBuilder::new("add_note")
                .description("Create a note")
                .write(write)
                .handler(|a: AddNote, _| async move {
                    Ok(ToolOutput::text(format!(
                        "created {} (priority {})",
                        a.title, a.priority
                    )))
                }),
        )
        .unwrap();
    tools
        .register(ToolBuilder::new("wait").description("Wait").handler(
            |a: Wait, ctx| async move {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(a.seconds)) => Ok(ToolOutput::text("waited")),
                    () = ctx.cancellation().cancelled() => Err("stopped".into()),
                }
            },
        ))
        .unwrap();
    tools
        .refuse(
            "delete_all_notes",
            "bulk deletion is never offered to models",
        )
        .unwrap();
    tools
}

/// How a provider's wire looks, for the shared scenarios.
pub trait Wire {
    /// A reply calling one tool (streamed or not, arguments split across pieces when streamed).
    fn call(&self, id: &str, name: &str, arguments: &Value, stream: bool) -> Reply;
    /// A text-only reply.
    fn text(&self, text: &str, stream: bool) -> Reply;
    /// The tool-result texts in a recorded request body, in order.
    fn tool_results(&self, body: &Value) -> Vec<String>;
}

/// Makes the provider under test for a server URL.
pub type MakeProvider<'a> = &'a dyn Fn(String) -> Arc<dyn InferenceProvider>;

fn agent(provider: Arc<dyn InferenceProvider>, stream: bool) -> Agent {
    Agent::from_arcs(provider, Arc::new(app_surface()))
        .with_config(AgentConfig::default().stream(stream))
}

/// A bad call, its diagnostic, the corrected call, the answer.
pub async fn scenario_repair(wire: &dyn Wire, make: MakeProvider<'_>, stream: bool) {
    let server = MockServer::start(vec![
        wire.call(
            "call_1",
            "add_note",
            &serde_json::json!({"title": "milk"}),
            stream,
        ),
        wire.call(
            "call_2",
            "add_note",
            &serde_json::json!({"title": "milk", "priority": 2}),
            stream,
        ),
        wire.text("Added the note.", stream),
    ])
    .await;
    let agent = agent(make(server.url()), stream);
    let out = agent
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.text, "Added the note.");
    assert_eq!(out.repair_turns, 1);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["invalid_arguments", "ok"]);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    let results = wire.tool_results(&reqs[1].body);
    assert_eq!(results.len(), 1, "{:?}", reqs[1].body);
    assert!(results[0].contains("`priority`"), "{}", results[0]);
    let results = wire.tool_results(&reqs[2].body);
    assert_eq!(results.len(), 2);
    assert_eq!(results[1], "created milk (priority 2)");
}

/// A refused call answered as final; the model accepts it.
pub async fn scenario_refusal(wire: &dyn Wire, make: MakeProvider<'_>, stream: bool) {
    let server = MockServer::start(vec![
        wire.call("call_1", "delete_all_notes", &serde_json::json!({}), stream),
        wire.text("I can't do that: bulk deletion is not offered.", stream),
    ])
    .await;
    let agent = agent(make(server.url()), stream);
    let out = agent
        .run(
            vec![Message::user("delete all my notes")],
            &CancellationToken::new(),
        )
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.repair_turns, 0);
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::Refused)
    );
    let results = wire.tool_results(&server.requests()[1].body);
    assert!(
        results[0].contains("never offered to models"),
        "{}",
        results[0]
    );
    assert!(results[0].contains("do not call `delete_all_notes` again"));
}

/// The run is cancelled while the tool runs; the stored conversation stays well formed.
pub async fn scenario_cancel_mid_tool(wire: &dyn Wire, make: MakeProvider<'_>, stream: bool) {
    let server = MockServer::start(vec![wire.call(
        "call_1",
        "wait",
        &serde_json::json!({"seconds": 30}),
        stream,
    )])
    .await;
    let agent = agent(make(server.url()), stream);
    let cancel = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = cancel.clone();
    let run = tokio::spawn(async move {
        agent
            .run_with_events(vec![Message::user("wait")], &c, tx)
            .await
    });
    while let Some(ev) = rx.recv().await {
        if matches!(ev, AgentEvent::ToolCalled { .. }) {
            cancel.cancel();
        }
    }
    let out = run.await.unwrap();
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::Cancelled)
    );
    assert!(matches!(out.messages.last(), Some(Message::Tool { .. })));
    assert_eq!(server.requests().len(), 1);
}
