//! The Bridle gateway as a library.
//!
//! Bridle is a self-hosted control plane for coding agents: one MCP endpoint every agent
//! connects to, so switching agents does not change the rules, memory, tools or secrets it works
//! under. This crate assembles the gateway from Kberg's crates (the gate, the wire, the
//! aggregator) and Bridle's (rules, memory), so that the `bridle` binary stays a thin command
//! line and anyone can compose their own gateway from the same pieces.
//!
//! - [`config`]: the data directory and `bridle.yaml`.
//! - [`gateway`]: the MCP app: rules tools and resources, per-agent auth with live grants, and
//!   the watcher that tells subscribed agents when their rules change.
//! - [`memory`]: the optional memory service (session memory, pattern-example search) and the
//!   write-back of `last_indexed` into the rules documents.

pub mod config;
pub mod gateway;
pub mod memory;
