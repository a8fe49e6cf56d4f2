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
//! `KBERG_AGG_PROCESSES=separate` runs the Kberg upstream and the aggregator (with its front
//! server) each in a child process of its own (this binary again, with `KBERG_AGG_SERVE`), as
//! they run when deployed, apart from their clients; the report then gives the children's CPU
//! time per call beside this process's (the load generator's). The default, `one`, keeps every
//! Kberg server in this process. Either way, Node's CPU time per call is read from its process.
//! `KBERG_AGG_CLIENTS=1` measures only the named client counts (a comma list of 1 and 32).
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

use kberg_benches::loopback::{
    BoxError, Budget, ChildServer, Point, STATEFUL, Target, ToolCall, env_number, measure_cpu_of,
    median, pid_cpu, process_cpu, serve_in_child,
};
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

    /// The Node process's id, to read its CPU time.
    fn pid(&self) -> u32 {
        self.child.id()
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

/// The variable that starts this binary as one of the separate layout's servers, and the role.
const ROLE: &str = "KBERG_AGG_SERVE";
/// The aggregator child's upstream URLs.
const KB_URL: &str = "KBERG_AGG_KB_URL";
const EV_URL: &str = "KBERG_AGG_EV_URL";

/// Where the aggregator runs its upstream clients (`KBERG_AGG_RUNTIME`).
fn runtime() -> Result<UpstreamRuntime, BoxError> {
    match std::env::var("KBERG_AGG_RUNTIME").as_deref() {
        Ok("caller") => Ok(UpstreamRuntime::Caller),
        Ok("own") | Err(_) => Ok(UpstreamRuntime::Own),
        Ok(other) => Err(format!("KBERG_AGG_RUNTIME={other}: use `own` or `caller`").into()),
    }
}

/// The aggregated path: an [`Aggregator`] connected to the Kberg upstream (`kb`) and
/// server-everything (`ev`) at the given MCP URLs, and the Kberg server in front of it. Returns
/// once both upstreams are connected.
async fn start_aggregator(
    kb_url: &str,
    ev_url: &str,
    stop: CancellationToken,
) -> Result<(SocketAddr, Aggregator), BoxError> {
    let registry = ToolRegistry::new();
    let config = AggregatorConfig::new()
        .runtime(runtime()?)
        .upstream(UpstreamConfig::new("kb", UpstreamTransport::http(kb_url)))
        .upstream(UpstreamConfig::new("ev", UpstreamTransport::http(ev_url)));
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
    let outer = serve("aggregate-bench", registry, stop).await?;
    Ok((outer, aggregator))
}

/// Server mode of the separate layout (`KBERG_AGG_PROCESSES=separate`): this binary run as a
/// child with `KBERG_AGG_SERVE=upstream` (the Kberg echo upstream) or `aggregator` (the
/// aggregator and its front server, connected to the URLs in `KBERG_AGG_KB_URL` and
/// `KBERG_AGG_EV_URL`); serves until its stdin closes.
async fn serve_child(role: &str) -> Result<(), BoxError> {
    let stop = CancellationToken::new();
    match role {
        "upstream" => {
            let addr = start_kberg_upstream(stop.clone()).await?;
            serve_in_child(addr, stop).await;
        }
        "aggregator" => {
            let url = |var: &str| std::env::var(var).map_err(|_| format!("{var} is not set"));
            let (addr, aggregator) =
                start_aggregator(&url(KB_URL)?, &url(EV_URL)?, stop.clone()).await?;
            serve_in_child(addr, stop).await;
            aggregator.shutdown().await;
        }
        other => return Err(format!("{ROLE}={other}: not a server of this bench").into()),
    }
    Ok(())
}

async fn run() -> Result<(), BoxError> {
    if let Ok(role) = std::env::var(ROLE) {
        return serve_child(&role).await;
    }
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

    // The smoke run checks both layouts; a measured run takes the one asked for.
    let layouts: &[bool] = match std::env::var("KBERG_AGG_PROCESSES").as_deref() {
        Ok("one") => &[false],
        Ok("separate") => &[true],
        Err(_) if full => &[false],
        Err(_) => &[false, true],
        Ok(other) => {
            return Err(format!("KBERG_AGG_PROCESSES={other}: use `one` or `separate`").into());
        }
    };
    // Checked here, so a mistyped value fails before anything starts.
    runtime()?;
    for &separate in layouts {
        run_layout(separate, full, rounds, budget).await?;
    }
    Ok(())
}

/// One run of the bench with every Kberg server in this process, or (`separate`) each in a
/// child process of its own.
async fn run_layout(
    separate: bool,
    full: bool,
    rounds: u64,
    budget: Budget,
) -> Result<(), BoxError> {
    let stop = CancellationToken::new();
    let _stop = StopOnDrop(stop.clone());
    let everything = Everything::start().await?;
    let ev_url = format!("http://{}/mcp", everything.addr);
    // Each Kberg server in this process, or each in a child process of its own (the Kberg
    // upstream, then the aggregator with its front server).
    let (upstream, outer, aggregator, children) = if separate {
        let up = ChildServer::start(ROLE, "upstream", &[])?;
        let kb_url = format!("http://{}/mcp", up.addr);
        let agg = ChildServer::start(
            ROLE,
            "aggregator",
            &[(KB_URL, kb_url), (EV_URL, ev_url.clone())],
        )?;
        (up.addr, agg.addr, None, vec![up, agg])
    } else {
        let upstream = start_kberg_upstream(stop.clone()).await?;
        let (outer, aggregator) =
            start_aggregator(&format!("http://{upstream}/mcp"), &ev_url, stop.clone()).await?;
        (upstream, outer, Some(aggregator), Vec::new())
    };
    let child_pids: Vec<u32> = children.iter().map(ChildServer::pid).collect();

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

    let concurrency: Vec<usize> = match std::env::var("KBERG_AGG_CLIENTS") {
        Err(_) => CONCURRENCY.to_vec(),
        Ok(list) => {
            let named: Vec<usize> = CONCURRENCY
                .into_iter()
                .filter(|n| list.split(',').any(|w| w.trim() == n.to_string()))
                .collect();
            if named.is_empty() {
                return Err(format!("KBERG_AGG_CLIENTS={list} names no point (1, 32)").into());
            }
            named
        }
    };

    type Key = (Upstream, Path, usize);
    /// One round's point, with the Kberg children's CPU time per call when they run apart and
    /// Node's when the case calls Node.
    type Round = (Point, Option<f64>, Option<f64>);
    let mut results: Vec<(Key, Vec<Round>)> = Vec::new();
    for round in 0..rounds {
        for case in &cases {
            for &clients in &concurrency {
                // Node's CPU time, and the Kberg children's, are read beside this process's,
                // at the same two moments around the timed calls; a case on the Kberg upstream
                // reads no Node time, a run in one process no children's.
                let node_pid = (case.upstream == Upstream::Everything).then(|| everything.pid());
                let marks = std::sync::Mutex::new(Vec::with_capacity(2));
                let cpu = || {
                    if let Ok(mut marks) = marks.lock() {
                        let node = node_pid.and_then(pid_cpu);
                        let kberg = (!child_pids.is_empty())
                            .then(|| {
                                child_pids
                                    .iter()
                                    .map(|&p| pid_cpu(p))
                                    .sum::<Option<Duration>>()
                            })
                            .flatten();
                        marks.push((node, kberg));
                    }
                    process_cpu()
                };
                let target = Target {
                    addr: case.addr,
                    path: "/mcp",
                    protocol: STATEFUL,
                    handshake: true,
                    bearer: None,
                };
                let p = measure_cpu_of(target, clients, &case.call, budget, &cpu)
                    .await
                    .map_err(|e| {
                        format!(
                            "{} {} with {clients} client(s): {e}",
                            case.upstream.label(),
                            case.path.label()
                        )
                    })?;
                let per_call = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
                    (Some(a), Some(b)) if p.calls > 0 => {
                        Some(b.saturating_sub(a).as_secs_f64() * 1e6 / p.calls as f64)
                    }
                    _ => None,
                };
                let (node_us, kberg_us) = match marks.into_inner().as_deref() {
                    Ok([(n0, k0), (n1, k1)]) => (per_call(*n0, *n1), per_call(*k0, *k1)),
                    _ => (None, None),
                };
                // The smoke run checks that every reading the report needs was taken.
                if !full
                    && (node_pid.is_some() && node_us.is_none() || separate && kberg_us.is_none())
                {
                    return Err(format!(
                        "{} {}: no CPU time read from {}",
                        case.upstream.label(),
                        case.path.label(),
                        if node_pid.is_some() && node_us.is_none() {
                            "Node"
                        } else {
                            "the Kberg children"
                        }
                    )
                    .into());
                }
                if full {
                    let kberg = kberg_us
                        .map_or_else(String::new, |n| format!("  kberg servers {n:.1} us/call"));
                    let node =
                        node_us.map_or_else(String::new, |n| format!("  node {n:.1} us/call"));
                    println!(
                        "round {} {:<26} {:<10} {:>2} client(s): {:>8.0} calls/s  p50 {:.3} ms  p99 {:.3} ms  cpu {:.1} us/call{kberg}{node}",
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
                    Some((_, v)) => v.push((p, kberg_us, node_us)),
                    None => results.push((key, vec![(p, kberg_us, node_us)])),
                }
            }
        }
    }
    if let Some(aggregator) = aggregator {
        aggregator.shutdown().await;
    }
    stop.cancel();
    drop(children);
    drop(everything);
    if !full {
        println!(
            "aggregate bench smoke run ({}): both upstreams answered tools/call directly and through the aggregator",
            if separate {
                "Kberg servers in child processes"
            } else {
                "one process"
            }
        );
        return Ok(());
    }

    let summary = |key: Key| {
        results.iter().find(|(k, _)| *k == key).map(|(_, v)| {
            let points: Vec<Point> = v.iter().map(|(p, _, _)| *p).collect();
            let median_of = |values: Vec<f64>| (!values.is_empty()).then(|| median(values));
            (
                Point::median_of(&points),
                median_of(v.iter().filter_map(|(_, k, _)| *k).collect()),
                median_of(v.iter().filter_map(|(_, _, n)| *n).collect()),
            )
        })
    };
    println!();
    println!(
        "{}",
        if separate {
            "the Kberg upstream and the aggregator each in a child process of its own"
        } else {
            "every Kberg server in this process"
        }
    );
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
        "| upstream | path | clients | calls/s | p50 ms | p99 ms | CPU us/call (this process) | CPU us/call (Kberg children) | CPU us/call (Node) | calls/s aggregated / direct |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for upstream in [Upstream::Kberg, Upstream::Everything] {
        for &clients in &concurrency {
            let direct = summary((upstream, Path::Direct, clients));
            for path in [Path::Direct, Path::Aggregated] {
                // A case left out by KBERG_AGG_CASES has no row; without its direct case the
                // ratio is not known.
                let Some((p, kberg, node)) = summary((upstream, path, clients)) else {
                    continue;
                };
                let ratio = direct.as_ref().map_or_else(
                    || "-".to_string(),
                    |(d, _, _)| format!("{:.3}x", p.rps / d.rps),
                );
                let cell =
                    |v: Option<f64>| v.map_or_else(|| "-".to_string(), |n| format!("{n:.1}"));
                let (kberg, node) = (cell(kberg), cell(node));
                println!(
                    "| {} | {} | {} | {:.0} | {:.3} | {:.3} | {:.1} | {kberg} | {node} | {ratio} |",
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
