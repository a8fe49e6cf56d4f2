//! The agents over the API: list and get them (type, projects, token source and versions, live
//! sessions, calls); create one (its first vault token is in the answer once and never again),
//! change its type or projects, delete it (its tokens revoked, its sessions ended); and manage
//! their vault-issued bearer tokens: issue, rotate with a grace period, revoke (every token at
//! once, and the agent's live sessions are ended).
//!
//! Agents live in the gateway's [`AgentRegistry`](crate::agent_registry::AgentRegistry): a
//! change here is written to `bridle.yaml` and applies to the next MCP request. An agent whose
//! token is a secret file authenticates with that file, so its token is changed by replacing the
//! file, and the token operations here answer 409 `token_in_secret_file` for it.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};

use crate::agent_registry::AgentChange;
use kberg_core::counted;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::AdminActor;
use super::error::{ApiError, ProblemDetails};
use super::page::{ApiJson, ApiPath, ApiQuery, OptionalJson, paginate};
use super::secrets::vault_of;
use super::{AdminState, blocking, grace_period, path, record};
use crate::audit::{Change, Kind};
use crate::config::AgentConfig;
use crate::context::GatewayContext;
use crate::vault::{AgentTokenMeta, IssuedToken, Vault};

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/agents"), get(list).post(create))
        .route(
            &path("/agents/{name}"),
            get(get_one).patch(change).delete(remove),
        )
        .route(&path("/agents/{name}/token"), post(issue))
        .route(&path("/agents/{name}/rotate"), post(rotate))
        .route(&path("/agents/{name}/revoke"), post(revoke))
}

/// An agent as an admin sees it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AgentView {
    /// Its name (the principal its calls are recorded under).
    pub name: String,
    /// Its type (`claude`, `codex`, ...): which rendering and which permissions apply.
    pub agent_type: String,
    /// Whether the type was guessed from the name (not written in `bridle.yaml`).
    pub type_guessed: bool,
    /// The projects it may use; empty means every project.
    pub projects: Vec<String>,
    /// `secret_file` (its token is a file in the secrets folder) or `vault` (vault-issued).
    pub token_source: String,
    /// The vault-issued token versions (metadata only: version, fingerprint, who and when,
    /// validity), oldest first.
    #[schema(value_type = Vec<Object>)]
    pub token_versions: Vec<AgentTokenMeta>,
    /// Its live sessions.
    pub sessions: usize,
    /// Tool calls it made since the gateway started.
    pub calls_made: u64,
    /// Tool calls refused since the gateway started.
    pub calls_refused: u64,
}

/// A page of agents, by name.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AgentPage {
    /// The agents.
    pub items: Vec<AgentView>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Paging and filters of the agents.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AgentQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// Only agents that may use this project.
    pub project: Option<String>,
    /// Only agents of this type.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub agent_type: Option<String>,
}

/// A token just issued: the only time it is shown. Its `Debug` shows the token as
/// `[redacted]`, so a client or a handler that logs the answer does not log the token.
#[derive(Clone, Serialize, Deserialize, ToSchema)]
pub struct IssuedTokenView {
    /// The agent.
    pub agent: String,
    /// The token's version.
    pub version: u64,
    /// The bearer token. Store it now: it cannot be read back.
    pub token: String,
    /// Set when the token was issued but the gateway's audit log could not record it (the
    /// vault's own log has the issue). The token is still returned, since it cannot be
    /// shown again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl std::fmt::Debug for IssuedTokenView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedTokenView")
            .field("agent", &self.agent)
            .field("version", &self.version)
            .field("token", &crate::vault::REDACTED)
            .field("warning", &self.warning)
            .finish()
    }
}

/// How long the previous tokens stay valid after a rotation.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateToken {
    /// Seconds the previous tokens stay valid (default 0: they end now; at most 2592000, 30
    /// days, else 422 `invalid_request`).
    #[serde(default)]
    #[schema(maximum = 2592000)]
    pub grace_secs: u64,
}

/// What revoking did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Revoked {
    /// The agent.
    pub agent: String,
    /// Token versions that were valid and are now revoked.
    pub revoked_tokens: usize,
    /// Live sessions ended.
    pub ended_sessions: usize,
}

fn unknown(name: &str) -> ApiError {
    ApiError::NotFound {
        code: "unknown_agent",
        detail: format!("no configured agent `{name}`"),
    }
}

fn configured(s: &AdminState, name: &str) -> Result<AgentConfig, ApiError> {
    s.ctx.agent(name).ok_or_else(|| unknown(name))
}

fn view(s: &AdminState, name: &str, a: &AgentConfig, tokens: Vec<AgentTokenMeta>) -> AgentView {
    let calls = s.ctx.sessions.calls(name);
    AgentView {
        name: name.to_string(),
        agent_type: a.agent_type.clone(),
        type_guessed: a.type_guessed,
        projects: a.projects.clone(),
        token_source: if a.token_secret.is_some() {
            "secret_file"
        } else {
            "vault"
        }
        .into(),
        token_versions: tokens,
        sessions: s
            .ctx
            .sessions
            .sessions()
            .iter()
            .filter(|r| r.agent == name)
            .count(),
        calls_made: calls.made,
        calls_refused: calls.refused,
    }
}

async fn tokens_of(s: &AdminState, name: &str) -> Result<Vec<AgentTokenMeta>, ApiError> {
    let Some(vault) = s.vault.clone() else {
        return Ok(Vec::new());
    };
    let name = name.to_string();
    blocking(move || Ok(vault.agent_tokens(&name)?)).await
}

/// Lists the configured agents, by name.
#[utoipa::path(get, path = "/admin/api/v1/agents", tag = "agents",
    params(AgentQuery),
    responses(
        (status = 200, body = AgentPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn list(
    State(s): State<AdminState>,
    ApiQuery(q): ApiQuery<AgentQuery>,
) -> Result<axum::Json<AgentPage>, ApiError> {
    let names: Vec<(String, AgentConfig)> = s
        .ctx
        .agents
        .all()
        .into_iter()
        .filter(|(_, a)| q.project.as_deref().is_none_or(|p| a.may_use(p)))
        .filter(|(_, a)| q.agent_type.as_deref().is_none_or(|t| a.agent_type == t))
        .collect();
    let page = paginate(names, |(n, _)| n.clone(), q.cursor.as_deref(), q.limit)?;
    let mut items = Vec::with_capacity(page.items.len());
    for (name, a) in page.items {
        let tokens = tokens_of(&s, &name).await?;
        items.push(view(&s, &name, &a, tokens));
    }
    Ok(axum::Json(AgentPage {
        items,
        next_cursor: page.next_cursor,
    }))
}

/// One configured agent.
#[utoipa::path(get, path = "/admin/api/v1/agents/{name}", tag = "agents",
    params(("name" = String, Path, description = "The agent's name")),
    responses(
        (status = 200, body = AgentView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn get_one(
    State(s): State<AdminState>,
    ApiPath(name): ApiPath<String>,
) -> Result<axum::Json<AgentView>, ApiError> {
    let a = configured(&s, &name)?;
    let tokens = tokens_of(&s, &name).await?;
    Ok(axum::Json(view(&s, &name, &a, tokens)))
}

fn vault_issued(name: &str, a: &AgentConfig) -> Result<(), ApiError> {
    match &a.token_secret {
        Some(file) => Err(ApiError::Conflict {
            code: "token_in_secret_file",
            detail: format!(
                "agent `{name}` authenticates with the secret file `{file}`; replace that file to change its token, or remove `token_secret` to use vault-issued tokens"
            ),
        }),
        None => Ok(()),
    }
}

fn issued_view(t: IssuedToken, warning: Option<String>) -> IssuedTokenView {
    IssuedTokenView {
        agent: t.agent,
        version: t.version,
        token: t.token.expose_str().unwrap_or_default().to_string(),
        warning,
    }
}

/// Records a token's issue in the audit log. A token is shown once: when the entry cannot be
/// written, the token is still answered (the vault's own log has the issue), with the failure
/// as a warning, instead of an error that would lose the only copy of the token.
fn record_issue(
    ctx: &crate::context::GatewayContext,
    entry: crate::audit::Entry,
    what: &str,
) -> Option<String> {
    let e = record(ctx, entry, what).err()?;
    let message = e.to_string();
    tracing::error!(error = %message, "a token was issued but the audit log could not record it");
    Some(message)
}

/// Issues a token of the configured, vault-issued agent `name`: with `grace` `None` every
/// earlier token is revoked, otherwise the earlier ones stay valid for `grace`.
fn issue_token(
    ctx: &GatewayContext,
    vault: &Vault,
    name: &str,
    grace: Option<Duration>,
    actor: &str,
) -> Result<IssuedToken, ApiError> {
    let a = ctx.agent(name).ok_or_else(|| unknown(name))?;
    vault_issued(name, &a)?;
    #[cfg(test)]
    tests::between_check_and_write();
    let t = match grace {
        None => vault.set_agent_token(name, actor)?,
        Some(grace) => vault.rotate_agent_token(name, grace, actor)?,
    };
    // A delete removes the agent, then revokes its tokens. One that came between the check
    // above and the write revoked before the token existed, and would leave it opening a name
    // no agent has (or one created later by that name). So the agent is looked up again after
    // the write: gone, the token is revoked here; still there, any delete that follows revokes
    // it. Either way no token outlives its agent.
    if ctx.agent(name).is_none() {
        vault.revoke_agent_tokens(name, actor)?;
        tracing::info!(agent = %name, version = t.version, "an agent was deleted while its token was issued; the token is revoked");
        return Err(ApiError::NotFound {
            code: "unknown_agent",
            detail: format!(
                "agent `{name}` was deleted while its token was issued; that token is revoked"
            ),
        });
    }
    Ok(t)
}

/// Removes the agent `name` and revokes its vault tokens; returns what it was and how many
/// tokens were revoked. A revocation that fails puts the agent back, so that nothing changed.
fn delete_agent(
    ctx: &GatewayContext,
    vault: Option<&Vault>,
    name: &str,
    actor: &str,
) -> Result<(AgentConfig, usize), ApiError> {
    let removed = ctx.agents.remove(name)?;
    let revoked = match vault {
        Some(v) => match v.revoke_agent_tokens(name, actor) {
            Ok(revoked) => revoked,
            Err(e) => {
                // The answer says the delete failed, so it must not have happened: the agent
                // is put back (its tokens were never revoked), the change is not left
                // unaudited, and a retry finds the agent to delete.
                if let Err(undo) = ctx.agents.restore(name, removed) {
                    tracing::error!(agent = %name, error = %undo, "an agent whose tokens could not be revoked was not put back");
                }
                return Err(e.into());
            }
        },
        None => 0,
    };
    Ok((removed, revoked))
}

fn fingerprint(tokens: &[AgentTokenMeta], version: u64) -> Option<String> {
    tokens
        .iter()
        .find(|t| t.version == version)
        .map(|t| t.fingerprint.clone())
}

/// Issues a new token for an agent and revokes every earlier one; the token is in this answer
/// only.
#[utoipa::path(post, path = "/admin/api/v1/agents/{name}/token", tag = "agents",
    params(("name" = String, Path, description = "The agent's name")),
    responses(
        (status = 201, body = IssuedTokenView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "its token is a secret file", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "`vault_unavailable`: the API runs without the vault", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn issue(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(name): ApiPath<String>,
) -> Result<(StatusCode, axum::Json<IssuedTokenView>), ApiError> {
    let a = configured(&s, &name)?;
    vault_issued(&name, &a)?;
    let vault = vault_of(&s)?;
    let ctx = s.ctx.clone();
    let t = blocking(move || {
        let t = issue_token(&ctx, &vault, &name, None, &admin.actor())?;
        let tokens = vault.agent_tokens(&name).unwrap_or_default();
        let entry = admin
            .entry(Kind::AgentRotate)
            .about_agent(&name)
            .subject(format!("token v{}", t.version))
            .change(Change {
                after: Some(t.version.to_string()),
                digest: fingerprint(&tokens, t.version),
                ..Change::default()
            })
            .detail("token issued; earlier tokens revoked");
        let warning = record_issue(&ctx, entry, "the token");
        Ok(issued_view(t, warning))
    })
    .await?;
    Ok((StatusCode::CREATED, axum::Json(t)))
}

/// Issues a new token; the current ones stay valid for `grace_secs`. The token is in this
/// answer only.
#[utoipa::path(post, path = "/admin/api/v1/agents/{name}/rotate", tag = "agents",
    params(("name" = String, Path, description = "The agent's name")),
    request_body(content = Option<RotateToken>, description = "The grace period"),
    responses(
        (status = 200, body = IssuedTokenView),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "its token is a secret file", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "`vault_unavailable`: the API runs without the vault", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn rotate(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(name): ApiPath<String>,
    OptionalJson(body): OptionalJson<RotateToken>,
) -> Result<axum::Json<IssuedTokenView>, ApiError> {
    let grace = grace_period(body.grace_secs)?;
    let a = configured(&s, &name)?;
    vault_issued(&name, &a)?;
    let vault = vault_of(&s)?;
    let ctx = s.ctx.clone();
    let t = blocking(move || {
        let t = issue_token(&ctx, &vault, &name, Some(grace), &admin.actor())?;
        let tokens = vault.agent_tokens(&name).unwrap_or_default();
        let entry = admin
            .entry(Kind::AgentRotate)
            .about_agent(&name)
            .subject(format!("token v{}", t.version))
            .change(Change {
                before: Some(t.version.saturating_sub(1).to_string()),
                after: Some(t.version.to_string()),
                digest: fingerprint(&tokens, t.version),
            })
            .detail(format!(
                "token rotated; earlier tokens valid for {}s",
                body.grace_secs
            ));
        let warning = record_issue(&ctx, entry, "the rotation");
        Ok(issued_view(t, warning))
    })
    .await?;
    Ok(axum::Json(t))
}

/// Revokes every token of an agent at once and ends its live sessions.
#[utoipa::path(post, path = "/admin/api/v1/agents/{name}/revoke", tag = "agents",
    params(("name" = String, Path, description = "The agent's name")),
    responses(
        (status = 200, body = Revoked),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "its token is a secret file", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "`vault_unavailable`: the API runs without the vault", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn revoke(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(name): ApiPath<String>,
) -> Result<axum::Json<Revoked>, ApiError> {
    let a = configured(&s, &name)?;
    vault_issued(&name, &a)?;
    let vault = vault_of(&s)?;
    let ctx = s.ctx.clone();
    let agent = name.clone();
    let actor = admin.actor();
    let revoked_tokens = blocking(move || Ok(vault.revoke_agent_tokens(&agent, &actor)?)).await?;
    let ended_sessions = s.ctx.sessions.end_agent(&name);
    tracing::info!(agent = %name, revoked_tokens, ended_sessions, admin = %admin.identity.name, "agent tokens revoked through the admin API");
    let entry = admin
        .entry(Kind::AgentRevoke)
        .about_agent(&name)
        .subject("every token")
        .detail(format!(
            "{} revoked, {} ended",
            counted(revoked_tokens as u64, "token", "tokens"),
            counted(ended_sessions as u64, "session", "sessions")
        ));
    blocking(move || record(&ctx, entry, "the revocation")).await?;
    Ok(axum::Json(Revoked {
        agent: name,
        revoked_tokens,
        ended_sessions,
    }))
}

/// A new agent.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAgent {
    /// Its name: lowercase letters, digits and `-`, the principal its calls are recorded under.
    pub name: String,
    /// Its type (`claude`, `codex`, ...): which rendering and which permissions apply.
    #[serde(rename = "type")]
    #[schema(rename = "type")]
    pub agent_type: String,
    /// The projects it may use; empty or absent means every project.
    #[serde(default)]
    pub projects: Vec<String>,
}

/// An agent just created, with its first token: the only time that token is shown.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreatedAgent {
    /// The agent.
    pub agent: AgentView,
    /// Its first vault-issued token.
    pub token: IssuedTokenView,
}

/// A change of an agent: the fields given are replaced, the others kept.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeAgentRequest {
    /// Its new type.
    #[serde(rename = "type", default)]
    #[schema(rename = "type")]
    pub agent_type: Option<String>,
    /// Its new projects; empty means every project.
    #[serde(default)]
    pub projects: Option<Vec<String>>,
}

/// What deleting an agent did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Deleted {
    /// The agent.
    pub agent: String,
    /// Its vault-issued token versions that were valid and are now revoked.
    pub revoked_tokens: usize,
    /// Its live sessions, ended.
    pub ended_sessions: usize,
}

fn describe(a: &AgentConfig) -> String {
    let projects = if a.projects.is_empty() {
        "every project".to_string()
    } else {
        a.projects.join(", ")
    };
    format!("type {}; projects: {projects}", a.agent_type)
}

/// Creates an agent (written to `bridle.yaml`, live at once) and issues its first vault token,
/// shown in this answer only.
#[utoipa::path(post, path = "/admin/api/v1/agents", tag = "agents",
    request_body = CreateAgent,
    responses(
        (status = 201, body = CreatedAgent),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "the agent was deleted while it was being created (`unknown_agent`); its token is revoked", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "an agent of that name exists", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "a bad name, type or project", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no vault, or bridle.yaml cannot be written", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn create(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiJson(body): ApiJson<CreateAgent>,
) -> Result<(StatusCode, axum::Json<CreatedAgent>), ApiError> {
    let vault = vault_of(&s)?;
    let ctx = s.ctx.clone();
    let name = body.name.clone();
    let (agent, t, tokens) = blocking(move || {
        let agent = ctx.agents.create(
            ctx.renderer.catalog(),
            &body.name,
            &body.agent_type,
            body.projects,
        )?;
        // An agent whose first token cannot be issued is taken out again, so that a retry
        // does not find it half made (`agent_exists`, and no token).
        let t = match issue_token(&ctx, &vault, &body.name, None, &admin.actor()) {
            Ok(t) => t,
            // Deleted meanwhile: there is nothing to take out.
            Err(e) if ctx.agent(&body.name).is_none() => return Err(e),
            Err(e) => {
                if let Err(undo) = ctx.agents.remove(&body.name) {
                    tracing::error!(agent = %body.name, error = %undo, "an agent whose token could not be issued was not removed again");
                }
                return Err(e);
            }
        };
        let tokens = vault
            .agent_tokens(&body.name)
            .inspect_err(|e| {
                tracing::warn!(agent = %body.name, error = %e, "a new agent's token versions could not be read; answered without them");
            })
            .unwrap_or_default();
        let entry = admin
            .entry(Kind::AgentCreate)
            .about_agent(&body.name)
            .subject(body.name.clone())
            .change(Change {
                after: Some(t.version.to_string()),
                digest: fingerprint(&tokens, t.version),
                ..Change::default()
            })
            .detail(format!(
                "agent created ({}); token issued",
                describe(&agent)
            ));
        let warning = record_issue(&ctx, entry, "the agent");
        Ok((agent, issued_view(t, warning), tokens))
    })
    .await?;
    tracing::info!(agent = %name, "agent created through the admin API");
    // The token versions read with the issue: nothing that can fail comes between the issue
    // and the answer, which is the only place the token is ever shown.
    Ok((
        StatusCode::CREATED,
        axum::Json(CreatedAgent {
            agent: view(&s, &name, &agent, tokens),
            token: t,
        }),
    ))
}

/// Changes an agent's type or projects (written to `bridle.yaml`); the next MCP request of
/// the agent is held to them.
#[utoipa::path(patch, path = "/admin/api/v1/agents/{name}", tag = "agents",
    params(("name" = String, Path, description = "The agent's name")),
    request_body = ChangeAgentRequest,
    responses(
        (status = 200, body = AgentView),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "nothing to change, or a bad type or project", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "bridle.yaml cannot be written", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn change(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<ChangeAgentRequest>,
) -> Result<axum::Json<AgentView>, ApiError> {
    configured(&s, &name)?;
    if body.agent_type.is_none() && body.projects.is_none() {
        return Err(ApiError::invalid(
            "give `type`, `projects` or both: there is nothing to change",
        ));
    }
    let ctx = s.ctx.clone();
    let agent = name.clone();
    let after = blocking(move || {
        let change = AgentChange {
            agent_type: body.agent_type,
            projects: body.projects,
        };
        let (before, after) = ctx.agents.update(ctx.renderer.catalog(), &agent, &change)?;
        let entry = admin
            .entry(Kind::AgentUpdate)
            .about_agent(&agent)
            .subject(agent.clone())
            .change(Change {
                before: Some(describe(&before)),
                after: Some(describe(&after)),
                digest: None,
            })
            .detail("type or projects changed");
        record(&ctx, entry, "the change")?;
        Ok(after)
    })
    .await?;
    if let Some(integrations) = &s.integrations {
        integrations.agent_changed();
    }
    // The change is written and recorded: token versions that cannot be read now leave the
    // answer without them (as a create's does), not an error for a change that was made.
    let tokens = tokens_of(&s, &name).await.unwrap_or_else(|e| {
        tracing::warn!(agent = %name, error = %crate::logging::one_line(&e), "a changed agent's token versions could not be read; answered without them");
        Vec::new()
    });
    Ok(axum::Json(view(&s, &name, &after, tokens)))
}

/// Deletes an agent: it is removed from `bridle.yaml` and refused from the next request, its
/// vault tokens are revoked and its live sessions ended. An agent an upstream or Kanboard still
/// names is refused with 409 `agent_in_use`. A delete whose tokens cannot be revoked (the
/// vault fails) changes nothing: the agent is kept as it was.
#[utoipa::path(delete, path = "/admin/api/v1/agents/{name}", tag = "agents",
    params(("name" = String, Path, description = "The agent's name")),
    responses(
        (status = 200, body = Deleted),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "an upstream or Kanboard names the agent", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "bridle.yaml cannot be written", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn remove(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(name): ApiPath<String>,
) -> Result<axum::Json<Deleted>, ApiError> {
    configured(&s, &name)?;
    let ctx = s.ctx.clone();
    let vault = s.vault.clone();
    let agent = name.clone();
    let actor = admin.actor();
    let (removed, revoked_tokens) =
        blocking(move || delete_agent(&ctx, vault.as_deref(), &agent, &actor)).await?;
    let ended_sessions = s.ctx.sessions.end_agent(&name);
    tracing::info!(agent = %name, revoked_tokens, ended_sessions, admin = %admin.identity.name, "agent deleted through the admin API");
    let entry = admin
        .entry(Kind::AgentDelete)
        .about_agent(&name)
        .subject(name.clone())
        .change(Change {
            before: Some(describe(&removed)),
            ..Change::default()
        })
        .detail(format!(
            "agent deleted; {} revoked, {} ended",
            counted(revoked_tokens as u64, "token", "tokens"),
            counted(ended_sessions as u64, "session", "sessions")
        ));
    let ctx = s.ctx.clone();
    blocking(move || record(&ctx, entry, "the deletion")).await?;
    Ok(axum::Json(Deleted {
        agent: name,
        revoked_tokens,
        ended_sessions,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

    use std::cell::RefCell;
    use std::sync::Arc;

    use super::*;
    use crate::vault::{MasterKey, VaultConfig};

    thread_local! {
        /// What a test runs on this thread between an issue's check that its agent exists and
        /// the token's write: the one place another request can slip in.
        static BETWEEN: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    pub(super) fn between_check_and_write() {
        if let Some(then) = BETWEEN.with(|b| b.borrow_mut().take()) {
            then();
        }
    }

    fn gateway() -> (tempfile::TempDir, Arc<GatewayContext>, Arc<Vault>) {
        let tmp = tempfile::tempdir().unwrap();
        crate::config::init_data_dir(tmp.path()).unwrap();
        let config = crate::config::GatewayConfig::load(tmp.path()).unwrap();
        let ctx = GatewayContext::open(tmp.path(), config).unwrap();
        let vault = Vault::open(
            &tmp.path().join("vault.db"),
            &MasterKey::generate().unwrap(),
            VaultConfig::default(),
        )
        .unwrap();
        (tmp, ctx, Arc::new(vault))
    }

    #[test]
    fn a_token_issued_or_rotated_while_its_agent_is_deleted_does_not_outlive_it() {
        for grace in [None, Some(Duration::from_secs(600))] {
            let (_tmp, ctx, vault) = gateway();
            ctx.agents
                .create(ctx.renderer.catalog(), "bot", "claude", vec![])
                .unwrap();
            vault.set_agent_token("bot", "test").unwrap();
            let (c, v) = (Arc::clone(&ctx), Arc::clone(&vault));
            BETWEEN.with(|b| {
                *b.borrow_mut() = Some(Box::new(move || {
                    delete_agent(&c, Some(&v), "bot", "admin:alice@api").unwrap();
                }));
            });
            let answer = issue_token(&ctx, &vault, "bot", grace, "admin:bob@api");
            assert!(ctx.agent("bot").is_none(), "the delete went through");
            if let Ok(t) = &answer {
                assert_eq!(
                    vault
                        .agent_for_token(t.token.expose_str().unwrap())
                        .unwrap(),
                    None,
                    "grace {grace:?}: the token answered opens a deleted agent"
                );
            }
            let valid: Vec<u64> = vault
                .agent_tokens("bot")
                .unwrap()
                .into_iter()
                .filter(|t| t.valid)
                .map(|t| t.version)
                .collect();
            assert_eq!(valid, Vec::<u64>::new(), "grace {grace:?}");
            let e = answer.expect_err("the issue is refused: its agent is gone");
            assert_eq!(
                (e.status(), e.code()),
                (StatusCode::NOT_FOUND, "unknown_agent")
            );
        }
    }
}
