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
//!
//! A panic's message can quote the data the code failed on (slicing a string past a character
//! boundary quotes the string; an `expect` on a parse quotes the parse error, which may quote
//! its input), and Rust's default panic hook prints it to stderr. Binaries that serve the
//! gateway call [`install_panic_hook`]: a panic is logged as an `ERROR` event naming the thread
//! and the code location only (and the backtrace when `RUST_BACKTRACE` asks for one, which
//! holds code, not data). The message itself is logged only when the operator opts in with
//! [`PanicMessages::Logged`] (`BRIDLE_LOG_PANIC_MESSAGES=1` in the `bridle` binary), for
//! debugging on data that holds no secret.
//!
//! A field written with `%` (its `Display`) goes into a text log line as it is, so a line
//! break in text that an agent, an upstream, a client or a file chose (a tool name an upstream
//! lists, a tag an agent asks for, an error quoting a project document) would start a line of
//! its own that reads as the gateway's. Such fields are written with `?`, or, for an error
//! whose sentence reads better than its `Debug`, through [`one_line`], which escapes control
//! characters.

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

/// Whether [`install_panic_hook`] logs a panic's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PanicMessages {
    /// Only the thread and the code location (the default: a message may quote data).
    Withheld,
    /// The message too, for debugging on data that holds no secret.
    Logged,
}

impl PanicMessages {
    /// From the value of `BRIDLE_LOG_PANIC_MESSAGES`: `1` or `true` logs messages; anything
    /// else, or no value, withholds them.
    pub fn from_env_value(value: Option<&str>) -> Self {
        match value.map(str::trim) {
            Some(v) if v == "1" || v.eq_ignore_ascii_case("true") => Self::Logged,
            _ => Self::Withheld,
        }
    }
}

/// Replaces the process's panic hook with one that logs each panic as an `ERROR` event (target
/// `bridle::panic`) through the installed `tracing` subscriber, so it reaches the log in its
/// format (text or JSON) instead of raw stderr lines. The event names the panicking thread and
/// the source location; with `RUST_BACKTRACE` set it carries the backtrace; with
/// [`PanicMessages::Logged`] it carries the panic's message. Call it after the subscriber is
/// installed; panics inside tasks are still caught by their runtime as before (the hook only
/// changes what is written).
///
/// ```
/// bridle_gateway::logging::install_panic_hook(bridle_gateway::logging::PanicMessages::Withheld);
/// ```
pub fn install_panic_hook(messages: PanicMessages) {
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("<unnamed>");
        let location = info
            .location()
            .map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_else(|| "<unknown>".to_string());
        let backtrace = std::backtrace::Backtrace::capture();
        let backtrace = match backtrace.status() {
            std::backtrace::BacktraceStatus::Captured => Some(backtrace.to_string()),
            _ => None,
        };
        match messages {
            PanicMessages::Withheld => tracing::error!(
                target: "bridle::panic",
                thread,
                location = %location,
                backtrace = backtrace.as_deref(),
                "a thread panicked (its message is withheld: it may quote the data it failed on; \
                 BRIDLE_LOG_PANIC_MESSAGES=1 logs it)"
            ),
            PanicMessages::Logged => {
                let payload = info.payload();
                let panic_message = payload
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("<not a string>");
                tracing::error!(
                    target: "bridle::panic",
                    thread,
                    location = %location,
                    backtrace = backtrace.as_deref(),
                    panic_message,
                    "a thread panicked"
                )
            }
        }
    }));
}

/// `value`'s `Display` with its control characters (line breaks, carriage returns, escape
/// sequences), the Unicode line and paragraph separators and the bidirectional controls
/// escaped (`\n`, `\u{1b}`, `\u{202e}`), for a log field or an error whose text came from
/// outside: it stays on its line and shows in its order.
pub fn one_line<T: std::fmt::Display>(value: T) -> OneLine<T> {
    OneLine(value)
}

/// What [`one_line`] answers.
#[derive(Debug, Clone, Copy)]
pub struct OneLine<T>(T);

impl<T: std::fmt::Display> std::fmt::Display for OneLine<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write;
        /// Passes text through to `f`, escaping what would leave the line.
        struct Escaping<'a, 'b>(&'a mut std::fmt::Formatter<'b>);
        impl Write for Escaping<'_, '_> {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                for c in s.chars() {
                    if c.is_control() || kberg_core::escaped_when_quoted(c) {
                        write!(self.0, "{}", c.escape_default())?;
                    } else {
                        self.0.write_char(c)?;
                    }
                }
                Ok(())
            }
        }
        write!(Escaping(f), "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_escapes_what_would_start_a_line() {
        let forged = "tool\n2026-01-01T00:00:00Z  INFO bridle: admin logged in\r\u{1b}[2J\u{2028}x";
        let shown = one_line(forged).to_string();
        assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
        assert!(!shown.contains('\u{2028}'), "{shown}");
        assert!(!one_line("a\u{202e}b").to_string().contains('\u{202e}'));
        assert!(shown.starts_with("tool\\n2026"), "{shown}");
        assert_eq!(one_line("plain `name` é").to_string(), "plain `name` é");
    }

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
