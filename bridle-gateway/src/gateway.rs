//! The gateway as a Kberg app: rules tools, rules resources, per-agent auth, and a watcher that
//! tells subscribed agents when their rules change.
//!
//! Every agent connects to one MCP endpoint with its own bearer token. [`BridleAuth`] resolves
//! the token to the configured agent and computes its Kberg grants from the live project
//! documents (`permissions` -> capabilities), so a permission change applies to the next
//! request. Tools re-check the per-project permission, because grants are the union over the
//! agent's projects. Approving is never a tool: `approve_proposal` is a registered refusal that
//! points at the command line.
//!
//! Approvals happen in another process (`bridle rules approve`), so the [`watch`] task polls the
//! project files (for hand edits) and the change log (for approvals) and calls `notify_updated`
//! for the rules resources of every project that changed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bridle_rules::{
    AgentCatalog, ChangeRequest, CustomPattern, ExampleRepo, Origin, Renderer, RulesError,
    RulesStore, Severity, capabilities,
};
use kberg_core::{
    Grants, Principal, ResourceContents, ResourceDescriptor, ResourceError, ResourceRegistry,
    ToolBuilder, ToolContext, ToolError, ToolOutput, ToolRegistry, WriteCapability, reader_fn,
};
use kberg_server::{AuthError, Authenticator, BearerTokens, HeaderMap, McpApp};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::config::{AgentConfig, ConfigError, GatewayConfig, read_secret};

/// What every tool and the watcher share.
pub struct Shared {
    /// The rules store.
    pub store: RulesStore,
    /// The renderer (built-ins plus the templates folder).
    pub renderer: Renderer,
    /// The configuration.
    pub config: GatewayConfig,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("agents", &self.config.agents.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why the gateway could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Configuration or secrets.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The rules store.
    #[error(transparent)]
    Rules(#[from] RulesError),
    /// Registering tools or resources.
    #[error("registering the gateway's tools failed: {0}")]
    Register(#[from] kberg_core::CoreError),
}

impl Shared {
    /// Opens the store and the renderer of a data directory.
    pub fn open(data_dir: &Path, mut config: GatewayConfig) -> Result<Arc<Self>, GatewayError> {
        let catalog = AgentCatalog::load(&config.templates_path(data_dir))?;
        for (name, agent) in &mut config.agents {
            let invalid = |message: String| ConfigError::Invalid {
                file: data_dir.join("bridle.yaml"),
                message: format!("agent `{name}`: {message}"),
            };
            if agent.agent_type.is_empty() {
                agent.type_guessed = true;
                agent.agent_type = catalog
                    .guess_from_client(name)
                    .map(|t| t.name.clone())
                    .ok_or_else(|| {
                        invalid(format!(
                            "set `type` (one of {}); it cannot be guessed from the name",
                            catalog.names().join(", ")
                        ))
                    })?;
            }
            catalog
                .get(&agent.agent_type)
                .map_err(|e| invalid(e.to_string()))?;
        }
        let renderer = Renderer::new(catalog.clone())?;
        let store = RulesStore::open(data_dir, catalog)?;
        Ok(Arc::new(Self {
            store,
            renderer,
            config,
        }))
    }

    fn agent(&self, name: &str) -> Option<&AgentConfig> {
        self.config.agents.get(name)
    }

    /// The grants of a configured agent: the union of what its type is permitted in each of
    /// its projects.
    pub fn grants_for(&self, agent_name: &str) -> Grants {
        let mut grants = Grants::none();
        let Some(agent) = self.agent(agent_name) else {
            return grants;
        };
        let projects = match self.store.projects() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list projects");
                return grants;
            }
        };
        for project in projects.iter().filter(|p| agent.may_use(p)) {
            match self.store.load(project) {
                Ok(loaded) => {
                    for id in loaded
                        .document
                        .permissions_of(&agent.agent_type)
                        .capability_ids()
                    {
                        grants.grant(id);
                    }
                }
                Err(e) => tracing::warn!(project, error = %e, "project skipped for grants"),
            }
        }
        grants
    }
}

/// The agent type whose format a caller gets its rules in when it does not name one: the
/// configured `type`; when that was only guessed from the agent's name, the type the client
/// names itself as (`clientInfo.name` such as `claude-code` or `cursor-vscode`) if the catalog
/// knows it, else the guess. Only rendering follows the client's self-report: permissions
/// always use the configured or guessed type.
fn rendering_type(
    s: &Shared,
    agent: &AgentConfig,
    client: Option<&kberg_core::ClientInfo>,
) -> String {
    if !agent.type_guessed {
        return agent.agent_type.clone();
    }
    client
        .and_then(|c| s.renderer.catalog().guess_from_client(&c.name))
        .map_or_else(|| agent.agent_type.clone(), |t| t.name.clone())
}

/// The URI of a rendered rules resource.
pub fn rules_uri(project: &str, agent_type: &str) -> String {
    format!("bridle://rules/{project}/{agent_type}")
}

/// Bearer-token auth with live grants.
pub struct BridleAuth {
    tokens: BearerTokens,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for BridleAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridleAuth")
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl BridleAuth {
    /// Reads every configured agent's token from the secrets folder.
    pub fn new(data_dir: &Path, shared: Arc<Shared>) -> Result<Self, GatewayError> {
        let secrets = shared.config.secrets_path(data_dir);
        let mut tokens = BearerTokens::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        for (name, agent) in &shared.config.agents {
            let token = read_secret(&secrets, &agent.token_secret)?;
            if let Some(other) = seen.insert(token.clone(), name.clone()) {
                return Err(ConfigError::Invalid {
                    file: data_dir.join("bridle.yaml"),
                    message: format!(
                        "agents `{other}` and `{name}` share a token; each agent needs its own"
                    ),
                }
                .into());
            }
            tokens.insert(
                token,
                Principal::new(name.clone()).with_agent(agent.agent_type.clone()),
            );
        }
        Ok(Self { tokens, shared })
    }
}

#[async_trait]
impl Authenticator for BridleAuth {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        let who = self.tokens.authenticate(headers).await?;
        let shared = Arc::clone(&self.shared);
        let id = who.id.clone();
        let grants = tokio::task::spawn_blocking(move || shared.grants_for(&id))
            .await
            .unwrap_or_default();
        Ok(Arc::new(Principal::clone(&who).with_grants(grants)))
    }
}

/// A tool failure the model can act on: a sentence and a stable code.
fn refusal(code: &str, message: impl Into<String>) -> ToolOutput {
    let message = message.into();
    ToolOutput::error_with(message.clone(), json!({"code": code, "message": message}))
}

fn rules_refusal(e: &RulesError) -> ToolOutput {
    refusal(e.code(), e.to_string())
}

/// Runs blocking store work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::failed(format!("internal error: {e}")))
}

/// The calling agent's configuration, and whether it may use `project`.
fn caller_agent(
    shared: &Shared,
    ctx: &ToolContext,
    project: &str,
) -> Result<(String, AgentConfig), ToolOutput> {
    let name = ctx.caller().principal().id.clone();
    let Some(agent) = shared.agent(&name).cloned() else {
        return Err(refusal(
            "unknown_agent",
            format!("`{name}` is not a configured agent"),
        ));
    };
    if !agent.may_use(project) {
        return Err(refusal(
            "project_not_allowed",
            format!("agent `{name}` is not configured for project `{project}`"),
        ));
    }
    Ok((name, agent))
}

#[derive(Debug, Deserialize, JsonSchema)]
struct GetRulesArgs {
    /// The project id (see `list_projects`).
    project: String,
    /// Render for another agent type than your own (optional).
    #[serde(default)]
    agent: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
struct ProposeGuardrailArgs {
    /// The project id.
    project: String,
    /// A new, unique id: lowercase letters, digits and dashes (`tests-before-fix`).
    id: String,
    /// The rule, as one clear sentence.
    statement: String,
    /// `guidance`, `hard-instruction` or `enforcement`.
    severity: Severity,
    /// Agent types it applies to; omit for every agent.
    #[serde(default)]
    applies_to: Option<Vec<String>>,
    /// Your session id, recorded in the provenance (optional).
    #[serde(default)]
    session: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ExampleRepoArgs {
    /// Repository URL.
    url: String,
    /// Tag of the indexed example.
    reference_tag: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct AddPatternArgs {
    /// The project id.
    project: String,
    /// The pattern's name (`hexagonal`, or your own `modified-mvc`).
    name: String,
    /// For a project-specific pattern: what it is. Omit for a well-known pattern.
    #[serde(default)]
    description: Option<String>,
    /// Example repositories for a project-specific pattern.
    #[serde(default)]
    example_repos: Vec<ExampleRepoArgs>,
    /// Your session id (optional).
    #[serde(default)]
    session: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct UpdateRulesArgs {
    /// The project id.
    project: String,
    /// The revision you read (from `get_rules`); a newer document refuses the update.
    base_revision: u64,
    /// New overview.
    #[serde(default)]
    overview: Option<String>,
    /// New stack list.
    #[serde(default)]
    stack: Option<Vec<String>>,
    /// New conventions list.
    #[serde(default)]
    conventions: Option<Vec<String>>,
    /// Your session id (optional).
    #[serde(default)]
    session: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ScopeArgs {
    /// The project id.
    project: String,
    /// What you want to do beyond the task you were given.
    action: String,
    /// Why it is needed.
    reason: String,
    /// Your session id (optional).
    #[serde(default)]
    session: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct TicketArgs {
    /// The ticket id `request_scope_approval` returned.
    ticket: u64,
}

/// Queues a proposal for the caller after checking its per-project permission.
async fn propose(
    shared: Arc<Shared>,
    ctx: ToolContext,
    project: String,
    session: Option<String>,
    change: ChangeRequest,
    base_revision: Option<u64>,
) -> Result<ToolOutput, ToolError> {
    let (name, agent) = match caller_agent(&shared, &ctx, &project) {
        Ok(a) => a,
        Err(out) => return Ok(out),
    };
    blocking(move || {
        let doc = match shared.store.load(&project) {
            Ok(l) => l.document,
            Err(e) => return rules_refusal(&e),
        };
        if !doc.permissions_of(&agent.agent_type).rules.propose {
            return refusal(
                "capability_required",
                format!(
                    "agent type `{}` may not propose rule changes in project `{project}`",
                    agent.agent_type
                ),
            );
        }
        let origin = Origin::agent(name, session);
        match shared.store.propose(&project, &origin, &change, base_revision) {
            Ok(p) => {
                let text = format!(
                    "Proposal #{} queued for review: {}. A person decides; nothing changes until it is approved.",
                    p.id, p.summary
                );
                ToolOutput::text(text).with_structured(json!({
                    "proposal": p.id,
                    "status": p.status.as_str(),
                    "summary": p.summary,
                }))
            }
            Err(e) => rules_refusal(&e),
        }
    })
    .await
}

/// Registers the rules tools and refusals.
pub fn register_tools(tools: &ToolRegistry, shared: &Arc<Shared>) -> Result<(), GatewayError> {
    let propose_cap = WriteCapability::new(
        capabilities::RULES_PROPOSE,
        "Propose changes to a project's rules (a person approves them)",
    );
    let scope_cap = WriteCapability::new(
        capabilities::SCOPE_REQUEST,
        "Ask a person to approve expanding the scope of a task",
    );
    tools.declare(propose_cap.clone())?;
    tools.declare(scope_cap.clone())?;

    let s = Arc::clone(shared);
    tools.register(
        ToolBuilder::new("list_projects")
            .description("List the projects you may use, with their current rules revision.")
            .small_model_safe()
            .handler(move |_a: NoArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let name = ctx.caller().principal().id.clone();
                    blocking(move || {
                        let Some(agent) = s.agent(&name).cloned() else {
                            return refusal("unknown_agent", format!("`{name}` is not a configured agent"));
                        };
                        let projects = match s.store.projects() {
                            Ok(p) => p,
                            Err(e) => return rules_refusal(&e),
                        };
                        let list: Vec<_> = projects
                            .into_iter()
                            .filter(|p| agent.may_use(p))
                            .map(|p| {
                                let rev = s.store.load(&p).map(|l| l.document.revision).ok();
                                json!({"project": p, "revision": rev, "rules_resource": rules_uri(&p, &agent.agent_type)})
                            })
                            .collect();
                        match ToolOutput::json(&json!({"projects": list})) {
                            Ok(o) => o,
                            Err(e) => refusal("internal", e.to_string()),
                        }
                    })
                    .await
                }
            }),
    )?;

    let s = Arc::clone(shared);
    tools.register(
        ToolBuilder::new("get_rules")
            .description("Get a project's full rules, rendered for your agent type, with every guardrail's severity and provenance. Read them at the start of a session.")
            .small_model_safe()
            .handler(move |a: GetRulesArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let (_, agent) = match caller_agent(&s, &ctx, &a.project) {
                        Ok(x) => x,
                        Err(out) => return Ok(out),
                    };
                    let agent_type = a
                        .agent
                        .unwrap_or_else(|| rendering_type(&s, &agent, ctx.client()));
                    blocking(move || {
                        let doc = match s.store.load(&a.project) {
                            Ok(l) => l.document,
                            Err(e) => return rules_refusal(&e),
                        };
                        let rendered = match s.renderer.render(&a.project, &doc, &agent_type) {
                            Ok(r) => r,
                            Err(e) => return rules_refusal(&e),
                        };
                        let guardrails: Vec<_> = doc
                            .guardrails
                            .iter()
                            .filter(|g| g.applies_to_agent(&agent_type))
                            .map(|g| json!({
                                "id": g.id,
                                "statement": g.statement,
                                "severity": g.severity.as_str(),
                                "applies_to": g.applies_to,
                                "provenance": g.provenance,
                            }))
                            .collect();
                        ToolOutput::text(rendered.content.clone()).with_structured(json!({
                            "project": a.project,
                            "agent": agent_type,
                            "file": rendered.path,
                            "revision": doc.revision,
                            "resource": rules_uri(&a.project, &agent_type),
                            "guardrails": guardrails,
                        }))
                    })
                    .await
                }
            }),
    )?;

    let s = Arc::clone(shared);
    tools.register(
        ToolBuilder::new("propose_guardrail")
            .description("Propose a new guardrail for a project. It goes to a review queue; a person approves or rejects it. It is not policy until approved.")
            .write(propose_cap.clone())
            .small_model_safe()
            .handler(move |a: ProposeGuardrailArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let change = ChangeRequest::Guardrail {
                        id: a.id,
                        statement: a.statement,
                        severity: a.severity,
                        applies_to: a
                            .applies_to
                            .unwrap_or_else(|| vec![bridle_rules::ALL_AGENTS.to_string()]),
                    };
                    propose(s, ctx, a.project, a.session, change, None).await
                }
            }),
    )?;

    let s = Arc::clone(shared);
    tools.register(
        ToolBuilder::new("add_pattern")
            .description("Propose an architecture pattern for a project: a well-known one by name, or a project-specific one with a description and example repositories. A person reviews it.")
            .write(propose_cap.clone())
            .handler(move |a: AddPatternArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let change = match a.description {
                        None if a.example_repos.is_empty() => ChangeRequest::Pattern {
                            standard: Some(a.name),
                            custom: None,
                        },
                        description => ChangeRequest::Pattern {
                            standard: None,
                            custom: Some(CustomPattern {
                                example_repos: a
                                    .example_repos
                                    .into_iter()
                                    .map(|r| ExampleRepo {
                                        url: r.url,
                                        reference_tag: r.reference_tag,
                                        arch_tag: a.name.clone(),
                                        last_indexed: None,
                                    })
                                    .collect(),
                                name: a.name,
                                description: description.unwrap_or_default(),
                            }),
                        },
                    };
                    propose(s, ctx, a.project, a.session, change, None).await
                }
            }),
    )?;

    let s = Arc::clone(shared);
    tools.register(
        ToolBuilder::new("update_rules")
            .description("Propose new text for a project's overview, stack or conventions, based on the revision you read. A person reviews it; a stale revision is refused.")
            .write(propose_cap)
            .handler(move |a: UpdateRulesArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let change = ChangeRequest::UpdateProject {
                        overview: a.overview,
                        stack: a.stack,
                        conventions: a.conventions,
                    };
                    propose(s, ctx, a.project, a.session, change, Some(a.base_revision)).await
                }
            }),
    )?;

    let s = Arc::clone(shared);
    tools.register(
        ToolBuilder::new("request_scope_approval")
            .description("Before expanding the scope of your task (a hard-instruction guardrail asks for this), ask a person to approve. Returns a ticket; check it with scope_status and wait for `approved`.")
            .write(scope_cap)
            .small_model_safe()
            .handler(move |a: ScopeArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let (name, agent) = match caller_agent(&s, &ctx, &a.project) {
                        Ok(x) => x,
                        Err(out) => return Ok(out),
                    };
                    blocking(move || {
                        match s.store.load(&a.project) {
                            Ok(l) if !l.document.permissions_of(&agent.agent_type).scope.request => {
                                return refusal("capability_required", format!("agent type `{}` may not request scope approval in project `{}`", agent.agent_type, a.project));
                            }
                            Ok(_) => {}
                            Err(e) => return rules_refusal(&e),
                        }
                        match s.store.request_scope(&a.project, &name, a.session.as_deref(), &a.action, &a.reason) {
                            Ok(t) => ToolOutput::text(format!(
                                "Scope ticket #{} is pending. Wait for a person to decide (check with scope_status); do not proceed until it is approved.",
                                t.id
                            ))
                            .with_structured(json!({"ticket": t.id, "status": t.status})),
                            Err(e) => rules_refusal(&e),
                        }
                    })
                    .await
                }
            }),
    )?;

    let s = Arc::clone(shared);
    tools.register(
        ToolBuilder::new("scope_status")
            .description("Check the decision on a scope ticket you opened.")
            .small_model_safe()
            .handler(move |a: TicketArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let name = ctx.caller().principal().id.clone();
                    blocking(move || match s.store.scope_ticket(a.ticket) {
                        Ok(t) if t.agent == name => ToolOutput::text(format!(
                            "Scope ticket #{} is {}{}.",
                            t.id,
                            t.status,
                            t.note.as_deref().map(|n| format!(": {n}")).unwrap_or_default()
                        ))
                        .with_structured(json!({"ticket": t.id, "status": t.status, "note": t.note, "decided_by": t.decided_by})),
                        // Another agent's ticket is reported as missing: ids are not secrets, but
                        // tickets are private to the agent that opened them.
                        Ok(_) => refusal("not_found", format!("unknown scope ticket `{}`", a.ticket)),
                        Err(e) => rules_refusal(&e),
                    })
                    .await
                }
            }),
    )?;

    let human_only = "Approving and rejecting are human decisions in Bridle, never agent tools. A person runs `bridle rules approve <id>` or `bridle rules reject <id>`.";
    tools.refuse("approve_proposal", human_only)?;
    tools.refuse("reject_proposal", human_only)?;
    tools.refuse("approve_scope_request", human_only)?;
    Ok(())
}

/// Registers a rules resource for each project and each configured agent type that has none
/// yet. Returns the URIs added.
pub fn register_resources(
    resources: &ResourceRegistry,
    shared: &Arc<Shared>,
) -> Result<Vec<String>, GatewayError> {
    let mut added = Vec::new();
    let mut types: Vec<&str> = shared
        .config
        .agents
        .values()
        .map(|a| a.agent_type.as_str())
        .collect();
    types.sort_unstable();
    types.dedup();
    for project in shared.store.projects()? {
        for agent_type in &types {
            let uri = rules_uri(&project, agent_type);
            if resources.exists(&uri) {
                continue;
            }
            let s = Arc::clone(shared);
            let (p, a) = (project.clone(), agent_type.to_string());
            let reader = reader_fn(move |uri: String, _vars| {
                let s = Arc::clone(&s);
                let (p, a) = (p.clone(), a.clone());
                async move {
                    let uri2 = uri.clone();
                    let rendered = tokio::task::spawn_blocking(move || {
                        let doc = s.store.load(&p)?.document;
                        s.renderer.render(&p, &doc, &a)
                    })
                    .await
                    .map_err(|e| ResourceError::ReadFailed {
                        uri: uri2.clone(),
                        message: e.to_string(),
                    })?
                    .map_err(|e| ResourceError::ReadFailed {
                        uri: uri2,
                        message: e.to_string(),
                    })?;
                    Ok(vec![ResourceContents::text(
                        uri,
                        Some("text/markdown"),
                        rendered.content,
                    )])
                }
            });
            let target = shared.renderer.catalog().get(agent_type)?;
            resources.register(
                ResourceDescriptor::new(uri.clone(), format!("{project}-{agent_type}-rules"))
                    .title(format!("{project}: rules for {}", target.display))
                    .description(format!(
                        "The canonical rules of project `{project}` rendered as {} for {}",
                        target.output, target.display
                    ))
                    .mime_type("text/markdown"),
                reader,
            )?;
            added.push(uri);
        }
    }
    Ok(added)
}

/// Builds the gateway app (rules only).
pub fn build_app(shared: &Arc<Shared>) -> Result<McpApp, GatewayError> {
    build_app_with(shared, None)
}

/// Builds the gateway app, with bridle-memory's four tools when `memory` is given (their
/// `memory.write` / `memory.index` capabilities come from the projects' `permissions.memory`).
pub fn build_app_with(
    shared: &Arc<Shared>,
    memory: Option<bridle_memory::tools::MemoryTools>,
) -> Result<McpApp, GatewayError> {
    let tools = ToolRegistry::new();
    tools.set_audit_sink(Arc::new(kberg_core::TracingAuditSink));
    register_tools(&tools, shared)?;
    let with_memory = memory.is_some();
    if let Some(memory) = memory {
        bridle_memory::tools::register(&tools, memory)?;
    }
    let resources = ResourceRegistry::new();
    register_resources(&resources, shared)?;
    let mut instructions = String::from(
        "Bridle holds this project's canonical rules. At the start of a session call `get_rules` (or read the `bridle://rules/<project>/<agent>` resource) and follow them. Propose rule changes with `propose_guardrail`, `add_pattern` or `update_rules`; a person approves them. Before expanding the scope of a task, call `request_scope_approval` and wait.",
    );
    if with_memory {
        instructions.push_str(" Before writing code for a pattern, call `search_pattern_examples` for examples; `recall` finds decisions from earlier sessions and `remember` stores new ones.");
    }
    Ok(McpApp::builder("bridle", env!("CARGO_PKG_VERSION"))
        .title("Bridle")
        .instructions(instructions)
        .tools(tools)
        .resources(resources)
        .build())
}

fn snapshot(projects_dir: &Path) -> BTreeMap<String, (SystemTime, u64)> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(projects_dir) else {
        return out;
    };
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(project) = name.strip_suffix(".yaml") else {
            continue;
        };
        if let Ok(meta) = entry.metadata() {
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            out.insert(project.to_string(), (modified, meta.len()));
        }
    }
    out
}

/// Polls the projects folder and the change log every `every` until `stop` is cancelled; when a
/// project's document changes (an approval on the command line, a hand edit), registers
/// resources for new projects and notifies the subscribers of its rules resources.
pub async fn watch(
    shared: Arc<Shared>,
    resources: ResourceRegistry,
    projects_dir: PathBuf,
    every: Duration,
    stop: tokio_util::sync::CancellationToken,
) {
    // Two signals, because either alone can miss a change: file stamps catch hand edits (which
    // leave no change-log row), the change log catches a rewrite that kept the same size within
    // the filesystem's timestamp granularity.
    let take = |shared: Arc<Shared>, dir: PathBuf| async move {
        tokio::task::spawn_blocking(move || {
            let files = snapshot(&dir);
            let change = shared.store.last_change_id().unwrap_or(0);
            (files, change)
        })
        .await
        .unwrap_or_default()
    };
    let (mut last, mut last_change) = take(Arc::clone(&shared), projects_dir.clone()).await;
    let mut types: Vec<String> = shared
        .config
        .agents
        .values()
        .map(|a| a.agent_type.clone())
        .collect();
    types.sort_unstable();
    types.dedup();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let (now, change) = take(Arc::clone(&shared), projects_dir.clone()).await;
        if now == last && change == last_change {
            continue;
        }
        let mut changed: std::collections::BTreeSet<String> = now
            .iter()
            .filter(|(project, stamp)| last.get(*project) != Some(*stamp))
            .map(|(project, _)| project.clone())
            .collect();
        if change != last_change {
            let s = Arc::clone(&shared);
            let logged = tokio::task::spawn_blocking(move || s.store.changes(None, last_change))
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            changed.extend(logged.into_iter().map(|c| c.project));
        }
        if let Err(e) = register_resources(&resources, &shared) {
            tracing::warn!(error = %e, "registering rules resources failed");
        }
        // A project whose file is gone: its resources go too (subscribers are told).
        for project in last.keys().filter(|p| !now.contains_key(*p)) {
            for t in &types {
                resources.remove(&rules_uri(project, t));
            }
            changed.remove(project);
            tracing::info!(project, "project removed");
        }
        for project in changed.iter().filter(|p| now.contains_key(*p)) {
            for t in &types {
                let told = resources.notify_updated(&rules_uri(project, t));
                tracing::info!(project, agent = %t, subscribers = told, "rules changed");
            }
        }
        last = now;
        last_change = change;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

    use super::*;
    use crate::config::{demo_document, init_data_dir};
    use kberg_core::ResourceEvent;

    fn setup() -> (tempfile::TempDir, Arc<Shared>) {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir(tmp.path()).unwrap();
        let config = GatewayConfig::load(tmp.path()).unwrap();
        let shared = Shared::open(tmp.path(), config).unwrap();
        shared
            .store
            .create("demo", &demo_document(), "test")
            .unwrap();
        (tmp, shared)
    }

    async fn next_event(sub: &mut kberg_core::Subscriber) -> ResourceEvent {
        tokio::time::timeout(Duration::from_secs(30), sub.next())
            .await
            .expect("an event arrives")
            .expect("the registry is alive")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_watcher_follows_the_projects_folder() {
        let (tmp, shared) = setup();
        let app = build_app(&shared).unwrap();
        let resources = app.resources().clone();
        let uri = rules_uri("demo", "claude");
        assert!(resources.exists(&uri));
        assert!(resources.exists(&rules_uri("demo", "codex")));
        let mut sub = resources.subscriber();
        sub.subscribe(&uri).unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(watch(
            Arc::clone(&shared),
            resources.clone(),
            tmp.path().join("projects"),
            Duration::from_millis(20),
            stop.clone(),
        ));
        // Let the watcher take its first snapshot.
        tokio::time::sleep(Duration::from_millis(100)).await;

        // An approval (from any process) changes the file: subscribers are told.
        let p = shared
            .store
            .propose(
                "demo",
                &Origin::agent("claude", None),
                &ChangeRequest::Pattern {
                    standard: Some("hexagonal".into()),
                    custom: None,
                },
                None,
            )
            .unwrap();
        shared.store.approve(p.id, "alice").unwrap();
        assert_eq!(
            next_event(&mut sub).await,
            ResourceEvent::Updated { uri: uri.clone() }
        );
        let text = resources.read(&uri).await.unwrap();
        assert!(
            matches!(&text[0].body, kberg_core::ResourceBody::Text(t) if t.contains("hexagonal"))
        );

        // A new project file gets resources.
        let mut doc = demo_document();
        doc.project.name = "Second".into();
        shared.store.create("second", &doc, "test").unwrap();
        let second = rules_uri("second", "claude");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !resources.exists(&second) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no resource for the new project"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // A removed project: its subscribers learn it is gone.
        std::fs::remove_file(tmp.path().join("projects/demo.yaml")).unwrap();
        // (An approval may be seen twice, by its file and by its change-log row; an extra
        // "read it again" is harmless.)
        loop {
            match next_event(&mut sub).await {
                ResourceEvent::Updated { uri: u } if u == uri => continue,
                other => {
                    assert_eq!(other, ResourceEvent::Removed { uri: uri.clone() });
                    break;
                }
            }
        }
        assert!(!resources.exists(&uri));

        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn rules_render_for_the_client_only_when_the_type_was_guessed() {
        use kberg_core::{CallOptions, ClientInfo};
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir(tmp.path()).unwrap();
        let mut config = GatewayConfig::load(tmp.path()).unwrap();
        // `claude` has no `type`: it is guessed from the name; `codex` keeps its written type.
        config.agents.get_mut("claude").unwrap().agent_type = String::new();
        let shared = Shared::open(tmp.path(), config).unwrap();
        shared
            .store
            .create("demo", &demo_document(), "test")
            .unwrap();
        assert!(shared.agent("claude").unwrap().type_guessed);
        let tools = ToolRegistry::new();
        register_tools(&tools, &shared).unwrap();
        let rendered_for = |who: &str, client: Option<ClientInfo>| {
            let (tools, c) = (tools.clone(), caller(&shared, who));
            async move {
                let opts = CallOptions {
                    client,
                    ..CallOptions::default()
                };
                let out = tools
                    .call(&c, "get_rules", json!({"project": "demo"}), opts)
                    .await
                    .unwrap();
                assert!(!out.is_error, "{out:?}");
                out.structured.unwrap()["agent"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        };
        // The client's self-report picks the format when the type was only guessed ...
        assert_eq!(
            rendered_for("claude", Some(ClientInfo::new("codex-cli", "0.9"))).await,
            "codex"
        );
        // ... falls back to the guess when the catalog does not know the client ...
        assert_eq!(
            rendered_for("claude", Some(ClientInfo::new("mcp", "1"))).await,
            "claude"
        );
        assert_eq!(rendered_for("claude", None).await, "claude");
        // ... and never overrides a written type.
        assert_eq!(
            rendered_for("codex", Some(ClientInfo::new("claude-code", "2"))).await,
            "codex"
        );
        // Permissions stay with the guessed type whatever the client says.
        assert_eq!(
            caller(&shared, "claude").principal().agent.as_deref(),
            Some("claude")
        );
    }

    #[tokio::test]
    async fn grants_follow_the_live_documents() {
        let (_tmp, shared) = setup();
        let g = shared.grants_for("claude");
        assert!(g.contains(capabilities::RULES_PROPOSE));
        assert!(g.contains(capabilities::SCOPE_REQUEST));
        assert!(!g.contains(capabilities::SECRETS_READ));
        assert!(shared.grants_for("stranger").is_empty());

        let loaded = shared.store.load("demo").unwrap();
        let rev = loaded.document.revision;
        let mut doc = loaded.document;
        doc.permissions.get_mut("claude").unwrap().rules.propose = false;
        shared
            .store
            .save_edit("demo", &doc, rev, "alice", "no proposals")
            .unwrap();
        assert!(
            !shared
                .grants_for("claude")
                .contains(capabilities::RULES_PROPOSE)
        );
    }

    fn caller(shared: &Shared, name: &str) -> kberg_core::Caller {
        let agent = shared
            .agent(name)
            .map(|a| a.agent_type.clone())
            .unwrap_or_default();
        kberg_core::Caller::new(
            Principal::new(name)
                .with_agent(agent)
                .with_grants(shared.grants_for(name)),
        )
    }

    fn code(out: &ToolOutput) -> String {
        out.structured
            .as_ref()
            .and_then(|s| s["code"].as_str())
            .unwrap_or_default()
            .to_string()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_tool_through_the_gate() {
        use kberg_core::{CallOptions, ErrorCode};
        let (_tmp, shared) = setup();
        let tools = ToolRegistry::new();
        register_tools(&tools, &shared).unwrap();
        let claude = caller(&shared, "claude");
        let call = |c: &kberg_core::Caller, name: &str, args: serde_json::Value| {
            let (tools, c, name) = (tools.clone(), c.clone(), name.to_string());
            async move { tools.call(&c, &name, args, CallOptions::default()).await }
        };

        let out = call(&claude, "list_projects", json!({})).await.unwrap();
        assert_eq!(out.structured.unwrap()["projects"][0]["project"], "demo");

        // A custom pattern with an example repository, queued then approved.
        let out = call(
            &claude,
            "add_pattern",
            json!({"project": "demo", "name": "modified-mvc", "description": "MVC without DB access in controllers",
                   "example_repos": [{"url": "https://git.example.invalid/x", "reference_tag": "ex-1"}]}),
        )
        .await
        .unwrap();
        assert!(!out.is_error, "{}", out.all_text());
        let id = out.structured.unwrap()["proposal"].as_u64().unwrap();
        shared.store.approve(id, "alice").unwrap();
        let doc = shared.store.load("demo").unwrap().document;
        assert_eq!(
            doc.patterns.custom[0].example_repos[0].arch_tag,
            "modified-mvc"
        );

        // update_rules against the current revision is queued; against an old one refused.
        let rev = doc.revision;
        let out = call(
            &claude,
            "update_rules",
            json!({"project": "demo", "base_revision": rev, "stack": ["Rust"]}),
        )
        .await
        .unwrap();
        assert!(!out.is_error, "{}", out.all_text());
        let out = call(
            &claude,
            "update_rules",
            json!({"project": "demo", "base_revision": rev - 1, "stack": ["Go"]}),
        )
        .await
        .unwrap();
        assert_eq!(code(&out), "revision_conflict");

        // Bad arguments are caught by the gate, per field.
        let err = call(
            &claude,
            "propose_guardrail",
            json!({"project": "demo", "id": "x", "statement": "s", "severity": "sometimes"}),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArguments);
        // A bad id is a clear refusal from the store.
        let out = call(
            &claude,
            "propose_guardrail",
            json!({"project": "demo", "id": "Bad Id", "statement": "s", "severity": "guidance"}),
        )
        .await
        .unwrap();
        assert_eq!(code(&out), "invalid_name");
        let out = call(&claude, "get_rules", json!({"project": "missing"}))
            .await
            .unwrap();
        assert_eq!(code(&out), "unknown_project");

        // Scope tickets: opened by the agent, decided by a person, visible to the agent.
        let out = call(
            &claude,
            "request_scope_approval",
            json!({"project": "demo", "action": "touch CI", "reason": "broken"}),
        )
        .await
        .unwrap();
        let ticket = out.structured.unwrap()["ticket"].as_u64().unwrap();
        shared
            .store
            .decide_scope(ticket, false, "alice", Some("not now"))
            .unwrap();
        let out = call(&claude, "scope_status", json!({"ticket": ticket}))
            .await
            .unwrap();
        assert_eq!(
            out.all_text(),
            format!("Scope ticket #{ticket} is denied: not now.")
        );

        // Approving is refused by name, whatever the grants.
        let err = call(&claude, "approve_proposal", json!({"id": id}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::Refused);

        // Without the permission, the gate refuses before the tool runs.
        let loaded = shared.store.load("demo").unwrap();
        let mut doc = loaded.document;
        let rev = doc.revision;
        doc.permissions.get_mut("codex").unwrap().rules.propose = false;
        shared
            .store
            .save_edit("demo", &doc, rev, "alice", "codex read-only")
            .unwrap();
        let codex = caller(&shared, "codex");
        let err = call(
            &codex,
            "propose_guardrail",
            json!({"project": "demo", "id": "y", "statement": "s", "severity": "guidance"}),
        )
        .await
        .unwrap_err();
        assert_eq!(err.code(), ErrorCode::CapabilityRequired);
        // A stale principal (grants computed before the change) is still stopped by the tool.
        let stale = kberg_core::Caller::new(
            Principal::new("codex").with_grants(Grants::of([capabilities::RULES_PROPOSE])),
        );
        let out = call(
            &stale,
            "propose_guardrail",
            json!({"project": "demo", "id": "y", "statement": "s", "severity": "guidance"}),
        )
        .await
        .unwrap();
        assert_eq!(code(&out), "capability_required");
        // An unconfigured principal is told so.
        let nobody = kberg_core::Caller::new(
            Principal::new("nobody").with_grants(Grants::of([capabilities::RULES_PROPOSE])),
        );
        let out = call(&nobody, "get_rules", json!({"project": "demo"}))
            .await
            .unwrap();
        assert_eq!(code(&out), "unknown_agent");
    }
}
