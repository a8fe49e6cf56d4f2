//! What the gateway's audit log (bridle-gateway's `AuditLog` as the registry's audit sink)
//! adds to a `tools/call`, each against the same call with no sink, in the same run.
//!
//! - `registry/off` vs `registry/on`: the gate's no-op 6-field Write call in process (as in
//!   `gate.rs`); with the sink on, the gate digests the arguments and builds its event, the sink
//!   builds an entry and queues it, and the writer thread hashes, chains and inserts it in a
//!   SQLite transaction per batch. This is the worst case: a tool that does nothing.
//! - `http/off` vs `http/on`: a `tools/call` of an `echo` tool over loopback HTTP through
//!   kberg-server (2026-07-28, one keep-alive connection, TCP_NODELAY), the path an agent's call
//!   to the gateway takes.
//! - `gateway/off` vs `gateway/on`: the whole Bridle gateway (`GatewayBuilder` over a data
//!   directory laid out on defaults, per-agent bearer auth, live grants, the session registry)
//!   answering `list_projects` over loopback HTTP, with `audit.enabled: false` and with the audit
//!   log on (the default): the configuration choice an operator makes.
//! - `http_paired` and `gateway_paired` (printed, not criterion groups): the same two pairs
//!   measured interleaved, in rounds of 200 calls that alternate off and on (and which goes
//!   first), so a change of the machine's load reaches both sides alike. The figure is the
//!   median of the rounds' on/off ratios; the groups above run one side after the other, and on
//!   a shared machine their ratio also carries the load's drift between the two.
//!
//! The database lives in a temporary directory; the writer thread shares the machine's cores with
//! the measured loop, as it does in the gateway.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;

use bridle_gateway::audit::{AuditConfig, AuditLog};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kberg_benches::loopback::{Client, STATELESS, ToolCall};
use kberg_benches::{note_args as args, note_schema as schema, notes_write as cap};
use kberg_core::{CallOptions, Caller, Grants, Principal, ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::{HttpConfig, HttpServer, McpApp};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn registry() -> ToolRegistry {
    registry_with(ToolRegistry::builder().build())
}

fn registry_with(r: ToolRegistry) -> ToolRegistry {
    r.declare(cap()).expect("declare once");
    r.register(
        ToolBuilder::new("add_note")
            .write(cap())
            .raw_handler(schema(), |_, _| async { Ok(ToolOutput::default()) }),
    )
    .expect("register");
    r.register(ToolBuilder::new("echo").raw_handler(
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |a, _| async move { Ok(ToolOutput::text(a["text"].as_str().unwrap_or_default())) },
    ))
    .expect("register");
    r
}

fn audited(dir: &std::path::Path, name: &str) -> (ToolRegistry, AuditLog) {
    let log = AuditLog::open(AuditConfig::new(dir.join(format!("{name}.db")))).expect("open log");
    let r = registry_with(
        ToolRegistry::builder()
            .audit_sink(Arc::new(log.clone()))
            .build(),
    );
    (r, log)
}

fn bench_registry(c: &mut Criterion, dir: &std::path::Path) {
    let caller = Caller::new(Principal::new("claude").with_grants(Grants::of(["notes.write"])));
    let call = |r: &ToolRegistry, a| {
        futures::executor::block_on(r.call(&caller, "add_note", a, CallOptions::default())).is_ok()
    };
    let off = registry();
    let (on, log) = audited(dir, "registry");
    let mut g = c.benchmark_group("audit_gateway/registry");
    g.bench_function("off", |b| {
        b.iter_batched(args, |a| black_box(call(&off, a)), BatchSize::SmallInput)
    });
    g.bench_function("on", |b| {
        b.iter_batched(args, |a| black_box(call(&on, a)), BatchSize::SmallInput)
    });
    g.finish();
    report(&log, "registry");
}

/// Says how many tool-call entries were written and how many the full queue lost (a loop of
/// no-op calls outruns the writer thread; the loss is counted and recorded, never silent).
fn report(log: &AuditLog, name: &str) {
    log.flush().expect("flush");
    let written = log
        .head()
        .map(|(id, _)| id)
        .expect("read the head of the log");
    eprintln!(
        "audit_gateway/{name}: {written} entries written, {} tool-call entries lost (queue full)",
        log.lost()
    );
}

async fn serve(tools: ToolRegistry, stop: CancellationToken) -> SocketAddr {
    let app = McpApp::builder("audit-bench", "1.0.0").tools(tools).build();
    let config =
        HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0))).shutdown_token(stop.clone());
    let server = HttpServer::bind(app, config).await.expect("bind");
    let addr = server.local_addr();
    tokio::spawn(async move {
        let _ = server.run(async move { stop.cancelled().await }).await;
    });
    addr
}

fn bench_http(c: &mut Criterion, dir: &std::path::Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let stop = CancellationToken::new();
    let (on, log) = audited(dir, "http");
    let (off_addr, on_addr) = rt.block_on(async {
        (
            serve(registry(), stop.clone()).await,
            serve(on, stop.clone()).await,
        )
    });
    let echo = ToolCall::new("echo", json!({"text": "hello audit"}), "hello audit");
    let mut g = c.benchmark_group("audit_gateway/http");
    for (name, addr) in [("off", off_addr), ("on", on_addr)] {
        let mut client = rt
            .block_on(Client::connect(addr, "/mcp", STATELESS, false))
            .expect("connect");
        g.bench_function(name, |b| {
            b.iter(|| rt.block_on(client.call(&echo)).expect("tools/call"))
        });
    }
    g.finish();
    let connect = |addr| {
        rt.block_on(Client::connect(addr, "/mcp", STATELESS, false))
            .expect("connect")
    };
    paired(&rt, "http", connect(off_addr), connect(on_addr), &echo);
    stop.cancel();
    report(&log, "http");
}

/// A gateway over a fresh data directory with the demo project; `audit` says whether its audit
/// log is on. Returns its address, the `claude` agent's token and the log.
async fn gateway(
    dir: &std::path::Path,
    audit: bool,
    stop: CancellationToken,
) -> (SocketAddr, String, Option<AuditLog>) {
    use bridle_gateway::GatewayBuilder;
    use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
    init_data_dir_with_token_files(dir).expect("lay out");
    if !audit {
        let yaml = std::fs::read_to_string(dir.join("bridle.yaml")).expect("config");
        std::fs::write(
            dir.join("bridle.yaml"),
            format!("{yaml}audit:\n  enabled: false\n"),
        )
        .expect("config");
    }
    let config = GatewayConfig::load(dir).expect("config");
    let token = std::fs::read_to_string(dir.join("secrets/claude-token")).expect("token");
    let gw = GatewayBuilder::new(dir, config)
        .build()
        .await
        .expect("gateway");
    gw.context()
        .store
        .create("demo", &demo_document(), "bench")
        .expect("demo");
    // Settled, as on a deployment: else the first two seconds re-read the file.
    kberg_benches::settle_data_dir(dir).expect("settle");
    let log = gw.context().audit().cloned();
    assert_eq!(log.is_some(), audit);
    let bound = gw
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    let addr = bound.local_addr();
    tokio::spawn(bound.run(async move { stop.cancelled().await }));
    (addr, token.trim().to_string(), log)
}

fn bench_gateway(c: &mut Criterion, dir: &std::path::Path) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let stop = CancellationToken::new();
    let (off_dir, on_dir) = (dir.join("gateway-off"), dir.join("gateway-on"));
    let ((off_addr, off_token, _), (on_addr, on_token, log)) = rt.block_on(async {
        (
            gateway(&off_dir, false, stop.clone()).await,
            gateway(&on_dir, true, stop.clone()).await,
        )
    });
    let list = ToolCall::new("list_projects", json!({}), "demo");
    let mut g = c.benchmark_group("audit_gateway/gateway");
    let connect = |addr, token: &str| {
        rt.block_on(Client::connect(addr, "/mcp", STATELESS, false))
            .expect("connect")
            .with_bearer(token.to_string())
    };
    for (name, addr, token) in [("off", off_addr, &off_token), ("on", on_addr, &on_token)] {
        let mut client = connect(addr, token);
        g.bench_function(name, |b| {
            b.iter(|| rt.block_on(client.call(&list)).expect("tools/call"))
        });
    }
    g.finish();
    paired(
        &rt,
        "gateway",
        connect(off_addr, &off_token),
        connect(on_addr, &on_token),
        &list,
    );
    stop.cancel();
    report(&log.expect("the audit log is on"), "gateway");
}

/// Rounds of [`PAIRED_CALLS`] calls, alternating the off and on clients (and which goes first):
/// the interleaved twin of a criterion pair. Prints each side's median per call and the median
/// of the per-round ratios.
fn paired(
    rt: &tokio::runtime::Runtime,
    name: &str,
    mut off: Client,
    mut on: Client,
    call: &ToolCall,
) {
    // Without `--bench` (as under `cargo test --benches`) a smoke run: two short rounds.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let (rounds, calls) = if smoke { (2, 10) } else { (30, PAIRED_CALLS) };
    let time = |client: &mut Client| {
        let start = std::time::Instant::now();
        for _ in 0..calls {
            rt.block_on(client.call(call)).expect("tools/call");
        }
        start.elapsed().as_secs_f64() * 1e6 / calls as f64
    };
    // Warm both: connections, caches, the writer thread.
    time(&mut off);
    time(&mut on);
    let (mut offs, mut ons, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (a, b) = if round % 2 == 0 {
            let a = time(&mut off);
            (a, time(&mut on))
        } else {
            let b = time(&mut on);
            (time(&mut off), b)
        };
        offs.push(a);
        ons.push(b);
        ratios.push(b / a);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    eprintln!(
        "audit_gateway/{name}_paired: off {:.1} us, on {:.1} us per call (medians of {rounds} rounds of {calls}); on/off ratio median {:.3}, range [{:.3}, {:.3}]",
        median(&mut offs),
        median(&mut ons),
        median(&mut ratios),
        ratios[0],
        ratios[ratios.len() - 1],
    );
}

/// Calls per round of [`paired`].
const PAIRED_CALLS: usize = 200;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    bench_registry(c, dir.path());
    bench_http(c, dir.path());
    bench_gateway(c, dir.path());
}

criterion_group!(benches, bench);
criterion_main!(benches);
