//! A token bucket that bounds how often something is sent: a tool's progress reports to its
//! client (`ToolContext::progress`), those an agent's progress sink passes to its app (in
//! `kberg-agent`), and the log messages a server sends its client (in `kberg-server`).

use std::time::Duration;

use tokio::time::Instant;

/// The most progress reports of one call sent at once; after that, one per
/// [`PROGRESS_REPORT_INTERVAL`]. The MCP specification asks both sides to bound the rate of
/// progress notifications.
pub const PROGRESS_REPORT_BURST: u32 = 20;

/// How often a call that has used its burst of progress reports may send one: ten a second.
pub const PROGRESS_REPORT_INTERVAL: Duration = Duration::from_millis(100);

/// The most log messages (`notifications/message`) a server sends one client at once; after
/// that, one per [`LOG_MESSAGE_INTERVAL`]. The MCP specification asks a server to rate-limit
/// its log messages.
pub const LOG_MESSAGE_BURST: u32 = 100;

/// How often a client that has had its burst of log messages gets one more: twenty a second.
pub const LOG_MESSAGE_INTERVAL: Duration = Duration::from_millis(50);

/// A token bucket on tokio's clock: `burst` sends at once, then one more for each `interval`
/// that passes. A refill keeps the part of an interval not yet paid for, so a sender faster
/// than the rate gets exactly one send per interval once its burst is spent.
///
/// ```
/// use kberg_core::RateBudget;
/// use std::time::Duration;
///
/// let mut budget = RateBudget::new(2, Duration::from_millis(100));
/// let now = tokio::time::Instant::now();
/// assert!(budget.take(now));
/// assert!(budget.take(now));
/// assert!(!budget.take(now));
/// assert!(budget.take(now + Duration::from_millis(100)));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RateBudget {
    burst: u32,
    interval: Duration,
    /// Sends left and the instant they were counted at; `None` until the first send.
    state: Option<(u32, Instant)>,
}

impl RateBudget {
    /// A full bucket of `burst` sends, one back per `interval` (a zero interval never runs out).
    pub const fn new(burst: u32, interval: Duration) -> Self {
        Self {
            burst,
            interval,
            state: None,
        }
    }

    /// The budget of one call's progress reports: [`PROGRESS_REPORT_BURST`], one back per
    /// [`PROGRESS_REPORT_INTERVAL`].
    pub const fn progress() -> Self {
        Self::new(PROGRESS_REPORT_BURST, PROGRESS_REPORT_INTERVAL)
    }

    /// The budget of the log messages sent to one client: [`LOG_MESSAGE_BURST`], one back per
    /// [`LOG_MESSAGE_INTERVAL`].
    pub const fn log() -> Self {
        Self::new(LOG_MESSAGE_BURST, LOG_MESSAGE_INTERVAL)
    }

    /// Takes one send at `now`, refilled for the time since the last refill; false when none
    /// is left (and nothing is taken).
    pub fn take(&mut self, now: Instant) -> bool {
        if self.interval.is_zero() {
            return true;
        }
        let (left, since) = self.state.unwrap_or((self.burst, now));
        let earned = now.saturating_duration_since(since).as_nanos() / self.interval.as_nanos();
        let earned = u32::try_from(earned).unwrap_or(u32::MAX);
        let left = left.saturating_add(earned).min(self.burst);
        // A full bucket starts counting anew; otherwise the clock moves on by the intervals
        // paid for, keeping the rest of the current one.
        let since = if left == self.burst {
            now
        } else {
            since + self.interval * earned
        };
        if left == 0 {
            self.state = Some((0, since));
            return false;
        }
        self.state = Some((left - 1, since));
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_burst_then_one_per_interval() {
        let mut b = RateBudget::new(3, 100 * MS);
        let t0 = Instant::now();
        assert_eq!((0..10).filter(|_| b.take(t0)).count(), 3);
        assert!(!b.take(t0 + 99 * MS));
        assert!(b.take(t0 + 100 * MS));
        assert!(!b.take(t0 + 150 * MS));
        // The half interval already waited counts towards the next send.
        assert!(b.take(t0 + 200 * MS));
        // A long quiet spell refills the bucket, never past the burst.
        assert_eq!((0..10).filter(|_| b.take(t0 + 10_000 * MS)).count(), 3);
    }

    #[test]
    fn a_fast_sender_gets_one_send_per_interval_after_its_burst() {
        let mut b = RateBudget::new(3, 100 * MS);
        let t0 = Instant::now();
        // Every 30 ms for 3 s: the burst at 0, 30 and 60 ms, then one in each later 100 ms.
        let sent = (0..100).filter(|i| b.take(t0 + 30 * i * MS)).count();
        assert_eq!(sent, 3 + 2_970 / 100);
    }

    #[test]
    fn an_earlier_instant_takes_nothing_back() {
        let mut b = RateBudget::new(1, 100 * MS);
        let t0 = Instant::now() + 1_000 * MS;
        assert!(b.take(t0));
        assert!(!b.take(t0 - 500 * MS));
        assert!(b.take(t0 + 100 * MS));
    }

    #[test]
    fn a_zero_interval_never_runs_out() {
        let mut b = RateBudget::new(0, Duration::ZERO);
        assert!((0..1_000).all(|_| b.take(Instant::now())));
    }
}
