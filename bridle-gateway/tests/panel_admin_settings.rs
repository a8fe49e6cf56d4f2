//! `bridle.yaml`'s `admin:` section configures the web panel a gateway's admin listener serves,
//! as `bridle serve` serves it: `behind_tls` (the `__Host-` cookie with `Secure`),
//! `allowed_origins` (a reverse proxy's public origin, whose `Host` the listener answers and
//! whose changes the panel takes) and `login_limits`; bad values are refused at load, named.

#![cfg(feature = "panel")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::ALICE;
use admin_support::gateway::Gw;
use bridle_gateway::config::{GatewayConfig, init_data_dir};

const BEHIND_A_PROXY: &str = "admin:
  behind_tls: true
  allowed_origins: [https://bridle.example]
  login_limits:
    per_address: 2
    per_credential: 100
";

fn login_form(token: &str) -> String {
    serde_urlencoded::to_string([("token", token), ("next", "/panel")]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_section_sets_the_panels_tls_origins_and_log_in_limits() {
    let gw = Gw::start_with_yaml(BEHIND_A_PROXY, |b| b).await;
    let origin = gw
        .base
        .trim_end_matches(bridle_gateway::admin::BASE_PATH)
        .to_string();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    // A browser at the proxy's origin: the proxy passes its Host through.
    let through_the_proxy = |token: &str| {
        http.post(format!("{origin}/panel/login"))
            .header("host", "bridle.example")
            .header("origin", "https://bridle.example")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(login_form(token))
            .send()
    };
    let r = through_the_proxy(ALICE).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::SEE_OTHER);
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("__Host-bridle-panel="), "{cookie}");
    assert!(cookie.contains("; Secure"), "{cookie}");
    // Another site's origin is still refused.
    let r = http
        .post(format!("{origin}/panel/login"))
        .header("host", "bridle.example")
        .header("origin", "https://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(login_form(ALICE))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::FORBIDDEN);
    // The log-in limits are the section's: the third try from this address is refused.
    for n in 0..2 {
        let r = through_the_proxy(&format!("wrong-{n}")).await.unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    }
    let r = through_the_proxy(ALICE).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    gw.stop().await;
}

#[test]
fn bad_admin_settings_are_refused_at_load_by_name() {
    for (section, named) in [
        (
            "admin:\n  allowed_origins: [bridle.example]\n",
            "admin.allowed_origins",
        ),
        (
            "admin:\n  allowed_origins: [\"https://bridle.example/panel\"]\n",
            "admin.allowed_origins",
        ),
        (
            "admin:\n  allowed_origins: [\"https://bridle.example:notaport\"]\n",
            "admin.allowed_origins",
        ),
        (
            "admin:\n  login_limits:\n    per_address: 0\n",
            "admin.login_limits",
        ),
        (
            "admin:\n  login_limits:\n    window_secs: 0\n",
            "admin.login_limits",
        ),
        ("admin:\n  watchers: [\"Not A Name\"]\n", "admin.watchers"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir(tmp.path()).unwrap();
        let file = tmp.path().join("bridle.yaml");
        let yaml = std::fs::read_to_string(&file).unwrap();
        std::fs::write(&file, format!("{yaml}{section}")).unwrap();
        let err = GatewayConfig::load(tmp.path()).unwrap_err().to_string();
        assert!(err.contains(named), "{section}: {err}");
    }
    let good = "admin:\n  allowed_origins: [\"https://bridle.example\", \"http://10.0.0.5:7879/\", \"https://[::1]:8443\"]\n  behind_tls: true\n  read_only: true\n  watchers: [auditor]\n";
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir(tmp.path()).unwrap();
    let file = tmp.path().join("bridle.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{yaml}{good}")).unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    assert!(config.admin.behind_tls && config.admin.read_only);
    assert_eq!(config.admin.watchers, ["auditor"]);
}
