//! Counters behind the configurable limits that are not a single number in rmcp's config:
//! calls in flight per principal, and open listen streams (in all and per principal).
//!
//! Both hand out permits that give their slot back when dropped, so a call that panics, is
//! cancelled or whose client disconnects never leaks a slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many principals the call counter holds before it first forgets those with no call in
/// flight. Below it a principal's entry stays at zero between calls, so a lone client's every
/// call is a counter bump rather than an insertion and a removal.
const CALL_COUNTER_SWEEP_AT: usize = 1024;

/// Calls in flight, per principal id.
#[derive(Debug)]
pub(crate) struct CallCounter {
    max: usize,
    in_flight: Mutex<Counts>,
}

/// The counts, and the size at which the next sweep runs.
#[derive(Debug)]
struct Counts {
    by_id: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
    /// At least [`CALL_COUNTER_SWEEP_AT`], and twice what the last sweep left: when most
    /// entries are busy, a sweep frees little, and sweeping again at once on every new
    /// principal would scan the whole map each time. Doubling keeps the scans' cost per call
    /// constant.
    sweep_at: usize,
}

/// One call's slot; returned on drop. It borrows the counter and the principal's id (both
/// outlive the call), so taking a slot touches no reference count.
#[derive(Debug)]
pub(crate) struct CallPermit<'a> {
    counter: &'a CallCounter,
    principal: &'a str,
}

impl CallCounter {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            in_flight: Mutex::new(Counts {
                by_id: HashMap::default(),
                sweep_at: CALL_COUNTER_SWEEP_AT,
            }),
        }
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// The counts, locked. They are plain counters updated in single statements; a poisoned
    /// lock still holds consistent counts.
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for the principal `id`, or `None` when it already has `max` calls in flight.
    pub(crate) fn try_acquire<'a>(&'a self, id: &'a str) -> Option<CallPermit<'a>> {
        let mut c = self.counts();
        match c.by_id.get_mut(id) {
            Some(n) if *n >= self.max => return None,
            Some(n) => *n += 1,
            None => {
                if c.by_id.len() >= c.sweep_at {
                    c.by_id.retain(|_, n| *n > 0);
                    c.sweep_at = CALL_COUNTER_SWEEP_AT.max(2 * c.by_id.len());
                }
                c.by_id.insert(id.into(), 1);
            }
        }
        Some(CallPermit {
            counter: self,
            principal: id,
        })
    }
}

impl Drop for CallPermit<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.counter.counts().by_id.get_mut(self.principal) {
            *n = n.saturating_sub(1);
        }
    }
}

/// Open listen streams (GET SSE and `subscriptions/listen`), in all and per principal id.
///
/// Why a share per principal: a stream stays open as long as its client wants, so without one
/// a single principal could hold every slot and leave all other clients without
/// server-to-client notifications until it let go. Streams open rarely (not once per call),
/// so one lock over both counts is cheap, and it keeps the two checks and the counting one
/// step.
#[derive(Debug)]
pub(crate) struct StreamCounter {
    max: usize,
    per_principal: usize,
    open: Mutex<OpenStreams>,
}

/// The open streams: how many in all, and each principal's count.
#[derive(Debug, Default)]
struct OpenStreams {
    total: usize,
    /// A principal with no open stream has no entry, so this holds at most `max` entries.
    by_id: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
}

/// Which limit refused a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamRefusal {
    /// The principal already holds its share.
    PrincipalShare,
    /// Every stream is taken.
    Full,
}

/// One stream's slot; returned on drop.
#[derive(Debug)]
pub(crate) struct StreamPermit {
    counter: Arc<StreamCounter>,
    principal: Box<str>,
}

impl StreamCounter {
    /// At most `max` streams in all, and `per_principal` for each principal.
    pub(crate) fn new(max: usize, per_principal: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            per_principal,
            open: Mutex::new(OpenStreams::default()),
        })
    }

    /// The counts, locked. They are plain counters updated in single statements; a poisoned
    /// lock still holds consistent counts.
    fn streams(&self) -> std::sync::MutexGuard<'_, OpenStreams> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a stream of the principal `id`. Its own share is checked first: it cannot
    /// retry into a place that other principals' streams will leave.
    pub(crate) fn try_acquire(self: &Arc<Self>, id: &str) -> Result<StreamPermit, StreamRefusal> {
        let mut s = self.streams();
        if s.by_id.get(id).copied().unwrap_or(0) >= self.per_principal {
            return Err(StreamRefusal::PrincipalShare);
        }
        if s.total >= self.max {
            return Err(StreamRefusal::Full);
        }
        s.total += 1;
        match s.by_id.get_mut(id) {
            Some(n) => *n += 1,
            None => {
                s.by_id.insert(id.into(), 1);
            }
        }
        Ok(StreamPermit {
            counter: Arc::clone(self),
            principal: id.into(),
        })
    }

    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.streams().total
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut s = self.counter.streams();
        s.total = s.total.saturating_sub(1);
        if let Some(n) = s.by_id.get_mut(&*self.principal) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.by_id.remove(&*self.principal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_per_principal() {
        let c = CallCounter::new(2);
        // Another string with the same id is the same principal for the limit.
        let a_again = String::from("a");
        let a1 = c.try_acquire("a").expect("first");
        let a2 = c.try_acquire(&a_again).expect("second");
        assert!(c.try_acquire("a").is_none());
        let b1 = c.try_acquire("b").expect("other principal");
        drop(a1);
        assert!(c.try_acquire("a").is_some());
        drop(a2);
        drop(b1);
        // Every slot returned: each principal's count is back to zero.
        assert!(c.counts().by_id.values().all(|n| *n == 0));
        assert!(c.try_acquire("a").is_some() && c.try_acquire("b").is_some());
    }

    #[test]
    fn principals_without_calls_are_forgotten_when_the_counter_grows() {
        let c = CallCounter::new(1);
        let ids: Vec<String> = (0..CALL_COUNTER_SWEEP_AT)
            .map(|i| format!("p{i}"))
            .collect();
        let busy = c.try_acquire("busy").expect("a slot");
        for id in &ids[1..] {
            drop(c.try_acquire(id).expect("a slot"));
        }
        assert_eq!(c.counts().by_id.len(), CALL_COUNTER_SWEEP_AT);
        // A new principal past the bound sweeps every idle entry; the busy one stays, and
        // still has its one call in flight.
        let new = c.try_acquire("new").expect("a slot");
        assert_eq!(c.counts().by_id.len(), 2);
        assert!(c.try_acquire("busy").is_none());
        drop(busy);
        drop(new);
        assert!(c.try_acquire("busy").is_some());
    }

    #[test]
    fn a_sweep_that_frees_little_is_not_repeated_at_once() {
        let c = CallCounter::new(1);
        let ids: Vec<String> = (0..CALL_COUNTER_SWEEP_AT + 1)
            .map(|i| format!("p{i}"))
            .collect();
        // Every principal busy: the sweep at the bound frees nothing, and the next one waits
        // until the map has doubled.
        let held: Vec<_> = ids
            .iter()
            .map(|id| c.try_acquire(id).expect("a slot"))
            .collect();
        assert_eq!(c.counts().by_id.len(), CALL_COUNTER_SWEEP_AT + 1);
        assert_eq!(c.counts().sweep_at, 2 * CALL_COUNTER_SWEEP_AT);
        drop(held);
        // All idle now: the map keeps them until it reaches the new bound, then forgets them.
        let more: Vec<String> = (0..CALL_COUNTER_SWEEP_AT)
            .map(|i| format!("q{i}"))
            .collect();
        for id in &more[..CALL_COUNTER_SWEEP_AT - 1] {
            drop(c.try_acquire(id).expect("a slot"));
        }
        assert_eq!(c.counts().by_id.len(), 2 * CALL_COUNTER_SWEEP_AT);
        drop(
            c.try_acquire(&more[CALL_COUNTER_SWEEP_AT - 1])
                .expect("a slot"),
        );
        assert_eq!(c.counts().by_id.len(), 1);
        assert_eq!(c.counts().sweep_at, CALL_COUNTER_SWEEP_AT);
    }

    #[test]
    fn streams_are_counted() {
        let s = StreamCounter::new(1, 1);
        let p = s.try_acquire("a").expect("first");
        assert_eq!(s.try_acquire("b").unwrap_err(), StreamRefusal::Full);
        assert_eq!(s.open(), 1);
        drop(p);
        assert!(s.try_acquire("b").is_ok());
        let zero = StreamCounter::new(0, 1);
        assert_eq!(zero.try_acquire("a").unwrap_err(), StreamRefusal::Full);
    }

    #[test]
    fn streams_are_counted_per_principal() {
        let s = StreamCounter::new(3, 2);
        let a1 = s.try_acquire("a").expect("first");
        let a2 = s.try_acquire("a").expect("second");
        assert_eq!(
            s.try_acquire("a").unwrap_err(),
            StreamRefusal::PrincipalShare
        );
        let b1 = s.try_acquire("b").expect("another principal");
        // Full now; the principal's own share is still named first.
        assert_eq!(
            s.try_acquire("a").unwrap_err(),
            StreamRefusal::PrincipalShare
        );
        assert_eq!(s.try_acquire("c").unwrap_err(), StreamRefusal::Full);
        drop(a1);
        let a3 = s.try_acquire("a").expect("a place given back");
        drop((a2, a3, b1));
        // Every slot returned, and no principal without a stream is remembered.
        assert_eq!(s.open(), 0);
        assert!(s.streams().by_id.is_empty());
    }
}
