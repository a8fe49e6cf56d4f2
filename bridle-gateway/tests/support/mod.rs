//! Fixtures the gateway's integration tests share (`mod support;` in a test file): the Gitea REST
//! stand-in and the pinned third-party Gitea MCP server that runs against it, and the Kanboard
//! JSON-RPC stand-in.

#![allow(dead_code)] // each test file uses its own subset

pub mod gitea_mcp;
pub mod gitea_standin;
#[cfg(feature = "kanboard")]
pub mod kanboard_fixture;
pub mod kanboard_standin;
