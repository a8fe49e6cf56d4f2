//! A screenshot of every panel page in the light and the dark theme, written to
//! `<target dir>/panel-screenshots/{light,dark}/` for a person to look at; on the way, the
//! theme shown is the one the browser asks for and keyboard focus is visible.
//!
//! The harness (Chromium through WebDriver) is `panel_support::browser`; this test fails,
//! saying so, when Chromium or its driver is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use fantoccini::Locator;
use panel_support::browser::{ONE_BROWSER, Session, screenshot_dir, shoot};
use panel_support::{ALICE, Fixture, stocked_memory};
use serde_json::json;

#[tokio::test]
async fn screenshots_of_every_page_in_both_themes() {
    let _one = ONE_BROWSER.lock().await;
    for (theme, dark) in [("light", false), ("dark", true)] {
        let (memory, _repo) = stocked_memory().await;
        let s = Session::start_on(dark, Fixture::with_memory(memory).await).await;
        let dir = screenshot_dir(theme);
        let f = &s.served.fixture;
        let proposal = f.propose_guardrail("screenshot-guardrail");
        let mut doc = f.ctx.store.load("demo").unwrap().document;
        doc.patterns.custom.push(bridle_rules::CustomPattern {
            name: "retry".into(),
            description: "Retries with exponential backoff.".into(),
            example_repos: vec![bridle_rules::ExampleRepo {
                url: _repo.path().display().to_string(),
                reference_tag: "retry-example".into(),
                arch_tag: "retry".into(),
                last_indexed: None,
            }],
        });
        f.ctx
            .store
            .save_edit("demo", &doc, doc.revision, "test", "a pattern to show")
            .unwrap();
        f.propose_guardrail("another-guardrail");
        f.request_scope("push to the main branch");

        s.browser.goto(&s.url("/panel/login")).await.unwrap();
        s.wait_for("#token").await;
        let matches = s
            .browser
            .execute(
                "return matchMedia('(prefers-color-scheme: dark)').matches;",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(matches, json!(dark), "the {theme} theme is the one shown");
        shoot(&s, &dir, "login").await;
        s.login(ALICE).await;

        let pages = [
            ("overview", "/panel".to_string(), ".tiles"),
            ("projects", "/panel/projects".into(), "#new-name"),
            ("project", "/panel/projects/demo".into(), "#yaml"),
            (
                "project-preview",
                "/panel/projects/demo/preview?agent_type=claude".into(),
                ".rendered",
            ),
            ("queue", "/panel/queue".into(), ".queue"),
            ("proposal", format!("/panel/queue/{proposal}"), ".diff"),
            ("scope", "/panel/scope".into(), "table"),
            ("integrations", "/panel/integrations".into(), "h1"),
            ("patterns", "/panel/patterns".into(), "#pattern-demo-retry"),
            ("agents", "/panel/agents".into(), "table"),
            ("agent", "/panel/agents/bot".into(), "#issue-token"),
            ("sessions", "/panel/sessions".into(), "table"),
            ("secrets", "/panel/secrets".into(), "#secret-name"),
            (
                "memory",
                "/panel/memory?project=demo&pq=retry+backoff".into(),
                "#chunks",
            ),
            ("not-found", "/panel/projects/nope".into(), ".problem"),
        ];
        for (name, path, ready) in &pages {
            s.browser.goto(&s.url(path)).await.unwrap();
            s.wait_for(ready).await;
            shoot(&s, &dir, name).await;
        }

        // An example re-indexed, its bar full; its removal's dialog.
        s.browser.goto(&s.url("/panel/patterns")).await.unwrap();
        s.wait_for("#reindex-retry-example")
            .await
            .click()
            .await
            .unwrap();
        s.wait_for("#run-retry-example .run-done").await;
        shoot(&s, &dir, "patterns-reindexed").await;
        s.wait_for("#remove-example-retry-example-open")
            .await
            .click()
            .await
            .unwrap();
        s.wait_for("#remove-example-retry-example-confirm").await;
        shoot(&s, &dir, "patterns-remove-dialog").await;

        // A secret's page, and an agent's token page (from a form).
        f.gateway
            .vault()
            .create(
                "gitea.token",
                &bridle_gateway::vault::SecretValue::new(b"screenshot-value".to_vec()),
                "test",
            )
            .unwrap();
        s.browser
            .goto(&s.url("/panel/secrets/gitea.token"))
            .await
            .unwrap();
        s.wait_for("#rotate-value").await;
        shoot(&s, &dir, "secret").await;
        s.browser
            .find(Locator::Id("revoke-1-open"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        s.wait_for("#revoke-1-confirm").await;
        shoot(&s, &dir, "secret-revoke-dialog").await;
        s.browser
            .goto(&s.url("/panel/memory?project=demo"))
            .await
            .unwrap();
        s.wait_for("#purge-memories-open")
            .await
            .click()
            .await
            .unwrap();
        s.wait_for("#purge-memories-confirm").await;
        shoot(&s, &dir, "memory-purge-dialog").await;
        s.browser.goto(&s.url("/panel/agents/bot")).await.unwrap();
        s.wait_for("#issue-token").await.click().await.unwrap();
        s.wait_for("#token-value").await;
        shoot(&s, &dir, "agent-token").await;
        s.browser.goto(&s.url("/panel/audit/verify")).await.unwrap();
        s.wait_for("h1").await;
        shoot(&s, &dir, "audit-verify").await;

        // The review and conflict pages come from a form.
        s.browser
            .goto(&s.url("/panel/projects/demo"))
            .await
            .unwrap();
        let yaml = s
            .wait_for("#yaml")
            .await
            .prop("value")
            .await
            .unwrap()
            .unwrap();
        s.set_value(
            "yaml",
            &yaml.replacen("name: Demo", "name: Demo renamed", 1),
        )
        .await;
        s.browser
            .find(Locator::Id("review"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        s.wait_for(".diff").await;
        shoot(&s, &dir, "project-review").await;
        let mut doc = f.ctx.store.load("demo").unwrap().document;
        doc.project.overview = "Changed by someone else.".into();
        f.ctx
            .store
            .save_edit("demo", &doc, doc.revision, "admin:bob@api", "meanwhile")
            .unwrap();
        s.browser
            .find(Locator::Id("save"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        s.wait_for("#current-revision").await;
        shoot(&s, &dir, "project-conflict").await;

        // The audit log, now that the admin has changed things.
        s.browser.goto(&s.url("/panel/audit")).await.unwrap();
        s.wait_for(".audit").await;
        shoot(&s, &dir, "audit").await;

        // Keyboard focus is visible.
        s.browser.goto(&s.url("/panel/queue")).await.unwrap();
        s.wait_for(".queue").await;
        let outline = s
            .browser
            .execute(
                "const b = document.querySelector('.decide button'); b.focus(); \
                 return getComputedStyle(b).outlineStyle;",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(outline, json!("solid"), "a focused button shows its focus");
        shoot(&s, &dir, "queue-focus").await;
        s.stop().await;
    }
}
