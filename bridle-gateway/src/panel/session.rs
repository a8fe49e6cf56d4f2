//! Server-side sessions: the browser holds only a random session id in an HttpOnly cookie;
//! the admin's credential stays here, wiped from memory when the session ends.
//!
//! Sessions are kept by the SHA-256 digest of their id, so the table never holds a cookie value
//! a memory dump could replay. A session ends at log-out, after its absolute lifetime, after
//! the idle timeout, when the admin API stops accepting its credential, or when the table is
//! full and it is the least recently used. The table lives in memory: a restart logs everyone
//! out, which is the safe direction.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::config::PanelConfig;

/// A logged-in admin, as page handlers see it.
#[derive(Clone)]
pub(crate) struct SignedIn {
    /// The admin's name.
    pub(crate) admin: String,
    /// The admin's credential, sent to the admin API as `Bearer`.
    pub(crate) credential: Zeroizing<String>,
    /// Whether this admin may change anything.
    pub(crate) may_change: bool,
}

impl std::fmt::Debug for SignedIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignedIn")
            .field("admin", &self.admin)
            .field("may_change", &self.may_change)
            .finish_non_exhaustive()
    }
}

struct Session {
    who: SignedIn,
    created: Instant,
    last_seen: Instant,
}

/// The sessions of this process.
pub(crate) struct SessionStore {
    sessions: Mutex<HashMap<[u8; 32], Session>>,
    lifetime: Duration,
    idle: Duration,
    max: usize,
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    #[error("no randomness for a session id: {0}")]
    Random(String),
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl SessionStore {
    pub(crate) fn new(config: &PanelConfig) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            lifetime: config.session_lifetime,
            idle: config.idle_timeout,
            max: config.max_sessions,
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        // A poisoned lock only means another request panicked mid-update; the table itself is
        // still a valid map.
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens a session and returns its id (the cookie value).
    pub(crate) fn open(&self, who: SignedIn) -> Result<String, SessionError> {
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(|e| SessionError::Random(e.to_string()))?;
        let id = URL_SAFE_NO_PAD.encode(raw);
        let now = Instant::now();
        let mut table = self.table();
        self.sweep(&mut table, now);
        while table.len() >= self.max {
            let oldest = table
                .iter()
                .min_by_key(|(_, s)| s.last_seen)
                .map(|(k, _)| *k);
            match oldest {
                Some(k) => {
                    table.remove(&k);
                }
                None => break,
            }
        }
        tracing::info!(admin = %who.admin, "panel session opened");
        table.insert(
            digest(&id),
            Session {
                who,
                created: now,
                last_seen: now,
            },
        );
        Ok(id)
    }

    /// The session with this id, if it is still alive (which counts as use).
    pub(crate) fn get(&self, id: &str) -> Option<SignedIn> {
        let now = Instant::now();
        let key = digest(id);
        let mut table = self.table();
        let alive = table.get(&key).map(|s| self.alive(s, now))?;
        if !alive {
            if let Some(s) = table.remove(&key) {
                tracing::info!(admin = %s.who.admin, "panel session expired");
            }
            return None;
        }
        let session = table.get_mut(&key)?;
        session.last_seen = now;
        Some(session.who.clone())
    }

    /// Whether the session with this id is still alive, without counting as use (a live
    /// stream asks this now and then, and must not keep an idle session open).
    pub(crate) fn is_alive(&self, id: &str) -> bool {
        self.peek(id).is_some()
    }

    /// The session with this id, if it is still alive, without counting as use: for what a
    /// page asks on its own (a live list fetching its rows again), which must not keep an idle
    /// session open.
    pub(crate) fn peek(&self, id: &str) -> Option<SignedIn> {
        let now = Instant::now();
        self.table()
            .get(&digest(id))
            .filter(|s| self.alive(s, now))
            .map(|s| s.who.clone())
    }

    /// Ends the session with this id (log-out, or a credential the API no longer accepts).
    pub(crate) fn end(&self, id: &str) {
        if let Some(s) = self.table().remove(&digest(id)) {
            tracing::info!(admin = %s.who.admin, "panel session ended");
        }
    }

    fn alive(&self, s: &Session, now: Instant) -> bool {
        now.duration_since(s.created) < self.lifetime && now.duration_since(s.last_seen) < self.idle
    }

    fn sweep(&self, table: &mut HashMap<[u8; 32], Session>, now: Instant) {
        table.retain(|_, s| self.alive(s, now));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn who(name: &str) -> SignedIn {
        SignedIn {
            admin: name.into(),
            credential: Zeroizing::new(format!("{name}-credential")),
            may_change: true,
        }
    }

    #[test]
    fn sessions_open_end_and_are_bounded() {
        let config = PanelConfig {
            max_sessions: 2,
            ..PanelConfig::default()
        };
        let store = SessionStore::new(&config);
        let a = store.open(who("a")).unwrap();
        let b = store.open(who("b")).unwrap();
        assert_ne!(a, b);
        assert_eq!(store.get(&a).unwrap().admin, "a");
        // `b` is now the least recently used; a third session pushes it out.
        let c = store.open(who("c")).unwrap();
        assert!(store.get(&b).is_none());
        assert_eq!(store.get(&c).unwrap().admin, "c");
        store.end(&a);
        assert!(store.get(&a).is_none());
        assert!(store.get("not-a-session").is_none());
        assert!(!format!("{:?}", store.get(&c).unwrap()).contains("credential"));
    }

    #[test]
    fn an_idle_session_expires() {
        let config = PanelConfig::default()
            .session_lifetimes(Duration::from_secs(3600), Duration::from_nanos(1));
        let store = SessionStore::new(&config);
        let a = store.open(who("a")).unwrap();
        // One nanosecond of idleness has passed by the time `get` reads the clock.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && store.get(&a).is_some() {}
        assert!(store.get(&a).is_none());
    }
}
