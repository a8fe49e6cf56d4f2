//! `/healthz` and `/readyz` on the gateway's own listener, over real HTTP on loopback: alive and
//! ready with its stores open and its vault unlocked; not ready, naming the upstream and why,
//! while a required upstream is unreachable, and ready again once it answers; an optional
//! upstream never holds readiness back; a bad `health:` section is refused at load; neither
//! route needs a token and neither says anything secret.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod ops_support;

use bridle_gateway::config::GatewayConfig;
use ops_support::{
    ReservedPort, bind, data_dir, poll_json, run, start_upstream, start_upstream_on, token,
};

fn names(list: &serde_json::Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alive_and_ready_without_a_token() {
    let tmp = data_dir(None, "");
    let gw = run(bind(tmp.path(), |b| b).await);
    let http = reqwest::Client::new();

    let r = http
        .get(format!("{}/healthz", gw.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], "alive");

    let r = http
        .get(format!("{}/readyz", gw.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], "ready", "{body}");
    assert_eq!(body["not_ready"], serde_json::json!([]));
    assert_eq!(
        names(&body["checks"]),
        ["shutdown", "rules_store", "vault"],
        "{body}"
    );
    // The MCP endpoint itself still wants a token.
    let r = http
        .post(&gw.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_upstream_holds_readiness_until_it_answers() {
    // A port nobody listens on yet, kept for the upstream that starts there later.
    let port = ReservedPort::on_loopback();
    let url = format!("http://{}/mcp", port.addr());
    let tmp = data_dir(Some(&url), "");
    let secret_tokens: Vec<String> = ["claude", "codex", "gemini"]
        .iter()
        .map(|a| token(tmp.path(), a))
        .collect();
    let gw = run(bind(tmp.path(), |b| {
        b.connect_timeout(std::time::Duration::from_secs(2))
    })
    .await);
    let http = reqwest::Client::new();
    let readyz = format!("{}/readyz", gw.base);

    let (status, body) = poll_json(&http, &readyz, |_, b| {
        b["not_ready"].as_array().is_some_and(|l| {
            l.iter()
                .any(|c| c["name"] == "upstream:tickets" && c["reason"].is_string())
        })
    })
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "not_ready");
    assert_eq!(names(&body["not_ready"]), ["upstream:tickets"], "{body}");
    let reason = body["not_ready"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("the upstream is not reachable"),
        "{reason}"
    );
    // /healthz stays up: the process is alive, only not ready.
    let r = http
        .get(format!("{}/healthz", gw.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    let upstream = start_upstream_on(port).await;
    let (status, body) = poll_json(&http, &readyz, |s, _| s == 200).await;
    assert_eq!(status, 200, "{body}");
    assert!(names(&body["checks"]).contains(&"upstream:tickets".to_string()));
    let text = body.to_string();
    for t in &secret_tokens {
        assert!(!text.contains(t.as_str()), "a token leaked into /readyz");
    }

    // The upstream goes away: not ready again, naming it.
    upstream.stop.cancel();
    let _ = upstream.served.await;
    let (status, body) = poll_json(&http, &readyz, |s, _| s == 503).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(names(&body["not_ready"]), ["upstream:tickets"], "{body}");

    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optional_and_disabled_upstreams_do_not_hold_readiness() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let live = start_upstream().await;
    let tmp = data_dir(
        Some(&live.url),
        &format!(
            "  spare:\n    http: {{url: 'http://{dead}/mcp'}}\n  off:\n    http: {{url: 'http://{dead}/mcp'}}\n    enabled: false\nhealth:\n  optional_upstreams: [spare]\n"
        ),
    );
    let gw = run(bind(tmp.path(), |b| b).await);
    let http = reqwest::Client::new();
    let (status, body) = poll_json(&http, &format!("{}/readyz", gw.base), |s, _| s == 200).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        names(&body["checks"]),
        ["shutdown", "rules_store", "vault", "upstream:tickets"],
        "{body}"
    );
    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
    live.stop.cancel();
}

#[test]
fn an_unknown_optional_upstream_is_refused_at_load() {
    let tmp = data_dir(None, "health:\n  optional_upstreams: [nope]\n");
    let e = GatewayConfig::load(tmp.path()).unwrap_err().to_string();
    assert!(
        e.contains("health.optional_upstreams: `nope` is not a configured upstream"),
        "{e}"
    );
    let tmp = data_dir(None, "health:\n  required: [x]\n");
    let e = GatewayConfig::load(tmp.path()).unwrap_err().to_string();
    assert!(e.contains("required"), "{e}");
}
