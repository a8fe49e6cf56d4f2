//! The aggregator's front: [`Aggregator`] (start, status, what each upstream registered,
//! shutdown), [`Forward`], [`UpstreamStatus`], and the state one upstream's supervisor, client
//! relay and forwarded tools, prompts and resources share ([`Upstream`]).
//!
//! Starting checks the configuration, declares the write rules' capabilities and spawns one
//! supervisor per upstream ([`super::supervisor`]); everything else happens there and in the
//! forwarded items, which only ever borrow the upstream's current connection.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kberg_core::{
    ErrorCode, PromptRegistry, RateBudget, ResourceDescriptor, ResourceRegistry, ResourceTemplate,
    ToolContext, ToolRegistry, WriteCapability,
};
use rmcp::model::ProgressToken;
use rmcp::service::{Peer, RoleClient};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::closing::ClosingHeaders;
use super::config::{
    AggregatorConfig, Backoff, ConfigError, UpstreamConfig, UpstreamRuntime, UpstreamTransport,
};
use super::hook::ForwardHook;
use super::order::RelayOrder;
use super::pattern::Pattern;
use super::redact::Redactions;
use super::resources::check_scheme_namespace;
use super::supervisor::supervise;
use super::thread::UpstreamThread;

/// The stable `code` in the structured content of a call whose upstream is not connected
/// ([`ErrorCode::UpstreamUnavailable`]).
pub const UPSTREAM_UNAVAILABLE: &str = ErrorCode::UpstreamUnavailable.as_str();

/// The stable `code` of a forwarded request its upstream did not answer within the upstream's
/// [call timeout](super::UpstreamConfig::call_timeout); the request was cancelled upstream
/// ([`ErrorCode::UpstreamTimeout`]).
pub const UPSTREAM_TIMEOUT: &str = ErrorCode::UpstreamTimeout.as_str();

/// The stable `code` of a forwarded request its upstream answered with something that is not
/// the documented result shape, e.g. a `tools/call` answer without a `content` array
/// ([`ErrorCode::UpstreamInvalidResult`]).
pub const UPSTREAM_INVALID_RESULT: &str = ErrorCode::UpstreamInvalidResult.as_str();

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

/// The aggregation the upstreams feed: the registries their tools, prompts and resources go
/// into and the rules they are registered by. Immutable; shared by all supervisors.
pub(super) struct Aggregation {
    pub(super) registry: ToolRegistry,
    pub(super) prompts: Option<PromptRegistry>,
    pub(super) resources: Option<ResourceRegistry>,
    pub(super) separator: String,
    pub(super) rules: Vec<(Pattern, WriteCapability)>,
    pub(super) backoff: Backoff,
    pub(super) connect_timeout: Duration,
}

/// What forwarded tools and the supervisor share about one upstream.
pub(super) struct Upstream {
    pub(super) config: UpstreamConfig,
    /// Its credentials, hidden from its stderr lines and from all it relays to clients; built
    /// once from `config`, which stays the same over every connection.
    pub(super) redactions: Redactions,
    /// One permit per request that may be in flight to the upstream.
    pub(super) in_flight: tokio::sync::Semaphore,
    /// The live connection's peer and its generation.
    pub(super) peer: RwLock<Option<(Peer<RoleClient>, u64)>>,
    pub(super) pid: Mutex<Option<u32>>,
    pub(super) status: watch::Sender<UpstreamStatus>,
    /// Wakes the supervisor: a call failed on the transport.
    pub(super) broken: Notify,
    /// The generation whose transport a call saw fail; a signal about an older connection
    /// (left over from before a reconnect) is ignored.
    pub(super) broken_generation: AtomicU64,
    /// Wakes the supervisor: the upstream's tool list changed.
    pub(super) relist: Notify,
    /// namespaced name -> upstream tool name, for the tools this upstream registered.
    pub(super) registered: Mutex<BTreeMap<String, String>>,
    /// Namespaced prompt names this upstream registered.
    pub(super) registered_prompts: Mutex<BTreeSet<String>>,
    /// Where forwarded resources live and updates are delivered, when resources are forwarded.
    pub(super) resources: Option<ResourceRegistry>,
    /// Namespaced resource URIs this upstream registered, with what was registered.
    pub(super) registered_resources: Mutex<BTreeMap<String, ResourceDescriptor>>,
    /// Namespaced URI templates this upstream registered.
    pub(super) registered_templates: Mutex<BTreeMap<String, ResourceTemplate>>,
    /// Upstream resources and templates that could not be registered, with the reason.
    pub(super) skipped_resources: Mutex<Vec<(String, String)>>,
    /// Upstream URIs the current connection holds a `resources/subscribe` for.
    pub(super) upstream_subscriptions: Mutex<BTreeSet<String>>,
    /// Upstream tool names that could not be registered, with the reason.
    pub(super) skipped: Mutex<Vec<(String, String)>>,
    /// Progress tokens of forwarded calls -> the calling tool's context.
    pub(super) progress: Mutex<HashMap<ProgressToken, ToolContext>>,
    /// Forwarded tool calls in flight, registered before their request is sent (so a request
    /// the upstream makes of its client right away already finds its call), by a local id; and
    /// calls abandoned unanswered, while the upstream may still be at work on them.
    pub(super) active: Mutex<HashMap<u64, ActiveEntry>>,
    pub(super) next_active: AtomicU64,
    /// Requests sent and not yet recorded (their progress route and upstream id), by sequence
    /// number ([`super::forward`]): what the upstream sends about a request can arrive before
    /// its sender has recorded it, so the relay waits for the sends begun before it looks.
    pub(super) sending: watch::Sender<BTreeSet<u64>>,
    pub(super) next_send: AtomicU64,
    /// The upstream's notifications being relayed: a forwarded request's answer waits for those
    /// read before it ([`super::order`]).
    pub(super) relay_order: Arc<RelayOrder>,
    /// The rate bound of the log messages relayed from this upstream to calling clients.
    pub(super) log_budget: Mutex<RateBudget>,
    /// Asked about each forwarded tool call (see [`ForwardHook`]).
    pub(super) hook: Option<Arc<dyn ForwardHook>>,
    /// The headers the request that ends an HTTP upstream's session carries in place of the
    /// configured ones, once the app has said so ([`Aggregator::close_with_headers`]).
    pub(super) closing: ClosingHeaders,
}

/// A forwarded tool call as the client relay sees it.
pub(super) struct ActiveEntry {
    /// The calling tool's context; `None` once the call was abandoned (cancelled, timed out or
    /// dropped unanswered): the upstream may still be at work on it, and whatever it asks for
    /// it has nobody to go to.
    pub(super) ctx: Option<ToolContext>,
    /// The id of its request upstream, once sent.
    pub(super) upstream_id: Option<rmcp::model::RequestId>,
    /// Until when an abandoned call still counts as at work upstream.
    pub(super) abandoned_until: Option<tokio::time::Instant>,
}

impl Upstream {
    pub(super) fn namespace(&self) -> &str {
        &self.config.namespace
    }

    pub(super) fn current_peer(&self) -> Option<(Peer<RoleClient>, u64)> {
        self.peer.read().ok().and_then(|p| p.clone())
    }

    pub(super) fn set_peer(&self, peer: Option<(Peer<RoleClient>, u64)>) {
        if let Ok(mut p) = self.peer.write() {
            *p = peer;
        }
    }

    /// A call saw the transport of connection `generation` fail: wake the supervisor.
    pub(super) fn report_broken(&self, generation: u64) {
        self.broken_generation.store(generation, Ordering::Release);
        self.broken.notify_one();
    }

    pub(super) fn reason(&self) -> String {
        match &*self.status.borrow() {
            UpstreamStatus::Unavailable { reason } => reason.clone(),
            UpstreamStatus::Connecting => "it is still connecting".to_string(),
            UpstreamStatus::Connected { .. } => "its connection just ended".to_string(),
        }
    }
}

/// What [`Aggregator::start_with`] forwards besides tools. Nothing by default.
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Forward {
    /// Registers the upstreams' prompts here, namespaced like tools.
    pub prompts: Option<PromptRegistry>,
    /// Registers the upstreams' resources and templates here, under `<namespace>+<uri>`.
    pub resources: Option<ResourceRegistry>,
    /// Asked once per forwarded tool call what it carries from its caller's `_meta` and which
    /// span it runs in (see [`ForwardHook`]).
    pub hook: Option<Arc<dyn ForwardHook>>,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward")
            .field("prompts", &self.prompts.is_some())
            .field("resources", &self.resources.is_some())
            .field("hook", &self.hook.is_some())
            .finish()
    }
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

    /// Asks `hook` about every forwarded tool call: the `_meta` keys it carries from the
    /// caller (see [`CarryMeta`](super::CarryMeta)) and the span it runs in.
    pub fn hook(mut self, hook: Arc<dyn ForwardHook>) -> Self {
        self.hook = Some(hook);
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
    /// The thread the upstream clients run on (`None`: the caller's runtime).
    thread: Option<UpstreamThread>,
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
    /// supervisor per upstream (on the runtime [`AggregatorConfig::runtime`] names: by default
    /// a thread of the aggregator's own). Returns at once; upstream tools appear in the
    /// registry as their upstreams connect (see [`Aggregator::wait_connected`]).
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
        let Forward {
            prompts,
            resources,
            hook,
        } = forward;
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
        let shared = Arc::new(Aggregation {
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
        // An own thread ends once the supervisors spawned on it (and this aggregator's clone)
        // are gone; a shared one also waits for its other holders.
        let thread = match config.runtime {
            UpstreamRuntime::Own => Some(UpstreamThread::start("kberg-upstreams")?),
            UpstreamRuntime::Thread(t) => Some(t),
            UpstreamRuntime::Caller => {
                tokio::runtime::Handle::try_current().map_err(|e| {
                    ConfigError::RuntimeUnavailable {
                        reason: e.to_string(),
                    }
                })?;
                None
            }
        };
        for u in config.upstreams {
            let (status, _) = watch::channel(UpstreamStatus::Connecting);
            let up = Arc::new(Upstream {
                in_flight: tokio::sync::Semaphore::new(u.max_in_flight),
                redactions: Redactions::of(&u),
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
                sending: watch::Sender::new(BTreeSet::new()),
                next_send: AtomicU64::new(0),
                relay_order: RelayOrder::new(),
                log_budget: Mutex::new(super::relay::log_budget()),
                hook: hook.clone(),
                closing: ClosingHeaders::default(),
            });
            let supervisor = supervise(shared.clone(), up.clone(), shutdown.clone());
            tasks.push(match &thread {
                Some(t) => t.spawn_kept(supervisor),
                None => tokio::spawn(supervisor),
            });
            upstreams.push(up);
        }
        Ok(Self {
            upstreams,
            shutdown,
            tasks,
            registry,
            thread,
        })
    }

    /// The registry the upstream tools are registered in.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// The thread the upstream clients run on; `None` when they run on the runtime the
    /// aggregator was started on ([`UpstreamRuntime::Caller`]).
    pub fn upstream_thread(&self) -> Option<&UpstreamThread> {
        self.thread.as_ref()
    }

    fn upstream(&self, namespace: &str) -> Option<&Arc<Upstream>> {
        self.upstreams.iter().find(|u| u.namespace() == namespace)
    }

    /// Says which headers the request that ends the HTTP upstream `namespace`'s session
    /// (`DELETE`) carries in place of its configured ones, when its connection closes (the
    /// aggregator shuts down or is dropped): after the credential it was started with was
    /// rotated, the current one; after it was revoked, none (an empty list), so that a
    /// credential that no longer holds is not sent again. Requests before the close keep the
    /// configured headers. Fails for an unknown namespace, a stdio upstream, or a header that
    /// cannot be sent in HTTP (its value is never shown).
    pub fn close_with_headers(
        &self,
        namespace: &str,
        headers: Vec<(String, String)>,
    ) -> Result<(), ConfigError> {
        let refused = |reason: String| ConfigError::InvalidTransport {
            namespace: namespace.to_string(),
            reason,
        };
        let up = self
            .upstream(namespace)
            .ok_or_else(|| refused("there is no upstream of that namespace".into()))?;
        if !matches!(up.config.transport, UpstreamTransport::Http { .. }) {
            return Err(refused("it is not an HTTP upstream".into()));
        }
        let checked = ClosingHeaders::check(&headers).map_err(|name| {
            refused(format!(
                "the header `{}` cannot be sent: its name or value is not valid in HTTP",
                name.chars().take(64).collect::<String>()
            ))
        })?;
        up.closing.set(checked);
        Ok(())
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
