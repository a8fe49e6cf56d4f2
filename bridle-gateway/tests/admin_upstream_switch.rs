//! Enabling and disabling an upstream at run time over real HTTP: a real upstream MCP server on
//! 127.0.0.1 behind the gateway, a real MCP client connected as an agent. Disabled, the
//! upstream's tools are gone from the agent's list on its open session and a call is refused;
//! enabled, they return. The change is in `bridle.yaml` and the audit log as `user`; no, wrong
//! and agents' credentials are refused, an unknown namespace is 404.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;
#[path = "common/whoami_upstream.rs"]
mod whoami_upstream;

use admin_support::gateway::Gw;
use admin_support::{json_ok, problem};
use kberg_agent::{McpSurface, ToolSurface};
use kberg_testkit::eventually_async_ok;
use reqwest::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

async fn tool_names(s: &McpSurface) -> Vec<String> {
    s.tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect()
}

/// Polls the agent's tool list until `want` says it is as expected, within a deadline.
async fn until_tools(s: &McpSurface, want: impl Fn(&[String]) -> bool) -> Vec<String> {
    eventually_async_ok("the tool list as expected", || async {
        let names = tool_names(s).await;
        if want(&names) {
            Ok(names)
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await
}

const TOOL: &str = "tickets__whoami";

/// Enables `tickets` through the API and checks it is back for `agent`: listed, and its call
/// passing the switch to reach the gateway's per-project permission check (the demo project
/// grants no `tickets` reads), where a disabled upstream's call never gets. The change is in
/// `bridle.yaml`.
async fn enable_and_call(gw: &Gw, agent: &McpSurface) {
    let on = json_ok(
        gw.post("/integrations/tickets/enable")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(on["enabled"], true);
    until_tools(agent, |n| n.iter().any(|t| t == TOOL)).await;
    let r = agent
        .call(TOOL, json!({}), CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        r.structured.as_ref().unwrap()["code"],
        "capability_required",
        "{r:?}"
    );
    assert!(gw.config_on_disk().upstreams["tickets"].enabled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_disabled_and_enabled_at_run_time_leaves_and_rejoins_the_agents_lists() {
    let (url, upstream) = whoami_upstream::start().await;
    let gw = Gw::start_with_yaml(
        &format!("upstreams:\n  tickets:\n    http: {{url: '{url}'}}\n"),
        |b| b,
    )
    .await;
    let agent = McpSurface::connect_http_with_bearer(&gw.mcp, &gw.file_token("claude"))
        .await
        .unwrap();
    until_tools(&agent, |n| n.iter().any(|t| t == TOOL)).await;

    let off = json_ok(
        gw.post("/integrations/tickets/disable")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(off["enabled"], false);
    assert_eq!(off["tool_count"], 0);
    // Gone from the open session's list when the answer arrives, and refused if called.
    assert!(!tool_names(&agent).await.iter().any(|t| t == TOOL));
    match agent.call(TOOL, json!({}), CancellationToken::new()).await {
        Err(_) => {}
        Ok(r) => assert!(r.is_error, "a disabled upstream's tool ran: {r:?}"),
    }
    assert!(!gw.config_on_disk().upstreams["tickets"].enabled);
    // Disabling again changes nothing and says so.
    let again = json_ok(
        gw.post("/integrations/tickets/disable")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(again["enabled"], false);

    enable_and_call(&gw, &agent).await;
    let shown = json_ok(
        gw.get("/integrations/tickets").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(shown["enabled"], true);
    assert_eq!(shown["projects"], json!([]));

    let audit = json_ok(
        gw.get("/audit?kind=upstream_change&source=user")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let items = audit["items"].as_array().unwrap();
    let after: Vec<&str> = items
        .iter()
        .map(|e| e["change"]["after"].as_str().unwrap())
        .collect();
    assert_eq!(after, ["disabled", "disabled", "enabled"], "{audit}");
    for e in items {
        assert_eq!(e["source"]["admin"], "alice");
        assert_eq!(e["subject"], "tickets");
    }

    // Refusals: no, wrong and agents' credentials; an unknown namespace.
    let mut tokens = vec![None, Some("wrong".to_string())];
    tokens.extend(gw.all_agent_tokens().into_iter().map(|(_, t)| Some(t)));
    for t in tokens {
        for p in [
            "/integrations/tickets/disable",
            "/integrations/tickets/enable",
        ] {
            let req = gw.http.post(gw.url(p));
            let req = match &t {
                Some(t) => req.bearer_auth(t),
                None => req,
            };
            problem(
                req.send().await.unwrap(),
                StatusCode::UNAUTHORIZED,
                "unauthorized",
            )
            .await;
        }
    }
    for p in ["/integrations/nope/disable", "/integrations/nope/enable"] {
        problem(
            gw.post(p).send().await.unwrap(),
            StatusCode::NOT_FOUND,
            "unknown_integration",
        )
        .await;
    }
    assert!(gw.config_on_disk().upstreams["tickets"].enabled);
    gw.stop().await;
    upstream.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_disabled_in_the_config_at_start_can_be_enabled_at_run_time() {
    let (url, upstream) = whoami_upstream::start().await;
    let gw = Gw::start_with_yaml(
        &format!("upstreams:\n  tickets:\n    http: {{url: '{url}'}}\n    enabled: false\n"),
        |b| b,
    )
    .await;
    let agent = McpSurface::connect_http_with_bearer(&gw.mcp, &gw.file_token("claude"))
        .await
        .unwrap();
    assert!(!tool_names(&agent).await.iter().any(|t| t == TOOL));

    enable_and_call(&gw, &agent).await;
    gw.stop().await;
    upstream.cancel();
}
