//! The OpenAI-compatible provider against a scripted server that speaks the Chat Completions
//! wire.
//!
//! Shapes reproduced (OpenAI API reference, "Chat Completions": create, the chat completion
//! object, the chat completion chunk object, error codes):
//! - `POST /v1/chat/completions` with `Authorization: Bearer`, `model`, `messages` (assistant
//!   `tool_calls` with `arguments` as JSON text, `role: "tool"` results with `tool_call_id`),
//!   `tools`, `tool_choice`, `stream`, `stream_options.include_usage`;
//! - the reply `{"id": "chatcmpl-…", "object": "chat.completion", "choices": [{"index": 0,
//!   "message": {"role": "assistant", "content": null, "tool_calls": [...]}, "finish_reason":
//!   "tool_calls"}], "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}`;
//! - the stream: `text/event-stream` of `data: {"object": "chat.completion.chunk", "choices":
//!   [{"index": 0, "delta": {...}, "finish_reason": null}]}` events, the first tool-call delta
//!   carrying `index`, `id`, `type` and `function.name` with empty `arguments`, later deltas
//!   carrying only `index` and an `arguments` fragment, a chunk with `finish_reason`, a usage
//!   chunk with empty `choices`, then `data: [DONE]`;
//! - errors `{"error": {"message", "type", "param", "code"}}`: 401 `invalid_api_key`, 404
//!   `model_not_found`, 429 `rate_limit_exceeded` with `retry-after`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kberg_agent::{
    ChatRequest, InferenceProvider, Message, ToolChoice, ToolDefinition, collect_stream,
};
use kberg_providers::HttpOptions;
use kberg_providers::openai::{OpenAiConfig, OpenAiProvider};
use kberg_testkit::scripted::{Reply, ScriptedServer};
use serde_json::{Value, json};
use support::{WindowRefusal, Wire, credentials};
use tokio_util::sync::CancellationToken;

struct OpenAi;

fn chunk(choices: Value) -> String {
    let v = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
                   "model": "local-model", "system_fingerprint": "fp_44709d6fcb", "choices": choices});
    format!("data: {v}\n\n")
}

fn usage_chunk() -> String {
    let v = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
                   "model": "local-model", "choices": [],
                   "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}});
    format!("data: {v}\n\n")
}

fn completion(message: Value, finish: &str) -> Value {
    json!({"id": "chatcmpl-abc123", "object": "chat.completion", "created": 1699896916,
           "model": "local-model",
           "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
           "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}})
}

impl Wire for OpenAi {
    fn call(&self, id: &str, name: &str, arguments: &Value, stream: bool) -> Reply {
        let args = arguments.to_string();
        if !stream {
            return Reply::json(
                200,
                &completion(
                    json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": name, "arguments": args}}]}),
                    "tool_calls",
                ),
            );
        }
        let cut = args.len() / 2;
        let mut pieces = vec![chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": null,
            "tool_calls": [{"index": 0, "id": id, "type": "function",
                            "function": {"name": name, "arguments": ""}}]},
            "logprobs": null, "finish_reason": null}]),
        )];
        for part in [&args[..cut], &args[cut..]] {
            pieces.push(chunk(json!([{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": part}}]}, "logprobs": null, "finish_reason": null}])));
        }
        pieces.push(chunk(
            json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "tool_calls"}]),
        ));
        pieces.push(usage_chunk());
        pieces.push("data: [DONE]\n\n".into());
        // One event is also split across two writes.
        let split = pieces.remove(1);
        let (a, b) = split.split_at(split.len() / 3);
        pieces.insert(1, b.to_string());
        pieces.insert(1, a.to_string());
        Reply::stream("text/event-stream", pieces)
    }

    fn text(&self, text: &str, stream: bool) -> Reply {
        if !stream {
            return Reply::json(
                200,
                &completion(json!({"role": "assistant", "content": text}), "stop"),
            );
        }
        let mid = text.len() / 2;
        Reply::stream(
            "text/event-stream",
            vec![
                chunk(
                    json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
                ),
                ": keep-alive comment\n\n".into(),
                chunk(
                    json!([{"index": 0, "delta": {"content": &text[..mid]}, "finish_reason": null}]),
                ),
                chunk(
                    json!([{"index": 0, "delta": {"content": &text[mid..]}, "finish_reason": null}]),
                ),
                chunk(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
                usage_chunk(),
                "data: [DONE]\n\n".into(),
            ],
        )
    }

    fn tool_results(&self, body: &Value) -> Vec<String> {
        body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter(|m| m["role"] == "tool")
                    .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn make(url: String) -> Arc<dyn InferenceProvider> {
    Arc::new(OpenAiProvider::new(
        OpenAiConfig::new("local-model")
            .base_url(format!("{url}/v1"))
            .api_key("sk-test")
            .http(HttpOptions::default().initial_backoff(Duration::from_millis(5))),
    ))
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    }
}

/// Streams `pieces` from a scripted server and assembles the turn.
async fn streamed(
    pieces: Vec<String>,
) -> Result<kberg_agent::ChatResponse, kberg_agent::ProviderError> {
    let server = ScriptedServer::start(vec![Reply::stream("text/event-stream", pieces)]).await;
    let s = make(server.url())
        .chat_stream(&request(), &CancellationToken::new())
        .await?;
    collect_stream(s, |_| {}).await
}

fn api_error(message: &str, kind: &str, code: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

#[tokio::test]
async fn repair_turn_succeeds() {
    support::scenario_repair(&OpenAi, &make, false).await;
}

#[tokio::test]
async fn repair_turn_succeeds_streaming() {
    support::scenario_repair(&OpenAi, &make, true).await;
}

#[tokio::test]
async fn refusal_is_accepted() {
    support::scenario_refusal(&OpenAi, &make, false).await;
    support::scenario_refusal(&OpenAi, &make, true).await;
}

#[tokio::test]
async fn cancellation_mid_tool() {
    support::scenario_cancel_mid_tool(&OpenAi, &make, false).await;
    support::scenario_cancel_mid_tool(&OpenAi, &make, true).await;
}

/// The tool names of a `/chat/completions` body: the tools', the forced choice's, the
/// earlier calls'.
fn sent_names(body: &Value) -> Vec<String> {
    let name = |v: &Value| v.as_str().unwrap_or("<missing>").to_string();
    let mut out: Vec<String> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| name(&t["function"]["name"]))
        .collect();
    out.push(name(&body["tool_choice"]["function"]["name"]));
    for m in body["messages"].as_array().into_iter().flatten() {
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            out.push(name(&c["function"]["name"]));
        }
    }
    out
}

#[tokio::test]
async fn unsafe_tool_names_are_sent_as_aliases_and_read_back_without_the_agent() {
    support::scenario_unsafe_tool_names(&OpenAi, &make, false, &sent_names).await;
    support::scenario_unsafe_tool_names(&OpenAi, &make, true, &sent_names).await;
}

#[tokio::test]
async fn request_has_the_documented_shape() {
    let server =
        ScriptedServer::start(vec![OpenAi.text("ok", false), OpenAi.text("ok", true)]).await;
    let p = make(server.url());
    let mut req = request();
    req.tools = vec![ToolDefinition::new(
        "add_note",
        "Create a note",
        json!({"type": "object"}),
    )];
    req.options.tool_choice = ToolChoice::Tool("add_note".into());
    req.options.max_tokens = Some(32);
    req.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![kberg_agent::ToolCall {
            id: "call_9".into(),
            name: "add_note".into(),
            arguments: json!({"title": "x"}),
        }],
    });
    req.messages.push(Message::Tool {
        call_id: "call_9".into(),
        name: "add_note".into(),
        content: "created x".into(),
        is_error: false,
    });
    let r = p.chat(&req, &CancellationToken::new()).await.unwrap();
    assert_eq!(r.usage.total(), 99);
    let s = p
        .chat_stream(&req, &CancellationToken::new())
        .await
        .unwrap();
    let r = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(r.text, "ok");
    assert_eq!(r.usage.total(), 99);
    let reqs = server.requests();
    let sent = &reqs[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], "Bearer sk-test");
    let b = &sent.body;
    assert_eq!(b["model"], "local-model");
    assert_eq!(b["max_tokens"], 32);
    assert_eq!(
        b["tool_choice"],
        json!({"type": "function", "function": {"name": "add_note"}})
    );
    assert_eq!(b["tools"][0]["function"]["name"], "add_note");
    let call = &b["messages"][1]["tool_calls"][0];
    assert_eq!(call["id"], "call_9");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["arguments"], "{\"title\":\"x\"}");
    // An empty string, not `null`: llama-cpp-python refuses `null` and its templates read
    // the field.
    assert_eq!(b["messages"][1]["content"], "");
    assert_eq!(b["messages"][2]["tool_call_id"], "call_9");
    assert!(b.get("stream").is_none());
    assert_eq!(reqs[1].body["stream"], true);
    assert_eq!(reqs[1].body["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn two_calls_interleaved_in_a_stream_assemble() {
    let pieces = vec![
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "add_note", "arguments": ""}},
            {"index": 1, "id": "call_b", "type": "function", "function": {"name": "wait", "arguments": "{\"sec"}}
        ]}, "finish_reason": null}]),
        ),
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "function": {"arguments": "onds\": 1}"}},
            {"index": 0, "function": {"arguments": "{\"title\": \"a\", \"priority\": 1}"}}
        ]}, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
        "data: [DONE]\n\n".into(),
    ];
    let r = streamed(pieces).await.unwrap();
    assert_eq!(r.tool_calls.len(), 2);
    assert_eq!(r.tool_calls[0].id, "call_a");
    assert_eq!(
        r.tool_calls[0].arguments,
        json!({"title": "a", "priority": 1})
    );
    assert_eq!(r.tool_calls[1].arguments, json!({"seconds": 1}));
    assert_eq!(r.finish, kberg_agent::FinishReason::ToolCalls);
}

/// Ollama's OpenAI-compatible endpoint (and Gemini's, and LiteLLM's bridges) gives every call
/// of a message `index: 0`, each call whole in its own chunk with its own id: they are two
/// calls, not one with both names and both argument texts run together. Without ids, a new
/// tool's name after a call's arguments tells them apart.
#[tokio::test]
async fn calls_sharing_an_index_stay_apart_by_their_ids() {
    let call = |id: &str, name: &str, args: &str| {
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": "", "tool_calls": [
            {"id": id, "index": 0, "type": "function", "function": {"name": name, "arguments": args}}
        ]}, "finish_reason": null}]),
        )
    };
    let pieces = vec![
        call("call_x1", "add_note", "{\"title\": \"a\", \"priority\": 1}"),
        call("call_x2", "add_note", "{\"title\": \"b\", \"priority\": 2}"),
        // And two in one chunk, both at index 0 (the second's arguments in two pieces, the
        // continuation without an id).
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"id": "call_x3", "index": 0, "type": "function", "function": {"name": "wait", "arguments": "{\"seconds\": 1}"}},
            {"id": "call_x4", "index": 0, "type": "function", "function": {"name": "search_notes", "arguments": "{\"query\":"}}
        ]}, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": " \"milk\"}"}}
        ]}, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
        "data: [DONE]\n\n".into(),
    ];
    let r = streamed(pieces).await.unwrap();
    let calls: Vec<(&str, &str, &Value)> = r
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_x1", "add_note", &json!({"title": "a", "priority": 1})),
            ("call_x2", "add_note", &json!({"title": "b", "priority": 2})),
            ("call_x3", "wait", &json!({"seconds": 1})),
            ("call_x4", "search_notes", &json!({"query": "milk"})),
        ]
    );

    // A server that gives a call's later pieces an id of their own (but no name): one call.
    let pieces = vec![
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"id": "call_p1", "index": 0, "type": "function", "function": {"name": "wait", "arguments": ""}}
        ]}, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"id": "call_p2", "index": 0, "function": {"arguments": "{\"seconds\""}}
        ]}, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"id": "call_p2", "index": 0, "function": {"arguments": ": 2}"}}
        ]}, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
        "data: [DONE]\n\n".into(),
    ];
    let r = streamed(pieces).await.unwrap();
    assert_eq!(r.tool_calls.len(), 1, "{:?}", r.tool_calls);
    assert_eq!(r.tool_calls[0].name, "wait");
    assert_eq!(r.tool_calls[0].arguments, json!({"seconds": 2}));

    // Every call at index 0 and none with an id: a delta naming another tool once the call
    // got arguments starts a new call; the same name sent again with a piece continues it.
    let piece = |name: Option<&str>, args: &str| {
        let mut function = json!({"arguments": args});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "type": "function", "function": function}
        ]}, "finish_reason": null}]))
    };
    let pieces = vec![
        piece(Some("wait"), ""),
        piece(None, "{\"seconds\": 3}"),
        piece(Some("search_notes"), "{\"query\":"),
        piece(Some("search_notes"), " \"tea\"}"),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
        "data: [DONE]\n\n".into(),
    ];
    let r = streamed(pieces).await.unwrap();
    let calls: Vec<(&str, &Value)> = r
        .tool_calls
        .iter()
        .map(|c| (c.name.as_str(), &c.arguments))
        .collect();
    assert_eq!(
        calls,
        [
            ("wait", &json!({"seconds": 3})),
            ("search_notes", &json!({"query": "tea"})),
        ]
    );
}

/// A reply is over at `data: [DONE]`: what a server sends after it is not part of the turn,
/// and a server that keeps the connection open after it (a proxy holding the stream) does not
/// hold the turn until the idle timeout, which lost the whole answer as a timeout.
#[tokio::test]
async fn the_reply_ends_at_done_whatever_follows() {
    let mut reply = OpenAi.text("Hello there", true);
    reply.chunks.push((
        Duration::ZERO,
        chunk(json!([{"index": 0, "delta": {"content": " and more"}, "finish_reason": null}])),
    ));
    reply
        .chunks
        .push((Duration::from_secs(3600), "data: [DONE]\n\n".into()));
    let server = ScriptedServer::start(vec![reply]).await;
    let p = with_options(
        server.url(),
        HttpOptions::default().stream_idle_timeout(Duration::from_secs(2)),
    );
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let r = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(r.text, "Hello there");
    assert_eq!(r.usage.total(), 99);
}

/// The usage chunk without a `choices` field, as some servers (Fireworks, several bridges)
/// send it: the usage is read, and the turn is not lost as malformed at its very end.
#[tokio::test]
async fn a_usage_chunk_without_choices_is_read() {
    let usage = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
                       "model": "local-model",
                       "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99}});
    let pieces = vec![
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": null}]),
        ),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
        format!("data: {usage}\n\n"),
        "data: [DONE]\n\n".into(),
    ];
    let r = streamed(pieces).await.unwrap();
    assert_eq!(r.text, "Hi");
    assert_eq!(r.usage.total(), 99);
}

#[tokio::test]
async fn bad_key_is_unauthorized() {
    let server = ScriptedServer::start(vec![Reply::json(401, &api_error(
        "Incorrect API key provided: sk-test. You can find your API key in your account settings.",
        "invalid_request_error", "invalid_api_key"))]).await;
    let e = make(server.url())
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "unauthorized");
    assert!(e.to_string().contains("Incorrect API key"), "{e}");
    assert!(e.to_string().contains("OPENAI_API_KEY"), "{e}");
}

#[tokio::test]
async fn unknown_model_is_named() {
    let server = ScriptedServer::start(vec![Reply::json(
        404,
        &api_error(
            "The model `gpt-9` does not exist or you do not have access to it.",
            "invalid_request_error",
            "model_not_found",
        ),
    )])
    .await;
    let e = make(server.url())
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "model_not_found");
    // A 404 that is not about a model is a wrong base URL.
    let server =
        ScriptedServer::start(vec![Reply::json(404, &json!({"detail": "Not Found"}))]).await;
    let e = make(server.url())
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "rejected");
    assert!(e.to_string().contains("check the base URL"), "{e}");
}

#[tokio::test]
async fn rate_limit_honours_retry_after() {
    let limited = || {
        Reply::json(
            429,
            &api_error(
                "Rate limit reached for requests",
                "requests",
                "rate_limit_exceeded",
            ),
        )
        .header("retry-after", "0")
    };
    let server = ScriptedServer::start(vec![limited(), OpenAi.text("fine", false)]).await;
    let r = make(server.url())
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.text, "fine");
    assert_eq!(server.requests().len(), 2);

    // Still limited after every retry: the last Retry-After is reported.
    let server = ScriptedServer::start(vec![
        limited(),
        limited(),
        limited().header("retry-after", "7"),
    ])
    .await;
    let p = OpenAiProvider::new(
        OpenAiConfig::new("m")
            .base_url(format!("{}/v1", server.url()))
            .http(
                HttpOptions::default()
                    .max_retries(2)
                    .max_retry_wait(Duration::from_millis(10)),
            ),
    );
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    match e {
        kberg_agent::ProviderError::RateLimited { attempts, .. } => assert_eq!(attempts, 3),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn truncated_and_slow_streams() {
    let server = ScriptedServer::start(vec![
        OpenAi.text("Hello there", true).truncated(4),
        OpenAi.text("Hello there", true).truncated(2).aborted(),
        OpenAi
            .text("Hello there", true)
            .paced(Duration::from_millis(600)),
    ])
    .await;
    // The truncations under the default idle timeout (a short one could end a stream that a
    // loaded machine is slow to end or break, as a timeout); the slow stream under a short one.
    let p = OpenAiProvider::new(
        OpenAiConfig::new("m")
            .base_url(format!("{}/v1", server.url()))
            .http(HttpOptions::default()),
    );
    let impatient = OpenAiProvider::new(
        OpenAiConfig::new("m")
            .base_url(format!("{}/v1", server.url()))
            .http(HttpOptions::default().stream_idle_timeout(Duration::from_millis(150))),
    );
    for (p, expected) in [
        (&p, "truncated"),
        (&p, "truncated"),
        (&impatient, "timeout"),
    ] {
        let s = p
            .chat_stream(&request(), &CancellationToken::new())
            .await
            .unwrap();
        let e = collect_stream(s, |_| {}).await.unwrap_err();
        assert_eq!(e.code(), expected);
    }
}

#[tokio::test]
async fn malformed_replies_are_reported() {
    let server = ScriptedServer::start(vec![
        Reply::json(200, &json!({"object": "chat.completion", "choices": []})),
        Reply::stream("text/event-stream", vec!["data: {not json}\n\n".into()]),
        Reply::stream("text/event-stream", vec![
            "data: {\"error\": {\"message\": \"context length exceeded\", \"type\": \"server_error\"}}\n\n".into(),
        ]),
    ])
    .await;
    let p = make(server.url());
    assert_eq!(
        p.chat(&request(), &CancellationToken::new())
            .await
            .unwrap_err()
            .code(),
        "malformed"
    );
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        collect_stream(s, |_| {}).await.unwrap_err().code(),
        "malformed"
    );
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert!(e.to_string().contains("context length exceeded"), "{e}");
}

/// A server's words quoted in an error (an in-stream error event, an event that is not JSON)
/// are cut as an error answer's are: a broken server's megabyte line does not become a
/// megabyte error message, log line and run outcome.
#[tokio::test]
async fn a_long_quote_in_a_stream_error_is_cut() {
    let long = "x".repeat(200_000);
    let event = json!({"error": {"message": long, "type": "server_error"}});
    let server = ScriptedServer::start(vec![
        Reply::stream("text/event-stream", vec![format!("data: {{{long}\n\n")]),
        Reply::stream("text/event-stream", vec![format!("data: {event}\n\n")]),
    ])
    .await;
    let p = make(server.url());
    for code in ["malformed", "server_error"] {
        let s = p
            .chat_stream(&request(), &CancellationToken::new())
            .await
            .unwrap();
        let e = collect_stream(s, |_| {}).await.unwrap_err();
        assert_eq!(e.code(), code, "{e}");
        assert!(e.to_string().contains("xxxx"), "{e}");
        assert!(e.to_string().len() < 2_000, "{} bytes", e.to_string().len());
        assert!(format!("{e:?}").len() < 2_000);
    }
}

/// A base URL that reaches a web page (a server's own UI, a proxy's sign-in page) answers
/// 200 with HTML: the error says so and points at the base URL, streamed or not, instead of
/// calling the page a stream that ended early.
#[tokio::test]
async fn an_html_page_where_the_api_should_be_says_so() {
    let page = || {
        let mut r = Reply::stream(
            "text/html; charset=utf-8",
            vec!["<!doctype html><html><body><h1>Welcome</h1></body></html>".into()],
        );
        r.status = 200;
        r
    };
    let server = ScriptedServer::start(vec![page(), page()]).await;
    let p = make(server.url());
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    let s = match p.chat_stream(&request(), &CancellationToken::new()).await {
        Err(e) => e,
        Ok(s) => collect_stream(s, |_| {}).await.unwrap_err(),
    };
    for e in [e, s] {
        assert_eq!(e.code(), "malformed", "{e}");
        assert!(e.to_string().contains("HTML page"), "{e}");
        assert!(e.to_string().contains("check the base URL"), "{e}");
        assert!(e.to_string().contains("Welcome"), "{e}");
    }
    // The API's own answer under a wrong label is read as usual.
    let mislabelled = |mut r: Reply| {
        r.headers = vec![("content-type".into(), "text/html".into())];
        r
    };
    let server = ScriptedServer::start(vec![
        mislabelled(OpenAi.text("fine", false)),
        mislabelled(OpenAi.text("fine", true)),
    ])
    .await;
    let p = make(server.url());
    let r = p.chat(&request(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.text, "fine");
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(collect_stream(s, |_| {}).await.unwrap().text, "fine");
}

#[tokio::test]
async fn nothing_listening_names_the_address() {
    let url = kberg_testkit::closed_port_url();
    let e = make(url.clone())
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "unreachable");
    assert!(e.to_string().contains(&url), "{e}");
}

/// A provider at `url` with these HTTP options.
fn with_options(url: String, http: HttpOptions) -> Arc<dyn InferenceProvider> {
    Arc::new(OpenAiProvider::new(
        OpenAiConfig::new("local-model")
            .base_url(format!("{url}/v1"))
            .http(http),
    ))
}

fn bounded(url: String, body: usize, line: usize) -> Arc<dyn InferenceProvider> {
    with_options(
        url,
        HttpOptions::default()
            .max_retries(0)
            .max_body_bytes(body)
            .max_line_bytes(line),
    )
}

#[tokio::test]
async fn an_oversize_reply_body_is_too_large() {
    // A body the bound refuses, whether it says its length or arrives in pieces without one.
    let big = completion(
        json!({"role": "assistant", "content": "x".repeat(64 * 1024)}),
        "stop",
    );
    let text = big.to_string();
    let (head, tail) = text.split_at(text.len() / 2);
    let server = ScriptedServer::start(vec![
        Reply::json(200, &big),
        Reply::stream("application/json", vec![head.to_string(), tail.to_string()]),
    ])
    .await;
    for _ in 0..2 {
        let e = bounded(server.url(), 16 * 1024, 1024)
            .chat(&request(), &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(e.code(), "too_large", "{e}");
        assert!(
            e.to_string().contains("reply body exceeds 16384 bytes"),
            "{e}"
        );
    }
    // Within the bound the same reply reads.
    let server = ScriptedServer::start(vec![Reply::json(200, &big)]).await;
    let r = bounded(server.url(), 1 << 20, 1024)
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.text.len(), 64 * 1024);
}

#[tokio::test]
async fn a_streamed_line_without_end_is_too_large_and_what_came_before_is_kept() {
    let first = chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": "hel"}}]));
    // Then a line that never ends, sent in many small pieces (each one rescanned would be
    // quadratic; the bound stops it either way).
    let mut pieces = vec![first];
    pieces.extend((0..64).map(|_| "y".repeat(256)));
    let provider = |url| bounded(url, 1 << 20, 4096);
    too_large_after_hel(pieces, provider, "streamed line exceeds 4096 bytes").await;
}

#[tokio::test]
async fn a_stream_that_never_ends_is_too_large_and_what_came_before_is_kept() {
    // Well-formed chunks without end: each line is short, the whole reply is bounded.
    let first = chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": "hel"}}]));
    let mut pieces = vec![first];
    let filler = chunk(json!([{"index": 0, "delta": {"content": ""}}]));
    pieces.extend(std::iter::repeat_n(filler, 2_000));
    let provider = |url| {
        with_options(
            url,
            HttpOptions::default()
                .max_retries(0)
                .max_stream_bytes(64 * 1024),
        )
    };
    too_large_after_hel(pieces, provider, "streamed reply exceeds 65536 bytes").await;
}

/// Streams `pieces` to `provider` and checks the stream ends `too_large` with `says`, after
/// delivering the text that came before (`hel`).
async fn too_large_after_hel(
    pieces: Vec<String>,
    provider: impl Fn(String) -> Arc<dyn InferenceProvider>,
    says: &str,
) {
    let server = ScriptedServer::start(vec![Reply::stream("text/event-stream", pieces)]).await;
    let s = provider(server.url())
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .expect("the stream starts");
    let mut texts = String::new();
    let e = collect_stream(s, |t| texts.push_str(t))
        .await
        .expect_err("the stream ends too large");
    assert_eq!(e.code(), "too_large", "{e}");
    assert!(e.to_string().contains(says), "{e}");
    assert_eq!(texts, "hel");
}

#[tokio::test]
async fn an_endless_error_body_is_read_no_further_than_its_message_needs() {
    // A 500 whose body goes on far longer than the client's timeout allows: only its start is
    // read, so the call fails as the server error it is (not as a timeout), with a short detail.
    let pieces = vec!["oops ".repeat(20_000); 200];
    let mut endless = Reply::stream("text/plain", pieces).paced(Duration::from_millis(100));
    endless.status = 500;
    let server = ScriptedServer::start(vec![endless]).await;
    let provider = with_options(
        server.url(),
        HttpOptions::default()
            .max_retries(0)
            .timeout(Duration::from_secs(5)),
    );
    let e = provider
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_ne!(e.code(), "timeout", "{e}");
    assert!(e.to_string().contains("oops"), "{e}");
    assert!(e.to_string().len() < 600, "{e}");
}

/// `HttpOptions::timeout` bounds a whole non-streamed reply: a server that spends most of it
/// before its headers and then trickles the body past it is timed out, rather than given the
/// whole timeout again for the body.
#[tokio::test]
async fn the_timeout_bounds_headers_and_body_together() {
    let timeout = Duration::from_secs(2);
    let part = timeout * 3 / 5;
    let full = serde_json::to_string(&json!({
        "id": "c1", "object": "chat.completion", "model": "local-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "late"}}]
    }))
    .expect("JSON");
    let (head, tail) = full.split_at(full.len() / 2);
    let slow = Reply::stream("application/json", vec![head.to_string(), tail.to_string()])
        .headers_after(part);
    let slow = Reply {
        chunks: vec![(Duration::ZERO, head.to_string()), (part, tail.to_string())],
        ..slow
    };
    let server = ScriptedServer::start(vec![slow]).await;
    let provider = with_options(
        server.url(),
        HttpOptions::default().max_retries(0).timeout(timeout),
    );
    let e = provider
        .chat(&request(), &CancellationToken::new())
        .await
        .expect_err("headers and body took longer than the timeout together");
    assert_eq!(e.code(), "timeout", "{e}");
}

#[tokio::test]
async fn an_event_whose_data_lines_never_end_is_too_large() {
    // Each line is short, but the event never ends (no blank line): its joined data is bounded
    // by the reply bound, and what came before it is kept.
    let first = chunk(json!([{"index": 0, "delta": {"role": "assistant", "content": "hel"}}]));
    let mut pieces = vec![first];
    pieces.extend((0..64).map(|_| format!("data: {}\n", "z".repeat(200))));
    let provider = |url| bounded(url, 4096, 1024);
    too_large_after_hel(pieces, provider, "streamed event exceeds 4096 bytes").await;
}

fn make_keyed(url: String) -> Arc<dyn InferenceProvider> {
    Arc::new(OpenAiProvider::new(
        OpenAiConfig::new("local-model")
            .base_url(url)
            .api_key(credentials::KEY)
            .http(HttpOptions::default().max_retries(0)),
    ))
}

#[tokio::test]
async fn a_base_url_query_stays_the_query() {
    credentials::scenario_query_is_kept(&OpenAi, &make_keyed, "/v1", "/v1/chat/completions").await;
}

#[tokio::test]
async fn credentials_quoted_in_error_answers_are_redacted() {
    credentials::scenario_quoted_credentials(&make_keyed, "/v1").await;
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_not_followed() {
    credentials::scenario_redirects(&OpenAi, &make_keyed, "/v1").await;
}

#[tokio::test]
async fn nothing_listening_names_the_host_without_credentials() {
    credentials::scenario_unreachable(&make_keyed, "/v1").await;
}

#[test]
fn debug_hides_the_key_and_the_url_credentials() {
    let config = OpenAiConfig::new("m")
        .base_url(credentials::with_credentials("http://127.0.0.1:9", "/v1"))
        .api_key(credentials::KEY);
    credentials::assert_debug_hides("the config", &format!("{config:?}"));
    assert!(
        format!("{config:?}").contains("api_key: Some(\"[redacted]\")"),
        "{config:?}"
    );
    let provider = OpenAiProvider::new(config);
    credentials::assert_debug_hides("the provider", &format!("{provider:?}"));
}

#[tokio::test]
async fn credentials_quoted_in_a_stream_are_redacted() {
    let quote = credentials::in_band_quote(true);
    let event = json!({"error": {"message": quote, "type": "server_error"}});
    let sse = |text: String| Reply::stream("text/event-stream", vec![text]);
    credentials::scenario_quoted_in_band(
        &make_keyed,
        "/v1",
        vec![
            (sse(format!("data: {event}\n\n")), true),
            (sse(format!("data: not json, {quote}\n\n")), true),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_base_url_without_a_scheme_is_refused_naming_it_redacted() {
    use credentials::{PASS_WRITTEN, USER};
    let p = make_keyed(format!("{USER}:{PASS_WRITTEN}@127.0.0.1:9/v1?key=x"));
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "unreachable", "{e}");
    assert!(e.to_string().contains("not a usable http(s) URL"), "{e}");
    assert!(e.to_string().contains("***@127.0.0.1:9/v1"), "{e}");
    credentials::assert_no_canary("the error", &format!("{e} {e:?}"));
}

#[tokio::test]
async fn a_turn_timeout_bounds_a_dripping_server() {
    support::deadline::scenario_turn_deadline(&OpenAi, &with_options).await;
}

#[tokio::test]
async fn control_characters_in_quoted_errors_are_escaped() {
    use support::controls::HOSTILE;
    let event = json!({"error": {"message": HOSTILE, "type": "server_error"}});
    let sse = |text: String| Reply::stream("text/event-stream", vec![text]);
    let make = |url| with_options(url, HttpOptions::default().max_retries(0));
    support::controls::scenario_controls_are_escaped(
        &make,
        vec![(sse(format!("data: {event}\n\n")), true)],
    )
    .await;
}

/// A timeout as long as a `Duration` holds (a program's way to say "no timeout") is waited
/// for, not added to the clock, which overflowed and panicked.
#[tokio::test]
async fn the_longest_timeouts_do_not_overflow_the_clock() {
    let server = ScriptedServer::start(vec![
        OpenAi.text("hi", false),
        OpenAi.text("hi", true),
        OpenAi.text("hi", false),
        OpenAi.text("hi", true),
    ])
    .await;
    for http in [
        HttpOptions::default().timeout(Duration::MAX),
        HttpOptions::default()
            .stream_idle_timeout(Duration::MAX)
            .turn_timeout(Duration::MAX),
    ] {
        let p = with_options(server.url(), http);
        let cancel = CancellationToken::new();
        assert_eq!(p.chat(&request(), &cancel).await.unwrap().text, "hi");
        let s = p.chat_stream(&request(), &cancel).await.unwrap();
        assert_eq!(collect_stream(s, |_| {}).await.unwrap().text, "hi");
    }
}

/// A non-streamed reply holding more tool calls than any turn makes (a hostile server's
/// thousands of tiny calls, each of which the agent would answer) is refused as malformed, as
/// a stream's are; as many as the bound are read.
#[tokio::test]
async fn implausibly_many_tool_calls_are_malformed() {
    let reply = |n: usize| {
        let calls: Vec<Value> = (0..n)
            .map(|i| {
                json!({"id": format!("call_{i}"), "type": "function",
                            "function": {"name": "t", "arguments": "{}"}})
            })
            .collect();
        Reply::json(
            200,
            &completion(
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
                "tool_calls",
            ),
        )
    };
    let server = ScriptedServer::start(vec![reply(1025), reply(1024)]).await;
    let p = make(server.url());
    let cancel = CancellationToken::new();
    let e = p.chat(&request(), &cancel).await.unwrap_err();
    assert_eq!(e.code(), "malformed", "{e}");
    assert!(e.to_string().contains("implausibly many tool calls"), "{e}");
    assert_eq!(
        p.chat(&request(), &cancel).await.unwrap().tool_calls.len(),
        1024
    );
}

/// A 200 whose body is an error object (a gateway or proxy that answers every reply 200, as
/// OpenRouter and several bridges do) says what the server said, not that `choices` is missing.
#[tokio::test]
async fn an_error_object_in_a_200_reply_is_the_servers_error() {
    let server = ScriptedServer::start(vec![
        Reply::json(
            200,
            &api_error(
                "Provider returned error: upstream overloaded",
                "server_error",
                "502",
            ),
        ),
        Reply::json(200, &json!({"error": "quota exhausted for this key"})),
        // An `error` that is null beside a complete reply is no error.
        Reply::json(200, &{
            let mut c = completion(json!({"role": "assistant", "content": "Hi"}), "stop");
            c["error"] = Value::Null;
            c
        }),
    ])
    .await;
    let p = make(server.url());
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "server_error", "{e}");
    assert!(e.to_string().contains("upstream overloaded"), "{e}");
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "server_error", "{e}");
    assert!(e.to_string().contains("quota exhausted"), "{e}");
    let r = p.chat(&request(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.text, "Hi");
}

/// A stream of several choices (`n` set through `extra`) is read as its first choice, as a
/// whole reply is: the second choice's text and calls do not run into the first's.
#[tokio::test]
async fn a_stream_of_several_choices_is_read_as_its_first() {
    let pieces = vec![
        chunk(json!([
            {"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": null},
            {"index": 1, "delta": {"role": "assistant", "content": "Bon"}, "finish_reason": null}
        ])),
        chunk(
            json!([{"index": 1, "delta": {"content": "jour", "tool_calls": [
            {"index": 0, "id": "call_b", "type": "function", "function": {"name": "wait", "arguments": "{\"seconds\": 9}"}}
        ]}, "finish_reason": null}]),
        ),
        chunk(
            json!([{"index": 0, "delta": {"content": "lo", "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "wait", "arguments": "{\"seconds\": 1}"}}
        ]}, "finish_reason": null}]),
        ),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
        chunk(json!([{"index": 1, "delta": {}, "finish_reason": "length"}])),
        "data: [DONE]\n\n".into(),
    ];
    let r = streamed(pieces).await.unwrap();
    assert_eq!(r.text, "Hello");
    assert_eq!(r.tool_calls.len(), 1, "{:?}", r.tool_calls);
    assert_eq!(r.tool_calls[0].id, "call_a");
    assert_eq!(r.tool_calls[0].arguments, json!({"seconds": 1}));
    assert_eq!(r.finish, kberg_agent::FinishReason::ToolCalls);
}

/// Usage in a chunk is the reply's so far, not an increment: a server that sends it in every
/// chunk (vLLM's `continuous_usage_stats`) or twice at the end (with `finish_reason`, then in
/// the usage chunk) is counted once.
#[tokio::test]
async fn usage_sent_in_several_chunks_is_counted_once() {
    let with_usage = |delta: Value, finish: Value, prompt: u64, completion: u64| {
        let v = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
                       "model": "local-model",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                       "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                 "total_tokens": prompt + completion}});
        format!("data: {v}\n\n")
    };
    let pieces = vec![
        with_usage(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
            82,
            0,
        ),
        with_usage(json!({"content": "Hel"}), Value::Null, 82, 1),
        with_usage(json!({"content": "lo"}), Value::Null, 82, 2),
        with_usage(json!({}), json!("stop"), 82, 2),
        usage_chunk(),
        "data: [DONE]\n\n".into(),
    ];
    let r = streamed(pieces).await.unwrap();
    assert_eq!(r.text, "Hello");
    assert_eq!(r.usage.input_tokens, 82);
    assert_eq!(r.usage.output_tokens, 17);
}

/// A stream whose calls end without a `finish_reason` (several local servers leave it null)
/// finishes as a reply with calls, as the same reply unstreamed does.
#[tokio::test]
async fn a_stream_of_calls_without_a_finish_reason_finishes_with_tool_calls() {
    let pieces = vec![
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"name": "wait", "arguments": "{\"seconds\": 1}"}}
        ]}, "finish_reason": null}]),
        ),
        "data: [DONE]\n\n".into(),
    ];
    let server = ScriptedServer::start(vec![
        Reply::stream("text/event-stream", pieces),
        Reply::json(
            200,
            &json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "wait", "arguments": "{\"seconds\": 1}"}}]},
                "finish_reason": null}]}),
        ),
    ])
    .await;
    let p = make(server.url());
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let streamed = collect_stream(s, |_| {}).await.unwrap();
    let whole = p.chat(&request(), &CancellationToken::new()).await.unwrap();
    assert_eq!(whole.finish, kberg_agent::FinishReason::ToolCalls);
    assert_eq!(streamed.finish, whole.finish);
    assert_eq!(streamed.tool_calls, whole.tool_calls);
}

/// A streamed call whose arguments come as an object, whole (as some servers send them, and
/// as a whole reply's are accepted), keeps them: they are not dropped for an empty `{}`.
#[tokio::test]
async fn streamed_arguments_sent_as_an_object_are_kept() {
    let pieces = vec![
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function",
             "function": {"name": "add_note", "arguments": {"title": "milk", "priority": 2}}}
        ]}, "finish_reason": null}]),
        ),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
        "data: [DONE]\n\n".into(),
    ];
    let r = streamed(pieces).await.unwrap();
    assert_eq!(r.tool_calls.len(), 1, "{:?}", r.tool_calls);
    assert_eq!(
        r.tool_calls[0].arguments,
        json!({"title": "milk", "priority": 2})
    );
}

/// A streamed request answered with one JSON body (a server that does not stream, or an error
/// object under a 200) is read as that reply or that error, not as a stream that ended early.
#[tokio::test]
async fn a_streamed_request_answered_with_one_json_reply_is_read_whole() {
    let server = ScriptedServer::start(vec![
        OpenAi.call("call_a", "wait", &json!({"seconds": 1}), false),
        Reply::json(
            200,
            &api_error("context length exceeded", "server_error", "ctx"),
        ),
        // Written over several lines, as a server that pretty-prints does.
        Reply::stream(
            "application/json",
            vec![
                serde_json::to_string_pretty(&completion(
                    json!({"role": "assistant", "content": "Hi"}),
                    "stop",
                ))
                .unwrap(),
            ],
        ),
    ])
    .await;
    let p = make(server.url());
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let r = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(r.tool_calls.len(), 1, "{r:?}");
    assert_eq!(r.tool_calls[0].arguments, json!({"seconds": 1}));
    assert_eq!(r.usage.total(), 99);
    assert_eq!(r.finish, kberg_agent::FinishReason::ToolCalls);
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "server_error", "{e}");
    assert!(e.to_string().contains("context length exceeded"), "{e}");
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let r = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(r.text, "Hi");
}

/// A chunk that carries `"error": null` beside its choices is an ordinary chunk, as a whole
/// reply with it is: the turn is not ended as a server error saying `null`.
#[tokio::test]
async fn a_null_error_field_in_a_chunk_is_no_error() {
    let with_null_error = |choices: Value| {
        let v = json!({"id": "chatcmpl-123", "object": "chat.completion.chunk",
                       "model": "local-model", "error": null, "choices": choices});
        format!("data: {v}\n\n")
    };
    let pieces = vec![
        with_null_error(
            json!([{"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "finish_reason": null}]),
        ),
        with_null_error(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
        "data: [DONE]\n\n".into(),
    ];
    let r = streamed(pieces).await.unwrap();
    assert_eq!(r.text, "Hi");
}

/// A streamed call that gets arguments but never a name is refused (where the stream is
/// assembled), as a whole reply's call without `function.name` is: it is not dropped without
/// a word, leaving a turn that seems to have said nothing.
#[tokio::test]
async fn a_streamed_call_never_named_is_malformed() {
    let pieces = vec![
        chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_a", "type": "function", "function": {"arguments": "{\"seconds\""}}
        ]}, "finish_reason": null}]),
        ),
        chunk(json!([{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": ": 1}"}}
        ]}, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])),
        "data: [DONE]\n\n".into(),
    ];
    let e = streamed(pieces).await.unwrap_err();
    assert_eq!(e.code(), "malformed", "{e}");
    assert!(e.to_string().contains("no tool name"), "{e}");
}

/// A server on 127.0.0.1 that reads each request whole and closes the first `hangups`
/// connections without a word (as a server closes an idle kept-alive connection the request
/// went out on), then answers `reply` as JSON. Counts the requests it read.
#[allow(clippy::unwrap_used)] // a test helper: a failure to listen fails the test
fn hanging_up_server(
    hangups: usize,
    reply: Value,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read, Write};
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = Arc::clone(&read);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            // The head, then as many body bytes as it says.
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            let whole = loop {
                let Ok(n) = conn.read(&mut buf) else {
                    break false;
                };
                if n == 0 {
                    break false;
                }
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length: usize = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if got.len() >= end + 4 + length {
                        break true;
                    }
                }
            };
            if !whole {
                continue;
            }
            if count.fetch_add(1, Ordering::SeqCst) < hangups {
                let _ = conn.shutdown(std::net::Shutdown::Both);
                continue;
            }
            let body = reply.to_string();
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, read)
}

/// A connection closed before any reply came (the server timed out the kept-alive connection
/// the request went out on, or failed mid-request) is retried as a 5xx is, streamed or not;
/// past the retries it is `truncated`, saying how many times it was tried.
#[tokio::test]
async fn a_connection_closed_before_any_reply_is_retried() {
    use std::sync::atomic::Ordering;
    let fine = completion(json!({"role": "assistant", "content": "fine"}), "stop");
    let (url, read) = hanging_up_server(2, fine.clone());
    let r = make(url)
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.text, "fine");
    assert_eq!(
        read.load(Ordering::SeqCst),
        3,
        "two hang-ups, then the answer"
    );

    // Streamed: the request is retried before any event came (the answer here is one body).
    let (url, read) = hanging_up_server(1, fine.clone());
    let s = make(url)
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(collect_stream(s, |_| {}).await.unwrap().text, "fine");
    assert_eq!(read.load(Ordering::SeqCst), 2);

    // More hang-ups than retries (2 by default): the error, once each attempt was made.
    let (url, read) = hanging_up_server(3, fine.clone());
    let e = make(url)
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "truncated", "{e}");
    assert!(
        e.to_string()
            .contains("closed the connection before replying each of 3 times"),
        "{e}"
    );
    assert_eq!(read.load(Ordering::SeqCst), 3);

    // No retries: the first hang-up is the error.
    let (url, read) = hanging_up_server(1, fine);
    let e = with_options(url, HttpOptions::default().max_retries(0))
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "truncated", "{e}");
    assert!(e.to_string().contains("before replying: "), "{e}");
    assert_eq!(read.load(Ordering::SeqCst), 1);
}

/// A reasoning model behind a server with a reasoning parser: the thinking comes as
/// `reasoning_content` (DeepSeek's API, vLLM, llama.cpp server) or `reasoning` (vLLM's newer
/// name), beside `content`, whole and in stream deltas.
#[tokio::test]
async fn a_reasoning_models_thinking_comes_apart_from_its_text() {
    for field in ["reasoning_content", "reasoning"] {
        let whole = Reply::json(
            200,
            &completion(
                json!({"role": "assistant", "content": "Paris.", field: "The capital of France."}),
                "stop",
            ),
        );
        let streamed = Reply::stream(
            "text/event-stream",
            vec![
                chunk(
                    json!([{"index": 0, "delta": {"role": "assistant", field: "The capital"}, "finish_reason": null}]),
                ),
                chunk(
                    json!([{"index": 0, "delta": {field: " of France.", "content": null}, "finish_reason": null}]),
                ),
                chunk(json!([{"index": 0, "delta": {"content": "Paris."}, "finish_reason": null}])),
                chunk(json!([{"index": 0, "delta": {}, "finish_reason": "stop"}])),
                "data: [DONE]\n\n".into(),
            ],
        );
        support::scenario_thinking_apart(
            &make,
            [whole, streamed],
            "The capital of France.",
            "Paris.",
        )
        .await;
    }
}

/// A conversation past the model's context window, as each OpenAI-compatible server refuses
/// it: OpenAI (`context_length_exceeded`, with and without the sizes in its words), vLLM (both
/// of its wordings, its error at the top level or under `error`), llama.cpp server
/// (`exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`), LM Studio.
#[tokio::test]
async fn a_conversation_past_the_window_is_context_too_long() {
    let refusal = |body: Value, requested: Option<u64>, limit: Option<u64>| WindowRefusal {
        body,
        requested,
        limit,
    };
    let refusals = [
        refusal(
            api_error(
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130419 tokens. Please reduce the length of the messages.",
                "invalid_request_error",
                "context_length_exceeded",
            ),
            Some(130_419),
            Some(128_000),
        ),
        refusal(
            api_error(
                "Your input exceeds the context window of this model. Please adjust your input and try again.",
                "invalid_request_error",
                "context_length_exceeded",
            ),
            None,
            None,
        ),
        refusal(
            json!({"object": "error",
                "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
                "type": "BadRequestError", "param": null, "code": 400}),
            Some(5000),
            Some(4096),
        ),
        refusal(
            json!({"error": {"object": "error",
                "message": "This model's maximum context length is 2048 tokens. However, your request has 3000 input tokens. Please reduce the length of the input messages.",
                "type": "BadRequestError", "param": null, "code": 400}}),
            Some(3000),
            Some(2048),
        ),
        refusal(
            json!({"error": {"code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error", "n_prompt_tokens": 5120, "n_ctx": 4096}}),
            Some(5120),
            Some(4096),
        ),
        refusal(
            json!({"error": "The number of tokens to keep from the initial prompt is greater than the context length. Try to load the model with a larger context length, or provide a shorter input"}),
            None,
            None,
        ),
    ];
    support::scenario_context_too_long(&make, &refusals, "`--ctx-size`").await;
}

/// The same refusals under a 200, as a gateway in front of the server writes them (the
/// reply's `error`, or an error event of the stream), each quoting the request's credentials.
#[tokio::test]
async fn a_context_window_refusal_under_a_200_is_context_too_long() {
    let quote = credentials::in_band_quote(true);
    let refusals = [
        WindowRefusal {
            body: json!({"error": {"message": format!(
                "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. ({quote})"),
                "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}}),
            requested: Some(9000),
            limit: Some(8192),
        },
        WindowRefusal {
            body: json!({"error": {"code": 400,
                "message": format!("the request exceeds the available context size, try increasing it ({quote})"),
                "type": "exceed_context_size_error", "n_prompt_tokens": 5120, "n_ctx": 4096}}),
            requested: Some(5120),
            limit: Some(4096),
        },
    ];
    let streamed =
        |body: &Value| Reply::stream("text/event-stream", vec![format!("data: {body}\n\n")]);
    support::scenario_context_too_long_in_band(
        &make_keyed,
        "/v1",
        &refusals,
        &streamed,
        "`--ctx-size`",
    )
    .await;
}

/// OpenAI's reasoning models refuse `max_tokens` (400, `unsupported_parameter`) and read
/// `max_completion_tokens`: the provider sends the turn again with that field, streamed or
/// not, and every later turn with it; a request without the option, another 400, or the field
/// chosen in the config sends nothing twice.
#[tokio::test]
async fn a_refused_max_tokens_is_sent_again_as_max_completion_tokens() {
    use kberg_providers::openai::TokenLimitField;
    let refusal = || {
        Reply::json(
            400,
            &json!({"error": {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}),
        )
    };
    let limited = || {
        let mut r = request();
        r.options.max_tokens = Some(64);
        r
    };
    let limit_of = |body: &Value| {
        (
            body.get("max_tokens").cloned(),
            body.get("max_completion_tokens").cloned(),
        )
    };
    let cancel = CancellationToken::new();
    for stream in [false, true] {
        let server = ScriptedServer::start(vec![
            refusal(),
            OpenAi.text("ok", stream),
            OpenAi.text("again", stream),
        ])
        .await;
        let p = OpenAiProvider::new(
            OpenAiConfig::new("o3-mini").base_url(format!("{}/v1", server.url())),
        );
        assert_eq!(p.token_limit_field(), TokenLimitField::MaxTokens);
        for expected in ["ok", "again"] {
            let r = if stream {
                collect_stream(p.chat_stream(&limited(), &cancel).await.unwrap(), |_| {})
                    .await
                    .unwrap()
            } else {
                p.chat(&limited(), &cancel).await.unwrap()
            };
            assert_eq!(r.text, expected);
        }
        assert_eq!(p.token_limit_field(), TokenLimitField::MaxCompletionTokens);
        let sent: Vec<_> = server
            .requests()
            .iter()
            .map(|r| limit_of(&r.body))
            .collect();
        assert_eq!(
            sent,
            [
                (Some(json!(64)), None),
                (None, Some(json!(64))),
                (None, Some(json!(64)))
            ],
            "stream: {stream}"
        );
    }

    // Without the option, the same refusal is the answer (there is nothing to move).
    let server = ScriptedServer::start(vec![refusal()]).await;
    let e = make(server.url())
        .chat(&request(), &cancel)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "rejected", "{e}");
    assert_eq!(server.requests().len(), 1);

    // Another 400 is not sent again.
    let server = ScriptedServer::start(vec![Reply::json(
        400,
        &api_error(
            "'messages' is too long",
            "invalid_request_error",
            "context_length_exceeded",
        ),
    )])
    .await;
    let e = make(server.url())
        .chat(&limited(), &cancel)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "context_too_long", "{e}");
    assert_eq!(server.requests().len(), 1);

    // Chosen in the config: sent so from the first turn.
    let server = ScriptedServer::start(vec![OpenAi.text("ok", false)]).await;
    let p = OpenAiProvider::new(
        OpenAiConfig::new("gpt-5")
            .base_url(format!("{}/v1", server.url()))
            .token_limit_field(TokenLimitField::MaxCompletionTokens),
    );
    p.chat(&limited(), &cancel).await.unwrap();
    assert_eq!(
        limit_of(&server.requests()[0].body),
        (None, Some(json!(64)))
    );
}
