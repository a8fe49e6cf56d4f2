//! Ollama's native chat API: `POST /api/chat` with `tools`, streamed as NDJSON.
//!
//! Request and reply follow Ollama's API reference (`docs/api.md`, "Generate a chat
//! completion"): messages with `role`/`content`, assistant `tool_calls` as
//! `{"function": {"name", "arguments": {...}}}` with arguments as an object, tool results as
//! `{"role": "tool", "content", "tool_name"}`, and `options`, `keep_alive` and `format` at the
//! top level. A streamed reply is one JSON object per line; the last has `"done": true` and the
//! token counts (`prompt_eval_count`, `eval_count`). Ollama does not give tool calls ids, so the
//! loop assigns them.
//!
//! `/api/chat` is appended to the base URL's path, so Ollama behind a proxy at a sub-path, or
//! one whose base has a query (`?key=`), is reached there with the query kept.

use async_trait::async_trait;
use kberg_agent::{
    ChatDelta, ChatRequest, ChatResponse, ChatStream, FinishReason, InferenceProvider, Message,
    ProviderError, ToolCall, ToolChoice, Usage,
};
use serde_json::{Map, Value, json};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::endpoint::{self, Target};
use crate::http::{self, Endpoint, HttpOptions, LineDecoder};
use crate::window;

/// What to do about a conversation longer than the model's context window.
const WINDOW_HINT: &str =
    "shorten the conversation, or give the model a larger window with the model option `num_ctx`";

/// Where and how to reach Ollama. Its `Debug` shows the server's URL without its user part
/// and query (where a proxy in front of Ollama may take a credential).
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct OllamaConfig {
    /// The server (default `http://127.0.0.1:11434`). `/api/chat` is appended to its path; a
    /// query stays the query.
    pub base_url: String,
    /// The model, e.g. `qwen2.5`.
    pub model: String,
    /// How long the model stays loaded after the request (`"5m"`, `"0"`, ...).
    pub keep_alive: Option<String>,
    /// `"json"` or a JSON Schema the answer must follow.
    pub format: Option<Value>,
    /// Extra model options passed through as given (`num_ctx`, `repeat_penalty`, ...); the
    /// turn's temperature, top_p, max tokens, stop and seed are added on top.
    pub options: Map<String, Value>,
    /// Whether Ollama may drop the oldest messages of a conversation longer than the model's
    /// context window (`num_ctx`), sent as `truncate` (default false). Ollama's own default
    /// drops them silently, keeping the system messages and the last one: an agent then loses
    /// the user's request and the results it worked from without being told. With false the
    /// turn is refused as [`ProviderError::ContextTooLong`], which the agent loop answers by
    /// shortening what it sends. Ollama before 0.12.6 ignores the field and drops.
    pub truncate: bool,
    /// Whether Ollama may shift the context window while the model writes (drop the start of
    /// the conversation to make room), sent as `shift` (default false). With false an answer
    /// that fills the window stops there, finishing as [`FinishReason::Length`]. Ollama before
    /// 0.12.6 ignores the field and shifts.
    pub shift: bool,
    /// Whether a thinking model (qwen3, deepseek-r1, gpt-oss, ...) thinks before it answers,
    /// sent as `think`; `None` leaves it to the model's default (Ollama 0.9 and later think by
    /// default). [`Think::Off`] answers sooner and spends no tokens on thinking, which also
    /// cannot run out the turn's `max_tokens` before an answer is written. A model that does
    /// not think refuses anything but `Off` (HTTP 400, "... does not support thinking": a
    /// `rejected` error).
    pub think: Option<Think>,
    /// Timeouts and retries.
    pub http: HttpOptions,
}

/// Whether, and how hard, a thinking model thinks before it answers: Ollama's `think`, a
/// boolean or a level (which gpt-oss reads; other models read any level as on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Think {
    /// No thinking (`false`).
    Off,
    /// The model's thinking (`true`).
    On,
    /// `"low"`.
    Low,
    /// `"medium"`.
    Medium,
    /// `"high"`.
    High,
    /// `"max"`.
    Max,
}

impl Think {
    /// Its value in the request.
    fn json(self) -> Value {
        match self {
            Think::Off => json!(false),
            Think::On => json!(true),
            Think::Low => json!("low"),
            Think::Medium => json!("medium"),
            Think::High => json!("high"),
            Think::Max => json!("max"),
        }
    }
}

impl std::fmt::Debug for OllamaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OllamaConfig")
            .field("base_url", &endpoint::redact_url(&self.base_url))
            .field("model", &self.model)
            .field("keep_alive", &self.keep_alive)
            .field("format", &self.format)
            .field("options", &self.options)
            .field("truncate", &self.truncate)
            .field("shift", &self.shift)
            .field("think", &self.think)
            .field("http", &self.http)
            .finish()
    }
}

impl OllamaConfig {
    /// Ollama on its default local address with `model`.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            base_url: "http://127.0.0.1:11434".into(),
            model: model.into(),
            keep_alive: None,
            format: None,
            options: Map::new(),
            truncate: false,
            shift: false,
            think: None,
            http: HttpOptions::default(),
        }
    }

    /// Sets the server address. `OLLAMA_HOST`-style values without a scheme (`127.0.0.1:11434`)
    /// get `http://`, and, as Ollama reads them, Ollama's port 11434 when they name none
    /// (`0.0.0.0`, `localhost`); an address with a scheme keeps the scheme's own default port.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        let url = endpoint::tidy_base(&url.into());
        self.base_url = if url.contains("://") {
            url
        } else {
            with_default_port(&url)
        };
        self
    }

    /// Sets `keep_alive`.
    pub fn keep_alive(mut self, v: impl Into<String>) -> Self {
        self.keep_alive = Some(v.into());
        self
    }

    /// Sets `format`.
    pub fn format(mut self, v: Value) -> Self {
        self.format = Some(v);
        self
    }

    /// Adds a model option.
    pub fn option(mut self, key: impl Into<String>, value: Value) -> Self {
        self.options.insert(key.into(), value);
        self
    }

    /// Sets [`OllamaConfig::truncate`]: whether Ollama may drop the oldest messages that do not
    /// fit the context window.
    pub fn truncate(mut self, v: bool) -> Self {
        self.truncate = v;
        self
    }

    /// Sets [`OllamaConfig::shift`]: whether Ollama may shift the context window while the
    /// model writes.
    pub fn shift(mut self, v: bool) -> Self {
        self.shift = v;
        self
    }

    /// Sets [`OllamaConfig::think`]: whether a thinking model thinks before it answers.
    ///
    /// ```
    /// use kberg_providers::ollama::{OllamaConfig, Think};
    /// let config = OllamaConfig::new("qwen3").think(Think::Off);
    /// assert_eq!(config.think, Some(Think::Off));
    /// ```
    pub fn think(mut self, v: Think) -> Self {
        self.think = Some(v);
        self
    }

    /// Sets timeouts and retries.
    pub fn http(mut self, http: HttpOptions) -> Self {
        self.http = http;
        self
    }
}

/// Ollama's own port, which an `OLLAMA_HOST` without a scheme and a port means.
const OLLAMA_PORT: u16 = 11434;

/// `http://` and `hostport` (an `OLLAMA_HOST`-style value without a scheme), with
/// [`OLLAMA_PORT`] when it names no port: Ollama reads `OLLAMA_HOST=0.0.0.0` (what makes it
/// listen on every address) as that host on its own port, not port 80.
fn with_default_port(hostport: &str) -> String {
    let end = hostport.find(['/', '?', '#']).unwrap_or(hostport.len());
    let (authority, rest) = hostport.split_at(end);
    // The host is what follows a user part; an IPv6 host is bracketed, so a port is what
    // follows its last `:` after the bracket.
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let has_port = host
        .rsplit_once(':')
        .is_some_and(|(h, p)| (!h.contains(':') || h.ends_with(']')) && !p.is_empty());
    if has_port || host.is_empty() {
        format!("http://{hostport}")
    } else {
        format!("http://{authority}:{OLLAMA_PORT}{rest}")
    }
}

/// The Ollama provider.
#[derive(Debug, Clone)]
pub struct OllamaProvider {
    config: OllamaConfig,
    client: reqwest::Client,
    endpoint: Arc<Endpoint>,
}

impl OllamaProvider {
    /// A provider for `config`.
    pub fn new(config: OllamaConfig) -> Self {
        Self {
            endpoint: Arc::new(endpoint_of(&config)),
            config,
            client: http::client(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &OllamaConfig {
        &self.config
    }

    /// The `/api/chat` body for `request`.
    pub fn request_body(&self, request: &ChatRequest, stream: bool) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "stream": stream,
            "truncate": self.config.truncate,
            "shift": self.config.shift,
        });
        let obj = body.as_object_mut().expect("json! object literal");
        // `/api/chat` has no tool choice: "no tools this turn" is said by sending none. A
        // required or named choice cannot be expressed and is left to the model.
        if !request.tools.is_empty() && request.options.tool_choice != ToolChoice::None {
            let tools: Vec<Value> = request.tools.iter().map(http::function_tool).collect();
            obj.insert("tools".into(), Value::Array(tools));
        }
        let mut options = self.config.options.clone();
        let o = &request.options;
        if let Some(t) = o.temperature {
            options.insert("temperature".into(), json!(t));
        }
        if let Some(p) = o.top_p {
            options.insert("top_p".into(), json!(p));
        }
        if let Some(n) = o.max_tokens {
            options.insert("num_predict".into(), json!(n));
        }
        if !o.stop.is_empty() {
            options.insert("stop".into(), json!(o.stop));
        }
        if let Some(s) = o.seed {
            options.insert("seed".into(), json!(s));
        }
        if !options.is_empty() {
            obj.insert("options".into(), Value::Object(options));
        }
        if let Some(k) = &self.config.keep_alive {
            obj.insert("keep_alive".into(), json!(k));
        }
        if let Some(f) = &self.config.format {
            obj.insert("format".into(), f.clone());
        }
        if let Some(t) = self.config.think {
            obj.insert("think".into(), t.json());
        }
        body
    }
}

fn endpoint_of(config: &OllamaConfig) -> Endpoint {
    Endpoint {
        label: "Ollama",
        // Ollama takes no key; the URL's user part and query are what a request carries.
        target: Target::new(&config.base_url, "/api/chat", &[]),
        model: config.model.clone(),
        unreachable_hint: format!(
            "is Ollama running at {}? Start it with `ollama serve`, or set OLLAMA_HOST to where it listens",
            endpoint::redact_url(&config.base_url)
        ),
        model_hint: format!(
            "Ollama does not have the model `{0}`: run `ollama pull {0}`",
            config.model
        ),
        key_hint: "Ollama itself needs no key; check the proxy in front of it",
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
            let mut v = json!({"role": "assistant", "content": content});
            if !tool_calls.is_empty() {
                let calls: Vec<Value> = tool_calls
                    .iter()
                    .map(|c| json!({"function": {"name": c.name, "arguments": arguments_object(&c.arguments)}}))
                    .collect();
                v["tool_calls"] = Value::Array(calls);
            }
            v
        }
        Message::Tool { name, content, .. } => {
            json!({"role": "tool", "content": content, "tool_name": name})
        }
    }
}

/// A call's arguments as the object Ollama reads (`arguments` is a map there: anything else
/// fails the whole request). A model may have written other arguments (`"milk"`, a list); the
/// gate refused those, and they go back as `{"value": …}` so the repair turn can be sent.
fn arguments_object(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        Value::Null => Value::Object(Map::new()),
        other => json!({ "value": other }),
    }
}

fn usage_of(v: &Value) -> Usage {
    Usage {
        input_tokens: v
            .get("prompt_eval_count")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        output_tokens: v.get("eval_count").and_then(Value::as_u64).unwrap_or(0),
    }
}

fn finish_of(v: &Value, has_calls: bool) -> FinishReason {
    match v.get("done_reason").and_then(Value::as_str) {
        Some("length") => FinishReason::Length,
        _ if has_calls => FinishReason::ToolCalls,
        Some("stop") | None => FinishReason::Stop,
        Some(other) => FinishReason::Other(other.to_string()),
    }
}

/// The tool calls of a reply's `message`.
fn calls_of(message: &Value) -> Result<Vec<ToolCall>, ProviderError> {
    let Some(calls) = message.get("tool_calls") else {
        return Ok(Vec::new());
    };
    let Some(calls) = calls.as_array() else {
        if calls.is_null() {
            return Ok(Vec::new());
        }
        return Err(ProviderError::malformed(
            "`message.tool_calls` is not an array",
        ));
    };
    if calls.len() > http::MAX_CALLS_PER_REPLY {
        return Err(http::too_many_calls());
    }
    calls
        .iter()
        .map(|c| {
            let f = c
                .get("function")
                .ok_or_else(|| ProviderError::malformed("a tool call has no `function`"))?;
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ProviderError::malformed("a tool call has no `function.name`"))?;
            let arguments = match f.get("arguments") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(Value::String(s)) => kberg_agent::parse_arguments(s),
                Some(a) => a.clone(),
            };
            Ok(ToolCall {
                id: c
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                name: name.to_string(),
                arguments,
            })
        })
        .collect()
}

/// An error object in a reply or a stream line (`{"error": "..."}`).
fn in_band_error(v: &Value, model: &str) -> Option<ProviderError> {
    let e = v.get("error")?;
    let msg = e.as_str().map_or_else(|| e.to_string(), str::to_string);
    if let Some(e) = window::in_band(v, &msg, WINDOW_HINT) {
        return Some(e);
    }
    if msg.contains("not found") && msg.contains("model") {
        return Some(ProviderError::ModelNotFound {
            model: model.to_string(),
            hint: format!(
                "Ollama does not have the model `{model}`: run `ollama pull {model}` ({msg})"
            ),
        });
    }
    Some(ProviderError::ServerError {
        status: 200,
        attempts: 1,
        detail: msg,
    })
}

fn parse_reply(v: &Value, model: &str) -> Result<ChatResponse, ProviderError> {
    if let Some(e) = in_band_error(v, model) {
        return Err(e);
    }
    let message = v
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| ProviderError::malformed("the reply has no `message` object"))?;
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(_) => {
            return Err(ProviderError::malformed(
                "`message.content` is not a string",
            ));
        }
    };
    let tool_calls = calls_of(message)?;
    Ok(ChatResponse {
        finish: finish_of(v, !tool_calls.is_empty()),
        text,
        tool_calls,
        usage: usage_of(v),
        // A thinking model's thinking, apart from the text (Ollama 0.9 and later); anything
        // but a string is not thinking.
        thinking: message
            .get("thinking")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    })
}

struct NdjsonDecoder {
    model: String,
    calls: usize,
    done: bool,
}

impl LineDecoder for NdjsonDecoder {
    fn line(&mut self, line: &str, out: &mut Vec<ChatDelta>) -> Result<(), ProviderError> {
        if line.trim().is_empty() {
            return Ok(());
        }
        let v: Value = serde_json::from_str(line).map_err(|e| {
            ProviderError::malformed(format!("a stream line is not JSON ({e}): {line}"))
        })?;
        let r = parse_reply(&v, &self.model)?;
        if !r.thinking.is_empty() {
            out.push(ChatDelta::Thinking(r.thinking));
        }
        if !r.text.is_empty() {
            out.push(ChatDelta::Text(r.text));
        }
        if self.calls + r.tool_calls.len() > http::MAX_CALLS_PER_REPLY {
            return Err(http::too_many_calls());
        }
        for call in r.tool_calls {
            out.push(ChatDelta::ToolCall {
                index: self.calls,
                id: Some(call.id),
                name: Some(call.name),
                arguments: call.arguments.to_string(),
            });
            self.calls += 1;
        }
        if v.get("done").and_then(Value::as_bool) == Some(true) {
            self.done = true;
            out.push(ChatDelta::Usage(r.usage));
            out.push(ChatDelta::Finish(finish_of(&v, self.calls > 0)));
        }
        Ok(())
    }

    fn complete(&self) -> bool {
        self.done
    }

    fn end(&mut self, _out: &mut Vec<ChatDelta>) -> Result<(), ProviderError> {
        if self.done {
            Ok(())
        } else {
            Err(ProviderError::Truncated {
                detail: "Ollama's stream ended without a `\"done\": true` line".into(),
            })
        }
    }
}

#[async_trait]
impl InferenceProvider for OllamaProvider {
    fn name(&self) -> &str {
        "ollama"
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        let body = self.request_body(request, false);
        http::post_for_json(
            &self.client,
            &self.config.http,
            &self.endpoint,
            &[],
            &body,
            cancel,
            |v| parse_reply(v, &self.config.model),
        )
        .await
    }

    async fn chat_stream(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatStream, ProviderError> {
        let body = self.request_body(request, true);
        let decoder = NdjsonDecoder {
            model: self.config.model.clone(),
            calls: 0,
            done: false,
        };
        http::post_for_stream(
            &self.client,
            &self.config.http,
            &self.endpoint,
            &[],
            &body,
            decoder,
            cancel,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_that_may_not_call_tools_sends_none() {
        use kberg_agent::ToolDefinition;
        let p = OllamaProvider::new(OllamaConfig::new("m"));
        let mut req = ChatRequest {
            tools: vec![ToolDefinition::new("f", "d", json!({"type": "object"}))],
            ..ChatRequest::default()
        };
        assert!(p.request_body(&req, false).get("tools").is_some());
        req.options.tool_choice = ToolChoice::None;
        assert!(p.request_body(&req, false).get("tools").is_none());
    }

    #[test]
    fn thinking_is_asked_for_only_when_configured() {
        let req = ChatRequest::default();
        let body = |c: OllamaConfig| OllamaProvider::new(c).request_body(&req, false);
        assert!(body(OllamaConfig::new("m")).get("think").is_none());
        assert_eq!(
            body(OllamaConfig::new("m").think(Think::Off))["think"],
            false
        );
        assert_eq!(body(OllamaConfig::new("m").think(Think::On))["think"], true);
        assert_eq!(
            body(OllamaConfig::new("m").think(Think::High))["think"],
            "high"
        );
        assert_eq!(
            body(OllamaConfig::new("m").think(Think::Max))["think"],
            "max"
        );
    }

    #[test]
    fn reply_with_tool_calls() {
        let v = json!({
            "model": "qwen2.5", "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
            ]},
            "done_reason": "stop", "done": true, "prompt_eval_count": 12, "eval_count": 7
        });
        let r = parse_reply(&v, "qwen2.5").unwrap();
        assert_eq!(r.tool_calls[0].name, "get_weather");
        assert_eq!(r.tool_calls[0].arguments, json!({"city": "Paris"}));
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(r.usage.total(), 19);
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for v in [
            json!({}),
            json!({"message": "text"}),
            json!({"message": {"content": 5}}),
            json!({"message": {"content": "", "tool_calls": [{"nofunction": 1}]}}),
            json!({"message": {"content": "", "tool_calls": {"a": 1}}}),
        ] {
            let e = parse_reply(&v, "m").unwrap_err();
            assert_eq!(e.code(), "malformed", "{v}");
        }
        let e = parse_reply(&json!({"error": "model 'x' not found"}), "x").unwrap_err();
        assert_eq!(e.code(), "model_not_found");
    }

    proptest::proptest! {
        #[test]
        fn random_stream_lines_never_panic(lines in proptest::collection::vec(".{0,80}", 0..20)) {
            let mut d = NdjsonDecoder { model: "m".into(), calls: 0, done: false };
            let mut out = Vec::new();
            for l in &lines {
                if d.line(l, &mut out).is_err() {
                    break;
                }
            }
            let _ = d.end(&mut out);
        }

        #[test]
        fn random_json_replies_never_panic(k in "[a-z_]{1,12}", s in ".{0,20}", n in 0u64..5) {
            for v in [
                json!({"message": {"content": s.clone(), "tool_calls": [{"function": {"name": k.clone(), "arguments": s.clone()}}]}, "done": true}),
                json!({"message": {k.clone(): n}, "done_reason": s.clone()}),
                json!({k.clone(): {"content": s.clone()}}),
            ] {
                let _ = parse_reply(&v, "m");
            }
        }
    }

    #[test]
    fn base_url_gets_a_scheme() {
        let c = OllamaConfig::new("m").base_url("127.0.0.1:11434/");
        assert_eq!(c.base_url, "http://127.0.0.1:11434");
        // Without a port, Ollama's own, as Ollama reads its OLLAMA_HOST; with a scheme, the
        // scheme's.
        for (given, base) in [
            ("0.0.0.0", "http://0.0.0.0:11434"),
            ("localhost", "http://localhost:11434"),
            ("[::1]", "http://[::1]:11434"),
            ("[::1]:8080", "http://[::1]:8080"),
            ("gpu-box/ollama", "http://gpu-box:11434/ollama"),
            ("bob:pw@gpu-box", "http://bob:pw@gpu-box:11434"),
            ("bob:pw@gpu-box:9000", "http://bob:pw@gpu-box:9000"),
            ("gpu-box?key=a:b", "http://gpu-box:11434?key=a:b"),
            ("http://gpu-box", "http://gpu-box"),
            ("https://gpu-box/", "https://gpu-box"),
        ] {
            assert_eq!(
                OllamaConfig::new("m").base_url(given).base_url,
                base,
                "{given}"
            );
        }
    }
}
