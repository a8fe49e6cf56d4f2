//! The notes app the agent-loop and provider tests drive: a write tool under `notes.write`, a
//! long tool that stops when its call is cancelled, a registered refusal, and optionally a read
//! tool.
//! Tests that need more register it on the returned registry (registration stays open).
//!
//! `add_note`'s arguments are bounded like a real app's input, so servers that constrain
//! generation by the schema (llama.cpp grammars) cannot let a model ramble inside a string.

use std::time::Duration;

use kberg_core::{Grants, Principal, ToolBuilder, ToolOutput, ToolRegistry, WriteCapability};
use schemars::JsonSchema;
use serde::Deserialize;

/// The capability `add_note` needs.
pub const NOTES_WRITE: &str = "notes.write";

/// The reason `delete_all_notes` is refused with.
pub const DELETE_ALL_REFUSAL: &str = "bulk deletion is never offered to models";

#[derive(Deserialize, JsonSchema)]
struct AddNote {
    #[schemars(length(min = 1, max = 40))]
    title: String,
    #[schemars(range(min = 1, max = 5))]
    priority: u8,
}

#[derive(Deserialize, JsonSchema)]
struct Search {
    query: String,
}

#[derive(Deserialize, JsonSchema)]
struct Wait {
    seconds: u64,
}

/// The registry, in listing order:
///
/// - `add_note` (Write `notes.write`, small-model safe; `title` 1 to 40 characters, `priority`
///   1 to 5): answers `created {title} (priority {priority})`;
/// - `wait` (Read): sleeps `seconds`, or fails with `stopped` as soon as its call is cancelled;
/// - `delete_all_notes`: refused with [`DELETE_ALL_REFUSAL`].
pub fn registry() -> ToolRegistry {
    build(false)
}

/// [`registry`] with a read tool listed first: `search_notes` (Read, small-model safe), which
/// answers `found 2 notes about {query}`.
pub fn registry_with_search() -> ToolRegistry {
    build(true)
}

fn build(search: bool) -> ToolRegistry {
    let tools = ToolRegistry::new();
    let write = WriteCapability::new(NOTES_WRITE, "Create notes");
    tools.declare(write.clone()).expect("declare notes.write");
    if search {
        tools
            .register(
                ToolBuilder::new("search_notes")
                    .description("Find notes")
                    .small_model_safe()
                    .handler(|a: Search, _| async move {
                        Ok(ToolOutput::text(format!("found 2 notes about {}", a.query)))
                    }),
            )
            .expect("search_notes");
    }
    tools
        .register(
            ToolBuilder::new("add_note")
                .description("Create a note")
                .write(write)
                .small_model_safe()
                .handler(|a: AddNote, _| async move {
                    Ok(ToolOutput::text(format!(
                        "created {} (priority {})",
                        a.title, a.priority
                    )))
                }),
        )
        .expect("add_note");
    tools
        .register(ToolBuilder::new("wait").description("Wait a while").handler(
            |a: Wait, ctx| async move {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(a.seconds)) => Ok(ToolOutput::text("waited")),
                    () = ctx.cancellation().cancelled() => Err("stopped".into()),
                }
            },
        ))
        .expect("wait");
    tools
        .refuse("delete_all_notes", DELETE_ALL_REFUSAL)
        .expect("refuse delete_all_notes");
    tools
}

/// A principal named `name` granted `notes.write`.
pub fn writer(name: &str) -> Principal {
    Principal::new(name).with_grants(Grants::of([NOTES_WRITE]))
}
