//! What the vault's record of each credential use costs a call the Bridle gateway forwards to an
//! upstream, against the same call with a credential that leaves no record, in the same run.
//!
//! One gateway (`GatewayBuilder` over a data directory laid out on defaults, the `claude` agent's
//! bearer token, the audit log on) and one upstream, a Kberg HTTP server whose only tool is a
//! trivial `echo`, mounted twice under two namespaces that differ only in their credential:
//!
//! - `vault__echo`: the credential is `vault:up-token`, a vault secret. Every forwarded call
//!   looks up its active version and records its use (the secret's last use, and an entry in the
//!   vault's append-only log, committed with `synchronous = FULL`) before it is sent.
//! - `file__echo`: the credential is `file:up-token`, a file in the data directory's `secrets/`,
//!   whose use is only logged: the baseline.
//!
//! Clients are the wire bench's load generator (`kberg_benches::loopback`): one HTTP/1.1
//! keep-alive connection per client, protocol 2026-07-28, calls back to back, every answer
//! checked. Rounds interleave the cases; the table is the median of the rounds, and the ratio is
//! vault / file throughput. Everything runs on one two-worker tokio runtime, as the gateway does
//! on this machine.
//!
//! ```text
//! cargo bench -p kberg-benches --bench gateway_upstream                 # 3 rounds x 3 s per point
//! KBERG_GWUP_SECS=5 KBERG_GWUP_ROUNDS=5 cargo bench -p kberg-benches --bench gateway_upstream
//! KBERG_GWUP_CLIENTS=1,32 cargo bench -p kberg-benches --bench gateway_upstream
//! KBERG_GWUP_CASES=file cargo bench -p kberg-benches --bench gateway_upstream   # one path alone
//! KBERG_GWUP_AGENT_TOKEN=vault cargo bench -p kberg-benches --bench gateway_upstream
//! ```
//!
//! `KBERG_GWUP_AGENT_TOKEN` says how the calling agent authenticates: `file` (the default of a
//! full run) with the `claude` agent's token file, or `vault` with a vault-issued token of an
//! agent `robot` of the same type (what `bridle serve` issues on a first start; each request
//! then checks it in the vault). Both reach the same upstream permissions.
//!
//! Without `--bench` (as under `cargo test --benches`), or with `-- --test`, it makes 5 calls per
//! client per case and checks that both paths answer and that the vault recorded every use; it
//! authenticates with the vault-issued token unless `KBERG_GWUP_AGENT_TOKEN` says otherwise, so
//! that path is run too.

#![allow(clippy::print_stdout)] // the bench's report is its output

/// With the `mimalloc` feature, the allocator the `bridle` binary runs with.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_gateway::vault::SecretValue;
use kberg_benches::loopback::{
    BoxError, Budget, Point, STATELESS, ToolCall, env_number, measure_as,
};
use kberg_core::{ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::{HttpConfig, HttpServer, McpApp};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The upstream's token (what the gateway injects; the upstream accepts anything).
const UPSTREAM_TOKEN: &str = "upstream-token-for-the-bench";

async fn start_upstream(stop: CancellationToken) -> Result<String, BoxError> {
    let tools = ToolRegistry::new();
    tools.register(ToolBuilder::new("echo").raw_handler(
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |a, _| async move { Ok(ToolOutput::text(a["text"].as_str().unwrap_or_default())) },
    ))?;
    let app = McpApp::builder("echo-upstream", "1.0.0")
        .tools(tools)
        .build();
    let config = HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)))
        .path("/mcp")
        .shutdown_token(stop.clone());
    let server = HttpServer::bind(app, config).await?;
    let url = format!("http://{}/mcp", server.local_addr());
    tokio::spawn(async move {
        let _ = server.run(async move { stop.cancelled().await }).await;
    });
    Ok(url)
}

/// A gateway over `dir` with the upstream at `url` mounted as `vault` and `file`; returns its
/// address and the calling agent's token: the `claude` agent's token file, or with
/// `vault_token` a vault-issued token of the agent `robot` (type `claude`).
async fn start_gateway(
    dir: &Path,
    url: &str,
    vault_token: bool,
    stop: CancellationToken,
) -> Result<(SocketAddr, String), BoxError> {
    init_data_dir_with_token_files(dir)?;
    let mut yaml = std::fs::read_to_string(dir.join("bridle.yaml"))?;
    if vault_token {
        if !yaml.contains("agents:\n") {
            return Err("the laid-out bridle.yaml has no agents section".into());
        }
        yaml = yaml.replace("agents:\n", "agents:\n  robot:\n    type: claude\n");
    }
    for (ns, secret) in [("vault", "vault:up-token"), ("file", "file:up-token")] {
        if !yaml.contains("upstreams:\n") {
            yaml.push_str("upstreams:\n");
        }
        yaml.push_str(&format!(
            "  {ns}:\n    http: {{url: '{url}'}}\n    credential: {{secret: '{secret}', format: 'Bearer {{secret}}'}}\n"
        ));
    }
    std::fs::write(dir.join("bridle.yaml"), yaml)?;
    std::fs::write(dir.join("secrets/up-token"), format!("{UPSTREAM_TOKEN}\n"))?;
    let config = GatewayConfig::load(dir)?;
    let mut token = std::fs::read_to_string(dir.join("secrets/claude-token"))?;
    // The secret is in the vault before the gateway starts, as an operator would have it.
    {
        let (vault, _) = bridle_gateway::gateway::open_vault(dir, &config)?;
        vault.create("up-token", &SecretValue::from(UPSTREAM_TOKEN), "bench")?;
        if vault_token {
            let issued = vault.set_agent_token("robot", "bench")?;
            token = issued
                .token
                .expose_str()
                .ok_or("the issued token is not text")?
                .to_string();
        }
    }
    let gw = GatewayBuilder::new(dir, config).build().await?;
    let mut doc = demo_document();
    let claude = doc
        .permissions
        .get_mut("claude")
        .ok_or("the demo document has no claude permissions")?;
    for ns in ["vault", "file"] {
        claude.tools.insert(
            ns.into(),
            serde_json::from_value(json!({"read": true, "write": false}))?,
        );
    }
    gw.context().store.create("demo", &doc, "bench")?;
    // Settled, as on a deployment: else the first point's first two seconds re-read the file.
    kberg_benches::settle_data_dir(dir)?;
    for ns in ["vault", "file"] {
        let offered = gw
            .upstreams()
            .wait_offered(ns, Duration::from_secs(30))
            .await;
        if offered.is_empty() {
            return Err(format!("the `{ns}` upstream offered no tool").into());
        }
    }
    let bound = gw.bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = bound.local_addr();
    tokio::spawn(bound.run(async move { stop.cancelled().await }));
    Ok((addr, token.trim().to_string()))
}

/// How many `use` records the vault of `dir` holds (read with its own handle).
fn recorded_uses(dir: &Path) -> Result<usize, BoxError> {
    let config = GatewayConfig::load(dir)?;
    let (vault, _) = bridle_gateway::gateway::open_vault(dir, &config)?;
    let mut count = 0;
    let mut after = 0;
    loop {
        let page = vault.audit_log(after, 1000)?;
        let Some(last) = page.last() else {
            return Ok(count);
        };
        after = last.seq;
        count += page.iter().filter(|e| e.action == "use").count();
    }
}

async fn run() -> Result<(), BoxError> {
    // `cargo bench` passes `--bench`; test runs (no `--bench`) and `-- --test` get the smoke
    // round.
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let secs = env_number("KBERG_GWUP_SECS", 3).max(1);
    let rounds = if full {
        env_number("KBERG_GWUP_ROUNDS", 3).max(1)
    } else {
        1
    };
    let budget = if full {
        Budget::Time(Duration::from_secs(secs))
    } else {
        Budget::Calls(5)
    };
    // `KBERG_GWUP_CASES=file` (or `vault`) measures one path alone, for a profiler.
    let only: Option<String> = std::env::var("KBERG_GWUP_CASES").ok();
    if let Some(o) = &only
        && !o.split(',').all(|c| matches!(c.trim(), "file" | "vault"))
    {
        return Err(
            format!("KBERG_GWUP_CASES is a comma list of file and vault, not {o:?}").into(),
        );
    }
    let wanted = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|c| c.trim() == name))
    };
    let clients: Vec<usize> = std::env::var("KBERG_GWUP_CLIENTS")
        .unwrap_or_else(|_| "1,16".into())
        .split(',')
        .map(|c| c.trim().parse::<usize>())
        .collect::<Result<_, _>>()?;

    let vault_token = match std::env::var("KBERG_GWUP_AGENT_TOKEN").ok().as_deref() {
        None => !full,
        Some("file") => false,
        Some("vault") => true,
        Some(other) => {
            return Err(format!("KBERG_GWUP_AGENT_TOKEN is file or vault, not {other:?}").into());
        }
    };

    let stop = CancellationToken::new();
    let _stop = stop.clone().drop_guard();
    let dir = tempfile::tempdir()?;
    let url = start_upstream(stop.clone()).await?;
    let (addr, token) = start_gateway(dir.path(), &url, vault_token, stop.clone()).await?;
    let cases = [
        (
            "file",
            ToolCall::new("file__echo", json!({"text": "hi"}), "hi"),
        ),
        (
            "vault",
            ToolCall::new("vault__echo", json!({"text": "hi"}), "hi"),
        ),
    ];

    let uses_before = recorded_uses(dir.path())?;
    let mut vault_calls = 0;
    let mut rows = Vec::new();
    for &n in &clients {
        let mut points: [Vec<Point>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            // Alternate which case goes first, so a drift of the machine's load reaches both.
            let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let (name, call) = &cases[i];
                if !wanted(name) {
                    continue;
                }
                let p = measure_as(
                    addr,
                    "/mcp",
                    STATELESS,
                    false,
                    Some(&token),
                    n,
                    call,
                    budget,
                )
                .await
                .map_err(|e| format!("{name} with {n} clients: {e}"))?;
                if *name == "vault" {
                    // The timed calls plus one warm-up call per client.
                    vault_calls += p.calls + n;
                }
                points[i].push(p);
            }
        }
        rows.push((
            n,
            Point::median_of(&points[0]),
            Point::median_of(&points[1]),
        ));
    }
    let recorded = recorded_uses(dir.path())? - uses_before;
    if recorded != vault_calls {
        return Err(format!(
            "the vault recorded {recorded} uses for {vault_calls} forwarded calls with its secret"
        )
        .into());
    }

    println!(
        "gateway_upstream: {rounds} round(s), {budget:?} per point, medians; {recorded} uses recorded for {vault_calls} vault calls; the agent authenticates with {}",
        if vault_token {
            "a vault-issued token"
        } else {
            "its token file"
        }
    );
    println!("| credential | clients | calls/s | p50 ms | p99 ms | CPU us/call | vault / file |");
    println!("|---|---|---|---|---|---|---|");
    for (n, file, vault) in rows {
        // The ratio needs both cases; with one alone (`KBERG_GWUP_CASES`) there is none.
        let both = wanted("file") && wanted("vault");
        for (name, p, ratio) in [
            ("file", file, if both { "1" } else { "-" }.to_string()),
            (
                "vault",
                vault,
                if both {
                    format!("**{:.3}x**", vault.rps / file.rps)
                } else {
                    "-".to_string()
                },
            ),
        ] {
            if !wanted(name) {
                continue;
            }
            println!(
                "| {name} | {n} | {:.0} | {:.3} | {:.3} | {:.1} | {ratio} |",
                p.rps, p.p50_ms, p.p99_ms, p.cpu_us
            );
        }
    }
    Ok(())
}

fn main() {
    kberg_benches::loopback::run_main("gateway_upstream bench", Some(2), run());
}
