//! Session memories record the embedding model that made their vectors: after the model
//! changes, a recall that meets an old memory is refused until `reembed` has embedded the old
//! memories again from their stored text, which keeps ids and payloads, leaves the new model's
//! memories alone, and never writes back a memory forgotten while it ran.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bridle_memory::store::{Payload, Point};
use bridle_memory::{
    EmbeddedStore, Embedder, MemoryFilter, NewMemory, ReembedReport, SearchMode, SessionMemory,
    VectorStore,
};
use common::HashingEmbedder;
use serde_json::json;
use tokio::sync::{Notify, Semaphore};

const DIM: usize = 128;

/// Another model of the same dimension: the hashing vector with its coordinates reversed, so
/// the old model's vectors rank the new model's queries wrongly.
#[derive(Debug, Default)]
struct Reversed {
    /// When set, each `embed` call says it started and waits for a permit.
    gate: Option<(Arc<Notify>, Arc<Semaphore>)>,
}

#[async_trait]
impl Embedder for Reversed {
    fn dimension(&self) -> usize {
        DIM
    }
    fn model(&self) -> &str {
        "reversed"
    }
    async fn embed(&self, texts: &[String]) -> bridle_memory::Result<Vec<Vec<f32>>> {
        if let Some((started, go)) = &self.gate {
            started.notify_one();
            go.acquire().await.expect("open").forget();
        }
        let h = HashingEmbedder::new(DIM);
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = h.vector(t);
                v.reverse();
                v
            })
            .collect())
    }
}

fn new(text: &str) -> NewMemory {
    NewMemory {
        kind: "decision".into(),
        text: text.into(),
        project: "bridle".into(),
        agent: Some("claude".into()),
        session: None,
        tags: vec!["t".into()],
    }
}

const TEXTS: [&str; 3] = [
    "We chose SQLite for the embedded vector store",
    "The gateway renders CLAUDE.md and AGENTS.md from one ruleset",
    "Tokens are hashed with a pepper before they are stored",
];

fn project() -> MemoryFilter {
    MemoryFilter::project("bridle")
}

fn store_in(dir: &std::path::Path) -> Arc<dyn VectorStore> {
    Arc::new(EmbeddedStore::open(dir.join("m.sqlite")).expect("open"))
}

async fn top(mem: &SessionMemory, query: &str) -> bridle_memory::Result<String> {
    let hits = mem
        .recall_with(query, &project(), 1, SearchMode::Vector)
        .await?;
    Ok(hits[0].memory.text.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_model_is_refused_until_the_memories_are_embedded_again() {
    let dir = tempfile::tempdir().expect("temp");
    let store = store_in(dir.path());
    let old = SessionMemory::new(store.clone(), Arc::new(HashingEmbedder::new(DIM)));
    let mut before = Vec::new();
    for t in TEXTS {
        before.push(old.remember(new(t)).await.expect("remember"));
    }
    assert_eq!(
        top(&old, "which vector store did we choose").await.unwrap(),
        TEXTS[0]
    );

    // The model changed: recall says what happened and what to do, in both modes.
    let current = SessionMemory::new(store.clone(), Arc::new(Reversed::default()));
    for mode in [SearchMode::Vector, SearchMode::Hybrid] {
        let err = current
            .recall_with("which vector store did we choose", &project(), 3, mode)
            .await
            .expect_err("another model's vectors");
        assert_eq!(err.code(), "model_mismatch", "{err}");
        let said = err.to_string();
        assert!(
            said.contains("`hashing`")
                && said.contains("`reversed`")
                && said.contains("`SessionMemory::reembed`"),
            "{said}"
        );
    }
    // A host names its own way to re-embed.
    let hosted = current
        .clone()
        .with_reembed_remedy("`myapp memory reembed`");
    let said = hosted
        .recall_with(
            "which vector store did we choose",
            &project(),
            3,
            SearchMode::Hybrid,
        )
        .await
        .expect_err("another model's vectors")
        .to_string();
    assert!(
        said.contains("`myapp memory reembed`") && !said.contains("SessionMemory::reembed"),
        "{said}"
    );
    // Listing needs no vectors and still works.
    let (listed, _) = current.list(&project(), None, 10).await.expect("list");
    assert_eq!(listed.len(), 3);

    let report = current.reembed().await.expect("reembed");
    assert_eq!(
        report,
        ReembedReport {
            reembedded: 3,
            unchanged: 0
        }
    );
    for (query, want) in [
        ("which vector store did we choose", TEXTS[0]),
        ("how are tokens stored", TEXTS[2]),
        ("what renders CLAUDE.md", TEXTS[1]),
    ] {
        assert_eq!(top(&current, query).await.unwrap(), want, "{query}");
    }
    // Ids and payloads kept.
    let (after, _) = current.list(&project(), None, 10).await.expect("list");
    let mut before_sorted = before.clone();
    before_sorted.sort_by_key(|m| m.id);
    assert_eq!(after, before_sorted);

    // A second run, and a memory written by the new model, change nothing.
    current
        .remember(new("Audit entries are chained by hash"))
        .await
        .unwrap();
    assert_eq!(
        current.reembed().await.unwrap(),
        ReembedReport {
            reembedded: 0,
            unchanged: 4
        }
    );
    // The old model is now the stranger.
    let err = old
        .recall("which vector store", &project(), 2)
        .await
        .expect_err("the new model's vectors");
    assert_eq!(err.code(), "model_mismatch", "{err}");
}

/// A memory stored before models were recorded has none: it is recalled as it is, and
/// `reembed` embeds it with the configured model and records that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_without_a_recorded_model_is_recalled_and_stamped_by_reembed() {
    let dir = tempfile::tempdir().expect("temp");
    let store = store_in(dir.path());
    let mem = SessionMemory::new(store.clone(), Arc::new(HashingEmbedder::new(DIM)));
    mem.remember(new(TEXTS[1])).await.unwrap();
    let mut payload = Payload::new();
    for (k, v) in [
        ("kind", json!("decision")),
        ("text", json!(TEXTS[0])),
        ("project", json!("bridle")),
        ("tags", json!([])),
        ("created_at", json!("2026-01-01T00:00:00Z")),
        ("created_unix", json!(1_767_225_600)),
    ] {
        payload.insert(k.into(), v);
    }
    store
        .upsert(
            "session_memory",
            vec![Point {
                id: 7,
                vector: HashingEmbedder::new(DIM).vector(TEXTS[0]),
                payload,
            }],
        )
        .await
        .unwrap();
    assert_eq!(
        top(&mem, "which vector store did we choose").await.unwrap(),
        TEXTS[0]
    );
    assert_eq!(
        mem.reembed().await.unwrap(),
        ReembedReport {
            reembedded: 1,
            unchanged: 1
        }
    );
    let (records, _) = store
        .scroll("session_memory", None, None, 10)
        .await
        .unwrap();
    assert!(
        records
            .iter()
            .all(|r| r.payload.get("embedding_model") == Some(&json!("hashing"))),
        "{records:?}"
    );
}

/// A memory forgotten while `reembed` was embedding its text is not written back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_forgotten_during_reembed_stays_forgotten() {
    let dir = tempfile::tempdir().expect("temp");
    let store = store_in(dir.path());
    let old = SessionMemory::new(store.clone(), Arc::new(HashingEmbedder::new(DIM)));
    let mut ids = Vec::new();
    for t in TEXTS {
        ids.push(old.remember(new(t)).await.unwrap().id);
    }
    let started = Arc::new(Notify::new());
    let go = Arc::new(Semaphore::new(0));
    let current = SessionMemory::new(
        store.clone(),
        Arc::new(Reversed {
            gate: Some((started.clone(), go.clone())),
        }),
    );
    let run = tokio::spawn({
        let current = current.clone();
        async move { current.reembed().await }
    });
    // The texts are being embedded: forget one now.
    started.notified().await;
    current.forget(ids[1]).await.expect("forget");
    go.add_permits(1);
    let report = run.await.unwrap().expect("reembed");
    assert_eq!(
        report,
        ReembedReport {
            reembedded: 2,
            unchanged: 0
        }
    );
    let (left, _) = current.list(&project(), None, 10).await.unwrap();
    let left: Vec<u64> = left.iter().map(|m| m.id).collect();
    assert!(!left.contains(&ids[1]), "{left:?}");
    assert_eq!(left.len(), 2);
    // Recalled with the same model, ungated.
    let ungated = SessionMemory::new(store, Arc::new(Reversed::default()));
    assert_eq!(
        top(&ungated, "how are tokens stored").await.unwrap(),
        TEXTS[2]
    );
}
