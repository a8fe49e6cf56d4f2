//! `subscriptions/listen` (2026-07-28): the filter accepted (only resources that exist, at
//! most the app's `max_resource_subscriptions` of them), the watchers created before rmcp
//! acknowledges it (so a change right after the acknowledgement is seen), and the stream of
//! resource updates and `list_changed` notifications it serves until the client or the server
//! ends it.
//!
//! A filter naming more resources than the limit is accepted with the first ones (in the
//! filter's order) rather than refused: rmcp asks the handler only which part of a filter it
//! accepts, and has no way to answer that step with an error (declining answers `-32601`, as
//! for a server without listen), while the acknowledgement is where the specification has a
//! server tell the client what it watches.
//!
//! A client ends a listen by closing its stream. The HTTP layer then cancels the request's
//! [`ListenClosed`] and keeps reading rmcp's side of the stream until it ends, so the listen
//! returns and rmcp delivers its final result (to nobody). Ending it through rmcp's own
//! disconnect path instead cancels the request's service, which then fails to send that result
//! to a closed stream and logs an ERROR for an ordinary close.

use std::time::{Duration, Instant};

use kberg_core::{Caller, ResourceEvent, Subscriber};
use rmcp::ErrorData as McpError;
use rmcp::model::SubscriptionFilter;
use rmcp::service::SubscriptionContext;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::KbergHandler;
use crate::app::McpApp;

/// How long accepted-but-unstarted listen watchers are kept. A listen whose acknowledgement
/// could not be sent never starts; its watchers are dropped after this.
pub(super) const PENDING_LISTEN_TTL: Duration = Duration::from_secs(30);

/// Cancelled when the client closed the stream of its `subscriptions/listen` (set by the HTTP
/// layer in the request's extensions).
#[derive(Clone, Debug)]
pub(crate) struct ListenClosed(pub(crate) CancellationToken);

/// The watchers of one accepted `subscriptions/listen`, created when its filter is accepted.
pub(super) struct PendingListen {
    /// The requested filter, as JSON: what both calls see of the request.
    pub(super) key: String,
    pub(super) created: Instant,
    pub(super) watchers: ListenWatchers,
}

/// What one `subscriptions/listen` stream watches.
pub(super) struct ListenWatchers {
    pub(super) subscriber: Subscriber,
    pub(super) tools: watch::Receiver<u64>,
    pub(super) resources: watch::Receiver<u64>,
    pub(super) prompts: watch::Receiver<u64>,
}

impl ListenWatchers {
    /// Watchers of the three registries as they are now, and of `uris`' updates, on
    /// `caller`'s behalf (`None`: nobody known, so no URI is watched). At most the app's
    /// `max_resource_subscriptions` URIs are watched; the accepted filter names no more.
    pub(super) fn new(app: &McpApp, caller: Option<Caller>, uris: &[String]) -> Self {
        let limit = app.inner.max_resource_subscriptions;
        let subscriber = match caller {
            Some(caller) => {
                let subscriber = app.resources().subscriber_for(caller).with_limit(limit);
                for uri in uris {
                    // A resource removed (or hidden) meanwhile is simply not watched, nor one
                    // past the limit (which `accept_listen_filter` already left out).
                    let _ = subscriber.subscribe(uri);
                }
                subscriber
            }
            // Nobody known to act for: list changes only, no resource's updates.
            None => app.resources().subscriber().with_limit(limit),
        };
        let mut tools = app.tools().changes();
        let mut resources = app.resources().changes();
        let mut prompts = app.prompts().changes();
        tools.mark_unchanged();
        resources.mark_unchanged();
        prompts.mark_unchanged();
        Self {
            subscriber,
            tools,
            resources,
            prompts,
        }
    }
}

pub(super) fn filter_key(filter: &SubscriptionFilter) -> String {
    serde_json::to_string(filter).unwrap_or_default()
}

impl KbergHandler {
    /// Accepts a listen filter and starts watching, before rmcp acknowledges it.
    pub(super) fn accept_listen_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        // Only resources the caller may know of are accepted: a hidden one is left out as an
        // unknown one is, and with nobody known to act for, none is. Of those, the first
        // `max_resource_subscriptions` (each once) are accepted, and the rest of the filter is
        // not even looked up: a filter may name hundreds of thousands of URIs.
        let caller = self.acting_for();
        if let Some(uris) = &mut accepted.resource_subscriptions {
            let resources = self.shared.app.resources();
            let limit = self.shared.app.inner.max_resource_subscriptions;
            let mut kept: Vec<String> = Vec::new();
            if let Some(c) = &caller {
                let mut seen = std::collections::HashSet::new();
                for u in uris.iter() {
                    if kept.len() >= limit {
                        break;
                    }
                    if !seen.contains(u.as_str()) && resources.exists_for(c, u) {
                        seen.insert(u.as_str());
                        kept.push(u.clone());
                    }
                }
            }
            *uris = kept;
        }
        // Watch from now on, before rmcp acknowledges the filter (see `pending_listens`).
        let watchers = ListenWatchers::new(
            &self.shared.app,
            caller,
            accepted
                .resource_subscriptions
                .as_deref()
                .unwrap_or_default(),
        );
        let now = Instant::now();
        let mut pending = self
            .session()
            .pending_listens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pending.retain(|p| now.duration_since(p.created) < PENDING_LISTEN_TTL);
        pending.push(PendingListen {
            key: filter_key(requested),
            created: now,
            watchers,
        });
        Some(accepted)
    }

    /// Serves one accepted listen until the client or the server ends it.
    pub(super) async fn serve_listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let app = &self.shared.app;
        let accepted = context.accepted().clone();
        let sink = context.sink().clone();
        let prepared = {
            let key = filter_key(context.requested());
            let mut pending = self
                .session()
                .pending_listens
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pending
                .iter()
                .position(|p| p.key == key)
                .map(|i| pending.remove(i).watchers)
        };
        // The server always advertises resource subscriptions and list changes, so rmcp's
        // narrowing to the advertised capabilities never removes a URI that was watched.
        let ListenWatchers {
            mut subscriber,
            mut tools,
            mut resources,
            mut prompts,
        } = prepared.unwrap_or_else(|| {
            ListenWatchers::new(
                app,
                self.caller(context.request_context()).ok(),
                accepted
                    .resource_subscriptions
                    .as_deref()
                    .unwrap_or_default(),
            )
        });
        let closed = context
            .request_context()
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<ListenClosed>())
            .map(|c| c.0.clone())
            .unwrap_or_default();
        let t_on = accepted.tools_list_changed == Some(true);
        let r_on = accepted.resources_list_changed == Some(true);
        let p_on = accepted.prompts_list_changed == Some(true);
        let (mut t_open, mut r_open, mut p_open) = (t_on, r_on, p_on);
        loop {
            let sent = tokio::select! {
                () = context.cancelled() => break,
                () = closed.cancelled() => break,
                () = self.shared.shutdown.cancelled() => break,
                ev = subscriber.next() => match ev {
                    Some(ResourceEvent::Updated { uri }) => sink.notify_resource_updated(uri).await,
                    Some(_) => Ok(()),
                    None => break,
                },
                r = tools.changed(), if t_open => match r {
                    Ok(()) => sink.notify_tool_list_changed().await,
                    Err(_) => { t_open = false; Ok(()) }
                },
                r = resources.changed(), if r_open => match r {
                    Ok(()) => sink.notify_resource_list_changed().await,
                    Err(_) => { r_open = false; Ok(()) }
                },
                r = prompts.changed(), if p_open => match r {
                    Ok(()) => sink.notify_prompt_list_changed().await,
                    Err(_) => { p_open = false; Ok(()) }
                },
            };
            if let Err(e) = sent {
                match e {
                    rmcp::service::SubscriptionSendError::SubscriptionClosed => break,
                    rmcp::service::SubscriptionSendError::Service(
                        rmcp::ServiceError::TransportClosed,
                    ) => break,
                    other => tracing::debug!(error = %other, "a listen notification was not sent"),
                }
            }
        }
        Ok(())
    }
}
