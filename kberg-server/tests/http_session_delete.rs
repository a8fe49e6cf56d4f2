//! `DELETE` of a 2025-11-25 session with a session store shared by two instances: a session
//! that is not live anywhere (never was, or already ended) is `404`, as the specification
//! requires of any request naming a terminated session, and so is another principal's
//! session; only its owner's `DELETE` ends it, on either instance.

mod common;

use std::sync::Arc;

use common::*;
use serde_json::json;

#[tokio::test]
async fn delete_with_a_session_store_is_404_for_unknown_ended_and_foreign_sessions() {
    let store: Arc<dyn kberg_server::SessionStore> = Arc::new(SharedStore::default());
    let config = || {
        kberg_testkit::serve::loopback()
            .auth(auth())
            .session_store(Arc::clone(&store))
    };
    let a = start_config(config()).await;
    let b = start_config(config()).await;
    let reader_a = Raw::new(&a.url, Some(READER));
    let reader_b = Raw::new(&b.url, Some(READER));
    let writer_b = Raw::new(&b.url, Some(WRITER));

    // A session that never was.
    let r = reader_b.delete("no-such-session").await;
    assert_eq!(r.status, 404, "{}", r.text);

    // The reader's session, started on A, named on B by another principal.
    let sid = reader_a.initialize().await;
    let r = writer_b.delete(&sid).await;
    assert_eq!(r.status, 404, "another principal's DELETE: {}", r.text);
    assert!(r.text.contains("session_not_found"), "{}", r.text);
    // It was not ended: its owner still uses it, on either instance.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let r = reader_a.post(list.clone(), Some(&sid)).await;
    assert_eq!(r.status, 200, "{}", r.text);

    // Its owner ends it where it lives; then every instance answers 404 to a request naming
    // it, DELETE included.
    let r = reader_a.delete(&sid).await;
    assert_eq!(r.status, 200, "the owner's DELETE: {}", r.text);
    for (instance, c) in [("A", &reader_a), ("B", &reader_b)] {
        let r = c.delete(&sid).await;
        assert_eq!(r.status, 404, "DELETE again on {instance}: {}", r.text);
        let r = c.post(list.clone(), Some(&sid)).await;
        assert_eq!(r.status, 404, "a request on {instance}: {}", r.text);
    }

    // The owner may end its stored session on an instance that does not hold it.
    let sid = reader_a.initialize().await;
    let r = reader_b.delete(&sid).await;
    assert_eq!(r.status, 200, "the owner's DELETE elsewhere: {}", r.text);
    let r = reader_b.delete(&sid).await;
    assert_eq!(r.status, 404, "and again: {}", r.text);
}
