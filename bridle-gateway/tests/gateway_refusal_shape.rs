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

use admin_support::gateway::Gw;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ()>;

async fn connect(gw: &Gw, token: String) -> Client {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.mcp.as_str()).auth_header(token),
    );
    ().serve(transport).await.unwrap()
}

/// Calls `tool`, checks it is refused with `code` in the one shape, and returns the refusal's
/// structured content.
async fn refused(c: &Client, tool: &str, args: Value, code: &str) -> Value {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    let out: CallToolResult = c
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap();
    assert_eq!(out.is_error, Some(true), "{out:?}");
    let s = out.structured_content.unwrap();
    assert_eq!(s["code"], code, "{s}");
    assert!(s["message"].as_str().is_some_and(|m| !m.is_empty()), "{s}");
    assert_eq!(s["tool"], tool, "{s}");
    assert!(s["retryable"].is_boolean(), "{s}");
    s
}

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
    let claude = connect(&gw, gw.file_token("claude")).await;

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
