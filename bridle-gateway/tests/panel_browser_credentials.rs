//! The web panel in a real browser, with credentials: an agent's token is seen exactly once
//! (issued on its page or at its creation, never again after back, reload or elsewhere, never
//! in the browser's storage), revoked through a typed-name dialog; a secret is added and
//! rotated and its value never seen again.
//!
//! The harness (Chromium through WebDriver) is `panel_support::browser`; these tests fail,
//! saying so, when Chromium or its driver is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use panel_support::ALICE;
use panel_support::browser::{ONE_BROWSER, Session};
use serde_json::json;

#[tokio::test]
async fn an_agent_token_is_seen_exactly_once() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    s.login(ALICE).await;
    s.goto("/panel/agents/bot").await;
    s.click_when("#issue-token").await;
    let token = s.value_of("#token-value").await;
    let vault = s.served.fixture.gateway.vault();
    assert_eq!(
        vault
            .agent_for_token(&token)
            .unwrap()
            .map(|m| m.agent)
            .as_deref(),
        Some("bot")
    );
    let snippets = s.body_text().await;
    assert!(snippets.contains(&format!("Authorization: Bearer {token}")));
    // Done: the agent's page, the list and the overview never show it again, and nothing
    // was kept in the browser's storage.
    s.click("done").await;
    s.wait_for("#revoke-agent-open").await;
    for path in ["/panel/agents/bot", "/panel/agents", "/panel"] {
        s.visit(path, "main").await;
        assert!(!s.source().await.contains(&token), "{path}");
    }
    // htmx keeps only the current path in sessionStorage (no page snapshots: its history
    // cache is off).
    let storage = s
        .eval("return JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)]);")
        .await;
    let storage = storage.as_str().unwrap();
    assert!(!storage.contains(&token), "{storage}");
    assert!(!storage.contains("htmx-history-cache"), "{storage}");

    // Revoke through the dialog: the name must be typed first.
    s.goto("/panel/agents/bot").await;
    s.click_when("#revoke-agent-open").await;
    s.wait_for("#revoke-agent-confirm").await;
    s.type_into("revoke-agent-confirm", "bo").await;
    s.click("revoke-agent-submit").await;
    // The browser keeps the dialog open: the typed name does not match.
    let still_open = s
        .eval("return document.getElementById('revoke-agent').open;")
        .await;
    assert_eq!(still_open, json!(true));
    assert!(vault.agent_for_token(&token).unwrap().is_some());
    s.type_into("revoke-agent-confirm", "t").await;
    s.click("revoke-agent-submit").await;
    let notice = s.notice().await;
    assert!(notice.contains("revoked"), "{notice}");
    assert!(vault.agent_for_token(&token).unwrap().is_none());
    s.stop().await;
}

#[tokio::test]
async fn an_agent_is_created_and_its_token_seen_exactly_once() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    s.login(ALICE).await;
    s.visit("/panel/agents", "#agent-name").await;
    s.type_into("agent-name", "fresh-agent").await;
    s.select("agent-type", "codex").await;
    s.type_into("agent-projects", "demo").await;
    s.click("create-agent").await;
    let token = s.value_of("#token-value").await;
    let vault = s.served.fixture.gateway.vault();
    assert_eq!(
        vault
            .agent_for_token(&token)
            .unwrap()
            .map(|m| m.agent)
            .as_deref(),
        Some("fresh-agent")
    );
    // Back, reload, the list, the agent's page: never again.
    s.browser.back().await.unwrap();
    s.wait_for("main").await;
    s.browser.refresh().await.unwrap();
    s.wait_for("main").await;
    assert!(!s.source().await.contains(&token), "after back and reload");
    for path in ["/panel/agents", "/panel/agents/fresh-agent"] {
        s.visit(path, "main").await;
        let source = s.source().await;
        assert!(!source.contains(&token), "{path}");
        assert!(source.contains("fresh-agent"), "{path}");
    }
    // Change its type and projects on its page.
    s.select("change-type", "claude").await;
    s.wait_for("#change-projects").await.clear().await.unwrap();
    s.click("change-agent").await;
    let notice = s.notice().await;
    assert!(notice.contains("Agent changed"), "{notice}");
    let facts = s.text_of(".facts").await;
    assert!(facts.contains("claude") && facts.contains("all"), "{facts}");
    s.stop().await;
}

#[tokio::test]
async fn a_secret_is_added_and_rotated_and_its_value_never_seen() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    s.login(ALICE).await;
    let first = "first-canary-3d91e0";
    let second = "second-canary-b27c4f";
    s.visit("/panel/secrets", "#secret-name").await;
    s.type_into("secret-name", "kanboard.token").await;
    s.type_into("secret-value", first).await;
    s.click("add-secret").await;
    assert!(s.notice().await.contains("Secret added"));
    assert!(!s.source().await.contains(first));

    s.wait_for("#rotate-value").await;
    s.type_into("rotate-value", second).await;
    s.click("rotate").await;
    // The rotated page is the one with version 2 (the old page's notice goes stale).
    s.wait_for("#version-2").await;
    assert!(s.notice().await.contains("rotated"));
    for path in [
        "/panel/secrets",
        "/panel/secrets/kanboard.token",
        "/panel",
        "/panel/audit",
    ] {
        s.visit(path, "main").await;
        let source = s.source().await;
        assert!(
            !source.contains(first) && !source.contains(second),
            "{path}"
        );
    }
    // No input on the page holds a value after the forms were sent.
    s.goto("/panel/secrets/kanboard.token").await;
    assert_eq!(s.value_of("#rotate-value").await, "");
    let vault = s.served.fixture.gateway.vault();
    assert_eq!(
        vault.version("kanboard.token", 2).unwrap().expose_str(),
        Some(second)
    );
    s.stop().await;
}
