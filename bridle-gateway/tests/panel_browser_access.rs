//! The web panel in a real browser, signing in and out: a log-in that comes back to the page
//! asked for, an approval made with htmx, an HttpOnly session cookie, a log-out the panel then
//! holds to, and a form posted from another site refused.
//!
//! The harness (Chromium through WebDriver) is `panel_support::browser`; these tests fail,
//! saying so, when Chromium or its driver is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use panel_support::ALICE;
use panel_support::browser::{ONE_BROWSER, Session};
use serde_json::json;

#[tokio::test]
async fn log_in_approve_a_proposal_and_log_out() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    let id = s.served.fixture.propose_guardrail("from-the-browser");
    let other = s.served.fixture.propose_guardrail("stays-pending");

    // Refused before log-in: the queue sends the browser to the log-in page.
    s.visit("/panel/queue", "#token").await;
    s.login(ALICE).await;
    // The log-in came back to the page asked for.
    assert!(s.path().await.ends_with("/panel/queue"));

    // Approve with htmx: the row is replaced in place by its decision.
    s.click_when(&format!("#approve-{id}")).await;
    let text = s.text_of(&format!("#proposal-{id} .decision")).await;
    assert!(text.contains("approved"), "{text}");
    assert!(text.contains("admin:alice@panel"), "{text}");
    assert_eq!(s.served.fixture.proposal_status(id), "approved");

    // Reloaded, the pending queue no longer has it; the other one is still there.
    s.visit("/panel/queue", &format!("#proposal-{other}")).await;
    assert!(
        !s.has(&format!("proposal-{id}")).await,
        "the approved proposal left the queue"
    );
    // The session cookie is HttpOnly: the page's script cannot read it.
    assert_eq!(s.eval("return document.cookie;").await, json!(""));

    // Log out; the panel refuses the queue again.
    s.click("logout").await;
    s.wait_for("#token").await;
    assert!(s.body_text().await.contains("You are signed out."));
    s.visit("/panel/queue", "#token").await;
    assert!(s.path().await.ends_with("/panel/login"));
    assert!(!s.has("logout").await);
    s.stop().await;
}

#[tokio::test]
async fn a_cross_site_form_post_is_refused() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    let id = s.served.fixture.propose_guardrail("cross-site");
    s.login(ALICE).await;

    // Another site (`localhost` is not the site `127.0.0.1`) with a form aimed at the panel.
    let target = s.url(&format!("/panel/queue/{id}/approve"));
    let page = format!(
        "<!doctype html><title>elsewhere</title><form method=post action=\"{target}\">\
         <button id=go>Win a prize</button></form>"
    );
    let evil = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil_port = evil.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let page = page.clone();
            async move { axum::response::Html(page) }
        }),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let evil_task = tokio::spawn(async move {
        axum::serve(evil, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });

    s.browser
        .goto(&format!("http://localhost:{evil_port}/"))
        .await
        .unwrap();
    s.click_when("#go").await;
    s.wait_for("[data-code=cross_site_request]").await;
    let text = s.body_text().await;
    assert!(text.contains("403"), "{text}");
    assert_eq!(s.served.fixture.proposal_status(id), "pending");

    let _ = stop.send(());
    evil_task.await.unwrap();
    s.stop().await;
}
