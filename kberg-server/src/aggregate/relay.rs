//! The client relay: the rmcp client handler of one upstream connection.
//!
//! An upstream may talk back while a forwarded call runs: progress (routed by progress token to
//! the calling tool), log messages, and its own requests of its client (sampling, elicitation),
//! which are relayed to the client of the call they belong to: over Streamable HTTP the one
//! whose request's response stream carried it; otherwise (stdio, an upstream's standalone
//! stream) nothing ties it to one call, so it is relayed only when exactly one forwarded call
//! is in flight to this upstream and none was abandoned lately, and refused with a sentence
//! otherwise ([`UpstreamClient::call_of`]). List-change notifications wake the supervisor to
//! re-list. Progress, log messages and requests are relayed to each client in the order the
//! upstream sent them on their stream, and before the answer that followed them; a client that
//! stops reading holds up only what goes to it (`super::order`).
//!
//! Nothing the upstream says reaches a client with the upstream's credentials in it: every
//! string of a relayed log message (its `data` at any depth, its `logger`), a progress message,
//! and every string and key of a relayed request's params has the upstream's
//! [`Redactions`] replaced by `[redacted]`, the same list its stderr lines are cleaned of.
//! A resource update is not cleaned: its URI goes only to the clients subscribed to that very
//! URI, who sent it themselves.

use std::collections::HashMap;
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
use rmcp::service::{InboundStreamOrigin, NotificationContext, RequestContext, RoleClient};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::front::{ActiveEntry, Upstream};
use super::redact::Redactions;
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
    /// The forwarded tool call a request or log message the upstream sent mid-call belongs to.
    ///
    /// Over Streamable HTTP the upstream sends it on the response stream of the request it is
    /// about, and rmcp says which (`origin`): that call is the one. Otherwise (stdio, or the
    /// upstream's standalone stream) nothing ties it to one call, so it is taken for a call's
    /// only when exactly one forwarded call is in flight to this upstream and none was
    /// abandoned unanswered within the call timeout (the upstream may still be at work on
    /// that one); in every other case it is refused with a sentence saying why, rather than
    /// guessed, since the wrong client would see another's question.
    fn call_of(&self, origin: Option<&InboundStreamOrigin>) -> Result<ToolContext, String> {
        let ns = self.up.namespace();
        let Ok(mut calls) = self.up.active.lock() else {
            return Err(format!(
                "the aggregator's record of calls to `{ns}` is unusable"
            ));
        };
        pick_call(&mut calls, origin, tokio::time::Instant::now(), ns)
    }

    /// The client that must answer a request the upstream sent mid-call, and that call's
    /// context ([`UpstreamClient::call_of`]).
    fn relay_target(
        &self,
        capability: &str,
        origin: Option<&InboundStreamOrigin>,
    ) -> Result<(Arc<dyn ClientPeer>, ToolContext), McpError> {
        let ctx = self
            .call_of(origin)
            .map_err(|why| McpError::invalid_request(why, None))?;
        match ctx.peer() {
            Some(peer) if peer.supports(capability) => Ok((Arc::clone(peer), ctx)),
            _ => Err(McpError::invalid_request(
                format!("the client of this call does not support {capability}"),
                None,
            )),
        }
    }

    /// Relays `method` to the calling client, its params cleaned of the upstream's
    /// credentials, and decodes its answer.
    async fn relay<T: serde::de::DeserializeOwned>(
        &self,
        capability: &str,
        method: &str,
        mut params: Value,
        upstream_cancel: CancellationToken,
        origin: Option<&InboundStreamOrigin>,
    ) -> Result<T, McpError> {
        self.up.sends_recorded().await;
        let (peer, ctx) = self.relay_target(capability, origin)?;
        redact_relayed(
            &self.up.redactions,
            self.up.namespace(),
            method,
            &mut params,
        );
        // Stops when the upstream cancels its request or the call is cancelled downstream.
        let cancel = ctx.cancellation().child_token();
        let c = cancel.clone();
        let relay = tokio::spawn(async move {
            upstream_cancel.cancelled().await;
            c.cancel();
        });
        // After what was relayed to this client before it (see `order`).
        let answer = tokio::select! {
            biased;
            () = cancel.cancelled() => Err(PeerError::Cancelled),
            () = self.up.relay_order.delivered(&peer) => {
                peer.request(method, params, cancel.clone()).await
            }
        };
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
            // The client's own refusal goes back as it is: sampling's `-1` says the user
            // rejected the request, which an upstream must be able to tell from a failure.
            PeerError::Rejected { code, message } => match i32::try_from(code) {
                Ok(code) => McpError::new(rmcp::model::ErrorCode(code), message, None),
                Err(_) => McpError::internal_error(
                    format!("the client answered with error {code}: {message}"),
                    None,
                ),
            },
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

/// Replaces the upstream's credentials in `params` of `method`, about to be relayed to a
/// client. An upstream that says its credential is worth an operator's notice (a server that
/// quotes its token, or a compromised one; see [`Redactions::said`]), but the value itself is
/// never logged.
pub(super) fn redact_relayed(
    redactions: &Redactions,
    namespace: &str,
    method: &str,
    params: &mut Value,
) {
    if redactions.value(params) {
        redactions.said(namespace, method);
    }
}

/// [`UpstreamClient::call_of`] over the record of calls (`calls`, whose abandoned entries past
/// their time are dropped here).
fn pick_call(
    calls: &mut HashMap<u64, ActiveEntry>,
    origin: Option<&InboundStreamOrigin>,
    now: tokio::time::Instant,
    ns: &str,
) -> Result<ToolContext, String> {
    calls.retain(|_, e| e.abandoned_until.is_none_or(|until| until > now));
    let abandoned = || {
        format!(
            "the call to `{ns}` this belongs to was abandoned (cancelled or timed out); nobody is left to answer it"
        )
    };
    if let Some(InboundStreamOrigin::OutboundRequest(id)) = origin {
        // The upstream said which request this is about: that call, or none.
        return match calls.values().find(|e| e.upstream_id.as_ref() == Some(id)) {
            Some(entry) => entry.ctx.clone().ok_or_else(abandoned),
            None => Err(format!(
                "it came with a request to `{ns}` that is no call in flight through the aggregator"
            )),
        };
    }
    let mut all = calls.values();
    match (all.next(), all.next()) {
        (Some(one), None) => one.ctx.clone().ok_or_else(abandoned),
        (None, _) => Err(format!(
            "the aggregator has no call in flight to `{ns}` whose client could answer this request"
        )),
        _ => Err(format!(
            "{} calls are in flight to `{ns}` through the aggregator, or were abandoned moments ago: it cannot tell which client should answer this request",
            calls.len()
        )),
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
        // After what the upstream said before it on its stream (see `order`).
        self.up.relay_order.turn(&context.extensions).await;
        let origin = context.extensions.get::<InboundStreamOrigin>();
        self.relay(
            "sampling",
            "sampling/createMessage",
            params,
            context.ct.clone(),
            origin,
        )
        .await
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let params = serde_json::to_value(&request)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        self.up.relay_order.turn(&context.extensions).await;
        let origin = context.extensions.get::<InboundStreamOrigin>();
        self.relay(
            "elicitation",
            "elicitation/create",
            params,
            context.ct.clone(),
            origin,
        )
        .await
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        mut context: NotificationContext<RoleClient>,
    ) {
        // In the order the upstream sent it (see `order`). Like requests, a log message reaches
        // a client only when it can only be about its call.
        self.up.relay_order.turn(&context.extensions).await;
        self.up.sends_recorded().await;
        let one = self
            .call_of(context.extensions.get::<InboundStreamOrigin>())
            .ok()
            .and_then(|c| c.peer().cloned());
        match (one, serde_json::to_value(&params)) {
            (Some(peer), Ok(mut v)) => {
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
                redact_relayed(
                    &self.up.redactions,
                    self.up.namespace(),
                    "notifications/message",
                    &mut v,
                );
                // In line after what went to this client before; what comes next on the stream
                // need not wait for this client's send (see `order`).
                let place = self.up.relay_order.to_client(&peer);
                self.up.relay_order.dispatched(&mut context.extensions);
                place.ready().await;
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
        mut context: NotificationContext<RoleClient>,
    ) {
        // In the order the upstream sent it: a report that overtook the one before would make
        // that one not advance, and it would be left out (see `order`).
        self.up.relay_order.turn(&context.extensions).await;
        self.up.sends_recorded().await;
        let ctx = self
            .up
            .progress
            .lock()
            .ok()
            .and_then(|m| m.get(&params.progress_token).cloned());
        if let Some((ctx, peer)) = ctx.and_then(|c| c.peer().cloned().map(|p| (c, p))) {
            let message = params.message.as_deref().map(|m| {
                let text = self.up.redactions.text(m);
                if matches!(text, std::borrow::Cow::Owned(_)) {
                    self.up
                        .redactions
                        .said(self.up.namespace(), "notifications/progress");
                }
                text
            });
            // In line after what went to this client before (see `order`).
            let place = self.up.relay_order.to_client(&peer);
            self.up.relay_order.dispatched(&mut context.extensions);
            place.ready().await;
            let _ = ctx
                .progress(params.progress, params.total, message.as_deref())
                .await;
        }
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, McpError> {
        // The aggregator declares no roots to its upstreams: an empty list would tell the
        // upstream that the client has no roots, which nobody said.
        Err(McpError::method_not_found::<
            rmcp::model::ListRootsRequestMethod,
        >())
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
            tracing::debug!(
                namespace = self.up.namespace(),
                ?uri,
                told,
                "upstream resource updated"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use kberg_core::{Caller, Principal};
    use rmcp::model::RequestId;

    use super::*;

    fn ctx(who: &str) -> ToolContext {
        ToolContext::detached(Caller::new(Principal::new(who)))
    }

    fn live(who: &str, upstream: i64) -> ActiveEntry {
        ActiveEntry {
            ctx: Some(ctx(who)),
            upstream_id: Some(RequestId::Number(upstream)),
            abandoned_until: None,
        }
    }

    fn abandoned(upstream: i64, until: tokio::time::Instant) -> ActiveEntry {
        ActiveEntry {
            ctx: None,
            upstream_id: Some(RequestId::Number(upstream)),
            abandoned_until: Some(until),
        }
    }

    fn who(c: &ToolContext) -> String {
        c.caller().principal().id.clone()
    }

    #[tokio::test]
    async fn a_request_goes_to_the_call_it_names_or_to_none() {
        let now = tokio::time::Instant::now();
        let later = now + std::time::Duration::from_secs(60);
        let on = |id: i64| InboundStreamOrigin::OutboundRequest(RequestId::Number(id));
        let mut calls = HashMap::from([(1, live("alice", 10)), (2, live("bob", 11))]);
        // Named by its stream: that call, however many are in flight.
        assert_eq!(
            who(&pick_call(&mut calls, Some(&on(11)), now, "up").unwrap()),
            "bob"
        );
        // A stream of no call in flight is nobody's, even with one call left.
        calls.remove(&2);
        assert!(pick_call(&mut calls, Some(&on(11)), now, "up").is_err());
        // An abandoned call's question reaches nobody, not the call still in flight.
        calls.insert(3, abandoned(12, later));
        let err = pick_call(&mut calls, Some(&on(12)), now, "up").unwrap_err();
        assert!(err.contains("abandoned"), "{err}");
        // Unassociated: only a single call, and none abandoned within the timeout.
        let err = pick_call(&mut calls, None, now, "up").unwrap_err();
        assert!(err.contains("abandoned moments ago"), "{err}");
        let err = pick_call(
            &mut calls,
            Some(&InboundStreamOrigin::Unassociated),
            now,
            "up",
        )
        .unwrap_err();
        assert!(err.contains("2 calls"), "{err}");
        // Once its time has passed, the abandoned call no longer counts.
        assert_eq!(
            who(&pick_call(&mut calls, None, later, "up").unwrap()),
            "alice"
        );
        assert_eq!(calls.len(), 1);
        // A lone abandoned call is nobody's either; no call at all, likewise.
        let mut lone = HashMap::from([(4, abandoned(13, later))]);
        assert!(
            pick_call(&mut lone, None, now, "up")
                .unwrap_err()
                .contains("abandoned")
        );
        let mut none = HashMap::new();
        assert!(
            pick_call(&mut none, None, now, "up")
                .unwrap_err()
                .contains("no call")
        );
    }
}
