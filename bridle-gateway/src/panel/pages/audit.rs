//! The audit log: filters by source (user, agent, vendor, system), actor, agent, project, kind
//! and time; pages through the API's cursor; verifies the hash chain; exports what the filters
//! select as JSON Lines (the API's export, passed through). The first page, newest first, is
//! a live tail: new entries matching the filters arrive over SSE (`live`).

use axum::extract::{Extension, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};

use super::PanelQuery;
use crate::panel::Panel;
use crate::panel::session::SignedIn;
use crate::panel::view::{Page, PanelError};

/// The filters, passed to the API as they are (empty ones left out).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct AuditFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    actor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    order: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cursor: Option<String>,
}

impl AuditFilter {
    fn cleaned(self) -> Self {
        let keep = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        Self {
            source: keep(self.source),
            actor: keep(self.actor),
            agent: keep(self.agent),
            project: keep(self.project),
            kind: keep(self.kind),
            from: keep(self.from),
            to: keep(self.to),
            order: keep(self.order).or(Some("desc".into())),
            cursor: keep(self.cursor),
        }
    }

    pub(crate) fn query(&self) -> String {
        serde_urlencoded::to_string(self).unwrap_or_default()
    }

    /// The filters a live tail follows: newest first, from the top.
    pub(crate) fn for_tail(self) -> Self {
        Self {
            cursor: None,
            order: Some("desc".into()),
            ..self.cleaned()
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct EntryPage {
    pub(crate) items: Vec<serde_json::Value>,
    pub(crate) next_cursor: Option<String>,
}

/// The table rows' context for these entries.
pub(crate) fn rows_of(items: &[serde_json::Value]) -> Vec<serde_json::Value> {
    items
        .iter()
        .map(|e| {
            serde_json::json!({
                "e": e,
                "source": e["source"]["type"],
                "who": who_acted(&e["source"]),
                "tool": e["tool"]["name"].as_str().or(e["tool"]["tool"].as_str()),
            })
        })
        .collect()
}

/// Who acted, in a few words, from an entry's `source` object (`type` plus its fields).
fn who_acted(source: &serde_json::Value) -> String {
    let Some(map) = source.as_object() else {
        return String::new();
    };
    map.iter()
        .filter(|(k, _)| k.as_str() != "type")
        .filter_map(|(k, v)| match v {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(format!("{k}: {s}")),
            other => Some(format!("{k}: {other}")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `GET /audit`.
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelQuery(filter): PanelQuery<AuditFilter>,
) -> Result<Page, PanelError> {
    let filter = filter.cleaned();
    let page: EntryPage = panel
        .api
        .get(&who, &format!("/audit?{}&limit=100", filter.query()))
        .await?;
    let rows = rows_of(&page.items);
    let next = page.next_cursor.as_ref().map(|c| {
        let mut f = filter.clone();
        f.cursor = Some(c.clone());
        f.query()
    });
    let mut export = filter.clone();
    export.cursor = None;
    export.order = None;
    // The first page, newest first, follows new entries live.
    let live = filter.cursor.is_none() && filter.order.as_deref() == Some("desc");
    let newest = page
        .items
        .iter()
        .filter_map(|e| e["id"].as_u64())
        .max()
        .unwrap_or(0);
    let tail = format!("{}&after={newest}", filter.clone().for_tail().query());
    panel.page(
        &who,
        "audit.html",
        "audit",
        context! {
            rows => Serde(rows),
            filter => Serde(&filter),
            next => next,
            export => export.query(),
            live => live,
            tail => tail,
        },
    )
}

/// `GET /audit/verify`: walks the hash chain.
pub(crate) async fn verify(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
) -> Result<Page, PanelError> {
    let report: serde_json::Value = panel.api.get(&who, "/audit/verify").await?;
    panel.page(
        &who,
        "audit_verify.html",
        "audit",
        context! { r => Serde(report) },
    )
}

/// `GET /audit/export`: the API's JSON Lines export of what the filters select, passed on as
/// the API sends it (a long log's export is far larger than any page the panel reads whole).
pub(crate) async fn export(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelQuery(filter): PanelQuery<AuditFilter>,
) -> Result<Response, PanelError> {
    let mut filter = filter.cleaned();
    filter.cursor = None;
    filter.order = None;
    let body = panel
        .api
        .stream(&who, &format!("/audit/export?{}", filter.query()))
        .await?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-ndjson"),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"bridle-audit.jsonl\""),
            ),
        ],
        body,
    )
        .into_response())
}
