//! The web panel in a real browser: Debian's Chromium driven through WebDriver
//! (`chromedriver`, started here on a free loopback port) with `fantoccini`, against the panel
//! served on loopback as `bridle serve` serves it.
//!
//! These tests need `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`; `scripts/install-tools.sh` installs them). Without them they fail, saying
//! so: a browser test that passes without a browser would prove nothing.
//!
//! The last test writes a screenshot of every page in the light and the dark theme to
//! `<target dir>/panel-screenshots/{light,dark}/`, for a person to look at.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use panel_support::{ALICE, BOB, Fixture, Served, panel_config, stocked_memory};
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// One browser at a time: the machine has two cores and each Chromium wants them.
static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A chromedriver process on a free loopback port, killed when dropped.
struct Driver {
    child: tokio::process::Child,
    url: String,
}

impl Driver {
    async fn start() -> Self {
        for binary in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is missing: the panel's browser tests need Debian's `chromium` and \
                 `chromium-driver` (run scripts/install-tools.sh, or apt-get install chromium chromium-driver)"
            );
        }
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let child = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so the browsers it starts end with it (see Drop).
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        // Ready when its status endpoint answers `ready: true` (polled with a deadline).
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = http.get(format!("{url}/status")).send().await
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == true
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self { child, url }
    }

    /// A fresh headless Chromium with its own profile, in the light or the dark theme.
    async fn browser(&self, profile: &Path, dark: bool) -> Client {
        let mut args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1280,1100".into(),
            format!("--user-data-dir={}", profile.display()),
        ];
        if dark {
            args.push("--force-dark-mode".into());
            args.push("--blink-settings=preferredColorScheme=0".into());
        } else {
            args.push("--blink-settings=preferredColorScheme=1".into());
        }
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
        });
        let Value::Object(caps) = caps else {
            unreachable!("a JSON object literal")
        };
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("a Chromium session")
    }

    async fn stop(self) {
        // Drop ends the driver and its browsers.
    }
}

impl Drop for Driver {
    /// Ends chromedriver's whole process group, the Chromium it started included, also when a
    /// test fails half-way (the session is then never closed).
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Everything one browser test needs, stopped in order at the end.
struct Session {
    served: Served,
    driver: Driver,
    browser: Client,
    _profile: tempfile::TempDir,
}

impl Session {
    async fn start(dark: bool) -> Self {
        Self::start_on(dark, Fixture::new().await).await
    }

    async fn start_on(dark: bool, fixture: Fixture) -> Self {
        let served = Served::start_on(panel_config(), fixture).await;
        let driver = Driver::start().await;
        let profile = tempfile::tempdir().unwrap();
        let browser = driver.browser(profile.path(), dark).await;
        Self {
            served,
            driver,
            browser,
            _profile: profile,
        }
    }

    fn url(&self, path: &str) -> String {
        self.served.url(path)
    }

    async fn login(&self, token: &str) {
        let b = &self.browser;
        // On the log-in page already (sent there by the panel), or go to it.
        if b.find(Locator::Id("token")).await.is_err() {
            b.goto(&self.url("/panel/login")).await.unwrap();
        }
        b.find(Locator::Id("token"))
            .await
            .unwrap()
            .send_keys(token)
            .await
            .unwrap();
        b.find(Locator::Id("login"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        b.wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Id("logout"))
            .await
            .expect("signed in");
    }

    async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        self.browser
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no `{css}` appeared: {e}"))
    }

    async fn body_text(&self) -> String {
        self.browser
            .find(Locator::Css("body"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Replaces a textarea's text as a person's edit would end up (typing a whole document key
    /// by key is slow and tests nothing more).
    async fn set_value(&self, id: &str, text: &str) {
        self.browser
            .execute(
                "document.getElementById(arguments[0]).value = arguments[1];",
                vec![json!(id), json!(text)],
            )
            .await
            .unwrap();
    }

    async fn stop(self) {
        let _ = self.browser.close().await;
        self.driver.stop().await;
        self.served.stop().await;
    }
}

#[tokio::test]
async fn log_in_approve_a_proposal_and_log_out() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    let id = s.served.fixture.propose_guardrail("from-the-browser");
    let other = s.served.fixture.propose_guardrail("stays-pending");

    // Refused before log-in: the queue sends the browser to the log-in page.
    s.browser.goto(&s.url("/panel/queue")).await.unwrap();
    s.wait_for("#token").await;
    s.login(ALICE).await;
    // The log-in came back to the page asked for.
    assert!(
        s.browser
            .current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/panel/queue")
    );

    // Approve with htmx: the row is replaced in place by its decision.
    s.wait_for(&format!("#approve-{id}"))
        .await
        .click()
        .await
        .unwrap();
    let decided = s.wait_for(&format!("#proposal-{id} .decision")).await;
    let text = decided.text().await.unwrap();
    assert!(text.contains("approved"), "{text}");
    assert!(text.contains("admin:alice@panel"), "{text}");
    assert_eq!(s.served.fixture.proposal_status(id), "approved");

    // Reloaded, the pending queue no longer has it; the other one is still there.
    s.browser.goto(&s.url("/panel/queue")).await.unwrap();
    s.wait_for(&format!("#proposal-{other}")).await;
    assert!(
        s.browser
            .find(Locator::Id(&format!("proposal-{id}")))
            .await
            .is_err(),
        "the approved proposal left the queue"
    );
    // The session cookie is HttpOnly: the page's script cannot read it.
    let cookies = s
        .browser
        .execute("return document.cookie;", vec![])
        .await
        .unwrap();
    assert_eq!(cookies, json!(""));

    // Log out; the panel refuses the queue again.
    s.browser
        .find(Locator::Id("logout"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    s.wait_for("#token").await;
    assert!(s.body_text().await.contains("You are signed out."));
    s.browser.goto(&s.url("/panel/queue")).await.unwrap();
    s.wait_for("#token").await;
    assert!(
        s.browser
            .current_url()
            .await
            .unwrap()
            .path()
            .ends_with("/panel/login")
    );
    assert!(s.browser.find(Locator::Id("logout")).await.is_err());
    s.stop().await;
}

#[tokio::test]
async fn a_stale_edit_shows_the_conflict_and_is_resolved() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    s.login(ALICE).await;
    let store = &s.served.fixture.ctx.store;
    let base = s.served.fixture.revision();

    s.browser
        .goto(&s.url("/panel/projects/demo"))
        .await
        .unwrap();
    let original = s
        .wait_for("#yaml")
        .await
        .prop("value")
        .await
        .unwrap()
        .unwrap();
    let mine = original.replacen("name: Demo", "name: Demo from the browser", 1);
    assert_ne!(mine, original);
    s.set_value("yaml", &mine).await;
    s.browser
        .find(Locator::Id("summary"))
        .await
        .unwrap()
        .send_keys("rename in the browser")
        .await
        .unwrap();
    s.browser
        .find(Locator::Id("review"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let added = s.wait_for(".diff .d-add").await.text().await.unwrap();
    assert!(added.contains("Demo from the browser"), "{added}");

    // Meanwhile Bob saves through the admin API.
    let http = reqwest::Client::new();
    let mut theirs = store.load("demo").unwrap().document;
    theirs.project.overview = "Bob's overview.".into();
    let bob_yaml = bridle_rules::to_yaml(&theirs).unwrap();
    let r = http
        .put(s.url("/admin/api/v1/projects/demo"))
        .bearer_auth(BOB)
        .json(&json!({ "base_revision": base, "yaml": bob_yaml, "summary": "bob" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);
    let bobs = base + 1;

    // Saving the reviewed edit now meets the conflict view.
    s.browser
        .find(Locator::Id("save"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let current = s.wait_for("#current-revision").await.text().await.unwrap();
    assert_eq!(current, bobs.to_string());
    let page = s.body_text().await;
    assert!(page.contains("Someone else saved demo first"), "{page}");
    assert!(page.contains("Bob's overview."), "what Bob changed: {page}");
    assert!(
        page.contains("Demo from the browser"),
        "what the edit changes: {page}"
    );
    assert_eq!(
        s.served.fixture.revision(),
        bobs,
        "nothing of alice's was saved"
    );

    // Resolve: keep Bob's overview and the rename, review against Bob's revision, save.
    let merged = bridle_rules::to_yaml(&store.load("demo").unwrap().document)
        .unwrap()
        .replacen("name: Demo", "name: Demo from the browser", 1);
    s.set_value("yaml", &merged).await;
    s.browser
        .find(Locator::Id("review"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    s.wait_for("#save").await.click().await.unwrap();
    let notice = s.wait_for(".notice").await.text().await.unwrap();
    assert_eq!(notice, format!("Saved (revision {}).", bobs + 1));
    let now = store.load("demo").unwrap().document;
    assert_eq!(now.project.name, "Demo from the browser");
    assert_eq!(now.project.overview, "Bob's overview.");
    assert_eq!(now.revision, bobs + 1);
    s.stop().await;
}

#[tokio::test]
async fn a_cross_site_form_post_is_refused() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    let id = s.served.fixture.propose_guardrail("cross-site");
    s.login(ALICE).await;

    // Another site (`localhost` is not the site `127.0.0.1`) with a form aimed at the panel.
    let target = s.url(&format!("/panel/queue/{id}/approve"));
    let page = format!(
        "<!doctype html><title>elsewhere</title><form method=post action=\"{target}\">\
         <button id=go>Win a prize</button></form>"
    );
    let evil = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil_port = evil.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let evil_task = tokio::spawn(async move {
        axum::serve(evil, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });

    s.browser
        .goto(&format!("http://localhost:{evil_port}/"))
        .await
        .unwrap();
    s.wait_for("#go").await.click().await.unwrap();
    s.wait_for("[data-code=cross_site_request]").await;
    let text = s.body_text().await;
    assert!(text.contains("403"), "{text}");
    assert_eq!(s.served.fixture.proposal_status(id), "pending");

    let _ = stop.send(());
    evil_task.await.unwrap();
    s.stop().await;
}

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

fn screenshot_dir(theme: &str) -> PathBuf {
    // CARGO_TARGET_TMPDIR is `<target dir>/tmp`.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"));
    let dir = target.join("panel-screenshots").join(theme);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Opens every `<details>` on the page (the add forms), as a click on each summary would.
async fn open_details(s: &Session) {
    s.browser
        .execute(
            "document.querySelectorAll('details').forEach(d => d.open = true);",
            vec![],
        )
        .await
        .unwrap();
}

async fn type_into(s: &Session, id: &str, text: &str) {
    s.browser
        .find(Locator::Id(id))
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
}

async fn click(s: &Session, id: &str) {
    s.browser
        .find(Locator::Id(id))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

#[tokio::test]
async fn add_a_pattern_and_an_example_reindex_it_and_watch_progress_reach_100_percent() {
    let _one = ONE_BROWSER.lock().await;
    let memory = panel_support::memory_service();
    let s = Session::start_on(false, Fixture::with_memory(memory).await).await;
    let repo = tempfile::tempdir().unwrap();
    for n in 0..6 {
        std::fs::write(
            repo.path().join(format!("retry{n}.rs")),
            format!("/// Retries with exponential backoff, variant {n}.\npub fn retry_{n}(attempts: u32) -> u32 {{\n    attempts * {n}\n}}\n"),
        )
        .unwrap();
    }
    s.login(ALICE).await;

    // A pattern, then an example of it, through the page's forms.
    s.browser.goto(&s.url("/panel/patterns")).await.unwrap();
    s.wait_for("#add-pattern-demo").await;
    open_details(&s).await;
    type_into(&s, "pattern-name-demo", "retry").await;
    type_into(&s, "pattern-description-demo", "Retries with backoff.").await;
    click(&s, "add-pattern-demo").await;
    s.wait_for("#pattern-demo-retry").await;
    assert!(s.body_text().await.contains("Pattern added."));
    open_details(&s).await;
    type_into(&s, "ex-url-demo-retry", &repo.path().display().to_string()).await;
    type_into(&s, "ex-tag-demo-retry", "retry-example").await;
    click(&s, "add-example-demo-retry").await;
    s.wait_for("#example-retry-example").await;
    let row = s
        .wait_for("#example-retry-example")
        .await
        .text()
        .await
        .unwrap();
    assert!(row.contains("never"), "not indexed yet: {row}");

    // Re-indexed: the bar follows the run over SSE until it is full.
    click(&s, "reindex-retry-example").await;
    s.wait_for("#run-retry-example").await;
    let done = s.wait_for("#run-retry-example .run-done").await;
    let bar = s.wait_for("#run-retry-example .run-done progress").await;
    let value: f64 = bar.attr("value").await.unwrap().unwrap().parse().unwrap();
    let max: f64 = bar.attr("max").await.unwrap().unwrap().parse().unwrap();
    assert!(max >= 6.0, "one chunk a file at least: {max}");
    assert_eq!(value, max, "the bar is full");
    let text = done.text().await.unwrap();
    assert!(text.contains("100%"), "{text}");
    assert!(text.contains("Indexed:"), "{text}");
    // The bar's own accessible name, and its sentence in a live region.
    assert_eq!(
        bar.attr("aria-label").await.unwrap().as_deref(),
        Some("Indexing progress")
    );
    let live = s.wait_for("#run-retry-example").await;
    assert_eq!(
        live.attr("aria-live").await.unwrap().as_deref(),
        Some("polite")
    );

    // Reloaded: last indexed is the run's, no run is shown any more.
    s.browser.goto(&s.url("/panel/patterns")).await.unwrap();
    let row = s
        .wait_for("#example-retry-example")
        .await
        .text()
        .await
        .unwrap();
    assert!(!row.contains("never"), "{row}");
    assert!(row.contains("idle"), "{row}");

    // Removed through its <dialog>, the name typed.
    click(&s, "remove-example-retry-example-open").await;
    type_into(&s, "remove-example-retry-example-confirm", "retry-example").await;
    click(&s, "remove-example-retry-example-submit").await;
    s.wait_for(".notice").await;
    assert!(s.body_text().await.contains("Example removed"));
    assert!(
        s.browser
            .find(Locator::Id("example-retry-example"))
            .await
            .is_err()
    );
    s.stop().await;
}

async fn shoot(s: &Session, dir: &Path, name: &str) {
    let png = s.browser.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

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
