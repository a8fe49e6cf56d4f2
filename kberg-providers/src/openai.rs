//! Any OpenAI-compatible chat endpoint: `POST {base}/chat/completions`, streamed as SSE.
//!
//! Request and reply follow OpenAI's Chat Completions API reference, which LM Studio, the
//! llama.cpp server, vLLM and hosted services implement: `messages` with assistant `tool_calls`
//! (`{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}`) and
//! `role: "tool"` results with `tool_call_id`; `tools` and `tool_choice`; a reply's
//! `choices[0].message` and `usage`. A streamed reply is `data:` events of
//! `chat.completion.chunk` objects whose `delta.tool_calls[]` carry an `index` and fragments of
//! the arguments text, ending with `data: [DONE]`; usage arrives in a final chunk when
//! `stream_options.include_usage` is set.
//!
//! The endpoint's path is appended to the base URL's path, so a base with a query (Azure
//! OpenAI's `…/openai/deployments/NAME?api-version=…`) keeps it as the query.

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

/// What to do about a conversation longer than the model's context window, for the servers
/// this provider speaks to.
const WINDOW_HINT: &str = "shorten the conversation, or give the model a larger window (llama.cpp server's `--ctx-size`, vLLM's `--max-model-len`, LM Studio's context length)";

/// Where and how to reach an OpenAI-compatible server. Its `Debug` shows the base URL without
/// its user part and query, and whether there is a key, never the key.
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct OpenAiConfig {
    /// The API base, including the version path (default `http://127.0.0.1:8080/v1`, the
    /// llama.cpp server; LM Studio is `http://127.0.0.1:1234/v1`). `/chat/completions` is
    /// appended to its path; a query (`?api-version=…`) stays the query.
    pub base_url: String,
    /// The model name the server knows.
    pub model: String,
    /// The key, sent as `Authorization: Bearer`. Read it from the environment in your binary.
    pub api_key: Option<String>,
    /// Extra top-level request fields passed through as given (`frequency_penalty`, ...).
    pub extra: Map<String, Value>,
    /// Timeouts and retries.
    pub http: HttpOptions,
    /// The field a request's `max_tokens` option is sent in (default
    /// [`TokenLimitField::MaxTokens`]).
    pub token_limit_field: TokenLimitField,
}

/// The request field that bounds a reply's tokens. The reference's `max_tokens` is what local
/// servers (llama.cpp, LM Studio, vLLM, Ollama) read; OpenAI's reasoning models (o1, o3,
/// gpt-5) refuse it with a 400 naming `max_completion_tokens`, which they read instead. A
/// provider sending `max_tokens` to such a model learns that from the refusal: it sends the
/// turn again with `max_completion_tokens`, and every later one with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenLimitField {
    /// `max_tokens` (the default).
    #[default]
    MaxTokens,
    /// `max_completion_tokens` (OpenAI's newer models; counts reasoning tokens too).
    MaxCompletionTokens,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &endpoint::redact_url(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| REDACTED))
            .field("extra", &self.extra)
            .field("http", &self.http)
            .field("token_limit_field", &self.token_limit_field)
            .finish()
    }
}

impl OpenAiConfig {
    /// A local server with `model`.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: "http://127.0.0.1:8080/v1".into(),
            model: model.into(),
            api_key: None,
            extra: Map::new(),
            http: HttpOptions::default(),
            token_limit_field: TokenLimitField::default(),
        }
    }

    /// Sets the API base (e.g. `http://127.0.0.1:1234/v1`, or Azure OpenAI's
    /// `https://NAME.openai.azure.com/openai/deployments/DEPLOYMENT?api-version=2024-02-01`).
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = endpoint::tidy_base(&url.into());
        self
    }

    /// Sets the key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Adds an extra request field.
    pub fn extra(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra.insert(key.into(), value);
        self
    }

    /// Sets timeouts and retries.
    pub fn http(mut self, http: HttpOptions) -> Self {
        self.http = http;
        self
    }

    /// Sets the field a request's `max_tokens` option is sent in (see [`TokenLimitField`]).
    pub fn token_limit_field(mut self, field: TokenLimitField) -> Self {
        self.token_limit_field = field;
        self
    }
}

/// The OpenAI-compatible provider.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    client: reqwest::Client,
    endpoint: Arc<Endpoint>,
    /// Set once the server refused `max_tokens` for `max_completion_tokens` (shared by the
    /// provider's clones).
    completion_field: Arc<std::sync::atomic::AtomicBool>,
}

impl OpenAiProvider {
    /// A provider for `config`.
    pub fn new(config: OpenAiConfig) -> Self {
        Self {
            endpoint: Arc::new(endpoint_of(&config)),
            completion_field: Arc::new(std::sync::atomic::AtomicBool::new(
                config.token_limit_field == TokenLimitField::MaxCompletionTokens,
            )),
            config,
            client: http::client(),
        }
    }

    /// The field the `max_tokens` option goes in now: the configured one, or
    /// `max_completion_tokens` once the server refused the other.
    pub fn token_limit_field(&self) -> TokenLimitField {
        if self
            .completion_field
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            TokenLimitField::MaxCompletionTokens
        } else {
            TokenLimitField::MaxTokens
        }
    }

    /// The answer of `send` (a request's body in; the body back, with its answer) to
    /// `request`'s body, or, when the server refused `max_tokens` for `max_completion_tokens`,
    /// to its body sent again with that field ([`Self::learned_limit_field`]).
    async fn learning_limit_field<T, F, Fut>(
        &self,
        request: &ChatRequest,
        stream: bool,
        send: F,
    ) -> Result<T, ProviderError>
    where
        F: Fn(Value) -> Fut,
        Fut: std::future::Future<Output = (Value, Result<T, ProviderError>)>,
    {
        let (body, answer) = send(self.body_of(request, stream)).await;
        match answer {
            Err(e) if self.learned_limit_field(&body, &e) => {
                send(self.body_of(request, stream)).await.1
            }
            answer => answer,
        }
    }

    /// Whether `e`, the answer to a body that sent `max_tokens`, is the server refusing that
    /// field for `max_completion_tokens` (OpenAI: 400, "Unsupported parameter: 'max_tokens' is
    /// not supported with this model. Use 'max_completion_tokens' instead."). Such a refusal
    /// is learned: this and every later turn send `max_completion_tokens`. Answers whether
    /// the turn should be sent again.
    fn learned_limit_field(&self, body: &Value, e: &ProviderError) -> bool {
        let refused = body.get("max_tokens").is_some()
            && matches!(e, ProviderError::Rejected { status: 400, detail }
                if detail.contains("max_tokens") && detail.contains("max_completion_tokens"));
        if refused {
            tracing::info!(
                model = ?self.config.model,
                "the server refused `max_tokens` for `max_completion_tokens`; sending that from now on"
            );
            self.completion_field
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        refused
    }

    /// The configuration.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        match &self.config.api_key {
            Some(k) => vec![("authorization", format!("Bearer {k}"))],
            None => Vec::new(),
        }
    }

    /// The `/chat/completions` body for `request`.
    ///
    /// A tool name the API refuses is sent under the alias [`ToolNames`] gives it (as
    /// [`InferenceProvider::chat`] does).
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Value {
        self.body_of(&ToolNames::for_request(request).translate(request), stream)
    }

    /// The body for `request` as it is, its names already translated.
    fn body_of(&self, request: &ChatRequest, stream: bool) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len());
        for m in &request.messages {
            messages.push(message_json(m));
        }
        let mut body = Map::new();
        body.insert("model".into(), json!(self.config.model));
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request.tools.iter().map(http::function_tool).collect();
            body.insert("tools".into(), Value::Array(tools));
            let choice = match &request.options.tool_choice {
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
                _ => json!("auto"),
            };
            body.insert("tool_choice".into(), choice);
        }
        let o = &request.options;
        if let Some(t) = o.temperature {
            body.insert("temperature".into(), json!(t));
        }
        if let Some(p) = o.top_p {
            body.insert("top_p".into(), json!(p));
        }
        if let Some(n) = o.max_tokens {
            let field = match self.token_limit_field() {
                TokenLimitField::MaxCompletionTokens => "max_completion_tokens",
                TokenLimitField::MaxTokens => "max_tokens",
            };
            body.insert(field.into(), json!(n));
        }
        if !o.stop.is_empty() {
            body.insert("stop".into(), json!(o.stop));
        }
        if let Some(s) = o.seed {
            body.insert("seed".into(), json!(s));
        }
        if stream {
            body.insert("stream".into(), json!(true));
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
        for (k, v) in &self.config.extra {
            body.insert(k.clone(), v.clone());
        }
        Value::Object(body)
    }
}

fn endpoint_of(config: &OpenAiConfig) -> Endpoint {
    let key: Vec<&str> = config.api_key.as_deref().into_iter().collect();
    Endpoint {
        label: "the OpenAI-compatible server",
        target: Target::new(&config.base_url, "/chat/completions", &key),
        model: config.model.clone(),
        unreachable_hint: format!(
            "nothing answered at {}: is the server (LM Studio, llama.cpp, vLLM, ...) running there?",
            endpoint::redact_url(&config.base_url)
        ),
        model_hint: format!(
            "the server does not know the model `{}`: check the name against its /models list, or load the model first",
            config.model
        ),
        key_hint: "Check the API key your program passes (for example from OPENAI_API_KEY).",
        window_hint: WINDOW_HINT,
    }
}

fn message_json(m: &Message) -> Value {
    match m {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            if tool_calls.is_empty() {
                return json!({"role": "assistant", "content": content});
            }
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|c| {
                    json!({"id": c.id, "type": "function",
                           "function": {"name": c.name, "arguments": c.arguments.to_string()}})
                })
                .collect();
            // The reference allows `null` (or no `content`) beside `tool_calls`, but servers
            // differ: llama-cpp-python refuses `null` with a validation error and its chat
            // templates read `content`, so it must be present. An empty string is accepted
            // everywhere.
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        Message::Tool {
            call_id, content, ..
        } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
    }
}

fn finish_of(s: Option<&str>) -> Option<FinishReason> {
    Some(match s? {
        "stop" => FinishReason::Stop,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        other => FinishReason::Other(other.to_string()),
    })
}

fn usage_of(v: &Value) -> Usage {
    Usage {
        input_tokens: v.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: v
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    }
}

/// The error a reply or a stream event carries in its `error` field (`{"message", ...}` or a
/// string), as the server's own words: a gateway that answers 200 (or mid-stream) with an
/// error says what went wrong there, not that the reply lacks its fields. A refusal of a
/// conversation longer than the context window is `ContextTooLong`, as under a 4xx.
fn in_band_error(err: &Value) -> ProviderError {
    let msg = err
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| err.as_str())
        .map_or_else(|| err.to_string(), str::to_string);
    if let Some(e) = window::in_band(err, &msg, WINDOW_HINT) {
        return e;
    }
    ProviderError::ServerError {
        status: 200,
        attempts: 1,
        detail: msg,
    }
}

fn parse_reply(v: &Value) -> Result<ChatResponse, ProviderError> {
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        return Err(in_band_error(err));
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| ProviderError::malformed("the reply has no `choices[0]`"))?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| ProviderError::malformed("`choices[0].message` is missing"))?;
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(_) => {
            return Err(ProviderError::malformed(
                "`choices[0].message.content` is not a string",
            ));
        }
    };
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").filter(|c| !c.is_null()) {
        let calls = calls
            .as_array()
            .ok_or_else(|| ProviderError::malformed("`message.tool_calls` is not an array"))?;
        if calls.len() > http::MAX_CALLS_PER_REPLY {
            return Err(http::too_many_calls());
        }
        for c in calls {
            let f = c
                .get("function")
                .ok_or_else(|| ProviderError::malformed("a tool call has no `function`"))?;
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ProviderError::malformed("a tool call has no `function.name`"))?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => kberg_agent::parse_arguments(s),
                None | Some(Value::Null) => Value::Object(Map::new()),
                // Some servers send an object; take it as meant.
                Some(other) => other.clone(),
            };
            tool_calls.push(ToolCall {
                id: c
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                name: name.to_string(),
                arguments,
            });
        }
    }
    let finish = finish_of(choice.get("finish_reason").and_then(Value::as_str)).unwrap_or(
        if tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        },
    );
    Ok(ChatResponse {
        text,
        tool_calls,
        usage: v.get("usage").map(usage_of).unwrap_or_default(),
        finish,
        thinking: reasoning_of(message).unwrap_or_default().to_string(),
    })
}

/// The model's thinking in a message or a delta, when the server hands it on apart from the
/// text: `reasoning_content` (DeepSeek's API, vLLM's and llama.cpp server's reasoning parsers)
/// or `reasoning` (vLLM's newer name, OpenRouter). Anything but a string is not thinking.
fn reasoning_of(v: &Value) -> Option<&str> {
    ["reasoning_content", "reasoning"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
}

#[derive(Default)]
struct ChunkDecoder {
    finish: Option<FinishReason>,
    done: bool,
    /// The call each server `index` stands for now (see [`ChunkDecoder::call_index`]).
    slots: std::collections::HashMap<usize, Slot>,
    /// The number of calls of the reply so far.
    calls: usize,
    /// The usage reported so far. A chunk's `usage` is the reply's total until then, not an
    /// increment (servers send it once, twice, or in every chunk), while a
    /// [`ChatDelta::Usage`] adds up: only what it adds to this is reported.
    reported: Usage,
}

/// A server `index` and the call it stands for now.
struct Slot {
    /// The call's index in the assembled reply.
    call: usize,
    /// The id the call came with, if one did.
    id: Option<String>,
    /// The tool the call named first, if one did.
    name: Option<String>,
    /// Whether a piece of its arguments came.
    has_arguments: bool,
}

/// The most calls one streamed reply may hold (the server's own indices are bounded the same).
const MAX_STREAMED_CALLS: usize = http::MAX_CALLS_PER_REPLY;

impl ChunkDecoder {
    /// The index in the assembled reply of a tool-call delta the server gave `index`, `id` and
    /// `name`. Calls are told apart by their index, as the reference says, but some servers
    /// (Ollama's OpenAI-compatible endpoint, Gemini's, LiteLLM's bridges) give every call of a
    /// message `index: 0`, each with an id of its own: a delta that names a tool, with an id
    /// other than the one its index already holds, starts a new call; so does, where the ids
    /// do not tell (none came, or only on one side), a delta naming another tool than the one
    /// its index holds once that call got arguments (a server giving every call `index: 0`
    /// and no id; a name is sent before its call's arguments, whole or in pieces). Any other
    /// delta continues the call its index holds, also one with another id but no name (some
    /// servers give a call's later pieces an id of their own) and one naming its tool again
    /// (some send the name with every piece).
    fn call_index(
        &mut self,
        index: usize,
        id: Option<&str>,
        name: Option<&str>,
        has_arguments: bool,
    ) -> Result<usize, ProviderError> {
        let id = id.filter(|id| !id.is_empty());
        let name = name.filter(|n| !n.is_empty());
        if let Some(slot) = self.slots.get_mut(&index) {
            let (other_id, same_id) = match (&slot.id, id) {
                (Some(held), Some(id)) => (held != id, held == id),
                _ => (false, false),
            };
            let other_tool = slot.has_arguments
                && !same_id
                && matches!((&slot.name, name), (Some(held), Some(name)) if held != name);
            let new_call = other_tool || (other_id && name.is_some());
            if !new_call {
                if slot.id.is_none() {
                    slot.id = id.map(str::to_string);
                }
                if slot.name.is_none() {
                    slot.name = name.map(str::to_string);
                }
                slot.has_arguments |= has_arguments;
                return Ok(slot.call);
            }
        }
        if self.calls >= MAX_STREAMED_CALLS {
            return Err(http::too_many_calls());
        }
        let call = self.calls;
        self.calls += 1;
        self.slots.insert(
            index,
            Slot {
                call,
                id: id.map(str::to_string),
                name: name.map(str::to_string),
                has_arguments,
            },
        );
        Ok(call)
    }
}

impl SseReply for ChunkDecoder {
    fn missing_end(&self) -> Option<&'static str> {
        (!self.done).then_some("`data: [DONE]`")
    }

    fn whole(&mut self, reply: &Value, out: &mut Vec<ChatDelta>) -> Result<(), ProviderError> {
        out.extend(kberg_agent::response_to_deltas(parse_reply(reply)?));
        self.done = true;
        Ok(())
    }

    fn event(&mut self, data: &str, out: &mut Vec<ChatDelta>) -> Result<(), ProviderError> {
        if data.trim() == "[DONE]" {
            // A call the server never named is refused where every provider's stream is
            // assembled (`kberg_agent::collect_stream`), as a whole reply's is here.
            self.done = true;
            // Without a `finish_reason` (several local servers leave it null), a reply that
            // made calls ended for them, as a whole reply without one is read.
            let unsaid = if self.calls > 0 {
                FinishReason::ToolCalls
            } else {
                FinishReason::Stop
            };
            out.push(ChatDelta::Finish(self.finish.take().unwrap_or(unsaid)));
            return Ok(());
        }
        let v: Value = serde_json::from_str(data).map_err(|e| {
            ProviderError::malformed(format!("a stream event is not JSON ({e}): {data}"))
        })?;
        // Some servers write `"error": null` into every chunk: that is no error.
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            return Err(in_band_error(err));
        }
        let usage = v.get("usage").filter(|u| u.is_object());
        if let Some(u) = usage {
            let total = usage_of(u);
            let more = Usage {
                input_tokens: total
                    .input_tokens
                    .saturating_sub(self.reported.input_tokens),
                output_tokens: total
                    .output_tokens
                    .saturating_sub(self.reported.output_tokens),
            };
            self.reported.input_tokens = self.reported.input_tokens.max(total.input_tokens);
            self.reported.output_tokens = self.reported.output_tokens.max(total.output_tokens);
            out.push(ChatDelta::Usage(more));
        }
        let Some(choices) = v.get("choices").and_then(Value::as_array) else {
            // The usage chunk without `choices`, as some servers send it, is complete.
            if usage.is_some() && v.get("choices").is_none_or(Value::is_null) {
                return Ok(());
            }
            return Err(ProviderError::malformed("a chunk has no `choices` array"));
        };
        // With `n` above 1 (through `extra`) a chunk carries pieces of several choices, told
        // apart by their `index`; the reply is the first choice, as a whole reply's is
        // `choices[0]`. A choice without an index is the only one.
        let first = choices
            .iter()
            .filter(|c| c.get("index").is_none_or(|i| i.as_u64() == Some(0)));
        for choice in first {
            if let Some(f) = finish_of(choice.get("finish_reason").and_then(Value::as_str)) {
                self.finish = Some(f);
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if let Some(t) = reasoning_of(delta).filter(|t| !t.is_empty()) {
                out.push(ChatDelta::Thinking(t.to_string()));
            }
            if let Some(t) = delta.get("content").and_then(Value::as_str)
                && !t.is_empty()
            {
                out.push(ChatDelta::Text(t.to_string()));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for (pos, c) in calls.iter().enumerate() {
                    let index = c
                        .get("index")
                        .and_then(Value::as_u64)
                        .map_or(pos, |i| i as usize);
                    if index > MAX_STREAMED_CALLS {
                        return Err(ProviderError::malformed(
                            "a tool call index is implausibly large",
                        ));
                    }
                    let id = c.get("id").and_then(Value::as_str);
                    let f = c.get("function");
                    let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
                    let arguments = match f.and_then(|f| f.get("arguments")) {
                        Some(Value::String(s)) => s.clone(),
                        None | Some(Value::Null) => String::new(),
                        // Some servers send the arguments as an object, whole, as a whole
                        // reply may (see `parse_reply`); its text is the fragment.
                        Some(other) => other.to_string(),
                    };
                    let index = self.call_index(index, id, name, !arguments.trim().is_empty())?;
                    out.push(ChatDelta::ToolCall {
                        index,
                        id: id.map(str::to_string),
                        name: name.map(str::to_string),
                        arguments,
                    });
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl InferenceProvider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
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
        let request = names.translate(request);
        let send = |body: Value| async move {
            let answer = http::post_for_json(
                &self.client,
                &self.config.http,
                &self.endpoint,
                &self.headers(),
                &body,
                cancel,
                parse_reply,
            )
            .await;
            (body, answer)
        };
        let mut response = self.learning_limit_field(&request, false, send).await?;
        names.incoming(&mut response);
        Ok(response)
    }

    async fn chat_stream(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatStream, ProviderError> {
        let names = ToolNames::for_request(request);
        let request = names.translate(request);
        let send = |body: Value| async move {
            let decoder = SseDecoder::new(self.config.http.max_body_bytes, ChunkDecoder::default());
            let answer = http::post_for_stream(
                &self.client,
                &self.config.http,
                &self.endpoint,
                &self.headers(),
                &body,
                decoder,
                cancel,
            )
            .await;
            (body, answer)
        };
        let stream = self.learning_limit_field(&request, true, send).await?;
        Ok(names.incoming_stream(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::LineDecoder;

    #[test]
    fn malformed_replies_are_errors() {
        for v in [
            json!({}),
            json!({"choices": []}),
            json!({"choices": [{"message": 3}]}),
            json!({"choices": [{"message": {"content": []}}]}),
            json!({"choices": [{"message": {"content": null, "tool_calls": [{"id": "x"}]}}]}),
        ] {
            assert_eq!(parse_reply(&v).unwrap_err().code(), "malformed", "{v}");
        }
    }

    proptest::proptest! {
        #[test]
        fn random_event_lines_never_panic(lines in proptest::collection::vec("(data: )?.{0,80}", 0..20)) {
            let mut d = SseDecoder::new(usize::MAX, ChunkDecoder::default());
            let mut out = Vec::new();
            for l in &lines {
                if d.line(l, &mut out).is_err() || d.line("", &mut out).is_err() {
                    break;
                }
            }
            let _ = d.end(&mut out);
        }

        #[test]
        fn random_chunks_never_panic(i in proptest::num::u64::ANY, s in ".{0,20}") {
            let mut d = SseDecoder::new(usize::MAX, ChunkDecoder::default());
            let chunk = json!({"choices": [{"index": 0, "delta": {"content": s.clone(), "tool_calls": [
                {"index": i, "id": s.clone(), "function": {"name": s.clone(), "arguments": s.clone()}}]},
                "finish_reason": s.clone()}]});
            let _ = d.reply.event(&chunk.to_string(), &mut Vec::new());
        }
    }

    #[test]
    fn object_arguments_are_accepted() {
        let v = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
        ]}, "finish_reason": "tool_calls"}]});
        let r = parse_reply(&v).unwrap();
        assert_eq!(r.tool_calls[0].arguments, json!({"x": 1}));
    }
}
