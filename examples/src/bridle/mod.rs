//! The Bridle gateway: configuration and data directory ([`config`]) and the MCP app with its
//! auth and change watcher ([`gateway`]), and the optional memory service ([`memory`]). The `bridle` binary is the command line around them.

pub mod config;
pub mod gateway;
pub mod memory;
