//! Indexing a pattern's example repository over the API, in a way both a program and a
//! browser can follow.
//!
//! Every index is a run of the gateway's registry ([`crate::memory::runs`]), which the MCP tool
//! `refresh_pattern_example` shares, so one run per reference tag holds whoever started it: a
//! second start while one runs is 409 `index_running`, and a start while an example of the tag
//! is being removed is 409 `example_removing`. The run's own task does the work and
//! writes `last_indexed` back (a revision, a history entry and a `pattern_change` audit entry),
//! so it finishes even when nobody follows it.
//!
//! - `POST …/examples/{tag}/index-runs` starts a run and answers 202 with its id and a
//!   `Location`; `GET /index-runs/{id}` says how it stands, and `GET /index-runs/{id}/events`
//!   follows it as Server-Sent Events: every event from the start (so a late follower misses
//!   nothing; `Last-Event-ID` resumes after the given event), then the new ones, ending with
//!   `done` or `error`. A browser's `EventSource` can follow it (GET).
//! - `POST …/examples/{tag}/index` starts a run and answers its events on the same response
//!   (for clients that read an SSE answer to a POST).
//!
//! Both event answers are live streams as the sessions stream is (`super::stream`): each takes
//! one of the admin's stream slots (429 `too_many_streams` past them) and ends early, the run
//! going on, once the credential that opened it no longer opens the API.
//!
//! bridle-memory swaps an example's chunks only at the very end, so a repository that cannot be
//! read ends the run with `error` and leaves the previous index and `last_indexed` as they were.

use std::convert::Infallible;
use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bridle_memory::{IndexReport, Progress, ProgressEvent};
use futures::{Stream, StreamExt};
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;

use super::auth::{AdminActor, Admitted};
use super::error::{ApiError, ProblemDetails};
use super::memory::memory_of;
use super::page::ApiPath;
use super::patterns::{pattern_mut, unknown_example};
use super::stream::StreamHold;
use super::{AdminState, BASE_PATH, blocking, load_stored, path, record};
use crate::audit::{Change, Kind, Outcome};
use crate::context::GatewayContext;
use crate::memory::runs::{
    Claimed, RunEventKind, RunHandle, RunOrigin, RunStart, RunStatus, redact_url, report_event,
};

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(
            &path("/projects/{project}/patterns/{pattern}/examples/{tag}/index"),
            post(index),
        )
        .route(
            &path("/projects/{project}/patterns/{pattern}/examples/{tag}/index-runs"),
            post(start_run),
        )
        .route(&path("/index-runs/{id}"), get(run_status))
        .route(&path("/index-runs/{id}/events"), get(run_events))
}

/// A run that was started.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunStarted {
    /// The run.
    pub run: RunStatus,
    /// Where its status is (also the answer's `Location`).
    pub status_url: String,
    /// Where its events are (Server-Sent Events, replayed from the start).
    pub events_url: String,
}

pub(super) fn index_running(tag: &str, run_id: &str) -> ApiError {
    ApiError::Conflict {
        code: "index_running",
        detail: format!(
            "example `{tag}` is being indexed now (run {run_id}); try again when that run has ended"
        ),
    }
}

fn unknown_run(id: &str) -> ApiError {
    ApiError::NotFound {
        code: "unknown_index_run",
        detail: format!(
            "there is no index run `{id}` (runs are kept while they run and for a while after)"
        ),
    }
}

/// A run refused its tag, as the API answers it (409 `index_running` or `example_removing`).
pub(super) fn claimed(claimed: &Claimed) -> ApiError {
    match claimed {
        Claimed::Indexing(busy) => index_running(&busy.reference_tag, &busy.run_id),
        Claimed::Removing { .. } => ApiError::Conflict {
            code: claimed.code(),
            detail: claimed.to_string(),
        },
    }
}

/// Checks memory is on, claims the tag, then reads the example from the project's document:
/// the run, started in its own task. The tag is claimed first so that the example cannot be
/// removed (its chunks purged) between this read and the run, which would write back chunks
/// no project lists; an example already gone ends the claimed run with that error.
async fn launch(
    s: &AdminState,
    admin: AdminActor,
    project: String,
    pattern: String,
    tag: String,
) -> Result<Arc<crate::memory::runs::Run>, ApiError> {
    let memory = memory_of(s)?;
    let handle = s
        .ctx
        .index_runs
        .start(RunStart {
            reference_tag: tag.clone(),
            project: Some(project.clone()),
            pattern: Some(pattern.clone()),
            origin: RunOrigin::Api,
            actor: admin.actor(),
        })
        .map_err(|c| claimed(&c))?;
    let ctx = s.ctx.clone();
    let (p, pat, t) = (project.clone(), pattern, tag);
    let read = blocking(move || {
        let mut doc = load_stored(&ctx.store, &p)?.document;
        let target = pattern_mut(&mut doc, &p, &pat)?;
        let r = target
            .example_repos
            .iter()
            .find(|r| r.reference_tag == t)
            .ok_or_else(|| unknown_example(&pat, &t))?;
        Ok(bridle_memory::ExampleRepo {
            url: r.url.clone(),
            reference_tag: r.reference_tag.clone(),
            arch_tag: r.arch_tag.clone(),
        })
    })
    .await;
    let repo = match read {
        Ok(repo) => repo,
        Err(e) => {
            handle.finish(
                RunEventKind::Error,
                json!({"code": e.code(), "detail": "the example could not be read from the project's document; nothing was indexed"}),
            );
            return Err(e);
        }
    };
    let run = Arc::clone(handle.run());
    let ctx = s.ctx.clone();
    let metrics = s.metrics.clone();
    tokio::spawn(async move {
        let gauges = metrics.map(|m| (m, repo.reference_tag.clone()));
        let progress = RunProgress {
            run: &handle,
            gauges: gauges.clone(),
        };
        let indexed = memory.patterns.index(&repo, &progress).await;
        if let Some((metrics, tag)) = &gauges {
            metrics.indexing.ended(tag, indexed.as_ref().ok());
        }
        match indexed {
            Ok(report) => written_back(&ctx, &admin, &project, report, handle).await,
            Err(e) => {
                let detail = e.to_string().replace(&repo.url, &redact_url(&repo.url));
                tracing::warn!(tag = ?repo.reference_tag, code = e.code(), "indexing an example failed; the previous index is kept");
                let entry = admin
                    .entry(Kind::PatternChange)
                    .project(&project)
                    .subject(format!("example `{}` indexed", repo.reference_tag))
                    .outcome(Outcome::error(e.code()))
                    .detail("indexing failed; the previous index is kept");
                let c = Arc::clone(&ctx);
                if let Err(e) = blocking(move || record(&c, entry, "the failed index")).await {
                    tracing::warn!(error = %crate::logging::one_line(&e), "the failed index could not be recorded");
                }
                handle.finish(
                    RunEventKind::Error,
                    json!({"code": e.code(), "detail": detail}),
                );
            }
        }
    });
    Ok(run)
}

/// Records each step of an index in its run, and keeps the gateway's indexing gauges for its
/// reference tag when the API has the metrics.
struct RunProgress<'a> {
    run: &'a RunHandle,
    gauges: Option<(Arc<crate::ops::GatewayMetrics>, String)>,
}

#[async_trait]
impl Progress for RunProgress<'_> {
    async fn report(&self, event: ProgressEvent) {
        if let Some((metrics, tag)) = &self.gauges {
            metrics.indexing.step(tag, &event);
        }
        self.run.progress(&event);
    }
}

/// Writes a finished index's `last_indexed` into the project's document (a revision, a history
/// entry and a `pattern_change` audit entry) and ends the run with `done`, or with `error` when
/// the write-back failed (`last_indexed` not written) or its audit entry could not be recorded
/// (`audit_unavailable`: written all the same, so the event carries the report and the
/// revision as `done` would).
async fn written_back(
    ctx: &Arc<GatewayContext>,
    admin: &AdminActor,
    project: &str,
    report: IndexReport,
    handle: RunHandle,
) {
    let (c, a, p, r) = (
        Arc::clone(ctx),
        admin.clone(),
        project.to_string(),
        report.clone(),
    );
    let written = blocking(move || {
        let base = load_stored(&c.store, &p)?.document.revision;
        let changed = crate::memory::write_last_indexed(&c.store, Some(&p), &r, &a.actor())?;
        let revision = changed.first().map(|(_, rev)| *rev);
        let entry = a
            .entry(Kind::PatternChange)
            .project(&p)
            .subject(format!("example `{}` indexed", r.reference_tag))
            .change(Change::revisions(
                base.to_string(),
                revision.unwrap_or(base).to_string(),
            ))
            .detail(format!(
                "{} chunks from {} files; last_indexed {}",
                r.chunks, r.files, r.last_indexed
            ));
        Ok((revision, record(&c, entry, "the index").err()))
    })
    .await;
    let outcome =
        |revision: Option<u64>| json!({"report": report_event(&report), "revision": revision});
    match written {
        Ok((revision, None)) => handle.finish(RunEventKind::Done, outcome(revision)),
        Ok((revision, Some(unrecorded))) => {
            let mut event = outcome(revision);
            event["code"] = json!(unrecorded.code());
            event["detail"] = json!(unrecorded.to_string());
            handle.finish(RunEventKind::Error, event);
        }
        Err(e) => handle.finish(
            RunEventKind::Error,
            json!({"code": e.code(), "detail": format!("indexed, but last_indexed was not written back: {e}")}),
        ),
    }
}

/// A run's events from `from` on, as SSE (each event's id is its position), ending with the
/// run, or earlier when the server shuts down or the credential `hold` re-checks no longer
/// opens the API.
fn events_of(
    hold: StreamHold,
    run: Arc<crate::memory::runs::Run>,
    from: u64,
) -> Sse<impl Stream<Item = Result<Event, Infallible>> + use<>> {
    let events = run.follow(from).map(|e| {
        Ok(Event::default()
            .event(e.kind.as_str())
            .id(e.seq.to_string())
            .data(e.data.to_string()))
    });
    Sse::new(hold.guard("index run", events)).keep_alive(KeepAlive::default())
}

/// Indexes (or re-indexes) an example repository from the URL the document lists, streaming
/// `started`, `progress` (`step`, `message`, `done`, `total`), then `done` (the report and the
/// document's new revision, `last_indexed` written back) or `error` (`code`, `detail`; the
/// previous index is kept; with `audit_unavailable` the index and its write-back were made and
/// the event also has the report and the revision). A second start for the same tag while one
/// runs (from the API or the `refresh_pattern_example` tool) is 409 `index_running`. The
/// stream ends early (the run goes on) once the credential that opened it no longer opens the
/// API.
#[utoipa::path(post, path = "/admin/api/v1/projects/{project}/patterns/{pattern}/examples/{tag}/index", tag = "patterns",
    params(
        ("project" = String, Path, description = "The project id"),
        ("pattern" = String, Path, description = "The custom pattern's name"),
        ("tag" = String, Path, description = "The example's reference tag"),
    ),
    responses(
        (status = 200, description = "Server-Sent Events", body = String, content_type = "text/event-stream"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`index_running`: an index of this tag is running; `example_removing`: an example of this tag is being removed; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project, pattern or example may have", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "`too_many_streams`: this admin holds as many streams as allowed (no run is started)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "memory is off", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn index(
    State(s): State<AdminState>,
    admin: AdminActor,
    Extension(admitted): Extension<Admitted>,
    ApiPath((project, pattern, tag)): ApiPath<(String, String, String)>,
) -> Result<Response, ApiError> {
    // The slot first: a stream that cannot open starts no run.
    let hold = s.hold_stream(admitted)?;
    let run = launch(&s, admin, project, pattern, tag).await?;
    Ok(events_of(hold, run, 0).into_response())
}

/// Starts an index (or re-index) of an example repository and answers at once: 202 with the
/// run's id, a `Location` of its status, and where to follow its events
/// (`GET /index-runs/{id}/events`). A second start for the same tag while one runs (from the
/// API or the `refresh_pattern_example` tool) is 409 `index_running`.
#[utoipa::path(post, path = "/admin/api/v1/projects/{project}/patterns/{pattern}/examples/{tag}/index-runs", tag = "patterns",
    params(
        ("project" = String, Path, description = "The project id"),
        ("pattern" = String, Path, description = "The custom pattern's name"),
        ("tag" = String, Path, description = "The example's reference tag"),
    ),
    responses(
        (status = 202, body = RunStarted, headers(("location" = String, description = "The run's status"))),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`index_running`: an index of this tag is running; `example_removing`: an example of this tag is being removed; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project, pattern or example may have", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "memory is off", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn start_run(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((project, pattern, tag)): ApiPath<(String, String, String)>,
) -> Result<Response, ApiError> {
    let run = launch(&s, admin, project, pattern, tag).await?;
    let status_url = format!("{BASE_PATH}/index-runs/{}", run.id());
    let body = RunStarted {
        run: run.status(),
        events_url: format!("{status_url}/events"),
        status_url: status_url.clone(),
    };
    let location = HeaderValue::from_str(&status_url)
        .map_err(|e| ApiError::Internal(format!("the run's location is not a header: {e}")))?;
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        axum::Json(body),
    )
        .into_response())
}

/// How an index run stands: running, done or error, and its last step.
#[utoipa::path(get, path = "/admin/api/v1/index-runs/{id}", tag = "patterns",
    params(("id" = String, Path, description = "The run's id")),
    responses(
        (status = 200, body = RunStatus),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "no such run (or it was forgotten)", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn run_status(
    State(s): State<AdminState>,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::Json<RunStatus>, ApiError> {
    let run = s.ctx.index_runs.get(&id).ok_or_else(|| unknown_run(&id))?;
    Ok(axum::Json(run.status()))
}

/// Follows an index run as Server-Sent Events: every event it has had, from the start (or after
/// `Last-Event-ID`), then each new one, ending after `done` or `error`. Each event's id is its
/// position in the run; its data is a JSON object (`started`: the run; `progress`: `step`,
/// `message`, `done`, `total`; `done`: `report`, `revision`; `error`: `code`, `detail`, and for
/// `audit_unavailable` also `report` and `revision`). The stream ends early (the run goes on)
/// once the credential that opened it no longer opens the API.
#[utoipa::path(get, path = "/admin/api/v1/index-runs/{id}/events", tag = "patterns",
    params(
        ("id" = String, Path, description = "The run's id"),
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this event"),
    ),
    responses(
        (status = 200, description = "Server-Sent Events", body = String, content_type = "text/event-stream"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "no such run (or it was forgotten)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_request`: a `Last-Event-ID` that is not an event id", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 429, description = "`too_many_streams`: this admin holds as many streams as allowed", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn run_events(
    State(s): State<AdminState>,
    Extension(admitted): Extension<Admitted>,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let run = s.ctx.index_runs.get(&id).ok_or_else(|| unknown_run(&id))?;
    let from = match headers.get("last-event-id") {
        None => 0,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .and_then(|last| last.checked_add(1))
            .ok_or_else(|| ApiError::invalid("`Last-Event-ID` must be an event id (a number)"))?,
    };
    let hold = s.hold_stream(admitted)?;
    Ok(events_of(hold, run, from).into_response())
}
