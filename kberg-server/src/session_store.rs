//! [`SessionStore`]: 2025-11-25 sessions that another server instance can resume.
//!
//! A 2025-11-25 client keeps one `Mcp-Session-Id` for its whole connection. Behind a load
//! balancer that does not route by that id, the next request may reach an instance that never
//! saw the session. With a store in [`HttpConfig::session_store`](crate::HttpConfig), the
//! instance that initialized it writes what the handshake said, and any other instance
//! replays the handshake from it on the first request it gets, invisibly to the client.
//!
//! A session belongs to the principal that initialized it (see the HTTP layer: another
//! principal naming it gets `404`). The store keeps that owner beside the handshake, and a
//! resume is only made for the same principal: anyone else is told the session does not exist,
//! exactly as on the instance that created it, and the resumed session is owned as before.
//!
//! rmcp runs the handshake replay; this module adapts its store to one that knows owners and
//! speaks only JSON, so an implementation (a database table, a key-value store) needs no rmcp
//! type.
//!
//! A client's `DELETE` ends the session on the instance that answers it and removes it from
//! the store; another instance may still hold it open. The specification asks that every
//! request naming a terminated session be answered `404`, so an instance looks again in the
//! store ([`Recheck`]) at each session it holds that is known to be there (resumed from it, or
//! stored by its `initialize`) once the last look is older than
//! [`HttpConfig::session_recheck_interval`](crate::HttpConfig) (default 1 s): when the store no
//! longer has it, the session ends here too. Why a look rather than a notice from the instance
//! that ended it (a list of ended ids, a notification channel): the store is the one thing all
//! instances already share, a look needs nothing more of its implementation, and it also
//! catches a session the store dropped for its own reasons (expiry); what it costs is one
//! `load` per session per interval while the session is in use, and an idle session costs
//! nothing. A session whose store write failed, and every session without a store, is never
//! looked at: it lives on this instance only. A look that fails or does not answer
//! within [`RECHECK_TIMEOUT`] ends nothing (a store outage must not end live sessions): the
//! session goes on, a warning is logged, and the next look comes one interval (at least
//! [`RECHECK_TIMEOUT`]) later, so a dead store holds up a session's requests (those arriving
//! during the look) for at most [`RECHECK_TIMEOUT`] once per pause, never each request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rmcp::transport::streamable_http_server::session::store::{
    SessionState, SessionStore as RmcpSessionStore, SessionStoreError,
};

use crate::handler::REQUEST_PRINCIPAL;

/// One session as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// The id of the principal that initialized the session.
    pub owner: String,
    /// The client's `initialize` parameters, as JSON (replayed on a resume).
    pub initialize: serde_json::Value,
}

/// Why a store could not answer (a database error, an unreachable server).
pub type SessionStoreFailure = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Sessions shared by several server instances (a database table, a key-value store).
///
/// What the store no longer has is ended: an instance that holds the session open ends it at
/// its next look (see [`HttpConfig::session_recheck_interval`](crate::HttpConfig)). So a store
/// keeps a session until its [`delete`](SessionStore::delete), or until the session has been
/// unused for about the instances' `session_idle_timeout` (a store that drops sessions sooner
/// ends them sooner).
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// The session `id`, if the store has it. Called to resume a session, and to look again
    /// at one this instance holds (at most once per session per recheck interval).
    async fn load(&self, id: &str) -> Result<Option<StoredSession>, SessionStoreFailure>;
    /// Keeps the session `id` (written once, after its handshake).
    async fn store(&self, id: &str, session: &StoredSession) -> Result<(), SessionStoreFailure>;
    /// Forgets the session `id` (its client ended it).
    async fn delete(&self, id: &str) -> Result<(), SessionStoreFailure>;
}

/// Which principal owns each live session of one HTTP endpoint (the guard layer's map).
pub(crate) type SessionOwners = Arc<Mutex<HashMap<String, SessionOwner>>>;

/// How long the owner of a session that is not (or not yet) open is kept: a resumed session's
/// owner is recorded here just before rmcp opens the session, and must outlast that gap.
pub(crate) const OWNER_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// The owner of one session, and when it was recorded.
#[derive(Debug, Clone)]
pub(crate) struct SessionOwner {
    /// The principal's id.
    pub(crate) principal: String,
    /// When the owner was recorded (see [`OWNER_GRACE`]).
    pub(crate) since: std::time::Instant,
    /// For a session known to be in the store (resumed from it, or stored by its
    /// `initialize` here): when it was last seen there. `None`: no store, or the store never
    /// had it; nothing is looked up for its requests.
    pub(crate) recheck: Option<Arc<Recheck>>,
}

impl SessionOwner {
    /// `principal`, recorded now, of a session that is not in a store.
    pub(crate) fn now(principal: String) -> Self {
        Self {
            principal,
            since: std::time::Instant::now(),
            recheck: None,
        }
    }

    /// `principal`, recorded now, of a session the store has just been seen to hold.
    pub(crate) fn stored(principal: String) -> Self {
        Self {
            recheck: Some(Arc::new(Recheck::new())),
            ..Self::now(principal)
        }
    }

    /// Whether it was recorded within [`OWNER_GRACE`] (its session may be about to open).
    pub(crate) fn is_recent(&self) -> bool {
        self.since.elapsed() < OWNER_GRACE
    }
}

/// How long a look at the store for a session this instance holds waits for the answer. A
/// store slower than this is taken as failing for that look: the session goes on (see the
/// module documentation).
pub(crate) const RECHECK_TIMEOUT: Duration = Duration::from_millis(500);

/// The looks at the store for one session this instance holds: when it was last seen there,
/// and the one look that may run at a time (a session's concurrent requests wait for it and
/// share its answer rather than each asking the store).
#[derive(Debug)]
pub(crate) struct Recheck {
    last: Mutex<Look>,
    running: tokio::sync::Mutex<()>,
}

/// What the last look at the store found.
#[derive(Debug, Clone, Copy)]
struct Look {
    /// When the last look that found the session began (or when the session was loaded or
    /// stored); after a failed look, when it failed.
    at: Instant,
    /// The last look failed (the store erred or was too slow): the next one waits
    /// [`RECHECK_TIMEOUT`] at least.
    failed: bool,
    /// The store no longer has the session: it has ended.
    gone: bool,
}

impl Look {
    /// Whether no new look is due at `now`.
    fn fresh(&self, now: Instant, interval: Duration) -> bool {
        let pause = if self.failed {
            interval.max(RECHECK_TIMEOUT)
        } else {
            interval
        };
        now.saturating_duration_since(self.at) < pause
    }
}

impl Recheck {
    /// A session seen in the store just now.
    fn new() -> Self {
        Self {
            last: Mutex::new(Look {
                at: Instant::now(),
                failed: false,
                gone: false,
            }),
            running: tokio::sync::Mutex::new(()),
        }
    }

    fn last(&self) -> Look {
        // A plain value written in single statements; a poisoned lock holds a whole one.
        *self.last.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the session `id` may still be served: `false` once `store` has been seen not to
    /// hold it. Looks in `store` only when the last look is older than `interval`, at most one
    /// look at a time (a request that waited for another's look takes its answer when that look
    /// began after this request arrived). A failed or slow look answers `true`.
    pub(crate) async fn still_stored(
        &self,
        store: &dyn SessionStore,
        id: &str,
        interval: Duration,
    ) -> bool {
        let arrived = Instant::now();
        let last = self.last();
        if last.gone {
            return false;
        }
        if last.fresh(arrived, interval) {
            return true;
        }
        let _one_look = self.running.lock().await;
        let last = self.last();
        if last.gone {
            return false;
        }
        // A look that began after this request arrived has seen at least what the request
        // could have; one within the interval is as good as this request's own would be.
        if last.at > arrived || last.fresh(Instant::now(), interval) {
            return true;
        }
        let began = Instant::now();
        let look = match tokio::time::timeout(RECHECK_TIMEOUT, store.load(id)).await {
            Ok(Ok(stored)) => Look {
                at: began,
                failed: false,
                gone: stored.is_none(),
            },
            Ok(Err(e)) => {
                tracing::warn!(error = ?e.to_string(), "the session store could not be asked whether a session still exists; it goes on");
                Look {
                    at: Instant::now(),
                    failed: true,
                    gone: false,
                }
            }
            Err(_) => {
                tracing::warn!(
                    timeout_ms = RECHECK_TIMEOUT.as_millis() as u64,
                    "the session store did not answer in time whether a session still exists; it goes on"
                );
                Look {
                    at: Instant::now(),
                    failed: true,
                    gone: false,
                }
            }
        };
        if look.gone {
            tracing::debug!("a session ended elsewhere (no longer in the session store) ends here");
        }
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = look;
        !look.gone
    }
}

/// rmcp's store over a [`SessionStore`]: writes the owner of the request being served, and
/// resumes a session only for its owner, recording the owner for the guard layer.
pub(crate) struct OwnedSessions {
    pub(crate) store: Arc<dyn SessionStore>,
    pub(crate) owners: SessionOwners,
}

fn request_principal() -> Option<String> {
    REQUEST_PRINCIPAL.try_with(|p| p.id.clone()).ok()
}

#[async_trait]
impl RmcpSessionStore for OwnedSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        // Outside a request nobody can own the resumed session: nothing is resumed.
        let Some(caller) = request_principal() else {
            return Ok(None);
        };
        let Some(stored) = self.store.load(session_id).await? else {
            return Ok(None);
        };
        if stored.owner != caller {
            tracing::warn!(principal = ?caller, "refused to resume another principal's session");
            return Ok(None);
        }
        let params = serde_json::from_value(stored.initialize)?;
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session_id.to_string(), SessionOwner::stored(caller));
        Ok(Some(SessionState::new(params)))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let Some(owner) = request_principal() else {
            return Err("a session is stored only while its initialize request is served".into());
        };
        let session = StoredSession {
            owner,
            initialize: serde_json::to_value(&state.initialize_params)?,
        };
        self.store.store(session_id, &session).await?;
        // In the store now: from here on this instance looks there for it (see `Recheck`).
        // The guard records the owner again when the `initialize` is answered, keeping this.
        let owner = session.owner;
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session_id.to_string(), SessionOwner::stored(owner));
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        // Within a request, only the session's owner ends a stored session (another replica's
        // session is not in this one's owner map, so the guard could not refuse it).
        if let Some(caller) = request_principal()
            && let Some(stored) = self.store.load(session_id).await?
            && stored.owner != caller
        {
            tracing::warn!(principal = ?caller, "refused to delete another principal's stored session");
            return Ok(());
        }
        self.store.delete(session_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kberg_core::Principal;

    #[derive(Default)]
    struct Memory(Mutex<HashMap<String, StoredSession>>);

    #[async_trait]
    impl SessionStore for Memory {
        async fn load(&self, id: &str) -> Result<Option<StoredSession>, SessionStoreFailure> {
            Ok(self
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .cloned())
        }
        async fn store(&self, id: &str, s: &StoredSession) -> Result<(), SessionStoreFailure> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id.into(), s.clone());
            Ok(())
        }
        async fn delete(&self, id: &str) -> Result<(), SessionStoreFailure> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
            Ok(())
        }
    }

    fn state() -> SessionState {
        let params = serde_json::from_value(serde_json::json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}
        }))
        .expect("valid initialize parameters");
        SessionState::new(params)
    }

    async fn as_principal<T>(id: &str, f: impl std::future::Future<Output = T>) -> T {
        REQUEST_PRINCIPAL
            .scope(Arc::new(Principal::new(id)), f)
            .await
    }

    /// A store whose `load` counts its calls and answers what `answer` says, or never.
    struct Looked {
        loads: std::sync::atomic::AtomicUsize,
        answer: Option<Result<bool, &'static str>>,
    }

    impl Looked {
        fn new(answer: Option<Result<bool, &'static str>>) -> Self {
            Self {
                loads: Default::default(),
                answer,
            }
        }
        fn loads(&self) -> usize {
            self.loads.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl SessionStore for Looked {
        async fn load(&self, _: &str) -> Result<Option<StoredSession>, SessionStoreFailure> {
            self.loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match self.answer {
                None => std::future::pending().await,
                Some(Err(e)) => Err(e.into()),
                Some(Ok(held)) => Ok(held.then(|| StoredSession {
                    owner: "alice".into(),
                    initialize: serde_json::json!({}),
                })),
            }
        }
        async fn store(&self, _: &str, _: &StoredSession) -> Result<(), SessionStoreFailure> {
            Ok(())
        }
        async fn delete(&self, _: &str) -> Result<(), SessionStoreFailure> {
            Ok(())
        }
    }

    /// Requests of one session that arrive while a look is due wait for one look and share
    /// its answer: the store is asked once, not once per request.
    #[tokio::test]
    async fn concurrent_requests_share_one_look() {
        for held in [true, false] {
            let store = Looked::new(Some(Ok(held)));
            let recheck = Recheck::new();
            // A look is under way: the requests arrive and wait for it.
            let running = recheck.running.lock().await;
            let mut waiting: Vec<_> = (0..3)
                .map(|_| Box::pin(recheck.still_stored(&store, "s1", Duration::ZERO)))
                .collect();
            for request in &mut waiting {
                assert!(futures::poll!(request.as_mut()).is_pending());
            }
            drop(running);
            let answers = futures::future::join_all(waiting).await;
            assert_eq!(answers, [held; 3]);
            assert_eq!(store.loads(), 1, "one look for the three requests");
            // Interval zero: a request arriving after that look began looks again, unless
            // the session is known to be gone.
            assert_eq!(
                recheck.still_stored(&store, "s1", Duration::ZERO).await,
                held
            );
            assert_eq!(store.loads(), if held { 2 } else { 1 });
        }
    }

    /// Within the interval the store is not asked; a look that errs or does not answer ends
    /// nothing.
    #[tokio::test(start_paused = true)]
    async fn a_look_is_made_once_per_interval_and_a_failed_one_ends_nothing() {
        let store = Looked::new(Some(Ok(true)));
        let recheck = Recheck::new();
        assert!(
            recheck
                .still_stored(&store, "s1", Duration::from_secs(3600))
                .await
        );
        assert_eq!(store.loads(), 0, "seen in the store just now");

        let failing = Looked::new(Some(Err("the database is unreachable")));
        assert!(recheck.still_stored(&failing, "s1", Duration::ZERO).await);
        assert_eq!(failing.loads(), 1);
        assert!(recheck.last().failed);

        // A store that never answers: the look gives up after `RECHECK_TIMEOUT` (the paused
        // clock gets there at once) and the session goes on.
        let dead = Looked::new(None);
        let recheck = Recheck::new();
        assert!(recheck.still_stored(&dead, "s1", Duration::ZERO).await);
        assert_eq!(dead.loads(), 1);
        let last = recheck.last();
        assert!(last.failed && !last.gone);
    }

    /// After a failed look the next waits at least `RECHECK_TIMEOUT`, so a dead store holds
    /// up one request per pause rather than each; after one that answered, the interval.
    #[test]
    fn a_failed_look_pauses_the_next_one() {
        let at = Instant::now();
        let look = |failed| Look {
            at,
            failed,
            gone: false,
        };
        let soon = at + RECHECK_TIMEOUT / 2;
        let later = at + RECHECK_TIMEOUT * 2;
        assert!(look(true).fresh(soon, Duration::ZERO));
        assert!(!look(true).fresh(later, Duration::ZERO));
        assert!(look(true).fresh(later, RECHECK_TIMEOUT * 4));
        assert!(!look(false).fresh(soon, Duration::ZERO));
        assert!(look(false).fresh(soon, RECHECK_TIMEOUT));
        assert!(!look(false).fresh(later, RECHECK_TIMEOUT));
        // A clock reading before the look (another thread's) is within any interval but zero.
        assert!(!look(false).fresh(at, Duration::ZERO));
    }

    #[tokio::test]
    async fn a_session_resumes_for_its_owner_only() {
        let owners = SessionOwners::default();
        let store = OwnedSessions {
            store: Arc::new(Memory::default()),
            owners: Arc::clone(&owners),
        };
        // Never stored outside a request (no owner to record).
        assert!(store.store("s1", &state()).await.is_err());
        as_principal("alice", store.store("s1", &state()))
            .await
            .expect("stored");
        assert!(
            store.load("s1").await.expect("loads").is_none(),
            "no principal"
        );
        assert!(
            as_principal("bob", store.load("s1"))
                .await
                .expect("loads")
                .is_none(),
            "another principal is told it does not exist"
        );
        {
            // Storing it recorded its owner, and that it is in the store (its recheck); the
            // refused loads recorded nobody.
            let owners = owners.lock().expect("lock");
            assert_eq!(owners.len(), 1);
            let owner = owners.get("s1").expect("recorded by the store");
            assert_eq!(owner.principal, "alice");
            assert!(owner.recheck.is_some());
        }
        let resumed = as_principal("alice", store.load("s1"))
            .await
            .expect("loads");
        assert_eq!(
            resumed.map(|s| s.initialize_params.client_info.name),
            Some("t".to_string())
        );
        assert_eq!(
            owners
                .lock()
                .expect("lock")
                .get("s1")
                .map(|o| o.principal.as_str()),
            Some("alice")
        );
        // Another principal cannot end it; its owner can.
        as_principal("bob", store.delete("s1"))
            .await
            .expect("answers");
        assert!(
            as_principal("alice", store.load("s1"))
                .await
                .expect("loads")
                .is_some(),
            "another principal deleted it"
        );
        as_principal("alice", store.delete("s1"))
            .await
            .expect("deleted");
        assert!(
            as_principal("alice", store.load("s1"))
                .await
                .expect("loads")
                .is_none()
        );
    }
}
