//! The admin API's guard over real HTTP: watchers and a read-only API refused every change on
//! every route (the same identity the panel shows no forms), from code and from `bridle.yaml`;
//! refused bearer tokens throttled per client address and per token (429 `too_many_attempts`
//! with `Retry-After`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use admin_support::gateway::Gw;
use admin_support::{ALICE, Api, BOB, json_ok, problem};
use bridle_gateway::admin::{AdminCredentials, AdminIdentity, AdminState, LoginLimits};
use reqwest::StatusCode;
use serde_json::json;

const WINDOW: Duration = Duration::from_secs(600);

fn from(last: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, last]))
        .build()
        .unwrap()
}

/// Every changing request of the API that `token` might send, one per resource.
fn changes(api: &Api, token: &str, proposal: u64) -> Vec<reqwest::RequestBuilder> {
    vec![
        api.http
            .post(api.url(&format!("/queue/{proposal}/approve")))
            .bearer_auth(token),
        api.http
            .post(api.url(&format!("/queue/{proposal}/reject")))
            .bearer_auth(token)
            .json(&json!({"reason": "no"})),
        api.http
            .post(api.url("/projects"))
            .bearer_auth(token)
            .json(&json!({"name": "other", "yaml": "project:\n  name: Other\n"})),
        api.http
            .put(api.url("/projects/demo"))
            .bearer_auth(token)
            .json(&json!({"base_revision": 1, "yaml": "project:\n  name: Demo\n"})),
        api.http
            .post(api.url("/projects/demo/upgrade"))
            .bearer_auth(token),
        api.http
            .delete(api.url("/projects/demo/patterns/retry"))
            .bearer_auth(token),
        api.http
            .patch(api.url("/agents/claude"))
            .bearer_auth(token)
            .json(&json!({"projects": []})),
        api.http
            .post(api.url("/secrets"))
            .bearer_auth(token)
            .json(&json!({"name": "x", "value": "y"})),
        api.http
            .post(api.url("/sessions/any/end"))
            .bearer_auth(token),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_reads_but_every_change_is_refused_read_only() {
    let api = Api::start_with(|s| s.watcher("bob")).await;
    let id = api.propose_guardrail("watched");
    let revision = api.ctx.store.load("demo").unwrap().document.revision;
    // Reads are the watcher's too.
    for path in [
        "/projects",
        "/projects/demo",
        "/queue",
        &format!("/queue/{id}"),
    ] {
        let resp = api
            .http
            .get(api.url(path))
            .bearer_auth(BOB)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
    }
    let head = api
        .http
        .head(api.url("/projects"))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap();
    assert_ne!(head.status(), StatusCode::FORBIDDEN);
    // Every change, whatever the route: 403 `read_only`, before the handler (no body check,
    // no lookup), and nothing changes.
    for request in changes(&api, BOB, id) {
        let resp = request.send().await.unwrap();
        let body = problem(resp, StatusCode::FORBIDDEN, "read_only").await;
        assert!(body["detail"].as_str().unwrap().contains("bob"), "{body}");
    }
    assert_eq!(
        api.ctx.store.proposal(id).unwrap().status,
        bridle_rules::ProposalStatus::Pending
    );
    assert_eq!(
        api.ctx.store.load("demo").unwrap().document.revision,
        revision
    );
    // Alice is no watcher.
    json_ok(
        api.post(&format!("/queue/{id}/approve"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_api_refuses_every_admins_changes() {
    let api = Api::start_with(|s| s.read_only(true)).await;
    let id = api.propose_guardrail("frozen");
    json_ok(api.get("/queue").send().await.unwrap(), StatusCode::OK).await;
    for token in [ALICE, BOB] {
        for request in changes(&api, token, id) {
            problem(
                request.send().await.unwrap(),
                StatusCode::FORBIDDEN,
                "read_only",
            )
            .await;
        }
    }
    assert_eq!(
        api.ctx.store.proposal(id).unwrap().status,
        bridle_rules::ProposalStatus::Pending
    );
    // A wrong token is still 401: the mode is no answer to who is asking.
    problem(
        api.http
            .post(api.url(&format!("/queue/{id}/approve")))
            .bearer_auth("not-an-admin-token")
            .send()
            .await
            .unwrap(),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridle_yaml_watchers_are_refused_changes_on_the_gateways_admin_listener() {
    let gw = Gw::start_with_yaml(
        "admin:\n  watchers: [bob]\n  login_limits:\n    per_address: 10000\n    per_credential: 10000\n",
        |b| b,
    )
    .await;
    let id = gw
        .ctx
        .store
        .propose(
            "demo",
            &bridle_rules::Origin::agent("claude", None),
            &bridle_rules::ChangeRequest::Guardrail {
                id: "from-the-yaml".into(),
                statement: "A statement.".into(),
                severity: bridle_rules::Severity::HardInstruction,
                applies_to: vec!["all_agents".into()],
            },
            None,
        )
        .unwrap()
        .id;
    let resp = gw
        .http
        .post(gw.url(&format!("/queue/{id}/approve")))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap();
    problem(resp, StatusCode::FORBIDDEN, "read_only").await;
    let resp = gw
        .http
        .post(gw.url("/agents/bot/token"))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap();
    problem(resp, StatusCode::FORBIDDEN, "read_only").await;
    assert_eq!(
        gw.ctx.store.proposal(id).unwrap().status,
        bridle_rules::ProposalStatus::Pending
    );
    json_ok(
        gw.post(&format!("/queue/{id}/approve"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_tokens_from_one_address_get_429_even_with_the_right_token() {
    let api = Api::start_with(|s| s.login_limits(LoginLimits::new(3, 100, WINDOW))).await;
    let one = from(1);
    // Requests without a token, or with another scheme, guess nothing and are not counted.
    for _ in 0..5 {
        let resp = one.get(api.url("/projects")).send().await.unwrap();
        problem(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
        let resp = one
            .get(api.url("/projects"))
            .basic_auth("alice", Some(ALICE))
            .send()
            .await
            .unwrap();
        problem(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    for n in 0..3 {
        let resp = one
            .get(api.url("/projects"))
            .bearer_auth(format!("guess-{n}"))
            .send()
            .await
            .unwrap();
        problem(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    for token in ["guess-3", ALICE] {
        let resp = one
            .get(api.url("/projects"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let retry: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=600).contains(&retry), "{retry}");
        let body = problem(resp, StatusCode::TOO_MANY_REQUESTS, "too_many_attempts").await;
        assert!(
            body["detail"]
                .as_str()
                .unwrap()
                .contains("from this address"),
            "{body}"
        );
        assert!(!body.to_string().contains(ALICE));
    }
    // Another address is not throttled.
    let two = from(2);
    json_ok(
        two.get(api.url("/projects"))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    api.stop().await;
}

/// A success does not wipe its address's failures: else a holder of any admin credential (a
/// watcher's, say) could guess other admins' tokens without end, signing in with their own
/// every few guesses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_success_between_guesses_does_not_reset_the_addresss_count() {
    let api = Api::start_with(|s| s.login_limits(LoginLimits::new(3, 100, WINDOW))).await;
    let one = from(1);
    for n in 0..3 {
        let resp = one
            .get(api.url("/projects"))
            .bearer_auth(format!("guess-{n}"))
            .send()
            .await
            .unwrap();
        problem(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
        if n < 2 {
            json_ok(
                one.get(api.url("/projects"))
                    .bearer_auth(ALICE)
                    .send()
                    .await
                    .unwrap(),
                StatusCode::OK,
            )
            .await;
        }
    }
    let resp = one
        .get(api.url("/projects"))
        .bearer_auth("guess-3")
        .send()
        .await
        .unwrap();
    problem(resp, StatusCode::TOO_MANY_REQUESTS, "too_many_attempts").await;
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_refused_too_often_gets_429_from_any_address() {
    let api = Api::start_with(|s| s.login_limits(LoginLimits::new(100, 2, WINDOW))).await;
    for last in 1..=2 {
        let resp = from(last)
            .get(api.url("/queue"))
            .bearer_auth("leaked-old-admin-token")
            .send()
            .await
            .unwrap();
        problem(resp, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    let third = from(3);
    let resp = third
        .post(api.url("/queue/1/approve"))
        .bearer_auth("leaked-old-admin-token")
        .send()
        .await
        .unwrap();
    assert!(resp.headers().contains_key("retry-after"));
    let body = problem(resp, StatusCode::TOO_MANY_REQUESTS, "too_many_attempts").await;
    assert!(
        body["detail"].as_str().unwrap().contains("with this token"),
        "{body}"
    );
    // The same address with another token is let through to the check.
    json_ok(
        third
            .get(api.url("/queue"))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    api.stop().await;
}

/// Admin credentials that accept no token, each check waiting until the test opens the gate,
/// and saying so when one begins.
struct GatedCredentials {
    began: tokio::sync::mpsc::UnboundedSender<()>,
    gate: Arc<(Mutex<bool>, Condvar)>,
}

impl AdminCredentials for GatedCredentials {
    fn verify(&self, _token: &str) -> Option<AdminIdentity> {
        let _ = self.began.send(());
        let (open, opened) = &*self.gate;
        let mut open = open.lock().unwrap();
        while !*open {
            open = opened.wait(open).unwrap();
        }
        None
    }
}

/// Guesses sent all at once are counted as the ones sent one after another: past the limit
/// they are refused 429 before their token is checked, not all checked because none had
/// failed yet when each arrived (those beyond the limit wait for the checks under way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_guesses_are_not_checked_past_the_limit() {
    const LIMIT: usize = 3;
    const GUESSES: usize = 8;
    let (began_tx, mut began) = tokio::sync::mpsc::unbounded_channel();
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let credentials = Arc::new(GatedCredentials {
        began: began_tx,
        gate: Arc::clone(&gate),
    });
    let api = Api::start_with(move |s| {
        AdminState::new(Arc::clone(s.context()), credentials)
            .login_limits(LoginLimits::new(LIMIT, 100, WINDOW))
    })
    .await;
    let one = from(1);
    let (answered_tx, mut answered) = tokio::sync::mpsc::unbounded_channel();
    for n in 0..GUESSES {
        let request = one
            .get(api.url("/projects"))
            .bearer_auth(format!("guess-{n}"));
        let answered = answered_tx.clone();
        tokio::spawn(async move {
            let resp = request.send().await.unwrap();
            let _ = answered.send(resp.status());
        });
    }
    // The first LIMIT guesses reach the check and wait there; then the gate opens.
    for _ in 0..LIMIT {
        began.recv().await.unwrap();
    }
    {
        let (open, opened) = &*gate;
        *open.lock().unwrap() = true;
        opened.notify_all();
    }
    let mut statuses = Vec::new();
    while statuses.len() < GUESSES {
        statuses.push(answered.recv().await.unwrap());
    }
    // Every check began before its guess was answered.
    let mut checked = LIMIT;
    while began.try_recv().is_ok() {
        checked += 1;
    }
    assert_eq!(
        checked, LIMIT,
        "only as many guesses as allowed are checked"
    );
    let refused = |code: StatusCode| statuses.iter().filter(|s| **s == code).count();
    assert_eq!(refused(StatusCode::UNAUTHORIZED), LIMIT, "{statuses:?}");
    assert_eq!(
        refused(StatusCode::TOO_MANY_REQUESTS),
        GUESSES - LIMIT,
        "{statuses:?}"
    );
    api.stop().await;
}
