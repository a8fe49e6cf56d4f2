//! The gate on the wire, over real HTTP on 127.0.0.1, in both protocol generations: list
//! projection per principal, calls, refusals with their stable codes, per-field diagnostics,
//! resources, prompts, completion, and the 2026-07-28 multi-round-trip (`input_required`).
//!
//! Requests are written by hand in the shapes of the MCP specification (2025-11-25 Streamable
//! HTTP with `Mcp-Session-Id`; 2026-07-28 stateless requests with `_meta` and the standard
//! `Mcp-Method` / `Mcp-Name` headers) so each assertion names exactly what a client sees.

mod common;

use common::*;
use serde_json::{Value, json};

fn tool_names(reply: &Value) -> Vec<String> {
    reply["result"]["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn tools_list_is_the_callers_projection() {
    let s = start().await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});

    let full = Raw::new(&s.url, Some(READER));
    let sid = full.initialize().await;
    let names = tool_names(&full.post(list.clone(), Some(&sid)).await.reply(1));
    // Registration order (the app controls the listing order).
    assert_eq!(
        names,
        [
            "echo", "add_note", "slow", "count", "chatter", "ask_name", "survey"
        ]
    );
    assert!(
        !names.contains(&"drop_database".to_string()),
        "refusals are never listed"
    );

    let compact = Raw::new(&s.url, Some(COMPACT));
    let sid = compact.initialize().await;
    assert_eq!(
        tool_names(&compact.post(list, Some(&sid)).await.reply(1)),
        ["echo"]
    );

    // The same projection without a session (2026-07-28).
    let r = compact.stateless(2, "tools/list", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(tool_names(&r.reply(2)), ["echo"]);
    assert_eq!(r.reply(2)["result"]["resultType"], "complete");
}

#[tokio::test]
async fn grants_decide_writes_with_and_without_a_session() {
    let s = start().await;
    let args = json!({"title": "t", "priority": 3});

    let reader = Raw::new(&s.url, Some(READER));
    let sid = reader.initialize().await;
    let r = reader.call_old(&sid, 5, "add_note", args.clone()).await;
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(
        r["result"]["structuredContent"]["code"],
        "capability_required"
    );
    assert_eq!(
        r["result"]["structuredContent"]["capability"],
        "notes.write"
    );
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("notes.write"), "{text}");

    let writer = Raw::new(&s.url, Some(WRITER));
    let sid = writer.initialize().await;
    let r = writer.call_old(&sid, 6, "add_note", args.clone()).await;
    assert_ne!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "created t (p3)");

    // Stateless: the same grants, from the same tokens.
    let r = reader
        .stateless(
            7,
            "tools/call",
            json!({"name": "add_note", "arguments": args}),
        )
        .await;
    assert_eq!(
        r.reply(7)["result"]["structuredContent"]["code"],
        "capability_required"
    );
    let r = writer
        .stateless(
            8,
            "tools/call",
            json!({"name": "add_note", "arguments": {"title": "u", "priority": 1}}),
        )
        .await;
    assert_eq!(r.reply(8)["result"]["content"][0]["text"], "created u (p1)");
}

#[tokio::test]
async fn refusals_and_diagnostics_are_tool_results_with_codes() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(WRITER));
    let sid = c.initialize().await;

    let r = c
        .call_old(
            &sid,
            1,
            "add_note",
            json!({"title": 7, "priority": 9, "extra": true}),
        )
        .await;
    let sc = &r["result"]["structuredContent"];
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(sc["code"], "invalid_arguments");
    assert_eq!(sc["retryable"], true);
    let pointers: Vec<&str> = sc["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["pointer"].as_str())
        .collect();
    assert!(pointers.contains(&"/title"), "{sc}");
    assert!(pointers.contains(&"/priority"), "{sc}");

    let r = c.call_old(&sid, 2, "drop_database", json!({})).await;
    assert_eq!(r["result"]["structuredContent"]["code"], "refused");
    assert_eq!(
        r["result"]["structuredContent"]["reason"],
        "The app never offers this."
    );

    let compact = Raw::new(&s.url, Some(COMPACT));
    let csid = compact.initialize().await;
    let r = compact.call_old(&csid, 3, "count", json!({})).await;
    assert_eq!(r["result"]["structuredContent"]["code"], "not_in_surface");

    // An unknown tool is a protocol error (-32602) carrying the same details.
    let r = c.call_old(&sid, 4, "no_such_tool", json!({})).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["code"], "unknown_tool");

    // The session still serves.
    let r = c
        .call_old(&sid, 5, "echo", json!({"text": "still here"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "still here");
}

#[tokio::test]
async fn resources_prompts_and_completion() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let sid = c.initialize().await;

    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}),
            Some(&sid),
        )
        .await
        .reply(1);
    let uris: Vec<&str> = r["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .filter_map(|x| x["uri"].as_str())
        .collect();
    assert_eq!(uris, ["notes://1", "notes://2"]);

    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 2, "method": "resources/templates/list"}),
            Some(&sid),
        )
        .await
        .reply(2);
    assert_eq!(
        r["result"]["resourceTemplates"][0]["uriTemplate"],
        "drafts://{id}"
    );

    let r = c
        .post(json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "drafts://42"}}), Some(&sid))
        .await
        .reply(3);
    assert_eq!(r["result"]["contents"][0]["text"], "draft 42");

    let r = c
        .post(json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "nowhere://x"}}), Some(&sid))
        .await
        .reply(4);
    assert_eq!(r["error"]["code"], -32002, "{r}");

    let r = c
        .post(json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/get", "params": {"name": "greet", "arguments": {"name": "bob"}}}), Some(&sid))
        .await
        .reply(5);
    assert_eq!(
        r["result"]["messages"][0]["content"]["text"],
        "Say hello to bob"
    );

    let r = c
        .post(json!({"jsonrpc": "2.0", "id": 6, "method": "prompts/get", "params": {"name": "greet", "arguments": {}}}), Some(&sid))
        .await
        .reply(6);
    assert_eq!(r["error"]["code"], -32602, "{r}");

    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 7, "method": "completion/complete", "params": {
            "ref": {"type": "ref/prompt", "name": "greet"},
            "argument": {"name": "name", "value": "al"}}}),
            Some(&sid),
        )
        .await
        .reply(7);
    assert_eq!(
        r["result"]["completion"]["values"],
        json!(["alice", "albert"])
    );

    let r = c
        .post(json!({"jsonrpc": "2.0", "id": 8, "method": "logging/setLevel", "params": {"level": "warning"}}), Some(&sid))
        .await
        .reply(8);
    assert!(r.get("result").is_some(), "{r}");

    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
            Some(&sid),
        )
        .await
        .reply(9);
    assert!(r.get("result").is_some(), "{r}");

    // 2026-07-28: not-found resources are invalid params.
    let r = c
        .stateless(10, "resources/read", json!({"uri": "nowhere://x"}))
        .await
        .reply(10);
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[tokio::test]
async fn discover_and_input_required_round_trip() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));

    let r = c.stateless(1, "server/discover", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let d = r.reply(1);
    assert!(
        d["result"]["supportedVersions"]
            .to_string()
            .contains(PROTO_NEW),
        "{d}"
    );
    assert_eq!(
        d["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "kberg-test",
        "{d}"
    );

    // Round 1: the tool asks; the call answers input_required.
    let r = c
        .stateless(
            2,
            "tools/call",
            json!({"name": "ask_name", "arguments": {}}),
        )
        .await;
    let res = r.reply(2)["result"].clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let (key, req) = res["inputRequests"]
        .as_object()
        .and_then(|o| o.iter().next())
        .map(|(k, v)| (k.clone(), v.clone()))
        .expect("one input request");
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(req["params"]["message"], "What is your name?");
    let state = res["requestState"]
        .as_str()
        .expect("request state")
        .to_string();

    // Round 2: the client re-sends with the answer; the tool runs again and finishes.
    let r = c
        .stateless(
            3,
            "tools/call",
            json!({
                "name": "ask_name", "arguments": {},
                "inputResponses": {key: {"action": "accept", "content": {"name": "Ada"}}},
                "requestState": state,
            }),
        )
        .await;
    let res = r.reply(3)["result"].clone();
    assert_eq!(res["content"][0]["text"], "hello Ada", "{res}");
    assert_eq!(
        s.probe.ask_runs.load(std::sync::atomic::Ordering::SeqCst),
        2
    );

    // A forged request state is invalid params, and the server keeps serving.
    let r = c
        .stateless(
            4,
            "tools/call",
            json!({"name": "ask_name", "arguments": {}, "requestState": "{not json"}),
        )
        .await;
    assert_eq!(r.reply(4)["error"]["code"], -32602);
    let r = c
        .stateless(
            5,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "ok"}}),
        )
        .await;
    assert_eq!(r.reply(5)["result"]["content"][0]["text"], "ok");
}

#[tokio::test]
async fn several_named_questions_in_one_round() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let caps = json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}, "sampling": {}, "roots": {}}});
    let r = c
        .stateless_meta(
            1,
            "tools/call",
            json!({"name": "survey", "arguments": {}}),
            caps.clone(),
        )
        .await;
    let res = r.reply(1)["result"].clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let reqs = res["inputRequests"].as_object().expect("requests");
    let mut keys: Vec<&String> = reqs.keys().collect();
    keys.sort();
    assert_eq!(keys, ["capital", "roots", "user_name"], "{res}");
    assert_eq!(reqs["user_name"]["method"], "elicitation/create");
    assert_eq!(reqs["capital"]["method"], "sampling/createMessage");
    assert_eq!(reqs["roots"]["method"], "roots/list");
    assert!(
        reqs["user_name"]["params"].get("_meta").is_none(),
        "the key hint is not sent: {res}"
    );

    let r = c
        .stateless_meta(2, "tools/call", json!({
            "name": "survey", "arguments": {},
            "inputResponses": {
                "user_name": {"action": "accept", "content": {"name": "Ada"}},
                "capital": {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"},
                "roots": {"roots": [{"uri": "file:///a"}, {"uri": "file:///b"}]},
            },
            "requestState": res["requestState"],
        }), caps)
        .await;
    assert_eq!(
        r.reply(2)["result"]["content"][0]["text"],
        "Ada / Paris / 2",
        "{}",
        r.text
    );
}

#[tokio::test]
async fn an_undeclared_client_capability_is_a_protocol_error_on_2026() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let r = c
        .stateless_meta(
            1,
            "tools/call",
            json!({"name": "ask_name", "arguments": {}}),
            json!({"io.modelcontextprotocol/clientCapabilities": {}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let e = r.reply(1)["error"].clone();
    assert_eq!(e["code"], -32021, "{e}");
    assert!(
        e["data"]["requiredCapabilities"]
            .get("elicitation")
            .is_some(),
        "{e}"
    );
    // On a 2025-11-25 session the same tool answers a tool result instead.
    let c2 = Raw::new(&s.url, Some(READER));
    let r = c2
        .post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": PROTO_OLD, "capabilities": {},
            "clientInfo": {"name": "no-elicitation", "version": "0"}}}),
            None,
        )
        .await;
    let sid = r.header("mcp-session-id").expect("session");
    let r = c2.call_old(&sid, 2, "ask_name", json!({})).await;
    assert_eq!(
        r["result"]["structuredContent"]["code"], "tool_failed",
        "{r}"
    );
}

/// A tool that sends a flood of log messages reaches its client at a bounded rate on both
/// generations (its burst, then one per interval), and the call's answer arrives whole after
/// them. On a session the bound is the session's: the next call finds it spent.
#[tokio::test]
async fn a_flood_of_log_messages_reaches_the_client_at_a_bounded_rate() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    let burst = kberg_core::LOG_MESSAGE_BURST as usize;
    let logs = |r: &common::Resp| {
        r.messages()
            .into_iter()
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| m["params"]["data"].as_u64().expect("a number"))
            .collect::<Vec<_>>()
    };
    let check = |r: &common::Resp, id: i64, what: &str| {
        assert_eq!(
            r.reply(id)["result"]["content"][0]["text"],
            "chattered 5000",
            "{what}: {}",
            r.text
        );
        let sent = logs(r);
        // The burst goes out at once, in order; after it only the refill (one per 50 ms of
        // the call's run) does.
        assert!(sent.len() >= burst, "{what}: {} messages", sent.len());
        assert!(sent.len() < 1_000, "{what}: {} messages", sent.len());
        assert_eq!(
            sent[..burst],
            (0..burst as u64).collect::<Vec<_>>()[..],
            "{what}"
        );
        assert!(sent.windows(2).all(|w| w[0] < w[1]), "{what}");
    };
    let r = c
        .stateless_meta(
            1,
            "tools/call",
            json!({"name": "chatter", "arguments": {"n": 5000}}),
            json!({"io.modelcontextprotocol/logLevel": "debug"}),
        )
        .await;
    check(&r, 1, "2026-07-28");
    let sid = c.initialize().await;
    let call = |id: i64, n: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "chatter", "arguments": {"n": n}}})
    };
    let r = c.post(call(2, 5000), Some(&sid)).await;
    check(&r, 2, "2025-11-25");
    // The session's budget is spent: a call right after gets fewer messages through than it
    // sends (it would take 5 s of refill for all of them).
    let r = c.post(call(3, 100), Some(&sid)).await;
    assert_eq!(r.reply(3)["result"]["content"][0]["text"], "chattered 100");
    assert!(logs(&r).len() < 100, "{}", r.text);
}

#[tokio::test]
async fn removed_methods_and_log_levels_on_2026() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    for (method, params) in [
        ("logging/setLevel", json!({"level": "info"})),
        ("resources/subscribe", json!({"uri": "notes://1"})),
        ("resources/unsubscribe", json!({"uri": "notes://1"})),
        (
            "initialize",
            json!({"protocolVersion": PROTO_NEW, "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}),
        ),
        ("logging/setLevel", json!({})),
    ] {
        let r = c.stateless(1, method, params).await;
        assert_eq!(r.status, 404, "{method}: {}", r.text);
        assert_eq!(r.reply(1)["error"]["code"], -32601, "{method}: {}", r.text);
    }
    // With a logLevel in _meta the log message is sent.
    let r = c
        .stateless_meta(
            3,
            "tools/call",
            json!({"name": "count", "arguments": {}}),
            json!({"io.modelcontextprotocol/logLevel": "info"}),
        )
        .await;
    let logs: Vec<_> = r
        .messages()
        .into_iter()
        .filter(|m| m["method"] == "notifications/message")
        .collect();
    assert_eq!(logs.len(), 1, "{}", r.text);
    assert_eq!(logs[0]["params"]["data"], "counting");
    // No logLevel, or a level the schema does not name (or one spelled otherwise), asks for
    // no log messages; the call itself is answered as usual.
    for (id, level) in [
        (2, None),
        (31, Some(json!("verbose"))),
        (32, Some(json!("INFO"))),
        (33, Some(json!(3))),
    ] {
        let extra = match &level {
            Some(l) => json!({"io.modelcontextprotocol/logLevel": l}),
            None => json!({}),
        };
        let r = c
            .stateless_meta(
                id,
                "tools/call",
                json!({"name": "count", "arguments": {}}),
                extra,
            )
            .await;
        assert!(
            r.messages()
                .iter()
                .all(|m| m["method"] != "notifications/message"),
            "{level:?}: {}",
            r.text
        );
        assert_eq!(
            r.reply(id)["result"]["content"][0]["text"],
            "counted",
            "{level:?}: {}",
            r.text
        );
    }
    // Legacy results keep the legacy shape (no resultType).
    let o = Raw::new(&s.url, Some(READER));
    let sid = o.initialize().await;
    for (id, method, params) in [
        (4, "resources/list", json!({})),
        (5, "prompts/list", json!({})),
        (6, "resources/read", json!({"uri": "notes://1"})),
    ] {
        let r = o
            .post(
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
                Some(&sid),
            )
            .await
            .reply(id);
        assert!(r["result"].get("resultType").is_none(), "{method}: {r}");
    }
    // And 2026-07-28 results carry it.
    let r = c.stateless(7, "resources/list", json!({})).await.reply(7);
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
}

#[tokio::test]
async fn custom_header_annotations_are_checked_for_tools_registered_at_runtime() {
    let s = start().await;
    let c = Raw::new(&s.url, Some(READER));
    // Warm the per-version cache with the registry as it was.
    let r = c
        .stateless(
            1,
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "a"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    s.app
        .tools()
        .register(kberg_core::ToolBuilder::new("regional").raw_handler(
            json!({"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}}, "required": ["region"]}),
            |args, _ctx| async move {
                Ok(kberg_core::ToolOutput::text(format!(
                    "region {}",
                    args["region"].as_str().unwrap_or("?")
                )))
            },
        ))
        .expect("register");
    let body = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "regional", "arguments": {"region": "eu"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
                "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string()
    };
    let base = [
        ("mcp-protocol-version", PROTO_NEW),
        ("mcp-method", "tools/call"),
        ("mcp-name", "regional"),
    ];
    let r = c.post_with(body(2), &base).await;
    assert_eq!(
        r.status, 400,
        "the Mcp-Param-Region header is required: {}",
        r.text
    );
    let mut wrong = base.to_vec();
    wrong.push(("mcp-param-region", "us"));
    let r = c.post_with(body(3), &wrong).await;
    assert_eq!(
        r.status, 400,
        "a header that contradicts the body: {}",
        r.text
    );
    let mut right = base.to_vec();
    right.push(("mcp-param-region", "eu"));
    let r = c.post_with(body(4), &right).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.reply(4)["result"]["content"][0]["text"], "region eu");
}

#[tokio::test]
async fn tools_see_who_the_client_says_it_is_in_both_generations() {
    use kberg_core::ClientInfo;
    let s = start().await;
    let raw = Raw::new(&s.url, Some(READER));
    // 2025-11-25: from the session's `initialize`.
    let sid = raw.initialize().await;
    let r = raw.call_old(&sid, 3, "count", json!({})).await;
    assert_eq!(r["result"]["content"][0]["text"], "counted", "{r}");
    // 2026-07-28: from the request's `_meta`.
    let r = raw
        .stateless_meta(
            4,
            "tools/call",
            json!({"name": "count", "arguments": {}}),
            json!({"io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "2.1.0", "title": "Claude Code"}}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let seen = s.probe.clients.lock().expect("lock").clone();
    assert_eq!(
        seen,
        [
            Some(ClientInfo::new("raw-test", "0")),
            Some(ClientInfo::new("claude-code", "2.1.0").title("Claude Code")),
        ]
    );
}

#[tokio::test]
async fn a_hidden_tools_header_annotations_reveal_nothing() {
    use kberg_core::{Caller, ToolSpec};
    let s = start().await;
    s.app
        .tools()
        .register(kberg_core::ToolBuilder::new("regional").raw_handler(
            json!({"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"}}, "required": ["region"]}),
            |_args, _ctx| async move { Ok(kberg_core::ToolOutput::text("ran")) },
        ))
        .expect("register");
    s.app
        .tools()
        .set_tool_visibility(Some(std::sync::Arc::new(|t: &ToolSpec, c: &Caller| {
            t.name != "regional" || c.principal().id == "writer"
        })));
    let call = |id: i64, name: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": name, "arguments": {"region": "eu"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
                "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string()
    };
    let headers = |name: &'static str| {
        [
            ("mcp-protocol-version", PROTO_NEW),
            ("mcp-method", "tools/call"),
            ("mcp-name", name),
        ]
    };
    // No Mcp-Param-Region header: the writer, who may know the tool, is told it is missing.
    let writer = Raw::new(&s.url, Some(WRITER));
    let r = writer
        .post_with(call(1, "regional"), &headers("regional"))
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("Mcp-Param-Region"), "{}", r.text);

    // The reader, from whom it is hidden, gets word for word what a name that never existed
    // gets: no header error, nothing that tells the tool is there.
    let reader = Raw::new(&s.url, Some(READER));
    let hidden = reader
        .post_with(call(2, "regional"), &headers("regional"))
        .await;
    let unknown = reader
        .post_with(call(2, "imaginary"), &headers("imaginary"))
        .await;
    assert_eq!(hidden.status, unknown.status, "{}", hidden.text);
    assert_eq!(
        hidden.text.replace("regional", "NAME"),
        unknown.text.replace("imaginary", "NAME"),
    );
    assert!(!hidden.text.contains("Mcp-Param"), "{}", hidden.text);
    // With the header a hidden tool is still not run.
    let mut with_header = headers("regional").to_vec();
    with_header.push(("mcp-param-region", "eu"));
    let r = reader.post_with(call(3, "regional"), &with_header).await;
    assert!(!r.text.contains("ran"), "{}", r.text);
    // And the writer runs it once the header is right.
    let r = writer.post_with(call(4, "regional"), &with_header).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.reply(4)["result"]["content"][0]["text"], "ran");
}
