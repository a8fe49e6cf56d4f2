//! What the gateway's metrics add to a `tools/call` over loopback HTTP, each against the same
//! call without them, in the same run: the request layer (method and generation labels, the
//! request held in flight until its body is sent, a latency histogram) and the audit-sink hop
//! that counts the call by tool, outcome and agent with its latency.
//!
//! - `ops_metrics/stateless/{off,on}`: 2026-07-28, the method from the `Mcp-Method` header.
//! - `ops_metrics/stateful/{off,on}`: 2025-11-25 in a session, the method read from the body
//!   (the layer buffers it before the endpoint does).
//!
//! One `echo` tool, one keep-alive connection, TCP_NODELAY, kberg-server as the gateway serves it.

use std::net::SocketAddr;
use std::sync::Arc;

use bridle_gateway::ops::GatewayMetrics;
use criterion::{Criterion, criterion_group, criterion_main};
use kberg_benches::loopback::{Client, STATEFUL, STATELESS, ToolCall};
use kberg_core::{AuditEvent, AuditSink, ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::{HttpConfig, HttpServer, McpApp};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The sink both sides share, so the gate builds its audit event in both and the difference
/// is the metrics hop alone (the gateway always has a sink chain).
struct Discard;

impl AuditSink for Discard {
    fn record(&self, _event: &AuditEvent) {}
}

fn registry(metrics: Option<&Arc<GatewayMetrics>>) -> ToolRegistry {
    let sink: Arc<dyn AuditSink> = match metrics {
        Some(m) => m.audit_sink(Arc::new(Discard)),
        None => Arc::new(Discard),
    };
    let r = ToolRegistry::builder().audit_sink(sink).build();
    r.register(ToolBuilder::new("echo").raw_handler(
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |a, _| async move { Ok(ToolOutput::text(a["text"].as_str().unwrap_or_default())) },
    ))
    .expect("register");
    r
}

async fn serve(metrics: Option<Arc<GatewayMetrics>>, stop: CancellationToken) -> SocketAddr {
    let app = McpApp::builder("ops-bench", "1.0.0")
        .tools(registry(metrics.as_ref()))
        .build();
    let config =
        HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0))).shutdown_token(stop.clone());
    let max_body = config.limits.max_body_bytes;
    let mut server = HttpServer::bind(app, config).await.expect("bind");
    if let Some(m) = metrics {
        let draining = CancellationToken::new();
        server = server.map_router(|r| m.instrument(r, "/mcp", max_body, draining));
    }
    let addr = server.local_addr();
    tokio::spawn(async move {
        let _ = server.run(async move { stop.cancelled().await }).await;
    });
    addr
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let stop = CancellationToken::new();
    let metrics = Arc::new(GatewayMetrics::new());
    let (off, on) = rt.block_on(async {
        (
            serve(None, stop.clone()).await,
            serve(Some(Arc::clone(&metrics)), stop.clone()).await,
        )
    });
    let echo = ToolCall::new("echo", json!({"text": "hello ops"}), "hello ops");
    for (generation, version) in [("stateless", STATELESS), ("stateful", STATEFUL)] {
        let mut g = c.benchmark_group(format!("ops_metrics/{generation}"));
        for (name, addr) in [("off", off), ("on", on)] {
            let mut client = rt
                .block_on(Client::connect(addr, "/mcp", version, version == STATEFUL))
                .expect("connect");
            g.bench_function(name, |b| {
                b.iter(|| rt.block_on(client.call(&echo)).expect("tools/call"))
            });
        }
        g.finish();
    }
    stop.cancel();
}

criterion_group!(benches, bench);
criterion_main!(benches);
