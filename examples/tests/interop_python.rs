//! Interop: the official Python MCP SDK client (PyPI `mcp==2.3.0`, pinned in
//! `tools/requirements.txt`) against the Kberg notes app, over Streamable HTTP and stdio, in the
//! SDK's default mode (2026-07-28 via `server/discover`, falling back to `initialize`) and in
//! its legacy mode (2025-11-25 handshake).
//!
//! The client script is `tests/clients/notes_client.py`; it connects, lists, calls a Read tool,
//! is refused a Write tool for lack of a capability (`capability_required`), gets per-field
//! diagnostics for bad arguments, subscribes and receives an update, follows progress, cancels
//! an in-flight slow call and sees the tool observe it, and ends the session. Needs
//! `scripts/install-tools.sh` (or `KBERG_TOOLS_DIR`).

mod common;

use std::time::Duration;

use common::{NOTES_CHECKS, client_script, run_client, start_notes, tool};

const DEADLINE: Duration = Duration::from_secs(180);

fn python_args(extra: &[&str]) -> Vec<String> {
    let mut v = vec![client_script("notes_client.py").display().to_string()];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

async fn over_http(mode: &str) -> common::ClientRun {
    let server = start_notes().await;
    let run = run_client(
        tool("venv/bin/python"),
        python_args(&["--url", &server.url, "--mode", mode]),
        DEADLINE,
    )
    .await;
    let mut checks = NOTES_CHECKS.to_vec();
    checks.push("reader-refused");
    run.assert_passed(&checks);
    // The writer added exactly one note ("From Python") to the welcome note.
    let titles: Vec<String> = server.state.all().into_iter().map(|n| n.title).collect();
    assert_eq!(titles, ["Welcome", "From Python"]);
    run
}

async fn over_stdio(mode: &str) -> common::ClientRun {
    let run = run_client(
        tool("venv/bin/python"),
        python_args(&[
            "--stdio",
            env!("CARGO_BIN_EXE_kberg-interop"),
            "--mode",
            mode,
        ]),
        DEADLINE,
    )
    .await;
    run.assert_passed(NOTES_CHECKS);
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_over_http_negotiates_2026_07_28() {
    let run = over_http("auto").await;
    assert_eq!(run.version(), Some("2026-07-28"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_over_http_with_the_2025_11_25_handshake() {
    let run = over_http("legacy").await;
    assert_eq!(run.version(), Some("2025-11-25"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_over_stdio_negotiates_2026_07_28() {
    let run = over_stdio("auto").await;
    assert_eq!(run.version(), Some("2026-07-28"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_over_stdio_with_the_2025_11_25_handshake() {
    let run = over_stdio("legacy").await;
    assert_eq!(run.version(), Some("2025-11-25"));
}
