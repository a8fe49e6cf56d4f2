//! A store whose paging does not advance, as a Qdrant answering the same `next_page_offset` (or
//! the same page) again would: the listings that follow `VectorStore::scroll` to the last page
//! (the pattern examples, re-embedding session memories) stop with a `store` error instead of
//! looping forever while what they read piles up.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use async_trait::async_trait;
use bridle_memory::{
    CollectionConfig, EmbeddedStore, Filter, PatternIndex, Payload, Point, PointId, Record, Result,
    ScoredPoint, SessionMemory, VectorStore,
};
use common::HashingEmbedder;
use serde_json::json;

/// An honest answer.
const HONEST: u8 = 0;
/// The next offset is the one asked for (the first page's first id for the first page).
const SAME_OFFSET: u8 = 1;
/// The first page again, whatever the offset, with its next offset.
const SAME_PAGE: u8 = 2;
/// An empty page, with a next offset.
const EMPTY_WITH_NEXT: u8 = 3;

/// Scroll calls after which the store says there is nothing more, so that a listing without
/// the check ends (and its test fails) instead of hanging.
const GIVE_UP_AFTER: usize = 2_000;

/// The embedded store, with a scroll that misbehaves as `mode` says.
struct Stuck {
    inner: EmbeddedStore,
    mode: AtomicU8,
    scrolls: AtomicUsize,
}

#[async_trait]
impl VectorStore for Stuck {
    fn backend(&self) -> &'static str {
        "stuck"
    }
    async fn ensure_collection(&self, name: &str, config: CollectionConfig) -> Result<()> {
        self.inner.ensure_collection(name, config).await
    }
    async fn collection(&self, name: &str) -> Result<Option<CollectionConfig>> {
        self.inner.collection(name).await
    }
    async fn drop_collection(&self, name: &str) -> Result<bool> {
        self.inner.drop_collection(name).await
    }
    async fn upsert(&self, collection: &str, points: Vec<Point>) -> Result<()> {
        self.inner.upsert(collection, points).await
    }
    async fn delete(&self, collection: &str, filter: &Filter) -> Result<u64> {
        self.inner.delete(collection, filter).await
    }
    async fn search(
        &self,
        collection: &str,
        vector: &[f32],
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        self.inner.search(collection, vector, filter, limit).await
    }
    async fn search_hybrid(
        &self,
        collection: &str,
        vector: &[f32],
        text: &str,
        filter: Option<&Filter>,
        limit: usize,
    ) -> Result<Vec<ScoredPoint>> {
        self.inner
            .search_hybrid(collection, vector, text, filter, limit)
            .await
    }
    async fn count(&self, collection: &str, filter: Option<&Filter>) -> Result<u64> {
        self.inner.count(collection, filter).await
    }
    async fn scroll(
        &self,
        collection: &str,
        filter: Option<&Filter>,
        offset: Option<PointId>,
        limit: usize,
    ) -> Result<(Vec<Record>, Option<PointId>)> {
        if self.scrolls.fetch_add(1, Ordering::SeqCst) >= GIVE_UP_AFTER {
            return Ok((Vec::new(), None));
        }
        match self.mode.load(Ordering::SeqCst) {
            SAME_OFFSET => {
                let (page, _) = self.inner.scroll(collection, filter, offset, limit).await?;
                let again = offset.or_else(|| page.first().map(|r| r.id));
                Ok((page, again))
            }
            SAME_PAGE => self.inner.scroll(collection, filter, None, limit).await,
            EMPTY_WITH_NEXT => Ok((Vec::new(), Some(offset.unwrap_or(0) + 1))),
            _ => self.inner.scroll(collection, filter, offset, limit).await,
        }
    }
    async fn replace(&self, collection: &str, filter: &Filter, points: Vec<Point>) -> Result<u64> {
        self.inner.replace(collection, filter, points).await
    }
}

/// `n` points in `collection` (created), each with `payload(id)`, more than one page of any
/// listing.
async fn stuck_store(
    collection: &str,
    n: u64,
    payload: impl Fn(u64) -> Payload,
) -> (Arc<Stuck>, Arc<HashingEmbedder>) {
    let embedder = Arc::new(HashingEmbedder::new(16));
    let store = Arc::new(Stuck {
        inner: EmbeddedStore::open_in_memory().expect("store"),
        mode: AtomicU8::new(HONEST),
        scrolls: AtomicUsize::new(0),
    });
    store
        .ensure_collection(collection, CollectionConfig::cosine(16))
        .await
        .expect("collection");
    let points = (1..=n)
        .map(|id| Point {
            id,
            vector: embedder.vector(&format!("point {id}")),
            payload: payload(id),
        })
        .collect();
    store.upsert(collection, points).await.expect("upsert");
    (store, embedder)
}

fn object(v: serde_json::Value) -> Payload {
    v.as_object().cloned().unwrap_or_default()
}

/// Sets `mode`, resets the count of scroll calls.
fn misbehave(store: &Stuck, mode: u8) {
    store.mode.store(mode, Ordering::SeqCst);
    store.scrolls.store(0, Ordering::SeqCst);
}

#[tokio::test]
async fn listing_the_pattern_examples_stops_when_paging_does_not_advance() {
    // 2,500 chunks: three pages of 1,000.
    let (store, embedder) = stuck_store("pattern_examples", 2_500, |id| {
        object(json!({"reference_tag": format!("t{}", id % 3), "arch_tag": "a", "source_repo": "/r", "last_indexed": "2024-01-01T00:00:00Z"}))
    })
    .await;
    let index = PatternIndex::new(store.clone(), embedder);
    let examples = index.examples().await.expect("honest paging");
    assert_eq!(examples.iter().map(|e| e.chunks).sum::<u64>(), 2_500);

    for mode in [SAME_OFFSET, SAME_PAGE, EMPTY_WITH_NEXT] {
        misbehave(&store, mode);
        let err = index.examples().await.expect_err("paging does not advance");
        assert_eq!(err.code(), "store", "mode {mode}: {err}");
        assert!(
            err.to_string().contains("does not advance"),
            "mode {mode}: {err}"
        );
        assert!(store.scrolls.load(Ordering::SeqCst) <= 2, "mode {mode}");
    }
}

#[tokio::test]
async fn re_embedding_session_memories_stops_when_paging_does_not_advance() {
    // 600 memories of no recorded model: three pages of 256.
    let (store, embedder) = stuck_store("session_memory", 600, |id| {
        object(json!({"kind": "decision", "text": format!("memory {id}"), "project": "p"}))
    })
    .await;
    let session = SessionMemory::new(store.clone(), embedder);

    for mode in [SAME_OFFSET, SAME_PAGE, EMPTY_WITH_NEXT] {
        misbehave(&store, mode);
        let err = session
            .reembed()
            .await
            .expect_err("paging does not advance");
        assert_eq!(err.code(), "store", "mode {mode}: {err}");
        assert!(
            err.to_string().contains("does not advance"),
            "mode {mode}: {err}"
        );
    }
    misbehave(&store, HONEST);
    let report = session.reembed().await.expect("honest paging");
    assert_eq!(report.reembedded + report.unchanged, 600, "{report:?}");
}
