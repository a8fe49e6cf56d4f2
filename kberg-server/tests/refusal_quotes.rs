//! What a refusal quotes back of what the client sent, over real HTTP: a tool name, a task id
//! or a resource URI of any length comes back cut short (marked with `...`) in the message and
//! the data, with the refusal's stable code, so a client cannot make the server repeat megabytes
//! of its own request in an answer (or a log line).

mod common;

use common::{PROTO_NEW, READER, Raw, start_with};
use kberg_server::Limits;
use serde_json::{Value, json};

/// Longer than any name, id or URI a refusal should repeat.
const LONG: usize = 20_000;

/// The most bytes of a client string a refusal may carry, with room for its own words.
const MOST: usize = 4_096;

fn assert_bounded(what: &str, v: &Value) {
    let s = v.to_string();
    assert!(
        s.len() <= MOST,
        "{what} repeats the client's string whole ({} bytes): {}...",
        s.len(),
        &s[..200.min(s.len())]
    );
}

#[tokio::test]
async fn too_many_calls_quotes_a_long_tool_name_cut_short() {
    let s = start_with(Limits::default().max_calls_per_principal(1)).await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let bg = c.clone();
    let bg_sid = sid.clone();
    let slow = tokio::spawn(async move {
        bg.post(
            json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call",
                   "params": {"name": "slow", "arguments": {}}}),
            Some(&bg_sid),
        )
        .await
    });
    s.probe
        .started
        .lock()
        .await
        .recv()
        .await
        .expect("slow tool started");

    let name = "é".repeat(LONG);
    let r = c.call_old(&sid, 51, &name, json!({})).await;
    let refusal = &r["result"]["structuredContent"];
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(refusal["code"], "too_many_calls", "{r}");
    assert_bounded("the refusal", &r["result"]);
    let tool = refusal["tool"].as_str().expect("tool");
    assert!(tool.ends_with("...") && tool.starts_with("éé"), "{tool}");

    // The slow call ends with its request's cancellation.
    let cancel = c
        .post(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": 50}}),
            Some(&sid),
        )
        .await;
    assert_eq!(cancel.status, 202, "{}", cancel.text);
    let _ = slow.await;
}

#[tokio::test]
async fn an_unknown_long_task_id_is_quoted_cut_short() {
    let s = start_with(Limits::default()).await;
    let c = Raw::new(&s.url, Some(READER));
    let id = "t".repeat(LONG);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {
        "taskId": id,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
            "io.modelcontextprotocol/clientCapabilities":
                {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        },
    }});
    let r = c
        .post_with(
            body.to_string(),
            &[
                ("mcp-protocol-version", PROTO_NEW),
                ("mcp-method", "tasks/get"),
                ("mcp-name", &id),
            ],
        )
        .await
        .reply(1);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["code"], "task_not_found", "{r}");
    assert_bounded("the error", &r["error"]);
    let quoted = r["error"]["data"]["taskId"].as_str().expect("taskId");
    assert!(quoted.ends_with("...") && quoted.starts_with("tt"), "{r}");
}

#[tokio::test]
async fn an_unknown_long_resource_uri_is_quoted_cut_short() {
    let s = start_with(Limits::default()).await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let uri = format!("nowhere://{}", "ü".repeat(LONG));
    for (id, method) in [(2, "resources/read"), (3, "resources/subscribe")] {
        let r = c
            .post(
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"uri": uri}}),
                Some(&sid),
            )
            .await
            .reply(id);
        assert_eq!(r["error"]["code"], -32002, "{method}: {r}");
        assert_bounded(method, &r["error"]);
        let quoted = r["error"]["data"]["uri"].as_str().expect("uri");
        assert!(
            quoted.ends_with("...") && quoted.starts_with("nowhere://ü"),
            "{r}"
        );
    }
}

#[tokio::test]
async fn an_unknown_long_prompt_or_argument_name_is_quoted_cut_short() {
    let s = start_with(Limits::default()).await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let long = "p".repeat(LONG);
    let asks = [
        json!({"name": long}),
        json!({"name": "greet", "arguments": {"name": "bob", long.clone(): "x"}}),
    ];
    for (id, params) in (4..).zip(asks) {
        let r = c
            .post(
                json!({"jsonrpc": "2.0", "id": id, "method": "prompts/get", "params": params}),
                Some(&sid),
            )
            .await
            .reply(id);
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert_bounded("the error", &r["error"]);
        let message = r["error"]["message"].as_str().expect("message");
        assert!(message.contains("pp..."), "{message}");
    }
}

#[tokio::test]
async fn an_unknown_long_method_is_quoted_cut_short() {
    let s = start_with(Limits::default()).await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;
    let method = format!("x/{}", "m".repeat(LONG));
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 6, "method": method, "params": {}}),
            Some(&sid),
        )
        .await
        .reply(6);
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert_bounded("the error", &r["error"]);
    let message = r["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("x/mmm") && message.ends_with("..."),
        "{message}"
    );
}
