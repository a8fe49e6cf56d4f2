//! Projects: the list, a new project, and the editor of a project's canonical rules.
//!
//! Editing goes in three steps, each one API call: the editor shows the document's YAML at its
//! revision; "Review changes" shows the diff of the edit against the current document (and goes
//! straight to the conflict view when someone saved since the edit began); "Save" replaces the
//! document based on the edit's revision. A YAML or document error comes back into the editor
//! with its line and column; a stale revision comes back as the conflict view: what the other
//! save changed, what saving this edit would change now, and the edit again, based on the new
//! revision, to review and save.

use axum::extract::{Extension, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use minijinja::value::Serde;
use minijinja::{Value, context};
use serde::{Deserialize, Serialize};

use super::{Notice, PanelForm, PanelPath, PanelQuery, form_text};
use crate::admin::projects::{
    ChangePage, ProjectDocument, ProjectPage, RenderedFile, RevisionDiff, Saved,
};
use crate::panel::Panel;
use crate::panel::api::{Problem, seg};
use crate::panel::guard::is_htmx;
use crate::panel::session::SignedIn;
use crate::panel::view::{Page, PanelError, at_revision, diff_lines, see_other, unified_diff};

/// The list's filter.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    q: Option<String>,
}

/// The new-project form.
#[derive(Debug, Deserialize)]
pub(crate) struct CreateForm {
    name: String,
    yaml: String,
}

/// An edit: the YAML text and the revision it started from.
#[derive(Debug, Deserialize)]
pub(crate) struct EditForm {
    yaml: String,
    base_revision: u64,
    #[serde(default)]
    summary: String,
}

/// The preview's agent type.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct PreviewQuery {
    agent_type: Option<String>,
}

#[derive(Serialize)]
struct CreateBody<'a> {
    name: &'a str,
    yaml: &'a str,
}

#[derive(Serialize)]
struct ReplaceBody<'a> {
    base_revision: u64,
    yaml: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    summary: &'a str,
    /// Replace a stored document that does not load (the repair page's save).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    repair: bool,
}

/// A starting document for a new project: the rules crate's empty document, as YAML.
fn starter_yaml() -> String {
    bridle_rules::to_yaml(&bridle_rules::RulesDocument::new("New project")).unwrap_or_default()
}

/// `GET /projects`.
pub(crate) async fn list(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelQuery(q): PanelQuery<ListQuery>,
) -> Result<Page, PanelError> {
    list_page(&panel, &who, q.q.as_deref(), StatusCode::OK, context! {}).await
}

async fn list_page(
    panel: &Panel,
    who: &SignedIn,
    filter: Option<&str>,
    status: StatusCode,
    extra: Value,
) -> Result<Page, PanelError> {
    let mut path = "/projects?limit=500".to_string();
    if let Some(f) = filter.filter(|f| !f.is_empty()) {
        path.push('&');
        path.push_str(&serde_urlencoded::to_string([("q", f)]).unwrap_or_default());
    }
    let page: ProjectPage = panel.api.get(who, &path).await?;
    panel.page_with_status(
        who,
        status,
        "projects.html",
        "projects",
        // In `context!`, the first map given wins: the refused form's values over the defaults.
        context! {
            ..extra,
            ..context! {
                projects => Serde(page.items),
                more => page.next_cursor.is_some(),
                q => filter,
                new_name => "",
                new_yaml => starter_yaml(),
            }
        },
    )
}

/// `POST /projects`: creates a project, or shows the form again with the API's problems.
pub(crate) async fn create(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelForm(form): PanelForm<CreateForm>,
) -> Result<Response, PanelError> {
    let name = form.name.trim().to_string();
    let yaml = form_text(&form.yaml);
    let body = CreateBody {
        name: &name,
        yaml: &yaml,
    };
    match panel
        .api
        .call::<Saved>(&who, Method::POST, "/projects", &body)
        .await
    {
        Ok(saved) => Ok(see_other(
            &panel.url(&format!("/projects/{}?notice=created", seg(&saved.project))),
        )),
        Err(p) if p.status == 401 => Err(PanelError::SessionEnded),
        Err(p) => Ok(list_page(
            &panel,
            &who,
            None,
            status_of(&p),
            context! { new_name => name, new_yaml => yaml, create_problem => Serde(p) },
        )
        .await?
        .into_response()),
    }
}

fn status_of(p: &Problem) -> StatusCode {
    StatusCode::from_u16(p.status).unwrap_or(StatusCode::BAD_GATEWAY)
}

/// What the project page shows besides the editor.
struct Editor<'a> {
    yaml: &'a str,
    base_revision: u64,
    summary: &'a str,
    problem: Option<&'a Problem>,
}

async fn project_page(
    panel: &Panel,
    who: &SignedIn,
    project: &str,
    status: StatusCode,
    editor: Option<Editor<'_>>,
    preview: Option<Value>,
    notice: Option<String>,
) -> Result<Page, PanelError> {
    let p = seg(project);
    let doc_path = format!("/projects/{p}");
    let history_path = format!("/projects/{p}/history?limit=500");
    let (doc, history) = tokio::join!(
        panel.api.get::<ProjectDocument>(who, &doc_path),
        panel.api.get::<ChangePage>(who, &history_path),
    );
    let history = history.map(|h| h.items).unwrap_or_default();
    let doc = match doc {
        Ok(doc) => doc,
        // A stored document that does not load but may be repaired: the repair page, with
        // the edit that was under way if there was one.
        Err(problem) if repairable(&problem) => {
            let edit = editor.map(|e| (e.yaml.to_string(), e.summary.to_string()));
            return repair_page(panel, who, project, &problem, &history, edit, None).await;
        }
        Err(problem) => return Err(problem.into()),
    };
    let recent: Vec<_> = history.iter().rev().take(10).cloned().collect();
    let (yaml, base_revision, summary, problem) = match editor {
        Some(e) => (
            e.yaml.to_string(),
            e.base_revision,
            e.summary.to_string(),
            e.problem.cloned(),
        ),
        None => (doc.yaml.clone(), doc.revision, String::new(), None),
    };
    panel.page_with_status(
        who,
        status,
        "project.html",
        "projects",
        context! {
            project => project,
            title => doc.document.project.name,
            revision => doc.revision,
            yaml => yaml,
            base_revision => base_revision,
            summary => summary,
            problem => Serde(problem),
            history => Serde(recent),
            guardrails => Serde(&doc.document.guardrails),
            agent_types => Serde(panel.agent_types.as_slice()),
            preview => preview,
            notice => notice,
        },
    )
}

/// `GET /projects/{project}`.
pub(crate) async fn show(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(project): PanelPath<String>,
    notice: Notice,
) -> Result<Page, PanelError> {
    project_page(
        &panel,
        &who,
        &project,
        StatusCode::OK,
        None,
        None,
        notice.text(),
    )
    .await
}

/// `GET /projects/{project}/preview?agent_type=`: the file that agent type reads, rendered
/// from the saved document (a partial for htmx, else the project page with it).
pub(crate) async fn preview(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(project): PanelPath<String>,
    PanelQuery(q): PanelQuery<PreviewQuery>,
    headers: HeaderMap,
) -> Result<Page, PanelError> {
    let agent_type = q
        .agent_type
        .filter(|a| !a.trim().is_empty())
        .ok_or_else(|| PanelError::BadForm("choose an agent type to preview".into()))?;
    let rendered: RenderedFile = panel
        .api
        .get(
            &who,
            &format!("/projects/{}/render/{}", seg(&project), seg(&agent_type)),
        )
        .await?;
    let preview = Value::from(Serde(&rendered));
    if is_htmx(&headers) {
        return panel.partial(
            &who,
            "partials/preview.html",
            context! { preview => preview },
        );
    }
    project_page(
        &panel,
        &who,
        &project,
        StatusCode::OK,
        None,
        Some(preview),
        None,
    )
    .await
}

/// `POST /projects/{project}/edit`: back to the editor with the edit as it was (from the
/// review or conflict page); changes nothing.
pub(crate) async fn edit(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(project): PanelPath<String>,
    PanelForm(form): PanelForm<EditForm>,
) -> Result<Page, PanelError> {
    let yaml = form_text(&form.yaml);
    project_page(
        &panel,
        &who,
        &project,
        StatusCode::OK,
        Some(Editor {
            yaml: &yaml,
            base_revision: form.base_revision,
            summary: &form.summary,
            problem: None,
        }),
        None,
        None,
    )
    .await
}

/// `POST /projects/{project}/review`: the diff the edit would make, or the conflict view.
pub(crate) async fn review(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(project): PanelPath<String>,
    PanelForm(form): PanelForm<EditForm>,
) -> Result<Response, PanelError> {
    let current: ProjectDocument = panel
        .api
        .get(&who, &format!("/projects/{}", seg(&project)))
        .await?;
    let yaml = at_revision(&form_text(&form.yaml), form.base_revision);
    if current.revision != form.base_revision {
        return Ok(conflict_page(
            &panel,
            &who,
            &project,
            &current,
            form.base_revision,
            &yaml,
            &form.summary,
        )
        .await?
        .into_response());
    }
    Ok(review_page(&panel, &who, &project, &current, &yaml, &form.summary)?.into_response())
}

/// The review page: the diff `yaml` would make to `current`, with the form that saves it
/// against `current`'s revision.
pub(crate) fn review_page(
    panel: &Panel,
    who: &SignedIn,
    project: &str,
    current: &ProjectDocument,
    yaml: &str,
    summary: &str,
) -> Result<Page, PanelError> {
    let diff = unified_diff(
        &current.yaml,
        yaml,
        &format!("{project}@{}", current.revision),
        &format!("{project} (your edit)"),
    );
    panel.page(
        who,
        "project_review.html",
        "projects",
        context! {
            project => project,
            revision => current.revision,
            yaml => yaml,
            summary => summary,
            diff => Serde(diff_lines(&diff)),
            unchanged => diff.is_empty(),
        },
    )
}

async fn conflict_page(
    panel: &Panel,
    who: &SignedIn,
    project: &str,
    current: &ProjectDocument,
    base_revision: u64,
    mine: &str,
    summary: &str,
) -> Result<Page, PanelError> {
    // What the other save(s) changed, when the store still has the edit's base revision.
    let theirs = panel
        .api
        .get::<RevisionDiff>(
            who,
            &format!(
                "/projects/{}/diff?from={base_revision}&to={}",
                seg(project),
                current.revision
            ),
        )
        .await
        .ok()
        .map(|d| diff_lines(&d.diff));
    // The edit, moved onto the current revision: what saving it now would change.
    let mine = at_revision(mine, current.revision);
    let ours = unified_diff(
        &current.yaml,
        &mine,
        &format!("{project}@{}", current.revision),
        &format!("{project} (your edit)"),
    );
    panel.page_with_status(
        who,
        StatusCode::CONFLICT,
        "project_conflict.html",
        "projects",
        context! {
            project => project,
            base_revision => base_revision,
            revision => current.revision,
            theirs => Serde(theirs),
            ours => Serde(diff_lines(&ours)),
            yaml => mine,
            summary => summary,
        },
    )
}

/// Sends an edit of `project`'s document based on `base_revision` (a repair of a stored
/// document that does not load when `repair`): the saved revision, or the API's refusal for
/// the page to show. A session that ended is the panel's own error.
async fn put_document(
    panel: &Panel,
    who: &SignedIn,
    project: &str,
    base_revision: u64,
    yaml: &str,
    summary: &str,
    repair: bool,
) -> Result<Result<Saved, Problem>, PanelError> {
    let body = ReplaceBody {
        base_revision,
        yaml,
        summary,
        repair,
    };
    match panel
        .api
        .call::<Saved>(
            who,
            Method::PUT,
            &format!("/projects/{}", seg(project)),
            &body,
        )
        .await
    {
        Err(problem) if problem.status == 401 => Err(PanelError::SessionEnded),
        answer => Ok(answer),
    }
}

/// `POST /projects/{project}/save`: replaces the document based on the edit's revision.
pub(crate) async fn save(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(project): PanelPath<String>,
    PanelForm(form): PanelForm<EditForm>,
) -> Result<Response, PanelError> {
    let (yaml, summary) = (form_text(&form.yaml), form.summary.trim().to_string());
    let p = seg(&project);
    match put_document(
        &panel,
        &who,
        &project,
        form.base_revision,
        &yaml,
        &summary,
        false,
    )
    .await?
    {
        Ok(saved) => Ok(see_other(&panel.url(&format!(
            "/projects/{p}?notice=saved&revision={}",
            saved.revision
        )))),
        Err(problem) if problem.code == "revision_conflict" => {
            let current: ProjectDocument = panel.api.get(&who, &format!("/projects/{p}")).await?;
            Ok(conflict_page(
                &panel,
                &who,
                &project,
                &current,
                form.base_revision,
                &yaml,
                &summary,
            )
            .await?
            .into_response())
        }
        Err(problem) if matches!(problem.status, 400 | 413 | 422) => Ok(project_page(
            &panel,
            &who,
            &project,
            status_of(&problem),
            Some(Editor {
                yaml: &yaml,
                base_revision: form.base_revision,
                summary: &summary,
                problem: Some(&problem),
            }),
            None,
            None,
        )
        .await?
        .into_response()),
        Err(problem) => Err(problem.into()),
    }
}

/// Whether `problem` is a stored document that does not load and that a person may replace:
/// the API names the revision to base the repair on (it names none for a document a newer
/// build wrote, which is never replaced).
fn repairable(problem: &Problem) -> bool {
    problem.code == "stored_document_invalid" && problem.current_revision.is_some()
}

/// How many of the newest revisions in the history are tried for a copy that loads, as the
/// repair editor's starting text (the newest kept copy is the broken one when the database
/// holds the documents).
const REPAIR_STARTS_TRIED: usize = 3;

/// The page of a project whose stored document does not load: what is wrong and where, and,
/// for an admin who may change it, an editor that replaces the document whole, starting from
/// the newest kept revision that loads (or from `edit`, the text of an edit under way), based
/// on the revision the API names. `trouble` is what went wrong with a repair just tried.
async fn repair_page(
    panel: &Panel,
    who: &SignedIn,
    project: &str,
    problem: &Problem,
    history: &[crate::admin::projects::ChangeEntry],
    edit: Option<(String, String)>,
    trouble: Option<&Problem>,
) -> Result<Page, PanelError> {
    let p = seg(project);
    let mut revisions: Vec<u64> = history.iter().map(|c| c.revision).collect();
    revisions.sort_unstable();
    revisions.dedup();
    let mut kept: Option<ProjectDocument> = None;
    if edit.is_none() && who.may_change {
        for revision in revisions.iter().rev().take(REPAIR_STARTS_TRIED) {
            if let Ok(doc) = panel
                .api
                .get::<ProjectDocument>(who, &format!("/projects/{p}/revisions/{revision}"))
                .await
            {
                kept = Some(doc);
                break;
            }
        }
    }
    let kept_revision = kept.as_ref().map(|d| d.revision);
    let (yaml, summary) = match edit {
        Some(edit) => edit,
        None => (kept.map(|d| d.yaml).unwrap_or_default(), String::new()),
    };
    let recent: Vec<_> = history.iter().rev().take(10).cloned().collect();
    // A refused repair answers with the refusal's status (the edit's 400 or 422, a stale
    // base's 409); the page alone with the document's 409.
    panel.page_with_status(
        who,
        trouble.map_or(StatusCode::CONFLICT, status_of),
        "project_repair.html",
        "projects",
        context! {
            project => project,
            problem => Serde(problem),
            trouble => Serde(trouble),
            base_revision => problem.current_revision,
            kept_revision => kept_revision,
            yaml => yaml,
            summary => summary,
            history => Serde(recent),
        },
    )
}

/// `POST /projects/{project}/repair`: replaces a stored document that does not load, based on
/// the revision the repair page named. Refused edits come back to the repair page with their
/// problem; once the document loads (repaired here or by hand), this is an edit like any other.
pub(crate) async fn repair(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(project): PanelPath<String>,
    PanelForm(form): PanelForm<EditForm>,
) -> Result<Response, PanelError> {
    let (yaml, summary) = (form_text(&form.yaml), form.summary.trim().to_string());
    let p = seg(&project);
    let trouble = match put_document(
        &panel,
        &who,
        &project,
        form.base_revision,
        &yaml,
        &summary,
        true,
    )
    .await?
    {
        Ok(saved) => {
            return Ok(see_other(&panel.url(&format!(
                "/projects/{p}?notice=repaired&revision={}",
                saved.revision
            ))));
        }
        Err(problem) if matches!(problem.status, 400 | 409 | 413 | 422) => problem,
        Err(problem) => return Err(problem.into()),
    };
    // The document as it is now: still broken (the repair page again, with the edit and why
    // it was refused), or loading again (the editor, with the edit, to review against it).
    let (doc_path, history_path) = (
        format!("/projects/{p}"),
        format!("/projects/{p}/history?limit=500"),
    );
    let (doc, history) = tokio::join!(
        panel.api.get::<ProjectDocument>(&who, &doc_path),
        panel.api.get::<ChangePage>(&who, &history_path),
    );
    let history = history.map(|h| h.items).unwrap_or_default();
    match doc {
        Err(problem) if repairable(&problem) => Ok(repair_page(
            &panel,
            &who,
            &project,
            &problem,
            &history,
            Some((yaml, summary)),
            Some(&trouble),
        )
        .await?
        .into_response()),
        Err(problem) => Err(problem.into()),
        Ok(current) => Ok(project_page(
            &panel,
            &who,
            &project,
            status_of(&trouble),
            Some(Editor {
                yaml: &at_revision(&yaml, current.revision),
                base_revision: current.revision,
                summary: &summary,
                problem: Some(&trouble),
            }),
            None,
            None,
        )
        .await?
        .into_response()),
    }
}
