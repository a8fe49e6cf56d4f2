//! Resuming sessions from a session store counts against `max_sessions` and the principal's
//! share like an `initialize`, also when the resumes arrive together (each checked the limit
//! before any of them had opened its session, and all went through), and a `DELETE`, which
//! resumes nothing, is never refused by those limits.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::*;
use futures::StreamExt;
use kberg_server::{Limits, SessionStore, SessionStoreFailure, StoredSession};
use serde_json::json;

/// [`SharedStore`] whose `load` waits, while `gated` is set, until [`GatedStore::open`].
struct GatedStore {
    inner: SharedStore,
    gated: AtomicBool,
    waiting: AtomicUsize,
    arrived: tokio::sync::Notify,
    gate: tokio::sync::Semaphore,
}

impl Default for GatedStore {
    fn default() -> Self {
        Self {
            inner: SharedStore::default(),
            gated: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            arrived: tokio::sync::Notify::new(),
            gate: tokio::sync::Semaphore::new(0),
        }
    }
}

impl GatedStore {
    fn open(&self) {
        if self.gated.swap(false, Ordering::SeqCst) {
            // Each load gives its permit back when it passes.
            self.gate.add_permits(64);
        }
    }
}

#[async_trait::async_trait]
impl SessionStore for GatedStore {
    async fn load(&self, id: &str) -> Result<Option<StoredSession>, SessionStoreFailure> {
        if self.gated.load(Ordering::SeqCst) {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            self.arrived.notify_one();
            let _pass = self.gate.acquire().await;
        }
        self.inner.load(id).await
    }
    async fn store(&self, id: &str, s: &StoredSession) -> Result<(), SessionStoreFailure> {
        self.inner.store(id, s).await
    }
    async fn delete(&self, id: &str) -> Result<(), SessionStoreFailure> {
        self.inner.delete(id).await
    }
}

/// Instance A with a share of one session per principal, B with room for many.
async fn pair(store: &Arc<GatedStore>) -> (TestServer, TestServer) {
    let config = |share: usize| {
        kberg_testkit::serve::loopback()
            .auth(auth())
            .limits(
                Limits::default()
                    .max_sessions(8)
                    .max_sessions_per_principal(share),
            )
            .session_store(Arc::clone(store) as Arc<dyn SessionStore>)
    };
    (start_config(config(1)).await, start_config(config(8)).await)
}

#[tokio::test]
async fn resumes_arriving_together_keep_to_the_principals_share() {
    let store = Arc::new(GatedStore::default());
    let (a, b) = pair(&store).await;
    let on_a = Raw::new(&a.url, Some(READER));
    let on_b = Raw::new(&b.url, Some(READER));
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(on_b.initialize().await);
    }

    // The three name their sessions on A at once; the store holds each resume until every
    // request is either answered or resuming.
    store.gated.store(true, Ordering::SeqCst);
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let mut requests: futures::stream::FuturesUnordered<_> = sessions
        .iter()
        .map(|sid| on_a.post(list.clone(), Some(sid)))
        .collect();
    let mut statuses = Vec::new();
    while statuses.len() < sessions.len() {
        tokio::select! {
            Some(r) = requests.next() => statuses.push(r.status),
            () = store.arrived.notified() => {}
        }
        if store.waiting.load(Ordering::SeqCst) + statuses.len() >= sessions.len() {
            store.open();
        }
    }
    statuses.sort_unstable();
    assert_eq!(
        statuses,
        [200, 503, 503],
        "one session of the reader's on A"
    );
}

#[tokio::test]
async fn a_delete_is_not_refused_by_the_session_limits() {
    let store = Arc::new(GatedStore::default());
    let (a, b) = pair(&store).await;
    let on_a = Raw::new(&a.url, Some(READER));
    let on_b = Raw::new(&b.url, Some(READER));
    let from_b = on_b.initialize().await;
    let _own = on_a.initialize().await;
    // The reader holds its one session on A; it still ends its session of B's there.
    let r = on_a.delete(&from_b).await;
    assert_eq!(r.status, 200, "the owner's DELETE at its share: {}", r.text);
    let r = on_a.delete(&from_b).await;
    assert_eq!(r.status, 404, "and again: {}", r.text);
}
