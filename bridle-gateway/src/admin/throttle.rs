//! Throttling of failed admin credentials: failures are counted per client address and per
//! credential tried, in a sliding window; past the limit, further attempts from that address
//! (or with that credential) are refused with 429 before the credential is even checked, so
//! guessing admin tokens costs the guesser the window, not the gateway a verify per try. The
//! admin API counts the bearer tokens it refuses ([`super::auth::require_admin`]), and the web
//! panel built over the same [`super::AdminState`] counts its failed log-ins in the very same
//! table: one admin listener, one count, so alternating between the log-in form and the API
//! buys no extra tries.
//!
//! The credential is counted by its SHA-256 digest (a wrong token is never kept in memory as
//! typed). A success clears nothing: its address's failures stay counted until they leave the
//! window, or a holder of any admin credential (a watcher's) could guess other admins' tokens
//! without end, succeeding with their own every few guesses. The table is bounded: past [`MAX_KEYS`]
//! keys the expired ones are swept, and if that is not enough the oldest key goes, so a flood
//! of addresses cannot grow it without end. (A counter of failures in a window is a few lines;
//! the rate-limiter crates meter every request instead, which is not what is wanted here.)
//!
//! The API admits a bearer token with [`LoginThrottle::admit`], which also counts the checks
//! under way: with as many failures and checks under way as the limit allows, a further attempt
//! waits for one of them to end (a failure then refuses it, a success lets it on), so guesses
//! sent all at once are not all checked because none had failed yet when each arrived.
//!
//! Behind a reverse proxy every client has the proxy's address: the per-address limit then
//! counts everybody's failures together, which errs on the safe side.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Failed credentials tolerated in a sliding window, per client address and per credential
/// tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoginLimits {
    /// Failures from one client address within `window` (default 10).
    pub failures_per_address: usize,
    /// Failures with one and the same credential within `window`, from any address (default 5).
    pub failures_per_credential: usize,
    /// How long a failure counts (default 15 minutes).
    pub window: Duration,
}

impl Default for LoginLimits {
    fn default() -> Self {
        Self {
            failures_per_address: 10,
            failures_per_credential: 5,
            window: Duration::from_secs(15 * 60),
        }
    }
}

impl LoginLimits {
    /// Limits of `per_address` and `per_credential` failures within `window`.
    pub fn new(per_address: usize, per_credential: usize, window: Duration) -> Self {
        Self {
            failures_per_address: per_address,
            failures_per_credential: per_credential,
            window,
        }
    }

    /// Whether the limits can be used: a zero count would refuse every attempt, a zero window
    /// none.
    pub fn is_usable(&self) -> bool {
        self.failures_per_address > 0 && self.failures_per_credential > 0 && !self.window.is_zero()
    }
}

/// The most keys (addresses plus credentials) remembered at once.
pub(crate) const MAX_KEYS: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Address(Option<IpAddr>),
    Credential([u8; 32]),
}

/// Which limit refused an attempt, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Throttled {
    /// `address` or `credential`.
    pub(crate) by: &'static str,
    /// When the oldest counted failure leaves the window (at least one second).
    pub(crate) retry_after: Duration,
}

/// The failed attempts against one admin listener: its API's refused bearer tokens and its
/// panel's failed log-ins.
pub(crate) struct LoginThrottle {
    limits: LoginLimits,
    failures: Mutex<HashMap<Key, VecDeque<Instant>>>,
    /// Attempts admitted by [`LoginThrottle::admit`] whose check is under way, per key. Locked
    /// after `failures` when both are.
    checking: Mutex<HashMap<Key, usize>>,
    /// Told whenever a check under way ends.
    settled: tokio::sync::Notify,
}

/// An attempt admitted to the credential check by [`LoginThrottle::admit`]; it counts as under
/// way until dropped, and as a failure once [`Attempt::failed`] says so.
pub(crate) struct Attempt<'a> {
    throttle: &'a LoginThrottle,
    keys: Vec<(Key, usize, &'static str)>,
}

impl Attempt<'_> {
    /// Counts the attempt as failed (its check is then no longer under way).
    pub(crate) fn failed(self) {
        self.throttle.count(&self.keys);
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        {
            let mut checking = self.throttle.checking();
            for (key, _, _) in &self.keys {
                if let Some(n) = checking.get_mut(key) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        checking.remove(key);
                    }
                }
            }
        }
        self.throttle.settled.notify_waiters();
    }
}

fn credential_key(token: &str) -> Key {
    Key::Credential(Sha256::digest(token.as_bytes()).into())
}

impl LoginThrottle {
    pub(crate) fn new(limits: LoginLimits) -> Self {
        Self {
            limits,
            failures: Mutex::new(HashMap::new()),
            checking: Mutex::new(HashMap::new()),
            settled: tokio::sync::Notify::new(),
        }
    }

    fn checking(&self) -> std::sync::MutexGuard<'_, HashMap<Key, usize>> {
        // A panic while holding the lock leaves counters, not a broken invariant.
        self.checking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Admits an attempt with `token` from `address` (`None`: from no client address, a call
    /// made in process, counted by its credential only) to the credential check, or refuses it
    /// (429) while one of its keys has as many failures in the window as its limit. While the failures and the checks under way of one of its keys
    /// reach that key's limit, it waits for a check to end first.
    pub(crate) async fn admit(
        &self,
        address: Option<IpAddr>,
        token: &str,
    ) -> Result<Attempt<'_>, Throttled> {
        self.admit_keys(self.keys(address.map(Some), token)).await
    }

    /// As [`Self::admit`] for the panel's log-in form, whose client address, when not known,
    /// is one address of its own (every client whose address is not known).
    #[cfg(feature = "panel")]
    pub(crate) async fn admit_form(
        &self,
        address: Option<IpAddr>,
        token: &str,
    ) -> Result<Attempt<'_>, Throttled> {
        self.admit_keys(self.keys(Some(address), token)).await
    }

    async fn admit_keys(
        &self,
        keys: Vec<(Key, usize, &'static str)>,
    ) -> Result<Attempt<'_>, Throttled> {
        loop {
            // Registered before the counts are read, so a check ending meanwhile wakes it.
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            {
                let now = Instant::now();
                let mut table = self.table();
                Self::check_in(&self.limits, &mut table, &keys, now)?;
                let mut checking = self.checking();
                let full = keys.iter().any(|(key, max, _)| {
                    let failed = table.get(key).map_or(0, VecDeque::len);
                    let under_way = checking.get(key).copied().unwrap_or(0);
                    failed.saturating_add(under_way) >= *max
                });
                if !full {
                    for (key, _, _) in &keys {
                        *checking.entry(key.clone()).or_insert(0) += 1;
                    }
                    return Ok(Attempt {
                        throttle: self,
                        keys,
                    });
                }
            }
            settled.await;
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<Key, VecDeque<Instant>>> {
        // A panic while holding the lock leaves counters, not a broken invariant.
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether an attempt from `address` with `token` may be checked now. `None` is one
    /// address of its own (every client whose address is not known). The listener admits
    /// attempts with [`Self::admit`] and [`Self::admit_form`]; this is the tests' view.
    #[cfg(test)]
    pub(crate) fn check(&self, address: Option<IpAddr>, token: &str) -> Result<(), Throttled> {
        self.check_keys(&self.keys(Some(address), token))
    }

    /// Counts a failed attempt (the tests' shortcut for an admitted attempt that failed).
    #[cfg(test)]
    pub(crate) fn failed(&self, address: Option<IpAddr>, token: &str) {
        self.count(&self.keys(Some(address), token));
    }

    /// The keys an attempt is counted under, with their limits: its address (unless there is
    /// none to count) and its credential.
    fn keys(
        &self,
        address: Option<Option<IpAddr>>,
        token: &str,
    ) -> Vec<(Key, usize, &'static str)> {
        let mut keys = Vec::with_capacity(2);
        if let Some(address) = address {
            keys.push((
                Key::Address(address),
                self.limits.failures_per_address,
                "address",
            ));
        }
        keys.push((
            credential_key(token),
            self.limits.failures_per_credential,
            "credential",
        ));
        keys
    }

    #[cfg(test)]
    fn check_keys(&self, keys: &[(Key, usize, &'static str)]) -> Result<(), Throttled> {
        Self::check_in(&self.limits, &mut self.table(), keys, Instant::now())
    }

    fn check_in(
        limits: &LoginLimits,
        table: &mut HashMap<Key, VecDeque<Instant>>,
        keys: &[(Key, usize, &'static str)],
        now: Instant,
    ) -> Result<(), Throttled> {
        for (key, max, by) in keys {
            let Some(times) = table.get_mut(key) else {
                continue;
            };
            expire(limits, times, now);
            if times.len() >= *max {
                let oldest = times.front().copied().unwrap_or(now);
                let left = limits.window.saturating_sub(now.duration_since(oldest));
                return Err(Throttled {
                    by,
                    retry_after: left.max(Duration::from_secs(1)),
                });
            }
        }
        Ok(())
    }

    fn count(&self, keys: &[(Key, usize, &'static str)]) {
        let now = Instant::now();
        let mut table = self.table();
        if table.len() + keys.len() > MAX_KEYS {
            table.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < self.limits.window)
            });
            while table.len() + keys.len() > MAX_KEYS {
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
        for (key, _, _) in keys {
            let times = table.entry(key.clone()).or_default();
            expire(&self.limits, times, now);
            times.push_back(now);
        }
    }
}

/// Drops the failures that left the window.
fn expire(limits: &LoginLimits, times: &mut VecDeque<Instant>, now: Instant) {
    while times
        .front()
        .is_some_and(|t| now.duration_since(*t) >= limits.window)
    {
        times.pop_front();
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
    fn an_address_is_throttled_after_its_failures() {
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

    #[tokio::test]
    async fn without_an_address_only_the_credential_counts() {
        let t = LoginThrottle::new(limits(1, 2));
        t.admit(None, "guess").await.unwrap().failed();
        assert!(t.check(None, "other").is_ok(), "no address was counted");
        t.admit(None, "guess").await.unwrap().failed();
        assert_eq!(t.admit(None, "guess").await.err().unwrap().by, "credential");
        assert!(t.admit(None, "other").await.is_ok());
    }

    #[tokio::test]
    async fn an_attempt_that_succeeds_is_not_counted() {
        let t = LoginThrottle::new(limits(1, 1));
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        for _ in 0..3 {
            drop(t.admit(a, "right").await.unwrap());
        }
        assert!(t.check(a, "right").is_ok());
        assert!(t.checking().is_empty(), "nothing is left under way");
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
