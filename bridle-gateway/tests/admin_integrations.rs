//! The admin API's integrations resource over a real gateway: each upstream's status from the
//! gateway's own upstream pool, over real HTTP on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::admin::{AdminServer, AdminTokens};
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_rules::{AgentCatalog, RulesStore};
use kberg_testkit::eventually_async_ok;
use reqwest::StatusCode;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integrations_report_each_upstream_from_the_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    yaml.push_str(
        "upstreams:\n  ghost:\n    stdio: {command: /nonexistent/bridle-test-server}\n    projects: [demo]\n  hang:\n    stdio: {command: sleep, args: ['600']}\n",
    );
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    RulesStore::open(tmp.path(), AgentCatalog::builtin())
        .unwrap()
        .create("demo", &demo_document(), "test")
        .unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    let mut admins = AdminTokens::new().unwrap();
    admins.insert("alice", "alice-token").unwrap();
    let server = AdminServer::bind(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        gateway.admin_state(Arc::new(admins)),
    )
    .await
    .unwrap();
    let base = server.url();
    let stop = server.shutdown_token();
    let task = tokio::spawn(server.run(std::future::pending()));
    let http = reqwest::Client::new();
    let get = |path: &str| http.get(format!("{base}{path}")).bearer_auth("alice-token");

    // Both are reported at once; each one's error arrives when its start fails.
    let list = eventually_async_ok("both integrations to report an error", || async {
        let resp = get("/integrations").send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let list: Value = resp.json().await.unwrap();
        let items = list["items"].as_array().unwrap();
        assert_eq!(items.len(), 2);
        if items.iter().all(|i| i["last_error"].is_string()) {
            Ok(list)
        } else {
            Err(list)
        }
    })
    .await;
    let ghost = &list["items"][0];
    assert_eq!(ghost["namespace"], "ghost");
    assert_eq!(ghost["transport"], "stdio");
    assert_eq!(ghost["connected"], false);
    assert_eq!(ghost["tool_count"], 0);
    assert!(
        ghost["last_error"]
            .as_str()
            .unwrap()
            .contains("could not start")
    );
    assert_eq!(list["items"][1]["namespace"], "hang");

    // Filters and paging.
    let one: Value = get("/integrations?limit=1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one["items"].as_array().unwrap().len(), 1);
    let cursor = one["next_cursor"].as_str().unwrap();
    let next: Value = get(&format!("/integrations?limit=1&cursor={cursor}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(next["items"][0]["namespace"], "hang");
    let connected: Value = get("/integrations?connected=true")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(connected["items"].as_array().unwrap().is_empty());
    let other: Value = get("/integrations?project=other")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // `hang` serves every project; `ghost` only demo.
    assert_eq!(other["items"].as_array().unwrap().len(), 1);
    assert_eq!(other["items"][0]["namespace"], "hang");

    // One, and an unknown one.
    let g: Value = get("/integrations/ghost")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(g["namespace"], "ghost");
    let resp = get("/integrations/nope").send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    let p: Value = resp.json().await.unwrap();
    assert_eq!(p["code"], "unknown_integration");

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
    gateway.upstreams().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_gateway_serves_the_admin_api_beside_mcp_and_stops_both() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    RulesStore::open(tmp.path(), AgentCatalog::builtin())
        .unwrap()
        .create("demo", &demo_document(), "test")
        .unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let agent_token = bridle_gateway::config::read_secret(
        &config.secrets_path(tmp.path()),
        config.agents["claude"].token_secret.as_deref().unwrap(),
    )
    .unwrap();
    let mut admins = AdminTokens::new().unwrap();
    admins.insert("alice", "alice-token").unwrap();
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let bound = GatewayBuilder::new(tmp.path(), config)
        .admin(loopback, Arc::new(admins))
        .build()
        .await
        .unwrap()
        .bind(loopback)
        .await
        .unwrap();
    let admin = bound.admin_url().unwrap();
    assert_ne!(admin, bound.url());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let resp = http
        .get(format!("{admin}/projects"))
        .bearer_auth("alice-token")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["items"][0]["name"], "demo");
    // The agent's token is good for MCP, never for the admin API.
    let resp = http
        .get(format!("{admin}/projects"))
        .bearer_auth(&agent_token)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the gateway stops")
        .unwrap()
        .unwrap();
    // Both listeners are closed.
    assert!(http.get(format!("{admin}/projects")).send().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_is_refused_on_a_non_loopback_address() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let err = GatewayBuilder::new(tmp.path(), config)
        .admin(
            SocketAddr::from(([0, 0, 0, 0], 0)),
            Arc::new(AdminTokens::new().unwrap()),
        )
        .build()
        .await
        .unwrap()
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("loopback"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_credential_that_is_an_agents_token_stops_the_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let agent_token = bridle_gateway::config::read_secret(
        &config.secrets_path(tmp.path()),
        config.agents["codex"].token_secret.as_deref().unwrap(),
    )
    .unwrap();
    let mut admins = AdminTokens::new().unwrap();
    admins.insert("alice", &agent_token).unwrap();
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let err = GatewayBuilder::new(tmp.path(), config)
        .admin(loopback, Arc::new(admins))
        .build()
        .await
        .unwrap()
        .bind(loopback)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("agent `codex`"), "{err}");
    assert!(!err.contains(&agent_token), "{err}");
}
