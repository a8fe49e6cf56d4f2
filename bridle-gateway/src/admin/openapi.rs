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
        projects::render, projects::diff, projects::history, projects::revision, projects::upgrade,
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
    modifiers(&AdminTokenScheme, &AuditUnavailable, &SharedRefusals),
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

/// Every change an admin makes is recorded in the audit log right after it is committed; when
/// the entry cannot be written the change stands and the answer is 500 `audit_unavailable`,
/// naming it as made. This adds that answer to every operation that changes something, but
/// those that hand out a token (which warn in their answer instead, since the token cannot be
/// shown again), run an index (whose stream ends with an `error` event `audit_unavailable`
/// instead) or only queue a vendor's proposals (whose entries are logged when they cannot be
/// written).
struct AuditUnavailable;

/// The changing operations that never answer `audit_unavailable` (see [`AuditUnavailable`]).
const NOT_AUDIT_FAILING: &[&str] = &[
    "POST /admin/api/v1/agents",
    "POST /admin/api/v1/agents/{name}/token",
    "POST /admin/api/v1/agents/{name}/rotate",
    "POST /admin/api/v1/projects/{project}/patterns/{pattern}/examples/{tag}/index",
    "POST /admin/api/v1/projects/{project}/patterns/{pattern}/examples/{tag}/index-runs",
    "POST /admin/api/v1/vendor-feed/run",
    "POST /admin/api/v1/projects/{project}/vendor-guidance",
    "POST /admin/api/v1/projects/{project}/profile-suggestions",
];

/// What the added 500 answer says.
const AUDIT_UNAVAILABLE: &str = "`audit_unavailable`: the change was made, but the audit log could not record it (see the gateway's log)";

impl utoipa::Modify for AuditUnavailable {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        for (path, item) in &mut openapi.paths.paths {
            let ops = [
                ("POST", item.post.as_mut()),
                ("PUT", item.put.as_mut()),
                ("PATCH", item.patch.as_mut()),
                ("DELETE", item.delete.as_mut()),
            ];
            for (method, op) in ops {
                let Some(op) = op else { continue };
                if NOT_AUDIT_FAILING.contains(&format!("{method} {path}").as_str()) {
                    continue;
                }
                match op.responses.responses.get_mut("500") {
                    // An operation that documents a 500 of its own gets this one beside it.
                    Some(RefOr::T(r)) => {
                        r.description = format!("{}; or {AUDIT_UNAVAILABLE}", r.description);
                    }
                    Some(RefOr::Ref(_)) => {}
                    None => {
                        let problem = ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ProblemDetails")))
                            .build();
                        op.responses.responses.insert(
                            "500".into(),
                            RefOr::T(
                                ResponseBuilder::new()
                                    .description(AUDIT_UNAVAILABLE)
                                    .content("application/problem+json", problem)
                                    .build(),
                            ),
                        );
                    }
                }
            }
        }
    }
}

/// What the layers every operation goes through may answer, whatever the handler: the admin
/// guard ([`super::auth::require_admin`]) in front of every operation with the `admin_token`
/// security (429 `too_many_attempts`, and 403 `read_only` for a change), and the body
/// extractors ([`super::page::ApiJson`], [`super::page::OptionalJson`]) of every operation that
/// takes a JSON body (400 `malformed_json`, 413 `body_too_large`, 415 `unsupported_media_type`,
/// 422 `invalid_request`). Each is added where the operation does not list that status itself,
/// so a client generated from the document expects every answer the API gives.
struct SharedRefusals;

/// The answers of the admin guard, by status.
const GUARD_ANSWERS: &[(&str, &str)] = &[(
    "429",
    "`too_many_attempts`: too many refused admin credentials from this address or with this token; try again after `Retry-After` seconds",
)];

/// The guard's answer to a change by an admin who may only read.
const READ_ONLY_ANSWER: (&str, &str) = (
    "403",
    "`read_only`: this admin may only read (a watcher, or a read-only API)",
);

/// The answers of the JSON body extractors, by status.
const BODY_ANSWERS: &[(&str, &str)] = &[
    ("400", "`malformed_json`: the body is not JSON that parses"),
    (
        "413",
        "`body_too_large`: the body is larger than the API's limit",
    ),
    (
        "415",
        "`unsupported_media_type`: the body is not sent as `application/json`",
    ),
    (
        "422",
        "`invalid_request`: the body has a wrong type, a missing or an unknown field",
    ),
];

impl utoipa::Modify for SharedRefusals {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::path::Operation;
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        let add = |op: &mut Operation, (status, description): (&str, &str)| {
            if op.responses.responses.contains_key(status) {
                return;
            }
            let problem = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ProblemDetails")))
                .build();
            op.responses.responses.insert(
                status.into(),
                RefOr::T(
                    ResponseBuilder::new()
                        .description(description)
                        .content("application/problem+json", problem)
                        .build(),
                ),
            );
        };
        for item in openapi.paths.paths.values_mut() {
            let ops = [
                (false, item.get.as_mut()),
                (true, item.post.as_mut()),
                (true, item.put.as_mut()),
                (true, item.patch.as_mut()),
                (true, item.delete.as_mut()),
            ];
            for (changes, op) in ops {
                let Some(op) = op else { continue };
                if op.security.as_ref().is_some_and(|s| !s.is_empty()) {
                    for answer in GUARD_ANSWERS {
                        add(op, *answer);
                    }
                    if changes {
                        add(op, READ_ONLY_ANSWER);
                    }
                }
                let takes_json = op
                    .request_body
                    .as_ref()
                    .is_some_and(|b| b.content.contains_key("application/json"));
                if takes_json {
                    for answer in BODY_ANSWERS {
                        add(op, *answer);
                    }
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exception_names_an_operation_and_every_other_change_may_be_unrecorded() {
        let doc = document();
        let paths = doc["paths"].as_object().expect("paths");
        for exception in NOT_AUDIT_FAILING {
            let (method, path) = exception.split_once(' ').expect("METHOD path");
            let op = &paths[path][method.to_lowercase()];
            assert!(op.is_object(), "{exception} is not in the document");
            assert!(op["responses"].get("500").is_none(), "{exception}");
        }
        let mut changing = 0;
        for (path, item) in paths {
            for method in ["post", "put", "patch", "delete"] {
                let Some(op) = item.get(method) else { continue };
                let named = format!("{} {path}", method.to_uppercase());
                if NOT_AUDIT_FAILING.contains(&named.as_str()) {
                    continue;
                }
                changing += 1;
                let answer = &op["responses"]["500"];
                assert!(
                    answer["description"]
                        .as_str()
                        .is_some_and(|d| d.contains("audit_unavailable")),
                    "{named}: {answer}"
                );
                assert_eq!(
                    answer["content"]["application/problem+json"]["schema"]["$ref"],
                    "#/components/schemas/ProblemDetails",
                    "{named}"
                );
            }
        }
        assert!(changing > 20, "{changing} changing operations");
        // An operation's own 500 is kept beside it.
        let reembed = &paths["/admin/api/v1/memory/sessions/reembed"]["post"]["responses"]["500"];
        assert!(
            reembed["description"]
                .as_str()
                .is_some_and(|d| d.starts_with("the embedder or the store failed")),
            "{reembed}"
        );
    }
}
