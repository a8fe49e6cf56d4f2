//! The audit log over the API: query by time, source, actor, agent, project and kind with a
//! cursor; export every matching entry as JSON Lines; verify the hash chain.
//!
//! Reads go to the log's own reader connection, so a query never waits for the writer thread.
//! Entries hold names, revisions, digests and codes, never a secret or an argument value, so
//! they are returned as stored.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ProblemDetails};
use super::page::ApiQuery;
use super::{AdminState, blocking, path};
use crate::audit::{AuditLog, AuditQuery, Kind, SourceType, StoredEntry, VerifyReport};

/// The media type of an export.
pub const JSONL: &str = "application/x-ndjson";

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/audit"), get(query))
        .route(&path("/audit/export"), get(export))
        .route(&path("/audit/verify"), get(verify))
}

/// The filters of a query or an export (they combine with AND).
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// Entries at or after this time (RFC 3339).
    pub from: Option<String>,
    /// Entries before this time (RFC 3339).
    pub to: Option<String>,
    /// `user`, `agent`, `vendor` or `system`.
    pub source: Option<String>,
    /// The admin, agent, feed or component that acted.
    pub actor: Option<String>,
    /// Entries concerning this agent (its own actions, and admins' actions on it).
    pub agent: Option<String>,
    /// Entries of this project.
    pub project: Option<String>,
    /// The kind (`tool_call`, `proposal`, `approval`, `secret_rotate`, ...).
    pub kind: Option<String>,
    /// `asc` (oldest first, the default) or `desc`.
    pub order: Option<String>,
    /// Page size (1 to 1000, default 100); ignored by the export.
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

fn time(field: &str, v: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    v.filter(|v| !v.is_empty())
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| ApiError::BadQuery(format!("`{field}` is not an RFC 3339 time: {e}")))
        })
        .transpose()
}

impl AuditParams {
    /// The log query these parameters make, or 400 `invalid_query`.
    pub fn to_query(&self) -> Result<AuditQuery, ApiError> {
        let mut q = AuditQuery::all().between(
            time("from", self.from.as_deref())?,
            time("to", self.to.as_deref())?,
        );
        if let Some(s) = self.source.as_deref().filter(|s| !s.is_empty()) {
            q = q.source(s.parse::<SourceType>().map_err(|()| {
                ApiError::BadQuery(format!(
                    "`source` must be user, agent, vendor or system, not `{s}`"
                ))
            })?);
        }
        if let Some(k) = self.kind.as_deref().filter(|s| !s.is_empty()) {
            q = q.kind(
                k.parse::<Kind>()
                    .map_err(|()| ApiError::BadQuery(format!("`kind` `{k}` is not a kind")))?,
            );
        }
        if let Some(a) = self.actor.as_deref().filter(|s| !s.is_empty()) {
            q = q.actor(a);
        }
        if let Some(a) = self.agent.as_deref().filter(|s| !s.is_empty()) {
            q = q.agent(a);
        }
        if let Some(p) = self.project.as_deref().filter(|s| !s.is_empty()) {
            q = q.project(p);
        }
        match self.order.as_deref() {
            None | Some("" | "asc") => {}
            Some("desc") => q = q.newest_first(),
            Some(other) => {
                return Err(ApiError::BadQuery(format!(
                    "`order` must be asc or desc, not `{other}`"
                )));
            }
        }
        if let Some(limit) = self.limit {
            if limit == 0 || limit > crate::audit::MAX_PAGE {
                return Err(ApiError::BadQuery(format!(
                    "`limit` must be between 1 and {}",
                    crate::audit::MAX_PAGE
                )));
            }
            q = q.limit(limit);
        }
        if let Some(c) = self.cursor.as_deref().filter(|s| !s.is_empty()) {
            q = q.after(c);
        }
        Ok(q)
    }
}

/// A page of audit entries.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditEntryPage {
    /// The entries in the asked order: `id`, `at`, `source` (`type` and who), `kind`,
    /// `project`, `subject`, `agent`, `change`, `outcome`, `tool`, `detail`, `prev_hash`,
    /// `hash`.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<StoredEntry>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// What verifying the chain found.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditVerifyView {
    /// Whether every entry from the anchor to the head is intact.
    pub intact: bool,
    /// Entries checked before the first break (all when intact).
    pub checked: u64,
    /// The id the chain starts after (0, or the last entry retention removed).
    pub anchor_id: u64,
    /// The last id written.
    pub head_id: u64,
    /// The entry at fault: the edited or inserted one, or the first missing id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_break_id: Option<u64>,
    /// `edited`, `inserted` or `deleted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_break_kind: Option<String>,
}

impl From<VerifyReport> for AuditVerifyView {
    fn from(r: VerifyReport) -> Self {
        Self {
            intact: r.is_intact(),
            checked: r.checked,
            anchor_id: r.anchor_id,
            head_id: r.head_id,
            first_break_id: r.first_break.map(|b| b.id),
            first_break_kind: r.first_break.and_then(|b| {
                serde_json::to_value(b.kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
            }),
        }
    }
}

/// The gateway's log, or 503 `audit_log_off`.
pub(crate) fn log_of(s: &AdminState) -> Result<AuditLog, ApiError> {
    s.ctx.audit().cloned().ok_or_else(|| ApiError::Unavailable {
        code: "audit_log_off",
        detail: "this gateway runs without an audit log (`audit.enabled: false`)".into(),
    })
}

/// One page of audit entries.
#[utoipa::path(get, path = "/admin/api/v1/audit", tag = "audit",
    params(AuditParams),
    responses(
        (status = 200, body = AuditEntryPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no audit log", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn query(
    State(s): State<AdminState>,
    ApiQuery(p): ApiQuery<AuditParams>,
) -> Result<axum::Json<AuditEntryPage>, ApiError> {
    let q = p.to_query()?;
    let log = log_of(&s)?;
    let page = blocking(move || {
        // What is queued is part of the record: write it first, so a query sees every call
        // that returned before it.
        log.flush()?;
        Ok(log.query(&q)?)
    })
    .await?;
    Ok(axum::Json(AuditEntryPage {
        items: page.entries,
        next_cursor: page.next_cursor,
    }))
}

/// Every matching entry as JSON Lines (one entry object a line), oldest first.
///
/// The answer is streamed a page of the log (1000 entries) at a time, each page read when the
/// client has taken the one before: a log of millions of entries is never held in memory, and
/// the log's reader is never kept from other queries for the length of a download. The first
/// page is read before answering, so a log that cannot be read is a problem as usual; one that
/// fails later cuts the answer short (the connection ends without the body's proper end, which
/// an HTTP client reports), and the gateway's log says why.
#[utoipa::path(get, path = "/admin/api/v1/audit/export", tag = "audit",
    params(AuditParams),
    responses(
        (status = 200, description = "One entry a line", body = String, content_type = "application/x-ndjson"),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no audit log", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn export(
    State(s): State<AdminState>,
    ApiQuery(p): ApiQuery<AuditParams>,
) -> Result<Response, ApiError> {
    let q = p.to_query()?.limit(crate::audit::MAX_PAGE);
    let log = log_of(&s)?;
    let first = {
        let (log, q) = (log.clone(), q.clone());
        blocking(move || {
            log.flush()?;
            Ok(log.query(&q)?)
        })
        .await?
    };
    let pages = futures::stream::unfold((log, q, Next::Page(first)), |(log, q, next)| async move {
        let page = match next {
            Next::Done => return None,
            Next::Page(page) => page,
            Next::After(cursor) => {
                let (l, after) = (log.clone(), q.clone().after(cursor));
                match blocking(move || Ok(l.query(&after)?)).await {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::error!(error = %e, "the audit export failed part-way; the answer is cut short");
                        let cut = std::io::Error::other("the audit log failed part-way");
                        return Some((Err(cut), (log, q, Next::Done)));
                    }
                }
            }
        };
        let lines = jsonl(&page.entries);
        let next = page.next_cursor.map_or(Next::Done, Next::After);
        Some((Ok(lines), (log, q, next)))
    });
    Ok((
        [(header::CONTENT_TYPE, HeaderValue::from_static(JSONL))],
        axum::body::Body::from_stream(pages),
    )
        .into_response())
}

/// What an export sends next: a page read already, the page after a cursor, or nothing more.
enum Next {
    Page(crate::audit::AuditPage),
    After(String),
    Done,
}

/// Entries as JSON Lines.
fn jsonl(entries: &[StoredEntry]) -> axum::body::Bytes {
    let mut out = Vec::new();
    for e in entries {
        // A stored entry is plain data; encoding it cannot fail.
        if serde_json::to_writer(&mut out, e).is_ok() {
            out.push(b'\n');
        }
    }
    out.into()
}

/// Walks the hash chain and reports the first edited, inserted or deleted entry.
#[utoipa::path(get, path = "/admin/api/v1/audit/verify", tag = "audit",
    responses(
        (status = 200, body = AuditVerifyView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no audit log", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn verify(State(s): State<AdminState>) -> Result<axum::Json<AuditVerifyView>, ApiError> {
    let log = log_of(&s)?;
    let report = blocking(move || {
        log.flush()?;
        Ok(log.verify()?)
    })
    .await?;
    Ok(axum::Json(report.into()))
}
