//! The seam between the loop and a model: [`InferenceProvider`].
//!
//! A provider runs one chat turn: the conversation, the tools and the options go in, an
//! assistant message (text and/or tool calls) and its token usage come out. The streaming form
//! yields [`ChatDelta`]s as they arrive so an app can show tokens as they come; a
//! [`StreamAssembler`] folds them back into a [`ChatResponse`], assembling tool calls whose
//! arguments arrive in fragments. New providers implement this trait and nothing else; the loop
//! never changes for them.
//!
//! [`ProviderError`] is shared by every provider so an app handles "nothing listening", "unknown
//! model", "bad key" and "not the documented shape" the same way whatever the backend.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::message::{ChatRequest, ChatResponse, FinishReason, ToolCall, Usage};

/// Why a provider could not produce a turn. Each variant has a stable [`ProviderError::code`]
/// and a message that tells a user what to do.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// Nothing answered at the configured address.
    #[error("{hint}")]
    Unreachable {
        /// The address that was tried.
        url: String,
        /// What to do about it, e.g. "is Ollama running at http://127.0.0.1:11434?".
        hint: String,
    },
    /// The server does not know the model.
    #[error("{hint}")]
    ModelNotFound {
        /// The model name.
        model: String,
        /// What to do about it, e.g. "run `ollama pull qwen2.5`".
        hint: String,
    },
    /// The key was missing or rejected (HTTP 401/403).
    #[error("the server rejected the API key (HTTP {status}): {detail}")]
    Unauthorized {
        /// 401 or 403.
        status: u16,
        /// The server's own words, plus where the key is read from.
        detail: String,
    },
    /// Still rate limited (HTTP 429) after the configured retries.
    #[error("rate limited (HTTP 429) after {}: {detail}", attempts_of(*.attempts))]
    RateLimited {
        /// How many requests were sent.
        attempts: u32,
        /// The last `Retry-After`, if the server sent one.
        retry_after: Option<Duration>,
        /// The server's own words.
        detail: String,
    },
    /// The server failed (HTTP 5xx) after the configured retries.
    #[error("the server failed (HTTP {status}) after {}: {detail}", attempts_of(*.attempts))]
    ServerError {
        /// The last status.
        status: u16,
        /// How many requests were sent.
        attempts: u32,
        /// The server's own words.
        detail: String,
    },
    /// The server refused the request as malformed or unsupported (another HTTP 4xx).
    #[error("the server rejected the request (HTTP {status}): {detail}")]
    Rejected {
        /// The status.
        status: u16,
        /// The server's own words.
        detail: String,
    },
    /// The server refused the conversation as longer than the model's context window (an HTTP
    /// 4xx naming it, or the same error written into a 200 or a stream's error event by a
    /// gateway in front of the server: OpenAI's `context_length_exceeded`,
    /// llama.cpp's `exceed_context_size_error`, vLLM's and Anthropic's words, Ollama's when it is
    /// told not to drop messages). The conversation must be shortened, or the window made
    /// larger, before the turn can be sent again; the agent loop shortens what it sends when
    /// [`AgentConfig::elide_results_on_overflow`](crate::AgentConfig) is on.
    #[error("the conversation does not fit the model's context window{}: {detail}", window_sizes(*.requested, *.limit))]
    ContextTooLong {
        /// The tokens the request needed, when the server said.
        requested: Option<u64>,
        /// The context window in tokens, when the server said.
        limit: Option<u64>,
        /// The server's own words, and what to do about it.
        detail: String,
    },
    /// The reply is not the provider's documented shape.
    #[error("the reply is not the documented shape: {detail}")]
    Malformed {
        /// What was wrong.
        detail: String,
    },
    /// A streamed reply ended before its documented end.
    #[error("the stream ended early: {detail}")]
    Truncated {
        /// What was missing.
        detail: String,
    },
    /// No reply within the configured timeout (an attempt's, or the idle gap of a stream).
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The whole turn, replies and retries included, outlasted its deadline (the providers'
    /// opt-in `turn_timeout`) while the server was still answering. Code `timeout`, as
    /// [`ProviderError::Timeout`].
    #[error("the turn did not finish within its turn timeout of {0:?}")]
    TurnTimeout(Duration),
    /// The reply exceeded a size bound: a non-streamed body, or one line of a streamed one.
    /// Nothing of it was used past the bound.
    #[error("the {what} exceeds {limit} bytes; it was not read further")]
    TooLarge {
        /// What was too large (`reply body`, `streamed line`, `streamed reply`).
        what: &'static str,
        /// The bound, in bytes.
        limit: usize,
    },
    /// The turn was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// `1 attempt`, `3 attempts`.
fn attempts_of(n: u32) -> String {
    kberg_core::counted(u64::from(n), "attempt", "attempts")
}

impl ProviderError {
    /// A stable string naming the variant, for programs and logs.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::Unreachable { .. } => "unreachable",
            ProviderError::ModelNotFound { .. } => "model_not_found",
            ProviderError::Unauthorized { .. } => "unauthorized",
            ProviderError::RateLimited { .. } => "rate_limited",
            ProviderError::ServerError { .. } => "server_error",
            ProviderError::Rejected { .. } => "rejected",
            ProviderError::ContextTooLong { .. } => "context_too_long",
            ProviderError::Malformed { .. } => "malformed",
            ProviderError::Truncated { .. } => "truncated",
            ProviderError::Timeout(_) | ProviderError::TurnTimeout(_) => "timeout",
            ProviderError::TooLarge { .. } => "too_large",
            ProviderError::Cancelled => "cancelled",
        }
    }

    /// A [`ProviderError::Malformed`] with this detail.
    pub fn malformed(detail: impl Into<String>) -> Self {
        ProviderError::Malformed {
            detail: detail.into(),
        }
    }
}

/// The sizes a [`ProviderError::ContextTooLong`] message quotes: ` (6000 tokens; it holds 4096)`,
/// either part alone, or nothing.
fn window_sizes(requested: Option<u64>, limit: Option<u64>) -> String {
    match (requested, limit) {
        (Some(r), Some(l)) => format!(" ({r} tokens; it holds {l})"),
        (Some(r), None) => format!(" ({r} tokens)"),
        (None, Some(l)) => format!(" (it holds {l} tokens)"),
        (None, None) => String::new(),
    }
}

/// One piece of a streamed turn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ChatDelta {
    /// More text.
    Text(String),
    /// A piece of a tool call. Pieces with the same `index` belong to one call; `id` and `name`
    /// usually come with the first piece and `arguments` is a fragment of the JSON text.
    ToolCall {
        /// Which call of the turn (0-based).
        index: usize,
        /// The call's id, when this piece carries it.
        id: Option<String>,
        /// The tool's name, when this piece carries it.
        name: Option<String>,
        /// A fragment of the arguments' JSON text (may be empty).
        arguments: String,
    },
    /// More of the model's thinking, handed on by the server apart from the text (see
    /// [`ChatResponse::thinking`]).
    Thinking(String),
    /// Tokens spent so far (providers may report in several pieces; they add up).
    Usage(Usage),
    /// The turn ended, for this reason.
    Finish(FinishReason),
}

/// A streamed turn.
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatDelta, ProviderError>> + Send>>;

/// A model backend: one chat turn at a time.
#[async_trait]
pub trait InferenceProvider: Send + Sync {
    /// A short name for logs (`ollama`, `openai`, `anthropic`, ...).
    fn name(&self) -> &str;

    /// The model this provider talks to.
    fn model(&self) -> &str;

    /// Runs one turn and returns the whole answer.
    async fn chat(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError>;

    /// Runs one turn and yields it as it is generated. The default runs [`Self::chat`] and
    /// yields the answer in one piece, so a provider without streaming still works everywhere.
    async fn chat_stream(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatStream, ProviderError> {
        let response = self.chat(request, cancel).await?;
        Ok(Box::pin(futures::stream::iter(
            response_to_deltas(response).into_iter().map(Ok),
        )))
    }
}

/// The deltas that reproduce `response` (text, each call whole, usage, finish).
pub fn response_to_deltas(response: ChatResponse) -> Vec<ChatDelta> {
    let mut out = Vec::with_capacity(response.tool_calls.len() + 4);
    if !response.thinking.is_empty() {
        out.push(ChatDelta::Thinking(response.thinking));
    }
    if !response.text.is_empty() {
        out.push(ChatDelta::Text(response.text));
    }
    for (index, call) in response.tool_calls.into_iter().enumerate() {
        out.push(ChatDelta::ToolCall {
            index,
            id: Some(call.id),
            name: Some(call.name),
            arguments: call.arguments.to_string(),
        });
    }
    out.push(ChatDelta::Usage(response.usage));
    out.push(ChatDelta::Finish(response.finish));
    out
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Folds [`ChatDelta`]s into a [`ChatResponse`].
///
/// Tool-call fragments are grouped by index and their argument text concatenated; the JSON is
/// parsed once, at the end. A call's name that a server sends again with each fragment counts
/// once. Arguments that never become valid JSON are kept as a JSON string so
/// the loop can still try to read them and, failing that, answer with a repair diagnostic
/// instead of dropping the call. The calls come out in index order; an index is a key, not a
/// position, so a provider that hands on a server's index as it came (`usize::MAX`, `1 << 40`)
/// costs one entry, not a vector that long.
#[derive(Debug, Default)]
pub struct StreamAssembler {
    text: String,
    thinking: String,
    calls: std::collections::BTreeMap<usize, PartialCall>,
    usage: Usage,
    finish: Option<FinishReason>,
}

impl StreamAssembler {
    /// An empty assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one delta.
    pub fn push(&mut self, delta: ChatDelta) {
        match delta {
            ChatDelta::Text(t) => self.text.push_str(&t),
            ChatDelta::Thinking(t) => self.thinking.push_str(&t),
            ChatDelta::ToolCall {
                index,
                id,
                name,
                arguments,
            } => {
                let call = self.calls.entry(index).or_default();
                if let Some(id) = id
                    && !id.is_empty()
                {
                    call.id = id;
                }
                // The name comes whole in the call's first piece; servers that send it again
                // with each later piece (or send it empty) would otherwise have it repeated
                // (`read_fileread_file`), a tool nobody listed. A piece that is not the name
                // again still continues it.
                if let Some(name) = name
                    && name != call.name
                {
                    call.name.push_str(&name);
                }
                call.arguments.push_str(&arguments);
            }
            ChatDelta::Usage(u) => self.usage.add(u),
            ChatDelta::Finish(f) => self.finish = Some(f),
        }
    }

    /// Whether a [`ChatDelta::Finish`] was seen.
    pub fn finished(&self) -> bool {
        self.finish.is_some()
    }

    /// The assembled response, refusing a call that got an id or arguments but never a name:
    /// the model made a call nobody can run, and dropping it would leave a turn that seems to
    /// say nothing ([`ProviderError::Malformed`], as the providers answer a whole reply's
    /// unnamed call). A call of empty pieces only is no call and is dropped.
    /// [`collect_stream`] finishes with this.
    pub fn try_finish(self) -> Result<ChatResponse, ProviderError> {
        if let Some((index, call)) = self.calls.iter().find(|(_, c)| {
            c.name.is_empty() && (!c.id.is_empty() || !c.arguments.trim().is_empty())
        }) {
            let (id, _) = kberg_core::quote_escaped(&call.id, 64);
            return Err(ProviderError::malformed(format!(
                "the streamed tool call at index {index} (id `{id}`) has arguments or an id \
                 but no tool name"
            )));
        }
        Ok(self.finish())
    }

    /// The assembled response. Calls without a name (indices the stream skipped, or a call
    /// the model never named) are dropped; [`Self::try_finish`] refuses the latter.
    pub fn finish(self) -> ChatResponse {
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_values()
            .filter(|c| !c.name.is_empty())
            .map(|c| ToolCall {
                id: c.id,
                name: c.name,
                arguments: parse_arguments(&c.arguments),
            })
            .collect();
        let finish = match self.finish {
            Some(f) => f,
            None if !tool_calls.is_empty() => FinishReason::ToolCalls,
            None => FinishReason::Stop,
        };
        ChatResponse {
            text: self.text,
            tool_calls,
            usage: self.usage,
            finish,
            thinking: self.thinking,
        }
    }
}

/// Arguments' JSON text as a value: `{}` when empty, the parsed value when valid, else the text
/// itself as a JSON string.
pub fn parse_arguments(text: &str) -> Value {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Value::Object(Default::default());
    }
    serde_json::from_str(trimmed).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Drains a stream into a response, forwarding each text piece to `on_text`. A stream that
/// ends without a finish marker is [`ProviderError::Truncated`].
pub async fn collect_stream(
    stream: ChatStream,
    mut on_text: impl FnMut(&str) + Send,
) -> Result<ChatResponse, ProviderError> {
    collect_stream_observed(stream, |delta| {
        if let ChatDelta::Text(t) = delta {
            on_text(t);
        }
    })
    .await
}

/// [`collect_stream`], showing `on_delta` every delta as it arrives (the text, the thinking,
/// the calls' pieces).
pub async fn collect_stream_observed(
    mut stream: ChatStream,
    mut on_delta: impl FnMut(&ChatDelta) + Send,
) -> Result<ChatResponse, ProviderError> {
    let mut assembler = StreamAssembler::new();
    while let Some(delta) = stream.next().await {
        let delta = delta?;
        on_delta(&delta);
        assembler.push(delta);
    }
    if !assembler.finished() {
        return Err(ProviderError::Truncated {
            detail: "no end-of-turn marker".into(),
        });
    }
    assembler.try_finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fragments_assemble_by_index() {
        let mut a = StreamAssembler::new();
        a.push(ChatDelta::Text("Let me ".into()));
        a.push(ChatDelta::ToolCall {
            index: 0,
            id: Some("call_a".into()),
            name: Some("search".into()),
            arguments: "{\"qu".into(),
        });
        a.push(ChatDelta::ToolCall {
            index: 1,
            id: Some("call_b".into()),
            name: Some("add".into()),
            arguments: String::new(),
        });
        a.push(ChatDelta::ToolCall {
            index: 0,
            id: None,
            name: None,
            arguments: "ery\": \"rust\"}".into(),
        });
        a.push(ChatDelta::Text("look.".into()));
        a.push(ChatDelta::Usage(Usage {
            input_tokens: 3,
            output_tokens: 4,
        }));
        a.push(ChatDelta::Finish(FinishReason::ToolCalls));
        let r = a.finish();
        assert_eq!(r.text, "Let me look.");
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].id, "call_a");
        assert_eq!(r.tool_calls[0].arguments, json!({"query": "rust"}));
        assert_eq!(r.tool_calls[1].arguments, json!({}));
        assert_eq!(r.usage.total(), 7);
        assert_eq!(r.finish, FinishReason::ToolCalls);
    }

    #[test]
    fn any_index_assembles_without_a_panic_or_a_huge_allocation() {
        // A provider that hands on a server's index as it came: the calls are kept, in index
        // order, however large or sparse the indices.
        let mut a = StreamAssembler::new();
        for (index, name) in [(usize::MAX, "last"), (1 << 40, "far"), (3, "near")] {
            a.push(ChatDelta::ToolCall {
                index,
                id: Some(format!("id_{name}")),
                name: Some(name.into()),
                arguments: "{}".into(),
            });
        }
        a.push(ChatDelta::Finish(FinishReason::ToolCalls));
        let names: Vec<String> = a.finish().tool_calls.into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["near", "far", "last"]);
    }

    #[test]
    fn a_name_sent_again_with_each_piece_is_the_name_once() {
        // Some servers (MiniMax behind NVIDIA NIM, Fireworks, some OpenAI models) send the
        // call's whole name again with every piece of its arguments, or an empty one.
        let mut a = StreamAssembler::new();
        for (name, args) in [
            (Some("read_file"), "{\"pa"),
            (Some("read_file"), "th\": "),
            (Some(""), "\"a\"}"),
            (Some("read_file"), ""),
        ] {
            a.push(ChatDelta::ToolCall {
                index: 0,
                id: Some("c1".into()),
                name: name.map(str::to_string),
                arguments: args.into(),
            });
        }
        a.push(ChatDelta::Finish(FinishReason::ToolCalls));
        let r = a.finish();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "read_file");
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a"}));
    }

    #[tokio::test]
    async fn a_streamed_call_never_named_is_refused_not_dropped() {
        // A provider of the application's own passing on a server's call without its name:
        // the model asked for something, and a turn assembled without it would seem to say
        // nothing. Empty pieces alone are no call.
        for (id, arguments) in [(Some("call_9"), ""), (None, "{\"path\": \"a\"}")] {
            let s: ChatStream = Box::pin(futures::stream::iter(vec![
                Ok(ChatDelta::ToolCall {
                    index: 2,
                    id: id.map(str::to_string),
                    name: None,
                    arguments: arguments.into(),
                }),
                Ok(ChatDelta::Finish(FinishReason::ToolCalls)),
            ]));
            let err = collect_stream(s, |_| {}).await.unwrap_err();
            assert_eq!(err.code(), "malformed", "{id:?} {arguments:?}");
            assert!(err.to_string().contains("index 2"), "{err}");
        }
        let s: ChatStream = Box::pin(futures::stream::iter(vec![
            Ok(ChatDelta::ToolCall {
                index: 0,
                id: Some(String::new()),
                name: Some(String::new()),
                arguments: " ".into(),
            }),
            Ok(ChatDelta::Text("done".into())),
            Ok(ChatDelta::Finish(FinishReason::Stop)),
        ]));
        let r = collect_stream(s, |_| {}).await.unwrap();
        assert_eq!((r.text.as_str(), r.tool_calls.len()), ("done", 0));
    }

    #[test]
    fn broken_arguments_are_kept_as_text() {
        assert_eq!(parse_arguments("{\"a\": "), json!("{\"a\": "));
        assert_eq!(parse_arguments("  "), json!({}));
    }

    #[tokio::test]
    async fn stream_without_finish_is_truncated() {
        let s: ChatStream = Box::pin(futures::stream::iter(vec![Ok(ChatDelta::Text(
            "half".into(),
        ))]));
        let err = collect_stream(s, |_| {}).await.unwrap_err();
        assert_eq!(err.code(), "truncated");
    }

    #[tokio::test]
    async fn response_round_trips_through_deltas() {
        let resp = ChatResponse {
            text: "hi".into(),
            tool_calls: vec![ToolCall {
                id: "1".into(),
                name: "t".into(),
                arguments: json!({"x": [1, 2]}),
            }],
            usage: Usage {
                input_tokens: 1,
                output_tokens: 1,
            },
            finish: FinishReason::ToolCalls,
            thinking: "weigh it".into(),
        };
        let s: ChatStream = Box::pin(futures::stream::iter(
            response_to_deltas(resp.clone()).into_iter().map(Ok),
        ));
        let mut seen = String::new();
        let back = collect_stream(s, |t| seen.push_str(t)).await.unwrap();
        assert_eq!(back, resp);
        assert_eq!(seen, "hi", "the thinking is not text");
    }
}
