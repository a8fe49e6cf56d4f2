//! The loop's small-model behaviours, each on (the default) and off, with the scripted provider:
//! identical calls in one turn, malformed call JSON, a final answer that is only JSON, the
//! answer-only last turn, id hints, and a text call to a write the caller may not make.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kberg_agent::{Agent, AgentConfig, LocalSurface, Message, ScriptedProvider, ToolChoice};
use kberg_core::{
    Caller, Grants, Principal, SurfaceProjection, ToolBuilder, ToolError, ToolOutput, ToolRegistry,
    WriteCapability,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// `find_notes` (read), `set_priority` (write, `notes.write`), `archive_note` (write,
/// `notes.archive`), counting how often each write runs.
fn registry() -> (ToolRegistry, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let r = ToolRegistry::new();
    let write = WriteCapability::new("notes.write", "Edit notes");
    let archive = WriteCapability::new("notes.archive", "Archive notes");
    r.declare(write.clone()).unwrap();
    r.declare(archive.clone()).unwrap();
    r.register(
        ToolBuilder::new("find_notes")
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}),
                |_, _| async move { Ok(ToolOutput::text("note_id 17: Dentist")) },
            ),
    )
    .unwrap();
    let sets = Arc::new(AtomicUsize::new(0));
    let s = sets.clone();
    r.register(
        ToolBuilder::new("set_priority")
            .write(write)
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {"note_id": {"type": "integer"}, "priority": {"type": "integer"}}, "required": ["note_id", "priority"]}),
                move |a, _| {
                    let s = s.clone();
                    async move {
                        if a["note_id"] != 17 {
                            return Err(ToolError::failed(format!("There is no note with note_id {}.", a["note_id"])));
                        }
                        s.fetch_add(1, Ordering::SeqCst);
                        Ok(ToolOutput::text("Updated note 17"))
                    }
                },
            ),
    )
    .unwrap();
    let archives = Arc::new(AtomicUsize::new(0));
    let a2 = archives.clone();
    r.register(
        ToolBuilder::new("archive_note")
            .write(archive)
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {"note_id": {"type": "integer"}}}),
                move |_, _| {
                    let a2 = a2.clone();
                    async move {
                        a2.fetch_add(1, Ordering::SeqCst);
                        Ok(ToolOutput::text("archived"))
                    }
                },
            ),
    )
    .unwrap();
    (r, sets, archives)
}

fn caller() -> Caller {
    Caller::new(
        Principal::new("small")
            .with_grants(Grants::of(["notes.write"]))
            .with_projection(SurfaceProjection::Compact),
    )
}

/// What the user asks in these runs (the source check finds 17 and 5 in it).
const REQUEST: &str = "Set the priority of note 17 to 5.";

async fn run(script: &ScriptedProvider, config: AgentConfig) -> kberg_agent::RunOutcome {
    let (r, _, _) = registry();
    Agent::new(script.clone(), LocalSurface::new(r, caller()))
        .with_config(config)
        .run(vec![Message::user(REQUEST)], &CancellationToken::new())
        .await
}

fn last_text(script: &ScriptedProvider, turn: usize) -> String {
    match script.requests()[turn].messages.last() {
        Some(Message::Tool { content, .. } | Message::User { content }) => content.clone(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn identical_calls_in_one_turn_run_once_unless_turned_off() {
    let six = r#"{"name": "set_priority", "arguments": {"note_id": 17, "priority": 5}}"#.repeat(6);
    for (on, runs) in [(true, 1), (false, 1)] {
        let (r, sets, _) = registry();
        let script = ScriptedProvider::new([
            ScriptedProvider::text(six.clone()),
            ScriptedProvider::text("Done."),
        ]);
        let out = Agent::new(script.clone(), LocalSurface::new(r, caller()))
            .with_config(AgentConfig::default().collapse_calls_in_turn(on))
            .run(vec![Message::user(REQUEST)], &CancellationToken::new())
            .await;
        assert!(out.answered());
        // Off, the copies reach the repeated-write guard one by one instead.
        assert_eq!(sets.load(Ordering::SeqCst), runs);
        if on {
            assert_eq!(out.calls.len(), 1);
            assert_eq!(out.interventions.calls_collapsed, 5);
        } else {
            assert_eq!(out.calls.len(), 6);
            assert_eq!(out.interventions.writes_deduplicated, 5);
        }
    }
}

#[tokio::test]
async fn malformed_call_json_gets_a_parse_diagnostic_and_a_repair_turn() {
    let broken = "{\"name\": \"set_priority\", // the dentist\n \"arguments\": {\"note_id\": 17, \"priority\": 5}}";
    let script = ScriptedProvider::new([
        ScriptedProvider::text(broken),
        ScriptedProvider::call("c2", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("Priority set."),
    ]);
    let out = run(&script, AgentConfig::default()).await;
    assert_eq!(out.answer(), Some("Priority set."));
    assert_eq!(out.interventions.parse_diagnostics, 1);
    assert_eq!(out.repair_turns, 1);
    let told = last_text(&script, 1);
    assert!(
        told.contains("not valid JSON") && told.contains("line 1"),
        "{told}"
    );

    // Off: the broken call is the final text, which is no answer in words (and the model is
    // not told why its call did not run).
    let script = ScriptedProvider::new([ScriptedProvider::text(broken)]);
    let config = AgentConfig::default()
        .diagnose_malformed_calls(false)
        .ask_for_words(false);
    let out = run(&script, config).await;
    assert_eq!(out.interventions.parse_diagnostics, 0);
    assert_eq!(out.stop.code(), "no_answer");
    assert_eq!(script.requests().len(), 1);
}

#[tokio::test]
async fn a_final_answer_that_is_only_json_is_asked_once_for_words() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text(r#"{"ok": true, "id": 1}"#),
        ScriptedProvider::text("Your dentist note now has priority 5."),
    ]);
    let out = run(&script, AgentConfig::default()).await;
    assert_eq!(out.answer(), Some("Your dentist note now has priority 5."));
    assert_eq!(out.interventions.words_requested, 1);
    assert_eq!(script.requests()[2].options.tool_choice, ToolChoice::None);
    assert!(last_text(&script, 2).contains("plain words"));

    // Off: the run says clearly that the model did not answer.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("```json\n{\"ok\": true, \"id\": 1}\n```"),
    ]);
    let out = run(&script, AgentConfig::default().ask_for_words(false)).await;
    assert_eq!(out.stop.code(), "no_answer");
    assert!(!out.answered());
    assert_eq!(out.answer(), None);
    assert!(out.text.contains("\"ok\""));
}

#[tokio::test]
async fn the_last_turn_is_answer_only_once_a_tool_ran() {
    let q = |i: u32| {
        ScriptedProvider::call(
            &format!("c{i}"),
            "find_notes",
            json!({"query": format!("q{i}")}),
        )
    };
    let script = ScriptedProvider::new([
        q(1),
        q(2),
        ScriptedProvider::text("Note 17 is the dentist."),
    ]);
    let out = run(&script, AgentConfig::default().max_turns(3)).await;
    assert!(out.answered());
    let choices: Vec<ToolChoice> = script
        .requests()
        .iter()
        .map(|r| r.options.tool_choice.clone())
        .collect();
    assert_eq!(
        choices,
        [ToolChoice::Auto, ToolChoice::Auto, ToolChoice::None]
    );
    assert_eq!(out.interventions.final_answer_turns, 1);

    // A server that ignores tool choice `none` and calls anyway: the call is not run, the text
    // is the answer.
    let mut both = q(3);
    both.text = "Note 17 is the dentist.".into();
    let script = ScriptedProvider::new([q(1), q(2), both]);
    let out = run(&script, AgentConfig::default().max_turns(3)).await;
    assert_eq!(out.calls.len(), 2);
    assert_eq!(out.answer(), Some("Note 17 is the dentist."));

    // Off: the last turn may call tools, and the run ends at the limit.
    let script = ScriptedProvider::new([q(1), q(2), q(3)]);
    let out = run(
        &script,
        AgentConfig::default().max_turns(3).final_answer_turn(false),
    )
    .await;
    assert_eq!(out.stop.code(), "turn_limit");
    assert_eq!(script.requests()[2].options.tool_choice, ToolChoice::Auto);
}

#[tokio::test]
async fn an_invented_id_is_answered_with_the_tool_that_finds_ids() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call(
            "c1",
            "set_priority",
            json!({"note_id": 12345, "priority": 5}),
        ),
        ScriptedProvider::call("c2", "find_notes", json!({"query": "dentist"})),
        ScriptedProvider::call("c3", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("Done."),
    ]);
    let out = run(
        &script,
        AgentConfig::default().ground_write_arguments(false),
    )
    .await;
    assert!(out.answered());
    assert_eq!(out.interventions.id_hints, 1);
    let told = last_text(&script, 1);
    assert!(told.contains("no note with note_id 12345"), "{told}");
    assert!(told.contains("call `find_notes` first"), "{told}");

    // The app names the source per argument; off, nothing is added.
    let script = ScriptedProvider::new([
        ScriptedProvider::call(
            "c1",
            "set_priority",
            json!({"note_id": 12345, "priority": 5}),
        ),
        ScriptedProvider::text("No such note."),
    ]);
    run(
        &script,
        AgentConfig::default()
            .ground_write_arguments(false)
            .id_source("note_id", "list_everything"),
    )
    .await;
    assert!(last_text(&script, 1).contains("call `list_everything` first"));
    let script = ScriptedProvider::new([
        ScriptedProvider::call(
            "c1",
            "set_priority",
            json!({"note_id": 12345, "priority": 5}),
        ),
        ScriptedProvider::text("No such note."),
    ]);
    let out = run(
        &script,
        AgentConfig::default()
            .ground_write_arguments(false)
            .id_hints(false),
    )
    .await;
    assert_eq!(out.interventions.id_hints, 0);
    assert!(!last_text(&script, 1).contains("first"));
}

#[tokio::test]
async fn a_text_call_to_a_write_without_its_capability_is_explained_and_never_runs() {
    let (r, _, archives) = registry();
    let script = ScriptedProvider::new([
        ScriptedProvider::text(r#"{"name": "archive_note", "arguments": {"note_id": 17}}"#),
        ScriptedProvider::text("I am not allowed to archive notes."),
    ]);
    let out = Agent::new(script.clone(), LocalSurface::new(r.clone(), caller()))
        .run(vec![Message::user("archive 17")], &CancellationToken::new())
        .await;
    assert_eq!(out.answer(), Some("I am not allowed to archive notes."));
    assert_eq!(out.calls[0].outcome.as_str(), "capability_required");
    assert!(out.calls[0].not_sent);
    let told = last_text(&script, 1);
    assert!(told.contains("notes.archive"), "{told}");
    assert!(
        told.contains("The tools you can call are: find_notes, set_priority."),
        "{told}"
    );
    assert_eq!(archives.load(Ordering::SeqCst), 0);

    // Off: the call text is the final text, and it is not an answer in words.
    let script = ScriptedProvider::new([ScriptedProvider::text(
        r#"{"name": "archive_note", "arguments": {"note_id": 17}}"#,
    )]);
    let out = Agent::new(script.clone(), LocalSurface::new(r, caller()))
        .with_config(
            AgentConfig::default()
                .explain_unlisted_calls(false)
                .ask_for_words(false),
        )
        .run(vec![Message::user("archive 17")], &CancellationToken::new())
        .await;
    assert_eq!(out.stop.code(), "no_answer");
    assert!(out.calls.is_empty());
    assert_eq!(archives.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_repeated_failing_call_beside_a_new_call_does_not_end_the_run() {
    // The model repeats the invented id but also searches, as the hint told it: it is
    // recovering, so the run goes on and the search's id is used.
    let mut both =
        ScriptedProvider::call("c2", "set_priority", json!({"note_id": 1, "priority": 5}));
    both.tool_calls.push(kberg_agent::ToolCall {
        id: "c3".into(),
        name: "find_notes".into(),
        arguments: json!({"query": "dentist"}),
    });
    let (r, sets, _) = registry();
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 1, "priority": 5})),
        both,
        ScriptedProvider::call("c4", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("Done."),
    ]);
    let out = Agent::new(script.clone(), LocalSurface::new(r, caller()))
        .with_config(AgentConfig::default().ground_write_arguments(false))
        .run(vec![Message::user(REQUEST)], &CancellationToken::new())
        .await;
    assert_eq!(out.answer(), Some("Done."));
    assert_eq!(sets.load(Ordering::SeqCst), 1);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["tool_failed", "tool_failed", "ok", "ok"]);
}
