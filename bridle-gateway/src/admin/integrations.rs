//! Integrations: each upstream MCP server's status, from the gateway's upstream pool.
//!
//! Read-only for now: enabling, disabling and changing project mappings need the configuration
//! to be writable at run time, which the gateway does not do yet.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ProblemDetails};
use super::page::{ApiPath, ApiQuery, paginate};
use super::{AdminState, path};
use crate::upstreams::UpstreamReport;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/integrations"), get(list))
        .route(&path("/integrations/{namespace}"), get(get_one))
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
    reports(&s)
        .await
        .into_iter()
        .find(|r| r.namespace == namespace)
        .map(axum::Json)
        .ok_or_else(|| ApiError::NotFound {
            code: "unknown_integration",
            detail: format!("no upstream has namespace `{namespace}`"),
        })
}
