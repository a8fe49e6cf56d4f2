//! Tool-call audit entries name where the call came in: the official MCP Python SDK, named
//! `origin-probe 4.5.6` in its clientInfo, calls through the gateway, and each `tool_call`
//! entry of its calls (the one that ran and the one the gate refused) holds the agent, its
//! session and its client's name and version. On 2025-11-25 the session is the
//! `Mcp-Session-Id` the client was given and the client is its `initialize`'s; on 2026-07-28,
//! which has no session, the entry has no session and the client the request's `_meta`
//! carries (none when it carries none). An admin's change entry still names the admin and the
//! surface.
//!
//! Needs the pinned Python SDK in `.tools/venv` (`scripts/install-tools.sh`, or
//! `KBERG_TOOLS_DIR`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use admin_support::gateway::Gw;
use admin_support::json_ok;
use kberg_testkit::eventually_async_ok;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const NAME: &str = "origin-probe";
const VERSION: &str = "4.5.6";

fn python() -> PathBuf {
    let tools = std::env::var_os("KBERG_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"));
    let p = tools.join("venv/bin/python");
    assert!(
        p.is_file(),
        "{} is missing: run scripts/install-tools.sh (or set KBERG_TOOLS_DIR)",
        p.display()
    );
    p
}

/// Runs the Python client as `agent` in `era` and returns the session id it printed
/// (`None` for `-`).
async fn run_client(gw: &Gw, agent: &str, era: &str) -> Option<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/origin_agent.py");
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .args([
            gw.mcp.as_str(),
            gw.file_token(agent).as_str(),
            era,
            NAME,
            VERSION,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut session = None;
    let mut done = false;
    tokio::time::timeout(Duration::from_secs(90), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if let Some(s) = l.strip_prefix("SESSION ") {
                session = Some(s.trim().to_string()).filter(|s| s != "-");
            } else if l == "DONE" {
                done = true;
            }
        }
    })
    .await
    .expect("the client finishes");
    let status = child.wait().await.unwrap();
    assert!(
        status.success() && done,
        "the client failed; see its stderr"
    );
    session
}

/// The `tool_call` entries of `agent`, once there are at least `n` (they are written off the
/// call path), oldest first.
async fn tool_calls(gw: &Gw, agent: &str, n: usize) -> Vec<Value> {
    eventually_async_ok(
        &format!("fewer than {n} tool_call entries of {agent}"),
        || async {
            let page = json_ok(
                gw.get(&format!("/audit?kind=tool_call&agent={agent}&order=asc"))
                    .send()
                    .await
                    .unwrap(),
                StatusCode::OK,
            )
            .await;
            let items = page["items"].as_array().unwrap().clone();
            if items.len() >= n {
                Ok(items)
            } else {
                Err(page)
            }
        },
    )
    .await
}

fn by_tool<'a>(entries: &'a [Value], tool: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["subject"] == tool)
        .unwrap_or_else(|| panic!("no entry for {tool}: {entries:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_11_25_call_is_recorded_with_its_session_and_client() {
    let gw = Gw::start().await;
    let session = run_client(&gw, "claude", "handshake")
        .await
        .expect("a 2025-11-25 session has an id");
    let entries = tool_calls(&gw, "claude", 2).await;
    for tool in ["get_rules", "no_such_tool"] {
        let e = by_tool(&entries, tool);
        assert_eq!(e["source"]["type"], "agent", "{e}");
        assert_eq!(e["source"]["agent"], "claude", "{e}");
        assert_eq!(e["source"]["agent_type"], "claude", "{e}");
        assert_eq!(e["source"]["session"], session.as_str(), "{e}");
        assert_eq!(e["source"]["client"]["name"], NAME, "{e}");
        assert_eq!(e["source"]["client"]["version"], VERSION, "{e}");
    }
    assert_eq!(by_tool(&entries, "get_rules")["outcome"]["status"], "ok");
    let refused = by_tool(&entries, "no_such_tool");
    assert_eq!(refused["outcome"]["status"], "error", "{refused}");
    assert_eq!(refused["outcome"]["code"], "unknown_tool", "{refused}");

    // The SDK's client ends its session with a DELETE as it leaves, so the session registry
    // no longer lists the session the entries name.
    let sessions = json_ok(
        gw.get("/sessions?agent=claude").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(
        !sessions["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == session.as_str()),
        "{sessions}"
    );

    // A second client of the same agent gets its own session in its entries.
    let second = run_client(&gw, "claude", "handshake").await.unwrap();
    assert_ne!(second, session);
    let entries = tool_calls(&gw, "claude", 4).await;
    assert_eq!(
        entries
            .iter()
            .filter(|e| e["source"]["session"] == second.as_str())
            .count(),
        2,
        "{entries:?}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_07_28_call_is_recorded_with_the_client_its_request_carries_and_no_session() {
    let gw = Gw::start().await;
    assert_eq!(run_client(&gw, "codex", "modern").await, None);
    let entries = tool_calls(&gw, "codex", 2).await;
    for tool in ["get_rules", "no_such_tool"] {
        let e = by_tool(&entries, tool);
        assert_eq!(e["source"]["agent"], "codex", "{e}");
        assert_eq!(e["source"]["session"], Value::Null, "{e}");
        assert_eq!(e["source"]["client"]["name"], NAME, "{e}");
        assert_eq!(e["source"]["client"]["version"], VERSION, "{e}");
    }

    // A request whose `_meta` carries no clientInfo: no client, no session, the call recorded.
    let r = gw
        .http
        .post(&gw.mcp)
        .bearer_auth(gw.file_token("gemini"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "get_rules")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "get_rules", "arguments": {"project": "demo"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let entries = tool_calls(&gw, "gemini", 1).await;
    let e = by_tool(&entries, "get_rules");
    assert_eq!(e["source"]["session"], Value::Null, "{e}");
    assert_eq!(e["source"]["client"], Value::Null, "{e}");
    assert_eq!(e["outcome"]["status"], "ok", "{e}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admins_change_still_names_the_admin_and_the_surface() {
    let gw = Gw::start().await;
    run_client(&gw, "claude", "handshake").await.unwrap();
    for (surface, name) in [(None, "via-api"), (Some("cli"), "via-cli")] {
        let mut req = gw
            .post("/agents")
            .json(&json!({"name": name, "type": "claude", "projects": ["demo"]}));
        if let Some(s) = surface {
            req = req.header("bridle-surface", s);
        }
        json_ok(req.send().await.unwrap(), StatusCode::CREATED).await;
    }
    let page = json_ok(
        gw.get("/audit?kind=agent_create&order=asc")
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{page}");
    for (e, surface) in items.iter().zip(["api", "cli"]) {
        assert_eq!(e["source"]["type"], "user", "{e}");
        assert_eq!(e["source"]["admin"], "alice", "{e}");
        assert_eq!(e["source"]["surface"], surface, "{e}");
        assert!(e["source"].get("session").is_none(), "{e}");
        assert!(e["source"].get("client").is_none(), "{e}");
    }
    gw.stop().await;
}
