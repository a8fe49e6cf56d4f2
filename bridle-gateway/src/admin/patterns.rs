//! A project's patterns and their example repositories over the API: list them, add and remove
//! a custom pattern or an example repository, and index (or re-index) an example with its
//! progress streamed as Server-Sent Events.
//!
//! Every change is an edit of the project's rules document through the rules store's normal
//! path (a new revision and a history entry under the admin's actor) and a `pattern_change`
//! entry of the audit log, `last_indexed` included: a finished index writes it back into every
//! example of the project with that reference tag the same way. Indexing runs in its own task,
//! so it finishes (and writes back) even when the client that started it goes away; one index
//! per reference tag runs at a time, a second trigger is 409 `index_running`. bridle-memory swaps
//! an example's chunks only at the very end, so a repository that cannot be read ends the stream
//! with an `error` event and leaves the previous index (and `last_indexed`) as they were.
//! The MCP tool `refresh_pattern_example` does not take part in the one-at-a-time rule.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::{delete, get, post};
use bridle_memory::{IndexReport, Progress, ProgressEvent};
use bridle_rules::{CustomPattern, ExampleRepo, RulesDocument, RulesError, check_name};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::auth::AdminActor;
use super::error::{ApiError, ProblemDetails};
use super::memory::memory_of;
use super::page::{ApiJson, ApiPath};
use super::{AdminState, blocking, path, record};
use crate::audit::{Change, Kind, Outcome};
use crate::context::GatewayContext;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(
            &path("/projects/{project}/patterns"),
            get(list).post(add_pattern),
        )
        .route(
            &path("/projects/{project}/patterns/{pattern}"),
            delete(remove_pattern),
        )
        .route(
            &path("/projects/{project}/patterns/{pattern}/examples"),
            post(add_example),
        )
        .route(
            &path("/projects/{project}/patterns/{pattern}/examples/{tag}"),
            delete(remove_example),
        )
        .route(
            &path("/projects/{project}/patterns/{pattern}/examples/{tag}/index"),
            post(index),
        )
}

/// The reference tags being indexed now; a tag is claimed for the length of one index.
#[derive(Debug, Clone, Default)]
pub(crate) struct IndexRuns(Arc<Mutex<BTreeSet<String>>>);

impl IndexRuns {
    fn claim(&self, tag: &str) -> Option<IndexClaim> {
        let mut running = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        running.insert(tag.to_string()).then(|| IndexClaim {
            runs: self.clone(),
            tag: tag.to_string(),
        })
    }

    fn is_running(&self, tag: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(tag)
    }
}

/// Releases its tag when dropped, however the index ended.
struct IndexClaim {
    runs: IndexRuns,
    tag: String,
}

impl Drop for IndexClaim {
    fn drop(&mut self) {
        self.runs
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.tag);
    }
}

/// A project's patterns.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PatternList {
    /// The project.
    pub project: String,
    /// The document's revision.
    pub revision: u64,
    /// The well-known patterns it follows.
    pub standard: Vec<String>,
    /// Its own patterns, with their example repositories.
    pub custom: Vec<PatternView>,
}

/// A custom pattern.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PatternView {
    /// Its name.
    pub name: String,
    /// What it is.
    pub description: String,
    /// Its example repositories.
    pub example_repos: Vec<ExampleView>,
}

/// An example repository of a pattern.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ExampleView {
    /// A git URL or a local directory.
    pub url: String,
    /// The tag its indexed chunks carry.
    pub reference_tag: String,
    /// The pattern's tag.
    pub arch_tag: String,
    /// When it was last indexed (RFC 3339), if ever.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_indexed: Option<String>,
    /// Whether an index of it is running now.
    pub indexing: bool,
}

/// A new custom pattern.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewPattern {
    /// Its name: lowercase letters, digits, `-`, `_`, `.`.
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub description: String,
}

/// A new example repository.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewExample {
    /// A git URL or a local directory the gateway can read.
    pub url: String,
    /// The tag its chunks are stored under: lowercase letters, digits, `-`, `_`, `.`.
    pub reference_tag: String,
    /// The pattern's tag (default: the pattern's name).
    #[serde(default)]
    pub arch_tag: Option<String>,
}

/// The document's revision after a change.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PatternsChanged {
    /// The project.
    pub project: String,
    /// Its new revision.
    pub revision: u64,
    /// Indexed chunks removed with an example (0 without memory, or when another project
    /// still lists its tag).
    pub chunks_removed: u64,
}

fn view(doc: &RulesDocument, project: &str, runs: &IndexRuns) -> PatternList {
    PatternList {
        project: project.to_string(),
        revision: doc.revision,
        standard: doc.patterns.standard.clone(),
        custom: doc
            .patterns
            .custom
            .iter()
            .map(|p| PatternView {
                name: p.name.clone(),
                description: p.description.clone(),
                example_repos: p
                    .example_repos
                    .iter()
                    .map(|r| ExampleView {
                        url: redact_url(&r.url),
                        reference_tag: r.reference_tag.clone(),
                        arch_tag: r.arch_tag.clone(),
                        last_indexed: r.last_indexed.clone(),
                        indexing: runs.is_running(&r.reference_tag),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// A URL without its user information (`https://user:token@host/x` → `https://***@host/x`):
/// a git URL may carry a credential, which never goes into an answer, event or log line.
fn redact_url(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some(at) = rest.find('@')
        && !rest[..at].contains('/')
    {
        return format!("{scheme}://***@{}", &rest[at + 1..]);
    }
    url.to_string()
}

fn unknown_pattern(project: &str, pattern: &str) -> ApiError {
    ApiError::NotFound {
        code: "unknown_pattern",
        detail: format!("project `{project}` has no custom pattern `{pattern}`"),
    }
}

fn unknown_example(pattern: &str, tag: &str) -> ApiError {
    ApiError::NotFound {
        code: "unknown_example",
        detail: format!("pattern `{pattern}` has no example repository tagged `{tag}`"),
    }
}

fn pattern_mut<'a>(
    doc: &'a mut RulesDocument,
    project: &str,
    pattern: &str,
) -> Result<&'a mut CustomPattern, ApiError> {
    doc.patterns
        .custom
        .iter_mut()
        .find(|p| p.name == pattern)
        .ok_or_else(|| unknown_pattern(project, pattern))
}

/// Edits a project's document through the store (a revision and a history entry under the
/// admin's actor, retried when another edit landed first) and records a `pattern_change`.
fn edit(
    ctx: &GatewayContext,
    admin: &AdminActor,
    project: &str,
    summary: &str,
    change: impl Fn(&mut RulesDocument) -> Result<(), ApiError>,
) -> Result<u64, ApiError> {
    for attempt in 0..5 {
        let mut doc = ctx.store.load(project)?.document;
        let base = doc.revision;
        change(&mut doc)?;
        match ctx
            .store
            .save_edit(project, &doc, base, &admin.actor(), summary)
        {
            Ok(revision) => {
                let entry = admin
                    .entry(Kind::PatternChange)
                    .project(project)
                    .subject(summary.to_string())
                    .change(Change::revisions(base.to_string(), revision.to_string()));
                record(ctx, entry, "the change")?;
                return Ok(revision);
            }
            Err(RulesError::Conflict { .. }) if attempt < 4 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(ApiError::Internal(format!(
        "project `{project}` kept changing under the edit"
    )))
}

/// A project's patterns and example repositories (whether each is indexing now).
#[utoipa::path(get, path = "/admin/api/v1/projects/{project}/patterns", tag = "patterns",
    params(("project" = String, Path, description = "The project id")),
    responses(
        (status = 200, body = PatternList),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn list(
    State(s): State<AdminState>,
    ApiPath(project): ApiPath<String>,
) -> Result<axum::Json<PatternList>, ApiError> {
    let ctx = s.ctx.clone();
    let p = project.clone();
    let doc = blocking(move || Ok(ctx.store.load(&p)?.document)).await?;
    Ok(axum::Json(view(&doc, &project, &s.index_runs)))
}

/// Adds a custom pattern (without examples) to a project.
#[utoipa::path(post, path = "/admin/api/v1/projects/{project}/patterns", tag = "patterns",
    params(("project" = String, Path, description = "The project id")),
    request_body = NewPattern,
    responses(
        (status = 201, body = PatternsChanged),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "the pattern exists", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn add_pattern(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(project): ApiPath<String>,
    ApiJson(body): ApiJson<NewPattern>,
) -> Result<(StatusCode, axum::Json<PatternsChanged>), ApiError> {
    check_name("pattern", &body.name)?;
    let ctx = s.ctx.clone();
    let p = project.clone();
    let revision = blocking(move || {
        edit(
            &ctx,
            &admin,
            &p,
            &format!("pattern `{}` added", body.name),
            |doc| {
                if doc.patterns.custom.iter().any(|c| c.name == body.name) {
                    return Err(ApiError::Conflict {
                        code: "pattern_exists",
                        detail: format!("project `{p}` has a pattern `{}` already", body.name),
                    });
                }
                doc.patterns.custom.push(CustomPattern {
                    name: body.name.clone(),
                    description: body.description.clone(),
                    example_repos: Vec::new(),
                });
                Ok(())
            },
        )
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(PatternsChanged {
            project,
            revision,
            chunks_removed: 0,
        }),
    ))
}

/// Removes a custom pattern and its example repositories (their indexed chunks too, unless
/// another project still lists their tags).
#[utoipa::path(delete, path = "/admin/api/v1/projects/{project}/patterns/{pattern}", tag = "patterns",
    params(
        ("project" = String, Path, description = "The project id"),
        ("pattern" = String, Path, description = "The custom pattern's name"),
    ),
    responses(
        (status = 200, body = PatternsChanged),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "one of its examples is indexing", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn remove_pattern(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((project, pattern)): ApiPath<(String, String)>,
) -> Result<axum::Json<PatternsChanged>, ApiError> {
    let ctx = s.ctx.clone();
    let runs = s.index_runs.clone();
    let (p, name) = (project.clone(), pattern.clone());
    let (revision, tags) = blocking(move || {
        let tags = Mutex::new(Vec::new());
        let revision = edit(
            &ctx,
            &admin,
            &p,
            &format!("pattern `{name}` removed"),
            |doc| {
                let at = doc
                    .patterns
                    .custom
                    .iter()
                    .position(|c| c.name == name)
                    .ok_or_else(|| unknown_pattern(&p, &name))?;
                let removed = doc.patterns.custom.remove(at);
                for r in &removed.example_repos {
                    not_indexing(&runs, &r.reference_tag)?;
                }
                *tags.lock().unwrap_or_else(PoisonError::into_inner) = removed
                    .example_repos
                    .into_iter()
                    .map(|r| r.reference_tag)
                    .collect();
                Ok(())
            },
        )?;
        Ok((
            revision,
            tags.into_inner().unwrap_or_else(PoisonError::into_inner),
        ))
    })
    .await?;
    let mut chunks_removed = 0;
    for tag in tags {
        chunks_removed += purge_unlisted(&s, &tag).await?;
    }
    Ok(axum::Json(PatternsChanged {
        project,
        revision,
        chunks_removed,
    }))
}

fn not_indexing(runs: &IndexRuns, tag: &str) -> Result<(), ApiError> {
    if runs.is_running(tag) {
        return Err(index_running(tag));
    }
    Ok(())
}

fn index_running(tag: &str) -> ApiError {
    ApiError::Conflict {
        code: "index_running",
        detail: format!("example `{tag}` is being indexed now; try again when that run has ended"),
    }
}

/// Purges a tag's chunks when memory is on and no project lists the tag any more.
async fn purge_unlisted(s: &AdminState, tag: &str) -> Result<u64, ApiError> {
    let Some(memory) = s.memory.clone() else {
        return Ok(0);
    };
    let ctx = s.ctx.clone();
    let t = tag.to_string();
    let listed = blocking(move || {
        for project in ctx.store.projects()? {
            let doc = ctx.store.load(&project)?.document;
            if doc
                .patterns
                .custom
                .iter()
                .flat_map(|c| &c.example_repos)
                .any(|r| r.reference_tag == t)
            {
                return Ok(true);
            }
        }
        Ok(false)
    })
    .await?;
    if listed {
        return Ok(0);
    }
    match memory.patterns.purge(tag).await {
        Ok(n) => Ok(n),
        Err(bridle_memory::MemoryError::UnknownTag(_)) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Adds an example repository to a custom pattern (not indexed yet: trigger `…/index`).
#[utoipa::path(post, path = "/admin/api/v1/projects/{project}/patterns/{pattern}/examples", tag = "patterns",
    params(
        ("project" = String, Path, description = "The project id"),
        ("pattern" = String, Path, description = "The custom pattern's name"),
    ),
    request_body = NewExample,
    responses(
        (status = 201, body = PatternsChanged),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "the project lists that reference tag", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn add_example(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((project, pattern)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<NewExample>,
) -> Result<(StatusCode, axum::Json<PatternsChanged>), ApiError> {
    check_name("reference tag", &body.reference_tag)?;
    let url = body.url.trim().to_string();
    if url.is_empty() {
        return Err(ApiError::invalid(
            "`url` must name a git URL or a directory",
        ));
    }
    let ctx = s.ctx.clone();
    let p = project.clone();
    let revision = blocking(move || {
        let summary = format!(
            "example `{}` added to pattern `{pattern}`",
            body.reference_tag
        );
        edit(&ctx, &admin, &p, &summary, |doc| {
            let tag = &body.reference_tag;
            if doc
                .patterns
                .custom
                .iter()
                .flat_map(|c| &c.example_repos)
                .any(|r| &r.reference_tag == tag)
            {
                return Err(ApiError::Conflict {
                    code: "example_exists",
                    detail: format!("project `{p}` lists an example tagged `{tag}` already"),
                });
            }
            let target = pattern_mut(doc, &p, &pattern)?;
            target.example_repos.push(ExampleRepo {
                url: url.clone(),
                reference_tag: tag.clone(),
                arch_tag: body.arch_tag.clone().unwrap_or_else(|| pattern.clone()),
                last_indexed: None,
            });
            Ok(())
        })
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(PatternsChanged {
            project,
            revision,
            chunks_removed: 0,
        }),
    ))
}

/// Removes an example repository from a pattern, and its indexed chunks unless another project
/// still lists its tag.
#[utoipa::path(delete, path = "/admin/api/v1/projects/{project}/patterns/{pattern}/examples/{tag}", tag = "patterns",
    params(
        ("project" = String, Path, description = "The project id"),
        ("pattern" = String, Path, description = "The custom pattern's name"),
        ("tag" = String, Path, description = "The example's reference tag"),
    ),
    responses(
        (status = 200, body = PatternsChanged),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "it is indexing", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn remove_example(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((project, pattern, tag)): ApiPath<(String, String, String)>,
) -> Result<axum::Json<PatternsChanged>, ApiError> {
    not_indexing(&s.index_runs, &tag)?;
    let ctx = s.ctx.clone();
    let (p, t) = (project.clone(), tag.clone());
    let revision = blocking(move || {
        let summary = format!("example `{t}` removed from pattern `{pattern}`");
        edit(&ctx, &admin, &p, &summary, |doc| {
            let target = pattern_mut(doc, &p, &pattern)?;
            let at = target
                .example_repos
                .iter()
                .position(|r| r.reference_tag == t)
                .ok_or_else(|| unknown_example(&pattern, &t))?;
            target.example_repos.remove(at);
            Ok(())
        })
    })
    .await?;
    let chunks_removed = purge_unlisted(&s, &tag).await?;
    Ok(axum::Json(PatternsChanged {
        project,
        revision,
        chunks_removed,
    }))
}

/// Sends each step of an index as a `progress` event, and keeps the gateway's indexing gauges
/// for its reference tag when the API has the metrics.
struct EventProgress {
    events: tokio::sync::mpsc::UnboundedSender<Event>,
    gauges: Option<(Arc<crate::ops::GatewayMetrics>, String)>,
}

#[async_trait]
impl Progress for EventProgress {
    async fn report(&self, event: ProgressEvent) {
        if let Some((metrics, tag)) = &self.gauges {
            metrics.indexing.step(tag, &event);
        }
        let (done, total) = event.fraction();
        let step = match &event {
            ProgressEvent::Fetching { .. } => "fetching",
            ProgressEvent::Chunked { .. } => "chunked",
            ProgressEvent::Embedded { .. } => "embedded",
            ProgressEvent::Storing { .. } => "storing",
            _ => "working",
        };
        let message = match &event {
            ProgressEvent::Fetching { source } => format!("fetching {}", redact_url(source)),
            other => other.message(),
        };
        // A client that left stops reading; the index goes on regardless.
        let _ = self.events.send(sse(
            "progress",
            &json!({"step": step, "message": message, "done": done, "total": total}),
        ));
    }
}

fn sse(name: &str, data: &serde_json::Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// Indexes (or re-indexes) an example repository from the URL the document lists, streaming
/// `started`, `progress` (`step`, `message`, `done`, `total`), then `done` (the report and the
/// document's new revision, `last_indexed` written back) or `error` (`code`, `detail`; the
/// previous index is kept). A second trigger for the same tag while one runs is 409
/// `index_running`.
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
        (status = 409, description = "an index of this tag is running", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "memory is off", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn index(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((project, pattern, tag)): ApiPath<(String, String, String)>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let memory = memory_of(&s)?;
    let ctx = s.ctx.clone();
    let (p, pat, t) = (project.clone(), pattern.clone(), tag.clone());
    let repo = blocking(move || {
        let mut doc = ctx.store.load(&p)?.document;
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
    .await?;
    let claim = s
        .index_runs
        .claim(&tag)
        .ok_or_else(|| index_running(&tag))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let _ = tx.send(sse(
        "started",
        &json!({"project": project, "pattern": pattern, "reference_tag": tag, "source": redact_url(&repo.url)}),
    ));
    let ctx = s.ctx.clone();
    let metrics = s.metrics.clone();
    tokio::spawn(async move {
        let _claim = claim;
        let gauges = metrics.map(|m| (m, repo.reference_tag.clone()));
        let progress = EventProgress {
            events: tx.clone(),
            gauges: gauges.clone(),
        };
        let indexed = memory.patterns.index(&repo, &progress).await;
        if let Some((metrics, tag)) = &gauges {
            metrics.indexing.ended(tag, indexed.as_ref().ok());
        }
        let last = match indexed {
            Ok(report) => written_back(&ctx, &admin, &project, report).await,
            Err(e) => {
                let detail = e.to_string().replace(&repo.url, &redact_url(&repo.url));
                tracing::warn!(tag = %repo.reference_tag, code = e.code(), "indexing an example failed; the previous index is kept");
                let entry = admin
                    .entry(Kind::PatternChange)
                    .project(&project)
                    .subject(format!("example `{}` indexed", repo.reference_tag))
                    .outcome(Outcome::error(e.code()))
                    .detail("indexing failed; the previous index is kept");
                let c = Arc::clone(&ctx);
                if let Err(e) = blocking(move || record(&c, entry, "the failed index")).await {
                    tracing::warn!(error = %e, "the failed index could not be recorded");
                }
                sse("error", &json!({"code": e.code(), "detail": detail}))
            }
        };
        let _ = tx.send(last);
    });
    let stop = s.streams.clone();
    let events =
        futures::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|e| (Ok(e), rx)) },
        )
        .take_until(async move { stop.cancelled().await });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// Writes a finished index's `last_indexed` into the project's document (a revision, a history
/// entry and a `pattern_change` audit entry) and says so as the stream's last event.
async fn written_back(
    ctx: &Arc<GatewayContext>,
    admin: &AdminActor,
    project: &str,
    report: IndexReport,
) -> Event {
    let (c, a, p, r) = (
        Arc::clone(ctx),
        admin.clone(),
        project.to_string(),
        report.clone(),
    );
    let written = blocking(move || {
        let base = c.store.load(&p)?.document.revision;
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
        record(&c, entry, "the index")?;
        Ok(revision)
    })
    .await;
    match written {
        Ok(revision) => sse(
            "done",
            &json!({"report": {
                "reference_tag": report.reference_tag,
                "arch_tag": report.arch_tag,
                "files": report.files,
                "chunks": report.chunks,
                "replaced": report.replaced,
                "last_indexed": report.last_indexed,
            }, "revision": revision}),
        ),
        Err(e) => sse(
            "error",
            &json!({"code": e.code(), "detail": format!("indexed, but last_indexed was not written back: {e}")}),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn credentials_in_urls_are_redacted() {
        assert_eq!(
            redact_url("https://bot:s3cret@git.example/x.git"),
            "https://***@git.example/x.git"
        );
        assert_eq!(
            redact_url("https://git.example/x@y"),
            "https://git.example/x@y"
        );
        assert_eq!(redact_url("/srv/repos/x"), "/srv/repos/x");
    }
}
