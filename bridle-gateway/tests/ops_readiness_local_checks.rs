//! `/readyz` and its rules-store and vault checks: each runs on tokio's blocking pool, and
//! `/readyz` needs no token, so a flood of requests must not queue one blocking task per
//! request there (the vault's own reads wait in the same pool). The checks run in the probe
//! rounds that the upstream probes use: concurrent requests share one round, and its results
//! answer later requests for `health.probe_cache_secs`.
//!
//! Each round logs one debug line when it has checked the rules store and the vault; this
//! binary keeps every such line (its one test, so no other test's lines mix in).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod ops_support;

use kberg_testkit::log::LogBuffer;
use ops_support::{bind, data_dir, run};

/// The line a round of the local readiness checks logs.
const CHECKED: &str = "readiness: the rules store and the vault were checked";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readiness_requests_share_one_vault_and_store_check() {
    let logs = LogBuffer::default();
    logs.install_global(
        tracing_subscriber::filter::Targets::new()
            .with_target("bridle_gateway::ops", tracing::Level::DEBUG),
    );
    let tmp = data_dir(None, "health:\n  probe_cache_secs: 60\n");
    let gw = run(bind(tmp.path(), |b| b).await);
    let http = reqwest::Client::new();
    let checked = || logs.text().matches(CHECKED).count();
    assert_eq!(checked(), 0, "nothing asked /readyz yet");

    const REQUESTS: usize = 16;
    let answers = ops_support::readyz_burst(&http, &gw.base, REQUESTS).await;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body["status"], "ready", "{body}");
        let checks: Vec<_> = body["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["ok"].as_bool().unwrap()))
            .collect();
        assert_eq!(
            checks,
            [("shutdown", true), ("rules_store", true), ("vault", true)],
            "{body}"
        );
    }
    assert_eq!(
        checked(),
        1,
        "{REQUESTS} concurrent /readyz requests share one check of the rules store and the vault:\n{}",
        logs.text()
    );
    // Later requests within `probe_cache_secs` reuse that round's results.
    let readyz = format!("{}/readyz", gw.base);
    for _ in 0..4 {
        let r = http.get(&readyz).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    assert_eq!(checked(), 1, "the results are reused:\n{}", logs.text());

    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
}
