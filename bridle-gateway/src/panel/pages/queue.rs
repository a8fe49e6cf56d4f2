//! The review queue: what agents and vendor feeds proposed, with provenance and the diff each
//! would make; approve, or reject with a reason. From the list, htmx replaces the decided row
//! in place; without script the form posts and the list reloads with a notice.

use axum::extract::{Extension, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};

use super::{Notice, PanelForm};
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
    Query(filter): Query<QueueFilter>,
    Query(notice): Query<Notice>,
) -> Result<Response, PanelError> {
    let filter = filter.cleaned();
    let mut query = serde_urlencoded::to_string(&filter).unwrap_or_default();
    if !query.is_empty() {
        query.push('&');
    }
    let page: ProposalPage = panel
        .api
        .get(&who, &format!("/queue?{query}limit=500"))
        .await?;
    Ok(panel
        .page(
            &who,
            "queue.html",
            "queue",
            context! {
                proposals => Serde(page.items),
                more => page.next_cursor.is_some(),
                filter => Serde(filter),
                notice => notice.text(),
            },
        )?
        .into_response())
}

/// `GET /queue/{id}`.
pub(crate) async fn show(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    Path(id): Path<u64>,
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
    Path(id): Path<u64>,
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
    Path(id): Path<u64>,
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
