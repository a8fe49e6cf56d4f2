//! The review queue: what agents and vendor feeds proposed, with provenance and the diff each
//! would make; approve, or reject with a reason. From the list, htmx replaces the decided row
//! in place; without script the form posts and the list reloads with a notice.
//!
//! Bulk actions: the pending rows' checkboxes belong to one form that approves or rejects (with
//! one reason) every selected proposal, one API call each, in order. One that fails (a conflict
//! with what an earlier one changed, one already decided) does not stop the rest: the answer is
//! the list again with each selected proposal's own outcome.

use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};

use super::{Notice, PanelBody, PanelForm, PanelPath, PanelQuery};
use crate::admin::queue::{ProposalDetail, ProposalPage, ProposalView};
use crate::panel::Panel;
use crate::panel::guard::is_htmx;
use crate::panel::session::SignedIn;
use crate::panel::view::{PanelError, diff_lines, see_other};

/// The list's filters (passed to the API as they are).
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct QueueFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
}

impl QueueFilter {
    fn cleaned(self) -> Self {
        let keep = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        Self {
            status: keep(self.status),
            project: keep(self.project),
            source: keep(self.source),
        }
    }
}

/// The reject form.
#[derive(Debug, Deserialize)]
pub(crate) struct RejectForm {
    #[serde(default)]
    reason: String,
}

#[derive(Serialize)]
struct RejectBody<'a> {
    reason: &'a str,
}

/// `GET /queue`.
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelQuery(filter): PanelQuery<QueueFilter>,
    notice: Notice,
) -> Result<Response, PanelError> {
    list_page(&panel, &who, filter.cleaned(), notice.text(), None).await
}

/// The list, with a bulk action's outcomes above it when there are some.
async fn list_page(
    panel: &Panel,
    who: &SignedIn,
    filter: QueueFilter,
    notice: Option<String>,
    outcomes: Option<Vec<Outcome>>,
) -> Result<Response, PanelError> {
    let mut query = serde_urlencoded::to_string(&filter).unwrap_or_default();
    if !query.is_empty() {
        query.push('&');
    }
    let page: ProposalPage = panel
        .api
        .get(who, &format!("/queue?{query}limit=500"))
        .await?;
    Ok(panel
        .page(
            who,
            "queue.html",
            "queue",
            context! {
                proposals => Serde(page.items),
                more => page.next_cursor.is_some(),
                filter => Serde(filter),
                notice => notice,
                outcomes => Serde(outcomes),
            },
        )?
        .into_response())
}

/// The most proposals one bulk action decides.
pub(crate) const MAX_BULK: usize = 200;

/// One selected proposal's outcome in a bulk action.
#[derive(Debug, Serialize)]
struct Outcome {
    id: u64,
    ok: bool,
    /// `approved` / `rejected` (with the revision an approval made), or the API's code.
    code: String,
    detail: String,
    applied_revision: Option<u64>,
}

/// The bulk form: `action` (`approve` or `reject`), `reason` (for a rejection) and any number
/// of `ids`, urlencoded as a browser sends checkboxes (the key repeated).
#[derive(Debug, Default)]
struct BulkForm {
    action: String,
    reason: String,
    ids: Vec<u64>,
    filter: QueueFilter,
}

impl BulkForm {
    fn parse(body: &[u8]) -> Result<Self, PanelError> {
        let mut form = BulkForm::default();
        for (key, value) in form_urlencoded::parse(body) {
            match key.as_ref() {
                "action" => form.action = value.into_owned(),
                "reason" => form.reason = value.trim().to_string(),
                "ids" => {
                    let id = value.trim().parse::<u64>().map_err(|_| {
                        PanelError::BadForm(format!(
                            "`{}` is not a proposal number; nothing was decided",
                            value.chars().take(40).collect::<String>()
                        ))
                    })?;
                    if !form.ids.contains(&id) {
                        form.ids.push(id);
                    }
                }
                "status" => form.filter.status = Some(value.into_owned()),
                "project" => form.filter.project = Some(value.into_owned()),
                "source" => form.filter.source = Some(value.into_owned()),
                _ => {}
            }
        }
        if form.ids.is_empty() {
            return Err(PanelError::BadForm(
                "select at least one proposal; nothing was decided".into(),
            ));
        }
        if form.ids.len() > MAX_BULK {
            return Err(PanelError::BadForm(format!(
                "at most {MAX_BULK} proposals at once; nothing was decided"
            )));
        }
        match form.action.as_str() {
            "approve" => {}
            "reject" if form.reason.is_empty() => {
                return Err(PanelError::BadForm(
                    "a rejection says why: give a reason; nothing was decided".into(),
                ));
            }
            "reject" => {}
            other => {
                return Err(PanelError::BadForm(format!(
                    "`{}` is not a bulk action (approve or reject); nothing was decided",
                    other.chars().take(40).collect::<String>()
                )));
            }
        }
        Ok(form)
    }
}

/// `POST /queue/bulk`: approves or rejects every selected proposal, each on its own.
pub(crate) async fn bulk(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelBody(body): PanelBody,
) -> Result<Response, PanelError> {
    let form = BulkForm::parse(&body)?;
    let mut outcomes = Vec::with_capacity(form.ids.len());
    for id in &form.ids {
        let result: Result<ProposalView, _> = if form.action == "approve" {
            panel
                .api
                .post_empty(&who, &format!("/queue/{id}/approve"))
                .await
        } else {
            panel
                .api
                .call(
                    &who,
                    axum::http::Method::POST,
                    &format!("/queue/{id}/reject"),
                    &RejectBody {
                        reason: &form.reason,
                    },
                )
                .await
        };
        outcomes.push(match result {
            Ok(view) => Outcome {
                id: *id,
                ok: true,
                code: view.status.clone(),
                detail: String::new(),
                applied_revision: view.applied_revision,
            },
            // The credential no longer opens the API: every further call would fail alike.
            Err(p) if p.status == 401 => return Err(PanelError::SessionEnded),
            Err(p) => Outcome {
                id: *id,
                ok: false,
                code: p.code,
                detail: p.detail,
                applied_revision: None,
            },
        });
    }
    let decided = outcomes.iter().filter(|o| o.ok).count();
    tracing::info!(
        admin = %who.admin,
        action = ?form.action,
        selected = outcomes.len(),
        decided,
        "panel bulk decision"
    );
    list_page(&panel, &who, form.filter.cleaned(), None, Some(outcomes)).await
}

/// `GET /queue/{id}`.
pub(crate) async fn show(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(id): PanelPath<u64>,
) -> Result<Response, PanelError> {
    let detail: ProposalDetail = panel.api.get(&who, &format!("/queue/{id}")).await?;
    let change = serde_json::to_string_pretty(&detail.proposal.change).unwrap_or_default();
    Ok(panel
        .page(
            &who,
            "proposal.html",
            "queue",
            context! {
                p => Serde(detail.proposal),
                change => change,
                diff => Serde(detail.diff.as_deref().map(diff_lines)),
                would_refuse => detail.would_refuse,
            },
        )?
        .into_response())
}

fn decided(
    panel: &Panel,
    who: &SignedIn,
    headers: &HeaderMap,
    view: ProposalView,
    notice: &str,
) -> Result<Response, PanelError> {
    if is_htmx(headers) {
        return Ok(panel
            .partial(
                who,
                "partials/proposal_row.html",
                context! { p => Serde(view) },
            )?
            .into_response());
    }
    let revision = view
        .applied_revision
        .map(|r| format!("&revision={r}"))
        .unwrap_or_default();
    Ok(see_other(&panel.url(&format!(
        "/queue?notice={notice}&id={}{revision}",
        view.id
    ))))
}

/// `POST /queue/{id}/approve`.
pub(crate) async fn approve(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(id): PanelPath<u64>,
    headers: HeaderMap,
) -> Result<Response, PanelError> {
    let view: ProposalView = panel
        .api
        .post_empty(&who, &format!("/queue/{id}/approve"))
        .await?;
    decided(&panel, &who, &headers, view, "approved")
}

/// `POST /queue/{id}/reject`.
pub(crate) async fn reject(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(id): PanelPath<u64>,
    headers: HeaderMap,
    PanelForm(form): PanelForm<RejectForm>,
) -> Result<Response, PanelError> {
    let reason = form.reason.trim();
    if reason.is_empty() {
        return Err(PanelError::BadForm(
            "a rejection says why: give a reason".into(),
        ));
    }
    let view: ProposalView = panel
        .api
        .call(
            &who,
            axum::http::Method::POST,
            &format!("/queue/{id}/reject"),
            &RejectBody { reason },
        )
        .await?;
    decided(&panel, &who, &headers, view, "rejected")
}
