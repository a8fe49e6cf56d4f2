//! `refresh_pattern_example` over a real gateway (MCP on 127.0.0.1) for an example whose
//! repository URL carries an access token (`https://bot:<token>@host/...`), as an operator
//! lists it in a project's rules. bridle-memory keeps only the redacted URL with the chunks, so
//! the gateway refreshes from the URL the project lists: the refresh works, and when the
//! repository has nothing left to index, the agent's answer and the log name the repository
//! without the token. The token is a canary value that must appear nowhere.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;

use admin_support::gateway::Gw;
use bridle_memory::{
    ConstantEmbedder, EmbeddedStore, ExampleRepo, MemoryService, NoProgress, PatternIndexConfig,
};
use kberg_agent::{McpSurface, ToolSurface};
use kberg_testkit::git::git;
use kberg_testkit::log::LogBuffer;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CANARY: &str = "canary-refresh-token-4Vb9Qe";

/// Every log line of this test binary, from every thread.
fn logs() -> &'static LogBuffer {
    LogBuffer::global(tracing::Level::DEBUG)
}

/// A private repository with one indexable file, its URL with the canary token (git reads a
/// `file://` URL's user part and ignores it: the stand-in for a hosted one's), indexed and
/// listed in the demo project's `modified-mvc` pattern; claude may re-index there.
async fn private_example(gw: &Gw, memory: &MemoryService) -> (tempfile::TempDir, String) {
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("retry.rs"),
        "/// Retries with exponential backoff.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
    )
    .unwrap();
    std::fs::write(
        repo.path().join("Cargo.lock"),
        "[[package]]\nname = \"x\"\n",
    )
    .unwrap();
    git(repo.path(), &["init", "-q"]);
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "first"]);
    let url = format!("file://bot:{CANARY}@localhost{}", repo.path().display());
    memory
        .patterns
        .index(
            &ExampleRepo {
                url: url.clone(),
                reference_tag: "private-example".into(),
                arch_tag: "modified-mvc".into(),
            },
            &NoProgress,
        )
        .await
        .unwrap();
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let base = doc.revision;
    doc.permissions.get_mut("claude").unwrap().memory.index = true;
    doc.patterns.custom.push(bridle_rules::CustomPattern {
        name: "modified-mvc".into(),
        description: "MVC with a service layer".into(),
        example_repos: vec![bridle_rules::ExampleRepo {
            url,
            reference_tag: "private-example".into(),
            arch_tag: "modified-mvc".into(),
            last_indexed: None,
        }],
    });
    gw.ctx
        .store
        .save_edit(
            "demo",
            &doc,
            base,
            "test",
            "a private example; claude may re-index",
        )
        .unwrap();
    (repo, CANARY.to_string())
}

fn memory() -> MemoryService {
    MemoryService::with(
        Arc::new(EmbeddedStore::open_in_memory().unwrap()),
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_example_is_refreshed_from_the_url_its_project_lists() {
    let logs = logs();
    let memory = memory();
    let gw = Gw::start_with(|b| b.memory(memory.clone())).await;
    let (repo, canary) = private_example(&gw, &memory).await;
    std::fs::write(
        repo.path().join("jitter.rs"),
        "/// Adds jitter to a delay.\npub fn jitter(ms: u64) -> u64 {\n    ms + 1\n}\n",
    )
    .unwrap();
    git(repo.path(), &["add", "."]);
    git(repo.path(), &["commit", "-q", "-m", "second"]);

    let claude = McpSurface::connect_http_with_bearer(&gw.mcp, &gw.file_token("claude"))
        .await
        .unwrap();
    let r = claude
        .call(
            "refresh_pattern_example",
            json!({"reference_tag": "private-example"}),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let report = &r.structured.clone().unwrap()["report"];
    assert_eq!(report["files"], 2, "{r:?}");
    assert!(!format!("{r:?}").contains(&canary), "{r:?}");
    // The chunks keep the URL without its token.
    let hits = memory
        .patterns
        .search("jitter delay", None, 5)
        .await
        .unwrap();
    assert!(!hits.is_empty());
    assert!(!format!("{hits:?}").contains(&canary), "{hits:?}");
    assert!(!logs.text().contains(&canary), "{}", logs.text());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_with_nothing_to_index_does_not_hand_the_agent_the_repository_token() {
    let logs = logs();
    let memory = memory();
    let gw = Gw::start_with(|b| b.memory(memory.clone())).await;
    let (repo, canary) = private_example(&gw, &memory).await;
    // Then everything indexable leaves the repository.
    git(repo.path(), &["rm", "-q", "retry.rs"]);
    git(repo.path(), &["commit", "-q", "-m", "only the lock file"]);

    let claude = McpSurface::connect_http_with_bearer(&gw.mcp, &gw.file_token("claude"))
        .await
        .unwrap();
    let r = claude
        .call(
            "refresh_pattern_example",
            json!({"reference_tag": "private-example"}),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r.is_error, "{r:?}");
    let structured = r.structured.clone().unwrap();
    assert_eq!(structured["code"], "nothing_to_index", "{r:?}");
    // The repository is named, its token hidden.
    assert!(r.text.contains("file://***@localhost"), "{r:?}");
    assert!(!format!("{r:?}").contains(&canary), "{r:?}");

    assert!(!logs.text().contains(&canary), "{}", logs.text());
    gw.stop().await;
}
