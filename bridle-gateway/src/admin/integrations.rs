//! Integrations: each upstream MCP server's status and the projects it serves, from the
//! gateway's upstream pool, and turning one off or on while the gateway runs.
//!
//! Disabling takes its tools out of every agent's list at once (connected clients get
//! `list_changed`) and closes its connections; enabling connects it again. The change is
//! written to `bridle.yaml` (`upstreams.<namespace>.enabled`, the file rewritten atomically as
//! the agent registry does) so a restart keeps it, and recorded as an `upstream_change` audit
//! entry.
//!
//! Which projects an upstream serves is changed the same way (`PATCH /integrations/{ns}` with
//! `{"projects": [...]}`): every named project must exist, the file is rewritten
//! (`upstreams.<namespace>.projects`) and checked as at start, the next call of its tools is
//! checked against the new mapping (an agent whose projects it no longer serves is refused
//! `project_not_allowed`), connected clients get `list_changed`, and the change is an
//! `upstream_change` entry with the lists before and after. A refusal leaves the file as it was.
//!
//! Changes of upstreams run one at a time (`AdminState::integration_changes`): two at once
//! would each rewrite the file and then change the running pool, and could do so in opposite
//! orders, leaving an upstream running enabled that `bridle.yaml` says is disabled.

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use bridle_rules::check_name;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::AdminActor;
use super::error::{ApiError, ProblemDetails};
use super::page::{ApiJson, ApiPath, ApiQuery, paginate};
use super::{AdminState, blocking, path, record};
use crate::audit::{Change, Kind};
use crate::config::{RewriteError, rewrite};
use crate::upstreams::UpstreamReport;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/integrations"), get(list))
        .route(
            &path("/integrations/{namespace}"),
            get(get_one).patch(change),
        )
        .route(&path("/integrations/{namespace}/enable"), post(enable))
        .route(&path("/integrations/{namespace}/disable"), post(disable))
}

/// One upstream's status.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IntegrationView {
    /// The namespace its tools are offered under.
    pub namespace: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// Whether it is enabled in the configuration.
    pub enabled: bool,
    /// Whether its listing connection is up.
    pub connected: bool,
    /// Why it is not, when it is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// How many front tools it offers.
    pub tool_count: usize,
    /// The front tools it offers.
    pub tools: Vec<String>,
    /// The projects it serves (empty: all).
    pub projects: Vec<String>,
}

impl From<UpstreamReport> for IntegrationView {
    fn from(r: UpstreamReport) -> Self {
        Self {
            namespace: r.namespace,
            transport: r.transport.to_string(),
            enabled: r.enabled,
            connected: r.connected,
            last_error: r.last_error,
            tool_count: r.tools.len(),
            tools: r.tools,
            projects: r.projects,
        }
    }
}

/// A page of integrations.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IntegrationPage {
    /// The upstreams, by namespace.
    pub items: Vec<IntegrationView>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Paging and filters of the integrations.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct IntegrationQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// Only connected (`true`) or disconnected (`false`) upstreams.
    pub connected: Option<bool>,
    /// Only upstreams serving this project.
    pub project: Option<String>,
}

async fn reports(s: &AdminState) -> Vec<IntegrationView> {
    match &s.integrations {
        Some(i) => i.reports().await.into_iter().map(Into::into).collect(),
        None => Vec::new(),
    }
}

/// Lists the upstreams and their status.
#[utoipa::path(get, path = "/admin/api/v1/integrations", tag = "integrations",
    params(IntegrationQuery),
    responses(
        (status = 200, body = IntegrationPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn list(
    State(s): State<AdminState>,
    ApiQuery(q): ApiQuery<IntegrationQuery>,
) -> Result<axum::Json<IntegrationPage>, ApiError> {
    let items: Vec<IntegrationView> = reports(&s)
        .await
        .into_iter()
        .filter(|r| q.connected.is_none_or(|c| r.connected == c))
        .filter(|r| {
            q.project
                .as_deref()
                .is_none_or(|p| r.projects.is_empty() || r.projects.iter().any(|x| x == p))
        })
        .collect();
    let page = paginate(items, |r| r.namespace.clone(), q.cursor.as_deref(), q.limit)?;
    Ok(axum::Json(IntegrationPage {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

/// One upstream's status.
#[utoipa::path(get, path = "/admin/api/v1/integrations/{namespace}", tag = "integrations",
    params(("namespace" = String, Path, description = "The upstream's namespace")),
    responses(
        (status = 200, body = IntegrationView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn get_one(
    State(s): State<AdminState>,
    ApiPath(namespace): ApiPath<String>,
) -> Result<axum::Json<IntegrationView>, ApiError> {
    report(&s, &namespace).await.map(axum::Json)
}

async fn report(s: &AdminState, namespace: &str) -> Result<IntegrationView, ApiError> {
    reports(s)
        .await
        .into_iter()
        .find(|r| r.namespace == namespace)
        .ok_or_else(|| ApiError::NotFound {
            code: "unknown_integration",
            detail: format!("no upstream has namespace `{namespace}`"),
        })
}

/// A change of an upstream: which projects it serves.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IntegrationChange {
    /// The projects it serves from now on; empty means every project. Each must exist.
    pub projects: Vec<String>,
}

fn listed(projects: &[String]) -> String {
    if projects.is_empty() {
        "all projects".into()
    } else {
        projects.join(",")
    }
}

fn pool_of(s: &AdminState) -> Result<std::sync::Arc<dyn super::IntegrationStatus>, ApiError> {
    s.integrations.clone().ok_or_else(|| ApiError::Unavailable {
        code: "integrations_unavailable",
        detail: "this admin API was started without the gateway's upstream pool".into(),
    })
}

fn config_write_failed(file: &std::path::Path, ns: &str, e: RewriteError<()>) -> ApiError {
    let detail = match e {
        RewriteError::Edit(()) => format!(
            "upstream `{ns}` is no longer in {}; it was removed by hand",
            file.display()
        ),
        RewriteError::Check(m) | RewriteError::Io(m) => m,
    };
    tracing::error!(detail = %crate::logging::one_line(&detail), "bridle.yaml could not be updated");
    ApiError::Unavailable {
        code: "config_write_failed",
        detail: format!("bridle.yaml could not be updated: {detail}"),
    }
}

/// Changes which projects an upstream serves: written to `bridle.yaml`, effective on the next
/// call of its tools, connected clients told their list changed, recorded as `upstream_change`.
#[utoipa::path(patch, path = "/admin/api/v1/integrations/{namespace}", tag = "integrations",
    params(("namespace" = String, Path, description = "The upstream's namespace")),
    request_body = IntegrationChange,
    responses(
        (status = 200, body = IntegrationView),
        (status = 400, description = "malformed JSON", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "no such upstream or project", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 415, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "a field of the wrong type, an unknown field or a bad project name", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "bridle.yaml cannot be written, or no upstream pool", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn change(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(namespace): ApiPath<String>,
    ApiJson(body): ApiJson<IntegrationChange>,
) -> Result<axum::Json<IntegrationView>, ApiError> {
    report(&s, &namespace).await?;
    let pool = pool_of(&s)?;
    let mut projects = body.projects;
    for p in &projects {
        check_name("project", p).map_err(|e| ApiError::invalid(e.to_string()))?;
    }
    projects.sort();
    projects.dedup();
    let ctx = s.ctx.clone();
    let wanted = projects.clone();
    blocking(move || {
        let known = ctx.store.projects()?;
        match wanted.iter().find(|p| !known.contains(p)) {
            Some(p) => Err(ApiError::NotFound {
                code: "unknown_project",
                detail: format!("no project `{p}` exists"),
            }),
            None => Ok(()),
        }
    })
    .await?;
    let _one_change_at_a_time = s.integration_changes.lock().await;
    let file = s.ctx.agents.file().to_path_buf();
    let (ns, new) = (namespace.clone(), projects.clone());
    blocking(move || {
        rewrite(&file, |config| {
            match config.upstreams.get_mut(&ns) {
                Some(section) => section.projects = new,
                None => return Err(()),
            }
            Ok(())
        })
        .map_err(|e| config_write_failed(&file, &ns, e))
    })
    .await?;
    let previous = pool
        .set_projects(&namespace, projects.clone())
        .map_err(|detail| ApiError::Unavailable {
            code: "integrations_unavailable",
            detail,
        })?;
    tracing::info!(namespace = ?namespace, admin = %admin.identity.name, "upstream project mapping changed through the admin API");
    let entry = admin
        .entry(Kind::UpstreamChange)
        .subject(namespace.clone())
        .change(Change {
            before: Some(listed(&previous)),
            after: Some(listed(&projects)),
            digest: None,
        })
        .detail(if previous == projects {
            "upstream projects unchanged".to_string()
        } else {
            "upstream projects changed".to_string()
        });
    let ctx = s.ctx.clone();
    blocking(move || record(&ctx, entry, "the change")).await?;
    report(&s, &namespace).await.map(axum::Json)
}

/// Turns an upstream on: it connects again and its tools return to the agents' lists.
#[utoipa::path(post, path = "/admin/api/v1/integrations/{namespace}/enable", tag = "integrations",
    params(("namespace" = String, Path, description = "The upstream's namespace")),
    responses(
        (status = 200, body = IntegrationView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "bridle.yaml cannot be written, or no upstream pool", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn enable(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(namespace): ApiPath<String>,
) -> Result<axum::Json<IntegrationView>, ApiError> {
    switch(s, admin, namespace, true).await
}

/// Turns an upstream off: its tools leave every agent's list at once and its connections close.
#[utoipa::path(post, path = "/admin/api/v1/integrations/{namespace}/disable", tag = "integrations",
    params(("namespace" = String, Path, description = "The upstream's namespace")),
    responses(
        (status = 200, body = IntegrationView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "bridle.yaml cannot be written, or no upstream pool", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn disable(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(namespace): ApiPath<String>,
) -> Result<axum::Json<IntegrationView>, ApiError> {
    switch(s, admin, namespace, false).await
}

async fn switch(
    s: AdminState,
    admin: AdminActor,
    namespace: String,
    enabled: bool,
) -> Result<axum::Json<IntegrationView>, ApiError> {
    // The state before is read under the lock too, so the audit entry says what this switch
    // changed, not what a concurrent one had already.
    let _one_change_at_a_time = s.integration_changes.lock().await;
    let before = report(&s, &namespace).await?;
    let pool = pool_of(&s)?;
    let file = s.ctx.agents.file().to_path_buf();
    let ns = namespace.clone();
    blocking(move || {
        rewrite(&file, |config| {
            match config.upstreams.get_mut(&ns) {
                Some(section) => section.enabled = enabled,
                None => return Err(()),
            }
            Ok(())
        })
        .map_err(|e| config_write_failed(&file, &ns, e))
    })
    .await?;
    let changed = pool
        .set_enabled(&namespace, enabled)
        .await
        .map_err(|detail| ApiError::Unavailable {
            code: "integrations_unavailable",
            detail,
        })?;
    let state = if enabled { "enabled" } else { "disabled" };
    tracing::info!(namespace = ?namespace, state, admin = %admin.identity.name, "upstream switched through the admin API");
    let entry = admin
        .entry(Kind::UpstreamChange)
        .subject(namespace.clone())
        .change(Change {
            before: Some(
                if before.enabled {
                    "enabled"
                } else {
                    "disabled"
                }
                .into(),
            ),
            after: Some(state.into()),
            digest: None,
        })
        .detail(if changed {
            format!("upstream {state}")
        } else {
            format!("upstream was {state} already")
        });
    let ctx = s.ctx.clone();
    blocking(move || record(&ctx, entry, "the change")).await?;
    report(&s, &namespace).await.map(axum::Json)
}
