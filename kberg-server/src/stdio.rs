//! MCP over stdin/stdout: the same app and gate for a client that spawns the app as a child
//! process.
//!
//! There are no per-request credentials on stdio: whoever spawned the process is the caller,
//! so the principal is fixed when serving starts. Everything else (projection, grants,
//! subscriptions, cancellation, both protocol generations) behaves as over HTTP.

use std::sync::Arc;

use kberg_core::Principal;
use rmcp::ServiceExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

use crate::app::McpApp;
use crate::config::Limits;
use crate::error::ServerError;
use crate::handler::{KbergHandler, TransportContext};

/// Serves `app` on this process's stdin/stdout as `principal` until the client closes the
/// connection.
pub async fn serve_stdio(app: McpApp, principal: Principal) -> Result<(), ServerError> {
    serve_io(app, principal, tokio::io::stdin(), tokio::io::stdout()).await
}

/// Serves `app` over any byte stream pair (newline-delimited JSON-RPC, as on stdio) until the
/// reader ends. Used for stdio, pipes and in-process tests.
pub async fn serve_io<R, W>(
    app: McpApp,
    principal: Principal,
    reader: R,
    writer: W,
) -> Result<(), ServerError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let shutdown = CancellationToken::new();
    let shared = TransportContext::new(
        app,
        Limits::default().max_calls_per_principal,
        Some(Arc::new(principal)),
        shutdown.clone(),
    )
    .map_err(|e| ServerError::Config(e.message.to_string()))?;
    let running = KbergHandler::new(shared)
        .serve((reader, writer))
        .await
        .map_err(|e| ServerError::Handshake(e.to_string()))?;
    let quit = running.waiting().await;
    shutdown.cancel();
    quit.map_err(|e| ServerError::Io(std::io::Error::other(e)))?;
    Ok(())
}
