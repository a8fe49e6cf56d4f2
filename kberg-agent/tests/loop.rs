//! The loop against an in-process registry and a scripted model: every way a run can end, the
//! repair turn, text-call recovery and coercion, events, streaming and resuming.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::Arc;

use kberg_agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, ChatResponse, LocalSurface, Message,
    ScriptedProvider, StopReason, Usage,
};
use kberg_core::{
    Caller, ErrorCode, Grants, Principal, SurfaceProjection, ToolBuilder, ToolOutput, ToolRegistry,
    WriteCapability,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[derive(Deserialize, JsonSchema)]
struct AddNote {
    title: String,
    priority: u8,
}

#[derive(Deserialize, JsonSchema)]
struct Search {
    query: String,
}

/// The notes app: `search_notes`, `add_note` (`notes.write`), `wait`, and the refusal
/// `delete_all_notes`.
fn registry() -> ToolRegistry {
    kberg_testkit::notes::registry_with_search()
}

fn writer() -> Caller {
    Caller::new(kberg_testkit::notes::writer("w"))
}

fn reader() -> Caller {
    Caller::new(Principal::new("r"))
}

fn agent(script: &ScriptedProvider, caller: Caller) -> Agent {
    Agent::new(script.clone(), LocalSurface::new(registry(), caller)).with_config(core())
}

/// The loop's core behaviour: the defaults without the checks that need a real conversation
/// (these scripts' users say "add milk" and the model writes a priority; the source check and
/// the request to look first are tested in `small_model.rs`).
fn core() -> AgentConfig {
    AgentConfig::default()
        .ground_write_arguments(false)
        .look_before_answering(false)
}

fn last_tool_text(script: &ScriptedProvider, turn: usize) -> String {
    let req = &script.requests()[turn];
    match req.messages.last() {
        Some(Message::Tool { content, .. }) => content.clone(),
        other => panic!("expected a tool result last, found {other:?}"),
    }
}

#[tokio::test]
async fn repair_turn_succeeds() {
    let script = ScriptedProvider::new([
        // Missing `priority`, wrong type for `title`.
        ScriptedProvider::call("c1", "add_note", json!({"title": 5})),
        ScriptedProvider::call("c2", "add_note", json!({"title": "milk", "priority": 2})),
        ScriptedProvider::text("Added the note."),
    ]);
    let out = agent(&script, writer())
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.text, "Added the note.");
    assert_eq!(out.repair_turns, 1);
    assert_eq!(out.turns, 3);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["invalid_arguments", "ok"]);
    // The diagnostic handed back names each field so the model can correct the call.
    let diag = last_tool_text(&script, 1);
    assert!(diag.contains("`priority`"), "{diag}");
    assert!(diag.contains("`title`"), "{diag}");
    assert!(diag.contains("call it again"), "{diag}");
    // The conversation is well formed: every call has its result right after it.
    assert!(
        matches!(&out.messages[1], Message::Assistant { tool_calls, .. } if tool_calls[0].id == "c1")
    );
    assert!(
        matches!(&out.messages[2], Message::Tool { call_id, is_error: true, .. } if call_id == "c1")
    );
}

#[tokio::test]
async fn refusal_is_final_and_accepted() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "delete_all_notes", json!({})),
        ScriptedProvider::text("I can't delete all notes; that is not offered."),
    ]);
    let out = agent(&script, writer())
        .run(
            vec![Message::user("delete everything")],
            &CancellationToken::new(),
        )
        .await;
    assert!(out.answered());
    assert_eq!(out.repair_turns, 0);
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::Refused)
    );
    let text = last_tool_text(&script, 1);
    assert!(text.contains("never offered to models"), "{text}");
    assert!(
        text.contains("do not call `delete_all_notes` again"),
        "{text}"
    );
}

#[tokio::test]
async fn missing_capability_is_final() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "add_note", json!({"title": "x", "priority": 1})),
        ScriptedProvider::text("I am not allowed to add notes."),
    ]);
    let out = agent(&script, reader())
        .run(vec![Message::user("add x")], &CancellationToken::new())
        .await;
    assert!(out.answered());
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::CapabilityRequired)
    );
    assert_eq!(out.repair_turns, 0);
    assert!(last_tool_text(&script, 1).contains("notes.write"));
}

#[tokio::test]
async fn same_bad_call_twice_stops_the_run() {
    let bad = json!({"title": "x"});
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "add_note", bad.clone()),
        ScriptedProvider::call("c2", "add_note", bad.clone()),
        ScriptedProvider::text("never reached"),
    ]);
    let out = agent(&script, writer())
        .with_config(core().final_answer_turn(false))
        .run(vec![Message::user("add x")], &CancellationToken::new())
        .await;
    match &out.stop {
        StopReason::RepeatedFailure { tool, code } => {
            assert_eq!(tool, "add_note");
            assert_eq!(*code, ErrorCode::InvalidArguments);
        }
        other => panic!("unexpected stop {other:?}"),
    }
    assert_eq!(out.stop.code(), "repeated_failure");
    assert_eq!(script.requests().len(), 2);
}

#[tokio::test]
async fn repeated_refusal_stops_the_run() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "delete_all_notes", json!({})),
        ScriptedProvider::call("c2", "delete_all_notes", json!({})),
    ]);
    let out = agent(&script, writer())
        .with_config(core().final_answer_turn(false))
        .run(vec![Message::user("delete")], &CancellationToken::new())
        .await;
    assert_eq!(out.stop.code(), "repeated_failure");
}

#[tokio::test]
async fn a_model_looping_on_a_failing_call_gets_one_answer_only_turn() {
    use kberg_agent::ToolChoice;
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "delete_all_notes", json!({})),
        ScriptedProvider::call("c2", "delete_all_notes", json!({})),
        ScriptedProvider::text("I cannot delete all notes here."),
    ]);
    let out = agent(&script, writer())
        .run(vec![Message::user("delete")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.answer(), Some("I cannot delete all notes here."));
    assert_eq!(script.requests()[2].options.tool_choice, ToolChoice::None);
    assert_eq!(out.interventions.final_answer_turns, 1);

    // No words in that turn either: the run ends with the repeat as its reason.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "delete_all_notes", json!({})),
        ScriptedProvider::call("c2", "delete_all_notes", json!({})),
        ScriptedProvider::text(r#"{"name": "delete_all_notes", "arguments": {}}"#),
        ScriptedProvider::text(r#"{"name": "delete_all_notes"}"#),
    ]);
    let out = agent(&script, writer())
        .run(vec![Message::user("delete")], &CancellationToken::new())
        .await;
    assert_eq!(out.stop.code(), "repeated_failure");
    assert!(!out.answered());
    assert_eq!(out.answer(), None);
}

#[tokio::test]
async fn repair_budget_is_bounded() {
    // Different bad calls each turn: only the repair limit stops it.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "add_note", json!({"title": 1})),
        ScriptedProvider::call("c2", "add_note", json!({"title": 2})),
        ScriptedProvider::call("c3", "add_note", json!({"title": 3})),
    ]);
    let agent = agent(&script, writer()).with_config(core().max_repair_turns(2));
    let out = agent
        .run(vec![Message::user("add")], &CancellationToken::new())
        .await;
    assert!(
        matches!(out.stop, StopReason::RepairLimit { limit: 2 }),
        "{:?}",
        out.stop
    );
    assert_eq!(out.repair_turns, 2);
    assert_eq!(out.turns, 3);
}

#[tokio::test]
async fn cancellation_mid_tool() {
    let script =
        ScriptedProvider::new([ScriptedProvider::call("c1", "wait", json!({"seconds": 30}))]);
    let cancel = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let agent = agent(&script, writer());
    let run = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            agent
                .run_with_events(vec![Message::user("wait")], &cancel, tx)
                .await
        })
    };
    // Cancel once the tool is running.
    while let Some(ev) = rx.recv().await {
        if matches!(ev, AgentEvent::ToolCalled { .. }) {
            cancel.cancel();
            break;
        }
    }
    let out = run.await.unwrap();
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::Cancelled)
    );
    // The stored conversation stays well formed.
    assert!(matches!(out.messages.last(), Some(Message::Tool { call_id, .. }) if call_id == "c1"));
}

#[tokio::test]
async fn cancelled_before_start() {
    let script = ScriptedProvider::new([ScriptedProvider::text("hi")]);
    let cancel = CancellationToken::new();
    cancel.cancel();
    let out = agent(&script, writer())
        .run(vec![Message::user("hi")], &cancel)
        .await;
    assert!(matches!(out.stop, StopReason::Cancelled));
    assert_eq!(out.turns, 0);
}

#[tokio::test]
async fn turn_limit_and_token_budget() {
    let calls = (0..5).map(|i| {
        ScriptedProvider::call(
            &format!("c{i}"),
            "search_notes",
            json!({"query": format!("q{i}")}),
        )
    });
    let script = ScriptedProvider::new(calls);
    let out = agent(&script, writer())
        .with_config(core().max_turns(3).final_answer_turn(false))
        .run(vec![Message::user("search")], &CancellationToken::new())
        .await;
    assert!(matches!(out.stop, StopReason::TurnLimit));
    assert_eq!(out.turns, 3);
    assert_eq!(out.calls.len(), 3);

    let mut costly = ScriptedProvider::call("c1", "search_notes", json!({"query": "a"}));
    costly.usage = Usage {
        input_tokens: 900,
        output_tokens: 200,
    };
    let script = ScriptedProvider::new([costly]);
    let out = agent(&script, writer())
        .with_config(core().token_budget(1000))
        .run(vec![Message::user("search")], &CancellationToken::new())
        .await;
    assert!(matches!(out.stop, StopReason::TokenBudget));
    assert!(out.calls.is_empty(), "calls past the budget are not run");
    assert_eq!(out.usage.total(), 1100);
}

#[tokio::test]
async fn text_embedded_call_is_recovered_and_coerced() {
    let script = ScriptedProvider::new([
        ScriptedProvider::text(
            "I'll add it.\n```json\n{\"name\": \"add_note\", \"arguments\": \"{\\\"title\\\": \\\"milk\\\", \\\"priority\\\": \\\"3\\\"}\"}\n```",
        ),
        ScriptedProvider::text("Done."),
    ]);
    let out = agent(&script, writer())
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let call = &out.calls[0];
    assert!(call.recovered_from_text);
    assert_eq!(call.outcome, CallOutcome::Ok);
    assert_eq!(call.arguments, json!({"title": "milk", "priority": 3}));
    let pointers: Vec<&str> = call.coercions.iter().map(|c| c.pointer.as_str()).collect();
    assert_eq!(pointers, ["", "/priority"]);
    assert!(last_tool_text(&script, 1).contains("created milk (priority 3)"));
}

/// A call written with its arguments beside the name, each one the tool declares, is run; JSON
/// that names a tool among a field it does not declare (the model describing it) is not.
#[tokio::test]
async fn a_text_call_with_flat_arguments_is_run_and_a_description_is_not() {
    let script = ScriptedProvider::new([
        ScriptedProvider::text(r#"{"name": "add_note", "title": "milk", "priority": 2}"#),
        ScriptedProvider::text("Added milk."),
    ]);
    let out = agent(&script, writer())
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.calls.len(), 1);
    let call = &out.calls[0];
    assert!(call.recovered_from_text);
    assert_eq!(call.outcome, CallOutcome::Ok);
    assert_eq!(call.arguments, json!({"title": "milk", "priority": 2}));

    let prose = r#"{"name": "add_note", "title": "milk", "description": "adds a note"}"#;
    let script = ScriptedProvider::new([ScriptedProvider::text(format!("I can use {prose}"))]);
    let out = agent(&script, writer())
        .run(
            vec![Message::user("what can you do?")],
            &CancellationToken::new(),
        )
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert!(out.calls.is_empty(), "{:?}", out.calls);
}

#[tokio::test]
async fn text_call_to_invisible_tool_is_never_executed() {
    // `wait` is not small_model_safe, so a Compact caller does not see it; `delete_all_notes`
    // is a refusal. Text naming them is the answer, not a call.
    let caller = Caller::new(
        Principal::new("small")
            .with_grants(Grants::of(["notes.write"]))
            .with_projection(SurfaceProjection::Compact),
    );
    let text = r#"{"name": "wait", "arguments": {"seconds": 1}} {"name": "delete_all_notes", "arguments": {}}"#;
    let script = ScriptedProvider::new([ScriptedProvider::text(format!("Calling: {text}"))]);
    let out = agent(&script, caller.clone())
        .with_config(core().explain_unlisted_calls(false))
        .run(vec![Message::user("go")], &CancellationToken::new())
        .await;
    assert!(out.answered());
    assert!(out.calls.is_empty());
    assert_eq!(out.text, format!("Calling: {text}"));
    // And the compact surface lists only the small-model-safe tools.
    let names: Vec<String> = script.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    // In registration order.
    assert_eq!(names, ["search_notes", "add_note"]);
}

#[tokio::test]
async fn compact_surface_hides_ungranted_writes() {
    let caller = Caller::new(Principal::new("small").with_projection(SurfaceProjection::Compact));
    let script = ScriptedProvider::new([ScriptedProvider::text("ok")]);
    agent(&script, caller)
        .run(vec![Message::user("go")], &CancellationToken::new())
        .await;
    let names: Vec<String> = script.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["search_notes"]);
}

#[tokio::test]
async fn events_streaming_and_resume() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "rust"})),
        ScriptedProvider::text("Two notes."),
    ]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let agent =
        agent(&script, writer()).with_config(core().stream(true).system_prompt("Use the tools."));
    let out = agent
        .run_with_events(vec![Message::user("rust?")], &CancellationToken::new(), tx)
        .await;
    assert!(out.answered());
    let mut kinds = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        kinds.push(match ev {
            AgentEvent::TurnStarted { .. } => "turn",
            AgentEvent::TextDelta { .. } => "text",
            AgentEvent::ToolCalled { .. } => "called",
            AgentEvent::ToolResult { .. } => "result",
            _ => "other",
        });
    }
    assert_eq!(kinds, ["turn", "called", "result", "turn", "text"]);
    assert!(matches!(&out.messages[0], Message::System { content } if content == "Use the tools."));

    // Persist, reload, resume: the model sees the whole stored conversation.
    let stored = serde_json::to_string(&out.messages).unwrap();
    let mut resumed: Vec<Message> = serde_json::from_str(&stored).unwrap();
    resumed.push(Message::user("thanks"));
    script.push(ScriptedProvider::text("You're welcome."));
    let out2 = agent.run(resumed.clone(), &CancellationToken::new()).await;
    assert_eq!(out2.text, "You're welcome.");
    let last_req = script.requests().pop().unwrap();
    assert_eq!(last_req.messages, resumed);
}

#[tokio::test]
async fn provider_failure_is_reported() {
    let script = ScriptedProvider::new(Vec::<ChatResponse>::new());
    let out = agent(&script, writer())
        .run(vec![Message::user("hi")], &CancellationToken::new())
        .await;
    match &out.stop {
        StopReason::Provider(e) => assert_eq!(e.code(), "malformed"),
        other => panic!("unexpected stop {other:?}"),
    }
}

#[tokio::test]
async fn unknown_tool_from_the_model_is_answered_not_run() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "format_disk", json!({})),
        ScriptedProvider::text("That tool does not exist."),
    ]);
    let out = agent(&script, writer())
        .run(vec![Message::user("x")], &CancellationToken::new())
        .await;
    assert!(out.answered());
    assert_eq!(
        out.calls[0].outcome,
        CallOutcome::Failed(ErrorCode::UnknownTool)
    );
}

#[tokio::test]
async fn shared_agent_runs_concurrently() {
    let script = ScriptedProvider::new([ScriptedProvider::text("a"), ScriptedProvider::text("b")]);
    let agent = Arc::new(agent(&script, writer()));
    let (c1, c2) = (CancellationToken::new(), CancellationToken::new());
    let (a, b) = tokio::join!(
        agent.run(vec![Message::user("1")], &c1),
        agent.run(vec![Message::user("2")], &c2)
    );
    let mut texts = [a.text, b.text];
    texts.sort();
    assert_eq!(texts, ["a", "b"]);
}

/// Any script: the run never panics, every stored call is answered by its result right after
/// it, the outcome lists exactly the answered calls, and no call outside the caller's surface
/// ever succeeds.
mod random_scripts {
    use super::*;
    use proptest::prelude::*;

    fn response() -> impl Strategy<Value = ChatResponse> {
        let name = prop_oneof![
            Just("add_note"),
            Just("search_notes"),
            Just("wait"),
            Just("delete_all_notes"),
            Just("nope"),
        ];
        let args = prop_oneof![
            Just(json!({})),
            Just(json!({"query": "q"})),
            Just(json!({"title": "t", "priority": "2"})),
            Just(json!({"title": 1})),
            Just(json!("{\"query\": \"s\"}")),
            Just(json!({"seconds": 0})),
            Just(json!([1, 2])),
        ];
        let call = (name.clone(), args.clone()).prop_map(|(n, a)| ScriptedProvider::call("", n, a));
        let text_call = (name, args).prop_map(|(n, a)| {
            ScriptedProvider::text(format!(
                "```json\n{{\"name\": \"{n}\", \"arguments\": {a}}}\n```"
            ))
        });
        let tokens = (0u64..400).prop_map(|n| ChatResponse {
            text: "plain answer".into(),
            usage: Usage {
                input_tokens: n,
                output_tokens: n,
            },
            ..ChatResponse::default()
        });
        prop_oneof![3 => call, 2 => text_call, 1 => tokens, 1 => Just(ScriptedProvider::text("done"))]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn runs_stay_well_formed(script in proptest::collection::vec(response(), 0..8), budget in proptest::option::of(1u64..600)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let caller = Caller::new(
                Principal::new("small")
                    .with_grants(Grants::of(["notes.write"]))
                    .with_projection(SurfaceProjection::Compact),
            );
            let mut config = core().max_turns(6);
            if let Some(b) = budget {
                config = config.token_budget(b);
            }
            let agent = agent(&ScriptedProvider::new(script), caller).with_config(config);
            let out = rt.block_on(agent.run(vec![Message::user("go")], &CancellationToken::new()));

            let mut answered = 0;
            let mut i = 0;
            while i < out.messages.len() {
                if let Message::Assistant { tool_calls, .. } = &out.messages[i] {
                    for (k, call) in tool_calls.iter().enumerate() {
                        match out.messages.get(i + 1 + k) {
                            Some(Message::Tool { call_id, .. }) => prop_assert_eq!(call_id, &call.id),
                            other => prop_assert!(false, "call {} unanswered: {:?}", call.id, other),
                        }
                    }
                    answered += tool_calls.len();
                    i += tool_calls.len();
                }
                i += 1;
            }
            prop_assert_eq!(out.calls.len(), answered);
            for c in &out.calls {
                // `wait` is not small-model-safe: the compact caller may never run it.
                prop_assert!(!(c.name == "wait" && c.outcome == CallOutcome::Ok));
                prop_assert!(!(c.name == "delete_all_notes" && c.outcome == CallOutcome::Ok));
            }
            prop_assert!(out.turns <= 6);
        }
    }
}

/// A registry whose `add_note` (write) and `search_notes` (read) count their runs.
fn counting_registry() -> (
    ToolRegistry,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let writes = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let tools = ToolRegistry::new();
    let write = WriteCapability::new("notes.write", "Create notes");
    tools.declare(write.clone()).unwrap();
    let w = Arc::clone(&writes);
    tools
        .register(
            ToolBuilder::new("add_note")
                .description("Create a note")
                .write(write)
                .handler(move |a: AddNote, _| {
                    let w = Arc::clone(&w);
                    async move {
                        w.fetch_add(1, Ordering::SeqCst);
                        Ok(ToolOutput::text(format!(
                            "created {} (priority {})",
                            a.title, a.priority
                        )))
                    }
                }),
        )
        .unwrap();
    let r = Arc::clone(&reads);
    tools
        .register(
            ToolBuilder::new("search_notes")
                .description("Find notes")
                .handler(move |a: Search, _| {
                    let r = Arc::clone(&r);
                    async move {
                        r.fetch_add(1, Ordering::SeqCst);
                        Ok(ToolOutput::text(format!("found 2 notes about {}", a.query)))
                    }
                }),
        )
        .unwrap();
    (tools, writes, reads)
}

#[tokio::test]
async fn a_repeated_identical_write_is_not_run_again_and_the_model_is_asked_to_answer() {
    use kberg_agent::ToolChoice;
    use std::sync::atomic::Ordering;
    let (tools, writes, _) = counting_registry();
    let milk = json!({"title": "milk", "priority": 2});
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "add_note", milk.clone()),
        // Small models often send the very same call again after it succeeded.
        ScriptedProvider::call("c2", "add_note", milk.clone()),
        ScriptedProvider::text("Added the note."),
    ]);
    let out = Agent::new(script.clone(), LocalSurface::new(tools, writer()))
        .with_config(core())
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(writes.load(Ordering::SeqCst), 1, "the write ran twice");
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok", "duplicate"]);
    assert_eq!(out.calls[1].outcome, CallOutcome::Duplicate);
    // The model is given the earlier result and told to answer ...
    let note = out
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                call_id, content, ..
            } if call_id == "c2" => Some(content.clone()),
            _ => None,
        })
        .expect("the repeat's answer is stored");
    assert!(note.contains("Not run again"), "{note}");
    assert!(note.contains("created milk (priority 2)"), "{note}");
    // ... not as an error (nothing failed) ...
    assert!(matches!(
        out.messages.last(),
        Some(Message::Assistant { .. })
    ));
    assert!(
        out.messages.iter().any(
            |m| matches!(m, Message::Tool { call_id, is_error: false, .. } if call_id == "c2")
        )
    );
    // ... and its next turn may not call tools; the turn after that is back to normal.
    let reqs = script.requests();
    assert_eq!(reqs[1].options.tool_choice, ToolChoice::Auto);
    assert_eq!(reqs[2].options.tool_choice, ToolChoice::None);
}

#[tokio::test]
async fn a_text_call_to_an_unlisted_tool_is_answered_with_the_reason_and_never_run() {
    // By default the model hears why: the refusal's reason, the projection, and the listed names.
    let caller = Caller::new(
        Principal::new("small")
            .with_grants(Grants::of(["notes.write"]))
            .with_projection(SurfaceProjection::Compact),
    );
    let text = r#"{"name": "wait", "arguments": {"seconds": 1}} {"name": "delete_all_notes", "arguments": {}}"#;
    let script = ScriptedProvider::new([
        ScriptedProvider::text(text),
        ScriptedProvider::text("I cannot do that here."),
    ]);
    let out = agent(&script, caller)
        .run(vec![Message::user("go")], &CancellationToken::new())
        .await;
    assert!(out.answered());
    let got: Vec<(&str, &str, bool)> = out
        .calls
        .iter()
        .map(|c| (c.name.as_str(), c.outcome.as_str(), c.not_sent))
        .collect();
    assert_eq!(
        got,
        [
            ("wait", "not_in_surface", true),
            ("delete_all_notes", "refused", true)
        ]
    );
    assert_eq!(out.interventions.unlisted_explained, 2);
    let told = last_tool_text(&script, 1);
    assert!(told.contains("not offered"), "{told}");
    assert!(
        told.contains("The tools you can call are: search_notes, add_note."),
        "{told}"
    );
    // The stored conversation keeps what the model wrote beside the calls.
    let Message::Assistant {
        content,
        tool_calls,
    } = &out.messages[1]
    else {
        panic!("{:?}", out.messages[1]);
    };
    assert_eq!(content, text);
    assert_eq!(tool_calls.len(), 2);
}

#[tokio::test]
async fn the_answer_only_turn_does_not_recover_calls_from_text() {
    use std::sync::atomic::Ordering;
    let (tools, writes, _) = counting_registry();
    let milk = json!({"title": "milk", "priority": 2});
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "add_note", milk.clone()),
        ScriptedProvider::call("c2", "add_note", milk.clone()),
        // Asked to answer, the model writes the call into its text once more.
        ScriptedProvider::text(
            r#"{"name": "add_note", "arguments": {"title": "eggs", "priority": 1}}"#,
        ),
        // That is not an answer: asked once for words, it answers.
        ScriptedProvider::text("Added milk."),
    ]);
    let out = Agent::new(script.clone(), LocalSurface::new(tools, writer()))
        .with_config(core())
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.answer(), Some("Added milk."));
    assert_eq!(out.calls.len(), 2);
    assert_eq!(writes.load(Ordering::SeqCst), 1);
    assert_eq!(out.interventions.words_requested, 1);
}

#[tokio::test]
async fn a_repeated_read_is_guarded_and_the_guards_can_be_turned_off() {
    use kberg_agent::ToolChoice;
    use std::sync::atomic::Ordering;
    // A read repeated with the same arguments is not run again; the model gets the earlier
    // result and an answer-only turn.
    let (tools, _, reads) = counting_registry();
    let q = json!({"query": "milk"});
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", q.clone()),
        ScriptedProvider::call("c2", "search_notes", q.clone()),
        ScriptedProvider::text("Two notes."),
    ]);
    let out = Agent::new(script.clone(), LocalSurface::new(tools.clone(), writer()))
        .with_config(core())
        .run(vec![Message::user("find milk")], &CancellationToken::new())
        .await;
    assert!(out.answered());
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    assert_eq!(out.calls[1].outcome.as_str(), "duplicate");
    assert_eq!(out.interventions.reads_deduplicated, 1);
    assert_eq!(script.requests()[2].options.tool_choice, ToolChoice::None);

    // Apps whose reads are polled turn the read guard off: they run every time.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", q.clone()),
        ScriptedProvider::call("c2", "search_notes", q.clone()),
        ScriptedProvider::text("Two notes."),
    ]);
    let out = Agent::new(script.clone(), LocalSurface::new(tools, writer()))
        .with_config(core().guard_repeated_reads(false))
        .run(vec![Message::user("find milk")], &CancellationToken::new())
        .await;
    assert!(out.answered());
    assert_eq!(reads.load(Ordering::SeqCst), 3);
    assert_eq!(script.requests()[2].options.tool_choice, ToolChoice::Auto);

    // An app whose writes are meant to repeat turns the guard off, and the hold on writes
    // that carry nothing new from the request (the repeat is one).
    let (tools, writes, _) = counting_registry();
    let milk = json!({"title": "milk", "priority": 2});
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "add_note", milk.clone()),
        ScriptedProvider::call("c2", "add_note", milk.clone()),
        ScriptedProvider::text("Added two."),
    ]);
    let out = Agent::new(script.clone(), LocalSurface::new(tools, writer()))
        .with_config(core().dedupe_writes(false).stop_unrequested_writes(false))
        .run(
            vec![Message::user("add milk twice")],
            &CancellationToken::new(),
        )
        .await;
    assert!(out.answered());
    assert_eq!(writes.load(Ordering::SeqCst), 2);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok", "ok"]);
}

#[tokio::test]
async fn the_first_turn_tool_choice_applies_to_the_first_turn_only() {
    use kberg_agent::ToolChoice;
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "milk"})),
        ScriptedProvider::text("Two notes."),
    ]);
    let out = agent(&script, writer())
        .with_config(core().first_turn_tool_choice(ToolChoice::Required))
        .run(vec![Message::user("find milk")], &CancellationToken::new())
        .await;
    assert!(out.answered());
    let reqs = script.requests();
    assert_eq!(reqs[0].options.tool_choice, ToolChoice::Required);
    assert_eq!(reqs[1].options.tool_choice, ToolChoice::Auto);
}

#[tokio::test]
async fn the_same_write_with_its_arguments_in_another_order_is_still_a_repeat() {
    use std::sync::atomic::Ordering;
    let (tools, writes, _) = counting_registry();
    let a: serde_json::Value = serde_json::from_str(r#"{"title": "milk", "priority": 2}"#).unwrap();
    let b: serde_json::Value = serde_json::from_str(r#"{"priority": 2, "title": "milk"}"#).unwrap();
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "add_note", a),
        ScriptedProvider::call("c2", "add_note", b),
        ScriptedProvider::text("Added."),
    ]);
    let out = Agent::new(script, LocalSurface::new(tools, writer()))
        .with_config(core())
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert_eq!(writes.load(Ordering::SeqCst), 1);
    assert_eq!(out.calls[1].outcome, CallOutcome::Duplicate);
}

#[tokio::test]
async fn an_answer_only_turn_is_sent_as_the_results_and_the_request_without_tools() {
    use kberg_agent::ToolChoice;
    let (tools, _, _) = counting_registry();
    let q = json!({"query": "milk"});
    let turns = || {
        ScriptedProvider::new([
            ScriptedProvider::call("c1", "search_notes", q.clone()),
            // A failed call: its reason is a result the answer may need.
            ScriptedProvider::call("c2", "add_note", json!({"title": "milk"})),
            ScriptedProvider::call("c3", "search_notes", q.clone()),
            ScriptedProvider::text("Two notes mention milk."),
        ])
    };
    let request = vec![Message::system("Be brief."), Message::user("find milk")];

    // On (the default): the caller's messages, then one message with each result once, the
    // call that gave it, and the request to answer; no tools, tool choice `none`.
    let script = turns();
    let out = Agent::new(script.clone(), LocalSurface::new(tools.clone(), writer()))
        .with_config(core())
        .run(request.clone(), &CancellationToken::new())
        .await;
    assert_eq!(out.answer(), Some("Two notes mention milk."));
    assert_eq!(out.interventions.answer_turns_focused, 1);
    let sent = &script.requests()[3];
    assert!(sent.tools.is_empty(), "{:?}", sent.tools);
    assert_eq!(sent.options.tool_choice, ToolChoice::None);
    assert_eq!(sent.messages.len(), 3, "{:#?}", sent.messages);
    assert_eq!(sent.messages[..2], request[..]);
    let Message::User { content } = &sent.messages[2] else {
        panic!(
            "expected the results as a user message: {:?}",
            sent.messages[2]
        );
    };
    let search = "search_notes(query: milk) returned:\n";
    assert_eq!(content.matches(search).count(), 1, "{content}");
    assert!(
        content.contains("add_note(title: milk) failed:\n"),
        "{content}"
    );
    assert!(!content.contains("Not run again"), "{content}");
    assert!(content.ends_with("Do not write JSON."), "{content}");
    // The stored conversation keeps every turn as it happened.
    assert!(
        out.messages.iter().any(
            |m| matches!(m, Message::Tool { content, .. } if content.contains("Not run again"))
        )
    );

    // Off: the whole conversation and the listing, tool choice `none`.
    let script = turns();
    let out = Agent::new(script.clone(), LocalSurface::new(tools.clone(), writer()))
        .with_config(core().focused_answer_turns(false))
        .run(request.clone(), &CancellationToken::new())
        .await;
    assert_eq!(out.answer(), Some("Two notes mention milk."));
    assert_eq!(out.interventions.answer_turns_focused, 0);
    let sent = &script.requests()[3];
    assert!(!sent.tools.is_empty());
    assert_eq!(sent.options.tool_choice, ToolChoice::None);
    assert!(last_tool_text(&script, 3).contains("Not run again"));

    // A caller's history that holds calls keeps the listing (some wires refuse results
    // without it), still with tool choice `none`.
    let mut history = vec![
        Message::user("earlier"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![kberg_agent::ToolCall {
                id: "h1".into(),
                name: "search_notes".into(),
                arguments: json!({"query": "x"}),
            }],
        },
        Message::Tool {
            call_id: "h1".into(),
            name: "search_notes".into(),
            content: "nothing".into(),
            is_error: false,
        },
    ];
    history.push(Message::user("find milk"));
    let script = turns();
    Agent::new(script.clone(), LocalSurface::new(tools, writer()))
        .with_config(core())
        .run(history, &CancellationToken::new())
        .await;
    let sent = &script.requests()[3];
    assert!(!sent.tools.is_empty());
    assert_eq!(sent.options.tool_choice, ToolChoice::None);
    assert_eq!(sent.messages.len(), 5);
}

/// A registry with `index`, a tool that reports its progress (three steps, one of them a
/// repeat, which the sink drops) and says whether it was asked for progress at all.
fn progress_registry() -> ToolRegistry {
    let r = ToolRegistry::new();
    r.register(
        ToolBuilder::new("index")
            .description("Index the repository")
            .raw_handler(json!({"type": "object"}), |_, ctx| async move {
                let asked = ctx.progress_token().is_some();
                for (done, message) in [(1.0, "reading"), (1.0, "again"), (2.0, "writing")] {
                    ctx.progress(done, Some(2.0), Some(message))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                ctx.log("info", None, json!("a log line goes nowhere"))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(ToolOutput::text(format!("asked for progress: {asked}")))
            }),
    )
    .unwrap();
    r
}

/// A model that calls `index` once, then answers, with [`progress_registry`].
fn indexing_agent() -> (ScriptedProvider, Agent) {
    indexing_agent_with(core())
}

fn indexing_agent_with(config: AgentConfig) -> (ScriptedProvider, Agent) {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "index", json!({})),
        ScriptedProvider::text("indexed"),
    ]);
    let surface = LocalSurface::new(progress_registry(), reader());
    let agent = Agent::new(script.clone(), surface).with_config(config);
    (script, agent)
}

/// A run with events asks the tool for progress and passes each report on, in order, between
/// the call and its result, with the call's id; a report that does not advance is dropped.
#[tokio::test]
async fn a_tools_progress_reaches_the_runs_events() {
    let (_script, agent) = indexing_agent();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = agent
        .run_with_events(vec![Message::user("index")], &CancellationToken::new(), tx)
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let mut seen = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        match ev {
            AgentEvent::ToolCalled { call, .. } => seen.push(format!("called {}", call.id)),
            AgentEvent::ToolProgress {
                call_id,
                name,
                progress,
                total,
                message,
            } => seen.push(format!(
                "{call_id} {name} {progress}/{} {}",
                total.unwrap(),
                message.unwrap()
            )),
            AgentEvent::ToolResult { call_id, text, .. } => {
                seen.push(format!("result {call_id}: {text}"));
            }
            _ => {}
        }
    }
    assert_eq!(
        seen,
        [
            "called c1",
            "c1 index 1/2 reading",
            "c1 index 2/2 writing",
            "result c1: asked for progress: true",
        ]
    );
}

/// A run without events asks tools for progress only for its idle timeout (a report is a sign
/// of work; see `tests/timeouts.rs`); with no idle timeout either, it asks for none.
#[tokio::test]
async fn a_run_without_events_asks_for_progress_only_for_its_idle_timeout() {
    for (config, asked) in [(core(), true), (core().tool_idle_timeout(None), false)] {
        let (script, agent) = indexing_agent_with(config);
        let out = agent
            .run(vec![Message::user("index")], &CancellationToken::new())
            .await;
        assert!(out.answered(), "{:?}", out.stop);
        assert_eq!(out.calls[0].outcome, CallOutcome::Ok);
        assert_eq!(
            last_tool_text(&script, 1),
            format!("asked for progress: {asked}")
        );
    }
}

/// A surface that lists only `search_notes` but would run any tool it is asked to, recording
/// each call's name: what a server does with a tool it keeps off a caller's listing.
#[derive(Default)]
struct ListsLessThanItRuns {
    ran: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl kberg_agent::ToolSurface for ListsLessThanItRuns {
    async fn tools(&self) -> Result<Vec<kberg_agent::ToolDefinition>, kberg_agent::SurfaceError> {
        Ok(vec![
            kberg_agent::ToolDefinition::new(
                "search_notes",
                "Search the notes",
                json!({"type": "object"}),
            )
            .read_only(true),
        ])
    }

    async fn call(
        &self,
        name: &str,
        _arguments: serde_json::Value,
        _cancel: CancellationToken,
    ) -> Result<kberg_agent::ToolResult, kberg_agent::SurfaceError> {
        self.ran.lock().unwrap().push(name.to_string());
        Ok(kberg_agent::ToolResult::ok(format!("{name} ran")))
    }
}

#[tokio::test]
async fn a_structured_call_to_an_unlisted_tool_is_answered_and_never_sent() {
    // With the small-model behaviours off too: never running an unlisted tool is no option.
    for config in [core(), core().without_small_model_guards()] {
        let surface = Arc::new(ListsLessThanItRuns::default());
        let mut turn = ScriptedProvider::call("c1", "drop_all_notes", json!({}));
        let mut listed = ScriptedProvider::call("c2", "search_notes", json!({"query": "x"}));
        turn.tool_calls.append(&mut listed.tool_calls);
        let script = ScriptedProvider::new([turn, ScriptedProvider::text("I cannot drop notes.")]);
        let out = Agent::from_arcs(Arc::new(script), surface.clone())
            .with_config(config)
            .run(vec![Message::user("drop them")], &CancellationToken::new())
            .await;
        assert!(out.answered(), "{:?}", out.stop);
        // Only the listed tool reached the surface.
        assert_eq!(*surface.ran.lock().unwrap(), ["search_notes"]);
        let got: Vec<(&str, &str, bool)> = out
            .calls
            .iter()
            .map(|c| (c.name.as_str(), c.outcome.as_str(), c.not_sent))
            .collect();
        assert_eq!(
            got,
            [
                ("drop_all_notes", "unknown_tool", true),
                ("search_notes", "ok", false)
            ]
        );
        // Answered as a text call to it is: not a tool, do not call it again, the listed names.
        let told = out
            .messages
            .iter()
            .find_map(|m| match m {
                Message::Tool {
                    call_id, content, ..
                } if call_id == "c1" => Some(content.clone()),
                _ => None,
            })
            .unwrap();
        assert!(
            told.contains("`drop_all_notes` is not a tool you can call"),
            "{told}"
        );
        assert!(
            told.contains("do not call `drop_all_notes` again"),
            "{told}"
        );
        assert!(told.contains("search_notes"), "{told}");
    }
}

/// One turn holding `n` calls to `search_notes`, each with its own query (so none collapse).
fn many_searches(n: usize) -> ChatResponse {
    let mut turn = ScriptedProvider::call("c1", "search_notes", json!({"query": "q1"}));
    for i in 2..=n {
        let mut more = ScriptedProvider::call(
            &format!("c{i}"),
            "search_notes",
            json!({"query": format!("q{i}")}),
        );
        turn.tool_calls.append(&mut more.tool_calls);
    }
    turn
}

/// A server that gives every call of a message one id: each copy gets the id with the first
/// free suffix, found without trying every suffix the earlier copies took (20,000 calls were
/// some 200 million tries).
#[tokio::test]
async fn many_calls_with_one_id_get_their_own_ids_in_linear_time() {
    let n = 20_000;
    let mut turn = many_searches(n);
    for call in &mut turn.tool_calls {
        call.id = "call_0".into();
    }
    let script = ScriptedProvider::new([turn, ScriptedProvider::text("Found them.")]);
    let out = agent(&script, reader())
        .run(vec![Message::user("search")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.calls.len(), n);
    assert_eq!(out.calls[0].id, "call_0");
    for (i, call) in out.calls.iter().enumerate().skip(1) {
        assert_eq!(call.id, format!("call_0_{}", i + 1));
    }
    assert_eq!(
        out.interventions.call_ids_renamed,
        u32::try_from(n - 1).unwrap()
    );
}

#[tokio::test]
async fn calls_past_the_per_turn_limit_are_answered_not_run() {
    for (config, limit) in [
        (core(), 16),
        (core().max_calls_per_turn(3), 3),
        (core().without_small_model_guards(), 16),
    ] {
        let surface = Arc::new(ListsLessThanItRuns::default());
        let script =
            ScriptedProvider::new([many_searches(1000), ScriptedProvider::text("Found them.")]);
        let out = Agent::from_arcs(Arc::new(script), surface.clone())
            .with_config(config)
            .run(vec![Message::user("search")], &CancellationToken::new())
            .await;
        assert!(out.answered(), "{:?}", out.stop);
        // The first `limit` calls ran, in order; the rest were answered without being sent.
        assert_eq!(surface.ran.lock().unwrap().len(), limit);
        assert_eq!(out.calls.len(), 1000);
        for (i, call) in out.calls.iter().enumerate() {
            if i < limit {
                assert_eq!((call.outcome, call.not_sent), (CallOutcome::Ok, false));
            } else {
                assert_eq!(call.outcome.as_str(), "too_many_calls", "{i}");
                assert!(call.not_sent);
            }
        }
        // Every call id has its result, right after the turn, in order.
        let results: Vec<(&str, &str)> = out
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool {
                    call_id, content, ..
                } => Some((call_id.as_str(), content.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), 1000);
        for (i, (id, _)) in results.iter().enumerate() {
            assert_eq!(*id, format!("c{}", i + 1));
        }
        let over = results[limit].1;
        assert!(
            over.contains("not run: too many calls in one message"),
            "{over}"
        );
    }
}

/// A surface whose one tool cancels the run (through the run's own token, as a user pressing
/// stop while it runs) and answers as if nothing happened: it never looks at its call's token.
struct CancelsTheRun {
    run: CancellationToken,
    ran: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl kberg_agent::ToolSurface for CancelsTheRun {
    async fn tools(&self) -> Result<Vec<kberg_agent::ToolDefinition>, kberg_agent::SurfaceError> {
        ListsLessThanItRuns::default().tools().await
    }

    async fn call(
        &self,
        name: &str,
        _arguments: serde_json::Value,
        _cancel: CancellationToken,
    ) -> Result<kberg_agent::ToolResult, kberg_agent::SurfaceError> {
        self.ran.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.run.cancel();
        Ok(kberg_agent::ToolResult::ok(format!("{name} ran")))
    }
}

#[tokio::test]
async fn a_run_cancelled_during_a_call_runs_none_of_the_turns_later_calls() {
    let run = CancellationToken::new();
    let surface = Arc::new(CancelsTheRun {
        run: run.clone(),
        ran: Default::default(),
    });
    let script = ScriptedProvider::new([many_searches(5), ScriptedProvider::text("unreached")]);
    // The searches are read-only: one at a time here (read-only calls of one message are
    // otherwise sent together, all before the cancellation; see the next test).
    let out = Agent::from_arcs(Arc::new(script), surface.clone())
        .with_config(core().concurrent_reads(1))
        .run(vec![Message::user("search")], &run)
        .await;
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_eq!(surface.ran.load(std::sync::atomic::Ordering::SeqCst), 1);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(
        outcomes,
        ["ok", "cancelled", "cancelled", "cancelled", "cancelled"]
    );
    // Each call still has its result in the stored conversation.
    let results = out
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count();
    assert_eq!(results, 5);
}

#[tokio::test]
async fn reads_sent_together_before_a_cancellation_keep_their_answers() {
    // The five searches are sent together (`concurrent_reads`, default 8); the first to run
    // cancels the run, and the surface answers every one anyway. Each is recorded with the
    // answer it got, and no later turn is sent.
    let run = CancellationToken::new();
    let surface = Arc::new(CancelsTheRun {
        run: run.clone(),
        ran: Default::default(),
    });
    let script = ScriptedProvider::new([many_searches(5), ScriptedProvider::text("unreached")]);
    let out = Agent::from_arcs(Arc::new(script.clone()), surface.clone())
        .with_config(core())
        .run(vec![Message::user("search")], &run)
        .await;
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_eq!(surface.ran.load(std::sync::atomic::Ordering::SeqCst), 5);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok"; 5]);
    assert_eq!(script.requests().len(), 1, "no turn after the cancellation");
}

/// A registry whose `search_notes` answers `chars` characters (two bytes each).
fn huge_result_registry(chars: usize) -> ToolRegistry {
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("search_notes")
                .description("Find notes")
                .handler(
                    move |_: Search, _| async move { Ok(ToolOutput::text("é".repeat(chars))) },
                ),
        )
        .unwrap();
    tools
}

/// A tool that answers megabytes is not sent whole to the model on every later turn (nor kept
/// whole in the run's conversation and events): its result is cut, saying so.
#[tokio::test]
async fn a_huge_tool_result_is_cut_before_the_model_sees_it() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "milk"})),
        ScriptedProvider::text("Found lots."),
    ]);
    let agent = Agent::new(
        script.clone(),
        LocalSurface::new(huge_result_registry(3_000_000), reader()),
    )
    .with_config(core());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = agent
        .run_with_events(
            vec![Message::user("find milk")],
            &CancellationToken::new(),
            tx,
        )
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let sent = last_tool_text(&script, 1);
    let limit = AgentConfig::default().max_result_chars;
    assert!(sent.chars().count() < limit + 200, "{}", sent.len());
    assert!(sent.starts_with("éé"));
    assert!(sent.contains("cut"), "{}", &sent[sent.len() - 200..]);
    let stored = out
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(stored, sent);
    while let Ok(ev) = rx.try_recv() {
        if let AgentEvent::ToolResult { text, .. } = ev {
            assert_eq!(text, sent);
        }
    }

    // The bound is the app's to set.
    cut_at_100(huge_result_registry(500)).await;
}

/// One `search_notes` call to `tools`, whose text is 500 `é` (and maybe more), in a run whose
/// results are cut at 100 characters: checks the cut and returns the text the model was given
/// and the run.
async fn cut_at_100(tools: ToolRegistry) -> (String, kberg_agent::RunOutcome) {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "milk"})),
        ScriptedProvider::text("Found lots."),
    ]);
    let agent = Agent::new(script.clone(), LocalSurface::new(tools, reader()))
        .with_config(core().max_result_chars(100));
    let out = agent
        .run(vec![Message::user("find milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let sent = last_tool_text(&script, 1);
    assert!(sent.starts_with(&"é".repeat(100)), "{sent}");
    assert!(!sent.starts_with(&"é".repeat(101)), "{sent}");
    assert!(sent.contains("400 more characters"), "{sent}");
    (sent, out)
}

/// A cut result still tells the model that blocks were left to the user: the line saying so
/// comes after the cut, not inside what was cut away.
#[tokio::test]
async fn a_cut_result_keeps_the_line_about_blocks_for_the_user() {
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("search_notes")
                .description("Find notes")
                .handler(|_: Search, _| async move {
                    Ok(ToolOutput::contents(vec![
                        kberg_core::Content::text("é".repeat(500)),
                        kberg_core::Content::text("shown on the page").annotated(
                            kberg_core::Annotations::for_audience([kberg_core::Role::User]),
                        ),
                    ]))
                }),
        )
        .unwrap();
    let (sent, out) = cut_at_100(tools).await;
    assert!(
        sent.ends_with("\n[1 block for the user only, not shown to you]"),
        "{sent}"
    );
    assert_eq!(out.calls[0].user_text, "shown on the page");
}

/// A surface that lists its one tool twice (a server whose `tools/list` pages repeat an entry),
/// first as a write, then claiming to be read-only.
struct Repeating;

#[async_trait::async_trait]
impl kberg_agent::ToolSurface for Repeating {
    async fn tools(&self) -> Result<Vec<kberg_agent::ToolDefinition>, kberg_agent::SurfaceError> {
        let schema = json!({"type": "object", "properties": {"title": {"type": "string"}}});
        Ok(vec![
            kberg_agent::ToolDefinition::new("save_note", "Save a note", schema.clone()),
            kberg_agent::ToolDefinition::new("save_note", "Save a note (again)", schema)
                .read_only(true),
        ])
    }

    async fn call(
        &self,
        _name: &str,
        _arguments: serde_json::Value,
        _cancel: CancellationToken,
    ) -> Result<kberg_agent::ToolResult, kberg_agent::SurfaceError> {
        Ok(kberg_agent::ToolResult::ok("saved"))
    }
}

/// A tool listed twice is shown to the model once (hosted APIs refuse a request whose tools
/// repeat a name), as its first listing says, so a later entry cannot make a write pass for a
/// read.
#[tokio::test]
async fn a_tool_listed_twice_is_offered_once_as_first_listed() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "save_note", json!({"title": "milk"})),
        ScriptedProvider::call("c2", "save_note", json!({"title": "milk"})),
        ScriptedProvider::text("Saved."),
    ]);
    let out = Agent::new(script.clone(), Repeating)
        .with_config(core())
        .run(vec![Message::user("save milk")], &CancellationToken::new())
        .await;
    let tools = &script.requests()[0].tools;
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0].description, "Save a note");
    assert!(!tools[0].read_only);
    // A write: the repeat is answered as a repeated write.
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok", "duplicate"]);
}

/// Every call id in a conversation, in order, and every result's.
fn ids_of(messages: &[Message]) -> (Vec<String>, Vec<String>) {
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    for m in messages {
        match m {
            Message::Assistant { tool_calls, .. } => {
                calls.extend(tool_calls.iter().map(|c| c.id.clone()));
            }
            Message::Tool { call_id, .. } => results.push(call_id.clone()),
            _ => {}
        }
    }
    (calls, results)
}

#[tokio::test]
async fn calls_that_share_an_id_get_ids_of_their_own() {
    // A model (or a server in front of it) that numbers every call `c1`: twice in one turn,
    // once more in the next. Each call runs, and the conversation the providers are sent holds
    // each id once, every result under its own call's id (OpenAI and Anthropic refuse a
    // request where two calls or two results share an id).
    let mut turn = ScriptedProvider::call("c1", "search_notes", json!({"query": "milk"}));
    turn.tool_calls.push(kberg_agent::ToolCall {
        id: "c1".into(),
        name: "search_notes".into(),
        arguments: json!({"query": "bread"}),
    });
    let script = ScriptedProvider::new([
        turn,
        ScriptedProvider::call("c1", "search_notes", json!({"query": "eggs"})),
        ScriptedProvider::text("Nothing on milk, bread or eggs."),
    ]);
    let out = agent(&script, reader())
        .run(
            vec![Message::user("find milk, bread, eggs")],
            &CancellationToken::new(),
        )
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let queries: Vec<_> = out
        .calls
        .iter()
        .map(|c| c.arguments["query"].clone())
        .collect();
    assert_eq!(queries, [json!("milk"), json!("bread"), json!("eggs")]);
    assert!(out.calls.iter().all(|c| c.outcome == CallOutcome::Ok));
    assert_eq!(out.calls[0].id, "c1", "the first keeps its id");
    let (calls, results) = ids_of(&script.requests()[2].messages);
    assert_eq!(calls, results, "each result answers its own call, in order");
    let unique: std::collections::HashSet<_> = calls.iter().collect();
    assert_eq!(unique.len(), 3, "{calls:?}");
    let recorded: Vec<_> = out.calls.iter().map(|c| c.id.clone()).collect();
    assert_eq!(recorded, calls);
    assert_eq!(out.interventions.call_ids_renamed, 2);
}

/// A turn cut off at the token limit (`FinishReason::Length`) while the model wrote a call's
/// arguments: the call is not sent, and the model is told why in words it can act on (shorter
/// arguments), not that its arguments are not an object. A call of the same turn whose
/// arguments are whole still runs, and the next turn's call too.
#[tokio::test]
async fn a_call_cut_off_at_the_token_limit_is_not_sent_and_the_model_is_told() {
    use kberg_agent::{ChatOptions, FinishReason, ToolCall};
    use std::sync::atomic::Ordering;
    let (tools, writes, reads) = counting_registry();
    let cut_turn = ChatResponse {
        tool_calls: vec![
            ToolCall {
                id: "c1".into(),
                name: "search_notes".into(),
                arguments: json!({"query": "milk"}),
            },
            ToolCall {
                id: "c2".into(),
                name: "add_note".into(),
                arguments: json!(r#"{"title": "a very long title that goes on and o"#),
            },
        ],
        finish: FinishReason::Length,
        ..ChatResponse::default()
    };
    let script = ScriptedProvider::new([
        cut_turn,
        ScriptedProvider::call("c3", "add_note", json!({"title": "milk", "priority": 2})),
        ScriptedProvider::text("Added the note."),
    ]);
    let config = core().options(ChatOptions {
        max_tokens: Some(64),
        ..ChatOptions::default()
    });
    let out = Agent::new(script.clone(), LocalSurface::new(tools, writer()))
        .with_config(config)
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(reads.load(Ordering::SeqCst), 1);
    assert_eq!(
        writes.load(Ordering::SeqCst),
        1,
        "only the whole call wrote"
    );
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok", "invalid_arguments", "ok"]);
    assert!(out.calls[1].not_sent);
    let told = last_tool_text(&script, 1);
    assert!(
        told.contains("cut off") && told.contains("64 tokens") && told.contains("shorter"),
        "{told}"
    );
    assert_eq!(out.repair_turns, 1, "a cut call asks for a repair turn");
}

/// A final answer cut off at the token limit still ends the run as answered, and the outcome
/// says it was cut (`RunOutcome::last_finish`), so an app can tell a whole answer from half of
/// one.
#[tokio::test]
async fn an_answer_cut_off_at_the_token_limit_says_so() {
    use kberg_agent::FinishReason;
    let cut = ChatResponse {
        text: "The notes about milk are: first, buy".into(),
        finish: FinishReason::Length,
        ..ChatResponse::default()
    };
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "milk"})),
        cut,
    ]);
    let out = agent(&script, writer())
        .run(
            vec![Message::user("what about milk?")],
            &CancellationToken::new(),
        )
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.last_finish, FinishReason::Length);
    let script = ScriptedProvider::new([ScriptedProvider::text("Nothing about milk.")]);
    let out = agent(&script, writer())
        .run(
            vec![Message::user("what about milk?")],
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(out.last_finish, FinishReason::Stop);
}

/// A call written as text and cut off at the token limit does not parse; the model is told it
/// was cut off, not that it wrote invalid JSON.
#[tokio::test]
async fn a_text_call_cut_off_at_the_token_limit_is_answered_as_cut_off() {
    use kberg_agent::FinishReason;
    let cut = ChatResponse {
        text: r#"{"name": "add_note", "arguments": {"title": "a very long ti"#.into(),
        finish: FinishReason::Length,
        ..ChatResponse::default()
    };
    let script = ScriptedProvider::new([
        cut,
        ScriptedProvider::call("c1", "add_note", json!({"title": "milk", "priority": 2})),
        ScriptedProvider::text("Added the note."),
    ]);
    let out = agent(&script, writer())
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let told = match script.requests()[1].messages.last() {
        Some(Message::User { content }) => content.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        told.contains("cut off") && !told.contains("not valid JSON"),
        "{told}"
    );
    assert_eq!(out.repair_turns, 1);
}

/// Reasoning models served without a reasoning parser (vLLM without `--reasoning-parser`,
/// llama-cpp-python, a DeepSeek-R1 distill whose template opens the block itself) write their
/// thinking into the answer inside `<think>` tags. A call the model only considered there is
/// never run, the answer and the stored conversation are the text after the thinking, and the
/// thinking reaches the app as its own events.
#[tokio::test]
async fn a_call_considered_in_the_models_thinking_is_never_run() {
    use kberg_agent::AgentEvent;
    use std::sync::atomic::Ordering;
    let considered = r#"<think>The user said milk. I could call {"name": "add_note", "arguments": {"title": "milk", "priority": 2}} but the priority is a guess, so I ask first.</think>

Which priority should the note about milk have?"#;
    // The template opened the block: the text starts inside it.
    let opened_by_template = r#"I might call {"name": "add_note", "arguments": {"title": "milk", "priority": 1}} now.
</think>
Which priority should it have?"#;
    for (text, answer) in [
        (
            considered,
            "Which priority should the note about milk have?",
        ),
        (opened_by_template, "Which priority should it have?"),
    ] {
        let (tools, writes, _) = counting_registry();
        let script = ScriptedProvider::new([ScriptedProvider::text(text)]);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let out = Agent::new(script.clone(), LocalSurface::new(tools, writer()))
            .with_config(core())
            .run_with_events(
                vec![Message::user("add milk")],
                &CancellationToken::new(),
                tx,
            )
            .await;
        assert!(out.answered(), "{:?}", out.stop);
        assert_eq!(writes.load(Ordering::SeqCst), 0, "a considered call ran");
        assert!(out.calls.is_empty());
        assert_eq!(out.answer(), Some(answer));
        assert!(
            matches!(out.messages.last(), Some(Message::Assistant { content, .. }) if content == answer),
            "{:?}",
            out.messages.last()
        );
        let mut shown = String::new();
        let mut thought = String::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                AgentEvent::TextDelta { text } => shown.push_str(&text),
                AgentEvent::ThinkingDelta { text } => thought.push_str(&text),
                _ => {}
            }
        }
        assert_eq!(shown, answer);
        assert!(
            thought.contains("I ask first") || thought.contains("might call"),
            "{thought}"
        );
    }

    // Streamed: the events carry the answer and the thinking apart as they come.
    let (tools, writes, _) = counting_registry();
    let script = ScriptedProvider::new([ScriptedProvider::text(considered)]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = Agent::new(script, LocalSurface::new(tools, writer()))
        .with_config(core().stream(true))
        .run_with_events(
            vec![Message::user("add milk")],
            &CancellationToken::new(),
            tx,
        )
        .await;
    assert_eq!(
        out.answer(),
        Some("Which priority should the note about milk have?")
    );
    assert_eq!(writes.load(Ordering::SeqCst), 0);
    let mut shown = String::new();
    while let Some(ev) = rx.recv().await {
        if let AgentEvent::TextDelta { text } = ev {
            shown.push_str(&text);
        }
    }
    assert_eq!(shown, "Which priority should the note about milk have?");

    // Turned off, the text is the model's as written (and the call in it recovered).
    let (tools, writes, _) = counting_registry();
    let script = ScriptedProvider::new([
        ScriptedProvider::text(considered),
        ScriptedProvider::text("Added."),
    ]);
    let out = Agent::new(script, LocalSurface::new(tools, writer()))
        .with_config(core().strip_thinking(false))
        .run(vec![Message::user("add milk")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(writes.load(Ordering::SeqCst), 1);
}

/// The thinking a server hands on apart from the text reaches the app as `ThinkingDelta`
/// events, streamed or not, and never the answer or the stored conversation.
#[tokio::test]
async fn thinking_handed_on_apart_reaches_the_app_as_its_own_events() {
    use kberg_agent::AgentEvent;
    for stream in [false, true] {
        let answer = ChatResponse {
            text: "You have no note about milk.".into(),
            thinking: "Search first? No notes exist.".into(),
            ..ChatResponse::default()
        };
        let script = ScriptedProvider::new([answer]);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let out = agent(&script, writer())
            .with_config(core().stream(stream))
            .run_with_events(vec![Message::user("milk?")], &CancellationToken::new(), tx)
            .await;
        assert_eq!(out.answer(), Some("You have no note about milk."));
        assert!(
            !format!("{:?}", out.messages).contains("Search first"),
            "stored: {:?}",
            out.messages
        );
        let mut thought = String::new();
        let mut shown = String::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                AgentEvent::ThinkingDelta { text } => thought.push_str(&text),
                AgentEvent::TextDelta { text } => shown.push_str(&text),
                _ => {}
            }
        }
        assert_eq!(thought, "Search first? No notes exist.", "stream: {stream}");
        assert_eq!(shown, "You have no note about milk.");
    }
}

/// Runs `script` for the user's "find my milk notes" as a reader, with `max_tokens` a turn.
async fn find_milk_notes(
    script: &ScriptedProvider,
    max_tokens: Option<u32>,
) -> kberg_agent::RunOutcome {
    let config = core().options(kberg_agent::ChatOptions {
        max_tokens,
        ..kberg_agent::ChatOptions::default()
    });
    Agent::new(script.clone(), LocalSurface::new(registry(), reader()))
        .with_config(config)
        .run(
            vec![Message::user("find my milk notes")],
            &CancellationToken::new(),
        )
        .await
}

/// A reasoning model cut off at the output limit while it still thought wrote neither an answer
/// nor a call. It is told so and given the same kind of turn again, tools offered, instead of
/// being asked for an answer in words without tools (it had not looked at anything yet); a
/// second cut-off is answered as any empty turn.
#[tokio::test]
async fn a_turn_cut_off_while_thinking_is_given_again() {
    use kberg_agent::{FinishReason, ToolChoice};
    let thinking_cut_off = || ChatResponse {
        thinking: "The user wants their notes about milk, so I should".into(),
        finish: FinishReason::Length,
        ..ChatResponse::default()
    };
    let script = ScriptedProvider::new([
        thinking_cut_off(),
        ScriptedProvider::call("c1", "search_notes", json!({"query": "milk"})),
        ScriptedProvider::text("You have two notes about milk."),
    ]);
    let out = find_milk_notes(&script, Some(512)).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.calls.len(), 1);
    assert_eq!(out.interventions.thinking_cut_off, 1);
    assert_eq!(out.interventions.words_requested, 0);
    let second = &script.requests()[1];
    assert_ne!(
        second.options.tool_choice,
        ToolChoice::None,
        "tools are offered again"
    );
    assert!(!second.tools.is_empty());
    match second.messages.last() {
        Some(Message::User { content }) => {
            assert!(content.contains("cut off"), "{content}");
            assert!(content.contains("512"), "{content}");
            assert!(content.contains("thinking"), "{content}");
        }
        other => panic!("{other:?}"),
    }

    // Cut off twice: the second time is an empty turn, answered by the request for words.
    let script = ScriptedProvider::new([
        thinking_cut_off(),
        thinking_cut_off(),
        ScriptedProvider::text("I could not finish looking."),
    ]);
    let out = find_milk_notes(&script, None).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.interventions.thinking_cut_off, 1);
    assert_eq!(out.interventions.words_requested, 1);
    assert_eq!(script.requests()[2].options.tool_choice, ToolChoice::None);
}

/// An answer-only turn sent in its short form (the run's results in one message) and cut off
/// while the model thought is sent again in that form, with the word that it was cut off: the
/// short form is rebuilt for each turn, and without the word the same turn would be sent again.
#[tokio::test]
async fn a_short_answer_turn_cut_off_while_thinking_says_so_again() {
    use kberg_agent::{FinishReason, ToolChoice};
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "milk"})),
        // Only JSON: the loop asks for words in an answer-only turn, in its short form.
        ScriptedProvider::text(r#"{"notes": 2}"#),
        ChatResponse {
            thinking: "Two notes about milk. The user wants".into(),
            finish: FinishReason::Length,
            ..ChatResponse::default()
        },
        ScriptedProvider::text("You have two notes about milk."),
    ]);
    let out = find_milk_notes(&script, Some(256)).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.interventions.words_requested, 1);
    assert_eq!(out.interventions.thinking_cut_off, 1);
    let requests = script.requests();
    let [.., cut_off, again] = &requests[..] else {
        panic!("{requests:?}");
    };
    for r in [cut_off, again] {
        assert_eq!(r.options.tool_choice, ToolChoice::None);
    }
    let last = |r: &kberg_agent::ChatRequest| match r.messages.last() {
        Some(Message::User { content }) => content.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        last(cut_off).contains("found 2 notes about milk"),
        "{}",
        last(cut_off)
    );
    assert!(!last(cut_off).contains("cut off"), "{}", last(cut_off));
    let again = last(again);
    assert!(again.contains("found 2 notes about milk"), "{again}");
    assert!(
        again.contains("cut off at the limit of 256 tokens"),
        "{again}"
    );
}
