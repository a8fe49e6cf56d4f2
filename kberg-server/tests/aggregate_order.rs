//! What an upstream says while a forwarded call runs reaches the calling client before the
//! call's answer does, as it would from the upstream itself: a tool that reports progress and
//! logs a line right before it returns must not have those arrive after its result, or be lost
//! because the call had ended (its progress route gone) by the time they were relayed.
//!
//! rmcp hands each notification to its handler as a task of its own, so nothing orders the
//! relay of a notification against the answer that followed it on the wire; the aggregator
//! does. Each test calls a tool many times and checks, the moment each call returns, that
//! everything the upstream sent before its answer has already reached the caller, in order.
//! Both transports: a child over stdio (`aggregate_raw_upstream.py`'s `flood`) and a Kberg
//! server over Streamable HTTP, and the reference server (server-everything) over each.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod peers;

use kberg_core::{ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::McpApp;
use kberg_server::aggregate::UpstreamTransport;
use kberg_testkit::serve::{RunningServer, loopback};
use peers::*;
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

/// How many calls each test makes: before the aggregator kept the order, the child's reports
/// came late or not at all from the first call on. (The HTTP upstream's did not show it here:
/// its answer comes in a read of its own; the test keeps that path honest.)
const CALLS: usize = 20;

/// How many progress reports and log lines each call's upstream sends before answering (within
/// the relay's bounds for all the calls of a test together).
const SAID: usize = 3;

/// What reached the caller by the time its call returned: the progress figures and the log
/// lines' data, each in the order they came.
fn said(noted: &mut UnboundedReceiver<(String, Value)>) -> (Vec<f64>, Vec<Value>) {
    let (mut progress, mut logs) = (Vec::new(), Vec::new());
    while let Ok((method, params)) = noted.try_recv() {
        match method.as_str() {
            "notifications/progress" => progress.push(params["progress"].as_f64().unwrap()),
            "notifications/message" => logs.push(params["data"].clone()),
            other => panic!("unexpected notification {other}: {params}"),
        }
    }
    (progress, logs)
}

fn expected_progress() -> Vec<f64> {
    (1..=SAID).map(|i| i as f64).collect()
}

fn expected_lines() -> Vec<Value> {
    (1..=SAID).map(|i| json!(format!("line {i}"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_last_words_arrive_before_its_answer() {
    let (agg, registry) = connected("raw", raw_upstream()).await;
    for call in 0..CALLS {
        let (opts, mut noted) = noted_options(kberg_core::CancellationToken::new());
        let out = registry
            .call(&reader(), "raw__flood", json!({"n": SAID}), opts)
            .await
            .expect("answered");
        assert_eq!(out.all_text(), format!("flooded {SAID}"));
        let (progress, logs) = said(&mut noted);
        assert_eq!(progress, expected_progress(), "call {call}");
        assert_eq!(logs, expected_lines(), "call {call}");
    }
    agg.shutdown().await;
}

/// A Kberg server whose `tell` tool reports progress and logs a line [`SAID`] times, then
/// returns at once.
async fn telling_endpoint() -> (String, StopOnDrop) {
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("tell")
                .description("Reports progress and logs, then returns")
                .raw_handler(json!({"type": "object"}), |_a, ctx| async move {
                    for i in 1..=SAID {
                        let figure = i as f64;
                        ctx.progress(figure, Some(SAID as f64), None).await?;
                        ctx.log("info", None, json!(format!("line {i}"))).await?;
                    }
                    Ok(ToolOutput::text("told"))
                }),
        )
        .expect("register tell");
    let server = RunningServer::start(
        McpApp::builder("teller", "1").tools(tools).build(),
        loopback(),
    )
    .await;
    let url = server.url.clone();
    (url, server.into_guard())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstreams_last_words_arrive_before_its_answer() {
    let (url, _upstream) = telling_endpoint().await;
    let (agg, registry) = connected("tl", UpstreamTransport::http(url)).await;
    for call in 0..CALLS {
        let (opts, mut noted) = noted_options(kberg_core::CancellationToken::new());
        let out = registry
            .call(&reader(), "tl__tell", json!({}), opts)
            .await
            .expect("answered");
        assert_eq!(out.all_text(), "told");
        let (progress, logs) = said(&mut noted);
        assert_eq!(progress, expected_progress(), "call {call}");
        assert_eq!(logs, expected_lines(), "call {call}");
    }
    agg.shutdown().await;
}

/// server-everything (the reference server, Node) reports progress after each step of its long
/// operation and answers right after the last: every report reaches the caller before the
/// answer, over stdio and over Streamable HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_last_progress_arrives_before_its_answer() {
    let http = HttpEverything::start().await;
    for (ns, transport) in [
        ("ev", everything_stdio()),
        ("evh", UpstreamTransport::http(http.url.clone())),
    ] {
        let (agg, registry) = connected(ns, transport).await;
        for call in 0..3 {
            let (opts, mut noted) = noted_options(kberg_core::CancellationToken::new());
            let out = registry
                .call(
                    &reader(),
                    &format!("{ns}__trigger-long-running-operation"),
                    json!({"duration": 0.3, "steps": SAID}),
                    opts,
                )
                .await
                .expect("answered");
            assert!(!out.is_error, "{ns}: {out:?}");
            let (progress, _) = said(&mut noted);
            assert_eq!(progress, expected_progress(), "{ns}, call {call}");
        }
        agg.shutdown().await;
    }
}

/// A calling client that stopped reading: the first notification sent to it signals `stalled`
/// and, like every later one, waits until `release` fires (as a send to a full response stream
/// waits for room).
struct StalledPeer {
    stalled: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    release: kberg_core::CancellationToken,
}

#[async_trait::async_trait]
impl kberg_core::ClientPeer for StalledPeer {
    async fn notify(&self, _method: &str, _params: Value) -> Result<(), kberg_core::PeerError> {
        if let Some(tx) = self.stalled.lock().unwrap().take() {
            let _ = tx.send(());
        }
        self.release.cancelled().await;
        Ok(())
    }
    async fn request(
        &self,
        method: &str,
        _params: Value,
        _cancel: kberg_core::CancellationToken,
    ) -> Result<Value, kberg_core::PeerError> {
        Err(kberg_core::PeerError::NotSupported(method.to_string()))
    }
    fn supports(&self, _capability: &str) -> bool {
        false
    }
}

/// A client that stopped reading holds up what goes to it, and its own call's answer, but not
/// another client's call to the same upstream: that call's progress still reaches its client
/// before its answer, which comes as soon as the upstream gives it. (The order is kept per
/// stream of the upstream, and a child has one: the relays of every call wait in one line, and
/// one stuck at its client's send held up all the others, their answers until the call timeout
/// and their progress past it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stopped_reading_holds_up_only_its_own_call() {
    use kberg_server::aggregate::{Aggregator, AggregatorConfig, UpstreamConfig};
    let registry = ToolRegistry::new();
    // Long enough for any machine; an answer held back to it comes without its progress.
    let limit = std::time::Duration::from_secs(20);
    let agg = Aggregator::start(
        AggregatorConfig::new()
            .upstream(UpstreamConfig::new("raw", raw_upstream()).call_timeout(limit)),
        registry.clone(),
    )
    .expect("valid");
    assert!(agg.wait_connected("raw", 1, WAIT).await);

    let (stalled_tx, stalled) = tokio::sync::oneshot::channel();
    let release = kberg_core::CancellationToken::new();
    let peer = StalledPeer {
        stalled: std::sync::Mutex::new(Some(stalled_tx)),
        release: release.clone(),
    };
    let opts = kberg_core::CallOptions::with_cancel(kberg_core::CancellationToken::new())
        .with_peer(std::sync::Arc::new(peer))
        .with_progress_token(json!("stalled"));
    let stuck = {
        let registry = registry.clone();
        tokio::spawn(async move {
            registry
                .call(&reader(), "raw__flood", json!({"n": SAID}), opts)
                .await
        })
    };
    stalled
        .await
        .expect("the stalled client was sent something");

    let (opts, mut noted) = noted_options(kberg_core::CancellationToken::new());
    let out = registry
        .call(&reader(), "raw__flood", json!({"n": SAID}), opts)
        .await
        .expect("answered");
    assert_eq!(out.all_text(), format!("flooded {SAID}"));
    // Its log lines are nobody's over stdio while two calls are in flight; its progress is.
    let (progress, _) = said(&mut noted);
    assert_eq!(progress, expected_progress());

    release.cancel();
    let out = stuck.await.unwrap().expect("answered");
    assert_eq!(out.all_text(), format!("flooded {SAID}"));
    agg.shutdown().await;
}
