//! The web panel in a real browser, with patterns: a pattern and an example added through the
//! page's forms, the example re-indexed with its progress bar followed to 100% over SSE, and
//! removed through its dialog.
//!
//! The harness (Chromium through WebDriver) is `panel_support::browser`; these tests fail,
//! saying so, when Chromium or its driver is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use panel_support::browser::{ONE_BROWSER, Session};
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
    s.visit("/panel/patterns", "#add-pattern-demo").await;
    s.open_details().await;
    s.type_into("pattern-name-demo", "retry").await;
    s.type_into("pattern-description-demo", "Retries with backoff.")
        .await;
    s.click("add-pattern-demo").await;
    s.wait_for("#pattern-demo-retry").await;
    assert!(s.body_text().await.contains("Pattern added."));
    s.open_details().await;
    s.type_into("ex-url-demo-retry", &repo.path().display().to_string())
        .await;
    s.type_into("ex-tag-demo-retry", "retry-example").await;
    s.click("add-example-demo-retry").await;
    let row = s.text_of("#example-retry-example").await;
    assert!(row.contains("never"), "not indexed yet: {row}");

    // Re-indexed: the bar follows the run over SSE until it is full.
    s.click("reindex-retry-example").await;
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
    assert!(text.contains(&format!("{max} chunks")), "{text}");
    // The row's "Last indexed" is the run's at once, without a reload.
    let last = s.text_of("#last-indexed-retry-example").await;
    assert!(!last.contains("never"), "{last}");
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
    let row = s
        .visit("/panel/patterns", "#example-retry-example")
        .await
        .text()
        .await
        .unwrap();
    assert!(!row.contains("never"), "{row}");
    assert!(row.contains("idle"), "{row}");

    // Removed through its <dialog>, the name typed.
    s.click("remove-example-retry-example-open").await;
    s.type_into("remove-example-retry-example-confirm", "retry-example")
        .await;
    s.click("remove-example-retry-example-submit").await;
    assert!(s.notice().await.contains("Example removed"));
    assert!(!s.has("example-retry-example").await);
    s.stop().await;
}
