//! Read-only mode across the whole panel (HTML level, `oneshot`): over a gateway with something
//! on every page (a proposal, a scope ticket, a session, a secret, a pattern with an indexed
//! example and a well-known pattern, session memories), every form that changes something and
//! that alice sees on a page is missing from the watcher's view of that page, which shows the
//! same things as text; and every one of those forms, posted by the watcher or on a panel that
//! is read-only for everyone, is refused with 403 `read_only` and changes nothing. The forms are
//! collected from alice's pages, so a form added to a page later is covered without a new line
//! here.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod panel_support;

use std::collections::BTreeSet;

use axum::http::StatusCode;
use bridle_gateway::panel::PanelConfig;
use panel_support::{ALICE, Client, Fixture, WATCHER, panel_config, signed_in, stocked_memory};

/// The targets of a page's state-changing requests: `<form method="post" action>`, `formaction`
/// and `hx-post`, log-out aside (a watcher may always sign out).
fn post_targets(html: &str) -> BTreeSet<String> {
    let unescape = |s: &str| s.replace("&amp;", "&").replace("&#x2f;", "/");
    let mut out = BTreeSet::new();
    for tag in html
        .split('<')
        .skip(1)
        .map(|t| t.split('>').next().unwrap())
    {
        let attr = |name: &str| {
            tag.split(&format!(" {name}=\""))
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .map(unescape)
        };
        if tag.starts_with("form") && tag.contains("method=\"post\"") {
            out.extend(attr("action"));
        }
        out.extend(attr("formaction"));
        out.extend(attr("hx-post"));
    }
    out.remove("/panel/logout");
    out
}

/// What the watcher's posts must leave as it was.
#[derive(Debug, PartialEq)]
struct Snapshot {
    revision: u64,
    proposal: String,
    ticket: String,
    secret_versions: u64,
    session_open: bool,
    memories: usize,
}

async fn snapshot(
    f: &Fixture,
    memory: &bridle_memory::MemoryService,
    proposal: u64,
    ticket: u64,
) -> Snapshot {
    Snapshot {
        revision: f.revision(),
        proposal: f.proposal_status(proposal),
        ticket: f.ctx.store.scope_ticket(ticket).unwrap().status,
        secret_versions: f.gateway.vault().active_version("gitea.token").unwrap(),
        session_open: f.ctx.sessions.session("sess-watched").is_some(),
        memories: memory
            .session
            .list(&bridle_memory::MemoryFilter::default(), None, 100)
            .await
            .unwrap()
            .0
            .len(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_every_page_without_its_forms_and_every_change_is_refused() {
    let (memory, repo) = stocked_memory().await;
    let f = Fixture::with_memory(memory.clone()).await;
    let proposal = f.propose_guardrail("watched");
    let ticket = f.request_scope("push to the main branch");
    let mut doc = f.ctx.store.load("demo").unwrap().document;
    doc.patterns.standard.push("hexagonal".into());
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
        .save_edit("demo", &doc, doc.revision, "test", "patterns to watch")
        .unwrap();
    f.gateway
        .vault()
        .create(
            "gitea.token",
            &bridle_gateway::vault::SecretValue::new(b"watched-value".to_vec()),
            "test",
        )
        .unwrap();
    assert!(f.ctx.sessions.touch(
        "claude",
        Some("claude"),
        Some("sess-watched"),
        Some("2025-11-25")
    ));

    let alice = signed_in(&f).await;
    let mut watcher = Client::new(f.router(panel_config()));
    watcher.login(WATCHER).await;
    let pages = [
        "/panel".to_string(),
        "/panel/projects".into(),
        "/panel/projects/demo".into(),
        "/panel/projects/demo/preview?agent_type=claude".into(),
        "/panel/queue".into(),
        format!("/panel/queue/{proposal}"),
        "/panel/scope".into(),
        "/panel/integrations".into(),
        "/panel/agents".into(),
        "/panel/agents/bot".into(),
        "/panel/sessions".into(),
        "/panel/secrets".into(),
        "/panel/secrets/gitea.token".into(),
        "/panel/patterns".into(),
        "/panel/patterns/demo/retry/chunks".into(),
        "/panel/memory?project=demo&pq=retry".into(),
        "/panel/audit".into(),
        "/panel/audit/verify".into(),
    ];
    let mut every_target = BTreeSet::new();
    for path in &pages {
        let theirs = alice.get(path).await;
        assert_eq!(theirs.status, StatusCode::OK, "{path}: {}", theirs.body);
        let seen = watcher.get(path).await;
        assert_eq!(seen.status, StatusCode::OK, "{path}: {}", seen.body);
        assert!(
            seen.body.contains("Read-only"),
            "{path} says it is read-only"
        );
        assert!(seen.body.contains("action=\"/panel/logout\""), "{path}");
        let left = post_targets(&seen.body);
        assert!(left.is_empty(), "{path} shows a watcher forms: {left:?}");
        assert!(!seen.body.contains("<dialog"), "{path} has a dialog");
        every_target.extend(post_targets(&theirs.body));
    }
    // The pages alice changes things on: each of their areas has its forms.
    for area in [
        "/panel/projects",
        "/panel/projects/demo/",
        "/panel/queue/",
        "/panel/scope/",
        "/panel/agents",
        "/panel/agents/bot/",
        "/panel/sessions/",
        "/panel/secrets",
        "/panel/secrets/gitea.token/",
        "/panel/patterns/demo",
        "/panel/patterns/demo/retry/change",
        "/panel/patterns/demo/retry/examples",
        "/panel/standard-patterns/demo",
        "/panel/memory/",
    ] {
        assert!(
            every_target.iter().any(|t| t.starts_with(area)),
            "alice has no form under {area}: {every_target:?}"
        );
    }

    // What the watcher sees as text instead: the document, the description, the proposal.
    let project = watcher.get("/panel/projects/demo").await;
    assert!(project.body.contains("class=\"yaml\""));
    let patterns = watcher.get("/panel/patterns").await;
    assert!(
        patterns
            .body
            .contains("<p id=\"description-demo-retry\">Retries with exponential backoff.</p>"),
        "{}",
        patterns.body
    );
    assert!(
        patterns
            .body
            .contains("<span class=\"chip-name\">hexagonal</span>")
    );

    // Every form alice has, posted by the watcher and by alice on a read-only panel: refused,
    // nothing changed.
    let before = snapshot(&f, &memory, proposal, ticket).await;
    let mut read_only = Client::new(f.read_only_router(PanelConfig::default()));
    read_only.login(ALICE).await;
    for target in &every_target {
        for (who, c) in [("watcher", &watcher), ("read-only alice", &read_only)] {
            let r = c.post(target, &[("confirm", "x"), ("name", "x")]).await;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "{who} {target}: {}",
                r.body
            );
            assert!(
                r.body.contains("data-code=\"read_only\""),
                "{who} {target}: {}",
                r.body
            );
            let r = c.post_htmx(target, &[]).await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{who} htmx {target}");
        }
    }
    assert_eq!(snapshot(&f, &memory, proposal, ticket).await, before);
    // The forms themselves still work for alice on the ordinary panel (the refusal was the
    // mode's): one of them, approving the proposal.
    let r = alice
        .post(&format!("/panel/queue/{proposal}/approve"), &[])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(f.proposal_status(proposal), "approved");
}
