//! Anthropic's Messages API: `POST {base}/v1/messages` with `tool_use` / `tool_result` blocks,
//! streamed as SSE events.
//!
//! Request and reply follow Anthropic's Messages API reference: the `x-api-key` and
//! `anthropic-version` headers; `system` at the top level; `max_tokens` required; assistant
//! content blocks `{"type": "text"}` and `{"type": "tool_use", "id", "name", "input"}`; tool
//! results as a user message of `{"type": "tool_result", "tool_use_id", "content", "is_error"}`
//! blocks; `tools` with `input_schema`. A streamed reply is the documented event sequence
//! `message_start`, `content_block_start`, `content_block_delta` (`text_delta` or
//! `input_json_delta` fragments), `content_block_stop`, `message_delta` (stop reason, output
//! usage), `message_stop`, with `ping` and `error` events possible anywhere.
//!
//! `/v1/messages` is appended to the base URL's path, so a gateway's base with a query keeps
//! it as the query.

use async_trait::async_trait;
use kberg_agent::{
    ChatDelta, ChatRequest, ChatResponse, ChatStream, FinishReason, InferenceProvider, Message,
    ProviderError, ToolCall, ToolChoice, ToolNames, Usage,
};
use serde_json::{Map, Value, json};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::endpoint::{self, Target};
use crate::http::{self, Endpoint, HttpOptions};
use crate::sse::{SseDecoder, SseReply};
use crate::window;
use kberg_core::REDACTED;

/// What to do about a conversation longer than the model's context window.
const WINDOW_HINT: &str = "shorten the conversation, or ask for fewer `max_tokens`";

/// The `anthropic-version` header this provider speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `max_tokens` a turn is sent with when its options set none: 4,096, the most every Claude
/// model answers with (the oldest allow no more; newer ones allow 8,192 to 64,000). A tool
/// call's arguments count: a file written through a tool takes thousands of tokens, and a turn
/// cut at its limit ends `length` with the call's arguments half written (1,024 used to be the
/// default and cut such calls). The limit is a cap, not a charge: only tokens written are
/// billed.
pub const DEFAULT_MAX_TOKENS: u32 = 4_096;

/// Where and how to reach the Messages API. Its `Debug` shows the base URL without its user
/// part and query, and whether there is a key, never the key.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct AnthropicConfig {
    /// The API host (default `https://api.anthropic.com`; needs the `rustls` feature).
    /// `/v1/messages` is appended to its path; a query stays the query.
    pub base_url: String,
    /// The model, e.g. `claude-sonnet-4-5`.
    pub model: String,
    /// The key, sent as `x-api-key`. Read it from the environment in your binary.
    pub api_key: Option<String>,
    /// `max_tokens` when the turn's options do not set one (the API requires it; default
    /// [`DEFAULT_MAX_TOKENS`]).
    pub default_max_tokens: u32,
    /// Timeouts and retries.
    pub http: HttpOptions,
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &endpoint::redact_url(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| REDACTED))
            .field("default_max_tokens", &self.default_max_tokens)
            .field("http", &self.http)
            .finish()
    }
}

impl AnthropicConfig {
    /// The hosted API with `model`.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: "https://api.anthropic.com".into(),
            model: model.into(),
            api_key: None,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            http: HttpOptions::hosted(),
        }
    }

    /// Sets the API host.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = endpoint::tidy_base(&url.into());
        self
    }

    /// Sets the key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the default `max_tokens`.
    pub fn default_max_tokens(mut self, n: u32) -> Self {
        self.default_max_tokens = n;
        self
    }

    /// Sets timeouts and retries.
    pub fn http(mut self, http: HttpOptions) -> Self {
        self.http = http;
        self
    }
}

/// The Anthropic provider.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    config: AnthropicConfig,
    client: reqwest::Client,
    endpoint: Arc<Endpoint>,
}

impl AnthropicProvider {
    /// A provider for `config`.
    pub fn new(config: AnthropicConfig) -> Self {
        Self {
            endpoint: Arc::new(endpoint_of(&config)),
            config,
            client: http::client(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![("anthropic-version", ANTHROPIC_VERSION.to_string())];
        if let Some(k) = &self.config.api_key {
            h.push(("x-api-key", k.clone()));
        }
        h
    }

    /// The `/v1/messages` body for `request`.
    ///
    /// A tool name the API refuses is sent under the alias [`ToolNames`] gives it (as
    /// [`InferenceProvider::chat`] does).
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Value {
        self.body_of(&ToolNames::for_request(request).translate(request), stream)
    }

    /// The body for `request` as it is, its names already translated.
    fn body_of(&self, request: &ChatRequest, stream: bool) -> Value {
        let mut system = Vec::new();
        let mut messages: Vec<Value> = Vec::new();
        for m in &request.messages {
            match m {
                Message::System { content } => system.push(content.as_str()),
                Message::User { content } => {
                    // The API refuses a user turn without text (400, "messages: text content
                    // blocks must be non-empty"), and an application may send one (an empty
                    // prompt box). Left out, the turn before it would become a prefill the
                    // model continues; it is said in words, as an empty tool result is.
                    let content = if content.trim().is_empty() {
                        "(an empty message)"
                    } else {
                        content.as_str()
                    };
                    messages.push(json!({"role": "user", "content": content}));
                }
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    // The API refuses a text block that is empty or only whitespace (400,
                    // "text content blocks must contain non-whitespace text"), and a model
                    // writes such text: nothing at all, or newlines before its call.
                    let mut blocks = Vec::new();
                    if !content.trim().is_empty() {
                        blocks.push(json!({"type": "text", "text": content}));
                    }
                    for c in tool_calls {
                        let input = if c.arguments.is_object() {
                            c.arguments.clone()
                        } else {
                            // The API requires an object; the gate will reject the call anyway.
                            json!({"value": c.arguments})
                        };
                        blocks.push(
                            json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                        );
                    }
                    // A turn that said nothing is left out: an empty block is refused, and
                    // the API joins the user turns on either side of it into one.
                    if !blocks.is_empty() {
                        messages.push(json!({"role": "assistant", "content": blocks}));
                    }
                }
                Message::Tool {
                    call_id,
                    content,
                    is_error,
                    ..
                } => {
                    // The API refuses an error result without words ("content cannot be empty
                    // if `is_error` is true"), and a tool may answer nothing.
                    let content = if content.trim().is_empty() {
                        if *is_error {
                            "(the tool failed without saying why)"
                        } else {
                            "(the tool returned nothing)"
                        }
                    } else {
                        content.as_str()
                    };
                    let block = json!({"type": "tool_result", "tool_use_id": call_id,
                                       "content": content, "is_error": is_error});
                    // Consecutive results belong in one user turn.
                    match messages.last_mut() {
                        Some(last)
                            if last["role"] == "user"
                                && last["content"].as_array().is_some_and(|b| {
                                    b.iter().all(|b| b["type"] == "tool_result")
                                }) =>
                        {
                            if let Some(blocks) = last["content"].as_array_mut() {
                                blocks.push(block);
                            }
                        }
                        _ => messages.push(json!({"role": "user", "content": [block]})),
                    }
                }
            }
        }
        let o = &request.options;
        let mut body = Map::new();
        body.insert("model".into(), json!(self.config.model));
        body.insert(
            "max_tokens".into(),
            json!(o.max_tokens.unwrap_or(self.config.default_max_tokens)),
        );
        if !system.is_empty() {
            body.insert("system".into(), json!(system.join("\n\n")));
        }
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            body.insert("tools".into(), Value::Array(tools));
            let choice = match &o.tool_choice {
                ToolChoice::None => Some(json!({"type": "none"})),
                ToolChoice::Required => Some(json!({"type": "any"})),
                ToolChoice::Tool(name) => Some(json!({"type": "tool", "name": name})),
                _ => None,
            };
            if let Some(c) = choice {
                body.insert("tool_choice".into(), c);
            }
        }
        if let Some(t) = o.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(p) = o.top_p {
            body.insert("top_p".into(), json!(p));
        }
        if !o.stop.is_empty() {
            body.insert("stop_sequences".into(), json!(o.stop));
        }
        if stream {
            body.insert("stream".into(), json!(true));
        }
        Value::Object(body)
    }
}

fn endpoint_of(config: &AnthropicConfig) -> Endpoint {
    let key: Vec<&str> = config.api_key.as_deref().into_iter().collect();
    Endpoint {
        label: "Anthropic",
        target: Target::new(&config.base_url, "/v1/messages", &key),
        model: config.model.clone(),
        unreachable_hint: format!(
            "nothing answered at {}: check the address and your network (HTTPS needs the `rustls` feature)",
            endpoint::redact_url(&config.base_url)
        ),
        model_hint: format!(
            "Anthropic does not know the model `{}`: check the model name",
            config.model
        ),
        key_hint: "Check the API key your program passes (for example from ANTHROPIC_API_KEY).",
        window_hint: WINDOW_HINT,
    }
}

/// The finish of a reply whose `stop_reason` is `s`; a reply that names none (a compatible
/// gateway leaves it null) and made calls ended for them, as the other providers read it.
fn finish_of(s: Option<&str>, made_calls: bool) -> FinishReason {
    match s {
        None if made_calls => FinishReason::ToolCalls,
        Some("end_turn") | Some("stop_sequence") | None => FinishReason::Stop,
        Some("tool_use") => FinishReason::ToolCalls,
        // `model_context_window_exceeded`: the window filled while Claude wrote (Sonnet 4.5
        // and later); the answer is cut off as at `max_tokens`.
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_string()),
    }
}

fn error_of(v: &Value) -> ProviderError {
    let kind = v
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("error");
    let msg = v
        .pointer("/error/message")
        .and_then(Value::as_str)
        .or_else(|| v.get("error").and_then(Value::as_str))
        .unwrap_or("");
    if let Some(e) = window::in_band(v, msg, WINDOW_HINT) {
        return e;
    }
    ProviderError::ServerError {
        status: if kind == "overloaded_error" { 529 } else { 200 },
        attempts: 1,
        detail: format!("{kind}: {msg}"),
    }
}

/// Whether `v` is an error: the API's `{"type": "error", "error": {...}}`, or an `error`
/// without a `type`, as gateways in front of the API write it (under a 200, or as an event);
/// read as anything else its words would be lost for "no `content`" or "no `type`".
fn is_error(v: &Value) -> bool {
    match v.get("type") {
        Some(t) => t.as_str() == Some("error"),
        None => v.get("error").is_some_and(|e| !e.is_null()),
    }
}

fn parse_reply(v: &Value) -> Result<ChatResponse, ProviderError> {
    if is_error(v) {
        return Err(error_of(v));
    }
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ProviderError::malformed("the reply has no `content` array"))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let id = b.get("id").and_then(Value::as_str);
                let name = b.get("name").and_then(Value::as_str);
                let (Some(id), Some(name)) = (id, name) else {
                    return Err(ProviderError::malformed(
                        "a `tool_use` block lacks `id` or `name`",
                    ));
                };
                if tool_calls.len() == http::MAX_CALLS_PER_REPLY {
                    return Err(http::too_many_calls());
                }
                tool_calls.push(ToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    arguments: b.get("input").cloned().unwrap_or(Value::Object(Map::new())),
                });
            }
            // Thinking and other blocks are not part of the answer.
            Some(_) => {}
            None => return Err(ProviderError::malformed("a content block has no `type`")),
        }
    }
    let usage = v.get("usage");
    let finish = finish_of(
        v.get("stop_reason").and_then(Value::as_str),
        !tool_calls.is_empty(),
    );
    Ok(ChatResponse {
        text,
        tool_calls,
        usage: Usage {
            input_tokens: usage
                .and_then(|u| u.get("input_tokens"))
                .and_then(Value::as_u64)
                .unwrap_or(0),
            output_tokens: usage
                .and_then(|u| u.get("output_tokens"))
                .and_then(Value::as_u64)
                .unwrap_or(0),
        },
        finish,
        // Thinking blocks come with extended thinking, which this provider does not ask for
        // (and whose blocks a later turn would have to send back).
        thinking: String::new(),
    })
}

#[derive(Default)]
struct EventDecoder {
    /// The `stop_reason` a `message_delta` named, if one did.
    stop_reason: Option<String>,
    /// A `tool_use` block was started.
    made_calls: bool,
    output_tokens: u64,
    /// A `message_start` was read: the stream has one, and a second would count its input
    /// tokens (reported as a delta to add up) again.
    started: bool,
    stopped: bool,
}

impl SseReply for EventDecoder {
    fn missing_end(&self) -> Option<&'static str> {
        (!self.stopped).then_some("`message_stop`")
    }

    fn whole(&mut self, reply: &Value, out: &mut Vec<ChatDelta>) -> Result<(), ProviderError> {
        out.extend(kberg_agent::response_to_deltas(parse_reply(reply)?));
        self.stopped = true;
        Ok(())
    }

    fn event(&mut self, data: &str, out: &mut Vec<ChatDelta>) -> Result<(), ProviderError> {
        let v: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::malformed(format!("a stream event is not JSON ({e}): {data}"))
        })?;
        if is_error(&v) {
            return Err(error_of(&v));
        }
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| ProviderError::malformed("a stream event has no `type`"))?;
        let index = || {
            v.get("index")
                .and_then(Value::as_u64)
                .filter(|i| *i <= 1024)
                .map(|i| i as usize)
                .ok_or_else(|| ProviderError::malformed(format!("`{kind}` has no usable `index`")))
        };
        match kind {
            "message_start" => {
                if std::mem::replace(&mut self.started, true) {
                    return Err(ProviderError::malformed(
                        "the stream has a second `message_start`",
                    ));
                }
                let u = v.pointer("/message/usage");
                let input = u
                    .and_then(|u| u.get("input_tokens"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                self.output_tokens = u
                    .and_then(|u| u.get("output_tokens"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                out.push(ChatDelta::Usage(Usage {
                    input_tokens: input,
                    output_tokens: self.output_tokens,
                }));
            }
            "content_block_start" => {
                let index = index()?;
                let block = v.get("content_block").ok_or_else(|| {
                    ProviderError::malformed("`content_block_start` has no block")
                })?;
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = block.get("text").and_then(Value::as_str)
                            && !t.is_empty()
                        {
                            out.push(ChatDelta::Text(t.to_string()));
                        }
                    }
                    Some("tool_use") => {
                        self.made_calls = true;
                        let input = block
                            .get("input")
                            .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()));
                        // A block names its tool whole, here and only here: a call without a
                        // name would be dropped when the stream is assembled, the model's call
                        // lost without a word. Refused, as a whole reply's is.
                        let name = block
                            .get("name")
                            .and_then(Value::as_str)
                            .filter(|n| !n.is_empty())
                            .ok_or_else(|| {
                                ProviderError::malformed("a `tool_use` block lacks `name`")
                            })?;
                        out.push(ChatDelta::ToolCall {
                            index,
                            id: block.get("id").and_then(Value::as_str).map(str::to_string),
                            name: Some(name.to_string()),
                            arguments: input.map(Value::to_string).unwrap_or_default(),
                        });
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let index = index()?;
                let delta = v.get("delta").ok_or_else(|| {
                    ProviderError::malformed("`content_block_delta` has no delta")
                })?;
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        if !t.is_empty() {
                            out.push(ChatDelta::Text(t.to_string()));
                        }
                    }
                    Some("input_json_delta") => out.push(ChatDelta::ToolCall {
                        index,
                        id: None,
                        name: None,
                        arguments: delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    }),
                    _ => {}
                }
            }
            "message_delta" => {
                self.stop_reason = v
                    .pointer("/delta/stop_reason")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                if let Some(n) = v.pointer("/usage/output_tokens").and_then(Value::as_u64) {
                    // Cumulative: report only what message_start had not.
                    let more = n.saturating_sub(self.output_tokens);
                    self.output_tokens = n;
                    out.push(ChatDelta::Usage(Usage {
                        input_tokens: 0,
                        output_tokens: more,
                    }));
                }
            }
            "message_stop" => {
                self.stopped = true;
                out.push(ChatDelta::Finish(finish_of(
                    self.stop_reason.as_deref(),
                    self.made_calls,
                )));
            }
            // ping, content_block_stop, and event types added later.
            _ => {}
        }
        Ok(())
    }
}

#[async_trait]
impl InferenceProvider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        // The API refuses a request listing a tool name outside `^[a-zA-Z0-9_-]{1,64}$` (or
        // 128 characters): such names go under aliases, and the calls come back under the
        // real names.
        let names = ToolNames::for_request(request);
        let body = self.body_of(&names.translate(request), false);
        let mut response = http::post_for_json(
            &self.client,
            &self.config.http,
            &self.endpoint,
            &self.headers(),
            &body,
            cancel,
            parse_reply,
        )
        .await?;
        names.incoming(&mut response);
        Ok(response)
    }

    async fn chat_stream(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatStream, ProviderError> {
        let names = ToolNames::for_request(request);
        let body = self.body_of(&names.translate(request), true);
        let decoder = SseDecoder::new(self.config.http.max_body_bytes, EventDecoder::default());
        http::post_for_stream(
            &self.client,
            &self.config.http,
            &self.endpoint,
            &self.headers(),
            &body,
            decoder,
            cancel,
        )
        .await
        .map(|stream| names.incoming_stream(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::LineDecoder;
    use kberg_agent::ToolDefinition;

    #[test]
    fn each_stop_reason_is_its_finish() {
        for (reason, calls, finish) in [
            (Some("end_turn"), false, FinishReason::Stop),
            (Some("stop_sequence"), false, FinishReason::Stop),
            (Some("tool_use"), true, FinishReason::ToolCalls),
            (Some("max_tokens"), false, FinishReason::Length),
            // The window filled while Claude wrote (Sonnet 4.5 and later): cut off as at
            // `max_tokens`, so a call written into it is not taken whole.
            (
                Some("model_context_window_exceeded"),
                true,
                FinishReason::Length,
            ),
            (
                Some("refusal"),
                false,
                FinishReason::Other("refusal".into()),
            ),
            (None, true, FinishReason::ToolCalls),
            (None, false, FinishReason::Stop),
        ] {
            assert_eq!(finish_of(reason, calls), finish, "{reason:?}");
        }
    }

    #[test]
    fn tool_results_merge_into_one_user_turn() {
        let p = AnthropicProvider::new(AnthropicConfig::new("m"));
        let req = ChatRequest {
            messages: vec![
                Message::system("sys"),
                Message::user("hi"),
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![
                        ToolCall {
                            id: "a".into(),
                            name: "f".into(),
                            arguments: json!({}),
                        },
                        ToolCall {
                            id: "b".into(),
                            name: "f".into(),
                            arguments: json!({"x": 1}),
                        },
                    ],
                },
                Message::Tool {
                    call_id: "a".into(),
                    name: "f".into(),
                    content: "1".into(),
                    is_error: false,
                },
                Message::Tool {
                    call_id: "b".into(),
                    name: "f".into(),
                    content: "2".into(),
                    is_error: true,
                },
            ],
            tools: vec![ToolDefinition::new("f", "d", json!({"type": "object"}))],
            ..ChatRequest::default()
        };
        let body = p.request_body(&req, false);
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], 4096);
        let msgs = body["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[2]["content"].as_array().unwrap().len(), 2);
        assert_eq!(msgs[2]["content"][1]["is_error"], true);
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    }

    #[test]
    fn an_empty_user_message_is_sent_in_words() {
        // The API refuses a user turn without text; leaving it out would make the turn before
        // a prefill. Text with words goes as it is.
        let p = AnthropicProvider::new(AnthropicConfig::new("m"));
        for empty in ["", "  \n\t"] {
            let req = ChatRequest {
                messages: vec![
                    Message::user("hi"),
                    Message::Assistant {
                        content: "Hello.".into(),
                        tool_calls: vec![],
                    },
                    Message::user(empty),
                ],
                ..ChatRequest::default()
            };
            let body = p.request_body(&req, false);
            let msgs = body["messages"].as_array().unwrap();
            assert_eq!(msgs.len(), 3, "{body}");
            assert_eq!(msgs[0]["content"], "hi");
            assert_eq!(
                msgs[2],
                json!({"role": "user", "content": "(an empty message)"})
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn random_events_never_panic(kind in "(message_start|content_block_start|content_block_delta|message_delta|message_stop|error|ping|[a-z_]{1,10})",
                                     i in proptest::num::u64::ANY, s in ".{0,20}") {
            let mut d = SseDecoder::new(usize::MAX, EventDecoder::default());
            for v in [
                json!({"type": kind.clone(), "index": i, "content_block": {"type": "tool_use", "id": s.clone(), "name": s.clone(), "input": {}},
                       "delta": {"type": "input_json_delta", "partial_json": s.clone(), "stop_reason": s.clone()},
                       "usage": {"output_tokens": i}, "message": {"usage": {"input_tokens": i, "output_tokens": i}}}),
                json!({"type": kind.clone(), "index": s.clone(), "delta": s.clone()}),
            ] {
                let _ = d.reply.event(&v.to_string(), &mut Vec::new());
            }
            let _ = d.line(&s, &mut Vec::new());
            let _ = d.end(&mut Vec::new());
        }
    }

    #[test]
    fn malformed_replies_are_errors() {
        for v in [
            json!({}),
            json!({"content": "x"}),
            json!({"content": [{"text": "no type"}]}),
            json!({"content": [{"type": "tool_use", "name": "f"}]}),
        ] {
            assert_eq!(parse_reply(&v).unwrap_err().code(), "malformed", "{v}");
        }
    }
}
