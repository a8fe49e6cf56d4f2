//! `kberg-conformance`: serves the fixtures of the official MCP conformance suite over
//! Streamable HTTP at `/mcp`, open (no credentials) on loopback.
//!
//! ```text
//! kberg-conformance [--listen 127.0.0.1:3001] [--watch-interval-ms 3000] [--log info]
//! ```
//!
//! Once listening it prints one line, `listening on http://ADDR/mcp`, to stdout (so a script
//! that passed port 0 learns the port), then serves until SIGINT or SIGTERM. Logs go to stderr.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kberg_server::{HttpConfig, HttpServer};

/// Serves the MCP conformance suite's fixtures with Kberg.
#[derive(Debug, Parser)]
#[command(name = "kberg-conformance", version)]
struct Args {
    /// Address to listen on (loopback only is recommended; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:3001")]
    listen: SocketAddr,
    /// How often the watched resource changes (and its subscribers are told); 0 never.
    #[arg(long, default_value_t = 3000)]
    watch_interval_ms: u64,
    /// Log level on stderr: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    log: String,
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down");
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let fixtures = kberg_examples::conformance::app()?;
    let server = HttpServer::bind(fixtures.app.clone(), HttpConfig::new(args.listen)).await?;
    let addr = server.local_addr();
    if args.watch_interval_ms > 0 {
        let every = Duration::from_millis(args.watch_interval_ms);
        let stop = server.shutdown_token();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let told = fixtures.touch_watched();
                        tracing::debug!(told, "the watched resource changed");
                    }
                    () = stop.cancelled() => break,
                }
            }
        });
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on http://{addr}/mcp")?;
    out.flush()?;
    drop(out);
    server.run(shutdown_signal()).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    kberg_examples::init_logging(&args.log);
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kberg-conformance failed");
            ExitCode::FAILURE
        }
    }
}
