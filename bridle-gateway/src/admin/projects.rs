//! Projects: the canonical rules documents. List, create, read (JSON or YAML, with the
//! revision as an `ETag`), replace against a base revision (a stale one is 409 with the
//! current revision), render for an agent type, diff two revisions, and the change history.
//!
//! An older document is rewritten in the current schema version on request (`upgrade`), as a
//! new revision with its own history entry.
//!
//! A submitted document is either JSON (`document`) or YAML text (`yaml`); both go through the
//! rules crate's loader, so migrations and checks are the same as for a file on disk, and a
//! YAML mistake comes back with its line and column.

use std::path::Path;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bridle_rules::{ChangeRecord, RulesDocument, RulesError};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::AdminActor;
use super::error::{ApiError, ProblemDetails};
use super::page::{ApiJson, ApiPath, ApiQuery, paginate, source_filter};
use super::{AdminState, blame, blocking, load_stored, path, record};
use crate::audit::{Change, Kind};

/// The media type of a YAML document.
pub const YAML: &str = "application/yaml";

pub(crate) fn routes() -> Router<AdminState> {
    Router::new()
        .route(&path("/projects"), get(list).post(create))
        .route(&path("/projects/{project}"), get(get_one).put(replace))
        .route(
            &path("/projects/{project}/render/{agent_type}"),
            get(render),
        )
        .route(&path("/projects/{project}/diff"), get(diff))
        .route(&path("/projects/{project}/history"), get(history))
        .route(
            &path("/projects/{project}/revisions/{revision}"),
            get(revision),
        )
        .route(&path("/projects/{project}/upgrade"), post(upgrade))
}

/// A project in a list.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProjectSummary {
    /// The project id.
    pub name: String,
    /// The human name from the document.
    pub title: String,
    /// The document's revision.
    pub revision: u64,
    /// How many guardrails it has.
    pub guardrails: usize,
    /// Why the stored document does not load, by the store's code (`parse_error`,
    /// `invalid_document`, `schema_too_new`, `migration_failed`, or a store failure's);
    /// absent when it loads. Such a project is listed (title empty, revision and guardrails
    /// 0) so that an admin finds it to fix; its routes answer `stored_document_invalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A page of projects.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProjectPage {
    /// The projects, by id.
    pub items: Vec<ProjectSummary>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Paging and filters of the project list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProjectQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// Only projects whose id contains this text.
    pub q: Option<String>,
}

/// A project's canonical document with its revision.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ProjectDocument {
    /// The project id.
    pub project: String,
    /// The document's revision (also the `ETag`).
    pub revision: u64,
    /// The document (the rules JSON Schema, `bridle-rules/schema/rules.schema.json`).
    #[schema(value_type = Object)]
    pub document: RulesDocument,
    /// The same document as canonical YAML.
    pub yaml: String,
}

/// A new project.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    /// The project id (lowercase letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// The document as JSON (give this or `yaml`).
    #[schema(value_type = Option<Object>)]
    pub document: Option<serde_json::Value>,
    /// The document as YAML text (give this or `document`).
    pub yaml: Option<String>,
}

/// A replacement document, based on the revision the editor started from.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplaceProject {
    /// The revision the edit started from; a stale one is refused with 409.
    pub base_revision: u64,
    /// The document as JSON (give this or `yaml`).
    #[schema(value_type = Option<Object>)]
    pub document: Option<serde_json::Value>,
    /// The document as YAML text (give this or `document`).
    pub yaml: Option<String>,
    /// One line for the change history (default: "edit through the admin API").
    pub summary: Option<String>,
    /// Replace the stored document even if it does not load (a hand edit that broke the
    /// project's file), which is otherwise refused with 409 `stored_document_invalid`. The
    /// edit is then based on the newest revision known: the one the broken document still
    /// names, else the newest in the project's history (a stale base is 409 with
    /// `current_revision`). A document a newer build wrote is never replaced. Without effect
    /// when the stored document loads.
    #[serde(default)]
    pub repair: bool,
}

/// Where a change landed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Saved {
    /// The project id.
    pub project: String,
    /// The document's new revision.
    pub revision: u64,
    /// Set when the change replaced a stored document that did not load (`repair`): the
    /// store's code for why it did not (`parse_error`, `invalid_document`,
    /// `migration_failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<String>,
}

/// A document rendered for one agent type.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RenderedFile {
    /// The project id.
    pub project: String,
    /// The agent type.
    pub agent_type: String,
    /// The revision rendered.
    pub revision: u64,
    /// Where the file goes, relative to the project root.
    pub path: String,
    /// The file's content.
    pub content: String,
}

/// Which two revisions to compare.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DiffQuery {
    /// The older revision.
    pub from: u64,
    /// The newer revision (default: the current one).
    pub to: Option<u64>,
}

/// A unified diff between two revisions of a document's YAML.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RevisionDiff {
    /// The project id.
    pub project: String,
    /// The older revision.
    pub from: u64,
    /// The newer revision.
    pub to: u64,
    /// The unified diff (empty when they are the same).
    pub diff: String,
}

/// One entry of a project's change history.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChangeEntry {
    /// The change id (grows across projects).
    pub id: u64,
    /// The revision the change produced.
    pub revision: u64,
    /// `user`, `agent` or `vendor`: where the change came from.
    pub source: String,
    /// Who made or approved it (`admin:<name>@api` through this API).
    pub actor: String,
    /// One line.
    pub summary: String,
    /// The proposal it promoted, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proposal_id: Option<u64>,
    /// When (RFC 3339).
    pub at: String,
}

impl From<ChangeRecord> for ChangeEntry {
    fn from(c: ChangeRecord) -> Self {
        Self {
            id: c.id,
            revision: c.revision,
            source: c.source.as_str().to_string(),
            actor: c.actor,
            summary: c.summary,
            proposal_id: c.proposal_id,
            at: c.at,
        }
    }
}

/// A page of history.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ChangePage {
    /// The changes, oldest first.
    pub items: Vec<ChangeEntry>,
    /// Pass as `cursor` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Paging and filters of the history.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size (1 to 500, default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// Only changes from this source (`user`, `agent`, `vendor`); any other value is 400.
    pub source: Option<String>,
    /// Only changes by this actor.
    pub actor: Option<String>,
}

/// Lists the projects.
#[utoipa::path(get, path = "/admin/api/v1/projects", tag = "projects",
    params(ProjectQuery),
    responses(
        (status = 200, body = ProjectPage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn list(
    State(s): State<AdminState>,
    ApiQuery(q): ApiQuery<ProjectQuery>,
) -> Result<axum::Json<ProjectPage>, ApiError> {
    let ctx = s.ctx.clone();
    let filter = q.q.clone();
    let summaries = blocking(move || {
        let mut out = Vec::new();
        for name in ctx.store.projects()? {
            if filter.as_deref().is_some_and(|f| !name.contains(f)) {
                continue;
            }
            match ctx.store.load(&name) {
                Ok(loaded) => out.push(ProjectSummary {
                    title: loaded.document.project.name.clone(),
                    revision: loaded.document.revision,
                    guardrails: loaded.document.guardrails.len(),
                    name,
                    problem: None,
                }),
                // A broken file is still a project an admin must see (to fix it).
                Err(e) => {
                    tracing::warn!(project = %name, error = %crate::logging::one_line(&e), "project does not load");
                    out.push(ProjectSummary {
                        title: String::new(),
                        revision: 0,
                        guardrails: 0,
                        problem: Some(e.code().to_string()),
                        name,
                    });
                }
            }
        }
        Ok(out)
    })
    .await?;
    let page = paginate(summaries, |p| p.name.clone(), q.cursor.as_deref(), q.limit)?;
    Ok(axum::Json(ProjectPage {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

/// Parses a submitted document (JSON or YAML) through the rules loader, on the blocking pool:
/// a document as large as the body limit allows takes a while to re-encode, parse and
/// validate, and on an async worker it would hold that worker, and every request queued
/// behind it, meanwhile.
async fn parse_submitted(
    s: &AdminState,
    project: &str,
    document: Option<serde_json::Value>,
    yaml: Option<String>,
) -> Result<RulesDocument, ApiError> {
    enum Submitted {
        Json(serde_json::Value),
        Yaml(String),
    }
    let submitted = match (document, yaml) {
        (Some(doc), None) => Submitted::Json(doc),
        (None, Some(yaml)) => Submitted::Yaml(yaml),
        _ => {
            return Err(ApiError::invalid(
                "give the document as exactly one of `document` (JSON) or `yaml` (text)",
            ));
        }
    };
    let ctx = s.ctx.clone();
    let project = project.to_owned();
    blocking(move || {
        let text = match submitted {
            Submitted::Json(doc) => serde_json::to_string(&doc)
                .map_err(|e| ApiError::Internal(format!("cannot re-encode the document: {e}")))?,
            Submitted::Yaml(yaml) => yaml,
        };
        let loaded = bridle_rules::load_str(
            &text,
            Path::new("request body"),
            &project,
            ctx.store.catalog(),
        )?;
        Ok(loaded.document)
    })
    .await
}

/// Creates a project.
#[utoipa::path(post, path = "/admin/api/v1/projects", tag = "projects",
    request_body = CreateProject,
    responses(
        (status = 201, body = Saved),
        (status = 400, description = "malformed JSON or YAML (with line and column)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "the project exists", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn create(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiJson(body): ApiJson<CreateProject>,
) -> Result<(StatusCode, axum::Json<Saved>), ApiError> {
    bridle_rules::check_name("project", &body.name)?;
    let doc = parse_submitted(&s, &body.name, body.document, body.yaml).await?;
    let ctx = s.ctx.clone();
    let name = body.name.clone();
    blocking(move || {
        ctx.store.create(&name, &doc, &admin.actor())?;
        tracing::info!(project = %name, admin = %admin.identity.name, "project created through the admin API");
        let entry = admin
            .entry(Kind::RulesChange)
            .project(&name)
            .subject("project created")
            .change(Change {
                after: Some("1".into()),
                ..Change::default()
            });
        record(&ctx, entry, "the project")
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(Saved {
            replaced: None,
            project: body.name,
            revision: 1,
        }),
    ))
}

fn wants_yaml(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| matches!(t.split(';').next().map(str::trim), Some(YAML | "text/yaml")))
        })
}

fn etag(revision: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{revision}\"")).expect("a number is a valid header value")
}

/// The canonical document with its revision: JSON by default, YAML with `Accept:
/// application/yaml`. The revision is also the `ETag`.
#[utoipa::path(get, path = "/admin/api/v1/projects/{project}", tag = "projects",
    params(("project" = String, Path, description = "The project id")),
    responses(
        (status = 200, body = ProjectDocument, headers(("ETag" = String, description = "The revision, quoted"))),
        (status = 200, description = "With `Accept: application/yaml`", body = String, content_type = "application/yaml"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn get_one(
    State(s): State<AdminState>,
    ApiPath(project): ApiPath<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let ctx = s.ctx.clone();
    let yaml_wanted = wants_yaml(&headers);
    // Loading, the YAML and the JSON of a document as large as the body limit allowed take a
    // while: all on the blocking pool, so no async worker (and no request queued behind it)
    // waits for them.
    let (revision, content_type, body) = blocking(move || {
        let doc = load_stored(&ctx.store, &project)?.document;
        encode_document(project, doc, yaml_wanted)
    })
    .await?;
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    response.headers_mut().insert(header::ETAG, etag(revision));
    Ok(response)
}

/// `doc` as the answer's body: YAML when `yaml_wanted`, else [`ProjectDocument`]'s JSON; with
/// its revision and content type.
fn encode_document(
    project: String,
    doc: RulesDocument,
    yaml_wanted: bool,
) -> Result<(u64, HeaderValue, Vec<u8>), ApiError> {
    let yaml = bridle_rules::to_yaml(&doc)?;
    let revision = doc.revision;
    if yaml_wanted {
        return Ok((revision, HeaderValue::from_static(YAML), yaml.into_bytes()));
    }
    let json = serde_json::to_vec(&ProjectDocument {
        project,
        revision,
        document: doc,
        yaml,
    })
    .map_err(|e| ApiError::Internal(format!("cannot encode the document: {e}")))?;
    Ok((revision, HeaderValue::from_static("application/json"), json))
}

/// The document as it was at one revision, from the copies the store keeps of each revision it
/// wrote (an older one is 404). Also answers while the current document does not load: the
/// revision to base a `repair` on (see [`ReplaceProject::repair`]) can be read here.
#[utoipa::path(get, path = "/admin/api/v1/projects/{project}/revisions/{revision}", tag = "projects",
    params(
        ("project" = String, Path, description = "The project id"),
        ("revision" = u64, Path, description = "The revision"),
    ),
    responses(
        (status = 200, body = ProjectDocument),
        (status = 200, description = "With `Accept: application/yaml`", body = String, content_type = "application/yaml"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "unknown project, a revision the store keeps no copy of, or one that is not a number", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`stored_document_invalid`: the kept copy of that revision does not load (a newer build wrote it, or it was kept as it was broken by hand)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn revision(
    State(s): State<AdminState>,
    ApiPath((project, revision)): ApiPath<(String, u64)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let ctx = s.ctx.clone();
    let yaml_wanted = wants_yaml(&headers);
    let (_, content_type, body) = blocking(move || {
        let doc = ctx
            .store
            .document_at(&project, revision)
            .map_err(|e| ApiError::stored_revision(&project, revision, e))?;
        encode_document(project, doc, yaml_wanted)
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// Replaces the document, based on `base_revision`. A stale base is 409 with
/// `current_revision`; nothing is written then.
#[utoipa::path(put, path = "/admin/api/v1/projects/{project}", tag = "projects",
    params(("project" = String, Path, description = "The project id")),
    request_body = ReplaceProject,
    responses(
        (status = 200, body = Saved),
        (status = 400, description = "malformed JSON or YAML (with line and column)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "stale base revision; `current_revision` says the current one; `stored_document_invalid`: the project's stored document does not load (fix it where it is stored, or send the edit with `repair`)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 413, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn replace(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(project): ApiPath<String>,
    ApiJson(body): ApiJson<ReplaceProject>,
) -> Result<axum::Json<Saved>, ApiError> {
    let doc = parse_submitted(&s, &project, body.document, body.yaml).await?;
    let summary = body
        .summary
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "edit through the admin API".into());
    let ctx = s.ctx.clone();
    let name = project.clone();
    let (revision, replaced) = blocking(move || {
        let (revision, replaced) = if body.repair {
            let saved = ctx
                .store
                .save_repair(&name, &doc, body.base_revision, &admin.actor(), &summary)
                .map_err(|e| blame(&ctx.store, &name, e))?;
            (saved.revision, saved.replaced.map(|e| e.code()))
        } else {
            let revision = ctx
                .store
                .save_edit(&name, &doc, body.base_revision, &admin.actor(), &summary)
                .map_err(|e| blame(&ctx.store, &name, e))?;
            (revision, None)
        };
        // The audit entry names why the replaced document did not load (its code), never its
        // text: a hand-edited file may hold anything.
        let subject = match replaced {
            Some(code) => format!("document replaced; the stored one did not load ({code})"),
            None => "document replaced".to_string(),
        };
        let entry = admin
            .entry(Kind::RulesChange)
            .project(&name)
            .subject(&subject)
            .change(Change::revisions(
                body.base_revision.to_string(),
                revision.to_string(),
            ));
        record(&ctx, entry, "the edit")?;
        Ok((revision, replaced))
    })
    .await?;
    Ok(axum::Json(Saved {
        project,
        revision,
        replaced: replaced.map(str::to_string),
    }))
}

/// The document rendered for one agent type (the file that agent reads).
#[utoipa::path(get, path = "/admin/api/v1/projects/{project}/render/{agent_type}", tag = "projects",
    params(
        ("project" = String, Path, description = "The project id"),
        ("agent_type" = String, Path, description = "An agent type of the catalog (claude, codex, ...)"),
    ),
    responses(
        (status = 200, body = RenderedFile),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "unknown project or agent type", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project or agent type may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn render(
    State(s): State<AdminState>,
    ApiPath((project, agent_type)): ApiPath<(String, String)>,
) -> Result<axum::Json<RenderedFile>, ApiError> {
    let ctx = s.ctx.clone();
    // Rendering a large document takes a while: on the blocking pool, as the load is.
    let rendered = blocking(move || {
        let doc = load_stored(&ctx.store, &project)?.document;
        let rendered = ctx.renderer.render(&project, &doc, &agent_type)?;
        Ok(RenderedFile {
            project,
            agent_type: rendered.agent,
            revision: doc.revision,
            path: rendered.path,
            content: rendered.content,
        })
    })
    .await?;
    Ok(axum::Json(rendered))
}

/// A unified diff between two revisions' YAML. Revisions are kept from the time the store
/// started keeping copies; an older one is 404.
#[utoipa::path(get, path = "/admin/api/v1/projects/{project}/diff", tag = "projects",
    params(("project" = String, Path, description = "The project id"), DiffQuery),
    responses(
        (status = 200, body = RevisionDiff),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, description = "unknown project or revision", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn diff(
    State(s): State<AdminState>,
    ApiPath(project): ApiPath<String>,
    ApiQuery(q): ApiQuery<DiffQuery>,
) -> Result<axum::Json<RevisionDiff>, ApiError> {
    let ctx = s.ctx.clone();
    // Two large documents' YAML and the diff between them take a while: on the blocking pool,
    // as the loads are.
    let diff = blocking(move || {
        let current = load_stored(&ctx.store, &project)?.document;
        let from = q.from;
        let to = q.to.unwrap_or(current.revision);
        let at = |revision| {
            ctx.store
                .document_at(&project, revision)
                .map_err(|e| ApiError::stored(&project, e))
        };
        let (old, new) = (at(from)?, at(to)?);
        let diff = unified_diff(
            &bridle_rules::to_yaml(&old)?,
            &bridle_rules::to_yaml(&new)?,
            &format!("{project}@{from}"),
            &format!("{project}@{to}"),
        );
        Ok(RevisionDiff {
            project,
            from,
            to,
            diff,
        })
    })
    .await?;
    Ok(axum::Json(diff))
}

/// A unified diff of two texts (empty when equal), in bounded time
/// ([`bridle_rules::DIFF_DEADLINE`]).
pub(crate) fn unified_diff(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    bridle_rules::unified_diff(old, new, old_name, new_name)
}

/// The change history of a project, oldest first.
#[utoipa::path(get, path = "/admin/api/v1/projects/{project}/history", tag = "projects",
    params(("project" = String, Path, description = "The project id"), HistoryQuery),
    responses(
        (status = 200, body = ChangePage),
        (status = 400, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn history(
    State(s): State<AdminState>,
    ApiPath(project): ApiPath<String>,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> Result<axum::Json<ChangePage>, ApiError> {
    let source = source_filter(q.source.as_deref())?;
    let ctx = s.ctx.clone();
    let actor = q.actor.clone();
    let changes = blocking(move || {
        // An unknown project is 404, not an empty history.
        if !ctx.store.project_path(&project)?.exists() {
            return Err(RulesError::UnknownProject(project).into());
        }
        Ok(ctx
            .store
            .changes(Some(&project), 0)?
            .into_iter()
            .map(ChangeEntry::from)
            .filter(|c| source.is_none_or(|s| c.source == s.as_str()))
            .filter(|c| actor.as_deref().is_none_or(|a| c.actor == a))
            .collect::<Vec<_>>())
    })
    .await?;
    let page = paginate(changes, |c| c.id, q.cursor.as_deref(), q.limit)?;
    Ok(axum::Json(ChangePage {
        items: page.items,
        next_cursor: page.next_cursor,
    }))
}

/// What an upgrade did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Upgraded {
    /// The project.
    pub project: String,
    /// The schema version the document was migrated from; absent when it already was current
    /// (then nothing was written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migrated_from: Option<u32>,
    /// The document's revision now.
    pub revision: u64,
}

/// Rewrites an older document in the current schema version, as a new revision recorded in
/// the history and the audit log. A document already current is left alone (no new revision).
#[utoipa::path(post, path = "/admin/api/v1/projects/{project}/upgrade", tag = "projects",
    params(("project" = String, Path, description = "The project id")),
    responses(
        (status = 200, body = Upgraded),
        (status = 401, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 404, body = ProblemDetails, content_type = "application/problem+json"),
        (status = 409, description = "`stored_document_invalid`: the project's stored document does not load (fix it where it is stored)", body = ProblemDetails, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_name`: a name in the path that no project may have", body = ProblemDetails, content_type = "application/problem+json"),
    ),
    security(("admin_token" = [])))]
pub async fn upgrade(
    State(s): State<AdminState>,
    admin: AdminActor,
    ApiPath(project): ApiPath<String>,
) -> Result<axum::Json<Upgraded>, ApiError> {
    let ctx = s.ctx.clone();
    let name = project.clone();
    let (migrated_from, revision) = blocking(move || {
        // No document of the request's: every document error is the stored one's.
        let migrated_from = ctx
            .store
            .upgrade(&name, &admin.actor())
            .map_err(|e| ApiError::stored(&name, e))?;
        let revision = load_stored(&ctx.store, &name)?.document.revision;
        if let Some(from) = migrated_from {
            let entry = admin
                .entry(Kind::RulesChange)
                .project(&name)
                .subject(format!("migrated from schema_version {from}"))
                .change(Change::revisions(
                    revision.saturating_sub(1).to_string(),
                    revision.to_string(),
                ));
            record(&ctx, entry, "the upgrade")?;
        }
        Ok((migrated_from, revision))
    })
    .await?;
    Ok(axum::Json(Upgraded {
        project,
        migrated_from,
        revision,
    }))
}
