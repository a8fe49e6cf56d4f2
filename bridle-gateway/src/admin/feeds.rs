//! The vendor-guidance feed: its configured sources, a run on demand (the interval runs
//! happen inside the gateway), a one-off read of one page into one project's queue, and the
//! queueing of the suggestions a project's own `agent_profiles` carry. Every proposal these
//! queue is a `vendor` entry of the audit log, and waits in the review queue for a person;
//! nothing merges.
//!
//! A feed URL may carry credentials (`https://user:<token>@docs.internal/guide`, a page behind
//! basic auth). Only the fetch sees them: every view, error, log line and audit entry here shows
//! [`redact_url`]'s form, user part and query as `***`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use bridle_rules::redact_url;
use bridle_rules::vendor::{
    DocumentFormat, FeedError, SourceReport, VendorFeed, VendorFeedConfig, VendorSource,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::AdminActor;
use super::error::{ApiError, ProblemDetails};
use super::page::{ApiJson, ApiPath};
use super::{AdminState, blocking, path};

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/vendor-feed"), get(get_feed))
        .route(&path("/vendor-feed/run"), post(run))
        .route(
            &path("/projects/{project}/vendor-guidance"),
            post(read_guidance),
        )
        .route(
            &path("/projects/{project}/profile-suggestions"),
            post(queue_profile_suggestions),
        )
}

/// One configured guidance page.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FeedSourceView {
    /// The agent profile it is for (`claude`, `codex`, ...).
    pub agent: String,
    /// The page (an http(s) URL, or a file on the gateway's machine), a URL's user part and
    /// query (where credentials go) shown as `***`.
    pub url: String,
    /// `html` or `markdown` when configured; otherwise taken from the page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// The feed's configuration.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FeedView {
    /// Every configured page, by agent profile.
    pub sources: Vec<FeedSourceView>,
    /// Minutes between runs inside the gateway; absent: on demand only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_minutes: Option<u64>,
    /// The projects whose queues receive the suggestions; empty: every project.
    pub projects: Vec<String>,
}

/// A failure with its stable code.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FeedFailure {
    /// The stable code (`feed_unreachable`, `unknown_project`, ...; see `FeedError::code`).
    pub code: String,
    /// What happened.
    pub message: String,
}

impl From<&FeedError> for FeedFailure {
    fn from(e: &FeedError) -> Self {
        Self {
            code: e.code().to_string(),
            message: e.to_string(),
        }
    }
}

/// What one source gave in a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SourceRunView {
    /// The agent profile.
    pub agent: String,
    /// The page, a URL's user part and query shown as `***`.
    pub url: String,
    /// The proposals queued for review by this run.
    pub queued: Vec<u64>,
    /// Suggestions found but not queued: queued before, already policy, or past the limit a
    /// page may queue.
    pub skipped: usize,
    /// Of `skipped`, the suggestions past the limit a page may queue (50, bridle-rules'
    /// `MAX_CANDIDATES_PER_PAGE`), never looked at.
    #[serde(default)]
    pub over_limit: usize,
    /// The page was unchanged since the last run, so nothing was read.
    pub not_modified: bool,
    /// Why the source failed, when it did (nothing was queued from it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<FeedFailure>,
}

/// One project's part of a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProjectRunView {
    /// The project.
    pub project: String,
    /// Each source's outcome.
    pub sources: Vec<SourceRunView>,
    /// Why the project could not run at all (an unknown project), when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<FeedFailure>,
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FeedRunView {
    /// Per project, in order.
    pub projects: Vec<ProjectRunView>,
    /// How many proposals the run queued in all.
    pub queued: usize,
    /// How many sources or projects failed.
    pub failed: usize,
}

fn feed(s: &AdminState) -> Result<Arc<VendorFeed>, ApiError> {
    s.vendor_feed.clone().ok_or_else(|| ApiError::Unavailable {
        code: "vendor_feed_off",
        detail: "the gateway runs no vendor feed: add a `vendor_feed:` section to bridle.yaml"
            .into(),
    })
}

/// The feed's sources and schedule.
#[utoipa::path(get, path = "/admin/api/v1/vendor-feed", tag = "feeds",
    responses(
        (status = 200, body = FeedView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no feed configured", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn get_feed(State(s): State<AdminState>) -> Result<axum::Json<FeedView>, ApiError> {
    let feed = feed(&s)?;
    let config = feed.config();
    let sources = config
        .profiles
        .iter()
        .flat_map(|(agent, pages)| {
            pages.iter().map(move |p| FeedSourceView {
                agent: agent.clone(),
                url: redact_url(&p.url),
                format: p.format.map(|f| {
                    match f {
                        DocumentFormat::Markdown => "markdown",
                        DocumentFormat::Html => "html",
                    }
                    .to_string()
                }),
            })
        })
        .collect();
    Ok(axum::Json(FeedView {
        sources,
        interval_minutes: config.interval_minutes,
        projects: config.projects.clone(),
    }))
}

/// Why a run could not start at all: the rules store could not list its projects. Logged with
/// the store's error; the client gets its code, not its internals (paths, the database's words).
fn run_failure(e: FeedError) -> ApiError {
    tracing::error!(error = %crate::logging::one_line(&e), code = e.code(), "the vendor feed could not run");
    ApiError::Unavailable {
        code: "rules_store_unavailable",
        detail: format!(
            "the vendor feed could not run: the rules store failed ({}); see the gateway's log",
            e.code()
        ),
    }
}

/// Runs the feed once now: every source into every configured project's review queue.
/// Failures of a source (unreachable, an error status, ...) or a project (unknown) are reported
/// per source and per project in the 200 answer; the others still run. One run at a time: a run
/// while another (on demand or on the interval) is under way is refused.
#[utoipa::path(post, path = "/admin/api/v1/vendor-feed/run", tag = "feeds",
    responses(
        (status = 200, description = "the run, each source's and project's failure in its entry", body = FeedRunView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`feed_run_in_progress`: a run of the feed is under way; nothing was fetched", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "`vendor_feed_off`: no feed configured; `rules_store_unavailable`: the rules store could not list the projects, nothing was fetched", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn run(
    State(s): State<AdminState>,
    admin: AdminActor,
) -> Result<axum::Json<FeedRunView>, ApiError> {
    let feed = feed(&s)?;
    let Some(_running) = s.feed_runs.try_start() else {
        return Err(ApiError::Conflict {
            code: "feed_run_in_progress",
            detail: "a run of the vendor feed is under way; try again once it has ended".into(),
        });
    };
    tracing::info!(admin = %admin.identity.name, "vendor feed run requested");
    let runs = crate::feed::run_feed(&s.ctx, &feed)
        .await
        .map_err(run_failure)?;
    let mut view = FeedRunView {
        projects: Vec::new(),
        queued: 0,
        failed: 0,
    };
    for (project, run) in runs {
        let mut p = ProjectRunView {
            project,
            sources: Vec::new(),
            error: None,
        };
        match run {
            Err(e) => {
                view.failed += 1;
                p.error = Some(FeedFailure::from(&e));
            }
            Ok(run) => {
                for source in run.sources {
                    let mut sv = SourceRunView {
                        agent: source.agent,
                        // bridle-rules hands it redacted already; redacting again is a no-op.
                        url: redact_url(&source.url),
                        queued: Vec::new(),
                        skipped: 0,
                        over_limit: 0,
                        not_modified: false,
                        error: None,
                    };
                    match source.outcome {
                        Ok(report) => {
                            view.queued += report.queued.len();
                            sv.queued = report.queued.iter().map(|c| c.proposal_id).collect();
                            sv.skipped = report.skipped;
                            sv.over_limit = report.over_limit;
                            sv.not_modified = report.not_modified;
                        }
                        Err(e) => {
                            view.failed += 1;
                            sv.error = Some(FeedFailure::from(&e));
                        }
                    }
                    p.sources.push(sv);
                }
            }
        }
        view.projects.push(p);
    }
    Ok(axum::Json(view))
}

/// A vendor page to read once into a project's review queue.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GuidanceRequest {
    /// The agent profile the guidance is for (an agent type of the catalog: `claude`, `codex`,
    /// ...).
    pub agent: String,
    /// The page: an `http://` or `https://` URL. Files on the gateway's machine are read only
    /// when `bridle.yaml` names them as feed sources, never by request.
    pub url: String,
    /// `html` or `markdown`, when the page's `Content-Type` does not say (or says wrongly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
}

/// What a one-off read or a profile-suggestion queueing did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueuedSuggestions {
    /// The project.
    pub project: String,
    /// The proposals queued now, for review.
    pub queued: Vec<u64>,
    /// Suggestions found but not queued: queued before, already policy, or past the limit a
    /// page may queue.
    pub skipped: usize,
    /// Of `skipped`, the suggestions past the limit a page may queue (50, bridle-rules'
    /// `MAX_CANDIDATES_PER_PAGE`), never looked at.
    #[serde(default)]
    pub over_limit: usize,
    /// The page was unchanged since it was last read, so nothing was read (one-off reads only).
    pub not_modified: bool,
}

/// A failed read as the API answers it: the page's own failures are 502 with the feed's code;
/// a URL that is not one is 422; the store's errors keep their own answers.
fn feed_failure(e: FeedError) -> ApiError {
    let code = e.code();
    match e {
        FeedError::Rules(e) => e.into(),
        FeedError::BadUrl { .. } => ApiError::Invalid {
            code,
            detail: e.to_string(),
            errors: Vec::new(),
        },
        FeedError::Unreachable { .. }
        | FeedError::Timeout { .. }
        | FeedError::Redirected { .. }
        | FeedError::HttpStatus { .. }
        | FeedError::TooLarge { .. }
        | FeedError::NotText { .. } => ApiError::BadGateway {
            code,
            detail: e.to_string(),
        },
        other => ApiError::Internal(format!("the vendor page could not be read: {other}")),
    }
}

/// Reads one vendor page now into the project's review queue, with the configured feed's
/// limits (or the defaults when no feed is configured). The page's validators are kept: a second
/// read of an unchanged page queues nothing and says `not_modified`.
#[utoipa::path(post, path = "/admin/api/v1/projects/{project}/vendor-guidance", tag = "feeds",
    params(("project" = String, Path, description = "The project id")),
    request_body = GuidanceRequest,
    responses(
        (status = 200, body = QueuedSuggestions),
        (status = 400, description = "malformed JSON", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "unknown project or agent type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`too_many_pending`: the feed has as many proposals waiting in the project as one proposer may; `change_refused`: the project has as many waiting as it may hold; nothing was queued", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "not an http(s) URL, or an unknown format", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 502, description = "the page could not be read (unreachable, timeout, an error status, a redirect off its site, too large, not text)", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn read_guidance(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(project): ApiPath<String>,
    ApiJson(body): ApiJson<GuidanceRequest>,
) -> Result<axum::Json<QueuedSuggestions>, ApiError> {
    let format = match body.format.as_deref() {
        None => None,
        Some("html") => Some(DocumentFormat::Html),
        Some("markdown") => Some(DocumentFormat::Markdown),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "`format` is `html` or `markdown`, not `{other}`"
            )));
        }
    };
    let scheme = body.url.split_once("://").map(|(scheme, _)| scheme);
    if !matches!(scheme, Some("http" | "https")) {
        return Err(ApiError::Invalid {
            code: "feed_bad_url",
            detail: format!(
                "`{}` is not an http(s) URL; a file is read only when bridle.yaml names it as a feed source",
                redact_url(&body.url)
            ),
            errors: Vec::new(),
        });
    }
    // An unknown project or agent type is refused before anything is fetched.
    let ctx = s.ctx.clone();
    let (p, agent) = (project.clone(), body.agent.clone());
    blocking(move || {
        ctx.store.catalog().get(&agent)?;
        if !ctx.store.project_path(&p)?.exists() {
            return Err(bridle_rules::RulesError::UnknownProject(p).into());
        }
        Ok(())
    })
    .await?;
    let feed = match &s.vendor_feed {
        Some(feed) => Arc::clone(feed),
        None => Arc::new(VendorFeed::new(VendorFeedConfig::default()).map_err(feed_failure)?),
    };
    tracing::info!(admin = %admin.identity.name, project = ?project, agent = ?body.agent, url = ?redact_url(&body.url), "vendor page read requested");
    let source = VendorSource {
        url: body.url,
        format,
    };
    let report: SourceReport =
        crate::feed::read_page(&s.ctx, &feed, &project, &body.agent, &source)
            .await
            .map_err(feed_failure)?;
    Ok(axum::Json(QueuedSuggestions {
        project,
        queued: report.queued.iter().map(|c| c.proposal_id).collect(),
        skipped: report.skipped,
        over_limit: report.over_limit,
        not_modified: report.not_modified,
    }))
}

/// Queues the vendor suggestions written in the project document's `agent_profiles` for
/// review. Idempotent: a suggestion already queued or already policy is skipped.
#[utoipa::path(post, path = "/admin/api/v1/projects/{project}/profile-suggestions", tag = "feeds",
    params(("project" = String, Path, description = "The project id")),
    responses(
        (status = 200, body = QueuedSuggestions),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`too_many_pending`: the feed has as many proposals waiting in the project as one proposer may; `change_refused`: the project has as many waiting as it may hold; nothing was queued; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn queue_profile_suggestions(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(project): ApiPath<String>,
) -> Result<axum::Json<QueuedSuggestions>, ApiError> {
    let ctx = s.ctx.clone();
    let name = project.clone();
    let queued = blocking(move || {
        // No document of the request's: every document error is the stored one's.
        let report = ctx
            .store
            .queue_profile_suggestions(&name)
            .map_err(|e| ApiError::stored(&name, e))?;
        for id in &report.queued {
            let entry = crate::feed::profile_entry(&name, &ctx.store.proposal(*id)?);
            if let Err(e) = ctx.record_change(entry) {
                tracing::warn!(proposal = id, error = %crate::logging::one_line(&e), "a vendor proposal's audit entry was not written");
            }
        }
        Ok(report)
    })
    .await?;
    tracing::info!(admin = %admin.identity.name, project = %project, queued = queued.queued.len(), "profile suggestions queued");
    Ok(axum::Json(QueuedSuggestions {
        project,
        queued: queued.queued,
        skipped: queued.skipped,
        over_limit: queued.over_limit,
        not_modified: false,
    }))
}
