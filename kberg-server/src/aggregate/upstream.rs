//! One supervised connection per upstream, and the forwarded tools that use it.
//!
//! The supervisor task owns the rmcp client: it connects, lists the upstream's tools into the
//! registry, then waits for the connection to end (the child exits, a request fails on the
//! transport, the upstream says its tool list changed) and reconnects with backoff. Forwarded
//! tools only ever borrow the current [`Peer`]; when there is none they answer
//! `upstream_unavailable` at once instead of waiting for a reconnect that may take long.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use kberg_core::{
    ClientPeer, Content, CoreError, PeerError, PromptArgs, PromptArgument, PromptMessage,
    PromptRegistry, PromptResult, PromptSpec, ResourceDescriptor, ResourceRegistry,
    ResourceTemplate, Role, Tool, ToolContext, ToolError, ToolKind, ToolOutput, ToolRegistry,
    ToolSpec, WriteCapability, check_name,
};
// Sampling and logging are deprecated by a later revision but still part of 2025-11-25, which
// upstreams speak: the aggregator relays them.
#[allow(deprecated)]
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientNotification,
    ClientRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ErrorData as McpError, GetPromptRequest, GetPromptRequestParams, Implementation,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, RequestId,
    ResourceUpdatedNotificationParam, ServerResult,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleClient, ServiceError,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::{AggregatorConfig, Backoff, ConfigError, UpstreamConfig, UpstreamTransport};
use super::pattern::Pattern;
use super::resources::{
    check_scheme_namespace, namespaced_uri, sync_resources, sync_subscriptions,
};

/// The stable `code` in the structured content of a call whose upstream is not connected.
pub const UPSTREAM_UNAVAILABLE: &str = "upstream_unavailable";

/// The stable `code` of a forwarded request its upstream did not answer within the upstream's
/// [call timeout](super::UpstreamConfig::call_timeout); the request was cancelled upstream.
pub const UPSTREAM_TIMEOUT: &str = "upstream_timeout";

/// The stable `code` of a forwarded request its upstream answered with something that is not
/// the documented result shape (e.g. a `tools/call` answer without a `content` array).
pub const UPSTREAM_INVALID_RESULT: &str = "upstream_invalid_result";

/// Where an upstream's connection stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UpstreamStatus {
    /// The first connection attempt has not finished yet.
    Connecting,
    /// Connected; `generation` counts successful connections (1 for the first).
    Connected {
        /// How many times it has connected so far.
        generation: u64,
    },
    /// Not connected; the supervisor retries with backoff.
    Unavailable {
        /// Why, for logs and operators (never includes credentials).
        reason: String,
    },
}

/// The immutable part shared by all supervisors.
struct Shared {
    registry: ToolRegistry,
    prompts: Option<PromptRegistry>,
    resources: Option<ResourceRegistry>,
    separator: String,
    rules: Vec<(Pattern, WriteCapability)>,
    backoff: Backoff,
    connect_timeout: Duration,
}

/// What forwarded tools and the supervisor share about one upstream.
pub(super) struct Upstream {
    config: UpstreamConfig,
    /// One permit per request that may be in flight to the upstream.
    in_flight: tokio::sync::Semaphore,
    /// The live connection's peer and its generation.
    peer: RwLock<Option<(Peer<RoleClient>, u64)>>,
    pid: Mutex<Option<u32>>,
    status: watch::Sender<UpstreamStatus>,
    /// Wakes the supervisor: a call failed on the transport.
    broken: Notify,
    /// The generation whose transport a call saw fail; a signal about an older connection
    /// (left over from before a reconnect) is ignored.
    broken_generation: AtomicU64,
    /// Wakes the supervisor: the upstream's tool list changed.
    relist: Notify,
    /// namespaced name -> upstream tool name, for the tools this upstream registered.
    registered: Mutex<BTreeMap<String, String>>,
    /// Namespaced prompt names this upstream registered.
    registered_prompts: Mutex<BTreeSet<String>>,
    /// Where forwarded resources live and updates are delivered, when resources are forwarded.
    resources: Option<ResourceRegistry>,
    /// Namespaced resource URIs this upstream registered, with what was registered.
    pub(super) registered_resources: Mutex<BTreeMap<String, ResourceDescriptor>>,
    /// Namespaced URI templates this upstream registered.
    pub(super) registered_templates: Mutex<BTreeMap<String, ResourceTemplate>>,
    /// Upstream resources and templates that could not be registered, with the reason.
    pub(super) skipped_resources: Mutex<Vec<(String, String)>>,
    /// Upstream URIs the current connection holds a `resources/subscribe` for.
    pub(super) upstream_subscriptions: Mutex<BTreeSet<String>>,
    /// Upstream tool names that could not be registered, with the reason.
    skipped: Mutex<Vec<(String, String)>>,
    /// Progress tokens of forwarded calls -> the calling tool's context.
    progress: Mutex<HashMap<ProgressToken, ToolContext>>,
    /// Forwarded tool calls in flight, registered before their request is sent (so a request
    /// the upstream makes of its client right away already finds its call), by a local id.
    active: Mutex<HashMap<u64, ToolContext>>,
    next_active: AtomicU64,
}

impl Upstream {
    pub(super) fn namespace(&self) -> &str {
        &self.config.namespace
    }

    fn current_peer(&self) -> Option<(Peer<RoleClient>, u64)> {
        self.peer.read().ok().and_then(|p| p.clone())
    }

    fn set_peer(&self, peer: Option<(Peer<RoleClient>, u64)>) {
        if let Ok(mut p) = self.peer.write() {
            *p = peer;
        }
    }

    /// A call saw the transport of connection `generation` fail: wake the supervisor.
    fn report_broken(&self, generation: u64) {
        self.broken_generation.store(generation, Ordering::Release);
        self.broken.notify_one();
    }

    fn reason(&self) -> String {
        match &*self.status.borrow() {
            UpstreamStatus::Unavailable { reason } => reason.clone(),
            UpstreamStatus::Connecting => "it is still connecting".to_string(),
            UpstreamStatus::Connected { .. } => "its connection just ended".to_string(),
        }
    }
}

/// What [`Aggregator::start_with`] forwards besides tools. Nothing by default.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Forward {
    /// Registers the upstreams' prompts here, namespaced like tools.
    pub prompts: Option<PromptRegistry>,
    /// Registers the upstreams' resources and templates here, under `<namespace>+<uri>`.
    pub resources: Option<ResourceRegistry>,
}

impl Forward {
    /// Tools only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also forwards prompts into `prompts`.
    pub fn prompts(mut self, prompts: PromptRegistry) -> Self {
        self.prompts = Some(prompts);
        self
    }

    /// Also forwards resources, resource templates and resource updates into `resources`.
    pub fn resources(mut self, resources: ResourceRegistry) -> Self {
        self.resources = Some(resources);
        self
    }
}

/// Runs N upstream MCP servers' tools through one [`ToolRegistry`]. Dropping it (or
/// [`Aggregator::shutdown`]) stops the supervisors, which ends the upstream sessions and stops
/// child processes.
pub struct Aggregator {
    upstreams: Vec<Arc<Upstream>>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    registry: ToolRegistry,
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The transports carry credentials: only namespaces are shown.
        f.debug_struct("Aggregator")
            .field(
                "upstreams",
                &self
                    .upstreams
                    .iter()
                    .map(|u| u.namespace())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Drop for Aggregator {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Aggregator {
    /// Checks `config`, declares the write rules' capabilities in `registry`, and starts one
    /// supervisor per upstream (on the current tokio runtime). Returns at once; upstream tools
    /// appear in the registry as their upstreams connect (see [`Aggregator::wait_connected`]).
    pub fn start(config: AggregatorConfig, registry: ToolRegistry) -> Result<Self, ConfigError> {
        Self::start_with(config, registry, Forward::new())
    }

    /// Like [`Aggregator::start`], and also forwards the upstreams' prompts: each upstream
    /// prompt is registered in `prompts` under the same namespaced naming as tools, and
    /// `prompts/get` is forwarded to its upstream.
    pub fn start_with_prompts(
        config: AggregatorConfig,
        registry: ToolRegistry,
        prompts: PromptRegistry,
    ) -> Result<Self, ConfigError> {
        Self::start_with(config, registry, Forward::new().prompts(prompts))
    }

    /// Like [`Aggregator::start`], and also forwards what `forward` names: prompts (see
    /// [`Aggregator::start_with_prompts`]) and resources. Resources and resource templates are
    /// registered in the given [`ResourceRegistry`] under `<namespace>+<upstream uri>` (see the
    /// [module documentation](super)); every namespace must then be a valid URI scheme start
    /// (a letter, then letters, digits, `-`, `.`), else the configuration is refused with
    /// `invalid_namespace`. Reads, subscriptions and update notifications are relayed.
    pub fn start_with(
        config: AggregatorConfig,
        registry: ToolRegistry,
        forward: Forward,
    ) -> Result<Self, ConfigError> {
        let Forward { prompts, resources } = forward;
        let rules = config.validate()?;
        if resources.is_some() {
            let mut schemes = HashSet::new();
            for u in &config.upstreams {
                check_scheme_namespace(&u.namespace)?;
                // URI schemes compare case-insensitively.
                if !schemes.insert(u.namespace.to_ascii_lowercase()) {
                    return Err(ConfigError::InvalidNamespace {
                        namespace: u.namespace.clone(),
                        reason: "another namespace differs from it only in case, which a URI \
                                 scheme does not distinguish"
                            .into(),
                    });
                }
            }
        }
        for (_, cap) in &rules {
            if registry.capabilities().iter().any(|c| c.id() == cap.id()) {
                continue;
            }
            registry
                .declare(cap.clone())
                .map_err(|e| ConfigError::InvalidCapability {
                    capability: cap.id().to_string(),
                    reason: e.to_string(),
                })?;
        }
        let shared = Arc::new(Shared {
            registry: registry.clone(),
            prompts,
            resources: resources.clone(),
            separator: config.separator.clone(),
            rules,
            backoff: config.backoff,
            connect_timeout: config.connect_timeout,
        });
        let shutdown = CancellationToken::new();
        let mut upstreams = Vec::new();
        let mut tasks = Vec::new();
        for u in config.upstreams {
            let (status, _) = watch::channel(UpstreamStatus::Connecting);
            let up = Arc::new(Upstream {
                in_flight: tokio::sync::Semaphore::new(u.max_in_flight),
                config: u,
                peer: RwLock::new(None),
                pid: Mutex::new(None),
                status,
                broken: Notify::new(),
                broken_generation: AtomicU64::new(0),
                relist: Notify::new(),
                registered: Mutex::new(BTreeMap::new()),
                registered_prompts: Mutex::new(BTreeSet::new()),
                resources: resources.clone(),
                registered_resources: Mutex::new(BTreeMap::new()),
                registered_templates: Mutex::new(BTreeMap::new()),
                skipped_resources: Mutex::new(Vec::new()),
                upstream_subscriptions: Mutex::new(BTreeSet::new()),
                skipped: Mutex::new(Vec::new()),
                progress: Mutex::new(HashMap::new()),
                active: Mutex::new(HashMap::new()),
                next_active: AtomicU64::new(0),
            });
            tasks.push(tokio::spawn(supervise(
                shared.clone(),
                up.clone(),
                shutdown.clone(),
            )));
            upstreams.push(up);
        }
        Ok(Self {
            upstreams,
            shutdown,
            tasks,
            registry,
        })
    }

    /// The registry the upstream tools are registered in.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    fn upstream(&self, namespace: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.namespace() == namespace)
    }

    /// The status of the upstream under `namespace`.
    pub fn status(&self, namespace: &str) -> Option<UpstreamStatus> {
        self.upstream(namespace).map(|u| u.status.borrow().clone())
    }

    /// A receiver that changes whenever the upstream's status does.
    pub fn status_changes(&self, namespace: &str) -> Option<watch::Receiver<UpstreamStatus>> {
        self.upstream(namespace).map(|u| u.status.subscribe())
    }

    /// Waits until the upstream has connected at least `generation` times (1 for the first
    /// connection), or `timeout` passes. Returns whether it did.
    pub async fn wait_connected(
        &self,
        namespace: &str,
        generation: u64,
        timeout: Duration,
    ) -> bool {
        let Some(mut rx) = self.status_changes(namespace) else {
            return false;
        };
        let reached = rx.wait_for(
            |s| matches!(s, UpstreamStatus::Connected { generation: g } if *g >= generation),
        );
        matches!(tokio::time::timeout(timeout, reached).await, Ok(Ok(_)))
    }

    /// The process id of a child-process upstream while it is connected.
    pub fn upstream_pid(&self, namespace: &str) -> Option<u32> {
        self.upstream(namespace)
            .and_then(|u| u.pid.lock().ok().and_then(|p| *p))
    }

    /// The namespaced names this upstream registered.
    pub fn tools_of(&self, namespace: &str) -> Vec<String> {
        self.upstream(namespace)
            .and_then(|u| {
                u.registered
                    .lock()
                    .ok()
                    .map(|r| r.keys().cloned().collect())
            })
            .unwrap_or_default()
    }

    /// Upstream tools that were not registered (name too long or invalid, a collision with a
    /// tool already in the registry, an unusable schema), with the reason.
    pub fn skipped(&self, namespace: &str) -> Vec<(String, String)> {
        self.upstream(namespace)
            .and_then(|u| u.skipped.lock().ok().map(|s| s.clone()))
            .unwrap_or_default()
    }

    /// The namespaced resource URIs and URI templates this upstream registered, sorted.
    pub fn resources_of(&self, namespace: &str) -> Vec<String> {
        let Some(u) = self.upstream(namespace) else {
            return Vec::new();
        };
        let mut all: Vec<String> = u
            .registered_resources
            .lock()
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default();
        if let Ok(t) = u.registered_templates.lock() {
            all.extend(t.keys().cloned());
        }
        all.sort();
        all
    }

    /// Upstream resources and templates that were not registered (no URI, a template syntax
    /// the registry does not support, a URI already taken), with the reason.
    pub fn skipped_resources(&self, namespace: &str) -> Vec<(String, String)> {
        self.upstream(namespace)
            .and_then(|u| u.skipped_resources.lock().ok().map(|s| s.clone()))
            .unwrap_or_default()
    }

    /// The upstream URIs this upstream's current connection is subscribed to on behalf of
    /// downstream subscribers, sorted.
    pub fn upstream_subscriptions(&self, namespace: &str) -> Vec<String> {
        self.upstream(namespace)
            .and_then(|u| {
                u.upstream_subscriptions
                    .lock()
                    .ok()
                    .map(|s| s.iter().cloned().collect())
            })
            .unwrap_or_default()
    }

    /// Stops every supervisor and waits for them: upstream sessions end and child processes
    /// are stopped. The registered tools stay and answer `upstream_unavailable`.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
    }
}

/// The rmcp client handler of one upstream: routes progress to the calling tool, notices
/// list changes, and relays the upstream's own requests (sampling, elicitation) and log
/// messages to the client of the call they belong to.
#[derive(Clone)]
struct UpstreamClient {
    up: Arc<Upstream>,
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
        // Sampling and elicitation are relayed to the calling client (see `relay_target`).
        let capabilities = serde_json::from_value::<ClientCapabilities>(
            json!({"sampling": {}, "elicitation": {"form": {}}}),
        )
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

type Client = rmcp::service::RunningService<RoleClient, UpstreamClient>;

async fn connect(up: &Arc<Upstream>) -> Result<(Client, Option<u32>), String> {
    let handler = UpstreamClient { up: up.clone() };
    match &up.config.transport {
        UpstreamTransport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args);
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd.kill_on_drop(true);
            let transport = TokioChildProcess::new(cmd)
                .map_err(|e| format!("could not start `{command}`: {e}"))?;
            let pid = transport.id();
            let client = handler
                .serve(transport)
                .await
                .map_err(|e| format!("`{command}` did not initialize: {e}"))?;
            Ok((client, pid))
        }
        UpstreamTransport::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (k, v) in headers {
                // Checked by the config; a header that slipped through is left out, not shown.
                if let (Ok(k), Ok(v)) = (
                    axum::http::HeaderName::try_from(k.as_str()),
                    axum::http::HeaderValue::try_from(v.as_str()),
                ) {
                    custom.insert(k, v);
                }
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom);
            let transport = StreamableHttpClientTransport::with_client(http_client()?, config);
            let client = handler
                .serve(transport)
                .await
                .map_err(|e| format!("`{url}` did not initialize: {e}"))?;
            Ok((client, None))
        }
    }
}

/// The HTTP client for one upstream connection. rmcp's default client opens a new TCP connection
/// for every request (it turns pooling off to dodge a delayed-ACK stall); measured here that
/// tripled the aggregator's cost per forwarded call. This client keeps connections alive and
/// sends with `TCP_NODELAY`, which avoids that stall at its cause (Nagle's algorithm waiting for
/// the peer's delayed ACK). Redirects are not followed: the requests carry the upstream's
/// credentials, which must never reach another endpoint.
fn http_client() -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("the HTTP client could not be built: {e}"))
}

async fn supervise(shared: Arc<Shared>, up: Arc<Upstream>, shutdown: CancellationToken) {
    let mut attempt: u32 = 0;
    let mut generation: u64 = 0;
    loop {
        let connected = tokio::select! {
            () = shutdown.cancelled() => return,
            r = tokio::time::timeout(shared.connect_timeout, connect(&up)) => r
                .unwrap_or_else(|_| Err(format!(
                    "it did not finish connecting within {:?}",
                    shared.connect_timeout
                ))),
        };
        let reason = match connected {
            Err(reason) => reason,
            Ok((client, pid)) => {
                let peer = client.peer().clone();
                let listed =
                    tokio::time::timeout(shared.connect_timeout, sync_tools(&shared, &up, &peer))
                        .await;
                match listed {
                    Err(_) => {
                        let _ = client.cancel().await;
                        format!(
                            "it did not list its tools (and prompts and resources, when forwarded) within {:?}",
                            shared.connect_timeout
                        )
                    }
                    Ok(Err(e)) => {
                        let _ = client.cancel().await;
                        format!("listing its tools failed: {e}")
                    }
                    Ok(Ok(())) => {
                        attempt = 0;
                        generation += 1;
                        if let Ok(mut p) = up.pid.lock() {
                            *p = pid;
                        }
                        up.set_peer(Some((peer.clone(), generation)));
                        up.status
                            .send_replace(UpstreamStatus::Connected { generation });
                        tracing::info!(
                            namespace = up.namespace(),
                            generation,
                            "upstream connected"
                        );
                        let reason =
                            run_connected(&shared, &up, client, &peer, generation, &shutdown).await;
                        up.set_peer(None);
                        // Whatever the gone connection held upstream ended with it.
                        if let Ok(mut s) = up.upstream_subscriptions.lock() {
                            s.clear();
                        }
                        if let Ok(mut p) = up.pid.lock() {
                            *p = None;
                        }
                        match reason {
                            Some(r) => r,
                            None => {
                                up.status.send_replace(UpstreamStatus::Unavailable {
                                    reason: "the aggregator is shutting down".into(),
                                });
                                return;
                            }
                        }
                    }
                }
            }
        };
        tracing::warn!(namespace = up.namespace(), %reason, attempt, "upstream unavailable");
        up.status
            .send_replace(UpstreamStatus::Unavailable { reason });
        let delay = shared.backoff.delay(attempt);
        attempt = attempt.saturating_add(1);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// Serves one connection until it ends. `None` means shutdown; otherwise why it ended.
async fn run_connected(
    shared: &Shared,
    up: &Arc<Upstream>,
    client: Client,
    peer: &Peer<RoleClient>,
    generation: u64,
    shutdown: &CancellationToken,
) -> Option<String> {
    let stop = client.cancellation_token();
    let waiting = client.waiting();
    tokio::pin!(waiting);
    let mut stop = Some(stop);
    // A new connection holds no upstream subscriptions yet: take up what is still subscribed.
    if let Ok(mut s) = up.upstream_subscriptions.lock() {
        s.clear();
    }
    let mut interest = shared.resources.as_ref().map(|r| {
        let mut rx = r.subscription_changes();
        rx.mark_changed();
        rx
    });
    loop {
        tokio::select! {
            _ = &mut waiting => return Some("the connection ended".to_string()),
            () = interest_changed(&mut interest) => {
                if let Some(resources) = &shared.resources {
                    sync_subscriptions(resources, up, peer).await;
                }
            }
            () = shutdown.cancelled() => {
                if let Some(s) = stop.take() { s.cancel(); }
                let _ = (&mut waiting).await;
                return None;
            }
            () = up.broken.notified() => {
                if up.broken_generation.load(Ordering::Acquire) != generation {
                    // About a connection that is already gone.
                    continue;
                }
                if let Some(s) = stop.take() { s.cancel(); }
                let _ = (&mut waiting).await;
                return Some("a request to it failed on the transport".to_string());
            }
            () = up.relist.notified() => {
                match tokio::time::timeout(shared.connect_timeout, sync_tools(shared, up, peer)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(namespace = up.namespace(), error = %e, "re-listing tools failed");
                    }
                    Err(_) => {
                        if let Some(s) = stop.take() { s.cancel(); }
                        let _ = (&mut waiting).await;
                        return Some("it did not answer its list requests in time".to_string());
                    }
                }
            }
        }
    }
}

/// Resolves when the registry's subscription interest changed; never when resources are not
/// forwarded.
async fn interest_changed(rx: &mut Option<watch::Receiver<u64>>) {
    let open = match rx {
        Some(r) => r.changed().await.is_ok(),
        None => false,
    };
    if !open {
        std::future::pending::<()>().await;
    }
}

/// Reads the upstream's tool list and makes the registry match it: new tools registered, gone
/// tools removed, changed tools replaced. Tools that cannot be registered are skipped (logged,
/// and reported by [`Aggregator::skipped`]).
async fn sync_tools(
    shared: &Shared,
    up: &Arc<Upstream>,
    peer: &Peer<RoleClient>,
) -> Result<(), ServiceError> {
    if let Some(prompts) = &shared.prompts {
        sync_prompts(shared, prompts, up, peer).await;
    }
    if let Some(resources) = &shared.resources {
        sync_resources(resources, up, peer).await;
    }
    let tools = peer.list_all_tools().await?;
    let mut wanted: BTreeMap<String, ToolSpec> = BTreeMap::new();
    let mut remote_of: BTreeMap<String, String> = BTreeMap::new();
    let mut skipped = Vec::new();
    for t in tools {
        let remote = t.name.to_string();
        let name = format!("{}{}{}", up.namespace(), shared.separator, remote);
        if let Err(e) = check_name(&name) {
            skipped.push((remote, e.to_string()));
            continue;
        }
        let kind = shared
            .rules
            .iter()
            .find(|(p, _)| p.matches(&name))
            .map(|(_, c)| ToolKind::Write(c.clone()))
            .unwrap_or(ToolKind::Read);
        let mut spec = ToolSpec::new(
            name.clone(),
            t.description.as_deref().unwrap_or_default(),
            Value::Object((*t.input_schema).clone()),
            kind,
        );
        spec.title = t.title.clone();
        spec.output_schema = t
            .output_schema
            .as_ref()
            .map(|s| Value::Object((**s).clone()));
        // The upstream's own hints travel with its tools: a gateway in front classifies reads
        // by `readOnlyHint`, and clients show them.
        if let Some(a) = t.annotations.as_ref() {
            spec.hints.read_only_hint = a.read_only_hint;
            spec.hints.destructive_hint = a.destructive_hint;
            spec.hints.idempotent_hint = a.idempotent_hint;
            spec.hints.open_world_hint = a.open_world_hint;
        }
        remote_of.insert(name.clone(), remote);
        wanted.insert(name, spec);
    }
    let mut registered = up.registered.lock().map(|r| r.clone()).unwrap_or_default();
    for name in registered.keys().cloned().collect::<Vec<_>>() {
        let keep = wanted
            .get(&name)
            .is_some_and(|w| shared.registry.spec(&name).as_ref() == Some(w));
        if !keep {
            shared.registry.remove(&name);
            registered.remove(&name);
        }
    }
    for (name, spec) in wanted {
        if registered.contains_key(&name) {
            continue;
        }
        let remote = remote_of.remove(&name).unwrap_or_default();
        let tool = ForwardedTool {
            spec,
            remote: remote.clone(),
            up: up.clone(),
        };
        match shared.registry.register(tool) {
            Ok(()) => {
                registered.insert(name, remote);
            }
            Err(e) => {
                let reason = match &e {
                    CoreError::Duplicate { .. } => {
                        format!("`{name}` is already taken by another tool")
                    }
                    other => other.to_string(),
                };
                tracing::warn!(namespace = up.namespace(), tool = %remote, %reason, "upstream tool skipped");
                skipped.push((remote, reason));
            }
        }
    }
    if let Ok(mut r) = up.registered.lock() {
        *r = registered;
    }
    if let Ok(mut s) = up.skipped.lock() {
        *s = skipped;
    }
    Ok(())
}

/// An upstream tool registered in the aggregator's registry.
struct ForwardedTool {
    spec: ToolSpec,
    remote: String,
    up: Arc<Upstream>,
}

fn unavailable(namespace: &str, tool: &str, reason: &str) -> ToolOutput {
    coded_error(
        UPSTREAM_UNAVAILABLE,
        namespace,
        tool,
        format!(
            "The tool `{tool}` is unavailable: its server `{namespace}` is not connected ({reason}). Try again later or use another tool."
        ),
    )
}

/// An error result whose structured content carries a stable `code`, the tool and the upstream.
fn coded_error(code: &str, namespace: &str, tool: &str, message: String) -> ToolOutput {
    ToolOutput::error_with(
        message,
        json!({"code": code, "tool": tool, "upstream": namespace}),
    )
}

/// Removes a forwarded call's progress route when the call ends, however it ends.
struct ProgressRoute<'a> {
    up: &'a Upstream,
    token: ProgressToken,
}

/// Keeps a forwarded call in [`Upstream::active`] while it is in flight.
struct ActiveCall<'a> {
    up: &'a Upstream,
    id: u64,
}

impl<'a> ActiveCall<'a> {
    fn register(up: &'a Upstream, ctx: &ToolContext) -> Self {
        let id = up.next_active.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = up.active.lock() {
            m.insert(id, ctx.clone());
        }
        Self { up, id }
    }
}

impl Drop for ActiveCall<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.up.active.lock() {
            m.remove(&self.id);
        }
    }
}

impl Drop for ProgressRoute<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.up.progress.lock() {
            m.remove(&self.token);
        }
    }
}

#[async_trait]
impl Tool for ForwardedTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let ns = self.up.namespace();
        let mut params = CallToolRequestParams::new(self.remote.clone());
        params.arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => return Err(ToolError::failed("the arguments must be an object")),
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let name = &self.spec.name;
        match forward(&self.up, request, Some(&ctx)).await {
            Ok(ServerResult::CallToolResult(r)) => Ok(to_output(r)),
            Ok(other) => Ok(coded_error(
                UPSTREAM_INVALID_RESULT,
                ns,
                name,
                format!(
                    "The tool `{name}` failed: its server `{ns}` answered with something that is not a tool result ({})",
                    result_kind(&other)
                ),
            )),
            Err(Failure::Unavailable(reason)) => Ok(unavailable(ns, name, &reason)),
            Err(Failure::Timeout(after)) => Ok(coded_error(
                UPSTREAM_TIMEOUT,
                ns,
                name,
                format!(
                    "The tool `{name}` timed out: its server `{ns}` did not answer within {after:?}; the call was cancelled there. Try again later or use another tool."
                ),
            )),
            // The gate answers this as `cancelled`.
            Err(Failure::Cancelled) => Err(ToolError::Peer(PeerError::Cancelled)),
            Err(Failure::Refused(_, message)) => Err(ToolError::failed(format!(
                "the server `{ns}` refused the call: {message}"
            ))),
            Err(Failure::Other(message)) => Err(ToolError::failed(format!(
                "the call to the server `{ns}` failed: {message}"
            ))),
        }
    }
}

/// Why a forwarded request got no usable answer.
#[derive(Debug)]
pub(super) enum Failure {
    /// The upstream is not connected, or its transport failed during the request.
    Unavailable(String),
    /// No answer within the upstream's call timeout; the request was cancelled upstream.
    Timeout(Duration),
    /// The caller cancelled; the request was cancelled upstream.
    Cancelled,
    /// The upstream answered with a JSON-RPC error (its code and message).
    Refused(i32, String),
    /// Anything else the client library reported.
    Other(String),
}

impl Failure {
    /// The stable code and a sentence, for answers that are plain messages (`prompts/get`,
    /// `resources/read`): `<code>: <sentence>`.
    pub(super) fn message(&self, ns: &str) -> String {
        match self {
            Failure::Unavailable(reason) => {
                format!("{UPSTREAM_UNAVAILABLE}: its server `{ns}` is not connected ({reason})")
            }
            Failure::Timeout(after) => format!(
                "{UPSTREAM_TIMEOUT}: its server `{ns}` did not answer within {after:?}; the request was cancelled there"
            ),
            Failure::Cancelled => "cancelled: the caller cancelled the request".to_string(),
            Failure::Refused(_, m) => format!("upstream_error: the server `{ns}` refused: {m}"),
            Failure::Other(m) => format!("upstream_error: the request to `{ns}` failed: {m}"),
        }
    }
}

/// Sends one request to the upstream's current connection and waits for its answer, at most
/// the upstream's call timeout. When `ctx` is given, the upstream's progress for this request
/// reaches it and its cancellation cancels the request. A request that ends without an answer
/// (timeout, cancellation, the caller dropped) is cancelled upstream with
/// `notifications/cancelled`; a transport failure wakes the supervisor.
pub(super) async fn forward(
    up: &Upstream,
    request: ClientRequest,
    ctx: Option<&ToolContext>,
) -> Result<ServerResult, Failure> {
    if up.current_peer().is_none() {
        // Not connected: answer at once rather than queue for a slot.
        return Err(Failure::Unavailable(up.reason()));
    }
    let limit = up.config.call_timeout;
    let never = CancellationToken::new();
    let cancelled = ctx.map_or(&never, |c| c.cancellation());
    let started = tokio::time::Instant::now();
    // Wait for a slot: the upstream never has more than `max_in_flight` of our requests. The
    // wait counts against the call timeout; nothing was sent yet, so nothing to cancel upstream.
    let _slot = tokio::select! {
        biased;
        () = cancelled.cancelled() => return Err(Failure::Cancelled),
        p = tokio::time::timeout(limit, up.in_flight.acquire()) => match p {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(Failure::Unavailable("the aggregator is shutting down".into())),
            Err(_) => {
                tracing::warn!(namespace = up.namespace(), timeout = ?limit, "no free upstream slot within the call timeout");
                return Err(Failure::Timeout(limit));
            }
        },
    };
    let _active = ctx.map(|c| ActiveCall::register(up, c));
    // The connection may have changed while this request waited.
    let Some((peer, generation)) = up.current_peer() else {
        return Err(Failure::Unavailable(up.reason()));
    };
    let handle = match peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(h) => h,
        Err(e) => {
            up.report_broken(generation);
            return Err(Failure::Unavailable(e.to_string()));
        }
    };
    // Sends `notifications/cancelled` upstream if this request ends without an answer.
    let mut unanswered = CancelUnanswered {
        peer: Some(peer.clone()),
        id: handle.id.clone(),
        reason: "the caller cancelled the request",
    };
    let _route = ProgressRoute {
        up,
        token: handle.progress_token.clone(),
    };
    if let Some(ctx) = ctx
        && let Ok(mut m) = up.progress.lock()
    {
        m.insert(handle.progress_token.clone(), ctx.clone());
    }
    let left = limit.saturating_sub(started.elapsed());
    let outcome = tokio::select! {
        biased;
        () = cancelled.cancelled() => return Err(Failure::Cancelled),
        r = tokio::time::timeout(left, handle.await_response()) => r,
    };
    let Ok(outcome) = outcome else {
        unanswered.reason = "the request timed out";
        tracing::warn!(namespace = up.namespace(), timeout = ?limit, "upstream request timed out");
        return Err(Failure::Timeout(limit));
    };
    unanswered.peer = None;
    match outcome {
        Ok(r) => Ok(r),
        Err(ServiceError::McpError(e)) => Err(Failure::Refused(e.code.0, e.message.to_string())),
        Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
            up.report_broken(generation);
            Err(Failure::Unavailable(e.to_string()))
        }
        Err(e) => Err(Failure::Other(e.to_string())),
    }
}

/// Tells the upstream a forwarded request was abandoned, when dropped while still armed.
struct CancelUnanswered {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
    reason: &'static str,
}

impl Drop for CancelUnanswered {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let note = CancelledNotification::new(CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some(self.reason.into()),
        ));
        rt.spawn(async move {
            let _ = peer
                .send_notification(ClientNotification::CancelledNotification(note))
                .await;
        });
    }
}

fn result_kind(r: &ServerResult) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| {
            v.as_object()
                .map(|o| o.keys().cloned().collect::<Vec<_>>().join(", "))
        })
        .unwrap_or_else(|| "unreadable".into())
}

/// An upstream result as Kberg output: content blocks, structured content and the error flag
/// pass through unchanged.
fn to_output(r: CallToolResult) -> ToolOutput {
    let content = r
        .content
        .iter()
        .map(|block| {
            let v = serde_json::to_value(block).unwrap_or(Value::Null);
            content_of(&v)
        })
        .collect();
    ToolOutput {
        content,
        structured: r.structured_content,
        is_error: r.is_error.unwrap_or(false),
    }
}

fn content_of(v: &Value) -> Content {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let bytes = || s("data").and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok());
    match v.get("type").and_then(Value::as_str) {
        Some("text") => Content::Text(s("text").unwrap_or_default()),
        Some("image") => match (bytes(), s("mimeType")) {
            (Some(data), Some(mime_type)) => Content::Image { data, mime_type },
            _ => Content::Text(v.to_string()),
        },
        Some("audio") => match (bytes(), s("mimeType")) {
            (Some(data), Some(mime_type)) => Content::Audio { data, mime_type },
            _ => Content::Text(v.to_string()),
        },
        Some("resource_link") => match (s("uri"), s("name")) {
            (Some(uri), Some(name)) => Content::ResourceLink {
                uri,
                name,
                description: s("description"),
                mime_type: s("mimeType"),
            },
            _ => Content::Text(v.to_string()),
        },
        // Embedded resources and future block types: passed on as their JSON, so nothing is
        // silently lost.
        _ => Content::Text(v.to_string()),
    }
}

/// Reads the upstream's prompts (when it offers any) and registers them namespaced; the previous
/// set is replaced. A failure here is logged and leaves tools unaffected.
async fn sync_prompts(
    shared: &Shared,
    prompts: &PromptRegistry,
    up: &Arc<Upstream>,
    peer: &Peer<RoleClient>,
) {
    let offers = peer
        .peer_info()
        .is_some_and(|i| i.capabilities.prompts.is_some());
    let listed = if offers {
        match peer.list_all_prompts().await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(namespace = up.namespace(), error = %e, "listing prompts failed");
                return;
            }
        }
    } else {
        Vec::new()
    };
    let old = up
        .registered_prompts
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    let mut wanted = Vec::new();
    for p in listed {
        let name = format!("{}{}{}", up.namespace(), shared.separator, p.name);
        let mut spec = PromptSpec::new(name.clone(), p.description.clone().unwrap_or_default());
        spec.description = p.description.clone();
        spec.title = p.title.clone();
        for a in p.arguments.iter().flatten() {
            let mut arg = if a.required.unwrap_or(false) {
                PromptArgument::required(a.name.clone(), a.description.clone().unwrap_or_default())
            } else {
                PromptArgument::optional(a.name.clone(), a.description.clone().unwrap_or_default())
            };
            arg.description = a.description.clone();
            arg.title = a.title.clone();
            spec = spec.argument(arg);
        }
        wanted.push((name, spec, p.name.clone()));
    }
    // Prompts whose description did not change stay registered: a concurrent `prompts/get` never
    // sees one of them missing while the list is refreshed.
    let current: std::collections::HashMap<String, PromptSpec> = prompts
        .list()
        .into_iter()
        .filter(|s| old.contains(&s.name))
        .map(|s| (s.name.clone(), s))
        .collect();
    let mut now = BTreeSet::new();
    for name in &old {
        let unchanged = wanted
            .iter()
            .any(|(n, spec, _)| n == name && current.get(name) == Some(spec));
        if unchanged {
            now.insert(name.clone());
        } else {
            prompts.remove(name);
        }
    }
    for (name, spec, remote) in wanted {
        if now.contains(&name) {
            continue;
        }
        let upstream = up.clone();
        let registered = prompts.register(spec, move |args| {
            let remote = remote.clone();
            let upstream = upstream.clone();
            async move { forward_prompt(&upstream, &remote, args).await }
        });
        match registered {
            Ok(()) => {
                now.insert(name);
            }
            Err(e) => {
                tracing::warn!(namespace = up.namespace(), prompt = %name, error = %e, "upstream prompt skipped");
            }
        }
    }
    if let Ok(mut r) = up.registered_prompts.lock() {
        *r = now;
    }
}

async fn forward_prompt(
    up: &Upstream,
    remote: &str,
    args: PromptArgs,
) -> Result<PromptResult, String> {
    let ns = up.namespace();
    let arguments: serde_json::Map<String, Value> = args
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let params = GetPromptRequestParams::new(remote).with_arguments(arguments);
    let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
    let result = match forward(up, request, None).await {
        Ok(ServerResult::GetPromptResult(r)) => r,
        Ok(other) => {
            return Err(format!(
                "{UPSTREAM_INVALID_RESULT}: the server `{ns}` answered with something that is not a prompt ({})",
                result_kind(&other)
            ));
        }
        Err(f) => return Err(f.message(ns)),
    };
    let v = serde_json::to_value(&result)
        .map_err(|e| format!("the server `{ns}` sent an unreadable prompt: {e}"))?;
    let messages = v
        .get("messages")
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .map(|msg| PromptMessage {
                    role: if msg.get("role").and_then(Value::as_str) == Some("assistant") {
                        Role::Assistant
                    } else {
                        Role::User
                    },
                    content: content_of(msg.get("content").unwrap_or(&Value::Null)),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(PromptResult {
        description: v
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        messages,
    })
}
