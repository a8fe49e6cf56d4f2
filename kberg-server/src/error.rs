//! The one error enum of kberg-server: what can go wrong while setting a transport up or
//! running it. Errors of individual requests never surface here; they are answered on the wire.

use std::net::SocketAddr;

/// Why serving could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("could not listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// An I/O error while serving.
    #[error("i/o error while serving: {0}")]
    Io(#[from] std::io::Error),
    /// The configuration is not usable.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The MCP connection could not be established (stdio: no valid handshake).
    #[error("the MCP connection could not be established: {0}")]
    Handshake(String),
}

impl ServerError {
    /// A stable code for the error kind.
    pub const fn code(&self) -> &'static str {
        match self {
            ServerError::Bind { .. } => "bind_failed",
            ServerError::Io(_) => "io",
            ServerError::Config(_) => "invalid_config",
            ServerError::Handshake(_) => "handshake_failed",
        }
    }
}
