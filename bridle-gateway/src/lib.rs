//! The Bridle gateway as a library.
//!
//! Bridle is a self-hosted control plane for coding agents: one MCP endpoint every agent
//! connects to, so switching agents does not change the rules, memory, tools or secrets it works
//! under. This crate assembles the gateway from Kberg's crates (the gate, the wire, the
//! aggregator) and Bridle's (rules, memory), so that the `bridle` binary stays a thin command
//! line and anyone can compose their own gateway from the same pieces.
//!
//! The modules, bottom-up:
//! - [`config`]: the data directory and `bridle.yaml`.
//! - [`edge`]: settings from the environment and files, laid over `bridle.yaml`.
//! - [`error`]: why the gateway could not be assembled, and the stable refusal codes agents see.
//! - [`agent_registry`]: the live agents, created, changed and removed at run time and
//!   persisted to `bridle.yaml`.
//! - [`context`]: [`GatewayContext`], what every tool reads (rules store, renderer, agents), with
//!   each agent's live grants.
//! - [`sessions`]: the live registry of connected agents and sessions, shared by replicas
//!   through a ledger in PostgreSQL (with the store from which a replica resumes a 2025-11-25
//!   session another initialized).
//! - [`auth`]: bearer-token auth per agent.
//! - [`tools`]: the gateway's own tools, one module per group.
//! - [`resources`]: the rules as MCP resources and the watcher that notifies subscribers.
//! - `kanboard` (feature `kanboard`): the Kanboard tool set, with credentials and project
//!   mappings given per request and per agent by the embedder.
//! - [`memory`]: the optional memory service and the write-back of `last_indexed`.
//! - [`vault`]: every credential, sealed at rest; [`secrets`]: the vault and its read-only
//!   sources as the upstreams' secret source.
//! - [`upstreams`]: downstream MCP servers behind namespaced front tools, credentials injected
//!   per request.
//! - [`audit`]: the append-only, hash-chained audit log of every change and tool call.
//! - [`app`]: the MCP app assembled from the above.
//! - [`admin`]: the admin API (projects, the review queue, scope tickets, integrations) over
//!   HTTP with problem-details errors and its OpenAPI document.
//! - [`ops`]: `/healthz`, `/readyz` and Prometheus `/metrics` on the gateway's listener, and
//!   the request layer that counts requests and drains them on shutdown.
//! - `panel` (feature `panel`): the web panel, server-rendered pages that call the admin API
//!   in process, mounted by the admin listener.
//! - [`telemetry`]: OpenTelemetry traces of MCP requests and forwarded calls (exported with
//!   feature `traces`), trace context passed on to upstreams.
//! - [`logging`]: the log filter binaries install (rmcp's message bodies never logged).
//! - [`gateway`]: [`Gateway`], everything assembled by [`GatewayBuilder`] and served over HTTP.

pub mod admin;
pub mod agent_registry;
pub mod app;
pub mod audit;
pub mod auth;
pub mod config;
pub mod context;
pub mod db;
pub mod edge;
pub mod error;
pub mod feed;
mod files;
pub mod gateway;
#[cfg(feature = "kanboard")]
pub mod kanboard;
pub mod logging;
pub mod memory;
pub mod namespace;
pub mod ops;
#[cfg(feature = "panel")]
pub mod panel;
pub mod resources;
pub mod secrets;
pub mod sessions;
pub mod telemetry;
#[cfg(feature = "postgres")]
pub mod tickets;
pub mod tools;
pub mod upstreams;
pub mod vault;

pub use app::{build_app, build_app_observed, build_app_with};
pub use auth::BridleAuth;
pub use context::GatewayContext;
pub use error::{GatewayError, RefusalCode};
pub use gateway::{BoundGateway, Gateway, GatewayBuilder};
