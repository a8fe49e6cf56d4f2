//! The gateway's Prometheus metrics, served as OpenMetrics text at `/metrics`.
//!
//! Two kinds of value live here. Counters and histograms on the request path (MCP requests by
//! method and generation, tool calls by tool, outcome and agent, their latencies) are updated
//! as requests pass: a label lookup and an atomic add, nothing that blocks. Everything that
//! already has an owner (live sessions, upstream health and reconnects, the review queue, the
//! vault's operations) is read from that owner when Prometheus scrapes, so the request path
//! pays nothing for it and the figures cannot drift from the truth.
//!
//! Labels carry only bounded, configured names: a method outside the MCP method list is
//! `other`, a tool the gate did not know is `unknown`, an agent is a configured principal.
//! Argument values, tokens and session ids never become labels.
//!
//! Each gateway has its own [`Registry`] (no process-global recorder), so two gateways in one
//! process (tests, an embedder's own composition) keep apart.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody as _};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use kberg_core::{AuditEvent, AuditSink};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The MCP methods counted by name; any other method is counted as `other`.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/list",
    "tasks/result",
    "tasks/cancel",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// Whether `method` is one of the MCP methods counted by name (the traces name their spans
/// after the same list).
#[cfg(feature = "traces")]
pub(crate) fn is_mcp_method(method: &str) -> bool {
    METHODS.contains(&method)
}

/// A request's method as a label: a known MCP method, or one of the fixed words for what is
/// not a request with a method.
fn method_label(method: &str) -> &'static str {
    METHODS
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    generation: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolCallLabels {
    tool: String,
    outcome: String,
    agent: String,
}

/// How an audit retention pass ended: `ok` (nothing due included) or `failed`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

/// A pattern-example repository, by its reference tag (a configured name).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RepoLabel {
    pub(crate) repo: String,
}

/// Latency buckets from 0.25 ms to about 16 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 17))
}

/// What is read from the gateway's parts at scrape time.
#[derive(Debug, Default, Clone)]
pub(crate) struct Snapshot {
    /// Live sessions by generation (`stateful`, `stateless`).
    pub sessions: Vec<(&'static str, u64)>,
    /// Per upstream namespace: enabled, connected, connections made by its listing connection.
    pub upstreams: Vec<UpstreamSample>,
    /// Pending proposals in the review queue; `None` when the store did not answer.
    pub review_pending: Option<u64>,
    /// Pending scope tickets.
    pub scope_pending: Option<u64>,
    /// The vault's operations by action, since the vault was created.
    pub vault_ops: Vec<(String, u64)>,
}

/// One upstream at scrape time.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamSample {
    pub namespace: String,
    pub enabled: bool,
    pub connected: bool,
    pub connections: u64,
}

#[derive(Debug)]
struct ScrapeCollector(Arc<Mutex<Snapshot>>);

fn labeled<M: EncodeMetric, L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: prometheus_client::metrics::MetricType,
    samples: impl IntoIterator<Item = (L, M)>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GenerationLabel {
    generation: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NamespaceLabel {
    namespace: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabel {
    action: String,
}

impl Collector for ScrapeCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        use prometheus_client::metrics::MetricType;
        let s = self.0.lock().map(|s| s.clone()).unwrap_or_default();
        labeled(
            &mut encoder,
            "sessions",
            "Live MCP sessions (2026-07-28 clients count one per agent).",
            MetricType::Gauge,
            s.sessions.iter().map(|(g, n)| {
                (
                    GenerationLabel { generation: g },
                    ConstGauge::new(i64::try_from(*n).unwrap_or(i64::MAX)),
                )
            }),
        )?;
        labeled(
            &mut encoder,
            "upstream_up",
            "Whether an enabled upstream's listing connection is connected (1) or not (0).",
            MetricType::Gauge,
            s.upstreams.iter().filter(|u| u.enabled).map(|u| {
                (
                    NamespaceLabel {
                        namespace: u.namespace.clone(),
                    },
                    ConstGauge::new(i64::from(u.connected)),
                )
            }),
        )?;
        labeled(
            &mut encoder,
            "upstream_reconnects",
            "Times an upstream's current listing connection reconnected after losing its server.",
            MetricType::Counter,
            s.upstreams.iter().filter(|u| u.enabled).map(|u| {
                (
                    NamespaceLabel {
                        namespace: u.namespace.clone(),
                    },
                    ConstCounter::new(u.connections.saturating_sub(1)),
                )
            }),
        )?;
        if let Some(n) = s.review_pending {
            let g = ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
            g.encode(encoder.encode_descriptor(
                "review_queue_depth",
                "Rule proposals waiting for a person's decision.",
                None,
                g.metric_type(),
            )?)?;
        }
        if let Some(n) = s.scope_pending {
            let g = ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
            g.encode(encoder.encode_descriptor(
                "scope_tickets_pending",
                "Scope-expansion requests waiting for a person's decision.",
                None,
                g.metric_type(),
            )?)?;
        }
        labeled(
            &mut encoder,
            "vault_operations",
            "The vault's recorded operations by action (create, use, rotate, revoke, ...) since it was created.",
            MetricType::Counter,
            s.vault_ops
                .iter()
                .map(|(a, n)| (ActionLabel { action: a.clone() }, ConstCounter::new(*n))),
        )?;
        Ok(())
    }
}

/// The gateway's metrics: the request-path counters and the scrape-time snapshot.
#[derive(Debug)]
pub struct GatewayMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Family<RequestLabels, Histogram, fn() -> Histogram>,
    in_flight: Gauge,
    tool_calls: Family<ToolCallLabels, Counter>,
    tool_seconds: Family<ToolLabels, Histogram, fn() -> Histogram>,
    /// Indexing progress per repository (see [`super::indexing`]).
    pub(crate) indexing: super::indexing::IndexingGauges,
    /// The audit log's retention passes by outcome, and the entries they removed.
    retention_passes: Family<OutcomeLabel, Counter>,
    retention_removed: Counter,
    /// What the pass under way has removed so far and was counted (its steps report the pass
    /// so far; a pass that fails keeps what its committed steps removed).
    retention_counted: std::sync::atomic::AtomicU64,
    snapshot: Arc<Mutex<Snapshot>>,
    /// One scrape at a time: the snapshot is filled and then encoded. Held by the scrape's own
    /// task ([`GatewayMetrics::render`]), which leaves its page here with when it started.
    scraping: Arc<tokio::sync::Mutex<Option<(Instant, String)>>>,
    /// `/readyz`'s last round of checks (rules store, vault, upstream probes; [`super::health`]).
    /// Kept here because these metrics are the one piece of state the ops routes own, built
    /// once per gateway.
    pub(crate) readiness_probes: super::health::ProbeCache,
}

impl Default for GatewayMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl GatewayMetrics {
    /// Empty metrics, every name prefixed `bridle_`.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("bridle");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "mcp_requests",
            "MCP requests received on the endpoint, by JSON-RPC method (GET streams are `sse_stream`, DELETE `session_end`) and protocol generation.",
            requests.clone(),
        );
        let request_seconds: Family<RequestLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "mcp_request_duration",
            "Time from receiving an MCP request to its response head (a stream's opening, not its end).",
            prometheus_client::registry::Unit::Seconds,
            request_seconds.clone(),
        );
        let in_flight = Gauge::default();
        registry.register(
            "mcp_requests_in_flight",
            "MCP requests whose response has not been sent yet (listen streams count until they open).",
            in_flight.clone(),
        );
        let tool_calls = Family::<ToolCallLabels, Counter>::default();
        registry.register(
            "tool_calls",
            "Tool calls through the gate, by tool (`unknown` for names no tool has), outcome (`ok` or the refusal code) and agent.",
            tool_calls.clone(),
        );
        let tool_seconds: Family<ToolLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "tool_call_duration",
            "Time a tool call spent in the gate, the tool included.",
            prometheus_client::registry::Unit::Seconds,
            tool_seconds.clone(),
        );
        let indexing = super::indexing::IndexingGauges::register(registry);
        let retention_passes = Family::<OutcomeLabel, Counter>::default();
        // Both outcomes from the start, so a rate over `failed` has a series before the first
        // failure.
        for outcome in ["ok", "failed"] {
            drop(retention_passes.get_or_create(&OutcomeLabel { outcome }));
        }
        registry.register(
            "audit_retention_passes",
            "Retention passes of the audit log (at start and every interval), by outcome: `ok` (nothing due included) or `failed` (tried again at the next interval; the log says why).",
            retention_passes.clone(),
        );
        let retention_removed = Counter::default();
        registry.register(
            "audit_retention_removed",
            "Audit log entries removed by retention passes (a failed pass's committed steps included).",
            retention_removed.clone(),
        );
        let snapshot = Arc::new(Mutex::new(Snapshot::default()));
        registry.register_collector(Box::new(ScrapeCollector(Arc::clone(&snapshot))));
        Self {
            registry: root,
            requests,
            request_seconds,
            in_flight,
            tool_calls,
            tool_seconds,
            indexing,
            retention_passes,
            retention_removed,
            retention_counted: std::sync::atomic::AtomicU64::new(0),
            snapshot,
            scraping: Arc::new(tokio::sync::Mutex::new(None)),
            readiness_probes: super::health::ProbeCache::default(),
        }
    }

    /// Counts one MCP request and its time to a response head.
    fn observe_request(&self, labels: &RequestLabels, elapsed: Duration) {
        self.requests.get_or_create(labels).inc();
        self.request_seconds
            .get_or_create(labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Counts one finished tool call.
    pub fn observe_call(&self, event: &AuditEvent) {
        let tool = if event.kind == "unknown" {
            "unknown".to_string()
        } else {
            event.tool.clone()
        };
        let outcome = crate::sessions::outcome_code(&event.outcome);
        self.tool_calls
            .get_or_create(&ToolCallLabels {
                tool: tool.clone(),
                outcome,
                agent: event.principal.clone(),
            })
            .inc();
        self.tool_seconds
            .get_or_create(&ToolLabels { tool })
            .observe(event.duration.as_secs_f64());
    }

    /// Counts one event of the audit log's retention passes (the log's
    /// [`on_retention`](crate::audit::AuditConfig::on_retention) hook): each committed step's
    /// removed entries, and each pass's end by outcome.
    pub fn observe_retention(&self, event: &crate::audit::RetentionEvent<'_>) {
        use crate::audit::RetentionEvent;
        use std::sync::atomic::Ordering;
        match event {
            RetentionEvent::Step(so_far) => {
                let counted = self
                    .retention_counted
                    .swap(so_far.removed, Ordering::Relaxed);
                self.retention_removed
                    .inc_by(so_far.removed.saturating_sub(counted));
            }
            RetentionEvent::Done(report) => {
                let counted = self.retention_counted.swap(0, Ordering::Relaxed);
                if let Some(r) = report {
                    self.retention_removed
                        .inc_by(r.removed.saturating_sub(counted));
                }
                self.retention_passes
                    .get_or_create(&OutcomeLabel { outcome: "ok" })
                    .inc();
            }
            RetentionEvent::Failed(_) => {
                self.retention_counted.swap(0, Ordering::Relaxed);
                self.retention_passes
                    .get_or_create(&OutcomeLabel { outcome: "failed" })
                    .inc();
            }
        }
    }

    /// Encodes everything, after `fill` has replaced the scrape-time snapshot. One scrape runs
    /// at a time, in a task of its own that holds the scrape lock until it has encoded: `fill`
    /// reads on the blocking pool, which a dropped future cannot stop, so a scraper that hangs
    /// up mid-scrape (anyone may ask `/metrics`) must not let the next scrape start beside those
    /// reads. A request that waited for a scrape which started after it asked takes that
    /// scrape's page (as fresh as its own would be) instead of filling again, so a crowd of
    /// concurrent scrapers costs two fills, not one each. A scrape whose task failed is an
    /// encoding error.
    pub(crate) async fn render<F>(self: &Arc<Self>, fill: F) -> Result<String, std::fmt::Error>
    where
        F: std::future::Future<Output = Snapshot> + Send + 'static,
    {
        let asked = Instant::now();
        let mut last = Arc::clone(&self.scraping).lock_owned().await;
        if let Some((started, page)) = last.as_ref()
            && *started >= asked
        {
            return Ok(page.clone());
        }
        let metrics = Arc::clone(self);
        let scrape = tokio::spawn(async move {
            let started = Instant::now();
            let fresh = fill.await;
            if let Ok(mut s) = metrics.snapshot.lock() {
                *s = fresh;
            }
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &metrics.registry)?;
            *last = Some((started, out.clone()));
            Ok(out)
        });
        scrape.await.unwrap_or(Err(std::fmt::Error))
    }

    /// Wraps `router` in the request layer for the MCP endpoint at
    /// `path`: requests counted by method and generation, held in flight until answered, and
    /// refused with `503 shutting_down` once `draining` is cancelled. `max_body` is the
    /// endpoint's body limit (the layer reads a 2025-11-25 body up to it to learn its method).
    pub fn instrument(
        self: &Arc<Self>,
        router: axum::Router,
        path: &'static str,
        max_body: usize,
        draining: tokio_util::sync::CancellationToken,
    ) -> axum::Router {
        router.layer(axum::middleware::from_fn_with_state(
            RequestMetrics {
                metrics: Arc::clone(self),
                path,
                max_body,
                draining,
            },
            track_requests,
        ))
    }

    /// An audit sink that counts each call and then passes the event to `next`.
    pub fn audit_sink(self: &Arc<Self>, next: Arc<dyn AuditSink>) -> Arc<dyn AuditSink> {
        Arc::new(MetricsSink {
            metrics: Arc::clone(self),
            next,
        })
    }
}

struct MetricsSink {
    metrics: Arc<GatewayMetrics>,
    next: Arc<dyn AuditSink>,
}

impl AuditSink for MetricsSink {
    fn record(&self, event: &AuditEvent) {
        self.metrics.observe_call(event);
        self.next.record(event);
    }
}

/// The generation a request speaks: 2026-07-28 requests name their method in `Mcp-Method` and
/// their version in `MCP-Protocol-Version`.
fn generation(headers: &HeaderMap) -> &'static str {
    let modern = headers.contains_key("mcp-method")
        || headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v >= "2026-07-28");
    if modern { "stateless" } else { "stateful" }
}

/// What the request layer needs: the metrics, the MCP path, the largest body it reads to learn
/// a 2025-11-25 request's method (larger ones are the guard's to refuse), and the token that
/// says the gateway is draining.
#[derive(Debug, Clone)]
pub(crate) struct RequestMetrics {
    metrics: Arc<GatewayMetrics>,
    path: &'static str,
    max_body: usize,
    draining: tokio_util::sync::CancellationToken,
}

/// The method field of a JSON-RPC message, nothing else (other fields are skipped).
#[derive(serde::Deserialize)]
struct MethodOnly<'a> {
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
}

/// The request layer on the MCP path: counts every request by method and generation, with
/// its time to a response head, and keeps it in flight until its response body is sent (a
/// GET stream or `subscriptions/listen` only until its head: those live as long as the
/// client listens). A 2026-07-28 request names its method in a header; a 2025-11-25 POST's
/// body is read (it is buffered before rmcp sees it anyway) when its `Content-Length` is
/// within the endpoint's limit; otherwise it counts as `other`. While the gateway drains,
/// new requests are refused with `503 shutting_down` and in-flight ones finish.
pub(crate) async fn track_requests(
    State(m): State<RequestMetrics>,
    req: Request,
    next: Next,
) -> Response {
    if req.uri().path() != m.path {
        return next.run(req).await;
    }
    if m.draining.is_cancelled() {
        return shutting_down();
    }
    let started = Instant::now();
    let generation = generation(req.headers());
    let (method, req) = match *req.method() {
        Method::GET => ("sse_stream", req),
        Method::DELETE => ("session_end", req),
        Method::POST => {
            if let Some(h) = req
                .headers()
                .get("mcp-method")
                .and_then(|v| v.to_str().ok())
            {
                (method_label(h), req)
            } else {
                legacy_method(req, m.max_body).await
            }
        }
        _ => ("other", req),
    };
    let in_flight = InFlight::enter(&m.metrics.in_flight);
    let resp = next.run(req).await;
    m.metrics
        .observe_request(&RequestLabels { method, generation }, started.elapsed());
    if matches!(method, "sse_stream" | "subscriptions/listen") {
        return resp;
    }
    // A body of known size (a JSON answer) is complete: the call is over, and what is left is
    // writing it, which the server's graceful shutdown waits for. Keeping such a body as it is
    // also keeps its Content-Length. A streamed answer (SSE) is held until it ends.
    if resp.body().size_hint().exact().is_some() {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _held = &in_flight;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

fn shutting_down() -> Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, "5")],
        axum::Json(serde_json::json!({
            "error": "shutting_down",
            "message": "The gateway is shutting down; retry against another instance or after it restarts."
        })),
    )
        .into_response()
}

/// The MCP requests in flight now (response body not yet sent).
impl GatewayMetrics {
    pub(crate) fn in_flight(&self) -> i64 {
        self.in_flight.get()
    }
}

/// Counts a request in flight until dropped (also when the client goes away mid-request).
struct InFlight(Gauge);

impl InFlight {
    fn enter(gauge: &Gauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Reads a 2025-11-25 POST's method from its body and puts the body back.
async fn legacy_method(req: Request, max_body: usize) -> (&'static str, Request) {
    let length = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let Some(length) = length.filter(|l| *l <= max_body) else {
        return ("other", req);
    };
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, length).await {
        Ok(bytes) => {
            let method = match serde_json::from_slice::<MethodOnly<'_>>(&bytes) {
                Ok(MethodOnly {
                    method: Some(method),
                }) => method_label(&method),
                Ok(MethodOnly { method: None }) => "response",
                Err(_) => "invalid",
            };
            (method, Request::from_parts(parts, Body::from(bytes)))
        }
        // The body did not arrive whole (the client went away, or sent more than it said): the
        // request can no longer be served; hand rmcp an empty body, which it refuses.
        Err(_) => ("invalid", Request::from_parts(parts, Body::empty())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_methods_are_one_label() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("tools/call?x=secret"), "other");
        assert_eq!(method_label(""), "other");
    }

    /// A scraper that goes away mid-scrape (its request dropped) must not let the next scrape
    /// start while the first one's reads (blocking work, which a dropped future cannot stop)
    /// still run: anyone may ask `/metrics`, and could otherwise pile up blocking reads by
    /// asking and hanging up.
    #[tokio::test(flavor = "current_thread")]
    async fn a_scrape_left_by_its_scraper_finishes_before_the_next_begins() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let m = Arc::new(GatewayMetrics::new());
        let reading = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(tokio::sync::Notify::new());
        let release = Arc::new(tokio::sync::Notify::new());
        // The first scrape's reads: a task of their own, as `spawn_blocking` work is.
        let fill = {
            let (reading, started, release) = (
                Arc::clone(&reading),
                Arc::clone(&started),
                Arc::clone(&release),
            );
            async move {
                let reads = tokio::spawn(async move {
                    reading.fetch_add(1, Ordering::SeqCst);
                    started.notify_one();
                    release.notified().await;
                    reading.fetch_sub(1, Ordering::SeqCst);
                });
                let _ = reads.await;
                Snapshot::default()
            }
        };
        let first = tokio::spawn({
            let m = Arc::clone(&m);
            async move { m.render(fill).await }
        });
        started.notified().await;
        first.abort();
        let _ = first.await;
        // The second scrape notes how many reads run when it begins its own.
        let seen = Arc::new(AtomicUsize::new(usize::MAX));
        let second = tokio::spawn({
            let (m, seen, reading) = (Arc::clone(&m), Arc::clone(&seen), Arc::clone(&reading));
            async move {
                m.render(async move {
                    seen.store(reading.load(Ordering::SeqCst), Ordering::SeqCst);
                    Snapshot::default()
                })
                .await
            }
        });
        // On one thread, these turns let the second scrape run as far as it can.
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        release.notify_one();
        second
            .await
            .expect("the second scrape ends")
            .expect("encodes");
        assert_eq!(
            seen.load(Ordering::SeqCst),
            0,
            "the second scrape began while the first one's reads still ran"
        );
    }

    /// Scrapers that wait while a scrape runs share the next one: the reads behind a page are
    /// not repeated once per waiting request.
    #[tokio::test(flavor = "current_thread")]
    async fn concurrent_scrapes_share_the_reads() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let m = Arc::new(GatewayMetrics::new());
        let fills = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(tokio::sync::Notify::new());
        let release = Arc::new(tokio::sync::Notify::new());
        let first = tokio::spawn({
            let (m, fills, started, release) = (
                Arc::clone(&m),
                Arc::clone(&fills),
                Arc::clone(&started),
                Arc::clone(&release),
            );
            async move {
                m.render(async move {
                    fills.fetch_add(1, Ordering::SeqCst);
                    started.notify_one();
                    release.notified().await;
                    Snapshot::default()
                })
                .await
            }
        });
        started.notified().await;
        const WAITING: usize = 8;
        let waiting: Vec<_> = (0..WAITING)
            .map(|_| {
                let (m, fills) = (Arc::clone(&m), Arc::clone(&fills));
                tokio::spawn(async move {
                    m.render(async move {
                        fills.fetch_add(1, Ordering::SeqCst);
                        Snapshot::default()
                    })
                    .await
                })
            })
            .collect();
        // On one thread, these turns let every waiting scrape reach the lock.
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        release.notify_one();
        first.await.unwrap().unwrap();
        for w in waiting {
            assert!(w.await.unwrap().unwrap().ends_with("# EOF\n"));
        }
        // The first scrape, and one more for every request that asked while it ran.
        assert_eq!(fills.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn renders_openmetrics_with_the_prefix() {
        let m = Arc::new(GatewayMetrics::new());
        m.observe_request(
            &RequestLabels {
                method: "tools/list",
                generation: "stateful",
            },
            Duration::from_millis(2),
        );
        let text = m
            .render(async {
                Snapshot {
                    sessions: vec![("stateful", 2)],
                    review_pending: Some(3),
                    ..Snapshot::default()
                }
            })
            .await
            .expect("encodes");
        assert!(
            text.contains(
                r#"bridle_mcp_requests_total{method="tools/list",generation="stateful"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"bridle_sessions{generation="stateful"} 2"#),
            "{text}"
        );
        assert!(text.contains("bridle_review_queue_depth 3"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
