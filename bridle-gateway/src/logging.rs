//! The gateway's log filter: what each level shows, and the one exception.
//!
//! rmcp traces every JSON-RPC message it sends and receives at `TRACE`, bodies included, and an
//! upstream's answer can carry a credential it echoes (Gitea quotes a rejected token in its
//! error). The gateway scrubs such values out of what agents receive, but a trace line is
//! written before the gateway sees the answer. So whatever level an operator asks for, rmcp's
//! own events are capped at `DEBUG`: message bodies never reach the gateway's log. The trace
//! spans ([`crate::telemetry::TRACE_TARGET`]) are for the trace exporter, not the log: the
//! filter leaves them out. Binaries that serve the gateway put [`log_targets`] on their log
//! layer (a per-layer filter, so that the trace layer beside it sees its spans).

use tracing::Level;
use tracing_subscriber::filter::{LevelFilter, Targets};

/// The filter for `level` (`error`, `warn`, `info`, `debug`, `trace`; anything else is
/// `info`), with rmcp capped at `DEBUG` and the trace spans left out.
pub fn log_targets(level: &str) -> Targets {
    let level = match level.to_ascii_lowercase().as_str() {
        "error" => Level::ERROR,
        "warn" => Level::WARN,
        "debug" => Level::DEBUG,
        "trace" => Level::TRACE,
        _ => Level::INFO,
    };
    let rmcp = if level == Level::TRACE {
        Level::DEBUG
    } else {
        level
    };
    Targets::new()
        .with_default(LevelFilter::from_level(level))
        .with_target("rmcp", LevelFilter::from_level(rmcp))
        .with_target(crate::telemetry::TRACE_TARGET, LevelFilter::OFF)
}
