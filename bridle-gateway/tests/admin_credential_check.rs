//! An admin credential is checked on the blocking pool: a check may read the vault (a database
//! file, or PostgreSQL over the network), and on an async worker it would hold that worker, and
//! every request queued behind it, while it waits.

use std::sync::{Arc, Mutex, mpsc};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use bridle_gateway::GatewayContext;
use bridle_gateway::admin::{AdminCredentials, AdminIdentity, AdminState, router};
use bridle_gateway::config::{GatewayConfig, init_data_dir_with_token_files};
use tower::ServiceExt;

/// Credentials whose check waits for a word from a task of the caller's runtime.
struct WaitingCredentials(Mutex<mpsc::Receiver<()>>);

impl AdminCredentials for WaitingCredentials {
    fn verify(&self, token: &str) -> Option<AdminIdentity> {
        let told = self
            .0
            .lock()
            .map(|rx| rx.recv_timeout(kberg_testkit::WAIT).is_ok())
            .unwrap_or(false);
        (told && token == "tok").then(|| AdminIdentity::new("alice"))
    }
}

/// On a runtime of one thread, a check run on that thread would wait in vain for the task that
/// tells it to go on, and the request would be refused when the wait ran out.
#[tokio::test(flavor = "current_thread")]
async fn an_admin_credential_is_checked_off_the_async_thread() {
    let tmp = tempfile::tempdir().expect("temp dir");
    init_data_dir_with_token_files(tmp.path()).expect("data dir");
    let ctx = GatewayContext::open(tmp.path(), GatewayConfig::load(tmp.path()).expect("config"))
        .expect("context");
    let (tx, rx) = mpsc::channel();
    let state = AdminState::new(ctx, Arc::new(WaitingCredentials(Mutex::new(rx))));
    let told = tokio::spawn(async move { tx.send(()).expect("send") });
    let answer = router(state)
        .oneshot(
            Request::get("/admin/api/v1/projects")
                .header(header::AUTHORIZATION, "Bearer tok")
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("answer");
    assert_eq!(
        answer.status(),
        StatusCode::OK,
        "the check ran on the runtime's one thread"
    );
    told.await.expect("told");
}
