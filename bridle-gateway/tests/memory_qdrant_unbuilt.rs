//! A gateway built without its `qdrant` feature, given a configuration that names a Qdrant
//! store: the refusal says what to do and where the store is, but never the credential the
//! configured URL carries (a user part or a key in its query), since the error reaches the
//! console, the logs and whoever reads them.
//!
//! Only a build without `qdrant` refuses, so only such a build compiles this test (run it
//! with `cargo test -p bridle-gateway --test memory_qdrant_unbuilt`, no features).

#![cfg(not(feature = "qdrant"))]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use bridle_gateway::memory::{MemoryEmbedderConfig, MemorySection, MemoryStoreConfig};

const USER_KEY: &str = "canary-qdrant-userpass-51c7";
const QUERY_KEY: &str = "canary-qdrant-query-key-9e02";

#[test]
fn the_refusal_names_the_store_without_the_credentials_in_its_url() {
    let tmp = tempfile::tempdir().unwrap();
    let section = MemorySection {
        store: MemoryStoreConfig::Qdrant {
            url: format!("https://memory:{USER_KEY}@qdrant.example:6334/?api-key={QUERY_KEY}"),
            api_key_secret: None,
        },
        embedder: MemoryEmbedderConfig::Ollama {
            url: "http://127.0.0.1:11434".into(),
            model: "m".into(),
        },
        indexing: Default::default(),
        max_memories_per_project: bridle_memory::DEFAULT_MAX_PER_PROJECT,
    };
    let err = section
        .to_config(tmp.path(), tmp.path())
        .expect_err("a build without qdrant refuses a Qdrant store")
        .to_string();
    assert!(err.contains("`qdrant` feature"), "{err}");
    assert!(err.contains("qdrant.example:6334"), "{err}");
    assert!(!err.contains(USER_KEY), "the URL's user part leaked: {err}");
    assert!(!err.contains(QUERY_KEY), "the URL's query leaked: {err}");
    assert!(!err.contains("canary"), "{err}");
}
