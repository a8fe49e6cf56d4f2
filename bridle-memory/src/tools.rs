//! The memory service as Kberg tools.
//!
//! [`register`] adds four tools to a [`ToolRegistry`], classified for the gate:
//!
//! | tool | kind |
//! |---|---|
//! | `recall` | Read |
//! | `remember` | Write(`memory.write`) |
//! | `search_pattern_examples` | Read |
//! | `refresh_pattern_example` | Write(`memory.index`) |
//!
//! A failure the caller can act on (an unknown tag, an embedder that is down) is returned as an
//! error result in kberg-core's one refusal shape ([`kberg_core::Refusal`]): its structured
//! content is `{"code", "message", "tool", "retryable"}`, the stable [`MemoryError::code`] (or
//! `project_not_allowed`, `capability_required`), the sentence, the tool's name and whether the
//! same call may succeed later unchanged ([`retryable`]), so a model reads the sentence and a
//! program matches the code. A host that registers the tools its own way ([`declare`] and
//! [`tools`], as the gateway does to wrap each one) gets the same refusals.
//!
//! `refresh_pattern_example` reports progress as MCP progress notifications when the client
//! sent a progress token, and hands each successful [`IndexReport`] to an optional
//! [`IndexListener`] (the gateway writes `last_indexed` back to the rules document there).

use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::{
    Caller, CoreError, FnTool, ToolBuilder, ToolContext, ToolOutput, ToolRegistry, WriteCapability,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::chunk::{shown_code, shown_path};
use crate::error::MemoryError;
use crate::patterns::{IndexReport, PatternHit, PatternIndex, Progress, ProgressEvent, SearchMode};
use crate::session::{MemoryFilter, NewMemory, SessionMemory};

/// The capability `remember` needs.
pub const MEMORY_WRITE: &str = "memory.write";
/// The capability `refresh_pattern_example` needs.
pub const MEMORY_INDEX: &str = "memory.index";

// The tools' names, which their refusals carry as `tool`.
const RECALL: &str = "recall";
const REMEMBER: &str = "remember";
const SEARCH: &str = "search_pattern_examples";
const REFRESH: &str = "refresh_pattern_example";

/// Told about every (re-)index through `refresh_pattern_example`: each step as it happens, and
/// how it ended.
#[async_trait]
pub trait IndexListener: Send + Sync {
    /// Called after the new chunks are stored.
    async fn indexed(&self, report: &IndexReport);

    /// Called at each step of the work on `reference_tag` (the same events the caller gets as
    /// progress notifications); must return quickly. Does nothing unless implemented.
    async fn progress(&self, reference_tag: &str, event: &ProgressEvent) {
        let _ = (reference_tag, event);
    }

    /// Called when the work on `reference_tag` stopped with `error`. Does nothing unless
    /// implemented.
    async fn failed(&self, reference_tag: &str, error: &MemoryError) {
        let _ = (reference_tag, error);
    }
}

/// Decides which projects' memories a caller may read and write. Without one, every caller
/// that passes the gate reaches every project.
pub trait ProjectAccess: Send + Sync + 'static {
    /// Whether `caller` may use the memories of `project` at all (read them, and write them
    /// where [`may_write`](Self::may_write) also agrees).
    fn allows(&self, caller: &Caller, project: &str) -> bool;

    /// Whether `caller`, which [`allows`](Self::allows) lets use `project`, may also store
    /// memories in it. A caller's `memory.write` capability is one grant for all its projects;
    /// an embedder whose projects grant writing one by one says so here. Asked off the async
    /// threads (it may read a project's settings). By default, every usable project.
    fn may_write(&self, caller: &Caller, project: &str) -> bool {
        let _ = (caller, project);
        true
    }
}

/// What the tools work on.
#[derive(Clone)]
pub struct MemoryTools {
    /// Session memory (`recall`, `remember`).
    pub session: Arc<SessionMemory>,
    /// Pattern examples (`search_pattern_examples`, `refresh_pattern_example`).
    pub patterns: Arc<PatternIndex>,
    /// Told about refreshes.
    pub on_indexed: Option<Arc<dyn IndexListener>>,
    /// When set, `recall` must name a project and `remember` may only write to projects this
    /// allows; anything else answers `project_not_allowed`.
    pub access: Option<Arc<dyn ProjectAccess>>,
}

/// Whether a call that failed with `e` may succeed later when made again unchanged: the
/// `retryable` of the tools' refusals.
///
/// | code | retryable | why |
/// |---|---|---|
/// | `embedder_unavailable` | yes | the embedding service is down or busy |
/// | `store` | yes | the vector store failed (busy, I/O, a server away) |
/// | `repo_unavailable` | when it may pass | yes for a host away or failing (a refused connection, a 5xx answer, a timeout); no for a repository that does not exist, a local folder that is gone, a credential refused, missing or not stored ([`MemoryError::RepoUnavailable::lasting`](MemoryError::RepoUnavailable)) |
/// | every other code | no | the input, the configuration or the stored data must change first |
pub fn retryable(e: &MemoryError) -> bool {
    match e {
        MemoryError::EmbedderUnavailable { .. } | MemoryError::Store(_) => true,
        MemoryError::RepoUnavailable { lasting, .. } => !lasting,
        _ => false,
    }
}

/// A refusal of `tool` in the one shape: an error result with the sentence, and `code`,
/// `message`, `tool`, `retryable` and any `extra` details as structured content.
fn shaped(tool: &str, code: &str, retryable: bool, message: String, extra: Value) -> ToolOutput {
    let mut details =
        json!({"code": code, "message": message, "tool": tool, "retryable": retryable});
    if let (Value::Object(d), Value::Object(extra)) = (&mut details, extra) {
        for (k, v) in extra {
            d.entry(k).or_insert(v);
        }
    }
    ToolOutput::error_with(message, details)
}

/// The refusal of a project the caller may not use, or of a recall that names none while access
/// is restricted.
fn project_refusal(tool: &str, caller: &Caller, project: Option<&str>) -> ToolOutput {
    let message = match project {
        Some(p) => format!(
            "`{}` may not use the memories of project `{p}`",
            caller.principal().id
        ),
        None => "name the project whose memories you want (`project`)".to_string(),
    };
    shaped(tool, "project_not_allowed", false, message, Value::Null)
}

/// The refusal of a memory stored in a project the caller may use but not write to.
fn write_refusal(caller: &Caller, project: &str) -> ToolOutput {
    let message = format!(
        "`{}` may not store memories in project `{project}`: `memory.write` is not granted there",
        caller.principal().id
    );
    shaped(
        REMEMBER,
        "capability_required",
        false,
        message,
        json!({"capability": MEMORY_WRITE}),
    )
}

fn check_project(
    tool: &str,
    access: &Option<Arc<dyn ProjectAccess>>,
    caller: &Caller,
    project: Option<&str>,
) -> Result<(), ToolOutput> {
    match (access, project) {
        (None, _) => Ok(()),
        (Some(a), Some(p)) if a.allows(caller, p) => Ok(()),
        (Some(_), p) => Err(project_refusal(tool, caller, p)),
    }
}

impl std::fmt::Debug for MemoryTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryTools")
            .field("session", &self.session)
            .field("patterns", &self.patterns)
            .finish()
    }
}

#[derive(Deserialize, JsonSchema)]
struct RecallArgs {
    /// What to look for, in plain words.
    query: String,
    /// Only memories of this project.
    project: Option<String>,
    /// Only this kind (decision, context, history, ...).
    kind: Option<String>,
    /// Only memories written by this agent.
    agent: Option<String>,
    /// Only memories of this session.
    session: Option<String>,
    /// Only memories carrying all of these tags.
    #[serde(default)]
    tags: Vec<String>,
    /// How many to return (1 to 100, default 5).
    k: Option<u32>,
    /// `hybrid` (meaning and exact words, the default) or `vector` (meaning only).
    mode: Option<SearchMode>,
}

#[derive(Deserialize, JsonSchema)]
struct RememberArgs {
    /// What kind of memory: decision, context, history, or another word the project uses.
    kind: String,
    /// The text to remember.
    text: String,
    /// The project it belongs to.
    project: String,
    /// The session it comes from.
    session: Option<String>,
    /// The agent writing it (defaults to the connected agent).
    agent: Option<String>,
    /// Free tags.
    #[serde(default)]
    tags: Vec<String>,
}

#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    /// What to look for: a description of the code you need an example of.
    query: String,
    /// Only examples of this architecture pattern.
    arch_tag: Option<String>,
    /// How many results (1 to 50, default 5).
    k: Option<u32>,
    /// `hybrid` (meaning and exact words, the default) or `vector` (meaning only).
    mode: Option<SearchMode>,
}

#[derive(Deserialize, JsonSchema)]
struct RefreshArgs {
    /// The example's reference tag.
    reference_tag: String,
}

/// The refusal of a call to `tool` that failed with `e`, in the one shape: its stable code,
/// its sentence, the tool and whether to retry ([`retryable`]).
pub fn refusal(tool: &str, e: &MemoryError) -> ToolOutput {
    shaped(tool, e.code(), retryable(e), e.to_string(), Value::Null)
}

/// A refresh's progress: to the caller as progress notifications, and to the listener.
struct ToolProgress {
    ctx: ToolContext,
    tag: String,
    listener: Option<Arc<dyn IndexListener>>,
}

#[async_trait]
impl Progress for ToolProgress {
    async fn report(&self, event: ProgressEvent) {
        if let Some(l) = &self.listener {
            l.progress(&self.tag, &event).await;
        }
        let (done, total) = event.mcp_progress();
        if let Err(e) = self.ctx.progress(done, total, Some(&event.message())).await {
            tracing::debug!(error = %e, "progress notification not delivered");
        }
    }
}

/// One search hit as the search tool's answer text writes it: a line naming the file, its
/// lines, the chunk's type and enclosing items, the tag and the score, then the code. The file's
/// path and the enclosing items (a Markdown heading may hold anything) are written one line
/// each with their control characters escaped ([`shown_path`]): a file name holding a newline
/// would otherwise start a forged result line, an ESC sequence or a bidirectional override
/// rewrite what an agent's terminal or a panel shows. The code keeps its lines, with the same
/// characters but line breaks and tabs escaped ([`shown_code`]). The structured result keeps
/// all of it as stored, to be matched against the index.
fn hit_text(h: &PatternHit) -> String {
    let ctx = if h.context.is_empty() {
        String::new()
    } else {
        format!(" {}", shown_path(&h.context))
    };
    format!(
        "{}:{}-{} ({}{ctx}, {}, score {:.3})\n{}",
        shown_path(&h.file_path),
        h.start_line,
        h.end_line,
        h.chunk_type,
        h.reference_tag,
        h.score,
        shown_code(&h.snippet)
    )
}

fn write_capability() -> WriteCapability {
    WriteCapability::new(
        MEMORY_WRITE,
        "Store memories of sessions (decisions, context, history)",
    )
}

fn index_capability() -> WriteCapability {
    WriteCapability::new(MEMORY_INDEX, "Re-index pattern example repositories")
}

/// Declares `memory.write` and `memory.index` in `registry`, each unless already declared.
pub fn declare(registry: &ToolRegistry) -> Result<(), CoreError> {
    let declared = registry.capabilities();
    for cap in [write_capability(), index_capability()] {
        if !declared.iter().any(|c| c.id() == cap.id()) {
            registry.declare(cap)?;
        }
    }
    Ok(())
}

/// Declares `memory.write` and `memory.index` (unless already declared) and registers the four
/// memory tools.
pub fn register(registry: &ToolRegistry, tools: MemoryTools) -> Result<(), CoreError> {
    declare(registry)?;
    registry.register_all(
        self::tools(tools)
            .into_iter()
            .map(|t| Arc::new(t) as Arc<dyn kberg_core::Tool>),
    )
}

/// The four memory tools, not registered, for a host that registers them its own way (the
/// gateway wraps each one); [`register`] registers them as they are. Their capabilities must be
/// declared in the registry first ([`declare`]).
pub fn tools(tools: MemoryTools) -> Vec<FnTool> {
    let (write, index) = (write_capability(), index_capability());

    let session = Arc::clone(&tools.session);
    let access = tools.access.clone();
    let recall = ToolBuilder::new(RECALL)
        .title("Recall memories")
        .description("Find memories from earlier agent sessions (decisions, context, history) by meaning. Filter by project, kind, agent, session or tags.")
        .small_model_safe()
        .handler(move |a: RecallArgs, ctx: ToolContext| {
            let session = Arc::clone(&session);
            let access = access.clone();
            async move {
                if let Err(refused) = check_project(RECALL, &access, ctx.caller(), a.project.as_deref()) {
                    return Ok(refused);
                }
                let filter = MemoryFilter {
                    project: a.project,
                    kind: a.kind,
                    agent: a.agent,
                    session: a.session,
                    tags: a.tags,
                };
                let k = a.k.unwrap_or(5) as usize;
                let mode = a.mode.unwrap_or(session.search_mode());
                match session.recall_with(&a.query, &filter, k, mode).await {
                    Ok(hits) => {
                        let text = if hits.is_empty() {
                            "No matching memories.".to_string()
                        } else {
                            hits.iter()
                                .map(|h| format!("[{}] ({}, {}, id {}) {}", h.memory.kind, h.memory.project, h.memory.created_at, h.memory.id, h.memory.text))
                                .collect::<Vec<_>>()
                                .join("\n")
                        };
                        Ok(ToolOutput::text(text).with_structured(json!({"memories": hits})))
                    }
                    Err(e) => Ok(refusal(RECALL, &e)),
                }
            }
        });

    let session = Arc::clone(&tools.session);
    let access = tools.access.clone();
    let remember = ToolBuilder::new(REMEMBER)
        .title("Remember")
        .description(
            "Store a memory for later sessions: a decision, context or history of this project.",
        )
        .small_model_safe()
        .write(write)
        .handler(move |a: RememberArgs, ctx: ToolContext| {
            let session = Arc::clone(&session);
            let access = access.clone();
            async move {
                if let Err(refused) =
                    check_project(REMEMBER, &access, ctx.caller(), Some(&a.project))
                {
                    return Ok(refused);
                }
                if let Some(access) = access {
                    let (caller, project) = (ctx.caller().clone(), a.project.clone());
                    let may =
                        tokio::task::spawn_blocking(move || access.may_write(&caller, &project))
                            .await
                            .unwrap_or(false);
                    if !may {
                        return Ok(write_refusal(ctx.caller(), &a.project));
                    }
                }
                let agent = a.agent.or_else(|| ctx.caller().principal().agent.clone());
                let m = NewMemory {
                    kind: a.kind,
                    text: a.text,
                    project: a.project,
                    agent,
                    session: a.session,
                    tags: a.tags,
                };
                match session.remember(m).await {
                    Ok(m) => Ok(ToolOutput::text(format!("Remembered as id {}.", m.id))
                        .with_structured(json!({"memory": m}))),
                    Err(e) => Ok(refusal(REMEMBER, &e)),
                }
            }
        });

    let patterns = Arc::clone(&tools.patterns);
    let search = ToolBuilder::new(SEARCH)
        .title("Search pattern examples")
        .description("Search the indexed example repositories of the project's architecture patterns by meaning and exact words (identifiers, messages). Returns file, lines, chunk type, enclosing items, score and the code.")
        .small_model_safe()
        .handler(move |a: SearchArgs, _ctx| {
            let patterns = Arc::clone(&patterns);
            async move {
                let k = a.k.unwrap_or(5).clamp(1, 50) as usize;
                let mode = a.mode.unwrap_or(patterns.config().search);
                match patterns.search_with(&a.query, a.arch_tag.as_deref(), k, mode).await {
                    Ok(hits) => {
                        let text = if hits.is_empty() {
                            "No pattern examples match.".to_string()
                        } else {
                            hits.iter().map(hit_text).collect::<Vec<_>>().join("\n\n")
                        };
                        Ok(ToolOutput::text(text).with_structured(json!({"results": hits})))
                    }
                    Err(e) => Ok(refusal(SEARCH, &e)),
                }
            }
        });

    let patterns = Arc::clone(&tools.patterns);
    let listener = tools.on_indexed.clone();
    let refresh = ToolBuilder::new(REFRESH)
        .title("Refresh a pattern example")
        .description("Re-fetch, re-chunk and re-embed one example repository by its reference tag; its previous index is replaced atomically.")
        .write(index)
        .idempotent_hint(true)
        .destructive_hint(false)
        .open_world_hint(true)
        .handler(move |a: RefreshArgs, ctx: ToolContext| {
            let patterns = Arc::clone(&patterns);
            let listener = listener.clone();
            async move {
                let progress = ToolProgress {
                    ctx,
                    tag: a.reference_tag.clone(),
                    listener: listener.clone(),
                };
                match patterns.refresh(&a.reference_tag, &progress).await {
                    Ok(report) => {
                        if let Some(l) = &listener {
                            l.indexed(&report).await;
                        }
                        let text = format!(
                            "Re-indexed `{}`: {} chunks from {} files (replaced {}), last_indexed {}.",
                            report.reference_tag, report.chunks, report.files, report.replaced, report.last_indexed
                        );
                        Ok(ToolOutput::text(text).with_structured(json!({"report": report})))
                    }
                    Err(e) => {
                        if let Some(l) = &listener {
                            l.failed(&a.reference_tag, &e).await;
                        }
                        Ok(refusal(REFRESH, &e))
                    }
                }
            }
        });

    vec![recall, remember, search, refresh]
}
