//! The bridge: an rmcp [`ServerHandler`] that serves an [`McpApp`]'s registries through the
//! gate.
//!
//! rmcp owns the wire (framing, sessions, version negotiation, both protocol generations);
//! this handler owns the meaning. One handler value exists per 2025-11-25 session (or per
//! stateless request, or per stdio connection), cloned from the transport-wide [`TransportContext`]
//! state. Every request resolves its principal afresh (from the HTTP request's authenticated
//! extension, or the fixed stdio principal), so grants never depend on a session.
//!
//! Error mapping, documented because clients and the conformance suite match on it:
//! - an unknown tool name is a JSON-RPC error `-32602` (invalid params) with the gate's
//!   details as `data`, as the 2025-11-25 specification prescribes;
//! - every other gate refusal (`refused`, `not_in_surface`, `capability_required`,
//!   `invalid_arguments`, `tool_failed`, `cancelled`) is a `tools/call` result with
//!   `isError: true`, the sentence as text and the details (stable `code`) as
//!   `structuredContent`, so a model reads it and a program matches on it;
//! - a principal over its concurrent-call limit gets the same kind of result with code
//!   `too_many_calls` (retryable);
//! - on 2026-07-28 a tool that asks the client something answers `input_required`; a tool
//!   that needs a client capability the request did not declare answers `-32021`; the methods
//!   that revision removed (`initialize`, `ping`, `logging/setLevel`, `resources/subscribe`,
//!   `resources/unsubscribe`) answer `-32601`;
//! - a known method with params of the wrong shape is `-32602`, an unknown one `-32601`;
//! - a request whose handling panicked in the app's code (its `ToolVisibility` or
//!   `ResourceVisibility`) is `-32603` with `data.code = "internal_error"` (a
//!   `subscriptions/listen` filter, accepted before anything is answered, is then accepted
//!   without resources);
//! - tasks (`tools/call` answered with a task, `tasks/get`, `tasks/update`, `tasks/cancel`):
//!   see [`crate::tasks`].
//!
//! One file per job: [`shared`] (what every handler of a transport shares), [`session`] (a
//! 2025-11-25 session's state and forwarding task), [`request`] (one request's client
//! channel per generation), [`call`] (`tools/call`), [`listen`] (`subscriptions/listen`),
//! [`prompts`] (`prompts/get`, `completion/complete`) and [`errors`] (the JSON-RPC errors);
//! this file holds the handler and the rmcp trait that dispatches to them.

// Logging, sampling and roots are deprecated by the 2026-07-28 revision but still part of
// 2025-11-25, which this handler serves too.
#![allow(deprecated)]

mod call;
mod errors;
mod listen;
mod prompts;
mod request;
mod session;
mod shared;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};

use futures::FutureExt;

use kberg_core::{Caller, Principal};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestParams,
    CompleteResult, GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult,
    InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ServerConfig, SetLevelRequestParams,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::oneshot;

use crate::convert;
use errors::{KNOWN_METHODS, REMOVED_IN_2026, invalid_cursor, removed, resource_error};
use request::{cursor_of, is_stateless};
use session::{Command, SessionState};

pub(crate) use errors::invalid_params;
pub(crate) use listen::ListenClosed;
pub(crate) use shared::{Authenticated, REQUEST_PRINCIPAL, TransportContext};

/// The rmcp handler serving one [`McpApp`].
pub(crate) struct KbergHandler {
    shared: Arc<TransportContext>,
    /// The session's own state, made at its first use. rmcp makes a handler for every
    /// 2026-07-28 request (and one more to look up the called tool's schema for its header
    /// checks); such a request has no session, and most never touch this, so making a handler
    /// allocates nothing.
    session: OnceLock<Arc<SessionState>>,
    /// The principal of the request the handler was made for, when it was made inside one:
    /// rmcp makes a 2026-07-28 request's handler in that request, and a 2025-11-25 session's at
    /// its `initialize`, whose principal owns the session. rmcp asks
    /// [`ServerHandler::accepted_subscription_filter`] without the request, so this is how
    /// that step knows whose resources it may accept.
    made_for: Option<Arc<Principal>>,
}

impl KbergHandler {
    pub(crate) fn new(shared: Arc<TransportContext>) -> Self {
        Self {
            session: OnceLock::new(),
            made_for: REQUEST_PRINCIPAL.try_with(Arc::clone).ok(),
            shared,
        }
    }

    /// Whom a step without the request acts for: the principal the handler was made for, or
    /// the transport's fixed one (stdio). `None` when neither is known.
    fn acting_for(&self) -> Option<Caller> {
        self.made_for
            .as_ref()
            .or(self.shared.fixed_principal.as_ref())
            .map(|p| Caller::new(Arc::clone(p)))
    }

    /// The session's state, made at the first call.
    fn session(&self) -> &Arc<SessionState> {
        self.session
            .get_or_init(|| Arc::new(SessionState::new(Arc::clone(&self.shared.list_changed))))
    }

    fn principal(&self, ctx: &RequestContext<RoleServer>) -> Result<Arc<Principal>, McpError> {
        if let Some(parts) = ctx.extensions.get::<axum::http::request::Parts>()
            && let Some(Authenticated(p)) = parts.extensions.get::<Authenticated>()
        {
            return Ok(Arc::clone(p));
        }
        if let Some(p) = &self.shared.fixed_principal {
            return Ok(Arc::clone(p));
        }
        // The HTTP layer authenticates every request before it reaches rmcp; reaching here
        // means the handler was mounted without it.
        Err(McpError::invalid_request(
            "the request is not authenticated",
            None,
        ))
    }

    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
        Ok(Caller::new(self.principal(ctx)?))
    }
}

/// The longest unknown method name an error quotes, in characters (MCP's are under 40).
const MAX_METHOD_CHARS: usize = 64;

/// Runs the handling of a request with a panic in the app's code contained (a
/// `ToolVisibility` or `ResourceVisibility` it set; kberg-core already contains tools, readers,
/// prompts, confirmation policies and audit sinks): the request is answered `-32603`
/// ([`errors::panicked`]) rather than left unanswered by its task's end.
async fn contained<T>(
    method: &'static str,
    handling: impl Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    AssertUnwindSafe(handling)
        .catch_unwind()
        .await
        .unwrap_or_else(|_panic| Err(errors::panicked(method)))
}

impl ServerHandler for KbergHandler {
    fn get_info(&self) -> ServerConfig {
        self.shared.info.clone()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        if context
            .meta
            .protocol_version()
            .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
        {
            return Err(removed("initialize"));
        }
        if self
            .session()
            .initialized
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            // rmcp has already recorded the negotiated version for this session; taking these
            // parameters would serve its later requests by another generation's rules.
            return Err(McpError::invalid_request(
                "the session is already initialized; start a new session to initialize again",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        self.join_list_changed(&context.peer);
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        contained("tools/list", async move {
            let caller = self.caller(&context)?;
            let page = self
                .shared
                .app
                .tools()
                .list_page(
                    &caller,
                    cursor_of(&request),
                    self.shared.app.inner.page_size,
                )
                .map_err(|_| invalid_cursor())?;
            let mut r =
                ListToolsResult::with_all_items(page.items.iter().map(convert::tool).collect());
            r.next_cursor = page.next_cursor;
            Ok(r)
        })
        .await
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.shared.header_schemas.get(&self.shared.app, name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        contained("tools/call", async move {
            // Boxed, as every large handler future here: rmcp spawns one task per request
            // whose future is the union of all its handler futures, so one large arm (this
            // call runs the whole gate) would make every request's task that large, copied on
            // each spawn.
            Box::pin(self.call(request, context)).await
        })
        .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        contained("resources/list", async move {
            let caller = self.caller(&context)?;
            let page = self
                .shared
                .app
                .resources()
                .list_for(
                    &caller,
                    cursor_of(&request),
                    self.shared.app.inner.page_size,
                )
                .map_err(resource_error)?;
            convert::list_resources(&page.items, page.next_cursor)
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        contained("resources/templates/list", async move {
            let caller = self.caller(&context)?;
            let page = self
                .shared
                .app
                .resources()
                .list_templates_for(
                    &caller,
                    cursor_of(&request),
                    self.shared.app.inner.page_size,
                )
                .map_err(resource_error)?;
            convert::list_templates(&page.items, page.next_cursor)
        })
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        contained("resources/read", async move {
            let caller = self.caller(&context)?;
            let contents = Box::pin(self.shared.app.resources().read_for(&caller, &request.uri))
                .await
                .map_err(resource_error)?;
            Ok(convert::read_result(&contents)?.into())
        })
        .await
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        contained("resources/subscribe", async move {
            let caller = self.caller(&context)?;
            let (tx, rx) = oneshot::channel();
            self.forwarder(&context.peer, caller)
                .send(Command::Subscribe(request.uri, tx))
                .map_err(|_| McpError::internal_error("the session has ended", None))?;
            rx.await
                .map_err(|_| McpError::internal_error("the session has ended", None))?
        })
        .await
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.principal(&context)?;
        // Unsubscribing from something never subscribed is not an error (idempotent); a
        // session that never subscribed has no subscription task to tell.
        if let Some(tx) = self.session.get().and_then(|s| s.forwarder.get()) {
            let _ = tx.send(Command::Unsubscribe(request.uri));
        }
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // The app's visibility is asked here, before rmcp acknowledges the filter, where no
        // error can be answered: a visibility that panics leaves every resource out (as a
        // hidden one is left out), and the stream still carries the list changes.
        std::panic::catch_unwind(AssertUnwindSafe(|| self.accept_listen_filter(requested)))
            .unwrap_or_else(|_panic| {
                tracing::error!(
                    method = "subscriptions/listen",
                    "the app's code panicked while a request was handled; its filter was \
                     accepted without resources"
                );
                let mut without = requested.clone();
                if let Some(uris) = &mut without.resource_subscriptions {
                    uris.clear();
                }
                self.accept_listen_filter(&without)
            })
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        Box::pin(self.serve_listen(context)).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.principal(&context)?;
        // Prompts come in one page, so no cursor was ever handed out: any cursor is invalid.
        if cursor_of(&request).is_some() {
            return Err(invalid_cursor());
        }
        convert::list_prompts(&self.shared.app.prompts().list(), None)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        Box::pin(self.render_prompt(request, context)).await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        Box::pin(self.completion(request, context)).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let principal = self.principal(&context)?;
        let task = self
            .shared
            .app
            .tasks()
            .get(&principal.id, &request.task_id)
            .map_err(|e| crate::tasks::error(&e))?;
        crate::tasks::detailed(&task)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let principal = self.principal(&context)?;
        self.shared
            .app
            .tasks()
            .answer(&principal.id, &request.task_id, request.input_responses)
            .map_err(|e| crate::tasks::error(&e))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let principal = self.principal(&context)?;
        self.shared
            .app
            .tasks()
            .cancel(&principal.id, &request.task_id)
            .map_err(|e| crate::tasks::error(&e))
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, McpError> {
        // Methods the 2026-07-28 revision removed are unknown to its requests.
        if is_stateless(&context) && REMOVED_IN_2026.contains(&request.method.as_str()) {
            return Err(removed(&request.method));
        }
        // rmcp parses requests into known shapes first; a known method whose params do not
        // fit its shape lands here. That is invalid params, not an unknown method.
        if KNOWN_METHODS.contains(&request.method.as_str()) {
            return Err(errors::invalid_params(&request.method, request.params));
        }
        // The method is the client's, and may be as long as a request body: quoted cut short.
        Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!(
                "method not found: {}",
                errors::cut(request.method, MAX_METHOD_CHARS)
            ),
            None,
        ))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if is_stateless(&context) {
            return Err(removed("logging/setLevel"));
        }
        let level = serde_json::to_value(request.level)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "info".into());
        self.session().log.set(&level);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rmcp::Service;
    use rmcp::model::ClientRequest;
    use rmcp::service::RequestContext;

    use super::*;

    /// The size of the future `f` returns, without calling it.
    fn future_size<'a, Fut>(
        _: impl Fn(&'a KbergHandler, ClientRequest, RequestContext<RoleServer>) -> Fut,
    ) -> usize {
        std::mem::size_of::<Fut>()
    }

    /// rmcp spawns a task per request whose future is this one, the union of every handler's,
    /// and moves it into the task and through its stages. Kberg's large handler futures (the
    /// call with the whole gate, the listen loop, prompts, completion, resource reads) are
    /// boxed, so it is as large as for a bare rmcp handler (4,296 bytes with rmcp 3.11 in
    /// release, set by rmcp's own subscription arm; the bound leaves a little room for other
    /// compilers and profiles); unboxed it was 5,544.
    #[test]
    fn a_request_task_stays_small() {
        let size = future_size(<KbergHandler as Service<RoleServer>>::handle_request);
        assert!(size <= 4608, "the request future grew to {size} bytes");
    }
}
