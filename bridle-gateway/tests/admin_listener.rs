//! The admin listener over real HTTP: requests for another `Host` are refused before any route
//! (DNS rebinding), on the API and the panel alike, while loopback names, the bound address, an
//! allowed host and the panel's allowed origin are answered; and every API answer is marked
//! `no-store` and `nosniff`, the one that holds a newly issued token included.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::net::SocketAddr;

use admin_support::gateway::Gw;
use admin_support::{ALICE, Api, json_ok, problem};
use reqwest::StatusCode;

async fn status_for_host(addr: SocketAddr, path: &str, host: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .header("host", host)
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_answers_only_its_own_hosts() {
    let served = Api::start_served(
        |state| state,
        |server| {
            #[cfg(feature = "panel")]
            let server = server.panel(Some(
                bridle_gateway::panel::PanelConfig::default()
                    .allow_origin("https://bridle.example"),
            ));
            server.allow_host("proxy.internal:8080").unwrap()
        },
    )
    .await;
    let addr = served.addr;
    let port = addr.port();
    let api = "/admin/api/v1/projects";
    // A rebound name, on the API and on the panel and on what no route serves: refused before
    // any of them (and before the credential is looked at).
    let mut paths = vec![api, "/admin/api/v1/openapi.json", "/nowhere"];
    if cfg!(feature = "panel") {
        paths.push("/panel/login");
    }
    for path in &paths {
        for host in [
            format!("evil.example:{port}"),
            "evil.example".to_string(),
            format!("localhost.evil.example:{port}"),
            "proxy.internal:9090".to_string(),
        ] {
            let resp = status_for_host(addr, path, &host).await;
            assert!(resp.headers().contains_key("content-type"), "{path} {host}");
            problem(resp, StatusCode::FORBIDDEN, "host_not_allowed").await;
        }
    }
    // Loopback names and addresses, the bound address, an allowed host, the panel's origin.
    let mut hosts = vec![
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
        "127.0.0.1".to_string(),
        "proxy.internal:8080".to_string(),
    ];
    if cfg!(feature = "panel") {
        hosts.push("bridle.example".to_string());
    }
    for host in &hosts {
        let resp = status_for_host(addr, api, host).await;
        assert_eq!(resp.status(), StatusCode::OK, "{host}");
    }
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_answer_is_no_store_and_nosniff() {
    let gw = Gw::start().await;
    let check = |resp: &reqwest::Response, what: &str| {
        assert_eq!(
            resp.headers()
                .get("cache-control")
                .map(|v| v.to_str().unwrap()),
            Some("no-store"),
            "{what}"
        );
        assert_eq!(
            resp.headers()
                .get("x-content-type-options")
                .map(|v| v.to_str().unwrap()),
            Some("nosniff"),
            "{what}"
        );
    };
    let resp = gw.get("/projects").send().await.unwrap();
    check(&resp, "a list");
    // The one answer that holds a new agent token.
    let resp = gw.post("/agents/bot/token").send().await.unwrap();
    check(&resp, "an issued token");
    let issued = json_ok(resp, StatusCode::CREATED).await;
    assert!(issued["token"].as_str().is_some());
    let resp = gw.http.get(gw.url("/projects")).send().await.unwrap();
    check(&resp, "a 401");
    let resp = gw.get("/no-such-resource").send().await.unwrap();
    check(&resp, "a 404");
    let resp = gw.http.get(gw.url("/openapi.json")).send().await.unwrap();
    check(&resp, "the OpenAPI document");
    let resp = gw.get("/sessions/events").send().await.unwrap();
    check(&resp, "an event stream");
    drop(resp);
    gw.stop().await;
}
