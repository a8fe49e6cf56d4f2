//! The vendor-guidance feed: its configured sources, and a run on demand (the interval runs
//! happen inside the gateway). Every proposal a run queues is a `vendor` entry of the audit log,
//! and waits in the review queue for a person; nothing merges.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use bridle_rules::vendor::{DocumentFormat, FeedError, VendorFeed};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::AdminActor;
use super::error::{ApiError, ProblemDetails};
use super::{AdminState, path};

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/vendor-feed"), get(get_feed))
        .route(&path("/vendor-feed/run"), post(run))
}

/// One configured guidance page.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FeedSourceView {
    /// The agent profile it is for (`claude`, `codex`, ...).
    pub agent: String,
    /// The page (an http(s) URL, or a file on the gateway's machine).
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
    /// The page.
    pub url: String,
    /// The proposals queued for review by this run.
    pub queued: Vec<u64>,
    /// Suggestions found but already queued before or already policy.
    pub skipped: usize,
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
                url: p.url.clone(),
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

/// Runs the feed once now: every source into every configured project's review queue.
/// Failures are reported per source and per project; the others still run.
#[utoipa::path(post, path = "/admin/api/v1/vendor-feed/run", tag = "feeds",
    responses(
        (status = 200, body = FeedRunView),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no feed configured", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn run(
    State(s): State<AdminState>,
    admin: AdminActor,
) -> Result<axum::Json<FeedRunView>, ApiError> {
    let feed = feed(&s)?;
    tracing::info!(admin = %admin.identity.name, "vendor feed run requested");
    let runs = crate::feed::run_feed(&s.ctx, &feed)
        .await
        .map_err(|e| ApiError::Internal(format!("the vendor feed could not run: {e}")))?;
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
                        url: source.url,
                        queued: Vec::new(),
                        skipped: 0,
                        not_modified: false,
                        error: None,
                    };
                    match source.outcome {
                        Ok(report) => {
                            view.queued += report.queued.len();
                            sv.queued = report.queued.iter().map(|c| c.proposal_id).collect();
                            sv.skipped = report.skipped;
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
