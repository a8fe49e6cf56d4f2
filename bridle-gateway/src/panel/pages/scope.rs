//! Scope tickets: an agent asked a person to widen what it may do; approve or deny, with an
//! optional note the agent sees.

use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};

use super::{Notice, PanelForm, PanelPath, PanelQuery};
use crate::admin::scope::{TicketPage, TicketView};
use crate::panel::Panel;
use crate::panel::guard::is_htmx;
use crate::panel::session::SignedIn;
use crate::panel::view::{PanelError, see_other};

/// The list's filter.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TicketFilter {
    #[serde(default)]
    status: Option<String>,
}

/// A decision's note.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DecideForm {
    #[serde(default)]
    note: String,
}

#[derive(Serialize)]
struct DecideBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
}

/// `GET /scope`.
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelQuery(filter): PanelQuery<TicketFilter>,
    notice: Notice,
) -> Result<Response, PanelError> {
    let status = filter.status.filter(|s| !s.trim().is_empty());
    let query = status
        .as_deref()
        .map(|s| serde_urlencoded::to_string([("status", s)]).unwrap_or_default() + "&")
        .unwrap_or_default();
    let page: TicketPage = panel
        .api
        .get(&who, &format!("/scope-tickets?{query}limit=500"))
        .await?;
    Ok(panel
        .page(
            &who,
            "scope.html",
            "scope",
            context! {
                tickets => Serde(page.items),
                more => page.next_cursor.is_some(),
                status => status,
                notice => notice.text(),
            },
        )?
        .into_response())
}

async fn decide(
    panel: Panel,
    who: SignedIn,
    headers: HeaderMap,
    id: u64,
    verb: &str,
    note: &str,
) -> Result<Response, PanelError> {
    let note = note.trim();
    let body = DecideBody {
        note: (!note.is_empty()).then_some(note),
    };
    let view: TicketView = panel
        .api
        .call(
            &who,
            axum::http::Method::POST,
            &format!("/scope-tickets/{id}/{verb}"),
            &body,
        )
        .await?;
    if is_htmx(&headers) {
        return Ok(panel
            .partial(
                &who,
                "partials/ticket_row.html",
                context! { t => Serde(view) },
            )?
            .into_response());
    }
    let notice = if verb == "approve" {
        "ticket_approved"
    } else {
        "ticket_denied"
    };
    Ok(see_other(
        &panel.url(&format!("/scope?notice={notice}&id={}", view.id)),
    ))
}

/// `POST /scope/{id}/approve`.
pub(crate) async fn approve(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(id): PanelPath<u64>,
    headers: HeaderMap,
    PanelForm(form): PanelForm<DecideForm>,
) -> Result<Response, PanelError> {
    decide(panel, who, headers, id, "approve", &form.note).await
}

/// `POST /scope/{id}/deny`.
pub(crate) async fn deny(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(id): PanelPath<u64>,
    headers: HeaderMap,
    PanelForm(form): PanelForm<DecideForm>,
) -> Result<Response, PanelError> {
    decide(panel, who, headers, id, "deny", &form.note).await
}
