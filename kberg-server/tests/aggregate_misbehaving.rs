//! Upstreams that hang or answer garbage, contained by the aggregator.
//!
//! The misbehaving upstream is `aggregate_raw_upstream.py`, a small script speaking the MCP stdio
//! transport (newline-delimited JSON-RPC with the documented `initialize`, `tools/*`,
//! `prompts/*` and `resources/*` shapes) run by the pinned Python from `.tools/venv`: its `hang`
//! tool, prompt and resource never answer, its `garbage` ones answer a result that is not the
//! documented shape, it reports the `notifications/cancelled` it received, and its `flood` tool
//! floods progress and log messages. Alongside it runs the real
//! `@modelcontextprotocol/server-everything`, which must keep working meanwhile.

mod peers;

use peers::*;
use std::time::Duration;

use kberg_core::{CallOptions, PromptRegistry, ToolOutput, ToolRegistry};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, Backoff, UPSTREAM_INVALID_RESULT, UPSTREAM_TIMEOUT,
    UpstreamConfig, UpstreamRuntime, UpstreamStatus,
};
use kberg_testkit::eventually_async;
use serde_json::{Value, json};

fn config() -> AggregatorConfig {
    AggregatorConfig::new()
        .upstream(UpstreamConfig::new("raw", raw_upstream()).call_timeout(RAW_CALL_TIMEOUT))
        .upstream(UpstreamConfig::new("ev", everything_stdio()))
        .backoff(Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
        })
}

async fn call(reg: &ToolRegistry, name: &str) -> ToolOutput {
    reg.call(&reader(), name, json!({}), CallOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{name} refused by the gate: {e}"))
}

fn code(out: &ToolOutput) -> Option<&str> {
    out.structured
        .as_ref()
        .and_then(|s| s.get("code"))
        .and_then(Value::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_tool_times_out_and_is_cancelled_upstream() {
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(config(), registry.clone()).expect("valid");
    for ns in ["raw", "ev"] {
        assert!(
            agg.wait_connected(ns, 1, WAIT).await,
            "{ns}: {:?}",
            agg.status(ns)
        );
    }

    // The hanging call runs while the other upstream is used.
    let reg = registry.clone();
    let hanging = tokio::spawn(async move { call(&reg, "raw__hang").await });
    let out = registry
        .call(
            &reader(),
            "ev__echo",
            json!({"message": "meanwhile"}),
            CallOptions::default(),
        )
        .await
        .expect("echo");
    assert_eq!(out.all_text(), "Echo: meanwhile");

    let out = tokio::time::timeout(WAIT, hanging)
        .await
        .expect("the hanging call ends")
        .expect("task");
    assert!(out.is_error, "{out:?}");
    assert_eq!(code(&out), Some(UPSTREAM_TIMEOUT), "{out:?}");
    assert_eq!(
        out.structured.as_ref().and_then(|s| s.get("upstream")),
        Some(&json!("raw"))
    );

    // The upstream was told: its `cancelled` tool lists the abandoned request id. The
    // notification is sent from a spawned task, so wait for it (bounded).
    eventually_async("the upstream to see notifications/cancelled", || async {
        let out = call(&registry, "raw__cancelled").await;
        assert!(!out.is_error, "{out:?}");
        let ids: Vec<Value> = serde_json::from_str(&out.all_text()).expect("a JSON list");
        (!ids.is_empty()).then_some(())
    })
    .await;
    // The same upstream still answers, and is still connected.
    assert!(agg.wait_connected("raw", 1, WAIT).await);
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_results_answer_a_stable_code() {
    let registry = ToolRegistry::new();
    let prompts = PromptRegistry::new();
    let agg =
        Aggregator::start_with_prompts(config(), registry.clone(), prompts.clone()).expect("valid");
    assert!(agg.wait_connected("raw", 1, WAIT).await);

    let out = call(&registry, "raw__garbage").await;
    assert!(out.is_error, "{out:?}");
    assert_eq!(code(&out), Some(UPSTREAM_INVALID_RESULT), "{out:?}");

    // Prompts: a malformed answer and a hanging one, both with their codes in the message.
    let err = prompts
        .get("raw__garbage", Default::default())
        .await
        .expect_err("malformed prompt");
    assert!(err.to_string().contains(UPSTREAM_INVALID_RESULT), "{err}");
    let err = tokio::time::timeout(WAIT, prompts.get("raw__hang", Default::default()))
        .await
        .expect("the hanging prompt ends")
        .expect_err("timed out");
    assert!(err.to_string().contains(UPSTREAM_TIMEOUT), "{err}");

    // Nothing broke: the upstream is still connected and answers.
    let out = call(&registry, "raw__cancelled").await;
    assert!(!out.is_error, "{out:?}");
    assert!(agg.wait_connected("raw", 1, WAIT).await);
    agg.shutdown().await;
}

#[test]
fn a_zero_or_overlong_call_timeout_is_refused() {
    use kberg_server::aggregate::MAX_CALL_TIMEOUT;
    for timeout in [
        Duration::ZERO,
        MAX_CALL_TIMEOUT + Duration::from_secs(1),
        Duration::MAX,
    ] {
        let c = AggregatorConfig::new()
            .upstream(UpstreamConfig::new("raw", raw_upstream()).call_timeout(timeout));
        assert_eq!(
            c.validate().map(|_| ()).map_err(|e| e.code()),
            Err("invalid_transport"),
            "{timeout:?}"
        );
    }
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new("raw", raw_upstream()).call_timeout(MAX_CALL_TIMEOUT));
    assert!(c.validate().is_ok());
}

#[tokio::test]
async fn an_undeclarable_write_capability_is_invalid_capability() {
    use kberg_core::WriteCapability;
    // An empty id, and a deprecated capability whose replacement is not declared: both are
    // refused by the registry, and reported as the capability's fault, not the pattern's.
    for cap in [
        WriteCapability::new("", "nothing"),
        WriteCapability::new("fs.old", "Old").deprecated("fs.missing"),
    ] {
        let id = cap.id().to_string();
        let c = AggregatorConfig::new()
            .upstream(UpstreamConfig::new("raw", raw_upstream()))
            .write_rule("raw__*", cap);
        let err = Aggregator::start(c, ToolRegistry::new()).expect_err("refused");
        assert_eq!(err.code(), "invalid_capability", "{err}");
        assert!(
            matches!(&err, kberg_server::aggregate::ConfigError::InvalidCapability { capability, .. } if *capability == id),
            "{err:?}"
        );
    }
    // An already declared capability is reused, not declared twice.
    let registry = ToolRegistry::new();
    registry
        .declare(WriteCapability::new("raw.write", "Write"))
        .expect("declare");
    let c = AggregatorConfig::new()
        .upstream(UpstreamConfig::new("raw", raw_upstream()))
        .write_rule("raw__*", WriteCapability::new("raw.write", "Write"));
    let agg = Aggregator::start(c, registry).expect("valid");
    agg.shutdown().await;
}

/// An upstream whose tool list never ends (a new cursor on every page) or repeats a cursor is
/// not connected: the listing stops at the bound (100 pages) or at the repeat, the status says
/// why, and none of its tools is registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_whose_tool_list_never_ends_is_refused() {
    for (mode, says) in [
        ("endless", "its tools list did not end after 100 pages"),
        ("repeating", "its tools list repeats a page cursor"),
    ] {
        let registry = ToolRegistry::new();
        let config = AggregatorConfig::new()
            .upstream(UpstreamConfig::new(
                "raw",
                raw_upstream().env("RAW_LIST_PAGES", mode),
            ))
            .backoff(Backoff {
                initial: Duration::from_secs(5),
                max: Duration::from_secs(5),
            });
        let agg = Aggregator::start(config, registry.clone()).expect("valid");
        let mut status = agg.status_changes("raw").expect("configured");
        let reason = tokio::time::timeout(
            WAIT,
            status.wait_for(|s| matches!(s, UpstreamStatus::Unavailable { .. })),
        )
        .await
        .expect("refused in time")
        .expect("the aggregator runs")
        .clone();
        let UpstreamStatus::Unavailable { reason } = reason else {
            unreachable!()
        };
        assert!(reason.contains(says), "{mode}: {reason}");
        let listed: Vec<String> = registry
            .list(&reader())
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert!(listed.is_empty(), "{mode}: {listed:?}");
    }
}

/// An upstream that floods progress reports and log messages (5,000 of each) reaches the
/// calling client at a bounded rate: progress as the calling tool's context bounds it (20 at
/// once, then ten a second), log messages by the relay's bound per upstream (100 at once, then
/// twenty a second). The figures relayed still grow, and the call's answer is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_upstream_notifications_reaches_the_client_at_a_bounded_rate() {
    let (agg, registry) = connected("raw", raw_upstream()).await;
    let (opts, mut noted) = noted_options(kberg_core::CancellationToken::new());
    let out = registry
        .call(&reader(), "raw__flood", json!({"n": 5000}), opts)
        .await
        .expect("answered");
    assert_eq!(out.all_text(), "flooded 5000");
    let (mut progress, mut logs) = (Vec::new(), 0);
    while let Ok((method, params)) = noted.try_recv() {
        match method.as_str() {
            "notifications/progress" => progress.extend(params["progress"].as_f64()),
            "notifications/message" => logs += 1,
            other => panic!("unexpected notification {other}"),
        }
    }
    // Each bound lets through its burst and then its steady rate: far fewer than were sent.
    assert!(
        !progress.is_empty() && progress.len() < 1_000,
        "{} progress reports relayed",
        progress.len()
    );
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "{progress:?}");
    assert!(logs > 0 && logs < 2_500, "{logs} log messages relayed");
    agg.shutdown().await;
}

/// Started outside any tokio runtime, the default aggregator runs its upstreams on its own
/// thread (their tools arrive), and one asked to run them on the caller's runtime is refused
/// with `runtime_unavailable` instead of panicking.
#[test]
fn outside_a_runtime_only_the_own_thread_runs_the_upstreams() {
    let config = || AggregatorConfig::new().upstream(UpstreamConfig::new("raw", raw_upstream()));
    let err = Aggregator::start(
        config().runtime(UpstreamRuntime::Caller),
        ToolRegistry::new(),
    )
    .expect_err("refused");
    assert_eq!(err.code(), "runtime_unavailable", "{err}");
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(config(), registry.clone()).expect("started on its own thread");
    kberg_testkit::eventually("the raw upstream's tools are registered", || {
        !registry.is_empty()
    });
    drop(agg);
}

/// An upstream's refusal of any length reaches the caller cut short, and the upstream serves
/// on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_refusal_of_any_length_is_quoted_cut_short() {
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(config(), registry.clone()).expect("valid");
    assert!(agg.wait_connected("raw", 1, WAIT).await);

    let err = registry
        .call(
            &reader(),
            "raw__flood",
            json!({"refuse_chars": 200_000}),
            CallOptions::default(),
        )
        .await
        .expect_err("refused upstream");
    assert_eq!(err.code().as_str(), "tool_failed", "{err}");
    let shown = err.to_string();
    assert!(shown.contains("refused: xxxx"), "{shown}");
    assert!(shown.ends_with("..."), "{shown}");
    assert!(shown.len() < 2_000, "{} bytes", shown.len());

    let out = call(&registry, "raw__cancelled").await;
    assert!(!out.is_error, "{out:?}");
    agg.shutdown().await;
}

/// What an upstream's malformed answer is said to hold (its keys) reaches the caller with the
/// upstream's credentials redacted and cut short, however many keys it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_answer_is_described_without_credentials_and_cut_short() {
    const TOKEN: &str = "canary-garbage-6f2d81a9";
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new("raw", raw_upstream().env("RAW_LEAK_TOKEN", TOKEN))
            .call_timeout(RAW_CALL_TIMEOUT),
    );
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(agg.wait_connected("raw", 1, WAIT).await);

    let out = call(&registry, "raw__garbage").await;
    assert_eq!(code(&out), Some(UPSTREAM_INVALID_RESULT), "{out:?}");
    let shown = format!("{out:?}");
    assert!(!shown.contains(TOKEN), "{shown}");
    assert!(shown.contains("token [redacted]"), "{shown}");

    let out = registry
        .call(
            &reader(),
            "raw__garbage",
            json!({"keys": 50_000}),
            CallOptions::default(),
        )
        .await
        .expect("answered");
    assert_eq!(code(&out), Some(UPSTREAM_INVALID_RESULT), "{out:?}");
    let shown = format!("{out:?}");
    assert!(!shown.contains(TOKEN), "{shown}");
    assert!(shown.len() < 10_000, "{} bytes", shown.len());
    agg.shutdown().await;
}
