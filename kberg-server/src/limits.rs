//! Counters behind the configurable limits that are not a single number in rmcp's config:
//! calls in flight per principal, and open listen streams.
//!
//! Both hand out permits that give their slot back when dropped, so a call that panics, is
//! cancelled or whose client disconnects never leaks a slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Calls in flight, per principal id.
#[derive(Debug)]
pub(crate) struct CallCounter {
    max: usize,
    in_flight: Mutex<HashMap<String, usize>>,
}

/// One call's slot; returned on drop.
#[derive(Debug)]
pub(crate) struct CallPermit {
    counter: Arc<CallCounter>,
    principal: String,
}

impl CallCounter {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A slot for `principal`, or `None` when it already has `max` calls in flight.
    pub(crate) fn try_acquire(self: &Arc<Self>, principal: &str) -> Option<CallPermit> {
        // The map holds plain counters updated in single statements; a poisoned lock still
        // holds consistent counts.
        let mut m = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        match m.get_mut(principal) {
            Some(n) if *n >= self.max => return None,
            Some(n) => *n += 1,
            None => {
                m.insert(principal.to_string(), 1);
            }
        }
        Some(CallPermit {
            counter: Arc::clone(self),
            principal: principal.to_string(),
        })
    }
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        let mut m = self
            .counter
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.principal);
            }
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
        let a1 = c.try_acquire("a").expect("first");
        let _a2 = c.try_acquire("a").expect("second");
        assert!(c.try_acquire("a").is_none());
        let _b = c.try_acquire("b").expect("other principal");
        drop(a1);
        assert!(c.try_acquire("a").is_some());
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
