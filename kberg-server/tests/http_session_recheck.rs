//! A 2025-11-25 session shared by two instances through a session store ends on both when
//! its client ends it on one: the other instance looks again in the store at the sessions it
//! holds (`HttpConfig::session_recheck_interval`, zero here: on every request) and answers
//! `404` for one the store no longer has, as the specification requires of any request naming
//! a terminated session. A store that fails such a look ends nothing, only a session's owner
//! ends it, and a `DELETE` the store cannot serve ends nothing and is `503`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use kberg_server::{SessionStore, SessionStoreFailure, StoredSession};
use serde_json::json;

fn list() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
}

/// [`SharedStore`] whose `load` counts its calls and fails while `failing` is set, and whose
/// `delete` fails while `failing_delete` is.
#[derive(Default)]
struct FlakyStore {
    inner: SharedStore,
    failing: AtomicBool,
    failing_delete: AtomicBool,
    loads: AtomicUsize,
}

#[async_trait::async_trait]
impl SessionStore for FlakyStore {
    async fn load(&self, id: &str) -> Result<Option<StoredSession>, SessionStoreFailure> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err("the database is unreachable".into());
        }
        self.inner.load(id).await
    }
    async fn store(&self, id: &str, s: &StoredSession) -> Result<(), SessionStoreFailure> {
        self.inner.store(id, s).await
    }
    async fn delete(&self, id: &str) -> Result<(), SessionStoreFailure> {
        if self.failing_delete.load(Ordering::SeqCst) {
            return Err("the database is unreachable".into());
        }
        self.inner.delete(id).await
    }
}

/// Two instances sharing `store`, each looking in it on every request of a session it holds.
async fn pair(store: &Arc<FlakyStore>) -> (TestServer, TestServer) {
    let config = || {
        kberg_testkit::serve::loopback()
            .auth(auth())
            .session_store(Arc::clone(store) as Arc<dyn SessionStore>)
            .session_recheck_interval(Duration::ZERO)
    };
    (start_config(config()).await, start_config(config()).await)
}

#[tokio::test]
async fn a_delete_on_one_instance_ends_the_session_on_the_other() {
    let store = Arc::new(FlakyStore::default());
    let (a, b) = pair(&store).await;
    let reader_a = Raw::new(&a.url, Some(READER));
    let reader_b = Raw::new(&b.url, Some(READER));

    // Ended on the instance that initialized it: the one that resumed it follows.
    let sid = reader_a.initialize().await;
    let r = reader_b.post(list(), Some(&sid)).await;
    assert_eq!(r.status, 200, "resumed on B: {}", r.text);
    let r = reader_a.delete(&sid).await;
    assert_eq!(r.status, 200, "the owner's DELETE on A: {}", r.text);
    let r = reader_b.post(list(), Some(&sid)).await;
    assert_eq!(r.status, 404, "B after the DELETE on A: {}", r.text);
    assert!(r.text.contains("session_not_found"), "{}", r.text);
    let r = reader_b.delete(&sid).await;
    assert_eq!(
        r.status, 404,
        "a DELETE on B after the one on A: {}",
        r.text
    );

    // Ended on the instance that resumed it: the one that initialized it follows.
    let sid = reader_a.initialize().await;
    let r = reader_b.post(list(), Some(&sid)).await;
    assert_eq!(r.status, 200, "resumed on B: {}", r.text);
    let r = reader_b.delete(&sid).await;
    assert_eq!(r.status, 200, "the owner's DELETE on B: {}", r.text);
    let r = reader_a.post(list(), Some(&sid)).await;
    assert_eq!(r.status, 404, "A after the DELETE on B: {}", r.text);
    // And a GET stream is not opened for it either.
    let r = read(reader_a.open_get(&sid).await).await;
    assert_eq!(
        r.status, 404,
        "a GET on A after the DELETE on B: {}",
        r.text
    );
}

#[tokio::test]
async fn a_store_that_fails_a_look_ends_no_session() {
    let store = Arc::new(FlakyStore::default());
    let (a, b) = pair(&store).await;
    let reader_a = Raw::new(&a.url, Some(READER));
    let reader_b = Raw::new(&b.url, Some(READER));
    let sid = reader_a.initialize().await;
    let r = reader_b.post(list(), Some(&sid)).await;
    assert_eq!(r.status, 200, "resumed on B: {}", r.text);

    store.failing.store(true, Ordering::SeqCst);
    let before = store.loads.load(Ordering::SeqCst);
    for (instance, c) in [("A", &reader_a), ("B", &reader_b)] {
        let r = c.post(list(), Some(&sid)).await;
        assert_eq!(
            r.status, 200,
            "{instance} with the store failing: {}",
            r.text
        );
    }
    assert_eq!(
        store.loads.load(Ordering::SeqCst),
        before + 2,
        "each instance looked in the store once"
    );
}

#[tokio::test]
async fn only_the_owner_ends_a_session_held_on_two_instances() {
    let store = Arc::new(FlakyStore::default());
    let (a, b) = pair(&store).await;
    let reader_a = Raw::new(&a.url, Some(READER));
    let reader_b = Raw::new(&b.url, Some(READER));
    let writer_a = Raw::new(&a.url, Some(WRITER));
    let writer_b = Raw::new(&b.url, Some(WRITER));
    let sid = reader_a.initialize().await;
    let r = reader_b.post(list(), Some(&sid)).await;
    assert_eq!(r.status, 200, "resumed on B: {}", r.text);

    for (instance, c) in [("A", &writer_a), ("B", &writer_b)] {
        let r = c.delete(&sid).await;
        assert_eq!(
            r.status, 404,
            "another principal's DELETE on {instance}: {}",
            r.text
        );
        let r = c.post(list(), Some(&sid)).await;
        assert_eq!(
            r.status, 404,
            "another principal's request on {instance}: {}",
            r.text
        );
    }
    for (instance, c) in [("A", &reader_a), ("B", &reader_b)] {
        let r = c.post(list(), Some(&sid)).await;
        assert_eq!(
            r.status, 200,
            "the owner's request on {instance}: {}",
            r.text
        );
    }
}

/// A `DELETE` the store cannot record is not answered as done: the session would end on the
/// instance that answered while the others went on serving it (and could resume it anew).
/// It is `503` and the session goes on everywhere; the client's retry ends it.
#[tokio::test]
async fn a_delete_the_store_cannot_record_ends_nothing() {
    let store = Arc::new(FlakyStore::default());
    let (a, b) = pair(&store).await;
    let reader_a = Raw::new(&a.url, Some(READER));
    let reader_b = Raw::new(&b.url, Some(READER));
    let sid = reader_a.initialize().await;
    let r = reader_b.post(list(), Some(&sid)).await;
    assert_eq!(r.status, 200, "resumed on B: {}", r.text);

    store.failing_delete.store(true, Ordering::SeqCst);
    let r = reader_a.delete(&sid).await;
    assert_eq!(
        r.status, 503,
        "a DELETE the store could not record: {}",
        r.text
    );
    assert!(r.text.contains("session_store_unavailable"), "{}", r.text);
    for (instance, c) in [("A", &reader_a), ("B", &reader_b)] {
        let r = c.post(list(), Some(&sid)).await;
        assert_eq!(
            r.status, 200,
            "{instance} after the failed DELETE: {}",
            r.text
        );
    }

    store.failing_delete.store(false, Ordering::SeqCst);
    let r = reader_a.delete(&sid).await;
    assert_eq!(r.status, 200, "the DELETE again: {}", r.text);
    for (instance, c) in [("A", &reader_a), ("B", &reader_b)] {
        let r = c.post(list(), Some(&sid)).await;
        assert_eq!(r.status, 404, "{instance} after the DELETE: {}", r.text);
    }
}

/// A `DELETE` on an instance that does not hold the session, while the store cannot say whose
/// it is: nothing is ended (another principal's session must not be), and the answer says the
/// store failed rather than that it was done.
#[tokio::test]
async fn a_delete_whose_owner_the_store_cannot_tell_ends_nothing() {
    let store = Arc::new(FlakyStore::default());
    let (a, b) = pair(&store).await;
    let reader_a = Raw::new(&a.url, Some(READER));
    let writer_b = Raw::new(&b.url, Some(WRITER));
    let reader_b = Raw::new(&b.url, Some(READER));
    let sid = reader_a.initialize().await;

    store.failing.store(true, Ordering::SeqCst);
    for (who, c) in [("another principal", &writer_b), ("the owner", &reader_b)] {
        let r = c.delete(&sid).await;
        assert_eq!(r.status, 503, "{who}'s DELETE on B: {}", r.text);
        assert!(r.text.contains("session_store_unavailable"), "{}", r.text);
    }
    store.failing.store(false, Ordering::SeqCst);
    let r = reader_a.post(list(), Some(&sid)).await;
    assert_eq!(r.status, 200, "the session goes on: {}", r.text);
}
