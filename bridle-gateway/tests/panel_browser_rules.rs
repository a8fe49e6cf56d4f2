//! The web panel in a real browser, editing a project's rules: an edit reviewed as a diff,
//! saved against a stale revision, shown as a conflict and resolved.
//!
//! The harness (Chromium through WebDriver) is `panel_support::browser`; these tests fail,
//! saying so, when Chromium or its driver is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use panel_support::browser::{ONE_BROWSER, Session};
use panel_support::{ALICE, BOB};
use serde_json::json;

#[tokio::test]
async fn a_stale_edit_shows_the_conflict_and_is_resolved() {
    let _one = ONE_BROWSER.lock().await;
    let s = Session::start(false).await;
    s.login(ALICE).await;
    let store = &s.served.fixture.ctx.store;
    let base = s.served.fixture.revision();

    s.goto("/panel/projects/demo").await;
    let original = s.value_of("#yaml").await;
    let mine = original.replacen("name: Demo", "name: Demo from the browser", 1);
    assert_ne!(mine, original);
    s.set_value("yaml", &mine).await;
    s.type_into("summary", "rename in the browser").await;
    s.click("review").await;
    let added = s.text_of(".diff .d-add").await;
    assert!(added.contains("Demo from the browser"), "{added}");

    // Meanwhile Bob saves through the admin API.
    let http = reqwest::Client::new();
    let mut theirs = store.load("demo").unwrap().document;
    theirs.project.overview = "Bob's overview.".into();
    let bob_yaml = bridle_rules::to_yaml(&theirs).unwrap();
    let r = http
        .put(s.url("/admin/api/v1/projects/demo"))
        .bearer_auth(BOB)
        .json(&json!({ "base_revision": base, "yaml": bob_yaml, "summary": "bob" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);
    let bobs = base + 1;

    // Saving the reviewed edit now meets the conflict view.
    s.click("save").await;
    let current = s.text_of("#current-revision").await;
    assert_eq!(current, bobs.to_string());
    let page = s.body_text().await;
    assert!(page.contains("Someone else saved demo first"), "{page}");
    assert!(page.contains("Bob's overview."), "what Bob changed: {page}");
    assert!(
        page.contains("Demo from the browser"),
        "what the edit changes: {page}"
    );
    assert_eq!(
        s.served.fixture.revision(),
        bobs,
        "nothing of alice's was saved"
    );

    // Resolve: keep Bob's overview and the rename, review against Bob's revision, save.
    let merged = bridle_rules::to_yaml(&store.load("demo").unwrap().document)
        .unwrap()
        .replacen("name: Demo", "name: Demo from the browser", 1);
    s.set_value("yaml", &merged).await;
    s.click("review").await;
    s.click_when("#save").await;
    let notice = s.notice().await;
    assert_eq!(notice, format!("Saved (revision {}).", bobs + 1));
    let now = store.load("demo").unwrap().document;
    assert_eq!(now.project.name, "Demo from the browser");
    assert_eq!(now.project.overview, "Bob's overview.");
    assert_eq!(now.revision, bobs + 1);
    s.stop().await;
}
