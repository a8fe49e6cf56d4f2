//! The review queue: what agents and vendor feeds proposed, with provenance, the diff each
//! would make, and an admin's approval or rejection.
//!
//! Approval goes through [`bridle_rules::RulesStore::approve`], whose immediate SQLite
//! transaction serializes deciders across threads and processes: when two admins approve the
//! same item at once, exactly one wins and the other gets 409 `already_decided`.

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use bridle_rules::{Proposal, ProposalStatus, QueueFilter};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::AdminActor;
use super::decision::decide_and_answer;
use super::error::{ApiError, ProblemDetails};
use super::page::{
    ApiJson, ApiPath, ApiQuery, DEFAULT_LIMIT, MAX_LIMIT, decode_cursor, encode_cursor,
    source_filter,
};
use super::projects::unified_diff;
use super::{AdminState, blame, blocking, load_stored, path};
use crate::audit::{Change, Kind};

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/queue"), get(list))
        .route(&path("/queue/{id}"), get(get_one))
        .route(&path("/queue/{id}/approve"), post(approve))
        .route(&path("/queue/{id}/reject"), post(reject))
}

/// Who proposed a change.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProposalOrigin {
    /// `agent` or `vendor`.
    pub source: String,
    /// The agent's name, or `vendor:<feed>`.
    pub proposed_by: String,
    /// The agent's session, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_session: Option<String>,
    /// The vendor document (URL or file), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<String>,
}

/// A queued change and where it stands.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProposalView {
    /// Its id.
    pub id: u64,
    /// The project.
    pub project: String,
    /// `pending`, `approved` or `rejected`.
    pub status: String,
    /// One line describing the change.
    pub summary: String,
    /// The change (`kind`: `guardrail`, `pattern`, `update_project`, with its fields).
    #[schema(value_type = Object)]
    pub change: serde_json::Value,
    /// Who proposed it.
    pub origin: ProposalOrigin,
    /// The revision it was based on, when the proposer gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_revision: Option<u64>,
    /// When it was queued (RFC 3339).
    pub created_at: String,
    /// Who decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// When.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
    /// The rejection reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision_note: Option<String>,
    /// The revision the approval produced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied_revision: Option<u64>,
}

impl From<Proposal> for ProposalView {
    fn from(p: Proposal) -> Self {
        Self {
            id: p.id,
            project: p.project,
            status: p.status.as_str().to_string(),
            summary: p.summary,
            // A ChangeRequest is plain data; encoding it cannot fail.
            change: serde_json::to_value(&p.change).unwrap_or_default(),
            origin: ProposalOrigin {
                source: p.origin.source.as_str().to_string(),
                proposed_by: p.origin.proposed_by,
                agent_session: p.origin.agent_session,
                source_ref: p.origin.source_ref,
            },
            base_revision: p.base_revision,
            created_at: p.created_at,
            decided_by: p.decided_by,
            decided_at: p.decided_at,
            decision_note: p.decision_note,
            applied_revision: p.applied_revision,
        }
    }
}

/// A queued change with the diff it would make to the document now.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProposalDetail {
    /// The proposal.
    #[serde(flatten)]
    pub proposal: ProposalView,
    /// For a pending proposal that applies cleanly: the unified diff of the document's YAML.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// For a pending proposal that would be refused now: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_refuse: Option<String>,
}

/// A page of proposals.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProposalPage {
    /// The proposals, oldest first.
    pub items: Vec<ProposalView>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Paging and filters of the queue.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct QueueQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// Only this project's proposals.
    pub project: Option<String>,
    /// `pending` (default), `approved`, `rejected` or `all`.
    pub status: Option<String>,
    /// Only proposals from this source (`agent`, `vendor`; `user` matches none); any other
    /// value is 400.
    pub source: Option<String>,
    /// Only proposals by this agent or feed (`proposed_by`).
    pub proposed_by: Option<String>,
}

/// Why a proposal is rejected.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RejectBody {
    /// The reason, shown to the proposer.
    pub reason: String,
}

/// Lists the queue (pending proposals by default).
#[utoipa::path(get, path = "/admin/api/v1/queue", tag = "queue",
    params(QueueQuery),
    responses(
        (status = 200, body = ProposalPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn list(
    State(s): State<AdminState>,
    ApiQuery(q): ApiQuery<QueueQuery>,
) -> Result<axum::Json<ProposalPage>, ApiError> {
    let status = match q.status.as_deref().unwrap_or("pending") {
        "all" => None,
        "pending" => Some(ProposalStatus::Pending),
        "approved" => Some(ProposalStatus::Approved),
        "rejected" => Some(ProposalStatus::Rejected),
        other => {
            return Err(ApiError::BadQuery(format!(
                "`status` must be pending, approved, rejected or all, not `{other}`"
            )));
        }
    };
    let source = source_filter(q.source.as_deref())?;
    // The page is filtered and cut by the store, which reads only its rows (the whole queue
    // and a query per proposal, for every page, before); `limit` and `cursor` are checked as
    // `paginate` checks them.
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::BadQuery(format!(
            "`limit` must be between 1 and {MAX_LIMIT}"
        )));
    }
    let after: Option<u64> =
        match q.cursor.as_deref().filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => Some(decode_cursor(c).ok_or_else(|| {
                ApiError::BadQuery("`cursor` is not one this API returned".into())
            })?),
        };
    let filter = QueueFilter {
        project: q.project.clone(),
        status,
        source,
        proposed_by: q.proposed_by.clone(),
    };
    let ctx = s.ctx.clone();
    let page = blocking(move || Ok(ctx.store.queue_page(&filter, after, limit)?)).await?;
    let next_cursor = page
        .more
        .then(|| page.items.last().map(|p| encode_cursor(&p.id)))
        .flatten();
    Ok(axum::Json(ProposalPage {
        items: page.items.into_iter().map(ProposalView::from).collect(),
        next_cursor,
    }))
}

/// One proposal, with the diff it would make now.
#[utoipa::path(get, path = "/admin/api/v1/queue/{id}", tag = "queue",
    params(("id" = u64, Path, description = "The proposal id")),
    responses(
        (status = 200, body = ProposalDetail),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`unreadable_record`: written by a newer build sharing the database; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn get_one(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(id): ApiPath<u64>,
) -> Result<axum::Json<ProposalDetail>, ApiError> {
    let ctx = s.ctx.clone();
    blocking(move || {
        let p = ctx.store.proposal(id)?;
        let (diff, would_refuse) = if p.status == ProposalStatus::Pending {
            let current = load_stored(&ctx.store, &p.project)?.document;
            match ctx.store.preview(id, &admin.actor()) {
                Ok(after) => (
                    Some(unified_diff(
                        &bridle_rules::to_yaml(&current)?,
                        &bridle_rules::to_yaml(&after)?,
                        &format!("{}@{}", p.project, current.revision),
                        &format!("{}@{}", p.project, after.revision),
                    )),
                    None,
                ),
                Err(e) => (None, Some(e.to_string())),
            }
        } else {
            (None, None)
        };
        Ok(axum::Json(ProposalDetail {
            proposal: p.into(),
            diff,
            would_refuse,
        }))
    })
    .await
}

/// Approves a pending proposal: the change goes into the document with its provenance.
#[utoipa::path(post, path = "/admin/api/v1/queue/{id}/approve", tag = "queue",
    params(("id" = u64, Path, description = "The proposal id")),
    responses(
        (status = 200, body = ProposalView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "already decided (another admin was first), or it no longer applies; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn approve(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(id): ApiPath<u64>,
) -> Result<axum::Json<ProposalView>, ApiError> {
    decide_and_answer(
        &s,
        admin,
        Kind::Approval,
        format!("proposal #{id}"),
        "the approval",
        move |ctx, actor| {
            ctx.store.approve(id, actor).map_err(|e| {
                // A document error is the stored document's, or the one the proposal makes.
                match ctx.store.proposal(id) {
                    Ok(p) => blame(&ctx.store, &p.project, e),
                    Err(_) => e.into(),
                }
            })
        },
        |p: &Proposal, entry| {
            let entry = entry.project(&p.project);
            match p.applied_revision {
                Some(after) => entry.change(Change::revisions(
                    after.saturating_sub(1).to_string(),
                    after.to_string(),
                )),
                None => entry,
            }
        },
    )
    .await
}

/// Rejects a pending proposal with a reason.
#[utoipa::path(post, path = "/admin/api/v1/queue/{id}/reject", tag = "queue",
    params(("id" = u64, Path, description = "The proposal id")),
    request_body = RejectBody,
    responses(
        (status = 200, body = ProposalView),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "already decided", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "no reason given", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn reject(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(id): ApiPath<u64>,
    ApiJson(body): ApiJson<RejectBody>,
) -> Result<axum::Json<ProposalView>, ApiError> {
    if body.reason.trim().is_empty() {
        return Err(ApiError::invalid("a rejection says why: give a `reason`"));
    }
    decide_and_answer(
        &s,
        admin,
        Kind::Rejection,
        format!("proposal #{id}"),
        "the rejection",
        move |ctx, actor| Ok(ctx.store.reject(id, actor, body.reason.trim())?),
        |p: &Proposal, entry| entry.project(&p.project),
    )
    .await
}
