//! Kanboard as a small set of Kberg tools (feature `kanboard`): a thin translation layer over
//! Kanboard's JSON-RPC API that a coding agent can use without knowing Kanboard.
//!
//! Not one tool per procedure: a few tools that match what an agent does with a board (read
//! it, find its tasks, create, move, close, comment), which take names as well as ids and
//! ISO 8601 dates, and answer Kanboard's quirks with stable errors. Reads are Read tools;
//! writes need `kanboard.write` and a project the caller may change; deletes and
//! administration are registered refusals.
//!
//! | module | job |
//! |---|---|
//! | [`client`] | JSON-RPC over HTTP, batches, HTTP 200 errors, 401/403, a web page at a wrong URL |
//! | [`dates`] | ISO 8601 in, `Y-m-d` / `Y-m-d H:i` to Kanboard; unix seconds out, `0` is unset |
//! | [`resolve`] | a project's columns, swimlanes, categories, tags and users in one batch; names to ids |
//! | `read` | the read tools |
//! | `write` | the write tools and the refusals |
//! | [`access`] | [`VaultAccess`]: credentials from the gateway's secret source, projects from a `kanboard:` mapping |
//!
//! Two things come from the embedder, per request and per agent, through [`KanboardAccess`]:
//! the [`Credential`] the call uses (so Kanboard's own permissions apply and its activity
//! stream names the agent), and the Kanboard projects the agent may see (its Bridle projects'
//! mapping) and, among them, those it may change. Any project or task outside the first set is
//! refused, never passed through; a write to one outside the second is refused before anything
//! is sent.

pub mod access;
pub mod client;
pub mod dates;
mod read;
pub mod resolve;
mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::{Caller, CoreError, ToolContext, ToolOutput, ToolRegistry};
use serde_json::{Value, json};

pub use access::{BridleProject, BridleProjects, KanboardAgent, KanboardConfig, VaultAccess};
pub use client::{Credential, KanboardClient, KanboardError};
pub use resolve::{NameOrId, ProjectContext};

/// The capability the write tools need.
pub const KANBOARD_WRITE: &str = bridle_rules::capabilities::KANBOARD_WRITE;

/// Where the tools get, for each call, the caller's Kanboard credential and the Kanboard
/// projects it may use. Called on every request, so a rotated token or a changed mapping
/// applies to the next call.
#[async_trait]
pub trait KanboardAccess: Send + Sync {
    /// The credential for this caller, or why there is none to send: it has no Kanboard
    /// access, its secret is gone, or the secret source failed.
    async fn credential(&self, caller: &Caller) -> Result<Credential, CredentialError>;
    /// The Kanboard project ids this caller may see.
    async fn projects(&self, caller: &Caller) -> BTreeSet<i64>;
    /// The Kanboard project ids, among [`KanboardAccess::projects`], this caller may change.
    /// Every write tool checks the project it changes here: the write capability the gate
    /// checked may come from another project than the one written to.
    async fn writable_projects(&self, caller: &Caller) -> BTreeSet<i64>;
}

/// Why a caller's Kanboard credential cannot be had; each is its own refusal, so that an
/// agent is not told to have an administrator add a credential the source failed to read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// The caller has no Kanboard credential in this gateway (`kanboard_not_configured`).
    #[error("no Kanboard credential is configured for this agent")]
    NotConfigured,
    /// Its secret is gone: revoked, deleted or empty (`credential_missing`).
    #[error("{0}")]
    Missing(String),
    /// The secret source could not read it or record its use (`kanboard_credential_unavailable`,
    /// retryable): a database or disk failure, which may pass.
    #[error("{0}")]
    Unavailable(String),
}

/// A fixed table of agents: for the stand-alone server and for tests. An agent may change every
/// project it is given (its writes still need the `kanboard.write` capability). The gateway uses
/// [`VaultAccess`] (its secret source, project mappings and per-project permissions) instead.
#[derive(Debug, Clone, Default)]
pub struct StaticAccess {
    agents: BTreeMap<String, (Credential, BTreeSet<i64>)>,
}

impl StaticAccess {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Gives agent `principal` (a [`kberg_core::Principal`] id) a credential and projects.
    pub fn agent(
        mut self,
        principal: impl Into<String>,
        credential: Credential,
        projects: impl IntoIterator<Item = i64>,
    ) -> Self {
        self.agents.insert(
            principal.into(),
            (credential, projects.into_iter().collect()),
        );
        self
    }
}

#[async_trait]
impl KanboardAccess for StaticAccess {
    async fn credential(&self, caller: &Caller) -> Result<Credential, CredentialError> {
        self.agents
            .get(&caller.principal().id)
            .map(|(c, _)| c.clone())
            .ok_or(CredentialError::NotConfigured)
    }

    async fn projects(&self, caller: &Caller) -> BTreeSet<i64> {
        self.agents
            .get(&caller.principal().id)
            .map(|(_, p)| p.clone())
            .unwrap_or_default()
    }

    async fn writable_projects(&self, caller: &Caller) -> BTreeSet<i64> {
        self.projects(caller).await
    }
}

/// What the Kanboard tools work with.
#[derive(Clone)]
pub struct KanboardTools {
    client: KanboardClient,
    access: Arc<dyn KanboardAccess>,
}

impl std::fmt::Debug for KanboardTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KanboardTools")
            .field("endpoint", &self.client.shown_endpoint())
            .finish_non_exhaustive()
    }
}

impl KanboardTools {
    /// Tools over `client`, with credentials and project mappings from `access`.
    pub fn new(client: KanboardClient, access: Arc<dyn KanboardAccess>) -> Self {
        Self { client, access }
    }
}

/// Registers the Kanboard tools, their capability and the refusals in `registry`.
pub fn register(registry: &ToolRegistry, tools: KanboardTools) -> Result<(), CoreError> {
    let write = kberg_core::WriteCapability::new(
        KANBOARD_WRITE,
        "Create, change, move, close and comment on Kanboard tasks",
    );
    if !registry
        .capabilities()
        .iter()
        .any(|c| c.id() == KANBOARD_WRITE)
    {
        registry.declare(write.clone())?;
    }
    let tools = Arc::new(tools);
    read::register(registry, &tools)?;
    write::register(registry, &tools, &write)?;
    Ok(())
}

/// The codes the Kanboard tools refuse with that may succeed later unchanged: Kanboard was
/// down or slow. (A write that timed out may have been applied: its message says to check, or
/// to repeat a create with the same `reference`.)
const RETRYABLE: &[&str] = &[
    "kanboard_unreachable",
    "kanboard_timeout",
    "kanboard_credential_unavailable",
];

/// A refusal in the gateway's one shape: an error result with a sentence and
/// `{"code", "message", "retryable"}` (see [`crate::RefusalCode`]), to which the mounted
/// tool adds `tool` (see [`crate::error::NamedRefusals`]). The Kanboard codes:
///
/// | code | meaning |
/// |---|---|
/// | `kanboard_not_configured` | the caller has no Kanboard credential in the gateway |
/// | `credential_missing` | the caller's Kanboard secret was revoked, deleted or emptied; nothing was sent |
/// | `kanboard_credential_unavailable` | the gateway's secret source could not read the credential or record its use; nothing was sent (retryable) |
/// | `project_not_mapped` | the project is not mapped to the caller's Bridle projects |
/// | `capability_required` | a write to a project the caller may read, but none of its Bridle projects mapped to it grants its type `kanboard.write` (the gateway's [`crate::RefusalCode::CapabilityRequired`]) |
/// | `task_not_found`, `subtask_not_found`, `project_not_found` | no such item among the caller's projects |
/// | `unknown_name` | a column, swimlane, category or user matches nothing (`choices` lists the valid ones) |
/// | `invalid_date` | a date is not ISO 8601 |
/// | `invalid_arguments`, `nothing_to_update` | the arguments say nothing usable |
/// | `no_kanboard_user` | the action needs a Kanboard user and the credential is the application token alone, or its acting user is not in Kanboard |
/// | `kanboard_rejected` | Kanboard answered `false` although every checked field was valid |
/// | `kanboard_unauthorized`, `kanboard_forbidden` | Kanboard refused the credential (401) or the access (403) |
/// | `kanboard_unreachable`, `kanboard_timeout` | Kanboard is down or slow (retryable) |
/// | `kanboard_wrong_url` | the URL does not serve Kanboard's JSON-RPC API |
/// | `kanboard_invalid_params`, `kanboard_method_not_found`, `kanboard_error` | Kanboard's own JSON-RPC errors |
/// | `kanboard_bad_answer` | an answer that is not the JSON-RPC Kanboard sends, or larger than the client reads (`MAX_ANSWER_BYTES`, 8 MiB) |
pub(crate) fn refusal(code: &str, message: impl Into<String>) -> ToolOutput {
    refusal_with(code, message, Value::Null)
}

/// A refusal with extra structured fields (merged beside `code`, `message`, `retryable`).
pub(crate) fn refusal_with(code: &str, message: impl Into<String>, extra: Value) -> ToolOutput {
    let message = message.into();
    let mut details =
        json!({"code": code, "message": message, "retryable": RETRYABLE.contains(&code)});
    if let (Value::Object(d), Value::Object(e)) = (&mut details, extra) {
        d.extend(e);
    }
    ToolOutput::error_with(message, details)
}

fn kanboard_refusal(e: &KanboardError) -> ToolOutput {
    refusal(e.code(), e.to_string())
}

/// One call's view: the caller's credential and projects, fetched for this request.
pub(crate) struct Session {
    tools: Arc<KanboardTools>,
    credential: Credential,
    projects: BTreeSet<i64>,
    /// In a write tool's session, the projects the caller may change: every project the
    /// session reaches ([`Session::check_project`], [`Session::task`]) must be one of them, so
    /// no write tool can forget the check. `None` in a read tool's session.
    writable: Option<BTreeSet<i64>>,
}

impl Session {
    /// The caller's session, or the refusal of a caller without Kanboard access.
    pub(crate) async fn open(
        tools: &Arc<KanboardTools>,
        ctx: &ToolContext,
    ) -> Result<Self, ToolOutput> {
        let caller = ctx.caller();
        let credential = match tools.access.credential(caller).await {
            Ok(c) => c,
            Err(CredentialError::NotConfigured) => {
                return Err(refusal(
                    "kanboard_not_configured",
                    format!(
                        "`{}` has no Kanboard credentials in this gateway; an administrator must add them",
                        caller.principal().id
                    ),
                ));
            }
            Err(CredentialError::Missing(why)) => {
                return Err(refusal(
                    crate::RefusalCode::CredentialMissing.as_str(),
                    format!(
                        "the Kanboard credential of `{}` is gone ({why}); nothing was sent. An administrator must rotate it",
                        caller.principal().id
                    ),
                ));
            }
            Err(CredentialError::Unavailable(why)) => {
                return Err(refusal(
                    "kanboard_credential_unavailable",
                    format!(
                        "the gateway could not read the Kanboard credential of `{}` or record its use ({why}); nothing was sent. Try again later",
                        caller.principal().id
                    ),
                ));
            }
        };
        let projects = tools.access.projects(caller).await;
        Ok(Self {
            tools: Arc::clone(tools),
            credential,
            projects,
            writable: None,
        })
    }

    /// This session for a write tool: from now on it reaches only the projects the caller may
    /// change.
    pub(crate) async fn for_write(mut self, ctx: &ToolContext) -> Self {
        self.writable = Some(self.tools.access.writable_projects(ctx.caller()).await);
        self
    }

    pub(crate) fn credential(&self) -> &Credential {
        &self.credential
    }

    pub(crate) fn projects(&self) -> &BTreeSet<i64> {
        &self.projects
    }

    /// Refuses a project outside the caller's mapping, and in a write tool's session one the
    /// caller may not change.
    pub(crate) fn check_project(&self, project_id: i64) -> Result<(), ToolOutput> {
        if self.projects.contains(&project_id) {
            self.check_writable(project_id)
        } else {
            Err(refusal(
                "project_not_mapped",
                format!(
                    "Kanboard project {project_id} is not mapped to your Bridle projects; yours are: {}",
                    self.mapped_list()
                ),
            ))
        }
    }

    /// In a write tool's session, refuses a (mapped) project the caller may not change.
    fn check_writable(&self, project_id: i64) -> Result<(), ToolOutput> {
        match &self.writable {
            Some(writable) if !writable.contains(&project_id) => Err(refusal(
                crate::RefusalCode::CapabilityRequired.as_str(),
                format!(
                    "you may read Kanboard project {project_id} but not change it: none of your Bridle projects mapped to it lets your agent type write there (kanboard.write); the Kanboard projects you may change are: {}",
                    id_list(writable)
                ),
            )),
            _ => Ok(()),
        }
    }

    pub(crate) fn mapped_list(&self) -> String {
        id_list(&self.projects)
    }

    /// One procedure; a Kanboard error becomes the refusal.
    pub(crate) async fn call(&self, method: &str, params: Value) -> Result<Value, ToolOutput> {
        self.tools
            .client
            .call(&self.credential, method, params)
            .await
            .map_err(|e| kanboard_refusal(&e))
    }

    /// Several procedures in one request.
    pub(crate) async fn batch(
        &self,
        calls: &[(&str, Value)],
    ) -> Result<Vec<Result<Value, KanboardError>>, ToolOutput> {
        self.tools
            .client
            .batch(&self.credential, calls)
            .await
            .map_err(|e| kanboard_refusal(&e))
    }

    /// The project's names and ids.
    pub(crate) async fn context(&self, project_id: i64) -> Result<ProjectContext, ToolOutput> {
        self.check_project(project_id)?;
        ProjectContext::load(&self.tools.client, &self.credential, project_id)
            .await
            .map_err(|e| kanboard_refusal(&e))
    }

    /// A task of a mapped project; `null` and other projects' tasks are refused, and in a
    /// write tool's session a task of a project the caller may not change.
    pub(crate) async fn task(&self, task_id: i64) -> Result<Value, ToolOutput> {
        let task = self.call("getTask", json!({"task_id": task_id})).await?;
        let not_found = || {
            refusal(
                "task_not_found",
                format!("there is no task #{task_id} in your Kanboard projects"),
            )
        };
        if task.is_null() || task == json!(false) {
            return Err(not_found());
        }
        let project = task.get("project_id").and_then(client::as_id);
        match project {
            // A task of an unmapped project is reported as missing: it is not the agent's.
            Some(p) if self.projects.contains(&p) => {
                self.check_writable(p)?;
                Ok(task)
            }
            _ => Err(not_found()),
        }
    }

    /// The Kanboard user this session acts as: the user of a user credential (from `getMe`),
    /// or the application token's acting user.
    pub(crate) async fn me(&self) -> Result<Option<(i64, String)>, ToolOutput> {
        match &self.credential {
            Credential::AppToken { acting_user_id, .. } => {
                let Some(id) = acting_user_id else {
                    return Ok(None);
                };
                let user = self.call("getUser", json!({"user_id": id})).await?;
                // A user Kanboard does not know (`null`: deleted, or a wrong id) is no one to
                // act as: a comment would name a user that does not exist, and "my tasks"
                // would search for an empty assignee, which matches every user without a
                // display name.
                let Some(name) = user
                    .get("username")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                else {
                    return Err(refusal(
                        "no_kanboard_user",
                        format!(
                            "this gateway acts in Kanboard as user {id} (`acting_user_id`), and Kanboard has no such user; an administrator must fix the agent's Kanboard settings"
                        ),
                    ));
                };
                Ok(Some((*id, name.to_string())))
            }
            Credential::User { .. } => {
                let me = self.call("getMe", Value::Null).await?;
                let id = me.get("id").and_then(client::as_id);
                let name = me
                    .get("username")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                Ok(id.map(|id| (id, name)))
            }
        }
    }
}

/// Project ids for a sentence: `1, 3`, or `none`.
fn id_list(ids: &BTreeSet<i64>) -> String {
    if ids.is_empty() {
        "none".to_string()
    } else {
        ids.iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A JSON result, or the internal-error refusal when it does not serialize.
pub(crate) fn json_output(v: &Value) -> ToolOutput {
    ToolOutput::json(v).unwrap_or_else(|e| refusal("internal", e.to_string()))
}

/// A task as agents see it: ids, names where known, ISO dates, open or closed.
pub(crate) fn task_summary(t: &Value, ctx: Option<&ProjectContext>) -> Value {
    let id = |k: &str| t.get(k).and_then(client::as_id);
    let date = |k: &str| t.get(k).and_then(dates::from_kanboard);
    let column_id = id("column_id");
    let mut v = json!({
        "id": id("id"),
        "title": t.get("title"),
        "project_id": id("project_id"),
        "column_id": column_id,
        "swimlane_id": id("swimlane_id"),
        "owner_id": id("owner_id").filter(|o| *o != 0),
        "category_id": id("category_id").filter(|c| *c != 0),
        "status": if id("is_active") == Some(0) { "closed" } else { "open" },
        "priority": id("priority"),
        "reference": t.get("reference").and_then(Value::as_str).filter(|r| !r.is_empty()),
        "date_due": date("date_due"),
        "date_started": date("date_started"),
        "date_completed": date("date_completed"),
        "date_creation": date("date_creation"),
        "date_modification": date("date_modification"),
        "url": t.get("url"),
    });
    if let (Some(ctx), Some(col)) = (ctx, column_id)
        && let Some(name) = ctx.column_name(col)
    {
        v["column"] = json!(name);
    }
    v
}
