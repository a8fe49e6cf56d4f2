//! The live session registry over the API: list and get sessions, end one (its next request is
//! refused), and a live stream (Server-Sent Events) of connects, disconnects and calls.
//!
//! The stream opens with a `ready` event once it is subscribed, so a client knows every event
//! after it will reach it; a slow client that falls behind gets a `lagged` event saying how many
//! it missed. Streams end when the admin API shuts down, and when the credential that opened
//! one no longer opens the API (revoked or rotated away; checked every
//! [`AdminState::stream_recheck`]). One admin holds at most
//! [`AdminState::max_streams_per_admin`] streams at once (see `super::stream`).

use std::convert::Infallible;

use axum::Router;
use axum::extract::{Extension, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::{get, post};
use futures::Stream;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast::error::RecvError;
use utoipa::{IntoParams, ToSchema};

use super::auth::{AdminActor, Admitted};
use super::error::{ApiError, ProblemDetails};
use super::page::{ApiPath, ApiQuery, paginate};
use super::{AdminState, blocking, path, record};
use crate::audit::Kind;
use crate::sessions::{SessionEvent, SessionRecord};

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/sessions"), get(list))
        .route(&path("/sessions/events"), get(events))
        .route(&path("/sessions/{id}"), get(get_one))
        .route(&path("/sessions/{id}/end"), post(end))
}

/// A page of live sessions.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionPage {
    /// The sessions, by id: `id`, `agent`, `agent_type`, `client_name`, `client_version`,
    /// `generation` (`stateful` or `stateless`), `protocol_version`, `started_ms`,
    /// `last_seen_ms`, `requests`.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<SessionRecord>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One live session.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionView {
    /// The session (see [`SessionPage::items`]).
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub session: SessionRecord,
}

/// Paging and filters of the sessions.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SessionQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// Only this agent's sessions.
    pub agent: Option<String>,
}

/// What ending a session did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Ended {
    /// The session.
    pub id: String,
    /// Its agent.
    pub agent: String,
}

/// Lists the live sessions, by id.
#[utoipa::path(get, path = "/admin/api/v1/sessions", tag = "sessions",
    params(SessionQuery),
    responses(
        (status = 200, body = SessionPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn list(
    State(s): State<AdminState>,
    ApiQuery(q): ApiQuery<SessionQuery>,
) -> Result<axum::Json<SessionPage>, ApiError> {
    let mut all: Vec<SessionRecord> = s
        .ctx
        .sessions
        .sessions()
        .into_iter()
        .filter(|r| q.agent.as_deref().is_none_or(|a| r.agent == a))
        .collect();
    all.sort_by(|a, b| a.id.cmp(&b.id));
    let page = paginate(all, |r| r.id.clone(), q.cursor.as_deref(), q.limit)?;
    Ok(axum::Json(SessionPage {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

fn unknown(id: &str) -> ApiError {
    ApiError::NotFound {
        code: "unknown_session",
        detail: format!("no live session `{id}`"),
    }
}

/// One live session (a stateless client's id is `<agent>/stateless`, sent URL-encoded).
#[utoipa::path(get, path = "/admin/api/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, body = SessionView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn get_one(
    State(s): State<AdminState>,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<SessionView>, ApiError> {
    s.ctx
        .sessions
        .session(&id)
        .map(|session| axum::Json(SessionView { session }))
        .ok_or_else(|| unknown(&id))
}

/// Ends a session: it leaves the registry and its next request is refused (the client must
/// start a new one and authenticate again). A 2026-07-28 client has no session to end: ending
/// its `<agent>/stateless` entry takes it off the list until its next request; revoke the
/// agent's tokens to stop it.
#[utoipa::path(post, path = "/admin/api/v1/sessions/{id}/end", tag = "sessions",
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, body = Ended),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn end(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<Ended>, ApiError> {
    let session = s.ctx.sessions.session(&id).ok_or_else(|| unknown(&id))?;
    if !s.ctx.sessions.end(&id) {
        return Err(unknown(&id));
    }
    tracing::info!(session = ?id, agent = ?session.agent, admin = %admin.identity.name, "session ended through the admin API");
    let ctx = s.ctx.clone();
    let entry = admin
        .entry(Kind::SessionEnd)
        .subject(format!("session {id}"))
        .about_agent(&session.agent);
    blocking(move || record(&ctx, entry, "ending the session")).await?;
    Ok(axum::Json(Ended {
        id,
        agent: session.agent,
    }))
}

fn event_of(e: &SessionEvent) -> Event {
    let name = match e {
        SessionEvent::Connected { .. } => "connect",
        SessionEvent::Disconnected { .. } => "disconnect",
        SessionEvent::Call { .. } => "call",
    };
    Event::default()
        .event(name)
        .data(serde_json::to_string(e).unwrap_or_default())
}

/// A live stream (`text/event-stream`) of `connect`, `disconnect` and `call` events, each a
/// JSON object; it opens with `ready`, and a client that fell behind gets `lagged` with how
/// many events it missed. It ends when the credential that opened it no longer opens the API.
#[utoipa::path(get, path = "/admin/api/v1/sessions/events", tag = "sessions",
    responses(
        (status = 200, description = "Server-Sent Events", body = String, content_type = "text/event-stream"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "`too_many_streams`: this admin holds as many streams as allowed", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn events(
    State(s): State<AdminState>,
    Extension(admitted): Extension<Admitted>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let hold = s.hold_stream(admitted)?;
    let ready = futures::stream::once(async { Ok(Event::default().event("ready").data("{}")) });
    let live = futures::stream::unfold(s.ctx.sessions.subscribe(), |mut rx| async move {
        let event = match rx.recv().await {
            Ok(e) => event_of(&e),
            Err(RecvError::Lagged(n)) => Event::default()
                .event("lagged")
                .data(format!("{{\"missed\":{n}}}")),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok(event), rx))
    });
    let stream = hold.guard("sessions", ready.chain(live));
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
