//! Removing an example while an index of its tag starts: the removal takes the tag in the
//! gateway's index runs from before it edits the document until its chunks are purged, so a run
//! on that tag (the MCP tool `refresh_pattern_example`, or the admin API's index) is refused
//! with `example_removing` meanwhile, rather than writing back chunks no project lists. The
//! store holds the removal's purge until the test lets it go, so the refresh is tried exactly
//! while the removal is between its edit and its purge.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use admin_support::gateway::Gw;
use admin_support::{Events, json_ok};
use async_trait::async_trait;
use bridle_memory::{
    CollectionConfig, ConstantEmbedder, EmbeddedStore, Filter, MemoryError, MemoryService,
    PatternIndexConfig, Point, PointId, Record, Result, ScoredPoint, VectorStore,
};
use reqwest::StatusCode;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

/// An in-memory store whose next `delete`, once armed, says it has begun and waits for the
/// test's word; and whose every `delete` fails while it is `failing`.
struct HeldPurge {
    inner: EmbeddedStore,
    armed: AtomicBool,
    purging: Notify,
    gate: Semaphore,
    failing: AtomicBool,
}

#[async_trait]
impl VectorStore for HeldPurge {
    fn backend(&self) -> &'static str {
        "held"
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
        if self.failing.load(Ordering::SeqCst) {
            return Err(MemoryError::Store("the store went away".into()));
        }
        if self.armed.swap(false, Ordering::SeqCst) {
            self.purging.notify_one();
            let _go = self.gate.acquire().await.unwrap();
        }
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
        self.inner.scroll(collection, filter, offset, limit).await
    }
    async fn replace(&self, collection: &str, filter: &Filter, points: Vec<Point>) -> Result<u64> {
        self.inner.replace(collection, filter, points).await
    }
}

const EXAMPLE: &str = "/projects/demo/patterns/retry/examples/retry-example";

/// A gateway whose memory is on `HeldPurge`, with the demo project's `retry` pattern and its
/// example indexed (Claude may re-index it); the store and the example's repository.
async fn indexed_example() -> (Gw, Arc<HeldPurge>, tempfile::TempDir) {
    let store = Arc::new(HeldPurge {
        inner: EmbeddedStore::open_in_memory().unwrap(),
        armed: AtomicBool::new(false),
        purging: Notify::new(),
        gate: Semaphore::new(0),
        failing: AtomicBool::new(false),
    });
    let service = MemoryService::with(
        Arc::clone(&store) as Arc<dyn VectorStore>,
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    );
    let gw = Gw::start_with(|b| b.memory(service)).await;
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("retry.rs"),
        "/// Retries with exponential backoff.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
    )
    .unwrap();
    for (path, body) in [
        (
            "/projects/demo/patterns",
            json!({"name": "retry", "description": "Retries with backoff."}),
        ),
        (
            "/projects/demo/patterns/retry/examples",
            json!({"url": repo.path().display().to_string(), "reference_tag": "retry-example"}),
        ),
    ] {
        json_ok(
            gw.post(path).json(&body).send().await.unwrap(),
            StatusCode::CREATED,
        )
        .await;
    }
    // Claude may re-index the demo project's examples.
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let base = doc.revision;
    doc.permissions.get_mut("claude").unwrap().memory.index = true;
    gw.ctx
        .store
        .save_edit("demo", &doc, base, "test", "claude may re-index")
        .unwrap();
    let mut events = Events::new(gw.post(&format!("{EXAMPLE}/index")).send().await.unwrap());
    events.until("done").await;
    assert!(gw.pattern_hits("retry%20backoff").await >= 1);
    (gw, store, repo)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_while_its_example_is_removed_is_refused_and_leaves_no_chunks() {
    let (gw, store, _repo) = indexed_example().await;

    // The removal edits the document, then waits in its purge.
    store.armed.store(true, Ordering::SeqCst);
    let purging = store.purging.notified();
    let removal = gw.delete(EXAMPLE).send();
    let removal = tokio::spawn(removal);
    // Bounded: a removal refused before its purge (the tag still held by the index that just
    // ended) would otherwise leave this wait, and the test, hanging for good.
    if tokio::time::timeout(kberg_testkit::WAIT, purging)
        .await
        .is_err()
    {
        let answer = removal.await.unwrap().unwrap();
        panic!(
            "the removal never reached its purge; it answered {}: {}",
            answer.status(),
            answer.text().await.unwrap()
        );
    }

    use kberg_agent::ToolSurface;
    let claude =
        kberg_agent::McpSurface::connect_http_with_bearer(&gw.mcp, &gw.file_token("claude"))
            .await
            .unwrap();
    let refreshed = claude
        .call(
            "refresh_pattern_example",
            json!({"reference_tag": "retry-example"}),
            tokio_util::sync::CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(refreshed.is_error, "{refreshed:?}");
    let s = refreshed.structured.clone().unwrap();
    assert_eq!(s["code"], "example_removing", "{refreshed:?}");

    store.gate.add_permits(1);
    let removed = json_ok(removal.await.unwrap().unwrap(), StatusCode::OK).await;
    assert!(
        removed["chunks_removed"].as_u64().unwrap() >= 1,
        "{removed}"
    );
    assert_eq!(
        gw.pattern_hits("retry%20backoff").await,
        0,
        "no chunk outlives the example"
    );
    // The removal over, the tag is free again (and unknown to memory now).
    let again = claude
        .call(
            "refresh_pattern_example",
            json!({"reference_tag": "retry-example"}),
            tokio_util::sync::CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_ne!(
        again.structured.clone().unwrap_or_default()["code"],
        "example_removing",
        "{again:?}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_whose_purge_fails_is_answered_as_made_with_a_warning() {
    // The purge runs after the removal is written: its failure used to answer an error for a
    // change that was made, and a retry then found the example gone and its chunks left.
    let (gw, store, _repo) = indexed_example().await;
    store.failing.store(true, Ordering::SeqCst);
    let removed = json_ok(gw.delete(EXAMPLE).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(removed["chunks_removed"], 0, "{removed}");
    let warning = removed["warning"].as_str().unwrap();
    assert!(warning.contains("`retry-example`"), "{warning}");
    assert!(warning.contains("memory service failed"), "{warning}");
    assert!(
        warning.contains("/admin/api/v1/memory/patterns/retry-example/purge"),
        "{warning}"
    );
    let doc = json_ok(
        gw.get("/projects/demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        doc["document"]["patterns"]["custom"][0]["example_repos"],
        json!([]),
        "the removal was made: {doc}"
    );
    assert!(gw.pattern_hits("retry%20backoff").await >= 1, "kept");

    // Once the store is back, the purge the warning names removes them.
    store.failing.store(false, Ordering::SeqCst);
    let purged = json_ok(
        gw.post("/memory/patterns/retry-example/purge")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(purged["removed"].as_u64().unwrap() >= 1, "{purged}");
    assert_eq!(gw.pattern_hits("retry%20backoff").await, 0);
    gw.stop().await;
}
