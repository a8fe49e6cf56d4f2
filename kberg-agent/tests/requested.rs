//! The loop's third set of small-model behaviours, each on (the default) and off, with the
//! scripted provider and a real registry: the source check of a write's text arguments, writes
//! nobody asked for after the requested one succeeded, and a write listed after a read in the
//! same turn.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use kberg_agent::{
    Agent, AgentConfig, CallOutcome, LocalSurface, Message, RunOutcome, ScriptedProvider,
    ToolChoice,
};
use kberg_core::{
    Caller, Grants, Principal, SurfaceProjection, ToolBuilder, ToolOutput, ToolRegistry,
    WriteCapability,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The writes that ran, as (tool, arguments).
type Ran = Arc<Mutex<Vec<(String, Value)>>>;

/// `search_notes` (read), and the writes `set_priority`, `add_tag` and `add_note`, recording
/// each write that runs.
fn registry() -> (ToolRegistry, Ran) {
    let r = ToolRegistry::new();
    let write = WriteCapability::new("notes.write", "Edit notes");
    r.declare(write.clone()).unwrap();
    r.register(
        ToolBuilder::new("search_notes")
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": false}),
                |_, _| async move {
                    Ok(ToolOutput::text(
                        "note_id 17: \"Dentist\" (priority 2, tags: health)\nnote_id 42: \"Groceries\" (priority 3)",
                    ))
                },
            ),
    )
    .unwrap();
    let ran: Ran = Arc::default();
    let writes = [
        (
            "set_priority",
            json!({"type": "object", "properties": {"note_id": {"type": "integer"}, "priority": {"type": "integer"}}, "required": ["note_id", "priority"], "additionalProperties": false}),
        ),
        (
            "add_tag",
            json!({"type": "object", "properties": {"note_id": {"type": "integer"}, "tag": {"type": "string"}}, "required": ["note_id", "tag"], "additionalProperties": false}),
        ),
        (
            "add_note",
            json!({"type": "object", "properties": {"title": {"type": "string"}, "body": {"type": "string"}, "color": {"type": "string", "enum": ["red", "blue"]}}, "required": ["title", "body"], "additionalProperties": false}),
        ),
    ];
    for (name, schema) in writes {
        let ran = ran.clone();
        r.register(
            ToolBuilder::new(name)
                .write(write.clone())
                .small_model_safe()
                .raw_handler(schema, move |a, _| {
                    let ran = ran.clone();
                    async move {
                        ran.lock().unwrap().push((name.to_string(), a.clone()));
                        Ok(ToolOutput::text(format!("Done: {name}")))
                    }
                }),
        )
        .unwrap();
    }
    (r, ran)
}

/// The defaults with the three request bounds on (they are off by default until measured).
fn bounds() -> AgentConfig {
    AgentConfig::default()
        .ground_write_text(true)
        .stop_unrequested_writes(true)
        .hold_writes_after_reads(true)
}

fn caller() -> Caller {
    Caller::new(
        Principal::new("small")
            .with_grants(Grants::of(["notes.write"]))
            .with_projection(SurfaceProjection::Compact),
    )
}

async fn run(
    script: &ScriptedProvider,
    config: AgentConfig,
    request: &str,
) -> (RunOutcome, Vec<(String, Value)>) {
    let (r, ran) = registry();
    let out = Agent::new(script.clone(), LocalSurface::new(r, caller()))
        .with_config(config)
        .run(vec![Message::user(request)], &CancellationToken::new())
        .await;
    let ran = ran.lock().unwrap().clone();
    (out, ran)
}

/// The content of the tool result the model was sent for the call with `call_id`.
fn result_of(out: &RunOutcome, call_id: &str) -> String {
    out.messages
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                call_id: id,
                content,
                ..
            } if id == call_id => Some(content.clone()),
            _ => None,
        })
        .unwrap()
}

fn outcomes(out: &RunOutcome) -> Vec<(&str, &str)> {
    out.calls
        .iter()
        .map(|c| (c.name.as_str(), c.outcome.as_str()))
        .collect()
}

/// Two calls in one turn, as a server returns them.
fn two_calls(first: (&str, Value), second: (&str, Value)) -> kberg_agent::ChatResponse {
    let mut turn = ScriptedProvider::call("a", first.0, first.1);
    let mut other = ScriptedProvider::call("b", second.0, second.1);
    turn.tool_calls.append(&mut other.tool_calls);
    turn
}

// ---- ground_write_text ----

const FALCON: &str = "Tag the Dentist note with \"q1\".";

#[tokio::test]
async fn a_tag_copied_from_a_result_is_not_run_and_the_requested_one_is() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call("c2", "add_tag", json!({"note_id": 17, "tag": "health"})),
        ScriptedProvider::call("c3", "add_tag", json!({"note_id": 17, "tag": "Q1"})),
        ScriptedProvider::text("Done: the Dentist note is tagged q1."),
    ]);
    let (out, ran) = run(&script, bounds(), FALCON).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(
        ran,
        vec![("add_tag".into(), json!({"note_id": 17, "tag": "Q1"}))]
    );
    assert_eq!(out.interventions.ungrounded_texts, 1);
    assert_eq!(out.interventions.ungrounded_writes, 0);
    let told = result_of(&out, "c2");
    assert!(
        told.contains("`tag`") && told.contains("\"health\""),
        "{told}"
    );
    assert!(told.contains(FALCON), "the request is quoted: {told}");
    assert!(out.calls[1].not_sent);

    // Off: the copied tag runs.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call("c2", "add_tag", json!({"note_id": 17, "tag": "health"})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, ran) = run(&script, bounds().ground_write_text(false), FALCON).await;
    assert!(out.answered());
    assert_eq!(ran.len(), 1);
    assert_eq!(out.interventions.ungrounded_texts, 0);
}

#[tokio::test]
async fn text_counts_as_given_by_whole_words_and_composed_or_enum_arguments_are_not_checked() {
    let request = "Add a note titled \"Call mom\" with the text \"Sunday evening.\"";
    // Case, quotes and the final period aside, both texts are the user's words.
    let script = ScriptedProvider::new([
        ScriptedProvider::call(
            "c1",
            "add_note",
            json!({"title": "call Mom", "body": "Sunday  evening", "color": "red"}),
        ),
        ScriptedProvider::text("Added."),
    ]);
    let (out, ran) = run(&script, bounds(), request).await;
    assert!(out.answered());
    assert_eq!(ran.len(), 1, "{:?}", outcomes(&out));

    // Part of a word is not the word: "mo" is not in "Call mom"; an empty text passes.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "add_note", json!({"title": "Call mo", "body": ""})),
        ScriptedProvider::text("Could not add it."),
    ]);
    let (out, ran) = run(&script, bounds(), request).await;
    assert!(ran.is_empty());
    assert_eq!(out.calls[0].outcome.as_str(), "invalid_arguments");
    assert!(result_of(&out, "c1").contains("`title`"));

    // A body the model writes itself is held unless the app names it as composed.
    let composed = || {
        ScriptedProvider::new([
            ScriptedProvider::call(
                "c1",
                "add_note",
                json!({"title": "Call mom", "body": "Remember to ask about the trip"}),
            ),
            ScriptedProvider::text("Added."),
        ])
    };
    let (_, ran) = run(&composed(), bounds(), request).await;
    assert!(ran.is_empty());
    let (out, ran) = run(&composed(), bounds().composed_argument("body"), request).await;
    assert_eq!(ran.len(), 1);
    assert_eq!(out.interventions.ungrounded_texts, 0);
}

// ---- stop_unrequested_writes ----

const PRIORITY: &str = "Set the priority of note 17 to 5.";

#[tokio::test]
async fn a_write_after_the_requested_one_is_held_and_the_next_turn_is_answer_only() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 17, "priority": 5})),
        // The id the user gave, reused, and a tag nobody gave: nothing new was asked for.
        ScriptedProvider::call("c2", "add_tag", json!({"note_id": 17, "tag": "health"})),
        ScriptedProvider::text("The priority of note 17 is now 5."),
    ]);
    let (out, ran) = run(&script, bounds(), PRIORITY).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(ran.len(), 1);
    assert_eq!(out.calls[1].outcome, CallOutcome::Unrequested);
    assert_eq!(out.calls[1].outcome.as_str(), "unrequested");
    assert!(out.calls[1].not_sent);
    assert_eq!(out.interventions.unrequested_writes, 1);
    let told = result_of(&out, "c2");
    assert!(
        told.contains("`set_priority` succeeded") && told.contains("in words"),
        "{told}"
    );
    assert_eq!(script.requests()[2].options.tool_choice, ToolChoice::None);

    // Off: the extra write runs.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::call("c2", "add_tag", json!({"note_id": 17, "tag": "health"})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, ran) = run(
        &script,
        bounds()
            .stop_unrequested_writes(false)
            .ground_write_text(false),
        PRIORITY,
    )
    .await;
    assert_eq!(ran.len(), 2);
    assert_eq!(out.interventions.unrequested_writes, 0);
    assert_ne!(script.requests()[2].options.tool_choice, ToolChoice::None);
}

#[tokio::test]
async fn a_second_write_with_a_new_value_from_the_request_is_requested() {
    let request = "Tag note 17 with both \"work\" and \"urgent\".";
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "add_tag", json!({"note_id": 17, "tag": "work"})),
        ScriptedProvider::call("c2", "add_tag", json!({"note_id": 17, "tag": "urgent"})),
        // Same values as the first tag, another tool: not asked for.
        ScriptedProvider::call("c3", "add_note", json!({"title": "work", "body": "urgent"})),
        ScriptedProvider::text("Tagged."),
    ]);
    let (out, ran) = run(&script, bounds(), request).await;
    assert!(out.answered());
    assert_eq!(
        ran,
        vec![
            ("add_tag".into(), json!({"note_id": 17, "tag": "work"})),
            ("add_tag".into(), json!({"note_id": 17, "tag": "urgent"})),
        ]
    );
    assert_eq!(out.calls[2].outcome, CallOutcome::Unrequested);
}

#[tokio::test]
async fn before_any_write_succeeded_nothing_is_held_and_a_result_id_alone_is_not_a_request() {
    // The first write failed the source check: the next one is still the requested one.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": 1, "priority": 5})),
        ScriptedProvider::call("c2", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call("c3", "set_priority", json!({"note_id": 17, "priority": 5})),
        // The same change to another note found by the search: no new value from the user.
        ScriptedProvider::call("c4", "set_priority", json!({"note_id": 42, "priority": 5})),
        ScriptedProvider::text("Done."),
    ]);
    let (out, ran) = run(
        &script,
        bounds(),
        "Set the priority of my Dentist note to 5.",
    )
    .await;
    assert_eq!(
        ran,
        vec![("set_priority".into(), json!({"note_id": 17, "priority": 5}))]
    );
    assert_eq!(
        outcomes(&out),
        vec![
            ("set_priority", "invalid_arguments"),
            ("search_notes", "ok"),
            ("set_priority", "ok"),
            ("set_priority", "unrequested"),
        ]
    );
}

// ---- hold_writes_after_reads ----

const DENTIST: &str = "Set the priority of my Dentist note to 5.";

#[tokio::test]
async fn a_write_after_a_read_in_the_same_turn_is_held_until_the_result_is_seen() {
    let script = ScriptedProvider::new([
        two_calls(
            ("search_notes", json!({"query": "dentist"})),
            ("set_priority", json!({"note_id": 42, "priority": 5})),
        ),
        ScriptedProvider::call("c3", "set_priority", json!({"note_id": 17, "priority": 5})),
        ScriptedProvider::text("Done: the Dentist note has priority 5."),
    ]);
    let (out, ran) = run(&script, bounds(), DENTIST).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(
        ran,
        vec![("set_priority".into(), json!({"note_id": 17, "priority": 5}))]
    );
    assert_eq!(out.calls[1].outcome, CallOutcome::Held);
    assert_eq!(out.calls[1].outcome.as_str(), "held");
    assert!(out.calls[1].not_sent);
    assert_eq!(out.interventions.writes_held, 1);
    let told = result_of(&out, "b");
    assert!(
        told.contains("after `search_notes`") && told.contains("call `set_priority` again"),
        "{told}"
    );
    // A held write is not a failure: it does not count toward the repeat bound or the repair
    // turns, and the next turn may call tools.
    assert_eq!(out.repair_turns, 0);
    assert_eq!(script.requests()[1].options.tool_choice, ToolChoice::Auto);

    // Off: the write written before the result runs, on the wrong note.
    let script = ScriptedProvider::new([
        two_calls(
            ("search_notes", json!({"query": "dentist"})),
            ("set_priority", json!({"note_id": 42, "priority": 5})),
        ),
        ScriptedProvider::text("Done."),
    ]);
    let (_, ran) = run(&script, bounds().hold_writes_after_reads(false), DENTIST).await;
    assert_eq!(
        ran,
        vec![("set_priority".into(), json!({"note_id": 42, "priority": 5}))]
    );
}

#[tokio::test]
async fn a_read_answered_from_an_earlier_result_does_not_hold_the_write_after_it() {
    // The model sends the same turn again (as text, the way small models write calls): the
    // repeated search is answered from its earlier result, which the model has seen, so the
    // write after it runs.
    let turn = "{\"name\": \"search_notes\", \"arguments\": {\"query\": \"dentist\"}}\n{\"name\": \"set_priority\", \"arguments\": {\"note_id\": 17, \"priority\": 5}}";
    let script = ScriptedProvider::new([
        ScriptedProvider::text(turn),
        ScriptedProvider::text(turn),
        ScriptedProvider::text("Done: the Dentist note has priority 5."),
    ]);
    let (out, ran) = run(&script, bounds(), DENTIST).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(ran.len(), 1);
    assert_eq!(
        outcomes(&out),
        vec![
            ("search_notes", "ok"),
            ("set_priority", "held"),
            ("search_notes", "duplicate"),
            ("set_priority", "ok"),
        ]
    );
    // A write before the read in the same turn is not held.
    let script = ScriptedProvider::new([
        two_calls(
            ("set_priority", json!({"note_id": 17, "priority": 5})),
            ("search_notes", json!({"query": "dentist"})),
        ),
        ScriptedProvider::text("Done."),
    ]);
    let (out, ran) = run(&script, bounds(), PRIORITY).await;
    assert_eq!(ran.len(), 1);
    assert_eq!(out.interventions.writes_held, 0);
}

#[tokio::test]
async fn all_three_are_off_by_default_and_without_small_model_guards() {
    let c = bounds().without_small_model_guards();
    assert!(!c.ground_write_text && !c.stop_unrequested_writes && !c.hold_writes_after_reads);
    let d = AgentConfig::default();
    assert!(!d.ground_write_text && !d.stop_unrequested_writes && !d.hold_writes_after_reads);
    let on = bounds();
    assert!(on.ground_write_text && on.stop_unrequested_writes && on.hold_writes_after_reads);
}
