//! The store battery against a real Qdrant server.
//!
//! There is no Qdrant on the test machines, so this tier is ignored by default and runs where a
//! server exists: `QDRANT_URL=http://127.0.0.1:6334 cargo test -p bridle-memory --features qdrant
//! --test store_qdrant -- --include-ignored`. Collections are created under a unique prefix and
//! dropped at the end.
#![cfg(feature = "qdrant")]

mod common;

use bridle_memory::{QdrantConfig, QdrantStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Qdrant server: QDRANT_URL=http://127.0.0.1:6334 cargo test -p bridle-memory --features qdrant --test store_qdrant -- --include-ignored"]
async fn battery_on_qdrant() {
    let url = std::env::var("QDRANT_URL")
        .expect("QDRANT_URL must name the Qdrant server this ignored tier runs against");
    let mut config = QdrantConfig::new(url);
    config.api_key = std::env::var("QDRANT_API_KEY").ok();
    config.collection_prefix = format!("bridle_test_{}_", std::process::id());
    let store = QdrantStore::connect(config).expect("connect");
    common::battery::run(&store, "q").await;
}
