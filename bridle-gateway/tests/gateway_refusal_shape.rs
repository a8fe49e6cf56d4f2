//! Every refusal an agent receives from the gateway has kberg-core's one shape, the gate's own
//! refusals' (`kberg_core::Refusal`): an `isError` result whose structured content holds
//! `code`, `message`, `tool` (the name the agent called) and `retryable`. Checked through a real
//! MCP client (rmcp's) over HTTP on loopback, on the gateway's own tools (a refusal of its own
//! and one of the rules store), a Kanboard tool mounted as `kanboard__<tool>`, and an upstream's
//! front tool.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;
#[path = "common/whoami_upstream.rs"]
mod whoami_upstream;

use admin_support::gateway::{Gw, refused_in_shape as refused};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_each_kind_of_gateway_tool_names_the_tool() {
    let (url, upstream) = whoami_upstream::start().await;
    // Kanboard is configured for no agent: its tools answer `kanboard_not_configured` before
    // any request to it (none listens at its URL).
    let gw = Gw::start_with_yaml(
        &format!(
            "upstreams:\n  tickets:\n    http: {{url: '{url}'}}\nkanboard:\n  url: 'http://127.0.0.1:9/jsonrpc.php'\n"
        ),
        |b| b,
    )
    .await;
    let claude = gw.mcp_client(gw.file_token("claude")).await;

    // The gateway's own refusal.
    refused(
        &claude,
        "scope_status",
        json!({"ticket": 4242}),
        "not_found",
    )
    .await;
    // The rules store's.
    refused(
        &claude,
        "get_rules",
        json!({"project": "elsewhere"}),
        "unknown_project",
    )
    .await;
    refused(
        &claude,
        "propose_guardrail",
        json!({"project": "demo", "id": "no-force-push", "statement": "Never force-push to main.",
               "severity": "guidance", "session": "two\nlines"}),
        "proposal_rejected",
    )
    .await;
    // A mounted Kanboard tool's.
    refused(
        &claude,
        "kanboard__whoami",
        json!({}),
        "kanboard_not_configured",
    )
    .await;
    // An upstream's front tool's (the demo project grants no `tickets` reads), once listed.
    kberg_testkit::eventually_async("the upstream's tool listed", || async {
        let tools = claude.list_all_tools().await.unwrap();
        tools
            .iter()
            .any(|t| t.name == "tickets__whoami")
            .then_some(())
    })
    .await;
    refused(&claude, "tickets__whoami", json!({}), "capability_required").await;

    claude.cancel().await.unwrap();
    gw.stop().await;
    upstream.cancel();
}
