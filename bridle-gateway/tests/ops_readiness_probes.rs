//! `/readyz` and the connections it opens to required HTTP upstreams: a readiness poller (an
//! orchestrator's probe every few seconds, or anyone hammering the public endpoint) must not
//! make the gateway open a connection to every upstream per request. Concurrent requests share
//! one probe round, and a round's results are reused for `health.probe_cache_secs`.
//!
//! The upstream sits behind a counting relay on loopback: a connection that closes without
//! sending a byte is a readiness probe (the aggregator's own connections carry HTTP requests
//! and are relayed). The relay classifies connections in the order it accepts them, so a
//! marker connection the test opens last tells it every earlier one was counted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod ops_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ops_support::{bind, data_dir, run, start_upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

const MARKER: &[u8] = b"marker";

/// A relay to `target` that counts readiness probes.
struct CountingRelay {
    addr: SocketAddr,
    probes: Arc<AtomicUsize>,
    /// Told when the marker connection has been classified.
    marked: Arc<Notify>,
}

async fn counting_relay(target: SocketAddr) -> CountingRelay {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let probes = Arc::new(AtomicUsize::new(0));
    let marked = Arc::new(Notify::new());
    let (p, m) = (Arc::clone(&probes), Arc::clone(&marked));
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            // Classified here, in accept order: a probe has already closed, every other
            // client sends its request at once.
            let mut first = vec![0u8; 4096];
            let n = inbound.read(&mut first).await.unwrap_or(0);
            if n == 0 {
                p.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            if &first[..n] == MARKER {
                m.notify_one();
                continue;
            }
            tokio::spawn(async move {
                let Ok(mut outbound) = TcpStream::connect(target).await else {
                    return;
                };
                if outbound.write_all(&first[..n]).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    CountingRelay {
        addr,
        probes,
        marked,
    }
}

impl CountingRelay {
    /// The probes counted among every connection opened before this call.
    async fn probes_so_far(&self) -> usize {
        let marked = self.marked.notified();
        let mut marker = TcpStream::connect(self.addr).await.unwrap();
        marker.write_all(MARKER).await.unwrap();
        marker.shutdown().await.unwrap();
        marked.await;
        self.probes.load(Ordering::SeqCst)
    }
}

/// Whether the gateway's connection to the upstream `tickets` is up, as `/metrics` (which
/// probes nothing) reports it.
async fn tickets_up(http: &reqwest::Client, base: &str) -> Option<()> {
    let page = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    page.lines()
        .any(|l| l == r#"bridle_upstream_up{namespace="tickets"} 1"#)
        .then_some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readiness_requests_share_one_probe_of_each_upstream() {
    let upstream = start_upstream().await;
    let target: SocketAddr = upstream
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .unwrap();
    let relay = counting_relay(target).await;
    let tmp = data_dir(
        Some(&format!("http://{}/mcp", relay.addr)),
        "health:\n  probe_cache_secs: 60\n",
    );
    let gw = run(bind(tmp.path(), |b| b).await);
    let http = reqwest::Client::new();
    kberg_testkit::eventually_async("the upstream connected", || tickets_up(&http, &gw.base)).await;
    assert_eq!(relay.probes_so_far().await, 0, "nothing asked /readyz yet");

    const REQUESTS: usize = 16;
    let answers = ops_support::readyz_burst(&http, &gw.base, REQUESTS).await;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert!(
            body["checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == "upstream:tickets" && c["ok"] == true),
            "{body}"
        );
    }
    assert_eq!(
        relay.probes_so_far().await,
        1,
        "{REQUESTS} concurrent /readyz requests share one probe round"
    );
    // Later requests within `probe_cache_secs` reuse that round's results.
    let readyz = format!("{}/readyz", gw.base);
    for _ in 0..4 {
        let r = http.get(&readyz).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    assert_eq!(relay.probes_so_far().await, 1, "the results are reused");

    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
    upstream.stop.cancel();
}

#[test]
fn a_probe_cache_longer_than_a_minute_is_refused_at_load() {
    let tmp = data_dir(None, "health:\n  probe_cache_secs: 61\n");
    let e = bridle_gateway::config::GatewayConfig::load(tmp.path())
        .unwrap_err()
        .to_string();
    assert!(e.contains("health.probe_cache_secs"), "{e}");
}
