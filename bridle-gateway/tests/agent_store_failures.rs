//! What an agent is told when the rules store fails under a tool or a resource read: a project
//! document that no longer parses (a hand edit gone wrong), a file the gateway cannot read. The
//! refusal keeps the store's stable code, in the one refusal shape, but never the gateway's
//! own paths (the data directory, the document's file) nor the store's internal wording: those
//! are for the operator, in the gateway's log.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::{Gw, refused_in_shape};
use bridle_gateway::config::demo_document;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// One stateless 2026-07-28 `resources/read` of `uri` as `token`; the JSON-RPC answer.
async fn read_resource(gw: &Gw, token: &str, uri: &str) -> Value {
    rpc(gw, token, "resources/read", json!({"uri": uri})).await
}

/// The URIs `resources/list` answers `token` with, as one text.
async fn list_resources(gw: &Gw, token: &str) -> String {
    rpc(gw, token, "resources/list", json!({})).await["result"].to_string()
}

/// One stateless 2026-07-28 request as `token`; the JSON-RPC answer.
async fn rpc(gw: &Gw, token: &str, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let mut req = gw
        .http
        .post(&gw.mcp)
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(uri) = params.get("uri").and_then(Value::as_str) {
        req = req.header("mcp-name", uri);
    }
    let r = req
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    serde_json::from_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_project_document_is_refused_without_the_gateways_paths() {
    let gw = Gw::start().await;
    let data_dir = gw.tmp.path().to_string_lossy().into_owned();
    let token = gw.file_token("claude");
    let client = gw.mcp_client(token.clone()).await;
    // `claude` may use every project: `demo` still grants it what it may do, and `other`,
    // broken by hand, answers every tool that reads it.
    gw.ctx
        .store
        .create("other", &demo_document(), "test")
        .unwrap();
    kberg_testkit::eventually_async("the new project's rules resource", || async {
        let listed = list_resources(&gw, &token).await;
        listed.contains("bridle://rules/other/claude").then_some(())
    })
    .await;
    std::fs::write(
        gw.tmp.path().join("projects").join("other.yaml"),
        "schema_version: 1\nproject: [unclosed\n",
    )
    .unwrap();

    let calls = [
        ("get_rules", json!({"project": "other"})),
        (
            "propose_guardrail",
            json!({"project": "other", "id": "tests-first", "statement": "Write the test first.",
                   "severity": "guidance"}),
        ),
        (
            "update_rules",
            json!({"project": "other", "base_revision": 1, "overview": "New overview."}),
        ),
        (
            "request_scope_approval",
            json!({"project": "other", "action": "touch the CI", "reason": "it is broken"}),
        ),
    ];
    for (tool, args) in calls {
        let s = refused_in_shape(&client, tool, args, "parse_error").await;
        let told = s.to_string();
        assert!(!told.contains(&data_dir), "{tool}: {told}");
        assert!(!told.contains("other.yaml"), "{tool}: {told}");
        assert!(
            s["message"].as_str().unwrap().contains("gateway's log"),
            "{s}"
        );
    }

    let read = read_resource(&gw, &token, "bridle://rules/other/claude").await;
    let e = read.get("error").unwrap_or_else(|| panic!("{read}"));
    let told = e.to_string();
    assert!(!told.contains(&data_dir), "{told}");
    assert!(!told.contains("other.yaml"), "{told}");
    assert_eq!(e["data"]["code"], "parse_error", "{e}");

    client.cancel().await.unwrap();
    gw.stop().await;
}
