//! End to end: an agent proposes a guardrail over MCP with the official Python SDK; an admin
//! approves it over the admin API; the agent's subscribed rules resource updates; the audit
//! log shows the proposal as `agent` and the approval as `user`, in order; verify passes, and
//! after a hand edit of the approval's row it fails naming that row.
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
use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

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

/// The next stdout line of the client starting with `prefix`, within a deadline.
async fn line_with(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    prefix: &str,
) -> String {
    tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            match lines.next_line().await.unwrap() {
                Some(l) if l.starts_with(prefix) => return l[prefix.len()..].trim().to_string(),
                Some(_) => continue,
                None => panic!("the client ended before printing `{prefix}`; see its stderr"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no `{prefix}` line from the client"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_proposes_an_admin_approves_and_the_audit_log_tells_it_in_order() {
    let gw = Gw::start().await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/admin_agent.py");
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .args([
            gw.mcp.as_str(),
            gw.file_token("claude").as_str(),
            "demo",
            "tests-before-commit",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let proposal: u64 = line_with(&mut lines, "PROPOSED ").await.parse().unwrap();

    // The admin sees it with its provenance and approves it over the API.
    let item = json_ok(
        gw.get(&format!("/queue/{proposal}")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let text = item.to_string();
    assert!(
        text.contains(r#""source":"agent""#) && text.contains(r#""proposed_by":"claude""#),
        "{item}"
    );
    json_ok(
        gw.post(&format!("/queue/{proposal}/approve"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;

    // The agent's subscription fires and the resource shows the guardrail.
    let result: Value = serde_json::from_str(&line_with(&mut lines, "RESULT ").await).unwrap();
    assert_eq!(result["proposal"], proposal);
    assert_eq!(result["shows_guardrail"], true, "{result}");
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    // The audit log: the proposal as agent (the Python SDK's client named), then the approval
    // as user, in order.
    let page = json_ok(
        gw.get("/audit?project=demo").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let changes: Vec<&Value> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] != "tool_call")
        .collect();
    assert_eq!(changes.len(), 2, "{page}");
    let (proposed, approved) = (changes[0], changes[1]);
    assert_eq!(proposed["kind"], "proposal");
    assert_eq!(proposed["source"]["type"], "agent");
    assert_eq!(proposed["source"]["agent"], "claude");
    assert_eq!(proposed["source"]["session"], "py-admin-e2e");
    assert!(
        proposed["source"]["client"]["name"].as_str().is_some(),
        "the client is recorded: {proposed}"
    );
    assert_eq!(approved["kind"], "approval");
    assert_eq!(approved["source"]["type"], "user");
    assert_eq!(approved["source"]["admin"], "alice");
    assert_eq!(approved["source"]["surface"], "api");
    assert!(approved["id"].as_u64() > proposed["id"].as_u64());

    let verify = json_ok(
        gw.get("/audit/verify").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(verify["intact"], true, "{verify}");

    // Someone edits the approval's row by hand: verify names that row.
    let approval_id = approved["id"].as_u64().unwrap();
    let db = rusqlite::Connection::open(gw.tmp.path().join("audit.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE gateway_audit SET actor = 'mallory' WHERE id = ?1",
            [approval_id as i64],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    let verify = json_ok(
        gw.get("/audit/verify").send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(verify["intact"], false, "{verify}");
    assert_eq!(verify["first_break_id"], approval_id);
    assert_eq!(verify["first_break_kind"], "edited");
    gw.stop().await;
}
