//! Bridle's memory on the gateway: the `memory:` section of `bridle.yaml`, opening the memory
//! service it describes, and writing `last_indexed` back to the rules documents.
//!
//! Memory is optional. With a `memory:` section, `bridle serve` adds bridle-memory's four tools
//! (`recall`, `remember`, `search_pattern_examples`, `refresh_pattern_example`) and the
//! `bridle memory ...` commands work; without one the gateway serves rules only. The section
//! names a store (the embedded SQLite file in the data directory by default, or a Qdrant server)
//! and an embedder (an OpenAI-compatible server, Ollama, or a local model folder for the
//! in-process embedder), and may bound what indexing an example reads and holds ([`indexing`]).
//! Secrets (API keys) are never in the file, only the names of files in the secrets folder.
//! Every (re-)index records its time in the example's `last_indexed` through the rules store's
//! normal edit path, so the change log shows it as a `user` change.
//!
//! Every index the gateway runs, through the admin API or the `refresh_pattern_example` tool, is
//! a run of the one registry in [`runs`] (one run per reference tag, followed by replay); the
//! gateway's `refresh_pattern_example` (module `refresh`) takes bridle-memory's tool's place for
//! that.
//!
//! Which projects' memories an agent reaches ([`AgentProjects`]): reads (`recall`) any project
//! the agent may use; `remember` only those whose rules grant its type
//! `permissions.memory.write`.

pub mod indexing;
pub(crate) mod refresh;
pub mod runs;

pub use indexing::IndexingSection;
pub use runs::{IndexRuns, RunEvent, RunEventKind, RunOrigin, RunStatus};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use bridle_memory::tools::{IndexListener, ProjectAccess};
use bridle_memory::{EmbedderConfig, HttpEmbedderConfig, IndexReport, MemoryConfig, StoreConfig};
use bridle_rules::{RulesError, RulesStore};
use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, read_secret};

/// The `memory:` section of `bridle.yaml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySection {
    /// Where vectors live (default: `embedded` in `<data>/memory.sqlite`).
    #[serde(default)]
    pub store: MemoryStoreConfig,
    /// Which model embeds.
    pub embedder: MemoryEmbedderConfig,
    /// The limits of one pattern-example index (default: bridle-memory's).
    #[serde(default, skip_serializing_if = "IndexingSection::is_default")]
    pub indexing: IndexingSection,
    /// The most memories one project may hold: past it `remember` stores nothing and answers
    /// `memory_quota_exceeded` (default bridle-memory's, 10,000).
    #[serde(
        default = "default_max_memories",
        skip_serializing_if = "is_default_max_memories"
    )]
    pub max_memories_per_project: u64,
}

fn default_max_memories() -> u64 {
    bridle_memory::DEFAULT_MAX_PER_PROJECT
}

fn is_default_max_memories(n: &u64) -> bool {
    *n == bridle_memory::DEFAULT_MAX_PER_PROJECT
}

/// Where memory's vectors live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MemoryStoreConfig {
    /// The embedded store: one SQLite file, relative to the data directory unless absolute.
    Embedded {
        /// The database file.
        #[serde(default = "default_memory_file")]
        path: PathBuf,
    },
    /// A Qdrant server over gRPC (needs a build with the `qdrant` feature).
    Qdrant {
        /// The gRPC URL, e.g. `http://127.0.0.1:6334`.
        url: String,
        /// The secret file holding the API key, if the server needs one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_secret: Option<String>,
    },
}

fn default_memory_file() -> PathBuf {
    PathBuf::from("memory.sqlite")
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        Self::Embedded {
            path: default_memory_file(),
        }
    }
}

/// Which model turns text into vectors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MemoryEmbedderConfig {
    /// An OpenAI-compatible `/v1/embeddings` server (LM Studio, llama.cpp, vLLM, hosted).
    Openai {
        /// The base URL, e.g. `http://127.0.0.1:1234/v1`.
        url: String,
        /// The model name.
        model: String,
        /// The secret file holding the API key, if the server needs one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key_secret: Option<String>,
        /// How long one request may take, in seconds (bridle-memory's 60 unless set).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
        /// How long opening a connection may take, in seconds (5 unless set; at most
        /// `timeout_secs`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        connect_timeout_secs: Option<u64>,
        /// The model's input window in tokens (512 unless set): chunks and queries are cut to
        /// fit it, so a model with a larger window should say so.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_input_tokens: Option<usize>,
    },
    /// Ollama's `/api/embed`.
    Ollama {
        /// The base URL, e.g. `http://127.0.0.1:11434`.
        url: String,
        /// The model name.
        model: String,
        /// As for `openai`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
        /// As for `openai`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        connect_timeout_secs: Option<u64>,
        /// As for `openai`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_input_tokens: Option<usize>,
    },
    /// The in-process embedder (needs a build with the `local-embed` feature): a folder with
    /// `config.json`, `tokenizer.json` and `model.safetensors`, relative to the data directory
    /// unless absolute.
    Local {
        /// The model folder.
        path: PathBuf,
    },
}

/// The longest `timeout_secs` an embedding server may be given: an hour. A request that takes
/// longer (a batch on a slow CPU) should be made smaller; past that, a server that stopped
/// answering holds an index run for as long.
pub const MAX_EMBEDDER_TIMEOUT_SECS: u64 = 3_600;

/// The largest `max_input_tokens` accepted: 131,072 (the largest windows of embedding models
/// served today are 32k; a chunk is cut to the window, and a window past the chunker's own
/// bound changes nothing).
pub const MAX_EMBEDDER_INPUT_TOKENS: usize = 131_072;

/// Checks an embedding server's timeouts and window, naming the setting at fault under `at`.
fn check_http_limits(
    at: &str,
    timeout_secs: Option<u64>,
    connect_timeout_secs: Option<u64>,
    max_input_tokens: Option<usize>,
) -> Result<(), String> {
    let defaults = HttpEmbedderConfig::new("", "");
    let timeout = timeout_secs.unwrap_or(defaults.timeout.as_secs());
    if timeout == 0 || timeout > MAX_EMBEDDER_TIMEOUT_SECS {
        return Err(format!(
            "{at}.timeout_secs must be from 1 to {MAX_EMBEDDER_TIMEOUT_SECS} (got {timeout})"
        ));
    }
    if let Some(connect) = connect_timeout_secs
        && (connect == 0 || connect > timeout)
    {
        return Err(format!(
            "{at}.connect_timeout_secs must be from 1 to the request timeout, {timeout} s (got {connect})"
        ));
    }
    if let Some(window) = max_input_tokens
        && (window == 0 || window > MAX_EMBEDDER_INPUT_TOKENS)
    {
        return Err(format!(
            "{at}.max_input_tokens must be from 1 to {MAX_EMBEDDER_INPUT_TOKENS} (got {window})"
        ));
    }
    Ok(())
}

/// Sets what the section names of an embedding server's timeouts and window on `c`, leaving
/// bridle-memory's defaults for the rest.
fn set_http_limits(
    c: &mut HttpEmbedderConfig,
    timeout_secs: Option<u64>,
    connect_timeout_secs: Option<u64>,
    max_input_tokens: Option<usize>,
) {
    if let Some(secs) = timeout_secs {
        c.timeout = std::time::Duration::from_secs(secs);
    }
    if let Some(secs) = connect_timeout_secs {
        c.connect_timeout = std::time::Duration::from_secs(secs);
    }
    if let Some(tokens) = max_input_tokens {
        c.max_input_tokens = tokens;
    }
}

/// The one line `bridle serve` prints when memory is not configured.
pub const ENABLE_HINT: &str = "bridle: memory is off; add a `memory:` section to bridle.yaml (e.g. `memory: {embedder: {local: {path: /path/to/all-MiniLM-L6-v2}}}`) to enable recall, remember and pattern-example search";

impl MemorySection {
    /// Checks the section as `bridle.yaml` is read, naming the setting at fault: the indexing
    /// limits ([`IndexingSection::check`]), `max_memories_per_project`, and that the embedding
    /// server's and Qdrant's URLs are HTTP URLs (these used to be found wrong only when the
    /// gateway opened memory). A URL is never quoted: it may carry a credential.
    pub fn check(&self) -> Result<(), String> {
        self.indexing.check()?;
        if self.max_memories_per_project == 0 {
            return Err(
                "memory.max_memories_per_project must be at least 1 (0 would refuse every remember)"
                    .into(),
            );
        }
        match &self.embedder {
            MemoryEmbedderConfig::Openai {
                url,
                timeout_secs,
                connect_timeout_secs,
                max_input_tokens,
                ..
            } => {
                crate::config::check_http_url("memory.embedder.openai.url", url)?;
                check_http_limits(
                    "memory.embedder.openai",
                    *timeout_secs,
                    *connect_timeout_secs,
                    *max_input_tokens,
                )?;
            }
            MemoryEmbedderConfig::Ollama {
                url,
                timeout_secs,
                connect_timeout_secs,
                max_input_tokens,
                ..
            } => {
                crate::config::check_http_url("memory.embedder.ollama.url", url)?;
                check_http_limits(
                    "memory.embedder.ollama",
                    *timeout_secs,
                    *connect_timeout_secs,
                    *max_input_tokens,
                )?;
            }
            MemoryEmbedderConfig::Local { .. } => {}
        }
        if let MemoryStoreConfig::Qdrant { url, .. } = &self.store {
            crate::config::check_http_url("memory.store.qdrant.url", url)?;
        }
        Ok(())
    }

    /// The memory service configuration this section describes, with paths resolved against
    /// the data directory, secrets read from the secrets folder, and the section checked
    /// ([`MemorySection::check`]).
    pub fn to_config(&self, data_dir: &Path, secrets: &Path) -> Result<MemoryConfig, ConfigError> {
        self.check().map_err(|message| ConfigError::Invalid {
            file: data_dir.join("bridle.yaml"),
            message,
        })?;
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                data_dir.join(p)
            }
        };
        let secret = |name: &Option<String>| -> Result<Option<String>, ConfigError> {
            name.as_deref().map(|n| read_secret(secrets, n)).transpose()
        };
        let store = match &self.store {
            MemoryStoreConfig::Embedded { path } => StoreConfig::Embedded {
                path: resolve(path),
            },
            MemoryStoreConfig::Qdrant {
                url,
                api_key_secret,
            } => qdrant_store(data_dir, url, secret(api_key_secret)?)?,
        };
        let embedder = match &self.embedder {
            MemoryEmbedderConfig::Openai {
                url,
                model,
                api_key_secret,
                timeout_secs,
                connect_timeout_secs,
                max_input_tokens,
            } => {
                let mut c = HttpEmbedderConfig::new(url.clone(), model.clone());
                c.api_key = secret(api_key_secret)?;
                set_http_limits(
                    &mut c,
                    *timeout_secs,
                    *connect_timeout_secs,
                    *max_input_tokens,
                );
                EmbedderConfig::OpenAi(c)
            }
            MemoryEmbedderConfig::Ollama {
                url,
                model,
                timeout_secs,
                connect_timeout_secs,
                max_input_tokens,
            } => {
                let mut c = HttpEmbedderConfig::new(url.clone(), model.clone());
                set_http_limits(
                    &mut c,
                    *timeout_secs,
                    *connect_timeout_secs,
                    *max_input_tokens,
                );
                EmbedderConfig::Ollama(c)
            }
            MemoryEmbedderConfig::Local { path } => EmbedderConfig::Local {
                path: resolve(path),
            },
        };
        Ok(MemoryConfig {
            store,
            embedder,
            patterns: self.indexing.pattern_config(),
            max_memories_per_project: self.max_memories_per_project,
        })
    }
}

#[cfg(feature = "qdrant")]
fn qdrant_store(
    _data_dir: &Path,
    url: &str,
    api_key: Option<String>,
) -> Result<StoreConfig, ConfigError> {
    let mut q = bridle_memory::QdrantConfig::new(url);
    q.api_key = api_key;
    Ok(StoreConfig::Qdrant(q))
}

/// Refuses a Qdrant store in a build without one ([`qdrant_unbuilt`]).
#[cfg(not(feature = "qdrant"))]
fn qdrant_store(
    data_dir: &Path,
    url: &str,
    _api_key: Option<String>,
) -> Result<StoreConfig, ConfigError> {
    Err(qdrant_unbuilt(data_dir, url))
}

/// The refusal of a Qdrant store by a build without one. The URL is named as
/// [`kberg_core::redact_url`] shows it: a configured one may carry a credential in its user
/// part or query. Compiled in every build, so the tests of every build check it.
#[cfg_attr(feature = "qdrant", allow(dead_code))]
fn qdrant_unbuilt(data_dir: &Path, url: &str) -> ConfigError {
    let url = kberg_core::redact_url(url);
    ConfigError::Invalid {
        file: data_dir.join("bridle.yaml"),
        message: format!(
            "memory.store.qdrant ({url}) needs a build with the `qdrant` feature; rebuild with `--features qdrant` or use the embedded store"
        ),
    }
}

/// What a recall over another embedding model's vectors tells its reader to do on a gateway:
/// the command and the admin route that embed the session memories again.
pub const REEMBED_REMEDY: &str =
    "`bridle memory reembed`, or POST /admin/api/v1/memory/sessions/reembed";

/// `memory` with its session half naming the gateway's [`REEMBED_REMEDY`] in a
/// `model_mismatch` (bridle-memory names its own method unless told).
pub(crate) fn hosted(mut memory: bridle_memory::MemoryService) -> bridle_memory::MemoryService {
    memory.session = Arc::new(
        memory
            .session
            .as_ref()
            .clone()
            .with_reembed_remedy(REEMBED_REMEDY),
    );
    memory
}

/// `memory` with its pattern index cloning private example repositories with the secrets of
/// `memory.indexing.git_credentials` in `config`, read from `secrets` at each clone (as it is
/// when there are none). The gateway does this for the memory it serves; an offline command
/// that indexes does it with the vault it opened.
pub fn with_clone_credentials(
    mut memory: bridle_memory::MemoryService,
    config: &crate::config::GatewayConfig,
    secrets: &Arc<dyn crate::upstreams::SecretSource>,
) -> bridle_memory::MemoryService {
    let credentials = config
        .memory
        .as_ref()
        .and_then(|m| m.indexing.git_credentials(Arc::clone(secrets)));
    if let Some(credentials) = credentials {
        memory.patterns = Arc::new(
            memory
                .patterns
                .as_ref()
                .clone()
                .with_git_credentials(credentials),
        );
    }
    memory
}

/// Writes `report.last_indexed` into every example repository tagged `report.reference_tag`
/// (in `project` only, or in every project), each through [`RulesStore::save_edit`], which
/// records the change with source `user` and `actor`. A document that moved on meanwhile is
/// re-read and retried. Returns the projects that changed and their new revisions.
///
/// Over every project, one whose document does not load (a typo being fixed) is skipped with a
/// warning: it cannot be told whether it lists the example, and it must not keep the projects
/// after it from their write-back. A named `project` that does not load is an error.
pub fn write_last_indexed(
    store: &RulesStore,
    project: Option<&str>,
    report: &IndexReport,
    actor: &str,
) -> Result<Vec<(String, u64)>, RulesError> {
    let every_project = project.is_none();
    let projects = match project {
        Some(p) => vec![p.to_string()],
        None => store.projects()?,
    };
    let mut changed = Vec::new();
    for project in projects {
        for attempt in 0..5 {
            let mut doc = match store.load(&project) {
                Ok(loaded) => loaded.document,
                Err(e) if every_project => {
                    tracing::warn!(project = ?project, error = %crate::logging::one_line(&e), tag = ?report.reference_tag, "project rules unreadable; last_indexed not written there");
                    break;
                }
                Err(e) => return Err(e),
            };
            let base = doc.revision;
            let mut touched = false;
            for repo in doc
                .patterns
                .custom
                .iter_mut()
                .flat_map(|p| p.example_repos.iter_mut())
                .filter(|r| r.reference_tag == report.reference_tag)
            {
                repo.last_indexed = Some(report.last_indexed.clone());
                touched = true;
            }
            if !touched {
                break;
            }
            let summary = format!(
                "pattern example `{}` indexed at {} ({} chunks from {} files)",
                report.reference_tag, report.last_indexed, report.chunks, report.files
            );
            match store.save_edit(&project, &doc, base, actor, &summary) {
                Ok(revision) => {
                    changed.push((project.clone(), revision));
                    break;
                }
                Err(RulesError::Conflict { .. }) if attempt < 4 => continue,
                Err(e) => return Err(e),
            }
        }
    }
    Ok(changed)
}

/// Writes `last_indexed` back after a refresh through the MCP tool.
pub struct RulesWriteBack {
    /// The gateway's shared state (its rules store).
    pub gw: Arc<crate::context::GatewayContext>,
}

#[async_trait]
impl IndexListener for RulesWriteBack {
    async fn indexed(&self, report: &IndexReport) {
        let shared = Arc::clone(&self.gw);
        let report = report.clone();
        let done = tokio::task::spawn_blocking(move || {
            write_last_indexed(&shared.store, None, &report, "bridle-memory")
        })
        .await;
        match done {
            Ok(Ok(changed)) => tracing::info!(?changed, "last_indexed written back"),
            Ok(Err(e)) => {
                tracing::warn!(error = %crate::logging::one_line(&e), "writing last_indexed back failed")
            }
            Err(e) => tracing::warn!(error = %e, "writing last_indexed back stopped"),
        }
    }
}

/// Limits an agent's memories to the projects its configuration lists (`projects:`; empty means
/// all), the same rule the rules tools follow; `remember` also needs the target project's own
/// `memory.write` ([`ProjectAccess::may_write`]).
pub struct AgentProjects {
    /// The gateway's shared state (its agents).
    pub gw: Arc<crate::context::GatewayContext>,
}

impl ProjectAccess for AgentProjects {
    fn allows(&self, caller: &kberg_core::Caller, project: &str) -> bool {
        self.gw
            .agent(&caller.principal().id)
            .is_some_and(|a| a.may_use(project))
    }

    /// The project's rules grant the agent's type `permissions.memory.write` (a project that
    /// cannot be read grants nothing).
    fn may_write(&self, caller: &kberg_core::Caller, project: &str) -> bool {
        let Some(agent) = self.gw.agent(&caller.principal().id) else {
            return false;
        };
        match self.gw.store.load_shared(project) {
            Ok(loaded) => {
                loaded
                    .document
                    .permissions_of(&agent.agent_type)
                    .memory
                    .write
            }
            Err(e) => {
                // The agent is refused all the same; what went wrong is for the operator.
                tracing::warn!(project, error = %crate::logging::one_line(&e), "project rules unreadable; memory write refused");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

    use super::*;

    /// A gateway built without `qdrant`, given a Qdrant store, names the store in its refusal
    /// but not the credential its URL carries (a user part, a key in the query): the error
    /// reaches the console, the logs and whoever reads them.
    #[test]
    fn a_qdrant_store_refused_by_a_build_without_one_is_named_without_its_credentials() {
        const USER_KEY: &str = "canary-qdrant-userpass-51c7";
        const QUERY_KEY: &str = "canary-qdrant-query-key-9e02";
        let url = format!("https://memory:{USER_KEY}@qdrant.example:6334/?api-key={QUERY_KEY}");
        let err = qdrant_unbuilt(Path::new("/data"), &url).to_string();
        assert!(err.contains("`qdrant` feature"), "{err}");
        assert!(err.contains("qdrant.example:6334"), "{err}");
        assert!(!err.contains("canary"), "a credential leaked: {err}");
    }

    #[test]
    fn the_memory_quota_is_read_checked_and_passed_on() {
        let dir = tempfile::tempdir().unwrap();
        let section: MemorySection =
            serde_saphyr::from_str("embedder: {ollama: {url: 'http://u', model: m}}").unwrap();
        assert_eq!(
            section.max_memories_per_project,
            bridle_memory::DEFAULT_MAX_PER_PROJECT
        );
        assert!(
            !serde_saphyr::to_string(&section)
                .unwrap()
                .contains("max_memories_per_project"),
            "the default is not written out"
        );
        let section: MemorySection = serde_saphyr::from_str(
            "embedder: {ollama: {url: 'http://u', model: m}}\nmax_memories_per_project: 3",
        )
        .unwrap();
        let config = section.to_config(dir.path(), dir.path()).unwrap();
        assert_eq!(config.max_memories_per_project, 3);
        let zero: MemorySection = serde_saphyr::from_str(
            "embedder: {ollama: {url: 'http://u', model: m}}\nmax_memories_per_project: 0",
        )
        .unwrap();
        let err = zero.to_config(dir.path(), dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("memory.max_memories_per_project"),
            "{err}"
        );
        for bad in ["-1", "ten", "1.5"] {
            assert!(
                serde_saphyr::from_str::<MemorySection>(&format!(
                    "embedder: {{ollama: {{url: 'http://u', model: m}}}}\nmax_memories_per_project: {bad}"
                ))
                .is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn an_embedding_servers_timeouts_and_window_are_read_checked_and_passed_on() {
        let dir = tempfile::tempdir().unwrap();
        let http = |config: MemoryConfig| match config.embedder {
            EmbedderConfig::OpenAi(c) | EmbedderConfig::Ollama(c) => c,
            other => panic!("not an HTTP embedder: {other:?}"),
        };
        // Unset: bridle-memory's defaults, and nothing written out.
        for kind in ["openai", "ollama"] {
            let section: MemorySection = serde_saphyr::from_str(&format!(
                "embedder: {{{kind}: {{url: 'http://u', model: m}}}}"
            ))
            .unwrap();
            let yaml = serde_saphyr::to_string(&section).unwrap();
            assert!(
                !yaml.contains("timeout") && !yaml.contains("max_input"),
                "{yaml}"
            );
            let c = http(section.to_config(dir.path(), dir.path()).unwrap());
            let defaults = HttpEmbedderConfig::new("", "");
            assert_eq!(
                (c.timeout, c.connect_timeout, c.max_input_tokens),
                (
                    defaults.timeout,
                    defaults.connect_timeout,
                    defaults.max_input_tokens
                )
            );
            // Set: passed on as given.
            let section: MemorySection = serde_saphyr::from_str(&format!(
                "embedder: {{{kind}: {{url: 'http://u', model: m, timeout_secs: 300, connect_timeout_secs: 2, max_input_tokens: 8192}}}}"
            ))
            .unwrap();
            let c = http(section.to_config(dir.path(), dir.path()).unwrap());
            assert_eq!(c.timeout, std::time::Duration::from_secs(300));
            assert_eq!(c.connect_timeout, std::time::Duration::from_secs(2));
            assert_eq!(c.max_input_tokens, 8192);
        }
        // Out of range: refused at load, naming the setting.
        for (settings, named) in [
            ("timeout_secs: 0", "memory.embedder.ollama.timeout_secs"),
            ("timeout_secs: 3601", "memory.embedder.ollama.timeout_secs"),
            (
                "connect_timeout_secs: 0",
                "memory.embedder.ollama.connect_timeout_secs",
            ),
            // Past the default request timeout (60 s), and past a set one.
            (
                "connect_timeout_secs: 61",
                "memory.embedder.ollama.connect_timeout_secs",
            ),
            (
                "timeout_secs: 10, connect_timeout_secs: 11",
                "memory.embedder.ollama.connect_timeout_secs",
            ),
            (
                "max_input_tokens: 0",
                "memory.embedder.ollama.max_input_tokens",
            ),
            (
                "max_input_tokens: 131073",
                "memory.embedder.ollama.max_input_tokens",
            ),
        ] {
            let section: MemorySection = serde_saphyr::from_str(&format!(
                "embedder: {{ollama: {{url: 'http://u', model: m, {settings}}}}}"
            ))
            .unwrap();
            let err = section.to_config(dir.path(), dir.path()).unwrap_err();
            assert!(err.to_string().contains(named), "{settings}: {err}");
        }
        // Not numbers, or unknown: refused as the file is read.
        for bad in ["timeout_secs: -1", "timeout_secs: soon", "timeout: 5"] {
            assert!(
                serde_saphyr::from_str::<MemorySection>(&format!(
                    "embedder: {{openai: {{url: 'http://u', model: m, {bad}}}}}"
                ))
                .is_err(),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn the_gateways_memory_service_keeps_the_configured_quota() {
        let store: Arc<dyn bridle_memory::VectorStore> =
            Arc::new(bridle_memory::EmbeddedStore::open_in_memory().unwrap());
        let embedder = Arc::new(bridle_memory::ConstantEmbedder::new(8));
        let mut service = bridle_memory::MemoryService::with(store, embedder, Default::default());
        service.session = Arc::new(service.session.as_ref().clone().with_max_per_project(1));
        let service = hosted(service);
        assert_eq!(service.session.max_per_project(), 1, "hosted keeps it");
        let memory = |text: &str| bridle_memory::NewMemory {
            kind: "decision".into(),
            text: text.into(),
            project: "p".into(),
            ..Default::default()
        };
        service.session.remember(memory("one")).await.unwrap();
        let err = service.session.remember(memory("two")).await.unwrap_err();
        assert_eq!(err.code(), "memory_quota_exceeded");
    }
}
