//! A project's patterns and their example repositories over the API: list them, add and remove
//! a well-known (standard) pattern, a custom pattern or an example repository, rename a custom
//! pattern or change its description. Indexing one is in [`super::index_runs`]; browsing its
//! indexed chunks in [`super::memory`].
//!
//! Every change is an edit of the project's rules document through the rules store's normal
//! path (a new revision and a history entry under the admin's actor) and a `pattern_change`
//! entry of the audit log. A rename or a description is changed against the revision the admin
//! read (`base_revision`): when someone saved since, it is refused with 409 `revision_conflict`
//! and the current revision, as a whole-document edit is. A rename keeps the examples' pattern
//! tags (`arch_tag`), which their indexed chunks carry, so what agents find does not change. An example that is being indexed (by the API or the
//! `refresh_pattern_example` tool: one registry of runs) cannot be removed until its run ends
//! (409 `index_running`); the list says which examples are indexing and by which run. A removal
//! holds its tags in that registry until their chunks are purged, so no run starts on them
//! meanwhile (409 `example_removing`, or that error result of the tool).

use std::sync::{Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get};
use bridle_rules::{CustomPattern, ExampleRepo, RulesDocument, RulesError, check_name};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::AdminActor;
use super::error::{ApiError, ProblemDetails};
use super::page::{ApiJson, ApiPath};
use super::{AdminState, blocking, load_stored, path, record};
use crate::audit::{Change, Kind};
use crate::context::GatewayContext;
use crate::memory::IndexRuns;
use crate::memory::runs::Removal;
use crate::memory::runs::redact_url;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(
            &path("/projects/{project}/patterns"),
            get(list).post(add_pattern),
        )
        .route(
            &path("/projects/{project}/patterns/{pattern}"),
            delete(remove_pattern).patch(change_pattern),
        )
        .route(
            &path("/projects/{project}/standard-patterns"),
            axum::routing::post(add_standard),
        )
        .route(
            &path("/projects/{project}/standard-patterns/{name}"),
            delete(remove_standard),
        )
        .route(
            &path("/projects/{project}/patterns/{pattern}/examples"),
            axum::routing::post(add_example),
        )
        .route(
            &path("/projects/{project}/patterns/{pattern}/examples/{tag}"),
            delete(remove_example),
        )
}

/// A project's patterns.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PatternView {
    /// Its name.
    pub name: String,
    /// What it is.
    pub description: String,
    /// Its example repositories.
    pub example_repos: Vec<ExampleView>,
}

/// An example repository of a pattern.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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
    /// The run indexing it now, if one is (follow it at `/index-runs/{id}/events`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
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
    /// The pattern's tag (default: the pattern's name), which searches filter by: a name as
    /// the pattern's is (lowercase letters, digits, `-`, `_`, `.`).
    #[serde(default)]
    pub arch_tag: Option<String>,
}

/// A well-known pattern the project follows (`MVC`, `hexagonal`, ...).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewStandardPattern {
    /// Its name: up to 64 letters, digits, spaces and `-_./+&()'`.
    pub name: String,
}

/// A custom pattern's new name or description (or both), against the revision it was read at.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatternChange {
    /// The document's revision the change starts from; a stale one is refused with 409.
    pub base_revision: u64,
    /// The new description (may be empty); absent: unchanged.
    #[serde(default)]
    pub description: Option<String>,
    /// The new name (as a new pattern's); absent or the same: unchanged. Its examples keep
    /// their pattern tags.
    #[serde(default)]
    pub name: Option<String>,
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
    /// Set when the change was made but an example's indexed chunks were not purged with it
    /// (another project's document does not load and may list their tag, or the memory service
    /// failed): which were kept, why, and how to purge them. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
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
                    .map(|r| (r, runs.running(&r.reference_tag)))
                    .map(|(r, run)| ExampleView {
                        url: redact_url(&r.url),
                        reference_tag: r.reference_tag.clone(),
                        arch_tag: r.arch_tag.clone(),
                        last_indexed: r.last_indexed.clone(),
                        indexing: run.is_some(),
                        run_id: run.map(|r| r.id().to_string()),
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub(super) fn unknown_pattern(project: &str, pattern: &str) -> ApiError {
    ApiError::NotFound {
        code: "unknown_pattern",
        detail: format!("project `{project}` has no custom pattern `{pattern}`"),
    }
}

pub(super) fn unknown_example(pattern: &str, tag: &str) -> ApiError {
    ApiError::NotFound {
        code: "unknown_example",
        detail: format!("pattern `{pattern}` has no example repository tagged `{tag}`"),
    }
}

pub(super) fn pattern_mut<'a>(
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
        let mut doc = load_stored(&ctx.store, project)?.document;
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
        (status = 409, description = "`stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn list(
    State(s): State<AdminState>,
    ApiPath(project): ApiPath<String>,
) -> Result<axum::Json<PatternList>, ApiError> {
    let ctx = s.ctx.clone();
    let p = project.clone();
    let doc = blocking(move || Ok(load_stored(&ctx.store, &p)?.document)).await?;
    Ok(axum::Json(view(&doc, &project, &s.ctx.index_runs)))
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
        (status = 409, description = "the pattern exists; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
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
            warning: None,
        }),
    ))
}

/// Renames a custom pattern or changes its description (or both), against `base_revision`.
#[utoipa::path(patch, path = "/admin/api/v1/projects/{project}/patterns/{pattern}", tag = "patterns",
    params(
        ("project" = String, Path, description = "The project id"),
        ("pattern" = String, Path, description = "The custom pattern's name"),
    ),
    request_body = PatternChange,
    responses(
        (status = 200, body = PatternsChanged),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "stale base revision (`current_revision` says the current one), or the new name is taken; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn change_pattern(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((project, pattern)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<PatternChange>,
) -> Result<axum::Json<PatternsChanged>, ApiError> {
    let rename = body
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| *n != pattern)
        .map(str::to_string);
    if let Some(name) = &rename {
        check_name("pattern", name)?;
    }
    let description = body
        .description
        .as_deref()
        .map(str::trim)
        .map(str::to_string);
    if rename.is_none() && description.is_none() {
        return Err(ApiError::invalid(
            "name a new `name` or a `description` to change",
        ));
    }
    let summary = match (&rename, &description) {
        (Some(to), None) => format!("pattern `{pattern}` renamed to `{to}`"),
        (Some(to), Some(_)) => {
            format!("pattern `{pattern}` renamed to `{to}` and its description changed")
        }
        (None, _) => format!("pattern `{pattern}` description changed"),
    };
    let ctx = s.ctx.clone();
    let p = project.clone();
    let revision = blocking(move || {
        // The store refuses the save when the document moved past `base_revision`.
        let mut doc = load_stored(&ctx.store, &p)?.document;
        if let Some(to) = &rename
            && doc.patterns.custom.iter().any(|c| &c.name == to)
        {
            return Err(ApiError::Conflict {
                code: "pattern_exists",
                detail: format!("project `{p}` has a pattern `{to}` already; nothing was changed"),
            });
        }
        let target = pattern_mut(&mut doc, &p, &pattern)?;
        if let Some(to) = rename {
            target.name = to;
        }
        if let Some(d) = description {
            target.description = d;
        }
        let revision =
            ctx.store
                .save_edit(&p, &doc, body.base_revision, &admin.actor(), &summary)?;
        let entry = admin
            .entry(Kind::PatternChange)
            .project(&p)
            .subject(summary)
            .change(Change::revisions(
                body.base_revision.to_string(),
                revision.to_string(),
            ));
        record(&ctx, entry, "the change")?;
        Ok(revision)
    })
    .await?;
    Ok(axum::Json(PatternsChanged {
        project,
        revision,
        chunks_removed: 0,
        warning: None,
    }))
}

/// A well-known pattern's name as it is shown to agents: one line of words, so a name can
/// carry no markup or instructions into a rendered file.
fn check_standard_name(name: &str) -> Result<(), ApiError> {
    let reason = if name.is_empty() {
        Some("must not be empty")
    } else if name.chars().count() > 64 {
        Some("must be at most 64 characters")
    } else if !name
        .chars()
        .all(|c| c.is_alphanumeric() || c == ' ' || "-_./+&()'".contains(c))
    {
        Some("may only use letters, digits, spaces and `-_./+&()'`")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ApiError::Invalid {
            code: "invalid_name",
            detail: format!("the standard pattern name `{name}` {reason}"),
            errors: Vec::new(),
        }),
        None => Ok(()),
    }
}

fn unknown_standard(project: &str, name: &str) -> ApiError {
    ApiError::NotFound {
        code: "unknown_pattern",
        detail: format!("project `{project}` follows no standard pattern `{name}`"),
    }
}

/// Adds a well-known pattern to those a project follows.
#[utoipa::path(post, path = "/admin/api/v1/projects/{project}/standard-patterns", tag = "patterns",
    params(("project" = String, Path, description = "The project id")),
    request_body = NewStandardPattern,
    responses(
        (status = 201, body = PatternsChanged),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "the project follows it already; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn add_standard(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(project): ApiPath<String>,
    ApiJson(body): ApiJson<NewStandardPattern>,
) -> Result<(StatusCode, axum::Json<PatternsChanged>), ApiError> {
    let name = body.name.trim().to_string();
    check_standard_name(&name)?;
    let ctx = s.ctx.clone();
    let p = project.clone();
    let revision = blocking(move || {
        let summary = format!("standard pattern `{name}` added");
        edit(&ctx, &admin, &p, &summary, |doc| {
            // `MVC` and `mvc` are one pattern.
            if doc
                .patterns
                .standard
                .iter()
                .any(|x| x.to_lowercase() == name.to_lowercase())
            {
                return Err(ApiError::Conflict {
                    code: "pattern_exists",
                    detail: format!("project `{p}` follows `{name}` already"),
                });
            }
            doc.patterns.standard.push(name.clone());
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
            warning: None,
        }),
    ))
}

/// Removes a well-known pattern from those a project follows.
#[utoipa::path(delete, path = "/admin/api/v1/projects/{project}/standard-patterns/{name}", tag = "patterns",
    params(
        ("project" = String, Path, description = "The project id"),
        ("name" = String, Path, description = "The standard pattern's name, as listed"),
    ),
    responses(
        (status = 200, body = PatternsChanged),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project or pattern may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn remove_standard(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((project, name)): ApiPath<(String, String)>,
) -> Result<axum::Json<PatternsChanged>, ApiError> {
    let ctx = s.ctx.clone();
    let p = project.clone();
    let revision = blocking(move || {
        let summary = format!("standard pattern `{name}` removed");
        edit(&ctx, &admin, &p, &summary, |doc| {
            let at = doc
                .patterns
                .standard
                .iter()
                .position(|x| *x == name)
                .ok_or_else(|| unknown_standard(&p, &name))?;
            doc.patterns.standard.remove(at);
            Ok(())
        })
    })
    .await?;
    Ok(axum::Json(PatternsChanged {
        project,
        revision,
        chunks_removed: 0,
        warning: None,
    }))
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
        (status = 409, description = "one of its examples is indexing; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project or pattern may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn remove_pattern(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((project, pattern)): ApiPath<(String, String)>,
) -> Result<axum::Json<PatternsChanged>, ApiError> {
    let ctx = s.ctx.clone();
    let runs = s.ctx.index_runs.clone();
    let (p, name) = (project.clone(), pattern.clone());
    let (revision, tags, _removal) = blocking(move || {
        let tags = Mutex::new(Vec::new());
        let claim = Mutex::new(None);
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
                let removed: Vec<String> = removed
                    .example_repos
                    .into_iter()
                    .map(|r| r.reference_tag)
                    .collect();
                // Held until the chunks are purged: no run starts on these tags meanwhile.
                *claim.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(removal(&runs, &removed)?);
                *tags.lock().unwrap_or_else(PoisonError::into_inner) = removed;
                Ok(())
            },
        )?;
        Ok((
            revision,
            tags.into_inner().unwrap_or_else(PoisonError::into_inner),
            claim.into_inner().unwrap_or_else(PoisonError::into_inner),
        ))
    })
    .await?;
    let mut chunks_removed = 0;
    let mut kept = Vec::new();
    for tag in tags {
        let purge = purge_unlisted(&s, &tag).await;
        chunks_removed += purge.removed;
        kept.extend(purge.kept);
    }
    Ok(axum::Json(PatternsChanged {
        project,
        revision,
        chunks_removed,
        warning: (!kept.is_empty()).then(|| kept.join("; ")),
    }))
}

/// Claims `tags` for a removal (refused, 409 `index_running`, while one is being indexed), so
/// that no run starts on them before their chunks are purged: one that did would write back
/// chunks no project lists.
fn removal(runs: &IndexRuns, tags: &[String]) -> Result<Removal, ApiError> {
    runs.begin_removal(tags.iter().cloned())
        .map_err(|busy| super::index_runs::index_running(&busy.reference_tag, &busy.run_id))
}

/// What purging a removed example's chunks did.
struct Purge {
    /// Chunks removed.
    removed: u64,
    /// Why chunks were kept, and how to purge them, when they were not purged although they may
    /// be listed by no project any more.
    kept: Option<String>,
}

/// Purges a tag's chunks when memory is on and no project lists the tag any more. It runs
/// after the removal was written, so it does not fail the request: chunks it cannot purge are
/// kept, logged, and said in [`Purge::kept`]. A project whose stored document does not load may
/// list the tag, so its chunks are kept then too.
async fn purge_unlisted(s: &AdminState, tag: &str) -> Purge {
    let Some(memory) = s.memory.clone() else {
        return Purge {
            removed: 0,
            kept: None,
        };
    };
    let purge_later = format!(
        "purge them with `POST {}/memory/patterns/{tag}/purge` once no project lists the tag",
        super::BASE_PATH
    );
    let kept = |why: String| {
        tracing::warn!(tag = ?tag, why = %why, "a removed example's indexed chunks were kept");
        Purge {
            removed: 0,
            kept: Some(format!(
                "the indexed chunks of `{tag}` were kept ({why}); {purge_later}"
            )),
        }
    };
    let ctx = s.ctx.clone();
    let t = tag.to_string();
    let listed = blocking(move || {
        // A project that lists the tag settles it; one that does not load only leaves it open.
        let mut unreadable = None;
        for project in ctx.store.projects()? {
            let doc = match load_stored(&ctx.store, &project) {
                Ok(loaded) => loaded.document,
                Err(ApiError::StoredDocument { .. }) => {
                    unreadable.get_or_insert(project);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if doc
                .patterns
                .custom
                .iter()
                .flat_map(|c| &c.example_repos)
                .any(|r| r.reference_tag == t)
            {
                return Ok(Listed::Yes);
            }
        }
        Ok(unreadable.map_or(Listed::No, Listed::Maybe))
    })
    .await;
    match listed {
        Ok(Listed::No) => {}
        Ok(Listed::Yes) => {
            return Purge {
                removed: 0,
                kept: None,
            };
        }
        Ok(Listed::Maybe(project)) => {
            return kept(format!(
                "project `{project}`'s stored document does not load, and it may list the tag"
            ));
        }
        Err(e) => {
            return kept(format!(
                "the projects could not be read ({}); see the gateway's log",
                e.code()
            ));
        }
    }
    match memory.patterns.purge(tag).await {
        Ok(removed) => Purge {
            removed,
            kept: None,
        },
        Err(bridle_memory::MemoryError::UnknownTag(_)) => Purge {
            removed: 0,
            kept: None,
        },
        Err(e) => {
            tracing::error!(tag = ?tag, error = %crate::logging::one_line(&e), code = e.code(), "purging a removed example's chunks failed");
            kept(format!(
                "the memory service failed ({}); see the gateway's log",
                e.code()
            ))
        }
    }
}

/// Whether a project lists a tag.
enum Listed {
    Yes,
    No,
    /// A project whose stored document does not load, so it cannot be told.
    Maybe(String),
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
        (status = 409, description = "the project lists that reference tag; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
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
    // Its chunks carry the tag and searches filter by it: an empty one (or a path, or
    // spaces) would file them where no search by tag finds them.
    if let Some(arch) = &body.arch_tag {
        check_name("pattern tag", arch)?;
    }
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
            warning: None,
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
        (status = 409, description = "it is indexing; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project, pattern or example may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn remove_example(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath((project, pattern, tag)): ApiPath<(String, String, String)>,
) -> Result<axum::Json<PatternsChanged>, ApiError> {
    // Held until the chunks are purged: no run starts on the tag meanwhile.
    let _removal = removal(&s.ctx.index_runs, std::slice::from_ref(&tag))?;
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
    let purge = purge_unlisted(&s, &tag).await;
    Ok(axum::Json(PatternsChanged {
        project,
        revision,
        chunks_removed: purge.removed,
        warning: purge.kept,
    }))
}
