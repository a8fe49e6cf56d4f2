//! The audit log as the gateway's record, over real HTTP: tool calls through the MCP endpoint
//! are entries (tool, kind, capability, outcome, duration; never argument values), an agent's
//! proposal is an `agent` entry and an admin's approval a `user` one; the query filters by time,
//! source, actor, agent, project and kind with a cursor; the export is JSON Lines; verify
//! passes; bad queries are problem details; a gateway without a log says so.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use admin_support::{Api, json_ok, problem};
use kberg_agent::{McpSurface, ToolSurface};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const CANARY: &str = "argument-canary-55e1";

fn items(v: &Value) -> &Vec<Value> {
    v["items"].as_array().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_and_changes_are_recorded_and_queried() {
    let gw = Gw::start().await;
    let claude = McpSurface::connect_http_with_bearer(&gw.mcp, &gw.file_token("claude"))
        .await
        .unwrap();
    let r = claude
        .call(
            "get_rules",
            json!({"project": "demo"}),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(!r.is_error);
    let r = claude
        .call(
            "propose_guardrail",
            json!({"project": "demo", "id": "audit-me", "statement": format!("Say {CANARY}."),
                   "severity": "guidance", "session": "s-42"}),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let proposal = r.structured.as_ref().unwrap()["proposal"].as_u64().unwrap();
    // A refused call is recorded with its code.
    let r = claude
        .call(
            "approve_proposal",
            json!({"id": proposal}),
            CancellationToken::new(),
        )
        .await;
    assert!(r.map(|r| r.is_error).unwrap_or(true));

    json_ok(
        gw.post(&format!("/queue/{proposal}/approve"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;

    // Tool calls: the agent, tool, kind, capability, outcome and duration.
    let calls = json_ok(
        gw.get("/audit?kind=tool_call&agent=claude")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let tools: Vec<&str> = items(&calls)
        .iter()
        .map(|e| e["subject"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"get_rules"), "{tools:?}");
    assert!(tools.contains(&"propose_guardrail"), "{tools:?}");
    let propose = items(&calls)
        .iter()
        .find(|e| e["subject"] == "propose_guardrail")
        .unwrap();
    assert_eq!(propose["source"]["type"], "agent");
    assert_eq!(propose["tool"]["tool_kind"], "write");
    assert_eq!(propose["tool"]["capability"], "rules.propose");
    assert!(propose["tool"]["duration_us"].as_u64().is_some());
    assert_eq!(propose["outcome"]["status"], "ok");
    let refused = items(&calls)
        .iter()
        .find(|e| e["outcome"]["status"] == "error");
    assert!(refused.is_some(), "the refused call is recorded: {calls}");

    // The proposal as `agent` (with its session), the approval as `user`, in that order.
    let changes = json_ok(
        gw.get("/audit?project=demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let order: Vec<(String, String)> = items(&changes)
        .iter()
        .filter(|e| e["kind"] != "tool_call")
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["source"]["type"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("proposal".to_string(), "agent".to_string()),
            ("approval".to_string(), "user".to_string())
        ]
    );
    let p = items(&changes)
        .iter()
        .find(|e| e["kind"] == "proposal")
        .unwrap();
    assert_eq!(p["source"]["agent"], "claude");
    assert_eq!(p["source"]["session"], "s-42");
    assert_eq!(p["subject"], format!("proposal #{proposal}"));
    let a = items(&changes)
        .iter()
        .find(|e| e["kind"] == "approval")
        .unwrap();
    assert_eq!(a["source"]["admin"], "alice");
    assert_eq!(a["change"]["before"], "1");
    assert_eq!(a["change"]["after"], "2");

    // Filters: source, actor, time, order; a cursor walks the pages.
    let by_user = json_ok(
        gw.get("/audit?source=user&actor=alice")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(
        items(&by_user)
            .iter()
            .all(|e| e["source"]["type"] == "user")
    );
    let future = json_ok(
        gw.get("/audit?from=2999-01-01T00:00:00Z")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(items(&future).len(), 0);
    let past = json_ok(
        gw.get("/audit?to=2000-01-01T00:00:00Z")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(items(&past).len(), 0);
    let all = json_ok(
        gw.get("/audit?limit=1000").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let total = items(&all).len();
    assert!(total >= 5);
    let mut walked = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("/audit?limit=2&order=desc&cursor={c}"),
            None => "/audit?limit=2&order=desc".to_string(),
        };
        let page = json_ok(gw.get(&url).send().await.unwrap(), StatusCode::OK).await;
        walked.extend(items(&page).iter().map(|e| e["id"].as_u64().unwrap()));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(walked.len(), total);
    assert!(walked.windows(2).all(|w| w[0] > w[1]), "newest first");

    // The export: JSON Lines, every entry, no argument value anywhere.
    let resp = gw.get("/audit/export").send().await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let text = resp.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), total);
    assert!(
        !text.contains(CANARY),
        "an argument value reached the audit log"
    );
    let only = gw
        .get("/audit/export?kind=approval")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(only.lines().count(), 1);

    let verify = json_ok(
        gw.get("/audit/verify").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(verify["intact"], true);
    assert_eq!(verify["checked"].as_u64().unwrap() as usize, total);

    // Bad queries.
    for q in [
        "source=robot",
        "kind=teleport",
        "from=yesterday",
        "to=2026-13-01T00:00:00Z",
        "order=sideways",
        "limit=0",
        "limit=100000",
        "limit=many",
        "cursor=zz",
    ] {
        problem(
            gw.get(&format!("/audit?{q}")).send().await.unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_query",
        )
        .await;
    }
    problem(
        gw.get("/audit/export?source=robot").send().await.unwrap(),
        StatusCode::BAD_REQUEST,
        "invalid_query",
    )
    .await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_audit_log_the_resource_says_so() {
    let api = Api::start().await;
    for p in ["/audit", "/audit/export", "/audit/verify"] {
        problem(
            api.get(p).send().await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE,
            "audit_log_off",
        )
        .await;
    }
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_is_streamed_page_by_page_not_held_in_memory() {
    use bridle_gateway::audit::{Entry, Kind, Surface};
    let gw = Gw::start().await;
    // More than two of the log's pages (1000 entries each).
    let log = gw.ctx.audit().unwrap().clone();
    for i in 0..2_500 {
        log.record(
            Entry::user("alice", Surface::Api, Kind::SecretCreate).subject(format!("s{i} v1")),
        )
        .unwrap();
    }
    let resp = gw
        .get("/audit/export?kind=secret_create")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    // Streamed as it is read: no length known up front (a body built whole in memory has one,
    // and a log of millions of entries would be built whole).
    assert!(
        resp.headers().get("content-length").is_none(),
        "{:?}",
        resp.headers()
    );
    let text = resp.text().await.unwrap();
    let subjects: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["subject"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let expected: Vec<String> = (0..2_500).map(|i| format!("s{i} v1")).collect();
    assert_eq!(subjects, expected, "every entry once, oldest first");
    // An export of nothing is an empty body.
    let none = gw.get("/audit/export?actor=nobody").send().await.unwrap();
    assert_eq!(none.status(), StatusCode::OK);
    assert_eq!(none.text().await.unwrap(), "");
    gw.stop().await;
}
