//! The agent scenarios the provider tests share (a repair turn that succeeds, a refusal the
//! model accepts, a cancellation while a tool runs), written once and run against each
//! provider's wire through `kberg_testkit`'s scripted server and notes app.
//!
//! The replies are built by each test file from its provider's documented response shapes; this
//! module knows no provider wire.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too
#![allow(dead_code)]

pub mod controls;
pub mod credentials;
pub mod deadline;

use std::sync::Arc;

use kberg_agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, InferenceProvider, LocalSurface, Message,
    StopReason,
};
use kberg_core::{Caller, ErrorCode};
use kberg_testkit::scripted::{Reply, ScriptedServer};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The notes app the scenarios drive, seen by a caller granted `notes.write`.
pub fn app_surface() -> LocalSurface {
    LocalSurface::new(
        kberg_testkit::notes::registry(),
        Caller::new(kberg_testkit::notes::writer("tester")),
    )
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
    let server = ScriptedServer::start(vec![
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
        .run(
            vec![Message::user("add a note titled milk with priority 2")],
            &CancellationToken::new(),
        )
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
    // The third request carries the corrected call's result alone: the default
    // `forget_old_failures` leaves an earlier turn's failed call out of what the model is sent.
    let results = wire.tool_results(&reqs[2].body);
    assert_eq!(results, ["created milk (priority 2)"], "{:?}", reqs[2].body);
    assert!(!reqs[2].body.to_string().contains("`priority`"));
}

/// A refused call answered as final; the model accepts it.
pub async fn scenario_refusal(wire: &dyn Wire, make: MakeProvider<'_>, stream: bool) {
    let server = ScriptedServer::start(vec![
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
    let server = ScriptedServer::start(vec![wire.call(
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

/// The tool names a recorded request body carries: the listed tools', the forced choice's and
/// the earlier calls', in that order.
pub type SentNames<'a> = &'a dyn Fn(&Value) -> Vec<String>;

/// A provider used directly (no agent) with a tool named `files.read`, which hosted APIs
/// refuse, listed beside `search`, forced as the tool choice and called earlier in the
/// conversation: every one of those names reaches the server provider-safe, the alias the
/// agent would show, and the server's call to that alias comes back as `files.read`. A request
/// listing only safe names, as the agent sends them, goes as it is and its calls come back as
/// they came (no alias of an alias).
pub async fn scenario_unsafe_tool_names(
    wire: &dyn Wire,
    make: MakeProvider<'_>,
    stream: bool,
    sent_names: SentNames<'_>,
) {
    use kberg_agent::{ChatRequest, ToolCall, ToolChoice, ToolDefinition, ToolNames};
    use serde_json::json;

    let request = |tool: &str| {
        let schema = json!({"type": "object", "properties": {"path": {"type": "string"}}});
        ChatRequest {
            messages: vec![
                Message::user("read a"),
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "call_0".into(),
                        name: tool.into(),
                        arguments: json!({"path": "b"}),
                    }],
                },
                Message::Tool {
                    call_id: "call_0".into(),
                    name: tool.into(),
                    content: "b's text".into(),
                    is_error: false,
                },
            ],
            tools: vec![
                ToolDefinition::new(tool, "Reads a file", schema.clone()),
                ToolDefinition::new("search", "Searches", schema),
            ],
            options: kberg_agent::ChatOptions {
                tool_choice: ToolChoice::Tool(tool.into()),
                ..Default::default()
            },
        }
    };
    let unsafe_request = request("files.read");
    let alias = ToolNames::for_request(&unsafe_request)
        .to_model("files.read")
        .to_string();
    assert_eq!(alias, "files_read");
    let server = ScriptedServer::start(vec![
        wire.call("call_1", &alias, &serde_json::json!({"path": "a"}), stream),
        wire.call("call_2", &alias, &serde_json::json!({"path": "a"}), stream),
    ])
    .await;
    let provider = make(server.url());
    let turn = |request: ChatRequest| {
        let provider = provider.clone();
        async move {
            let cancel = CancellationToken::new();
            if stream {
                let s = provider.chat_stream(&request, &cancel).await.unwrap();
                kberg_agent::collect_stream(s, |_| {}).await.unwrap()
            } else {
                provider.chat(&request, &cancel).await.unwrap()
            }
        }
    };
    let answer = turn(unsafe_request).await;
    assert_eq!(answer.tool_calls.len(), 1);
    assert_eq!(answer.tool_calls[0].name, "files.read");
    assert_eq!(answer.tool_calls[0].id, "call_1");
    // The agent's request: already translated, so sent and read back unchanged.
    let answer = turn(request(&alias)).await;
    assert_eq!(answer.tool_calls[0].name, alias);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    for sent in &requests {
        assert_eq!(
            sent_names(&sent.body),
            [alias.as_str(), "search", alias.as_str(), alias.as_str()],
            "{}",
            sent.body
        );
    }
}

/// A refusal of a conversation past the model's context window: `body` answered with 400, and
/// the sizes the provider should read from it.
pub struct WindowRefusal {
    /// The error body, as the server writes it.
    pub body: Value,
    /// The tokens the request needed, as the body says.
    pub requested: Option<u64>,
    /// The context window, as the body says.
    pub limit: Option<u64>,
}

/// Each refusal, streamed and not, is `context_too_long` with its sizes and `hint` (the
/// provider's advice) in its words, and is not sent again (another try would be refused
/// alike).
pub async fn scenario_context_too_long(
    make: MakeProvider<'_>,
    refusals: &[WindowRefusal],
    hint: &str,
) {
    for refusal in refusals {
        for stream in [false, true] {
            let server = ScriptedServer::start(vec![Reply::json(400, &refusal.body)]).await;
            let p = make(server.url());
            let e = credentials::failed_turn(p.as_ref(), stream).await;
            let kberg_agent::ProviderError::ContextTooLong {
                requested, limit, ..
            } = &e
            else {
                panic!("{}: {e:?}", refusal.body);
            };
            assert_eq!(e.code(), "context_too_long");
            assert_eq!(
                (*requested, *limit),
                (refusal.requested, refusal.limit),
                "{e}"
            );
            assert!(e.to_string().contains(hint), "{e}");
            assert_eq!(server.requests().len(), 1, "sent again: {e}");
        }
    }
}

/// The same refusals written into a 200 (a gateway or proxy in front of the server that
/// answers every turn 200, or an error event of a stream already under way: `streamed` writes
/// a body as the provider's stream carries an error), each message quoting the request's
/// credentials: each is `context_too_long` with its sizes and `hint`, says `[redacted]` where
/// the credentials were, and is not sent again. `base_path` is the provider's base URL path.
pub async fn scenario_context_too_long_in_band(
    make: MakeProvider<'_>,
    base_path: &str,
    refusals: &[WindowRefusal],
    streamed: &dyn Fn(&Value) -> Reply,
    hint: &str,
) {
    for refusal in refusals {
        for stream in [false, true] {
            let reply = if stream {
                streamed(&refusal.body)
            } else {
                Reply::json(200, &refusal.body)
            };
            let server = ScriptedServer::start(vec![reply]).await;
            let p = make(credentials::with_credentials(&server.url(), base_path));
            let e = credentials::failed_turn(p.as_ref(), stream).await;
            let kberg_agent::ProviderError::ContextTooLong {
                requested, limit, ..
            } = &e
            else {
                panic!("{} (stream: {stream}): {e:?}", refusal.body);
            };
            assert_eq!(
                (*requested, *limit),
                (refusal.requested, refusal.limit),
                "{e}"
            );
            assert!(e.to_string().contains(hint), "{e}");
            assert!(e.to_string().contains("[redacted]"), "{e}");
            credentials::assert_hidden(&e);
            assert_eq!(server.requests().len(), 1, "sent again: {e}");
        }
    }
}

/// A reasoning model's thinking, handed on by the server apart from the text, comes back as
/// [`kberg_agent::ChatResponse::thinking`] (streamed: as `ChatDelta::Thinking` pieces), never
/// as text: `replies` are the same turn whole and streamed.
pub async fn scenario_thinking_apart(
    make: MakeProvider<'_>,
    replies: [Reply; 2],
    thinking: &str,
    text: &str,
) {
    let server = ScriptedServer::start(replies.into()).await;
    let p = make(server.url());
    let cancel = CancellationToken::new();
    let request = credentials::request();
    let whole = p.chat(&request, &cancel).await.unwrap();
    assert_eq!(
        (whole.thinking.as_str(), whole.text.as_str()),
        (thinking, text)
    );
    let mut thought = String::new();
    let mut said = String::new();
    let streamed = kberg_agent::collect_stream_observed(
        p.chat_stream(&request, &cancel).await.unwrap(),
        |d| match d {
            kberg_agent::ChatDelta::Thinking(t) => thought.push_str(t),
            kberg_agent::ChatDelta::Text(t) => said.push_str(t),
            _ => {}
        },
    )
    .await
    .unwrap();
    assert_eq!((thought.as_str(), said.as_str()), (thinking, text));
    assert_eq!(
        (streamed.thinking.as_str(), streamed.text.as_str()),
        (thinking, text)
    );
}
