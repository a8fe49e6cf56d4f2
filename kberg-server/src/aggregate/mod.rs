//! The sidecar aggregator: one Kberg registry in front of N upstream MCP servers.
//!
//! A coding agent talks to one server; the aggregator connects to the upstreams it was configured
//! with (child processes over stdio, or Streamable HTTP endpoints) using rmcp's client, lists
//! their tools and registers each one in a kberg-core [`ToolRegistry`] under a namespaced name
//! (`<namespace><separator><tool>`, default separator `__`). Every forwarded call passes Kberg's
//! gate first: upstream tools are Read unless a [write rule](WriteRule) assigns them a
//! [`WriteCapability`](kberg_core::WriteCapability), so an agent without `fs.write` cannot reach
//! `fs__write_file`. Upstream credentials (HTTP headers, child environment) live in the
//! configuration and are only ever sent upstream.
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

mod config;
mod pattern;
mod resources;
mod upstream;

pub use config::{
    AggregatorConfig, Backoff, ConfigError, DEFAULT_CALL_TIMEOUT, DEFAULT_SEPARATOR, MAX_NAME_LEN,
    UpstreamConfig, UpstreamTransport, WriteRule,
};
pub use pattern::Pattern;
pub use resources::{namespaced_uri, upstream_uri};
pub use upstream::{
    Aggregator, Forward, UPSTREAM_INVALID_RESULT, UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE,
    UpstreamStatus,
};
