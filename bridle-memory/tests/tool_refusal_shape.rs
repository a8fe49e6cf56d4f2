//! The memory tools' refusals, served without the gateway (on a kberg-core registry, as
//! `tools::register` sets them up), have kberg-core's one shape: an error result whose structured
//! content holds `code`, `message`, `tool` and `retryable` (true only where the same call may
//! succeed later unchanged: an embedding service that is down), plus the code's own details.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bridle_memory::tools::{MemoryTools, ProjectAccess, register};
use bridle_memory::{EmbeddedStore, Embedder, PatternIndex, SessionMemory, VectorStore};
use common::{FaultyEmbedder, HashingEmbedder};
use kberg_core::{CallOptions, Caller, Grants, Principal, ToolRegistry};
use serde_json::{Value, json};

/// Project `alpha` only, and no memories written there.
struct AlphaReadOnly;

impl ProjectAccess for AlphaReadOnly {
    fn allows(&self, _caller: &Caller, project: &str) -> bool {
        project == "alpha"
    }

    fn may_write(&self, _caller: &Caller, _project: &str) -> bool {
        false
    }
}

fn registry(embedder: Arc<dyn Embedder>, access: Option<Arc<dyn ProjectAccess>>) -> ToolRegistry {
    let store: Arc<dyn VectorStore> = Arc::new(EmbeddedStore::open_in_memory().expect("store"));
    let registry = ToolRegistry::new();
    register(
        &registry,
        MemoryTools {
            session: Arc::new(SessionMemory::new(store.clone(), embedder.clone())),
            patterns: Arc::new(PatternIndex::new(store, embedder)),
            on_indexed: None,
            access,
        },
    )
    .expect("register");
    registry
}

/// Calls `tool`, checks it is refused with `code` in the one shape, that `retryable` says
/// `retryable`, and returns the refusal's structured content.
async fn refused(
    registry: &ToolRegistry,
    tool: &str,
    args: Value,
    code: &str,
    retryable: bool,
) -> Value {
    let caller = Caller::new(
        Principal::new("agent").with_grants(Grants::of(["memory.write", "memory.index"])),
    );
    let out = registry
        .call(&caller, tool, args, CallOptions::default())
        .await
        .expect("the gate lets it through");
    assert!(out.is_error, "{}", out.all_text());
    let s = out.structured.expect("structured content");
    assert_eq!(s["code"], code, "{s}");
    assert!(s["message"].as_str().is_some_and(|m| !m.is_empty()), "{s}");
    assert_eq!(s["tool"], tool, "{s}");
    assert_eq!(s["retryable"], retryable, "{s}");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_each_memory_tool_has_the_one_shape() {
    let restricted = registry(
        Arc::new(HashingEmbedder::new(64)),
        Some(Arc::new(AlphaReadOnly)),
    );
    refused(
        &restricted,
        "recall",
        json!({"query": "database", "project": "beta"}),
        "project_not_allowed",
        false,
    )
    .await;
    let s = refused(
        &restricted,
        "remember",
        json!({"kind": "decision", "text": "Alpha uses SQLite.", "project": "alpha"}),
        "capability_required",
        false,
    )
    .await;
    assert_eq!(s["capability"], "memory.write", "{s}");

    let open = registry(Arc::new(HashingEmbedder::new(64)), None);
    refused(
        &open,
        "search_pattern_examples",
        json!({"query": "   "}),
        "invalid_input",
        false,
    )
    .await;
    refused(
        &open,
        "refresh_pattern_example",
        json!({"reference_tag": "never-indexed"}),
        "unknown_tag",
        false,
    )
    .await;

    // An embedding service that is down: the same call may work once it is back.
    let faulty = Arc::new(FaultyEmbedder::new(Arc::new(HashingEmbedder::new(64))));
    faulty.down.store(true, Ordering::SeqCst);
    let down = registry(faulty, None);
    refused(
        &down,
        "remember",
        json!({"kind": "decision", "text": "Alpha uses SQLite.", "project": "alpha"}),
        "embedder_unavailable",
        true,
    )
    .await;
}
