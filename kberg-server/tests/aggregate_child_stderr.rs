//! A child-process upstream's standard error is logged line by line, with the credential the
//! aggregator put in its environment redacted and an overlong line cut.
//!
//! The upstream is `aggregate_raw_upstream.py` (see `aggregate_misbehaving.rs`), which prints
//! its token to stderr at start when `RAW_STDERR_TOKEN` is set, as servers that echo their
//! configuration do.

mod peers;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kberg_core::ToolRegistry;
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, ChildStderr, MAX_STDERR_LINE, STDERR_TARGET, UpstreamConfig,
};
use peers::*;

const CANARY: &str = "canary-5e1f0c2b9a7d4e3f";

/// Everything the subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log buffer")).into_owned()
    }
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn subscriber(captured: &Captured) -> impl tracing::Subscriber + Send + Sync {
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish()
}

/// Waits (with a deadline) until `needle` was logged.
async fn logged(captured: &Captured, needle: &str) -> String {
    tokio::time::timeout(WAIT, async {
        loop {
            let text = captured.text();
            if text.contains(needle) {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "`{needle}` was never logged; log so far:\n{}",
            captured.text()
        )
    })
}

#[tokio::test(flavor = "current_thread")]
async fn stderr_lines_are_logged_with_the_credential_redacted() {
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(subscriber(&captured));
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new().upstream(UpstreamConfig::new(
        "raw",
        raw_upstream().env("RAW_STDERR_TOKEN", CANARY),
    ));
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );

    let text = logged(&captured, "raw upstream ready").await;
    assert!(
        !text.contains(CANARY),
        "the credential reached the log:\n{text}"
    );
    let start = text
        .lines()
        .find(|l| l.contains("raw upstream starting"))
        .expect("the start line is logged");
    assert!(start.contains("token=[redacted]"), "{start}");
    assert!(start.contains(STDERR_TARGET), "{start}");
    assert!(
        start.contains("upstream=\"raw\"") || start.contains("upstream=raw"),
        "{start}"
    );
    let long = text
        .lines()
        .find(|l| l.contains("xxxxxxxx"))
        .expect("the overlong line is logged");
    let xs = long.matches('x').count();
    assert!(
        xs <= MAX_STDERR_LINE + 16,
        "the line was not cut: {xs} bytes of it logged"
    );
    assert!(
        long.contains(&format!("dropped_bytes={}", 10_001 - MAX_STDERR_LINE)),
        "{long}"
    );
    agg.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn discarded_stderr_logs_nothing() {
    let captured = Captured::default();
    let _guard = tracing::subscriber::set_default(subscriber(&captured));
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new("raw", raw_upstream().env("RAW_STDERR_TOKEN", CANARY))
            .stderr(ChildStderr::Discard),
    );
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );
    // The child printed its lines before answering `initialize`, so they were written before the
    // connection counted as established; none of them may be in the log.
    agg.shutdown().await;
    let text = captured.text();
    assert!(!text.contains("raw upstream"), "{text}");
    assert!(!text.contains(CANARY), "{text}");
}
