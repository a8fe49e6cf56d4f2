//! Typed configuration of the HTTP transport: where to listen, who may connect, and how much a
//! client may ask for.
//!
//! Every guardrail of the wire has a field here with a safe default: loopback address, the
//! loopback Host/Origin allow-lists (DNS-rebinding protection), and finite limits. Nothing here
//! reads the environment; binaries map their flags and variables onto these structs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::auth::{Authenticator, OpenAccess};
use crate::session_store::SessionStore;

/// How much a client may ask of the server. Each limit is enforced on the wire and answered
/// with a stable status when exceeded (see the crate documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest accepted POST body, in bytes. Larger bodies get `413 Payload Too Large`.
    pub max_body_bytes: usize,
    /// Most concurrent 2025-11-25 sessions. An `initialize` beyond it gets
    /// `503 Service Unavailable`.
    pub max_sessions: usize,
    /// Most concurrent 2025-11-25 sessions one principal may hold (initialized here, or
    /// resumed from the session store), so that one principal cannot take all of
    /// [`Limits::max_sessions`] and lock every other one out until its sessions expire. An
    /// `initialize` beyond it gets `503 Service Unavailable` with the code
    /// `too_many_sessions_for_principal`. `None` (the default): a quarter of `max_sessions`,
    /// at least 1 (64 of the default 256), or all of `max_sessions` when the authenticator
    /// serves one principal only ([`Authenticator::single_principal`], as [`OpenAccess`]
    /// does). `Some(0)` is a configuration error.
    pub max_sessions_per_principal: Option<usize>,
    /// Most concurrently open listen streams: GET SSE streams (2025-11-25) plus
    /// `subscriptions/listen` streams (2026-07-28). One beyond it gets `503`.
    pub max_listen_streams: usize,
    /// Most concurrently open listen streams one principal may hold, so that one principal
    /// cannot take all of [`Limits::max_listen_streams`] and leave every other client without
    /// server-to-client notifications. A stream beyond it gets `503 Service Unavailable` with
    /// the code `too_many_streams_for_principal`. `None` (the default): a quarter of
    /// `max_listen_streams`, at least 1 (64 of the default 256), or all of
    /// `max_listen_streams` when the authenticator serves one principal only
    /// ([`Authenticator::single_principal`]). `Some(0)` is a configuration error.
    pub max_listen_streams_per_principal: Option<usize>,
    /// A session with no activity for this long is closed; later requests naming it get
    /// `404 Not Found`. `None` (or a duration too long for the clock, such as `Duration::MAX`)
    /// keeps idle sessions until they are deleted. Default 30 minutes
    /// (rmcp's is 5): agents keep a session open while their user is away for minutes, and
    /// many clients do not re-initialize on a `404`; an idle session costs about 27 kB, so
    /// the default [`Limits::max_sessions`] bounds idle sessions at about 7 MB. Idle means no
    /// message either way, no request in flight and no GET stream open.
    pub session_idle_timeout: Option<Duration>,
    /// Most `tools/call` requests one principal may have in flight at once. A call beyond it
    /// is answered at once with an error result whose code is `too_many_calls`.
    pub max_calls_per_principal: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 4 * 1024 * 1024,
            max_sessions: 256,
            max_sessions_per_principal: None,
            max_listen_streams: 256,
            max_listen_streams_per_principal: None,
            session_idle_timeout: Some(Duration::from_secs(30 * 60)),
            max_calls_per_principal: 64,
        }
    }
}

impl Limits {
    /// Sets [`Limits::max_body_bytes`].
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets [`Limits::max_sessions`].
    pub fn max_sessions(mut self, n: usize) -> Self {
        self.max_sessions = n;
        self
    }

    /// Sets [`Limits::max_sessions_per_principal`].
    pub fn max_sessions_per_principal(mut self, n: usize) -> Self {
        self.max_sessions_per_principal = Some(n);
        self
    }

    /// The number of sessions one principal may hold: [`Limits::max_sessions_per_principal`],
    /// or when that is `None` a quarter of [`Limits::max_sessions`], at least 1 (the server
    /// uses all of it instead when its authenticator serves one principal only).
    pub fn sessions_per_principal(&self) -> usize {
        self.max_sessions_per_principal
            .unwrap_or((self.max_sessions / 4).max(1))
    }

    /// Sets [`Limits::max_listen_streams`].
    pub fn max_listen_streams(mut self, n: usize) -> Self {
        self.max_listen_streams = n;
        self
    }

    /// Sets [`Limits::max_listen_streams_per_principal`].
    pub fn max_listen_streams_per_principal(mut self, n: usize) -> Self {
        self.max_listen_streams_per_principal = Some(n);
        self
    }

    /// The number of listen streams one principal may hold:
    /// [`Limits::max_listen_streams_per_principal`], or when that is `None` a quarter of
    /// [`Limits::max_listen_streams`], at least 1 (the server uses all of it instead when its
    /// authenticator serves one principal only).
    pub fn listen_streams_per_principal(&self) -> usize {
        self.max_listen_streams_per_principal
            .unwrap_or((self.max_listen_streams / 4).max(1))
    }

    /// Sets [`Limits::session_idle_timeout`].
    pub fn session_idle_timeout(mut self, idle: Option<Duration>) -> Self {
        self.session_idle_timeout = idle;
        self
    }

    /// Sets [`Limits::max_calls_per_principal`].
    pub fn max_calls_per_principal(mut self, n: usize) -> Self {
        self.max_calls_per_principal = n;
        self
    }
}

/// The hosts a loopback server answers to by default.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The browser origins a loopback server accepts by default (any port).
pub const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// Configuration of [`serve`](crate::serve), [`HttpServer`](crate::HttpServer) and
/// [`router`](crate::router).
#[derive(Clone)]
#[non_exhaustive]
pub struct HttpConfig {
    /// Where [`serve`](crate::serve) listens. Default `127.0.0.1:8765`; port 0 picks a free one.
    pub addr: SocketAddr,
    /// The path of the MCP endpoint. Default `/mcp`.
    pub path: String,
    /// Maps each request's credentials to a principal. Default: [`OpenAccess`] (anonymous,
    /// no grants), which is only sensible on loopback.
    pub auth: Arc<dyn Authenticator>,
    /// Limits on bodies, sessions, streams and calls.
    pub limits: Limits,
    /// Accepted `Host` values (`name` matches any port, `name:port` only that port). Default:
    /// [`LOOPBACK_HOSTS`]. An empty list accepts every host (not recommended).
    pub allowed_hosts: Vec<String>,
    /// Accepted `Origin` values (`scheme://host:port`, `:*` for any port, `null`). Requests
    /// without an `Origin` header are accepted. Default: [`LOOPBACK_ORIGINS`].
    pub allowed_origins: Vec<String>,
    /// Interval of SSE keep-alive comments. Default 15 s.
    pub sse_keep_alive: Option<Duration>,
    /// Cancelled to end every session and stream (graceful shutdown). [`serve`](crate::serve)
    /// cancels it when its shutdown signal fires; users of [`router`](crate::router) cancel it
    /// themselves.
    pub shutdown: CancellationToken,
    /// Where 2025-11-25 sessions are kept for other instances behind the same address, so one
    /// resumes a session another initialized (see [`SessionStore`]). Default `None`: a
    /// session lives in this process only, and a load balancer must route by session.
    pub session_store: Option<Arc<dyn SessionStore>>,
    /// With a [`session_store`](HttpConfig::session_store): how old this instance's last
    /// look in the store at a session it holds may be before a request of that session looks
    /// again, so that a session its client ended on another instance (a `DELETE` there removes
    /// it from the store) ends here too and is answered `404`. Default 1 s; zero looks on every
    /// request. One look per session per interval at most, shared by the session's concurrent
    /// requests; a store that fails or is slow to answer a look ends no session (see
    /// [`SessionStore`]). Without a store this is unused and no request looks anywhere.
    pub session_recheck_interval: Duration,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("addr", &self.addr)
            .field("path", &self.path)
            .field("limits", &self.limits)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("allowed_origins", &self.allowed_origins)
            .field("session_store", &self.session_store.is_some())
            .field("session_recheck_interval", &self.session_recheck_interval)
            .finish_non_exhaustive()
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 8765)),
            path: "/mcp".into(),
            auth: Arc::new(OpenAccess::anonymous()),
            limits: Limits::default(),
            allowed_hosts: LOOPBACK_HOSTS.iter().map(|s| s.to_string()).collect(),
            allowed_origins: LOOPBACK_ORIGINS.iter().map(|s| s.to_string()).collect(),
            sse_keep_alive: Some(Duration::from_secs(15)),
            shutdown: CancellationToken::new(),
            session_store: None,
            session_recheck_interval: Duration::from_secs(1),
        }
    }
}

impl HttpConfig {
    /// The default configuration listening on `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            ..Self::default()
        }
    }

    /// Sets the endpoint path (must start with `/`).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.path = path.into();
        self
    }

    /// Sets the authenticator.
    pub fn auth(mut self, auth: impl Authenticator + 'static) -> Self {
        self.auth = Arc::new(auth);
        self
    }

    /// Sets a shared authenticator.
    pub fn auth_arc(mut self, auth: Arc<dyn Authenticator>) -> Self {
        self.auth = auth;
        self
    }

    /// Keeps 2025-11-25 sessions in `store`, so another instance behind the same address
    /// resumes them (see [`SessionStore`]).
    pub fn session_store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.session_store = Some(store);
        self
    }

    /// Sets [`HttpConfig::session_recheck_interval`].
    pub fn session_recheck_interval(mut self, every: Duration) -> Self {
        self.session_recheck_interval = every;
        self
    }

    /// Sets the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Replaces the accepted `Host` values.
    pub fn allowed_hosts<I: IntoIterator<Item = S>, S: Into<String>>(mut self, hosts: I) -> Self {
        self.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an accepted `Host` value.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Replaces the accepted `Origin` values.
    pub fn allowed_origins<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        origins: I,
    ) -> Self {
        self.allowed_origins = origins.into_iter().map(Into::into).collect();
        self
    }

    /// Adds an accepted `Origin` value.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// Sets the SSE keep-alive interval.
    pub fn sse_keep_alive(mut self, every: Option<Duration>) -> Self {
        self.sse_keep_alive = every;
        self
    }

    /// Uses this token for shutdown.
    pub fn shutdown_token(mut self, token: CancellationToken) -> Self {
        self.shutdown = token;
        self
    }
}
