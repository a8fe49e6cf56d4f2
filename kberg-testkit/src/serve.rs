//! A kberg-server app served over Streamable HTTP on 127.0.0.1 (a free port), stopped when its
//! guard drops, also when an assertion fails: the one way every crate's tests start a real
//! Kberg server.

use std::net::SocketAddr;

use kberg_server::{HttpConfig, HttpServer, McpApp};
use tokio_util::sync::CancellationToken;

use crate::net::StopOnDrop;

/// An [`HttpConfig`] on 127.0.0.1, port 0 (the system picks a free one).
pub fn loopback() -> HttpConfig {
    HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)))
}

/// A running server; stopped when dropped (its [`StopOnDrop`] guard).
pub struct RunningServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its MCP endpoint, `http://ADDR/mcp`.
    pub url: String,
    stop: StopOnDrop,
}

impl RunningServer {
    /// Binds `app` with `config` and serves it on a spawned task. A bind failure fails the
    /// test; a server that stops with an error panics its task, which the test sees as
    /// connection errors.
    pub async fn start(app: McpApp, config: HttpConfig) -> Self {
        let server = HttpServer::bind(app, config)
            .await
            .expect("bind the test server");
        let addr = server.local_addr();
        let stop = server.shutdown_token();
        tokio::spawn(async move {
            if let Err(e) = server.run(std::future::pending()).await {
                panic!("test server failed: {e}");
            }
        });
        Self {
            addr,
            url: format!("http://{addr}/mcp"),
            stop: StopOnDrop(stop),
        }
    }

    /// Stops it now (dropping it does the same).
    pub fn stop(&self) {
        self.stop.0.cancel();
    }

    /// Its shutdown token, for a test that stops it from elsewhere.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.stop.0.clone()
    }

    /// Only the guard that stops it when dropped.
    pub fn into_guard(self) -> StopOnDrop {
        self.stop
    }
}
