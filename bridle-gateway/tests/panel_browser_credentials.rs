//! The web panel in a real browser, with credentials: an agent's token is seen exactly once
//! (issued on its page or at its creation, never again after back, reload or elsewhere, never
//! in the browser's storage), revoked through a typed-name dialog; a secret is added and
//! rotated and its value never seen again.
//!
//! The harness (Chromium through WebDriver) is `panel_support::browser`; these tests fail,
//! saying so, when Chromium or its driver is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use fantoccini::Locator;
use panel_support::ALICE;
use panel_support::browser::{ONE_BROWSER, Session};
use serde_json::json;

#[tokio::test]
async fn an_agent_token_is_seen_exactly_once() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    s.login(ALICE).await;
    s.browser.goto(&s.url("/panel/agents/bot")).await.unwrap();
    s.wait_for("#issue-token").await.click().await.unwrap();
    let token = s
        .wait_for("#token-value")
        .await
        .prop("value")
        .await
        .unwrap()
        .unwrap();
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
    s.browser
        .find(Locator::Id("done"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    s.wait_for("#revoke-agent-open").await;
    for path in ["/panel/agents/bot", "/panel/agents", "/panel"] {
        s.browser.goto(&s.url(path)).await.unwrap();
        s.wait_for("main").await;
        assert!(
            !s.browser.source().await.unwrap().contains(&token),
            "{path}"
        );
    }
    // htmx keeps only the current path in sessionStorage (no page snapshots: its history
    // cache is off).
    let storage = s
        .browser
        .execute(
            "return JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)]);",
            vec![],
        )
        .await
        .unwrap();
    let storage = storage.as_str().unwrap();
    assert!(!storage.contains(&token), "{storage}");
    assert!(!storage.contains("htmx-history-cache"), "{storage}");

    // Revoke through the dialog: the name must be typed first.
    s.browser.goto(&s.url("/panel/agents/bot")).await.unwrap();
    s.wait_for("#revoke-agent-open")
        .await
        .click()
        .await
        .unwrap();
    let field = s.wait_for("#revoke-agent-confirm").await;
    field.send_keys("bo").await.unwrap();
    s.browser
        .find(Locator::Id("revoke-agent-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The browser keeps the dialog open: the typed name does not match.
    let still_open = s
        .browser
        .execute(
            "return document.getElementById('revoke-agent').open;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(still_open, json!(true));
    assert!(vault.agent_for_token(&token).unwrap().is_some());
    field.send_keys("t").await.unwrap();
    s.browser
        .find(Locator::Id("revoke-agent-submit"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let notice = s.wait_for(".notice").await.text().await.unwrap();
    assert!(notice.contains("revoked"), "{notice}");
    assert!(vault.agent_for_token(&token).unwrap().is_none());
    s.stop().await;
}

#[tokio::test]
async fn an_agent_is_created_and_its_token_seen_exactly_once() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    s.login(ALICE).await;
    s.browser.goto(&s.url("/panel/agents")).await.unwrap();
    s.wait_for("#agent-name")
        .await
        .send_keys("fresh-agent")
        .await
        .unwrap();
    s.browser
        .find(Locator::Css("#agent-type option[value='codex']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    s.browser
        .find(Locator::Id("agent-projects"))
        .await
        .unwrap()
        .send_keys("demo")
        .await
        .unwrap();
    s.browser
        .find(Locator::Id("create-agent"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let token = s
        .wait_for("#token-value")
        .await
        .prop("value")
        .await
        .unwrap()
        .unwrap();
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
    assert!(
        !s.browser.source().await.unwrap().contains(&token),
        "after back and reload"
    );
    for path in ["/panel/agents", "/panel/agents/fresh-agent"] {
        s.browser.goto(&s.url(path)).await.unwrap();
        s.wait_for("main").await;
        let source = s.browser.source().await.unwrap();
        assert!(!source.contains(&token), "{path}");
        assert!(source.contains("fresh-agent"), "{path}");
    }
    // Change its type and projects on its page.
    s.browser
        .find(Locator::Css("#change-type option[value='claude']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    s.browser
        .find(Locator::Id("change-projects"))
        .await
        .unwrap()
        .clear()
        .await
        .unwrap();
    s.browser
        .find(Locator::Id("change-agent"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let notice = s.wait_for(".notice").await.text().await.unwrap();
    assert!(notice.contains("Agent changed"), "{notice}");
    let facts = s.wait_for(".facts").await.text().await.unwrap();
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
    s.browser.goto(&s.url("/panel/secrets")).await.unwrap();
    s.wait_for("#secret-name")
        .await
        .send_keys("kanboard.token")
        .await
        .unwrap();
    s.browser
        .find(Locator::Id("secret-value"))
        .await
        .unwrap()
        .send_keys(first)
        .await
        .unwrap();
    s.browser
        .find(Locator::Id("add-secret"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(
        s.wait_for(".notice")
            .await
            .text()
            .await
            .unwrap()
            .contains("Secret added")
    );
    assert!(!s.browser.source().await.unwrap().contains(first));

    s.wait_for("#rotate-value")
        .await
        .send_keys(second)
        .await
        .unwrap();
    s.browser
        .find(Locator::Id("rotate"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The rotated page is the one with version 2 (the old page's notice goes stale).
    s.wait_for("#version-2").await;
    assert!(
        s.wait_for(".notice")
            .await
            .text()
            .await
            .unwrap()
            .contains("rotated")
    );
    for path in [
        "/panel/secrets",
        "/panel/secrets/kanboard.token",
        "/panel",
        "/panel/audit",
    ] {
        s.browser.goto(&s.url(path)).await.unwrap();
        s.wait_for("main").await;
        let source = s.browser.source().await.unwrap();
        assert!(
            !source.contains(first) && !source.contains(second),
            "{path}"
        );
    }
    // No input on the page holds a value after the forms were sent.
    s.browser
        .goto(&s.url("/panel/secrets/kanboard.token"))
        .await
        .unwrap();
    let value = s
        .wait_for("#rotate-value")
        .await
        .prop("value")
        .await
        .unwrap();
    assert_eq!(value.as_deref(), Some(""));
    let vault = s.served.fixture.gateway.vault();
    assert_eq!(
        vault.version("kanboard.token", 2).unwrap().expose_str(),
        Some(second)
    );
    s.stop().await;
}
