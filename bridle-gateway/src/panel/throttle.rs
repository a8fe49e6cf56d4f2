//! Log-in throttling: failed log-ins are counted per client address and per credential tried,
//! in a sliding window; past the limit, further log-ins from that address (or with that
//! credential) are refused with 429 before the credential is even checked, so guessing admin
//! tokens through the panel costs the guesser the window, not the gateway a verify per try.
//!
//! The credential is counted by its SHA-256 digest (a wrong token is never kept in memory as
//! typed). A successful log-in clears its address's failures. The table is bounded: past
//! [`MAX_KEYS`] keys the expired ones are swept, and if that is not enough the oldest key goes,
//! so a flood of addresses cannot grow it without end. (A counter of failures in a window is a
//! few lines; the rate-limiter crates meter every request instead, which is not what is wanted
//! here.)
//!
//! Behind a reverse proxy every browser has the proxy's address: the per-address limit then
//! counts everybody's failures together, which errs on the safe side.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::config::LoginLimits;

/// The most keys (addresses plus credentials) remembered at once.
pub(crate) const MAX_KEYS: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Address(Option<IpAddr>),
    Credential([u8; 32]),
}

/// Which limit refused a log-in, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Throttled {
    /// `address` or `credential`.
    pub(crate) by: &'static str,
    /// When the oldest counted failure leaves the window (at least one second).
    pub(crate) retry_after: Duration,
}

/// The failed log-ins of this process.
pub(crate) struct LoginThrottle {
    limits: LoginLimits,
    failures: Mutex<HashMap<Key, VecDeque<Instant>>>,
}

fn credential_key(token: &str) -> Key {
    Key::Credential(Sha256::digest(token.as_bytes()).into())
}

impl LoginThrottle {
    pub(crate) fn new(limits: LoginLimits) -> Self {
        Self {
            limits,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<Key, VecDeque<Instant>>> {
        // A panic while holding the lock leaves counters, not a broken invariant.
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a log-in from `address` with `token` may be checked now.
    pub(crate) fn check(&self, address: Option<IpAddr>, token: &str) -> Result<(), Throttled> {
        let now = Instant::now();
        let mut table = self.table();
        for (key, max, by) in [
            (
                Key::Address(address),
                self.limits.failures_per_address,
                "address",
            ),
            (
                credential_key(token),
                self.limits.failures_per_credential,
                "credential",
            ),
        ] {
            let Some(times) = table.get_mut(&key) else {
                continue;
            };
            self.expire(times, now);
            if times.len() >= max {
                let oldest = times.front().copied().unwrap_or(now);
                let left = self
                    .limits
                    .window
                    .saturating_sub(now.duration_since(oldest));
                return Err(Throttled {
                    by,
                    retry_after: left.max(Duration::from_secs(1)),
                });
            }
        }
        Ok(())
    }

    /// Counts a failed log-in.
    pub(crate) fn failed(&self, address: Option<IpAddr>, token: &str) {
        let now = Instant::now();
        let mut table = self.table();
        if table.len() + 2 > MAX_KEYS {
            table.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < self.limits.window)
            });
            while table.len() + 2 > MAX_KEYS {
                let oldest = table
                    .iter()
                    .min_by_key(|(_, times)| times.back().copied())
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(k) => {
                        table.remove(&k);
                    }
                    None => break,
                }
            }
        }
        for key in [Key::Address(address), credential_key(token)] {
            let times = table.entry(key).or_default();
            self.expire(times, now);
            times.push_back(now);
        }
    }

    /// Clears the failures of `address` after a successful log-in.
    pub(crate) fn succeeded(&self, address: Option<IpAddr>) {
        self.table().remove(&Key::Address(address));
    }

    fn expire(&self, times: &mut VecDeque<Instant>, now: Instant) {
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.limits.window)
        {
            times.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(address: usize, credential: usize) -> LoginLimits {
        LoginLimits {
            failures_per_address: address,
            failures_per_credential: credential,
            window: Duration::from_secs(600),
        }
    }

    #[test]
    fn an_address_is_throttled_after_its_failures_and_cleared_by_success() {
        let t = LoginThrottle::new(limits(2, 100));
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        t.failed(a, "x1");
        assert!(t.check(a, "x2").is_ok());
        t.failed(a, "x2");
        let refused = t.check(a, "x3").unwrap_err();
        assert_eq!(refused.by, "address");
        assert!(refused.retry_after >= Duration::from_secs(1));
        assert!(t.check(b, "x3").is_ok(), "another address is not throttled");
        t.succeeded(a);
        assert!(t.check(a, "x3").is_ok());
    }

    #[test]
    fn a_credential_is_throttled_from_any_address() {
        let t = LoginThrottle::new(limits(100, 2));
        for last in 1..=2u8 {
            t.failed(Some(IpAddr::from([10, 0, 0, last])), "guess");
        }
        let refused = t
            .check(Some(IpAddr::from([10, 0, 0, 9])), "guess")
            .unwrap_err();
        assert_eq!(refused.by, "credential");
        assert!(t.check(Some(IpAddr::from([10, 0, 0, 9])), "other").is_ok());
    }

    #[test]
    fn the_table_stays_bounded() {
        let t = LoginThrottle::new(limits(5, 5));
        for i in 0..(MAX_KEYS as u32 / 2 + 50) {
            t.failed(Some(IpAddr::from(i.to_be_bytes())), &i.to_string());
        }
        assert!(t.table().len() <= MAX_KEYS);
    }

    #[test]
    fn failures_leave_the_window() {
        let t = LoginThrottle::new(LoginLimits {
            failures_per_address: 1,
            failures_per_credential: 1,
            window: Duration::from_nanos(1),
        });
        t.failed(None, "x");
        // One nanosecond has passed by the time `check` reads the clock.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && t.check(None, "x").is_err() {}
        assert!(t.check(None, "x").is_ok());
    }
}
