//! The gateway's configuration and its data directory.
//!
//! A data directory holds everything Bridle keeps: `bridle.yaml` (this configuration),
//! `projects/` (one rules document per project), `bridle.db` (the review queue and change log),
//! `secrets/` (one file per secret, Docker-secrets style) and an optional `templates/` folder.
//! The configuration names agents and the projects each may use; an agent's bearer token is
//! never in it, only the name of the secret file that holds it. [`init_data_dir`] lays out a
//! working directory on first start, so `bridle serve` runs with one command.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bridle_rules::{RulesDocument, RulesError, check_name};
use serde::{Deserialize, Serialize};

/// Default address: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7878";
/// The MCP endpoint path.
pub const MCP_PATH: &str = "/mcp";

/// The configuration file, `<data>/bridle.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Where `bridle serve` listens: loopback by default; another address needs
    /// `allowed_hosts` and `allowed_origins`.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The secrets folder, relative to the data directory unless absolute.
    #[serde(default = "default_secrets")]
    pub secrets_dir: PathBuf,
    /// A templates folder (overrides and extra agents), relative to the data directory.
    #[serde(default = "default_templates")]
    pub templates_dir: PathBuf,
    /// The agents that may connect, by name.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentConfig>,
    /// Bridle's memory (session memory and pattern-example search); off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<crate::memory::MemorySection>,
    /// The vault: where its master key is (default: `vault.key` in the data directory, created
    /// with mode 0600 on first start) and where `docker:` secret references are read.
    #[serde(default, skip_serializing_if = "VaultSection::is_default")]
    pub vault: VaultSection,
    /// The audit log of every change and tool call (on by default, in `audit.db`).
    #[serde(default, skip_serializing_if = "AuditSection::is_default")]
    pub audit: AuditSection,
    /// The admin API: where it listens and where its credential comes from.
    #[serde(default, skip_serializing_if = "AdminSection::is_default")]
    pub admin: AdminSection,
    /// Kanboard behind the gateway (a build with the `kanboard` feature): its JSON-RPC URL, each
    /// agent's credential in the vault, and which Kanboard projects each Bridle project maps to.
    #[cfg(feature = "kanboard")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kanboard: Option<crate::kanboard::KanboardConfig>,
    /// Upstream MCP servers the gateway routes agents to, by namespace (their tools appear as
    /// `<namespace>__<tool>`); see [`crate::upstreams`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstreams: BTreeMap<String, crate::upstreams::UpstreamSection>,
    /// The vendor-guidance feed: each agent profile's published guidance pages, fetched on an
    /// interval (and on demand) into the review queues as vendor-seeded proposals; see
    /// [`bridle_rules::vendor::VendorFeedConfig`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor_feed: Option<bridle_rules::vendor::VendorFeedConfig>,
    /// Host names (with port, as clients send them in `Host`) the MCP endpoint answers to.
    /// Needed, with `allowed_origins`, to listen on an address other than loopback (in a
    /// container, behind a reverse proxy); on loopback the loopback names are allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// Origins (`https://panel.example.org`) browsers may call the endpoint from; requests with
    /// any other `Origin` are refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
    /// What `/readyz` requires (see [`crate::ops`]).
    #[serde(default, skip_serializing_if = "HealthSection::is_default")]
    pub health: HealthSection,
    /// Where the rules store keeps its state: absent (or `sqlite`) for the embedded SQLite file
    /// of the data directory, the default; `postgres://user@host:port/dbname` for PostgreSQL (a
    /// build with the `postgres` feature), which several gateway replicas share. See
    /// [`crate::db`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
    /// The PostgreSQL password as a secret reference (`docker:NAME`, `file:NAME` or
    /// `vault:NAME`), never written in the URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_password: Option<String>,
    /// How long a PostgreSQL statement or transaction step waits for the server's reply before
    /// it fails with `database_error` and its connection is closed, in seconds (1 to
    /// [`MAX_STATEMENT_DEADLINE_SECS`]); absent: bridle-rules' `STATEMENT_DEADLINE`, two
    /// minutes. Raise it for a server with slow disks or long migrations, lower it to fail
    /// sooner on a frozen one. Every store in the database (rules, vault, audit log, tickets,
    /// sessions) shares it; the embedded SQLite files ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_statement_deadline_secs: Option<u64>,
    /// OpenTelemetry traces over OTLP (a build with feature `traces`); off when absent. See
    /// [`crate::telemetry`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traces: Option<crate::telemetry::TracesSection>,
}

/// The `health:` section of `bridle.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthSection {
    /// Upstream namespaces `/readyz` does not wait for; every other enabled upstream must be
    /// connected for the gateway to be ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub optional_upstreams: Vec<String>,
    /// How long, in seconds, `/readyz` reuses its last round of checks: the probe of each HTTP
    /// upstream's port and the `rules_store` and `vault` checks (default 1, at most
    /// [`MAX_PROBE_CACHE_SECS`]; 0 reuses a round only for the requests that waited on it).
    /// Requests that arrive while a round runs always share it. A poller hammering the public
    /// endpoint so opens at most one connection per upstream, and asks each database once, per
    /// period.
    #[serde(
        default = "default_probe_cache_secs",
        skip_serializing_if = "is_default_probe_cache_secs"
    )]
    pub probe_cache_secs: u64,
}

/// The longest `health.probe_cache_secs`: readiness should notice a vanished upstream soon.
pub const MAX_PROBE_CACHE_SECS: u64 = 60;

/// The longest `database_statement_deadline_secs` may be: a day. A statement that may take
/// longer is a server that is gone, and a deadline past it would hold a pool connection (and
/// every request waiting for one) for as long.
pub const MAX_STATEMENT_DEADLINE_SECS: u64 = 86_400;

fn default_probe_cache_secs() -> u64 {
    1
}

fn is_default_probe_cache_secs(secs: &u64) -> bool {
    *secs == default_probe_cache_secs()
}

impl Default for HealthSection {
    fn default() -> Self {
        Self {
            optional_upstreams: Vec::new(),
            probe_cache_secs: default_probe_cache_secs(),
        }
    }
}

impl HealthSection {
    fn is_default(&self) -> bool {
        self == &Self::default()
    }
}

/// The `vault:` section of `bridle.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultSection {
    /// The master key file. When set it must exist (a Docker secret such as
    /// `/run/secrets/bridle_master_key`); when not, `vault.key` in the data directory is used,
    /// and created on first start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_key: Option<PathBuf>,
    /// The folder `docker:NAME` references read (default `/run/secrets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_secrets_dir: Option<PathBuf>,
}

impl VaultSection {
    fn is_default(&self) -> bool {
        self == &Self::default()
    }
}

/// The `audit:` section of `bridle.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditSection {
    /// Whether the gateway records (default `true`). Off, tool calls and changes leave only
    /// log lines.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The database, relative to the data directory unless absolute (default `audit.db`).
    #[serde(default = "default_audit_path")]
    pub path: PathBuf,
    /// Remove entries older than this many days (default: keep them). At least 1: 0 would
    /// remove every entry at each pass, and is refused at load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_days: Option<u64>,
    /// Keep at most this many entries (default: no limit). At least 1: 0 would remove every
    /// entry but the pass's own, and is refused at load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<u64>,
    /// Commit each batch to the disk before going on (survives power loss; slower).
    #[serde(default)]
    pub fsync: bool,
}

impl Default for AuditSection {
    fn default() -> Self {
        Self {
            enabled: true,
            path: default_audit_path(),
            max_age_days: None,
            max_entries: None,
            fsync: false,
        }
    }
}

impl AuditSection {
    fn is_default(&self) -> bool {
        self == &Self::default()
    }

    /// Refuses a retention limit of 0, which would empty the log at the next pass (an operator
    /// may well mean "no limit" by it: that is leaving the key out).
    fn check(&self) -> Result<(), String> {
        for (key, value) in [
            ("max_age_days", self.max_age_days),
            ("max_entries", self.max_entries),
        ] {
            if value == Some(0) {
                return Err(format!(
                    "audit.{key} is 0, which would remove the whole audit log at the next retention pass; give at least 1, or leave it out to keep every entry"
                ));
            }
        }
        Ok(())
    }

    /// The database file of a data directory.
    pub fn db_path(&self, data_dir: &Path) -> PathBuf {
        data_dir.join(&self.path)
    }

    /// The log's settings: its file, fsync and retention.
    pub fn log_config(&self, data_dir: &Path) -> crate::audit::AuditConfig {
        let mut retention = crate::audit::Retention::keep_all();
        if let Some(days) = self.max_age_days {
            retention =
                retention.with_max_age(std::time::Duration::from_secs(days.saturating_mul(86_400)));
        }
        if let Some(n) = self.max_entries {
            retention = retention.with_max_entries(n);
        }
        crate::audit::AuditConfig::new(self.db_path(data_dir))
            .with_fsync(self.fsync)
            .with_retention(retention)
    }
}

/// The `admin:` section of `bridle.yaml`: the admin API `bridle serve` starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSection {
    /// Whether `bridle serve` starts the admin API (default `true`).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Where it listens, loopback only. Default: 127.0.0.1 on the port after the MCP
    /// endpoint's (7879 beside 7878; a free port when the endpoint's is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// The admin's name recorded in the audit log (default `admin`).
    #[serde(default = "default_admin_name")]
    pub name: String,
    /// Where the admin credential comes from, instead of the vault: a file (a Docker secret
    /// such as `/run/secrets/bridle_admin_token`) holding the token. Without it the vault
    /// holds the credential, created and printed once on first start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// The admin API only reads (default `false`): every change through it, and so through the
    /// web panel and the command line, is refused 403 `read_only`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub read_only: bool,
    /// Admins who may only read, by name, through the API and the panel alike.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watchers: Vec<String>,
    /// How many refused admin credentials are tolerated (the API's bearer tokens and the
    /// panel's log-ins, counted together) before the admin listener answers 429 for a while.
    #[serde(default, skip_serializing_if = "LoginLimitsSection::is_default")]
    pub login_limits: LoginLimitsSection,
    /// Browsers reach the web panel over TLS, through a TLS-terminating reverse proxy (default
    /// `false`): its session cookie is then `__Host-` prefixed and `Secure`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub behind_tls: bool,
    /// Public origins (`https://bridle.example.org[:port]`) the web panel is reached from
    /// besides the admin listener's own address: a reverse proxy's. The panel accepts changes
    /// sent from them, and the admin listener answers requests whose `Host` is theirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
}

/// `admin.login_limits` in `bridle.yaml`: refused admin credentials tolerated within a sliding
/// window, per client address and per credential tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginLimitsSection {
    /// Failures from one client address (default 10).
    #[serde(default = "default_per_address")]
    pub per_address: usize,
    /// Failures with one and the same credential, from any address (default 5).
    #[serde(default = "default_per_credential")]
    pub per_credential: usize,
    /// How long a failure counts, in seconds (default 900: 15 minutes).
    #[serde(default = "default_window_secs")]
    pub window_secs: u64,
}

impl Default for LoginLimitsSection {
    fn default() -> Self {
        Self {
            per_address: default_per_address(),
            per_credential: default_per_credential(),
            window_secs: default_window_secs(),
        }
    }
}

impl LoginLimitsSection {
    fn is_default(&self) -> bool {
        self == &Self::default()
    }
}

fn default_per_address() -> usize {
    10
}
fn default_per_credential() -> usize {
    5
}
fn default_window_secs() -> u64 {
    15 * 60
}
fn is_false(b: &bool) -> bool {
    !b
}

/// Whether `origin` is `http(s)://host[:port]` (an IPv6 host in brackets), nothing more.
pub(crate) fn is_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"))
    else {
        return false;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '@', '?', '#']) || rest.contains(char::is_whitespace) {
        return false;
    }
    let host_end = if rest.starts_with('[') {
        rest.find(']').map(|i| i + 1)
    } else {
        Some(rest.find(':').unwrap_or(rest.len()))
    };
    let Some(end) = host_end else {
        return false;
    };
    let (host, port) = rest.split_at(end);
    !host.trim_matches(['[', ']']).is_empty()
        && (port.is_empty()
            || port
                .strip_prefix(':')
                .is_some_and(|p| p.parse::<u16>().is_ok()))
}

/// Whether `origin` is an entry the MCP endpoint's allow-list reads: `null`, or
/// `scheme://host[:port]` with an optional trailing `/`, `:*` standing for any port.
fn is_endpoint_origin(origin: &str) -> bool {
    let origin = origin.trim();
    if origin == "null" {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if scheme.is_empty() || rest.contains('/') {
        return false;
    }
    match rest.strip_suffix(":*") {
        Some(host) => kberg_server::host_and_port(host).is_some_and(|(_, port)| port.is_none()),
        None => kberg_server::host_and_port(rest).is_some(),
    }
}

impl Default for AdminSection {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: None,
            name: default_admin_name(),
            token_file: None,
            read_only: false,
            watchers: Vec::new(),
            login_limits: LoginLimitsSection::default(),
            behind_tls: false,
            allowed_origins: Vec::new(),
        }
    }
}

impl AdminSection {
    fn is_default(&self) -> bool {
        self == &Self::default()
    }

    /// Checks the names, limits and origins (the listen address is checked with the MCP one).
    fn check(&self) -> Result<(), String> {
        check_name("admin", &self.name).map_err(|e| e.to_string())?;
        for watcher in &self.watchers {
            check_name("admin", watcher).map_err(|e| format!("admin.watchers: {e}"))?;
        }
        let l = &self.login_limits;
        if l.per_address == 0 || l.per_credential == 0 || l.window_secs == 0 {
            return Err(
                "admin.login_limits: per_address, per_credential and window_secs must be greater than zero"
                    .into(),
            );
        }
        if let Some(origin) = self.allowed_origins.iter().find(|o| !is_origin(o)) {
            return Err(format!(
                "admin.allowed_origins: `{origin}` is not `http(s)://host[:port]`"
            ));
        }
        Ok(())
    }

    /// Where the admin API listens beside an MCP endpoint on `mcp`; a non-loopback address is
    /// refused.
    pub fn listen_addr(&self, mcp: SocketAddr) -> Result<SocketAddr, String> {
        let addr: SocketAddr = match &self.listen {
            Some(l) => l.parse().map_err(|e| format!("admin.listen `{l}`: {e}"))?,
            None => {
                let port = match mcp.port() {
                    0 => 0,
                    p => p
                        .checked_add(1)
                        .ok_or_else(|| format!("set admin.listen: there is no port after {p}"))?,
                };
                SocketAddr::from(([127, 0, 0, 1], port))
            }
        };
        if !addr.ip().is_loopback() {
            return Err(format!(
                "admin.listen {addr} is not loopback: the admin API listens on loopback only (put a TLS-terminating proxy in front to reach it from elsewhere)"
            ));
        }
        Ok(addr)
    }
}

fn yes() -> bool {
    true
}
fn default_audit_path() -> PathBuf {
    PathBuf::from("audit.db")
}
fn default_admin_name() -> String {
    "admin".to_string()
}

fn default_listen() -> String {
    DEFAULT_LISTEN.to_string()
}
fn default_secrets() -> PathBuf {
    PathBuf::from("secrets")
}
fn default_templates() -> PathBuf {
    PathBuf::from("templates")
}

/// One agent that may connect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The agent type (`claude`, `codex`, ...): which rendering it gets and which
    /// `permissions` entry of a project applies to it. When omitted, it is taken from the
    /// agent's name (`claude-laptop` is a `claude`).
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    pub agent_type: String,
    /// The name of the file in the secrets folder that holds its bearer token. Without one, the
    /// agent authenticates with a token the vault issued (`bridle agents token issue NAME`),
    /// which is stored only as a keyed hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret: Option<String>,
    /// The projects it may use; empty means every project.
    #[serde(default)]
    pub projects: Vec<String>,
    /// Set when `type` was not written and was guessed from the agent's name. Rendering then
    /// prefers the type the connected client names itself as (MCP `clientInfo`); permissions
    /// always use `agent_type`, since a client's self-report is never a credential.
    #[serde(skip)]
    pub type_guessed: bool,
}

impl AgentConfig {
    /// Whether this agent may use a project.
    pub fn may_use(&self, project: &str) -> bool {
        self.projects.is_empty() || self.projects.iter().any(|p| p == project)
    }
}

/// Checks that the setting `field` (`kanboard.url`, `memory.embedder.ollama.url`, ...) is an
/// `http://` or `https://` URL with a host, as the configuration is read rather than when the
/// gateway first uses it. The message never quotes the URL: it may carry a credential.
pub(crate) fn check_http_url(field: &str, url: &str) -> Result<(), String> {
    let parsed =
        reqwest::Url::parse(url.trim()).map_err(|e| format!("{field} is not a valid URL ({e})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "{field} must start with http:// or https:// (got `{}:`)",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("{field} names no host"));
    }
    Ok(())
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file does not parse.
    #[error(transparent)]
    Rules(#[from] RulesError),
    /// A value is wrong.
    #[error("{file}: {message}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An environment variable ([`crate::edge`]) holds a value its setting cannot take.
    #[error("<environment>: {variable} is `{value}`, not {expected}")]
    Environment {
        /// The variable (`BRIDLE_ADMIN_BEHIND_TLS`, ...).
        variable: &'static str,
        /// The value refused (for a list, the item refused).
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path, source: std::io::Error) -> ConfigError {
    ConfigError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl GatewayConfig {
    /// Reads and checks `<data>/bridle.yaml`.
    pub fn load(data_dir: &Path) -> Result<Self, ConfigError> {
        let file = data_dir.join("bridle.yaml");
        let text = std::fs::read_to_string(&file).map_err(|e| io(&file, e))?;
        let config: GatewayConfig = serde_saphyr::from_str(&text).map_err(|e| {
            let loc = e
                .location()
                .map(|l| format!("line {}, column {}: ", l.line(), l.column()))
                .unwrap_or_default();
            ConfigError::Invalid {
                file: file.clone(),
                message: format!("{loc}{}", e.without_snippet()),
            }
        })?;
        config.check(&file)?;
        Ok(config)
    }

    pub(crate) fn check(&self, file: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            file: file.to_path_buf(),
            message,
        };
        let addr = self.listen_addr().map_err(invalid)?;
        // The endpoint would drop a malformed entry with only a log line, and with it every
        // request its entry was meant to let in.
        if let Some(h) = self
            .allowed_hosts
            .iter()
            .find(|h| kberg_server::host_and_port(h).is_none())
        {
            return Err(invalid(format!(
                "allowed_hosts: `{h}` is not `host[:port]` (a name or address as agents reach the gateway, without scheme or path)"
            )));
        }
        if let Some(o) = self.allowed_origins.iter().find(|o| !is_endpoint_origin(o)) {
            return Err(invalid(format!(
                "allowed_origins: `{o}` is not `scheme://host[:port]` (`:*` for any port, or `null`)"
            )));
        }
        self.check_exposure(addr).map_err(invalid)?;
        self.admin.listen_addr(addr).map_err(invalid)?;
        self.admin.check().map_err(invalid)?;
        self.audit.check().map_err(invalid)?;
        let agents = self.agents.keys().cloned().collect();
        crate::upstreams::check_all(&self.upstreams, &agents)
            .map_err(|e| invalid(e.to_string()))?;
        #[cfg(feature = "kanboard")]
        if let Some(k) = &self.kanboard {
            k.check(|a| self.agents.contains_key(a)).map_err(invalid)?;
        }
        // The Kanboard tools are mounted under `kanboard__`, with the `kanboard.write`
        // capability an upstream of that name would declare again (a start refused with only
        // "already declared").
        #[cfg(feature = "kanboard")]
        if self.kanboard.is_some() && self.upstreams.contains_key("kanboard") {
            return Err(invalid(
                "upstream `kanboard`: the `kanboard:` section offers the Kanboard tools under that namespace (`kanboard__...`); remove one of them, or name the upstream otherwise"
                    .into(),
            ));
        }
        // The memory tools declare `memory.write`, the capability an upstream named `memory`
        // would declare again.
        if self.memory.is_some() && self.upstreams.contains_key("memory") {
            return Err(invalid(
                "upstream `memory`: the `memory:` section's tools hold the `memory.write` capability an upstream of that name would declare again; name the upstream otherwise"
                    .into(),
            ));
        }
        if let Some(t) = &self.traces {
            t.check().map_err(invalid)?;
            if !cfg!(feature = "traces") {
                return Err(invalid(
                    "`traces:` is set but this build has no trace export (feature `traces`)".into(),
                ));
            }
        }
        if let Some(memory) = &self.memory {
            memory.check().map_err(invalid)?;
        }
        if self.health.probe_cache_secs > MAX_PROBE_CACHE_SECS {
            return Err(invalid(format!(
                "health.probe_cache_secs must be at most {MAX_PROBE_CACHE_SECS} (got {})",
                self.health.probe_cache_secs
            )));
        }
        if let Some(secs) = self.database_statement_deadline_secs
            && !(1..=MAX_STATEMENT_DEADLINE_SECS).contains(&secs)
        {
            return Err(invalid(format!(
                "database_statement_deadline_secs must be at least 1 and at most {MAX_STATEMENT_DEADLINE_SECS} (a day), not {secs}"
            )));
        }
        for ns in &self.health.optional_upstreams {
            if !self.upstreams.contains_key(ns) {
                return Err(invalid(format!(
                    "health.optional_upstreams: `{ns}` is not a configured upstream"
                )));
            }
        }
        for (name, agent) in &self.agents {
            check_name("agent", name).map_err(|e| invalid(e.to_string()))?;
            if let Some(secret) = &agent.token_secret {
                check_name("secret", secret).map_err(|e| invalid(e.to_string()))?;
            }
            for p in &agent.projects {
                check_name("project", p).map_err(|e| invalid(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// Whether the gateway may listen on `addr`: loopback always; any other address only when
    /// every request must authenticate (there is no open mode in Bridle) and the allowed Host
    /// names and Origins are configured explicitly, so DNS-rebinding and cross-site requests are
    /// refused.
    pub fn check_exposure(&self, addr: SocketAddr) -> Result<(), String> {
        if addr.ip().is_loopback() {
            return Ok(());
        }
        if self.allowed_hosts.is_empty() || self.allowed_origins.is_empty() {
            return Err(format!(
                "listen address {addr} is not loopback: set `allowed_hosts` (the names agents use to reach the gateway, e.g. `bridle.example.org:7878`) and `allowed_origins` in bridle.yaml to listen on it, or listen on 127.0.0.1"
            ));
        }
        if self.agents.is_empty() {
            return Err(format!(
                "listen address {addr} is not loopback and no agent is configured"
            ));
        }
        Ok(())
    }

    /// How long a PostgreSQL statement may wait for the server's reply
    /// (`database_statement_deadline_secs`); `None`: bridle-rules' default, two minutes.
    pub fn database_statement_deadline(&self) -> Option<std::time::Duration> {
        self.database_statement_deadline_secs
            .map(std::time::Duration::from_secs)
    }

    /// The listen address, parsed.
    pub fn listen_addr(&self) -> Result<SocketAddr, String> {
        self.listen
            .parse()
            .map_err(|e| format!("listen address `{}`: {e}", self.listen))
    }

    /// The secrets folder.
    pub fn secrets_path(&self, data_dir: &Path) -> PathBuf {
        data_dir.join(&self.secrets_dir)
    }

    /// The templates folder.
    pub fn templates_path(&self, data_dir: &Path) -> PathBuf {
        data_dir.join(&self.templates_dir)
    }
}

/// Why [`rewrite`] left `bridle.yaml` as it was.
#[derive(Debug)]
pub(crate) enum RewriteError<E> {
    /// The edit refused.
    Edit(E),
    /// The file could not be read or parsed, or written.
    Io(String),
    /// The edited configuration fails the checks a start makes.
    Check(String),
}

/// Serializes every rewrite of a `bridle.yaml` within this process.
static REWRITES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Rewrites `bridle.yaml` at `file` with `edit` applied: read and parsed fresh, edited, checked as
/// at start, then written atomically in its complete form with its leading comment block kept.
/// Nothing is written when any step fails. Rewrites are serialized.
pub(crate) fn rewrite<E>(
    file: &Path,
    edit: impl FnOnce(&mut GatewayConfig) -> Result<(), E>,
) -> Result<(), RewriteError<E>> {
    let _one_at_a_time = REWRITES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let text = std::fs::read_to_string(file)
        .map_err(|e| RewriteError::Io(format!("{}: {e}", file.display())))?;
    let mut config: GatewayConfig = serde_saphyr::from_str(&text).map_err(|e| {
        RewriteError::Io(format!(
            "{} no longer parses ({}); fix it by hand first",
            file.display(),
            e.without_snippet()
        ))
    })?;
    edit(&mut config).map_err(RewriteError::Edit)?;
    config.check(file).map_err(|e| match e {
        ConfigError::Invalid { message, .. } => RewriteError::Check(message),
        other => RewriteError::Io(other.to_string()),
    })?;
    let yaml = serde_saphyr::to_string(&config).map_err(|e| RewriteError::Io(e.to_string()))?;
    let header: String = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    bridle_rules::fsutil::write_atomic(file, format!("{header}{yaml}").as_bytes())
        .map_err(|e| RewriteError::Io(e.to_string()))
}

/// The largest secret file [`read_secret`] reads: 64 KiB, far more than a token or key needs.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Reads one secret: the file's content with surrounding whitespace removed. An empty secret
/// is an error (it would match an empty credential). Read no further than
/// [`MAX_SECRET_FILE_BYTES`] (a larger file is refused naming it, without its content), and,
/// as for a `file:` reference to the same folder, only a regular file (or a link to one): a
/// pipe or a device is refused at once (by the one reader of every secrets folder).
pub fn read_secret(secrets_dir: &Path, name: &str) -> Result<String, ConfigError> {
    check_name("secret", name).map_err(ConfigError::Rules)?;
    let path = secrets_dir.join(name);
    let invalid = |message: String| ConfigError::Invalid {
        file: path.clone(),
        message,
    };
    let (raw, _) = crate::files::read_folder_secret(&path, MAX_SECRET_FILE_BYTES)
        .map_err(|e| io(&path, e.into_io()))?;
    if raw.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(invalid(format!(
            "the file is longer than {MAX_SECRET_FILE_BYTES} bytes; it is not a secret file"
        )));
    }
    let text = std::str::from_utf8(&raw)
        .map_err(|_| invalid("the secret file is not UTF-8 text".into()))?;
    let secret = text.trim().to_string();
    if secret.is_empty() {
        return Err(invalid("the secret file is empty".into()));
    }
    Ok(secret)
}

/// What [`init_data_dir`] created.
#[derive(Debug, Default)]
pub struct InitReport {
    /// Whether anything was created (false when the directory was already set up).
    pub created: bool,
}

fn random_token() -> Result<String, std::io::Error> {
    let mut bytes = [0u8; 24];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn write_new(path: &Path, content: &str, private: bool) -> Result<(), ConfigError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut f = options.open(path).map_err(|e| io(path, e))?;
    std::io::Write::write_all(&mut f, content.as_bytes()).map_err(|e| io(path, e))
}

/// Lays out a data directory on embedded defaults when it has no `bridle.yaml` yet: a
/// configuration with a `claude`, a `codex` and a `gemini` agent whose tokens the vault issues
/// (no `token_secret`; see [`issue_first_tokens`](crate::gateway::issue_first_tokens), which
/// the first start calls to issue and show them once), and an empty `secrets/` folder for
/// read-only file secrets. The `demo` project is the caller's to create. An existing setup is
/// left as it is.
pub fn init_data_dir(data_dir: &Path) -> Result<InitReport, ConfigError> {
    lay_out(data_dir, false)
}

/// Like [`init_data_dir`], but each demo agent's token is a random 0600 file in `secrets/`
/// (`<agent>-token`, named by `token_secret`): for setups that keep every credential as a file
/// (Docker secrets, a secrets manager writing files) and for test fixtures that read them.
pub fn init_data_dir_with_token_files(data_dir: &Path) -> Result<InitReport, ConfigError> {
    lay_out(data_dir, true)
}

fn lay_out(data_dir: &Path, token_files: bool) -> Result<InitReport, ConfigError> {
    let config_file = data_dir.join("bridle.yaml");
    if config_file.exists() {
        return Ok(InitReport::default());
    }
    std::fs::create_dir_all(data_dir.join("projects")).map_err(|e| io(data_dir, e))?;
    let secrets = data_dir.join("secrets");
    std::fs::create_dir_all(&secrets).map_err(|e| io(&secrets, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io(&secrets, e))?;
    }
    for name in ["claude-token", "codex-token", "gemini-token"] {
        let path = secrets.join(name);
        if token_files && !path.exists() {
            let token = random_token().map_err(|e| io(Path::new("/dev/urandom"), e))?;
            write_new(&path, &format!("{token}\n"), true)?;
        }
    }
    let mut agents = BTreeMap::new();
    for (name, ty) in [
        ("claude", "claude"),
        ("codex", "codex"),
        ("gemini", "gemini"),
    ] {
        agents.insert(
            name.to_string(),
            AgentConfig {
                agent_type: ty.to_string(),
                token_secret: token_files.then(|| format!("{name}-token")),
                projects: Vec::new(),
                type_guessed: false,
            },
        );
    }
    let config = GatewayConfig {
        listen: default_listen(),
        secrets_dir: default_secrets(),
        templates_dir: default_templates(),
        agents,
        memory: None,
        vault: VaultSection::default(),
        audit: AuditSection::default(),
        admin: AdminSection::default(),
        #[cfg(feature = "kanboard")]
        kanboard: None,
        upstreams: BTreeMap::new(),
        vendor_feed: None,
        allowed_hosts: Vec::new(),
        allowed_origins: Vec::new(),
        health: HealthSection::default(),
        database: None,
        database_password: None,
        database_statement_deadline_secs: None,
        traces: None,
    };
    let yaml = serde_saphyr::to_string(&config).map_err(|e| ConfigError::Invalid {
        file: config_file.clone(),
        message: e.to_string(),
    })?;
    let header = if token_files {
        "# Bridle gateway configuration. Agent tokens live in the secrets folder, one file per secret.\n"
    } else {
        "# Bridle gateway configuration. Agent tokens live in the vault, stored only as keyed hashes:\n# `bridle agents token issue|rotate|revoke <agent>` manages them.\n"
    };
    write_new(&config_file, &format!("{header}{yaml}"), false)?;
    Ok(InitReport { created: true })
}

/// The `demo` project written on first start.
pub fn demo_document() -> RulesDocument {
    use bridle_rules::{AgentPermissions, Guardrail, Provenance, RulesPermission, Severity};
    let mut doc = RulesDocument::new("Demo");
    doc.project.overview =
        "A demo project created by Bridle on first start. Edit projects/demo.yaml, or add your own project files beside it.".into();
    doc.project.conventions = vec!["Keep changes small and focused on the task.".into()];
    doc.guardrails.push(Guardrail {
        id: "no-unrequested-refactors".into(),
        statement: "Do not perform unrelated refactoring outside the requested task.".into(),
        severity: Severity::HardInstruction,
        applies_to: vec![bridle_rules::ALL_AGENTS.into()],
        provenance: Provenance::user(),
    });
    let propose = AgentPermissions {
        rules: RulesPermission {
            propose: true,
            approve: false,
        },
        ..AgentPermissions::default()
    };
    doc.permissions.insert("claude".into(), propose.clone());
    doc.permissions.insert("codex".into(), propose.clone());
    doc.permissions.insert("gemini".into(), propose);
    doc
}
