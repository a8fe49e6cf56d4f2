//! Operating the gateway: health, readiness and metrics on the gateway's own listener.
//!
//! An orchestrator (Docker's `HEALTHCHECK`, a load balancer, Kubernetes probes) and a
//! Prometheus server need to ask the gateway how it is without an agent's token, so these
//! routes sit beside the MCP endpoint, outside its authentication:
//!
//! - `GET /healthz`: the process serves (always `200` while it does);
//! - `GET /readyz`: `200` when the gateway can do its work, else `503`, with a JSON body that
//!   names each check and why it failed ([`health`]);
//! - `GET /metrics`: Prometheus metrics as OpenMetrics text ([`metrics`]; indexing progress
//!   in [`indexing`]).
//!
//! None of them reveals a secret, an argument value or a session id; the metrics name
//! configured agents, tools and upstream namespaces. [`OpsState`] is built by the
//! [`GatewayBuilder`](crate::GatewayBuilder) and mounted by [`Gateway::bind`](crate::Gateway::bind).

pub mod health;
pub mod indexing;
pub mod metrics;

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use kberg_server::aggregate::UpstreamStatus;
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub use health::{Check, Readiness};
pub use indexing::IndexingProgress;
pub use metrics::GatewayMetrics;

use crate::context::GatewayContext;
use crate::sessions::Generation;
use crate::upstreams::UpstreamPool;
use crate::vault::Vault;
use metrics::{Snapshot, UpstreamSample};

/// The liveness path.
pub const HEALTHZ_PATH: &str = "/healthz";
/// The readiness path.
pub const READYZ_PATH: &str = "/readyz";
/// The metrics path.
pub const METRICS_PATH: &str = "/metrics";

/// What the ops routes read: the gateway's parts, its metrics, and whether it is draining.
pub struct OpsState {
    pub(crate) ctx: Arc<GatewayContext>,
    pub(crate) vault: Arc<Vault>,
    pub(crate) upstreams: Arc<UpstreamPool>,
    pub(crate) metrics: Arc<GatewayMetrics>,
    pub(crate) optional_upstreams: BTreeSet<String>,
    /// Cancelled when shutdown begins: readiness fails from then on.
    pub(crate) draining: CancellationToken,
}

impl std::fmt::Debug for OpsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpsState")
            .field("optional_upstreams", &self.optional_upstreams)
            .finish_non_exhaustive()
    }
}

impl OpsState {
    /// The readiness checks, as `/readyz` runs them.
    pub async fn readiness(self: &Arc<Self>) -> Readiness {
        health::readiness(self).await
    }

    /// The metrics exposition, as `/metrics` serves it.
    pub async fn render_metrics(self: &Arc<Self>) -> Result<String, std::fmt::Error> {
        let state = Arc::clone(self);
        self.metrics
            .render(async move { state.snapshot().await })
            .await
    }

    /// Reads the scrape-time values from their owners.
    async fn snapshot(self: &Arc<Self>) -> Snapshot {
        let mut stateful = 0;
        let mut stateless = 0;
        for s in self.ctx.sessions.sessions() {
            match s.generation {
                Generation::Stateful => stateful += 1,
                Generation::Stateless => stateless += 1,
            }
        }
        let mut upstreams = Vec::new();
        for (ns, route) in self.upstreams.routes() {
            // The connection that lists the tools, as the admin API's report reads it: with
            // per-agent secrets it need not be the first agent's.
            let status = match route.listing_connection().await {
                Some(c) => c.aggregator.status(ns),
                None => None,
            };
            let (connected, connections) = match status {
                Some(UpstreamStatus::Connected { generation }) => (true, generation),
                _ => (false, 0),
            };
            upstreams.push(UpstreamSample {
                namespace: ns.clone(),
                enabled: self.upstreams.is_enabled(ns).await,
                connected,
                connections,
            });
        }
        let ctx = Arc::clone(&self.ctx);
        let vault = Arc::clone(&self.vault);
        let stored = tokio::task::spawn_blocking(move || {
            // Counted by one statement: a scrape reads no proposal or ticket.
            let pending = ctx
                .store
                .pending_counts()
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "the pending review counts could not be read");
                })
                .ok();
            let review = pending.map(|c| c.proposals);
            let scope = pending.map(|c| c.scope_tickets);
            let vault_ops = vault.action_counts().unwrap_or_else(|e| {
                tracing::warn!(error = %e, "the vault's operation counts could not be read");
                Vec::new()
            });
            (review, scope, vault_ops)
        })
        .await;
        let (review_pending, scope_pending, vault_ops) = stored.unwrap_or_default();
        Snapshot {
            sessions: vec![("stateful", stateful), ("stateless", stateless)],
            upstreams,
            review_pending,
            scope_pending,
            vault_ops,
        }
    }
}

/// The ops routes (`/healthz`, `/readyz`, `/metrics`) over `state`.
pub fn routes(state: Arc<OpsState>) -> Router {
    Router::new()
        .route(HEALTHZ_PATH, get(healthz))
        .route(READYZ_PATH, get(readyz))
        .route(METRICS_PATH, get(metrics_page))
        .with_state(state)
}

async fn healthz() -> Response {
    (
        StatusCode::OK,
        axum::Json(json!({"status": "alive", "version": env!("CARGO_PKG_VERSION")})),
    )
        .into_response()
}

async fn readyz(State(state): State<Arc<OpsState>>) -> Response {
    let r = state.readiness().await;
    let code = if r.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(r)).into_response()
}

async fn metrics_page(State(state): State<Arc<OpsState>>) -> Response {
    match state.render_metrics().await {
        Ok(text) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
            text,
        )
            .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({
                "error": "metrics_unavailable",
                "message": "the metrics could not be encoded"
            })),
        )
            .into_response(),
    }
}
