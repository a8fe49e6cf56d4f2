//! [`AdminServer`]: the admin API on its own listener, loopback unless asked otherwise, with
//! TCP_NODELAY on every accepted socket (small JSON answers must not wait for the peer's
//! delayed ACK) and graceful shutdown.
//!
//! The listener answers only requests whose `Host` names it: a loopback name or address, the
//! address it is bound to, a host added with [`AdminServer::allow_host`], or the host of one of
//! the web panel's allowed origins. Anything else is refused 403 `host_not_allowed` before any
//! route runs (a missing or malformed `Host` is 400 `invalid_host`), so a web page that rebinds
//! its own name to 127.0.0.1 (DNS rebinding) reaches neither the API nor the panel, as the MCP
//! listener refuses it there.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::ListenerExt;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use super::{AdminState, BASE_PATH, router};

/// Why the admin API could not listen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminServeError {
    /// A non-loopback address through [`AdminServer::bind`].
    #[error(
        "the admin API listens on loopback only; `{0}` is not (use AdminServer::bind_exposed behind TLS)"
    )]
    NotLoopback(SocketAddr),
    /// The admin API's `login_limits` has a zero count or window.
    #[error("admin API login_limits: every count and the window must be greater than zero")]
    Limits,
    /// A host given to [`AdminServer::allow_host`] is not `name` or `name:port`.
    #[error("admin listener allowed host `{0}` is not `name` or `name:port`")]
    Host(String),
    /// The web panel's configuration is refused.
    #[cfg(feature = "panel")]
    #[error("web panel: {0}")]
    Panel(#[from] crate::panel::PanelConfigError),
    /// The socket could not be bound or served.
    #[error("admin API on {addr}: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The admin API, bound to its address.
#[derive(Debug)]
pub struct AdminServer {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    state: AdminState,
    stop: CancellationToken,
    /// Hosts answered besides loopback and the bound address.
    hosts: Vec<HostName>,
    #[cfg(feature = "panel")]
    panel: Option<crate::panel::PanelConfig>,
}

impl AdminServer {
    /// Listens on a loopback `addr` (port 0 picks a free one).
    pub async fn bind(addr: SocketAddr, state: AdminState) -> Result<Self, AdminServeError> {
        if !addr.ip().is_loopback() {
            return Err(AdminServeError::NotLoopback(addr));
        }
        Self::bind_exposed(addr, state).await
    }

    /// Listens on any `addr`, loopback or not: only behind a TLS-terminating reverse proxy or a
    /// private network, since admin tokens travel in every request.
    pub async fn bind_exposed(
        addr: SocketAddr,
        state: AdminState,
    ) -> Result<Self, AdminServeError> {
        if !state.login_limits.is_usable() {
            return Err(AdminServeError::Limits);
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| AdminServeError::Io { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| AdminServeError::Io { addr, source })?;
        tracing::info!(%addr, "admin API listening");
        Ok(Self {
            listener,
            addr,
            state,
            stop: CancellationToken::new(),
            hosts: Vec::new(),
            #[cfg(feature = "panel")]
            panel: Some(crate::panel::PanelConfig::default()),
        })
    }

    /// Also answers requests whose `Host` is `host` (`name`: any port; `name:port`: that port
    /// only), as a reverse proxy that passes its public `Host` through sends them. The panel's
    /// allowed origins are answered without this.
    pub fn allow_host(mut self, host: &str) -> Result<Self, AdminServeError> {
        let name = HostName::parse(host).ok_or_else(|| AdminServeError::Host(host.to_string()))?;
        self.hosts.push(name);
        Ok(self)
    }

    /// Serves the web panel beside the API with this configuration (by default it is served
    /// under `/panel` with [`crate::panel::PanelConfig::default`]); `None` turns it off.
    #[cfg(feature = "panel")]
    pub fn panel(mut self, config: Option<crate::panel::PanelConfig>) -> Self {
        self.panel = config;
        self
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API's base URL (`http://<addr>/admin/api/v1`).
    pub fn url(&self) -> String {
        format!("http://{}{BASE_PATH}", self.addr)
    }

    /// A token that stops the server when cancelled (as `shutdown` completing does).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Serves until `shutdown` completes or the token is cancelled; requests in flight finish.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), AdminServeError> {
        let addr = self.addr;
        let stop = self.stop.clone();
        let streams = self.state.streams.clone();
        let listener = self.listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::warn!(error = %e, "cannot set TCP_NODELAY on an admin connection");
            }
        });
        let mut hosts = self.hosts;
        if !addr.ip().is_unspecified() {
            hosts.push(HostName::address(addr.ip()));
        }
        #[cfg(feature = "panel")]
        let app = match self.panel {
            Some(config) => {
                hosts.extend(
                    config
                        .allowed_origins
                        .iter()
                        .filter_map(|o| HostName::of_origin(o)),
                );
                router(self.state.clone()).merge(crate::panel::router(config, &self.state)?)
            }
            None => router(self.state),
        };
        #[cfg(not(feature = "panel"))]
        let app = router(self.state);
        let app = app.layer(axum::middleware::from_fn_with_state(
            Arc::new(hosts),
            refuse_other_hosts,
        ));
        // The peer address lets the panel count failed log-ins per client.
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            tokio::select! {
                () = shutdown => {}
                () = stop.cancelled() => {}
            }
            // Live streams never finish by themselves; end them so the server can stop.
            streams.cancel();
        })
        .await
        .map_err(|source| AdminServeError::Io { addr, source })?;
        tracing::info!(%addr, "admin API stopped");
        Ok(())
    }
}

/// One `Host` the listener answers besides loopback: a name (or address) and, when given, the
/// only port it answers on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostName {
    name: String,
    port: Option<u16>,
}

impl HostName {
    /// `name` or `name:port` (an IPv6 address in brackets).
    fn parse(host: &str) -> Option<Self> {
        let (name, port) = kberg_server::host_and_port(host)?;
        Some(Self {
            name: name.to_ascii_lowercase(),
            port,
        })
    }

    fn address(ip: IpAddr) -> Self {
        Self {
            name: ip.to_string(),
            port: None,
        }
    }

    /// The host of an origin (`https://bridle.example[:port]`).
    #[cfg(any(feature = "panel", test))]
    fn of_origin(origin: &str) -> Option<Self> {
        let rest = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"))?;
        Self::parse(rest.trim_end_matches('/'))
    }

    fn admits(&self, name: &str, port: Option<u16>) -> bool {
        self.name.eq_ignore_ascii_case(name) && self.port.is_none_or(|p| Some(p) == port)
    }
}

/// Whether `name` is a loopback name or address (`localhost`, 127.0.0.0/8, `::1`).
fn is_loopback(name: &str) -> bool {
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Refuses a request whose `Host` the listener does not answer to (see the module's
/// documentation).
async fn refuse_other_hosts(
    State(hosts): State<Arc<Vec<HostName>>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let host = match request.headers().get(header::HOST) {
        Some(v) => v.to_str().ok(),
        None => request.uri().authority().map(|a| a.as_str()),
    };
    let Some((name, port)) = host.and_then(kberg_server::host_and_port) else {
        return Err(ApiError::Malformed {
            code: "invalid_host",
            detail: "the request has no Host header, or one that is not `name[:port]`".into(),
            errors: Vec::new(),
        });
    };
    if is_loopback(name) || hosts.iter().any(|h| h.admits(name, port)) {
        return Ok(next.run(request).await);
    }
    tracing::warn!(
        host = host.unwrap_or_default(),
        path = request.uri().path(),
        "admin listener refused a request for another host"
    );
    Err(ApiError::Forbidden {
        code: "host_not_allowed",
        detail: "the admin listener does not answer to this Host (a loopback name, its own address, or an allowed origin's host)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_as_the_mcp_listener_reads_them() {
        assert_eq!(
            kberg_server::host_and_port("127.0.0.1:7879"),
            Some(("127.0.0.1", Some(7879)))
        );
        assert_eq!(
            kberg_server::host_and_port("[::1]:9"),
            Some(("::1", Some(9)))
        );
        assert_eq!(
            kberg_server::host_and_port("localhost"),
            Some(("localhost", None))
        );
        for bad in [
            "",
            ":80",
            "localhost:notaport",
            "[::1",
            "a/b",
            "u@evil.example",
        ] {
            assert_eq!(kberg_server::host_and_port(bad), None, "{bad}");
        }
        for loopback in ["localhost", "LOCALHOST", "127.0.0.1", "127.8.9.10", "::1"] {
            assert!(is_loopback(loopback), "{loopback}");
        }
        for other in [
            "evil.example",
            "localhost.evil.example",
            "0.0.0.0",
            "10.0.0.1",
        ] {
            assert!(!is_loopback(other), "{other}");
        }
        let proxy = HostName::of_origin("https://Bridle.Example/").unwrap();
        assert!(proxy.admits("bridle.example", None));
        assert!(proxy.admits("bridle.example", Some(443)));
        assert!(!proxy.admits("evil.example", None));
        let pinned = HostName::parse("bridle.example:8443").unwrap();
        assert!(pinned.admits("bridle.example", Some(8443)));
        assert!(!pinned.admits("bridle.example", Some(80)));
        assert!(!pinned.admits("bridle.example", None));
    }
}
