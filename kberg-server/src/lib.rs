//! # kberg-server
//!
//! Kberg on the MCP wire. Any MCP client reaches an app's tools, resources and prompts through
//! kberg-core's gate, over Streamable HTTP (both protocol generations: 2025-11-25 sessions and
//! 2026-07-28 stateless requests, negotiated per client) or stdio. The wire itself is rmcp's;
//! this crate is the bridge and the guardrails around it: connection auth, DNS-rebinding
//! protection, and limits.
//!
//! Text that an outside party chose (an upstream's names, messages and stderr, a client's
//! request ids, a principal's id) is logged as a `?` (`Debug`) field, never `%` (`Display`):
//! quoted, its line breaks, CRs, ESCs, line separators and bidirectional controls escaped, so it
//! cannot start a forged line of a text log or drive the terminal showing it (JSON logs escape
//! on their own; there such a field keeps its quotes).
//!
//! ```no_run
//! use kberg_core::{Grants, Principal, ToolBuilder, ToolOutput, ToolRegistry};
//! use kberg_server::{BearerTokens, HttpConfig, McpApp};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let tools = ToolRegistry::new();
//! tools.register(ToolBuilder::new("hello").description("Say hello").raw_handler(
//!     serde_json::json!({"type": "object"}),
//!     |_args, _ctx| async { Ok(ToolOutput::text("hello")) },
//! ))?;
//! let app = McpApp::builder("notes", "1.0.0").tools(tools).build();
//! let auth = BearerTokens::new().with_token("s3cret", Principal::new("me").with_grants(Grants::none()));
//! let config = HttpConfig::new("127.0.0.1:8765".parse()?).auth(auth);
//! kberg_server::serve(app, config, std::future::pending::<()>()).await?;
//! # Ok(()) }
//! ```

pub mod aggregate;
mod app;
mod auth;
mod config;
mod convert;
mod error;
mod guard;
mod handler;
mod http;
pub mod input;
mod limits;
mod peer;
mod session_store;
mod sessions;
mod stdio;
mod tasks;

pub use aggregate::{Aggregator, AggregatorConfig, UpstreamConfig, UpstreamTransport};
pub use app::{DEFAULT_PAGE_SIZE, McpApp, McpAppBuilder};
pub use auth::{AuthError, Authenticator, BearerTokens, OpenAccess, bearer_token};
pub use config::{HttpConfig, LOOPBACK_HOSTS, LOOPBACK_ORIGINS, Limits};
pub use error::ServerError;
pub use guard::host_and_port;
pub use http::{HttpServer, router, serve};
pub use session_store::{SessionStore, SessionStoreFailure, StoredSession};
pub use stdio::{serve_io, serve_stdio};

/// Re-exported so callers of [`router`] name the same router type.
pub use axum::Router;
/// Re-exported so authenticators name the same header type.
pub use axum::http::HeaderMap;
