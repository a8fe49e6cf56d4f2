//! Assembling the gateway's MCP app: its own tools, optional memory tools, the rules resources,
//! and the instructions every agent is given on connect. With the state in PostgreSQL the app's
//! confirm tickets are kept there too (`tickets`), so every replica sees and decides one set.

use std::sync::Arc;

use kberg_core::{ResourceRegistry, Tool, ToolRegistry};
use kberg_server::McpApp;

use crate::context::GatewayContext;
use crate::error::{GatewayError, NamedRefusals};
use crate::ops::GatewayMetrics;
use crate::resources::register_resources;
use crate::tools::register_tools;

/// Builds the gateway app (rules only).
pub fn build_app(ctx: &Arc<GatewayContext>) -> Result<McpApp, GatewayError> {
    build_app_with(ctx, None)
}

/// Builds the gateway app, with bridle-memory's four tools when `memory` is given (their
/// `memory.write` / `memory.index` capabilities come from the projects' `permissions.memory`).
pub fn build_app_with(
    ctx: &Arc<GatewayContext>,
    memory: Option<bridle_memory::tools::MemoryTools>,
) -> Result<McpApp, GatewayError> {
    build_app_observed(ctx, memory, None)
}

/// [`build_app_with`], with every tool call also counted in `metrics` (the gateway's
/// `/metrics`).
pub fn build_app_observed(
    ctx: &Arc<GatewayContext>,
    memory: Option<bridle_memory::tools::MemoryTools>,
    metrics: Option<&Arc<GatewayMetrics>>,
) -> Result<McpApp, GatewayError> {
    let mut sink: Arc<dyn kberg_core::AuditSink> = ctx.tool_call_sink();
    if let Some(m) = metrics {
        sink = m.audit_sink(sink);
    }
    #[allow(unused_mut)] // Only the PostgreSQL build changes it.
    let mut builder = ToolRegistry::builder().audit_sink(ctx.sessions.audit_sink(Some(sink)));
    #[cfg(feature = "postgres")]
    if let Some(db) = ctx.store.postgres() {
        builder = builder.ticket_store(Arc::new(crate::tickets::PgTicketStore::open(db.clone())?));
    }
    let tools = builder.build();
    register_tools(&tools, ctx)?;
    let with_memory = memory.is_some();
    if let Some(memory) = memory {
        let (patterns, listener) = (Arc::clone(&memory.patterns), memory.on_indexed.clone());
        // Registered, as every gateway tool is, in `NamedRefusals`: each refusal names the tool
        // the agent called (see `crate::error`).
        bridle_memory::tools::declare(&tools)?;
        tools.register_all(
            bridle_memory::tools::tools(memory)
                .into_iter()
                .map(|t| Arc::new(NamedRefusals::new(t)) as Arc<dyn Tool>),
        )?;
        // The refresh tool runs through the gateway's index-run registry (one run per tag,
        // shared with the admin API).
        crate::memory::refresh::replace_refresh_tool(
            &tools,
            patterns,
            listener,
            ctx.index_runs.clone(),
            Arc::clone(ctx),
        )?;
    }
    let resources = ResourceRegistry::new();
    register_resources(&resources, ctx)?;
    resources.set_visibility(crate::resources::RulesVisibility::new(Arc::clone(ctx)));
    let mut instructions = String::from(
        "Bridle holds this project's canonical rules. At the start of a session call `get_rules` (or read the `bridle://rules/<project>/<agent>` resource) and follow them. Propose rule changes with `propose_guardrail`, `add_pattern` or `update_rules`; a person approves them. Before expanding the scope of a task, call `request_scope_approval` and wait.",
    );
    if with_memory {
        instructions.push_str(" Before writing code for a pattern, call `search_pattern_examples` for examples; `recall` finds decisions from earlier sessions and `remember` stores new ones.");
    }
    Ok(McpApp::builder("bridle", env!("CARGO_PKG_VERSION"))
        .title("Bridle")
        .instructions(instructions)
        .tools(tools)
        .resources(resources)
        .build())
}
