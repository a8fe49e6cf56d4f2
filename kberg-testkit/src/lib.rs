//! Shared fixtures of the Kberg crates' tests, kept in one place instead of copied into each
//! crate's `tests/`.
//!
//! This crate is a dev-dependency only (`publish = false`): nothing in a library crate depends on
//! it. What it holds:
//!
//! - [`tools`]: where `scripts/install-tools.sh` put the pinned third-party test peers (Node, the
//!   `@modelcontextprotocol` npm servers, the Python virtual environment and the packages in it),
//!   found without naming a Python minor version, and a clear failure saying what to run when
//!   one is missing;
//! - [`eventually()`]: polling a condition with a deadline, the one way tests wait for something
//!   they cannot be signalled about (and [`eventually_async()`], [`eventually_async_ok()`], which
//!   names what it last saw when it fails);
//! - [`notes`]: the small notes app (a read tool, a write tool under `notes.write`, a
//!   cancellable wait, a registered refusal) that the agent and provider tests drive;
//! - [`net`]: free loopback ports, closed ones held for the whole test binary, and guards that
//!   stop what a test started, also on failure;
//! - [`git`]: a private git host on 127.0.0.1 (git's smart-HTTP server behind HTTP Basic
//!   authentication), for cloning with a credential kept out of the URL;
//! - [`readme`]: the check that a crate's README examples are the ones its `tests/readme.rs`
//!   compiles and runs;
//! - [`peers`]: the pinned reference MCP server (`server-everything`) as a child process, over
//!   stdio or Streamable HTTP;
//! - [`scripted`] (feature `scripted`): a scripted HTTP server that records every request and
//!   answers with prepared replies, for clients of services that cannot run here;
//! - [`log`] (feature `log`): a `tracing` writer that keeps every log line in memory, for
//!   canary checks and for waiting on a log line;
//! - [`serve`] (feature `server`): a kberg-server app served on 127.0.0.1 that stops when its
//!   guard drops.

// Test support: a broken fixture should fail the test loudly.
#![allow(clippy::unwrap_used)]
// The list above links the modules of every feature; a build without all of them has nothing
// to link to for the ones left out. The all-features build checks every link.
#![cfg_attr(
    not(all(feature = "scripted", feature = "log", feature = "server")),
    allow(rustdoc::broken_intra_doc_links)
)]

pub mod eventually;
pub mod git;
#[cfg(feature = "log")]
pub mod log;
pub mod net;
pub mod notes;
pub mod peers;
pub mod readme;
#[cfg(feature = "scripted")]
pub mod scripted;
#[cfg(feature = "server")]
pub mod serve;
pub mod tools;

pub use eventually::{WAIT, eventually, eventually_async, eventually_async_ok};
pub use net::{StopOnDrop, closed_port, closed_port_url, free_port};
