//! Scope tickets: an agent asked a person to widen what it may do; an admin approves or denies.

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use bridle_rules::ScopeTicket;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::AdminActor;
use super::decision::decide_and_answer;
use super::error::{ApiError, ProblemDetails};
use super::page::{ApiPath, ApiQuery, OptionalJson, paginate};
use super::{AdminState, blocking, path};
use crate::audit::Kind;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/scope-tickets"), get(list))
        .route(&path("/scope-tickets/{id}"), get(get_one))
        .route(&path("/scope-tickets/{id}/approve"), post(approve))
        .route(&path("/scope-tickets/{id}/deny"), post(deny))
}

/// A scope-expansion request and its decision.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TicketView {
    /// Its id.
    pub id: u64,
    /// The project.
    pub project: String,
    /// The agent that asked.
    pub agent: String,
    /// The agent's session, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_session: Option<String>,
    /// What it wants to do.
    pub action: String,
    /// Why.
    pub reason: String,
    /// `pending`, `approved` or `denied`.
    pub status: String,
    /// When it asked (RFC 3339).
    pub created_at: String,
    /// Who decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// When.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
    /// The decider's note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl From<ScopeTicket> for TicketView {
    fn from(t: ScopeTicket) -> Self {
        Self {
            id: t.id,
            project: t.project,
            agent: t.agent,
            agent_session: t.agent_session,
            action: t.action,
            reason: t.reason,
            status: t.status,
            created_at: t.created_at,
            decided_by: t.decided_by,
            decided_at: t.decided_at,
            note: t.note,
        }
    }
}

/// A page of scope tickets.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TicketPage {
    /// The tickets, oldest first.
    pub items: Vec<TicketView>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Paging and filters of the tickets.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TicketQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// `pending` (default), `approved`, `denied` or `all`.
    pub status: Option<String>,
    /// Only this project's tickets.
    pub project: Option<String>,
    /// Only this agent's tickets.
    pub agent: Option<String>,
}

/// An optional note with a decision.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    /// Shown to the agent with the decision.
    pub note: Option<String>,
}

/// Lists scope tickets (pending ones by default).
#[utoipa::path(get, path = "/admin/api/v1/scope-tickets", tag = "scope",
    params(TicketQuery),
    responses(
        (status = 200, body = TicketPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn list(
    State(s): State<AdminState>,
    ApiQuery(q): ApiQuery<TicketQuery>,
) -> Result<axum::Json<TicketPage>, ApiError> {
    let status = match q.status.as_deref().unwrap_or("pending") {
        "all" => None,
        st @ ("pending" | "approved" | "denied") => Some(st.to_string()),
        other => {
            return Err(ApiError::BadQuery(format!(
                "`status` must be pending, approved, denied or all, not `{other}`"
            )));
        }
    };
    let ctx = s.ctx.clone();
    let include_decided = status.as_deref() != Some("pending");
    let all = blocking(move || Ok(ctx.store.scope_tickets(include_decided)?)).await?;
    let items: Vec<TicketView> = all
        .into_iter()
        .filter(|t| status.as_deref().is_none_or(|st| t.status == st))
        .filter(|t| q.project.as_deref().is_none_or(|p| t.project == p))
        .filter(|t| q.agent.as_deref().is_none_or(|a| t.agent == a))
        .map(TicketView::from)
        .collect();
    let page = paginate(items, |t| t.id, q.cursor.as_deref(), q.limit)?;
    Ok(axum::Json(TicketPage {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

/// One scope ticket.
#[utoipa::path(get, path = "/admin/api/v1/scope-tickets/{id}", tag = "scope",
    params(("id" = u64, Path, description = "The ticket id")),
    responses(
        (status = 200, body = TicketView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`unreadable_record`: written by a newer build sharing the database", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn get_one(
    State(s): State<AdminState>,
    ApiPath(id): ApiPath<u64>,
) -> Result<axum::Json<TicketView>, ApiError> {
    let ctx = s.ctx.clone();
    blocking(move || Ok(axum::Json(ctx.store.scope_ticket(id)?.into()))).await
}

async fn decide(
    s: AdminState,
    admin: AdminActor,
    id: u64,
    approve: bool,
    note: Option<String>,
) -> Result<axum::Json<TicketView>, ApiError> {
    let kind = if approve {
        Kind::Approval
    } else {
        Kind::Rejection
    };
    decide_and_answer(
        &s,
        admin,
        kind,
        format!("scope ticket #{id}"),
        "the decision",
        move |ctx, actor| {
            let note = note.filter(|n| !n.trim().is_empty());
            Ok(ctx
                .store
                .decide_scope(id, approve, actor, note.as_deref())?)
        },
        |t: &ScopeTicket, entry| entry.project(&t.project).about_agent(&t.agent),
    )
    .await
}

/// Approves a pending scope ticket.
#[utoipa::path(post, path = "/admin/api/v1/scope-tickets/{id}/approve", tag = "scope",
    params(("id" = u64, Path, description = "The ticket id")),
    request_body(content = Option<DecideBody>, description = "An optional note"),
    responses(
        (status = 200, body = TicketView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "already decided", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn approve(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(id): ApiPath<u64>,
    OptionalJson(body): OptionalJson<DecideBody>,
) -> Result<axum::Json<TicketView>, ApiError> {
    decide(s, admin, id, true, body.note).await
}

/// Denies a pending scope ticket.
#[utoipa::path(post, path = "/admin/api/v1/scope-tickets/{id}/deny", tag = "scope",
    params(("id" = u64, Path, description = "The ticket id")),
    request_body(content = Option<DecideBody>, description = "An optional note"),
    responses(
        (status = 200, body = TicketView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "already decided", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn deny(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(id): ApiPath<u64>,
    OptionalJson(body): OptionalJson<DecideBody>,
) -> Result<axum::Json<TicketView>, ApiError> {
    decide(s, admin, id, false, body.note).await
}
