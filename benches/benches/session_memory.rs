//! The session-memory bench: resident memory per idle 2025-11-25 session, Kberg against bare
//! rmcp, in the same run.
//!
//! Why a custom harness and child processes: the quantity is the resident set of a server
//! process, which only a process of its own shows cleanly (a server in the bench's own process
//! would share its allocator and runtime with the load generator and with the other server).
//! The bench runs itself as a child per server (`KBERG_SESSION_SERVER=kberg|rmcp`); the child
//! serves the same `echo` tool as the wire bench (`kberg_benches::echo_servers`) on 127.0.0.1,
//! prints its address and serves until its stdin closes. The parent opens one session as a
//! warm-up (runtime, lazy statics, first-use buffers), reads the child's `VmRSS` from
//! `/proc/<pid>/status` (the base), then opens N sessions (`initialize` and
//! `notifications/initialized`, each on a connection of its own that is closed afterwards, as a
//! client that went quiet leaves it), and reads `VmRSS` again. Per session is
//! `(after - base) / N`. The base is also reported as its anonymous part (`RssAnon`: heap,
//! stacks): the rest of a base is pages of the executable that the process ran or read, which
//! depends on how much of the binary's code a server touches, not on what it allocates. Kberg runs with a session limit above N; both keep their default idle
//! expiry, far longer than a run.
//!
//! Rounds interleave the two servers (a fresh child each time) and the report takes the
//! median of the rounds.
//!
//! ```text
//! cargo bench -p kberg-benches --bench session_memory          # 3 rounds x 1,000 sessions
//! KBERG_SESSIONS=2000 KBERG_SESSION_ROUNDS=5 cargo bench -p kberg-benches --bench session_memory
//! ```
//!
//! Without `--bench` (as under `cargo test --benches`) it opens 20 sessions per server once and
//! only checks that both answer.

// A bench's report is its stdout.
#![allow(clippy::print_stdout)]

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

use kberg_benches::echo_servers::{start_kberg, start_rmcp};
use kberg_benches::loopback::{BoxError, Client, STATEFUL, env_number, median};
use kberg_server::Limits;
use tokio_util::sync::CancellationToken;

/// The variable that makes the bench binary a server child.
const CHILD_VAR: &str = "KBERG_SESSION_SERVER";

/// How many sessions are opened at once (each its own connection).
const PARALLEL: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Kberg,
    Rmcp,
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::Kberg => "kberg",
            Kind::Rmcp => "rmcp",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Kberg => "Kberg (kberg-server)",
            Kind::Rmcp => "bare rmcp 3.11",
        }
    }
}

/// The child: serves one server until stdin closes.
fn child(kind: &str) -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let stop = CancellationToken::new();
        let addr = match kind {
            // Sessions beyond the default limit (256) must be accepted for this measurement.
            "kberg" => start_kberg(stop.clone(), Limits::default().max_sessions(1_000_000)).await?,
            "rmcp" => start_rmcp(stop.clone()).await?,
            other => return Err(format!("unknown server `{other}`").into()),
        };
        println!("{addr}");
        // Serve until the parent closes stdin (or dies).
        tokio::task::spawn_blocking(|| {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
        })
        .await?;
        stop.cancel();
        Ok(())
    })
}

/// A server child, killed by its pid when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(kind: Kind) -> Result<Self, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .env(CHILD_VAR, kind.arg())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("the child has no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .trim()
            .parse()
            .map_err(|e| format!("the {} child printed `{line}`: {e}", kind.arg()))?;
        Ok(Self { child, addr })
    }

    /// The child's resident set in kB: all of it (`VmRSS`) and its anonymous part (`RssAnon`:
    /// heap, stacks, what the process allocated, as opposed to the pages of its executable and
    /// libraries that it has run or read, which are file-backed).
    fn rss_kb(&self) -> Result<(u64, u64), BoxError> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let field = |name: &str| -> Result<u64, BoxError> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .ok_or_else(|| format!("no {name} in /proc/<pid>/status").into())
        };
        Ok((field("VmRSS:")?, field("RssAnon:")?))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Closing stdin ends the child; kill it by its pid in case it does not.
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Opens `n` sessions, `PARALLEL` at a time, each on its own connection, closed afterwards.
async fn open_sessions(addr: SocketAddr, n: usize) -> Result<(), BoxError> {
    let mut left = n;
    while left > 0 {
        let batch = left.min(PARALLEL);
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..batch {
            set.spawn(async move {
                Client::connect(addr, "/mcp", STATEFUL, true)
                    .await
                    .map(|_session| ())
            });
        }
        while let Some(r) = set.join_next().await {
            r??;
        }
        left -= batch;
    }
    Ok(())
}

/// One measurement: (base kB, after kB, anonymous part of the base kB).
type Point = (u64, u64, u64);

/// Measures one fresh server child.
async fn measure(kind: Kind, sessions: usize) -> Result<Point, BoxError> {
    let server = Server::start(kind)?;
    open_sessions(server.addr, 1).await?;
    let (base, base_anon) = server.rss_kb()?;
    open_sessions(server.addr, sessions).await?;
    let (after, _) = server.rss_kb()?;
    Ok((base, after, base_anon))
}

async fn run() -> Result<(), BoxError> {
    let full = std::env::args().any(|a| a == "--bench");
    let (sessions, rounds) = if full {
        (
            env_number("KBERG_SESSIONS", 1000) as usize,
            env_number("KBERG_SESSION_ROUNDS", 3),
        )
    } else {
        (20, 1)
    };
    let kinds = [Kind::Kberg, Kind::Rmcp];
    let mut results: Vec<(Kind, Vec<Point>)> = kinds.iter().map(|k| (*k, vec![])).collect();
    for round in 0..rounds.max(1) {
        for (kind, points) in &mut results {
            let (base, after, base_anon) = measure(*kind, sessions).await?;
            let per = (after.saturating_sub(base)) as f64 / sessions as f64;
            if full {
                println!(
                    "round {} {:<22} base {:>7} kB (anonymous {:>6} kB)  after {} sessions {:>7} kB  {:>6.1} kB/session",
                    round + 1,
                    kind.label(),
                    base,
                    base_anon,
                    sessions,
                    after,
                    per
                );
            }
            points.push((base, after, base_anon));
        }
    }
    if !full {
        println!("session memory smoke run: Kberg and bare rmcp each opened {sessions} sessions");
        return Ok(());
    }
    let summary = |kind: Kind| {
        let pts = results
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let base = median(pts.iter().map(|p| p.0 as f64).collect());
        let after = median(pts.iter().map(|p| p.1 as f64).collect());
        let per = median(
            pts.iter()
                .map(|p| p.1.saturating_sub(p.0) as f64 / sessions as f64)
                .collect(),
        );
        let anon = median(pts.iter().map(|p| p.2 as f64).collect());
        (base, after, per, anon)
    };
    let (rmcp_base, _, rmcp_per, rmcp_anon) = summary(Kind::Rmcp);
    println!();
    println!("medians of {rounds} round(s), {sessions} idle 2025-11-25 sessions each");
    println!(
        "| server | base RSS MB | of it anonymous MB | RSS with sessions MB | kB per session | per session vs bare rmcp | base vs bare rmcp | anonymous base vs bare rmcp |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for kind in kinds {
        let (base, after, per, anon) = summary(kind);
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2}x | {:+.1} MB | {:+.1} MB |",
            kind.label(),
            base / 1024.0,
            anon / 1024.0,
            after / 1024.0,
            per,
            per / rmcp_per,
            (base - rmcp_base) / 1024.0,
            (anon - rmcp_anon) / 1024.0
        );
    }
    Ok(())
}

fn main() {
    if let Ok(kind) = std::env::var(CHILD_VAR) {
        if let Err(e) = child(&kind) {
            eprintln!("session server child failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    kberg_benches::loopback::run_main("session memory bench", None, run());
}
