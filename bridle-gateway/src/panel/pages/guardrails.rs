//! A project's guardrails as forms: add one (or replace the one with the same id), or remove
//! one. A form never saves by itself: it produces the edited document and shows the same review
//! page as the YAML editor (the diff against the current revision), whose save replaces the
//! document against that revision, so a save that someone else's beat shows the conflict view,
//! and the API validates the result exactly as it validates a YAML edit.

use axum::extract::{Extension, State};
use serde::Deserialize;

use super::projects::review_page;
use super::{PanelForm, PanelPath};
use crate::admin::projects::ProjectDocument;
use crate::panel::Panel;
use crate::panel::api::seg;
use crate::panel::session::SignedIn;
use crate::panel::view::{Page, PanelError};
use bridle_rules::{Guardrail, Provenance, Severity};

/// The add-or-replace form.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct GuardrailForm {
    id: String,
    statement: String,
    severity: String,
    applies_to: String,
}

async fn current(
    panel: &Panel,
    who: &SignedIn,
    project: &str,
) -> Result<ProjectDocument, PanelError> {
    Ok(panel
        .api
        .get(who, &format!("/projects/{}", seg(project)))
        .await?)
}

fn to_yaml(doc: &bridle_rules::RulesDocument) -> Result<String, PanelError> {
    bridle_rules::to_yaml(doc)
        .map_err(|e| PanelError::Internal(format!("the edited document cannot be written: {e}")))
}

/// `POST /projects/{project}/guardrails`: the document with this guardrail added (or the one
/// with its id replaced), to review.
pub(crate) async fn put(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath(project): PanelPath<String>,
    PanelForm(form): PanelForm<GuardrailForm>,
) -> Result<Page, PanelError> {
    let id = form.id.trim();
    let statement = form.statement.trim();
    if id.is_empty() || statement.is_empty() {
        return Err(PanelError::BadForm(
            "a guardrail has an id and a statement; nothing was changed".into(),
        ));
    }
    let severity = [
        Severity::Guidance,
        Severity::HardInstruction,
        Severity::Enforcement,
    ]
    .into_iter()
    .find(|s| s.as_str() == form.severity.trim())
    .ok_or_else(|| {
        PanelError::BadForm(
            "the severity is guidance, hard-instruction or enforcement; nothing was changed".into(),
        )
    })?;
    let mut applies_to: Vec<String> = form
        .applies_to
        .split([',', ' '])
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    applies_to.dedup();
    if applies_to.is_empty() {
        applies_to.push(bridle_rules::ALL_AGENTS.to_string());
    }
    let current = current(&panel, &who, &project).await?;
    let mut doc = current.document.clone();
    let guardrail = Guardrail {
        id: id.to_string(),
        statement: statement.to_string(),
        severity,
        applies_to,
        provenance: Provenance::user(),
    };
    let summary = match doc.guardrails.iter_mut().find(|g| g.id == id) {
        Some(existing) => {
            // A replaced guardrail keeps where it came from.
            let provenance = existing.provenance.clone();
            *existing = Guardrail {
                provenance,
                ..guardrail
            };
            format!("guardrail {id} changed")
        }
        None => {
            doc.guardrails.push(guardrail);
            format!("guardrail {id} added")
        }
    };
    let yaml = to_yaml(&doc)?;
    review_page(&panel, &who, &project, &current, &yaml, &summary)
}

/// `POST /projects/{project}/guardrails/{id}/remove`: the document without it, to review.
pub(crate) async fn remove(
    State(panel): State<Panel>,
    Extension(who): Extension<SignedIn>,
    PanelPath((project, id)): PanelPath<(String, String)>,
) -> Result<Page, PanelError> {
    let current = current(&panel, &who, &project).await?;
    let mut doc = current.document.clone();
    let before = doc.guardrails.len();
    doc.guardrails.retain(|g| g.id != id);
    if doc.guardrails.len() == before {
        return Err(PanelError::BadForm(format!(
            "project `{project}` has no guardrail `{id}`; nothing was changed"
        )));
    }
    let yaml = to_yaml(&doc)?;
    review_page(
        &panel,
        &who,
        &project,
        &current,
        &yaml,
        &format!("guardrail {id} removed"),
    )
}
