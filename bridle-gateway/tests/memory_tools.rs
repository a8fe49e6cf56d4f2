//! The memory tools as an agent reaches them through the gateway: `remember` stores a memory
//! only in a project whose rules grant the agent's type `permissions.memory.write`, even when
//! another of its projects grants it (the gate's capability is the union over projects);
//! `recall` needs no permission beyond the project.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::sync::Arc;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_memory::{
    ConstantEmbedder, EmbeddedStore, MemoryFilter, MemoryService, PatternIndexConfig,
};
use bridle_rules::{AgentCatalog, MemoryPermission, RulesStore};
use kberg_core::{CallOptions, Caller, Principal, ToolOutput};
use serde_json::json;

fn code(out: &ToolOutput) -> Option<String> {
    out.is_error.then(|| {
        out.structured
            .as_ref()
            .and_then(|s| s["code"].as_str())
            .unwrap_or_default()
            .to_string()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remember_needs_the_memory_write_permission_of_the_target_project() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let store = RulesStore::open(tmp.path(), AgentCatalog::builtin()).unwrap();
    for (project, write) in [("alpha", true), ("beta", false)] {
        let mut doc = demo_document();
        doc.permissions.get_mut("claude").unwrap().memory = MemoryPermission {
            write,
            index: false,
        };
        store.create(project, &doc, "test").unwrap();
    }
    let memory = MemoryService::with(
        Arc::new(EmbeddedStore::open_in_memory().unwrap()),
        Arc::new(ConstantEmbedder::new(8)),
        PatternIndexConfig::default(),
    );
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .memory(memory.clone())
        .build()
        .await
        .unwrap();
    let tools = gateway.app().tools().clone();
    // claude may use both projects; alpha gives it `memory.write`, so the gate lets it call
    // `remember` at all.
    let claude = Caller::new(
        Principal::new("claude")
            .with_agent("claude")
            .with_grants(gateway.context().grants_for("claude")),
    );
    let call = |name: &str, args: serde_json::Value| {
        let (tools, c, name) = (tools.clone(), claude.clone(), name.to_string());
        async move {
            tools
                .call(&c, &name, args, CallOptions::default())
                .await
                .unwrap()
        }
    };
    let stored = |project: &str| {
        let (memory, filter) = (memory.clone(), MemoryFilter::project(project));
        async move { memory.session.list(&filter, None, 100).await.unwrap().0 }
    };

    let out = call(
        "remember",
        json!({"kind": "decision", "text": "Beta uses Postgres.", "project": "beta"}),
    )
    .await;
    assert_eq!(
        code(&out).as_deref(),
        Some("capability_required"),
        "{}",
        out.all_text()
    );
    assert!(
        out.all_text().contains("memory.write"),
        "{}",
        out.all_text()
    );
    assert!(stored("beta").await.is_empty());

    let out = call(
        "remember",
        json!({"kind": "decision", "text": "Alpha uses SQLite.", "project": "alpha"}),
    )
    .await;
    assert_eq!(code(&out), None, "{}", out.all_text());
    assert_eq!(stored("alpha").await.len(), 1);

    // Reading beta's memories needs no write permission.
    let out = call("recall", json!({"query": "database", "project": "beta"})).await;
    assert_eq!(code(&out), None, "{}", out.all_text());
}
