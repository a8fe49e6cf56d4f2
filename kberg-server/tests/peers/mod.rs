//! The aggregator tests' upstreams, built on `kberg_testkit`: the pinned third-party servers as
//! `UpstreamTransport`s (server-everything, server-filesystem) and the misbehaving raw upstream
//! kept beside these tests (`tests/aggregate_raw_upstream.py`, run by the pinned Python).
//! The tool paths, waits and guards come from the test kit and are re-exported here.

#![allow(dead_code, unused_imports)] // each test file uses its own subset

use std::path::PathBuf;

use kberg_core::{Caller, Principal};
use kberg_server::aggregate::UpstreamTransport;
pub use kberg_testkit::peers::HttpEverything;
pub use kberg_testkit::{StopOnDrop, WAIT, free_port};

/// Node 22 from the pinned tools, as a program name.
pub fn node() -> String {
    kberg_testkit::tools::node().to_string_lossy().into_owned()
}

/// The entry point of one of the `@modelcontextprotocol` npm servers.
pub fn package(name: &str) -> String {
    kberg_testkit::tools::mcp_npm_package(name)
        .to_string_lossy()
        .into_owned()
}

/// server-everything as a stdio child.
pub fn everything_stdio() -> UpstreamTransport {
    UpstreamTransport::stdio(node())
        .arg(package("server-everything"))
        .arg("stdio")
}

/// The call timeout given to [`raw_upstream`] where the test makes it hang on purpose: each
/// hang waits it out, and every answer the upstream does give must come within it, also from a
/// Python child on a loaded machine (a second was not always enough there).
pub const RAW_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The raw stdio upstream that hangs and answers garbage on purpose.
pub fn raw_upstream() -> UpstreamTransport {
    let script = kberg_testkit::tools::need(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/aggregate_raw_upstream.py"),
    );
    UpstreamTransport::stdio(
        kberg_testkit::tools::python()
            .to_string_lossy()
            .into_owned(),
    )
    .arg("-u")
    .arg(script.to_string_lossy().into_owned())
}

/// A caller without grants.
pub fn reader() -> Caller {
    Caller::new(Principal::new("reader"))
}

/// A calling client that passes each notification it is sent, method and params, to a
/// channel: a test waits on the first progress report to know that a forwarded call is running
/// at its upstream, or counts what reached the client.
pub struct NotePeer(pub tokio::sync::mpsc::UnboundedSender<(String, serde_json::Value)>);

#[async_trait::async_trait]
impl kberg_core::ClientPeer for NotePeer {
    async fn notify(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<(), kberg_core::PeerError> {
        let _ = self.0.send((method.to_string(), params));
        Ok(())
    }
    async fn request(
        &self,
        method: &str,
        _params: serde_json::Value,
        _cancel: kberg_core::CancellationToken,
    ) -> Result<serde_json::Value, kberg_core::PeerError> {
        Err(kberg_core::PeerError::NotSupported(method.to_string()))
    }
    fn supports(&self, _capability: &str) -> bool {
        false
    }
}

/// Options for a call that asks for progress and hands every notification it is sent to the
/// returned channel, with `cancel` as its cancellation.
pub fn noted_options(
    cancel: kberg_core::CancellationToken,
) -> (
    kberg_core::CallOptions,
    tokio::sync::mpsc::UnboundedReceiver<(String, serde_json::Value)>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let opts = kberg_core::CallOptions::with_cancel(cancel)
        .with_peer(std::sync::Arc::new(NotePeer(tx)))
        .with_progress_token(serde_json::json!("progress-1"));
    (opts, rx)
}

/// Waits (at most [`WAIT`]) for the first progress report among the noted notifications, and
/// returns its figure.
pub async fn first_progress(
    noted: &mut tokio::sync::mpsc::UnboundedReceiver<(String, serde_json::Value)>,
) -> f64 {
    tokio::time::timeout(WAIT, async {
        while let Some((method, params)) = noted.recv().await {
            if method == "notifications/progress"
                && let Some(p) = params["progress"].as_f64()
            {
                return p;
            }
        }
        panic!("the call ended without a progress report");
    })
    .await
    .expect("the upstream reported progress")
}

/// An aggregator with the one upstream `transport` under `namespace`, connected (at most
/// [`WAIT`]), and the registry its tools are in.
pub async fn connected(
    namespace: &str,
    transport: UpstreamTransport,
) -> (
    kberg_server::aggregate::Aggregator,
    kberg_core::ToolRegistry,
) {
    use kberg_server::aggregate::{Aggregator, AggregatorConfig, UpstreamConfig};
    let registry = kberg_core::ToolRegistry::new();
    let agg = Aggregator::start(
        AggregatorConfig::new().upstream(UpstreamConfig::new(namespace, transport)),
        registry.clone(),
    )
    .expect("valid");
    assert!(
        agg.wait_connected(namespace, 1, WAIT).await,
        "{namespace}: {:?}",
        agg.status(namespace)
    );
    (agg, registry)
}

/// Serves `router` (a Kberg server's, with a test's own layer around it) on 127.0.0.1 at a
/// free port until `shutdown` fires; its MCP endpoint's URL (`http://ADDR/mcp`) and the guard
/// that fires `shutdown` when dropped.
pub async fn serve_router(
    router: axum::Router,
    shutdown: tokio_util::sync::CancellationToken,
) -> (String, StopOnDrop) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let stop = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .expect("serve");
    });
    (format!("http://{addr}/mcp"), StopOnDrop(shutdown))
}

/// An aggregator, its tools in the returned registry, over [`raw_upstream`] as `raw` with
/// `transport` adding to it (`RAW_TASKS` and the like) and a 10 s call timeout, once connected.
pub async fn raw_aggregator(
    transport: impl FnOnce(UpstreamTransport) -> UpstreamTransport,
) -> (
    kberg_core::ToolRegistry,
    kberg_server::aggregate::Aggregator,
) {
    use kberg_server::aggregate::{Aggregator, AggregatorConfig, UpstreamConfig};
    let registry = kberg_core::ToolRegistry::new();
    let config = AggregatorConfig::new().upstream(
        UpstreamConfig::new("raw", transport(raw_upstream()))
            .call_timeout(std::time::Duration::from_secs(10)),
    );
    let agg = Aggregator::start(config, registry.clone()).expect("valid");
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );
    (registry, agg)
}
