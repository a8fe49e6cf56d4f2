//! Log-in throttling and the gateway-served panel: failed log-ins counted per client address
//! and per credential (429 `too_many_logins` with `Retry-After`, the credential not checked),
//! through the in-process router and over real HTTP with two loopback client addresses; and a
//! panel on a bound gateway whose connect snippets name that gateway's MCP address, as
//! `bridle serve` configures it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod panel_support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use bridle_gateway::admin::AdminCredentials;
use bridle_gateway::panel::{LoginLimits, PanelConfig};
use panel_support::{ALICE, Client, Fixture, Served, panel_config};

const WINDOW: Duration = Duration::from_secs(600);

fn from(fixture: &Fixture, config: PanelConfig, last: u8) -> Client {
    let mut c = Client::new(fixture.router(config));
    c.peer = Some(SocketAddr::from(([10, 0, 0, last], 40_000)));
    c
}

#[tokio::test]
async fn an_address_with_too_many_failures_gets_429_even_with_the_right_credential() {
    let fixture = Fixture::new().await;
    let config = panel_config().login_limits(LoginLimits::new(3, 100, WINDOW));
    let router = fixture.router(config);
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
    let fixture = Fixture::new().await;
    let config = || panel_config().login_limits(LoginLimits::new(100, 2, WINDOW));
    let router = fixture.router(config());
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
    // A fresh panel (another router) counts from zero: the table is per process and panel.
    let fresh = from(&fixture, config(), 3);
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
        let err =
            bridle_gateway::panel::router(PanelConfig::default().login_limits(limits), &state)
                .unwrap_err();
        assert!(err.to_string().contains("login_limits"), "{err}");
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_the_client_address_is_what_is_counted() {
    let served = Served::start(panel_config().login_limits(LoginLimits::new(2, 100, WINDOW))).await;
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
async fn a_bound_gateway_panel_names_its_own_mcp_address_in_connect_snippets() {
    let Fixture {
        tmp: _tmp,
        gateway,
        admins,
        ..
    } = Fixture::new().await;
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let bound = gateway
        .with_admin(loopback, Arc::clone(&admins) as Arc<dyn AdminCredentials>)
        .bind(loopback)
        .await
        .unwrap();
    // What `bridle serve` does: the panel's snippets name the address the gateway bound.
    let mcp_url = bound.url();
    assert!(!mcp_url.contains(":7878/"), "a free port was bound");
    let bound = bound.panel(Some(PanelConfig::default().mcp_url(mcp_url.clone())));
    let admin = bound.admin_url().unwrap();
    let origin = admin
        .trim_end_matches(bridle_gateway::admin::BASE_PATH)
        .to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));

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

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the gateway stops")
        .unwrap()
        .unwrap();
}
