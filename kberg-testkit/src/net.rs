//! Loopback ports and guards: tests that start a server take a free port on 127.0.0.1 and stop
//! what they started when the guard drops, also when an assertion fails.

use std::net::TcpListener;

use tokio_util::sync::CancellationToken;

/// A port on 127.0.0.1 that was free a moment ago (for a child process that must be told its
/// port; servers in this process bind port 0 instead).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr()
        .expect("a bound socket has an address")
        .port()
}

/// A port on 127.0.0.1 that refuses connections for the rest of the test binary. A socket bound
/// to it (without listening, so a connection is refused) holds it until the binary ends: a port
/// merely free a moment ago could be given to the next server any test of the binary (or any
/// other process) binds, which would then answer instead of refusing.
pub fn closed_port() -> u16 {
    static HELD: std::sync::Mutex<Vec<tokio::net::TcpSocket>> = std::sync::Mutex::new(Vec::new());
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind 127.0.0.1:0");
    let port = socket
        .local_addr()
        .expect("a bound socket has an address")
        .port();
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(socket);
    port
}

/// An `http://127.0.0.1:PORT` URL with nothing listening on it, for the rest of the test
/// binary (see [`closed_port`]).
pub fn closed_port_url() -> String {
    format!("http://127.0.0.1:{}", closed_port())
}

/// Cancels a server's shutdown token when dropped.
pub struct StopOnDrop(pub CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The closed port is held: no one else is given it while the test that asked for it runs
    /// (a test binary binds ports all the time, and a port given to another test's server would
    /// answer instead of refusing).
    #[test]
    fn a_closed_port_is_refused_and_cannot_be_taken() {
        let url = closed_port_url();
        let port: u16 = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port in the URL");
        assert!(
            TcpListener::bind(("127.0.0.1", port)).is_err(),
            "{url} could be bound by someone else"
        );
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "{url} took a connection"
        );
    }
}
