//! The loop's second set of small-model behaviours, each on (the default) and off, with the
//! scripted provider and a real registry: the source check of a write's id and number
//! arguments, the request to look before answering, schema-shaped arguments unwrapped,
//! undeclared arguments dropped from reads, and recovered turns sent to the model as their calls
//! alone.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kberg_agent::{Agent, AgentConfig, LocalSurface, Message, RunOutcome, ScriptedProvider};
use kberg_core::{
    Caller, Grants, Principal, SurfaceProjection, ToolBuilder, ToolError, ToolOutput, ToolRegistry,
    WriteCapability,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// `search_notes` (read), `list_notes` (read, no arguments), `set_priority` (write), counting
/// how often the write runs and with which arguments.
fn registry() -> (ToolRegistry, Arc<AtomicUsize>) {
    let r = ToolRegistry::new();
    let write = WriteCapability::new("notes.write", "Edit notes");
    r.declare(write.clone()).unwrap();
    r.register(
        ToolBuilder::new("search_notes")
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": false}),
                |_, _| async move { Ok(ToolOutput::text("note_id 17: \"Dentist\" (priority 2)")) },
            ),
    )
    .unwrap();
    r.register(
        ToolBuilder::new("list_notes")
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
                |_, _| async move {
                    Ok(ToolOutput::text(
                        "note_id 17: \"Dentist\"\nnote_id 42: \"Groceries\"",
                    ))
                },
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
                json!({"type": "object", "properties": {"note_id": {"type": "integer"}, "priority": {"type": "integer"}}, "required": ["note_id", "priority"], "additionalProperties": false}),
                move |a, _| {
                    let s = s.clone();
                    async move {
                        if a["note_id"] != 17 && a["note_id"] != 42 {
                            return Err(ToolError::failed(format!("There is no note with note_id {}.", a["note_id"])));
                        }
                        s.fetch_add(1, Ordering::SeqCst);
                        Ok(ToolOutput::text(format!("Updated note {}", a["note_id"])))
                    }
                },
            ),
    )
    .unwrap();
    (r, sets)
}

fn caller() -> Caller {
    Caller::new(
        Principal::new("small")
            .with_grants(Grants::of(["notes.write"]))
            .with_projection(SurfaceProjection::Compact),
    )
}

async fn run(script: &ScriptedProvider, config: AgentConfig, request: &str) -> (RunOutcome, usize) {
    let (r, sets) = registry();
    let out = Agent::new(script.clone(), LocalSurface::new(r, caller()))
        .with_config(config)
        .run(vec![Message::user(request)], &CancellationToken::new())
        .await;
    (out, sets.load(Ordering::SeqCst))
}

fn last_text(script: &ScriptedProvider, turn: usize) -> String {
    match script.requests()[turn].messages.last() {
        Some(Message::Tool { content, .. } | Message::User { content }) => content.clone(),
        other => panic!("{other:?}"),
    }
}

const DENTIST: &str = "Set the priority of my Dentist note to 5.";

#[tokio::test]
async fn an_invented_id_is_not_run_and_the_model_is_sent_to_the_search() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 42, "priority": 5})),
        ScriptedProvider::call("c2", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call("c3", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("Done: the Dentist note has priority 5."),
    ]);
    let (out, sets) = run(&script, AgentConfig::default(), DENTIST).await;
    assert!(out.answered());
    // 42 exists (the wrong note): without the check it would have been changed.
    assert_eq!(sets, 1);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["invalid_arguments", "ok", "ok"]);
    assert!(out.calls[0].not_sent);
    assert_eq!(out.interventions.ungrounded_writes, 1);
    let told = last_text(&script, 1);
    assert!(told.contains("`note_id` 42 does not come from"), "{told}");
    assert!(told.contains("Call `search_notes` first"), "{told}");
    assert!(told.contains(DENTIST), "{told}");
    assert_eq!(out.repair_turns, 1);

    // Off: the guess runs and changes the wrong note.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 42, "priority": 5})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, sets) = run(
        &script,
        AgentConfig::default().ground_write_arguments(false),
        DENTIST,
    )
    .await;
    assert_eq!(sets, 1);
    assert_eq!(out.interventions.ungrounded_writes, 0);
}

#[tokio::test]
async fn a_number_copied_from_a_result_or_a_write_nobody_asked_for_is_not_run() {
    // The model searched, then copied the note's old priority (2) instead of the user's 5.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call("c2", "set_priority", json!({"note_id": 17, "priority": 2})),
        ScriptedProvider::call("c3", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, sets) = run(&script, AgentConfig::default(), DENTIST).await;
    assert!(out.answered());
    assert_eq!(sets, 1);
    assert_eq!(out.calls[2].arguments["priority"], 5);
    let told = last_text(&script, 2);
    assert!(
        told.contains("`priority` 2 is not a value the user gave"),
        "{told}"
    );
    assert!(told.contains(DENTIST), "{told}");

    // A question, and the model writes anyway: the write has no source and never runs.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call("c2", "set_priority", json!({"note_id": 17, "priority": 3})),
        ScriptedProvider::text("It is on Friday."),
    ]);
    let (out, sets) = run(
        &script,
        AgentConfig::default(),
        "When is my dentist appointment?",
    )
    .await;
    assert!(out.answered());
    assert_eq!(sets, 0);

    // Numbers in words count as given ("forty-two" ... "five").
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 42, "priority": 5})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, sets) = run(
        &script,
        AgentConfig::default(),
        "Set the priority of note forty-two to five.",
    )
    .await;
    assert!(out.answered());
    assert_eq!(sets, 1);
    assert_eq!(out.interventions.ungrounded_writes, 0);
}

#[tokio::test]
async fn an_answer_before_any_tool_ran_is_asked_to_look_first_once() {
    let script = ScriptedProvider::new([
        ScriptedProvider::text("Your dentist appointment is on Monday."),
        ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::text("It is note 17, the Dentist note."),
    ]);
    let (out, _) = run(&script, AgentConfig::default(), "Which note is my dentist?").await;
    assert_eq!(out.answer(), Some("It is note 17, the Dentist note."));
    assert_eq!(out.interventions.look_first_requests, 1);
    let told = last_text(&script, 1);
    assert!(told.contains("without calling a tool"), "{told}");
    assert!(told.contains("`search_notes`"), "{told}");
    // The stored conversation keeps the first answer and the request.
    assert!(
        out.messages
            .iter()
            .any(|m| matches!(m, Message::Assistant { content, .. } if content.contains("Monday")))
    );

    // Asked once only: a model that repeats its answer ends the run with it.
    let script = ScriptedProvider::new([
        ScriptedProvider::text("Hello!"),
        ScriptedProvider::text("Hello! How can I help?"),
    ]);
    let (out, _) = run(&script, AgentConfig::default(), "hi").await;
    assert_eq!(out.answer(), Some("Hello! How can I help?"));
    assert_eq!(out.interventions.look_first_requests, 1);

    // Off: the first answer ends the run.
    let script = ScriptedProvider::new([ScriptedProvider::text("Monday.")]);
    let (out, _) = run(
        &script,
        AgentConfig::default().look_before_answering(false),
        "When is my dentist appointment?",
    )
    .await;
    assert_eq!(out.answer(), Some("Monday."));
    assert_eq!(script.requests().len(), 1);
}

#[tokio::test]
async fn arguments_that_copy_the_schema_are_unwrapped() {
    let echo = r#"{"name": "list_notes", "arguments": {"type": "object", "properties": {}, "additionalProperties": false}}"#;
    let script = ScriptedProvider::new([
        ScriptedProvider::text(echo),
        ScriptedProvider::text("You have two notes."),
    ]);
    let (out, _) = run(&script, AgentConfig::default(), "list my notes").await;
    assert!(out.answered());
    assert_eq!(out.calls[0].outcome.as_str(), "ok");
    assert_eq!(out.calls[0].arguments, json!({}));
    assert_eq!(out.interventions.schema_echoes_unwrapped, 1);
    assert_eq!(out.calls[0].coercions[0].pointer, "");

    // Off, with the removal of undeclared read arguments off too: the gate refuses the
    // schema's keys as unknown fields.
    let script = ScriptedProvider::new([
        ScriptedProvider::text(echo),
        ScriptedProvider::text("I could not list them."),
    ]);
    let (out, _) = run(
        &script,
        AgentConfig::default()
            .unwrap_schema_arguments(false)
            .drop_unknown_read_arguments(false),
        "list my notes",
    )
    .await;
    assert_eq!(out.calls[0].outcome.as_str(), "invalid_arguments");
    assert_eq!(out.interventions.schema_echoes_unwrapped, 0);
}

#[tokio::test]
async fn undeclared_arguments_are_dropped_from_reads_only() {
    // A schema keyword mixed into a search: the search runs without it.
    let script = ScriptedProvider::new([
        ScriptedProvider::call(
            "c1",
            "search_notes",
            json!({"query": "dentist", "type": "string"}),
        ),
        ScriptedProvider::call(
            "c2",
            "set_priority",
            json!({"note_id": 17, "priority": 5, "tags": ["health"]}),
        ),
        ScriptedProvider::call("c3", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, sets) = run(&script, AgentConfig::default(), DENTIST).await;
    assert!(out.answered());
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    // The write with a field it does not take is refused with the gate's diagnostic.
    assert_eq!(outcomes, ["ok", "invalid_arguments", "ok"]);
    assert_eq!(out.calls[0].arguments, json!({"query": "dentist"}));
    assert_eq!(out.calls[0].coercions[0].pointer, "/type");
    assert_eq!(out.interventions.read_arguments_dropped, 1);
    assert_eq!(sets, 1);

    // Off: the read is refused too.
    let script = ScriptedProvider::new([
        ScriptedProvider::call(
            "c1",
            "search_notes",
            json!({"query": "dentist", "type": "string"}),
        ),
        ScriptedProvider::text("I could not search."),
    ]);
    let (out, _) = run(
        &script,
        AgentConfig::default().drop_unknown_read_arguments(false),
        DENTIST,
    )
    .await;
    assert_eq!(out.calls[0].outcome.as_str(), "invalid_arguments");
    assert_eq!(out.interventions.read_arguments_dropped, 0);
}

#[tokio::test]
async fn recovered_turns_are_sent_as_their_calls_and_stored_as_written() {
    let written = "Let me search.\n{\"name\": \"search_notes\", \"arguments\": {\"query\": \"dentist\"}}\n{\"name\": \"search_notes\", \"arguments\": {\"query\": \"dentist\"}}";
    let script = ScriptedProvider::new([
        ScriptedProvider::text(written),
        ScriptedProvider::text("It is note 17."),
    ]);
    let (out, _) = run(&script, AgentConfig::default(), "Which note is my dentist?").await;
    assert!(out.answered());
    assert_eq!(out.interventions.turns_compacted, 1);
    let sent = &script.requests()[1].messages;
    let Some(Message::Assistant {
        content,
        tool_calls,
    }) = sent.iter().find(|m| matches!(m, Message::Assistant { .. }))
    else {
        panic!("{sent:?}")
    };
    assert_eq!(content, "");
    assert_eq!(tool_calls.len(), 1);
    assert_eq!(tool_calls[0].name, "search_notes");
    // What the model wrote stays in the stored conversation.
    assert!(
        out.messages
            .iter()
            .any(|m| matches!(m, Message::Assistant { content, .. } if content == written))
    );

    // Off: the model is sent its own text back.
    let script = ScriptedProvider::new([
        ScriptedProvider::text(written),
        ScriptedProvider::text("It is note 17."),
    ]);
    let (out, _) = run(
        &script,
        AgentConfig::default().compact_recovered_turns(false),
        "Which note is my dentist?",
    )
    .await;
    assert_eq!(out.interventions.turns_compacted, 0);
    let sent = &script.requests()[1].messages;
    assert!(
        sent.iter()
            .any(|m| matches!(m, Message::Assistant { content, .. } if content == written))
    );
}

#[tokio::test]
async fn a_list_for_a_one_value_argument_runs_as_one_call_per_item() {
    let (r, _) = registry();
    let tags = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let t = tags.clone();
    let write = WriteCapability::new("notes.write", "Edit notes");
    r.register(
        ToolBuilder::new("add_tag")
            .write(write)
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {"note_id": {"type": "integer"}, "tag": {"type": "string"}}, "required": ["note_id", "tag"], "additionalProperties": false}),
                move |a, _| {
                    let t = t.clone();
                    async move {
                        t.lock().unwrap().push(a["tag"].as_str().unwrap_or("").to_string());
                        Ok(ToolOutput::text("Tagged"))
                    }
                },
            ),
    )
    .unwrap();
    let both = json!({"note_id": 63, "tag": ["work", "urgent"]});
    for on in [true, false] {
        tags.lock().unwrap().clear();
        let script = ScriptedProvider::new([
            ScriptedProvider::call("c1", "add_tag", both.clone()),
            ScriptedProvider::text("Tagged."),
        ]);
        let out = Agent::new(script.clone(), LocalSurface::new(r.clone(), caller()))
            .with_config(AgentConfig::default().split_array_arguments(on))
            .run(
                vec![Message::user("Tag note 63 with both work and urgent.")],
                &CancellationToken::new(),
            )
            .await;
        assert!(out.answered());
        if on {
            assert_eq!(*tags.lock().unwrap(), ["work", "urgent"]);
            let ids: Vec<&str> = out.calls.iter().map(|c| c.id.as_str()).collect();
            assert_eq!(ids, ["c1_1", "c1_2"]);
            assert_eq!(out.interventions.calls_split, 1);
        } else {
            assert!(tags.lock().unwrap().is_empty());
            assert_eq!(out.calls[0].outcome.as_str(), "invalid_arguments");
        }
    }
}

#[tokio::test]
async fn failed_calls_of_earlier_turns_are_not_sent_again() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 42, "priority": 5})),
        ScriptedProvider::call("c2", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call("c3", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, _) = run(&script, AgentConfig::default(), DENTIST).await;
    assert!(out.answered());
    let sent_ids = |turn: usize| -> Vec<String> {
        script.requests()[turn]
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool { call_id, .. } => Some(call_id.clone()),
                _ => None,
            })
            .collect()
    };
    // Turn 2 still sees the failure it must repair; turn 3 no longer does.
    assert_eq!(sent_ids(1), ["c1"]);
    assert_eq!(sent_ids(2), ["c2"]);
    assert_eq!(sent_ids(3), ["c2", "c3"]);
    assert_eq!(out.interventions.failures_forgotten, 2);
    // The stored conversation keeps everything.
    let stored = out
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count();
    assert_eq!(stored, 3);

    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 42, "priority": 5})),
        ScriptedProvider::call("c2", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, _) = run(
        &script,
        AgentConfig::default().forget_old_failures(false),
        DENTIST,
    )
    .await;
    assert_eq!(out.interventions.failures_forgotten, 0);
    assert_eq!(
        script.requests()[2]
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Tool { .. }))
            .count(),
        2
    );
}

#[tokio::test]
async fn after_a_guessed_id_the_next_turn_lists_only_the_tool_that_finds_ids() {
    let names = |script: &ScriptedProvider, turn: usize| -> Vec<String> {
        script.requests()[turn]
            .tools
            .iter()
            .map(|t| t.name.clone())
            .collect()
    };
    let turns = || {
        ScriptedProvider::new([
            ScriptedProvider::call("c1", "set_priority", json!({"note_id": 1, "priority": 5})),
            ScriptedProvider::call("c2", "search_notes", json!({"query": "dentist"})),
            ScriptedProvider::call("c3", "set_priority", json!({"note_id": 17, "priority": 5})),
            ScriptedProvider::text("Done: the dentist note has priority 5."),
        ])
    };
    // On (the default): the turn after the guess lists `search_notes` alone; the turn after
    // that lists everything again.
    let script = turns();
    let (out, sets) = run(&script, AgentConfig::default(), DENTIST).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(sets, 1);
    assert_eq!(out.interventions.turns_narrowed, 1);
    assert_eq!(names(&script, 1), ["search_notes"]);
    assert_eq!(names(&script, 0), names(&script, 2));
    assert!(names(&script, 2).len() > 1);

    // Off: every turn lists every tool.
    let script = turns();
    let (out, sets) = run(
        &script,
        AgentConfig::default().narrow_after_guessed_ids(false),
        DENTIST,
    )
    .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(sets, 1);
    assert_eq!(out.interventions.turns_narrowed, 0);
    assert_eq!(names(&script, 0), names(&script, 1));

    // The finder already ran: nothing to narrow to.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call("c2", "set_priority", json!({"note_id": 1, "priority": 5})),
        ScriptedProvider::call("c3", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, sets) = run(&script, AgentConfig::default(), DENTIST).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(sets, 1);
    assert_eq!(out.interventions.turns_narrowed, 0);
    assert_eq!(names(&script, 0), names(&script, 2));
}
