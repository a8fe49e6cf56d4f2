//! A running tool's progress reports (MCP `notifications/progress`), relayed to the app.
//!
//! A surface asked for a call's progress ([`crate::ToolSurface::call_with_progress`]) requests
//! it from the tool (a progress token in the call's `_meta`, or in its
//! [`CallOptions`](kberg_core::CallOptions) in process) and hands every report the tool sends
//! for that call to a [`ProgressSink`]. The sink keeps the sequence the MCP specification
//! promises whatever the tool sends: each report's `progress` must exceed the last one's, so a
//! report that does not, or whose figures are not finite numbers, is dropped. The loop turns
//! the reports into [`AgentEvent::ToolProgress`](crate::AgentEvent::ToolProgress) events, and
//! asks for progress only when a run has an event channel or an idle timeout
//! ([`AgentConfig::tool_idle_timeout`](crate::AgentConfig::tool_idle_timeout)): a report the
//! sink passes on is a sign that the tool is at work, and so is a poll of the call's task that
//! answers `working` ([`ProgressSink::alive`]).

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kberg_core::{ClientPeer, PeerError, RateBudget};
use serde_json::Value;

/// The longest progress message passed on, in characters; a longer one is cut there (a report
/// is for a status line, and the events of a run are held until the app reads them).
pub const MAX_PROGRESS_MESSAGE_CHARS: usize = 1_000;

/// One progress report of a running tool.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProgressReport {
    /// How far the tool is; greater than in the call's previous report.
    pub progress: f64,
    /// The figure `progress` reaches when the tool is done, if the tool knows it.
    pub total: Option<f64>,
    /// What the tool is doing, in its own words (at most [`MAX_PROGRESS_MESSAGE_CHARS`]).
    pub message: Option<String>,
}

impl ProgressReport {
    /// A report of `progress`, with no total and no message.
    pub fn new(progress: f64) -> Self {
        Self {
            progress,
            total: None,
            message: None,
        }
    }

    /// Sets the total.
    pub fn with_total(mut self, total: f64) -> Self {
        self.total = Some(total);
        self
    }

    /// Sets the message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }
}

/// Where a surface delivers the progress reports of one call.
///
/// Clones share the call's state: the last `progress` passed on, against which the next
/// report is checked, and whether the sink is [closed](ProgressSink::close). Delivery is
/// synchronous, under the sink's lock, so it must not block and must not report to the same
/// sink (the loop's own sink sends on an unbounded channel); that is what lets `close` promise
/// that nothing is delivered after it returns.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use kberg_agent::{ProgressReport, ProgressSink};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let s = Arc::clone(&seen);
/// let sink = ProgressSink::new(move |r: ProgressReport| s.lock().unwrap().push(r.progress));
/// assert!(sink.report(ProgressReport::new(1.0)));
/// assert!(!sink.report(ProgressReport::new(1.0))); // no increase: dropped
/// assert!(!sink.report(ProgressReport::new(f64::NAN))); // not a number: dropped
/// assert!(sink.report(ProgressReport::new(2.5).with_total(10.0)));
/// assert_eq!(*seen.lock().unwrap(), vec![1.0, 2.5]);
/// ```
#[derive(Clone)]
pub struct ProgressSink {
    inner: Arc<SinkState>,
}

struct SinkState {
    deliver: Box<dyn Fn(ProgressReport) + Send + Sync>,
    progress: Mutex<Passed>,
}

// The bound of a sink's rate (`ProgressSink::report`): the same one a tool's
// `ToolContext::progress` keeps on the wire.
pub use kberg_core::{PROGRESS_REPORT_BURST, PROGRESS_REPORT_INTERVAL};

/// What a sink has passed on so far.
#[derive(Debug, Clone, Copy)]
struct Passed {
    last: Option<f64>,
    closed: bool,
    /// The rate bound: [`PROGRESS_REPORT_BURST`] at once, one back per
    /// [`PROGRESS_REPORT_INTERVAL`].
    budget: RateBudget,
    /// When the tool last showed a sign of work (a report passed on, or [`ProgressSink::alive`]).
    active_at: Option<tokio::time::Instant>,
}

impl Default for Passed {
    fn default() -> Self {
        Self {
            last: None,
            closed: false,
            budget: RateBudget::progress(),
            active_at: None,
        }
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `try_lock`: a sink may be formatted by its own delivery, under the lock.
        let passed = self.inner.progress.try_lock().ok().map(|p| *p);
        f.debug_struct("ProgressSink")
            .field("passed", &passed)
            .finish_non_exhaustive()
    }
}

impl ProgressSink {
    /// A sink that hands each accepted report to `deliver`.
    pub fn new(deliver: impl Fn(ProgressReport) + Send + Sync + 'static) -> Self {
        Self {
            inner: Arc::new(SinkState {
                deliver: Box::new(deliver),
                progress: Mutex::new(Passed::default()),
            }),
        }
    }

    fn passed(&self) -> std::sync::MutexGuard<'_, Passed> {
        // Plain values, consistent after any panic.
        self.inner
            .progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Passes `report` on if the sink is open and its `progress` is a finite number greater
    /// than the last one; says whether it did. A total that is not a finite number is dropped
    /// from the report, and a message longer than [`MAX_PROGRESS_MESSAGE_CHARS`] is cut.
    ///
    /// The rate is bounded, so a tool that floods reports cannot flood the app (whose events
    /// wait in an unbounded channel until it reads them): after [`PROGRESS_REPORT_BURST`]
    /// reports, one per [`PROGRESS_REPORT_INTERVAL`] is passed on. A report held back that way
    /// still counts as the last figure and as a sign of work
    /// ([`ProgressSink::last_active`]), and the next one passed on carries the newer figure.
    pub fn report(&self, mut report: ProgressReport) -> bool {
        if !report.progress.is_finite() {
            return false;
        }
        report.total = report.total.filter(|t| t.is_finite());
        if let Some(m) = &mut report.message {
            kberg_core::cut_chars(m, MAX_PROGRESS_MESSAGE_CHARS, "");
        }
        let mut passed = self.passed();
        if passed.closed || passed.last.is_some_and(|l| report.progress <= l) {
            return false;
        }
        let now = tokio::time::Instant::now();
        passed.last = Some(report.progress);
        passed.active_at = Some(now);
        if !passed.budget.take(now) {
            return false;
        }
        (self.inner.deliver)(report);
        true
    }

    /// Notes that the tool is still at work though it sent no report: a surface calls it when
    /// the call's task is polled and answers that it is working. It resets the loop's idle
    /// timeout ([`AgentConfig::tool_idle_timeout`](crate::AgentConfig::tool_idle_timeout)) and
    /// passes nothing on to the app. Ignored once the sink is closed.
    pub fn alive(&self) {
        let mut passed = self.passed();
        if !passed.closed {
            passed.active_at = Some(tokio::time::Instant::now());
        }
    }

    /// When the tool last showed a sign of work through this sink (a report passed on, or
    /// [`ProgressSink::alive`]), if it did, on tokio's clock.
    pub fn last_active(&self) -> Option<tokio::time::Instant> {
        self.passed().active_at
    }

    /// Passes nothing on any more, from now on: a report still on its way when the call ended
    /// (a surface may hand it over late) is dropped. Once `close` returns, no delivery is under
    /// way either, so the loop closes a call's sink before it sends the call's result.
    pub fn close(&self) {
        self.passed().closed = true;
    }
}

/// The client channel an in-process call gets when its progress is wanted: it passes the
/// call's `notifications/progress` to the sink and nothing else (a log message is dropped, and
/// the client requests a tool may make, elicitation, sampling and roots, are not supported, as
/// on a call without a channel).
pub(crate) struct LocalProgressPeer {
    pub(crate) token: Value,
    pub(crate) sink: ProgressSink,
}

#[async_trait]
impl ClientPeer for LocalProgressPeer {
    async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError> {
        if method == "notifications/progress"
            && params.get("progressToken") == Some(&self.token)
            && let Some(progress) = params.get("progress").and_then(Value::as_f64)
        {
            self.sink.report(ProgressReport {
                progress,
                total: params.get("total").and_then(Value::as_f64),
                message: params
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        }
        Ok(())
    }

    async fn request(
        &self,
        method: &str,
        _params: Value,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> Result<Value, PeerError> {
        Err(PeerError::NotSupported(method.to_string()))
    }

    fn supports(&self, _capability: &str) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collecting() -> (ProgressSink, Arc<Mutex<Vec<ProgressReport>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = Arc::clone(&seen);
        let sink = ProgressSink::new(move |r| s.lock().unwrap().push(r));
        (sink, seen)
    }

    #[test]
    fn only_increasing_finite_reports_pass() {
        let (sink, seen) = collecting();
        assert!(!sink.report(ProgressReport::new(f64::INFINITY)));
        assert!(sink.report(ProgressReport::new(-1.0)));
        assert!(sink.report(ProgressReport::new(0.0).with_total(f64::NAN)));
        assert!(!sink.report(ProgressReport::new(0.0)));
        assert!(!sink.report(ProgressReport::new(-0.5)));
        // A clone shares the last figure.
        assert!(!sink.clone().report(ProgressReport::new(0.0)));
        assert!(
            sink.clone()
                .report(ProgressReport::new(3.0).with_total(4.0))
        );
        let seen = seen.lock().unwrap();
        let figures: Vec<_> = seen.iter().map(|r| (r.progress, r.total)).collect();
        assert_eq!(figures, vec![(-1.0, None), (0.0, None), (3.0, Some(4.0))]);
    }

    #[test]
    fn a_closed_sink_passes_nothing_on() {
        let (sink, seen) = collecting();
        assert!(sink.report(ProgressReport::new(1.0)));
        sink.clone().close();
        assert!(!sink.report(ProgressReport::new(2.0)));
        assert_eq!(seen.lock().unwrap().len(), 1);
        assert!(format!("{sink:?}").contains("closed: true"), "{sink:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn reports_passed_on_and_alive_mark_the_tool_active() {
        let (sink, _seen) = collecting();
        assert_eq!(sink.last_active(), None);
        // A dropped report is no sign of work.
        assert!(!sink.report(ProgressReport::new(f64::NAN)));
        assert_eq!(sink.last_active(), None);
        let t0 = tokio::time::Instant::now();
        assert!(sink.report(ProgressReport::new(1.0)));
        assert_eq!(sink.last_active(), Some(t0));
        tokio::time::advance(std::time::Duration::from_secs(5)).await;
        sink.clone().alive();
        assert_eq!(
            sink.last_active(),
            Some(t0 + std::time::Duration::from_secs(5))
        );
        sink.close();
        tokio::time::advance(std::time::Duration::from_secs(5)).await;
        sink.alive();
        assert_eq!(
            sink.last_active(),
            Some(t0 + std::time::Duration::from_secs(5))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_reports_is_passed_on_at_a_bounded_rate() {
        let (sink, seen) = collecting();
        for i in 1..=100 {
            sink.report(ProgressReport::new(f64::from(i)));
        }
        let figures = |seen: &Mutex<Vec<ProgressReport>>| -> Vec<f64> {
            seen.lock().unwrap().iter().map(|r| r.progress).collect()
        };
        let burst: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(figures(&seen), burst);
        // Held back, the flood still moved the last figure: 100 does not advance on it.
        assert!(!sink.report(ProgressReport::new(100.0)));
        // One interval later one report passes, with the newest figure; the next waits again.
        tokio::time::advance(PROGRESS_REPORT_INTERVAL).await;
        assert!(sink.report(ProgressReport::new(101.0)));
        assert!(!sink.report(ProgressReport::new(102.0)));
        // After a quiet second, ten pass at once.
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let passed = (103..=130)
            .filter(|i| sink.report(ProgressReport::new(f64::from(*i))))
            .count();
        assert_eq!(passed, 10);
        // And after a long pause, the whole burst again, not more.
        tokio::time::advance(std::time::Duration::from_secs(60)).await;
        let passed = (131..=200)
            .filter(|i| sink.report(ProgressReport::new(f64::from(*i))))
            .count();
        assert_eq!(passed, PROGRESS_REPORT_BURST as usize);
        assert_eq!(seen.lock().unwrap().len(), 20 + 1 + 10 + 20);
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary() {
        let (sink, seen) = collecting();
        let long = "é".repeat(MAX_PROGRESS_MESSAGE_CHARS + 5);
        assert!(sink.report(ProgressReport::new(1.0).with_message(long)));
        let message = seen.lock().unwrap()[0].message.clone().unwrap();
        assert_eq!(message.chars().count(), MAX_PROGRESS_MESSAGE_CHARS);
    }

    #[tokio::test]
    async fn the_local_peer_passes_on_only_its_calls_progress() {
        let (sink, seen) = collecting();
        let peer = LocalProgressPeer {
            token: serde_json::json!("p-1"),
            sink,
        };
        let ok = |v| async { peer.notify("notifications/progress", v).await.unwrap() };
        ok(serde_json::json!({"progressToken": "p-2", "progress": 1})).await;
        ok(serde_json::json!({"progressToken": "p-1", "progress": "1"})).await;
        ok(serde_json::json!({"progressToken": "p-1", "progress": 1, "total": 2, "message": "half"}))
            .await;
        peer.notify(
            "notifications/message",
            serde_json::json!({"level": "info", "data": 1}),
        )
        .await
        .unwrap();
        assert!(!peer.supports("elicitation"));
        assert!(matches!(
            peer.request("roots/list", Value::Null, Default::default())
                .await,
            Err(PeerError::NotSupported(_))
        ));
        let seen = seen.lock().unwrap();
        assert_eq!(
            *seen,
            vec![
                ProgressReport::new(1.0)
                    .with_total(2.0)
                    .with_message("half")
            ]
        );
    }
}
