//! [`AgentRegistry`]: the agents that may connect, live. The gateway starts with the `agents:`
//! map of `bridle.yaml`; the admin API creates, changes and removes agents while it runs, and
//! every request (authentication, grants, a tool's project check) reads the registry, so a
//! created agent connects at once and a narrowed projects list holds from the next request.
//!
//! A change persists by rewriting `bridle.yaml` atomically (a temporary file beside it, flushed
//! and renamed over it), in its complete form, with its leading comment block kept. The
//! configuration file stays the one place agents are declared, so a restart, the offline
//! command line (`bridle serve`'s token check, `bridle agents list` without a gateway) and a
//! hand edit all see the same agents; a separate state table would leave `bridle.yaml`
//! describing a different set than the gateway serves. Before it is written the rewritten
//! configuration passes the same checks a start does, so a change that would leave an upstream
//! or Kanboard naming a missing agent is refused and nothing is written. Tokens never go into
//! the file: an agent created here authenticates with vault-issued tokens, kept as keyed hashes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use bridle_rules::{AgentCatalog, check_name};

#[cfg(test)]
use crate::config::GatewayConfig;
use crate::config::{AgentConfig, RewriteError, rewrite};

/// Why an agent could not be created, changed or removed. Each variant has a stable
/// [`AgentRegistryError::code`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentRegistryError {
    /// An agent of that name exists already.
    #[error("agent `{0}` already exists")]
    Exists(String),
    /// No agent has that name.
    #[error("no configured agent `{0}`")]
    Unknown(String),
    /// A name, type or project that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// The configuration would no longer pass its checks (an upstream or Kanboard names the
    /// agent); nothing was changed.
    #[error("{0}")]
    Refused(String),
    /// `bridle.yaml` could not be read, parsed or written; nothing was changed.
    #[error("bridle.yaml could not be updated: {0}")]
    Persist(String),
}

impl AgentRegistryError {
    /// The stable code: `agent_exists`, `unknown_agent`, `invalid_agent`, `agent_in_use`,
    /// `config_write_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            AgentRegistryError::Exists(_) => "agent_exists",
            AgentRegistryError::Unknown(_) => "unknown_agent",
            AgentRegistryError::Invalid(_) => "invalid_agent",
            AgentRegistryError::Refused(_) => "agent_in_use",
            AgentRegistryError::Persist(_) => "config_write_failed",
        }
    }
}

/// A change of an agent: the fields given are replaced, the others kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentChange {
    /// Its new type.
    pub agent_type: Option<String>,
    /// Its new projects (empty: every project).
    pub projects: Option<Vec<String>>,
}

/// The live agents, persisted to `bridle.yaml`.
#[derive(Debug)]
pub struct AgentRegistry {
    file: PathBuf,
    agents: RwLock<BTreeMap<String, AgentConfig>>,
    /// Serializes the read-modify-write of the file.
    writes: Mutex<()>,
}

impl AgentRegistry {
    /// The registry over `agents` (types already resolved), persisted to `file` (the data
    /// directory's `bridle.yaml`).
    pub fn new(file: PathBuf, agents: BTreeMap<String, AgentConfig>) -> Self {
        Self {
            file,
            agents: RwLock::new(agents),
            writes: Mutex::new(()),
        }
    }

    /// The configuration file changes are written to.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// An agent by name.
    pub fn get(&self, name: &str) -> Option<AgentConfig> {
        self.read().get(name).cloned()
    }

    /// Reads one agent in place, without copying it: for checks made on every listing and
    /// call. `None` when there is no such agent.
    pub fn inspect<R>(&self, name: &str, f: impl FnOnce(&AgentConfig) -> R) -> Option<R> {
        self.read().get(name).map(f)
    }

    /// Every agent, by name.
    pub fn all(&self) -> BTreeMap<String, AgentConfig> {
        self.read().clone()
    }

    /// Creates an agent of `agent_type` (which `catalog` must know) that may use `projects`
    /// (empty: every project), authenticating with vault-issued tokens.
    pub fn create(
        &self,
        catalog: &AgentCatalog,
        name: &str,
        agent_type: &str,
        projects: Vec<String>,
    ) -> Result<AgentConfig, AgentRegistryError> {
        check_name("agent", name).map_err(|e| AgentRegistryError::Invalid(e.to_string()))?;
        check_type(catalog, agent_type)?;
        check_projects(&projects)?;
        let agent = AgentConfig {
            agent_type: agent_type.to_string(),
            token_secret: None,
            projects,
            type_guessed: false,
        };
        self.change(|agents| {
            if agents.contains_key(name) {
                return Err(AgentRegistryError::Exists(name.to_string()));
            }
            agents.insert(name.to_string(), agent.clone());
            Ok(agent.clone())
        })
    }

    /// Changes an agent's type or projects; returns it before and after.
    pub fn update(
        &self,
        catalog: &AgentCatalog,
        name: &str,
        change: &AgentChange,
    ) -> Result<(AgentConfig, AgentConfig), AgentRegistryError> {
        if let Some(t) = &change.agent_type {
            check_type(catalog, t)?;
        }
        if let Some(p) = &change.projects {
            check_projects(p)?;
        }
        self.change(|agents| {
            let agent = agents
                .get_mut(name)
                .ok_or_else(|| AgentRegistryError::Unknown(name.to_string()))?;
            let before = agent.clone();
            if let Some(t) = &change.agent_type {
                agent.agent_type = t.clone();
                agent.type_guessed = false;
            }
            if let Some(p) = &change.projects {
                agent.projects = p.clone();
            }
            Ok((before, agent.clone()))
        })
    }

    /// Removes an agent; returns what it was.
    pub fn remove(&self, name: &str) -> Result<AgentConfig, AgentRegistryError> {
        self.change(|agents| {
            agents
                .remove(name)
                .ok_or_else(|| AgentRegistryError::Unknown(name.to_string()))
        })
    }

    /// Puts back an agent [`AgentRegistry::remove`] took out, exactly as it was (its token file,
    /// a guessed type left unwritten): the undo of a delete whose other half failed. Refused
    /// with `agent_exists` if an agent of that name was created meanwhile.
    pub fn restore(&self, name: &str, agent: AgentConfig) -> Result<(), AgentRegistryError> {
        self.change(|agents| {
            if agents.contains_key(name) {
                return Err(AgentRegistryError::Exists(name.to_string()));
            }
            agents.insert(name.to_string(), agent.clone());
            Ok(())
        })
    }

    /// Applies `edit` to the live agents and to the file's, checks the file's configuration,
    /// writes it, then makes the change live. Nothing changes when any step fails.
    fn change<R>(
        &self,
        edit: impl Fn(&mut BTreeMap<String, AgentConfig>) -> Result<R, AgentRegistryError>,
    ) -> Result<R, AgentRegistryError> {
        let _writing = self
            .writes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut live = self.all();
        let result = edit(&mut live)?;
        // A type guessed from the name stays unwritten in the file, as the operator left it.
        rewrite(&self.file, |on_disk| edit(&mut on_disk.agents).map(drop)).map_err(
            |e| match e {
                RewriteError::Edit(AgentRegistryError::Unknown(name)) => {
                    AgentRegistryError::Persist(format!(
                        "agent `{name}` is no longer in {}; it was removed by hand",
                        self.file.display()
                    ))
                }
                RewriteError::Edit(other) => other,
                RewriteError::Check(message) => AgentRegistryError::Refused(message),
                RewriteError::Io(message) => AgentRegistryError::Persist(message),
            },
        )?;
        *self
            .agents
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = live;
        Ok(result)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, AgentConfig>> {
        self.agents
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn check_type(catalog: &AgentCatalog, agent_type: &str) -> Result<(), AgentRegistryError> {
    catalog.get(agent_type).map(drop).map_err(|_| {
        AgentRegistryError::Invalid(format!(
            "unknown agent type `{agent_type}`; one of {}",
            catalog.names().join(", ")
        ))
    })
}

fn check_projects(projects: &[String]) -> Result<(), AgentRegistryError> {
    for p in projects {
        check_name("project", p).map_err(|e| AgentRegistryError::Invalid(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

    use super::*;

    fn registry() -> (tempfile::TempDir, AgentRegistry) {
        let tmp = tempfile::tempdir().unwrap();
        crate::config::init_data_dir(tmp.path()).unwrap();
        let config = GatewayConfig::load(tmp.path()).unwrap();
        let r = AgentRegistry::new(tmp.path().join("bridle.yaml"), config.agents);
        (tmp, r)
    }

    #[test]
    fn changes_are_live_and_written_in_the_complete_form_with_the_header_kept() {
        let (tmp, r) = registry();
        let catalog = AgentCatalog::builtin();
        r.create(&catalog, "ci-bot", "codex", vec!["demo".into()])
            .unwrap();
        assert_eq!(r.get("ci-bot").unwrap().agent_type, "codex");
        let change = AgentChange {
            agent_type: Some("claude".into()),
            projects: Some(vec![]),
        };
        let (before, after) = r.update(&catalog, "ci-bot", &change).unwrap();
        assert_eq!(before.projects, ["demo"]);
        assert_eq!(after.agent_type, "claude");
        r.remove("gemini").unwrap();
        let text = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
        assert!(
            text.starts_with("# Bridle gateway configuration."),
            "{text}"
        );
        let reloaded = GatewayConfig::load(tmp.path()).unwrap();
        assert_eq!(reloaded.agents, r.all());
        assert!(!reloaded.agents.contains_key("gemini"));
        assert_eq!(reloaded.agents["ci-bot"].agent_type, "claude");
    }

    #[test]
    fn refusals_change_nothing() {
        let (tmp, r) = registry();
        let catalog = AgentCatalog::builtin();
        let before = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
        let cases = [
            r.create(&catalog, "claude", "claude", vec![]).unwrap_err(),
            r.create(&catalog, "Bad Name", "claude", vec![])
                .unwrap_err(),
            r.create(&catalog, "x", "no-such-type", vec![]).unwrap_err(),
            r.create(&catalog, "x", "claude", vec!["../etc".into()])
                .unwrap_err(),
            r.remove("nobody").unwrap_err(),
        ];
        let codes: Vec<&str> = cases.iter().map(AgentRegistryError::code).collect();
        assert_eq!(
            codes,
            [
                "agent_exists",
                "invalid_agent",
                "invalid_agent",
                "invalid_agent",
                "unknown_agent"
            ]
        );
        let after = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
        assert_eq!(before, after);
        assert_eq!(r.all().len(), 3);
    }

    #[test]
    fn a_file_that_no_longer_parses_is_left_alone() {
        let (tmp, r) = registry();
        std::fs::write(tmp.path().join("bridle.yaml"), "agents: [oops\n").unwrap();
        let e = r
            .create(&AgentCatalog::builtin(), "x", "claude", vec![])
            .unwrap_err();
        assert_eq!(e.code(), "config_write_failed");
        assert!(r.get("x").is_none());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap(),
            "agents: [oops\n"
        );
    }
}
