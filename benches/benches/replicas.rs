//! Gateway replicas: `tools/call` through a round-robin proxy in front of two Bridle gateways on
//! one PostgreSQL database, against the same proxy in front of one of them, in the same run.
//!
//! Why it exists: the point of several replicas is that a team's load is spread over them, and
//! what they share (one database: the token check's cache invalidations, the audit log's one
//! hash chain, the rules) could instead serialize them. The ratio says what the second replica
//! buys on this machine for the call agents make most, `get_rules` (a Read tool: the agent's
//! token checked, the gate, the rules rendered, the call appended to the shared audit log).
//!
//! Each gateway runs in this process on its own tokio runtime and threads (two workers, as
//! `bridle serve` has on a 2-core machine), built by `GatewayBuilder` on a data directory laid
//! out as an operator would (`examples/tests/bridle_support/replica_dirs.rs`: one database, one
//! master key file); PostgreSQL 15 is a throwaway cluster on 127.0.0.1 started for the run
//! (`initdb` + `pg_ctl`, as the tests do; fsync off). The proxy is the tests' one
//! (`examples/tests/bridle_support/proxy.rs`: each request to the next upstream, TCP_NODELAY on
//! both hops), so both cases pay the same extra hop. Clients are the load generator of
//! `kberg_benches::loopback`, on the 2026-07-28 revision (stateless: no session, so no affinity
//! is needed) and on 2025-11-25 (a session per client: through one replica every request of it
//! reaches the replica that holds it, as sticky routing gives; through two, every other one
//! reaches the replica that resumed it from the database): one keep-alive connection each, calls
//! back to back, every answer checked. Each round also opens 50 sessions on the first replica and
//! times a call there, the first call on the second (the resume) and the next one. Rounds
//! interleave the cases so a noisy moment hits all alike; the report is the median of the
//! rounds.
//!
//! ```text
//! cargo bench -p kberg-benches --features postgres --bench replicas    # 3 rounds x 300 calls per client
//! KBERG_REPLICAS_ROUNDS=5 KBERG_REPLICAS_CALLS=1000 cargo bench -p kberg-benches --features postgres --bench replicas
//! ```
//!
//! Without `--bench` (as under `cargo test --benches`), or with `-- --test`, it runs one smoke
//! round of a few calls per case that only checks both paths answer correctly.

// A bench's report is its stdout.
#![allow(clippy::print_stdout)]

#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;
#[path = "../../examples/tests/bridle_support/proxy.rs"]
mod proxy;
#[path = "../../examples/tests/bridle_support/replica_dirs.rs"]
mod replica_dirs;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::GatewayConfig;
use kberg_benches::loopback::{
    BoxError, Budget, Client, Point, STATEFUL, STATELESS, ToolCall, env_number, measure_as, median,
};
use proxy::RoundRobinProxy;
use replica_dirs::{AGENT_TOKEN, PROJECT, ReplicaDirs};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CONCURRENCY: [usize; 2] = [1, 16];

/// A gateway serving MCP on a free loopback port from its own runtime thread.
struct Replica {
    addr: SocketAddr,
    stop: CancellationToken,
    thread: std::thread::JoinHandle<()>,
}

impl Replica {
    /// Builds and binds the gateway of `dir` on a new thread; returns once it listens.
    fn start(dir: PathBuf) -> Result<Self, BoxError> {
        let (tx, rx) = std::sync::mpsc::channel::<Result<SocketAddr, String>>();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(format!("a replica's runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let bound = async {
                    let config = GatewayConfig::load(&dir)?;
                    let gateway = GatewayBuilder::new(&dir, config).build().await?;
                    Ok::<_, BoxError>(gateway.bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?)
                }
                .await;
                match bound {
                    Ok(bound) => {
                        let _ = tx.send(Ok(bound.local_addr()));
                        if let Err(e) = bound.run(stopped.cancelled_owned()).await {
                            eprintln!("a replica stopped with an error: {e}");
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("starting a replica: {e}")));
                    }
                }
            });
        });
        let addr = rx.recv_timeout(Duration::from_secs(120))??;
        Ok(Self { addr, stop, thread })
    }

    fn stop(self) {
        self.stop.cancel();
        let _ = self.thread.join();
    }
}

/// One measured case: the proxy (its index), the protocol revision and the client count.
type Case = (usize, &'static str, usize);

async fn run(
    full: bool,
    proxies: &[(&str, RoundRobinProxy)],
    replicas: [SocketAddr; 2],
) -> Result<(), BoxError> {
    let rounds = if full {
        env_number("KBERG_REPLICAS_ROUNDS", 3) as usize
    } else {
        1
    };
    let calls = if full {
        env_number("KBERG_REPLICAS_CALLS", 300) as usize
    } else {
        5
    };
    let call = ToolCall::new(
        "get_rules",
        json!({"project": PROJECT}),
        "no-unrequested-refactors",
    );
    let mut results: Vec<(Case, Vec<Point>)> = Vec::new();
    let mut restores = Vec::new();
    for round in 0..rounds {
        for (case, (label, proxy)) in proxies.iter().enumerate() {
            // 2026-07-28 (no session), and 2025-11-25: through one replica every request of a
            // session reaches the replica that holds it (what sticky routing gives); through
            // the alternating proxy every other one reaches the replica that resumed it from
            // the database.
            for protocol in [STATELESS, STATEFUL] {
                for clients in CONCURRENCY {
                    let p = measure_as(
                        proxy.addr(),
                        "/mcp",
                        protocol,
                        true,
                        Some(AGENT_TOKEN),
                        clients,
                        &call,
                        Budget::Calls(calls),
                    )
                    .await
                    .map_err(|e| format!("{label} {protocol} with {clients} client(s): {e}"))?;
                    if full {
                        println!(
                            "round {} {label:<13} {protocol} {clients:>2} client(s): {:>7.0} calls/s  p50 {:.3} ms  p99 {:.3} ms  cpu {:.0} us/call",
                            round + 1,
                            p.rps,
                            p.p50_ms,
                            p.p99_ms,
                            p.cpu_us
                        );
                    }
                    let key = (case, protocol, clients);
                    match results.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, v)) => v.push(p),
                        None => results.push((key, vec![p])),
                    }
                }
            }
        }
        restores.push(measure_restores(replicas, &call, if full { 50 } else { 2 }).await?);
    }
    // The two-replica proxy really spread the calls.
    let spread = proxies[1].1.forwarded();
    if spread.contains(&0) || proxies.iter().any(|(_, p)| p.failed() > 0) {
        return Err(format!("the proxy did not alternate cleanly: forwarded {spread:?}").into());
    }
    if !full {
        println!(
            "replicas bench smoke run: tools/call answered through the proxy with one and with two replicas"
        );
        return Ok(());
    }
    let summary = |case: usize, protocol: &str, clients: usize| {
        let pts = results
            .iter()
            .find(|(k, _)| *k == (case, protocol, clients))
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        Point::median_of(&pts)
    };
    println!();
    println!(
        "medians of {rounds} round(s) x {calls} calls per client, get_rules through the proxy"
    );
    println!(
        "| protocol | clients | one replica calls/s | two replicas calls/s | ratio | p50 ms one / two | cpu us/call one / two |"
    );
    println!("|---|---|---|---|---|---|---|");
    for protocol in [STATELESS, STATEFUL] {
        for clients in CONCURRENCY {
            let (one, two) = (summary(0, protocol, clients), summary(1, protocol, clients));
            println!(
                "| {protocol} | {clients} | {:.0} | {:.0} | {:.2}x | {:.3} / {:.3} | {:.0} / {:.0} |",
                one.rps,
                two.rps,
                two.rps / one.rps,
                one.p50_ms,
                two.p50_ms,
                one.cpu_us,
                two.cpu_us
            );
        }
    }
    let restore = |f: fn(&Restores) -> f64| median(restores.iter().map(f).collect());
    println!();
    println!(
        "2025-11-25 sessions, medians of {rounds} round(s) x 50 sessions: initialize {:.3} ms (its state written to the database); first call on the replica that initialized it {:.3} ms; first call on the other replica (resumed from the database) {:.3} ms; its next call there {:.3} ms",
        restore(|r| r.initialize_ms),
        restore(|r| r.first_local_ms),
        restore(|r| r.first_resumed_ms),
        restore(|r| r.next_resumed_ms),
    );
    println!("(two replicas' proxy forwarded {spread:?} calls to the first and the second)");
    Ok(())
}

/// Medians over sessions of one round of [`measure_restores`], in milliseconds.
struct Restores {
    initialize_ms: f64,
    first_local_ms: f64,
    first_resumed_ms: f64,
    next_resumed_ms: f64,
}

/// One call's round trip, in milliseconds.
async fn timed(c: &mut Client, call: &ToolCall) -> Result<f64, BoxError> {
    let t = std::time::Instant::now();
    c.call(call).await?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// Opens `sessions` 2025-11-25 sessions on the first replica, each timed (`initialize` and
/// `notifications/initialized`: the session's state is written to the database), and times one
/// call of each session on that replica, then the first call of each on the second replica
/// (which resumes it from the database: one read, the handshake replayed) and the next one
/// there. Sessions alternate which replica they first call, so neither order is favoured.
async fn measure_restores(
    replicas: [SocketAddr; 2],
    call: &ToolCall,
    sessions: usize,
) -> Result<Restores, BoxError> {
    let ms = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e3;
    let (mut init, mut local, mut resumed, mut next) = (vec![], vec![], vec![], vec![]);
    for i in 0..sessions {
        let t = std::time::Instant::now();
        let mut on_a =
            Client::connect_as(replicas[0], "/mcp", STATEFUL, true, Some(AGENT_TOKEN)).await?;
        init.push(ms(t));
        let sid = on_a.session().ok_or("no session id")?.to_string();
        let mut on_b = Client::connect_as(replicas[1], "/mcp", STATEFUL, false, Some(AGENT_TOKEN))
            .await?
            .with_session(sid);
        if i % 2 == 0 {
            local.push(timed(&mut on_a, call).await?);
            resumed.push(timed(&mut on_b, call).await?);
        } else {
            resumed.push(timed(&mut on_b, call).await?);
            local.push(timed(&mut on_a, call).await?);
        }
        next.push(timed(&mut on_b, call).await?);
        // Ended where it was opened, as a client that is done does: the replica lets one
        // principal hold only its share of the session limit, and the next rounds open more.
        on_a.close().await?;
    }
    Ok(Restores {
        initialize_ms: median(init),
        first_local_ms: median(local),
        first_resumed_ms: median(resumed),
        next_resumed_ms: median(next),
    })
}

/// Starts both replicas (the first imports the project; the second reads it from the
/// database) and the two proxies, measures, and stops the replicas.
fn measure_replicas(full: bool, dirs: &ReplicaDirs) -> Result<(), BoxError> {
    let a = Replica::start(dirs.dir(0).to_path_buf())?;
    let b = Replica::start(dirs.dir(1).to_path_buf())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = rt.block_on(async {
        let proxies = [
            ("one replica", RoundRobinProxy::start(vec![a.addr]).await?),
            (
                "two replicas",
                RoundRobinProxy::start(vec![a.addr, b.addr]).await?,
            ),
        ];
        run(full, &proxies, [a.addr, b.addr]).await
    });
    drop(rt);
    a.stop();
    b.stop();
    outcome
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let cluster = pg_cluster::PgCluster::start();
    let dbname = cluster.create_database();
    let dirs = ReplicaDirs::lay_out(2, &cluster.url(&dbname), pg_cluster::PASSWORD);
    let outcome = measure_replicas(full, &dirs);
    drop(dirs);
    drop(cluster);
    if let Err(e) = outcome {
        eprintln!("replicas bench failed: {e}");
        std::process::exit(1);
    }
}
