//! The indexing gauges on `/metrics` are labelled by reference tag, and an agent names the tag it
//! asks `refresh_pattern_example` to re-index. A refresh of a tag memory does not know (any
//! string the agent makes up) fails before any step: it must leave no series behind, or an agent
//! with `memory.index` could grow `/metrics`, and the gateway's memory, one made-up tag at a
//! time.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::sync::Arc;

use admin_support::gateway::Gw;
use bridle_memory::{ConstantEmbedder, EmbeddedStore, MemoryService, PatternIndexConfig};
use kberg_agent::ToolSurface;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_of_an_unknown_tag_leaves_no_indexing_series() {
    let service = MemoryService::with(
        Arc::new(EmbeddedStore::open_in_memory().unwrap()),
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    );
    let gw = Gw::start_with(|b| b.memory(service)).await;
    let mut doc = gw.ctx.store.load("demo").unwrap().document;
    let base = doc.revision;
    doc.permissions.get_mut("claude").unwrap().memory.index = true;
    gw.ctx
        .store
        .save_edit("demo", &doc, base, "test", "claude may re-index")
        .unwrap();
    let claude =
        kberg_agent::McpSurface::connect_http_with_bearer(&gw.mcp, &gw.file_token("claude"))
            .await
            .unwrap();
    for n in 0..3 {
        let r = claude
            .call(
                "refresh_pattern_example",
                json!({"reference_tag": format!("made-up-tag-{n}")}),
                tokio_util::sync::CancellationToken::new(),
            )
            .await
            .unwrap();
        assert!(r.is_error, "{r:?}");
    }
    let url = gw.mcp.trim_end_matches("/mcp").to_string() + "/metrics";
    let page = gw.http.get(url).send().await.unwrap().text().await.unwrap();
    assert!(!page.contains("made-up-tag"), "{page}");
    gw.stop().await;
}
