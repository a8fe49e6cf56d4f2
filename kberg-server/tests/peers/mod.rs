//! Shared fixtures of the aggregator tests: where the pinned third-party peers are
//! (`scripts/install-tools.sh` puts them in `.tools/`, `KBERG_TOOLS_DIR` overrides), how to start
//! `@modelcontextprotocol/server-everything` over stdio or Streamable HTTP and the misbehaving raw
//! upstream, and guards that stop what a test started even when it fails.

#![allow(dead_code)] // each test file uses its own subset

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use kberg_core::{Caller, Principal};
use kberg_server::aggregate::UpstreamTransport;
use tokio_util::sync::CancellationToken;

/// How long a test waits for anything that should happen (never a timing assertion).
pub const WAIT: Duration = Duration::from_secs(60);

/// The folder of the pinned test peers.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("KBERG_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.tools"))
}

/// `p` as a string, failing with what to run when it is missing.
pub fn need(p: PathBuf) -> String {
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-tools.sh",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

/// Node 22 from `.tools/`.
pub fn node() -> String {
    need(tools_dir().join("node/bin/node"))
}

/// The entry point of one of the `@modelcontextprotocol` npm servers.
pub fn package(name: &str) -> String {
    need(
        tools_dir()
            .join("node/node_modules/@modelcontextprotocol")
            .join(name)
            .join("dist/index.js"),
    )
}

/// server-everything as a stdio child.
pub fn everything_stdio() -> UpstreamTransport {
    UpstreamTransport::stdio(node())
        .arg(package("server-everything"))
        .arg("stdio")
}

/// The raw stdio upstream that hangs and answers garbage on purpose
/// (`tests/aggregate_raw_upstream.py`, run by the pinned Python).
pub fn raw_upstream() -> UpstreamTransport {
    UpstreamTransport::stdio(need(tools_dir().join("venv/bin/python")))
        .arg("-u")
        .arg(need(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/aggregate_raw_upstream.py"),
        ))
}

/// A caller without grants.
pub fn reader() -> Caller {
    Caller::new(Principal::new("reader"))
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The everything server in Streamable HTTP mode (`index.js streamableHttp`, port from `PORT`),
/// killed when dropped.
pub struct HttpEverything {
    child: std::process::Child,
    /// Its endpoint.
    pub url: String,
}

impl HttpEverything {
    /// Starts it and waits until it listens.
    pub async fn start() -> Self {
        let port = free_port();
        let child = std::process::Command::new(node())
            .arg(package("server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start server-everything");
        let me = Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let up = tokio::time::timeout(WAIT, async {
            while tokio::net::TcpStream::connect(addr).await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        assert!(up.is_ok(), "server-everything did not listen on {addr}");
        me
    }

    /// Kills it now.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Cancels a server's shutdown token when dropped.
pub struct StopOnDrop(pub CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
