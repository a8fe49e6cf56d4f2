//! A small loopback load balancer for tests and benches of several gateway replicas: it accepts
//! HTTP/1.1 on a free 127.0.0.1 port and sends each request (not each connection) to the next
//! upstream in turn, so one keep-alive client's consecutive calls land on different replicas.
//!
//! An upstream that refuses the connection (a killed replica) is skipped and the request goes to
//! the next one: only a request that provably never reached an upstream is sent again, so a
//! write is never applied twice. A request whose upstream dies after receiving it is answered
//! `502` (its outcome is unknown, as behind any real load balancer). Responses are streamed
//! through unchanged, so an SSE stream (`subscriptions/listen`) stays open through the proxy.
//! It counts what it forwarded and skipped per upstream, which tests read to prove requests
//! really alternated.
//!
//! Shared by `examples/tests/bridle_replicas.rs` and `benches/benches/replicas.rs`
//! (`#[path]`-included), so it uses only hyper, hyper-util, http-body-util and tokio.

#![allow(dead_code)] // Each including target uses its own part.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// The body of a proxied answer: the upstream's, streamed, or the proxy's own error text.
type ProxyBody = Either<Incoming, Full<Bytes>>;

/// What the proxy did, per upstream (indexed as the upstreams were given).
#[derive(Debug)]
pub struct ProxyCounts {
    forwarded: Vec<AtomicU64>,
    skipped: Vec<AtomicU64>,
    failed: AtomicU64,
}

/// The shared state of the accept loop and every connection it serves.
struct Balancer {
    upstreams: Vec<SocketAddr>,
    next: AtomicUsize,
    client: Client<HttpConnector, Full<Bytes>>,
    counts: ProxyCounts,
}

/// A running round-robin proxy; it stops accepting when dropped.
pub struct RoundRobinProxy {
    addr: SocketAddr,
    balancer: Arc<Balancer>,
    accept: tokio::task::JoinHandle<()>,
}

impl RoundRobinProxy {
    /// Starts the proxy on a free 127.0.0.1 port in front of `upstreams` (at least one).
    pub async fn start(upstreams: Vec<SocketAddr>) -> std::io::Result<Self> {
        assert!(!upstreams.is_empty(), "a proxy needs an upstream");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mut connector = HttpConnector::new();
        // The delayed-ACK trap of PERFORMANCE.md applies to every hop.
        connector.set_nodelay(true);
        let n = upstreams.len();
        let balancer = Arc::new(Balancer {
            upstreams,
            next: AtomicUsize::new(0),
            client: Client::builder(TokioExecutor::new()).build(connector),
            counts: ProxyCounts {
                forwarded: (0..n).map(|_| AtomicU64::new(0)).collect(),
                skipped: (0..n).map(|_| AtomicU64::new(0)).collect(),
                failed: AtomicU64::new(0),
            },
        });
        let b = Arc::clone(&balancer);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let b = Arc::clone(&b);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let b = Arc::clone(&b);
                        async move { Ok::<_, Infallible>(b.forward(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            balancer,
            accept,
        })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` followed by `path` (e.g. `/mcp`).
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Requests answered by each upstream so far.
    pub fn forwarded(&self) -> Vec<u64> {
        load(&self.balancer.counts.forwarded)
    }

    /// Times each upstream refused the connection and was skipped.
    pub fn skipped(&self) -> Vec<u64> {
        load(&self.balancer.counts.skipped)
    }

    /// Requests answered `502` (an upstream failed after receiving one, or none was reachable).
    pub fn failed(&self) -> u64 {
        self.balancer.counts.failed.load(Ordering::Relaxed)
    }
}

impl Drop for RoundRobinProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn load(v: &[AtomicU64]) -> Vec<u64> {
    v.iter().map(|c| c.load(Ordering::Relaxed)).collect()
}

fn bad_gateway(why: String) -> Response<ProxyBody> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(why))));
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

impl Balancer {
    /// Sends `req` to the next upstream, skipping those that refuse the connection.
    async fn forward(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let (parts, body) = req.into_parts();
        // Buffered, so a request refused at connect can be sent to the next upstream.
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return bad_gateway(format!("reading the request: {e}")),
        };
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let n = self.upstreams.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        for attempt in 0..n {
            let i = (first + attempt) % n;
            let upstream = self.upstreams[i];
            let mut out = Request::builder()
                .method(parts.method.clone())
                .uri(format!("http://{upstream}{path}"));
            for (name, value) in &parts.headers {
                if name != hyper::header::HOST {
                    out = out.header(name, value);
                }
            }
            let out = match out
                .header(hyper::header::HOST, upstream.to_string())
                .body(Full::new(body.clone()))
            {
                Ok(r) => r,
                Err(e) => return bad_gateway(format!("rebuilding the request: {e}")),
            };
            match self.client.request(out).await {
                Ok(resp) => {
                    self.counts.forwarded[i].fetch_add(1, Ordering::Relaxed);
                    return resp.map(Either::Left);
                }
                // Never reached the upstream: safe to send elsewhere.
                Err(e) if e.is_connect() => {
                    self.counts.skipped[i].fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.counts.failed.fetch_add(1, Ordering::Relaxed);
                    return bad_gateway(format!("upstream {upstream} failed: {e}"));
                }
            }
        }
        self.counts.failed.fetch_add(1, Ordering::Relaxed);
        bad_gateway("no upstream accepted the connection".into())
    }
}
