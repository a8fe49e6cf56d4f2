//! A small notes app: the Kberg app the interop tests drive with the official SDK clients.
//!
//! It has what a real desktop app exposes and what the guardrails are about:
//!
//! - Read tools (`list_notes`, `read_note`) any caller may use;
//! - Write tools: `add_note` under the capability `notes.write`, `delete_note` under
//!   `notes.delete` (granted to nobody here): a caller without the grant is refused with the
//!   stable code `capability_required`, and bad arguments are refused with `invalid_arguments`
//!   naming each offending field;
//! - a slow tool (`slow_count`) that reports progress and a log message per step and watches its
//!   cancellation token, and
//!   `cancellations`, which tells how many slow calls saw their cancellation (so a client can
//!   check that cancelling reached the tool, not just the wire);
//! - the live resource `notes://all` (every note, as JSON), updated whenever a note is added,
//!   and the template `notes://note/{id}`;
//! - a prompt, `summarize_notes`.
//!
//! Two principals make the grants visible: [`READER_TOKEN`] (no grants) and [`WRITER_TOKEN`]
//! (`notes.write`), both served by [`bearer_tokens`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kberg_core::{
    CoreError, Grants, Principal, PromptArgument, PromptMessage, PromptRegistry, PromptResult,
    PromptSpec, ResourceContents, ResourceDescriptor, ResourceError, ResourceRegistry,
    ResourceTemplate, ToolBuilder, ToolError, ToolOutput, ToolRegistry, WriteCapability, reader_fn,
};
use kberg_server::{BearerTokens, McpApp};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The capability `add_note` needs.
pub const NOTES_WRITE: &str = "notes.write";
/// The capability `delete_note` needs; no principal of this app is granted it.
pub const NOTES_DELETE: &str = "notes.delete";
/// The URI of the resource listing every note.
pub const ALL_NOTES_URI: &str = "notes://all";
/// The bearer token of the principal `reader` (no grants).
pub const READER_TOKEN: &str = "reader-token-for-tests";
/// The bearer token of the principal `writer` (granted `notes.write`).
pub const WRITER_TOKEN: &str = "writer-token-for-tests";

/// One note.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    /// Its id (`n1`, `n2`, ...).
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its text.
    pub body: String,
}

/// The app's state, shared by its tools and resources.
#[derive(Debug, Default)]
pub struct NotesState {
    notes: Mutex<BTreeMap<u64, Note>>,
    next_id: AtomicU64,
    cancellations: AtomicU64,
}

impl NotesState {
    fn notes(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Note>> {
        // Each update is a single insert; a poisoned lock still holds a consistent map.
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every note, oldest first.
    pub fn all(&self) -> Vec<Note> {
        self.notes().values().cloned().collect()
    }

    /// Adds a note and returns it.
    pub fn add(&self, title: String, body: String) -> Note {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let note = Note {
            id: format!("n{n}"),
            title,
            body,
        };
        self.notes().insert(n, note.clone());
        note
    }

    /// The note with this id.
    pub fn get(&self, id: &str) -> Option<Note> {
        self.notes().values().find(|n| n.id == id).cloned()
    }

    /// Removes the note with this id; whether it existed.
    pub fn remove(&self, id: &str) -> bool {
        let mut notes = self.notes();
        let key = notes.iter().find(|(_, n)| n.id == id).map(|(k, _)| *k);
        key.and_then(|k| notes.remove(&k)).is_some()
    }

    /// How many `slow_count` calls saw their cancellation.
    pub fn cancellations(&self) -> u64 {
        self.cancellations.load(Ordering::Relaxed)
    }
}

/// Counts a `slow_count` call as cancelled when it ends (is dropped or returns) unfinished.
struct Unfinished {
    state: Arc<NotesState>,
    done: bool,
}

impl Unfinished {
    fn new(state: Arc<NotesState>) -> Self {
        Self { state, done: false }
    }

    fn finished(&mut self) {
        self.done = true;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.done {
            self.state.cancellations.fetch_add(1, Ordering::Relaxed);
            tracing::info!("slow_count ended unfinished (cancelled)");
        }
    }
}

#[derive(Deserialize, JsonSchema)]
struct ReadNote {
    /// The note's id, as `list_notes` shows it.
    id: String,
}

#[derive(Deserialize, JsonSchema)]
struct AddNote {
    /// A short title.
    #[schemars(length(min = 1, max = 200))]
    title: String,
    /// The text of the note.
    body: String,
}

#[derive(Deserialize, JsonSchema)]
struct SlowCount {
    /// How many steps to count.
    #[schemars(range(min = 1, max = 1000))]
    steps: u32,
    /// Pause between steps, in milliseconds.
    #[schemars(range(max = 10000))]
    delay_ms: u64,
}

fn tools(state: &Arc<NotesState>, resources: &ResourceRegistry) -> Result<ToolRegistry, CoreError> {
    let tools = ToolRegistry::new();
    let write = WriteCapability::new(NOTES_WRITE, "Create notes");
    tools.declare(write.clone())?;

    let s = Arc::clone(state);
    tools.register(
        ToolBuilder::new("list_notes")
            .description("List every note (id and title).")
            .small_model_safe()
            .raw_handler(
                json!({"type": "object", "properties": {}}),
                move |_a, _c| {
                    let s = Arc::clone(&s);
                    async move {
                        let list: Vec<_> = s
                            .all()
                            .into_iter()
                            .map(|n| json!({"id": n.id, "title": n.title}))
                            .collect();
                        ToolOutput::json(&json!({"notes": list}))
                    }
                },
            ),
    )?;
    let s = Arc::clone(state);
    tools.register(
        ToolBuilder::new("read_note")
            .description("Read one note by id.")
            .small_model_safe()
            .handler(move |a: ReadNote, _c| {
                let s = Arc::clone(&s);
                async move {
                    match s.get(&a.id) {
                        Some(n) => ToolOutput::json(&n),
                        None => Err(ToolError::failed(format!(
                            "there is no note `{}`; call list_notes for the ids",
                            a.id
                        ))),
                    }
                }
            }),
    )?;
    let s = Arc::clone(state);
    let r = resources.clone();
    tools.register(
        ToolBuilder::new("add_note")
            .description("Create a note.")
            .write(write)
            .handler(move |a: AddNote, _c| {
                let s = Arc::clone(&s);
                let r = r.clone();
                async move {
                    let note = s.add(a.title, a.body);
                    r.notify_updated(ALL_NOTES_URI);
                    ToolOutput::json(&json!({"id": note.id}))
                }
            }),
    )?;
    let delete = WriteCapability::new(NOTES_DELETE, "Delete notes");
    tools.declare(delete.clone())?;
    let s = Arc::clone(state);
    tools.register(
        ToolBuilder::new("delete_note")
            .description("Delete a note.")
            .write(delete)
            .handler(move |a: ReadNote, _c| {
                let s = Arc::clone(&s);
                async move {
                    let removed = s.remove(&a.id);
                    ToolOutput::json(&json!({"deleted": removed}))
                }
            }),
    )?;
    let s = Arc::clone(state);
    tools.register(
        ToolBuilder::new("slow_count")
            .description("Count slowly to `steps`, reporting progress; stops when cancelled.")
            .handler(move |a: SlowCount, ctx| {
                let s = Arc::clone(&s);
                async move {
                    // The gate drops a cancelled call's future; the guard's destructor is how the
                    // tool observes that (and a tool that also watches its token stops sooner).
                    let mut guard = Unfinished::new(Arc::clone(&s));
                    let total = f64::from(a.steps);
                    for step in 1..=a.steps {
                        tokio::select! {
                            () = ctx.cancellation().cancelled() => {
                                return Err(ToolError::failed("cancelled"));
                            }
                            () = tokio::time::sleep(Duration::from_millis(a.delay_ms)) => {}
                        }
                        let message = format!("counted {step} of {}", a.steps);
                        ctx.progress(f64::from(step), Some(total), Some(&message))
                            .await?;
                        ctx.log("info", Some("slow_count"), json!(message)).await?;
                    }
                    guard.finished();
                    Ok(ToolOutput::text(format!("counted to {}", a.steps)))
                }
            }),
    )?;
    let s = Arc::clone(state);
    tools.register(
        ToolBuilder::new("cancellations")
            .description("How many slow_count calls saw their cancellation.")
            .raw_handler(
                json!({"type": "object", "properties": {}}),
                move |_a, _c| {
                    let s = Arc::clone(&s);
                    async move { ToolOutput::json(&json!({"cancellations": s.cancellations()})) }
                },
            ),
    )?;
    Ok(tools)
}

fn resources(state: &Arc<NotesState>) -> Result<ResourceRegistry, CoreError> {
    let resources = ResourceRegistry::new();
    let s = Arc::clone(state);
    resources.register(
        ResourceDescriptor::new(ALL_NOTES_URI, "all-notes")
            .description("Every note, as a JSON array")
            .mime_type("application/json"),
        reader_fn(move |uri, _vars| {
            let body = serde_json::to_string(&s.all());
            async move {
                let body = body.map_err(|e| ResourceError::ReadFailed {
                    uri: uri.clone(),
                    message: e.to_string(),
                })?;
                Ok(vec![ResourceContents::text(
                    uri,
                    Some("application/json"),
                    body,
                )])
            }
        }),
    )?;
    let s = Arc::clone(state);
    resources.register_template(
        ResourceTemplate::new("notes://note/{id}", "note")
            .description("One note, as JSON")
            .mime_type("application/json"),
        reader_fn(move |uri, vars| {
            let note = vars.get("id").and_then(|id| s.get(id));
            async move {
                let note = note.ok_or_else(|| ResourceError::NotFound { uri: uri.clone() })?;
                let body = json!(note).to_string();
                Ok(vec![ResourceContents::text(
                    uri,
                    Some("application/json"),
                    body,
                )])
            }
        }),
    )?;
    Ok(resources)
}

fn prompts(state: &Arc<NotesState>) -> Result<PromptRegistry, CoreError> {
    let prompts = PromptRegistry::new();
    let s = Arc::clone(state);
    prompts.register(
        PromptSpec::new("summarize_notes", "Ask for a summary of every note").argument(
            PromptArgument::optional("style", "How to summarize").with_completions([
                "brief",
                "bullet points",
                "detailed",
            ]),
        ),
        move |args| {
            let notes = s.all();
            async move {
                let style = args
                    .get("style")
                    .map_or("brief", String::as_str)
                    .to_string();
                let titles: Vec<String> = notes.into_iter().map(|n| n.title).collect();
                Ok(PromptResult {
                    description: Some("A summary request".into()),
                    messages: vec![PromptMessage::user(format!(
                        "Summarize these notes ({style}): {}",
                        titles.join(", ")
                    ))],
                })
            }
        },
    )?;
    Ok(prompts)
}

/// The notes app and its state.
#[derive(Debug, Clone)]
pub struct NotesApp {
    /// The app to serve.
    pub app: McpApp,
    /// Its state, for tests to inspect.
    pub state: Arc<NotesState>,
}

/// Builds the notes app with one note in it.
pub fn app() -> Result<NotesApp, CoreError> {
    let state = Arc::new(NotesState::default());
    state.add("Welcome".into(), "This is the first note.".into());
    let resources = resources(&state)?;
    let app = McpApp::builder("kberg-notes", env!("CARGO_PKG_VERSION"))
        .title("Kberg notes")
        .instructions("Notes you can list and read; writing needs the notes.write grant.")
        .tools(tools(&state, &resources)?)
        .resources(resources)
        .prompts(prompts(&state)?)
        .build();
    Ok(NotesApp { app, state })
}

/// The reader principal (no grants).
pub fn reader() -> Principal {
    Principal::new("reader")
}

/// The writer principal (granted `notes.write`).
pub fn writer() -> Principal {
    Principal::new("writer").with_grants(Grants::of([NOTES_WRITE]))
}

/// Bearer tokens for [`reader`] ([`READER_TOKEN`]) and [`writer`] ([`WRITER_TOKEN`]).
pub fn bearer_tokens() -> BearerTokens {
    BearerTokens::new()
        .with_token(READER_TOKEN, reader())
        .with_token(WRITER_TOKEN, writer())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kberg_core::{CallOptions, Caller, CancellationToken, ErrorCode};

    #[tokio::test]
    async fn grants_decide_who_writes() {
        let n = app().expect("app builds");
        let tools = n.app.tools();
        let err = tools
            .call(
                &Caller::new(reader()),
                "add_note",
                json!({"title": "x", "body": "y"}),
                CallOptions::default(),
            )
            .await
            .expect_err("the reader may not write");
        assert_eq!(err.code(), ErrorCode::CapabilityRequired);
        let out = tools
            .call(
                &Caller::new(writer()),
                "add_note",
                json!({"title": "x", "body": "y"}),
                CallOptions::default(),
            )
            .await
            .expect("the writer may");
        assert_eq!(out.structured, Some(json!({"id": "n2"})));
        assert_eq!(n.state.all().len(), 2);
    }

    #[tokio::test]
    async fn bad_arguments_name_each_field() {
        let n = app().expect("app builds");
        let err = n
            .app
            .tools()
            .call(
                &Caller::new(writer()),
                "add_note",
                json!({"title": ""}),
                CallOptions::default(),
            )
            .await
            .expect_err("invalid");
        assert_eq!(err.code(), ErrorCode::InvalidArguments);
        let details = err.details();
        let pointers: Vec<&str> = details["errors"]
            .as_array()
            .expect("errors listed")
            .iter()
            .filter_map(|e| e["pointer"].as_str())
            .collect();
        assert!(pointers.contains(&"/title"), "{details}");
        assert!(pointers.contains(&"/body"), "{details}");
    }

    #[tokio::test]
    async fn slow_count_sees_its_cancellation() {
        let n = app().expect("app builds");
        let cancel = CancellationToken::new();
        let tools = n.app.tools().clone();
        let token = cancel.clone();
        let call = tokio::spawn(async move {
            tools
                .call(
                    &Caller::new(reader()),
                    "slow_count",
                    json!({"steps": 1000, "delay_ms": 50}),
                    CallOptions::with_cancel(token),
                )
                .await
        });
        tokio::time::sleep(Duration::from_millis(120)).await;
        cancel.cancel();
        let r = call.await.expect("joins");
        assert!(r.is_err());
        assert_eq!(
            n.state.cancellations(),
            1,
            "the tool observed its cancellation"
        );
    }
}
