//! Where the gateway keeps its shared state: the `database:` line of `bridle.yaml`.
//!
//! Absent (or `sqlite`), the rules store uses the SQLite file of the data directory and its YAML
//! files are the documents: one gateway process (and the command line) per data directory.
//! `postgres://user@host:port/dbname` moves the review queue, decisions, change log, scope
//! tickets and revisions, the vault (secrets, agent tokens and its audit table), the audit log,
//! confirm tickets, the vendor-feed ledger and the sessions registry (with the 2025-11-25
//! sessions any replica resumes) into PostgreSQL (a build with the `postgres`
//! feature): the database is then the source of truth
//! for documents, each replica writes the YAML files of its own data directory out from it, and
//! changes reach every replica through `LISTEN/NOTIFY`.
//!
//! The password never sits in the URL: `database_password` names it as a `docker:` or `file:`
//! secret reference, read from its folder (not `vault:`: the vault itself lives in that
//! database), and it appears in no log line or error.

use std::path::Path;

use bridle_rules::{AgentCatalog, RulesStore};

use crate::config::{ConfigError, GatewayConfig};
use crate::error::GatewayError;
use crate::vault::Vault;

/// The database the gateway's stores use.
#[derive(Debug, Clone, Default)]
pub struct StateDatabase {
    #[cfg(feature = "postgres")]
    postgres: Option<bridle_rules::db::postgres::PgDatabase>,
}

fn invalid(data_dir: &Path, message: String) -> GatewayError {
    GatewayError::Config(ConfigError::Invalid {
        file: data_dir.join("bridle.yaml"),
        message,
    })
}

/// Whether the configuration names PostgreSQL.
pub(crate) fn wants_postgres(config: &GatewayConfig) -> bool {
    config
        .database
        .as_deref()
        .is_some_and(|d| d.starts_with("postgres://") || d.starts_with("postgresql://"))
}

impl StateDatabase {
    /// The embedded default: SQLite files in the data directory.
    pub fn embedded() -> Self {
        Self::default()
    }

    /// Opens what `config.database` names, reading `database_password` from the folders of
    /// `vault`'s sources (`docker:` or `file:`). A malformed value, a URL with a password in
    /// it, a `vault:` password, a build without PostgreSQL support or an unreachable server
    /// stops here, named.
    pub fn open(
        data_dir: &Path,
        config: &GatewayConfig,
        vault: &Vault,
    ) -> Result<Self, GatewayError> {
        Self::open_with_sources(data_dir, config, vault.config())
    }

    /// Opens what `config.database` names without opening the vault: `database_password` is
    /// read from the configuration's own secret folders (what the command line's read-only
    /// commands use, so they neither need the master key nor create one). Refused like
    /// [`StateDatabase::open`].
    pub fn open_configured(data_dir: &Path, config: &GatewayConfig) -> Result<Self, GatewayError> {
        Self::open_with_sources(
            data_dir,
            config,
            &crate::gateway::vault_config(data_dir, config),
        )
    }

    fn open_with_sources(
        data_dir: &Path,
        config: &GatewayConfig,
        sources: &crate::vault::VaultConfig,
    ) -> Result<Self, GatewayError> {
        match config.database.as_deref() {
            None | Some("sqlite") => {
                if config.database_password.is_some() {
                    return Err(invalid(
                        data_dir,
                        "database_password is set but `database` names no PostgreSQL server".into(),
                    ));
                }
                Ok(Self::embedded())
            }
            Some(_) if wants_postgres(config) => Self::open_postgres(data_dir, config, sources),
            Some(_) => Err(invalid(
                data_dir,
                "database: use `sqlite` (the default) or a `postgres://user@host:port/dbname` URL"
                    .into(),
            )),
        }
    }

    #[cfg(not(feature = "postgres"))]
    fn open_postgres(
        data_dir: &Path,
        _config: &GatewayConfig,
        _sources: &crate::vault::VaultConfig,
    ) -> Result<Self, GatewayError> {
        Err(invalid(
            data_dir,
            "database: this build has no PostgreSQL support (the `postgres` feature)".into(),
        ))
    }

    #[cfg(feature = "postgres")]
    fn open_postgres(
        data_dir: &Path,
        config: &GatewayConfig,
        sources: &crate::vault::VaultConfig,
    ) -> Result<Self, GatewayError> {
        let db = connect_postgres(data_dir, config, sources)?;
        Ok(Self { postgres: Some(db) })
    }

    /// The PostgreSQL database, when the configuration names one.
    #[cfg(feature = "postgres")]
    pub fn postgres(&self) -> Option<&bridle_rules::db::postgres::PgDatabase> {
        self.postgres.as_ref()
    }

    /// Opens the rules store of a data directory on this database.
    pub fn open_rules(
        &self,
        data_dir: &Path,
        catalog: AgentCatalog,
    ) -> Result<RulesStore, GatewayError> {
        #[cfg(feature = "postgres")]
        if let Some(db) = &self.postgres {
            return Ok(RulesStore::open_postgres(data_dir, catalog, db.clone())?);
        }
        Ok(RulesStore::open(data_dir, catalog)?)
    }

    /// Opens the audit log on this database: `config.path`'s SQLite file on the embedded
    /// default, the PostgreSQL tables (one hash chain for every replica) otherwise. The gateway
    /// and the command line's offline `bridle audit` both open it here, so they read the same log.
    pub fn open_audit(
        &self,
        config: crate::audit::AuditConfig,
    ) -> Result<crate::audit::AuditLog, GatewayError> {
        #[cfg(feature = "postgres")]
        if let Some(db) = &self.postgres {
            return Ok(crate::audit::AuditLog::open_postgres(db.clone(), config)?);
        }
        Ok(crate::audit::AuditLog::open(config)?)
    }

    /// Whether this is the embedded default (SQLite files in the data directory).
    pub fn is_embedded(&self) -> bool {
        #[cfg(feature = "postgres")]
        let embedded = self.postgres.is_none();
        #[cfg(not(feature = "postgres"))]
        let embedded = true;
        embedded
    }

    /// Checks that this database is what `config` names (a PostgreSQL URL with no connection
    /// opened would otherwise fall back to SQLite silently).
    pub fn check_matches(
        &self,
        data_dir: &Path,
        config: &GatewayConfig,
    ) -> Result<(), GatewayError> {
        #[cfg(feature = "postgres")]
        let opened = self.postgres.is_some();
        #[cfg(not(feature = "postgres"))]
        let opened = false;
        if wants_postgres(config) && !opened {
            return Err(invalid(
                data_dir,
                "database: names PostgreSQL, but the store was opened without a connection to it (open it with StateDatabase::open)".into(),
            ));
        }
        Ok(())
    }
}

/// Connects to the PostgreSQL database `config.database` names, with the password
/// `config.database_password` names (a `docker:` or `file:` reference, read from the folders of
/// `sources`). A malformed URL, a URL holding a password, a `vault:` reference, a missing secret
/// or an unreachable server stops here, named, and the password is in no message.
#[cfg(feature = "postgres")]
pub(crate) fn connect_postgres(
    data_dir: &Path,
    config: &GatewayConfig,
    sources: &crate::vault::VaultConfig,
) -> Result<bridle_rules::db::postgres::PgDatabase, GatewayError> {
    let settings = postgres_settings(data_dir, config, sources)?;
    Ok(bridle_rules::db::postgres::PgDatabase::connect(&settings)?)
}

/// The connection settings [`connect_postgres`] connects with: the URL, the password its
/// reference names, and `database_statement_deadline_secs` when set (the vault's pool and the
/// pool the other stores share are both connected here, so the deadline reaches each).
#[cfg(feature = "postgres")]
fn postgres_settings(
    data_dir: &Path,
    config: &GatewayConfig,
    sources: &crate::vault::VaultConfig,
) -> Result<bridle_rules::db::postgres::PgSettings, GatewayError> {
    use crate::vault::SecretRef;
    use bridle_rules::db::postgres::PgSettings;

    let url = config.database.as_deref().unwrap_or_default();
    let settings = PgSettings::from_url(url)
        .map_err(|e| invalid(data_dir, format!("database: {e} [{}]", e.code())))?;
    if settings.has_password() {
        return Err(invalid(
            data_dir,
            "database: the URL holds a password; name it in `database_password` as a secret reference (docker:NAME, file:NAME) instead".into(),
        ));
    }
    let settings = match config.database_password.as_deref() {
        None => settings,
        Some(reference) => {
            let reference: SecretRef = reference
                .parse()
                .map_err(|e| invalid(data_dir, format!("database_password: {e}")))?;
            if matches!(reference, SecretRef::Vault(_)) {
                return Err(invalid(
                    data_dir,
                    format!(
                        "database_password: `{reference}` cannot be used: the vault itself lives in this database; use docker:NAME or file:NAME"
                    ),
                ));
            }
            let value = sources.read_source(&reference)?;
            let password = value.expose_str().ok_or_else(|| {
                invalid(
                    data_dir,
                    format!("database_password: `{reference}` is not UTF-8 text"),
                )
            })?;
            settings.with_password(password)
        }
    };
    Ok(match config.database_statement_deadline() {
        Some(deadline) => settings.with_statement_deadline(deadline),
        None => settings,
    })
}

/// The agent whose every earlier token a vault change ended (`agent_token_revoke NAME`, or
/// `agent_token_set NAME`, which replaces them all), from a [`Vault::changes`] payload.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn agent_whose_tokens_ended(payload: &str) -> Option<&str> {
    let (action, name) = payload.split_once(' ')?;
    matches!(action, "agent_token_revoke" | "agent_token_set")
        .then_some(name)
        .filter(|n| !n.is_empty())
}

/// Follows the vault's changes made by any replica (this one included) until `stop`: when an
/// agent's tokens are revoked or replaced, this replica's sessions of that agent end (as the
/// replica that revoked them ends its own), so an open 2025-11-25 session or stream of a
/// revoked agent does not outlive the revocation anywhere. Its next request is refused by the
/// token check in any case; agents authenticating with a token file are left alone. Returns at
/// once for a vault that is not in PostgreSQL.
#[cfg(feature = "postgres")]
pub(crate) async fn follow_vault_changes(
    ctx: std::sync::Arc<crate::GatewayContext>,
    vault: std::sync::Arc<Vault>,
    stop: tokio_util::sync::CancellationToken,
) {
    let Some(mut changes) = vault.changes() else {
        return;
    };
    loop {
        let change = tokio::select! {
            () = stop.cancelled() => return,
            change = changes.recv() => change,
        };
        let Some(change) = change else {
            return;
        };
        let Some(agent) = agent_whose_tokens_ended(&change) else {
            continue;
        };
        if ctx.agent(agent).is_some_and(|a| a.token_secret.is_none()) {
            let ended = ctx.sessions.end_agent(agent);
            if ended > 0 {
                tracing::info!(agent, ended, change = %change, "sessions ended after a vault change");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests fail loudly.

    use super::agent_whose_tokens_ended;
    #[cfg(feature = "postgres")]
    use crate::config::GatewayConfig;

    /// `database_statement_deadline_secs` reaches the settings the pool is built with; absent,
    /// bridle-rules' default (two minutes) stays.
    #[cfg(feature = "postgres")]
    #[test]
    fn the_configured_statement_deadline_reaches_the_database_settings() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = "database: postgres://bridle@127.0.0.1:9/bridle\n";
        std::fs::write(dir.path().join("bridle.yaml"), yaml).unwrap();
        let config = GatewayConfig::load(dir.path()).unwrap();
        let sources = crate::vault::VaultConfig::default();
        let settings = super::postgres_settings(dir.path(), &config, &sources).unwrap();
        assert!(
            format!("{settings:?}").contains("statement_deadline: 120s"),
            "{settings:?}"
        );

        let yaml = format!("{yaml}database_statement_deadline_secs: 900\n");
        std::fs::write(dir.path().join("bridle.yaml"), yaml).unwrap();
        let config = GatewayConfig::load(dir.path()).unwrap();
        let settings = super::postgres_settings(dir.path(), &config, &sources).unwrap();
        assert!(
            format!("{settings:?}").contains("statement_deadline: 900s"),
            "{settings:?}"
        );
    }

    #[test]
    fn only_revocations_and_replacements_end_sessions() {
        assert_eq!(
            agent_whose_tokens_ended("agent_token_revoke claude"),
            Some("claude")
        );
        assert_eq!(agent_whose_tokens_ended("agent_token_set bot"), Some("bot"));
        for other in [
            "agent_token_rotate claude",
            "revoke gitea-token",
            "create claude",
            "agent_token_revoke ",
            "listening",
            "",
        ] {
            assert_eq!(agent_whose_tokens_ended(other), None, "{other}");
        }
    }
}
