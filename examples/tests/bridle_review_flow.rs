//! The review flow end to end over MCP, with the official Python SDK as the agent.
//!
//! `bridle serve` runs as a real process on a free loopback port with a temporary data
//! directory. The agent (`clients/bridle_agent.py`, `mcp==2.3.0`) may propose but not approve:
//! it proposes a guardrail, fails to approve it, subscribes to its rules resource and waits; a
//! person approves on the command line (`bridle rules approve`, a subprocess); the agent is
//! notified, re-reads the resource and `get_rules`, and sees the guardrail with its provenance.
//! A second agent, without the propose permission, is refused everything it may not do, and a
//! wrong token is refused at the door.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod bridle_support;

use std::process::{Command, Stdio};

use bridle_rules::{AgentCatalog, RulesStore, Source};
use bridle_support::*;

const DEMO: &str = "schema_version: 2
revision: 1
project:
  name: Demo
  overview: A demo project.
guardrails:
  - id: no-unrequested-refactors
    statement: Do not perform unrelated refactoring outside the requested task.
    severity: hard-instruction
    provenance: {source: user}
permissions:
  claude:
    rules: {propose: true, approve: false}
  codex:
    rules: {propose: false, approve: false}
";

const ELSEWHERE: &str = "schema_version: 2\nproject: {name: Elsewhere}\n";

const CLAUDE_TOKEN: &str = "claude-secret-0123456789";
const CODEX_TOKEN: &str = "codex-secret-9876543210";

#[test]
fn an_agent_proposes_a_person_approves_and_the_agent_sees_it() {
    let python = python();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    lay_out(
        dir,
        &[
            TestAgent {
                name: "claude",
                agent_type: "claude",
                token: CLAUDE_TOKEN,
                projects: &["demo"],
            },
            TestAgent {
                name: "codex",
                agent_type: "",
                token: CODEX_TOKEN,
                projects: &["demo"],
            },
        ],
        &[("demo", DEMO), ("elsewhere", ELSEWHERE)],
    );
    let server = Server::start(dir);

    // The agent: proposes, fails to approve, waits for the update.
    let mut agent = Reaped(
        Command::new(&python)
            .arg(client_script("bridle_agent.py"))
            .args(["propose", &server.url, CLAUDE_TOKEN, "demo"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let lines = lines_of(&mut agent.0);
    let proposed = expect_line(&lines, "PROPOSED ");
    let parts: Vec<&str> = proposed.split_whitespace().collect();
    let (proposal, ticket) = (parts[1], parts[3]);

    // Nothing is policy yet; the queue holds the proposal with its origin.
    let queue = run_bridle(dir, &["rules", "queue", "--json"]);
    assert!(queue.status.success());
    let queue: serde_json::Value = serde_json::from_slice(&queue.stdout).unwrap();
    assert_eq!(queue[0]["id"].to_string(), proposal);
    assert_eq!(queue[0]["origin"]["source"], "agent");
    assert_eq!(queue[0]["origin"]["proposed_by"], "claude");
    assert_eq!(queue[0]["origin"]["agent_session"], "py-session-1");

    // A person approves on the command line.
    let approved = run_bridle(dir, &["rules", "approve", proposal, "--by", "alice"]);
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    assert!(String::from_utf8_lossy(&approved.stdout).contains("now at revision 2"));

    let result = expect_line(&lines, "RESULT ");
    let result: serde_json::Value =
        serde_json::from_str(result.trim_start_matches("RESULT ")).unwrap();
    let status = agent.0.wait().unwrap();
    assert!(status.success(), "the agent script failed: {status}");
    assert_eq!(result["revision_before"], 1);
    assert_eq!(result["revision_after"], 2);
    // Every notification was for the subscribed resource (an approval may be announced twice:
    // by its file and by its change-log row).
    let notified = result["notified"].as_array().unwrap();
    assert!(!notified.is_empty());
    assert!(
        notified.iter().all(|u| u == "bridle://rules/demo/claude"),
        "{notified:?}"
    );
    let g = &result["guardrail"];
    assert_eq!(g["id"], "tests-before-fix");
    assert_eq!(g["severity"], "hard-instruction");
    assert_eq!(g["provenance"]["source"], "agent");
    assert_eq!(g["provenance"]["proposed_by"], "claude");
    assert_eq!(g["provenance"]["agent_session"], "py-session-1");
    assert_eq!(g["provenance"]["approved_by"], "alice");
    assert_eq!(g["provenance"]["proposal"].to_string(), proposal);
    assert_eq!(result["text_mentions_provenance"], true);

    // The file and the change log agree.
    let store = RulesStore::open(dir, AgentCatalog::builtin()).unwrap();
    let doc = store.load("demo").unwrap().document;
    assert_eq!(
        doc.guardrail("tests-before-fix").unwrap().provenance.source,
        Source::Agent
    );
    let log = store.changes(Some("demo"), 0).unwrap();
    assert_eq!(log.last().unwrap().source, Source::Agent);
    assert_eq!(log.last().unwrap().actor, "alice");

    // Approving twice is a clear error, and changes nothing.
    let again = run_bridle(dir, &["rules", "approve", proposal, "--by", "bob"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already decided"));
    assert_eq!(store.load("demo").unwrap().document.revision, 2);

    // The scope ticket waits for a person; another agent cannot see it.
    let tickets = run_bridle(dir, &["scope", "list"]);
    assert!(String::from_utf8_lossy(&tickets.stdout).contains("rename the db module"));

    let mut other = Reaped(
        Command::new(&python)
            .arg(client_script("bridle_agent.py"))
            .args(["forbidden", &server.url, CODEX_TOKEN, "demo", ticket])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let lines = lines_of(&mut other.0);
    let report = expect_line(&lines, "RESULT ");
    let report: serde_json::Value =
        serde_json::from_str(report.trim_start_matches("RESULT ")).unwrap();
    assert!(other.0.wait().unwrap().success());
    assert!(
        report["propose"]
            .as_str()
            .unwrap()
            .contains("rules.propose"),
        "{report}"
    );
    assert!(
        report["approve"]
            .as_str()
            .unwrap()
            .contains("bridle rules approve"),
        "{report}"
    );
    assert_eq!(report["other_project"], "project_not_allowed");
    // An agent type the gateway cannot render for is not `unknown_agent`, which tells an agent
    // that it itself is no longer a configured agent.
    assert_eq!(report["unknown_agent"], "unknown_agent_type");
    assert_eq!(report["other_ticket"], "not_found");

    // Deciding the ticket.
    let decided = run_bridle(
        dir,
        &["scope", "approve", ticket, "--by", "alice", "--note", "ok"],
    );
    assert!(decided.status.success());
    assert_eq!(
        store.scope_ticket(ticket.parse().unwrap()).unwrap().status,
        "approved"
    );
    drop(server);
}

#[test]
fn wrong_tokens_are_refused_at_the_door() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    lay_out(
        dir,
        &[TestAgent {
            name: "claude",
            agent_type: "claude",
            token: CLAUDE_TOKEN,
            projects: &[],
        }],
        &[("demo", DEMO)],
    );
    let server = Server::start(dir);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let init = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "test", "version": "0"}}
        });
        for auth in [
            None,
            Some("Bearer not-a-token"),
            Some("Bearer codex-secret-9876543210"),
        ] {
            let mut req = client
                .post(&server.url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(init.to_string());
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 401, "{auth:?}");
        }
        let resp = client
            .post(&server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("authorization", format!("Bearer {CLAUDE_TOKEN}"))
            .body(init.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    });
}
