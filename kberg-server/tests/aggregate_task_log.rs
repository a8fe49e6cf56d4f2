//! What the aggregator logs about an upstream's task never carries the upstream's credential:
//! a task id is the upstream's text, and an upstream may put anything into it. The scripted
//! upstream (a child with the credential in its environment) names its task with the
//! credential, keeps it working past its time to live and refuses to cancel it; the line that
//! says the cancel failed names the task with the credential `[redacted]`, and the line break
//! in the id escaped, so that it cannot forge a line of the log. Its own test binary:
//! it reads the process's log at `DEBUG`.

mod peers;

use kberg_core::CallOptions;
use kberg_testkit::log::LogBuffer;
use peers::*;
use serde_json::json;

/// The child's credential, in its environment.
const CANARY: &str = "CANARY-task-id-5f2e8b0c91";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_id_quoting_the_credential_is_logged_redacted() {
    let logs = LogBuffer::global(tracing::Level::DEBUG);
    let (registry, agg) =
        raw_aggregator(|t| t.env("RAW_TASKS", "stuck").env("RAW_LEAK_TOKEN", CANARY)).await;
    let out = tokio::time::timeout(
        WAIT,
        registry.call(&reader(), "raw__stuck", json!({}), CallOptions::default()),
    )
    .await
    .expect("the call ends")
    .expect("a refusal");
    assert!(out.is_error, "{out:?}");
    let text = logs.wait_for("the upstream task was not cancelled").await;
    assert!(!text.contains(CANARY), "{text}");
    assert!(text.contains("task-1-[redacted]"), "{text}");
    // Its line break is written escaped: the id cannot start a line of its own.
    assert!(!text.lines().any(|l| l.starts_with("FORGED")), "{text}");
    agg.shutdown().await;
}
