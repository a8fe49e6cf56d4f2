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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// The session `id`, if the store has it.
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
}

impl SessionOwner {
    /// `principal`, recorded now.
    pub(crate) fn now(principal: String) -> Self {
        Self {
            principal,
            since: std::time::Instant::now(),
        }
    }

    /// Whether it was recorded within [`OWNER_GRACE`] (its session may be about to open).
    pub(crate) fn is_recent(&self) -> bool {
        self.since.elapsed() < OWNER_GRACE
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
            tracing::warn!(principal = %caller, "refused to resume another principal's session");
            return Ok(None);
        }
        let params = serde_json::from_value(stored.initialize)?;
        self.owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session_id.to_string(), SessionOwner::now(caller));
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
        self.store.store(session_id, &session).await
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        // Within a request, only the session's owner ends a stored session (another replica's
        // session is not in this one's owner map, so the guard could not refuse it).
        if let Some(caller) = request_principal()
            && let Some(stored) = self.store.load(session_id).await?
            && stored.owner != caller
        {
            tracing::warn!(principal = %caller, "refused to delete another principal's stored session");
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
        assert!(owners.lock().expect("lock").is_empty());
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
