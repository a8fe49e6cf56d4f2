//! Counters behind the configurable limits that are not a single number in rmcp's config:
//! calls in flight per principal, and open listen streams.
//!
//! Both hand out permits that give their slot back when dropped, so a call that panics, is
//! cancelled or whose client disconnects never leaks a slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Open listen streams (GET SSE and `subscriptions/listen`).
#[derive(Debug)]
pub(crate) struct StreamCounter {
    max: usize,
    open: AtomicUsize,
}

/// One stream's slot; returned on drop.
#[derive(Debug)]
pub(crate) struct StreamPermit {
    counter: Arc<StreamCounter>,
}

impl StreamCounter {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            open: AtomicUsize::new(0),
        })
    }

    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<StreamPermit> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| StreamPermit {
                counter: Arc::clone(self),
            })
    }

    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        self.counter.open.fetch_sub(1, Ordering::AcqRel);
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
        let s = StreamCounter::new(1);
        let p = s.try_acquire().expect("first");
        assert!(s.try_acquire().is_none());
        assert_eq!(s.open(), 1);
        drop(p);
        assert!(s.try_acquire().is_some());
        let zero = StreamCounter::new(0);
        assert!(zero.try_acquire().is_none());
    }
}
