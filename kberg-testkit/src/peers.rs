//! The pinned reference MCP server, `@modelcontextprotocol/server-everything` (Node), as a child
//! process: over stdio (a command to hand to a client transport) or over Streamable HTTP on a
//! free loopback port (killed by its process id when the guard drops, also on failure).

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use crate::eventually::WAIT;
use crate::net::free_port;
use crate::tools::{mcp_npm_package, node};

/// How many ports [`HttpEverything::start`] tries before it gives up.
const START_ATTEMPTS: usize = 5;

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
    /// Starts it and waits (with a deadline) until it listens.
    pub async fn start() -> Self {
        Self::start_on(free_port).await
    }

    /// Starts it on a port from `pick`; a port it cannot bind (the pick only found it free a
    /// moment before, and a connection made anywhere on the machine may be given it meanwhile)
    /// is left to its holder, and the next pick tried.
    async fn start_on(mut pick: impl FnMut() -> u16) -> Self {
        let mut refused = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = pick();
            match Self::start_at(port).await {
                Ok(me) => return me,
                Err(why) => refused.push(format!("port {port}: {why}")),
            }
        }
        panic!("server-everything did not start: {refused:#?}");
    }

    /// Starts it on `port` and waits until it accepts connections there: `Err` with what it
    /// said when it ended first (the port was taken).
    async fn start_at(port: u16) -> Result<Self, String> {
        let mut child = std::process::Command::new(node())
            .arg(mcp_npm_package("server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start server-everything");
        let stderr = child.stderr.take().expect("its stderr is piped");
        let (tell, mut ended) = tokio::sync::oneshot::channel::<String>();
        // Reads its stderr to the end (a full pipe would stop it); the end, with the last line
        // said, means it ended.
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut last = String::new();
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                last = line;
            }
            let _ = tell.send(last);
        });
        let me = Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Ok(last) = ended.try_recv() {
                return Err(format!("it ended saying {last:?}"));
            }
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                return Ok(me);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "server-everything did not listen on {addr}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A port taken between its pick and the server's bind (a connection made anywhere on the
    /// machine may be given it meanwhile) is left to its holder: the server starts on another,
    /// and its URL names the port it listens on.
    #[tokio::test]
    async fn a_port_taken_before_the_server_binds_it_is_left_to_its_holder() {
        // Held as a connection's socket holds its port: bound, without address reuse, and
        // not listening (nothing answers on it).
        let holder = tokio::net::TcpSocket::new_v4().unwrap();
        holder.bind(([127, 0, 0, 1], 0).into()).unwrap();
        let taken = holder.local_addr().unwrap().port();
        let mut first = Some(taken);
        let server = HttpEverything::start_on(|| first.take().unwrap_or_else(free_port)).await;
        assert!(
            !server.url.contains(&format!(":{taken}/")),
            "{} is the holder's port",
            server.url
        );
        let port = server.url.trim_start_matches("http://127.0.0.1:");
        let port: u16 = port.trim_end_matches("/mcp").parse().expect("a port");
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("the server listens on the port of its URL");
    }
}
