//! Downstream MCP servers behind the gateway, with credentials injected per request.
//!
//! `bridle.yaml` names upstream MCP servers under `upstreams:` (stdio children or Streamable
//! HTTP endpoints; [`config`]). Each is reached through Kberg's aggregator, one connection per
//! credential identity ([`route`]), and offered to agents as namespaced front tools in the
//! gateway's one registry ([`front`]), so every call passes Kberg's gate and then the gateway's
//! per-project permission check. Credentials come from a [`SecretSource`] (the vault, or a
//! secrets folder; [`credential`]), never from the client: a client's own `Authorization`
//! header authenticates it to the gateway and goes no further.
//!
//! [`UpstreamPool::start`] checks every entry (a bad one stops the gateway at start, naming it),
//! then connects in the background: an upstream that does not start, hangs or dies answers
//! `upstream_unavailable` per call while the rest keep serving, and reconnects with backoff.
//! [`UpstreamPool::set_enabled`] turns one off or on while the gateway runs: off, its front
//! tools leave the registry (connected clients are told, `list_changed`) and its connections
//! close; on, it connects again and its tools return. [`UpstreamPool::set_projects`] changes
//! which projects one serves, checked on the next listing and call: an upstream's tools are
//! shown only to agents whose projects it serves (module `visibility`), and to any other agent
//! they answer as unknown tools.

pub mod config;
pub mod credential;
mod desk;
pub mod front;
pub mod route;
pub mod scrub;
mod visibility;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kberg_core::{ToolRegistry, ToolSpec, ToolVisibility};
use kberg_server::aggregate::{ForwardHook, UpstreamStatus};
use tokio_util::sync::CancellationToken;

pub use config::{CredentialTarget, UpstreamConfigError, UpstreamSection};
pub use credential::{Credential, FolderSecrets, SecretError, SecretSource, SecretUse};
pub(crate) use desk::SecretDesk;
pub use route::{Identity, Route};

use crate::context::GatewayContext;

/// How long an upstream may take to start and list its tools before it counts as unavailable.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// What an operator sees of one upstream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UpstreamReport {
    /// The namespace.
    pub namespace: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// Whether it is enabled.
    pub enabled: bool,
    /// Whether its listing connection is connected.
    pub connected: bool,
    /// Why it is not, when it is not.
    pub last_error: Option<String>,
    /// The front tools it offers.
    pub tools: Vec<String>,
    /// The projects it serves (empty: all).
    pub projects: Vec<String>,
}

/// The gateway's upstreams: their routes and the tasks that keep the front tools in step.
#[derive(Debug)]
pub struct UpstreamPool {
    routes: BTreeMap<String, Arc<Route>>,
    offered: Arc<std::sync::Mutex<BTreeMap<String, Vec<String>>>>,
    stop: CancellationToken,
    /// The enabled upstreams' tasks that keep their front tools in step, by namespace.
    running: tokio::sync::Mutex<BTreeMap<String, Running>>,
    gw: Arc<GatewayContext>,
    public: ToolRegistry,
}

/// One enabled upstream's task.
#[derive(Debug)]
struct Running {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// No upstream has that namespace.
#[derive(Debug, thiserror::Error)]
#[error("no upstream `{0}` is configured")]
pub struct UnknownUpstream(pub String);

impl Drop for UpstreamPool {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Checks every `upstreams:` entry against the configured agent names; returns each entry's
/// credential target. Used at start and by `bridle` to check a configuration offline.
pub fn check_all(
    upstreams: &BTreeMap<String, UpstreamSection>,
    agents: &BTreeSet<String>,
) -> Result<BTreeMap<String, Option<CredentialTarget>>, UpstreamConfigError> {
    upstreams
        .iter()
        .map(|(ns, section)| Ok((ns.clone(), section.check(ns, agents)?)))
        .collect()
}

impl UpstreamPool {
    /// Checks the configured upstreams, declares their write capabilities in `public`, and
    /// starts connecting to each enabled one in the background (on the current tokio runtime).
    /// `hook` decides what each forwarded call carries from its caller's `_meta` (the
    /// gateway passes trace context on).
    pub fn start(
        gw: &Arc<GatewayContext>,
        public: &ToolRegistry,
        secrets: Arc<dyn SecretSource>,
        connect_timeout: Duration,
        hook: Arc<dyn ForwardHook>,
    ) -> Result<Self, UpstreamConfigError> {
        let agents: BTreeSet<String> = gw.config.agents.keys().cloned().collect();
        let targets = check_all(&gw.config.upstreams, &agents)?;
        let stop = CancellationToken::new();
        let offered = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
        let mut routes = BTreeMap::new();
        let mut running = BTreeMap::new();
        let secrets = SecretDesk::new(secrets);
        for (ns, section) in &gw.config.upstreams {
            let route = Arc::new(Route::new(
                ns.clone(),
                section.clone(),
                targets.get(ns).cloned().flatten(),
                secrets.clone(),
                connect_timeout,
                Arc::clone(&hook),
            ));
            public
                .declare(route::write_capability(ns))
                .map_err(|e| UpstreamConfigError {
                    namespace: ns.clone(),
                    message: e.to_string(),
                })?;
            if section.enabled {
                let run = spawn_in_step(&route, gw, public, &offered, &stop);
                running.insert(ns.clone(), run);
            }
            routes.insert(ns.clone(), route);
        }
        if !routes.is_empty() {
            // The public registry's one filter: the gateway sets no other.
            let visibility: Arc<dyn ToolVisibility> = Arc::new(visibility::UpstreamVisibility {
                routes: routes.clone(),
                gw: Arc::clone(gw),
            });
            public.set_tool_visibility(Some(visibility));
        }
        Ok(Self {
            routes,
            offered,
            stop,
            running: tokio::sync::Mutex::new(running),
            gw: Arc::clone(gw),
            public: public.clone(),
        })
    }

    /// Turns the upstream under `namespace` on or off while the gateway runs; returns whether
    /// that changed anything. Off, its front tools are gone from the registry and its
    /// connections closed when this returns; on, it starts connecting (its tools return once it
    /// lists them). Only the running gateway changes: `bridle.yaml` is the caller's to update.
    pub async fn set_enabled(
        &self,
        namespace: &str,
        enabled: bool,
    ) -> Result<bool, UnknownUpstream> {
        let route = self
            .routes
            .get(namespace)
            .ok_or_else(|| UnknownUpstream(namespace.to_string()))?;
        let mut running = self.running.lock().await;
        route
            .enabled
            .store(enabled, std::sync::atomic::Ordering::Release);
        match (enabled, running.contains_key(namespace)) {
            (true, false) => {
                let run = spawn_in_step(route, &self.gw, &self.public, &self.offered, &self.stop);
                running.insert(namespace.to_string(), run);
                tracing::info!(namespace, "upstream enabled");
                Ok(true)
            }
            (false, true) => {
                if let Some(run) = running.remove(namespace) {
                    run.stop.cancel();
                    if let Err(e) = run.task.await {
                        tracing::warn!(namespace, error = %crate::logging::one_line(&e), "the upstream's task failed");
                    }
                }
                route.close_all().await;
                tracing::info!(namespace, "upstream disabled");
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Changes which projects the upstream under `namespace` serves (empty: all) while the
    /// gateway runs; returns the previous ones. The next call of its tools is checked against
    /// the new mapping: agents of projects it no longer serves no longer list its tools and
    /// calling one answers `unknown_tool`. Connected clients get `list_changed` and list
    /// afresh. Only the running gateway changes: `bridle.yaml` is the caller's to update.
    pub fn set_projects(
        &self,
        namespace: &str,
        projects: Vec<String>,
    ) -> Result<Vec<String>, UnknownUpstream> {
        let route = self
            .routes
            .get(namespace)
            .ok_or_else(|| UnknownUpstream(namespace.to_string()))?;
        let before = route.set_projects(projects);
        // The tools stay registered (agents of still-mapped projects keep calling them); what
        // each agent is shown changed, so clients are told to list afresh. The notification
        // reaches every session (the registry has one version for all), a superset of the
        // agents whose listing changed.
        self.public.visibility_changed();
        tracing::info!(namespace, "upstream project mapping changed");
        Ok(before)
    }

    /// Tells connected clients to list afresh after an agent's projects changed, when that can
    /// change a listing: some upstream serves only some projects. Without a mapping every agent
    /// sees every upstream's tools, and nothing is sent.
    pub fn agent_changed(&self) {
        if self.routes.values().any(|r| !r.projects().is_empty()) {
            self.public.visibility_changed();
        }
    }

    /// Whether the upstream under `namespace` is enabled now.
    pub async fn is_enabled(&self, namespace: &str) -> bool {
        self.running.lock().await.contains_key(namespace)
    }

    /// The routes, by namespace.
    pub fn routes(&self) -> &BTreeMap<String, Arc<Route>> {
        &self.routes
    }

    /// What an operator sees of every upstream.
    pub async fn reports(&self) -> Vec<UpstreamReport> {
        let mut out = Vec::new();
        for (ns, route) in &self.routes {
            let enabled = self.is_enabled(ns).await;
            let connection = route.listing_connection().await;
            let status = connection.as_ref().and_then(|c| c.aggregator.status(ns));
            let (connected, last_error) = match status {
                Some(UpstreamStatus::Connected { .. }) => (true, None),
                // The admin API and the unauthenticated `/readyz` show this: scrubbed of the
                // value the connection injects, whatever the upstream's error quoted.
                Some(UpstreamStatus::Unavailable { .. }) => (
                    false,
                    connection.as_ref().and_then(|c| c.unavailable_reason(ns)),
                ),
                Some(_) => (false, None),
                None if !enabled => (false, Some("disabled".into())),
                None => (false, None),
            };
            let tools = self
                .offered
                .lock()
                .map(|o| o.get(ns).cloned().unwrap_or_default())
                .unwrap_or_default();
            out.push(UpstreamReport {
                namespace: ns.clone(),
                transport: if route.section.stdio.is_some() {
                    "stdio"
                } else {
                    "http"
                },
                enabled,
                connected,
                last_error,
                tools,
                projects: route.projects(),
            });
        }
        out
    }

    /// Waits until the upstream under `namespace` offers at least one tool, or `timeout` passes.
    /// Returns the tools it offers.
    pub async fn wait_offered(&self, namespace: &str, timeout: Duration) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let now = self
                .offered
                .lock()
                .map(|o| o.get(namespace).cloned().unwrap_or_default())
                .unwrap_or_default();
            if !now.is_empty() || tokio::time::Instant::now() >= deadline {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops every connection.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        for route in self.routes.values() {
            route.close_all().await;
        }
    }
}

/// Starts the task that keeps one upstream's front tools in step, stopped by its own token (a
/// child of the pool's).
fn spawn_in_step(
    route: &Arc<Route>,
    gw: &Arc<GatewayContext>,
    public: &ToolRegistry,
    offered: &Arc<std::sync::Mutex<BTreeMap<String, Vec<String>>>>,
    pool_stop: &CancellationToken,
) -> Running {
    let stop = pool_stop.child_token();
    let task = tokio::spawn(keep_in_step(
        Arc::clone(route),
        Arc::clone(gw),
        public.clone(),
        Arc::clone(offered),
        stop.clone(),
    ));
    Running { stop, task }
}

/// Keeps the front tools of one upstream in step with what its listing connection offers:
/// connects (retrying with backoff while it cannot), syncs on every change of the private
/// registry, and re-reads the connection every few seconds so a rotated credential's new
/// connection is followed.
async fn keep_in_step(
    route: Arc<Route>,
    gw: Arc<GatewayContext>,
    public: ToolRegistry,
    offered: Arc<std::sync::Mutex<BTreeMap<String, Vec<String>>>>,
    stop: CancellationToken,
) {
    let mut registered: BTreeMap<String, ToolSpec> = BTreeMap::new();
    let mut withheld = BTreeSet::new();
    let mut delay = Duration::from_millis(250);
    let candidates = route.listing_identities();
    'run: loop {
        // The first candidate whose connection starts lists the tools: with a secret per agent,
        // one agent's missing or revoked secret passes the listing to the next agent's.
        let mut started = Err(route::RouteError::NoMapping);
        for (identity, secret) in &candidates {
            started = route.connection(identity, secret.as_deref()).await;
            match &started {
                Ok(_) => break,
                // Disabled while this task was being stopped: its tools leave below.
                Err(route::RouteError::Disabled) => break 'run,
                Err(e) => {
                    tracing::debug!(namespace = %route.namespace, ?identity, error = ?e, "this identity cannot list the upstream's tools");
                }
            }
        }
        let connection = match started {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(namespace = %route.namespace, error = ?e, "upstream cannot be started; retrying");
                tokio::select! {
                    () = stop.cancelled() => break 'run,
                    () = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        delay = Duration::from_millis(250);
        let mut changes = connection.registry.changes();
        let names = front::sync_front_tools(
            &public,
            &route,
            &gw,
            &connection.registry,
            connection.injected.as_ref(),
            &mut registered,
            &mut withheld,
        );
        if let Ok(mut o) = offered.lock() {
            o.insert(route.namespace.clone(), names);
        }
        tokio::select! {
            () = stop.cancelled() => break,
            _ = changes.changed() => {}
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
    for name in registered.keys() {
        public.remove(name);
    }
    if let Ok(mut o) = offered.lock() {
        o.remove(&route.namespace);
    }
}
