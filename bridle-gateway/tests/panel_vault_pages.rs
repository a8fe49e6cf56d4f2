//! The web panel's agents, sessions, secrets and audit pages at the HTML level (`oneshot`
//! through the panel and the admin API of a real gateway with its vault and audit log): tokens
//! shown exactly once, secret values never, destructive changes confirmed by name, and each
//! page's error states.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

#[path = "common/audit_fault.rs"]
mod audit_fault;
mod panel_support;

use axum::http::StatusCode;
use panel_support::{ALICE, Client, Fixture, panel_config};

const CANARY: &str = "canary-secret-value-7f3a9c";

async fn signed_in(fixture: &Fixture) -> Client {
    let mut c = Client::new(fixture.router(panel_config()));
    c.login(ALICE).await;
    c
}

/// The agent the vault knows `token` as, if any.
fn token_agent(fixture: &Fixture, token: &str) -> Option<String> {
    fixture
        .gateway
        .vault()
        .agent_for_token(token)
        .unwrap()
        .map(|m| m.agent)
}

/// The `value` of the input with this id.
fn input_value(body: &str, id: &str) -> String {
    let at = body.find(&format!("id=\"{id}\"")).expect("the input");
    let tag_start = body[..at].rfind('<').unwrap();
    let tag = &body[tag_start..at + body[at..].find('>').unwrap()];
    tag.split("value=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn an_agent_token_is_shown_once_and_revoked_by_name() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let list = c.get("/panel/agents").await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    for agent in ["bot", "claude", "codex", "gemini"] {
        assert!(
            list.body.contains(&format!("id=\"agent-{agent}\"")),
            "{agent}"
        );
    }

    let r = c.post("/panel/agents/bot/token", &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let token = input_value(&r.body, "token-value");
    assert!(token.len() > 20, "{token}");
    assert!(r.body.contains("only time this token is shown"));
    assert!(
        r.body
            .contains("claude mcp add --scope user --transport http bridle")
    );
    assert!(r.body.contains("bearer_token_env_var"));
    assert!(r.body.contains("gemini mcp add"));
    // The vault accepts it as bot's.
    assert_eq!(token_agent(&fixture, &token).as_deref(), Some("bot"));
    // Nowhere else: not on the agent's page, the list or the overview.
    for path in [
        "/panel/agents/bot",
        "/panel/agents",
        "/panel",
        "/panel/audit",
    ] {
        let page = c.get(path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(!page.body.contains(&token), "{path} shows the token");
    }
    let detail = c.get("/panel/agents/bot").await;
    assert!(detail.body.contains("<code>"), "fingerprints are shown");
    assert!(
        detail.body.contains("id=\"revoke-agent\""),
        "the confirm dialog"
    );
    assert!(detail.body.contains(r#"pattern="bot""#));

    // Rotate: a new token, shown once.
    let r = c
        .post("/panel/agents/bot/rotate", &[("grace_secs", "0")])
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let rotated = input_value(&r.body, "token-value");
    assert_ne!(rotated, token);
    let r = c
        .post("/panel/agents/bot/rotate", &[("grace_secs", "soon")])
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);

    // Revoke needs the name typed.
    for typed in ["", "bo", "Bot"] {
        let r = c
            .post("/panel/agents/bot/revoke", &[("confirm", typed)])
            .await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{typed}");
        assert!(r.body.contains("nothing was changed"));
    }
    assert!(token_agent(&fixture, &rotated).is_some());
    let r = c
        .post("/panel/agents/bot/revoke", &[("confirm", "bot")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(r.location(), "/panel/agents/bot?notice=agent_revoked");
    assert!(token_agent(&fixture, &rotated).is_none());

    // Errors: an unknown agent, on its page and for a token.
    let r = c.get("/panel/agents/nobody").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.body.contains("unknown_agent"));
    let r = c.post("/panel/agents/nobody/token", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
}

#[tokio::test]
async fn a_secret_value_is_never_shown() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let r = c
        .post(
            "/panel/secrets",
            &[("name", "gitea.token"), ("value", CANARY)],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(
        r.location(),
        "/panel/secrets/gitea.token?notice=secret_created"
    );
    let detail = c.get(r.location()).await;
    assert_eq!(detail.status, StatusCode::OK, "{}", detail.body);
    assert!(detail.body.contains("Secret added."));
    assert!(detail.body.contains("class=\"fingerprint\""));
    assert!(detail.body.contains(r#"pattern="gitea\.token""#));

    // Refused forms come back without the value.
    let r = c
        .post(
            "/panel/secrets",
            &[("name", "gitea.token"), ("value", CANARY)],
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(r.body.contains(r#"value="gitea.token""#));
    let r = c
        .post(
            "/panel/secrets",
            &[("name", "bad name!"), ("value", CANARY)],
        )
        .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    let r = c
        .post("/panel/secrets", &[("name", "empty"), ("value", "")])
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);

    // Rotate, then revoke the old version by name.
    let r = c
        .post(
            "/panel/secrets/gitea.token/rotate",
            &[("value", "second-canary-value"), ("grace_secs", "")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let detail = c.get("/panel/secrets/gitea.token").await;
    assert!(detail.body.contains("id=\"version-2\""));
    let r = c
        .post(
            "/panel/secrets/gitea.token/versions/1/revoke",
            &[("confirm", "gitea")],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    let r = c
        .post(
            "/panel/secrets/gitea.token/versions/1/revoke",
            &[("confirm", "gitea.token")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    let detail = c.get("/panel/secrets/gitea.token").await;
    assert!(detail.body.contains("revoked"), "{}", detail.body);

    // No page, partial or export ever carries a value.
    for path in [
        "/panel/secrets",
        "/panel/secrets/gitea.token",
        "/panel",
        "/panel/audit",
        "/panel/audit?source=user",
        "/panel/audit/export",
    ] {
        let page = c.get(path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
        assert!(!page.body.contains(CANARY), "{path} shows the value");
        assert!(!page.body.contains("second-canary-value"), "{path}");
    }
    // The vault has them, untouched.
    let v = fixture.gateway.vault().version("gitea.token", 2).unwrap();
    assert_eq!(v.expose_str(), Some("second-canary-value"));
    let r = c.get("/panel/secrets/nope").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn sessions_are_listed_and_ended() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let empty = c.get("/panel/sessions").await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.body);
    assert!(empty.body.contains("No agent is connected."));
    assert!(empty.body.contains(r#"hx-trigger="sse:changed""#));
    assert!(fixture.ctx.sessions.touch(
        "claude",
        Some("claude"),
        Some("sess-panel-1"),
        Some("2025-11-25")
    ));
    let list = c.get("/panel/sessions").await;
    assert!(list.body.contains("sess-panel-1"), "{}", list.body);
    let partial = c.get_htmx("/panel/sessions?agent=claude").await;
    assert!(partial.body.contains("sess-panel-1"));
    assert!(!partial.body.contains("<html"));
    let r = c.post("/panel/sessions/sess-panel-1/end", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(!fixture.ctx.sessions.touch(
        "claude",
        Some("claude"),
        Some("sess-panel-1"),
        Some("2025-11-25")
    ));
    let r = c.post("/panel/sessions/nope/end", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
}

#[tokio::test]
async fn the_audit_log_filters_exports_and_verifies() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let id = fixture.propose_guardrail("audited");
    let r = c.post(&format!("/panel/queue/{id}/approve"), &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    let all = c.get("/panel/audit").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    assert!(all.body.contains("src-user"), "{}", all.body);
    let users = c.get("/panel/audit?source=user&order=asc").await;
    assert!(users.body.contains("src-user"));
    assert!(!users.body.contains("src-agent\">agent"));
    let export = c.get("/panel/audit/export?source=user").await;
    assert_eq!(export.status, StatusCode::OK, "{}", export.body);
    assert_eq!(export.header("content-type"), Some("application/x-ndjson"));
    assert!(
        export
            .header("content-disposition")
            .unwrap()
            .contains("attachment")
    );
    for line in export.body.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["source"]["type"], "user", "{line}");
    }
    let verify = c.get("/panel/audit/verify").await;
    assert_eq!(verify.status, StatusCode::OK, "{}", verify.body);
    assert!(
        verify.body.contains("id=\"chain-intact\""),
        "{}",
        verify.body
    );
    let bad = c.get("/panel/audit?from=yesterday").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
    assert!(bad.body.contains("invalid_query"));
    // The overview lists the latest entries.
    let overview = c.get("/panel").await;
    assert!(
        overview.body.contains("Recent audit entries"),
        "{}",
        overview.body
    );
}

#[tokio::test]
async fn an_agent_is_created_with_its_token_shown_once_and_changed() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let list = c.get("/panel/agents").await;
    for label in ["agent-name", "agent-type", "agent-projects"] {
        assert!(
            list.body.contains(&format!(r#"<label for="{label}">"#)),
            "{label}"
        );
    }
    assert!(list.body.contains(r#"<option value="codex">"#));

    let r = c
        .post(
            "/panel/agents",
            &[
                ("name", "newbie"),
                ("agent_type", "codex"),
                ("projects", "demo"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let token = input_value(&r.body, "token-value");
    assert!(r.body.contains("only time this token is shown"));
    assert_eq!(token_agent(&fixture, &token).as_deref(), Some("newbie"));
    let yaml = std::fs::read_to_string(fixture.tmp.path().join("bridle.yaml")).unwrap();
    assert!(yaml.contains("newbie"), "{yaml}");
    assert!(!yaml.contains(&token), "the token never goes to the file");
    for path in ["/panel/agents", "/panel/agents/newbie", "/panel/audit"] {
        let page = c.get(path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(!page.body.contains(&token), "{path} shows the token");
    }
    let page = c.get("/panel/agents/newbie").await;
    assert!(page.body.contains(r#"<option value="codex" selected>"#));
    assert!(
        page.body
            .contains(r#"id="change-projects" name="projects" value="demo""#)
    );

    // The same name again, a bad name, a missing field.
    let r = c
        .post(
            "/panel/agents",
            &[("name", "newbie"), ("agent_type", "codex")],
        )
        .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.body);
    assert!(!r.body.contains("token-value"));
    let r = c
        .post(
            "/panel/agents",
            &[("name", "Bad Name!"), ("agent_type", "codex")],
        )
        .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    assert!(!r.body.contains("token-value"));
    let r = c
        .post("/panel/agents", &[("name", " "), ("agent_type", "codex")])
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.body.contains("needs a name and a type"));

    // Change its type and projects.
    let r = c
        .post(
            "/panel/agents/newbie/change",
            &[("agent_type", "claude"), ("projects", "")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(r.location(), "/panel/agents/newbie?notice=agent_changed");
    let page = c.get(r.location()).await;
    assert!(page.body.contains("Agent changed"));
    assert!(page.body.contains(r#"<option value="claude" selected>"#));
    assert!(
        page.body.contains("<dt>Projects</dt><dd>all</dd>"),
        "{}",
        page.body
    );
    let r = c
        .post(
            "/panel/agents/newbie/change",
            &[("agent_type", "no-such-type"), ("projects", "demo")],
        )
        .await;
    assert!(r.status.is_client_error(), "{}", r.body);
    let r = c
        .post(
            "/panel/agents/nobody/change",
            &[("agent_type", "claude"), ("projects", "")],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.body);
    let r = c
        .post(
            "/panel/agents/newbie/change",
            &[("agent_type", ""), ("projects", "")],
        )
        .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);

    // A watcher sees neither form and may not post them.
    let mut w = Client::new(fixture.router(panel_config()));
    w.login(panel_support::WATCHER).await;
    let list = w.get("/panel/agents").await;
    assert!(!list.body.contains(r#"id="create-agent""#));
    let r = w
        .post(
            "/panel/agents",
            &[("name", "sneaky"), ("agent_type", "codex")],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_change_the_audit_log_cannot_record_is_shown_as_made() {
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    audit_fault::break_audit(fixture.tmp.path());

    // The token is shown (it cannot be shown again), with the warning beside it.
    let r = c.post("/panel/agents/bot/token", &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let token = input_value(&r.body, "token-value");
    assert!(r.body.contains(r#"id="token-warning""#), "{}", r.body);
    assert!(
        r.body
            .contains("the token was made, but the audit log could not record it"),
        "{}",
        r.body
    );
    assert_eq!(token_agent(&fixture, &token).as_deref(), Some("bot"));

    // Any other change: the error page says it was made, without the value.
    let r = c
        .post(
            "/panel/secrets",
            &[("name", "gitea.token"), ("value", CANARY)],
        )
        .await;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", r.body);
    assert!(
        r.body.contains(r#"data-code="audit_unavailable""#),
        "{}",
        r.body
    );
    assert!(r.body.contains("the secret was made"), "{}", r.body);
    assert!(!r.body.contains(CANARY));
    let detail = c.get("/panel/secrets/gitea.token").await;
    assert_eq!(detail.status, StatusCode::OK, "{}", detail.body);

    // Repaired, the token page has no warning.
    audit_fault::repair_audit(fixture.tmp.path());
    let r = c.post("/panel/agents/bot/token", &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(!r.body.contains("token-warning"));
}

#[tokio::test]
async fn an_export_larger_than_sixteen_mebibytes_is_passed_through_whole() {
    use bridle_gateway::audit::{Entry, Kind, Surface};
    let fixture = Fixture::new().await;
    let c = signed_in(&fixture).await;
    let log = fixture.ctx.audit().expect("the gateway's audit log");
    // Twenty entries of 1 MiB each: the export is well past the 16 MiB an ordinary API answer
    // may take in the panel.
    let subject = "s".repeat(1024 * 1024);
    for _ in 0..20 {
        log.record(
            Entry::user("exporter", Surface::Cli, Kind::SecretRotate).subject(subject.as_str()),
        )
        .unwrap();
    }
    let export = c.get("/panel/audit/export?actor=exporter").await;
    assert_eq!(
        export.status,
        StatusCode::OK,
        "{}",
        export.body.chars().take(2000).collect::<String>()
    );
    assert_eq!(export.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(export.body.lines().count(), 20);
    for line in export.body.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["subject"].as_str().map(str::len), Some(subject.len()));
    }
}
