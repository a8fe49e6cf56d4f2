//! # kberg-providers
//!
//! [`InferenceProvider`](kberg_agent::InferenceProvider) implementations for `kberg-agent`,
//! each behind its own feature so an app compiles only the backends it uses:
//!
//! | feature | provider | wire | streaming |
//! |---|---|---|---|
//! | `ollama` | [`ollama::OllamaProvider`] | Ollama `/api/chat` | NDJSON |
//! | `openai` | [`openai::OpenAiProvider`] | any OpenAI-compatible `/v1/chat/completions` (LM Studio, llama.cpp, vLLM, hosted) | SSE |
//! | `anthropic` | [`anthropic::AnthropicProvider`] | Anthropic Messages API | SSE |
//! | `rustls` | HTTPS for hosted APIs | | |
//!
//! Every provider shares one HTTP edge ([`HttpOptions`]): a timeout per reply, an idle
//! timeout per streamed piece and an opt-in deadline for a whole turn, retries with backoff on
//! 429 and 5xx that honour `Retry-After`, cancellation through the loop's token, and errors a
//! user can act on ("is Ollama running at …?", "run `ollama pull qwen2.5`", a rejected key, a
//! reply that is not the documented shape).
//! Keys are plain config fields: read them from the environment in your binary.
//!
//! No credential reaches an error, a log line or a `Debug`: a URL is shown without its user
//! part and query, and a server's words (an error answer, an in-stream error) are quoted with
//! `[redacted]` in place of the key and of the credentials the base URL carries. The endpoint's
//! path is appended to the base URL's path, so a base with a query (Azure OpenAI's
//! `?api-version=`) keeps it as the query.

// The table above links each provider; a build without all of them (each is opt-in) has
// nothing to link to for the ones left out. The all-features build checks every link.
#![cfg_attr(
    not(all(feature = "ollama", feature = "openai", feature = "anthropic")),
    allow(rustdoc::broken_intra_doc_links)
)]

// With no provider feature on, the shared edge has no user.
#[cfg_attr(
    not(any(feature = "ollama", feature = "openai", feature = "anthropic")),
    allow(dead_code)
)]
mod endpoint;
#[cfg_attr(
    not(any(feature = "ollama", feature = "openai", feature = "anthropic")),
    allow(dead_code)
)]
mod http;
pub mod sse;
#[cfg_attr(
    not(any(feature = "ollama", feature = "openai", feature = "anthropic")),
    allow(dead_code)
)]
mod window;

#[cfg(feature = "anthropic")]
pub mod anthropic;
#[cfg(feature = "ollama")]
pub mod ollama;
#[cfg(feature = "openai")]
pub mod openai;

pub use http::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_STREAM_BYTES, HttpOptions,
};
