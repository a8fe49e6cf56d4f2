//! The admin API's live event streams outlive no credential: with the admins' credentials in
//! the vault (as `bridle serve` keeps them), the session stream (`GET /sessions/events`) and an
//! index run's (`GET /index-runs/{id}/events`) end once the credential that opened them is
//! rotated away or revoked (the run itself going on), and one admin holds only so many streams
//! at once, of both kinds together, a slot given back when its stream ends.

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
use bridle_gateway::memory::RunOrigin;
use bridle_gateway::memory::runs::RunStart;
use bridle_gateway::vault::{MasterKey, SecretValue, Vault, VaultConfig};
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

/// Reads what is left of a stream; fails unless the server ends it within the deadline.
async fn ends(resp: reqwest::Response) {
    let mut resp = resp;
    tokio::time::timeout(Duration::from_secs(30), async {
        while resp.chunk().await.unwrap().is_some() {}
    })
    .await
    .expect("the server ends the stream");
}

/// The new credential alice's is rotated to.
const ALICES_NEW: &str = "bda_the-new-credential-of-alice-0123456789";

/// An admin API whose admins `alice` and `bob` are kept in the vault, each allowed one stream,
/// streams re-checking their credential every 20 ms.
struct Served {
    _tmp: tempfile::TempDir,
    ctx: Arc<GatewayContext>,
    vault: Arc<Vault>,
    alice: String,
    bob: String,
    base: String,
    http: reqwest::Client,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), bridle_gateway::admin::AdminServeError>>,
}

impl Served {
    async fn start() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir_with_token_files(tmp.path()).unwrap();
        let ctx =
            GatewayContext::open(tmp.path(), GatewayConfig::load(tmp.path()).unwrap()).unwrap();
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
        Self {
            _tmp: tmp,
            ctx,
            vault,
            alice,
            bob,
            base,
            http: reqwest::Client::new(),
            stop,
            task,
        }
    }

    /// `GET path` with `token`.
    async fn open(&self, path: &str, token: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    /// Rotates alice's credential to [`ALICES_NEW`], with no grace.
    fn rotate_alice(&self) {
        self.vault
            .rotate(
                &admin_secret_name("alice"),
                &SecretValue::new(ALICES_NEW.as_bytes().to_vec()),
                "test",
                Duration::ZERO,
            )
            .unwrap();
    }

    fn revoke_bob(&self) {
        self.vault
            .revoke(&admin_secret_name("bob"), 1, "test")
            .unwrap();
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_ends_when_its_credential_is_rotated_away_or_revoked() {
    let served = Served::start().await;
    let (ctx, alice, bob) = (&served.ctx, &served.alice, &served.bob);
    const STREAM: &str = "/sessions/events";

    let resp = served.open(STREAM, alice).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut alices = Events::new(resp);
    assert_eq!(alices.next().await.0, "ready");
    // One stream per admin here: alice's second is refused, bob's first is not.
    let body = problem(
        served.open(STREAM, alice).await,
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_streams",
    )
    .await;
    assert!(body["detail"].as_str().unwrap().contains("alice"), "{body}");
    let resp = served.open(STREAM, bob).await;
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
    served.rotate_alice();
    ends(alices.into_response()).await;
    problem(
        served.open(STREAM, alice).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let resp = served.open(STREAM, ALICES_NEW).await;
    assert_eq!(resp.status(), StatusCode::OK, "the slot was given back");
    drop(resp);

    // Bob's is revoked: his stream ends too.
    served.revoke_bob();
    ends(bobs.into_response()).await;

    served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_run_stream_ends_when_its_credential_is_rotated_away_or_revoked() {
    let served = Served::start().await;
    let (alice, bob) = (served.alice.clone(), served.bob.clone());
    // A run that keeps running while this test holds its handle: its stream can only end
    // early.
    let handle = served
        .ctx
        .index_runs
        .start(RunStart {
            reference_tag: "retry-example".into(),
            project: Some("demo".into()),
            pattern: Some("retry".into()),
            origin: RunOrigin::Api,
            actor: "admin:alice@api".into(),
        })
        .unwrap();
    let events = format!("/index-runs/{}/events", handle.run().id());

    let resp = served.open(&events, &alice).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut alices = Events::new(resp);
    assert_eq!(alices.next().await.0, "started");
    // It holds alice's one stream slot, which the session stream shares: her session stream
    // and a second follower are refused; bob follows the run too.
    for path in ["/sessions/events", events.as_str()] {
        let resp = served.open(path, &alice).await;
        // Checked before the body is read: an open stream's body never ends.
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
        let body = problem(resp, StatusCode::TOO_MANY_REQUESTS, "too_many_streams").await;
        assert!(body["detail"].as_str().unwrap().contains("alice"), "{body}");
    }
    let resp = served.open(&events, &bob).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut bobs = Events::new(resp);
    assert_eq!(bobs.next().await.0, "started");

    // Alice's credential is rotated away: her stream ends, the run going on, and her slot is
    // free for the new credential.
    served.rotate_alice();
    ends(alices.into_response()).await;
    assert!(!handle.run().ended(), "the run itself goes on");
    problem(
        served.open(&events, &alice).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let resp = served.open(&events, ALICES_NEW).await;
    assert_eq!(resp.status(), StatusCode::OK, "the slot was given back");
    drop(resp);

    // Bob's is revoked: his stream ends too.
    served.revoke_bob();
    ends(bobs.into_response()).await;
    assert!(!handle.run().ended());

    drop(handle);
    served.stop().await;
}
