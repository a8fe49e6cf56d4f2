//! `kberg-interop`: serves the notes app (`kberg_examples::notes`) for interop tests and for
//! trying Kberg with real MCP clients.
//!
//! ```text
//! kberg-interop --listen 127.0.0.1:8765            # Streamable HTTP at /mcp, bearer tokens
//! kberg-interop --stdio [--as reader|writer]       # stdio, as one principal (default writer)
//! ```
//!
//! Over HTTP two bearer tokens are accepted: `reader-token-for-tests` (no grants) and
//! `writer-token-for-tests` (`notes.write`). Once listening, one line `listening on
//! http://ADDR/mcp` goes to stdout; over stdio, stdout is the MCP channel and nothing else is
//! written there. Logs go to stderr.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use kberg_examples::notes;
use kberg_server::{HttpConfig, HttpServer};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum As {
    Reader,
    Writer,
}

/// Serves the Kberg notes app over Streamable HTTP or stdio.
#[derive(Debug, Parser)]
#[command(name = "kberg-interop", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8765", conflicts_with = "stdio")]
    listen: SocketAddr,
    /// Serve on stdin/stdout instead of HTTP.
    #[arg(long)]
    stdio: bool,
    /// The principal of a stdio connection.
    #[arg(long = "as", value_enum, default_value = "writer")]
    principal: As,
    /// Log level on stderr: error, warn, info, debug or trace.
    #[arg(long, default_value = "warn")]
    log: String,
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let app = notes::app()?;
    if args.stdio {
        let principal = match args.principal {
            As::Reader => notes::reader(),
            As::Writer => notes::writer(),
        };
        kberg_server::serve_stdio(app.app, principal).await?;
        return Ok(());
    }
    let config = HttpConfig::new(args.listen).auth(notes::bearer_tokens());
    let server = HttpServer::bind(app.app, config).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on http://{}/mcp", server.local_addr())?;
    out.flush()?;
    drop(out);
    server
        .run(async {
            if let Err(e) = tokio::signal::ctrl_c().await {
                tracing::warn!(error = %e, "cannot listen for Ctrl-C");
                std::future::pending::<()>().await;
            }
        })
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    kberg_examples::init_logging(&args.log);
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kberg-interop failed");
            ExitCode::FAILURE
        }
    }
}
