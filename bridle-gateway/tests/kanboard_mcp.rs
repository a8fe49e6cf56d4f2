//! The Kanboard tools over a real MCP endpoint (Streamable HTTP on 127.0.0.1), driven by the
//! official Python SDK client, in front of the Kanboard stand-in: each agent's bearer token
//! picks its Kanboard credential and grants on every request.
//!
//! Needs the pinned Python `mcp` SDK from `scripts/install-tools.sh` (in `.tools/`, or
//! `$KBERG_TOOLS_DIR`).

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::kanboard::{
    self, Credential, KANBOARD_WRITE, KanboardClient, KanboardTools, StaticAccess,
};
use kberg_core::{Grants, Principal, ToolRegistry};
use kberg_server::{BearerTokens, HttpConfig, HttpServer, McpApp};
use serde_json::Value;
use support::kanboard_standin::KanboardStandIn;

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

/// Runs the client script and returns its `RESULT` JSON, failing with its stderr otherwise.
async fn client(args: &[String]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/kanboard_agent.py");
    let run = tokio::process::Command::new(python())
        .arg(script)
        .args(args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Python client finished")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "client {args:?} failed:\n{stdout}\n{stderr}"
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line:\n{stdout}\n{stderr}"));
    serde_json::from_str(line).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_uses_the_kanboard_tools_with_its_own_credentials() {
    let kb = KanboardStandIn::start().await;
    let claude_user = kb.add_user("claude-bot", "claude-kb-token");
    let codex_user = kb.add_user("codex-bot", "codex-kb-token");
    let shop = kb.add_project("Shop", &[1, claude_user, codex_user]);
    let secret = kb.add_project("Secret", &[1]);

    let access = StaticAccess::new()
        .agent(
            "claude",
            Credential::User {
                username: "claude-bot".into(),
                token: "claude-kb-token".into(),
            },
            [shop],
        )
        .agent(
            "reader",
            Credential::User {
                username: "codex-bot".into(),
                token: "codex-kb-token".into(),
            },
            [shop],
        );
    let client_kb =
        KanboardClient::new(kb.endpoint.parse().unwrap(), Duration::from_secs(10)).unwrap();
    let tools = ToolRegistry::new();
    kanboard::register(&tools, KanboardTools::new(client_kb, Arc::new(access))).unwrap();
    let app = McpApp::builder("bridle-kanboard-test", "0")
        .tools(tools)
        .build();
    let auth = BearerTokens::new()
        .with_token(
            "claude-mcp-token",
            Principal::new("claude").with_grants(Grants::of([KANBOARD_WRITE])),
        )
        .with_token("reader-mcp-token", Principal::new("reader"));
    let server = HttpServer::bind(
        app,
        HttpConfig::new("127.0.0.1:0".parse().unwrap())
            .path("/mcp")
            .auth(auth),
    )
    .await
    .unwrap();
    let url = format!("http://{}/mcp", server.local_addr());
    // Served until the shutdown token is cancelled at the end of the test.
    let stop = server.shutdown_token();
    let serving = tokio::spawn(server.run(std::future::pending::<()>()));

    let result = client(&[
        "agent".into(),
        url.clone(),
        "claude-mcp-token".into(),
        shop.to_string(),
        secret.to_string(),
    ])
    .await;
    let task_id = result["task_id"].as_i64().unwrap();
    assert_eq!(
        kb.task_count(shop),
        1,
        "the retried create made no duplicate"
    );

    let result = client(&[
        "reader".into(),
        url.clone(),
        "reader-mcp-token".into(),
        shop.to_string(),
    ])
    .await;
    assert_eq!(result["user"], "codex-bot");
    assert_eq!(result["closed"], 1);

    let result = client(&["badtoken".into(), url.clone()]).await;
    assert_eq!(result["refused"], true);

    // Every Kanboard request carried the calling agent's own Kanboard user.
    let log = kb.log();
    assert!(
        log.iter()
            .any(|(who, m)| who == "claude-bot" && m == "createTask")
    );
    assert!(
        log.iter()
            .any(|(who, m)| who == "codex-bot" && m == "getAllTasks")
    );
    assert!(
        !log.iter()
            .any(|(who, m)| who == "codex-bot" && m.starts_with("create")),
        "the reader's writes never reached Kanboard: {log:?}"
    );
    assert!(task_id > 0);
    stop.cancel();
    serving.await.unwrap().unwrap();
}
