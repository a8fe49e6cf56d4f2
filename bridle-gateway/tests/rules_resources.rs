//! The rules resources over real HTTP: an agent knows of the rules of the projects it may use
//! only, as `get_rules` and `list_projects` answer. Another project's
//! `bridle://rules/<project>/<type>` is left out of its `resources/list`, and reading it answers
//! as for a URI never registered, without a word of that project's rules; an agent that may use
//! every project still lists and reads both.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod admin_support;

use admin_support::gateway::Gw;
use admin_support::json_ok;
use bridle_gateway::config::demo_document;
use reqwest::StatusCode;
use serde_json::{Value, json};

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

async fn listed(gw: &Gw, token: &str) -> Vec<String> {
    let v = rpc(gw, token, "resources/list", json!({})).await;
    v["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|d| d["uri"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_knows_of_the_rules_of_its_own_projects_only() {
    let gw = Gw::start().await;
    gw.ctx
        .store
        .create("other", &demo_document(), "test")
        .unwrap();
    // `claude` may use every project: once the watcher has registered the new project's
    // resources, it lists them.
    let everyone = gw.file_token("claude");
    kberg_testkit::eventually_async("the new project's rules resource", || async {
        listed(&gw, &everyone)
            .await
            .contains(&"bridle://rules/other/claude".to_string())
            .then_some(())
    })
    .await;

    let created = json_ok(
        gw.post("/agents")
            .json(&json!({"name": "demo-bot", "type": "claude", "projects": ["demo"]}))
            .send()
            .await
            .unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let token = created["token"]["token"].as_str().unwrap().to_string();

    let mine = listed(&gw, &token).await;
    assert!(
        mine.contains(&"bridle://rules/demo/claude".to_string()),
        "{mine:?}"
    );
    assert!(
        mine.iter().all(|u| !u.starts_with("bridle://rules/other/")),
        "{mine:?}"
    );

    let read = rpc(
        &gw,
        &token,
        "resources/read",
        json!({"uri": "bridle://rules/demo/claude"}),
    )
    .await;
    assert!(read.get("result").is_some(), "{read}");
    let hidden = rpc(
        &gw,
        &token,
        "resources/read",
        json!({"uri": "bridle://rules/other/claude"}),
    )
    .await;
    let unknown = rpc(
        &gw,
        &token,
        "resources/read",
        json!({"uri": "bridle://rules/nowhere/claude"}),
    )
    .await;
    let error = |v: &Value, uri: &str| {
        let e = v
            .get("error")
            .unwrap_or_else(|| panic!("expected an error: {v}"));
        e.to_string().replace(uri, "<uri>")
    };
    assert_eq!(
        error(&hidden, "bridle://rules/other/claude"),
        error(&unknown, "bridle://rules/nowhere/claude")
    );

    // The agent that may use every project reads the other project's rules.
    let read = rpc(
        &gw,
        &everyone,
        "resources/read",
        json!({"uri": "bridle://rules/other/claude"}),
    )
    .await;
    assert!(read.get("result").is_some(), "{read}");

    // Widened to every project (an empty list): the next listing follows the registry.
    json_ok(
        gw.patch("/agents/demo-bot")
            .json(&json!({"projects": []}))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(
        listed(&gw, &token)
            .await
            .contains(&"bridle://rules/other/claude".to_string())
    );
    gw.stop().await;
}
