//! Log-in throttling and the gateway-served panel: failed log-ins counted per client address
//! and per credential (429 `too_many_logins` with `Retry-After`, the credential not checked),
//! through the in-process router and over real HTTP with two loopback client addresses, in the
//! same table as the bearer tokens the admin API refuses (failures split between the log-in
//! form and the API reach the limit together); a credential check that waits (a vault in
//! PostgreSQL) without holding the runtime's thread; and a panel on a bound gateway whose
//! connect snippets name that gateway's MCP address, as `bridle serve` configures it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod panel_support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use bridle_gateway::BoundGateway;
use bridle_gateway::admin::{AdminCredentials, AdminIdentity, BASE_PATH, LoginLimits};
use bridle_gateway::panel::PanelConfig;
use panel_support::{ALICE, Client, Fixture, Served, panel_config};

const WINDOW: Duration = Duration::from_secs(600);

/// A fixture whose `bridle.yaml` tolerates this many failures per address and per credential
/// within [`WINDOW`]: the one setting both the admin API and the panel count within.
async fn limited(per_address: usize, per_credential: usize) -> Fixture {
    let yaml = format!(
        "admin:\n  login_limits:\n    per_address: {per_address}\n    per_credential: {per_credential}\n    window_secs: {}\n",
        WINDOW.as_secs()
    );
    Fixture::build_with_yaml(&yaml, |b| b).await
}

fn from(fixture: &Fixture, config: PanelConfig, last: u8) -> Client {
    let mut c = Client::new(fixture.router(config));
    c.peer = Some(SocketAddr::from(([10, 0, 0, last], 40_000)));
    c
}

#[tokio::test]
async fn an_address_with_too_many_failures_gets_429_even_with_the_right_credential() {
    let fixture = limited(3, 100).await;
    let router = fixture.router(panel_config());
    let mut one = Client::new(router.clone());
    one.peer = Some(SocketAddr::from(([10, 0, 0, 1], 40_000)));
    for n in 0..3 {
        let r = one
            .post("/panel/login", &[("token", &format!("guess-{n}"))])
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "attempt {n}");
        assert!(r.body.contains("That is not an admin credential."));
    }
    let r = one.post("/panel/login", &[("token", "guess-3")]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    assert!(r.body.contains("too_many_logins"), "{}", r.body);
    assert!(r.body.contains("Too many failed log-ins from your address"));
    assert!(
        r.body.contains(r#"<label for="token">"#),
        "the form is shown"
    );
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry >= 1, "{retry}");
    assert!(r.set_cookies().is_empty());
    // The right credential is not even checked from that address.
    let r = one.post("/panel/login", &[("token", ALICE)]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(r.session_cookie().is_none());
    assert!(!r.body.contains(ALICE));
    // Another address logs in, and its success clears nothing of the first one's.
    let mut two = Client::new(router.clone());
    two.peer = Some(SocketAddr::from(([10, 0, 0, 2], 40_000)));
    two.login(ALICE).await;
    let r = one.post("/panel/login", &[("token", ALICE)]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    // The throttled address's open sessions are unaffected: only log-in is throttled.
    let page = two.get("/panel").await;
    assert_eq!(page.status, StatusCode::OK);
}

#[tokio::test]
async fn one_credential_tried_too_often_gets_429_from_any_address() {
    let fixture = limited(100, 2).await;
    let router = fixture.router(panel_config());
    for last in 1..=2 {
        let mut c = Client::new(router.clone());
        c.peer = Some(SocketAddr::from(([10, 0, 0, last], 40_000)));
        let r = c
            .post("/panel/login", &[("token", "leaked-old-token")])
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    }
    let mut third = Client::new(router);
    third.peer = Some(SocketAddr::from(([10, 0, 0, 3], 40_000)));
    let r = third
        .post("/panel/login", &[("token", "leaked-old-token")])
        .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{}", r.body);
    assert!(r.body.contains("with that credential"), "{}", r.body);
    assert!(
        !r.body.contains("leaked-old-token"),
        "a tried credential is never shown"
    );
    // The same address with another credential is not throttled.
    third.login(ALICE).await;
    // Another admin listener (another admin state) counts from zero: the table is its own.
    let fresh = from(&fixture, panel_config(), 3);
    let r = fresh
        .post("/panel/login", &[("token", "leaked-old-token")])
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn limits_of_zero_are_refused() {
    let fixture = Fixture::new().await;
    let state = fixture.state();
    for limits in [
        LoginLimits::new(0, 1, WINDOW),
        LoginLimits::new(1, 0, WINDOW),
        LoginLimits::new(1, 1, Duration::ZERO),
    ] {
        let state = state.clone().login_limits(limits);
        let err = bridle_gateway::panel::router(PanelConfig::default(), &state).unwrap_err();
        assert!(err.to_string().contains("login_limits"), "{err}");
    }
}

/// Admin credentials whose check waits until the test lets it go, as a check that reads a vault
/// in PostgreSQL waits for the database: it says when it starts, then waits for the go.
struct WaitingAdmins {
    entered: tokio::sync::mpsc::UnboundedSender<()>,
    go: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl AdminCredentials for WaitingAdmins {
    fn verify(&self, token: &str) -> Option<AdminIdentity> {
        let _ = self.entered.send(());
        self.go
            .lock()
            .unwrap()
            .recv_timeout(kberg_testkit::WAIT)
            .ok()?;
        (token == ALICE).then(|| AdminIdentity::new("alice"))
    }
}

/// On a single-threaded runtime the go comes from a task of that runtime, which runs only if
/// the log-in's credential check does not hold the runtime's thread while it waits (the admin
/// API checks bearer tokens on the blocking pool for the same reason).
#[tokio::test(flavor = "current_thread")]
async fn a_log_in_checks_the_credential_off_the_async_workers() {
    let fixture = Fixture::new().await;
    let (entered, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (go, waiting) = std::sync::mpsc::channel();
    let admins = Arc::new(WaitingAdmins {
        entered,
        go: std::sync::Mutex::new(waiting),
    });
    let state = fixture
        .gateway
        .admin_state(admins as Arc<dyn AdminCredentials>);
    let router = bridle_gateway::admin::router(state.clone())
        .merge(bridle_gateway::panel::router(panel_config(), &state).unwrap());
    let releaser = tokio::spawn(async move {
        while started.recv().await.is_some() {
            let _ = go.send(());
        }
    });
    let c = Client::new(router);
    let r = c
        .post("/panel/login", &[("token", ALICE), ("next", "/panel")])
        .await;
    releaser.abort();
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert!(r.session_cookie().is_some());
}

/// Guesses sent at once from one address are checked no further than the limit: the ones past
/// it wait for the checks under way, and once those failed they are refused 429 unchecked.
/// Counting a failure only after its check ended let every simultaneous guess be checked.
/// On a single-threaded runtime, one yield polls every spawned log-in up to its first wait
/// (the credential check, or the throttle's), before any check may end.
#[tokio::test(flavor = "current_thread")]
async fn simultaneous_guesses_are_checked_no_further_than_the_limit() {
    let fixture = limited(3, 100).await;
    let (entered, mut started) = tokio::sync::mpsc::unbounded_channel();
    let (go, waiting) = std::sync::mpsc::channel();
    let admins = Arc::new(WaitingAdmins {
        entered,
        go: std::sync::Mutex::new(waiting),
    });
    let state = fixture
        .gateway
        .admin_state(admins as Arc<dyn AdminCredentials>);
    let router = bridle_gateway::admin::router(state.clone())
        .merge(bridle_gateway::panel::router(panel_config(), &state).unwrap());
    let mut client = Client::new(router);
    client.peer = Some(SocketAddr::from(([10, 0, 0, 9], 40_000)));
    let client = Arc::new(client);
    let guesses: Vec<_> = (0..8)
        .map(|n| {
            let c = Arc::clone(&client);
            tokio::spawn(async move {
                c.post("/panel/login", &[("token", &format!("guess-{n}"))])
                    .await
                    .status
            })
        })
        .collect();
    tokio::task::yield_now().await;
    // The checks under way reach the limit; then every check may end.
    for _ in 0..3 {
        started.recv().await.expect("a credential check");
    }
    for _ in 0..8 {
        go.send(()).unwrap();
    }
    let mut statuses = Vec::new();
    for g in guesses {
        statuses.push(g.await.unwrap());
    }
    let mut checked = 3;
    while started.try_recv().is_ok() {
        checked += 1;
    }
    assert_eq!(checked, 3, "credential checks past the limit: {statuses:?}");
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    let wrong = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    assert_eq!((wrong, refused), (3, 5), "{statuses:?}");
}

/// A urlencoded form body for reqwest (built without its `form` feature).
fn form(pairs: &[(&str, &str)]) -> (&'static str, String) {
    (
        "application/x-www-form-urlencoded",
        serde_urlencoded::to_string(pairs).unwrap(),
    )
}

fn no_redirects() -> reqwest::ClientBuilder {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())
}

/// The fixture's gateway bound on a free loopback port with its admin listener (the API and
/// the panel), as `bridle serve` binds it; the data directory lives as long as the first half.
async fn bind_with_admin(fixture: Fixture) -> (tempfile::TempDir, BoundGateway) {
    let Fixture {
        tmp,
        gateway,
        admins,
        ..
    } = fixture;
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let bound = gateway
        .with_admin(loopback, admins as Arc<dyn AdminCredentials>)
        .bind(loopback)
        .await
        .unwrap();
    (tmp, bound)
}

/// A bound gateway serving until [`Running::stop`].
struct Running {
    /// The admin listener's origin (`http://127.0.0.1:<port>`).
    origin: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), bridle_gateway::GatewayError>>,
}

impl Running {
    fn start(bound: BoundGateway) -> Self {
        let origin = bound
            .admin_url()
            .unwrap()
            .trim_end_matches(BASE_PATH)
            .to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(bound.run(async move {
            let _ = stopped.await;
        }));
        Self { origin, stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(kberg_testkit::WAIT, self.task)
            .await
            .expect("the gateway stops")
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_the_client_address_is_what_is_counted() {
    let served = Served::start_on(panel_config(), limited(2, 100).await).await;
    let first = no_redirects()
        .local_address(IpAddr::from([127, 0, 0, 1]))
        .build()
        .unwrap();
    let post = |client: &reqwest::Client, token: &str| {
        let (kind, body) = form(&[("token", token), ("next", "/panel")]);
        client
            .post(served.url("/panel/login"))
            .header("content-type", kind)
            .body(body)
            .send()
    };
    for n in 0..2 {
        let r = post(&first, &format!("wrong-{n}")).await.unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    }
    let r = post(&first, ALICE).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().get("retry-after").is_some());
    assert!(r.text().await.unwrap().contains("too_many_logins"));
    // From another loopback address the same credential opens a session.
    let second = no_redirects()
        .local_address(IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let r = post(&second, ALICE).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::SEE_OTHER);
    assert!(r.headers().get("set-cookie").is_some());
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_split_between_the_log_in_form_and_the_api_reach_the_limit_together() {
    // 3 per address and 2 per credential, set once in bridle.yaml, on a gateway serving the
    // admin API and the panel on one listener, as `bridle serve` does.
    let (_tmp, bound) = bind_with_admin(limited(3, 2).await).await;
    let running = Running::start(bound);
    let origin = running.origin.clone();
    let api = format!("{origin}{BASE_PATH}");

    let from = |last: u8| {
        no_redirects()
            .local_address(IpAddr::from([127, 0, 0, last]))
            .build()
            .unwrap()
    };
    let log_in = |client: &reqwest::Client, token: &str| {
        let (kind, body) = form(&[("token", token), ("next", "/panel")]);
        client
            .post(format!("{origin}/panel/login"))
            .header("content-type", kind)
            .body(body)
            .send()
    };
    let call = |client: &reqwest::Client, token: &str| {
        client
            .get(format!("{api}/projects"))
            .bearer_auth(token)
            .send()
    };
    async fn code(r: reqwest::Response) -> (reqwest::StatusCode, String) {
        let status = r.status();
        let body: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
        (
            status,
            body["code"].as_str().unwrap_or_default().to_string(),
        )
    }
    let unauthorized = (
        reqwest::StatusCode::UNAUTHORIZED,
        "unauthorized".to_string(),
    );
    let throttled = (
        reqwest::StatusCode::TOO_MANY_REQUESTS,
        "too_many_attempts".to_string(),
    );

    // Per address: two failed log-ins and one refused bearer token from 127.0.0.1 are its
    // three; both doors are then shut to it, the right credential included.
    let one = from(1);
    let r = log_in(&one, "wrong-1").await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    assert_eq!(
        code(call(&one, "wrong-2").await.unwrap()).await,
        unauthorized
    );
    let r = log_in(&one, "wrong-3").await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    assert_eq!(
        code(call(&one, "wrong-4").await.unwrap()).await,
        throttled,
        "the API counts the panel's failed log-ins"
    );
    assert_eq!(code(call(&one, ALICE).await.unwrap()).await, throttled);
    let r = log_in(&one, ALICE).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().get("retry-after").is_some());
    let page = r.text().await.unwrap();
    assert!(page.contains("too_many_logins"), "{page}");
    assert!(page.contains("from your address"), "{page}");

    // Per credential: one refused bearer token and one failed log-in, from two addresses,
    // spend a credential's two tries; from a third address neither door checks it again.
    assert_eq!(
        code(call(&from(2), "leaked-old-token").await.unwrap()).await,
        unauthorized
    );
    let r = log_in(&from(3), "leaked-old-token").await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    let four = from(4);
    let r = log_in(&four, "leaked-old-token").await.unwrap();
    assert_eq!(
        r.status(),
        reqwest::StatusCode::TOO_MANY_REQUESTS,
        "the panel counts the API's refused tokens"
    );
    let page = r.text().await.unwrap();
    assert!(page.contains("too_many_logins"), "{page}");
    assert!(page.contains("with that credential"), "{page}");
    assert_eq!(
        code(call(&four, "leaked-old-token").await.unwrap()).await,
        throttled
    );
    // That address is not throttled itself: the right credential opens both doors.
    assert_eq!(
        call(&four, ALICE).await.unwrap().status(),
        reqwest::StatusCode::OK
    );
    let r = log_in(&four, ALICE).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::SEE_OTHER);

    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_gateway_panel_names_its_own_mcp_address_in_connect_snippets() {
    let (_tmp, bound) = bind_with_admin(Fixture::new().await).await;
    // What `bridle serve` does: the panel's snippets name the address the gateway bound.
    let mcp_url = bound.url();
    assert!(!mcp_url.contains(":7878/"), "a free port was bound");
    let bound = bound.panel(Some(PanelConfig::default().mcp_url(mcp_url.clone())));
    let running = Running::start(bound);
    let origin = running.origin.clone();

    let http = no_redirects().build().unwrap();
    let (kind, body) = form(&[("token", ALICE), ("next", "/panel")]);
    let r = http
        .post(format!("{origin}/panel/login"))
        .header("content-type", kind)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::SEE_OTHER);
    let cookie = r
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let r = http
        .post(format!("{origin}/panel/agents/bot/token"))
        .header("cookie", &cookie)
        .header("origin", &origin)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    // The page's HTML escaping, undone for the comparison.
    let body = r
        .text()
        .await
        .unwrap()
        .replace("&#x2f;", "/")
        .replace("&quot;", "\"");
    assert!(
        body.contains(&format!("--transport http bridle {mcp_url}")),
        "the Claude Code snippet names {mcp_url}"
    );
    assert!(
        body.contains(&format!("url = \"{mcp_url}\"")),
        "Codex's too"
    );
    assert!(!body.contains("127.0.0.1:7878"), "not the default address");

    running.stop().await;
}
