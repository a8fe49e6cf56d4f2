//! Prompts that ask the client for input while they render, on the wire over real HTTP on
//! 127.0.0.1: on 2026-07-28 `prompts/get` answers an `input_required` result carrying an
//! `elicitation/create` request and renders the prompt when the client re-sends the request with
//! `inputResponses` (and the `requestState` it was given); a prompt that asks nothing answers
//! at once; bad state, undeclared capabilities and clients that cannot answer get clear errors.
//!
//! Requests are written by hand in the shapes of the MCP specification (2026-07-28 stateless
//! requests with `_meta` and the `Mcp-Method` / `Mcp-Name` headers; 2025-11-25 Streamable HTTP
//! with `Mcp-Session-Id`).

mod common;

use common::*;
use kberg_core::{PromptMessage, PromptResult, PromptSpec};
use kberg_server::input::{Question, ask};
use serde_json::{Value, json};

const PROMPT: &str = "with_context";

/// Registers a prompt that asks the user (key `user_context`) which context to use.
fn register_context_prompt(s: &TestServer) {
    s.app
        .prompts()
        .register_with_context(
            PromptSpec::new(PROMPT, "Asks the user for context, then renders"),
            |_args, ctx| async move {
                let answers = ask(
                    &ctx,
                    vec![Question::elicit(
                        "user_context",
                        "What context should the prompt use?",
                        json!({"type": "object", "properties": {"context": {"type": "string"}},
                               "required": ["context"]}),
                    )],
                )
                .await?;
                let context = answers
                    .get("user_context")
                    .and_then(|a| a["content"]["context"].as_str())
                    .ok_or("the answer has no `context` string")?
                    .to_string();
                Ok(PromptResult {
                    description: Some("rendered with context".into()),
                    messages: vec![PromptMessage::user(format!("Context: {context}"))],
                })
            },
        )
        .expect("register the prompt");
}

#[tokio::test]
async fn prompts_get_answers_input_required_then_the_prompt() {
    let s = start().await;
    register_context_prompt(&s);
    let c = Raw::new(&s.url, Some(READER));

    // Round 1: no answers yet.
    let r = c.stateless(1, "prompts/get", json!({"name": PROMPT})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let res = r.reply(1)["result"].clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let reqs = res["inputRequests"].as_object().expect("input requests");
    assert_eq!(reqs.len(), 1, "{res}");
    let q = &reqs["user_context"];
    assert_eq!(q["method"], "elicitation/create", "{res}");
    assert_eq!(
        q["params"]["message"],
        "What context should the prompt use?"
    );
    assert_eq!(
        q["params"]["requestedSchema"]["required"],
        json!(["context"])
    );
    assert!(res.get("messages").is_none(), "{res}");
    let state = res["requestState"].as_str().expect("request state");

    // Round 2: the answer comes back; the prompt renders.
    let r = c
        .stateless(
            2,
            "prompts/get",
            json!({
                "name": PROMPT,
                "inputResponses": {"user_context": {"action": "accept", "content": {"context": "test context"}}},
                "requestState": state,
            }),
        )
        .await;
    let res = r.reply(2)["result"].clone();
    assert_eq!(res["resultType"], "complete", "{res}");
    assert_eq!(res["description"], "rendered with context");
    assert_eq!(res["messages"][0]["role"], "user");
    assert_eq!(
        res["messages"][0]["content"]["text"], "Context: test context",
        "{res}"
    );

    // The answer alone (no requestState) is enough too: the state only carries earlier rounds.
    let r = c
        .stateless(
            3,
            "prompts/get",
            json!({
                "name": PROMPT,
                "inputResponses": {"user_context": {"action": "accept", "content": {"context": "again"}}},
            }),
        )
        .await;
    assert_eq!(
        r.reply(3)["result"]["messages"][0]["content"]["text"],
        "Context: again",
        "{}",
        r.text
    );
}

#[tokio::test]
async fn a_prompt_that_asks_nothing_answers_at_once() {
    let s = start().await;
    register_context_prompt(&s);
    let c = Raw::new(&s.url, Some(READER));
    let r = c
        .stateless(
            1,
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "alice"}}),
        )
        .await;
    let res = r.reply(1)["result"].clone();
    assert_eq!(res["resultType"], "complete", "{res}");
    assert!(res.get("inputRequests").is_none(), "{res}");
    assert_eq!(res["messages"][0]["content"]["text"], "Say hello to alice");
}

#[tokio::test]
async fn bad_state_bad_answers_and_missing_capabilities_are_clear_errors() {
    let s = start().await;
    register_context_prompt(&s);
    let c = Raw::new(&s.url, Some(READER));

    // A requestState this server did not issue.
    let r = c
        .stateless(
            1,
            "prompts/get",
            json!({"name": PROMPT, "requestState": "{not json"}),
        )
        .await;
    assert_eq!(r.reply(1)["error"]["code"], -32602, "{}", r.text);

    // An answer that is not an elicitation result never reaches the handler: the question is
    // asked again.
    let r = c
        .stateless(
            2,
            "prompts/get",
            json!({"name": PROMPT, "inputResponses": {"user_context": 12345}}),
        )
        .await;
    let res = r.reply(2)["result"].clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    assert_eq!(
        res["inputRequests"]["user_context"]["method"], "elicitation/create",
        "{res}"
    );
    // A well-formed accept without the field the handler needs: the handler refuses it.
    let r = c
        .stateless(
            6,
            "prompts/get",
            json!({"name": PROMPT, "inputResponses": {"user_context": {"action": "accept", "content": {}}}}),
        )
        .await;
    let e = r.reply(6)["error"].clone();
    assert!(
        e["message"].as_str().is_some_and(|m| m.contains("context")),
        "{e}"
    );

    // A request that declares no elicitation capability: -32021 naming it (SEP-2575).
    let r = c
        .stateless_meta(
            3,
            "prompts/get",
            json!({"name": PROMPT}),
            json!({"io.modelcontextprotocol/clientCapabilities": {}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    let e = r.reply(3)["error"].clone();
    assert_eq!(e["code"], -32021, "{e}");
    assert!(
        e["data"]["requiredCapabilities"]
            .get("elicitation")
            .is_some(),
        "{e}"
    );

    // An unknown prompt is still invalid params, and the server keeps serving.
    let r = c
        .stateless(4, "prompts/get", json!({"name": "no_such_prompt"}))
        .await;
    assert_eq!(r.reply(4)["error"]["code"], -32602, "{}", r.text);
    let r = c.stateless(5, "prompts/get", json!({"name": PROMPT})).await;
    assert_eq!(r.reply(5)["result"]["resultType"], "input_required");
}

#[tokio::test]
async fn on_a_2025_session_without_elicitation_the_prompt_fails_cleanly() {
    let s = start().await;
    register_context_prompt(&s);
    let c = Raw::new(&s.url, Some(READER));
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": PROTO_OLD, "capabilities": {},
                "clientInfo": {"name": "no-elicitation", "version": "0"}}}),
            None,
        )
        .await;
    let sid = r.header("mcp-session-id").expect("session");
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/get",
                   "params": {"name": PROMPT}}),
            Some(&sid),
        )
        .await;
    let reply: Value = r.reply(1);
    assert!(reply.get("result").is_none(), "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("elicitation")),
        "{reply}"
    );
}
