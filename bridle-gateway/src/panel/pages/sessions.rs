//! Sessions: the agents' live MCP sessions (client, protocol, when seen, requests), refreshed
//! by htmx fetching the list partial again on each `changed` event of the live stream
//! (`live::sessions`), and ended by an admin.

use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};

use super::{Notice, PanelPath, PanelQuery};
use crate::panel::Panel;
use crate::panel::api::seg;
use crate::panel::guard::is_htmx;
use crate::panel::session::SignedIn;
use crate::panel::view::{PanelError, see_other};

/// A session as the API describes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct SessionView {
    id: String,
    agent: String,
    agent_type: Option<String>,
    client_name: Option<String>,
    client_version: Option<String>,
    generation: serde_json::Value,
    protocol_version: Option<String>,
    started_ms: u64,
    last_seen_ms: u64,
    requests: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SessionPage {
    items: Vec<SessionView>,
    next_cursor: Option<String>,
}

/// The list's filter.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SessionFilter {
    #[serde(default)]
    agent: Option<String>,
}

fn rfc3339(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX))
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// `GET /sessions` (the table alone for htmx's refresh).
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelQuery(filter): PanelQuery<SessionFilter>,
    notice: Notice,
    headers: HeaderMap,
) -> Result<Response, PanelError> {
    let agent = filter.agent.filter(|a| !a.trim().is_empty());
    let query = agent
        .as_deref()
        .map(|a| serde_urlencoded::to_string([("agent", a)]).unwrap_or_default() + "&")
        .unwrap_or_default();
    let page: SessionPage = panel
        .api
        .get(&who, &format!("/sessions?{query}limit=500"))
        .await?;
    let rows: Vec<_> = page
        .items
        .iter()
        .map(|s| {
            serde_json::json!({
                "s": s,
                "started": rfc3339(s.started_ms),
                "last_seen": rfc3339(s.last_seen_ms),
            })
        })
        .collect();
    let ctx = context! {
        rows => Serde(rows),
        more => page.next_cursor.is_some(),
        agent => agent,
        notice => notice.text(),
    };
    if is_htmx(&headers) {
        return Ok(panel
            .partial(&who, "partials/session_rows.html", ctx)?
            .into_response());
    }
    Ok(panel
        .page(&who, "sessions.html", "sessions", ctx)?
        .into_response())
}

/// `POST /sessions/{id}/end`.
pub(crate) async fn end(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(id): PanelPath<String>,
) -> Result<Response, PanelError> {
    panel
        .api
        .post_empty::<serde_json::Value>(&who, &format!("/sessions/{}/end", seg(&id)))
        .await?;
    Ok(see_other(&panel.url("/sessions?notice=session_ended")))
}
