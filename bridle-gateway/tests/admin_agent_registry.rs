//! The live agent registry over real HTTP and a real MCP client: an agent created through the
//! admin API connects with its one-time token without a restart, a narrowed projects list is
//! enforced on the next MCP request of a session already open, a changed type applies, a
//! deleted agent is refused at once; every change is in `bridle.yaml` and in the audit log as
//! `user`; and every failure path (no or wrong credential, an agent's token, unknown agents,
//! duplicates, bad names, types and projects, malformed JSON, wrong types, an oversize body, an
//! agent an upstream still names) is refused with problem details and changes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use admin_support::{json_ok, problem};
use kberg_agent::{McpSurface, ToolSurface};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

async fn call(s: &McpSurface, tool: &str, args: Value) -> kberg_agent::ToolResult {
    s.call(tool, args, CancellationToken::new()).await.unwrap()
}

fn projects_listed(r: &kberg_agent::ToolResult) -> Vec<String> {
    assert!(!r.is_error, "{r:?}");
    let v: Value = serde_json::from_str(&r.text).unwrap();
    v["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["project"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_created_changed_and_deleted_take_effect_at_once_and_persist() {
    let gw = Gw::start().await;

    let created = json_ok(
        gw.post("/agents")
            .json(&json!({"name": "ci-bot", "type": "codex", "projects": ["demo"]}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let token = created["token"]["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("bdl_"));
    assert_eq!(created["token"]["version"], 1);
    assert_eq!(created["agent"]["agent_type"], "codex");
    assert_eq!(created["agent"]["projects"], json!(["demo"]));
    assert_eq!(created["agent"]["token_source"], "vault");

    // Written to bridle.yaml, with no token in it.
    let on_disk = gw.config_on_disk();
    let a = &on_disk.agents["ci-bot"];
    assert_eq!(
        (a.agent_type.as_str(), a.token_secret.as_deref()),
        ("codex", None)
    );
    let yaml = std::fs::read_to_string(gw.tmp.path().join("bridle.yaml")).unwrap();
    assert!(!yaml.contains(&token));

    // It connects without a restart, and sees its project.
    let live = McpSurface::connect_http_with_bearer(&gw.mcp, &token)
        .await
        .unwrap();
    assert_eq!(
        projects_listed(&call(&live, "list_projects", json!({})).await),
        ["demo"]
    );
    assert!(
        !call(&live, "get_rules", json!({"project": "demo"}))
            .await
            .is_error
    );

    // Narrowed: the same open session is held to it on its next request.
    let changed = json_ok(
        gw.patch("/agents/ci-bot")
            .json(&json!({"projects": ["elsewhere"]}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(changed["projects"], json!(["elsewhere"]));
    assert_eq!(changed["agent_type"], "codex");
    let refused = call(&live, "get_rules", json!({"project": "demo"})).await;
    assert!(refused.is_error, "{refused:?}");
    assert!(
        format!("{refused:?}").contains("project_not_allowed"),
        "{refused:?}"
    );
    assert!(projects_listed(&call(&live, "list_projects", json!({})).await).is_empty());

    // Type and projects back: the rules render for the new type.
    let changed = json_ok(
        gw.patch("/agents/ci-bot")
            .json(&json!({"type": "claude", "projects": []}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(changed["agent_type"], "claude");
    assert_eq!(changed["projects"], json!([]));
    assert_eq!(gw.config_on_disk().agents["ci-bot"].agent_type, "claude");
    let listed = call(&live, "list_projects", json!({})).await;
    let v: Value = serde_json::from_str(&listed.text).unwrap();
    assert_eq!(
        v["projects"][0]["rules_resource"],
        "bridle://rules/demo/claude"
    );

    // Deleted: its token and its open session are refused at once.
    let deleted = json_ok(
        gw.delete("/agents/ci-bot").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(deleted["revoked_tokens"], 1);
    assert!(deleted["ended_sessions"].as_u64().unwrap() >= 1);
    match live
        .call("list_projects", json!({}), CancellationToken::new())
        .await
    {
        Err(_) => {}
        Ok(r) => assert!(r.is_error, "a deleted agent's session still served: {r:?}"),
    }
    assert!(
        McpSurface::connect_http_with_bearer(&gw.mcp, &token)
            .await
            .is_err()
    );
    problem(
        gw.get("/agents/ci-bot").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_agent",
    )
    .await;
    assert!(!gw.config_on_disk().agents.contains_key("ci-bot"));

    // A secret-file agent deleted: the file token read at start no longer opens the endpoint.
    let gemini = gw.file_token("gemini");
    assert!(
        McpSurface::connect_http_with_bearer(&gw.mcp, &gemini)
            .await
            .is_ok()
    );
    json_ok(
        gw.delete("/agents/gemini").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(
        McpSurface::connect_http_with_bearer(&gw.mcp, &gemini)
            .await
            .is_err()
    );
    // Re-created under the same name, it takes vault tokens only: the old file stays shut.
    let again = json_ok(
        gw.post("/agents")
            .json(&json!({"name": "gemini", "type": "gemini"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    assert!(
        McpSurface::connect_http_with_bearer(&gw.mcp, &gemini)
            .await
            .is_err()
    );
    let fresh = again["token"]["token"].as_str().unwrap();
    assert!(
        McpSurface::connect_http_with_bearer(&gw.mcp, fresh)
            .await
            .is_ok()
    );

    // The audit log: every change as alice through the API, in order.
    let audit = json_ok(
        gw.get("/audit?agent=ci-bot&source=user")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let items = audit["items"].as_array().unwrap();
    let kinds: Vec<&str> = items.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "agent_create",
            "agent_update",
            "agent_update",
            "agent_delete"
        ]
    );
    for e in items {
        assert_eq!(e["source"]["type"], "user", "{e}");
        assert_eq!(e["source"]["admin"], "alice");
        assert_eq!(e["source"]["surface"], "api");
    }
    let export = gw.get("/audit/export").send().await.unwrap();
    let export = export.text().await.unwrap();
    assert!(!export.contains(&token), "a token reached the audit log");
    assert!(!export.contains(fresh), "a token reached the audit log");
    let verify = json_ok(
        gw.get("/audit/verify").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(verify["intact"], true, "{verify}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_registry_refuses_what_it_must_and_changes_nothing() {
    // An upstream (disabled: nothing to connect to) names `codex` for its credential.
    let gw = Gw::start_with_yaml(
        "upstreams:\n  tickets:\n    http: {url: 'http://127.0.0.1:9/mcp'}\n    enabled: false\n    credential:\n      per_agent: {codex: tickets-codex}\n",
        |b| b,
    )
    .await;
    let yaml_before = std::fs::read_to_string(gw.tmp.path().join("bridle.yaml")).unwrap();
    let body = json!({"name": "new-bot", "type": "codex"});

    // No credential, a wrong one, every agent's token.
    let mut tokens = vec![None, Some("wrong".to_string())];
    tokens.extend(gw.all_agent_tokens().into_iter().map(|(_, t)| Some(t)));
    for t in tokens {
        for req in [
            gw.http.post(gw.url("/agents")).json(&body),
            gw.http
                .patch(gw.url("/agents/bot"))
                .json(&json!({"projects": []})),
            gw.http.delete(gw.url("/agents/bot")),
        ] {
            let req = match &t {
                Some(t) => req.bearer_auth(t),
                None => req,
            };
            problem(
                req.send().await.unwrap(),
                StatusCode::UNAUTHORIZED,
                "unauthorized",
            )
            .await;
        }
    }

    // Unknown agents.
    problem(
        gw.patch("/agents/nobody")
            .json(&json!({"projects": []}))
            .send()
            .await
            .unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_agent",
    )
    .await;
    problem(
        gw.delete("/agents/nobody").send().await.unwrap(),
        StatusCode::NOT_FOUND,
        "unknown_agent",
    )
    .await;

    // Duplicates, and an agent an upstream still names.
    problem(
        gw.post("/agents")
            .json(&json!({"name": "claude", "type": "claude"}))
            .send()
            .await
            .unwrap(),
        StatusCode::CONFLICT,
        "agent_exists",
    )
    .await;
    let in_use = problem(
        gw.delete("/agents/codex").send().await.unwrap(),
        StatusCode::CONFLICT,
        "agent_in_use",
    )
    .await;
    assert!(
        in_use["detail"].as_str().unwrap().contains("codex"),
        "{in_use}"
    );
    assert!(gw.ctx.agent("codex").is_some(), "a refused delete keeps it");

    // Values that parse but cannot be used.
    for bad in [
        json!({"name": "Bad Name", "type": "claude"}),
        json!({"name": "x", "type": "no-such-agent-type"}),
        json!({"name": "x", "type": "claude", "projects": ["../etc"]}),
    ] {
        problem(
            gw.post("/agents").json(&bad).send().await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_agent",
        )
        .await;
    }
    problem(
        gw.patch("/agents/bot")
            .json(&json!({"type": "no-such-agent-type"}))
            .send()
            .await
            .unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_agent",
    )
    .await;

    // Wrong types, missing and unknown fields, an empty change.
    for bad in [
        json!({"name": 3, "type": "claude"}),
        json!({"name": "x"}),
        json!({"name": "x", "type": "claude", "projects": "demo"}),
        json!({"name": "x", "type": "claude", "token": "mine"}),
        json!(["x"]),
    ] {
        problem(
            gw.post("/agents").json(&bad).send().await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        )
        .await;
    }
    for bad in [
        json!({}),
        json!({"projects": [1]}),
        json!({"token_secret": "x"}),
    ] {
        problem(
            gw.patch("/agents/bot").json(&bad).send().await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        )
        .await;
    }

    // Not JSON, malformed JSON, an oversize body.
    for req in [gw.post("/agents"), gw.patch("/agents/bot")] {
        problem(
            req.header("content-type", "application/json")
                .body("{\"type\": ")
                .send()
                .await
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        )
        .await;
    }
    problem(
        gw.post("/agents")
            .header("content-type", "text/plain")
            .body("name=x")
            .send()
            .await
            .unwrap(),
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    )
    .await;
    let huge = format!(
        "{{\"name\": \"x\", \"type\": \"claude\", \"projects\": [\"{}\"]}}",
        "x".repeat(2 << 20)
    );
    problem(
        gw.post("/agents")
            .header("content-type", "application/json")
            .body(huge)
            .send()
            .await
            .unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    )
    .await;

    // Nothing changed: the file, the registry, the audit log.
    let yaml_after = std::fs::read_to_string(gw.tmp.path().join("bridle.yaml")).unwrap();
    assert_eq!(yaml_before, yaml_after);
    assert!(gw.ctx.agent("x").is_none() && gw.ctx.agent("new-bot").is_none());
    let audit = json_ok(
        gw.get("/audit?source=user").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(audit["items"], json!([]), "{audit}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_whose_tokens_cannot_be_revoked_leaves_the_agent_as_it_was() {
    let gw = Gw::start().await;
    let issued = json_ok(
        gw.post("/agents/bot/token").send().await.unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let token = issued["token"].as_str().unwrap().to_string();
    // The vault cannot revoke: its token table is taken away (as a failing disk would).
    let raw = rusqlite::Connection::open(gw.tmp.path().join("vault.db")).unwrap();
    raw.execute_batch("ALTER TABLE vault_agent_tokens RENAME TO away")
        .unwrap();
    let refused = gw.delete("/agents/bot").send().await.unwrap();
    assert!(refused.status().is_server_error(), "{}", refused.status());
    // The delete answered a failure, so nothing is deleted: the agent is live and in
    // bridle.yaml, and, once the vault works again, its token still opens the MCP endpoint.
    assert!(
        gw.ctx.agent("bot").is_some(),
        "the agent is still configured"
    );
    assert!(
        gw.config_on_disk().agents.contains_key("bot"),
        "and on disk"
    );
    raw.execute_batch("ALTER TABLE away RENAME TO vault_agent_tokens")
        .unwrap();
    assert!(gw.mcp_works(&token).await, "its token still works");
    // And the delete, tried again, goes through.
    json_ok(
        gw.delete("/agents/bot").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(gw.ctx.agent("bot").is_none());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_agents_token_is_answered_even_when_its_metadata_cannot_be_read() {
    let gw = Gw::start().await;
    // Its token rows are written, but cannot be read back as metadata (a row the vault cannot
    // decode, as a damaged database gives).
    let raw = rusqlite::Connection::open(gw.tmp.path().join("vault.db")).unwrap();
    raw.execute_batch(
        "CREATE TRIGGER unreadable AFTER INSERT ON vault_agent_tokens WHEN NEW.agent = 'newbot'
         BEGIN UPDATE vault_agent_tokens SET created_by = X'00' WHERE rowid = NEW.rowid; END;",
    )
    .unwrap();
    let resp = gw
        .post("/agents")
        .json(&json!({"name": "newbot", "type": "claude"}))
        .send()
        .await
        .unwrap();
    // The agent was made and its token issued: the token is in the answer, the one time it can
    // be, rather than lost behind an error (a retry would only find `agent_exists`).
    let created = json_ok(resp, StatusCode::CREATED).await;
    let token = created["token"]["token"].as_str().unwrap();
    assert!(
        gw.mcp_works(token).await,
        "the answered token opens the MCP endpoint"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_answered_as_made_when_the_token_versions_cannot_be_read_after_it() {
    let gw = Gw::start().await;
    json_ok(
        gw.post("/agents")
            .json(&json!({"name": "ci-bot", "type": "codex", "projects": ["demo"]}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    // The vault's token table is gone after the change is written and before the answer reads
    // the agent's token versions.
    rusqlite::Connection::open(gw.tmp.path().join("vault.db"))
        .unwrap()
        .execute_batch("ALTER TABLE vault_agent_tokens RENAME TO vault_agent_tokens_gone")
        .unwrap();
    let changed = json_ok(
        gw.patch("/agents/ci-bot")
            .json(&json!({"projects": ["elsewhere"]}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(changed["projects"], json!(["elsewhere"]), "{changed}");
    assert_eq!(gw.config_on_disk().agents["ci-bot"].projects, ["elsewhere"]);
}
