//! The live session stream (`GET /sessions/events`) outlives no credential: with the admins'
//! credentials in the vault (as `bridle serve` keeps them), a stream ends once the credential
//! that opened it is rotated away or revoked, and one admin holds only so many streams at once,
//! a slot given back when its stream ends.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use admin_support::{Events, problem};
use bridle_gateway::GatewayContext;
use bridle_gateway::admin::credential::{VaultAdmins, admin_secret_name, ensure_vault_admin};
use bridle_gateway::admin::{AdminServer, AdminState};
use bridle_gateway::config::{GatewayConfig, init_data_dir_with_token_files};
use bridle_gateway::vault::{MasterKey, SecretValue, Vault, VaultConfig};
use reqwest::StatusCode;

/// Reads what is left of a stream; fails unless the server ends it within the deadline.
async fn ends(resp: reqwest::Response) {
    let mut resp = resp;
    tokio::time::timeout(Duration::from_secs(30), async {
        while resp.chunk().await.unwrap().is_some() {}
    })
    .await
    .expect("the server ends the stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_when_its_credential_is_rotated_away_or_revoked() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let ctx = GatewayContext::open(tmp.path(), GatewayConfig::load(tmp.path()).unwrap()).unwrap();
    let vault = Arc::new(
        Vault::open(
            &tmp.path().join("vault.db"),
            &MasterKey::generate().unwrap(),
            VaultConfig::default(),
        )
        .unwrap(),
    );
    let token = |admin: &str| {
        ensure_vault_admin(&vault, admin, "test")
            .unwrap()
            .unwrap()
            .expose_str()
            .unwrap()
            .to_string()
    };
    let (alice, bob) = (token("alice"), token("bob"));
    let admins = VaultAdmins::new(Arc::clone(&vault), vec!["alice".into(), "bob".into()]);
    let state = AdminState::new(Arc::clone(&ctx), Arc::new(admins))
        .stream_recheck(Duration::from_millis(20))
        .max_streams_per_admin(1);
    let server = AdminServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), state)
        .await
        .unwrap();
    let base = server.url();
    let stop = server.shutdown_token();
    let task = tokio::spawn(server.run(std::future::pending()));
    let http = reqwest::Client::new();
    let open = |token: &str| {
        http.get(format!("{base}/sessions/events"))
            .bearer_auth(token)
            .send()
    };

    let resp = open(&alice).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut alices = Events::new(resp);
    assert_eq!(alices.next().await.0, "ready");
    // One stream per admin here: alice's second is refused, bob's first is not.
    let body = problem(
        open(&alice).await.unwrap(),
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_streams",
    )
    .await;
    assert!(body["detail"].as_str().unwrap().contains("alice"), "{body}");
    let resp = open(&bob).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut bobs = Events::new(resp);
    assert_eq!(bobs.next().await.0, "ready");
    // Both streams are live.
    assert!(
        ctx.sessions
            .touch("claude", Some("claude"), Some("sess-1"), Some("2025-11-25"))
    );
    assert_eq!(alices.until("connect").await["session"]["id"], "sess-1");
    assert_eq!(bobs.until("connect").await["session"]["id"], "sess-1");

    // Alice's credential is rotated away (no grace): her open stream ends, though no event
    // comes to it, and her slot is free for the new credential.
    vault
        .rotate(
            &admin_secret_name("alice"),
            &SecretValue::new(b"bda_the-new-credential-of-alice-0123456789".to_vec()),
            "test",
            Duration::ZERO,
        )
        .unwrap();
    ends(alices.into_response()).await;
    problem(
        open(&alice).await.unwrap(),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let resp = open("bda_the-new-credential-of-alice-0123456789")
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "the slot was given back");
    drop(resp);

    // Bob's is revoked: his stream ends too.
    vault.revoke(&admin_secret_name("bob"), 1, "test").unwrap();
    ends(bobs.into_response()).await;

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the server stops")
        .unwrap()
        .unwrap();
}
