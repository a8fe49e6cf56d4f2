//! Fixtures the ops tests share (`mod ops_support;` here; the `bridle` binary's serve tests
//! include this file by path): a real Kberg upstream on loopback with a
//! `whoami` tool and a `slow` tool that holds until the test releases it, a data directory
//! whose gateway routes to it, and a gateway served on a free port.

#![allow(dead_code)] // each test file uses its own subset
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::path::Path;
use std::sync::Arc;

use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_gateway::{BoundGateway, GatewayBuilder};
use bridle_rules::{AgentCatalog, ReadWrite, RulesStore};
use kberg_core::{ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::{HttpConfig, HttpServer, McpApp, OpenAccess};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct NoArgs {}

/// A running upstream: its URL, the token that stops it, and the gates of its `slow` tool.
pub struct Upstream {
    pub url: String,
    pub stop: CancellationToken,
    /// Told each time a `slow` call has started.
    pub started: Arc<Notify>,
    /// Releases one waiting `slow` call.
    pub release: Arc<Notify>,
    pub served: tokio::task::JoinHandle<()>,
}

/// Starts the upstream on a free loopback port (or on `addr`).
/// Its listening socket shares its port (`SO_REUSEPORT`), so that [`ReservedPort::beside`]
/// can keep the port while the upstream is stopped and started again.
pub async fn start_upstream_at(addr: &str) -> Upstream {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseport(true).unwrap();
    socket.bind(addr).unwrap();
    serve_upstream(socket.listen(1024).unwrap())
}

/// A loopback port kept for an upstream that starts later ([`start_upstream_on`]): bound but
/// not listening, so a connection to it is refused as by a server that is down, while no other
/// socket of the machine (another test's listener, an outgoing connection's local port) can
/// take it meanwhile, as it could take a port that was only found free and let go.
pub struct ReservedPort(tokio::net::TcpSocket);

impl ReservedPort {
    pub fn on_loopback() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
        Self(socket)
    }

    /// Keeps the port of a running upstream ([`start_upstream_at`] shares it) for when it
    /// stops: bound beside its listener, not listening, so once the upstream is gone a
    /// connection to the port is refused, and no other socket can take the port before the
    /// upstream starts again on it ([`start_upstream_on`]).
    pub fn beside(upstream: &Upstream) -> Self {
        let addr: std::net::SocketAddr = upstream
            .url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseport(true).unwrap();
        socket.bind(addr).unwrap();
        Self(socket)
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.0.local_addr().unwrap()
    }
}

/// Starts the upstream on a reserved port, listening on the very socket that kept it.
pub async fn start_upstream_on(port: ReservedPort) -> Upstream {
    serve_upstream(port.0.listen(1024).unwrap())
}

fn serve_upstream(listener: tokio::net::TcpListener) -> Upstream {
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("whoami")
                .description("Who the upstream thinks you are.")
                .read()
                .handler(|_a: NoArgs, ctx| async move {
                    Ok(ToolOutput::text(ctx.caller().principal().id.clone()))
                }),
        )
        .unwrap();
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let (s, r) = (Arc::clone(&started), Arc::clone(&release));
    tools
        .register(
            ToolBuilder::new("slow")
                .description("Answers once the test releases it.")
                .read()
                .handler(move |_a: NoArgs, _ctx| {
                    let (s, r) = (Arc::clone(&s), Arc::clone(&r));
                    async move {
                        let released = r.notified();
                        s.notify_one();
                        released.await;
                        Ok(ToolOutput::text("finished"))
                    }
                }),
        )
        .unwrap();
    let app = McpApp::builder("tickets", "1.0").tools(tools).build();
    let config = HttpConfig::new(listener.local_addr().unwrap())
        .path("/mcp")
        .auth(OpenAccess::anonymous());
    let server = HttpServer::from_listener(listener, app, config).unwrap();
    let url = format!("http://{}/mcp", server.local_addr());
    let stop = server.shutdown_token();
    let s = stop.clone();
    let served = tokio::spawn(async move {
        let _ = server.run(async move { s.cancelled().await }).await;
    });
    Upstream {
        url,
        stop,
        started,
        release,
        served,
    }
}

/// Starts the upstream on a free loopback port.
pub async fn start_upstream() -> Upstream {
    start_upstream_at("127.0.0.1:0").await
}

pub fn append_config(dir: &Path, extra: &str) {
    let mut yaml = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
    yaml.push_str(extra);
    std::fs::write(dir.join("bridle.yaml"), yaml).unwrap();
}

/// A data directory (agents `claude`, `codex`, `gemini`; project `demo`) whose gateway routes
/// the upstream `tickets` at `url` (none when `None`), readable by claude.
pub fn data_dir(url: Option<&str>, extra: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    if let Some(url) = url {
        append_config(
            tmp.path(),
            &format!("upstreams:\n  tickets:\n    http: {{url: '{url}'}}\n"),
        );
    }
    append_config(tmp.path(), extra);
    let store = RulesStore::open(tmp.path(), AgentCatalog::builtin()).unwrap();
    let mut doc = demo_document();
    doc.permissions.get_mut("claude").unwrap().tools.insert(
        "tickets".into(),
        ReadWrite {
            read: true,
            write: false,
        },
    );
    store.create("demo", &doc, "test").unwrap();
    tmp
}

pub fn token(dir: &Path, agent: &str) -> String {
    std::fs::read_to_string(dir.join("secrets").join(format!("{agent}-token")))
        .unwrap()
        .trim()
        .to_string()
}

/// A gateway served on a free loopback port until `stop` is cancelled.
pub struct Running {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The MCP endpoint.
    pub url: String,
    pub stop: CancellationToken,
    pub served: tokio::task::JoinHandle<Result<(), bridle_gateway::GatewayError>>,
    pub ops: Arc<bridle_gateway::ops::OpsState>,
}

pub async fn bind(dir: &Path, f: impl FnOnce(GatewayBuilder) -> GatewayBuilder) -> BoundGateway {
    let config = GatewayConfig::load(dir).unwrap();
    let gateway = f(GatewayBuilder::new(dir, config)).build().await.unwrap();
    gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap()
}

pub fn run(bound: BoundGateway) -> Running {
    let base = format!("http://{}", bound.local_addr());
    let url = bound.url();
    let ops = Arc::clone(bound.ops());
    let stop = CancellationToken::new();
    let s = stop.clone();
    let served = tokio::spawn(bound.run(async move { s.cancelled().await }));
    Running {
        base,
        url,
        stop,
        served,
        ops,
    }
}

/// Polls `url` until `accept` says yes of its status and JSON body, or [`kberg_testkit::WAIT`]
/// passes. A request that fails in transport (the listener not accepting yet, a connection
/// reset while the process starts or drains) counts as "not yet" and is retried; at the
/// deadline it fails the test with the last error.
pub async fn poll_json(
    http: &reqwest::Client,
    url: &str,
    accept: impl Fn(u16, &serde_json::Value) -> bool,
) -> (u16, serde_json::Value) {
    let deadline = tokio::time::Instant::now() + kberg_testkit::WAIT;
    loop {
        let answer = match http.get(url).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                match r.text().await {
                    Ok(text) => Ok((status, text)),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        match answer {
            Ok((status, text)) => {
                let body: serde_json::Value = serde_json::from_str(&text).unwrap();
                if accept(status, &body) || tokio::time::Instant::now() >= deadline {
                    return (status, body);
                }
            }
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline,
                "{url} never answered: {e}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

/// `n` requests to `/readyz` sent at once; each one's status and body, in the order sent.
pub async fn readyz_burst(
    http: &reqwest::Client,
    base: &str,
    n: usize,
) -> Vec<(u16, serde_json::Value)> {
    let readyz = format!("{base}/readyz");
    futures::future::join_all((0..n).map(|_| async {
        let r = http.get(&readyz).send().await.expect("/readyz answers");
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.expect("/readyz answers JSON");
        (status, body)
    }))
    .await
}
