//! Live lists over Server-Sent Events, for htmx's SSE extension (vendored, see `assets`):
//!
//! - `GET /sessions/live`: the admin API's session stream (`/sessions/events`), read in
//!   process; each `connect`, `disconnect`, `call` or `lagged` becomes a `changed` event, on
//!   which the sessions and agents lists fetch their rows partial again (so the rows are drawn
//!   by the one template that draws the page);
//! - `GET /audit/tail?after=ID&<filters>`: the audit log's newest entries matching the page's
//!   filters, checked every [`TAIL_EVERY`] through the API's own query; each batch of new
//!   entries is one `entries` event carrying their table rows, newest first, with the newest id
//!   as the event id, so a reconnecting browser (`Last-Event-ID`) gets no row twice.
//!
//! Both streams end when the browser's panel session ends (checked every
//! [`SESSION_CHECK`], without counting as use, so a stream does not keep an idle session
//! open) and when the server shuts down (the API's stream ends, or the tail's API calls stop).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use minijinja::context;
use minijinja::value::Serde;
use serde::Deserialize;

use super::PanelQuery;
use super::audit::{AuditFilter, EntryPage, rows_of};
use crate::panel::Panel;
use crate::panel::guard::live_session;
use crate::panel::session::SignedIn;
use crate::panel::view::PanelError;

/// How often a live stream checks that its panel session is still alive.
pub(crate) const SESSION_CHECK: Duration = Duration::from_secs(5);

/// How often the audit tail asks the API for newer entries.
pub(crate) const TAIL_EVERY: Duration = Duration::from_secs(1);

/// The most entries one tail check reads; more than that in one interval are announced as
/// such, and the page offers a reload.
const TAIL_BATCH: usize = 100;

/// Completes when the panel session `id` has ended.
pub(crate) async fn signed_out(panel: Panel, id: String) {
    let mut tick = tokio::time::interval(SESSION_CHECK);
    loop {
        tick.tick().await;
        if !panel.sessions.is_alive(&id) {
            tracing::debug!("panel live stream ends with its session");
            return;
        }
    }
}

/// The id of the live session the request came with (found again without counting as use:
/// the session check before the handler already counted it).
pub(crate) fn session_id(panel: &Panel, headers: &HeaderMap) -> Result<String, PanelError> {
    live_session(panel, headers, true)
        .map(|(id, _)| id)
        .ok_or(PanelError::SessionEnded)
}

/// `GET /sessions/live`.
pub(crate) async fn sessions(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    headers: HeaderMap,
) -> Result<Response, PanelError> {
    let id = session_id(&panel, &headers)?;
    let body = panel.api.stream(&who, "/sessions/events").await?;
    let events = sse_stream::SseStream::new(body).filter_map(|item| async move {
        match item {
            Ok(sse) => match sse.event.as_deref() {
                Some("ready") => Some(Ok::<_, Infallible>(
                    Event::default().event("ready").data("ready"),
                )),
                Some(kind @ ("connect" | "disconnect" | "call" | "lagged")) => {
                    Some(Ok(Event::default().event("changed").data(kind)))
                }
                _ => None,
            },
            Err(e) => {
                tracing::debug!(error = %e, "panel could not read the session stream");
                None
            }
        }
    });
    let stream = events.take_until(signed_out(panel.clone(), id));
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Where the tail starts.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TailStart {
    #[serde(default)]
    after: Option<u64>,
}

struct Tail {
    panel: Panel,
    who: SignedIn,
    query: String,
    last: u64,
    tick: tokio::time::Interval,
}

impl Tail {
    /// The next batch of new entries as an event, or `None` when the tail must end.
    async fn next(&mut self) -> Option<Event> {
        loop {
            self.tick.tick().await;
            let page: EntryPage = match self
                .panel
                .api
                .get(&self.who, &format!("/audit?{}", self.query))
                .await
            {
                Ok(page) => page,
                Err(p) if p.status == 401 => return None,
                Err(p) => {
                    tracing::debug!(code = %p.code, "panel audit tail: the query failed");
                    continue;
                }
            };
            let fresh: Vec<serde_json::Value> = page
                .items
                .into_iter()
                .filter(|e| e["id"].as_u64().is_some_and(|id| id > self.last))
                .collect();
            let Some(newest) = fresh.iter().filter_map(|e| e["id"].as_u64()).max() else {
                continue;
            };
            let missed = fresh.len() >= TAIL_BATCH;
            self.last = newest;
            let html = match self.panel.partial(
                &self.who,
                "partials/audit_rows.html",
                context! { rows => Serde(rows_of(&fresh)), missed => missed },
            ) {
                Ok(page) => page.html,
                Err(_) => continue,
            };
            return Some(
                Event::default()
                    .event("entries")
                    .id(newest.to_string())
                    .data(html),
            );
        }
    }
}

/// `GET /audit/tail`.
pub(crate) async fn audit_tail(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelQuery(filter): PanelQuery<AuditFilter>,
    PanelQuery(start): PanelQuery<TailStart>,
    headers: HeaderMap,
) -> Result<Response, PanelError> {
    let id = session_id(&panel, &headers)?;
    let resumed = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let last = start.after.unwrap_or(0).max(resumed.unwrap_or(0));
    let query = format!("{}&limit={TAIL_BATCH}", filter.for_tail().query());
    // Check the query once now, so a bad filter is a clear error rather than a silent stream.
    panel
        .api
        .get::<EntryPage>(&who, &format!("/audit?{query}"))
        .await?;
    let mut tick = tokio::time::interval(TAIL_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let tail = Tail {
        panel: panel.clone(),
        who,
        query,
        last,
        tick,
    };
    let stream = futures::stream::unfold(tail, |mut tail| async move {
        let event = tail.next().await?;
        Some((Ok::<_, Infallible>(event), tail))
    })
    .take_until(signed_out(panel, id));
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}
