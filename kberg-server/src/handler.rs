//! The bridge: an rmcp [`ServerHandler`] that serves an [`McpApp`]'s registries through the
//! gate.
//!
//! rmcp owns the wire (framing, sessions, version negotiation, both protocol generations);
//! this handler owns the meaning. One handler value exists per 2025-11-25 session (or per
//! stateless request, or per stdio connection), cloned from the transport-wide [`Shared`]
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
//! - tasks (`tools/call` answered with a task, `tasks/get`, `tasks/update`, `tasks/cancel`):
//!   see [`crate::tasks`].

// Logging, sampling and roots are deprecated by the 2026-07-28 revision but still part of
// 2025-11-25, which this handler serves too.
#![allow(deprecated)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kberg_core::{
    CallOptions, Caller, ClientPeer, ErrorCode, GateError, Principal, PromptArgs, PromptError,
    Refusal, ResourceError, ResourceEvent, Started, Subscriber, TaskSupport, ToolOutput,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities,
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult, InputRequests,
    InputRequiredResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, Reference, ResourceUpdatedNotificationParam, ServerConfig,
    SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter, TASKS_EXTENSION_ID,
    UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::app::McpApp;
use crate::convert;
use crate::limits::CallCounter;
use crate::peer::{LogThreshold, RoundTripPeer, SessionPeer};

/// The principal of an authenticated HTTP request, as the auth layer leaves it in the request's
/// extensions.
#[derive(Debug, Clone)]
pub(crate) struct Authenticated(pub(crate) Arc<Principal>);

/// Tool descriptions rmcp asks for on every 2026-07-28 `tools/call` (to check `Mcp-Param-*`
/// headers against `x-mcp-header` annotations). Only tools whose schema has such annotations
/// need one; for the rest the answer is "none", which lets rmcp skip the check. Cached per
/// registry version so the hot path neither clones nor converts a schema.
pub(crate) struct HeaderSchemas {
    version: tokio::sync::watch::Receiver<u64>,
    cache: std::sync::RwLock<(
        u64,
        std::collections::HashMap<String, Option<rmcp::model::Tool>>,
    )>,
}

/// Whether a schema declares an `x-mcp-header` anywhere.
fn mentions_header(v: &Value) -> bool {
    match v {
        Value::Object(o) => o
            .iter()
            .any(|(k, v)| k == "x-mcp-header" || mentions_header(v)),
        Value::Array(a) => a.iter().any(mentions_header),
        _ => false,
    }
}

impl HeaderSchemas {
    fn new(app: &McpApp) -> Self {
        Self {
            version: app.tools().changes(),
            cache: std::sync::RwLock::new((u64::MAX, std::collections::HashMap::new())),
        }
    }

    fn get(&self, app: &McpApp, name: &str) -> Option<rmcp::model::Tool> {
        let version = *self.version.borrow();
        {
            let c = self.cache.read().unwrap_or_else(|p| p.into_inner());
            if c.0 == version
                && let Some(t) = c.1.get(name)
            {
                return t.clone();
            }
        }
        // Unknown names are not cached (the map stays bounded by the registry).
        let spec = app.tools().spec(name)?;
        let tool = mentions_header(&spec.input_schema).then(|| convert::tool(&spec));
        let mut c = self.cache.write().unwrap_or_else(|p| p.into_inner());
        if c.0 != version {
            c.0 = version;
            c.1.clear();
        }
        c.1.insert(name.to_string(), tool.clone());
        tool
    }
}

/// State shared by every handler of one transport (an HTTP server or a stdio connection).
pub(crate) struct Shared {
    pub(crate) app: McpApp,
    pub(crate) header_schemas: HeaderSchemas,
    pub(crate) info: ServerConfig,
    pub(crate) calls: Arc<CallCounter>,
    /// The principal of a transport without per-request credentials (stdio).
    pub(crate) fixed_principal: Option<Arc<Principal>>,
    pub(crate) shutdown: CancellationToken,
}

impl Shared {
    pub(crate) fn new(
        app: McpApp,
        max_calls_per_principal: usize,
        fixed_principal: Option<Arc<Principal>>,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, McpError> {
        let inner = &app.inner;
        let mut server_info = json!({"name": inner.name, "version": inner.version});
        if let Some(t) = &inner.title {
            server_info["title"] = json!(t);
        }
        let mut info = json!({
            "protocolVersion": ProtocolVersion::LATEST,
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "completions": {},
                "logging": {},
                "extensions": {TASKS_EXTENSION_ID: {}},
            },
            "serverInfo": server_info,
        });
        if let Some(i) = &inner.instructions {
            info["instructions"] = json!(i);
        }
        let info: ServerConfig = convert::from_json("the server description", info)?;
        Ok(Arc::new(Self {
            header_schemas: HeaderSchemas::new(&app),
            app,
            info,
            calls: CallCounter::new(max_calls_per_principal),
            fixed_principal,
            shutdown,
        }))
    }
}

enum Command {
    Subscribe(String, oneshot::Sender<Result<(), ResourceError>>),
    Unsubscribe(String),
}

/// Per-session state. Dropped with the session's last handler clone, which ends the session's
/// forwarding task and with it every resource subscription the session held.
struct SessionState {
    log: Arc<LogThreshold>,
    forwarder: OnceLock<mpsc::UnboundedSender<Command>>,
    /// Watchers of `subscriptions/listen` requests whose filter was accepted but whose
    /// `listen` has not started yet. rmcp sends the acknowledgement between the two calls, so
    /// the watchers must exist before it: a change the client causes right after the
    /// acknowledgement is then still seen.
    pending_listens: Mutex<Vec<PendingListen>>,
}

/// How long accepted-but-unstarted listen watchers are kept. A listen whose acknowledgement
/// could not be sent never starts; its watchers are dropped after this.
const PENDING_LISTEN_TTL: Duration = Duration::from_secs(30);

/// The watchers of one accepted `subscriptions/listen`, created when its filter is accepted.
struct PendingListen {
    /// The requested filter, as JSON: what both calls see of the request.
    key: String,
    created: Instant,
    watchers: ListenWatchers,
}

/// What one `subscriptions/listen` stream watches.
struct ListenWatchers {
    subscriber: Subscriber,
    tools: watch::Receiver<u64>,
    resources: watch::Receiver<u64>,
    prompts: watch::Receiver<u64>,
}

impl ListenWatchers {
    /// Watchers of the three registries as they are now, and of `uris`' updates.
    fn new(app: &McpApp, uris: &[String]) -> Self {
        let subscriber = app.resources().subscriber();
        for uri in uris {
            // A resource removed meanwhile is simply not watched.
            let _ = subscriber.subscribe(uri);
        }
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

fn filter_key(filter: &SubscriptionFilter) -> String {
    serde_json::to_string(filter).unwrap_or_default()
}

/// The rmcp handler serving one [`McpApp`].
#[derive(Clone)]
pub(crate) struct KbergHandler {
    shared: Arc<Shared>,
    session: Arc<SessionState>,
}

/// Where a 2026-07-28 request declares the client's capabilities.
const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// Methods this server implements; a request naming one with malformed params is `-32602`.
const KNOWN_METHODS: [&str; 16] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "notifications/initialized",
];

/// Methods of 2025-11-25 that 2026-07-28 removed (SEP-2575): `-32601` on a 2026-07-28 request.
const REMOVED_IN_2026: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

fn removed(method: &str) -> McpError {
    McpError::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("method not found: {method} (removed in 2026-07-28)"),
        None,
    )
}

fn is_stateless(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

fn cursor_of(p: &Option<PaginatedRequestParams>) -> Option<&str> {
    p.as_ref().and_then(|p| p.cursor.as_deref())
}

fn invalid_cursor() -> McpError {
    McpError::invalid_params("invalid pagination cursor", None)
}

/// Who the client says it is: the request's `_meta` clientInfo (2026-07-28), else the session's
/// `initialize` (2025-11-25).
fn client_info(ctx: &RequestContext<RoleServer>) -> Option<kberg_core::ClientInfo> {
    let i = ctx
        .meta
        .client_info()
        .or_else(|| ctx.peer.peer_info().map(|p| p.client_info.clone()))?;
    let mut info = kberg_core::ClientInfo::new(i.name, i.version);
    info.title = i.title;
    Some(info)
}

fn resource_error(e: ResourceError) -> McpError {
    match e {
        ResourceError::NotFound { uri } => McpError::resource_not_found(
            format!("resource not found: {uri}"),
            Some(json!({"uri": uri})),
        ),
        ResourceError::InvalidCursor => invalid_cursor(),
        ResourceError::ReadFailed { uri, message } => {
            let code = read_failure_code(&message);
            McpError::internal_error(
                format!("reading {uri} failed: {message}"),
                Some(json!({"uri": uri, "code": code})),
            )
        }
        other => McpError::internal_error(other.to_string(), None),
    }
}

/// The stable code of a failed read for the error's `data.code`: a reader that starts its
/// message with `<code>: ` (lowercase letters and `_`, as the aggregator's
/// `upstream_unavailable: ...` / `upstream_timeout: ...` do) names it; otherwise `read_failed`.
fn read_failure_code(message: &str) -> &str {
    match message.split_once(": ") {
        Some((code, _))
            if !code.is_empty()
                && code.len() <= 64
                && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') =>
        {
            code
        }
        _ => "read_failed",
    }
}

fn prompt_error(e: PromptError) -> McpError {
    match e {
        PromptError::Failed { .. } => McpError::internal_error(e.to_string(), None),
        other => McpError::invalid_params(other.to_string(), None),
    }
}

/// A request's client channel, the stateless peer behind it (2026-07-28 only) and the answers
/// the client has given so far.
type PeerParts = (
    Arc<dyn ClientPeer>,
    Option<Arc<RoundTripPeer>>,
    BTreeMap<String, Value>,
);

/// Decodes the `requestState` this server issued: the answers of earlier rounds.
fn decode_state(state: Option<&str>) -> Result<BTreeMap<String, Value>, McpError> {
    match state {
        None => Ok(BTreeMap::new()),
        Some(s) => serde_json::from_str(s).map_err(|_| {
            McpError::invalid_params("requestState is not one this server issued", None)
        }),
    }
}

impl KbergHandler {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            session: Arc::new(SessionState {
                log: Arc::new(LogThreshold::new("debug")),
                forwarder: OnceLock::new(),
                pending_listens: Mutex::new(Vec::new()),
            }),
        }
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

    /// Starts the session's forwarding task once: resource updates for its subscriptions and
    /// `list_changed` for the three registries.
    fn forwarder(&self, peer: &Peer<RoleServer>) -> &mpsc::UnboundedSender<Command> {
        self.session.forwarder.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let app = self.shared.app.clone();
            let subscriber = app.resources().subscriber();
            tokio::spawn(forward(
                app,
                peer.clone(),
                subscriber,
                rx,
                self.shared.shutdown.clone(),
            ));
            tx
        })
    }

    /// The channel back to the client for one request, per protocol generation: on
    /// 2026-07-28 a [`RoundTripPeer`] answering from the request's `inputResponses` and
    /// `requestState` (returned too, with the answers so far, to build an `input_required`
    /// result); on a 2025-11-25 session a [`SessionPeer`] sending server-initiated requests.
    fn client_peer(
        &self,
        ctx: &RequestContext<RoleServer>,
        request_state: Option<&str>,
        input_responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<PeerParts, McpError> {
        if !is_stateless(ctx) {
            let peer: Arc<dyn ClientPeer> = Arc::new(SessionPeer {
                peer: ctx.peer.clone(),
                log: Arc::clone(&self.session.log),
            });
            return Ok((peer, None, BTreeMap::new()));
        }
        let mut answers = decode_state(request_state)?;
        if let Some(new) = input_responses {
            answers.extend(new.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        // 2026-07-28: log messages only when the request names a level.
        let log = match ctx
            .meta
            .log_level()
            .and_then(|l| serde_json::to_value(l).ok())
            .and_then(|v| v.as_str().map(str::to_string))
        {
            Some(level) => LogThreshold::new(&level),
            None => LogThreshold::off(),
        };
        let capabilities = match ctx.meta.0.0.get(CLIENT_CAPABILITIES_META) {
            Some(c) => Some(c.clone()),
            None => ctx
                .peer
                .peer_info()
                .and_then(|i| serde_json::to_value(&i.capabilities).ok()),
        };
        let p = Arc::new(RoundTripPeer::new(
            ctx.peer.clone(),
            capabilities,
            answers.clone(),
            Arc::new(log),
        ));
        let peer: Arc<dyn ClientPeer> = p.clone();
        Ok((peer, Some(p), answers))
    }

    /// An `input_required` result for a handler that stopped on `requests`: every question of
    /// this run (not only the one that stopped it) and the answers so far as `requestState`.
    fn input_required(
        round_trip: &RoundTripPeer,
        requests: Value,
        answers: &BTreeMap<String, Value>,
        what: &str,
    ) -> Result<InputRequiredResult, McpError> {
        let pending = round_trip.pending();
        let requests = if pending.is_empty() {
            requests
        } else {
            Value::Object(pending)
        };
        let requests: InputRequests = convert::from_json("the input requests", requests)
            .inspect_err(|_| {
                tracing::warn!(handler = %what, "a handler asked the client something malformed");
            })?;
        let state = serde_json::to_string(answers)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }

    async fn call(
        &self,
        req: CallToolRequestParams,
        mut ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let principal = self.principal(&ctx)?;
        let Some(_permit) = self.shared.calls.try_acquire(&principal.id) else {
            let max = self.shared.calls.max();
            let refusal = Refusal::new(
                ErrorCode::TooManyCalls,
                req.name.to_string(),
                format!(
                    "You already have {max} calls in flight. Wait for one to finish, then call `{}` again.",
                    req.name
                ),
            );
            return Ok(convert::refusal_result(&refusal).into());
        };
        let caller = Caller::new(principal);
        // A tool with task support runs as a task when the client declared the extension
        // (a single lookup; tools without it pay nothing more).
        let task_support = self
            .shared
            .app
            .tools()
            .task_support(&req.name)
            .map(|(s, _)| s)
            .filter(|s| *s != TaskSupport::Forbidden);
        let as_task = task_support.is_some()
            && ctx
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
        if task_support == Some(TaskSupport::Required) && !as_task {
            return self.refuse_required_task(&caller, &req);
        }
        let progress_token = ctx
            .meta
            .get_progress_token()
            .and_then(|t| serde_json::to_value(t).ok());
        let (peer, round_trip, answers) = self.client_peer(
            &ctx,
            req.request_state.as_deref(),
            req.input_responses.as_ref(),
        )?;
        let client = client_info(&ctx);
        // The tool sees the request's `_meta`; move it rather than copy it.
        let meta_map = std::mem::take(&mut ctx.meta.0.0);
        let meta = (!meta_map.is_empty()).then_some(Value::Object(meta_map));
        let args = req.arguments.map(Value::Object).unwrap_or(Value::Null);
        let mut opts = CallOptions::with_cancel(ctx.ct.clone());
        opts.peer = Some(peer);
        opts.progress_token = progress_token;
        opts.meta = meta;
        opts.client = client;
        let result = if as_task {
            // 2025-11-25 sessions get the task's status notifications on their stream.
            let notify = !is_stateless(&ctx);
            match self
                .shared
                .app
                .tasks()
                .start(&caller, &req.name, args, opts, notify)
                .await
            {
                Ok(Started::Task(s)) => {
                    return Ok(CallToolResponse::Task(crate::tasks::created(&s)?));
                }
                Ok(Started::Finished(r)) => r,
                Ok(_) => Err(GateError::ToolPanicked {
                    tool: req.name.to_string(),
                }),
                Err(e) => {
                    let refusal = crate::tasks::refusal(&e, &req.name);
                    return Ok(convert::refusal_result(&refusal).into());
                }
            }
        } else {
            self.shared
                .app
                .tools()
                .call(&caller, &req.name, args, opts)
                .await
        };
        Self::call_answer(result, round_trip, &answers)
    }

    /// A `required` task tool called by a client without the tasks extension: the gate's checks
    /// first (a caller who may not call the tool learns only that), then `-32021` naming the
    /// extension.
    fn refuse_required_task(
        &self,
        caller: &Caller,
        req: &CallToolRequestParams,
    ) -> Result<CallToolResponse, McpError> {
        let args = req
            .arguments
            .clone()
            .map(Value::Object)
            .unwrap_or_else(|| json!({}));
        match self.shared.app.tools().check(caller, &req.name, &args) {
            Ok(_) => Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            )),
            Err(e) => Self::call_answer(Err(e), None, &BTreeMap::new()),
        }
    }

    /// The wire answer of a finished call.
    fn call_answer(
        result: Result<ToolOutput, GateError>,
        round_trip: Option<Arc<RoundTripPeer>>,
        answers: &BTreeMap<String, Value>,
    ) -> Result<CallToolResponse, McpError> {
        match (result, round_trip) {
            (Ok(out), _) => Ok(convert::call_result(out)?.into()),
            (Err(e @ GateError::UnknownTool { .. }), _) => {
                Err(McpError::invalid_params(e.to_string(), Some(e.details())))
            }
            (Err(GateError::InputRequired { requests, tool }), Some(p)) => {
                Ok(Self::input_required(&p, requests, answers, &tool)?.into())
            }
            // 2026-07-28 (SEP-2575): a tool that needs a capability the request did not
            // declare is a protocol error naming the capability.
            (Err(e @ GateError::ToolFailed { .. }), Some(p)) => match p.missing_capability() {
                Some(cap) => Err(McpError::missing_required_client_capability(
                    convert::from_json("client capabilities", json!({ cap: {} }))?,
                )),
                None => Ok(convert::refusal_result(&e.refusal()).into()),
            },
            (Err(e), _) => Ok(convert::refusal_result(&e.refusal()).into()),
        }
    }
}

async fn forward(
    app: McpApp,
    peer: Peer<RoleServer>,
    mut subscriber: Subscriber,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let mut tools = app.tools().changes();
    let mut resources = app.resources().changes();
    let mut prompts = app.prompts().changes();
    tools.mark_unchanged();
    resources.mark_unchanged();
    prompts.mark_unchanged();
    let (mut t_open, mut r_open, mut p_open) = (true, true, true);
    loop {
        let sent = tokio::select! {
            cmd = commands.recv() => match cmd {
                // Every handler of the session is gone: the session ended.
                None => break,
                Some(Command::Subscribe(uri, reply)) => {
                    let _ = reply.send(subscriber.subscribe(&uri));
                    Ok(())
                }
                Some(Command::Unsubscribe(uri)) => {
                    subscriber.unsubscribe(&uri);
                    Ok(())
                }
            },
            ev = subscriber.next() => match ev {
                Some(ResourceEvent::Updated { uri }) => {
                    peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await
                }
                Some(_) => Ok(()),
                None => break,
            },
            r = tools.changed(), if t_open => match r {
                Ok(()) => peer.notify_tool_list_changed().await,
                Err(_) => { t_open = false; Ok(()) }
            },
            r = resources.changed(), if r_open => match r {
                Ok(()) => peer.notify_resource_list_changed().await,
                Err(_) => { r_open = false; Ok(()) }
            },
            r = prompts.changed(), if p_open => match r {
                Ok(()) => peer.notify_prompt_list_changed().await,
                Err(_) => { p_open = false; Ok(()) }
            },
            () = shutdown.cancelled() => break,
        };
        if let Err(e) = sent {
            if matches!(e, rmcp::ServiceError::TransportClosed) {
                break;
            }
            tracing::debug!(error = %e, "a notification could not be sent");
        }
    }
    tracing::debug!("session forwarding ended");
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
        context.peer.set_peer_info(request.clone());
        self.forwarder(&context.peer);
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
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
        let mut r = ListToolsResult::with_all_items(page.items.iter().map(convert::tool).collect());
        r.next_cursor = page.next_cursor;
        Ok(r)
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        self.shared.header_schemas.get(&self.shared.app, name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.principal(&context)?;
        let page = self
            .shared
            .app
            .resources()
            .list(cursor_of(&request), self.shared.app.inner.page_size)
            .map_err(resource_error)?;
        convert::list_resources(&page.items, page.next_cursor)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.principal(&context)?;
        let page = self
            .shared
            .app
            .resources()
            .list_templates(cursor_of(&request), self.shared.app.inner.page_size)
            .map_err(resource_error)?;
        convert::list_templates(&page.items, page.next_cursor)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.principal(&context)?;
        let contents = self
            .shared
            .app
            .resources()
            .read(&request.uri)
            .await
            .map_err(resource_error)?;
        Ok(convert::read_result(&contents)?.into())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.principal(&context)?;
        let (tx, rx) = oneshot::channel();
        self.forwarder(&context.peer)
            .send(Command::Subscribe(request.uri, tx))
            .map_err(|_| McpError::internal_error("the session has ended", None))?;
        rx.await
            .map_err(|_| McpError::internal_error("the session has ended", None))?
            .map_err(resource_error)
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.principal(&context)?;
        // Unsubscribing from something never subscribed is not an error (idempotent).
        let _ = self
            .forwarder(&context.peer)
            .send(Command::Unsubscribe(request.uri));
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        if let Some(uris) = &mut accepted.resource_subscriptions {
            let resources = self.shared.app.resources();
            uris.retain(|u| resources.exists(u));
        }
        // Watch from now on, before rmcp acknowledges the filter (see `pending_listens`).
        let watchers = ListenWatchers::new(
            &self.shared.app,
            accepted
                .resource_subscriptions
                .as_deref()
                .unwrap_or_default(),
        );
        let now = Instant::now();
        let mut pending = self
            .session
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

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let app = &self.shared.app;
        let accepted = context.accepted().clone();
        let sink = context.sink().clone();
        let prepared = {
            let key = filter_key(context.requested());
            let mut pending = self
                .session
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
                accepted
                    .resource_subscriptions
                    .as_deref()
                    .unwrap_or_default(),
            )
        });
        let t_on = accepted.tools_list_changed == Some(true);
        let r_on = accepted.resources_list_changed == Some(true);
        let p_on = accepted.prompts_list_changed == Some(true);
        let (mut t_open, mut r_open, mut p_open) = (t_on, r_on, p_on);
        loop {
            let sent = tokio::select! {
                () = context.cancelled() => break,
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

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.principal(&context)?;
        convert::list_prompts(&self.shared.app.prompts().list(), None)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let mut context = context;
        let caller = Caller::new(self.principal(&context)?);
        let mut args = PromptArgs::new();
        for (k, v) in request.arguments.unwrap_or_default() {
            match v {
                Value::String(s) => {
                    args.insert(k, s);
                }
                other => {
                    return Err(McpError::invalid_params(
                        format!("prompt argument `{k}` must be a string, got {other}"),
                        None,
                    ));
                }
            }
        }
        let (peer, round_trip, answers) = self.client_peer(
            &context,
            request.request_state.as_deref(),
            request.input_responses.as_ref(),
        )?;
        let mut opts = CallOptions::with_cancel(context.ct.clone());
        opts.peer = Some(peer);
        opts.client = client_info(&context);
        opts.progress_token = context
            .meta
            .get_progress_token()
            .and_then(|t| serde_json::to_value(t).ok());
        let meta_map = std::mem::take(&mut context.meta.0.0);
        opts.meta = (!meta_map.is_empty()).then_some(Value::Object(meta_map));
        let rendered = self
            .shared
            .app
            .prompts()
            .get_with(&caller, &request.name, args, opts)
            .await;
        match (rendered, round_trip) {
            (Ok(r), _) => Ok(convert::prompt_result(&r)?.into()),
            (Err(PromptError::InputRequired { requests, prompt }), Some(p)) => {
                Ok(Self::input_required(&p, requests, &answers, &prompt)?.into())
            }
            // 2026-07-28 (SEP-2575): as for tools, a prompt that needs a capability the
            // request did not declare is a protocol error naming the capability.
            (Err(e @ PromptError::Failed { .. }), Some(p)) => match p.missing_capability() {
                Some(cap) => Err(McpError::missing_required_client_capability(
                    convert::from_json("client capabilities", json!({ cap: {} }))?,
                )),
                None => Err(prompt_error(e)),
            },
            (Err(e), _) => Err(prompt_error(e)),
        }
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        self.principal(&context)?;
        let values = match &request.r#ref {
            Reference::Prompt(p) => self
                .shared
                .app
                .prompts()
                .complete(&p.name, &request.argument.name, &request.argument.value)
                .map_err(prompt_error)?,
            // Resource templates declare no completion values in kberg-core.
            _ => Vec::new(),
        };
        let total = values.len();
        convert::from_json(
            "a completion",
            json!({"resultType": "complete", "completion": {"values": values, "total": total, "hasMore": false}}),
        )
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
            return Err(McpError::invalid_params(
                format!("invalid params for `{}`", request.method),
                None,
            ));
        }
        Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("method not found: {}", request.method),
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
        self.session.log.set(&level);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_reads_carry_a_stable_code_in_their_data() {
        let e = resource_error(ResourceError::ReadFailed {
            uri: "ev+test://x".into(),
            message: "upstream_timeout: its server `ev` did not answer within 1s".into(),
        });
        assert_eq!(e.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
        let data = e.data.expect("data");
        assert_eq!(data["code"], "upstream_timeout");
        assert_eq!(data["uri"], "ev+test://x");
        for message in ["disk on fire", "Upstream: x", ": empty", "a b: c"] {
            let e = resource_error(ResourceError::ReadFailed {
                uri: "u".into(),
                message: message.into(),
            });
            assert_eq!(e.data.expect("data")["code"], "read_failed", "{message}");
        }
    }

    #[test]
    fn only_annotated_schemas_need_header_checks() {
        assert!(!mentions_header(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}})
        ));
        assert!(mentions_header(&json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}})));
        assert!(mentions_header(
            &json!({"anyOf": [{"properties": {"x": {"x-mcp-header": "X"}}}]})
        ));
    }
}
