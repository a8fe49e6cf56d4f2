//! `bridle serve` with a `memory:` section whose embedding server is not up yet (a Compose
//! stack where it starts after the gateway): the gateway starts and serves MCP; memory's tools
//! answer the retryable `embedder_unavailable` until the server answers (bridle-memory's
//! `tests/embedder_late.rs` covers that part).
#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod bridle_support;

use bridle_support::*;

const TOKEN: &str = "claude-embedder-late-token-0123456789";

#[test]
fn the_gateway_starts_while_its_embedding_server_is_down() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    lay_out(
        dir,
        &[TestAgent {
            name: "claude",
            agent_type: "claude",
            token: TOKEN,
            projects: &["demo"],
        }],
        &[(
            "demo",
            "schema_version: 2\nrevision: 1\nproject:\n  name: Demo\n  overview: A demo project.\n",
        )],
    );
    let mut config = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
    config.push_str(&format!(
        "memory:\n  embedder:\n    openai:\n      url: {}/v1\n      model: nomic-embed-text\n",
        kberg_testkit::net::closed_port_url()
    ));
    std::fs::write(dir.join("bridle.yaml"), config).unwrap();

    let server = Server::start(dir);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt.block_on(async {
        reqwest::Client::new()
            .post(&server.url)
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    assert_eq!(status, 200, "{}", server.logged());
}
