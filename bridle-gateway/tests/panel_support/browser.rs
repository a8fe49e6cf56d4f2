//! The browser half of the panel's test harness: Debian's Chromium driven through WebDriver
//! (`chromedriver`, started on a free loopback port) with `fantoccini`, against the panel
//! served on loopback as `bridle serve` serves it, and the small steps the flows share.
//!
//! The browser tests need `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium`
//! and `chromium-driver`; `scripts/install-tools.sh` installs them). Without them they fail,
//! saying so: a browser test that passes without a browser would prove nothing.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use kberg_testkit::eventually_async;
use serde_json::{Value, json};

use super::{Fixture, Served, panel_config};

const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// One browser at a time: the machine has two cores and each Chromium wants them.
pub static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A chromedriver process on a free loopback port, killed when dropped.
pub struct Driver {
    child: tokio::process::Child,
    url: String,
}

impl Driver {
    pub async fn start() -> Self {
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
        eventually_async("chromedriver to be ready", || async {
            let r = http.get(format!("{url}/status")).send().await.ok()?;
            let v = r.json::<Value>().await.ok()?;
            (v["value"]["ready"] == true).then_some(())
        })
        .await;
        Self { child, url }
    }

    /// A fresh headless Chromium with its own profile, in the light or the dark theme.
    pub async fn browser(&self, profile: &Path, dark: bool) -> Client {
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

    pub async fn stop(self) {
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

/// A headless Chromium under its own chromedriver, pointed at one panel (`base` is its
/// origin), with the steps a flow takes in it.
pub struct Browser {
    pub driver: Driver,
    pub browser: Client,
    base: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A fresh driver and browser (own profile) for the panel at `base`, in the light or the
    /// dark theme.
    pub async fn open(base: String, dark: bool) -> Self {
        let driver = Driver::start().await;
        let profile = tempfile::tempdir().unwrap();
        let browser = driver.browser(profile.path(), dark).await;
        Self {
            driver,
            browser,
            base,
            _profile: profile,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Goes to `path` on the panel's origin.
    pub async fn goto(&self, path: &str) {
        self.browser
            .goto(&self.url(path))
            .await
            .unwrap_or_else(|e| panic!("{path} did not load: {e}"));
    }

    /// Goes to `path` and waits for `ready` (a CSS selector) to appear on it.
    pub async fn visit(&self, path: &str, ready: &str) -> fantoccini::elements::Element {
        self.goto(path).await;
        self.wait_for(ready).await
    }

    /// Goes to `path` until `ready` is on it (for a state the gateway reaches on its own, as an
    /// upstream's connection), loading it again each time, within a deadline.
    pub async fn visit_until(&self, path: &str, ready: &str) -> fantoccini::elements::Element {
        eventually_async(&format!("{path} to show `{ready}`"), || async {
            self.goto(path).await;
            self.browser.find(Locator::Css(ready)).await.ok()
        })
        .await
    }

    /// The path of the page shown now.
    pub async fn path(&self) -> String {
        self.browser.current_url().await.unwrap().path().to_string()
    }

    pub async fn login(&self, token: &str) {
        // On the log-in page already (sent there by the panel), or go to it.
        if self.browser.find(Locator::Id("token")).await.is_err() {
            self.goto("/panel/login").await;
        }
        self.type_into("token", token).await;
        self.click("login").await;
        self.wait_until_found(Locator::Id("logout"))
            .await
            .unwrap_or_else(|e| panic!("not signed in: {e}"));
    }

    /// The element `css` once it is on the page ([`kberg_testkit::WAIT`] at most).
    pub async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        self.wait_until_found(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no `{css}` appeared: {e}"))
    }

    /// Looks for `locator` every 50 ms until it is found, for [`kberg_testkit::WAIT`] at most,
    /// and returns the last error otherwise. Every error is tried again, not only "no such
    /// element": while a form's submission or a redirect is under way ChromeDriver may answer a
    /// look-up with "aborted by navigation", which says nothing about the page that is coming.
    async fn wait_until_found(
        &self,
        locator: Locator<'_>,
    ) -> Result<fantoccini::elements::Element, fantoccini::error::CmdError> {
        let deadline = Instant::now() + kberg_testkit::WAIT;
        loop {
            match self.browser.find(locator).await {
                Ok(found) => return Ok(found),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The text of `css` once it appears.
    pub async fn text_of(&self, css: &str) -> String {
        self.wait_for(css).await.text().await.unwrap()
    }

    /// The value of the field `css` once it appears.
    pub async fn value_of(&self, css: &str) -> String {
        self.wait_for(css)
            .await
            .prop("value")
            .await
            .unwrap()
            .unwrap_or_default()
    }

    /// The page's notice (what a change redirected to says).
    pub async fn notice(&self) -> String {
        self.text_of(".notice").await
    }

    /// Whether an element with this id is on the page now.
    pub async fn has(&self, id: &str) -> bool {
        self.browser.find(Locator::Id(id)).await.is_ok()
    }

    pub async fn body_text(&self) -> String {
        self.text_of("body").await
    }

    /// The page's HTML as the browser holds it now.
    pub async fn source(&self) -> String {
        self.browser.source().await.unwrap()
    }

    /// Runs a script in the page and returns its value.
    pub async fn eval(&self, script: &str) -> Value {
        self.browser.execute(script, vec![]).await.unwrap()
    }

    /// Types `text` into the element with this id, as a person would.
    pub async fn type_into(&self, id: &str, text: &str) {
        self.browser
            .find(Locator::Id(id))
            .await
            .unwrap_or_else(|e| panic!("no #{id} to type into: {e}"))
            .send_keys(text)
            .await
            .unwrap();
    }

    /// Clicks the element with this id.
    pub async fn click(&self, id: &str) {
        self.browser
            .find(Locator::Id(id))
            .await
            .unwrap_or_else(|e| panic!("no #{id} to click: {e}"))
            .click()
            .await
            .unwrap();
    }

    /// Waits for `css` and clicks it.
    pub async fn click_when(&self, css: &str) {
        self.wait_for(css).await.click().await.unwrap();
    }

    /// Picks `value` in the `<select>` with this id.
    pub async fn select(&self, id: &str, value: &str) {
        self.browser
            .find(Locator::Css(&format!("#{id} option[value='{value}']")))
            .await
            .unwrap_or_else(|e| panic!("#{id} has no option {value}: {e}"))
            .click()
            .await
            .unwrap();
    }

    /// Opens every `<details>` on the page (the add forms), as a click on each summary would.
    pub async fn open_details(&self) {
        self.eval("document.querySelectorAll('details').forEach(d => d.open = true);")
            .await;
    }

    /// Replaces a textarea's text as a person's edit would end up (typing a whole document key
    /// by key is slow and tests nothing more).
    pub async fn set_value(&self, id: &str, text: &str) {
        self.browser
            .execute(
                "document.getElementById(arguments[0]).value = arguments[1];",
                vec![json!(id), json!(text)],
            )
            .await
            .unwrap();
    }

    /// A screenshot of the whole page (the window grown to the page's height for it, then
    /// back), written to `dir/name.png`.
    pub async fn shoot(&self, dir: &Path, name: &str) {
        let (width, height) = self.browser.get_window_size().await.unwrap();
        let sizes = self
            .eval("return [Math.ceil(document.documentElement.scrollHeight), window.innerHeight];")
            .await;
        let page = sizes[0].as_u64().unwrap_or(0);
        let inner = sizes[1].as_u64().unwrap_or(height);
        // The window's frame around the page; Chromium caps a window's height, so a page taller
        // than that is cut at it.
        let frame = height.saturating_sub(inner);
        let tall = (page + frame).clamp(height, 8000);
        if tall > height {
            self.browser
                .set_window_size(width as u32, tall as u32)
                .await
                .unwrap();
        }
        let png = self.browser.screenshot().await.unwrap();
        if tall > height {
            self.browser
                .set_window_size(width as u32, height as u32)
                .await
                .unwrap();
        }
        assert!(png.starts_with(b"\x89PNG"), "{name} is a PNG");
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the browser session, then the driver with its browsers.
    pub async fn close(self) {
        let _ = self.browser.close().await;
        self.driver.stop().await;
    }
}

/// Everything one browser test of a served panel needs, stopped in order at the end; the
/// browser's steps are [`Browser`]'s.
pub struct Session {
    pub served: Served,
    tab: Browser,
}

impl std::ops::Deref for Session {
    type Target = Browser;

    fn deref(&self) -> &Browser {
        &self.tab
    }
}

impl Session {
    pub async fn start(dark: bool) -> Self {
        Self::start_on(dark, Fixture::new().await).await
    }

    pub async fn start_on(dark: bool, fixture: Fixture) -> Self {
        let served = Served::start_on(panel_config(), fixture).await;
        let tab = Browser::open(served.url(""), dark).await;
        Self { served, tab }
    }

    pub async fn stop(self) {
        self.tab.close().await;
        self.served.stop().await;
    }
}

pub fn screenshot_dir(theme: &str) -> PathBuf {
    // CARGO_TARGET_TMPDIR is `<target dir>/tmp`.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("target"));
    let dir = target.join("panel-screenshots").join(theme);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
