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

/// An `http://127.0.0.1:PORT` URL with nothing listening on it.
pub fn closed_port_url() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

/// Cancels a server's shutdown token when dropped.
pub struct StopOnDrop(pub CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}
