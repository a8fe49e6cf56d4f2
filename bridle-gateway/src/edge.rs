//! Settings given at the gateway's edge (environment variables and files), laid over
//! `bridle.yaml`.
//!
//! A container is configured through its environment and its mounted files, while
//! `bridle.yaml` stays the complete form of the configuration. [`EdgeSettings`] is the typed
//! list of what the edge may set; a binary fills it from its environment
//! ([`EdgeSettings::from_lookup`] with `std::env::var`: the library itself never reads the
//! environment) and [`GatewayConfig::overlay`] lays it over the loaded file.
//!
//! Precedence, highest first: a command-line flag (`--listen`, `--data-dir`), then the
//! environment, then `bridle.yaml`, then the built-in default. Secret values are never taken
//! from the environment: the environment names files (`BRIDLE_MASTER_KEY_FILE`, the Docker
//! secrets folder, the admin credential's file `BRIDLE_ADMIN_TOKEN_FILE`), and `bridle.yaml`
//! refers to secrets by name (`docker:gitea_token`).
//!
//! Every variable is named after the key it sets (`admin.behind_tls` is
//! `BRIDLE_ADMIN_BEHIND_TLS`). A value the key cannot take stops the overlay with
//! [`ConfigError::Environment`], which names the variable.

use std::path::PathBuf;

use crate::config::{ConfigError, GatewayConfig};
use crate::memory::{MemoryEmbedderConfig, MemorySection, MemoryStoreConfig};

/// The environment variables [`EdgeSettings::from_lookup`] reads, with what each sets.
pub const EDGE_VARIABLES: &[(&str, &str)] = &[
    ("BRIDLE_LISTEN", "listen"),
    ("BRIDLE_ALLOWED_HOSTS", "allowed_hosts (comma-separated)"),
    (
        "BRIDLE_ALLOWED_ORIGINS",
        "allowed_origins (comma-separated)",
    ),
    ("BRIDLE_MASTER_KEY_FILE", "vault.master_key (a file path)"),
    (
        "BRIDLE_ADMIN_TOKEN_FILE",
        "admin.token_file (the admin credential's file, a Docker secret)",
    ),
    ("BRIDLE_DOCKER_SECRETS_DIR", "vault.docker_secrets_dir"),
    (
        "BRIDLE_ADMIN_READ_ONLY",
        "admin.read_only (`true` or `false`, or `1`, `0`)",
    ),
    ("BRIDLE_ADMIN_WATCHERS", "admin.watchers (comma-separated)"),
    (
        "BRIDLE_ADMIN_BEHIND_TLS",
        "admin.behind_tls (`true` or `false`, or `1`, `0`)",
    ),
    (
        "BRIDLE_ADMIN_ALLOWED_ORIGINS",
        "admin.allowed_origins (comma-separated)",
    ),
    (
        "BRIDLE_ADMIN_LOGIN_LIMITS_PER_ADDRESS",
        "admin.login_limits.per_address (a whole number above zero)",
    ),
    (
        "BRIDLE_ADMIN_LOGIN_LIMITS_PER_CREDENTIAL",
        "admin.login_limits.per_credential (a whole number above zero)",
    ),
    (
        "BRIDLE_ADMIN_LOGIN_LIMITS_WINDOW_SECS",
        "admin.login_limits.window_secs (a whole number above zero)",
    ),
    (
        "KANBOARD_URL",
        "kanboard.url (creates the section when absent)",
    ),
    ("QDRANT_URL", "memory.store: qdrant at this URL"),
    (
        "EMBEDDINGS_URL",
        "memory.embedder's URL (openai-compatible when created)",
    ),
    ("EMBEDDINGS_MODEL", "memory.embedder's model"),
    ("GITEA_MCP_URL", "upstreams.gitea.http.url"),
    (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "traces.otlp.endpoint, the full traces URL (creates the section when absent)",
    ),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "traces.otlp.endpoint as <base>/v1/traces, when the variable above is unset",
    ),
    ("OTEL_SERVICE_NAME", "traces.service_name"),
];

/// What the edge may set. Every field is optional: `None` leaves `bridle.yaml` as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EdgeSettings {
    /// `BRIDLE_LISTEN`: the listen address.
    pub listen: Option<String>,
    /// `BRIDLE_ALLOWED_HOSTS`: the allowed Host names.
    pub allowed_hosts: Option<Vec<String>>,
    /// `BRIDLE_ALLOWED_ORIGINS`: the allowed Origins.
    pub allowed_origins: Option<Vec<String>>,
    /// `BRIDLE_MASTER_KEY_FILE`: the vault's master key file (a Docker secret).
    pub master_key_file: Option<PathBuf>,
    /// `BRIDLE_ADMIN_TOKEN_FILE`: the file holding the admin API's credential (a Docker
    /// secret), instead of one created in the vault and printed once.
    pub admin_token_file: Option<PathBuf>,
    /// `BRIDLE_DOCKER_SECRETS_DIR`: where `docker:NAME` references are read.
    pub docker_secrets_dir: Option<PathBuf>,
    /// `BRIDLE_ADMIN_READ_ONLY`: the admin API only reads (`true` or `false`, or `1`, `0`;
    /// checked by [`GatewayConfig::overlay`]).
    pub admin_read_only: Option<String>,
    /// `BRIDLE_ADMIN_WATCHERS`: admins who may only read, by name.
    pub admin_watchers: Option<Vec<String>>,
    /// `BRIDLE_ADMIN_BEHIND_TLS`: browsers reach the web panel over TLS (`true` or `false`, or
    /// `1`, `0`).
    pub admin_behind_tls: Option<String>,
    /// `BRIDLE_ADMIN_ALLOWED_ORIGINS`: the web panel's public origins behind a reverse proxy.
    pub admin_allowed_origins: Option<Vec<String>>,
    /// `BRIDLE_ADMIN_LOGIN_LIMITS_PER_ADDRESS`: refused admin credentials tolerated from one
    /// client address (a whole number above zero).
    pub admin_login_limits_per_address: Option<String>,
    /// `BRIDLE_ADMIN_LOGIN_LIMITS_PER_CREDENTIAL`: refused tries of one credential tolerated.
    pub admin_login_limits_per_credential: Option<String>,
    /// `BRIDLE_ADMIN_LOGIN_LIMITS_WINDOW_SECS`: how long a refused credential counts, in
    /// seconds.
    pub admin_login_limits_window_secs: Option<String>,
    /// `KANBOARD_URL`: Kanboard's JSON-RPC endpoint.
    pub kanboard_url: Option<String>,
    /// `QDRANT_URL`: memory's vectors in Qdrant at this gRPC URL.
    pub qdrant_url: Option<String>,
    /// `EMBEDDINGS_URL`: memory's embedding server.
    pub embeddings_url: Option<String>,
    /// `EMBEDDINGS_MODEL`: memory's embedding model.
    pub embeddings_model: Option<String>,
    /// `GITEA_MCP_URL`: the URL of the `gitea` upstream (Gitea's MCP server over HTTP).
    pub gitea_mcp_url: Option<String>,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT` +
    /// `/v1/traces`: where traces go (the OTLP exporter specification's variables).
    pub otlp_traces_url: Option<String>,
    /// `OTEL_SERVICE_NAME`: the traces' service name.
    pub otel_service_name: Option<String>,
}

fn edge_error(message: String) -> ConfigError {
    ConfigError::Invalid {
        file: PathBuf::from("<environment>"),
        message,
    }
}

fn malformed(variable: &'static str, value: &str, expected: &'static str) -> ConfigError {
    ConfigError::Environment {
        variable,
        value: value.to_string(),
        expected,
    }
}

/// A yes-or-no variable: `true` or `false` (any case), or `1`, `0`.
fn flag(variable: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(malformed(
            variable,
            value,
            "`true` or `false` (or `1`, `0`)",
        )),
    }
}

/// A count or a number of seconds: a whole number above zero (a zero limit would refuse
/// every admin, a zero window none).
fn above_zero<T: std::str::FromStr + Default + PartialEq>(
    variable: &'static str,
    value: &str,
) -> Result<T, ConfigError> {
    value
        .parse::<T>()
        .ok()
        .filter(|n| *n != T::default())
        .ok_or_else(|| malformed(variable, value, "a whole number above zero"))
}

impl EdgeSettings {
    /// Reads the settings through `get` (a binary passes `|k| std::env::var(k).ok()`). An empty
    /// value counts as unset.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let text = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let list = |k: &str| {
            text(k).map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
            })
        };
        Self {
            listen: text("BRIDLE_LISTEN"),
            allowed_hosts: list("BRIDLE_ALLOWED_HOSTS"),
            allowed_origins: list("BRIDLE_ALLOWED_ORIGINS"),
            master_key_file: text("BRIDLE_MASTER_KEY_FILE").map(PathBuf::from),
            admin_token_file: text("BRIDLE_ADMIN_TOKEN_FILE").map(PathBuf::from),
            docker_secrets_dir: text("BRIDLE_DOCKER_SECRETS_DIR").map(PathBuf::from),
            admin_read_only: text("BRIDLE_ADMIN_READ_ONLY"),
            admin_watchers: list("BRIDLE_ADMIN_WATCHERS"),
            admin_behind_tls: text("BRIDLE_ADMIN_BEHIND_TLS"),
            admin_allowed_origins: list("BRIDLE_ADMIN_ALLOWED_ORIGINS"),
            admin_login_limits_per_address: text("BRIDLE_ADMIN_LOGIN_LIMITS_PER_ADDRESS"),
            admin_login_limits_per_credential: text("BRIDLE_ADMIN_LOGIN_LIMITS_PER_CREDENTIAL"),
            admin_login_limits_window_secs: text("BRIDLE_ADMIN_LOGIN_LIMITS_WINDOW_SECS"),
            kanboard_url: text("KANBOARD_URL"),
            qdrant_url: text("QDRANT_URL"),
            embeddings_url: text("EMBEDDINGS_URL"),
            embeddings_model: text("EMBEDDINGS_MODEL"),
            gitea_mcp_url: text("GITEA_MCP_URL"),
            otlp_traces_url: text("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
                text("OTEL_EXPORTER_OTLP_ENDPOINT")
                    .map(|base| crate::telemetry::traces_url_of_base(&base))
            }),
            otel_service_name: text("OTEL_SERVICE_NAME"),
        }
    }

    /// Lays the trace settings over `traces` (the `traces:` section, `None` when absent):
    /// an OTLP URL creates the section or replaces its endpoint; a service name needs a
    /// section. Returns whether anything was set.
    pub fn overlay_traces(
        &self,
        traces: &mut Option<crate::telemetry::TracesSection>,
    ) -> Result<bool, ConfigError> {
        let mut set = false;
        if let Some(url) = &self.otlp_traces_url {
            match traces {
                Some(t) => t.otlp.endpoint = url.clone(),
                None => *traces = Some(crate::telemetry::TracesSection::otlp(url.clone())),
            }
            set = true;
        }
        if let Some(name) = &self.otel_service_name {
            let t = traces.as_mut().ok_or_else(|| {
                edge_error(
                    "OTEL_SERVICE_NAME is set but no traces are configured (set OTEL_EXPORTER_OTLP_ENDPOINT too, or add `traces:` to bridle.yaml)".into(),
                )
            })?;
            t.service_name = name.clone();
            set = true;
        }
        Ok(set)
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

impl GatewayConfig {
    /// Lays `edge` over this configuration and checks the result as [`GatewayConfig::load`]
    /// checks a file. Returns the `bridle.yaml` keys it set, for the log. A setting that has
    /// nothing to apply to (`QDRANT_URL` without a `memory:` section, `GITEA_MCP_URL` without
    /// an HTTP `gitea` upstream) is an error, never silently dropped; a value its key cannot
    /// take is [`ConfigError::Environment`], naming the variable.
    pub fn overlay(&mut self, edge: &EdgeSettings) -> Result<Vec<&'static str>, ConfigError> {
        let mut set = Vec::new();
        if let Some(v) = &edge.listen {
            self.listen = v.clone();
            set.push("listen");
        }
        if let Some(v) = &edge.allowed_hosts {
            self.allowed_hosts = v.clone();
            set.push("allowed_hosts");
        }
        if let Some(v) = &edge.allowed_origins {
            self.allowed_origins = v.clone();
            set.push("allowed_origins");
        }
        if let Some(v) = &edge.master_key_file {
            self.vault.master_key = Some(v.clone());
            set.push("vault.master_key");
        }
        if let Some(v) = &edge.admin_token_file {
            self.admin.token_file = Some(v.clone());
            set.push("admin.token_file");
        }
        if let Some(v) = &edge.docker_secrets_dir {
            self.vault.docker_secrets_dir = Some(v.clone());
            set.push("vault.docker_secrets_dir");
        }
        self.overlay_admin(edge, &mut set)?;
        if let Some(url) = &edge.kanboard_url {
            self.overlay_kanboard(url)?;
            set.push("kanboard.url");
        }
        // The embedder first: EMBEDDINGS_URL + EMBEDDINGS_MODEL may create the `memory:`
        // section that QDRANT_URL then points at Qdrant.
        if edge.embeddings_url.is_some() || edge.embeddings_model.is_some() {
            self.overlay_embedder(edge)?;
            set.push("memory.embedder");
        }
        if let Some(url) = &edge.qdrant_url {
            let memory = self.memory.as_mut().ok_or_else(|| {
                edge_error(
                    "QDRANT_URL is set but bridle.yaml has no `memory:` section (memory needs an embedder: set EMBEDDINGS_URL and EMBEDDINGS_MODEL too, or add the section)".into(),
                )
            })?;
            set_qdrant(memory, url);
            set.push("memory.store");
        }
        if let Some(url) = &edge.gitea_mcp_url {
            let http = self
                .upstreams
                .get_mut("gitea")
                .and_then(|u| u.http.as_mut())
                .ok_or_else(|| {
                    edge_error(
                        "GITEA_MCP_URL is set but bridle.yaml has no `upstreams.gitea` with `http:`"
                            .into(),
                    )
                })?;
            http.url = url.clone();
            set.push("upstreams.gitea.http.url");
        }
        if edge.overlay_traces(&mut self.traces)? {
            set.push("traces");
        }
        self.check(std::path::Path::new("bridle.yaml + environment"))?;
        Ok(set)
    }

    /// The `admin:` keys other than `token_file`, each value checked and refused naming its
    /// variable.
    fn overlay_admin(
        &mut self,
        edge: &EdgeSettings,
        set: &mut Vec<&'static str>,
    ) -> Result<(), ConfigError> {
        let admin = &mut self.admin;
        if let Some(v) = &edge.admin_read_only {
            admin.read_only = flag("BRIDLE_ADMIN_READ_ONLY", v)?;
            set.push("admin.read_only");
        }
        if let Some(names) = &edge.admin_watchers {
            if let Some(bad) = names
                .iter()
                .find(|n| bridle_rules::check_name("admin", n).is_err())
            {
                return Err(malformed(
                    "BRIDLE_ADMIN_WATCHERS",
                    bad,
                    "a comma-separated list of admin names (lowercase letters, digits, `-`, `_`, `.`)",
                ));
            }
            admin.watchers = names.clone();
            set.push("admin.watchers");
        }
        if let Some(v) = &edge.admin_behind_tls {
            admin.behind_tls = flag("BRIDLE_ADMIN_BEHIND_TLS", v)?;
            set.push("admin.behind_tls");
        }
        if let Some(origins) = &edge.admin_allowed_origins {
            if let Some(bad) = origins.iter().find(|o| !crate::config::is_origin(o)) {
                return Err(malformed(
                    "BRIDLE_ADMIN_ALLOWED_ORIGINS",
                    bad,
                    "a comma-separated list of `http(s)://host[:port]` origins",
                ));
            }
            admin.allowed_origins = origins.clone();
            set.push("admin.allowed_origins");
        }
        let limits = &mut admin.login_limits;
        if let Some(v) = &edge.admin_login_limits_per_address {
            limits.per_address = above_zero("BRIDLE_ADMIN_LOGIN_LIMITS_PER_ADDRESS", v)?;
            set.push("admin.login_limits.per_address");
        }
        if let Some(v) = &edge.admin_login_limits_per_credential {
            limits.per_credential = above_zero("BRIDLE_ADMIN_LOGIN_LIMITS_PER_CREDENTIAL", v)?;
            set.push("admin.login_limits.per_credential");
        }
        if let Some(v) = &edge.admin_login_limits_window_secs {
            limits.window_secs = above_zero("BRIDLE_ADMIN_LOGIN_LIMITS_WINDOW_SECS", v)?;
            set.push("admin.login_limits.window_secs");
        }
        Ok(())
    }

    #[cfg(feature = "kanboard")]
    fn overlay_kanboard(&mut self, url: &str) -> Result<(), ConfigError> {
        match &mut self.kanboard {
            Some(k) => k.url = url.to_string(),
            None => {
                self.kanboard = Some(crate::kanboard::KanboardConfig {
                    url: url.to_string(),
                    timeout_secs: 30,
                    agents: Default::default(),
                    projects: Default::default(),
                });
            }
        }
        Ok(())
    }

    #[cfg(not(feature = "kanboard"))]
    fn overlay_kanboard(&mut self, _url: &str) -> Result<(), ConfigError> {
        Err(edge_error(
            "KANBOARD_URL is set but this build has no Kanboard support (feature `kanboard`)"
                .into(),
        ))
    }

    fn overlay_embedder(&mut self, edge: &EdgeSettings) -> Result<(), ConfigError> {
        match self.memory.as_mut().map(|m| &mut m.embedder) {
            Some(MemoryEmbedderConfig::Openai { url, model, .. })
            | Some(MemoryEmbedderConfig::Ollama { url, model, .. }) => {
                if let Some(u) = &edge.embeddings_url {
                    *url = u.clone();
                }
                if let Some(m) = &edge.embeddings_model {
                    *model = m.clone();
                }
                Ok(())
            }
            Some(MemoryEmbedderConfig::Local { .. }) | None => {
                let (Some(url), Some(model)) = (&edge.embeddings_url, &edge.embeddings_model)
                else {
                    return Err(edge_error(
                        "EMBEDDINGS_URL and EMBEDDINGS_MODEL are both needed to configure an embedding server when bridle.yaml names none".into(),
                    ));
                };
                let embedder = MemoryEmbedderConfig::Openai {
                    url: url.clone(),
                    model: model.clone(),
                    api_key_secret: None,
                    timeout_secs: None,
                    connect_timeout_secs: None,
                    max_input_tokens: None,
                };
                match self.memory.as_mut() {
                    Some(m) => m.embedder = embedder,
                    None => {
                        self.memory = Some(MemorySection {
                            store: MemoryStoreConfig::default(),
                            embedder,
                            indexing: Default::default(),
                            max_memories_per_project: bridle_memory::DEFAULT_MAX_PER_PROJECT,
                        });
                    }
                }
                Ok(())
            }
        }
    }
}

fn set_qdrant(memory: &mut MemorySection, url: &str) {
    let api_key_secret = match &memory.store {
        MemoryStoreConfig::Qdrant { api_key_secret, .. } => api_key_secret.clone(),
        MemoryStoreConfig::Embedded { .. } => None,
    };
    memory.store = MemoryStoreConfig::Qdrant {
        url: url.to_string(),
        api_key_secret,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> EdgeSettings {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EdgeSettings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn lists_are_split_and_empty_values_are_unset() {
        let e = lookup(&[
            ("BRIDLE_ALLOWED_HOSTS", " a:1, b:2 ,,"),
            ("BRIDLE_LISTEN", "  "),
        ]);
        assert_eq!(e.allowed_hosts, Some(vec!["a:1".into(), "b:2".into()]));
        assert_eq!(e.listen, None);
        assert!(lookup(&[]).is_empty());
    }

    #[test]
    fn otlp_variables_follow_the_exporter_specification() {
        let e = lookup(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]);
        assert_eq!(
            e.otlp_traces_url.as_deref(),
            Some("http://c:4318/v1/traces")
        );
        // The per-signal variable is the full URL, and wins.
        let e = lookup(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/x"),
        ]);
        assert_eq!(e.otlp_traces_url.as_deref(), Some("http://t:9/x"));
        let mut traces = None;
        let e = lookup(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SERVICE_NAME", "gw"),
        ]);
        assert!(e.overlay_traces(&mut traces).unwrap());
        let t = traces.unwrap();
        assert_eq!(t.otlp.endpoint, "http://c:4318/v1/traces");
        assert_eq!(t.service_name, "gw");
        let e = lookup(&[("OTEL_SERVICE_NAME", "gw")]);
        let err = e.overlay_traces(&mut None).unwrap_err().to_string();
        assert!(err.contains("OTEL_SERVICE_NAME"), "{err}");
    }
}
