//! The panel's HTML: minijinja templates compiled into the binary, HTML-escaped by default,
//! and what every page shares (the layout's context, the error page, diff lines).
//!
//! Handlers return [`Page`] (a rendered page or partial) or [`PanelError`]; an error is turned
//! into the error page (or an error partial for an htmx request) by the outermost layer, which
//! knows the base path. A template is a page per area plus small partials that htmx swaps in.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::{Environment, Value, context};

use super::api::Problem;
use super::config::PanelConfigError;

/// The templates, by name.
const TEMPLATES: &[(&str, &str)] = &[
    (
        "layout.html",
        include_str!("../../panel-assets/templates/layout.html"),
    ),
    (
        "login.html",
        include_str!("../../panel-assets/templates/login.html"),
    ),
    (
        "error.html",
        include_str!("../../panel-assets/templates/error.html"),
    ),
    (
        "overview.html",
        include_str!("../../panel-assets/templates/overview.html"),
    ),
    (
        "projects.html",
        include_str!("../../panel-assets/templates/projects.html"),
    ),
    (
        "project.html",
        include_str!("../../panel-assets/templates/project.html"),
    ),
    (
        "project_review.html",
        include_str!("../../panel-assets/templates/project_review.html"),
    ),
    (
        "project_conflict.html",
        include_str!("../../panel-assets/templates/project_conflict.html"),
    ),
    (
        "project_repair.html",
        include_str!("../../panel-assets/templates/project_repair.html"),
    ),
    (
        "pattern_chunks.html",
        include_str!("../../panel-assets/templates/pattern_chunks.html"),
    ),
    (
        "pattern_conflict.html",
        include_str!("../../panel-assets/templates/pattern_conflict.html"),
    ),
    (
        "queue.html",
        include_str!("../../panel-assets/templates/queue.html"),
    ),
    (
        "proposal.html",
        include_str!("../../panel-assets/templates/proposal.html"),
    ),
    (
        "scope.html",
        include_str!("../../panel-assets/templates/scope.html"),
    ),
    (
        "integrations.html",
        include_str!("../../panel-assets/templates/integrations.html"),
    ),
    (
        "integration.html",
        include_str!("../../panel-assets/templates/integration.html"),
    ),
    (
        "macros.html",
        include_str!("../../panel-assets/templates/macros.html"),
    ),
    (
        "partials/problem.html",
        include_str!("../../panel-assets/templates/partials/problem.html"),
    ),
    (
        "partials/preview.html",
        include_str!("../../panel-assets/templates/partials/preview.html"),
    ),
    (
        "partials/proposal_row.html",
        include_str!("../../panel-assets/templates/partials/proposal_row.html"),
    ),
    (
        "partials/ticket_row.html",
        include_str!("../../panel-assets/templates/partials/ticket_row.html"),
    ),
    (
        "partials/agent_rows.html",
        include_str!("../../panel-assets/templates/partials/agent_rows.html"),
    ),
    (
        "partials/audit_rows.html",
        include_str!("../../panel-assets/templates/partials/audit_rows.html"),
    ),
    (
        "partials/session_rows.html",
        include_str!("../../panel-assets/templates/partials/session_rows.html"),
    ),
    (
        "agents.html",
        include_str!("../../panel-assets/templates/agents.html"),
    ),
    (
        "agent.html",
        include_str!("../../panel-assets/templates/agent.html"),
    ),
    (
        "agent_token.html",
        include_str!("../../panel-assets/templates/agent_token.html"),
    ),
    (
        "secrets.html",
        include_str!("../../panel-assets/templates/secrets.html"),
    ),
    (
        "secret.html",
        include_str!("../../panel-assets/templates/secret.html"),
    ),
    (
        "sessions.html",
        include_str!("../../panel-assets/templates/sessions.html"),
    ),
    (
        "audit.html",
        include_str!("../../panel-assets/templates/audit.html"),
    ),
    (
        "memory.html",
        include_str!("../../panel-assets/templates/memory.html"),
    ),
    (
        "patterns.html",
        include_str!("../../panel-assets/templates/patterns.html"),
    ),
    (
        "partials/index_progress.html",
        include_str!("../../panel-assets/templates/partials/index_progress.html"),
    ),
    (
        "audit_verify.html",
        include_str!("../../panel-assets/templates/audit_verify.html"),
    ),
];

/// The compiled templates.
pub(crate) struct Views {
    env: Environment<'static>,
}

impl Views {
    pub(crate) fn new() -> Result<Self, PanelConfigError> {
        let mut env = Environment::new();
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
        env.add_filter("seg", |v: String| super::api::seg(&v));
        env.add_filter("pattern", |v: String| exact_pattern(&v));
        // Fixed paths built from hex digits: safe as they are.
        env.add_global(
            "css_path",
            Value::from_safe_string(super::assets::CSS_PATH.to_string()),
        );
        env.add_global(
            "js_path",
            Value::from_safe_string(super::assets::JS_PATH.to_string()),
        );
        for (name, source) in TEMPLATES {
            env.add_template(name, source)
                .map_err(|e| PanelConfigError::Template {
                    name,
                    message: e.to_string(),
                })?;
        }
        Ok(Self { env })
    }

    /// Renders `name` with `ctx`.
    pub(crate) fn render(&self, name: &str, ctx: Value) -> Result<String, PanelError> {
        self.env
            .get_template(name)
            .and_then(|t| t.render(ctx))
            .map_err(|e| {
                tracing::error!(template = name, error = %e, "panel template failed");
                PanelError::Internal(format!("the page `{name}` could not be drawn"))
            })
    }
}

/// A rendered page or partial with its status.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) status: StatusCode,
    pub(crate) html: String,
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
            self.html,
        )
            .into_response()
    }
}

/// Why a page could not be shown. The outermost layer draws it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PanelError {
    /// The admin API refused, with its problem details.
    #[error("{}: {}", .0.code, .0.detail)]
    Api(Problem),
    /// The admin API no longer accepts the session's credential.
    #[error("the session's credential is no longer an admin credential")]
    SessionEnded,
    /// A form field is missing or wrong.
    #[error("{0}")]
    BadForm(String),
    /// A form body over the size limit (the code the admin API gives such a body).
    #[error("the form is larger than the panel accepts; nothing was changed")]
    TooLarge,
    /// A change was asked by an admin who only watches, or of a read-only admin API.
    #[error("this panel is read-only for you")]
    ReadOnly,
    /// A state-changing request from another site.
    #[error("a state-changing request from another site was refused")]
    CrossSite,
    /// Nothing under this path.
    #[error("there is no panel page here")]
    NotFound,
    /// A path the panel has, asked with a method it does not answer there: a form's address
    /// opened as a page (a token page's, opened again), or a form sent to a page.
    #[error("this address does not answer a {0} request; nothing was changed")]
    MethodNotAllowed(String),
    /// The panel failed (a template, an unexpected answer).
    #[error("{0}")]
    Internal(String),
}

impl From<Problem> for PanelError {
    fn from(p: Problem) -> Self {
        if p.status == StatusCode::UNAUTHORIZED.as_u16() {
            PanelError::SessionEnded
        } else {
            PanelError::Api(p)
        }
    }
}

/// What the outermost layer needs to draw an error.
#[derive(Debug, Clone)]
pub(crate) struct ErrorReport {
    pub(crate) status: StatusCode,
    pub(crate) code: String,
    pub(crate) detail: String,
    pub(crate) problem: Option<Problem>,
}

/// Marks a response whose session must end (its credential no longer opens the API).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EndSession;

impl PanelError {
    pub(crate) fn report(&self) -> ErrorReport {
        let (status, code) = match self {
            PanelError::Api(p) => (
                StatusCode::from_u16(p.status).unwrap_or(StatusCode::BAD_GATEWAY),
                p.code.clone(),
            ),
            PanelError::SessionEnded => (StatusCode::UNAUTHORIZED, "session_ended".into()),
            PanelError::BadForm(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_form".into()),
            PanelError::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large".into()),
            PanelError::ReadOnly => (StatusCode::FORBIDDEN, "read_only".into()),
            PanelError::CrossSite => (StatusCode::FORBIDDEN, "cross_site_request".into()),
            PanelError::NotFound => (StatusCode::NOT_FOUND, "not_found".into()),
            PanelError::MethodNotAllowed(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed".into())
            }
            PanelError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "panel_error".into()),
        };
        let detail = match self {
            PanelError::Api(p) => p.detail.clone(),
            other => other.to_string(),
        };
        ErrorReport {
            status,
            code,
            detail,
            problem: match self {
                PanelError::Api(p) => Some(p.clone()),
                _ => None,
            },
        }
    }
}

impl IntoResponse for PanelError {
    fn into_response(self) -> Response {
        let report = self.report();
        let mut response = report.status.into_response();
        if matches!(self, PanelError::SessionEnded) {
            response.extensions_mut().insert(EndSession);
        }
        response.extensions_mut().insert(report);
        response
    }
}

/// One line of a unified diff, classified for display.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct DiffLine {
    /// `add`, `del`, `hunk`, `file` or `ctx`.
    pub(crate) kind: &'static str,
    pub(crate) text: String,
}

/// Splits a unified diff into classified lines.
pub(crate) fn diff_lines(diff: &str) -> Vec<DiffLine> {
    diff.lines()
        .map(|line| {
            let kind = if line.starts_with("+++") || line.starts_with("---") {
                "file"
            } else if line.starts_with("@@") {
                "hunk"
            } else if line.starts_with('+') {
                "add"
            } else if line.starts_with('-') {
                "del"
            } else {
                "ctx"
            };
            DiffLine {
                kind,
                text: line.to_string(),
            }
        })
        .collect()
}

/// An HTML `pattern` that matches exactly `text` (regular-expression syntax characters
/// escaped; the browser anchors the pattern).
pub(crate) fn exact_pattern(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        if "^$\\.*+?()[]{}|/".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An edit's text with its top-level `revision:` line set to `revision`: the store sets the
/// revision on save, so an edit based on an older one should not show that line as a change.
pub(crate) fn at_revision(yaml: &str, revision: u64) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in yaml.lines() {
        let is_revision = line
            .strip_prefix("revision:")
            .is_some_and(|rest| rest.trim().chars().all(|c| c.is_ascii_digit()));
        out.push(if is_revision {
            format!("revision: {revision}")
        } else {
            line.to_string()
        });
    }
    let mut text = out.join("\n");
    if yaml.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// A unified diff of two texts (empty when equal).
pub(crate) fn unified_diff(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    crate::admin::projects::unified_diff(old, new, old_name, new_name)
}

/// The context every full page gets: the base path, who is signed in, what they may do.
pub(crate) fn chrome(base: &str, admin: Option<&str>, may_change: bool, nav: &str) -> Value {
    context! {
        // The base path is checked configuration (letters, digits, `-_./`), safe as it is.
        base => Value::from_safe_string(base.to_string()),
        admin => admin,
        may_change => may_change,
        nav => nav,
    }
}

/// A `303 See Other` to `to` (after a change: the browser then reloads with `GET`).
pub(crate) fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_is_moved_to_the_current_revision() {
        assert_eq!(
            at_revision(
                "schema_version: 2\nrevision: 3\nproject:\n  revision: 1\n",
                7
            ),
            "schema_version: 2\nrevision: 7\nproject:\n  revision: 1\n"
        );
        assert_eq!(at_revision("revision: x", 2), "revision: x");
    }

    #[test]
    fn every_template_file_is_compiled_in() {
        Views::new().expect("the templates parse");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("panel-assets/templates");
        let mut files = Vec::new();
        for sub in ["", "partials"] {
            for entry in std::fs::read_dir(dir.join(sub)).expect("the templates folder") {
                let path = entry.expect("an entry").path();
                if path.extension().is_some_and(|e| e == "html") {
                    let name = path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or_default();
                    files.push(if sub.is_empty() {
                        name.to_string()
                    } else {
                        format!("{sub}/{name}")
                    });
                }
            }
        }
        files.sort();
        let mut registered: Vec<String> = TEMPLATES.iter().map(|(n, _)| n.to_string()).collect();
        registered.sort();
        assert_eq!(files, registered);
    }

    #[test]
    fn patterns_escape_regex_syntax() {
        assert_eq!(exact_pattern("db.password-1"), "db\\.password-1");
        assert_eq!(exact_pattern("a(b)"), "a\\(b\\)");
    }

    #[test]
    fn diff_lines_are_classified() {
        let kinds: Vec<_> = diff_lines("--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n z")
            .into_iter()
            .map(|l| l.kind)
            .collect();
        assert_eq!(kinds, ["file", "file", "hunk", "del", "add", "ctx"]);
    }
}
