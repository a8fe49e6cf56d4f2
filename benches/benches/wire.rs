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
//! checks every server answers correctly.

// A bench's report is its stdout.
#![allow(clippy::print_stdout)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode};
use kberg_core::{ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::{HttpConfig, HttpServer, McpApp};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The stateful generation: `initialize`, a session per client, each call answered as SSE.
const STATEFUL: &str = "2025-11-25";
/// The stateless generation: no handshake, `_meta` and `Mcp-*` headers on every call.
const STATELESS: &str = "2026-07-28";
const ECHO_TEXT: &str = "hello wire";
const CONCURRENCY: [usize; 2] = [1, 32];

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn echo_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

/// Kberg: the echo tool in a ToolRegistry, served by kberg-server (open access on loopback).
async fn start_kberg(stop: CancellationToken) -> Result<SocketAddr, BoxError> {
    let tools = ToolRegistry::new();
    tools.register(
        ToolBuilder::new("echo")
            .description("Echo the text back")
            .raw_handler(echo_schema(), |args, _ctx| async move {
                Ok(ToolOutput::text(args["text"].as_str().unwrap_or_default()))
            }),
    )?;
    let app = McpApp::builder("wire-bench", "1.0.0").tools(tools).build();
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

/// Bare rmcp: rmcp's own `ServerHandler` with the same echo tool, served by rmcp's Streamable
/// HTTP service in the same mode kberg-server configures (stateful sessions).
#[derive(Clone)]
struct BareEcho {
    info: ServerConfig,
    tool: rmcp::model::Tool,
}

impl BareEcho {
    fn new() -> Result<Self, BoxError> {
        let info: ServerConfig = serde_json::from_value(json!({
            "protocolVersion": STATEFUL,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bare-rmcp", "version": "1.0.0"},
        }))?;
        let schema = match echo_schema() {
            Value::Object(m) => m,
            _ => return Err("the echo schema is an object".into()),
        };
        Ok(Self {
            info,
            tool: rmcp::model::Tool::new("echo", "Echo the text back", Arc::new(schema)),
        })
    }
}

impl ServerHandler for BareEcho {
    fn get_info(&self) -> ServerConfig {
        self.info.clone()
    }

    // The result type is non-exhaustive outside rmcp: no struct literal.
    #[allow(clippy::field_reassign_with_default)]
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut r = ListToolsResult::default();
        r.tools = vec![self.tool.clone()];
        Ok(r)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "echo" {
            return Err(ErrorData::invalid_params("unknown tool", None));
        }
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

async fn start_rmcp(stop: CancellationToken) -> Result<SocketAddr, BoxError> {
    let handler = BareEcho::new()?;
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_json_response(true)
        .with_cancellation_token(stop.clone());
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().route_service("/mcp", service);
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    Ok(addr)
}

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

/// One client: a keep-alive connection and, for MCP servers, a session.
struct Client {
    send: SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    session: Option<String>,
    protocol: &'static str,
    next_id: u64,
}

impl Client {
    async fn connect(
        addr: SocketAddr,
        kind: Kind,
        protocol: &'static str,
    ) -> Result<Self, BoxError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let (send, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut c = Self {
            send,
            addr,
            session: None,
            protocol,
            next_id: 1,
        };
        if kind != Kind::Hyper && protocol == STATEFUL {
            let (status, headers, _) = c
                .post(
                    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                        "protocolVersion": STATEFUL,
                        "capabilities": {},
                        "clientInfo": {"name": "wire-bench", "version": "1.0.0"}
                    }}),
                )
                .await?;
            if status != StatusCode::OK {
                return Err(format!("initialize answered {status}").into());
            }
            let sid = headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .ok_or("initialize gave no session id")?;
            c.session = Some(sid.to_string());
            let (status, _, _) = c
                .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await?;
            if !status.is_success() {
                return Err(format!("notifications/initialized answered {status}").into());
            }
        }
        Ok(c)
    }

    async fn post(
        &mut self,
        body: Value,
    ) -> Result<(StatusCode, hyper::HeaderMap, Bytes), BoxError> {
        let mut req = Request::post("/mcp")
            .header("host", self.addr.to_string())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", self.protocol);
        if self.protocol == STATELESS
            && let Some(method) = body["method"].as_str()
        {
            req = req.header("mcp-method", method);
            if let Some(name) = body["params"]["name"].as_str() {
                req = req.header("mcp-name", name);
            }
        }
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s.as_str());
        }
        let req = req.body(Full::new(Bytes::from(body.to_string())))?;
        self.send.ready().await?;
        let resp = self.send.send_request(req).await?;
        let status = resp.status();
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await?.to_bytes();
        Ok((status, parts.headers, bytes))
    }

    /// One `tools/call` round trip; checks the echo came back.
    async fn call(&mut self) -> Result<(), BoxError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut params = json!({"name": "echo", "arguments": {"text": ECHO_TEXT}});
        if self.protocol == STATELESS {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": STATELESS,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "wire-bench", "version": "1.0.0"}
            });
        }
        let (status, _, body) = self
            .post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
            .await?;
        if status != StatusCode::OK {
            return Err(format!("tools/call answered {status}").into());
        }
        let needle = ECHO_TEXT.as_bytes();
        if !body.windows(needle.len()).any(|w| w == needle) {
            return Err(format!(
                "tools/call answer lacks the echo: {}",
                String::from_utf8_lossy(&body)
            )
            .into());
        }
        Ok(())
    }
}

/// What one measurement produced.
#[derive(Debug, Clone, Copy)]
struct Point {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// CPU time of the whole process (load generator and server) per call, in microseconds.
    /// The generator's share is the same for every server, so differences are server cost; and
    /// unlike req/s it hardly moves when other processes compete for the cores.
    cpu_us: f64,
}

/// CPU time (user + system) this process has used so far, from `/proc/self/stat` (Linux; the
/// kernel reports it in USER_HZ ticks, 100 per second). `None` elsewhere.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) closed by the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

async fn measure(
    addr: SocketAddr,
    kind: Kind,
    protocol: &'static str,
    clients: usize,
    run: Duration,
) -> Result<Point, BoxError> {
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(Client::connect(addr, kind, protocol).await?);
    }
    // Warm up each connection (and the server's session) before the clock starts.
    for c in &mut conns {
        c.call().await?;
    }
    let cpu_start = process_cpu();
    let start = Instant::now();
    let deadline = start + run;
    let mut tasks = Vec::with_capacity(clients);
    for mut c in conns {
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(4096);
            while Instant::now() < deadline {
                let t = Instant::now();
                c.call().await?;
                lat.push(t.elapsed());
            }
            Ok::<_, BoxError>(lat)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = match (cpu_start, process_cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a).as_secs_f64(),
        _ => f64::NAN,
    };
    if all.is_empty() {
        return Err("no call completed".into());
    }
    all.sort_unstable();
    let pct = |p: f64| {
        let i = ((all.len() as f64 - 1.0) * p).round() as usize;
        all[i.min(all.len() - 1)].as_secs_f64() * 1000.0
    };
    Ok(Point {
        rps: all.len() as f64 / elapsed,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        cpu_us: cpu * 1e6 / all.len() as f64,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn run() -> Result<(), BoxError> {
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
    let stop = CancellationToken::new();
    let kberg = start_kberg(stop.clone()).await?;
    let rmcp = start_rmcp(stop.clone()).await?;
    let hyper = start_hyper(stop.clone()).await?;
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
                let p = measure(addr, kind, protocol, clients, run_for).await?;
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
        Point {
            rps: median(pts.iter().map(|p| p.rps).collect()),
            p50_ms: median(pts.iter().map(|p| p.p50_ms).collect()),
            p99_ms: median(pts.iter().map(|p| p.p99_ms).collect()),
            cpu_us: median(pts.iter().map(|p| p.cpu_us).collect()),
        }
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

fn main() {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run()) {
        eprintln!("wire bench failed: {e}");
        std::process::exit(1);
    }
}
