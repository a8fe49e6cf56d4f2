//! The aggregator bench: `tools/call` through Kberg's sidecar aggregator against calling the same
//! upstream directly, in the same run.
//!
//! Why it exists: an aggregator puts one more HTTP hop, one more JSON-RPC encode/decode and one
//! more gate pass on every call; the goal is that this costs little (aggregated throughput
//! >= 0.8x direct). Two upstreams, both over Streamable HTTP on loopback:
//!
//! - a Kberg HTTP server (kberg-server) with a trivial `echo` tool: the cheapest possible
//!   upstream, so the hop's own cost is fully visible;
//! - the real `@modelcontextprotocol/server-everything` (`streamableHttp` mode, its `echo` tool),
//!   a typical Node upstream, started from `.tools/` (`scripts/install-tools.sh`; the folder can
//!   be moved with `KBERG_TOOLS_DIR`); it shows the ratio a user of such an upstream sees.
//!
//! The aggregated path is a second Kberg HTTP server whose registry belongs to an [`Aggregator`]
//! connected to both upstreams (namespaces `kb` and `ev`). Clients are the load generator of
//! `kberg_benches::loopback`: one HTTP/1.1 keep-alive connection and one 2025-11-25 session per
//! client, calls back to back, every answer checked. Rounds interleave the four cases (direct and
//! aggregated, for each upstream) so a noisy moment on a shared machine hits them alike; the
//! report is the median of the rounds.
//!
//! ```text
//! cargo bench -p kberg-benches --bench aggregate                       # 3 rounds x 3 s per point
//! KBERG_AGG_SECS=5 KBERG_AGG_ROUNDS=5 cargo bench -p kberg-benches --bench aggregate
//! ```
//!
//! Without `--bench` (as under `cargo test --benches`), or with `-- --test`, it runs one smoke
//! round of a few calls per case that only checks every path answers correctly.
//! `KBERG_AGG_CALLS=N` (bench mode) replaces the time budget by N calls per client.
//! `KBERG_AGG_CASES=kb-aggregated,kb-direct` runs only the named cases (`kb` or `ev`, then
//! `direct` or `aggregated`), for a profiler that should see one path alone.
//! `KBERG_AGG_RUNTIME=caller` runs the upstream clients on the bench's runtime
//! (`UpstreamRuntime::Caller`) instead of the aggregator's own thread (`own`, the default).

// A bench's report is its stdout.
#![allow(clippy::print_stdout)]

/// With the `mimalloc` feature, the allocator the `bridle` binary runs with.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use kberg_benches::loopback::{BoxError, Budget, Point, STATEFUL, ToolCall, env_number, measure};
use kberg_core::{ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, UpstreamConfig, UpstreamRuntime, UpstreamTransport,
};
use kberg_server::{HttpConfig, HttpServer, McpApp};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const TEXT: &str = "hello aggregate";
const CONCURRENCY: [usize; 2] = [1, 32];
/// How long an upstream may take to start and connect.
const WAIT: Duration = Duration::from_secs(60);

/// Serves `tools` with kberg-server on a free loopback port until `stop` is cancelled.
async fn serve(
    name: &str,
    tools: ToolRegistry,
    stop: CancellationToken,
) -> Result<SocketAddr, BoxError> {
    let app = McpApp::builder(name, "1.0.0").tools(tools).build();
    let config =
        HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0))).shutdown_token(stop.clone());
    let server = HttpServer::bind(app, config).await?;
    let addr = server.local_addr();
    tokio::spawn(async move {
        if let Err(e) = server.run(async move { stop.cancelled().await }).await {
            eprintln!("kberg server ended: {e}");
        }
    });
    Ok(addr)
}

/// The cheap upstream: Kberg with an `echo` tool returning its `text` argument.
async fn start_kberg_upstream(stop: CancellationToken) -> Result<SocketAddr, BoxError> {
    let tools = ToolRegistry::new();
    tools.register(
        ToolBuilder::new("echo")
            .description("Echo the text back")
            .raw_handler(
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
                |args, _ctx| async move {
                    Ok(ToolOutput::text(args["text"].as_str().unwrap_or_default()))
                },
            ),
    )?;
    serve("aggregate-bench-upstream", tools, stop).await
}

fn need(p: PathBuf) -> Result<PathBuf, BoxError> {
    if p.exists() {
        Ok(p)
    } else {
        Err(format!("{} is missing: run scripts/install-tools.sh", p.display()).into())
    }
}

/// `@modelcontextprotocol/server-everything` in Streamable HTTP mode (`index.js streamableHttp`,
/// port from `PORT`); the child is killed (by its pid, through `Child::kill`) when dropped, also
/// when the bench fails.
struct Everything {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Everything {
    async fn start() -> Result<Self, BoxError> {
        let node = need(kberg_testkit::tools::tools_dir().join("node/bin/node"))?;
        let script = need(
            kberg_testkit::tools::tools_dir()
                .join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        )?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = std::process::Command::new(node)
            .arg(script)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let me = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let listening = tokio::time::timeout(WAIT, async {
            while tokio::net::TcpStream::connect(me.addr).await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        if listening.is_err() {
            return Err(format!("server-everything did not listen on {}", me.addr).into());
        }
        Ok(me)
    }
}

impl Drop for Everything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Cancels the in-process servers when dropped, also when the bench fails.
struct StopOnDrop(CancellationToken);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Upstream {
    Kberg,
    Everything,
}

impl Upstream {
    fn label(self) -> &'static str {
        match self {
            Upstream::Kberg => "Kberg echo (kberg-server)",
            Upstream::Everything => "server-everything (Node)",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Direct,
    Aggregated,
}

impl Path {
    fn label(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Aggregated => "aggregated",
        }
    }
}

struct Case {
    upstream: Upstream,
    path: Path,
    addr: SocketAddr,
    call: ToolCall,
}

impl Case {
    /// The case's name in `KBERG_AGG_CASES`.
    fn key(&self) -> String {
        let up = match self.upstream {
            Upstream::Kberg => "kb",
            Upstream::Everything => "ev",
        };
        format!("{up}-{}", self.path.label())
    }
}

async fn run() -> Result<(), BoxError> {
    // `cargo bench` passes `--bench`; `cargo bench -- --test` and test runs (no `--bench`) get
    // the smoke round.
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let secs = env_number("KBERG_AGG_SECS", 3).max(1);
    let rounds = if full {
        env_number("KBERG_AGG_ROUNDS", 3).max(1)
    } else {
        1
    };
    let budget = if !full {
        Budget::Calls(5)
    } else {
        match env_number("KBERG_AGG_CALLS", 0) {
            0 => Budget::Time(Duration::from_secs(secs)),
            n => Budget::Calls(usize::try_from(n)?),
        }
    };

    let stop = CancellationToken::new();
    let _stop = StopOnDrop(stop.clone());
    let upstream = start_kberg_upstream(stop.clone()).await?;
    let everything = Everything::start().await?;

    let registry = ToolRegistry::new();
    let runtime = match std::env::var("KBERG_AGG_RUNTIME").as_deref() {
        Ok("caller") => UpstreamRuntime::Caller,
        Ok("own") | Err(_) => UpstreamRuntime::Own,
        Ok(other) => return Err(format!("KBERG_AGG_RUNTIME={other}: use `own` or `caller`").into()),
    };
    let config = AggregatorConfig::new()
        .runtime(runtime)
        .upstream(UpstreamConfig::new(
            "kb",
            UpstreamTransport::http(format!("http://{upstream}/mcp")),
        ))
        .upstream(UpstreamConfig::new(
            "ev",
            UpstreamTransport::http(format!("http://{}/mcp", everything.addr)),
        ));
    let aggregator = Aggregator::start(config, registry.clone())?;
    for ns in ["kb", "ev"] {
        if !aggregator.wait_connected(ns, 1, WAIT).await {
            return Err(format!(
                "the aggregator did not connect to `{ns}`: {:?}",
                aggregator.status(ns)
            )
            .into());
        }
    }
    let outer = serve("aggregate-bench", registry, stop.clone()).await?;

    let kb_echo = |name: &str| ToolCall::new(name, json!({"text": TEXT}), TEXT);
    let ev_echo =
        |name: &str| ToolCall::new(name, json!({"message": TEXT}), format!("Echo: {TEXT}"));
    let cases = [
        Case {
            upstream: Upstream::Kberg,
            path: Path::Direct,
            addr: upstream,
            call: kb_echo("echo"),
        },
        Case {
            upstream: Upstream::Kberg,
            path: Path::Aggregated,
            addr: outer,
            call: kb_echo("kb__echo"),
        },
        Case {
            upstream: Upstream::Everything,
            path: Path::Direct,
            addr: everything.addr,
            call: ev_echo("echo"),
        },
        Case {
            upstream: Upstream::Everything,
            path: Path::Aggregated,
            addr: outer,
            call: ev_echo("ev__echo"),
        },
    ];

    let wanted = std::env::var("KBERG_AGG_CASES").ok();
    let cases: Vec<&Case> = cases
        .iter()
        .filter(|c| {
            wanted
                .as_deref()
                .is_none_or(|w| w.split(',').any(|n| n.trim() == c.key()))
        })
        .collect();
    if cases.is_empty() {
        return Err(format!(
            "KBERG_AGG_CASES={} names no case (kb-direct, kb-aggregated, ev-direct, ev-aggregated)",
            wanted.unwrap_or_default()
        )
        .into());
    }

    type Key = (Upstream, Path, usize);
    let mut results: Vec<(Key, Vec<Point>)> = Vec::new();
    for round in 0..rounds {
        for case in &cases {
            for clients in CONCURRENCY {
                let p = measure(
                    case.addr, "/mcp", STATEFUL, true, clients, &case.call, budget,
                )
                .await
                .map_err(|e| {
                    format!(
                        "{} {} with {clients} client(s): {e}",
                        case.upstream.label(),
                        case.path.label()
                    )
                })?;
                if full {
                    println!(
                        "round {} {:<26} {:<10} {:>2} client(s): {:>8.0} calls/s  p50 {:.3} ms  p99 {:.3} ms  cpu {:.1} us/call",
                        round + 1,
                        case.upstream.label(),
                        case.path.label(),
                        clients,
                        p.rps,
                        p.p50_ms,
                        p.p99_ms,
                        p.cpu_us
                    );
                }
                let key = (case.upstream, case.path, clients);
                match results.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, v)) => v.push(p),
                    None => results.push((key, vec![p])),
                }
            }
        }
    }
    aggregator.shutdown().await;
    stop.cancel();
    drop(everything);
    if !full {
        println!(
            "aggregate bench smoke run: both upstreams answered tools/call directly and through the aggregator"
        );
        return Ok(());
    }

    let summary = |key: Key| {
        results
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| Point::median_of(v))
    };
    println!();
    match budget {
        Budget::Time(d) => println!(
            "medians of {rounds} round(s) x {} s per point, one keep-alive connection and one {STATEFUL} session per client",
            d.as_secs()
        ),
        Budget::Calls(n) => println!(
            "medians of {rounds} round(s) x {n} calls per client, one keep-alive connection and one {STATEFUL} session per client"
        ),
    }
    println!(
        "| upstream | path | clients | calls/s | p50 ms | p99 ms | CPU us/call (this process) | calls/s aggregated / direct |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for upstream in [Upstream::Kberg, Upstream::Everything] {
        for clients in CONCURRENCY {
            let direct = summary((upstream, Path::Direct, clients));
            for path in [Path::Direct, Path::Aggregated] {
                // A case left out by KBERG_AGG_CASES has no row; without its direct case the
                // ratio is not known.
                let Some(p) = summary((upstream, path, clients)) else {
                    continue;
                };
                let ratio = direct
                    .as_ref()
                    .map_or_else(|| "-".to_string(), |d| format!("{:.3}x", p.rps / d.rps));
                println!(
                    "| {} | {} | {} | {:.0} | {:.3} | {:.3} | {:.1} | {ratio} |",
                    upstream.label(),
                    path.label(),
                    clients,
                    p.rps,
                    p.p50_ms,
                    p.p99_ms,
                    p.cpu_us,
                );
            }
        }
    }
    Ok(())
}

fn main() {
    kberg_benches::loopback::run_main("aggregate bench", None, run());
}
