//! The Ollama provider against a scripted server that speaks Ollama's documented wire.
//!
//! Shapes reproduced (Ollama API reference, `docs/api.md`, "Generate a chat completion"):
//! - `POST /api/chat` request: `model`, `messages` (assistant `tool_calls` as
//!   `{"function": {"name", "arguments": {..}}}`, tool results as `{"role": "tool", "content",
//!   "tool_name"}`), `tools`, `stream`, `options`, `keep_alive`, `format`, `truncate`,
//!   `shift`;
//! - the non-streamed reply: `{"model", "created_at", "message": {"role": "assistant", "content",
//!   "tool_calls"}, "done_reason": "stop", "done": true, "total_duration", "prompt_eval_count",
//!   "eval_count", ...}`;
//! - the streamed reply: `application/x-ndjson`, one such object per line with `"done": false`
//!   and a content fragment, a final line with `"done": true` and the counts; tool calls arrive
//!   whole inside one line (here a line is also split across two network writes);
//! - errors: `404 {"error": "model \"x\" not found, try pulling it first"}`, 500 with
//!   `{"error": ...}`, an in-stream `{"error": ...}` line, and a conversation past the
//!   context window with `truncate: false`: 400 with the runner's words or llama-server's
//!   error quoted as the text (Ollama's source, `server/routes.go`, `llm/llama_server.go`).

mod support;

use std::sync::Arc;
use std::time::Duration;

use kberg_agent::{ChatRequest, InferenceProvider, Message, ToolDefinition, collect_stream};
use kberg_providers::HttpOptions;
use kberg_providers::ollama::{OllamaConfig, OllamaProvider};
use kberg_testkit::scripted::{Reply, ScriptedServer};
use serde_json::{Value, json};
use support::{WindowRefusal, Wire, credentials};
use tokio_util::sync::CancellationToken;

struct Ollama;

const CREATED: &str = "2026-11-29T10:00:00.000000Z";

fn chunk(content: &str, extra: Value) -> String {
    let mut v = json!({"model": "qwen2.5", "created_at": CREATED,
                       "message": {"role": "assistant", "content": content}, "done": false});
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, val) in e {
            o.insert(k.clone(), val.clone());
        }
    }
    format!("{v}\n")
}

fn final_line() -> String {
    chunk(
        "",
        json!({"done": true, "done_reason": "stop", "total_duration": 885095291u64,
               "load_duration": 3753500, "prompt_eval_count": 122, "prompt_eval_duration": 328493000,
               "eval_count": 33, "eval_duration": 552222000u64}),
    )
}

impl Wire for Ollama {
    fn call(&self, _id: &str, name: &str, arguments: &Value, stream: bool) -> Reply {
        let message = json!({"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": arguments}}]});
        if !stream {
            return Reply::json(
                200,
                &json!({
                "model": "qwen2.5", "created_at": CREATED, "message": message,
                "done_reason": "stop", "done": true, "total_duration": 885095291u64,
                "prompt_eval_count": 122, "eval_count": 33}),
            );
        }
        let line = format!(
            "{}\n",
            json!({"model": "qwen2.5", "created_at": CREATED, "message": message, "done": false})
        );
        // Split the line carrying the call across two writes.
        let cut = line.len() / 2;
        Reply::stream(
            "application/x-ndjson",
            vec![
                line[..cut].to_string(),
                line[cut..].to_string(),
                final_line(),
            ],
        )
    }

    fn text(&self, text: &str, stream: bool) -> Reply {
        if !stream {
            return Reply::json(
                200,
                &json!({
                "model": "qwen2.5", "created_at": CREATED,
                "message": {"role": "assistant", "content": text},
                "done_reason": "stop", "done": true, "prompt_eval_count": 10, "eval_count": 5}),
            );
        }
        let mid = text.len() / 2;
        Reply::stream(
            "application/x-ndjson",
            vec![
                chunk(&text[..mid], json!({})),
                chunk(&text[mid..], json!({})),
                final_line(),
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

fn fast() -> HttpOptions {
    HttpOptions::default()
        .initial_backoff(Duration::from_millis(5))
        .timeout(Duration::from_secs(10))
}

fn make(url: String) -> Arc<dyn InferenceProvider> {
    Arc::new(OllamaProvider::new(
        OllamaConfig::new("qwen2.5").base_url(url).http(fast()),
    ))
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn repair_turn_succeeds() {
    support::scenario_repair(&Ollama, &make, false).await;
}

#[tokio::test]
async fn repair_turn_succeeds_streaming() {
    support::scenario_repair(&Ollama, &make, true).await;
}

#[tokio::test]
async fn refusal_is_accepted() {
    support::scenario_refusal(&Ollama, &make, false).await;
    support::scenario_refusal(&Ollama, &make, true).await;
}

#[tokio::test]
async fn cancellation_mid_tool() {
    support::scenario_cancel_mid_tool(&Ollama, &make, false).await;
    support::scenario_cancel_mid_tool(&Ollama, &make, true).await;
}

#[tokio::test]
async fn request_has_the_documented_shape() {
    let server = ScriptedServer::start(vec![Ollama.text("ok", false)]).await;
    let p = OllamaProvider::new(
        OllamaConfig::new("qwen2.5")
            .base_url(server.url())
            .keep_alive("10m")
            .format(json!("json"))
            .option("num_ctx", json!(8192)),
    );
    let mut req = request();
    req.tools = vec![ToolDefinition::new(
        "add_note",
        "Create a note",
        json!({"type": "object", "properties": {"title": {"type": "string"}}}),
    )];
    req.options.temperature = Some(0.5);
    req.options.max_tokens = Some(64);
    req.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![kberg_agent::ToolCall {
            id: "call_1_1".into(),
            name: "add_note".into(),
            arguments: json!({"title": "x"}),
        }],
    });
    req.messages.push(Message::Tool {
        call_id: "call_1_1".into(),
        name: "add_note".into(),
        content: "created x".into(),
        is_error: false,
    });
    let r = p.chat(&req, &CancellationToken::new()).await.unwrap();
    assert_eq!(r.text, "ok");
    assert_eq!(r.usage.total(), 15);
    let sent = &server.requests()[0];
    assert_eq!(sent.method, "POST");
    assert_eq!(sent.path, "/api/chat");
    let b = &sent.body;
    assert_eq!(b["model"], "qwen2.5");
    assert_eq!(b["stream"], false);
    assert_eq!(b["keep_alive"], "10m");
    assert_eq!(b["format"], "json");
    assert_eq!(b["options"]["num_ctx"], 8192);
    assert_eq!(b["options"]["temperature"], 0.5);
    assert_eq!(b["options"]["num_predict"], 64);
    assert_eq!(b["tools"][0]["type"], "function");
    assert_eq!(b["tools"][0]["function"]["name"], "add_note");
    assert_eq!(
        b["messages"][1]["tool_calls"][0]["function"]["arguments"]["title"],
        "x"
    );
    assert_eq!(b["messages"][2]["role"], "tool");
    assert_eq!(b["messages"][2]["tool_name"], "add_note");
}

/// A call whose arguments are not an object (a model wrote `"arguments": "milk"` in its
/// text) is sent back with its arguments as an object: Ollama reads `arguments` as an object
/// and refuses the whole request otherwise, which ended the run where a repair turn was due.
#[tokio::test]
async fn a_call_with_arguments_that_are_no_object_is_sent_back_as_an_object() {
    let server = ScriptedServer::start(vec![
        Ollama.text(r#"{"name": "add_note", "arguments": "milk"}"#, false),
        Ollama.text("I need a priority for the note.", false),
    ])
    .await;
    let agent = kberg_agent::Agent::from_arcs(make(server.url()), Arc::new(support::app_surface()));
    let out = agent
        .run(
            vec![Message::user("add a note titled milk")],
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(out.calls[0].outcome.as_str(), "invalid_arguments");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "{:?}", out.stop);
    let calls: Vec<&Value> = reqs[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m.get("tool_calls"))
        .flat_map(|c| c.as_array().into_iter().flatten())
        .collect();
    assert!(!calls.is_empty(), "{}", reqs[1].body);
    for c in calls {
        assert!(c["function"]["arguments"].is_object(), "{c}");
    }
}

/// Ollama drops the oldest messages of a conversation past `num_ctx` unless told not to
/// (`truncate`, Ollama 0.12.6), and shifts the window while the model writes (`shift`): the
/// provider tells it neither, so the refusal reaches the loop, which shortens what it sends.
/// Both are the config's to allow.
#[tokio::test]
async fn ollama_is_told_not_to_drop_or_shift_the_conversation() {
    let server =
        ScriptedServer::start(vec![Ollama.text("ok", false), Ollama.text("ok", true)]).await;
    let cancel = CancellationToken::new();
    make(server.url()).chat(&request(), &cancel).await.unwrap();
    let allowed = OllamaProvider::new(
        OllamaConfig::new("qwen2.5")
            .base_url(server.url())
            .truncate(true)
            .shift(true),
    );
    let stream = allowed.chat_stream(&request(), &cancel).await.unwrap();
    collect_stream(stream, |_| {}).await.unwrap();
    let sent: Vec<(Value, Value)> = server
        .requests()
        .iter()
        .map(|r| (r.body["truncate"].clone(), r.body["shift"].clone()))
        .collect();
    assert_eq!(
        sent,
        [(json!(false), json!(false)), (json!(true), json!(true))]
    );
}

/// A thinking model (Ollama 0.9 and later answer with `message.thinking` beside `content`,
/// whole and line by line).
#[tokio::test]
async fn a_thinking_models_thinking_comes_apart_from_its_text() {
    let whole = Reply::json(
        200,
        &json!({"model": "qwen3", "created_at": CREATED,
            "message": {"role": "assistant", "content": "Paris.", "thinking": "The capital of France."},
            "done_reason": "stop", "done": true, "prompt_eval_count": 10, "eval_count": 5}),
    );
    let thought = |t: &str| {
        chunk(
            "",
            json!({"message": {"role": "assistant", "content": "", "thinking": t}}),
        )
    };
    let streamed = Reply::stream(
        "application/x-ndjson",
        vec![
            thought("The capital"),
            thought(" of France."),
            chunk("Paris.", json!({})),
            final_line(),
        ],
    );
    support::scenario_thinking_apart(&make, [whole, streamed], "The capital of France.", "Paris.")
        .await;
}

/// The same refusal under a 200 (a proxy's reply, or an error line of a stream already under
/// way), quoting the request's credentials.
#[tokio::test]
async fn a_context_window_refusal_under_a_200_is_context_too_long() {
    let quote = credentials::in_band_quote(false);
    let refusals = [WindowRefusal {
        body: json!({ "error": format!("the input length exceeds the context length ({quote})") }),
        requested: None,
        limit: None,
    }];
    let streamed = |body: &Value| Reply::stream("application/x-ndjson", vec![format!("{body}\n")]);
    support::scenario_context_too_long_in_band(&make_keyed, "", &refusals, &streamed, "`num_ctx`")
        .await;
}

/// Ollama's refusal of a conversation past the window, in each form it answers: its runners'
/// words, and llama-server's error quoted as its own text (with the sizes inside).
#[tokio::test]
async fn a_conversation_past_num_ctx_is_context_too_long() {
    let llama_server = json!({"error": {"code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error", "n_prompt_tokens": 5120, "n_ctx": 4096}});
    let words = |text: &str| WindowRefusal {
        body: json!({ "error": text }),
        requested: None,
        limit: None,
    };
    let refusals = [
        words("the input length exceeds the context length"),
        words(
            "the prompt is longer than the context length currently available to the model; shorten the prompt, adjust the context length in settings, or use a model with a longer context length",
        ),
        WindowRefusal {
            body: json!({ "error": llama_server.to_string() }),
            requested: Some(5120),
            limit: Some(4096),
        },
    ];
    support::scenario_context_too_long(&make, &refusals, "`num_ctx`").await;
}

#[tokio::test]
async fn unknown_model_says_to_pull_it() {
    let server = ScriptedServer::start(vec![Reply::json(
        404,
        &json!({"error": "model \"qwen9\" not found, try pulling it first"}),
    )])
    .await;
    let p = OllamaProvider::new(OllamaConfig::new("qwen9").base_url(server.url()));
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "model_not_found");
    assert!(e.to_string().contains("run `ollama pull qwen9`"), "{e}");
}

#[tokio::test]
async fn nothing_listening_says_where_it_looked() {
    let url = kberg_testkit::closed_port_url();
    let p = OllamaProvider::new(OllamaConfig::new("qwen2.5").base_url(url.clone()));
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "unreachable");
    assert!(
        e.to_string()
            .contains(&format!("is Ollama running at {url}?")),
        "{e}"
    );
}

#[tokio::test]
async fn server_error_is_retried_then_succeeds() {
    let server = ScriptedServer::start(vec![
        Reply::json(
            500,
            &json!({"error": "llama runner process has terminated"}),
        ),
        Reply::json(503, &json!({"error": "busy"})).header("retry-after", "0"),
        Ollama.text("recovered", false),
    ])
    .await;
    let r = make(server.url())
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.text, "recovered");
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn server_error_after_retries_is_reported() {
    let server = ScriptedServer::start(vec![
        Reply::json(500, &json!({"error": "boom"})),
        Reply::json(500, &json!({"error": "boom"})),
        Reply::json(500, &json!({"error": "still boom"})),
    ])
    .await;
    let e = make(server.url())
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "server_error");
    assert!(
        e.to_string().contains("still boom") && e.to_string().contains("3 attempt"),
        "{e}"
    );
}

#[tokio::test]
async fn streamed_text_arrives_in_pieces() {
    let server = ScriptedServer::start(vec![Ollama.text("Hello there", true)]).await;
    let s = make(server.url())
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let mut pieces = Vec::new();
    let r = collect_stream(s, |t| pieces.push(t.to_string()))
        .await
        .unwrap();
    assert_eq!(r.text, "Hello there");
    assert_eq!(pieces.len(), 2);
    assert_eq!(r.usage.total(), 155);
    assert_eq!(server.requests()[0].body["stream"], true);
}

/// A reply is over at its `"done": true` line: a line after it (which ended the turn as
/// malformed, losing the answer) is not read, nor does a connection kept open after it hold
/// the turn until the idle timeout.
#[tokio::test]
async fn the_reply_ends_at_done_whatever_follows() {
    let mut reply = Ollama.text("Hello there", true);
    reply
        .chunks
        .push((Duration::ZERO, chunk(" and more", json!({}))));
    reply.chunks.push((Duration::from_secs(3600), final_line()));
    let server = ScriptedServer::start(vec![reply]).await;
    let p = OllamaProvider::new(
        OllamaConfig::new("qwen2.5")
            .base_url(server.url())
            .http(fast().stream_idle_timeout(Duration::from_secs(2))),
    );
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let r = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(r.text, "Hello there");
    assert_eq!(r.usage.total(), 155);
}

#[tokio::test]
async fn truncated_stream_is_an_error() {
    // The final `done` line never comes.
    let server = ScriptedServer::start(vec![Ollama.text("Hello there", true).truncated(2)]).await;
    let s = make(server.url())
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "truncated");
    // The connection breaks mid-stream.
    let server = ScriptedServer::start(vec![
        Ollama.text("Hello there", true).truncated(1).aborted(),
    ])
    .await;
    let s = make(server.url())
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "truncated");
}

#[tokio::test]
async fn slow_stream_hits_the_idle_timeout() {
    let server = ScriptedServer::start(vec![
        Ollama
            .text("Hello there", true)
            .paced(Duration::from_millis(600)),
    ])
    .await;
    let p = OllamaProvider::new(
        OllamaConfig::new("qwen2.5")
            .base_url(server.url())
            .http(HttpOptions::default().stream_idle_timeout(Duration::from_millis(150))),
    );
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "timeout");
}

#[tokio::test]
async fn slow_stream_within_the_idle_timeout_completes() {
    let server = ScriptedServer::start(vec![
        Ollama
            .call("c", "add_note", &json!({"title": "x", "priority": 1}), true)
            .paced(Duration::from_millis(100)),
    ])
    .await;
    let p = OllamaProvider::new(
        OllamaConfig::new("qwen2.5")
            .base_url(server.url())
            .http(HttpOptions::default().stream_idle_timeout(Duration::from_secs(5))),
    );
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let r = collect_stream(s, |_| {}).await.unwrap();
    assert_eq!(r.tool_calls[0].name, "add_note");
    assert_eq!(
        r.tool_calls[0].arguments,
        json!({"title": "x", "priority": 1})
    );
}

#[tokio::test]
async fn error_line_in_stream_and_garbage_are_reported() {
    let server = ScriptedServer::start(vec![
        Reply::stream(
            "application/x-ndjson",
            vec![
                chunk("Hel", json!({})),
                "{\"error\":\"out of memory\"}\n".into(),
            ],
        ),
        Reply::stream(
            "application/x-ndjson",
            vec!["<html>not ndjson</html>\n".into()],
        ),
        Reply::json(200, &json!({"unexpected": true})),
    ])
    .await;
    let p = make(server.url());
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert!(e.to_string().contains("out of memory"), "{e}");
    let s = p
        .chat_stream(&request(), &CancellationToken::new())
        .await
        .unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "malformed");
    let e = p
        .chat(&request(), &CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "malformed");
}

#[tokio::test]
async fn cancellation_while_waiting_for_the_model() {
    let server = ScriptedServer::start(vec![
        Ollama.text("late", false).paced(Duration::from_secs(30)),
    ])
    .await;
    let p = make(server.url());
    let cancel = CancellationToken::new();
    let call = {
        let cancel = cancel.clone();
        tokio::spawn(async move { p.chat(&request(), &cancel).await })
    };
    // Cancelled once the server has the request, while the model is (scripted as) thinking.
    kberg_testkit::eventually_async("the request reaches the server", || async {
        (!server.requests().is_empty()).then_some(())
    })
    .await;
    cancel.cancel();
    let e = tokio::time::timeout(kberg_testkit::WAIT, call)
        .await
        .expect("the cancelled call returns")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), "cancelled");
}

fn make_keyed(url: String) -> Arc<dyn InferenceProvider> {
    Arc::new(OllamaProvider::new(
        OllamaConfig::new("qwen2.5")
            .base_url(url)
            .http(HttpOptions::default().max_retries(0)),
    ))
}

#[tokio::test]
async fn a_base_url_query_stays_the_query() {
    credentials::scenario_query_is_kept(&Ollama, &make_keyed, "", "/api/chat").await;
}

#[tokio::test]
async fn credentials_quoted_in_error_answers_are_redacted() {
    credentials::scenario_quoted_credentials(&make_keyed, "").await;
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_not_followed() {
    credentials::scenario_redirects(&Ollama, &make_keyed, "").await;
}

#[tokio::test]
async fn nothing_listening_names_the_host_without_credentials() {
    credentials::scenario_unreachable(&make_keyed, "").await;
}

#[test]
fn debug_hides_the_key_and_the_url_credentials() {
    let config =
        OllamaConfig::new("m").base_url(credentials::with_credentials("http://127.0.0.1:9", ""));
    credentials::assert_debug_hides("the config", &format!("{config:?}"));
    let provider = OllamaProvider::new(config);
    credentials::assert_debug_hides("the provider", &format!("{provider:?}"));
}

#[tokio::test]
async fn credentials_quoted_in_a_stream_are_redacted() {
    let quote = credentials::in_band_quote(false);
    let line = |text: String| Reply::stream("application/x-ndjson", vec![text]);
    credentials::scenario_quoted_in_band(
        &make_keyed,
        "",
        vec![
            (line(format!("{}\n", json!({"error": quote}))), true),
            (Reply::json(200, &json!({"error": quote})), false),
            (line(format!("not json {quote}\n")), true),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_turn_timeout_bounds_a_dripping_server() {
    let make = |url: String, http: HttpOptions| -> Arc<dyn InferenceProvider> {
        Arc::new(OllamaProvider::new(
            OllamaConfig::new("qwen2.5").base_url(url).http(http),
        ))
    };
    support::deadline::scenario_turn_deadline(&Ollama, &make).await;
}

#[tokio::test]
async fn control_characters_in_quoted_errors_are_escaped() {
    let err = json!({"error": support::controls::HOSTILE});
    let make = |url: String| -> Arc<dyn InferenceProvider> {
        Arc::new(OllamaProvider::new(
            OllamaConfig::new("qwen2.5")
                .base_url(url)
                .http(HttpOptions::default().max_retries(0)),
        ))
    };
    support::controls::scenario_controls_are_escaped(
        &make,
        vec![
            (
                Reply::stream("application/x-ndjson", vec![format!("{err}\n")]),
                true,
            ),
            (Reply::json(200, &err), false),
        ],
    )
    .await;
}

/// A reply holding more tool calls than any turn makes (a hostile server's thousands of tiny
/// calls, each of which the agent would answer) is refused as malformed, streamed or not, as
/// the OpenAI-compatible stream's are; as many as the bound are read.
#[tokio::test]
async fn implausibly_many_tool_calls_are_malformed() {
    let calls = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"function": {"name": format!("t{i}"), "arguments": {}}}))
            .collect()
    };
    let whole = |n: usize| {
        Reply::json(
            200,
            &json!({"model": "qwen2.5", "created_at": CREATED, "done": true,
                    "message": {"role": "assistant", "content": "", "tool_calls": calls(n)}}),
        )
    };
    // Streamed: a call a line, past the bound.
    let mut lines: Vec<String> = calls(1025)
        .into_iter()
        .map(|c| {
            chunk(
                "",
                json!({"message": {"role": "assistant", "content": "", "tool_calls": [c]}}),
            )
        })
        .collect();
    lines.push(final_line());
    let server = ScriptedServer::start(vec![
        whole(1025),
        Reply::stream("application/x-ndjson", lines),
        whole(1024),
    ])
    .await;
    let p = make(server.url());
    let cancel = CancellationToken::new();
    let e = p.chat(&request(), &cancel).await.unwrap_err();
    assert_eq!(e.code(), "malformed", "{e}");
    assert!(e.to_string().contains("implausibly many tool calls"), "{e}");
    let s = p.chat_stream(&request(), &cancel).await.unwrap();
    let e = collect_stream(s, |_| {}).await.unwrap_err();
    assert_eq!(e.code(), "malformed", "{e}");
    assert!(e.to_string().contains("implausibly many tool calls"), "{e}");
    let r = p.chat(&request(), &cancel).await.unwrap();
    assert_eq!(r.tool_calls.len(), 1024);
}

/// A server that streams one line, then keeps the connection open and reports when the client
/// closes it (its reads end). Answers one request.
#[allow(clippy::unwrap_used)] // a test helper: a failure to listen fails the test
fn held_stream_server() -> (String, tokio::sync::oneshot::Receiver<()>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = conn.read(&mut buf);
        let line = json!({"model": "qwen2.5", "message": {"role": "assistant", "content": "Hel"}, "done": false});
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\nconnection: close\r\n\r\n{line}\n"
        );
        let _ = conn.flush();
        // The client sends nothing more: a read ends only when it closes the connection.
        while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
        let _ = closed_tx.send(());
    });
    (url, closed_rx)
}

/// A streamed turn cancelled part way closes its connection at once, also while the caller
/// still holds the stream: the model server stops generating for nobody.
#[tokio::test]
async fn a_cancelled_stream_closes_its_connection_while_still_held() {
    use futures::StreamExt;
    let (url, closed) = held_stream_server();
    let cancel = CancellationToken::new();
    let mut s = make(url).chat_stream(&request(), &cancel).await.unwrap();
    assert_eq!(
        s.next().await.unwrap().unwrap(),
        kberg_agent::ChatDelta::Text("Hel".into())
    );
    cancel.cancel();
    assert_eq!(s.next().await.unwrap().unwrap_err().code(), "cancelled");
    // The stream is still held here; the server must see the connection closed regardless.
    tokio::time::timeout(Duration::from_secs(30), closed)
        .await
        .expect("the connection was left open while the stream is held")
        .unwrap();
    assert!(s.next().await.is_none());
}
