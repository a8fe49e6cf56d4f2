//! # kberg-agent
//!
//! The other end of Kberg's bridge: a provider-agnostic tool-use loop that lets a model, small
//! local ones especially, drive an app's tools and actually finish.
//!
//! - [`InferenceProvider`]: one chat turn (messages + tools + options in, an assistant message
//!   with text and/or tool calls and usage out), plus a streaming form. Implementations live in
//!   `kberg-providers` (Ollama, OpenAI-compatible, Anthropic); [`ScriptedProvider`] plays back a
//!   script for tests.
//! - [`Message`]: system, user, assistant (with tool calls) and tool results; serializable so a
//!   conversation can be stored and resumed.
//! - [`ToolSurface`]: where the tools live. [`LocalSurface`] is an in-process
//!   [`kberg_core::ToolRegistry`] seen by one caller; [`McpSurface`] (feature `mcp`, on by
//!   default) is a remote MCP server over Streamable HTTP or a child process on stdio.
//! - [`Agent`]: the loop. It stops when the model answers, or at the turn limit, the token
//!   budget, cancellation or the repair bounds, and says which in its [`RunOutcome`].
//!
//! ```
//! use kberg_agent::{Agent, LocalSurface, Message, ScriptedProvider};
//! use kberg_core::{Caller, Principal, ToolBuilder, ToolOutput, ToolRegistry};
//! use serde_json::json;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! struct Search { query: String }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let tools = ToolRegistry::new();
//! tools.register(ToolBuilder::new("search_notes")
//!     .description("Find notes by text")
//!     .handler(|a: Search, _| async move { Ok(ToolOutput::text(format!("1 note about {}", a.query))) }))?;
//!
//! let model = ScriptedProvider::new([
//!     ScriptedProvider::call("c1", "search_notes", json!({"query": "rust"})),
//!     ScriptedProvider::text("You have one note about rust."),
//! ]);
//! let agent = Agent::new(model, LocalSurface::new(tools, Caller::new(Principal::new("me"))));
//! let out = agent.run(vec![Message::user("what about rust?")], &Default::default()).await;
//! assert!(out.answered());
//! assert_eq!(out.text, "You have one note about rust.");
//! assert_eq!(out.calls[0].outcome.as_str(), "ok");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod agent;
mod coerce;
mod config;
mod ground;
#[cfg(feature = "mcp")]
mod mcp;
mod message;
mod names;
mod nudge;
mod outcome;
mod progress;
mod provider;
mod recover;
mod scripted;
mod surface;
mod thinking;

pub use agent::Agent;
pub use coerce::{Coercion, coerce_arguments, drop_unknown_arguments, unwrap_schema_echo};
pub use config::AgentConfig;
#[cfg(feature = "mcp")]
pub use mcp::{MAX_TOOL_LIST_PAGES, McpOptions, McpSurface};
pub use message::{
    ChatOptions, ChatRequest, ChatResponse, FinishReason, Message, ToolCall, ToolChoice,
    ToolDefinition, Usage,
};
pub use names::{MAX_TOOL_NAME_LEN, ToolNames, is_provider_safe};
pub use outcome::{AgentEvent, CallOutcome, CallRecord, Interventions, RunOutcome, StopReason};
pub use progress::{
    MAX_PROGRESS_MESSAGE_CHARS, PROGRESS_REPORT_BURST, PROGRESS_REPORT_INTERVAL, ProgressReport,
    ProgressSink,
};
pub use provider::{
    ChatDelta, ChatStream, InferenceProvider, ProviderError, StreamAssembler, collect_stream,
    collect_stream_observed, parse_arguments, response_to_deltas,
};
pub use recover::{
    RecoveredCall, has_words, malformed_call, recover_calls, recover_calls_with_schemas,
    unlisted_calls,
};
pub use scripted::ScriptedProvider;
pub use surface::{LocalSurface, SurfaceError, ToolResult, ToolSurface};

/// Re-exported so apps name the same token type as the loop.
pub use tokio_util::sync::CancellationToken;
