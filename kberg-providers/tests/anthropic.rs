//! The Anthropic provider against a scripted server that speaks the Messages API wire.
//!
//! Shapes reproduced (Anthropic API reference: "Messages", "Streaming Messages", "Errors",
//! "Versions", and the tool-use guide):
//! - `POST /v1/messages` with `x-api-key`, `anthropic-version: 2023-06-01`, `model`,
//!   `max_tokens`, top-level `system`, `tools` with `input_schema`, `tool_choice`, assistant
//!   `tool_use` blocks and a user turn of `tool_result` blocks (`tool_use_id`, `content`,
//!   `is_error`);
//! - the reply `{"id": "msg_…", "type": "message", "role": "assistant", "content": [{"type":
//!   "text"}, {"type": "tool_use", "id": "toolu_…", "name", "input"}], "stop_reason": "tool_use",
//!   "usage": {"input_tokens", "output_tokens"}}`;
//! - the stream: `event:`/`data:` pairs `message_start`, `content_block_start`, `ping`,
//!   `content_block_delta` (`text_delta`; `input_json_delta` with `partial_json` fragments),
//!   `content_block_stop`, `message_delta` (`stop_reason`, cumulative `usage.output_tokens`),
//!   `message_stop`, and an in-stream `error` event;
//! - errors `{"type": "error", "error": {"type", "message"}}`: 401 `authentication_error`, 404
//!   `not_found_error`, 429 `rate_limit_error` with `retry-after`, 529 `overloaded_error`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kberg_agent::{
    ChatRequest, InferenceProvider, Message, ToolChoice, ToolDefinition, collect_stream,
};
use kberg_providers::HttpOptions;
use kberg_providers::anthropic::{AnthropicConfig, AnthropicProvider};
use kberg_testkit::scripted::{Reply, ScriptedServer};
use serde_json::{Value, json};
use support::{WindowRefusal, Wire, credentials};
use tokio_util::sync::CancellationToken;

struct Anthropic;

fn ev(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn message_start() -> String {
    ev(
        "message_start",
        json!({"type": "message_start", "message": {
        "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY", "type": "message", "role": "assistant",
        "content": [], "model": "claude-sonnet-4-5", "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 472, "output_tokens": 2}}}),
    )
}

fn message_end(stop: &str) -> Vec<String> {
    vec![
        ev(
            "message_delta",
            json!({"type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 89}}),
        ),
        ev("message_stop", json!({"type": "message_stop"})),
    ]
}

fn message(content: Value, stop: &str) -> Value {
    json!({"id": "msg_01Aq9w938a90dw8q", "type": "message", "role": "assistant",
           "model": "claude-sonnet-4-5", "content": content, "stop_reason": stop,
           "stop_sequence": null, "usage": {"input_tokens": 472, "output_tokens": 89}})
}

fn api_error(kind: &str, msg: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": msg}})
}

impl Wire for Anthropic {
    fn call(&self, id: &str, name: &str, arguments: &Value, stream: bool) -> Reply {
        if !stream {
            return Reply::json(
                200,
                &message(
                    json!([
                        {"type": "text", "text": "I'll do that."},
                        {"type": "tool_use", "id": id, "name": name, "input": arguments}
                    ]),
                    "tool_use",
                ),
            );
        }
        let args = arguments.to_string();
        let cut = args.len() / 2;
        let mut pieces = vec![
            message_start(),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ),
            ev("ping", json!({"type": "ping"})),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "I'll do that."}}),
            ),
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": ""}}),
            ),
        ];
        for part in [&args[..cut], &args[cut..]] {
            pieces.push(ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": part}}),
            ));
        }
        pieces.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ));
        pieces.extend(message_end("tool_use"));
        Reply::stream("text/event-stream", pieces)
    }

    fn text(&self, text: &str, stream: bool) -> Reply {
        if !stream {
            return Reply::json(
                200,
                &message(json!([{"type": "text", "text": text}]), "end_turn"),
            );
        }
        let mid = text.len() / 2;
        let mut pieces = vec![
            message_start(),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ),
        ];
        for part in [&text[..mid], &text[mid..]] {
            pieces.push(ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": part}}),
            ));
        }
        pieces.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
        pieces.extend(message_end("end_turn"));
        Reply::stream("text/event-stream", pieces)
    }

    fn tool_results(&self, body: &Value) -> Vec<String> {
        let mut out = Vec::new();
        for m in body["messages"].as_array().into_iter().flatten() {
            for b in m["content"].as_array().into_iter().flatten() {
                if b["type"] == "tool_result" {
                    out.push(b["content"].as_str().unwrap_or_default().to_string());
                }
            }
        }
        out
    }
}

fn make(url: String) -> Arc<dyn InferenceProvider> {
    Arc::new(AnthropicProvider::new(
        AnthropicConfig::new("claude-sonnet-4-5")
            .base_url(url)
            .api_key("sk-ant-test")
            .http(HttpOptions::default().initial_backoff(Duration::from_millis(5))),
    ))
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::system("Be brief."), Message::user("hi")],
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn repair_turn_succeeds() {
    support::scenario_repair(&Anthropic, &make, false).await;
}

#[tokio::test]
async fn repair_turn_succeeds_streaming() {
    support::scenario_repair(&Anthropic, &make, true).await;
}

#[tokio::test]
async fn refusal_is_accepted() {
    support::scenario_refusal(&Anthropic, &make, false).await;
    support::scenario_refusal(&Anthropic, &make, true).await;
}

#[tokio::test]
async fn cancellation_mid_tool() {
    support::scenario_cancel_mid_tool(&Anthropic, &make, false).await;
    support::scenario_cancel_mid_tool(&Anthropic, &make, true).await;
}

/// The tool names of a `/v1/messages` body: the tools', the forced choice's, the earlier
/// `tool_use` blocks'.
fn sent_names(body: &Value) -> Vec<String> {
    let name = |v: &Value| v.as_str().unwrap_or("<missing>").to_string();
    let mut out: Vec<String> = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| name(&t["name"]))
        .collect();
    out.push(name(&body["tool_choice"]["name"]));
    for m in body["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_use" {
                out.push(name(&b["name"]));
            }
        }
    }
    out
}

#[tokio::test]
async fn unsafe_tool_names_are_sent_as_aliases_and_read_back_without_the_agent() {
    support::scenario_unsafe_tool_names(&Anthropic, &make, false, &sent_names).await;
    support::scenario_unsafe_tool_names(&Anthropic, &make, true, &sent_names).await;
}

#[tokio::test]
async fn request_has_the_documented_shape() {
    let server = ScriptedServer::start(vec![
        Anthropic.text("ok", false),
        Anthropic.text("ok", true),
    ])
    .await;
    let p = make(server.url());
    let mut req = request();
    req.tools = vec![ToolDefinition::new(
        "add_note",
        "Create a note",
        json!({"type": "object"}),
    )];
    req.options.tool_choice = ToolChoice::Required;
    req.options.stop = vec!["END".into()];
    let r = p.chat(&req, &CancellationToken::new()).await.unwrap();
    assert_eq!(r.text, "ok");
    assert_eq!(r.usage.total(), 561);
    let s = p
        .chat_stream(&req, &CancellationToken::new())
        .await
        .unwrap();
    let r = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(r.text, "ok");
    assert_eq!(r.usage.input_tokens, 472);
    assert_eq!(r.usage.output_tokens, 89);
    let reqs = server.requests();
    let sent = &reqs[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], "sk-ant-test");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    let b = &sent.body;
    assert_eq!(b["system"], "Be brief.");
    assert_eq!(b["max_tokens"], 4096);
    assert_eq!(b["messages"][0]["role"], "user");
    assert_eq!(b["tools"][0]["input_schema"], json!({"type": "object"}));
    assert_eq!(b["tool_choice"], json!({"type": "any"}));
    assert_eq!(b["stop_sequences"], json!(["END"]));
    assert_eq!(reqs[1].body["stream"], true);
}

/// Every message in a recorded request has content, and every text block holds more than
/// whitespace: the API answers 400 ("text content blocks must be non-empty", "must contain
/// non-whitespace text") otherwise.
fn assert_no_blank_text(body: &Value) {
    for m in body["messages"].as_array().expect("a messages array") {
        match &m["content"] {
            Value::String(t) => assert!(!t.trim().is_empty(), "a blank message in {body}"),
            Value::Array(blocks) => {
                assert!(!blocks.is_empty(), "a message without content in {body}");
                for b in blocks.iter().filter(|b| b["type"] == "text") {
                    let t = b["text"].as_str().unwrap_or_default();
                    assert!(!t.trim().is_empty(), "a blank text block in {body}");
                }
            }
            other => panic!("content {other} in {body}"),
        }
    }
}

/// A model that says nothing, or only whitespace beside its call: the next request carries
/// no blank text block, which the API refuses with a 400 that ended the run.
#[tokio::test]
async fn a_turn_with_no_words_is_sent_back_without_blank_text() {
    let agent =
        |url: String| kberg_agent::Agent::from_arcs(make(url), Arc::new(support::app_surface()));
    // Nothing at all: the loop asks for words, resending the empty turn.
    let server = ScriptedServer::start(vec![
        Reply::json(200, &message(json!([]), "end_turn")),
        Anthropic.text("You have no notes yet.", false),
    ])
    .await;
    let out = agent(server.url())
        .run(
            vec![Message::user("what are my notes?")],
            &CancellationToken::new(),
        )
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_no_blank_text(&reqs[1].body);
    // Whitespace beside a call, as a model writes before its tool use.
    let server = ScriptedServer::start(vec![
        Reply::json(
            200,
            &message(
                json!([{"type": "text", "text": "\n\n"},
                       {"type": "tool_use", "id": "toolu_01", "name": "add_note",
                        "input": {"title": "milk", "priority": 2}}]),
                "tool_use",
            ),
        ),
        Anthropic.text("Added the note.", false),
    ])
    .await;
    let out = agent(server.url())
        .run(
            vec![Message::user("add a note titled milk with priority 2")],
            &CancellationToken::new(),
        )
        .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(out.calls[0].outcome.as_str(), "ok");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_no_blank_text(&reqs[1].body);
    assert_eq!(
        reqs[1].body["messages"][1]["content"][0]["type"],
        "tool_use"
    );
}

/// A tool that failed without a word (an MCP error result with no content) is sent back with
/// words: the API refuses an empty error result (400, "content cannot be empty if `is_error`
/// is true"), which ended the run where a repair turn was due.
#[test]
fn an_empty_tool_result_is_sent_with_words() {
    let p = AnthropicProvider::new(AnthropicConfig::new("claude-sonnet-4-5"));
    let mut req = request();
    req.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![
            kberg_agent::ToolCall {
                id: "toolu_1".into(),
                name: "add_note".into(),
                arguments: json!({"title": "x"}),
            },
            kberg_agent::ToolCall {
                id: "toolu_2".into(),
                name: "add_note".into(),
                arguments: json!({"title": "y"}),
            },
        ],
    });
    for (id, is_error) in [("toolu_1", true), ("toolu_2", false)] {
        req.messages.push(Message::Tool {
            call_id: id.into(),
            name: "add_note".into(),
            content: " ".into(),
            is_error,
        });
    }
    let body = p.request_body(&req, false);
    let results = body["messages"][2]["content"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{body}");
    for r in results {
        let text = r["content"].as_str().expect("text content");
        assert!(!text.trim().is_empty(), "{body}");
    }
}

/// The same refusal under a 200 (a gateway's reply, or an `error` event of a stream already
/// under way), quoting the request's credentials.
#[tokio::test]
async fn a_context_window_refusal_under_a_200_is_context_too_long() {
    let quote = credentials::in_band_quote(true);
    let refusals = [WindowRefusal {
        body: api_error(
            "invalid_request_error",
            &format!("prompt is too long: 215000 tokens > 200000 maximum ({quote})"),
        ),
        requested: Some(215_000),
        limit: Some(200_000),
    }];
    let streamed = |body: &Value| {
        Reply::stream(
            "text/event-stream",
            vec![format!("event: error\ndata: {body}\n\n")],
        )
    };
    support::scenario_context_too_long_in_band(
        &make_keyed,
        "",
        &refusals,
        &streamed,
        "fewer `max_tokens`",
    )
    .await;
}

/// A conversation past the model's context window, as the Messages API refuses it: the prompt
/// alone, and the prompt with `max_tokens`.
#[tokio::test]
async fn a_conversation_past_the_window_is_context_too_long() {
    let refusals = [
        WindowRefusal {
            body: api_error(
                "invalid_request_error",
                "prompt is too long: 215000 tokens > 200000 maximum",
            ),
            requested: Some(215_000),
            limit: Some(200_000),
        },
        WindowRefusal {
            body: api_error(
                "invalid_request_error",
                "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again",
            ),
            requested: None,
            limit: Some(200_000),
        },
    ];
    support::scenario_context_too_long(&make, &refusals, "fewer `max_tokens`").await;
}

#[tokio::test]
async fn errors_are_actionable() {
    let server = ScriptedServer::start(vec![
        Reply::json(401, &api_error("authentication_error", "invalid x-api-key")),
        Reply::json(
            404,
            &api_error("not_found_error", "model: claude-nonexistent"),
        ),
        Reply::json(529, &api_error("overloaded_error", "Overloaded")),
        Reply::json(
            429,
            &api_error(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
        )
        .header("retry-after", "0"),
        Anthropic.text("finally", false),
    ])
    .await;
    let p = AnthropicProvider::new(
        AnthropicConfig::new("claude-nonexistent")
            .base_url(server.url())
            .http(HttpOptions::default().max_retries(0)),
    );
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "unauthorized");
    assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "model_not_found");
    // 529 and 429 are retried by a provider that allows retries.
    let r = make(server.url())
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.text, "finally");
    assert_eq!(server.requests().len(), 5);
}

#[tokio::test]
async fn stream_error_event_truncation_and_slowness() {
    let mut overloaded = vec![message_start()];
    overloaded.push(ev("error", api_error("overloaded_error", "Overloaded")));
    let server = ScriptedServer::start(vec![
        Reply::stream("text/event-stream", overloaded),
        Anthropic.text("Hello there", true).truncated(4),
        Anthropic.text("Hello there", true).truncated(3).aborted(),
        Anthropic
            .text("Hello there", true)
            .paced(Duration::from_millis(600)),
    ])
    .await;
    // The error and the truncations under the default idle timeout (a short one could end a
    // stream that a loaded machine is slow to end or break, as a timeout); the slow stream
    // under a short one.
    let p = AnthropicProvider::new(
        AnthropicConfig::new("m")
            .base_url(server.url())
            .http(HttpOptions::default()),
    );
    let impatient = AnthropicProvider::new(
        AnthropicConfig::new("m")
            .base_url(server.url())
            .http(HttpOptions::default().stream_idle_timeout(Duration::from_millis(150))),
    );
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert!(e.to_string().contains("overloaded_error"), "{e}");
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

/// A reply is over at `message_stop`: what a server sends after it is not part of the turn,
/// and a connection kept open after it does not hold the turn until the idle timeout.
#[tokio::test]
async fn the_reply_ends_at_message_stop_whatever_follows() {
    let mut reply = Anthropic.text("Hello there", true);
    reply.chunks.push((
        Duration::ZERO,
        ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": " and more"}}),
        ),
    ));
    reply.chunks.push((
        Duration::from_secs(3600),
        ev("message_stop", json!({"type": "message_stop"})),
    ));
    let server = ScriptedServer::start(vec![reply]).await;
    let p = AnthropicProvider::new(
        AnthropicConfig::new("m")
            .base_url(server.url())
            .http(HttpOptions::default().stream_idle_timeout(Duration::from_secs(2))),
    );
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let r = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(r.text, "Hello there");
}

#[tokio::test]
async fn malformed_reply_is_reported() {
    let server = ScriptedServer::start(vec![
        Reply::json(200, &json!({"type": "message", "content": "not blocks"})),
        Reply::stream(
            "text/event-stream",
            vec!["event: message_start\ndata: {\"no\": \"type\"}\n\n".into()],
        ),
        // A second `message_start` would count the input tokens twice.
        Reply::stream(
            "text/event-stream",
            [message_start(), message_start()]
                .into_iter()
                .chain(message_end("end_turn"))
                .collect(),
        ),
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
    assert_eq!(e.code(), "malformed", "{e}");
    assert!(e.to_string().contains("second `message_start`"), "{e}");
}

fn make_keyed(url: String) -> Arc<dyn InferenceProvider> {
    Arc::new(AnthropicProvider::new(
        AnthropicConfig::new("claude-sonnet-4-5")
            .base_url(url)
            .api_key(credentials::KEY)
            .http(HttpOptions::default().max_retries(0)),
    ))
}

#[tokio::test]
async fn a_base_url_query_stays_the_query() {
    credentials::scenario_query_is_kept(&Anthropic, &make_keyed, "", "/v1/messages").await;
}

#[tokio::test]
async fn credentials_quoted_in_error_answers_are_redacted() {
    credentials::scenario_quoted_credentials(&make_keyed, "").await;
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_not_followed() {
    credentials::scenario_redirects(&Anthropic, &make_keyed, "").await;
}

#[tokio::test]
async fn nothing_listening_names_the_host_without_credentials() {
    credentials::scenario_unreachable(&make_keyed, "").await;
}

#[test]
fn debug_hides_the_key_and_the_url_credentials() {
    let config = AnthropicConfig::new("m")
        .base_url(credentials::with_credentials("http://127.0.0.1:9", ""))
        .api_key(credentials::KEY);
    credentials::assert_debug_hides("the config", &format!("{config:?}"));
    assert!(
        format!("{config:?}").contains("api_key: Some(\"[redacted]\")"),
        "{config:?}"
    );
    let provider = AnthropicProvider::new(config);
    credentials::assert_debug_hides("the provider", &format!("{provider:?}"));
}

#[tokio::test]
async fn credentials_quoted_in_a_stream_are_redacted() {
    let err = api_error("authentication_error", &credentials::in_band_quote(true));
    let event = format!("event: error\ndata: {err}\n\n");
    credentials::scenario_quoted_in_band(
        &make_keyed,
        "",
        vec![
            (Reply::stream("text/event-stream", vec![event]), true),
            (Reply::json(200, &err), false),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_turn_timeout_bounds_a_dripping_server() {
    let make = |url: String, http: HttpOptions| -> Arc<dyn InferenceProvider> {
        Arc::new(AnthropicProvider::new(
            AnthropicConfig::new("claude-sonnet-4-5")
                .base_url(url)
                .api_key("sk-ant-test")
                .http(http),
        ))
    };
    support::deadline::scenario_turn_deadline(&Anthropic, &make).await;
}

#[tokio::test]
async fn control_characters_in_quoted_errors_are_escaped() {
    let err = api_error("api_error", support::controls::HOSTILE);
    let event = format!("event: error\ndata: {err}\n\n");
    let make = |url: String| -> Arc<dyn InferenceProvider> {
        Arc::new(AnthropicProvider::new(
            AnthropicConfig::new("claude-sonnet-4-5")
                .base_url(url)
                .api_key("sk-ant-test")
                .http(HttpOptions::default().max_retries(0)),
        ))
    };
    support::controls::scenario_controls_are_escaped(
        &make,
        vec![
            (Reply::stream("text/event-stream", vec![event]), true),
            (Reply::json(200, &err), false),
        ],
    )
    .await;
}

/// A non-streamed reply holding more tool calls than any turn makes (a hostile server's
/// thousands of tiny calls, each of which the agent would answer) is refused as malformed, as
/// a stream's past index 1024 is; as many as the bound are read.
#[tokio::test]
async fn implausibly_many_tool_calls_are_malformed() {
    let reply = |n: usize| {
        let blocks: Vec<Value> = (0..n)
            .map(|i| json!({"type": "tool_use", "id": format!("toolu_{i}"), "name": "t", "input": {}}))
            .collect();
        Reply::json(200, &message(Value::Array(blocks), "tool_use"))
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

/// A streamed request answered with one JSON body (a gateway that does not stream, or an
/// error under a 200) is read as that message or that error, not as a stream that ended early.
#[tokio::test]
async fn a_streamed_request_answered_with_one_json_reply_is_read_whole() {
    let server = ScriptedServer::start(vec![
        Anthropic.call("toolu_1", "wait", &json!({"seconds": 1}), false),
        Reply::json(200, &api_error("overloaded_error", "Overloaded")),
    ])
    .await;
    let p = make(server.url());
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let r = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(r.text, "I'll do that.");
    assert_eq!(r.tool_calls.len(), 1, "{r:?}");
    assert_eq!(r.tool_calls[0].id, "toolu_1");
    assert_eq!(r.tool_calls[0].arguments, json!({"seconds": 1}));
    assert_eq!(r.finish, kberg_agent::FinishReason::ToolCalls);
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "server_error", "{e}");
    assert!(e.to_string().contains("Overloaded"), "{e}");
}

/// A reply that made calls but names no `stop_reason` (a compatible gateway leaves it null)
/// finishes as a reply with calls, streamed or not, as the other providers' replies do.
#[tokio::test]
async fn calls_without_a_stop_reason_finish_with_tool_calls() {
    let mut whole = message(
        json!([{"type": "tool_use", "id": "toolu_1", "name": "wait", "input": {"seconds": 1}}]),
        "tool_use",
    );
    whole["stop_reason"] = Value::Null;
    let pieces = vec![
        message_start(),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "wait", "input": {}}}),
        ),
        ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": "{\"seconds\": 1}"}}),
        ),
        ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        ev(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": null, "stop_sequence": null},
                   "usage": {"output_tokens": 89}}),
        ),
        ev("message_stop", json!({"type": "message_stop"})),
    ];
    let server = ScriptedServer::start(vec![
        Reply::json(200, &whole),
        Reply::stream("text/event-stream", pieces),
    ])
    .await;
    let p = make(server.url());
    let r = p.chat(&request(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.finish, kberg_agent::FinishReason::ToolCalls);
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let streamed = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(streamed.finish, kberg_agent::FinishReason::ToolCalls);
    assert_eq!(streamed.tool_calls, r.tool_calls);
}

/// An error a gateway in front of the API writes without the API's `"type": "error"` (under a
/// 200, or as an event part way through a stream) is the server's error with its words, not a
/// reply without `content` or an event without `type`.
#[tokio::test]
async fn an_error_without_its_type_is_the_servers_error() {
    let gateway_error = json!({"error": {"message": "upstream connect error", "code": 502}});
    let mut pieces = vec![message_start()];
    pieces.push(format!("event: error\ndata: {gateway_error}\n\n"));
    let server = ScriptedServer::start(vec![
        Reply::json(200, &gateway_error),
        Reply::stream("text/event-stream", pieces),
        Reply::json(200, &json!({"error": "quota exhausted"})),
    ])
    .await;
    let p = make(server.url());
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "server_error", "{e}");
    assert!(e.to_string().contains("upstream connect error"), "{e}");
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "server_error", "{e}");
    assert!(e.to_string().contains("upstream connect error"), "{e}");
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("quota exhausted"), "{e}");
}

/// A streamed `tool_use` block without a name is refused as a whole reply's is: the call is
/// not dropped without a word, leaving a turn that seems to have said nothing.
#[tokio::test]
async fn a_streamed_tool_use_without_a_name_is_malformed() {
    let mut pieces = vec![
        message_start(),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "input": {}}}),
        ),
        ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": "{\"seconds\": 1}"}}),
        ),
        ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
    ];
    pieces.extend(message_end("tool_use"));
    let server = ScriptedServer::start(vec![Reply::stream("text/event-stream", pieces)]).await;
    let s = make(server.url())
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "malformed", "{e}");
    assert!(e.to_string().contains("lacks `name`"), "{e}");
}
