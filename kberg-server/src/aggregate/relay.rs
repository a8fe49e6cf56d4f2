//! The client relay: the rmcp client handler of one upstream connection.
//!
//! An upstream may talk back while a forwarded call runs: progress (routed by progress token to
//! the calling tool), log messages, and its own requests of its client (sampling, elicitation),
//! which are relayed to the client of the call they belong to. A server-to-client request
//! carries nothing that ties it to one call, so it is relayed only when exactly one forwarded
//! call is in flight to this upstream, and refused with a sentence otherwise. List-change
//! notifications wake the supervisor to re-list.

use std::sync::Arc;

use kberg_core::{ClientPeer, PeerError, RateBudget, ToolContext};
// Sampling and logging are deprecated by a later revision but still part of 2025-11-25, which
// upstreams speak: the aggregator relays them.
use rmcp::ClientHandler;
#[allow(deprecated)]
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ErrorData as McpError, Implementation,
    LoggingMessageNotificationParam, ProgressNotificationParam, ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::front::Upstream;
use super::resources::namespaced_uri;

/// The most log messages of one upstream relayed at once; after that, one per
/// [`LOG_RELAY_INTERVAL`]. The same bound as a server's own log messages to one client
/// ([`kberg_core::LOG_MESSAGE_BURST`]), which the relayed ones then pass as well.
pub const LOG_RELAY_BURST: u32 = kberg_core::LOG_MESSAGE_BURST;

/// How often an upstream that has used its burst of log messages gets one relayed: twenty a
/// second ([`kberg_core::LOG_MESSAGE_INTERVAL`]).
pub const LOG_RELAY_INTERVAL: std::time::Duration = kberg_core::LOG_MESSAGE_INTERVAL;

/// The relay's bound on one upstream's log messages.
pub(super) fn log_budget() -> RateBudget {
    RateBudget::new(LOG_RELAY_BURST, LOG_RELAY_INTERVAL)
}

/// The rmcp client handler of one upstream: routes progress to the calling tool, notices
/// list changes, and relays the upstream's own requests (sampling, elicitation) and log
/// messages to the client of the call they belong to.
#[derive(Clone)]
pub(super) struct UpstreamClient {
    pub(super) up: Arc<Upstream>,
}

impl UpstreamClient {
    /// The forwarded tool call whose client must answer a request the upstream sent mid-call.
    ///
    /// A server-to-client request carries nothing that ties it to one call (on stdio it is just
    /// a request), so it is relayed only when exactly one forwarded call is in flight to this
    /// upstream; with none or several it is refused with a sentence saying why, rather than
    /// guessed, since the wrong client would see another's question.
    fn relay_target(
        &self,
        capability: &str,
    ) -> Result<(Arc<dyn ClientPeer>, ToolContext), McpError> {
        let ns = self.up.namespace();
        let calls: Vec<ToolContext> = self
            .up
            .active
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let ctx = match calls.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(McpError::invalid_request(
                    format!(
                        "the aggregator has no call in flight to `{ns}` whose client could answer this request"
                    ),
                    None,
                ));
            }
            many => {
                return Err(McpError::internal_error(
                    format!(
                        "{} calls are in flight to `{ns}` through the aggregator: it cannot tell which client should answer this request",
                        many.len()
                    ),
                    None,
                ));
            }
        };
        match ctx.peer() {
            Some(peer) if peer.supports(capability) => Ok((Arc::clone(peer), ctx)),
            _ => Err(McpError::invalid_request(
                format!("the client of this call does not support {capability}"),
                None,
            )),
        }
    }

    /// Relays `method` to the calling client and decodes its answer.
    async fn relay<T: serde::de::DeserializeOwned>(
        &self,
        capability: &str,
        method: &str,
        params: Value,
        upstream_cancel: CancellationToken,
    ) -> Result<T, McpError> {
        let (peer, ctx) = self.relay_target(capability)?;
        // Stops when the upstream cancels its request or the call is cancelled downstream.
        let cancel = ctx.cancellation().child_token();
        let c = cancel.clone();
        let relay = tokio::spawn(async move {
            upstream_cancel.cancelled().await;
            c.cancel();
        });
        let answer = peer.request(method, params, cancel).await;
        relay.abort();
        let ns = self.up.namespace();
        tracing::debug!(
            namespace = ns,
            method,
            ok = answer.is_ok(),
            "relayed an upstream request"
        );
        let value = answer.map_err(|e| match e {
            PeerError::InputRequired { .. } => McpError::internal_error(
                format!("the client of this call answers {method} only in a new round trip (2026-07-28), which cannot be relayed while `{ns}` waits"),
                None,
            ),
            other => McpError::internal_error(format!("the client did not answer: {other}"), None),
        })?;
        serde_json::from_value(value).map_err(|e| {
            McpError::internal_error(
                format!("the client's answer to {method} is malformed: {e}"),
                None,
            )
        })
    }
}

#[allow(deprecated)] // sampling and logging: see the imports
impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        // Sampling and elicitation are relayed to the calling client (see `relay_target`);
        // an upstream's tasks are followed to their end (see `tasks`).
        let capabilities = serde_json::from_value::<ClientCapabilities>(json!({
            "sampling": {},
            "elicitation": {"form": {}},
            "extensions": {rmcp::model::TASKS_EXTENSION_ID: {}},
        }))
        .unwrap_or_default();
        ClientConfig::new(
            capabilities,
            Implementation::new("kberg-aggregator", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, McpError> {
        let params = serde_json::to_value(&params)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        self.relay("sampling", "sampling/createMessage", params, context.ct)
            .await
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let params = serde_json::to_value(&request)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        self.relay("elicitation", "elicitation/create", params, context.ct)
            .await
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        // Like requests, a log message reaches a client only when it can only be about its call.
        let one = self.up.active.lock().ok().and_then(|m| {
            let mut calls = m.values();
            match (calls.next(), calls.next()) {
                (Some(c), None) => c.peer().cloned(),
                _ => None,
            }
        });
        match (one, serde_json::to_value(&params)) {
            (Some(peer), Ok(v)) => {
                // An upstream that floods log messages cannot flood the clients: the rate of
                // those relayed is bounded per upstream, as MCP asks of a server's log messages.
                let within = self
                    .up
                    .log_budget
                    .lock()
                    .map(|mut b| b.take(tokio::time::Instant::now()))
                    .unwrap_or(false);
                if !within {
                    tracing::trace!(
                        namespace = self.up.namespace(),
                        "an upstream log message over the relay's rate bound was not relayed"
                    );
                    return;
                }
                let _ = peer.notify("notifications/message", v).await;
            }
            _ => tracing::debug!(
                namespace = self.up.namespace(),
                "an upstream log message with no single call to relay it to"
            ),
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let ctx = self
            .up
            .progress
            .lock()
            .ok()
            .and_then(|m| m.get(&params.progress_token).cloned());
        if let Some(ctx) = ctx {
            let _ = ctx
                .progress(params.progress, params.total, params.message.as_deref())
                .await;
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.up.relist.notify_one();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.up.relist.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if self.up.resources.is_some() {
            self.up.relist.notify_one();
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(resources) = &self.up.resources {
            let uri = namespaced_uri(self.up.namespace(), &params.uri);
            let told = resources.notify_updated(&uri);
            tracing::debug!(namespace = self.up.namespace(), %uri, told, "upstream resource updated");
        }
    }
}
