//! The wire bench: `tools/call` round trips over loopback HTTP against Kberg, against a bare rmcp
//! server, and against a bare-hyper fixed response (the ceiling), in the same run.
//!
//! Why a custom harness: the quantity is throughput and latency under concurrent keep-alive
//! clients, which criterion's one-closure model does not express. Each client owns one HTTP/1.1
//! keep-alive connection (TCP_NODELAY) and sends calls back to back; every response is read
//! whole and checked. All three servers serve the same trivial tool (`echo` returns its `text`
//! argument) with accepted sockets set to TCP_NODELAY (see PERFORMANCE.md for why that matters),
//! and Kberg and rmcp are measured on both protocol generations: 2025-11-25 (an `initialize`d
//! session per client, each call answered as a small SSE stream) and 2026-07-28 (stateless: no
//! handshake, `_meta` and the `Mcp-Method` / `Mcp-Name` headers on every call, JSON answers).
//! The bare rmcp server is rmcp's own `ServerHandler` behind rmcp's Streamable HTTP service,
//! configured as kberg-server configures it. Kberg additionally runs its gate (projection,
//! grants, schema validation, audit hook) on every call; that is the cost this bench exists to
//! watch (goal: Kberg >= 0.95x bare rmcp).
//!
//! Rounds interleave the servers (round 1: Kberg, rmcp, hyper; round 2: ...) and the report takes
//! the median of the rounds, so a noisy moment on a shared machine hits every server alike.
//!
//! ```text
//! cargo bench -p kberg-benches --bench wire                  # 3 rounds x 5 s per point
//! KBERG_WIRE_SECS=10 KBERG_WIRE_ROUNDS=3 cargo bench -p kberg-benches --bench wire
//! ```
//!
//! Without `--bench` (as under `cargo test --benches`) it runs one short smoke round that only
//! checks every server answers correctly, and the paired mode's path once in each process
//! layout.
//!
//! Counting mode, for a figure that other load on the machine cannot move: with
//! `KBERG_WIRE_COUNT=<calls>` and `KBERG_WIRE_CASE=<server>/<protocol>` (`kberg` or `rmcp`,
//! `2025-11-25` or `2026-07-28`) the binary starts that one server and makes that many calls
//! from one client (or shared evenly between `KBERG_WIRE_CLIENTS` clients, each on its own
//! connection), then exits. Run under `valgrind --tool=callgrind` with two call counts, the
//! difference of the two totals over the difference of the counts is the instructions one call
//! costs the whole process (client and server, start-up cancelled out);
//! `benches/wire-instructions.sh` does that for the four cases.
//!
//! Paired mode, for a throughput ratio that a few percent can be read from: with
//! `KBERG_WIRE_PAIRS=<n>` (and `--bench`) Kberg and bare rmcp alternate in `n` pairs of short
//! slices (`KBERG_WIRE_SLICE_MS`, 500 by default; the first of each pair alternates too), each
//! slice on new connections and sessions. On two cores shared by the load generator and the
//! server, where each client's task and its connection's task happen to run decides a
//! round's throughput more than the server's code does, and a 5-second round keeps one
//! placement; hundreds of short slices average over placements and over the machine's slow
//! drifts alike. The report gives, per point, both servers' calls over their summed time, the
//! ratio, the quartiles of the per-pair ratios, and the CPU per call of each. Only the points
//! named in `KBERG_WIRE_POINTS` (a comma list of `<protocol>/<clients>`, for example
//! `2026-07-28/1`) are measured; by default all six.
//!
//! With `KBERG_WIRE_PROCESSES=separate` the paired mode runs each server in a child process
//! of its own (this binary again, with `KBERG_WIRE_SERVE=kberg` or `rmcp`), as a deployed
//! server runs apart from its clients: the load generator keeps this process's runtime, each
//! server has a runtime of its own, and the CPU per call is the server process's alone (the sum
//! of its threads' time on a CPU, from `/proc/<pid>/task/*/schedstat`). The default, `one`, keeps
//! everything in this process and counts this process's CPU time.
//!
//! ```text
//! KBERG_WIRE_PAIRS=60 cargo bench -p kberg-benches --bench wire
//! KBERG_WIRE_PAIRS=200 KBERG_WIRE_POINTS=2026-07-28/1 cargo bench -p kberg-benches --bench wire
//! KBERG_WIRE_PAIRS=50 KBERG_WIRE_PROCESSES=separate cargo bench -p kberg-benches --bench wire
//! ```

// A bench's report is its stdout.
#![allow(clippy::print_stdout)]

use std::net::SocketAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, Response};
use kberg_benches::echo_servers::{start_kberg, start_rmcp};
use kberg_benches::loopback::{
    BoxError, Budget, ChildServer, Point, STATEFUL, STATELESS, Target, ToolCall, env_number,
    measure, measure_cpu_of, pid_cpu, process_cpu, serve_in_child,
};
use kberg_server::Limits;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const ECHO_TEXT: &str = "hello wire";
/// Client counts per point: one (latency-bound) and 16 and 32 (CPU-bound on two cores), as the
/// goal names them.
const CONCURRENCY: [usize; 3] = [1, 16, 32];

/// The ceiling: hyper answering every POST with a fixed JSON-RPC result, no MCP at all.
async fn start_hyper(stop: CancellationToken) -> Result<SocketAddr, BoxError> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    let body = Bytes::from(
        json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": ECHO_TEXT}], "isError": false}})
            .to_string(),
    );
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = stop.cancelled() => break,
            };
            let Ok((tcp, _)) = accepted else { continue };
            let _ = tcp.set_nodelay(true);
            let body = body.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let body = body.clone();
                        async move {
                            // Read the request like a real server would.
                            let _ = req.into_body().collect().await;
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(body))
                        }
                    });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service);
                tokio::select! {
                    _ = conn => {}
                    () = stop.cancelled() => {}
                }
            });
        }
    });
    Ok(addr)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Kberg,
    Rmcp,
    Hyper,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Kberg => "Kberg (kberg-server + gate)",
            Kind::Rmcp => "bare rmcp 3.11",
            Kind::Hyper => "bare hyper, fixed response",
        }
    }
}

/// The protocol generation a bench setting names, as the load generator spells it.
fn generation(name: &str) -> Option<&'static str> {
    [STATEFUL, STATELESS].into_iter().find(|g| *g == name)
}

/// Counting mode (see the module docs): one server, `clients` clients (one unless
/// `KBERG_WIRE_CLIENTS` says more), `calls` calls in all, shared evenly between them.
async fn count(case: &str, calls: u64, clients: usize) -> Result<(), BoxError> {
    let (server, protocol) = case
        .split_once('/')
        .ok_or("KBERG_WIRE_CASE is <kberg|rmcp>/<protocol>")?;
    let protocol = generation(protocol)
        .ok_or_else(|| format!("unknown protocol {protocol:?} in KBERG_WIRE_CASE"))?;
    let stop = CancellationToken::new();
    let addr = start_named(server, "KBERG_WIRE_CASE", &stop).await?;
    let echo = ToolCall::new("echo", json!({"text": ECHO_TEXT}), ECHO_TEXT);
    let calls = usize::try_from(calls)?;
    if clients == 0 {
        return Err("KBERG_WIRE_CLIENTS must be at least 1".into());
    }
    if calls % clients != 0 {
        return Err(format!(
            "KBERG_WIRE_COUNT ({calls}) must be a multiple of KBERG_WIRE_CLIENTS ({clients})"
        )
        .into());
    }
    let each = Budget::Calls(calls / clients);
    let p = measure(addr, "/mcp", protocol, true, clients, &echo, each).await?;
    stop.cancel();
    println!("{case}: {} calls answered", p.calls);
    Ok(())
}

/// Starts the server a setting names (`kberg` or `rmcp`) in this process, until `stop`.
async fn start_named(
    server: &str,
    setting: &str,
    stop: &CancellationToken,
) -> Result<SocketAddr, BoxError> {
    match server {
        "kberg" => start_kberg(stop.clone(), Limits::default()).await,
        "rmcp" => start_rmcp(stop.clone()).await,
        other => Err(format!("unknown server {other:?} in {setting}").into()),
    }
}

/// Server mode: this binary run as a child by the paired mode's `KBERG_WIRE_PROCESSES=separate`.
/// Starts `server` (`kberg` or `rmcp`) on this process's runtime, writes `listening <address>`
/// on stdout, and serves until stdin is closed (by the parent, or by its end).
async fn serve_child(server: &str) -> Result<(), BoxError> {
    let stop = CancellationToken::new();
    let addr = start_named(server, "KBERG_WIRE_SERVE", &stop).await?;
    serve_in_child(addr, stop).await;
    Ok(())
}

async fn run() -> Result<(), BoxError> {
    if let Ok(server) = std::env::var("KBERG_WIRE_SERVE") {
        return serve_child(&server).await;
    }
    // A counting run that is asked for but mistyped fails, rather than quietly running the
    // timed rounds.
    match (
        std::env::var("KBERG_WIRE_CASE"),
        std::env::var("KBERG_WIRE_COUNT"),
    ) {
        (Ok(case), Ok(calls)) => {
            let calls = calls
                .parse::<u64>()
                .map_err(|_| format!("KBERG_WIRE_COUNT is a number of calls, not {calls:?}"))?;
            let clients = match std::env::var("KBERG_WIRE_CLIENTS") {
                Ok(n) => n
                    .parse::<usize>()
                    .map_err(|_| format!("KBERG_WIRE_CLIENTS is a number of clients, not {n:?}"))?,
                Err(_) => 1,
            };
            return count(&case, calls, clients).await;
        }
        (Ok(_), Err(_)) | (Err(_), Ok(_)) => {
            return Err("counting mode needs both KBERG_WIRE_CASE and KBERG_WIRE_COUNT".into());
        }
        (Err(_), Err(_)) => {}
    }
    let full = std::env::args().any(|a| a == "--bench");
    let (secs, rounds) = if full {
        (
            env_number("KBERG_WIRE_SECS", 5),
            env_number("KBERG_WIRE_ROUNDS", 3),
        )
    } else {
        (0, 1)
    };
    let run_for = if full {
        Duration::from_secs(secs.max(1))
    } else {
        Duration::from_millis(200)
    };
    let echo = ToolCall::new("echo", json!({"text": ECHO_TEXT}), ECHO_TEXT);
    let separate = match std::env::var("KBERG_WIRE_PROCESSES").as_deref() {
        Err(_) | Ok("one") => false,
        Ok("separate") => true,
        Ok(other) => {
            return Err(
                format!("KBERG_WIRE_PROCESSES is `one` or `separate`, not {other:?}").into(),
            );
        }
    };
    let pairs = env_number("KBERG_WIRE_PAIRS", 0);
    if full && pairs > 0 {
        let slice = Duration::from_millis(env_number("KBERG_WIRE_SLICE_MS", 500).max(10));
        let points = match std::env::var("KBERG_WIRE_POINTS") {
            Ok(list) => parse_points(&list)?,
            Err(_) => all_points(),
        };
        if separate {
            let kberg = ChildServer::start("KBERG_WIRE_SERVE", "kberg", &[])?;
            let rmcp = ChildServer::start("KBERG_WIRE_SERVE", "rmcp", &[])?;
            let sides = [Side::child(&kberg), Side::child(&rmcp)];
            return paired(sides, &echo, &points, pairs, slice).await;
        }
        let stop = CancellationToken::new();
        let sides = [
            Side::here(start_kberg(stop.clone(), Limits::default()).await?),
            Side::here(start_rmcp(stop.clone()).await?),
        ];
        let outcome = paired(sides, &echo, &points, pairs, slice).await;
        stop.cancel();
        return outcome;
    }
    let stop = CancellationToken::new();
    let kberg = start_kberg(stop.clone(), Limits::default()).await?;
    let rmcp = start_rmcp(stop.clone()).await?;
    let hyper = start_hyper(stop.clone()).await?;
    if !full {
        // The paired mode's path, once, on the cheapest point: with the servers in this
        // process, and with each in a child process of its own.
        let children = [
            ChildServer::start("KBERG_WIRE_SERVE", "kberg", &[])?,
            ChildServer::start("KBERG_WIRE_SERVE", "rmcp", &[])?,
        ];
        for sides in [
            [Side::here(kberg), Side::here(rmcp)],
            [Side::child(&children[0]), Side::child(&children[1])],
        ] {
            let pair =
                paired_point(&sides, &echo, (STATELESS, 1), 2, Duration::from_millis(50)).await?;
            if pair.kberg.calls == 0 || pair.rmcp.calls == 0 || pair.ratios.len() != 2 {
                return Err("the paired mode's smoke run completed no pair".into());
            }
            if !(pair.kberg.cpu_secs > 0.0 && pair.rmcp.cpu_secs > 0.0) {
                return Err("the paired mode's smoke run measured no CPU time".into());
            }
        }
    }
    // The ceiling does not speak MCP, so it is measured once.
    let cases = [
        (Kind::Kberg, STATEFUL, kberg),
        (Kind::Rmcp, STATEFUL, rmcp),
        (Kind::Kberg, STATELESS, kberg),
        (Kind::Rmcp, STATELESS, rmcp),
        (Kind::Hyper, "-", hyper),
    ];
    type Key = (Kind, &'static str, usize);
    let mut results: Vec<(Key, Vec<Point>)> = Vec::new();
    for round in 0..rounds.max(1) {
        for &(kind, protocol, addr) in &cases {
            for clients in CONCURRENCY {
                let p = measure(
                    addr,
                    "/mcp",
                    protocol,
                    kind != Kind::Hyper,
                    clients,
                    &echo,
                    Budget::Time(run_for),
                )
                .await?;
                if full {
                    println!(
                        "round {} {:<28} {:<10} {:>2} client(s): {:>9.0} req/s  p50 {:.3} ms  p99 {:.3} ms  cpu {:.1} us/call",
                        round + 1,
                        kind.label(),
                        protocol,
                        clients,
                        p.rps,
                        p.p50_ms,
                        p.p99_ms,
                        p.cpu_us
                    );
                }
                let key = (kind, protocol, clients);
                match results.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, v)) => v.push(p),
                    None => results.push((key, vec![p])),
                }
            }
        }
    }
    stop.cancel();
    if !full {
        println!(
            "wire bench smoke run: Kberg and bare rmcp (both protocol generations) and bare hyper all answered tools/call"
        );
        return Ok(());
    }
    let summary = |key: Key| {
        let pts = results
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        Point::median_of(&pts)
    };
    println!();
    println!("medians of {rounds} round(s) x {secs} s, one keep-alive connection per client");
    println!(
        "| server | protocol | clients | req/s | p50 ms | p99 ms | CPU us/call | req/s vs bare rmcp | CPU/call vs bare rmcp |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for clients in CONCURRENCY {
        for &(kind, protocol, _) in &cases {
            let p = summary((kind, protocol, clients));
            let base_protocol = if kind == Kind::Hyper {
                STATEFUL
            } else {
                protocol
            };
            let base = summary((Kind::Rmcp, base_protocol, clients));
            println!(
                "| {} | {} | {} | {:.0} | {:.3} | {:.3} | {:.1} | {:.3}x | {:.3}x |",
                kind.label(),
                protocol,
                clients,
                p.rps,
                p.p50_ms,
                p.p99_ms,
                p.cpu_us,
                p.rps / base.rps,
                p.cpu_us / base.cpu_us
            );
        }
    }
    Ok(())
}

/// A point of the paired mode: a protocol generation and a number of clients.
type PairPoint = (&'static str, usize);

/// The six points of the goal: both generations at 1, 16 and 32 clients.
fn all_points() -> Vec<PairPoint> {
    [STATEFUL, STATELESS]
        .into_iter()
        .flat_map(|p| CONCURRENCY.map(|c| (p, c)))
        .collect()
}

/// `KBERG_WIRE_POINTS`: a comma list of `<protocol>/<clients>`.
fn parse_points(list: &str) -> Result<Vec<PairPoint>, BoxError> {
    let bad = || format!("KBERG_WIRE_POINTS is a comma list of <protocol>/<clients>, not {list:?}");
    let mut points = Vec::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (protocol, clients) = item.split_once('/').ok_or_else(bad)?;
        let protocol = generation(protocol).ok_or_else(bad)?;
        let clients = clients.parse::<usize>().map_err(|_| bad())?;
        if clients == 0 {
            return Err(bad().into());
        }
        points.push((protocol, clients));
    }
    if points.is_empty() {
        return Err(bad().into());
    }
    Ok(points)
}

/// One server's slices of a point, summed.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    calls: usize,
    secs: f64,
    cpu_secs: f64,
}

impl Tally {
    fn add(&mut self, p: &Point) {
        self.calls += p.calls;
        self.secs += p.calls as f64 / p.rps;
        self.cpu_secs += p.cpu_us * p.calls as f64 / 1e6;
    }

    fn rps(&self) -> f64 {
        self.calls as f64 / self.secs
    }

    fn cpu_us(&self) -> f64 {
        self.cpu_secs * 1e6 / self.calls as f64
    }
}

/// What the paired slices of one point gave.
struct Pairs {
    kberg: Tally,
    rmcp: Tally,
    /// Kberg's req/s over bare rmcp's, pair by pair, sorted.
    ratios: Vec<f64>,
}

/// One server of the paired mode: where it listens, and which process's CPU time its slices
/// count.
#[derive(Debug, Clone, Copy)]
struct Side {
    addr: SocketAddr,
    /// The server's own process, when it runs in a child; `None`: this process (server and load
    /// generator together).
    pid: Option<u32>,
}

impl Side {
    fn here(addr: SocketAddr) -> Self {
        Self { addr, pid: None }
    }

    fn child(child: &ChildServer) -> Self {
        Self {
            addr: child.addr,
            pid: Some(child.pid()),
        }
    }

    fn cpu(&self) -> Option<Duration> {
        match self.pid {
            Some(pid) => pid_cpu(pid),
            None => process_cpu(),
        }
    }
}

/// `pairs` pairs of `slice`-long measurements of Kberg and bare rmcp (`sides`, in that order)
/// at one point; the first of each pair alternates.
async fn paired_point(
    sides: &[Side; 2],
    echo: &ToolCall,
    (protocol, clients): PairPoint,
    pairs: u64,
    slice: Duration,
) -> Result<Pairs, BoxError> {
    let mut out = Pairs {
        kberg: Tally::default(),
        rmcp: Tally::default(),
        ratios: Vec::with_capacity(usize::try_from(pairs)?),
    };
    for i in 0..pairs {
        let [kberg, rmcp] = sides;
        let order = if i % 2 == 0 {
            [(true, kberg), (false, rmcp)]
        } else {
            [(false, rmcp), (true, kberg)]
        };
        let mut rps = [0.0f64; 2];
        for (is_kberg, side) in order {
            let target = Target {
                addr: side.addr,
                path: "/mcp",
                protocol,
                handshake: true,
                bearer: None,
            };
            let p =
                measure_cpu_of(target, clients, echo, Budget::Time(slice), &|| side.cpu()).await?;
            if is_kberg {
                out.kberg.add(&p);
                rps[0] = p.rps;
            } else {
                out.rmcp.add(&p);
                rps[1] = p.rps;
            }
        }
        out.ratios.push(rps[0] / rps[1]);
    }
    out.ratios.sort_by(f64::total_cmp);
    Ok(out)
}

/// The paired mode (see the module docs).
async fn paired(
    sides: [Side; 2],
    echo: &ToolCall,
    points: &[PairPoint],
    pairs: u64,
    slice: Duration,
) -> Result<(), BoxError> {
    let mut rows = Vec::with_capacity(points.len());
    for &point in points {
        let r = paired_point(&sides, echo, point, pairs, slice).await?;
        let q = |f: f64| r.ratios[((r.ratios.len() - 1) as f64 * f).round() as usize];
        let row = format!(
            "| {} | {} | {:.0} | {:.0} | **{:.3}x** | {:.3} / {:.3} / {:.3} | {:.1} | {:.1} | {:.3}x |",
            point.0,
            point.1,
            r.kberg.rps(),
            r.rmcp.rps(),
            r.kberg.rps() / r.rmcp.rps(),
            q(0.25),
            q(0.5),
            q(0.75),
            r.kberg.cpu_us(),
            r.rmcp.cpu_us(),
            r.kberg.cpu_us() / r.rmcp.cpu_us(),
        );
        println!("{row}");
        rows.push(row);
    }
    println!();
    println!(
        "{pairs} pairs of {} ms slices per point, new connections for every slice; {}",
        slice.as_millis(),
        if sides[0].pid.is_some() {
            "each server in a child process of its own, CPU time of the server's process"
        } else {
            "servers and load generator in one process, CPU time of that process"
        }
    );
    println!(
        "| protocol | clients | Kberg req/s | bare rmcp req/s | Kberg / rmcp | pair ratios q1 / median / q3 | Kberg CPU us/call | rmcp CPU us/call | CPU ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    Ok(())
}

fn main() {
    kberg_benches::loopback::run_main("wire bench", None, run());
}
