//! The aggregator's typed configuration and its checks.
//!
//! Everything that can be refused is refused here, before any upstream is contacted: a bad
//! separator, a namespace that is not a valid name part or that could make two upstreams' names
//! collide, duplicate namespaces, a header that is not a valid HTTP header, and write rules whose
//! pattern is empty. Refusing at config time keeps the runtime free of ambiguity: every
//! namespaced name splits back into exactly one (namespace, tool) pair.

use std::collections::HashSet;
use std::time::Duration;

use super::thread::UpstreamThread;

use kberg_core::WriteCapability;

use super::pattern::Pattern;
use super::stderr::ChildStderr;

/// The separator between a namespace and an upstream tool name when none is configured.
pub const DEFAULT_SEPARATOR: &str = "__";

/// The longest name MCP clients accept (and kberg-core checks).
pub const MAX_NAME_LEN: usize = 128;

/// How the aggregator reaches one upstream MCP server. Its `Debug` shows the environment's
/// and headers' names, never their values, and the URL without its user part and query.
#[derive(Clone)]
#[non_exhaustive]
pub enum UpstreamTransport {
    /// A child process spoken to over its stdin and stdout.
    Stdio {
        /// The program to run.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables (credentials a local server reads from its environment).
        env: Vec<(String, String)>,
        /// Which of the aggregator's own environment variables the child starts with: `None`
        /// (the default) all of them, as a command started by hand would; `Some(names)` only
        /// those of `names` that are set, the child's environment otherwise cleared (see
        /// [`UpstreamTransport::inherit_env_only`]). `env` is added either way.
        inherit_env: Option<Vec<String>>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Extra headers sent with every request (credentials). Never shown to clients.
        headers: Vec<(String, String)>,
    },
}

impl std::fmt::Debug for UpstreamTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names =
            |pairs: &[(String, String)]| pairs.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        match self {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                inherit_env,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &names(env))
                .field("inherit_env", inherit_env)
                .finish(),
            UpstreamTransport::Http { headers, .. } => f
                .debug_struct("Http")
                .field("url", &self.shown_target())
                .field("headers", &names(headers))
                .finish(),
        }
    }
}

impl UpstreamTransport {
    /// What names this upstream in errors and log lines: the command, or the URL without its
    /// user part, query and fragment (where credentials in a URL go).
    pub(crate) fn shown_target(&self) -> String {
        match self {
            UpstreamTransport::Stdio { command, .. } => command.clone(),
            UpstreamTransport::Http { url, .. } => match reqwest::Url::parse(url) {
                Ok(mut u) => {
                    // Both only fail for URLs that cannot have a user part.
                    let _ = u.set_username("");
                    let _ = u.set_password(None);
                    u.set_query(None);
                    u.set_fragment(None);
                    u.to_string()
                }
                Err(_) => "the configured URL (unreadable)".into(),
            },
        }
    }

    /// A child process with no arguments or extra environment yet. It inherits the whole
    /// environment of the aggregator's process unless [`UpstreamTransport::inherit_env_only`]
    /// says otherwise.
    pub fn stdio(command: impl Into<String>) -> Self {
        UpstreamTransport::Stdio {
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            inherit_env: None,
        }
    }

    /// A Streamable HTTP endpoint with no extra headers yet.
    pub fn http(url: impl Into<String>) -> Self {
        UpstreamTransport::Http {
            url: url.into(),
            headers: Vec::new(),
        }
    }

    /// Adds an argument (child process only; ignored for HTTP).
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        if let UpstreamTransport::Stdio { args, .. } = &mut self {
            args.push(a.into());
        }
        self
    }

    /// Adds an environment variable (child process only; ignored for HTTP).
    pub fn env(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        if let UpstreamTransport::Stdio { env, .. } = &mut self {
            env.push((k.into(), v.into()));
        }
        self
    }

    /// Starts the child with a cleared environment: of the aggregator's own variables it gets
    /// only those named here that are set when it is spawned (read then, so a value changed
    /// between reconnections is followed), plus those added with [`UpstreamTransport::env`],
    /// which win over an inherited one of the same name. Calling it again replaces the list;
    /// an empty list inherits nothing. Child process only; ignored for HTTP.
    ///
    /// Without it a child inherits everything, which hands it whatever the operator exported
    /// before starting the aggregator (an admin token, a key) and which a server that prints
    /// its environment then prints. Names must be non-empty and without `=` or NUL
    /// (refused by [`AggregatorConfig::validate`] with `invalid_transport`).
    pub fn inherit_env_only<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let UpstreamTransport::Stdio { inherit_env, .. } = &mut self {
            *inherit_env = Some(names.into_iter().map(Into::into).collect());
        }
        self
    }

    /// Adds a header (HTTP only; ignored for a child process).
    pub fn header(mut self, k: impl Into<String>, v: impl Into<String>) -> Self {
        if let UpstreamTransport::Http { headers, .. } = &mut self {
            headers.push((k.into(), v.into()));
        }
        self
    }
}

/// How long a forwarded request (`tools/call`, `prompts/get`, `resources/read`) may wait for its
/// upstream's answer when no other timeout is configured.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest call timeout [`AggregatorConfig::validate`] accepts: a day. A call still
/// unanswered after that is stuck, and the aggregator reckons deadlines from it.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(86_400);

/// How many forwarded requests one upstream has in flight at most, when no other bound is
/// configured. Half of a Kberg server's default per-caller limit (64), since an upstream sees
/// the whole aggregator as one caller.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 32;

/// One upstream MCP server and the namespace its tools appear under. Its `Debug` shows how many
/// values [`UpstreamConfig::stderr_redact`] holds, never the values (they are credentials).
#[derive(Clone)]
#[non_exhaustive]
pub struct UpstreamConfig {
    /// The namespace (`fs` makes `read_file` appear as `fs__read_file`).
    pub namespace: String,
    /// How to reach it.
    pub transport: UpstreamTransport,
    /// How long one forwarded `tools/call`, `prompts/get` or `resources/read` may wait for the
    /// upstream's answer (default [`DEFAULT_CALL_TIMEOUT`], at most [`MAX_CALL_TIMEOUT`]). On
    /// expiry the request is cancelled
    /// upstream (`notifications/cancelled`) and the caller gets the stable code
    /// `upstream_timeout`.
    pub call_timeout: Duration,
    /// How many forwarded requests may be in flight to this upstream at once (default
    /// [`DEFAULT_MAX_IN_FLIGHT`]). Further requests wait for a free slot, and the wait counts
    /// against `call_timeout`: an upstream that limits its callers (a Kberg server answers
    /// `too_many_calls` past its per-caller limit) is never overrun by the aggregator's clients.
    pub max_in_flight: usize,
    /// What becomes of a child-process upstream's standard error (default
    /// [`ChildStderr::Log`]: logged line by line, its environment's values redacted). Ignored
    /// for HTTP upstreams.
    pub stderr: ChildStderr,
    /// A child-process upstream's credentials, each replaced by [`REDACTED`] in its logged
    /// stderr lines and in everything relayed from it to the aggregator's clients (log and
    /// progress messages, sampling and elicitation requests).
    /// `None` (the default) redacts every value of the child's configured environment of at
    /// least [`MIN_REDACTED_LEN`] bytes: safe when nothing says which of them are credentials.
    /// A caller that knows sets exactly those, so that a logged or relayed URL or path stays
    /// readable. For an HTTP upstream, whose header values and URL credentials are redacted
    /// anyway, these values are redacted besides them: forms of its credential that no header
    /// shows whole (a header template that glues the token to other text).
    ///
    /// [`MIN_REDACTED_LEN`]: super::MIN_REDACTED_LEN
    /// [`REDACTED`]: super::REDACTED
    pub stderr_redact: Option<Vec<String>>,
}

impl std::fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("namespace", &self.namespace)
            .field("transport", &self.transport)
            .field("call_timeout", &self.call_timeout)
            .field("max_in_flight", &self.max_in_flight)
            .field("stderr", &self.stderr)
            .field(
                "stderr_redact",
                &self
                    .stderr_redact
                    .as_ref()
                    .map(|v| format!("{} values", v.len())),
            )
            .finish()
    }
}

impl UpstreamConfig {
    /// An upstream under `namespace`, with the default call timeout.
    pub fn new(namespace: impl Into<String>, transport: UpstreamTransport) -> Self {
        Self {
            namespace: namespace.into(),
            transport,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            stderr: ChildStderr::default(),
            stderr_redact: None,
        }
    }

    /// Redacts exactly these values (the child's credentials) from its logged stderr lines and
    /// from what is relayed from it to clients, instead of every value of its environment. For
    /// an HTTP upstream they are redacted besides its header values and URL credentials.
    pub fn stderr_redact(mut self, values: impl IntoIterator<Item = String>) -> Self {
        self.stderr_redact = Some(values.into_iter().collect());
        self
    }

    /// Sets what becomes of a child-process upstream's standard error.
    pub fn stderr(mut self, stderr: ChildStderr) -> Self {
        self.stderr = stderr;
        self
    }

    /// Sets how many forwarded requests may be in flight to this upstream at once (at least 1).
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n;
        self
    }

    /// Sets how long one forwarded request may wait for this upstream's answer.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }
}

/// Assigns a write capability to every namespaced tool name matching a pattern.
#[derive(Debug, Clone)]
pub struct WriteRule {
    /// `*` matches any run of characters, `?` exactly one; everything else matches itself.
    pub pattern: String,
    /// The capability a caller needs to call the matching tools.
    pub capability: WriteCapability,
}

/// Reconnection timing for a dead upstream: `initial`, doubled after each failed attempt, at
/// most `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// The first wait after a disconnect.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(250),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The wait before attempt `n` (0-based) after a disconnect, without jitter: the floor of
    /// what [`Backoff::delays`] yields.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The waits before each reconnection attempt: `initial`, doubling, each with a random
    /// jitter of up to its own length added (so upstreams that fail together do not all retry
    /// at the same instant), never more than `max`. Endless; a fresh series starts after each
    /// successful connection.
    pub fn delays(&self) -> impl Iterator<Item = Duration> + Send + use<> {
        let max = self.max.max(self.initial);
        backon::BackoffBuilder::build(
            backon::ExponentialBuilder::new()
                .with_min_delay(self.initial)
                .with_max_delay(max)
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        )
        .map(move |d| d.min(max))
    }
}

/// The whole aggregator configuration.
#[derive(Debug, Clone)]
pub struct AggregatorConfig {
    /// The upstreams.
    pub upstreams: Vec<UpstreamConfig>,
    /// Between namespace and tool name; default [`DEFAULT_SEPARATOR`].
    pub separator: String,
    /// Write capabilities by pattern; the first matching rule wins, unmatched tools are Read.
    pub write_rules: Vec<WriteRule>,
    /// Reconnection timing.
    pub backoff: Backoff,
    /// How long starting a connection (spawn or connect, `initialize`, first `tools/list`) may
    /// take before the upstream counts as unavailable: an upstream that hangs cannot stall its
    /// supervisor.
    pub connect_timeout: Duration,
    /// Where the upstream clients run (default [`UpstreamRuntime::Own`]).
    pub runtime: UpstreamRuntime,
}

/// Where an aggregator's upstream clients run: the supervisors, the rmcp client sessions with
/// their HTTP connections and child-process pipes, and the handlers of what upstreams send
/// back (progress, logs, their own requests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamRuntime {
    /// A current-thread tokio runtime on a thread of its own (`kberg-upstreams`), one per
    /// aggregator, which ends once the aggregator is shut down or dropped and its supervisors
    /// have stopped. A forwarded call hands its request to that thread once and gets its answer
    /// back once; the rmcp client's own steps in between (its service loop, its transport
    /// worker, the HTTP connection) follow each other on that one thread instead of waking the
    /// workers of the app's runtime. Measured with 32 clients against a Kberg upstream over
    /// HTTP, this cut the aggregated call's CPU by about a quarter and raised its throughput
    /// by about a third (`benches/README.md`). The upstream clients then share one core, which
    /// is plenty for the tool calls of agents (several thousand a second on it).
    #[default]
    Own,
    /// Like [`UpstreamRuntime::Own`], on a thread the caller started and may hand to other
    /// aggregators too: an app that runs many aggregators (one per upstream and credential)
    /// keeps the gain without a thread per aggregator.
    Thread(UpstreamThread),
    /// The runtime [`Aggregator::start`](super::Aggregator::start) is called on; called
    /// outside one, it is refused with [`ConfigError::RuntimeUnavailable`]. For an app that
    /// wants every task on its own runtime, or a test that pauses that runtime's clock.
    Caller,
}

impl Default for AggregatorConfig {
    fn default() -> Self {
        Self {
            upstreams: Vec::new(),
            separator: DEFAULT_SEPARATOR.to_string(),
            write_rules: Vec::new(),
            backoff: Backoff::default(),
            connect_timeout: Duration::from_secs(30),
            runtime: UpstreamRuntime::default(),
        }
    }
}

impl AggregatorConfig {
    /// An empty configuration with the default separator and backoff.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an upstream.
    pub fn upstream(mut self, u: UpstreamConfig) -> Self {
        self.upstreams.push(u);
        self
    }

    /// Sets the separator.
    pub fn separator(mut self, sep: impl Into<String>) -> Self {
        self.separator = sep.into();
        self
    }

    /// Adds a write rule.
    pub fn write_rule(mut self, pattern: impl Into<String>, capability: WriteCapability) -> Self {
        self.write_rules.push(WriteRule {
            pattern: pattern.into(),
            capability,
        });
        self
    }

    /// Sets the connection timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets where the upstream clients run (see [`UpstreamRuntime`]).
    pub fn runtime(mut self, runtime: UpstreamRuntime) -> Self {
        self.runtime = runtime;
        self
    }

    /// Sets the reconnection timing.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Checks everything that can be checked without contacting an upstream.
    pub fn validate(&self) -> Result<Vec<(Pattern, WriteCapability)>, ConfigError> {
        if self.separator.is_empty() || !self.separator.bytes().all(name_byte) {
            return Err(ConfigError::InvalidSeparator {
                separator: self.separator.clone(),
            });
        }
        let mut seen = HashSet::new();
        for u in &self.upstreams {
            check_namespace(&u.namespace, &self.separator)?;
            if u.max_in_flight == 0 || u.max_in_flight > tokio::sync::Semaphore::MAX_PERMITS {
                return Err(ConfigError::InvalidTransport {
                    namespace: u.namespace.clone(),
                    reason: "max_in_flight must be at least 1".into(),
                });
            }
            if u.call_timeout.is_zero() {
                return Err(ConfigError::InvalidTransport {
                    namespace: u.namespace.clone(),
                    reason: "the call timeout is zero".into(),
                });
            }
            if u.call_timeout > MAX_CALL_TIMEOUT {
                return Err(ConfigError::InvalidTransport {
                    namespace: u.namespace.clone(),
                    reason: format!(
                        "the call timeout is longer than {} s (a day)",
                        MAX_CALL_TIMEOUT.as_secs()
                    ),
                });
            }
            if !seen.insert(u.namespace.as_str()) {
                return Err(ConfigError::DuplicateNamespace {
                    namespace: u.namespace.clone(),
                });
            }
            if let UpstreamTransport::Http { headers, url } = &u.transport {
                if url.is_empty() {
                    return Err(ConfigError::InvalidTransport {
                        namespace: u.namespace.clone(),
                        reason: "the URL is empty".into(),
                    });
                }
                for (k, v) in headers {
                    if axum::http::HeaderName::try_from(k.as_str()).is_err()
                        || axum::http::HeaderValue::try_from(v.as_str()).is_err()
                    {
                        return Err(ConfigError::InvalidTransport {
                            namespace: u.namespace.clone(),
                            reason: format!("the header `{k}` is not a valid HTTP header"),
                        });
                    }
                }
            }
            if let UpstreamTransport::Stdio {
                command,
                inherit_env,
                ..
            } = &u.transport
            {
                if command.is_empty() {
                    return Err(ConfigError::InvalidTransport {
                        namespace: u.namespace.clone(),
                        reason: "the command is empty".into(),
                    });
                }
                if let Some(bad) = inherit_env
                    .iter()
                    .flatten()
                    .find(|n| n.is_empty() || n.contains(['=', '\0']))
                {
                    return Err(ConfigError::InvalidTransport {
                        namespace: u.namespace.clone(),
                        reason: format!(
                            "the inherited variable name `{}` is empty or contains `=` or NUL",
                            bad.escape_debug()
                        ),
                    });
                }
            }
        }
        self.write_rules
            .iter()
            .map(|r| {
                if r.pattern.is_empty() {
                    Err(ConfigError::InvalidPattern {
                        pattern: r.pattern.clone(),
                    })
                } else {
                    Ok((Pattern::new(&r.pattern), r.capability.clone()))
                }
            })
            .collect()
    }
}

fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')
}

/// A namespace must be a valid name part, must not contain the separator, and must not end with
/// a proper prefix of the separator (with `__`, `a_` + `__` + `x` would read as `a` + `__` +
/// `_x`): then every namespaced name splits at the first separator into exactly one
/// (namespace, tool) pair, and no upstream's tool can take another upstream's name.
fn check_namespace(ns: &str, sep: &str) -> Result<(), ConfigError> {
    let refuse = |reason: &str| {
        Err(ConfigError::InvalidNamespace {
            namespace: ns.to_string(),
            reason: reason.to_string(),
        })
    };
    if ns.is_empty() {
        return refuse("it is empty");
    }
    if !ns.bytes().all(name_byte) {
        return refuse("it may only use ASCII letters, digits, `_`, `-` and `.`");
    }
    if ns.contains(sep) {
        return refuse("it contains the separator");
    }
    if (1..sep.len()).any(|k| ns.ends_with(&sep[..k])) {
        return refuse("it ends with the start of the separator");
    }
    if ns.len() + sep.len() >= MAX_NAME_LEN {
        return refuse("it leaves no room for a tool name within 128 characters");
    }
    Ok(())
}

/// Why a configuration was refused. Each variant has a stable [`ConfigError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The separator is empty or uses characters names may not contain.
    #[error("the separator `{separator}` must be non-empty ASCII letters, digits, `_`, `-` or `.`")]
    InvalidSeparator {
        /// The separator.
        separator: String,
    },
    /// A namespace is unusable.
    #[error("the namespace `{namespace}` is refused: {reason}")]
    InvalidNamespace {
        /// The namespace.
        namespace: String,
        /// Why.
        reason: String,
    },
    /// Two upstreams share a namespace.
    #[error("the namespace `{namespace}` is configured twice")]
    DuplicateNamespace {
        /// The namespace.
        namespace: String,
    },
    /// A transport setting is unusable.
    #[error("the upstream `{namespace}` is misconfigured: {reason}")]
    InvalidTransport {
        /// The upstream's namespace.
        namespace: String,
        /// Why.
        reason: String,
    },
    /// A write rule's pattern is empty.
    #[error("the write rule pattern `{pattern}` is empty")]
    InvalidPattern {
        /// The pattern.
        pattern: String,
    },
    /// A write rule's capability could not be declared in the registry (an empty id, or a
    /// deprecated capability whose replacement is not declared).
    #[error("the write rule capability `{capability}` cannot be declared: {reason}")]
    InvalidCapability {
        /// The capability id.
        capability: String,
        /// Why the registry refused it.
        reason: String,
    },
    /// The thread of [`UpstreamRuntime::Own`], or its runtime, could not be started, or
    /// [`UpstreamRuntime::Caller`] was asked for outside a tokio runtime.
    #[error("the upstream clients' runtime could not start: {reason}")]
    RuntimeUnavailable {
        /// The system's error.
        reason: String,
    },
}

impl ConfigError {
    /// A stable code for logs and callers.
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::InvalidSeparator { .. } => "invalid_separator",
            ConfigError::InvalidNamespace { .. } => "invalid_namespace",
            ConfigError::DuplicateNamespace { .. } => "duplicate_namespace",
            ConfigError::InvalidTransport { .. } => "invalid_transport",
            ConfigError::InvalidPattern { .. } => "invalid_pattern",
            ConfigError::InvalidCapability { .. } => "invalid_capability",
            ConfigError::RuntimeUnavailable { .. } => "runtime_unavailable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_that_could_collide_are_refused() {
        assert!(check_namespace("fs", "__").is_ok());
        assert_eq!(
            check_namespace("a__b", "__").map_err(|e| e.code()),
            Err("invalid_namespace")
        );
        assert!(check_namespace("a_", "__").is_err());
        assert!(check_namespace("a b", "__").is_err());
        assert!(check_namespace("", "__").is_err());
        assert!(check_namespace(&"x".repeat(126), "__").is_err());
        // A single-character separator has no proper prefix to worry about.
        assert!(check_namespace("a_", ".").is_ok());
        assert!(check_namespace("a.b", ".").is_err());
    }

    #[test]
    fn bad_separators_and_duplicates_are_refused() {
        let c = AggregatorConfig::new().separator("/");
        assert_eq!(
            c.validate().map(|_| ()).map_err(|e| e.code()),
            Err("invalid_separator")
        );
        let c = AggregatorConfig::new().separator("");
        assert!(c.validate().is_err());
        let c = AggregatorConfig::new()
            .upstream(UpstreamConfig::new("a", UpstreamTransport::stdio("x")))
            .upstream(UpstreamConfig::new("a", UpstreamTransport::stdio("y")));
        assert_eq!(
            c.validate().map(|_| ()).map_err(|e| e.code()),
            Err("duplicate_namespace")
        );
        let c = AggregatorConfig::new().upstream(UpstreamConfig::new(
            "h",
            UpstreamTransport::http("http://127.0.0.1:1/mcp").header("bad header", "v"),
        ));
        assert_eq!(
            c.validate().map(|_| ()).map_err(|e| e.code()),
            Err("invalid_transport")
        );
        for bad in ["", "A=B", "A\0"] {
            let c = AggregatorConfig::new().upstream(UpstreamConfig::new(
                "s",
                UpstreamTransport::stdio("x").inherit_env_only(["PATH", bad]),
            ));
            assert_eq!(
                c.validate().map(|_| ()).map_err(|e| e.code()),
                Err("invalid_transport"),
                "{bad:?}"
            );
        }
        let c = AggregatorConfig::new().upstream(UpstreamConfig::new(
            "s",
            UpstreamTransport::stdio("x").inherit_env_only(["PATH", "HOME"]),
        ));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(500),
        };
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(1), Duration::from_millis(200));
        assert_eq!(b.delay(2), Duration::from_millis(400));
        assert_eq!(b.delay(3), Duration::from_millis(500));
        assert_eq!(b.delay(u32::MAX), Duration::from_millis(500));
        // The jittered series stays between the plain delay and twice it, capped at `max`.
        for (n, d) in b.delays().take(40).enumerate() {
            let floor = b.delay(u32::try_from(n).unwrap_or(u32::MAX));
            assert!(
                d >= floor && d <= (floor * 2).min(b.max),
                "attempt {n}: {d:?}"
            );
        }
    }
}

#[cfg(test)]
mod redaction_tests {
    use super::UpstreamTransport;

    #[test]
    fn credentials_are_redacted_from_what_is_shown() {
        let t = UpstreamTransport::http(
            "https://bot:s3cret-pass@mcp.example/v1?api_key=s3cret-key&region=eu#frag",
        )
        .header("authorization", "Bearer s3cret-token");
        assert_eq!(t.shown_target(), "https://mcp.example/v1");
        let debug = format!("{t:?}");
        assert!(!debug.contains("s3cret"), "{debug}");
        assert!(debug.contains("authorization"), "{debug}");

        let t = UpstreamTransport::stdio("server")
            .env("API_TOKEN", "s3cret-env")
            .env("LEVEL", "1");
        let debug = format!("{t:?}");
        assert!(
            !debug.contains("s3cret") && debug.contains("API_TOKEN"),
            "{debug}"
        );

        // The values to redact are credentials too: a debug print shows how many there are.
        let c = super::UpstreamConfig::new("up", UpstreamTransport::stdio("server"))
            .stderr_redact(["s3cret-listed".to_string()]);
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("s3cret") && debug.contains("1 values"),
            "{debug}"
        );
    }
}
