//! The README's examples, compiled and run. Each is here verbatim (the last test checks that it
//! still is), inside a function that sets up what the README leaves out and then checks what
//! the example claims. Change an example in both places.

// The README's examples print what they show.
#![allow(clippy::print_stdout)]

use std::sync::{Arc, Mutex};

use kberg_core::*;
use serde_json::{Value, json};

type Outcome = Result<(), Box<dyn std::error::Error>>;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddNote {
    title: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Delete {
    ids: Vec<u64>,
}

/// The notes the delete example works on.
#[derive(Default)]
struct Store {
    notes: Mutex<Vec<u64>>,
}

impl Store {
    fn delete(&self, ids: &[u64]) -> Result<(), String> {
        let mut notes = self.notes.lock().map_err(|e| e.to_string())?;
        notes.retain(|n| !ids.contains(n));
        Ok(())
    }
}

fn caller_with(grants: &[&str]) -> Caller {
    Caller::new(Principal::new("claude").with_grants(Grants::of(grants.iter().copied())))
}

#[rustfmt::skip]
#[tokio::test]
async fn the_first_example_registers_a_write_tool_and_calls_it() -> Outcome {
use kberg_core::*;

let tools = ToolRegistry::new();
let notes_write = WriteCapability::new("notes.write", "Create and edit notes");
tools.declare(notes_write.clone())?;
tools.register(ToolBuilder::new("add_note")
    .description("Create a note")
    .write(notes_write)
    .handler(|a: AddNote, _ctx| async move { Ok(ToolOutput::text(format!("created {}", a.title))) }))?;

let caller = Caller::new(Principal::new("claude").with_grants(Grants::of(["notes.write"])));
let out = tools.call(&caller, "add_note", json!({"title": "hello"}), CallOptions::default()).await?;
    assert_eq!(out.all_text(), "created hello");
    // Without the grant, the gate refuses before the tool runs.
    let refused = tools
        .call(&caller_with(&[]), "add_note", json!({"title": "x"}), CallOptions::default())
        .await
        .expect_err("no grant");
    assert_eq!(refused.code(), ErrorCode::CapabilityRequired);
    Ok(())
}

#[rustfmt::skip]
#[tokio::test]
async fn handles_hide_internal_ids_and_resolve_them_back() -> Outcome {
    let secret_32_bytes = [7u8; 32];
use kberg_core::*;

struct Note;
impl HandleKind for Note { const KIND: &'static str = "note"; }

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Open { note: Handle<Note> }
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Empty {}

let tools = ToolRegistry::builder()
    .handle_codec(HandleCodec::new("notes-app", &secret_32_bytes)?)
    .build();
tools.register(ToolBuilder::new("recent_notes").handler(|_a: Empty, ctx| async move {
    let h = ctx.mint_handle::<Note>("notes/row-41").map_err(|e| e.to_string())?;
    ToolOutput::json(&serde_json::json!({"notes": [h]}))   // the model sees "h1.…", never the row key
}))?;
tools.register(ToolBuilder::new("open_note").handler(|a: Open, _ctx| async move {
    Ok(ToolOutput::text(format!("opened {}", a.note.id())))  // "notes/row-41"
}))?;
    let caller = caller_with(&[]);
    let listed = tools.call(&caller, "recent_notes", json!({}), CallOptions::default()).await?;
    let listed: Value = serde_json::from_str(&listed.all_text())?;
    let handle = listed["notes"][0].as_str().expect("a handle").to_string();
    assert!(handle.starts_with("h1."), "{handle}");
    assert!(!handle.contains("row-41"), "{handle}");
    let opened = tools.call(&caller, "open_note", json!({"note": handle}), CallOptions::default()).await?;
    assert_eq!(opened.all_text(), "opened notes/row-41");
    Ok(())
}

#[rustfmt::skip]
#[tokio::test]
async fn a_previewed_write_runs_once_with_its_commit_token() -> Outcome {
    let tools = ToolRegistry::new();
    let notes_write = WriteCapability::new("notes.write", "Create and edit notes");
    tools.declare(notes_write.clone())?;
    let notes = Arc::new(Store { notes: Mutex::new(vec![1, 2, 3]) });
    let store = Arc::clone(&notes);
tools.register(ToolBuilder::new("delete_notes").write(notes_write).previews()
    .handler(move |a: Delete, ctx| {
        let store = Arc::clone(&store); // the app's store, an Arc shared with the tool
        async move {
            if ctx.is_preview() {
                return Ok(ToolOutput::text(format!("would delete {} notes", a.ids.len())));
            }
            store.delete(&a.ids)?;
            Ok(ToolOutput::text("deleted"))
        }
    }))?;
// 1st call: {"ids": [1, 2]}                         -> preview + commit_token
// 2nd call: {"ids": [1, 2], "commit_token": "ct1.…"} -> deleted (once)
    let caller = caller_with(&["notes.write"]);
    let preview = tools.call(&caller, "delete_notes", json!({"ids": [1, 2]}), CallOptions::default()).await?;
    let structured = preview.structured.expect("a preview's structured content");
    assert_eq!(structured["status"], "preview");
    assert_eq!(notes.notes.lock().map_err(|e| e.to_string())?.len(), 3, "a preview changes nothing");
    let token = structured["commit_token"].as_str().expect("a commit token").to_string();
    assert!(token.starts_with("ct1."), "{token}");
    let commit = json!({"ids": [1, 2], "commit_token": token});
    let done = tools.call(&caller, "delete_notes", commit.clone(), CallOptions::default()).await?;
    assert_eq!(done.all_text(), "deleted");
    assert_eq!(*notes.notes.lock().map_err(|e| e.to_string())?, [3]);
    let again = tools.call(&caller, "delete_notes", commit, CallOptions::default()).await.expect_err("once");
    assert_eq!(again.code(), ErrorCode::CommitTokenUsed);
    Ok(())
}

#[rustfmt::skip]
#[tokio::test]
async fn a_scope_field_is_filled_with_the_current_scope() -> Outcome {
    let tools = ToolRegistry::new();
    let principal = Principal::new("claude");
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Find { scope: Scope, query: String }

tools.declare_scope(ScopeSpec::new("book:moby", "Moby-Dick"))?;
tools.register(ToolBuilder::new("find").small_model_safe()
    .handler(|a: Find, _ctx| async move { Ok(ToolOutput::text(format!("{} in {}", a.query, a.scope))) }))?;
let caller = Caller::new(principal)
    .with_scopes(ScopeSet::only(["book:moby", "library"]).with_current("book:moby"));
tools.call(&caller, "find", json!({"query": "whale"}), CallOptions::default()).await?; // in book:moby
    let out = tools.call(&caller, "find", json!({"query": "whale"}), CallOptions::default()).await?;
    assert_eq!(out.all_text(), "whale in book:moby");
    Ok(())
}

#[cfg(feature = "sqlite")]
#[rustfmt::skip]
#[tokio::test]
async fn a_confirmed_call_waits_for_a_human_and_runs_once_approved() -> Outcome {
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path();
    let human = Principal::new("alice").with_grants(Grants::of(["kberg.confirm"]));
    let caller = caller_with(&["notes.write"]);
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runs = Arc::clone(&asked);
let tools = ToolRegistry::builder()
    .confirm_policy(|spec: &ToolSpec, args: &Value, _caller: &Caller| {
        let n = args["ids"].as_array().map_or(0, Vec::len);
        (spec.name == "delete_notes" && n > 50).then(|| ConfirmRequest::new(format!("deletes {n} notes")))
    })
    .ticket_store(Arc::new(SqliteTicketStore::open(data_dir.join("tickets.db"))?))
    .build();
// ... the model's call answers pending_human_confirm {ticket: "tk_…"}; later, in the app's UI:
    let notes_write = WriteCapability::new("notes.write", "Create and edit notes");
    tools.declare(notes_write.clone())?;
    tools.register(ToolBuilder::new("delete_notes").write(notes_write).handler(move |a: Delete, _ctx| {
        let runs = Arc::clone(&runs);
        async move {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(ToolOutput::text(format!("deleted {}", a.ids.len())))
        }
    }))?;
    let many: Vec<u64> = (0..60).collect();
    let pending = tools.call(&caller, "delete_notes", json!({"ids": many}), CallOptions::default()).await.expect_err("waits");
    assert_eq!(pending.code(), ErrorCode::PendingHumanConfirm);
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing ran before approval");
let desk = tools.tickets();
for t in desk.pending()? {
    println!("{} wants {} ({})", t.principal.id, t.tool, t.reason);
    desk.approve(&t.id, &human).await?; // runs the call once; the asker reads desk.result(&t.id, &caller)
}
    let ticket = desk.list()?.pop().expect("the ticket");
    assert_eq!(desk.result(&ticket.id, &caller)?.all_text(), "deleted 60");
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(desk.pending()?.is_empty());
    Ok(())
}

#[rustfmt::skip]
#[tokio::test]
async fn the_audit_sink_writes_json_lines() -> Outcome {
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path();
let sink = Arc::new(JsonlAuditSink::open(data_dir.join("audit.jsonl"), FlushPolicy::default())?);
let tools = ToolRegistry::builder().audit_sink(sink.clone()).build();
// ... calls ...
    tools.register(ToolBuilder::new("echo").handler(|a: Value, _ctx| async move { Ok(ToolOutput::text(a.to_string())) }))?;
    tools.call(&caller_with(&[]), "echo", json!({"secret": "canary-4711"}), CallOptions::default()).await?;
sink.flush()?; // e.g. before a backup; dropping the sink flushes too
    let written = std::fs::read_to_string(data_dir.join("audit.jsonl"))?;
    let record: Value = serde_json::from_str(written.lines().next().expect("one record"))?;
    assert_eq!(record["tool"], "echo");
    assert!(!written.contains("canary-4711"), "argument values are never recorded");
    Ok(())
}

#[test]
fn the_readme_examples_are_the_ones_tested_here() {
    kberg_testkit::readme::assert_examples_in(
        include_str!("../README.md"),
        include_str!("readme.rs"),
    );
}
