//! Concurrent changes of one upstream through the admin API: whatever order they run in, the
//! upstream as the gateway runs it and as `bridle.yaml` says it are the same once they have
//! all answered, and each change is audited from the state it changed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use admin_support::json_ok;
use reqwest::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_switches_leave_the_running_upstream_as_the_file_says() {
    let gw = Gw::start_with_yaml(
        "upstreams:\n  tickets:\n    http: {url: 'http://127.0.0.1:9/mcp'}\n    enabled: false\n",
        |b| b,
    )
    .await;
    for round in 0..40 {
        let switches = futures::future::join_all((0..8).map(|i| {
            let verb = if (i + round) % 2 == 0 {
                "enable"
            } else {
                "disable"
            };
            gw.post(&format!("/integrations/tickets/{verb}")).send()
        }))
        .await;
        for answer in switches {
            assert_eq!(answer.unwrap().status(), StatusCode::OK);
        }
        let live = json_ok(
            gw.get("/integrations/tickets").send().await.unwrap(),
            StatusCode::OK,
        )
        .await;
        let on_disk = gw.config_on_disk().upstreams["tickets"].enabled;
        assert_eq!(live["enabled"], on_disk, "round {round}");
    }
    // Each switch is audited from the state the one before it left.
    let audit = json_ok(
        gw.get("/audit?kind=upstream_change&limit=1000")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let changes: Vec<(String, String)> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e["change"][k].as_str().unwrap().to_string();
            (s("before"), s("after"))
        })
        .collect();
    assert_eq!(changes.len(), 40 * 8);
    assert_eq!(changes[0].0, "disabled");
    for pair in changes.windows(2) {
        assert_eq!(pair[1].0, pair[0].1, "{changes:?}");
    }
    gw.stop().await;
}
