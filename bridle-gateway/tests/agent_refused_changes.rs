//! An agent's refused change is in the audit log, through a real MCP client (rmcp's) over HTTP
//! on loopback.
//!
//! The gate records every call as a `tool_call` entry, but a refusal the tool itself answers
//! (a project the agent is not configured for, a project whose rules do not let its type
//! propose, a field the store refuses) is a result to the gate: its entry says `ok` and names
//! no project. So a refused proposal or scope request is also an `agent` entry of its kind
//! (`proposal`, `scope_request`) whose outcome is the refusal's code, with the project it named
//! and never a value the agent sent that the gateway would not record on success.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::{Gw, McpClient};
use admin_support::json_ok;
use bridle_gateway::config::demo_document;
use reqwest::StatusCode;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};

/// Calls `tool` and returns the code of the refusal it answers.
async fn refused(c: &McpClient, tool: &'static str, args: Value) -> String {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    let out: CallToolResult = c
        .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
        .await
        .unwrap();
    assert_eq!(out.is_error, Some(true), "{out:?}");
    out.structured_content.unwrap()["code"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The audit entries `GET /audit{query}` lists, once there are `n` of them.
async fn entries(gw: &Gw, query: &str, n: usize) -> Vec<Value> {
    kberg_testkit::eventually_async(&format!("{n} entries for {query}"), || async {
        let page = json_ok(
            gw.get(&format!("/audit{query}")).send().await.unwrap(),
            StatusCode::OK,
        )
        .await;
        let items = page["items"].as_array().unwrap().clone();
        (items.len() >= n).then_some(items)
    })
    .await
}

fn find<'a>(items: &'a [Value], agent: &str, code: &str) -> &'a Value {
    items
        .iter()
        .find(|e| e["source"]["agent"] == agent && e["outcome"]["code"] == code)
        .unwrap_or_else(|| panic!("no {code} entry of {agent}: {items:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_proposal_or_scope_request_is_recorded_with_its_code() {
    let gw = Gw::start().await;
    // `other`: the rules there do not let a claude propose.
    let mut other = demo_document();
    other.permissions.get_mut("claude").unwrap().rules.propose = false;
    gw.ctx.store.create("other", &other, "test").unwrap();
    let created = json_ok(
        gw.post("/agents")
            .json(&json!({"name": "demo-bot", "type": "claude", "projects": ["demo"]}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let bot = gw
        .mcp_client(created["token"]["token"].as_str().unwrap().into())
        .await;
    let claude = gw.mcp_client(gw.file_token("claude")).await;
    let guardrail = |project: &str, session: &str| {
        json!({"project": project, "id": "tests-first", "statement": "Run the tests first.",
               "severity": "guidance", "session": session})
    };

    // Another project than its own.
    let code = refused(&bot, "propose_guardrail", guardrail("other", "s-1")).await;
    assert_eq!(code, "project_not_allowed");
    let code = refused(
        &bot,
        "request_scope_approval",
        json!({"project": "other", "action": "touch CI", "reason": "broken", "session": "s-2"}),
    )
    .await;
    assert_eq!(code, "project_not_allowed");
    // A project whose rules do not let its type propose (its grant comes from `demo`).
    let code = refused(&claude, "propose_guardrail", guardrail("other", "s-3")).await;
    assert_eq!(code, "capability_required");
    // A field the store refuses, and a session the gateway does not record.
    let rev = gw.ctx.store.load("demo").unwrap().document.revision;
    let code = refused(
        &claude,
        "update_rules",
        json!({"project": "demo", "base_revision": rev + 5, "stack": ["Rust"], "session": "s-4"}),
    )
    .await;
    assert_eq!(code, "revision_conflict");
    let code = refused(&claude, "propose_guardrail", guardrail("demo", "s 5\n# x")).await;
    assert_eq!(code, "proposal_rejected");
    // A project name that is no name is not recorded as one.
    let code = refused(&bot, "propose_guardrail", guardrail("Other\n# x", "s-6")).await;
    assert_eq!(code, "project_not_allowed");

    let proposals = entries(&gw, "?kind=proposal", 5).await;
    let e = find(&proposals, "demo-bot", "project_not_allowed");
    assert_eq!(e["project"], "other", "{e}");
    assert_eq!(e["source"]["type"], "agent", "{e}");
    assert_eq!(e["source"]["session"], "s-1", "{e}");
    assert_eq!(e["outcome"]["status"], "error", "{e}");
    let e = find(&proposals, "claude", "capability_required");
    assert_eq!(e["project"], "other", "{e}");
    let e = find(&proposals, "claude", "revision_conflict");
    assert_eq!(e["project"], "demo", "{e}");
    let e = find(&proposals, "claude", "proposal_rejected");
    assert_eq!(e["project"], "demo", "{e}");
    assert!(e["source"]["session"].is_null(), "{e}");
    let unnamed = proposals
        .iter()
        .find(|e| e["source"]["agent"] == "demo-bot" && e["project"] != "other")
        .unwrap_or_else(|| panic!("{proposals:#?}"));
    assert!(unnamed["project"].is_null(), "{unnamed}");
    assert_eq!(unnamed["outcome"]["code"], "project_not_allowed");

    let tickets = entries(&gw, "?kind=scope_request", 1).await;
    let e = find(&tickets, "demo-bot", "project_not_allowed");
    assert_eq!(e["project"], "other", "{e}");
    assert_eq!(e["source"]["session"], "s-2", "{e}");

    // Nothing was queued or opened.
    assert!(gw.ctx.store.queue(None, false).unwrap().is_empty());
    assert!(gw.ctx.store.scope_tickets(true).unwrap().is_empty());
    bot.cancel().await.unwrap();
    claude.cancel().await.unwrap();
    gw.stop().await;
}
