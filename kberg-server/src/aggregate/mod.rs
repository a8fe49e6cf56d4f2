//! The sidecar aggregator: one Kberg registry in front of N upstream MCP servers.
//!
//! A coding agent talks to one server; the aggregator connects to the upstreams it was configured
//! with (child processes over stdio, or Streamable HTTP endpoints) using rmcp's client, lists
//! their tools and registers each one in a kberg-core
//! [`ToolRegistry`](kberg_core::ToolRegistry) under a namespaced name
//! (`<namespace><separator><tool>`, default separator `__`). Every forwarded call passes Kberg's
//! gate first: upstream tools are Read unless a [write rule](WriteRule) assigns them a
//! [`WriteCapability`](kberg_core::WriteCapability), so an agent without `fs.write` cannot reach
//! `fs__write_file`. Upstream credentials (HTTP headers, child environment) live in the
//! configuration and are only ever sent upstream.
//!
//! What an upstream says back is cleaned of them before anyone sees it. Its log messages,
//! progress messages and the requests it relays to a calling client (sampling, elicitation, a
//! task's questions) have every string (and object key) redacted to [`REDACTED`], and so have
//! a child's stderr lines: one list per upstream shared by both, the values given with
//! [`UpstreamConfig::stderr_redact`] or else the child's environment values of at least
//! [`MIN_REDACTED_LEN`] bytes (a value of several lines also line by line), and for an HTTP
//! upstream its header values and their words and its URL's user part and query values (and
//! the values given with `stderr_redact`). Errors and refusals that quote an upstream, and the
//! code of an error result a [`ForwardHook`] is told, have them redacted with the same list and
//! marker.
//!
//! Each upstream has a supervisor task. When an upstream dies (its process exits, its endpoint
//! stops answering), calls to its tools answer an error result whose structured content carries
//! `code: "upstream_unavailable"`, the other upstreams keep working, and the supervisor
//! reconnects with exponential [`Backoff`]. Every forwarded request waits at most its upstream's
//! [call timeout](UpstreamConfig::call_timeout) (default [`DEFAULT_CALL_TIMEOUT`]): on expiry it is
//! cancelled upstream and answers `upstream_timeout`; an answer that is not the documented result
//! shape answers `upstream_invalid_result`. After a reconnect the tool list is read again: tools
//! added or removed upstream are added to or removed from the registry, which makes kberg-server
//! send `notifications/tools/list_changed` to its clients.
//!
//! What a forwarded tool call carries from its caller's `_meta` (W3C trace context, say) is
//! decided by a [`ForwardHook`] given in [`Forward::hook`]; [`CarryMeta`] copies named keys.
//!
//! Prompts and resources are forwarded when asked for ([`Aggregator::start_with`] with a
//! [`Forward`]). Prompts take the tools' namespaced names. Resources take the namespace in front
//! of their URI scheme, joined by `+`: upstream `file:///tmp/a.txt` of namespace `fs` is
//! `fs+file:///tmp/a.txt`, and the template `file:///{path}` is `fs+file:///{path}`. A scheme may
//! contain `+` and a namespace may not, so the URI stays valid and maps back by stripping
//! `<namespace>+` ([`namespaced_uri`], [`upstream_uri`]). Subscriptions to namespaced URIs are
//! relayed upstream and the upstream's `notifications/resources/updated` reach exactly their
//! subscribers.
//!
//! ```no_run
//! use std::time::Duration;
//! use kberg_core::{ResourceRegistry, ToolRegistry, WriteCapability};
//! use kberg_server::aggregate::{
//!     Aggregator, AggregatorConfig, Forward, UpstreamConfig, UpstreamTransport,
//! };
//! use kberg_server::{HttpConfig, McpApp};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = AggregatorConfig::new()
//!     .upstream(UpstreamConfig::new(
//!         "fs",
//!         UpstreamTransport::stdio("mcp-server-filesystem").arg("/srv"),
//!     ))
//!     .upstream(
//!         UpstreamConfig::new(
//!             "tickets",
//!             UpstreamTransport::http("https://tickets.internal/mcp")
//!                 .header("authorization", "Bearer upstream-secret"),
//!         )
//!         .call_timeout(Duration::from_secs(20)),
//!     )
//!     .write_rule("fs__write_*", WriteCapability::new("fs.write", "Change files"));
//! let (tools, resources) = (ToolRegistry::new(), ResourceRegistry::new());
//! let forward = Forward::new().resources(resources.clone());
//! let aggregator = Aggregator::start_with(config, tools.clone(), forward)?;
//! let app = McpApp::builder("gateway", "1.0.0")
//!     .tools(tools)
//!     .resources(resources)
//!     .build();
//! kberg_server::serve(app, HttpConfig::new("127.0.0.1:8765".parse()?), std::future::pending::<()>())
//!     .await?;
//! # drop(aggregator);
//! # Ok(())
//! # }
//! ```

mod closing;
mod config;
mod error;
mod forward;
mod front;
mod hook;
mod order;
mod pages;
mod pattern;
mod prompts;
mod redact;
mod relay;
mod resources;
mod stderr;
mod supervisor;
mod tasks;
mod thread;
mod tools;

pub use config::{
    AggregatorConfig, Backoff, ConfigError, DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_SEPARATOR, MAX_CALL_TIMEOUT, MAX_NAME_LEN, UpstreamConfig, UpstreamRuntime,
    UpstreamTransport, WriteRule,
};
pub use front::{
    Aggregator, Forward, UPSTREAM_INVALID_RESULT, UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE,
    UpstreamStatus,
};
pub use hook::{CarryMeta, ForwardHook, ForwardOutcome, OutgoingCall};
pub use pattern::Pattern;
pub use redact::{MIN_REDACTED_LEN, REDACTED, redact_encoded, redact_encoded_bytes};
pub use relay::{LOG_RELAY_BURST, LOG_RELAY_INTERVAL};
pub use resources::{namespaced_uri, upstream_uri};
pub use stderr::{ChildStderr, MAX_STDERR_LINE, STDERR_TARGET};
pub use thread::UpstreamThread;
