//! The committed OpenAPI document (`openapi/admin-v1.json`) must be what the handlers' types
//! generate. Regenerate with
//! `BRIDLE_UPDATE_GOLDEN=1 cargo test -p bridle-gateway --test admin_openapi`.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use std::path::Path;

#[test]
fn committed_openapi_document_is_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/admin-v1.json");
    let mut generated =
        serde_json::to_string_pretty(&bridle_gateway::admin::openapi::document()).unwrap();
    generated.push('\n');
    if std::env::var_os("BRIDLE_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert!(
        committed == generated,
        "openapi/admin-v1.json is stale; regenerate with BRIDLE_UPDATE_GOLDEN=1"
    );
}

#[test]
fn the_document_is_openapi_3_1_and_covers_every_route() {
    let doc = bridle_gateway::admin::openapi::document();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1."));
    let paths = doc["paths"].as_object().unwrap();
    for (path, methods) in [
        ("/admin/api/v1/projects", &["get", "post"][..]),
        ("/admin/api/v1/projects/{project}", &["get", "put"]),
        (
            "/admin/api/v1/projects/{project}/render/{agent_type}",
            &["get"],
        ),
        ("/admin/api/v1/projects/{project}/diff", &["get"]),
        ("/admin/api/v1/projects/{project}/history", &["get"]),
        ("/admin/api/v1/queue", &["get"]),
        ("/admin/api/v1/queue/{id}", &["get"]),
        ("/admin/api/v1/queue/{id}/approve", &["post"]),
        ("/admin/api/v1/queue/{id}/reject", &["post"]),
        ("/admin/api/v1/scope-tickets", &["get"]),
        ("/admin/api/v1/scope-tickets/{id}", &["get"]),
        ("/admin/api/v1/scope-tickets/{id}/approve", &["post"]),
        ("/admin/api/v1/scope-tickets/{id}/deny", &["post"]),
        ("/admin/api/v1/integrations", &["get"]),
        ("/admin/api/v1/integrations/{namespace}", &["get"]),
        ("/admin/api/v1/agents", &["get"]),
        ("/admin/api/v1/agents/{name}", &["get"]),
        ("/admin/api/v1/agents/{name}/token", &["post"]),
        ("/admin/api/v1/agents/{name}/rotate", &["post"]),
        ("/admin/api/v1/agents/{name}/revoke", &["post"]),
        ("/admin/api/v1/sessions", &["get"]),
        ("/admin/api/v1/sessions/events", &["get"]),
        ("/admin/api/v1/sessions/{id}", &["get"]),
        ("/admin/api/v1/sessions/{id}/end", &["post"]),
        ("/admin/api/v1/secrets", &["get", "post"]),
        ("/admin/api/v1/secrets/{name}", &["get"]),
        ("/admin/api/v1/secrets/{name}/rotate", &["post"]),
        (
            "/admin/api/v1/secrets/{name}/versions/{version}/revoke",
            &["post"],
        ),
        ("/admin/api/v1/audit", &["get"]),
        ("/admin/api/v1/audit/export", &["get"]),
        ("/admin/api/v1/audit/verify", &["get"]),
        ("/admin/api/v1/memory/sessions", &["get"]),
        ("/admin/api/v1/memory/sessions/purge", &["post"]),
        ("/admin/api/v1/memory/patterns", &["get"]),
        ("/admin/api/v1/memory/patterns/{tag}/purge", &["post"]),
    ] {
        for m in methods {
            assert!(paths[path][*m].is_object(), "{m} {path} is documented");
        }
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["admin_token"]["scheme"],
        "bearer"
    );
    assert!(doc["components"]["schemas"]["ProblemDetails"].is_object());
}

/// Every `limit` the document lists says the range the API holds it to (a client that reads
/// the document never sends a page size the API refuses).
#[test]
fn every_limit_parameter_documents_its_range() {
    let doc = bridle_gateway::admin::openapi::document();
    let mut seen = 0;
    for (path, methods) in doc["paths"].as_object().unwrap() {
        for (method, op) in methods.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                if p["name"] != "limit" {
                    continue;
                }
                seen += 1;
                let schema = &p["schema"];
                assert_eq!(schema["minimum"], 1, "{method} {path}: {schema}");
                let max = schema["maximum"].as_u64().unwrap_or(0);
                assert!([100, 500, 1000].contains(&max), "{method} {path}: {schema}");
            }
        }
    }
    assert!(seen >= 12, "only {seen} limit parameters");
}
