//! Changing which projects an upstream serves at run time (`PATCH /integrations/{ns}`) over real
//! HTTP: a real upstream MCP server on 127.0.0.1 behind the gateway and real MCP clients (rmcp's)
//! connected as agents. `bot` may use only `demo`: while the upstream serves `demo` it lists
//! and calls the upstream's tool; remapped to `ops`, its open session is told the list changed,
//! it no longer lists the tool, and its call answers exactly as a tool that does not exist
//! (`unknown_tool`), while `claude` (every project) still lists and calls it through `ops`.
//! The mapping is in `bridle.yaml` and the audit log (as `user`, lists before and after); every
//! refusal is a problem with its code and leaves the file as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;
#[path = "common/whoami_upstream.rs"]
mod whoami_upstream;

use std::time::Duration;

use admin_support::gateway::Gw;
use admin_support::{json_ok, problem};
use bridle_gateway::config::demo_document;
use bridle_rules::ReadWrite;
use kberg_testkit::eventually_async;
use reqwest::StatusCode;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

const TOOL: &str = "tickets__whoami";

/// An MCP client that passes on every `tools/list_changed` it is sent.
#[derive(Clone)]
struct Listener(mpsc::UnboundedSender<()>);

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientConfig {
        serde_json::from_value(json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "mapping-test", "version": "1"}
        }))
        .unwrap()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.0.send(());
    }
}

async fn connect(
    url: &str,
    token: &str,
) -> (
    RunningService<RoleClient, Listener>,
    mpsc::UnboundedReceiver<()>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    );
    (Listener(tx).serve(transport).await.unwrap(), rx)
}

async fn call(c: &RunningService<RoleClient, Listener>) -> CallToolResult {
    c.call_tool(CallToolRequestParams::new(TOOL)).await.unwrap()
}

async fn lists(c: &RunningService<RoleClient, Listener>) -> bool {
    let tools = c.list_all_tools().await.unwrap();
    tools.iter().any(|t| t.name == TOOL)
}

/// What a call of `name` answers (a result, or the protocol error an unknown tool gets), as
/// text with the called name written as `{tool}`.
async fn answer_of(c: &RunningService<RoleClient, Listener>, name: &str) -> String {
    let answer = match c
        .call_tool(CallToolRequestParams::new(name.to_string()))
        .await
    {
        Ok(r) => serde_json::to_string(&r).unwrap(),
        Err(e) => format!("{e:?}"),
    };
    answer.replace(name, "{tool}")
}

/// Waits (with a deadline) until the agent is offered the upstream's tool.
async fn until_listed(c: &RunningService<RoleClient, Listener>) {
    eventually_async(&format!("{TOOL} to be offered"), || async {
        let tools = c.list_all_tools().await.unwrap();
        tools.iter().any(|t| t.name == TOOL).then_some(())
    })
    .await;
}

fn granting_tickets_reads() -> bridle_rules::RulesDocument {
    let mut doc = demo_document();
    doc.permissions.get_mut("claude").unwrap().tools.insert(
        "tickets".into(),
        ReadWrite {
            read: true,
            write: false,
        },
    );
    doc
}

/// A gateway whose upstream `tickets` serves only `demo`, with projects `demo` and `ops` both
/// letting claude-type agents read through it; and `bot`'s token.
async fn mapped_to_demo() -> (Gw, tokio_util::sync::CancellationToken, String) {
    let (url, upstream) = whoami_upstream::start().await;
    let gw = Gw::start_with_yaml(
        &format!("upstreams:\n  tickets:\n    http: {{url: '{url}'}}\n    projects: [demo]\n"),
        |b| b,
    )
    .await;
    // Both projects let claude-type agents read through `tickets`.
    let demo = gw.ctx.store.load("demo").unwrap().document;
    let mut edited = granting_tickets_reads();
    edited.revision = demo.revision;
    gw.ctx
        .store
        .save_edit("demo", &edited, demo.revision, "test", "tickets reads")
        .unwrap();
    gw.ctx
        .store
        .create("ops", &granting_tickets_reads(), "test")
        .unwrap();
    let bot_token = gw
        .all_agent_tokens()
        .into_iter()
        .find(|(a, _)| a == "bot")
        .unwrap()
        .1;
    (gw, upstream, bot_token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_projects_change_at_run_time_and_refusals_leave_the_file_alone() {
    let (gw, upstream, bot_token) = mapped_to_demo().await;
    let (bot, mut bot_changed) = connect(&gw.mcp, &bot_token).await;
    let (claude, _claude_changed) = connect(&gw.mcp, &gw.file_token("claude")).await;
    until_listed(&bot).await;
    until_listed(&claude).await;
    let r = call(&bot).await;
    assert_ne!(
        r.is_error,
        Some(true),
        "bot may call while demo is served: {r:?}"
    );

    // Remapped to `ops`: bot's session is told, its next call refused; claude goes on.
    while bot_changed.try_recv().is_ok() {}
    let changed = json_ok(
        gw.patch("/integrations/tickets")
            .json(&json!({"projects": ["ops"]}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(changed["projects"], json!(["ops"]), "{changed}");
    tokio::time::timeout(Duration::from_secs(20), bot_changed.recv())
        .await
        .expect("bot's session is told its list changed")
        .unwrap();
    assert!(!lists(&bot).await, "bot still lists {TOOL}");
    // Refused `unknown_tool`, word for word what a name that never existed answers: nothing
    // says the tool is there.
    let hidden = answer_of(&bot, TOOL).await;
    assert!(hidden.contains("unknown_tool"), "{hidden}");
    assert_eq!(hidden, answer_of(&bot, "tickets__no_such_tool").await);
    assert!(lists(&claude).await, "claude, still mapped, lists {TOOL}");
    let r = call(&claude).await;
    assert_ne!(r.is_error, Some(true), "claude still reaches ops: {r:?}");
    assert_eq!(gw.config_on_disk().upstreams["tickets"].projects, ["ops"]);
    let shown = json_ok(
        gw.get("/integrations/tickets").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(shown["projects"], json!(["ops"]));
    let listed = json_ok(
        gw.get("/integrations?project=demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(listed["items"], json!([]), "{listed}");

    // Every project again (an empty list), with duplicates folded: bot calls once more.
    let all = json_ok(
        gw.patch("/integrations/tickets")
            .json(&json!({"projects": []}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(all["projects"], json!([]));
    assert!(lists(&bot).await, "bot lists {TOOL} again");
    let r = call(&bot).await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let twice = json_ok(
        gw.patch("/integrations/tickets")
            .json(&json!({"projects": ["demo", "ops", "demo"]}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(twice["projects"], json!(["demo", "ops"]));

    let audit = json_ok(
        gw.get("/audit?kind=upstream_change&source=user")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let items = audit["items"].as_array().unwrap();
    let changes: Vec<(&str, &str)> = items
        .iter()
        .map(|e| {
            (
                e["change"]["before"].as_str().unwrap(),
                e["change"]["after"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("demo", "ops"),
            ("ops", "all projects"),
            ("all projects", "demo,ops")
        ],
        "{audit}"
    );
    for e in items {
        assert_eq!(e["source"]["admin"], "alice");
        assert_eq!(e["source"]["surface"], "api");
        assert_eq!(e["subject"], "tickets");
    }

    // Refusals: each a problem with its code, the file untouched.
    let file = gw.tmp.path().join("bridle.yaml");
    let before = std::fs::read(&file).unwrap();
    let patch = |path: &str, body: &str| {
        gw.patch(path)
            .header("content-type", "application/json")
            .body(body.to_string())
    };
    let cases: [(&str, &str, StatusCode, &str); 7] = [
        (
            "/integrations/nope",
            r#"{"projects": []}"#,
            StatusCode::NOT_FOUND,
            "unknown_integration",
        ),
        (
            "/integrations/tickets",
            r#"{"projects": ["ghost"]}"#,
            StatusCode::NOT_FOUND,
            "unknown_project",
        ),
        (
            "/integrations/tickets",
            r#"{"projects": ["../etc"]}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "/integrations/tickets",
            r#"{"projects": "demo"}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "/integrations/tickets",
            r#"{"projects": [], "enabled": false}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "/integrations/tickets",
            r#"{}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            "/integrations/tickets",
            r#"{"projects": ["#,
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
    ];
    for (path, body, status, code) in cases {
        problem(patch(path, body).send().await.unwrap(), status, code).await;
    }
    let huge = format!(r#"{{"projects": ["{}"]}}"#, "a".repeat(2 * 1024 * 1024));
    problem(
        patch("/integrations/tickets", &huge).send().await.unwrap(),
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
    )
    .await;
    let mut tokens = vec![None, Some("wrong".to_string())];
    tokens.extend(gw.all_agent_tokens().into_iter().map(|(_, t)| Some(t)));
    for t in tokens {
        let req = gw
            .http
            .patch(gw.url("/integrations/tickets"))
            .json(&json!({"projects": []}));
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
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "a refusal changed bridle.yaml"
    );
    assert_eq!(
        gw.config_on_disk().upstreams["tickets"].projects,
        ["demo", "ops"]
    );
    let _: Value = json_ok(
        gw.get("/integrations/tickets").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    bot.cancel().await.unwrap();
    claude.cancel().await.unwrap();
    gw.stop().await;
    upstream.cancel();
}

/// The other side of the mapping: the agent's own projects changed (`PATCH /agents/{name}`)
/// while its session is open. Its session is told its list changed, as for a remapped upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_projects_changed_at_run_time_tell_its_session() {
    let (gw, upstream, bot_token) = mapped_to_demo().await;
    let (bot, mut bot_changed) = connect(&gw.mcp, &bot_token).await;
    until_listed(&bot).await;

    for (projects, listed) in [(json!(["ops"]), false), (json!(["demo"]), true)] {
        while bot_changed.try_recv().is_ok() {}
        let changed = json_ok(
            gw.patch("/agents/bot")
                .json(&json!({"projects": projects}))
                .send()
                .await
                .unwrap(),
            StatusCode::OK,
        )
        .await;
        assert_eq!(changed["projects"], projects, "{changed}");
        tokio::time::timeout(Duration::from_secs(20), bot_changed.recv())
            .await
            .expect("bot's session is told its list changed")
            .unwrap();
        assert_eq!(lists(&bot).await, listed, "bot on {projects}");
        if !listed {
            let hidden = answer_of(&bot, TOOL).await;
            assert_eq!(hidden, answer_of(&bot, "tickets__no_such_tool").await);
        }
    }
    let r = call(&bot).await;
    assert_ne!(r.is_error, Some(true), "bot on demo again: {r:?}");
    bot.cancel().await.unwrap();
    gw.stop().await;
    upstream.cancel();
}
