//! The memory tools' refusals have kberg-core's one shape too, as the gateway's own tools' do
//! (`tests/gateway_refusal_shape.rs`): an `isError` result whose structured content holds
//! `code`, `message`, `tool` (the name the agent called) and `retryable`. Checked through a real
//! MCP client (rmcp's) over HTTP on loopback, for a refusal of each memory tool that can refuse:
//! bridle-memory's `recall`, `remember` and `search_pattern_examples`, and the gateway's own
//! `refresh_pattern_example` (a failed refresh, and a tag another run holds).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;

use admin_support::gateway::{Gw, McpClient, refused_in_shape};
use bridle_gateway::config::demo_document;
use bridle_gateway::memory::RunOrigin;
use bridle_gateway::memory::runs::RunStart;
use bridle_memory::{ConstantEmbedder, EmbeddedStore, MemoryService, PatternIndexConfig};
use serde_json::{Value, json};

/// Calls `tool`, checks it is refused with `code` in the one shape, that `retryable` says
/// `retryable`, and returns the refusal's structured content.
async fn refused(c: &McpClient, tool: &str, args: Value, code: &str, retryable: bool) -> Value {
    let s = refused_in_shape(c, tool, args, code).await;
    assert_eq!(s["retryable"], retryable, "{s}");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_each_memory_tool_names_the_tool_and_says_whether_to_retry() {
    let memory = MemoryService::with(
        Arc::new(EmbeddedStore::open_in_memory().unwrap()),
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    );
    let gw = Gw::start_with(|b| b.memory(memory)).await;
    // The demo project lets claude agents store memories and re-index; `beta` lets them do
    // neither. `bot` (a claude) may use only the demo project.
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let base = doc.revision;
    let permissions = doc.permissions.get_mut("claude").unwrap();
    permissions.memory.write = true;
    permissions.memory.index = true;
    gw.ctx
        .store
        .save_edit(
            "demo",
            &doc,
            base,
            "test",
            "claude may remember and re-index",
        )
        .unwrap();
    gw.ctx
        .store
        .create("beta", &demo_document(), "test")
        .unwrap();
    let claude = gw.mcp_client(gw.file_token("claude")).await;
    let bot_token = gw
        .all_agent_tokens()
        .into_iter()
        .find(|(a, _)| a == "bot")
        .unwrap()
        .1;
    let bot = gw.mcp_client(bot_token).await;

    refused(
        &claude,
        "recall",
        json!({"query": "database"}),
        "project_not_allowed",
        false,
    )
    .await;
    refused(
        &claude,
        "remember",
        json!({"kind": "decision", "text": "Beta uses Postgres.", "project": "beta"}),
        "capability_required",
        false,
    )
    .await;
    refused(
        &bot,
        "remember",
        json!({"kind": "decision", "text": "Beta uses Postgres.", "project": "beta"}),
        "project_not_allowed",
        false,
    )
    .await;
    refused(
        &claude,
        "search_pattern_examples",
        json!({"query": "   "}),
        "invalid_input",
        false,
    )
    .await;
    refused(
        &claude,
        "refresh_pattern_example",
        json!({"reference_tag": "never-indexed"}),
        "unknown_tag",
        false,
    )
    .await;
    // Another run holds the tag: the same call succeeds once it ends.
    let run = gw
        .ctx
        .index_runs
        .start(RunStart {
            reference_tag: "held".into(),
            project: None,
            pattern: None,
            origin: RunOrigin::Api,
            actor: "alice".into(),
        })
        .unwrap();
    let s = refused(
        &claude,
        "refresh_pattern_example",
        json!({"reference_tag": "held"}),
        "index_running",
        true,
    )
    .await;
    assert!(s["run_id"].is_string(), "{s}");
    drop(run);

    claude.cancel().await.unwrap();
    bot.cancel().await.unwrap();
    gw.stop().await;
}
