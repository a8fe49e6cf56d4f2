//! The pages, one module per area. Each handler reads what it shows from the admin API
//! ([`super::api::AdminApi`]) as the signed-in admin and renders one template; a change is one
//! API call, answered with a redirect to the page that shows its result (or, for an htmx
//! request, the partial that replaces the changed row).
//!
//! Handlers read what the browser sent through the panel's own extractors ([`PanelForm`],
//! [`PanelBody`], [`PanelPath`], [`PanelQuery`], [`Notice`]), never axum's, so input that does
//! not parse gets the panel's page with a stable code (`not_found`, `invalid_form`,
//! `body_too_large`) instead of axum's plain-text 400 or 413.

use axum::Router;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::{get, post};
use minijinja::{Value, context};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::Panel;
use super::session::SignedIn;
use super::view::{Page, PanelError, chrome};

pub(crate) mod agents;
pub(crate) mod audit;
pub(crate) mod chunks;
pub(crate) mod guardrails;
pub(crate) mod integrations;
pub(crate) mod live;
pub(crate) mod login;
pub(crate) mod memory;
pub(crate) mod overview;
pub(crate) mod patterns;
pub(crate) mod projects;
pub(crate) mod queue;
pub(crate) mod scope;
pub(crate) mod secrets;
pub(crate) mod sessions;

/// The routes that need a session.
pub(crate) fn routes() -> Router<Panel> {
    Router::new()
        .route("/", get(overview::show))
        .route("/projects", get(projects::list).post(projects::create))
        .route("/projects/{project}", get(projects::show))
        .route("/projects/{project}/preview", get(projects::preview))
        .route("/projects/{project}/edit", post(projects::edit))
        .route("/projects/{project}/review", post(projects::review))
        .route("/projects/{project}/save", post(projects::save))
        .route("/projects/{project}/repair", post(projects::repair))
        .route("/projects/{project}/guardrails", post(guardrails::put))
        .route(
            "/projects/{project}/guardrails/{id}/remove",
            post(guardrails::remove),
        )
        .route("/queue", get(queue::list))
        .route("/queue/bulk", post(queue::bulk))
        .route("/queue/{id}", get(queue::show))
        .route("/queue/{id}/approve", post(queue::approve))
        .route("/queue/{id}/reject", post(queue::reject))
        .route("/scope", get(scope::list))
        .route("/scope/{id}/approve", post(scope::approve))
        .route("/scope/{id}/deny", post(scope::deny))
        .route("/integrations", get(integrations::list))
        .route("/integrations/{namespace}", get(integrations::show))
        .route(
            "/integrations/{namespace}/enable",
            post(integrations::enable),
        )
        .route(
            "/integrations/{namespace}/disable",
            post(integrations::disable),
        )
        .route("/agents", get(agents::list).post(agents::create))
        .route("/agents/{name}", get(agents::show))
        .route("/agents/{name}/change", post(agents::change))
        .route("/agents/{name}/token", post(agents::issue))
        .route("/agents/{name}/rotate", post(agents::rotate))
        .route("/agents/{name}/revoke", post(agents::revoke))
        .route("/sessions", get(sessions::list))
        .route("/sessions/live", get(live::sessions))
        .route("/sessions/{id}/end", post(sessions::end))
        .route("/secrets", get(secrets::list).post(secrets::create))
        .route("/secrets/{name}", get(secrets::show))
        .route("/secrets/{name}/rotate", post(secrets::rotate))
        .route(
            "/secrets/{name}/versions/{version}/revoke",
            post(secrets::revoke),
        )
        .route("/patterns", get(patterns::list))
        .route("/patterns/runs/{id}/events", get(patterns::run_events))
        .route("/patterns/{project}", post(patterns::add_pattern))
        .route(
            "/patterns/{project}/{pattern}/remove",
            post(patterns::remove_pattern),
        )
        .route(
            "/patterns/{project}/{pattern}/change",
            post(patterns::change_pattern),
        )
        .route("/standard-patterns/{project}", post(patterns::add_standard))
        .route(
            "/standard-patterns/{project}/{name}/remove",
            post(patterns::remove_standard),
        )
        .route("/patterns/{project}/{pattern}/chunks", get(chunks::list))
        .route(
            "/patterns/{project}/{pattern}/examples",
            post(patterns::add_example),
        )
        .route(
            "/patterns/{project}/{pattern}/examples/{tag}/remove",
            post(patterns::remove_example),
        )
        .route(
            "/patterns/{project}/{pattern}/examples/{tag}/index",
            post(patterns::index),
        )
        .route("/memory", get(memory::show))
        .route("/memory/purge", post(memory::purge_sessions))
        .route("/memory/reembed", post(memory::reembed_sessions))
        .route("/memory/patterns/{tag}/purge", post(memory::purge_tag))
        .route("/audit", get(audit::list))
        .route("/audit/verify", get(audit::verify))
        .route("/audit/tail", get(live::audit_tail))
        .route("/audit/export", get(audit::export))
}

/// Any other path under the base path.
pub(crate) async fn not_found() -> PanelError {
    PanelError::NotFound
}

/// A path of the panel asked with a method it does not answer there (axum's own answer is an
/// empty 405).
pub(crate) async fn method_not_allowed(method: axum::http::Method) -> PanelError {
    PanelError::MethodNotAllowed(method.to_string())
}

impl Panel {
    /// Renders a full page for the signed-in admin.
    pub(crate) fn page(
        &self,
        who: &SignedIn,
        template: &str,
        nav: &str,
        ctx: Value,
    ) -> Result<Page, PanelError> {
        self.page_with_status(who, StatusCode::OK, template, nav, ctx)
    }

    /// Renders a full page with a status other than 200 (a refused form, shown again).
    pub(crate) fn page_with_status(
        &self,
        who: &SignedIn,
        status: StatusCode,
        template: &str,
        nav: &str,
        ctx: Value,
    ) -> Result<Page, PanelError> {
        let ctx = context! {
            ..chrome(&self.config.base_path, Some(&who.admin), who.may_change, nav),
            ..ctx
        };
        Ok(Page {
            status,
            html: self.views.render(template, ctx)?,
        })
    }

    /// Renders a partial (an htmx swap).
    pub(crate) fn partial(
        &self,
        who: &SignedIn,
        template: &str,
        ctx: Value,
    ) -> Result<Page, PanelError> {
        let ctx = context! {
            ..chrome(&self.config.base_path, Some(&who.admin), who.may_change, ""),
            ..ctx
        };
        Ok(Page {
            status: StatusCode::OK,
            html: self.views.render(template, ctx)?,
        })
    }

    /// `base_path` joined with `path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.config.base_path)
    }
}

/// A urlencoded form body, or the panel's 422 page (413 `body_too_large` for one over the
/// body limit).
#[derive(Debug)]
pub(crate) struct PanelForm<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequest<S> for PanelForm<T> {
    type Rejection = PanelError;

    async fn from_request(req: Request, state: &S) -> Result<Self, PanelError> {
        axum::Form::<T>::from_request(req, state)
            .await
            .map(|f| PanelForm(f.0))
            .map_err(|e| unreadable_form(e.status(), &e.body_text()))
    }
}

/// A form body as it came, for a handler that parses it itself (a field repeated once per
/// checkbox), or the panel's 413 page for one over the body limit, as [`PanelForm`] answers.
#[derive(Debug)]
pub(crate) struct PanelBody(pub(crate) axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for PanelBody {
    type Rejection = PanelError;

    async fn from_request(req: Request, state: &S) -> Result<Self, PanelError> {
        axum::body::Bytes::from_request(req, state)
            .await
            .map(PanelBody)
            .map_err(|e| unreadable_form(e.status(), &e.body_text()))
    }
}

/// Why a form body could not be read: 413 `body_too_large` past the body limit, else 422.
fn unreadable_form(status: StatusCode, why: &str) -> PanelError {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        PanelError::TooLarge
    } else {
        PanelError::BadForm(format!("the form could not be read: {why}"))
    }
}

/// A path parameter (`/queue/{id}`), or the panel's 404 page: a segment that does not parse
/// (`/queue/abc`, a name that is not UTF-8) names no page.
#[derive(Debug)]
pub(crate) struct PanelPath<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PanelPath<T> {
    type Rejection = PanelError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, PanelError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PanelPath(p.0))
            .map_err(|_| PanelError::NotFound)
    }
}

/// A page's query string (filters, paging), or the panel's 422 page naming what did not parse.
#[derive(Debug)]
pub(crate) struct PanelQuery<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PanelQuery<T> {
    type Rejection = PanelError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, PanelError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| PanelQuery(q.0))
            .map_err(|e| {
                // The innermost cause names the field ("duplicate field `status`"); axum's own
                // sentence around it is for an API client.
                let mut cause: &dyn std::error::Error = &e;
                while let Some(inner) = cause.source() {
                    cause = inner;
                }
                PanelError::BadForm(format!("the address's query could not be read: {cause}"))
            })
    }
}

/// The query string read as `T`, or `T::default()` when it does not parse: for what only
/// decorates a page (a notice after a redirect), which is better left out than refused.
pub(crate) fn query_or_default<T: DeserializeOwned + Default>(parts: &Parts) -> T {
    serde_urlencoded::from_str(parts.uri.query().unwrap_or_default()).unwrap_or_default()
}

/// What a page says after a change it redirected from (`?notice=...`): a fixed sentence per
/// code, so nothing from the query string is shown as given. A notice query that does not
/// parse (`?notice=saved&id=x`) is ignored: the page is shown without a notice.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Notice {
    notice: Option<String>,
    id: Option<u64>,
    revision: Option<u64>,
}

impl<S: Send + Sync> FromRequestParts<S> for Notice {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(query_or_default(parts))
    }
}

impl Notice {
    pub(crate) fn text(&self) -> Option<String> {
        let id = self.id.map(|i| format!(" #{i}")).unwrap_or_default();
        let rev = self
            .revision
            .map(|r| format!(" (revision {r})"))
            .unwrap_or_default();
        Some(match self.notice.as_deref()? {
            "created" => "Project created.".to_string(),
            "saved" => format!("Saved{rev}."),
            "repaired" => format!("The stored document was replaced{rev}; it loads again."),
            "approved" => format!("Proposal{id} approved{rev}."),
            "rejected" => format!("Proposal{id} rejected."),
            "ticket_approved" => format!("Scope ticket{id} approved."),
            "ticket_denied" => format!("Scope ticket{id} denied."),
            "unchanged" => "Nothing to save: the document is unchanged.".to_string(),
            "agent_revoked" => {
                "Every token of this agent is revoked and its sessions ended.".to_string()
            }
            "secret_created" => {
                "Secret added. Its value is in the vault and is never shown.".to_string()
            }
            "secret_rotated" => {
                "Secret rotated. The new value is in the vault and is never shown.".to_string()
            }
            "secret_revoked" => format!("Version{id} revoked."),
            "session_ended" => "Session ended.".to_string(),
            "agent_changed" => {
                "Agent changed: its new type and projects hold from its next request.".to_string()
            }
            "memories_purged" => match self.id.unwrap_or(0) {
                1 => "1 session memory removed.".to_string(),
                n => format!("{n} session memories removed."),
            },
            "memories_reembedded" => match self.id.unwrap_or(0) {
                1 => "1 session memory embedded again with the configured model.".to_string(),
                n => format!("{n} session memories embedded again with the configured model."),
            },
            "chunks_purged" => match self.id.unwrap_or(0) {
                1 => "1 indexed chunk removed.".to_string(),
                n => format!("{n} indexed chunks removed."),
            },
            "pattern_added" => "Pattern added.".to_string(),
            "pattern_removed" => "Pattern removed, with its examples.".to_string(),
            "description_changed" => "Description saved.".to_string(),
            "pattern_renamed" => {
                "Pattern renamed. Its examples keep their pattern tags, so searches find the same chunks."
                    .to_string()
            }
            "standard_added" => "Well-known pattern added.".to_string(),
            "standard_removed" => "Well-known pattern removed.".to_string(),
            "example_added" => "Example added. Re-index it to make it searchable.".to_string(),
            "example_removed" => "Example removed, with its indexed chunks.".to_string(),
            what @ ("example_removed_chunks_kept" | "pattern_removed_chunks_kept") => format!(
                "{} removed, but indexed chunks were kept: the memory service failed, or a \
                 project whose document does not load may list their tag (the gateway's log \
                 says which). Purge them on the Memory page once no project lists them.",
                if what.starts_with("example") {
                    "Example"
                } else {
                    "Pattern"
                }
            ),
            "index_started" => "Re-index started; its progress is shown below.".to_string(),
            "integration_enabled" => {
                "Enabled: it connects again and its tools return to the agents' lists.".to_string()
            }
            "integration_disabled" => {
                "Disabled: its tools have left the agents' lists and its connections are closed."
                    .to_string()
            }
            _ => return None,
        })
    }
}

/// Text from a browser form: line breaks back to `\n` (forms send `\r\n`).
pub(crate) fn form_text(s: &str) -> String {
    s.replace("\r\n", "\n")
}

/// A destructive change goes ahead only when the admin typed the thing's name (checked here
/// as well as by the form's `pattern`).
pub(crate) fn confirm_matches(typed: &str, name: &str) -> Result<(), PanelError> {
    if typed.trim() == name {
        Ok(())
    } else {
        Err(PanelError::BadForm(format!(
            "type `{name}` to confirm; nothing was changed"
        )))
    }
}
