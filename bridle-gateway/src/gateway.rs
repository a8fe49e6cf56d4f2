//! [`Gateway`]: the whole gateway assembled from a data directory and its configuration, and
//! served over Streamable HTTP.
//!
//! [`GatewayBuilder`] is the one way to put the pieces together: the rules context, the MCP app
//! (the gateway's own tools, optional memory tools, the rules resources), the upstream MCP
//! servers behind their front tools with credentials from a [`SecretSource`], and the per-agent
//! authentication. [`Gateway::bind`] then listens (loopback by default; another address only
//! with explicit allowed Host names and Origins) and [`BoundGateway::run`] serves until a
//! shutdown signal, with the watcher that tells subscribed agents when their rules change, and
//! the admin API on its own loopback listener when [`GatewayBuilder::admin`] asks for it.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kberg_server::{HttpConfig, HttpServer, McpApp};
use tokio_util::sync::CancellationToken;

use crate::admin::{AdminCredentials, AdminServer, LoginLimits};
use crate::auth::BridleAuth;
use crate::config::{ConfigError, GatewayConfig, LoginLimitsSection, MCP_PATH};
use crate::context::GatewayContext;
use crate::error::GatewayError;
use crate::memory::{AgentProjects, RulesWriteBack};
use crate::ops::{GatewayMetrics, OpsState};
use crate::secrets::GatewaySecrets;
use crate::upstreams::{DEFAULT_CONNECT_TIMEOUT, SecretSource, UpstreamPool};
use crate::vault::{KeyOrigin, MasterKey, Vault, VaultConfig};

/// Assembles a [`Gateway`].
pub struct GatewayBuilder {
    data_dir: PathBuf,
    config: GatewayConfig,
    secrets: Option<Arc<dyn SecretSource>>,
    memory: Option<bridle_memory::MemoryService>,
    connect_timeout: Duration,
    watch_every: Duration,
    admin: Option<AdminListen>,
    shutdown_grace: Duration,
    resumable_sessions: bool,
    on_audit_retention: Option<crate::audit::RetentionHook>,
    #[cfg(feature = "traces")]
    telemetry: Option<crate::telemetry::Telemetry>,
}

/// How long in-flight calls may take to finish once shutdown begins, by default.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Where the admin API listens and who it admits.
#[derive(Clone)]
struct AdminListen {
    addr: SocketAddr,
    credentials: Arc<dyn AdminCredentials>,
}

impl std::fmt::Debug for GatewayBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayBuilder")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

impl GatewayBuilder {
    /// A gateway over `data_dir` with `config` (see [`GatewayConfig::load`]). Upstream secrets
    /// come from the vault (`<data>/vault.db`, its master key as the configuration says) and
    /// its read-only sources, unless [`GatewayBuilder::secrets`] names another source.
    pub fn new(data_dir: impl Into<PathBuf>, config: GatewayConfig) -> Self {
        Self {
            data_dir: data_dir.into(),
            config,
            secrets: None,
            memory: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            watch_every: Duration::from_millis(250),
            admin: None,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            resumable_sessions: true,
            on_audit_retention: None,
            #[cfg(feature = "traces")]
            telemetry: None,
        }
    }

    /// Traces on: every MCP request on the endpoint gets a server span and every call
    /// forwarded to an upstream a client span, exported through `telemetry` (whose
    /// [`Telemetry::layer`](crate::telemetry::Telemetry::layer) the binary has put on its
    /// subscriber). Without it no span is made and the caller's trace context is passed on to
    /// upstreams unchanged. See [`crate::telemetry`].
    #[cfg(feature = "traces")]
    pub fn telemetry(mut self, telemetry: crate::telemetry::Telemetry) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// How long in-flight calls may take to finish once shutdown begins (default 10 s); the
    /// sessions and streams still open then are ended.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Whether, on a PostgreSQL state database, 2025-11-25 sessions are kept there so any
    /// replica resumes a session another initialized (default `true`). Off, a session lives in
    /// the replica that initialized it, and the load balancer must route by `Mcp-Session-Id`
    /// (sticky sessions). No effect on the embedded default (one process).
    pub fn resumable_sessions(mut self, on: bool) -> Self {
        self.resumable_sessions = on;
        self
    }

    /// Also serves the admin API on its own loopback `addr` (port 0 picks a free one),
    /// admitting the admins `credentials` accept. [`BoundGateway::admin_url`] says where.
    pub fn admin(mut self, addr: SocketAddr, credentials: Arc<dyn AdminCredentials>) -> Self {
        self.admin = Some(AdminListen { addr, credentials });
        self
    }

    /// Where upstream credentials come from, instead of the vault's [`GatewaySecrets`].
    pub fn secrets(mut self, secrets: Arc<dyn SecretSource>) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// Serves bridle-memory's tools from this service.
    pub fn memory(mut self, memory: bridle_memory::MemoryService) -> Self {
        self.memory = Some(crate::memory::hosted(memory));
        self
    }

    /// How long an upstream may take to start and list its tools (default 20 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Also tells `f` of each retention pass of the audit log (its steps, its end, its failure:
    /// [`crate::audit::RetentionEvent`]), after the gateway's metrics have counted it
    /// (`bridle_audit_retention_passes_total`, `bridle_audit_retention_removed_total`). It runs
    /// on the audit log's writer thread: keep it quick, and it must not panic.
    pub fn on_audit_retention(
        mut self,
        f: impl Fn(&crate::audit::RetentionEvent<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.on_audit_retention = Some(crate::audit::RetentionHook::new(f));
        self
    }

    /// How often the watcher looks for changed rules (default 250 ms).
    pub fn watch_every(mut self, every: Duration) -> Self {
        self.watch_every = every;
        self
    }

    /// Opens the stores, builds the app and starts connecting to the upstreams. Must run on a
    /// tokio runtime. A bad upstream entry or an unreadable agent token stops it here, named.
    pub async fn build(self) -> Result<Gateway, GatewayError> {
        let forward_hook = self.forward_hook();
        let secrets_dir = self.config.secrets_path(&self.data_dir);
        let (vault, key_created) = open_vault(&self.data_dir, &self.config)?;
        let database = crate::db::StateDatabase::open(&self.data_dir, &self.config, &vault)?;
        let ctx = GatewayContext::open_with(&self.data_dir, self.config, &database)?;
        let session_store = session_store(&database, self.resumable_sessions)?;
        let metrics = Arc::new(GatewayMetrics::new());
        if ctx.config.audit.enabled {
            // Each retention pass is counted in the metrics (a pass failing every interval
            // would otherwise be only a log line), then told to the embedder's hook.
            let counted = Arc::clone(&metrics);
            let also = self.on_audit_retention.clone();
            let config = ctx
                .config
                .audit
                .log_config(&self.data_dir)
                .with_on_retention(move |event| {
                    counted.observe_retention(event);
                    if let Some(hook) = &also {
                        hook.call(event);
                    }
                });
            let log = database.open_audit(config)?;
            ctx.set_audit(log);
        }
        let auth =
            BridleAuth::new(&self.data_dir, Arc::clone(&ctx))?.with_vault(Arc::clone(&vault));
        let docker_dir = vault.config().docker_secrets_dir.clone();
        let secrets = self.secrets.unwrap_or_else(|| {
            Arc::new(GatewaySecrets::new(
                Arc::clone(&vault),
                secrets_dir,
                docker_dir,
            ))
        });
        // Private example repositories are cloned with the secrets `memory.indexing` names.
        let memory = self
            .memory
            .map(|m| crate::memory::with_clone_credentials(m, &ctx.config, &secrets));
        let memory_tools = memory.as_ref().map(|m| {
            let mut tools = m.tools();
            let write_back = Arc::new(RulesWriteBack {
                gw: Arc::clone(&ctx),
            });
            tools.on_indexed = Some(Arc::new(crate::ops::IndexingProgress::new(
                Arc::clone(&metrics),
                write_back,
            ))
                as Arc<dyn bridle_memory::tools::IndexListener>);
            tools.access = Some(Arc::new(AgentProjects {
                gw: Arc::clone(&ctx),
            })
                as Arc<dyn bridle_memory::tools::ProjectAccess>);
            tools
        });
        let app = crate::app::build_app_observed(&ctx, memory_tools, Some(&metrics))?;
        #[cfg(feature = "kanboard")]
        register_kanboard(&ctx, &app, Arc::clone(&secrets))?;
        let upstreams = UpstreamPool::start(
            &ctx,
            app.tools(),
            secrets,
            self.connect_timeout,
            forward_hook,
        )
        .map_err(|e| {
            GatewayError::Config(ConfigError::Invalid {
                file: self.data_dir.join("bridle.yaml"),
                message: e.to_string(),
            })
        })?;
        let vendor_feed = match &ctx.config.vendor_feed {
            Some(feed) => Some(Arc::new(
                bridle_rules::vendor::VendorFeed::new(feed.clone()).map_err(|e| {
                    GatewayError::Config(ConfigError::Invalid {
                        file: self.data_dir.join("bridle.yaml"),
                        message: format!("vendor_feed: {e} [{}]", e.code()),
                    })
                })?,
            )),
            None => None,
        };
        Ok(Gateway {
            data_dir: self.data_dir,
            vendor_feed,
            feed_runs: crate::feed::FeedRuns::default(),
            ctx,
            app,
            auth,
            upstreams: Arc::new(upstreams),
            vault,
            key_created,
            has_memory: memory.is_some(),
            memory,
            watch_every: self.watch_every,
            admin: self.admin,
            metrics,
            shutdown_grace: self.shutdown_grace,
            session_store,
            #[cfg(feature = "traces")]
            telemetry: self.telemetry,
        })
    }

    /// What forwarded calls carry from their caller: a client span's context with traces on,
    /// else the caller's own trace context, unchanged.
    fn forward_hook(&self) -> Arc<dyn kberg_server::aggregate::ForwardHook> {
        #[cfg(feature = "traces")]
        if self.telemetry.is_some() {
            return Arc::new(crate::telemetry::TraceHook);
        }
        Arc::new(kberg_server::aggregate::CarryMeta::keys(
            crate::telemetry::TRACE_META_KEYS,
        ))
    }
}

/// Where 2025-11-25 sessions are kept for the other replicas: the PostgreSQL state database
/// unless `resumable` is off; none on the embedded default.
fn session_store(
    database: &crate::db::StateDatabase,
    resumable: bool,
) -> Result<Option<Arc<dyn kberg_server::SessionStore>>, GatewayError> {
    #[cfg(feature = "postgres")]
    if let Some(db) = database.postgres().filter(|_| resumable) {
        let store = crate::sessions::postgres::PgSessionStore::open(db.clone())?;
        return Ok(Some(Arc::new(store)));
    }
    let _ = (database, resumable);
    Ok(None)
}

/// The assembled gateway.
pub struct Gateway {
    data_dir: PathBuf,
    ctx: Arc<GatewayContext>,
    app: McpApp,
    auth: BridleAuth,
    upstreams: Arc<UpstreamPool>,
    vault: Arc<Vault>,
    key_created: Option<PathBuf>,
    has_memory: bool,
    memory: Option<bridle_memory::MemoryService>,
    watch_every: Duration,
    admin: Option<AdminListen>,
    vendor_feed: Option<Arc<bridle_rules::vendor::VendorFeed>>,
    /// One feed run at a time, shared by the interval runs and the admin API's runs on demand.
    feed_runs: crate::feed::FeedRuns,
    metrics: Arc<GatewayMetrics>,
    shutdown_grace: Duration,
    session_store: Option<Arc<dyn kberg_server::SessionStore>>,
    #[cfg(feature = "traces")]
    telemetry: Option<crate::telemetry::Telemetry>,
}

/// Registers the Kanboard tools when `bridle.yaml` has a `kanboard:` section: credentials from
/// `secrets` per call, each agent's Kanboard projects the mappings of its Bridle projects whose
/// `permissions.<type>.kanboard.read` is set, and those it may change the mappings of the ones
/// among them that also set `kanboard.write`. Both are checked per project: the `kanboard.write`
/// grant the gate checks is the union over the agent's projects, so a project that allows only
/// reading would otherwise be written to through another's grant.
#[cfg(feature = "kanboard")]
fn register_kanboard(
    ctx: &Arc<GatewayContext>,
    app: &McpApp,
    secrets: Arc<dyn SecretSource>,
) -> Result<(), GatewayError> {
    use crate::kanboard::{KanboardClient, KanboardTools, VaultAccess};
    let Some(config) = ctx.config.kanboard.clone() else {
        return Ok(());
    };
    let invalid = |message: String| {
        GatewayError::Config(ConfigError::Invalid {
            file: PathBuf::from("bridle.yaml"),
            message: format!("kanboard: {message}"),
        })
    };
    for agent in config.agents.keys() {
        if !ctx.config.agents.contains_key(agent) {
            return Err(invalid(format!(
                "`agents.{agent}` is not a configured agent"
            )));
        }
    }
    let url = config.url.parse().map_err(|e| {
        invalid(format!(
            "`url` {}: {e}",
            bridle_rules::redact_url(&config.url)
        ))
    })?;
    let client = KanboardClient::new(url, Duration::from_secs(config.timeout_secs.max(1)))
        .map_err(|e| invalid(e.to_string()))?;
    let gw = Arc::clone(ctx);
    let projects: crate::kanboard::BridleProjects = Arc::new(move |caller| {
        let Some(agent) = gw.agent(&caller.principal().id) else {
            return Vec::new();
        };
        gw.store
            .projects()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| agent.may_use(p))
            .filter_map(|name| {
                let rw = gw
                    .store
                    .load(&name)
                    .ok()?
                    .document
                    .permissions_of(&agent.agent_type)
                    .kanboard;
                // Writing needs reading too: every write first reads the task or project it
                // changes.
                rw.read.then_some(crate::kanboard::BridleProject {
                    name,
                    write: rw.write,
                })
            })
            .collect()
    });
    let access = VaultAccess::new(config, secrets, projects);
    let private = kberg_core::ToolRegistry::new();
    crate::kanboard::register(&private, KanboardTools::new(client, Arc::new(access)))?;
    crate::namespace::mount(app.tools(), &private, "kanboard")?;
    Ok(())
}

/// Opens the vault of a data directory: the master key the configuration names (it must
/// exist), else `<data>/vault.key`, created on first start. With `database: postgres://...` the
/// vault lives in that database, shared by every replica (give each the same master key), and
/// `database_password` must be a `docker:` or `file:` reference. Returns the vault and, when the key
/// was just created, its path (say so to the operator: it must be backed up).
pub fn open_vault(
    data_dir: &Path,
    config: &GatewayConfig,
) -> Result<(Arc<Vault>, Option<PathBuf>), GatewayError> {
    let (key, created) = match &config.vault.master_key {
        Some(path) => (MasterKey::load(path)?, None),
        None => {
            let path = crate::vault::default_key_path(data_dir);
            let (key, origin) = MasterKey::load_or_create(&path)?;
            let created = matches!(origin, KeyOrigin::Created).then_some(path);
            (key, created)
        }
    };
    let vault_config = vault_config(data_dir, config);
    #[cfg(feature = "postgres")]
    if crate::db::wants_postgres(config) {
        // Several replicas share this vault: each must hold the same master key (the same key
        // file or Docker secret), or it is refused with `wrong_master_key`.
        let db = crate::db::connect_postgres(data_dir, config, &vault_config)?;
        let vault = Vault::open_postgres(db, &key, vault_config)?;
        return Ok((Arc::new(vault), created));
    }
    let vault = Vault::open(
        &data_dir.join(crate::vault::DEFAULT_DB_FILE),
        &key,
        vault_config,
    )?;
    Ok((Arc::new(vault), created))
}

/// The vault's settings for a data directory: its read-only sources (the secrets folder the
/// configuration names, the Docker secrets folder), which also hold `database_password`.
pub fn vault_config(data_dir: &Path, config: &GatewayConfig) -> VaultConfig {
    let mut vault_config = VaultConfig::for_data_dir(data_dir);
    vault_config.secrets_dir = Some(config.secrets_path(data_dir));
    if let Some(d) = &config.vault.docker_secrets_dir {
        vault_config.docker_secrets_dir = d.clone();
    }
    vault_config
}

/// Issues a vault token to every configured agent that takes one from the vault (no
/// `token_secret`) and has never had one, and returns them: the only time these tokens exist in
/// the clear. Call it on a data directory's first start ([`InitReport::created`]) and show each
/// token to the operator once. An agent whose tokens were all revoked has had one, so it gets
/// none here: a revocation survives a restart, and re-issuing is `bridle agents token issue`.
///
/// [`InitReport::created`]: crate::config::InitReport::created
pub fn issue_first_tokens(
    vault: &Vault,
    config: &GatewayConfig,
    actor: &str,
) -> Result<Vec<crate::vault::IssuedToken>, GatewayError> {
    let had = vault.agents_with_tokens()?;
    let mut issued = Vec::new();
    for (name, agent) in &config.agents {
        if agent.token_secret.is_some() || had.iter().any(|a| a == name) {
            continue;
        }
        issued.push(vault.set_agent_token(name, actor)?);
    }
    Ok(issued)
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("data_dir", &self.data_dir)
            .field("upstreams", &self.upstreams)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// The vendor-guidance feed `bridle.yaml` configures, if any: run on its interval while the
    /// gateway serves, and on demand through [`VendorFeed::run_configured`].
    ///
    /// [`VendorFeed::run_configured`]: bridle_rules::vendor::VendorFeed::run_configured
    pub fn vendor_feed(&self) -> Option<&Arc<bridle_rules::vendor::VendorFeed>> {
        self.vendor_feed.as_ref()
    }

    /// The rules context (store, renderer, configuration).
    pub fn context(&self) -> &Arc<GatewayContext> {
        &self.ctx
    }

    /// The MCP app (its registries).
    pub fn app(&self) -> &McpApp {
        &self.app
    }

    /// The upstream MCP servers.
    pub fn upstreams(&self) -> &UpstreamPool {
        &self.upstreams
    }

    /// The vault.
    pub fn vault(&self) -> &Arc<Vault> {
        &self.vault
    }

    /// Where the master key was created, when this start created it.
    pub fn master_key_created(&self) -> Option<&Path> {
        self.key_created.as_deref()
    }

    /// The admin API's state over this gateway (its rules store and upstreams), admitting the
    /// admins `credentials` accept, as `bridle.yaml`'s `admin:` section says (`read_only`,
    /// `watchers`, `login_limits`); serve it with [`crate::admin::AdminServer`].
    pub fn admin_state(&self, credentials: Arc<dyn AdminCredentials>) -> crate::admin::AdminState {
        let section = &self.ctx.config.admin;
        let mut state = crate::admin::AdminState::new(Arc::clone(&self.ctx), credentials)
            .read_only(section.read_only)
            .login_limits(login_limits(&section.login_limits));
        for watcher in &section.watchers {
            state = state.watcher(watcher.clone());
        }
        state = state
            .integrations(Arc::clone(&self.upstreams) as Arc<dyn crate::admin::IntegrationStatus>)
            .vault(Arc::clone(&self.vault))
            .metrics(Arc::clone(&self.metrics));
        if let Some(feed) = &self.vendor_feed {
            state = state
                .vendor_feed(Arc::clone(feed))
                .feed_runs(self.feed_runs.clone());
        }
        match &self.memory {
            Some(m) => state.memory(m.clone()),
            None => state,
        }
    }

    /// The web panel as `bridle.yaml`'s `admin:` section describes it: `behind_tls` and
    /// `allowed_origins` (the rest as [`crate::panel::PanelConfig::default`]; its failed
    /// log-ins count in the admin API's throttle, within `admin.login_limits`, see
    /// [`Gateway::admin_state`]). The admin listener serves it so unless
    /// [`BoundGateway::panel`] says otherwise.
    #[cfg(feature = "panel")]
    pub fn panel_config(&self) -> crate::panel::PanelConfig {
        let section = &self.ctx.config.admin;
        let mut config = crate::panel::PanelConfig::default().behind_tls(section.behind_tls);
        for origin in &section.allowed_origins {
            config = config.allow_origin(origin);
        }
        config
    }

    /// Also serves the admin API on its own loopback `addr` when bound, admitting the admins
    /// `credentials` accept (as [`GatewayBuilder::admin`], once the vault is open: for
    /// credentials kept in it).
    pub fn with_admin(mut self, addr: SocketAddr, credentials: Arc<dyn AdminCredentials>) -> Self {
        self.admin = Some(AdminListen { addr, credentials });
        self
    }

    /// The gateway's metrics (served at `/metrics`).
    pub fn metrics(&self) -> &Arc<GatewayMetrics> {
        &self.metrics
    }

    /// Whether memory's tools are served.
    pub fn has_memory(&self) -> bool {
        self.has_memory
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Listens on `addr` (port 0 picks a free one). Refused unless `addr` is loopback or the
    /// configuration names its allowed Host names and Origins.
    pub async fn bind(self, addr: SocketAddr) -> Result<BoundGateway, GatewayError> {
        let invalid = |message: String| {
            GatewayError::Config(ConfigError::Invalid {
                file: self.data_dir.join("bridle.yaml"),
                message,
            })
        };
        self.ctx.config.check_exposure(addr).map_err(invalid)?;
        let mut http = HttpConfig::new(addr).path(MCP_PATH).auth(self.auth.clone());
        if let Some(store) = &self.session_store {
            http = http.session_store(Arc::clone(store));
        }
        if !self.ctx.config.allowed_hosts.is_empty() {
            http = http.allowed_hosts(self.ctx.config.allowed_hosts.iter().cloned());
        }
        if !self.ctx.config.allowed_origins.is_empty() {
            http = http.allowed_origins(self.ctx.config.allowed_origins.iter().cloned());
        }
        let max_body = http.limits.max_body_bytes;
        let ops = Arc::new(OpsState {
            ctx: Arc::clone(&self.ctx),
            vault: Arc::clone(&self.vault),
            upstreams: Arc::clone(&self.upstreams),
            metrics: Arc::clone(&self.metrics),
            optional_upstreams: self
                .ctx
                .config
                .health
                .optional_upstreams
                .iter()
                .cloned()
                .collect(),
            draining: CancellationToken::new(),
        });
        let metrics = Arc::clone(&self.metrics);
        let draining = ops.draining.clone();
        let routes = crate::ops::routes(Arc::clone(&ops));
        let server = HttpServer::bind(self.app.clone(), http)
            .await
            .map_err(|e| {
                GatewayError::Serve(match e {
                    kberg_server::ServerError::Bind { addr, source } => listen_failed(
                        "the MCP endpoint",
                        addr,
                        &source,
                        "--listen or `listen:` in bridle.yaml",
                    ),
                    e => format!("the MCP endpoint cannot listen on {addr}: {e}"),
                })
            })?
            .map_router(|r| {
                // A session id is listed once the transport accepted it, so made-up ids
                // (answered 404) take no place among the agent's sessions.
                let r = crate::sessions::track(r, self.ctx.sessions.clone()).merge(routes);
                #[cfg(feature = "traces")]
                let r = match &self.telemetry {
                    Some(_) => crate::telemetry::http::trace_requests(r, MCP_PATH, max_body),
                    None => r,
                };
                metrics.instrument(r, MCP_PATH, max_body, draining)
            });
        if let Some(a) = &self.admin {
            self.check_admins_are_not_agents(a.credentials.as_ref())?;
        }
        let admin = match &self.admin {
            Some(a) => {
                let server =
                    AdminServer::bind(a.addr, self.admin_state(Arc::clone(&a.credentials)))
                        .await
                        .map_err(|e| {
                            GatewayError::Serve(match e {
                                crate::admin::AdminServeError::Io { addr, source } => {
                                    listen_failed(
                                        "the admin API",
                                        addr,
                                        &source,
                                        "`admin.listen:` in bridle.yaml",
                                    )
                                }
                                e => e.to_string(),
                            })
                        })?;
                #[cfg(feature = "panel")]
                let server = server.panel(Some(self.panel_config()));
                Some(server)
            }
            None => None,
        };
        Ok(BoundGateway {
            gateway: self,
            server,
            admin,
            ops,
        })
    }
}

/// Why `what` cannot listen on `addr`, in words, and `setting`, the one that moves it: the
/// address named once, and the likely cause of the common failures.
fn listen_failed(what: &str, addr: SocketAddr, source: &std::io::Error, setting: &str) -> String {
    let why = match source.kind() {
        std::io::ErrorKind::AddrInUse => {
            "the address is in use (another gateway, or another program, listens there)"
        }
        std::io::ErrorKind::AddrNotAvailable => "no network interface of this machine has it",
        std::io::ErrorKind::PermissionDenied => {
            "not permitted (a port below 1024 needs privileges)"
        }
        _ => "",
    };
    let why = if why.is_empty() {
        source.to_string()
    } else {
        format!("{why}: {source}")
    };
    format!("{what} cannot listen on {addr}: {why}; choose another address with {setting}")
}

impl Gateway {
    /// An agent's token must never open the admin API: refuse to start when an admin
    /// credential accepts one (named by agent, never by token).
    fn check_admins_are_not_agents(
        &self,
        credentials: &dyn AdminCredentials,
    ) -> Result<(), GatewayError> {
        let secrets = self.ctx.config.secrets_path(&self.data_dir);
        // Vault-issued agent tokens exist here only as keyed hashes, so only token files can be
        // compared.
        for (name, agent) in &self.ctx.config.agents {
            let Some(secret) = &agent.token_secret else {
                continue;
            };
            let token = crate::config::read_secret(&secrets, secret)?;
            if credentials.verify(&token).is_some() {
                return Err(GatewayError::Config(ConfigError::Invalid {
                    file: self.data_dir.join("bridle.yaml"),
                    message: format!(
                        "agent `{name}`'s token is also an admin credential; give admins their own"
                    ),
                }));
            }
        }
        Ok(())
    }
}

/// `admin.login_limits` of `bridle.yaml` as the admin listener counts them (the API's bearer
/// tokens and the panel's log-ins, in one table).
fn login_limits(section: &LoginLimitsSection) -> LoginLimits {
    LoginLimits::new(
        section.per_address,
        section.per_credential,
        Duration::from_secs(section.window_secs),
    )
}

/// A gateway listening on its address.
pub struct BoundGateway {
    gateway: Gateway,
    server: HttpServer,
    admin: Option<AdminServer>,
    ops: Arc<OpsState>,
}

impl std::fmt::Debug for BoundGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundGateway")
            .field("addr", &self.server.local_addr())
            .finish_non_exhaustive()
    }
}

impl BoundGateway {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    /// The MCP endpoint's URL.
    pub fn url(&self) -> String {
        format!("http://{}{MCP_PATH}", self.server.local_addr())
    }

    /// Serves the web panel on the admin listener with this configuration (by default with
    /// [`Gateway::panel_config`], `bridle.yaml`'s); `None` turns it off. Without an admin
    /// listener this does nothing.
    #[cfg(feature = "panel")]
    pub fn panel(mut self, config: Option<crate::panel::PanelConfig>) -> Self {
        self.admin = self.admin.map(|a| a.panel(config));
        self
    }

    /// The admin API's base URL, when [`GatewayBuilder::admin`] asked for it.
    pub fn admin_url(&self) -> Option<String> {
        self.admin.as_ref().map(AdminServer::url)
    }

    /// The gateway.
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// What `/healthz`, `/readyz` and `/metrics` read.
    pub fn ops(&self) -> &Arc<OpsState> {
        &self.ops
    }

    /// Serves until `shutdown` completes, then shuts down gracefully: `/readyz` fails and new
    /// MCP requests are refused (`503 shutting_down`) at once, in-flight calls get the
    /// shutdown grace to finish, then every session and SSE stream is ended, the admin API and
    /// the watcher stop, and the upstream connections close.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), GatewayError> {
        let stop = self.server.shutdown_token();
        let g = &self.gateway;
        let shutdown = drain(
            shutdown,
            self.ops.draining.clone(),
            Arc::clone(&g.metrics),
            g.shutdown_grace,
        );
        let watcher = tokio::spawn(crate::resources::watch(
            Arc::clone(&g.ctx),
            g.app.resources().clone(),
            g.data_dir.join("projects"),
            g.watch_every,
            stop.clone(),
        ));
        let feed = g.vendor_feed.clone().map(|feed| {
            let ctx = Arc::clone(&g.ctx);
            let stopped = stop.clone().cancelled_owned();
            let runs = g.feed_runs.clone();
            tokio::spawn(crate::feed::run_every(ctx, feed, runs, stopped))
        });
        #[cfg(feature = "postgres")]
        let vault_changes = tokio::spawn(crate::db::follow_vault_changes(
            Arc::clone(&g.ctx),
            Arc::clone(&g.vault),
            stop.clone(),
        ));
        let sessions = tokio::spawn(g.ctx.sessions.clone().follow(stop.clone()));
        let admin = self
            .admin
            .map(|a| tokio::spawn(a.run(stop.clone().cancelled_owned())));
        let served = self.server.run(shutdown).await;
        stop.cancel();
        let _ = watcher.await;
        #[cfg(feature = "postgres")]
        let _ = vault_changes.await;
        if let Some(feed) = feed {
            let _ = feed.await;
        }
        if let Some(admin) = admin {
            match admin.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "the admin API stopped with an error"),
                Err(e) => tracing::warn!(error = %e, "the admin API task failed"),
            }
        }
        // The sessions registry's last changes reach the ledger before the process ends.
        let _ = sessions.await;
        self.gateway.upstreams.shutdown().await;
        #[cfg(feature = "traces")]
        if let Some(t) = &self.gateway.telemetry {
            t.flush();
        }
        // The rules store and the vault commit every change in its own transaction (and the
        // sessions registry wrote its last changes above), so nothing is left to write; their connections close as the gateway is dropped.
        tracing::info!("the gateway has stopped");
        served.map_err(|e| GatewayError::Serve(format!("serving failed: {e}")))
    }
}

/// Waits for `shutdown`, then marks the gateway draining and waits (up to `grace`) for the
/// in-flight MCP requests to finish.
async fn drain(
    shutdown: impl Future<Output = ()> + Send + 'static,
    draining: CancellationToken,
    metrics: Arc<GatewayMetrics>,
    grace: Duration,
) {
    shutdown.await;
    draining.cancel();
    let in_flight = metrics.in_flight();
    tracing::info!(
        in_flight,
        grace_ms = grace.as_millis() as u64,
        "shutting down: finishing in-flight calls"
    );
    // A grace past what an instant can hold waits as long as the longest the CLI accepts.
    let now = tokio::time::Instant::now();
    let deadline = now
        .checked_add(grace)
        .unwrap_or_else(|| now + Duration::from_secs(86_400));
    while metrics.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = metrics.in_flight();
    if left > 0 {
        tracing::warn!(
            in_flight = left,
            "the shutdown grace passed with calls still in flight; ending them"
        );
    }
}
