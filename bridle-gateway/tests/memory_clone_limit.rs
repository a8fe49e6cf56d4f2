//! `memory.indexing.max_clone_bytes` in `bridle.yaml` bounds what a clone may take on disk when
//! the gateway indexes an example: a local git repository, cloned through a `file://` URL (as a
//! hosted one is), past a tiny limit fails the run with `index_too_large` naming the YAML key to
//! raise (not bridle-memory's Rust field), and nothing is written back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;

use admin_support::gateway::Gw;
use admin_support::{Events, json_ok};
use bridle_memory::{ConstantEmbedder, EmbeddedStore, MemoryService};
use kberg_testkit::git::git;
use reqwest::StatusCode;
use serde_json::json;

const INDEX: &str = "/projects/demo/patterns/retry/examples/cloned-retry/index";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_past_the_configured_max_clone_bytes_fails_naming_the_yaml_key() {
    // Any clone's `.git` alone is well past 1 KiB.
    const MEMORY: &str = "memory:\n  embedder:\n    ollama: {url: \"http://127.0.0.1:9\", model: m}\n  indexing:\n    max_clone_bytes: 1024\n";
    let gw = Gw::start_with_config(MEMORY, |b, dir, config| {
        let patterns = config
            .memory
            .as_ref()
            .expect("bridle.yaml has the memory section")
            .to_config(dir, &config.secrets_path(dir))
            .unwrap()
            .patterns;
        assert_eq!(
            patterns.max_clone_bytes, 1024,
            "the key reaches the indexer"
        );
        b.memory(MemoryService::with(
            Arc::new(EmbeddedStore::open_in_memory().unwrap()),
            Arc::new(ConstantEmbedder::new(8)),
            patterns,
        ))
    })
    .await;

    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("retry.rs"),
        "/// Retries with exponential backoff.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
    )
    .unwrap();
    git(repo.path(), &["init", "-q"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "first"]);
    let url = format!("file://{}", repo.path().display());

    let mut revision = 0;
    for (path, body) in [
        (
            "/projects/demo/patterns",
            json!({"name": "retry", "description": "Retries with backoff."}),
        ),
        (
            "/projects/demo/patterns/retry/examples",
            json!({"url": url, "reference_tag": "cloned-retry"}),
        ),
    ] {
        let added = json_ok(
            gw.post(path).json(&body).send().await.unwrap(),
            StatusCode::CREATED,
        )
        .await;
        revision = added["revision"].as_u64().unwrap();
    }

    let failed = Events::new(gw.post(INDEX).send().await.unwrap())
        .until("error")
        .await;
    assert_eq!(failed["code"], "index_too_large", "{failed}");
    let detail = failed["detail"].as_str().unwrap();
    assert!(detail.contains("more than 1024 bytes"), "{failed}");
    assert!(
        detail.contains("`memory.indexing.max_clone_bytes` in bridle.yaml"),
        "the error names the key to raise: {failed}"
    );
    assert!(
        !detail.contains("PatternIndexConfig"),
        "not bridle-memory's field: {failed}"
    );

    let doc = json_ok(
        gw.get("/projects/demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(doc["revision"], revision, "nothing written back");
    assert!(
        doc["document"]["patterns"]["custom"][0]["example_repos"][0]["last_indexed"].is_null(),
        "{doc}"
    );
    gw.stop().await;
}
