//! The aggregator's per-upstream bound on requests in flight: an upstream that limits its
//! callers (a Kberg server answers `too_many_calls` past its per-caller limit, and it sees the
//! whole aggregator as one caller) is never overrun; calls beyond the bound wait for a slot, and
//! the wait counts against the call timeout.

mod peers;

use kberg_testkit::serve::{RunningServer, loopback};

use peers::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kberg_core::{CallOptions, Caller, Principal, ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, UPSTREAM_TIMEOUT, UpstreamConfig, UpstreamStatus,
    UpstreamTransport,
};
use kberg_server::{Limits, McpApp, OpenAccess};
use serde_json::json;

/// A Kberg upstream whose `hold` tool counts how many of its calls run at once, and that
/// admits at most `per_caller` calls in flight from one caller. Each call waits (at most
/// [`WAIT`]) until `overlap` calls have run at once, then holds for `hold`: so the test knows
/// that its calls overlapped however slowly the machine ran them, and the calls after keep
/// the upstream busy.
async fn upstream(
    per_caller: usize,
    overlap: usize,
    hold: Duration,
) -> (String, Arc<AtomicUsize>, StopOnDrop) {
    let running = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let overlapped = Arc::new(tokio::sync::watch::channel(false).0);
    let tools = ToolRegistry::new();
    let (r, p) = (Arc::clone(&running), Arc::clone(&peak));
    tools
        .register(ToolBuilder::new("hold").raw_handler(
            json!({"type": "object"}),
            move |_a, _ctx| {
                let (r, p, o) = (Arc::clone(&r), Arc::clone(&p), Arc::clone(&overlapped));
                async move {
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    p.fetch_max(now, Ordering::SeqCst);
                    if now >= overlap {
                        o.send_replace(true);
                    }
                    let mut seen = o.subscribe();
                    let _ = tokio::time::timeout(WAIT, seen.wait_for(|v| *v)).await;
                    tokio::time::sleep(hold).await;
                    r.fetch_sub(1, Ordering::SeqCst);
                    Ok(ToolOutput::text("held"))
                }
            },
        ))
        .expect("register");
    let server = RunningServer::start(
        McpApp::builder("upstream", "1").tools(tools).build(),
        loopback()
            .auth(OpenAccess::as_principal(Principal::new("aggregator")))
            .limits(Limits::default().max_calls_per_principal(per_caller)),
    )
    .await;
    let url = server.url.clone();
    let stop = server.into_guard();
    (url, peak, stop)
}

fn caller() -> Caller {
    Caller::new(Principal::new("agent"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_the_bound_wait_instead_of_overrunning_the_upstream() {
    // The upstream admits 3 calls at once from the aggregator; the aggregator sends at most 3.
    let (url, peak, _stop) = upstream(3, 3, Duration::from_millis(150)).await;
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new()
        .upstream(UpstreamConfig::new("up", UpstreamTransport::http(url)).max_in_flight(3));
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );

    let calls: Vec<_> = (0..12)
        .map(|_| {
            let registry = registry.clone();
            tokio::spawn(async move {
                registry
                    .call(&caller(), "up__hold", json!({}), CallOptions::default())
                    .await
            })
        })
        .collect();
    for call in calls {
        let out = tokio::time::timeout(WAIT, call)
            .await
            .expect("every call ends")
            .expect("task")
            .expect("not refused by the gate");
        // Without the bound, calls past the third would come back `too_many_calls`.
        assert!(!out.is_error, "{out:?}");
        assert_eq!(out.all_text(), "held");
    }
    let seen = peak.load(Ordering::SeqCst);
    assert_eq!(
        seen, 3,
        "the upstream saw {seen} calls at once, not the bound's 3"
    );
    agg.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_slot_counts_against_the_call_timeout() {
    // One slot, held for far longer than the call timeout by the first call.
    let (url, _peak, _stop) = upstream(8, 1, Duration::from_secs(20)).await;
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new("up", UpstreamTransport::http(url))
            .max_in_flight(1)
            .call_timeout(Duration::from_millis(500)),
    );
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );

    let who = caller();
    let (a, b) = tokio::join!(
        registry.call(&who, "up__hold", json!({}), CallOptions::default()),
        registry.call(&who, "up__hold", json!({}), CallOptions::default()),
    );
    // Both end with the stable timeout code: the one that got the slot timed out upstream,
    // the other while waiting for the slot.
    for out in [a, b] {
        let out = out.expect("not refused by the gate");
        assert!(out.is_error, "{out:?}");
        assert_eq!(
            out.structured.as_ref().and_then(|s| s.get("code")),
            Some(&json!(UPSTREAM_TIMEOUT)),
            "{out:?}"
        );
    }
    assert_eq!(
        agg.status("up"),
        Some(UpstreamStatus::Connected { generation: 1 })
    );
    agg.shutdown().await;
}

/// Sends whether the call was cancelled when the tool's future is dropped.
struct ReportOnDrop {
    ctx: kberg_core::ToolContext,
    tx: tokio::sync::mpsc::UnboundedSender<bool>,
}

impl Drop for ReportOnDrop {
    fn drop(&mut self) {
        let _ = self.tx.send(self.ctx.is_cancelled());
    }
}

/// A Kberg upstream (which offers tasks) whose `wait` tool never answers, behind an aggregator
/// with `call_timeout`: the aggregator's registry, and the tool's signals (started; ended, with
/// whether its call was cancelled).
struct Waiting {
    agg: Aggregator,
    registry: ToolRegistry,
    started: tokio::sync::mpsc::UnboundedReceiver<()>,
    ended: tokio::sync::mpsc::UnboundedReceiver<bool>,
    _server: RunningServer,
}

async fn waiting_upstream(call_timeout: Duration) -> Waiting {
    let (started_tx, started) = tokio::sync::mpsc::unbounded_channel();
    let (ended_tx, ended) = tokio::sync::mpsc::unbounded_channel();
    let tools = ToolRegistry::new();
    tools
        .register(ToolBuilder::new("wait").raw_handler(
            json!({"type": "object"}),
            move |_a, ctx| {
                let _ = started_tx.send(());
                let report = ReportOnDrop {
                    ctx,
                    tx: ended_tx.clone(),
                };
                async move {
                    let _report = report;
                    std::future::pending::<()>().await;
                    Ok(ToolOutput::text("never"))
                }
            },
        ))
        .expect("register");
    let server = RunningServer::start(
        McpApp::builder("upstream", "1").tools(tools).build(),
        loopback().auth(OpenAccess::as_principal(Principal::new("aggregator"))),
    )
    .await;
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new("up", UpstreamTransport::http(server.url.clone()))
            .call_timeout(call_timeout),
    );
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(
        agg.wait_connected("up", 1, WAIT).await,
        "{:?}",
        agg.status("up")
    );
    Waiting {
        agg,
        registry,
        started,
        ended,
        _server: server,
    }
}

impl Waiting {
    /// Waits until the upstream's tool has ended, and requires that its call was cancelled;
    /// then requires that the connection still counts as healthy.
    async fn assert_cancelled_upstream(mut self) {
        let cancelled = tokio::time::timeout(WAIT, self.ended.recv())
            .await
            .expect("the upstream call ended")
            .expect("ended");
        assert!(cancelled, "the upstream call ended without being cancelled");
        assert_eq!(
            self.agg.status("up"),
            Some(UpstreamStatus::Connected { generation: 1 })
        );
        self.agg.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_call_is_cancelled_upstream() {
    // A Kberg upstream offers tasks, so a call that ends unanswered is watched for a late task
    // answer; a call that times out must still be cancelled upstream once the grace for a late
    // task answer has passed, and must answer the timeout, not a closed transport.
    let mut w = waiting_upstream(Duration::from_millis(300)).await;
    let out = w
        .registry
        .call(&caller(), "up__wait", json!({}), CallOptions::default())
        .await
        .expect("not refused by the gate");
    assert_eq!(
        out.structured.as_ref().and_then(|s| s.get("code")),
        Some(&json!(UPSTREAM_TIMEOUT)),
        "{out:?}"
    );
    tokio::time::timeout(WAIT, w.started.recv())
        .await
        .expect("the tool started upstream")
        .expect("started");
    // The timeout did not count as a broken connection.
    w.assert_cancelled_upstream().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_unanswered_is_cancelled_upstream() {
    // The caller's future is dropped (not cancelled) while the upstream's tool runs: the
    // request is still watched, and cancelled upstream once the grace for a late task answer
    // has passed.
    let mut w = waiting_upstream(Duration::from_secs(60)).await;
    let registry = w.registry.clone();
    let call = tokio::spawn(async move {
        registry
            .call(&caller(), "up__wait", json!({}), CallOptions::default())
            .await
    });
    tokio::time::timeout(WAIT, w.started.recv())
        .await
        .expect("the tool started upstream")
        .expect("started");
    call.abort();
    assert!(call.await.expect_err("aborted").is_cancelled());
    w.assert_cancelled_upstream().await;
}

#[test]
fn a_zero_bound_is_refused() {
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new("up", UpstreamTransport::http("http://127.0.0.1:1/mcp"))
            .max_in_flight(0),
    );
    let err = config.validate().map(|_| ()).expect_err("zero");
    assert_eq!(err.code(), "invalid_transport");
}
