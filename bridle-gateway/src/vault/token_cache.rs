//! A bounded in-process cache of verified agent tokens.
//!
//! Without it, every MCP request with a vault-issued token is one database read on the blocking
//! pool (the token check), which costs more than the request's own work in the gateway. The
//! cache maps the keyed hash of a token that the database verified (never the token itself) to
//! its agent and version, and is trusted only as far as the vault's change signal is:
//!
//! - PostgreSQL: the replica's `LISTEN` connection on the vault's channel. The cache is used only
//!   while it is up: until it first listens, and from the moment it fails until it is re-made,
//!   every check reads the database, and the cache is emptied at both ends (notifications may
//!   have been missed). A token change on any replica (`agent_token_set`, `_rotate`, `_revoke`)
//!   drops that agent's entries when its notification arrives; a payload it does not recognise
//!   empties the cache;
//! - SQLite: the token-change marker beside the database ([`super::marker`]). The cache is used
//!   only while the marker's stamp is settled and the one it saw when it last emptied itself; a
//!   new stamp empties it, and a young or missing one bypasses it;
//! - a token change made through this handle drops that agent's entries at once;
//! - a check that read the database before an invalidation does not store what it read (a
//!   generation number), so a revocation is never undone by a slow check;
//! - an entry lasts no longer than the token's own validity (a rotation's grace) and at most
//!   [`MAX_AGE`], which bounds how long a change the signal missed (a PostgreSQL connection that
//!   died without the client noticing, a SQLite writer that died between its commit and its
//!   marker) can leave a revoked token accepted;
//! - at most [`CAPACITY`] entries are kept; the oldest goes first.
//!
//! Unknown tokens are never cached (a new token must work at once), so a guessed token always
//! costs a database read.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

#[cfg(feature = "postgres")]
use bridle_rules::db::postgres::{LISTENING, NOT_LISTENING};
#[cfg(feature = "postgres")]
use tokio::sync::watch;

use super::marker::Stamp;
use super::tokens::AgentMatch;

/// How many verified tokens a replica keeps.
pub const CAPACITY: usize = 4096;
/// The longest an entry is trusted without reading the database again.
pub const MAX_AGE: Duration = Duration::from_secs(10);

/// What the cache of a vault in PostgreSQL knows of the vault's change notifications (see
/// `Vault::token_cache`).
#[cfg(feature = "postgres")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCacheStatus {
    /// Whether the listening connection is up, so the cache is in use.
    pub listening: bool,
    /// Vault change notifications heard (from any replica, this one included).
    pub changes_heard: u64,
    /// Times the listening connection failed (the cache was emptied and bypassed each time).
    pub interruptions: u64,
}

/// The result of a lookup.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Verified earlier and still trusted.
    Hit(AgentMatch),
    /// Not cached: read the database, then offer what it said with this generation.
    Miss(u64),
    /// The notifications cannot be trusted now: read the database, store nothing.
    Bypass,
}

struct Entry {
    agent: String,
    version: u64,
    /// Trusted while `now < fresh_until` (milliseconds).
    fresh_until: i64,
    /// Its place in `order`.
    seq: u64,
}

/// The cached tokens and what says whether they can be trusted.
#[derive(Default)]
struct CacheContents {
    /// Whether the change signal can be trusted now: the PostgreSQL listener is up, or the
    /// SQLite marker's stamp is settled and is `stamp`.
    trusted: bool,
    /// The SQLite marker's stamp the cache was emptied under.
    stamp: Option<Stamp>,
    /// Bumped by every invalidation; a miss's read is stored only under the same generation.
    generation: u64,
    entries: HashMap<String, Entry>,
    /// Insertion order for eviction, `(seq, hash)`; items whose entry went are skipped.
    order: VecDeque<(u64, String)>,
    seq: u64,
}

impl CacheContents {
    fn clear(&mut self) {
        self.generation += 1;
        self.entries.clear();
        self.order.clear();
    }

    fn forget_agent(&mut self, agent: &str) {
        self.generation += 1;
        self.entries.retain(|_, e| e.agent != agent);
    }

    /// Drops the queue's items whose entry went or was stored again, once they outnumber the
    /// entries two to one (amortised: afterwards the queue is as long as the map).
    fn compact(&mut self) {
        if self.order.len() > 2 * CAPACITY {
            let entries = &self.entries;
            self.order
                .retain(|(seq, hash)| entries.get(hash).is_some_and(|e| e.seq == *seq));
        }
    }

    fn evict_oldest(&mut self) {
        while let Some((seq, hash)) = self.order.pop_front() {
            if self.entries.get(&hash).is_some_and(|e| e.seq == seq) {
                self.entries.remove(&hash);
                return;
            }
        }
    }
}

/// The cache of one vault handle.
pub(crate) struct TokenCache {
    state: Mutex<CacheContents>,
    #[cfg(feature = "postgres")]
    status: watch::Sender<TokenCacheStatus>,
}

impl TokenCache {
    /// An empty cache, bypassed until [`LISTENING`] is heard or a settled marker stamp is seen.
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(CacheContents::default()),
            #[cfg(feature = "postgres")]
            status: watch::channel(TokenCacheStatus::default()).0,
        }
    }

    /// Follows its status.
    #[cfg(feature = "postgres")]
    pub(crate) fn status(&self) -> watch::Receiver<TokenCacheStatus> {
        self.status.subscribe()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CacheContents> {
        // A panic while holding the lock leaves a map that is still consistent; empty it anyway.
        self.state.lock().unwrap_or_else(|poisoned| {
            let mut s = poisoned.into_inner();
            s.clear();
            s
        })
    }

    /// What the cache says of the token whose keyed hash is `hash`, at `now` (milliseconds).
    pub(crate) fn lookup(&self, hash: &str, now: i64) -> Lookup {
        Self::lookup_in(&self.state(), hash, now)
    }

    /// [`Self::lookup`] for a SQLite vault, whose marker's stamp is `stamp` at `wall` (see
    /// [`super::marker`]): a stamp that is missing or not settled bypasses the cache (and
    /// forgets the last stamp, so that the next settled one empties it), one that differs from
    /// the last empties it.
    pub(crate) fn lookup_marked(
        &self,
        hash: &str,
        now: i64,
        stamp: Option<Stamp>,
        wall: std::time::SystemTime,
    ) -> Lookup {
        let mut s = self.state();
        match stamp.filter(|st| st.settled(wall)) {
            // The next settled stamp differs from `None`, which empties the cache.
            None => {
                s.trusted = false;
                s.stamp = None;
            }
            Some(st) if s.stamp != Some(st) => {
                s.clear();
                s.stamp = Some(st);
                s.trusted = true;
            }
            Some(_) => {}
        }
        Self::lookup_in(&s, hash, now)
    }

    fn lookup_in(s: &CacheContents, hash: &str, now: i64) -> Lookup {
        if !s.trusted {
            return Lookup::Bypass;
        }
        match s.entries.get(hash) {
            Some(e) if now < e.fresh_until => Lookup::Hit(AgentMatch {
                agent: e.agent.clone(),
                version: e.version,
            }),
            _ => Lookup::Miss(s.generation),
        }
    }

    /// Stores what the database said of `hash` (read under `generation`, at `now`), unless an
    /// invalidation came since or the notifications stopped being trusted.
    pub(crate) fn insert(
        &self,
        generation: u64,
        hash: &str,
        found: &AgentMatch,
        valid_until: Option<i64>,
        now: i64,
    ) {
        let mut s = self.state();
        if !s.trusted || s.generation != generation {
            return;
        }
        let max_age = i64::try_from(MAX_AGE.as_millis()).unwrap_or(i64::MAX);
        let fresh_until = valid_until.map_or(now.saturating_add(max_age), |u| {
            u.min(now.saturating_add(max_age))
        });
        if !s.entries.contains_key(hash) && s.entries.len() >= CAPACITY {
            s.evict_oldest();
        }
        s.compact();
        s.seq += 1;
        let seq = s.seq;
        s.order.push_back((seq, hash.to_owned()));
        s.entries.insert(
            hash.to_owned(),
            Entry {
                agent: found.agent.clone(),
                version: found.version,
                fresh_until,
                seq,
            },
        );
    }

    /// Drops every entry of `agent` (a change made through this handle; on PostgreSQL, before
    /// its own notification comes back).
    pub(crate) fn forget_agent(&self, agent: &str) {
        self.state().forget_agent(agent);
    }

    /// Applies one message of the vault's channel: a change, [`LISTENING`] or
    /// [`NOT_LISTENING`].
    #[cfg(feature = "postgres")]
    pub(crate) fn on_message(&self, payload: &str) {
        let mut s = self.state();
        match payload {
            LISTENING => {
                s.clear();
                s.trusted = true;
                drop(s);
                self.status.send_modify(|st| st.listening = true);
            }
            NOT_LISTENING => self.lost_with(s),
            change => {
                match change.split_once(' ') {
                    Some((
                        "agent_token_set" | "agent_token_rotate" | "agent_token_revoke",
                        agent,
                    )) if !agent.is_empty() => {
                        s.forget_agent(agent);
                    }
                    // Secret changes leave tokens alone.
                    Some(("create" | "rotate" | "revoke" | "import" | "expire", _)) => {}
                    _ => {
                        tracing::warn!(change, "unrecognised vault change; token cache emptied");
                        s.clear();
                    }
                }
                drop(s);
                self.status.send_modify(|st| st.changes_heard += 1);
            }
        }
    }

    /// The notifications stopped (the listener failed or ended): empty the cache and bypass it.
    #[cfg(feature = "postgres")]
    pub(crate) fn lost(&self) {
        let s = self.state();
        self.lost_with(s);
    }

    #[cfg(feature = "postgres")]
    fn lost_with(&self, mut s: std::sync::MutexGuard<'_, CacheContents>) {
        s.clear();
        s.trusted = false;
        drop(s);
        self.status.send_modify(|st| {
            st.listening = false;
            st.interruptions += 1;
        });
    }
}

/// Feeds a cache from the vault's channel until `stop`, or until the listener ends (then the
/// cache is left bypassed).
#[cfg(feature = "postgres")]
pub(crate) async fn follow(
    cache: std::sync::Arc<TokenCache>,
    mut messages: tokio::sync::mpsc::UnboundedReceiver<String>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let message = tokio::select! {
            () = stop.cancelled() => return,
            m = messages.recv() => m,
        };
        match message {
            Some(payload) => cache.on_message(&payload),
            None => {
                cache.lost();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(agent: &str) -> AgentMatch {
        AgentMatch {
            agent: agent.into(),
            version: 1,
        }
    }

    /// A cache whose change signal is trusted.
    fn trusted() -> TokenCache {
        let c = TokenCache::new();
        c.state().trusted = true;
        c
    }

    fn cache_it(c: &TokenCache, hash: &str, agent: &str, valid_until: Option<i64>) {
        let Lookup::Miss(g) = c.lookup(hash, 1000) else {
            panic!("expected a miss");
        };
        c.insert(g, hash, &found(agent), valid_until, 1000);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn bypassed_until_listening_and_after_the_connection_fails() {
        let c = TokenCache::new();
        assert_eq!(c.lookup("h", 1000), Lookup::Bypass);
        c.insert(0, "h", &found("a"), None, 1000);
        c.on_message(LISTENING);
        assert_eq!(
            c.lookup("h", 1000),
            Lookup::Miss(1),
            "nothing stored while bypassed"
        );
        cache_it(&c, "h", "a", None);
        assert_eq!(c.lookup("h", 1001), Lookup::Hit(found("a")));
        c.on_message(NOT_LISTENING);
        assert_eq!(c.lookup("h", 1001), Lookup::Bypass);
        assert!(!c.status().borrow().listening);
        assert_eq!(c.status().borrow().interruptions, 1);
        c.on_message(LISTENING);
        assert!(
            matches!(c.lookup("h", 1001), Lookup::Miss(_)),
            "emptied: a revocation may have been missed while not listening"
        );
        cache_it(&c, "h", "a", None);
        c.lost();
        assert_eq!(c.lookup("h", 1001), Lookup::Bypass);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_token_change_drops_only_that_agents_entries() {
        let c = trusted();
        cache_it(&c, "h1", "claude", None);
        cache_it(&c, "h2", "bot", None);
        c.on_message("agent_token_revoke claude");
        assert!(matches!(c.lookup("h1", 1001), Lookup::Miss(_)));
        assert_eq!(c.lookup("h2", 1001), Lookup::Hit(found("bot")));
        c.on_message("rotate gitea-token");
        assert_eq!(c.lookup("h2", 1001), Lookup::Hit(found("bot")));
        c.on_message("agent_token_rotate bot");
        assert!(matches!(c.lookup("h2", 1001), Lookup::Miss(_)));
        cache_it(&c, "h2", "bot", None);
        c.forget_agent("bot");
        assert!(matches!(c.lookup("h2", 1001), Lookup::Miss(_)));
        assert_eq!(c.status().borrow().changes_heard, 3);
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn an_unrecognised_change_empties_the_cache() {
        let c = trusted();
        cache_it(&c, "h1", "claude", None);
        for odd in ["something new", "agent_token_revoke ", ""] {
            c.on_message(odd);
            assert!(matches!(c.lookup("h1", 1001), Lookup::Miss(_)), "{odd:?}");
            cache_it(&c, "h1", "claude", None);
        }
    }

    #[test]
    fn a_read_from_before_an_invalidation_is_not_stored() {
        let c = trusted();
        let Lookup::Miss(g) = c.lookup("h", 1000) else {
            panic!("expected a miss");
        };
        c.forget_agent("claude");
        c.insert(g, "h", &found("claude"), None, 1000);
        assert!(matches!(c.lookup("h", 1001), Lookup::Miss(_)));
    }

    #[test]
    fn entries_end_with_the_tokens_validity_and_their_maximum_age() {
        let c = trusted();
        cache_it(&c, "grace", "claude", Some(1500));
        assert!(matches!(c.lookup("grace", 1499), Lookup::Hit(_)));
        assert!(matches!(c.lookup("grace", 1500), Lookup::Miss(_)));
        cache_it(&c, "long", "claude", None);
        let age = i64::try_from(MAX_AGE.as_millis()).unwrap_or(i64::MAX);
        assert!(matches!(c.lookup("long", 1000 + age - 1), Lookup::Hit(_)));
        assert!(matches!(c.lookup("long", 1000 + age), Lookup::Miss(_)));
    }

    #[test]
    fn at_most_capacity_entries_oldest_first() {
        let c = trusted();
        for i in 0..CAPACITY + 10 {
            cache_it(&c, &format!("h{i}"), "claude", None);
        }
        assert_eq!(c.state().entries.len(), CAPACITY);
        for i in 0..10 {
            assert!(matches!(c.lookup(&format!("h{i}"), 1001), Lookup::Miss(_)));
        }
        assert!(matches!(c.lookup("h10", 1001), Lookup::Hit(_)));
        let last = format!("h{}", CAPACITY + 9);
        assert!(matches!(c.lookup(&last, 1001), Lookup::Hit(_)));
        // Churn under the limit keeps the eviction queue bounded too.
        for _ in 0..3 {
            for i in 0..CAPACITY {
                cache_it(&c, &format!("x{i}"), "bot", None);
            }
            c.forget_agent("bot");
        }
        assert!(
            c.state().order.len() <= 3 * CAPACITY,
            "{}",
            c.state().order.len()
        );
    }

    /// The marker of a SQLite vault: a stamp settled at `WALL`, or one written just now.
    const WALL: std::time::Duration = std::time::Duration::from_secs(1_000_000);

    fn marked(c: &TokenCache, hash: &str, stamp: Option<Stamp>) -> Lookup {
        c.lookup_marked(
            hash,
            1000,
            stamp,
            std::time::UNIX_EPOCH + WALL + super::super::marker::SETTLE,
        )
    }

    #[test]
    fn a_sqlite_cache_is_trusted_only_under_one_settled_marker_stamp() {
        let c = TokenCache::new();
        let settled = Stamp::at(std::time::UNIX_EPOCH + WALL, 20);
        let rewritten = Stamp::at(std::time::UNIX_EPOCH + WALL, 21);
        let young = Stamp::at(
            std::time::UNIX_EPOCH + WALL + std::time::Duration::from_secs(1),
            20,
        );
        assert_eq!(marked(&c, "h", None), Lookup::Bypass, "no marker");
        assert_eq!(
            marked(&c, "h", Some(young)),
            Lookup::Bypass,
            "a young marker"
        );
        let Lookup::Miss(g) = marked(&c, "h", Some(settled)) else {
            panic!("a settled marker: the cache is used");
        };
        c.insert(g, "h", &found("claude"), None, 1000);
        assert_eq!(marked(&c, "h", Some(settled)), Lookup::Hit(found("claude")));
        // Another process rewrote the marker: a new stamp empties the cache.
        assert!(matches!(marked(&c, "h", Some(rewritten)), Lookup::Miss(_)));
        let Lookup::Miss(g) = marked(&c, "h", Some(rewritten)) else {
            panic!("a miss");
        };
        c.insert(g, "h", &found("claude"), None, 1000);
        assert_eq!(
            marked(&c, "h", Some(rewritten)),
            Lookup::Hit(found("claude"))
        );
        // A young marker (a change being made) empties and bypasses it, and so does a missing
        // one; what a check read while bypassed is not stored.
        for gone in [Some(young), None] {
            assert_eq!(marked(&c, "h", gone), Lookup::Bypass);
            c.insert(g, "h", &found("claude"), None, 1000);
            assert!(
                matches!(marked(&c, "h", Some(rewritten)), Lookup::Miss(_)),
                "emptied"
            );
            cache_it_marked(&c, "h", rewritten);
        }
        // A check that read before the marker changed cannot store what it read.
        let Lookup::Miss(g) = marked(&c, "other", Some(rewritten)) else {
            panic!("a miss");
        };
        assert!(matches!(
            marked(&c, "other", Some(settled)),
            Lookup::Miss(_)
        ));
        c.insert(g, "other", &found("bot"), None, 1000);
        assert!(matches!(
            marked(&c, "other", Some(settled)),
            Lookup::Miss(_)
        ));
    }

    fn cache_it_marked(c: &TokenCache, hash: &str, stamp: Stamp) {
        let Lookup::Miss(g) = marked(c, hash, Some(stamp)) else {
            panic!("expected a miss");
        };
        c.insert(g, hash, &found("claude"), None, 1000);
        assert_eq!(marked(c, hash, Some(stamp)), Lookup::Hit(found("claude")));
    }
}
