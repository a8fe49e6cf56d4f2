//! [`GatewayContext`]: what every gateway tool, resource and the watcher read: the rules store,
//! the renderer, the configuration and the live agent registry (the agents and the projects each
//! may use), with the agent's live grants computed from the project documents.

use std::path::Path;
use std::sync::Arc;

use bridle_rules::{AgentCatalog, Renderer, RulesStore};
use kberg_core::Grants;

use crate::agent_registry::AgentRegistry;
use crate::config::{AgentConfig, ConfigError, GatewayConfig};
use crate::db::StateDatabase;
use crate::error::GatewayError;
use crate::sessions::SessionRegistry;

/// What every gateway tool, resource and the watcher read.
pub struct GatewayContext {
    /// The rules store.
    pub store: RulesStore,
    /// The renderer (built-ins plus the templates folder).
    pub renderer: Renderer,
    /// The configuration as the gateway started with it. Its `agents` are those of the start;
    /// the live ones are in [`GatewayContext::agents`].
    pub config: GatewayConfig,
    /// The agents that may connect, live: created, changed and removed through the admin API.
    pub agents: AgentRegistry,
    /// The live agents and sessions.
    pub sessions: SessionRegistry,
    /// The audit log, once the gateway opened it (see [`GatewayContext::set_audit`]); unset,
    /// changes and tool calls leave only log lines.
    pub(crate) audit: std::sync::OnceLock<crate::audit::AuditLog>,
    /// The pattern-example index runs (one per reference tag), shared by the admin API and
    /// the `refresh_pattern_example` tool.
    pub index_runs: crate::memory::IndexRuns,
}

impl std::fmt::Debug for GatewayContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayContext")
            .field("agents", &self.agents.all().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl GatewayContext {
    /// Opens the store and the renderer of a data directory, on the embedded SQLite database
    /// (a configuration naming PostgreSQL is refused here: use [`GatewayContext::open_with`]).
    pub fn open(data_dir: &Path, config: GatewayConfig) -> Result<Arc<Self>, GatewayError> {
        Self::open_with(data_dir, config, &StateDatabase::embedded())
    }

    /// Opens the store and the renderer of a data directory on `database` (see
    /// [`StateDatabase::open`]).
    pub fn open_with(
        data_dir: &Path,
        mut config: GatewayConfig,
        database: &StateDatabase,
    ) -> Result<Arc<Self>, GatewayError> {
        database.check_matches(data_dir, &config)?;
        let catalog = AgentCatalog::load(&config.templates_path(data_dir))?;
        for (name, agent) in &mut config.agents {
            let invalid = |message: String| ConfigError::Invalid {
                file: data_dir.join("bridle.yaml"),
                message: format!("agent `{name}`: {message}"),
            };
            if agent.agent_type.is_empty() {
                agent.type_guessed = true;
                agent.agent_type = catalog
                    .guess_from_client(name)
                    .map(|t| t.name.clone())
                    .ok_or_else(|| {
                        invalid(format!(
                            "set `type` (one of {}); it cannot be guessed from the name",
                            catalog.names().join(", ")
                        ))
                    })?;
            }
            catalog
                .get(&agent.agent_type)
                .map_err(|e| invalid(e.to_string()))?;
        }
        let renderer = Renderer::new(catalog.clone())?;
        let store = database.open_rules(data_dir, catalog)?;
        let agents = AgentRegistry::new(data_dir.join("bridle.yaml"), config.agents.clone());
        let sessions = Self::open_sessions(database)?;
        Ok(Arc::new(Self {
            store,
            renderer,
            config,
            agents,
            sessions,
            audit: std::sync::OnceLock::new(),
            index_runs: crate::memory::IndexRuns::default(),
        }))
    }

    /// The sessions registry: in memory, shared with the other replicas through the database
    /// when it is PostgreSQL.
    fn open_sessions(database: &StateDatabase) -> Result<SessionRegistry, GatewayError> {
        #[cfg(feature = "postgres")]
        if let Some(db) = database.postgres() {
            let ledger = crate::sessions::postgres::PgSessionLedger::open(db.clone())?;
            return SessionRegistry::with_ledger(
                SessionRegistry::default().idle(),
                Arc::new(ledger),
            );
        }
        let _ = database;
        Ok(SessionRegistry::default())
    }

    /// A configured agent by name, as it is now (see [`GatewayContext::agents`]).
    pub fn agent(&self, name: &str) -> Option<AgentConfig> {
        self.agents.get(name)
    }

    /// The grants of a configured agent: the union of what its type is permitted in each of
    /// its projects.
    pub fn grants_for(&self, agent_name: &str) -> Grants {
        match self.store.documents() {
            Ok(documents) => self.grants_in(agent_name, &documents),
            Err(e) => {
                tracing::warn!(error = %crate::logging::one_line(&e), "cannot list projects");
                Grants::none()
            }
        }
    }

    /// [`Self::grants_for`] by `documents`. No I/O.
    pub fn grants_in(&self, agent_name: &str, documents: &bridle_rules::Documents) -> Grants {
        // Read in place: this runs on every request.
        self.agents
            .inspect(agent_name, |agent| agent_grants(agent, documents))
            .unwrap_or_else(Grants::none)
    }
}

/// What `agent`'s type is permitted in each of its projects of `documents`, united.
fn agent_grants(agent: &AgentConfig, documents: &bridle_rules::Documents) -> Grants {
    let mut grants = Grants::none();
    for (project, loaded) in documents.iter().filter(|(p, _)| agent.may_use(p)) {
        match loaded {
            Ok(loaded) => {
                let permissions = loaded.document.permissions_of(&agent.agent_type);
                for id in permissions.capability_ids() {
                    grants.grant(id);
                }
                for id in permissions.tool_capability_ids() {
                    grants.grant(id);
                }
            }
            Err(e) => {
                tracing::warn!(project, error = %crate::logging::one_line(&e), "project skipped for grants")
            }
        }
    }
    grants
}

/// The agent type whose format a caller gets its rules in when it does not name one: the
/// configured `type`; when that was only guessed from the agent's name, the type the client
/// names itself as (`clientInfo.name` such as `claude-code` or `cursor-vscode`) if the catalog
/// knows it, else the guess. Only rendering follows the client's self-report: permissions
/// always use the configured or guessed type.
pub(crate) fn rendering_type(
    s: &GatewayContext,
    agent: &AgentConfig,
    client: Option<&kberg_core::ClientInfo>,
) -> String {
    if !agent.type_guessed {
        return agent.agent_type.clone();
    }
    client
        .and_then(|c| s.renderer.catalog().guess_from_client(&c.name))
        .map_or_else(|| agent.agent_type.clone(), |t| t.name.clone())
}

/// The URI of a rendered rules resource.
pub fn rules_uri(project: &str, agent_type: &str) -> String {
    format!("bridle://rules/{project}/{agent_type}")
}
