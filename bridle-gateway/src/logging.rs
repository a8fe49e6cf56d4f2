//! The gateway's log filter: what each level shows, and the one exception.
//!
//! rmcp logs JSON-RPC messages with their bodies: every notification it receives at `INFO`
//! (an upstream's log message, its progress message), every request and answer at `DEBUG`,
//! every message at `TRACE`. An upstream's message can carry a credential it echoes (Gitea
//! quotes a rejected token in its error, and a server may log that error to its client). The
//! gateway scrubs such values out of what agents receive, but rmcp's line is written before the
//! gateway sees the message. So whatever level an operator asks for, rmcp's own events are
//! capped at `WARN`: message bodies never reach the gateway's log. (The gateway and Kberg log
//! what happens to a request themselves, without its body.) The trace
//! spans ([`crate::telemetry::TRACE_TARGET`]) are for the trace exporter, not the log: the
//! filter leaves them out. Binaries that serve the gateway put [`log_targets`] on their log
//! layer (a per-layer filter, so that the trace layer beside it sees its spans).

use tracing::Level;
use tracing_subscriber::filter::{LevelFilter, Targets};

/// The filter for `level` (`error`, `warn`, `info`, `debug`, `trace`; anything else is
/// `info`), with rmcp capped at `WARN` and the trace spans left out.
pub fn log_targets(level: &str) -> Targets {
    let level = match level.to_ascii_lowercase().as_str() {
        "error" => Level::ERROR,
        "warn" => Level::WARN,
        "debug" => Level::DEBUG,
        "trace" => Level::TRACE,
        _ => Level::INFO,
    };
    // `Level` orders by verbosity: the lesser of the two is the quieter.
    let rmcp = level.min(Level::WARN);
    Targets::new()
        .with_default(LevelFilter::from_level(level))
        .with_target("rmcp", LevelFilter::from_level(rmcp))
        .with_target(crate::telemetry::TRACE_TARGET, LevelFilter::OFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmcp_never_logs_below_warn_and_the_rest_follows_the_level() {
        for asked in ["error", "warn", "info", "debug", "trace", "nonsense"] {
            let t = log_targets(asked);
            assert!(!t.would_enable("rmcp", &Level::INFO), "{asked}");
            assert!(!t.would_enable("rmcp::service", &Level::DEBUG), "{asked}");
            assert!(t.would_enable("rmcp", &Level::ERROR), "{asked}");
            assert!(!t.would_enable(crate::telemetry::TRACE_TARGET, &Level::ERROR));
        }
        assert!(log_targets("trace").would_enable("bridle_gateway", &Level::TRACE));
        assert!(log_targets("info").would_enable("kberg_server", &Level::INFO));
        assert!(!log_targets("info").would_enable("kberg_server", &Level::DEBUG));
        assert!(log_targets("warn").would_enable("rmcp", &Level::WARN));
        assert!(!log_targets("error").would_enable("rmcp", &Level::WARN));
    }
}
