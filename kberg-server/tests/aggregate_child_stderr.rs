//! A child-process upstream's standard error is logged line by line, with the credential the
//! aggregator put in its environment redacted (a credential of several lines, line by line) and
//! an overlong line cut.
//!
//! The upstream is `aggregate_raw_upstream.py` (see `aggregate_misbehaving.rs`), which prints
//! its token to stderr at start when `RAW_STDERR_TOKEN` is set, as servers that echo their
//! configuration do.

mod peers;

use kberg_core::ToolRegistry;
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, ChildStderr, MAX_STDERR_LINE, STDERR_TARGET, UpstreamConfig,
};
use kberg_testkit::log::LogBuffer;
use peers::*;

const CANARY: &str = "canary-5e1f0c2b9a7d4e3f";

#[tokio::test(flavor = "current_thread")]
async fn stderr_lines_are_logged_with_the_credential_redacted() {
    let captured = LogBuffer::default();
    let _guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::TRACE));
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

    let text = captured.wait_for("raw upstream ready").await;
    assert!(
        !text.contains(CANARY),
        "the credential reached the log:\n{text}"
    );
    let start = text
        .lines()
        .find(|l| l.contains("raw upstream starting"))
        .expect("the start line is logged");
    assert!(start.contains("token=[redacted]"), "{start}");
    // The operator learns that the upstream says its credential, once, without the value.
    let said: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("said one of its own credentials"))
        .collect();
    assert_eq!(said.len(), 1, "{text}");
    assert!(
        said[0].contains("WARN") && said[0].contains("its stderr"),
        "{}",
        said[0]
    );
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

/// A credential of several lines (a PEM key; the gateway's vault accepts line breaks) printed
/// by the child reaches the log as lines of its own: each is redacted, none of them logged.
#[tokio::test(flavor = "current_thread")]
async fn a_credential_of_several_lines_is_redacted_from_every_line() {
    let lines = [
        "-----BEGIN PRIVATE KEY-----",
        "canary0MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
        "canary1BKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj",
        "canary2MrVZz4Hk3XyTh9s=",
        "-----END PRIVATE KEY-----",
    ];
    let key = lines.join("\n");
    let captured = LogBuffer::default();
    let _guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::TRACE));
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new("raw", raw_upstream().env("RAW_STDERR_TOKEN", key.clone()))
            // As a caller that knows which value is the credential redacts it: the whole value.
            .stderr_redact([key.clone()]),
    );
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );
    let text = captured.wait_for("raw upstream ready").await;
    agg.shutdown().await;
    assert!(
        !text.contains("canary"),
        "a line of the credential reached the log:\n{text}"
    );
    assert!(!text.contains("PRIVATE KEY"), "{text}");
    // Said on several lines: noted at WARN the first time, at DEBUG after.
    assert_eq!(
        text.matches("said one of its own credentials").count(),
        1,
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("DEBUG") && l.contains("redacted from what it said")),
        "{text}"
    );
    assert!(
        text.contains("raw upstream starting, token=[redacted]"),
        "{text}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn discarded_stderr_logs_nothing() {
    let captured = LogBuffer::default();
    let _guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::TRACE));
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
