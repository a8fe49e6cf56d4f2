//! The OpenAPI 3.1 document of the admin API, generated from the handlers' types and paths
//! with `utoipa`, served at `/admin/api/v1/openapi.json` without authentication (it describes
//! the API, it holds nothing secret). A test keeps the committed copy,
//! `bridle-gateway/openapi/admin-v1.json`, current.

use axum::response::IntoResponse;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use super::error::{FieldError, ProblemDetails};
use super::{
    agents, audit_log, feeds, index_runs, integrations, memory, patterns, projects, queue, scope,
    secrets, sessions,
};

/// The admin API's OpenAPI description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Bridle admin API",
        description = "Every control of the Bridle gateway over one authenticated HTTP API. Errors are RFC 9457 problem details with a stable `code`.",
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        projects::list, projects::create, projects::get_one, projects::replace,
        projects::render, projects::diff, projects::history, projects::upgrade,
        queue::list, queue::get_one, queue::approve, queue::reject,
        scope::list, scope::get_one, scope::approve, scope::deny,
        integrations::list, integrations::get_one, integrations::change, integrations::enable, integrations::disable,
        agents::list, agents::get_one, agents::create, agents::change, agents::remove,
        agents::issue, agents::rotate, agents::revoke,
        sessions::list, sessions::get_one, sessions::end, sessions::events,
        secrets::list, secrets::get_one, secrets::create, secrets::rotate, secrets::revoke,
        audit_log::query, audit_log::export, audit_log::verify,
        memory::sessions, memory::purge_sessions, memory::reembed_sessions, memory::patterns, memory::purge_tag,
        memory::pattern_chunks,
        feeds::get_feed, feeds::run, feeds::read_guidance, feeds::queue_profile_suggestions,
        patterns::list, patterns::add_pattern, patterns::change_pattern, patterns::remove_pattern,
        patterns::add_example, patterns::add_standard, patterns::remove_standard,
        patterns::remove_example, index_runs::index, index_runs::start_run,
        index_runs::run_status, index_runs::run_events,
    ),
    components(schemas(ProblemDetails, FieldError)),
    modifiers(&AdminTokenScheme),
    tags(
        (name = "projects", description = "Rules documents: read, replace, render, diff, history"),
        (name = "queue", description = "The review queue of proposed changes"),
        (name = "scope", description = "Scope-expansion tickets"),
        (name = "integrations", description = "Upstream MCP servers"),
        (name = "agents", description = "Configured agents and their vault-issued tokens"),
        (name = "sessions", description = "The live session registry and its event stream"),
        (name = "secrets", description = "The vault's secrets (metadata only; values never returned)"),
        (name = "audit", description = "The tamper-evident audit log"),
        (name = "memory", description = "Session memories and indexed pattern examples"),
        (name = "patterns", description = "A project's patterns and example repositories, and their index runs (started, then followed as Server-Sent Events)"),
        (name = "feeds", description = "The vendor-guidance feed: its sources, runs on demand, one-off page reads and a project's own profile suggestions"),
    ),
)]
pub struct AdminApiDoc;

struct AdminTokenScheme;

impl utoipa::Modify for AdminTokenScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An admin credential (never an agent's token)"))
                    .build(),
            ),
        );
    }
}

/// The document as JSON.
pub fn document() -> serde_json::Value {
    // The generated document is plain data; encoding it cannot fail.
    serde_json::to_value(AdminApiDoc::openapi()).unwrap_or_default()
}

pub(crate) async fn serve_document() -> impl IntoResponse {
    axum::Json(document())
}
