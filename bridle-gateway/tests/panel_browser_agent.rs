//! The web panel in a real browser with a real agent: an agent driven by the official Python
//! MCP SDK (`tests/clients/admin_agent.py`) subscribes to its rules resource and proposes a
//! guardrail over MCP; an admin signs in to the panel in Chromium, finds the proposal in the
//! review queue with its provenance and approves it there; the agent's subscription fires and
//! its rules resource now shows the guardrail.
//!
//! Needs Chromium and chromedriver (`panel_support::browser`) and the pinned Python SDK in
//! `.tools/venv` (`scripts/install-tools.sh`, or `KBERG_TOOLS_DIR`); without them the test
//! fails, saying which is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

mod panel_support;

use std::process::Stdio;

use panel_support::ALICE;
use panel_support::browser::{Browser, ONE_BROWSER};
use panel_support::live::{Live, client_script, line_with, python};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_proposal_over_mcp_is_approved_in_the_panel_and_the_agent_sees_it() {
    let _one = ONE_BROWSER.lock().await;
    let python = python();
    let live = Live::start().await;
    let tab = Browser::open(live.origin.clone(), false).await;
    tab.login(ALICE).await;

    let mut agent = tokio::process::Command::new(python)
        .arg(client_script("admin_agent.py"))
        .args([
            live.mcp.as_str(),
            live.file_token("claude").as_str(),
            "demo",
            "tests-before-commit",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(agent.stdout.take().unwrap()).lines();
    let id: u64 = line_with(&mut lines, "PROPOSED ").await.parse().unwrap();
    assert_eq!(live.proposal_status(id), "pending");

    // The queue shows it with its provenance: an agent, the claude agent's session.
    let row = tab
        .visit("/panel/queue", &format!("#proposal-{id}"))
        .await
        .text()
        .await
        .unwrap();
    assert!(row.to_lowercase().contains("agent claude"), "{row}");
    // Its own page shows the diff the approval would make.
    let added = tab
        .visit(&format!("/panel/queue/{id}"), ".diff")
        .await
        .text()
        .await
        .unwrap();
    assert!(added.contains("tests-before-commit"), "{added}");

    // Approved in the queue (htmx replaces the row with its decision).
    tab.goto("/panel/queue").await;
    tab.click_when(&format!("#approve-{id}")).await;
    let decided = tab.text_of(&format!("#proposal-{id} .decision")).await;
    assert!(decided.contains("approved"), "{decided}");
    assert!(decided.contains("admin:alice@panel"), "{decided}");
    assert_eq!(live.proposal_status(id), "approved");

    // The agent's subscription fired and its re-read resource shows the guardrail.
    let result: Value = serde_json::from_str(&line_with(&mut lines, "RESULT ").await).unwrap();
    assert_eq!(result["proposal"], id);
    assert_eq!(result["shows_guardrail"], true, "{result}");
    let status = tokio::time::timeout(kberg_testkit::WAIT, agent.wait())
        .await
        .expect("the agent ends")
        .unwrap();
    assert!(status.success(), "the agent's checks held: {status}");

    // The audit page tells it: proposed by the agent, approved by alice in the panel.
    let audit = tab
        .visit("/panel/audit?project=demo", ".audit")
        .await
        .text()
        .await
        .unwrap();
    assert!(audit.contains("proposal"), "{audit}");
    assert!(audit.contains("approval"), "{audit}");
    tab.close().await;
    live.stop().await;
}
