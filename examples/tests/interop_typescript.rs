//! Interop: the official TypeScript MCP SDK client (npm `@modelcontextprotocol/sdk@1.32.2`,
//! pinned in `tools/package.json`, protocol 2025-11-25) against the Kberg notes app over
//! Streamable HTTP with bearer tokens.
//!
//! The client script is `tests/clients/notes_client.cjs` (run with the pinned Node 22); besides
//! the common checks it verifies that a request naming the ended session is answered 404.
//! Needs `scripts/install-tools.sh` (or `KBERG_TOOLS_DIR`).

mod common;

use std::time::Duration;

use common::{NOTES_CHECKS, client_script, run_client, start_notes, tool, tools_dir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_client_over_http() {
    let server = start_notes().await;
    let sdk = tool("node/node_modules/@modelcontextprotocol/sdk/package.json");
    assert!(sdk.exists());
    let run = run_client(
        tool("node/bin/node"),
        vec![
            client_script("notes_client.cjs").display().to_string(),
            tools_dir().display().to_string(),
            server.url.clone(),
        ],
        Duration::from_secs(120),
    )
    .await;
    let mut checks = NOTES_CHECKS.to_vec();
    checks.extend(["reader-refused", "subscribed"]);
    run.assert_passed(&checks);
    assert_eq!(run.version(), Some("2025-11-25"));
    let titles: Vec<String> = server.state.all().into_iter().map(|n| n.title).collect();
    assert_eq!(titles, ["Welcome", "From TypeScript"]);
}
