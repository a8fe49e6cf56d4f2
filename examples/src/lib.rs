//! Shared pieces of Kberg's example programs.
//!
//! The binaries stay thin: each parses its flags and serves an app built here, so the
//! integration tests in `tests/` can build the very same app in-process (or spawn the binary)
//! and drive it with real MCP clients.
//!
//! - [`conformance`]: every fixture the official MCP conformance suite asks a server for,
//!   registered through Kberg's public API only (served by the `kberg-conformance` binary).
//! - [`notes`]: a small notes app with Read and Write tools, a slow cancellable tool, a
//!   subscribable resource and a prompt; the app the interop tests drive with the official
//!   Python and TypeScript SDK clients (served by the `kberg-interop` binary).

pub mod conformance;
pub mod notes;

/// Sends `tracing` output to stderr (stdout may be an MCP stdio channel) at `level`
/// (`error`, `warn`, `info`, `debug`, `trace`; anything else means `info`).
pub fn init_logging(level: &str) {
    let level = match level.to_ascii_lowercase().as_str() {
        "error" => tracing::Level::ERROR,
        "warn" => tracing::Level::WARN,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        _ => tracing::Level::INFO,
    };
    // A second initialisation (tests build several apps) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
