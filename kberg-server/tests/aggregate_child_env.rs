//! What a child-process upstream inherits of the aggregator's environment: everything by
//! default, and with `UpstreamTransport::inherit_env_only` only the named variables plus its
//! configured ones.
//!
//! The upstream is `aggregate_raw_upstream.py`, which prints the names of its environment to
//! stderr when `RAW_STDERR_ENV` is set; the aggregator logs that line. The test process's own
//! environment (whatever the test runner set) is the aggregator's: every variable of it that is
//! not named must be missing from the child's.

mod peers;

use std::collections::BTreeSet;

use kberg_core::ToolRegistry;
use kberg_server::aggregate::{Aggregator, AggregatorConfig, UpstreamConfig, UpstreamTransport};
use kberg_testkit::log::LogBuffer;
use peers::*;

const CONFIGURED: &str = "KBERG_TEST_CONFIGURED_SETTING";
const UNSET: &str = "KBERG_TEST_NEVER_SET_VARIABLE";

/// The names of the environment the raw upstream started with, as it printed them.
async fn child_env(transport: UpstreamTransport) -> BTreeSet<String> {
    let captured = LogBuffer::default();
    let _guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::TRACE));
    let config = AggregatorConfig::new().upstream(UpstreamConfig::new(
        "raw",
        transport
            .env("RAW_STDERR_ENV", "1")
            .env(CONFIGURED, "configured-value"),
    ));
    let agg = Aggregator::start(config, ToolRegistry::new()).expect("valid");
    let text = captured.wait_for("raw upstream env: ").await;
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );
    agg.shutdown().await;
    let line = text
        .lines()
        .find_map(|l| l.split_once("raw upstream env: ").map(|(_, rest)| rest))
        .expect("the environment line is logged");
    // The child's line is logged quoted (`"raw upstream env: A,B"`), then the event's fields.
    let names = line.split_once([' ', '"']).map_or(line, |(names, _)| names);
    names.split(',').map(str::to_string).collect()
}

fn own_env() -> BTreeSet<String> {
    std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn a_child_inherits_only_the_named_variables() {
    let parent = own_env();
    let kept = ["PATH", UNSET];
    let unnamed: Vec<&String> = parent
        .iter()
        .filter(|n| !kept.contains(&n.as_str()))
        .collect();
    assert!(
        !unnamed.is_empty(),
        "the test process has no variable besides PATH to leave out"
    );
    let seen = child_env(raw_upstream().inherit_env_only(kept)).await;
    assert!(seen.contains(CONFIGURED), "{seen:?}");
    assert!(seen.contains("RAW_STDERR_ENV"), "{seen:?}");
    assert_eq!(seen.contains("PATH"), parent.contains("PATH"), "{seen:?}");
    assert!(!seen.contains(UNSET), "{seen:?}");
    let leaked: Vec<&&String> = unnamed.iter().filter(|n| seen.contains(**n)).collect();
    assert!(
        leaked.is_empty(),
        "the child inherited variables it was not given: {leaked:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn by_default_a_child_inherits_everything() {
    let parent = own_env();
    let seen = child_env(raw_upstream()).await;
    assert!(seen.contains(CONFIGURED), "{seen:?}");
    let missing: Vec<&String> = parent.iter().filter(|n| !seen.contains(*n)).collect();
    assert!(missing.is_empty(), "not inherited: {missing:?}");
}
