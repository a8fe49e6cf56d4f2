//! Bridle's memory over the API: browse and search session memories and indexed
//! pattern-example chunks, and purge them: session memories by a filter (at least a project),
//! an example's chunks by its reference tag. An admin sees every project's memory.
//!
//! A project's pattern has its own paged listing of the chunks its example repositories were
//! indexed into (`/projects/{project}/patterns/{pattern}/chunks`): the pattern must be one of
//! the project's (404 otherwise), and the pages follow the store's id order behind an opaque
//! cursor. A source URL's credentials are never shown, here as in the pattern list.
//!
//! Without a `memory:` section the gateway has no memory service, and these routes answer 503
//! `memory_off`.

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use bridle_memory::{
    ChunkFilter, IndexedChunk, Memory, MemoryError, MemoryFilter, MemoryService, PatternHit,
    RecallHit,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::AdminActor;
use super::error::{ApiError, ProblemDetails};
use super::page::{ApiJson, ApiPath, ApiQuery, DEFAULT_LIMIT, decode_cursor, encode_cursor};
use super::patterns::{unknown_example, unknown_pattern};
use super::{AdminState, blocking, load_stored, path, record};
use crate::audit::{Kind, Outcome};
use crate::memory::runs::redact_url;

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/memory/sessions"), get(sessions))
        .route(&path("/memory/sessions/purge"), post(purge_sessions))
        .route(&path("/memory/sessions/reembed"), post(reembed_sessions))
        .route(&path("/memory/patterns"), get(patterns))
        .route(&path("/memory/patterns/{tag}/purge"), post(purge_tag))
        .route(
            &path("/projects/{project}/patterns/{pattern}/chunks"),
            get(pattern_chunks),
        )
}

impl From<MemoryError> for ApiError {
    fn from(e: MemoryError) -> Self {
        let detail = e.to_string();
        match e {
            MemoryError::InvalidInput(_) => ApiError::Invalid {
                code: "invalid_request",
                detail,
                errors: Vec::new(),
            },
            MemoryError::UnknownTag(_) => ApiError::NotFound {
                code: "unknown_tag",
                detail,
            },
            MemoryError::UnknownMemory(_) => ApiError::NotFound {
                code: "unknown_memory",
                detail,
            },
            // The stored vectors are another model's: re-indexing resolves it.
            MemoryError::ModelMismatch { .. } => ApiError::Conflict {
                code: "model_mismatch",
                detail,
            },
            other => {
                tracing::error!(error = %crate::logging::one_line(&other), code = other.code(), "memory failed");
                ApiError::Internal(format!(
                    "the memory service failed ({}); see the gateway's log",
                    other.code()
                ))
            }
        }
    }
}

pub(crate) fn memory_of(s: &AdminState) -> Result<MemoryService, ApiError> {
    s.memory.clone().ok_or_else(|| ApiError::Unavailable {
        code: "memory_off",
        detail: "this gateway runs without memory (add a `memory:` section to bridle.yaml)".into(),
    })
}

/// Filters and paging of session memories; with `q`, a ranked search instead of a listing.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MemoryQuery {
    /// Search text: ranked hits (at most `limit`, 1 to 100) instead of a listing.
    pub q: Option<String>,
    /// Only this project.
    pub project: Option<String>,
    /// Only this agent.
    pub agent: Option<String>,
    /// Only this kind (`decision`, `context`, ...).
    pub kind: Option<String>,
    /// Only this session.
    pub session: Option<String>,
    /// Only memories with this tag.
    pub tag: Option<String>,
    /// Page size (1 to 1000, default 50; a search: 1 to 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
    /// From a previous page's `next_cursor` (listings only).
    pub cursor: Option<String>,
}

/// Session memories: a page of a listing, or a search's hits (each with its `score`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MemoryPage {
    /// The memories (`id`, `kind`, `text`, `project`, `agent`, `session`, `tags`,
    /// `created_at`; a search adds `score`).
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<serde_json::Value>,
    /// Pass as `cursor` for the next page of a listing; absent on the last and on searches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Which session memories to purge (every field set must match; at least a project).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PurgeSessions {
    /// The project (required).
    pub project: String,
    /// Only this agent's.
    pub agent: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this session's.
    pub session: Option<String>,
    /// Only memories carrying all of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// What a purge removed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Purged {
    /// How many memories or chunks.
    pub removed: u64,
}

/// Search of the indexed pattern examples.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PatternQuery {
    /// The search text (required).
    pub q: Option<String>,
    /// Only this pattern (`arch_tag`).
    pub arch_tag: Option<String>,
    /// Hits (1 to 100, default 10).
    #[param(minimum = 1, maximum = 100)]
    pub limit: Option<usize>,
}

/// Pattern-example chunks found.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PatternPage {
    /// The hits (`file_path`, `start_line`, `end_line`, `chunk_type`, `context`, `score`,
    /// `reference_tag`, `arch_tag`, `source_repo`, `snippet`).
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<PatternHit>,
}

fn to_value<T: Serialize>(v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// Session memories: listed by filter, or searched with `q`.
#[utoipa::path(get, path = "/admin/api/v1/memory/sessions", tag = "memory",
    params(MemoryQuery),
    responses(
        (status = 200, body = MemoryPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`model_mismatch`: a search met memories of another embedding model (`POST /memory/sessions/reembed`)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no memory service", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn sessions(
    State(s): State<AdminState>,
    ApiQuery(q): ApiQuery<MemoryQuery>,
) -> Result<axum::Json<MemoryPage>, ApiError> {
    let memory = memory_of(&s)?;
    let filter = MemoryFilter {
        project: q.project.filter(|v| !v.is_empty()),
        kind: q.kind.filter(|v| !v.is_empty()),
        agent: q.agent.filter(|v| !v.is_empty()),
        session: q.session.filter(|v| !v.is_empty()),
        tags: q.tag.filter(|v| !v.is_empty()).into_iter().collect(),
    };
    if let Some(text) = q.q.filter(|t| !t.trim().is_empty()) {
        let limit = q.limit.unwrap_or(10);
        if limit == 0 || limit > 100 {
            return Err(ApiError::BadQuery(
                "a search's `limit` must be between 1 and 100".into(),
            ));
        }
        let hits: Vec<RecallHit> = memory.session.recall(&text, &filter, limit).await?;
        return Ok(axum::Json(MemoryPage {
            items: hits.iter().map(to_value).collect(),
            next_cursor: None,
        }));
    }
    let limit = q.limit.unwrap_or(50);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::BadQuery(
            "`limit` must be between 1 and 1000".into(),
        ));
    }
    let after = match q.cursor.as_deref().filter(|c| !c.is_empty()) {
        None => None,
        Some(c) => Some(
            c.parse::<u64>()
                .map_err(|_| ApiError::BadQuery("`cursor` is not one this API returned".into()))?,
        ),
    };
    let (items, next): (Vec<Memory>, Option<u64>) =
        memory.session.list(&filter, after, limit).await?;
    Ok(axum::Json(MemoryPage {
        items: items.iter().map(to_value).collect(),
        next_cursor: next.map(|n| n.to_string()),
    }))
}

/// Deletes every session memory the filter matches (at least a project).
#[utoipa::path(post, path = "/admin/api/v1/memory/sessions/purge", tag = "memory",
    request_body = PurgeSessions,
    responses(
        (status = 200, body = Purged),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no memory service", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn purge_sessions(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiJson(body): ApiJson<PurgeSessions>,
) -> Result<axum::Json<Purged>, ApiError> {
    let memory = memory_of(&s)?;
    if body.project.trim().is_empty() {
        return Err(ApiError::invalid("a purge names a `project`"));
    }
    let filter = MemoryFilter {
        project: Some(body.project.clone()),
        kind: body.kind,
        agent: body.agent.clone(),
        session: body.session,
        tags: body.tags,
    };
    let removed = memory.session.forget_matching(&filter).await?;
    tracing::info!(project = ?body.project, removed, admin = %admin.identity.name, "session memories purged through the admin API");
    let mut entry = admin
        .entry(Kind::MemoryPurge)
        .project(&body.project)
        .subject("session memories")
        .detail(format!("removed {removed} session memories"));
    if let Some(a) = &body.agent {
        entry = entry.about_agent(a);
    }
    let ctx = s.ctx.clone();
    super::blocking(move || record(&ctx, entry, "the purge")).await?;
    Ok(axum::Json(Purged { removed }))
}

/// Embeds the session memories of another embedding model again.
///
/// After the gateway's `memory.embedder` changed, a search that meets a memory embedded by the
/// old model answers 409 `model_mismatch`; this embeds those memories again from their stored
/// text. Memories the configured model embedded are left alone, so running it again does
/// nothing. Recorded as `memory_reembed`.
#[utoipa::path(post, path = "/admin/api/v1/memory/sessions/reembed", tag = "memory",
    responses(
        (status = 200, body = Reembedded),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 500, description = "the embedder or the store failed; what was embedded before stays", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no memory service", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn reembed_sessions(
    State(s): State<AdminState>,
    admin: AdminActor,
) -> Result<axum::Json<Reembedded>, ApiError> {
    let memory = memory_of(&s)?;
    let mut report = bridle_memory::ReembedReport::default();
    let outcome = memory.session.reembed_into(&mut report).await;
    tracing::info!(
        reembedded = report.reembedded,
        unchanged = report.unchanged,
        failed = outcome.as_ref().err().map(|e| e.code()),
        admin = %admin.identity.name,
        "session memories embedded again through the admin API"
    );
    let mut entry = admin.entry(Kind::MemoryReembed).subject("session memories");
    // A run that failed part-way changed what it did before the failure: recorded too.
    entry = match &outcome {
        Ok(()) => entry.detail(format!(
            "embedded {} session memories again with the configured model ({} unchanged)",
            report.reembedded, report.unchanged
        )),
        Err(e) => entry.outcome(Outcome::error(e.code())).detail(format!(
            "embedded {} session memories again with the configured model before it failed",
            report.reembedded
        )),
    };
    let ctx = s.ctx.clone();
    super::blocking(move || record(&ctx, entry, "the re-embedding")).await?;
    outcome?;
    Ok(axum::Json(Reembedded {
        reembedded: report.reembedded,
        unchanged: report.unchanged,
    }))
}

/// What a re-embedding did.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Reembedded {
    /// Memories embedded again by the configured model.
    pub reembedded: u64,
    /// Memories already embedded by it, left as they were.
    pub unchanged: u64,
}

/// Searches the indexed pattern examples.
#[utoipa::path(get, path = "/admin/api/v1/memory/patterns", tag = "memory",
    params(PatternQuery),
    responses(
        (status = 200, body = PatternPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no memory service", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn patterns(
    State(s): State<AdminState>,
    ApiQuery(q): ApiQuery<PatternQuery>,
) -> Result<axum::Json<PatternPage>, ApiError> {
    let memory = memory_of(&s)?;
    let text =
        q.q.filter(|t| !t.trim().is_empty())
            .ok_or_else(|| ApiError::BadQuery("give the search text as `q`".into()))?;
    let limit = q.limit.unwrap_or(10);
    if limit == 0 || limit > 100 {
        return Err(ApiError::BadQuery(
            "`limit` must be between 1 and 100".into(),
        ));
    }
    let items = memory
        .patterns
        .search(&text, q.arch_tag.as_deref(), limit)
        .await?
        .into_iter()
        .map(|mut h| {
            h.source_repo = redact_url(&h.source_repo);
            h
        })
        .collect();
    Ok(axum::Json(PatternPage { items }))
}

/// Removes one example's indexed chunks, by its reference tag.
#[utoipa::path(post, path = "/admin/api/v1/memory/patterns/{tag}/purge", tag = "memory",
    params(("tag" = String, Path, description = "The example's reference tag")),
    responses(
        (status = 200, body = Purged),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no memory service", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn purge_tag(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(tag): ApiPath<String>,
) -> Result<axum::Json<Purged>, ApiError> {
    let memory = memory_of(&s)?;
    let removed = memory.patterns.purge(&tag).await?;
    tracing::info!(tag = ?tag, removed, admin = %admin.identity.name, "pattern chunks purged through the admin API");
    let entry = admin
        .entry(Kind::MemoryPurge)
        .subject(format!("pattern examples {tag}"))
        .detail(format!("removed {removed} chunks"));
    let ctx = s.ctx.clone();
    super::blocking(move || record(&ctx, entry, "the purge")).await?;
    Ok(axum::Json(Purged { removed }))
}

/// Filters and paging of a pattern's indexed chunks.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ChunkQuery {
    /// Only this example's chunks (one of the pattern's reference tags).
    pub tag: Option<String>,
    /// Only chunks of this type (`function`, `type`, `impl`, `module`, `block`, `section`,
    /// `window`).
    pub chunk_type: Option<String>,
    /// Only chunks of this file (its path in the repository).
    pub file: Option<String>,
    /// Page size (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

/// A page of a pattern's indexed chunks.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ChunkList {
    /// The project.
    pub project: String,
    /// The pattern.
    pub pattern: String,
    /// The chunks (`id`, `reference_tag`, `arch_tag`, `source_repo`, `file_path`,
    /// `start_line`, `end_line`, `chunk_type`, `context`, `language`, `last_indexed`,
    /// `snippet`), in a stable order.
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<IndexedChunk>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The indexed chunks of a project's pattern (of its example repositories), paged and
/// filterable.
#[utoipa::path(get, path = "/admin/api/v1/projects/{project}/patterns/{pattern}/chunks", tag = "patterns",
    params(
        ("project" = String, Path, description = "The project id"),
        ("pattern" = String, Path, description = "The custom pattern's name"),
        ChunkQuery,
    ),
    responses(
        (status = 200, body = ChunkList),
        (status = 400, description = "a bad `cursor` or `limit`", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "no such project, pattern, or example of the pattern", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project or pattern may have", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 503, description = "no memory service", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn pattern_chunks(
    State(s): State<AdminState>,
    ApiPath((project, pattern)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<ChunkQuery>,
) -> Result<axum::Json<ChunkList>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > bridle_memory::patterns::MAX_CHUNK_PAGE {
        return Err(ApiError::BadQuery(format!(
            "`limit` must be between 1 and {}",
            bridle_memory::patterns::MAX_CHUNK_PAGE
        )));
    }
    let start =
        match q.cursor.as_deref().filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => Some(decode_cursor::<u64>(c).ok_or_else(|| {
                ApiError::BadQuery("`cursor` is not one this API returned".into())
            })?),
        };
    let ctx = s.ctx.clone();
    let p = project.clone();
    let doc = blocking(move || Ok(load_stored(&ctx.store, &p)?.document)).await?;
    let custom = doc
        .patterns
        .custom
        .iter()
        .find(|c| c.name == pattern)
        .ok_or_else(|| unknown_pattern(&project, &pattern))?;
    let mut tags: Vec<String> = custom
        .example_repos
        .iter()
        .map(|r| r.reference_tag.clone())
        .collect();
    if let Some(tag) = q.tag.filter(|t| !t.is_empty()) {
        if !tags.contains(&tag) {
            return Err(unknown_example(&pattern, &tag));
        }
        tags = vec![tag];
    }
    let memory = memory_of(&s)?;
    let mut list = ChunkList {
        project,
        pattern,
        items: Vec::new(),
        next_cursor: None,
    };
    // A pattern without examples has no chunks (an empty tag list would mean every example's).
    if tags.is_empty() {
        return Ok(axum::Json(list));
    }
    let filter = ChunkFilter {
        arch_tag: None,
        reference_tags: tags,
        chunk_type: q.chunk_type.filter(|v| !v.is_empty()),
        file_path: q.file.filter(|v| !v.is_empty()),
    };
    let page = memory.patterns.chunks(&filter, start, limit).await?;
    list.items = page
        .items
        .into_iter()
        .map(|mut c| {
            c.source_repo = redact_url(&c.source_repo);
            c
        })
        .collect();
    list.next_cursor = page.next.map(|n| encode_cursor(&n));
    Ok(axum::Json(list))
}
