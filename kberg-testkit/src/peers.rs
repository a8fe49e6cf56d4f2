//! The pinned reference MCP server, `@modelcontextprotocol/server-everything` (Node), as a child
//! process: over stdio (a command to hand to a client transport) or over Streamable HTTP on a
//! free loopback port (killed by its process id when the guard drops, also on failure).

use std::process::Stdio;

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

    /// Starts it on `port` and waits until it answers there: `Err` with what it said when it
    /// ended first (the port was taken), or when another server answers on the port.
    ///
    /// Its "listening" line on stderr comes when its listen call ended, also when it failed
    /// (the error and its exit follow), and a bare connection to the port could reach another
    /// process that holds it. So after that line, one request tells: server-everything answers
    /// a `GET /mcp` without a session with its own refusal.
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
        let (tell, mut heard) = tokio::sync::mpsc::unbounded_channel::<Heard>();
        let listening = format!("listening on port {port}");
        // Reads its stderr to the end (a full pipe would stop it): tells when its listen call
        // ended, and when it ended, with the last line it said.
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut last = String::new();
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains(&listening) {
                    let _ = tell.send(Heard::Listening);
                }
                last = line;
            }
            let _ = tell.send(Heard::Ended(last));
        });
        let me = Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let ended = |heard: Option<Heard>| match heard {
            Some(Heard::Ended(last)) => format!("it ended saying {last:?}"),
            _ => "its stderr reader ended without a word".to_string(),
        };
        match tokio::time::timeout(WAIT, heard.recv()).await {
            Ok(Some(Heard::Listening)) => {}
            Ok(other) => return Err(ended(other)),
            Err(_) => panic!("server-everything did not start listening on port {port}"),
        }
        match tokio::time::timeout(WAIT, refusal_without_session(port)).await {
            Ok(Some(answer)) if answer.contains(EVERYTHING_REFUSAL) => Ok(me),
            Ok(Some(answer)) => Err(format!("another server answers there: {answer:?}")),
            // Nothing listens on the port: its listen failed, and it is ending.
            Ok(None) => match tokio::time::timeout(WAIT, heard.recv()).await {
                Ok(other) => Err(ended(other)),
                Err(_) => panic!("server-everything neither listens on {port} nor ends"),
            },
            Err(_) => Err("the server on the port did not answer".to_string()),
        }
    }

    /// Kills it now.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What server-everything answers a `GET /mcp` without a session.
const EVERYTHING_REFUSAL: &str = "No valid session ID provided";

/// The whole answer (head and body) of the server on 127.0.0.1:`port` to a `GET /mcp` without
/// a session; `None` when nothing listens there.
async fn refusal_without_session(port: u16) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request =
        format!("GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return Some(String::new());
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// What [`HttpEverything::start_at`] heard on the server's stderr.
enum Heard {
    /// Its socket is bound.
    Listening,
    /// Its stderr ended (it exited), with the last line it wrote.
    Ended(String),
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

    /// A port another server listens on (on loopback only, which a server bound to every
    /// address may not see at once) is not taken for server-everything's.
    #[tokio::test]
    async fn a_port_another_server_listens_on_is_not_taken_for_its() {
        let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let taken = other.local_addr().unwrap().port();
        // Another HTTP server: it answers every request with a 404.
        let serving = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut s, _)) = other.accept().await {
                let mut head = [0u8; 1024];
                let _ = s.read(&mut head).await;
                let _ = s
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    )
                    .await;
            }
        });
        let mut first = Some(taken);
        let server = HttpEverything::start_on(|| first.take().unwrap_or_else(free_port)).await;
        assert!(
            !server.url.contains(&format!(":{taken}/")),
            "{} is the other server's port",
            server.url
        );
        serving.abort();
    }
}
