//! The pinned reference MCP server, `@modelcontextprotocol/server-everything` (Node), as a child
//! process: over stdio (a command to hand to a client transport) or over Streamable HTTP on a
//! free loopback port (killed by its process id when the guard drops, also on failure).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use crate::eventually::WAIT;
use crate::net::free_port;
use crate::tools::{mcp_npm_package, node};

/// The command that runs server-everything over stdio (stderr discarded, killed on drop).
pub fn everything_stdio_command() -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(node());
    cmd.arg(mcp_npm_package("server-everything"))
        .arg("stdio")
        .stderr(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// server-everything in Streamable HTTP mode (`index.js streamableHttp`, port from `PORT`),
/// killed when dropped.
pub struct HttpEverything {
    child: std::process::Child,
    /// Its endpoint.
    pub url: String,
}

impl HttpEverything {
    /// Starts it and waits (with a deadline) until it accepts connections.
    pub async fn start() -> Self {
        let port = free_port();
        let child = std::process::Command::new(node())
            .arg(mcp_npm_package("server-everything"))
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
