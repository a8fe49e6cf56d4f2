//! The aggregator tests' upstreams, built on `kberg_testkit`: the pinned third-party servers as
//! `UpstreamTransport`s (server-everything, server-filesystem) and the misbehaving raw upstream
//! kept beside these tests (`tests/aggregate_raw_upstream.py`, run by the pinned Python).
//! The tool paths, waits and guards come from the test kit and are re-exported here.

#![allow(dead_code, unused_imports)] // each test file uses its own subset

use std::path::PathBuf;

use kberg_core::{Caller, Principal};
use kberg_server::aggregate::UpstreamTransport;
pub use kberg_testkit::peers::HttpEverything;
pub use kberg_testkit::{StopOnDrop, WAIT, free_port};

/// Node 22 from the pinned tools, as a program name.
pub fn node() -> String {
    kberg_testkit::tools::node().to_string_lossy().into_owned()
}

/// The entry point of one of the `@modelcontextprotocol` npm servers.
pub fn package(name: &str) -> String {
    kberg_testkit::tools::mcp_npm_package(name)
        .to_string_lossy()
        .into_owned()
}

/// server-everything as a stdio child.
pub fn everything_stdio() -> UpstreamTransport {
    UpstreamTransport::stdio(node())
        .arg(package("server-everything"))
        .arg("stdio")
}

/// The raw stdio upstream that hangs and answers garbage on purpose.
pub fn raw_upstream() -> UpstreamTransport {
    let script = kberg_testkit::tools::need(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/aggregate_raw_upstream.py"),
    );
    UpstreamTransport::stdio(
        kberg_testkit::tools::python()
            .to_string_lossy()
            .into_owned(),
    )
    .arg("-u")
    .arg(script.to_string_lossy().into_owned())
}

/// A caller without grants.
pub fn reader() -> Caller {
    Caller::new(Principal::new("reader"))
}
