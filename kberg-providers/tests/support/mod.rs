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
