//! Short handles for long ids ([`AgentConfig::id_handles`]), with the scripted provider and a
//! real registry whose notes have uuids: a multi-step task whose write needs the id a search
//! returned succeeds with a model that copies the handle; the tool only ever receives the real
//! id; the stored conversation holds real ids and what the model is sent holds handles; a
//! handle the run never issued, or a handle's number written without its `#`, is answered with a
//! repair message and never sent.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use kberg_agent::{Agent, AgentConfig, LocalSurface, Message, RunOutcome, ScriptedProvider};
use kberg_core::{
    Caller, Grants, Principal, SurfaceProjection, ToolBuilder, ToolError, ToolOutput, ToolRegistry,
    WriteCapability,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const DENTIST: &str = "3f2a9c1e-7b4d-4e8a-9f10-2c6d8e4b5a71";
const GROCERIES: &str = "8b1d4f7a-2e6c-4a9b-b3d5-71c0e9f2a468";

/// `search_notes` (read) answers with both notes and their uuids; `set_priority` (write)
/// records every argument object it receives and fails for an id it does not hold.
fn registry() -> (ToolRegistry, Arc<Mutex<Vec<Value>>>) {
    let r = ToolRegistry::new();
    let write = WriteCapability::new("notes.write", "Edit notes");
    r.declare(write.clone()).unwrap();
    r.register(
        ToolBuilder::new("search_notes")
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"], "additionalProperties": false}),
                |_, _| async move {
                    Ok(ToolOutput::text(format!(
                        r#"[{{"id": "{DENTIST}", "title": "Dentist"}}, {{"id": "{GROCERIES}", "title": "Groceries"}}]"#
                    )))
                },
            ),
    )
    .unwrap();
    let received = Arc::new(Mutex::new(Vec::new()));
    let log = received.clone();
    r.register(
        ToolBuilder::new("set_priority")
            .write(write)
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {"note_id": {"type": "string"}, "priority": {"type": "integer"}}, "required": ["note_id", "priority"], "additionalProperties": false}),
                move |a: Value, _| {
                    let log = log.clone();
                    async move {
                        log.lock().unwrap().push(a.clone());
                        let id = a["note_id"].as_str().unwrap_or_default();
                        if id != DENTIST && id != GROCERIES {
                            return Err(ToolError::failed(format!("There is no note with id {id}.")));
                        }
                        Ok(ToolOutput::text(format!("Updated note {id}")))
                    }
                },
            ),
    )
    .unwrap();
    (r, received)
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
) -> (RunOutcome, Vec<Value>) {
    let (r, received) = registry();
    let out = Agent::new(script.clone(), LocalSurface::new(r, caller()))
        .with_config(config)
        .run(vec![Message::user(request)], &CancellationToken::new())
        .await;
    let received = received.lock().unwrap().clone();
    (out, received)
}

/// Every text of a conversation: message contents and call arguments.
fn texts(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| match m {
            Message::System { content } | Message::User { content } => content.clone(),
            Message::Tool { content, .. } => content.clone(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let calls: Vec<String> =
                    tool_calls.iter().map(|c| c.arguments.to_string()).collect();
                format!("{content} {}", calls.join(" "))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn no_handle_reached_the_tool(received: &[Value]) {
    for args in received {
        assert!(
            !args.to_string().contains('#'),
            "a handle reached the tool: {args}"
        );
    }
}

#[tokio::test]
async fn a_write_copies_the_handle_from_a_search_and_the_tool_receives_the_uuid() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call(
            "c2",
            "set_priority",
            json!({"note_id": "#1", "priority": 5}),
        ),
        ScriptedProvider::text("Done: note #1 (Dentist) has priority 5."),
    ]);
    let (out, received) = run(
        &script,
        AgentConfig::default().id_handles(true),
        "Set the priority of my Dentist note to 5.",
    )
    .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(received, [json!({"note_id": DENTIST, "priority": 5})]);
    no_handle_reached_the_tool(&received);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok", "ok"]);
    assert_eq!(out.calls[1].arguments["note_id"], DENTIST);
    assert_eq!(out.interventions.handles_issued, 2);
    // The call's `#1`, and the `#1` of the answer.
    assert_eq!(out.interventions.handles_resolved, 2);
    assert_eq!(
        out.text,
        format!("Done: note {DENTIST} (Dentist) has priority 5.")
    );

    // What the model was sent: handles, never the uuids, and the note saying what they are.
    let requests = script.requests();
    let seen = texts(&requests[1].messages);
    assert!(
        seen.contains(r##"{"id": "#1", "title": "Dentist"}, {"id": "#2""##),
        "{seen}"
    );
    assert!(seen.contains("write its handle exactly as shown"), "{seen}");
    assert!(
        !seen.contains(DENTIST) && !seen.contains(GROCERIES),
        "{seen}"
    );
    let seen = texts(&requests[2].messages);
    assert!(
        seen.contains(r##"{"note_id":"#1","priority":5}"##),
        "{seen}"
    );
    assert!(!seen.contains(DENTIST), "{seen}");

    // What is stored: the real ids only.
    let stored = texts(&out.messages);
    assert!(stored.contains(DENTIST), "{stored}");
    assert!(!stored.contains("#1") && !stored.contains("#2"), "{stored}");
}

#[tokio::test]
async fn a_handle_in_a_call_written_as_text_is_resolved() {
    let script = ScriptedProvider::new([
        ScriptedProvider::text(r#"{"name": "search_notes", "arguments": {"query": "groceries"}}"#),
        ScriptedProvider::text(
            r##"{"name": "set_priority", "arguments": {"note_id": "#2", "priority": 4}}"##,
        ),
        ScriptedProvider::text("The Groceries note now has priority 4."),
    ]);
    let (out, received) = run(
        &script,
        AgentConfig::default().id_handles(true),
        "Set the priority of my Groceries note to 4.",
    )
    .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(received, [json!({"note_id": GROCERIES, "priority": 4})]);
    assert!(out.calls.iter().all(|c| c.recovered_from_text));
    // The stored turn keeps what the model wrote, with the id the handle stands for.
    let stored = texts(&out.messages);
    assert!(
        stored.contains(&format!(r#""note_id": "{GROCERIES}""#)),
        "{stored}"
    );
}

#[tokio::test]
async fn an_unknown_handle_is_answered_with_the_handles_shown_and_never_sent() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call(
            "c2",
            "set_priority",
            json!({"note_id": "#7", "priority": 5}),
        ),
        ScriptedProvider::call(
            "c3",
            "set_priority",
            json!({"note_id": "#1", "priority": 5}),
        ),
        ScriptedProvider::text("Done."),
    ]);
    let (out, received) = run(
        &script,
        AgentConfig::default().id_handles(true),
        "Set the priority of my Dentist note to 5.",
    )
    .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(received, [json!({"note_id": DENTIST, "priority": 5})]);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["ok", "invalid_arguments", "ok"]);
    assert!(out.calls[1].not_sent);
    assert_eq!(out.interventions.unknown_handles, 1);
    assert_eq!(out.repair_turns, 1);
    let Some(Message::Tool { content, .. }) = script.requests()[2].messages.last().cloned() else {
        panic!("the unknown handle is answered")
    };
    assert!(content.contains("`note_id` is `#7`"), "{content}");
    assert!(
        content.contains("The handles you were shown are #1, #2"),
        "{content}"
    );
    assert!(content.contains("call `search_notes` first"), "{content}");
}

#[tokio::test]
async fn a_uuid_the_user_gives_is_shown_as_a_handle_too() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call(
            "c1",
            "set_priority",
            json!({"note_id": "#1", "priority": 3}),
        ),
        ScriptedProvider::text("Done."),
    ]);
    let request = format!("Set the priority of note {GROCERIES} to 3.");
    let (out, received) = run(&script, AgentConfig::default().id_handles(true), &request).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(received, [json!({"note_id": GROCERIES, "priority": 3})]);
    let seen = texts(&script.requests()[0].messages);
    assert!(seen.contains("Set the priority of note #1 to 3."), "{seen}");
}

#[tokio::test]
async fn off_the_model_is_sent_the_uuids_and_a_handle_is_an_ordinary_string() {
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "search_notes", json!({"query": "dentist"})),
        ScriptedProvider::call(
            "c2",
            "set_priority",
            json!({"note_id": "#1", "priority": 5}),
        ),
        ScriptedProvider::text("Done."),
    ]);
    let (out, received) = run(
        &script,
        AgentConfig::default()
            .id_handles(false)
            .ground_write_arguments(false),
        "Set the priority of my Dentist note to 5.",
    )
    .await;
    let seen = texts(&script.requests()[1].messages);
    assert!(seen.contains(DENTIST) && !seen.contains("#1"), "{seen}");
    // Without handles `#1` is just text: the tool receives it and holds no such note.
    assert_eq!(received, [json!({"note_id": "#1", "priority": 5})]);
    assert_eq!(out.calls[1].outcome.as_str(), "tool_failed");
    assert_eq!(out.interventions.handles_issued, 0);
}

#[tokio::test]
async fn a_handle_copied_without_its_hash_is_answered_with_the_call_to_make_and_never_sent() {
    // The user gives the uuid; the model sees `#1` and writes `"1"`, then copies the call it
    // was shown.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": "1", "priority": 5})),
        ScriptedProvider::call(
            "c2",
            "set_priority",
            json!({"note_id": "#1", "priority": 5}),
        ),
        ScriptedProvider::text("Done."),
    ]);
    let request = format!("Set the priority of note {GROCERIES} to 5.");
    let (out, received) = run(&script, AgentConfig::default().id_handles(true), &request).await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(received, [json!({"note_id": GROCERIES, "priority": 5})]);
    let outcomes: Vec<&str> = out.calls.iter().map(|c| c.outcome.as_str()).collect();
    assert_eq!(outcomes, ["invalid_arguments", "ok"]);
    assert!(out.calls[0].not_sent);
    assert_eq!(out.interventions.handles_without_hash, 1);
    assert_eq!(out.interventions.unknown_handles, 1);
    // What the model was told: the handle with its `#`, as the call to make.
    let told = texts(&script.requests()[1].messages);
    assert!(
        told.contains(r##"not an id"##)
            && told
                .contains(r##"{"name":"set_priority","arguments":{"note_id":"#1","priority":5}}"##),
        "{told}"
    );
    assert!(!told.contains(GROCERIES), "{told}");
}

#[tokio::test]
async fn a_bare_number_the_user_gave_or_for_an_integer_id_is_sent_as_written() {
    // "1" is in the user's words: it may be a real id, so it is sent (and this tool fails it).
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": "1", "priority": 5})),
        ScriptedProvider::text("There is no such note."),
    ]);
    let request =
        format!("Note {GROCERIES} is number 1 on my list; set the priority of note 1 to 5.");
    let (out, received) = run(&script, AgentConfig::default().id_handles(true), &request).await;
    assert_eq!(
        received,
        [json!({"note_id": "1", "priority": 5})],
        "{:?}",
        out.calls
    );
    assert_eq!(out.interventions.handles_without_hash, 0);
    // Off: no handles, so "1" is no handle's number; the write is an ordinary guess, which the
    // source check answers instead.
    let script = ScriptedProvider::new([
        ScriptedProvider::call("c1", "set_priority", json!({"note_id": "1", "priority": 5})),
        ScriptedProvider::text("There is no such note."),
    ]);
    let request = format!("Set the priority of note {GROCERIES} to 5.");
    let (out, received) = run(&script, AgentConfig::default().id_handles(false), &request).await;
    assert!(received.is_empty(), "{received:?}");
    assert_eq!(out.interventions.handles_without_hash, 0);
    assert_eq!(out.interventions.ungrounded_writes, 1);
}
