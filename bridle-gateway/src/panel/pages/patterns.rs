//! Patterns and example repositories: every project's well-known (standard) patterns, and its
//! custom patterns with their examples and when each was last indexed; adding and removing a
//! standard pattern, a custom pattern or an example (a custom pattern's or an example's removal
//! asks in a native `<dialog>` for the name to be typed, checked again here); renaming a custom
//! pattern or changing its description against the revision the page showed (when someone
//! saved since, the conflict page shows both versions and offers the admin's again, based on
//! the new revision); and re-indexing an example with a live progress bar. Each pattern links
//! to its indexed chunks ([`super::chunks`]). A watcher sees the same page without its forms.
//!
//! A re-index is the admin API's `POST …/index-runs`; the page then follows the run through
//! `GET /patterns/runs/{id}/events`, which reads the API's `GET /index-runs/{id}/events` in
//! process and turns each event into the bar's HTML (a `<progress>` and a sentence), for htmx's
//! SSE extension to swap in. The API replays a run from its start, so a page opened late, or
//! reloaded, still shows the whole run and its end; an example being indexed by someone else
//! (another admin, or an agent's `refresh_pattern_example`) shows the same bar. After the end
//! the stream sends `end`, on which the extension closes it.

use std::convert::Infallible;

use axum::extract::{Extension, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use kberg_core::counted;
use minijinja::context;
use minijinja::value::Serde;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Notice, PanelForm, PanelPath, PanelQuery, confirm_matches};
use crate::admin::patterns::PatternList;
use crate::admin::projects::ProjectPage;
use crate::panel::Panel;
use crate::panel::api::{Problem, seg};
use crate::panel::session::SignedIn;
use crate::panel::view::{PanelError, see_other};

/// A project's patterns as the page shows them, or why its document does not load.
#[derive(Debug, Serialize)]
struct ProjectPatterns {
    name: String,
    title: String,
    patterns: Option<PatternList>,
    problem: Option<Problem>,
}

/// What the page was opened for: a run to follow.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunQuery {
    #[serde(default)]
    run: Option<String>,
    #[serde(default)]
    tag: Option<String>,
}

/// `GET /patterns`.
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    notice: Notice,
    PanelQuery(follow): PanelQuery<RunQuery>,
) -> Result<Response, PanelError> {
    let projects: ProjectPage = panel.api.get(&who, "/projects?limit=500").await?;
    let mut shown = Vec::with_capacity(projects.items.len());
    for p in projects.items {
        // A project whose stored document does not load is shown with the API's problem, so
        // that one broken file neither hides the others' patterns nor is hidden itself.
        let (patterns, problem) = match panel
            .api
            .get::<PatternList>(&who, &format!("/projects/{}/patterns", seg(&p.name)))
            .await
        {
            Ok(patterns) => (Some(patterns), None),
            Err(problem) if problem.code == "stored_document_invalid" => (None, Some(problem)),
            Err(problem) => return Err(problem.into()),
        };
        shown.push(ProjectPatterns {
            name: p.name,
            title: p.title,
            patterns,
            problem,
        });
    }
    // The run the admin just started, drawn on its example's row (until it is in the list's
    // `run_id`, or after it ended).
    let follow = match (follow.run, follow.tag) {
        (Some(run), Some(tag)) if is_run_id(&run) => Some((tag, run)),
        _ => None,
    };
    Ok(panel
        .page(
            &who,
            "patterns.html",
            "patterns",
            context! {
                projects => Serde(&shown),
                follow_tag => follow.as_ref().map(|(t, _)| t.clone()),
                follow_run => follow.map(|(_, r)| r),
                notice => notice.text(),
            },
        )?
        .into_response())
}

/// A run id as the registry makes them (hex, `-`, digits); anything else is not followed.
fn is_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-' || b.is_ascii_digit())
}

/// The add-pattern form.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct PatternForm {
    name: String,
    description: String,
}

/// The add-example form.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ExampleForm {
    url: String,
    reference_tag: String,
    arch_tag: String,
}

#[derive(Debug, Serialize)]
struct ExampleBody {
    url: String,
    reference_tag: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    arch_tag: Option<String>,
}

/// The form that renames a custom pattern or changes its description. A form without `name`
/// (or with the pattern's own) renames nothing.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ChangeForm {
    base_revision: u64,
    name: Option<String>,
    description: String,
}

#[derive(Debug, Serialize)]
struct ChangeBody<'a> {
    base_revision: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    description: &'a str,
}

/// The add-standard-pattern form.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub(crate) struct StandardForm {
    name: String,
}

/// A removal's confirmation.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ConfirmForm {
    confirm: String,
}

fn back(panel: &Panel, notice: &str, anchor: &str) -> Response {
    see_other(&panel.url(&format!("/patterns?notice={notice}#{anchor}")))
}

/// `POST /patterns/{project}`: adds a custom pattern.
pub(crate) async fn add_pattern(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(project): PanelPath<String>,
    PanelForm(form): PanelForm<PatternForm>,
) -> Result<Response, PanelError> {
    let body = PatternForm {
        name: form.name.trim().to_string(),
        description: form.description.trim().to_string(),
    };
    let _: Value = panel
        .api
        .call(
            &who,
            Method::POST,
            &format!("/projects/{}/patterns", seg(&project)),
            &body,
        )
        .await?;
    Ok(back(
        &panel,
        "pattern_added",
        &format!("pattern-{project}-{}", body.name),
    ))
}

/// `POST /standard-patterns/{project}`: adds a well-known pattern to those a project follows.
pub(crate) async fn add_standard(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(project): PanelPath<String>,
    PanelForm(form): PanelForm<StandardForm>,
) -> Result<Response, PanelError> {
    let body = StandardForm {
        name: form.name.trim().to_string(),
    };
    let _: Value = panel
        .api
        .call(
            &who,
            Method::POST,
            &format!("/projects/{}/standard-patterns", seg(&project)),
            &body,
        )
        .await?;
    Ok(back(
        &panel,
        "standard_added",
        &format!("standard-{project}"),
    ))
}

/// `POST /standard-patterns/{project}/{name}/remove`: removes a well-known pattern (only its
/// name goes, so no name is asked for).
pub(crate) async fn remove_standard(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath((project, name)): PanelPath<(String, String)>,
) -> Result<Response, PanelError> {
    let _: Value = panel
        .api
        .delete(
            &who,
            &format!(
                "/projects/{}/standard-patterns/{}",
                seg(&project),
                seg(&name)
            ),
        )
        .await?;
    Ok(back(
        &panel,
        "standard_removed",
        &format!("standard-{project}"),
    ))
}

/// `POST /patterns/{project}/{pattern}/change`: renames a pattern or changes its description,
/// based on the revision the form was drawn at; a stale one shows the conflict.
pub(crate) async fn change_pattern(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath((project, pattern)): PanelPath<(String, String)>,
    PanelForm(form): PanelForm<ChangeForm>,
) -> Result<Response, PanelError> {
    let mine = form.description.trim();
    let name = form
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| *n != pattern);
    let (p, c) = (seg(&project), seg(&pattern));
    let body = ChangeBody {
        base_revision: form.base_revision,
        name,
        description: mine,
    };
    match panel
        .api
        .call::<Value>(
            &who,
            Method::PATCH,
            &format!("/projects/{p}/patterns/{c}"),
            &body,
        )
        .await
    {
        Ok(_) => Ok(match name {
            Some(to) => back(
                &panel,
                "pattern_renamed",
                &format!("pattern-{project}-{to}"),
            ),
            None => back(
                &panel,
                "description_changed",
                &format!("pattern-{project}-{pattern}"),
            ),
        }),
        Err(problem) if problem.code == "revision_conflict" => {
            let now: PatternList = panel
                .api
                .get(&who, &format!("/projects/{p}/patterns"))
                .await?;
            let current = now
                .custom
                .iter()
                .find(|x| x.name == pattern)
                .map(|x| x.description.clone())
                .ok_or_else(|| {
                    PanelError::Api(crate::panel::api::Problem {
                        status: StatusCode::NOT_FOUND.as_u16(),
                        code: "unknown_pattern".into(),
                        detail: format!(
                            "project `{project}` no longer has a pattern `{pattern}` (renamed or removed since); nothing was saved"
                        ),
                        errors: Vec::new(),
                        current_revision: Some(now.revision),
                    })
                })?;
            Ok(panel
                .page_with_status(
                    &who,
                    StatusCode::CONFLICT,
                    "pattern_conflict.html",
                    "patterns",
                    context! {
                        project => project,
                        pattern => &pattern,
                        base_revision => form.base_revision,
                        revision => now.revision,
                        current => current,
                        mine => mine,
                        new_name => name.unwrap_or(&pattern),
                    },
                )?
                .into_response())
        }
        Err(problem) => Err(problem.into()),
    }
}

/// Whether a removal's answer says indexed chunks were kept (the API's `warning`).
fn chunks_kept(removed: &Value) -> bool {
    removed
        .get("warning")
        .and_then(Value::as_str)
        .is_some_and(|w| !w.is_empty())
}

/// `POST /patterns/{project}/{pattern}/remove`: removes a pattern, once its name was typed.
pub(crate) async fn remove_pattern(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath((project, pattern)): PanelPath<(String, String)>,
    PanelForm(form): PanelForm<ConfirmForm>,
) -> Result<Response, PanelError> {
    confirm_matches(&form.confirm, &pattern)?;
    let removed: Value = panel
        .api
        .delete(
            &who,
            &format!("/projects/{}/patterns/{}", seg(&project), seg(&pattern)),
        )
        .await?;
    Ok(back(
        &panel,
        if chunks_kept(&removed) {
            "pattern_removed_chunks_kept"
        } else {
            "pattern_removed"
        },
        &format!("project-{project}"),
    ))
}

/// `POST /patterns/{project}/{pattern}/examples`: adds an example repository.
pub(crate) async fn add_example(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath((project, pattern)): PanelPath<(String, String)>,
    PanelForm(form): PanelForm<ExampleForm>,
) -> Result<Response, PanelError> {
    let arch = form.arch_tag.trim();
    let body = ExampleBody {
        url: form.url.trim().to_string(),
        reference_tag: form.reference_tag.trim().to_string(),
        arch_tag: (!arch.is_empty()).then(|| arch.to_string()),
    };
    let _: Value = panel
        .api
        .call(
            &who,
            Method::POST,
            &format!(
                "/projects/{}/patterns/{}/examples",
                seg(&project),
                seg(&pattern)
            ),
            &body,
        )
        .await?;
    Ok(back(
        &panel,
        "example_added",
        &format!("example-{}", body.reference_tag),
    ))
}

/// `POST /patterns/{project}/{pattern}/examples/{tag}/remove`: removes an example (its chunks
/// too, unless another project lists its tag), once its tag was typed.
pub(crate) async fn remove_example(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath((project, pattern, tag)): PanelPath<(String, String, String)>,
    PanelForm(form): PanelForm<ConfirmForm>,
) -> Result<Response, PanelError> {
    confirm_matches(&form.confirm, &tag)?;
    let removed: Value = panel
        .api
        .delete(
            &who,
            &format!(
                "/projects/{}/patterns/{}/examples/{}",
                seg(&project),
                seg(&pattern),
                seg(&tag)
            ),
        )
        .await?;
    Ok(back(
        &panel,
        if chunks_kept(&removed) {
            "example_removed_chunks_kept"
        } else {
            "example_removed"
        },
        &format!("pattern-{project}-{pattern}"),
    ))
}

/// `POST /patterns/{project}/{pattern}/examples/{tag}/index`: starts a re-index and shows the
/// page following it.
pub(crate) async fn index(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath((project, pattern, tag)): PanelPath<(String, String, String)>,
) -> Result<Response, PanelError> {
    let started: Value = panel
        .api
        .post_empty(
            &who,
            &format!(
                "/projects/{}/patterns/{}/examples/{}/index-runs",
                seg(&project),
                seg(&pattern),
                seg(&tag)
            ),
        )
        .await?;
    let run = started["run"]["id"].as_str().unwrap_or_default();
    let query = serde_urlencoded::to_string([
        ("notice", "index_started"),
        ("run", run),
        ("tag", tag.as_str()),
    ])
    .unwrap_or_default();
    Ok(see_other(
        &panel.url(&format!("/patterns?{query}#example-{tag}")),
    ))
}

/// One step of a run as the bar's HTML.
fn bar(panel: &Panel, who: &SignedIn, name: &str, data: &Value) -> Option<String> {
    let (done, total, text, state) = match name {
        "started" => (0.0, None, "Starting…".to_string(), "running"),
        "progress" => (
            data["done"].as_f64().unwrap_or(0.0),
            data["total"].as_f64(),
            data["message"].as_str().unwrap_or("working").to_string(),
            "running",
        ),
        "done" => {
            let chunks = data["report"]["chunks"].as_f64().unwrap_or(0.0);
            let files = data["report"]["files"].as_u64().unwrap_or(0);
            (
                chunks.max(1.0),
                Some(chunks.max(1.0)),
                format!(
                    "Indexed: {} from {}.",
                    counted(chunks as u64, "chunk", "chunks"),
                    counted(files, "file", "files")
                ),
                "done",
            )
        }
        "error" => (
            0.0,
            Some(1.0),
            format!(
                "Failed ({}): {} The previous index is kept.",
                data["code"].as_str().unwrap_or("error"),
                data["detail"].as_str().unwrap_or("")
            ),
            "error",
        ),
        _ => return None,
    };
    let percent = total
        .filter(|t| *t > 0.0)
        .map(|t| ((done / t) * 100.0).clamp(0.0, 100.0).round() as u64);
    // A finished run also replaces its row's "Last indexed" (htmx's out-of-band swap), so the
    // page says what the run wrote back without a reload.
    let indexed = match (
        name,
        data["report"]["reference_tag"].as_str(),
        data["report"]["last_indexed"].as_str(),
    ) {
        ("done", Some(tag), Some(at)) => Some(context! { tag => tag, at => at }),
        _ => None,
    };
    panel
        .partial(
            who,
            "partials/index_progress.html",
            context! { done => done, total => total, percent => percent, text => text, state => state, indexed => indexed },
        )
        .ok()
        .map(|p| p.html.replace('\n', ""))
}

/// `GET /patterns/runs/{id}/events`: a run's events as the bar's HTML (`progress` events,
/// then `end`).
pub(crate) async fn run_events(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(id): PanelPath<String>,
    headers: HeaderMap,
) -> Result<Response, PanelError> {
    let session = super::live::session_id(&panel, &headers)?;
    let body = panel
        .api
        .stream(&who, &format!("/index-runs/{}/events", seg(&id)))
        .await?;
    let p = panel.clone();
    let w = who.clone();
    let events = sse_stream::SseStream::new(body)
        .filter_map(move |item| {
            let (p, w) = (p.clone(), w.clone());
            async move {
                let sse = match item {
                    Ok(sse) => sse,
                    Err(e) => {
                        tracing::debug!(error = %e, "panel could not read an index run's stream");
                        return None;
                    }
                };
                let name = sse.event.clone()?;
                let data: Value = serde_json::from_str(sse.data.as_deref().unwrap_or("{}"))
                    .unwrap_or(Value::Null);
                let html = bar(&p, &w, &name, &data)?;
                let ended = matches!(name.as_str(), "done" | "error");
                let mut out = vec![Ok::<_, Infallible>(
                    Event::default().event("progress").data(html),
                )];
                if ended {
                    out.push(Ok(Event::default().event("end").data(name)));
                }
                Some(futures::stream::iter(out))
            }
        })
        .flatten();
    let stream = events.take_until(super::live::signed_out(panel.clone(), session));
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}
