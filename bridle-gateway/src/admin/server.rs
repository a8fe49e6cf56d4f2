//! [`AdminServer`]: the admin API on its own listener, loopback unless asked otherwise, with
//! TCP_NODELAY on every accepted socket (small JSON answers must not wait for the peer's
//! delayed ACK) and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;

use axum::serve::ListenerExt;
use tokio_util::sync::CancellationToken;

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
            #[cfg(feature = "panel")]
            panel: Some(crate::panel::PanelConfig::default()),
        })
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
        #[cfg(feature = "panel")]
        let app = match self.panel {
            Some(config) => {
                router(self.state.clone()).merge(crate::panel::router(config, &self.state)?)
            }
            None => router(self.state),
        };
        #[cfg(not(feature = "panel"))]
        let app = router(self.state);
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
