//! One upstream's route: the connections the gateway holds to it, one per credential identity.
//!
//! An upstream whose credential is one secret for every agent has one connection; one whose
//! credential is per agent has one connection per agent (for a stdio server, one child per
//! agent, since a child reads its token from its environment once). Each connection is a Kberg
//! [`Aggregator`] over a private registry, so everything the aggregator does (namespacing,
//! reconnect with backoff, timeouts, progress, cancellation) holds per connection; the gateway's
//! public registry only holds front tools that pick the caller's connection.
//!
//! The connections of one upstream share one thread for their clients (Kberg's
//! [`UpstreamThread`], named `bridle-up-<namespace>`), started with the first connection and
//! kept while the route lives: the number of threads follows the number of upstreams, not of
//! agents.
//!
//! Credentials are resolved when a connection starts: into the environment of the child, or
//! into a header the HTTP client sends with every request. On every call the route compares the
//! secret's active version with the one its connection was started with; after a rotation the
//! connection is replaced before the call is sent, so requests after a rotate use the new
//! version, and one whose secret is gone (revoked, deleted) is closed and the call refused.
//!
//! A child starts with a cleared environment: of the gateway's own variables it gets only the
//! allowed ones ([`INHERITED_ENV`](super::config::INHERITED_ENV) and its `inherit_env`), so
//! what the operator exported before starting the gateway reaches no upstream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kberg_core::{Caller, Grants, Principal, ToolRegistry, WriteCapability};
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, Forward, ForwardHook, UpstreamConfig, UpstreamRuntime,
    UpstreamStatus, UpstreamThread, UpstreamTransport,
};

use super::config::{CredentialTarget, UpstreamSection};
use super::credential::{Credential, SecretError, SecretUse};
use super::desk::SecretDesk;

/// Which credential a connection carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    /// No credential, or the one secret for every agent.
    Shared,
    /// One agent's own secret.
    Agent(String),
}

/// One live connection to the upstream.
pub(crate) struct Connection {
    pub(crate) aggregator: Aggregator,
    pub(crate) registry: ToolRegistry,
    /// The secret (name, version) it was started with.
    pub(crate) secret: Option<(String, u64)>,
    /// The value it injects, to scrub from what the upstream answers.
    pub(crate) injected: Option<Credential>,
}

impl Connection {
    /// Why the upstream is unavailable on this connection, if it is: the aggregator's reason,
    /// with the injected value scrubbed out. The aggregator already redacts its transport's
    /// credentials; this holds for every form the gateway injected (a header template, an
    /// environment variable), whatever the upstream's error quoted.
    pub(crate) fn unavailable_reason(&self, namespace: &str) -> Option<String> {
        match self.aggregator.status(namespace) {
            Some(UpstreamStatus::Unavailable { reason }) => Some(self.shown(&reason)),
            _ => None,
        }
    }

    /// Whether it carries the secret `secret` names at `version`, its active version (or
    /// carries none, and none is wanted).
    fn carries(&self, secret: Option<&str>, version: &Result<Option<u64>, SecretError>) -> bool {
        match (&self.secret, secret, version) {
            (Some((n, v)), Some(name), Ok(Some(now))) => n == name && v == now,
            (None, None, _) => true,
            _ => false,
        }
    }

    /// `text` with the injected value scrubbed out.
    pub(crate) fn shown(&self, text: &str) -> String {
        match &self.injected {
            Some(c) => super::scrub::scrub_text(text, c.expose()),
            None => text.to_string(),
        }
    }
}

/// Why a call could not be routed; the front tool turns it into a refusal.
#[derive(Debug)]
pub(crate) enum RouteError {
    /// The agent has no secret in the mapping.
    NoMapping,
    /// The mapped secret could not be had.
    Secret(SecretError),
    /// The upstream is not reachable.
    Unavailable(String),
    /// An operator disabled the upstream (while the call was on its way): no connection is
    /// opened.
    Disabled,
}

/// The `request` of the use recorded when a connection starts with a credential.
pub const CONNECT_REQUEST: &str = "connect";

/// The `agent` of a use of the one secret every agent shares, at connection start.
pub const SHARED_IDENTITY: &str = "shared";

/// The connections of one upstream.
pub struct Route {
    pub(crate) namespace: String,
    pub(crate) section: UpstreamSection,
    /// The projects it serves now (empty: all): the section's at start, changed at run time by
    /// [`Route::set_projects`] and read on every call.
    served: std::sync::RwLock<Vec<String>>,
    /// Whether its tools may be called now: the section's at start, changed at run time by
    /// the pool's `set_enabled` and read on every call.
    pub(crate) enabled: std::sync::atomic::AtomicBool,
    pub(crate) target: Option<CredentialTarget>,
    secrets: SecretDesk,
    /// The caller the gateway uses on its private registries: it holds the upstream's write
    /// capability, since the front tool has already checked the real caller.
    pub(crate) internal: Caller,
    connections: tokio::sync::Mutex<HashMap<Identity, Arc<Connection>>>,
    connect_timeout: Duration,
    /// What each forwarded call carries from its caller's `_meta` (trace context).
    hook: Arc<dyn ForwardHook>,
    /// The thread every connection's upstream client runs on, once one has started.
    thread: std::sync::Mutex<Option<UpstreamThread>>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// The capability the private registries bind every forwarded tool to.
pub(crate) fn write_capability(namespace: &str) -> WriteCapability {
    WriteCapability::new(
        bridle_rules::AgentPermissions::upstream_write_capability(namespace),
        format!("Change things through the `{namespace}` upstream"),
    )
}

impl Route {
    pub(crate) fn new(
        namespace: String,
        section: UpstreamSection,
        target: Option<CredentialTarget>,
        secrets: SecretDesk,
        connect_timeout: Duration,
        hook: Arc<dyn ForwardHook>,
    ) -> Self {
        let cap = write_capability(&namespace);
        let internal = Caller::new(
            Principal::new(format!("bridle-gateway/{namespace}"))
                .with_grants(Grants::of([cap.id().to_string()])),
        );
        Self {
            namespace,
            served: std::sync::RwLock::new(section.projects.clone()),
            enabled: std::sync::atomic::AtomicBool::new(section.enabled),
            section,
            target,
            secrets,
            internal,
            connections: tokio::sync::Mutex::new(HashMap::new()),
            connect_timeout,
            hook,
            thread: std::sync::Mutex::new(None),
        }
    }

    /// Whether it serves `project` now.
    pub(crate) fn serves(&self, project: &str) -> bool {
        let served = self
            .served
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        served.is_empty() || served.iter().any(|p| p == project)
    }

    /// Whether it serves every project (no mapping) or one for which `wanted` holds: a read
    /// of the mapping, nothing cloned.
    pub(crate) fn serves_any(&self, wanted: impl Fn(&str) -> bool) -> bool {
        let served = self
            .served
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        served.is_empty() || served.iter().any(|p| wanted(p))
    }

    /// The projects it serves now (empty: all).
    pub fn projects(&self) -> Vec<String> {
        self.served
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Changes the projects it serves (empty: all), effective on the next call; returns the
    /// previous ones.
    pub(crate) fn set_projects(&self, projects: Vec<String>) -> Vec<String> {
        let mut served = self
            .served
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *served, projects)
    }

    /// The identity and secret name a call by `agent` uses.
    pub(crate) fn identity_for(
        &self,
        agent: &str,
    ) -> Result<(Identity, Option<String>), RouteError> {
        let Some(c) = &self.section.credential else {
            return Ok((Identity::Shared, None));
        };
        if let Some(secret) = c.per_agent.get(agent) {
            return Ok((Identity::Agent(agent.to_string()), Some(secret.clone())));
        }
        match &c.secret {
            Some(s) => Ok((Identity::Shared, Some(s.clone()))),
            None => Err(RouteError::NoMapping),
        }
    }

    /// The identities whose connection may list the upstream's tools for everyone, in the
    /// order they are tried: the shared one; else each agent of the mapping in turn, so that
    /// one agent's missing or revoked secret does not take the tools from every other agent.
    pub(crate) fn listing_identities(&self) -> Vec<(Identity, Option<String>)> {
        match &self.section.credential {
            None => vec![(Identity::Shared, None)],
            Some(c) => match &c.secret {
                Some(s) => vec![(Identity::Shared, Some(s.clone()))],
                None if c.per_agent.is_empty() => vec![(Identity::Shared, None)],
                None => c
                    .per_agent
                    .iter()
                    .map(|(agent, s)| (Identity::Agent(agent.clone()), Some(s.clone())))
                    .collect(),
            },
        }
    }

    /// The connection for `identity`, started (or restarted after a rotation) as needed.
    pub(crate) async fn connection(
        &self,
        identity: &Identity,
        secret: Option<&str>,
    ) -> Result<Arc<Connection>, RouteError> {
        // Read before the lock: most calls find their connection current and need no more.
        let mut seen = self.active_version(secret).await;
        let mut connections = self.connections.lock().await;
        // What was read before the lock may be older than the connection: a call that held the
        // lock meanwhile may have reconnected after a rotation. Only what is read under the
        // lock decides a reconnect, so one rotation replaces a connection once, however many
        // calls read the old version while it was being replaced.
        if let Some(c) = connections.get(identity)
            && !c.carries(secret, &seen)
        {
            seen = self.active_version(secret).await;
        }
        if let Err(e) = seen {
            // Gone (revoked, deleted): the connection that carries it is closed, not kept open
            // with a credential that no longer holds. A source that failed to answer says
            // nothing about the secret: its connection stays.
            if matches!(e, SecretError::Missing { .. } | SecretError::Empty { .. })
                && let Some(gone) = connections.remove(identity)
            {
                // Its session's close carries no credential: the one it has no longer holds.
                self.retire(&gone, None);
                tracing::info!(
                    namespace = %self.namespace,
                    ?identity,
                    "upstream credential gone; its connection closed"
                );
            }
            return Err(RouteError::Secret(e));
        }
        // Checked under the lock that disabling takes to close every connection, after its
        // switch is off: a call that passed the front tool's check of the switch before the
        // upstream was disabled opens no connection after they were closed.
        if !self.enabled.load(std::sync::atomic::Ordering::Acquire) {
            return Err(RouteError::Disabled);
        }
        let mut replaced = None;
        if let Some(c) = connections.get(identity) {
            if c.carries(secret, &seen) {
                return Ok(Arc::clone(c));
            }
            tracing::info!(
                namespace = %self.namespace,
                ?identity,
                "upstream credential changed; reconnecting with the active version"
            );
            replaced = connections.remove(identity);
        }
        let credential = self.credential(identity, secret).await;
        if let Some(old) = replaced {
            // The replaced connection's session is closed with the credential now active (or
            // with none when it cannot be had), not the one it was started with.
            let current = credential.as_ref().ok().and_then(Option::as_ref);
            self.retire(&old, current.map(|(_, value, _)| value));
        }
        let connection = Arc::new(self.start(credential?)?);
        connections.insert(identity.clone(), Arc::clone(&connection));
        Ok(connection)
    }

    /// The credential a new connection for `identity` starts with: the active version of
    /// `secret`, checked sendable, its use recorded before anything is sent.
    async fn credential(
        &self,
        identity: &Identity,
        secret: Option<&str>,
    ) -> Result<Option<(String, Credential, u64)>, RouteError> {
        Ok(match secret {
            Some(name) => {
                let (value, version) = self
                    .secrets
                    .current(name)
                    .await
                    .map_err(RouteError::Secret)?;
                self.check_sendable(name, &value)?;
                // Starting a connection sends the credential too (initialize, the tool listing,
                // and with it every request of the session): that is a use of its own, recorded
                // before anything is sent.
                let agent = match identity {
                    Identity::Shared => SHARED_IDENTITY,
                    Identity::Agent(a) => a.as_str(),
                };
                self.secrets
                    .record_use(&SecretUse {
                        name,
                        version,
                        upstream: &self.namespace,
                        agent,
                        request: CONNECT_REQUEST,
                    })
                    .await
                    .map_err(RouteError::Secret)?;
                Some((name.to_string(), value, version))
            }
            None => None,
        })
    }

    /// Says what the close of `old`'s upstream session (its `DELETE`, sent when the last call
    /// on it ends) carries in place of the credential it was started with: `current` in the
    /// credential's header, or no header at all. A stdio upstream has no such request.
    fn retire(&self, old: &Connection, current: Option<&Credential>) {
        if self.section.http.is_none() {
            return;
        }
        let headers = match (&self.target, current) {
            (Some(t @ CredentialTarget::Header { name, .. }), Some(value)) => {
                vec![(name.clone(), t.render(value.expose()))]
            }
            _ => Vec::new(),
        };
        if let Err(e) = old.aggregator.close_with_headers(&self.namespace, headers) {
            tracing::warn!(namespace = %self.namespace, error = %crate::logging::one_line(&e), "the replaced connection's close keeps its first credential");
        }
    }

    /// The active version of the secret `secret` names (`None` without one).
    async fn active_version(&self, secret: Option<&str>) -> Result<Option<u64>, SecretError> {
        match secret {
            Some(name) => self.secrets.version(name).await.map(Some),
            None => Ok(None),
        }
    }

    /// The running connection that lists the upstream's tools: that of the first of
    /// [`Route::listing_identities`] that has one.
    pub(crate) async fn listing_connection(&self) -> Option<Arc<Connection>> {
        let connections = self.connections.lock().await;
        self.listing_identities()
            .iter()
            .find_map(|(identity, _)| connections.get(identity).cloned())
    }

    /// Closes every connection (the upstream was disabled, or the gateway stops).
    pub(crate) async fn close_all(&self) {
        self.connections.lock().await.clear();
    }

    /// Waits until `connection` has listed its tools, within the connect timeout. A connection
    /// whose attempt failed (it waits to try again) answers at once with why, as the
    /// aggregator does for a call while no connection stands: waiting out the connect timeout
    /// for its next attempt would hold every call to a dead upstream that long.
    pub(crate) async fn ready(&self, connection: &Connection) -> Result<(), RouteError> {
        let settled = match connection.aggregator.status_changes(&self.namespace) {
            Some(mut status) => tokio::time::timeout(
                self.connect_timeout,
                status.wait_for(|s| !matches!(s, UpstreamStatus::Connecting)),
            )
            .await
            .ok()
            .and_then(Result::ok)
            .map(|s| s.clone()),
            None => None,
        };
        match settled {
            Some(UpstreamStatus::Connected { .. }) => Ok(()),
            _ => {
                let reason = connection
                    .unavailable_reason(&self.namespace)
                    .unwrap_or_else(|| {
                        format!("it did not connect within {:?}", self.connect_timeout)
                    });
                Err(RouteError::Unavailable(reason))
            }
        }
    }

    /// Refuses a value that cannot be sent where the credential goes: a header value with a
    /// line break or another control character (a token pasted with its newline). Checked
    /// before the use is recorded and before anything is sent; the upstream is never called
    /// without its credential instead.
    fn check_sendable(&self, name: &str, value: &Credential) -> Result<(), RouteError> {
        let Some(CredentialTarget::Header { name: header, .. }) = &self.target else {
            return Ok(());
        };
        let rendered = self
            .target
            .as_ref()
            .map(|t| t.render(value.expose()))
            .unwrap_or_default();
        if axum::http::HeaderValue::from_str(&rendered).is_ok() {
            return Ok(());
        }
        Err(RouteError::Secret(SecretError::Unreadable {
            name: name.to_string(),
            message: format!(
                "its value cannot be sent in the `{header}` header (it holds a line break or \
                 another control character); rotate it to a value without one"
            ),
        }))
    }

    fn start(
        &self,
        credential: Option<(String, Credential, u64)>,
    ) -> Result<Connection, RouteError> {
        let mut transport = match (&self.section.stdio, &self.section.http) {
            (Some(s), _) => {
                // A cleared environment but for the allowed variables: whatever else the
                // operator exported before starting the gateway (an admin token, the vault's
                // key) stays out of every child.
                let mut t =
                    UpstreamTransport::stdio(s.command.clone()).inherit_env_only(s.inherited_env());
                for a in &s.args {
                    t = t.arg(a.clone());
                }
                for (k, v) in &s.env {
                    t = t.env(k.clone(), v.clone());
                }
                t
            }
            (None, Some(h)) => UpstreamTransport::http(h.url.clone()),
            (None, None) => {
                return Err(RouteError::Unavailable(
                    "the upstream names no transport".into(),
                ));
            }
        };
        let mut secret = None;
        let mut injected = None;
        // The child's stderr is logged with exactly its credential redacted: its other
        // environment (a URL, a log level) stays readable. A value stored with surrounding
        // blanks is redacted without them too: a child that trims it (or a shell that splits
        // it into words) prints it so. The aggregator redacts the same list (for an HTTP
        // upstream, besides the header it sends) from its errors, from what it relays and from
        // the error codes the forward hook is told, each value also where it is quoted
        // percent-encoded or JSON-escaped, whole or in part
        // (`kberg_server::aggregate::redact_encoded`, the search the scrub uses too).
        let mut redact = Vec::new();
        if let (Some((name, value, version)), Some(target)) = (credential, &self.target) {
            let rendered = target.render(value.expose());
            redact.push(value.expose().to_string());
            redact.push(rendered.clone());
            let trimmed = value.expose().trim();
            if !trimmed.is_empty() && trimmed != value.expose() {
                redact.push(trimmed.to_string());
            }
            transport = match target {
                CredentialTarget::Header { name, .. } => transport.header(name.clone(), rendered),
                CredentialTarget::Env(var) => transport.env(var.clone(), rendered),
            };
            secret = Some((name, version));
            injected = Some(value);
        }
        let cap = write_capability(&self.namespace);
        let thread = self.thread()?;
        let config = AggregatorConfig::new()
            .upstream(
                UpstreamConfig::new(self.namespace.clone(), transport)
                    .call_timeout(self.section.call_timeout())
                    .stderr(self.section.stderr())
                    .stderr_redact(redact),
            )
            .connect_timeout(self.connect_timeout)
            .runtime(UpstreamRuntime::Thread(thread))
            .write_rule("*", cap);
        let registry = ToolRegistry::new();
        // The route's hook (traces) is told an error result's code with this same list
        // redacted by the aggregator, so a code that quotes the credential never becomes a
        // span attribute as it was.
        let forward = Forward::new().hook(Arc::clone(&self.hook));
        let aggregator = Aggregator::start_with(config, registry.clone(), forward)
            .map_err(|e| RouteError::Unavailable(e.to_string()))?;
        Ok(Connection {
            aggregator,
            registry,
            secret,
            injected,
        })
    }

    /// The route's upstream thread, started on first use.
    fn thread(&self) -> Result<UpstreamThread, RouteError> {
        let mut slot = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(t) = slot.as_ref() {
            return Ok(t.clone());
        }
        let t = UpstreamThread::start(format!("bridle-up-{}", self.namespace))
            .map_err(|e| RouteError::Unavailable(e.to_string()))?;
        *slot = Some(t.clone());
        Ok(t)
    }

    /// The secret source (for recording uses).
    pub(crate) fn secrets(&self) -> &SecretDesk {
        &self.secrets
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::upstreams::FolderSecrets;

    /// Every connection of a route runs on the route's one thread, however many agents have
    /// their own credential; another route has a thread of its own.
    #[tokio::test]
    async fn the_connections_of_a_route_share_one_thread() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["tok-a", "tok-b"] {
            std::fs::write(dir.path().join(name), format!("{name}-value")).unwrap();
        }
        let section: UpstreamSection = serde_saphyr::from_str(
            "stdio: {command: /nonexistent/upstream}\n\
             credential: {per_agent: {a: tok-a, b: tok-b}, env: UPSTREAM_TOKEN}",
        )
        .unwrap();
        let agents = ["a".to_string(), "b".to_string()].into();
        let target = section.check("up", &agents).unwrap();
        let secrets = SecretDesk::new(Arc::new(FolderSecrets::new(dir.path())));
        let route = |ns: &str| {
            Route::new(
                ns.into(),
                section.clone(),
                target.clone(),
                secrets.clone(),
                Duration::from_secs(5),
                Arc::new(kberg_server::aggregate::CarryMeta::default()),
            )
        };
        let (first, other) = (route("up"), route("other"));
        let a = first
            .connection(&Identity::Agent("a".into()), Some("tok-a"))
            .await
            .unwrap();
        let b = first
            .connection(&Identity::Agent("b".into()), Some("tok-b"))
            .await
            .unwrap();
        assert!(!Arc::ptr_eq(&a, &b), "one connection per agent");
        let thread = a.aggregator.upstream_thread().unwrap();
        assert_eq!(thread.name(), "bridle-up-up");
        assert_eq!(b.aggregator.upstream_thread(), Some(thread));
        let c = other
            .connection(&Identity::Agent("a".into()), Some("tok-a"))
            .await
            .unwrap();
        let theirs = c.aggregator.upstream_thread().unwrap();
        assert_eq!(theirs.name(), "bridle-up-other");
        assert_ne!(theirs, thread);
    }

    /// A call that read the secret's version before a rotation, and waited for the lock while
    /// another call reconnected with the new version, uses that connection: one rotation, one
    /// reconnect.
    #[tokio::test]
    async fn a_call_that_read_the_version_before_a_rotation_does_not_reconnect_again() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tok"), "first").unwrap();
        let section: UpstreamSection = serde_saphyr::from_str(
            "stdio: {command: /nonexistent/upstream}\n\
             credential: {secret: tok, env: UPSTREAM_TOKEN}",
        )
        .unwrap();
        let target = section.check("up", &Default::default()).unwrap();
        let secrets = SecretDesk::new(Arc::new(FolderSecrets::new(dir.path())));
        let route = Route::new(
            "up".into(),
            section,
            target,
            secrets.clone(),
            Duration::from_secs(5),
            Arc::new(kberg_server::aggregate::CarryMeta::default()),
        );
        let first = route
            .connection(&Identity::Shared, Some("tok"))
            .await
            .unwrap();
        // Another call holds the lock: this one reads the version (the folder answers at once)
        // and queues behind it.
        let mut held = route.connections.lock().await;
        let call = route.connection(&Identity::Shared, Some("tok"));
        tokio::pin!(call);
        assert!(futures::poll!(&mut call).is_pending());
        // The secret is rotated, and the holder reconnects with the new version.
        std::fs::write(dir.path().join("tok"), "second, longer").unwrap();
        let (value, version) = secrets.current("tok").await.unwrap();
        assert_ne!(Some(("tok".to_string(), version)), first.secret);
        let rotated = Arc::new(route.start(Some(("tok".into(), value, version))).unwrap());
        held.insert(Identity::Shared, Arc::clone(&rotated));
        drop(held);
        let used = call.await.unwrap();
        assert!(
            Arc::ptr_eq(&used, &rotated),
            "the waiting call reconnected a second time for the same rotation"
        );
    }
}
