//! The web panel in a real browser, with patterns: a pattern and an example added through the
//! page's forms, the example re-indexed with its progress bar followed to 100% over SSE, and
//! removed through its dialog.
//!
//! The harness (Chromium through WebDriver) is `panel_support::browser`; these tests fail,
//! saying so, when Chromium or its driver is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use fantoccini::Locator;
use panel_support::browser::{ONE_BROWSER, Session, click, open_details, type_into};
use panel_support::{ALICE, Fixture};

#[tokio::test]
async fn add_a_pattern_and_an_example_reindex_it_and_watch_progress_reach_100_percent() {
    let _one = ONE_BROWSER.lock().await;
    let memory = panel_support::memory_service();
    let s = Session::start_on(false, Fixture::with_memory(memory).await).await;
    let repo = tempfile::tempdir().unwrap();
    for n in 0..6 {
        std::fs::write(
            repo.path().join(format!("retry{n}.rs")),
            format!("/// Retries with exponential backoff, variant {n}.\npub fn retry_{n}(attempts: u32) -> u32 {{\n    attempts * {n}\n}}\n"),
        )
        .unwrap();
    }
    s.login(ALICE).await;

    // A pattern, then an example of it, through the page's forms.
    s.browser.goto(&s.url("/panel/patterns")).await.unwrap();
    s.wait_for("#add-pattern-demo").await;
    open_details(&s).await;
    type_into(&s, "pattern-name-demo", "retry").await;
    type_into(&s, "pattern-description-demo", "Retries with backoff.").await;
    click(&s, "add-pattern-demo").await;
    s.wait_for("#pattern-demo-retry").await;
    assert!(s.body_text().await.contains("Pattern added."));
    open_details(&s).await;
    type_into(&s, "ex-url-demo-retry", &repo.path().display().to_string()).await;
    type_into(&s, "ex-tag-demo-retry", "retry-example").await;
    click(&s, "add-example-demo-retry").await;
    s.wait_for("#example-retry-example").await;
    let row = s
        .wait_for("#example-retry-example")
        .await
        .text()
        .await
        .unwrap();
    assert!(row.contains("never"), "not indexed yet: {row}");

    // Re-indexed: the bar follows the run over SSE until it is full.
    click(&s, "reindex-retry-example").await;
    s.wait_for("#run-retry-example").await;
    let done = s.wait_for("#run-retry-example .run-done").await;
    let bar = s.wait_for("#run-retry-example .run-done progress").await;
    let value: f64 = bar.attr("value").await.unwrap().unwrap().parse().unwrap();
    let max: f64 = bar.attr("max").await.unwrap().unwrap().parse().unwrap();
    assert!(max >= 6.0, "one chunk a file at least: {max}");
    assert_eq!(value, max, "the bar is full");
    let text = done.text().await.unwrap();
    assert!(text.contains("100%"), "{text}");
    assert!(text.contains("Indexed:"), "{text}");
    // The bar's own accessible name, and its sentence in a live region.
    assert_eq!(
        bar.attr("aria-label").await.unwrap().as_deref(),
        Some("Indexing progress")
    );
    let live = s.wait_for("#run-retry-example").await;
    assert_eq!(
        live.attr("aria-live").await.unwrap().as_deref(),
        Some("polite")
    );

    // Reloaded: last indexed is the run's, no run is shown any more.
    s.browser.goto(&s.url("/panel/patterns")).await.unwrap();
    let row = s
        .wait_for("#example-retry-example")
        .await
        .text()
        .await
        .unwrap();
    assert!(!row.contains("never"), "{row}");
    assert!(row.contains("idle"), "{row}");

    // Removed through its <dialog>, the name typed.
    click(&s, "remove-example-retry-example-open").await;
    type_into(&s, "remove-example-retry-example-confirm", "retry-example").await;
    click(&s, "remove-example-retry-example-submit").await;
    s.wait_for(".notice").await;
    assert!(s.body_text().await.contains("Example removed"));
    assert!(
        s.browser
            .find(Locator::Id("example-retry-example"))
            .await
            .is_err()
    );
    s.stop().await;
}
