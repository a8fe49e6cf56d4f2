//! `bridle kanboard serve`: the Kanboard tools alone over stdio, driven by the official Python
//! SDK's stdio client, in front of the Kanboard stand-in. Debug logging is on, to show that
//! logs go to stderr and never corrupt the MCP stream on stdout.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod bridle_support;
#[path = "../../bridle-gateway/tests/support/kanboard_standin.rs"]
mod kanboard_standin;

use std::path::Path;
use std::time::Duration;

use bridle_support::{bridle_bin, python};
use kanboard_standin::{APP_TOKEN, KanboardStandIn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stdio_server_serves_the_kanboard_tools() {
    let kb = KanboardStandIn::start().await;
    let shop = kb.add_project("Shop", &[1]);
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("kanboard-token");
    std::fs::write(&token_file, format!("{APP_TOKEN}\n")).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../bridle-gateway/tests/clients/kanboard_agent.py");
    let run = tokio::process::Command::new(python())
        .arg(script)
        .args(["stdio", &shop.to_string(), bridle_bin()])
        .args(["--log", "debug", "kanboard", "serve", "--url", &kb.endpoint])
        .args(["--project", &shop.to_string(), "--token-file"])
        .arg(&token_file)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the Python client finished")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line:\n{stdout}\n{stderr}"));
    let result: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(result["kind"], "application");
    assert_eq!(result["titles"], serde_json::json!(["Over stdio"]));
    assert_eq!(kb.task_count(shop), 1);
    // The server's debug log went to stderr (which the client passes through).
    assert!(stderr.contains("kanboard answered"), "{stderr}");
}
