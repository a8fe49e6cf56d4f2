//! A screenshot of every panel page in the light and the dark theme, whole pages, written to
//! `<target dir>/panel-screenshots/{light,dark}/` for a person to look at; on the way, the
//! theme shown is the one the browser asks for and keyboard focus is visible. Every page
//! template is shot at least once (the test names the shots of each and fails on a template it
//! does not know), over a gateway with something on every page: proposals, a scope ticket, a
//! connected upstream, a session, a secret, patterns with an indexed example, memories. The
//! pages a form leads to (a token, a review, the two conflicts, a dialog) are reached through
//! their forms, and the read-only view through a watcher's log-in.
//!
//! The harness (Chromium through WebDriver) is `panel_support::browser`; this test fails,
//! saying so, when Chromium or its driver is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;
#[path = "common/whoami_upstream.rs"]
mod whoami_upstream;

use std::collections::BTreeSet;
use std::path::Path;

use panel_support::browser::{ONE_BROWSER, Session, screenshot_dir};
use panel_support::{ALICE, Fixture, WATCHER, stocked_memory};
use serde_json::json;

/// Each page template and the shots that show it.
const SHOTS_OF_TEMPLATES: &[(&str, &[&str])] = &[
    ("login", &["login"]),
    ("overview", &["overview"]),
    ("projects", &["projects"]),
    ("project", &["project", "project-preview"]),
    ("project_review", &["project-review"]),
    ("project_conflict", &["project-conflict"]),
    ("project_repair", &["project-repair"]),
    ("queue", &["queue", "queue-focus", "queue-read-only"]),
    ("proposal", &["proposal"]),
    ("scope", &["scope"]),
    ("integrations", &["integrations"]),
    ("integration", &["integration"]),
    ("agents", &["agents"]),
    ("agent", &["agent"]),
    ("agent_token", &["agent-token"]),
    ("sessions", &["sessions"]),
    ("secrets", &["secrets"]),
    ("secret", &["secret", "secret-revoke-dialog"]),
    (
        "patterns",
        &[
            "patterns",
            "patterns-reindexed",
            "patterns-remove-dialog",
            "patterns-read-only",
        ],
    ),
    ("pattern_chunks", &["pattern-chunks"]),
    ("pattern_conflict", &["pattern-conflict"]),
    ("memory", &["memory", "memory-purge-dialog"]),
    ("audit", &["audit"]),
    ("audit_verify", &["audit-verify"]),
    ("error", &["not-found"]),
];

/// The full-page templates in `panel-assets/templates` (the layout and macros aside).
fn page_templates() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("panel-assets/templates");
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "html"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "layout" && n != "macros")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screenshots_of_every_page_in_both_themes() {
    let known: BTreeSet<String> = SHOTS_OF_TEMPLATES
        .iter()
        .map(|(t, _)| t.to_string())
        .collect();
    assert_eq!(
        known,
        page_templates(),
        "every page template has its screenshots here"
    );
    let _one = ONE_BROWSER.lock().await;
    let (upstream, stop_upstream) = whoami_upstream::start().await;
    for (theme, dark) in [("light", false), ("dark", true)] {
        let dir = screenshot_dir(theme);
        for (_, names) in SHOTS_OF_TEMPLATES {
            for name in *names {
                let _ = std::fs::remove_file(dir.join(format!("{name}.png")));
            }
        }
        let (memory, repo) = stocked_memory().await;
        let fixture = Fixture::build_with_yaml(
            &format!("upstreams:\n  tickets:\n    http: {{url: '{upstream}'}}\n"),
            |b| b.memory(memory),
        )
        .await;
        let s = Session::start_on(dark, fixture).await;
        let f = &s.served.fixture;
        let proposal = f.propose_guardrail("screenshot-guardrail");
        let mut doc = f.ctx.store.load("demo").unwrap().document;
        doc.patterns.standard = vec!["hexagonal".into(), "CQRS".into()];
        doc.patterns.custom.push(bridle_rules::CustomPattern {
            name: "retry".into(),
            description: "Retries with exponential backoff.".into(),
            example_repos: vec![bridle_rules::ExampleRepo {
                url: repo.path().display().to_string(),
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
        assert!(f.ctx.sessions.touch(
            "claude",
            Some("claude"),
            Some("sess-screenshot"),
            Some("2025-11-25")
        ));
        f.gateway
            .vault()
            .create(
                "gitea.token",
                &bridle_gateway::vault::SecretValue::new(b"screenshot-value".to_vec()),
                "test",
            )
            .unwrap();

        s.visit("/panel/login", "#token").await;
        let matches = s
            .eval("return matchMedia('(prefers-color-scheme: dark)').matches;")
            .await;
        assert_eq!(matches, json!(dark), "the {theme} theme is the one shown");
        s.shoot(&dir, "login").await;
        s.login(ALICE).await;

        // The upstream is connected before its pages are shown.
        s.visit_until("/panel/integrations", "#state-tickets .state.ok")
            .await;
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
            (
                "integrations",
                "/panel/integrations".into(),
                "#state-tickets",
            ),
            (
                "integration",
                "/panel/integrations/tickets".into(),
                "#integration-tool-count",
            ),
            ("patterns", "/panel/patterns".into(), "#pattern-demo-retry"),
            (
                "pattern-chunks",
                "/panel/patterns/demo/retry/chunks".into(),
                ".chunk",
            ),
            ("agents", "/panel/agents".into(), "table"),
            ("agent", "/panel/agents/bot".into(), "#issue-token"),
            ("sessions", "/panel/sessions".into(), "#end-1"),
            ("secrets", "/panel/secrets".into(), "#secret-name"),
            (
                "secret",
                "/panel/secrets/gitea.token".into(),
                "#rotate-value",
            ),
            (
                "memory",
                "/panel/memory?project=demo&pq=retry+backoff".into(),
                "#chunks",
            ),
            ("audit-verify", "/panel/audit/verify".into(), "h1"),
            ("not-found", "/panel/projects/nope".into(), ".problem"),
        ];
        for (name, path, ready) in &pages {
            s.visit(path, ready).await;
            s.shoot(&dir, name).await;
        }

        // An example re-indexed, its bar full; its removal's dialog.
        s.goto("/panel/patterns").await;
        s.click_when("#reindex-retry-example").await;
        s.wait_for("#run-retry-example .run-done").await;
        s.shoot(&dir, "patterns-reindexed").await;
        s.click_when("#remove-example-retry-example-open").await;
        s.wait_for("#remove-example-retry-example-confirm").await;
        s.shoot(&dir, "patterns-remove-dialog").await;

        // A description saved on a page someone else's save made stale: the conflict page.
        s.goto("/panel/patterns").await;
        s.wait_for("#edit-description-demo-retry").await;
        s.open_details().await;
        let mut doc = f.ctx.store.load("demo").unwrap().document;
        doc.patterns.custom[0].description = "Retries, with jitter.".into();
        f.ctx
            .store
            .save_edit("demo", &doc, doc.revision, "admin:bob@api", "meanwhile")
            .unwrap();
        s.set_value("edit-description-demo-retry", "Retries, capped at five.")
            .await;
        s.click("save-description-demo-retry").await;
        s.wait_for("#resolve-description").await;
        s.shoot(&dir, "pattern-conflict").await;

        // The dialogs of a secret and of a memory purge, and an agent's token (from a form).
        s.goto("/panel/secrets/gitea.token").await;
        s.click_when("#revoke-1-open").await;
        s.wait_for("#revoke-1-confirm").await;
        s.shoot(&dir, "secret-revoke-dialog").await;
        s.goto("/panel/memory?project=demo").await;
        s.click_when("#purge-memories-open").await;
        s.wait_for("#purge-memories-confirm").await;
        s.shoot(&dir, "memory-purge-dialog").await;
        s.goto("/panel/agents/bot").await;
        s.click_when("#issue-token").await;
        s.wait_for("#token-value").await;
        s.shoot(&dir, "agent-token").await;

        // The review and conflict pages come from a form.
        s.goto("/panel/projects/demo").await;
        let yaml = s.value_of("#yaml").await;
        s.set_value(
            "yaml",
            &yaml.replacen("name: Demo", "name: Demo renamed", 1),
        )
        .await;
        s.click("review").await;
        s.wait_for(".diff").await;
        s.shoot(&dir, "project-review").await;
        let mut doc = f.ctx.store.load("demo").unwrap().document;
        doc.project.overview = "Changed by someone else.".into();
        f.ctx
            .store
            .save_edit("demo", &doc, doc.revision, "admin:bob@api", "meanwhile")
            .unwrap();
        s.click("save").await;
        s.wait_for("#current-revision").await;
        s.shoot(&dir, "project-conflict").await;

        // A project whose stored document does not load: the repair page, then the file
        // restored for the pages after it.
        let path = f.ctx.store.project_path("demo").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, "schema_version: 2\nproject:\n  name: [unclosed\n").unwrap();
        s.visit("/panel/projects/demo", "#repair").await;
        s.shoot(&dir, "project-repair").await;
        std::fs::write(&path, text).unwrap();

        // The audit log, now that the admin has changed things.
        s.visit("/panel/audit", ".audit").await;
        s.shoot(&dir, "audit").await;

        // Keyboard focus is visible.
        s.visit("/panel/queue", ".queue").await;
        let outline = s
            .eval(
                "const b = document.querySelector('.decide button'); b.focus(); \
                 return getComputedStyle(b).outlineStyle;",
            )
            .await;
        assert_eq!(outline, json!("solid"), "a focused button shows its focus");
        s.shoot(&dir, "queue-focus").await;

        // What a watcher sees: the same pages without their forms.
        s.click("logout").await;
        s.wait_for("#token").await;
        s.login(WATCHER).await;
        s.visit("/panel/queue", ".banner").await;
        s.shoot(&dir, "queue-read-only").await;
        s.visit("/panel/patterns", "#description-demo-retry").await;
        s.shoot(&dir, "patterns-read-only").await;
        s.stop().await;

        for (template, names) in SHOTS_OF_TEMPLATES {
            for name in *names {
                assert!(
                    dir.join(format!("{name}.png")).exists(),
                    "{theme}: no {name}.png for {template}"
                );
            }
        }
    }
    stop_upstream.cancel();
}
