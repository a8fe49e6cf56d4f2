//! What a running tool can see and do: its caller, its cancellation token, and a channel back
//! to the client.
//!
//! The channel is the [`ClientPeer`] trait. kberg-core knows no transport, so the peer speaks in
//! MCP method names and JSON params; kberg-server implements it per protocol generation
//! (server-initiated requests on a 2025-11-25 session, `input_required` results on 2026-07-28)
//! and an in-process caller may supply none. [`ToolContext`] wraps it in typed helpers for the
//! things tools actually do: report progress, log, ask the user (elicitation), ask the client's
//! model (sampling), list roots.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::handle::{HandleCodec, HandleError, HandleKind};
use crate::origin::{CallOrigin, ClientInfo};
use crate::preview::CallPhase;
use crate::principal::Caller;
use crate::rate::RateBudget;

/// Why a request to the client did not produce an answer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PeerError {
    /// No client channel on this call path, or the client did not declare the capability.
    #[error("the client does not support {0}")]
    NotSupported(String),
    /// The client answered with a JSON-RPC error.
    #[error("the client answered with error {code}: {message}")]
    Rejected {
        /// JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// The connection ended before an answer.
    #[error("the client disconnected")]
    Disconnected,
    /// The call was cancelled while waiting.
    #[error("cancelled while waiting for the client")]
    Cancelled,
    /// The answer did not have the documented shape.
    #[error("the client's answer is malformed: {0}")]
    Malformed(String),
    /// Stateless protocol (2026-07-28): the answer must come in a new round trip. The tool stops;
    /// the server answers the call with an `input_required` result carrying these requests,
    /// keyed by name, and runs the tool again when the client re-sends the call with the answers.
    #[error("input is required from the client")]
    InputRequired {
        /// The pending requests (key -> `{method, params}`).
        requests: Value,
    },
}

/// A channel from a running tool back to the client that called it.
#[async_trait]
pub trait ClientPeer: Send + Sync {
    /// Sends a notification (`notifications/progress`, `notifications/message`, ...).
    async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError>;
    /// Sends a request (`sampling/createMessage`, `elicitation/create`, `roots/list`) and waits
    /// for the result, or for `cancel`.
    async fn request(
        &self,
        method: &str,
        params: Value,
        cancel: CancellationToken,
    ) -> Result<Value, PeerError>;
    /// Whether the client declared a capability (`sampling`, `elicitation`, `roots`).
    fn supports(&self, capability: &str) -> bool;
}

/// Everything a tool receives beside its arguments.
///
/// The gate builds one per call and moves it into the tool's future, so it is kept small:
/// what every call has (caller, token, client channel, origin, handle codec, phase) is
/// inline, and what most calls lack (progress token, `_meta`, client info, scope, ticket) sits
/// in one shared box of details, allocated only for a call that has any of it, so a clone
/// of the context (the aggregator makes two per forwarded call) counts a reference instead of
/// copying the request's `_meta`.
///
/// The cancellation token is the call's when the call came with one
/// ([`CallOptions::with_cancel`]); a call without one (an in-process call with
/// [`CallOptions::default`]) gets its token only when the tool first asks for it
/// ([`ToolContext::cancellation`]), so the common call allocates none. Clones of a context
/// share one token.
pub struct ToolContext {
    caller: Caller,
    cancel: OnceLock<CancellationToken>,
    peer: Option<Arc<dyn ClientPeer>>,
    origin: Option<Arc<CallOrigin>>,
    handles: Option<Arc<HandleCodec>>,
    phase: CallPhase,
    details: Option<Arc<CallDetails>>,
}

/// The rarely-set parts of a call, out of line: a [`CallOptions`] sets the request's (progress
/// token, `_meta`, client info) and the gate adds its own (scope, ticket) when the box becomes
/// the [`ToolContext`]'s. Shared by the clones of the options and of the context; a change to a
/// shared box copies it first (`Arc::make_mut`).
#[derive(Default)]
struct CallDetails {
    progress_token: Option<Value>,
    meta: Option<Value>,
    client: Option<ClientInfo>,
    scope: Option<String>,
    ticket: Option<String>,
    /// The progress reports sent for this call so far ([`ToolContext::progress`]), shared by
    /// the context's clones, so that every report sent advances on the one before and their
    /// rate stays bounded.
    progress_sent: std::sync::Mutex<ProgressSent>,
}

/// What [`ToolContext::progress`] has sent for one call: the last figure and the rate budget.
#[derive(Debug, Clone, Copy)]
struct ProgressSent {
    last: Option<f64>,
    budget: RateBudget,
}

impl Default for ProgressSent {
    fn default() -> Self {
        Self {
            last: None,
            budget: RateBudget::progress(),
        }
    }
}

impl Clone for CallDetails {
    fn clone(&self) -> Self {
        Self {
            progress_token: self.progress_token.clone(),
            meta: self.meta.clone(),
            client: self.client.clone(),
            scope: self.scope.clone(),
            ticket: self.ticket.clone(),
            progress_sent: std::sync::Mutex::new(*lock_progress(&self.progress_sent)),
        }
    }
}

/// What was sent; plain values, consistent after any panic.
fn lock_progress(m: &std::sync::Mutex<ProgressSent>) -> std::sync::MutexGuard<'_, ProgressSent> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What the gate learned about a call on the way in (phase, scope, ticket) and the app's handle
/// codec, for the tool to read.
#[derive(Clone, Default)]
pub(crate) struct CallExtras {
    pub(crate) phase: CallPhase,
    pub(crate) scope: Option<String>,
    pub(crate) ticket: Option<String>,
    pub(crate) handles: Option<Arc<HandleCodec>>,
}

impl Clone for ToolContext {
    fn clone(&self) -> Self {
        Self {
            caller: self.caller.clone(),
            // The clone shares the token: one is created now if the call had none yet.
            cancel: OnceLock::from(self.cancellation().clone()),
            peer: self.peer.clone(),
            origin: self.origin.clone(),
            handles: self.handles.clone(),
            phase: self.phase,
            details: self.details.clone(),
        }
    }
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("caller", &self.caller.principal().id)
            .field("cancelled", &self.is_cancelled())
            .field("peer", &self.peer.is_some())
            .field("progress_token", &self.progress_token())
            .field("phase", &self.phase)
            .field("scope", &self.scope())
            .field("ticket", &self.ticket())
            .finish()
    }
}

/// Per-call options the transport passes to the gate: cancellation, the client channel, the
/// request's progress token and `_meta`, and who the client says it is.
///
/// Start from [`CallOptions::default`] (or [`CallOptions::with_cancel`]) and add what the call
/// has with the `with_*` methods:
///
/// ```
/// use kberg_core::{CallOptions, CancellationToken};
/// use serde_json::json;
///
/// let token = CancellationToken::new();
/// let opts = CallOptions::with_cancel(token.clone())
///     .with_progress_token(json!("p-1"))
///     .with_meta(json!({"progressToken": "p-1"}));
/// assert_eq!(opts.progress_token(), Some(&json!("p-1")));
/// ```
///
/// The options travel by value through the registry and the gate into the tool's context, so
/// they are kept a few words wide: what a transport sets on every call (token, client channel,
/// origin) is inline, and what most calls lack (progress token, `_meta`, client info) sits in
/// one shared box, allocated only for a call that has any of it and handed on to the tool's
/// context as it is. Options without a token carry none: such a call can be cancelled only by its own
/// tool, and its token is created when the tool first asks for it.
#[derive(Clone, Default)]
pub struct CallOptions {
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) peer: Option<Arc<dyn ClientPeer>>,
    pub(crate) origin: Option<Arc<CallOrigin>>,
    details: Option<Arc<CallDetails>>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field(
                "cancelled",
                &self.cancel.as_ref().map(CancellationToken::is_cancelled),
            )
            .field("peer", &self.peer.is_some())
            .field("progress_token", &self.progress_token())
            .field("client", &self.client())
            .field("origin", &self.origin)
            .finish()
    }
}

impl CallOptions {
    /// Options with this cancellation token: cancelling it cancels the call (the transport
    /// cancels it when the client cancels the call or the connection ends).
    pub fn with_cancel(cancel: CancellationToken) -> Self {
        Self {
            cancel: Some(cancel),
            ..Self::default()
        }
    }

    /// Sets the channel back to the client.
    pub fn with_peer(mut self, peer: Arc<dyn ClientPeer>) -> Self {
        self.peer = Some(peer);
        self
    }

    /// Sets the request's `_meta.progressToken` (the client asked for progress).
    pub fn with_progress_token(mut self, token: Value) -> Self {
        self.details_mut().progress_token = Some(token);
        self
    }

    /// Sets the request's `_meta`, for tools that need it.
    pub fn with_meta(mut self, meta: Value) -> Self {
        self.details_mut().meta = Some(meta);
        self
    }

    /// Sets the client's self-reported identity. It overrides the client of the
    /// [origin](CallOptions::with_origin) for the tool.
    pub fn with_client(mut self, client: ClientInfo) -> Self {
        self.details_mut().client = Some(client);
        self
    }

    /// Sets the session and client the call came in on, shared with the transport's session.
    pub fn with_origin(mut self, origin: Arc<CallOrigin>) -> Self {
        self.origin = Some(origin);
        self
    }

    /// The call's cancellation token, if it was given one.
    pub fn cancellation(&self) -> Option<&CancellationToken> {
        self.cancel.as_ref()
    }

    /// The channel back to the client, if any.
    pub fn peer(&self) -> Option<&Arc<dyn ClientPeer>> {
        self.peer.as_ref()
    }

    /// The request's `_meta.progressToken`, if any.
    pub fn progress_token(&self) -> Option<&Value> {
        self.details
            .as_ref()
            .and_then(|d| d.progress_token.as_ref())
    }

    /// The request's `_meta`, if any.
    pub fn meta(&self) -> Option<&Value> {
        self.details.as_ref().and_then(|d| d.meta.as_ref())
    }

    /// The client's self-reported identity, when it was set on its own.
    pub fn client(&self) -> Option<&ClientInfo> {
        self.details.as_ref().and_then(|d| d.client.as_ref())
    }

    /// The session and client the call came in on, if the transport shares them.
    pub fn origin(&self) -> Option<&Arc<CallOrigin>> {
        self.origin.as_ref()
    }

    fn details_mut(&mut self) -> &mut CallDetails {
        // Unshared until the options are cloned: a clone is a reference count, and a setter on
        // a shared box copies it first.
        Arc::make_mut(self.details.get_or_insert_with(Default::default))
    }
}

impl ToolContext {
    pub(crate) fn new(caller: Caller, opts: CallOptions) -> Self {
        Self::for_call(caller, opts, CallExtras::default())
    }

    /// The context of a call through the gate, in one step (no setters: each would move it).
    #[inline(always)]
    pub(crate) fn for_call(caller: Caller, opts: CallOptions, extras: CallExtras) -> Self {
        let CallOptions {
            cancel,
            peer,
            origin,
            mut details,
        } = opts;
        let CallExtras {
            phase,
            scope,
            ticket,
            handles,
        } = extras;
        // The options' box (if any) becomes the context's: the gate's own details join it.
        if scope.is_some() || ticket.is_some() {
            let d = Arc::make_mut(details.get_or_insert_with(Default::default));
            d.scope = scope;
            d.ticket = ticket;
        }
        Self {
            caller,
            cancel: cancel.map(OnceLock::from).unwrap_or_default(),
            peer,
            origin,
            handles,
            phase,
            details,
        }
    }

    /// Who the calling client says it is (MCP `clientInfo`), when the transport knows it.
    /// Self-reported: tailor answers with it, never grant anything by it.
    pub fn client(&self) -> Option<&ClientInfo> {
        self.details
            .as_ref()
            .and_then(|d| d.client.as_ref())
            .or_else(|| self.origin.as_ref().and_then(|o| o.client.as_ref()))
    }

    /// The transport session the call came in on, when the protocol has one.
    pub fn session(&self) -> Option<&str> {
        self.origin.as_ref().and_then(|o| o.session.as_deref())
    }

    /// The session and client the call came in on, as the transport shares them.
    pub fn origin(&self) -> Option<&Arc<CallOrigin>> {
        self.origin.as_ref()
    }

    /// Which step of the call this is: a [`CallPhase::Preview`] must change nothing and describe
    /// what it would do; [`CallPhase::Commit`] does exactly what was previewed.
    pub fn phase(&self) -> CallPhase {
        self.phase
    }

    /// Whether this is a preview (dry run).
    pub fn is_preview(&self) -> bool {
        self.phase == CallPhase::Preview
    }

    /// The scope the call works in, when the tool takes one (already checked by the gate).
    pub fn scope(&self) -> Option<&str> {
        self.details.as_ref().and_then(|d| d.scope.as_deref())
    }

    /// The confirm ticket this call runs under, when a human approved it.
    pub fn ticket(&self) -> Option<&str> {
        self.details.as_ref().and_then(|d| d.ticket.as_deref())
    }

    /// The request's `_meta.progressToken`, if the client asked for progress: a tool whose
    /// reports cost something to work out can skip them when it is `None` (its
    /// [`ToolContext::progress`] is a no-op then).
    pub fn progress_token(&self) -> Option<&Value> {
        self.details
            .as_ref()
            .and_then(|d| d.progress_token.as_ref())
    }

    /// Mints a handle of kind `K` for `internal_id`, bound to this call's principal, to put in
    /// a result. Fails when the app configured no [`HandleCodec`]
    /// ([`ToolRegistryBuilder::handle_codec`](crate::ToolRegistryBuilder::handle_codec)).
    pub fn mint_handle<K: HandleKind>(&self, internal_id: &str) -> Result<String, HandleError> {
        self.mint_handle_of(K::KIND, internal_id, None)
    }

    /// Mints a handle of a kind named at run time, optionally expiring after `ttl` (a `ttl`
    /// too long for the clock to hold, such as [`Duration::MAX`](std::time::Duration::MAX),
    /// never expires).
    pub fn mint_handle_of(
        &self,
        kind: &str,
        internal_id: &str,
        ttl: Option<std::time::Duration>,
    ) -> Result<String, HandleError> {
        let codec = self.handles.as_ref().ok_or(HandleError::NoCodec)?;
        // A time to live past what the clock can hold never expires.
        let expires = ttl.and_then(|t| std::time::SystemTime::now().checked_add(t));
        codec.mint(&self.caller.principal().id, kind, internal_id, expires)
    }

    /// A context for calling a tool directly (tests, in-process use) with no client channel.
    pub fn detached(caller: Caller) -> Self {
        Self::new(caller, CallOptions::default())
    }

    /// The caller (principal, effective grants, projection).
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The call's cancellation token. Long-running tools should watch it; if they do not, the
    /// gate drops their future when it fires. A call that came without a token gets one here,
    /// on first use (only the tool and its clones of this context can then cancel it).
    pub fn cancellation(&self) -> &CancellationToken {
        self.cancel.get_or_init(CancellationToken::new)
    }

    /// The call's token if it has one already, without creating one.
    pub(crate) fn cancellation_if_any(&self) -> Option<&CancellationToken> {
        self.cancel.get()
    }

    /// Whether the call has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel
            .get()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// The request's `_meta`, if any.
    pub fn meta(&self) -> Option<&Value> {
        self.details.as_ref().and_then(|d| d.meta.as_ref())
    }

    /// The client channel, if any.
    pub fn peer(&self) -> Option<&Arc<dyn ClientPeer>> {
        self.peer.as_ref()
    }

    /// Reports progress, if the client asked for it (sent a progress token). A no-op otherwise.
    ///
    /// What goes on the wire keeps the MCP rule that each report's `progress` exceeds the one
    /// before: a report whose figure does not advance on the last one sent for this call (by
    /// this context or a clone of it), or is not a finite number, is not sent, and a total that
    /// is not a finite number is left out. The rate is bounded too, as the specification asks:
    /// after [`PROGRESS_REPORT_BURST`](crate::PROGRESS_REPORT_BURST) reports, one per
    /// [`PROGRESS_REPORT_INTERVAL`](crate::PROGRESS_REPORT_INTERVAL) is sent and the others
    /// are left out (a later one carries the newer figure). None of this is an error: the tool
    /// goes on.
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), PeerError> {
        let (Some(peer), Some(details)) = (&self.peer, self.details.as_deref()) else {
            return Ok(());
        };
        let Some(token) = &details.progress_token else {
            return Ok(());
        };
        {
            let mut sent = lock_progress(&details.progress_sent);
            if !progress.is_finite() || sent.last.is_some_and(|last| progress <= last) {
                tracing::debug!(progress, last = ?sent.last, "a progress report that does not advance was not sent");
                return Ok(());
            }
            if !sent.budget.take(tokio::time::Instant::now()) {
                tracing::trace!(
                    progress,
                    "a progress report over the rate bound was not sent"
                );
                return Ok(());
            }
            sent.last = Some(progress);
        }
        let mut params = json!({"progressToken": token, "progress": progress});
        let obj = params.as_object_mut().expect("json! object literal");
        if let Some(t) = total.filter(|t| t.is_finite()) {
            obj.insert("total".into(), json!(t));
        }
        if let Some(m) = message {
            obj.insert("message".into(), json!(m));
        }
        peer.notify("notifications/progress", params).await
    }

    /// Sends a log message to the client (`notifications/message`). `level` is an MCP log level
    /// (`debug`, `info`, `notice`, `warning`, `error`, ...). A no-op without a client channel.
    pub async fn log(
        &self,
        level: &str,
        logger: Option<&str>,
        data: Value,
    ) -> Result<(), PeerError> {
        let Some(peer) = &self.peer else {
            return Ok(());
        };
        let mut params = json!({"level": level, "data": data});
        if let Some(l) = logger {
            params["logger"] = json!(l);
        }
        peer.notify("notifications/message", params).await
    }

    /// Asks the user for input through the client (`elicitation/create`, form mode). Returns the
    /// client's result: `{"action": "accept" | "decline" | "cancel", "content": {...}}`.
    pub async fn elicit(&self, message: &str, requested_schema: Value) -> Result<Value, PeerError> {
        self.client_request(
            "elicitation",
            "elicitation/create",
            json!({"mode": "form", "message": message, "requestedSchema": requested_schema}),
        )
        .await
    }

    /// Asks the client's model for a completion (`sampling/createMessage`); `params` is the MCP
    /// `CreateMessageRequest` params.
    pub async fn sample(&self, params: Value) -> Result<Value, PeerError> {
        self.client_request("sampling", "sampling/createMessage", params)
            .await
    }

    /// Lists the client's roots (`roots/list`).
    pub async fn roots(&self) -> Result<Value, PeerError> {
        self.client_request("roots", "roots/list", json!({})).await
    }

    async fn client_request(
        &self,
        capability: &str,
        method: &str,
        params: Value,
    ) -> Result<Value, PeerError> {
        let Some(peer) = &self.peer else {
            return Err(PeerError::NotSupported(capability.to_string()));
        };
        if !peer.supports(capability) {
            return Err(PeerError::NotSupported(capability.to_string()));
        }
        peer.request(method, params, self.cancellation().clone())
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::principal::Principal;

    /// A client channel that records the notifications it is asked to send.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<(String, Value)>>);

    #[async_trait]
    impl ClientPeer for Recorder {
        async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((method.to_string(), params));
            Ok(())
        }
        async fn request(
            &self,
            _method: &str,
            _params: Value,
            _cancel: CancellationToken,
        ) -> Result<Value, PeerError> {
            Err(PeerError::Disconnected)
        }
        fn supports(&self, _capability: &str) -> bool {
            false
        }
    }

    fn caller() -> Caller {
        Caller::new(Principal::new("p"))
    }

    fn origin() -> Arc<CallOrigin> {
        Arc::new(CallOrigin::new(
            Some("session-1".into()),
            Some(ClientInfo::new("from-origin", "2")),
        ))
    }

    #[test]
    fn a_call_without_details_allocates_none_and_reads_as_empty() {
        let opts = CallOptions::default().with_origin(origin());
        let ctx = ToolContext::for_call(caller(), opts, CallExtras::default());
        assert!(ctx.details.is_none());
        assert_eq!(ctx.meta(), None);
        assert_eq!(ctx.progress_token(), None);
        assert_eq!(ctx.scope(), None);
        assert_eq!(ctx.ticket(), None);
        assert_eq!(ctx.phase(), CallPhase::Direct);
        // Without a client of its own the call reports its origin's.
        assert_eq!(ctx.client().map(|c| c.name.as_str()), Some("from-origin"));
        assert_eq!(ctx.session(), Some("session-1"));
    }

    #[test]
    fn every_detail_a_call_carries_reaches_the_tool() {
        let opts = CallOptions::default()
            .with_progress_token(json!(7))
            .with_meta(json!({"trace": "abc"}))
            .with_client(ClientInfo::new("own", "1"))
            .with_origin(origin());
        let extras = CallExtras {
            phase: CallPhase::Preview,
            scope: Some("project-a".into()),
            ticket: Some("t-1".into()),
            handles: None,
        };
        let ctx = ToolContext::for_call(caller(), opts, extras);
        assert_eq!(ctx.meta(), Some(&json!({"trace": "abc"})));
        assert_eq!(ctx.progress_token(), Some(&json!(7)));
        assert_eq!(ctx.scope(), Some("project-a"));
        assert_eq!(ctx.ticket(), Some("t-1"));
        assert!(ctx.is_preview());
        // The call's own client wins over its origin's.
        assert_eq!(ctx.client().map(|c| c.name.as_str()), Some("own"));
        // One detail alone is kept too.
        let opts = CallOptions::default().with_meta(json!({"only": true}));
        let ctx = ToolContext::for_call(caller(), opts, CallExtras::default());
        assert_eq!(ctx.meta(), Some(&json!({"only": true})));
        assert_eq!(ctx.scope(), None);
    }

    #[test]
    fn a_call_without_a_token_creates_one_only_when_asked_and_clones_share_it() {
        let ctx = ToolContext::for_call(caller(), CallOptions::default(), CallExtras::default());
        assert!(ctx.cancellation_if_any().is_none());
        assert!(!ctx.is_cancelled());
        // A clone taken before the token exists still shares it with the original.
        let twin = ctx.clone();
        twin.cancellation().cancel();
        assert!(ctx.is_cancelled());
        assert!(ctx.cancellation().is_cancelled());
        // One taken after the original created its token shares that one.
        let ctx = ToolContext::for_call(caller(), CallOptions::default(), CallExtras::default());
        let token = ctx.cancellation().clone();
        let twin = ctx.clone();
        token.cancel();
        assert!(twin.is_cancelled());
    }

    #[test]
    fn a_call_with_a_token_shows_that_token() {
        let token = CancellationToken::new();
        let opts = CallOptions::with_cancel(token.clone());
        assert!(opts.cancellation().is_some());
        assert!(CallOptions::default().cancellation().is_none());
        let ctx = ToolContext::for_call(caller(), opts, CallExtras::default());
        assert!(ctx.cancellation_if_any().is_some());
        assert!(!ctx.is_cancelled());
        token.cancel();
        assert!(ctx.is_cancelled());
        assert!(ctx.cancellation().is_cancelled());
    }

    #[test]
    fn call_options_stay_a_few_words_wide() {
        // Token, client channel (a wide pointer), origin and the details box.
        assert!(std::mem::size_of::<CallOptions>() <= 5 * std::mem::size_of::<usize>());
    }

    #[test]
    fn clones_share_the_details_and_a_change_copies_them() {
        let opts = CallOptions::default()
            .with_progress_token(json!("p-1"))
            .with_meta(json!({"big": "x".repeat(1_000)}));
        // A clone of the options, changed: the original keeps its own details.
        let changed = opts.clone().with_progress_token(json!("p-2"));
        assert_eq!(opts.progress_token(), Some(&json!("p-1")));
        assert_eq!(changed.progress_token(), Some(&json!("p-2")));
        assert_eq!(changed.meta(), opts.meta());
        let scoped = CallExtras {
            scope: Some("repo".into()),
            ..CallExtras::default()
        };
        let ctx = ToolContext::for_call(caller(), opts.clone(), scoped);
        assert_eq!(ctx.scope(), Some("repo"));
        assert_eq!(ctx.progress_token(), Some(&json!("p-1")));
        // The gate's scope went into a copy: the options' details are as they were.
        assert!(opts.details.as_ref().is_some_and(|d| d.scope.is_none()));
        let copy = ctx.clone();
        let (a, b) = (
            ctx.details.as_ref().unwrap(),
            copy.details.as_ref().unwrap(),
        );
        assert!(Arc::ptr_eq(a, b), "a context's clone shares its details");
        assert_eq!(copy.scope(), Some("repo"));
    }

    /// A context whose call asked for progress (token `tok`), with the recorder of what it
    /// sends.
    fn recorded() -> (Arc<Recorder>, ToolContext) {
        let peer = Arc::new(Recorder::default());
        let opts = CallOptions::default()
            .with_peer(Arc::clone(&peer) as Arc<dyn ClientPeer>)
            .with_progress_token(json!("tok"));
        (
            peer,
            ToolContext::for_call(caller(), opts, CallExtras::default()),
        )
    }

    #[tokio::test]
    async fn progress_goes_out_only_with_a_progress_token() {
        let peer = Arc::new(Recorder::default());
        let with = CallOptions::default()
            .with_peer(Arc::clone(&peer) as Arc<dyn ClientPeer>)
            .with_progress_token(json!("tok"));
        let ctx = ToolContext::for_call(caller(), with, CallExtras::default());
        ctx.progress(1.0, Some(2.0), Some("half")).await.unwrap();
        let without = CallOptions::default().with_peer(Arc::clone(&peer) as Arc<dyn ClientPeer>);
        let ctx = ToolContext::for_call(caller(), without, CallExtras::default());
        ctx.progress(1.0, None, None).await.unwrap();
        let sent = peer.0.lock().unwrap().clone();
        assert_eq!(
            sent,
            vec![(
                "notifications/progress".to_string(),
                json!({"progressToken": "tok", "progress": 1.0, "total": 2.0, "message": "half"})
            )]
        );
    }

    /// Only reports that advance, with finite figures, go on the wire, whichever clone of the
    /// context sends them (the aggregator relays an upstream's progress through a clone).
    #[tokio::test]
    async fn only_advancing_finite_progress_goes_out() {
        let (peer, ctx) = recorded();
        let relay = ctx.clone();
        ctx.progress(1.0, None, None).await.unwrap();
        relay.progress(1.0, None, None).await.unwrap();
        ctx.progress(0.5, None, None).await.unwrap();
        ctx.progress(f64::NAN, None, None).await.unwrap();
        relay.progress(f64::INFINITY, None, None).await.unwrap();
        relay.progress(2.0, Some(f64::NAN), None).await.unwrap();
        ctx.progress(2.0, None, None).await.unwrap();
        ctx.progress(3.0, Some(4.0), None).await.unwrap();
        let sent: Vec<Value> = peer
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, p)| p.clone())
            .collect();
        assert_eq!(
            sent,
            vec![
                json!({"progressToken": "tok", "progress": 1.0}),
                json!({"progressToken": "tok", "progress": 2.0}),
                json!({"progressToken": "tok", "progress": 3.0, "total": 4.0}),
            ]
        );
    }

    /// A tool that floods reports sends its burst, then one per interval, from all its clones
    /// together; the reports left out are not sent late, and the figures still grow.
    #[tokio::test(start_paused = true)]
    async fn a_flood_of_progress_is_bounded_in_rate() {
        use crate::rate::{PROGRESS_REPORT_BURST, PROGRESS_REPORT_INTERVAL};
        let (peer, ctx) = recorded();
        let relay = ctx.clone();
        let figures = || -> Vec<f64> {
            let sent = peer.0.lock().unwrap();
            sent.iter()
                .map(|(_, p)| p["progress"].as_f64().unwrap())
                .collect()
        };
        for i in 0..1_000 {
            let to = if i % 2 == 0 { &ctx } else { &relay };
            to.progress(f64::from(i), None, None).await.unwrap();
        }
        let burst = usize::try_from(PROGRESS_REPORT_BURST).unwrap();
        assert_eq!(figures(), (0..burst).map(|i| i as f64).collect::<Vec<_>>());
        // Ten intervals later, ten more, each carrying the figure of its moment.
        let mut next = 1_000.0;
        for _ in 0..10 {
            tokio::time::advance(PROGRESS_REPORT_INTERVAL).await;
            for _ in 0..50 {
                relay.progress(next, None, None).await.unwrap();
                next += 1.0;
            }
        }
        let all = figures();
        assert_eq!(all.len(), burst + 10);
        assert_eq!(
            all[burst..],
            (0..10)
                .map(|k| 1_000.0 + 50.0 * f64::from(k))
                .collect::<Vec<_>>()
        );
        assert!(all.windows(2).all(|w| w[0] < w[1]));
    }
}
