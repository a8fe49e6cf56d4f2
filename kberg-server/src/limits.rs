//! Counters behind the configurable limits that are not a single number in rmcp's config:
//! calls in flight per principal, and open listen streams.
//!
//! Both hand out permits that give their slot back when dropped, so a call that panics, is
//! cancelled or whose client disconnects never leaks a slot.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kberg_core::Principal;

/// Calls in flight, per principal id.
#[derive(Debug)]
pub(crate) struct CallCounter {
    max: usize,
    in_flight: Mutex<HashMap<ById, usize, foldhash::fast::RandomState>>,
}

/// A principal as a map key: hashed and compared by its id, held by reference count, so taking
/// a slot copies no string.
#[derive(Debug, Clone)]
struct ById(Arc<Principal>);

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for ById {}

impl Hash for ById {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that lookups by `&str` find it (`Borrow`'s contract).
        self.0.id.as_str().hash(state);
    }
}

impl Borrow<str> for ById {
    fn borrow(&self) -> &str {
        &self.0.id
    }
}

/// One call's slot; returned on drop.
#[derive(Debug)]
pub(crate) struct CallPermit {
    counter: Arc<CallCounter>,
    principal: Arc<Principal>,
}

impl CallCounter {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            in_flight: Mutex::new(HashMap::default()),
        })
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// A slot for `principal`, or `None` when it already has `max` calls in flight.
    pub(crate) fn try_acquire(self: &Arc<Self>, principal: &Arc<Principal>) -> Option<CallPermit> {
        // The map holds plain counters updated in single statements; a poisoned lock still
        // holds consistent counts.
        let mut m = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        match m.get_mut(principal.id.as_str()) {
            Some(n) if *n >= self.max => return None,
            Some(n) => *n += 1,
            None => {
                m.insert(ById(Arc::clone(principal)), 1);
            }
        }
        Some(CallPermit {
            counter: Arc::clone(self),
            principal: Arc::clone(principal),
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
        let id = self.principal.id.as_str();
        if let Some(n) = m.get_mut(id) {
            *n -= 1;
            if *n == 0 {
                m.remove(id);
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
        let a = Arc::new(Principal::new("a"));
        // Another value with the same id is the same principal for the limit.
        let a_again = Arc::new(Principal::new("a"));
        let b = Arc::new(Principal::new("b"));
        let a1 = c.try_acquire(&a).expect("first");
        let a2 = c.try_acquire(&a_again).expect("second");
        assert!(c.try_acquire(&a).is_none());
        let b1 = c.try_acquire(&b).expect("other principal");
        drop(a1);
        assert!(c.try_acquire(&a).is_some());
        drop(a2);
        drop(b1);
        // Every slot returned: no principal is left in the map.
        assert!(c.in_flight.lock().expect("lock").is_empty());
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
