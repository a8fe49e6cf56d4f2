//! The loop's tool timeouts ([`AgentConfig::tool_idle_timeout`], [`AgentConfig::tool_timeout`])
//! on tokio's paused clock: time moves only when every task waits, straight to the next timer,
//! so a tool that sleeps for a minute costs nothing and every instant below is exact.
//!
//! The in-process tool `crawl` reports progress `reports` times, one every `every` seconds, then
//! finishes or waits for ever (`then`). A cut-off call is cancelled: the gate drops the tool's
//! future, which the tool's guard records.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use kberg_agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, LocalSurface, Message, ScriptedProvider,
    StopReason, SurfaceError, ToolDefinition, ToolResult, ToolSurface,
};
use kberg_core::{Caller, ErrorCode, Principal, ToolBuilder, ToolOutput, ToolRegistry};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Sets its flag when dropped before it was disarmed: the tool's future was dropped mid-call.
struct DroppedMidCall {
    flag: Arc<AtomicBool>,
    armed: bool,
}

impl Drop for DroppedMidCall {
    fn drop(&mut self) {
        if self.armed {
            self.flag.store(true, Ordering::SeqCst);
        }
    }
}

/// The `crawl` tool, and the flag its guard sets when a call is dropped mid-way.
fn crawler() -> (ToolRegistry, Arc<AtomicBool>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&dropped);
    let r = ToolRegistry::new();
    r.register(
        ToolBuilder::new("crawl")
            .description("Crawl the site")
            .raw_handler(
                json!({
                    "type": "object",
                    "properties": {
                        "reports": {"type": "integer"},
                        "every": {"type": "integer"},
                        "then": {"enum": ["finish", "hang"]}
                    },
                    "required": ["reports", "every", "then"]
                }),
                move |args: Value, ctx| {
                    let flag = Arc::clone(&flag);
                    async move {
                        let mut guard = DroppedMidCall { flag, armed: true };
                        let every = Duration::from_secs(args["every"].as_u64().unwrap());
                        for i in 0..args["reports"].as_u64().unwrap() {
                            tokio::time::sleep(every).await;
                            ctx.progress((i + 1) as f64, None, None)
                                .await
                                .map_err(|e| e.to_string())?;
                        }
                        if args["then"] == "hang" {
                            std::future::pending::<()>().await;
                        }
                        guard.armed = false;
                        Ok(ToolOutput::text("crawled"))
                    }
                },
            ),
    )
    .unwrap();
    (r, dropped)
}

fn config(idle: Option<u64>, total: Option<u64>) -> AgentConfig {
    AgentConfig::default()
        .look_before_answering(false)
        .tool_idle_timeout(idle.map(Duration::from_secs))
        .tool_timeout(total.map(Duration::from_secs))
}

/// A model that calls `crawl` with `args` once, then answers.
fn script(args: Value) -> ScriptedProvider {
    ScriptedProvider::new([
        ScriptedProvider::call("c1", "crawl", args),
        ScriptedProvider::text("done"),
    ])
}

/// What one run of `crawl` did: the call's outcome and result text, how long the call took on
/// the paused clock, whether the tool was dropped mid-call, and the run's stop reason.
struct Crawl {
    outcome: CallOutcome,
    text: String,
    took: Duration,
    dropped: bool,
    stop: StopReason,
}

async fn crawl(args: Value, config: AgentConfig) -> Crawl {
    let (registry, dropped) = crawler();
    let script = script(args);
    let agent = Agent::new(
        script.clone(),
        LocalSurface::new(registry, Caller::new(Principal::new("r"))),
    )
    .with_config(config);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let run = agent.run_with_events(vec![Message::user("crawl")], &cancel, tx);
    let events = async {
        let (mut called, mut answered) = (None, None);
        while let Some(ev) = rx.recv().await {
            match ev {
                AgentEvent::ToolCalled { .. } => called = Some(Instant::now()),
                AgentEvent::ToolResult { .. } => answered = Some(Instant::now()),
                _ => {}
            }
        }
        answered.unwrap() - called.unwrap()
    };
    let (out, took) = tokio::join!(run, events);
    let text = match &script.requests()[1].messages.last() {
        Some(Message::Tool { content, .. }) => content.clone(),
        other => panic!("expected the tool's result last, found {other:?}"),
    };
    Crawl {
        outcome: out.calls[0].outcome,
        text,
        took,
        dropped: dropped.load(Ordering::SeqCst),
        stop: out.stop,
    }
}

fn args(reports: u64, every: u64, then: &str) -> Value {
    json!({"reports": reports, "every": every, "then": then})
}

/// A tool that shows no sign of work is cut off once the idle timeout passes: cancelled, and
/// answered `tool_timeout` with a final note; the run goes on to the model's answer.
#[tokio::test(start_paused = true)]
async fn a_quiet_tool_is_cut_off_by_the_idle_timeout() {
    let c = crawl(args(0, 1, "hang"), config(Some(30), Some(600))).await;
    assert_eq!(c.outcome, CallOutcome::Failed(ErrorCode::ToolTimeout));
    assert_eq!(c.took, Duration::from_secs(30));
    assert!(c.dropped, "the tool's future was not dropped");
    assert!(
        c.text.starts_with(
            "The tool `crawl` showed no sign of work for 30 seconds, so the call was cancelled."
        ),
        "{}",
        c.text
    );
    assert!(c.text.contains("do not call `crawl` again"), "{}", c.text);
    assert!(matches!(c.stop, StopReason::Answered), "{:?}", c.stop);
}

/// Each progress report starts the idle wait anew: a tool that reports every 20 s for 100 s
/// finishes under a 30 s idle timeout.
#[tokio::test(start_paused = true)]
async fn progress_keeps_a_slow_tool_alive() {
    let c = crawl(args(5, 20, "finish"), config(Some(30), Some(600))).await;
    assert_eq!(c.outcome, CallOutcome::Ok, "{}", c.text);
    assert_eq!(c.text, "crawled");
    assert_eq!(c.took, Duration::from_secs(100));
    assert!(!c.dropped);
}

/// The idle wait runs from the last report: reports at 20 s and 40 s, then silence, is cut
/// off at 70 s.
#[tokio::test(start_paused = true)]
async fn the_idle_wait_runs_from_the_last_report() {
    let c = crawl(args(2, 20, "hang"), config(Some(30), Some(600))).await;
    assert_eq!(c.outcome, CallOutcome::Failed(ErrorCode::ToolTimeout));
    assert_eq!(c.took, Duration::from_secs(70));
    assert!(c.dropped);
}

/// A tool that keeps reporting is still cut off at the total timeout.
#[tokio::test(start_paused = true)]
async fn the_total_timeout_bounds_a_tool_that_keeps_reporting() {
    let c = crawl(args(1_000, 10, "finish"), config(Some(30), Some(100))).await;
    assert_eq!(c.outcome, CallOutcome::Failed(ErrorCode::ToolTimeout));
    assert_eq!(c.took, Duration::from_secs(100));
    assert!(c.dropped);
    assert!(
        c.text
            .starts_with("The tool `crawl` did not finish within 100 seconds, so the call was"),
        "{}",
        c.text
    );
}

/// With both limits off a call may take as long as it takes.
#[tokio::test(start_paused = true)]
async fn without_limits_a_call_takes_as_long_as_it_takes() {
    let c = crawl(args(1, 3_600, "finish"), config(None, None)).await;
    assert_eq!(c.outcome, CallOutcome::Ok, "{}", c.text);
    assert_eq!(c.took, Duration::from_secs(3_600));
}

/// A zero limit cuts off every call that does not answer when first polled, at once, as
/// `tokio::time::timeout` does; a call that answers at once stands.
#[tokio::test(start_paused = true)]
async fn a_zero_limit_cuts_off_only_a_call_that_does_not_answer_at_once() {
    for (idle, total) in [(Some(0), None), (None, Some(0)), (Some(0), Some(0))] {
        let c = crawl(args(0, 1, "finish"), config(idle, total)).await;
        assert_eq!(c.outcome, CallOutcome::Ok, "{idle:?} {total:?}: {}", c.text);
        let c = crawl(args(1, 1, "finish"), config(idle, total)).await;
        assert_eq!(
            c.outcome,
            CallOutcome::Failed(ErrorCode::ToolTimeout),
            "{idle:?} {total:?}: {}",
            c.text
        );
        assert_eq!(c.took, Duration::ZERO);
        assert!(c.dropped);
    }
}

/// A surface whose one tool never answers by itself; once its call is cancelled it answers
/// `answer_when_cancelled`, or never, when that is `None`.
struct Stubborn {
    answer_when_cancelled: Option<ToolResult>,
}

#[async_trait]
impl ToolSurface for Stubborn {
    async fn tools(&self) -> Result<Vec<ToolDefinition>, SurfaceError> {
        Ok(vec![
            ToolDefinition::new("crawl", "Crawl the site", json!({"type": "object"}))
                .read_only(true),
        ])
    }

    async fn call(
        &self,
        _name: &str,
        _arguments: Value,
        cancel: CancellationToken,
    ) -> Result<ToolResult, SurfaceError> {
        cancel.cancelled().await;
        match &self.answer_when_cancelled {
            Some(r) => Ok(r.clone()),
            None => std::future::pending().await,
        }
    }
}

async fn stubborn(answer_when_cancelled: Option<ToolResult>) -> (CallOutcome, String) {
    let script = script(json!({}));
    let agent = Agent::new(
        script.clone(),
        Stubborn {
            answer_when_cancelled,
        },
    )
    .with_config(config(Some(30), None));
    let out = agent
        .run(vec![Message::user("crawl")], &CancellationToken::new())
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let text = out
        .messages
        .iter()
        .find_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    (out.calls[0].outcome, text)
}

/// A call that answers with a success as it is cut off keeps its answer: the tool did finish.
#[tokio::test(start_paused = true)]
async fn a_success_that_arrives_as_the_call_is_cut_off_stands() {
    let (outcome, text) = stubborn(Some(ToolResult::ok("finished just then"))).await;
    assert_eq!(outcome, CallOutcome::Ok);
    assert_eq!(text, "finished just then");
}

/// A surface that ignores the cancellation is dropped after a grace, and the call is the
/// timeout; so is one that answers the cancellation with an error.
#[tokio::test(start_paused = true)]
async fn a_surface_that_does_not_wind_up_is_dropped() {
    for answer in [
        None,
        Some(ToolResult::error(ErrorCode::Cancelled, "cancelled")),
    ] {
        let (outcome, text) = stubborn(answer).await;
        assert_eq!(outcome, CallOutcome::Failed(ErrorCode::ToolTimeout));
        assert!(
            text.contains("showed no sign of work for 30 seconds"),
            "{text}"
        );
    }
}
