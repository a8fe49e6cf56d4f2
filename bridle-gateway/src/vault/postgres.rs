//! The PostgreSQL backend of the vault, for several gateway replicas on one database.
//!
//! The same five tables as the SQLite file, in this dialect (`BYTEA` for nonces and
//! ciphertexts, `BIGINT` milliseconds for times), migrated as the `vault` store of
//! `schema_migrations`. Writers on every replica are serialized by one transaction-scoped
//! advisory lock (the counterpart of SQLite's `BEGIN IMMEDIATE`), so version numbers and token
//! versions never collide. Every change other than a recorded use announces itself on
//! [`VAULT_CHANNEL`] in its transaction (delivered at commit). Token checks go through a small
//! cache of verified token hashes (`token_cache`) that those notifications invalidate, and that
//! is bypassed whenever the listening connection is down, so a revocation on one replica is
//! refused by every other one as soon as its notification arrives.
//!
//! `vault_meta` keeps the master key's check value: every replica must hold the same master
//! key (the same key file or Docker secret), or it is refused with `wrong_master_key`.
//! `vault_audit` refuses UPDATE and DELETE through a trigger, as in SQLite.
//!
//! What differs from SQLite: a revoked ciphertext is overwritten in its row, but PostgreSQL
//! keeps the old row version in the table's pages until `VACUUM` reclaims it (run here after
//! each revoke and each expiry, best effort) and in its write-ahead log and backups until those
//! are recycled. The ciphertext there is still sealed under the master key.

use std::path::PathBuf;

use bridle_rules::RulesError;
use bridle_rules::db::postgres::{PgClient, PgDatabase, PgTransaction};
use bridle_rules::db::{Migration, Migrations};
use tokio_postgres::Row;

use super::audit::AuditEntry;
use super::crypto::VaultKeys;
use super::error::VaultError;
use super::store::{
    NewVersion, Record, SCHEMA_VERSION, SecretRow, TokenRow, VaultBackend, VaultTx, VersionInfo,
    VersionRow, from_sql_version, time, to_sql_version,
};

/// The `NOTIFY` channel on which the vault announces each change (payload `ACTION NAME`).
pub const VAULT_CHANNEL: &str = "bridle_vault";

/// The advisory-lock key of vault writers.
const VAULT_LOCK: i64 = 0x6272_6964_6c65_0003;

/// The vault's tables in PostgreSQL, numbered like the SQLite steps (the same tables in this
/// dialect). Never edit a released step, add one.
pub const VAULT_PG_MIGRATIONS: Migrations = Migrations {
    store: "vault",
    steps: &[
        Migration {
            version: 1,
            name: "baseline",
            sql: "
CREATE TABLE vault_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE vault_secrets (
    name           TEXT PRIMARY KEY,
    active_version BIGINT NOT NULL,
    created_by     TEXT NOT NULL,
    created_at     BIGINT NOT NULL
);
CREATE TABLE vault_versions (
    name         TEXT NOT NULL REFERENCES vault_secrets(name),
    version      BIGINT NOT NULL,
    nonce        BYTEA,
    ciphertext   BYTEA,
    fingerprint  TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    grace_until  BIGINT,
    revoked_at   BIGINT,
    revoked_by   TEXT,
    last_used_at BIGINT,
    PRIMARY KEY (name, version)
);
CREATE TABLE vault_agent_tokens (
    agent       TEXT NOT NULL,
    version     BIGINT NOT NULL,
    token_hash  TEXT NOT NULL UNIQUE,
    created_by  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    valid_until BIGINT,
    revoked_at  BIGINT,
    revoked_by  TEXT,
    PRIMARY KEY (agent, version)
);
CREATE TABLE vault_audit (
    seq         BIGSERIAL PRIMARY KEY,
    at          BIGINT NOT NULL,
    action      TEXT NOT NULL,
    actor       TEXT NOT NULL,
    secret      TEXT,
    version     BIGINT,
    agent       TEXT,
    upstream    TEXT,
    request_id  TEXT,
    fingerprint TEXT
);
CREATE FUNCTION vault_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'vault_audit is append-only'; END;
$$;
CREATE TRIGGER vault_audit_no_change BEFORE UPDATE OR DELETE ON vault_audit
    FOR EACH ROW EXECUTE FUNCTION vault_audit_append_only();
CREATE TRIGGER vault_audit_no_truncate BEFORE TRUNCATE ON vault_audit
    FOR EACH STATEMENT EXECUTE FUNCTION vault_audit_append_only();
",
        },
        // As SQLite's step 2: the records of each action counted by the database as they are
        // appended, so reading the counts does not read the whole log.
        Migration {
            version: 2,
            name: "action_counts",
            sql: "
CREATE TABLE vault_action_counts (
    action TEXT PRIMARY KEY,
    n      BIGINT NOT NULL
);
INSERT INTO vault_action_counts (action, n)
    SELECT action, COUNT(*) FROM vault_audit GROUP BY action;
CREATE FUNCTION vault_audit_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO vault_action_counts (action, n) VALUES (NEW.action, 1)
        ON CONFLICT (action) DO UPDATE SET n = vault_action_counts.n + 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER vault_audit_counted AFTER INSERT ON vault_audit
    FOR EACH ROW EXECUTE FUNCTION vault_audit_counted();
",
        },
    ],
};

fn pg(e: RulesError) -> VaultError {
    match e {
        RulesError::DatabaseTooNew {
            found, supported, ..
        } => VaultError::Schema {
            found: i64::from(found),
            expected: i64::from(supported),
        },
        RulesError::MigrationChanged { .. } => {
            tracing::warn!(error = %e, "the vault's schema does not match this build");
            VaultError::Schema {
                found: -1,
                expected: i64::from(VAULT_PG_MIGRATIONS.latest()),
            }
        }
        RulesError::Postgres(message) => VaultError::Postgres(message),
        other => VaultError::Postgres(other.to_string()),
    }
}

/// How a PostgreSQL vault is named in messages and [`super::Vault::path`].
pub(crate) fn location(db: &PgDatabase) -> PathBuf {
    PathBuf::from(format!("postgres:{}", db.dbname()))
}

/// The PostgreSQL vault database.
pub(crate) struct PgVault {
    db: PgDatabase,
}

impl PgVault {
    /// Migrates the tables and checks (or, on a new database, records) the master key.
    pub(crate) fn open(db: PgDatabase, keys: &VaultKeys) -> Result<Self, VaultError> {
        db.migrate(&VAULT_PG_MIGRATIONS).map_err(pg)?;
        let tx = db
            .client()
            .map_err(pg)?
            .begin(Some(VAULT_LOCK))
            .map_err(pg)?;
        let meta = |key: &str| -> Result<Option<String>, VaultError> {
            Ok(tx
                .query_opt("SELECT value FROM vault_meta WHERE key = $1", &[&key])
                .map_err(pg)?
                .map(|r| r.get::<_, String>(0)))
        };
        match meta("schema_version")? {
            None => {
                tx.execute(
                    "INSERT INTO vault_meta (key, value) VALUES ('schema_version', $1)",
                    &[&SCHEMA_VERSION.to_string()],
                )
                .map_err(pg)?;
            }
            Some(found) => {
                let found = found.parse::<i64>().unwrap_or(-1);
                if found != SCHEMA_VERSION {
                    return Err(VaultError::Schema {
                        found,
                        expected: SCHEMA_VERSION,
                    });
                }
            }
        }
        let check = keys.check_value();
        match meta("key_check")? {
            None => {
                tx.execute(
                    "INSERT INTO vault_meta (key, value) VALUES ('key_check', $1)",
                    &[&check],
                )
                .map_err(pg)?;
            }
            Some(stored) if stored == check => {}
            Some(_) => {
                return Err(VaultError::WrongMasterKey {
                    path: location(&db),
                });
            }
        }
        tx.commit().map_err(pg)?;
        Ok(Self { db })
    }
}

impl VaultBackend for PgVault {
    fn begin(&self, write: bool) -> Result<Box<dyn VaultTx + '_>, VaultError> {
        let client = self.db.client().map_err(pg)?;
        Ok(Box::new(if write {
            PgTx::Write(client.begin(Some(VAULT_LOCK)).map_err(pg)?)
        } else {
            PgTx::Read(client)
        }))
    }

    fn after_destroy(&self) {
        // Reclaims the dead row versions that still hold the old ciphertext (it cannot run in
        // a transaction; a concurrent reader's snapshot can keep a row alive a little longer).
        let vacuum = self
            .db
            .client()
            .and_then(|c| c.batch("VACUUM vault_versions"));
        if let Err(e) = vacuum {
            tracing::warn!(error = %e, "vacuum of the vault after a destroyed ciphertext failed");
        }
    }
}

/// A write transaction (holding the writers' lock) or a pooled connection for a read.
enum PgTx {
    Write(PgTransaction),
    Read(PgClient),
}

impl PgTx {
    fn c(&self) -> &PgClient {
        match self {
            Self::Write(tx) => tx,
            Self::Read(c) => c,
        }
    }

    fn opt(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<Row>, VaultError> {
        self.c().query_opt(sql, params).map_err(pg)
    }

    fn rows(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, VaultError> {
        self.c().query(sql, params).map_err(pg)
    }

    fn exec(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, VaultError> {
        self.c().execute(sql, params).map_err(pg)
    }
}

// Columns are read with `Row::get`, whose types hold by construction: the tables are this
// module's migrations, and opening refuses a database whose recorded steps differ.
impl VaultTx for PgTx {
    fn secret(&mut self, name: &str) -> Result<Option<SecretRow>, VaultError> {
        Ok(self
            .opt(
                "SELECT active_version, created_by, created_at FROM vault_secrets WHERE name = $1",
                &[&name],
            )?
            .map(|r| SecretRow {
                active_version: r.get(0),
                created_by: r.get(1),
                created_at: r.get(2),
            }))
    }

    fn secret_names(&mut self) -> Result<Vec<String>, VaultError> {
        Ok(self
            .rows("SELECT name FROM vault_secrets ORDER BY name", &[])?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    fn insert_secret(&mut self, name: &str, actor: &str, now: i64) -> Result<(), VaultError> {
        self.exec(
            "INSERT INTO vault_secrets (name, active_version, created_by, created_at) VALUES ($1, 1, $2, $3)",
            &[&name, &actor, &now],
        )?;
        Ok(())
    }

    fn set_active(&mut self, name: &str, version: i64) -> Result<(), VaultError> {
        self.exec(
            "UPDATE vault_secrets SET active_version = $2 WHERE name = $1",
            &[&name, &version],
        )?;
        Ok(())
    }

    fn max_version(&mut self, name: &str) -> Result<Option<i64>, VaultError> {
        Ok(self
            .opt(
                "SELECT MAX(version) FROM vault_versions WHERE name = $1",
                &[&name],
            )?
            .and_then(|r| r.get(0)))
    }

    fn version(&mut self, name: &str, version: i64) -> Result<Option<VersionRow>, VaultError> {
        Ok(self
            .opt(
                "SELECT nonce, ciphertext, fingerprint, grace_until, revoked_at FROM vault_versions
                 WHERE name = $1 AND version = $2",
                &[&name, &version],
            )?
            .map(|r| VersionRow {
                nonce: r.get(0),
                ciphertext: r.get(1),
                fingerprint: r.get(2),
                grace_until: r.get(3),
                revoked_at: r.get(4),
            }))
    }

    fn versions(&mut self, name: &str) -> Result<Vec<VersionInfo>, VaultError> {
        Ok(self
            .rows(
                "SELECT version, fingerprint, created_by, created_at, grace_until, revoked_at,
                        revoked_by, last_used_at
                 FROM vault_versions WHERE name = $1 ORDER BY version",
                &[&name],
            )?
            .iter()
            .map(|r| VersionInfo {
                version: r.get(0),
                fingerprint: r.get(1),
                created_by: r.get(2),
                created_at: r.get(3),
                grace_until: r.get(4),
                revoked_at: r.get(5),
                revoked_by: r.get(6),
                last_used_at: r.get(7),
            })
            .collect())
    }

    fn insert_version(&mut self, v: &NewVersion<'_>) -> Result<(), VaultError> {
        self.exec(
            "INSERT INTO vault_versions (name, version, nonce, ciphertext, fingerprint, created_by, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[&v.name, &v.version, &v.nonce, &v.ciphertext, &v.fingerprint, &v.actor, &v.now],
        )?;
        Ok(())
    }

    fn set_grace(&mut self, name: &str, version: i64, until: i64) -> Result<(), VaultError> {
        self.exec(
            "UPDATE vault_versions SET grace_until = $3
             WHERE name = $1 AND version = $2 AND revoked_at IS NULL",
            &[&name, &version, &until],
        )?;
        Ok(())
    }

    fn expired_versions(&mut self, name: &str, now: i64) -> Result<Vec<(i64, String)>, VaultError> {
        Ok(self
            .rows(
                "SELECT version, fingerprint FROM vault_versions
                 WHERE name = $1 AND grace_until IS NOT NULL AND grace_until <= $2
                   AND ciphertext IS NOT NULL ORDER BY version",
                &[&name, &now],
            )?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    fn destroy(
        &mut self,
        name: &str,
        version: i64,
        revoked: Option<(i64, &str)>,
    ) -> Result<(), VaultError> {
        match revoked {
            Some((at, by)) => self.exec(
                "UPDATE vault_versions SET nonce = NULL, ciphertext = NULL, revoked_at = $3, revoked_by = $4
                 WHERE name = $1 AND version = $2",
                &[&name, &version, &at, &by],
            )?,
            None => self.exec(
                "UPDATE vault_versions SET nonce = NULL, ciphertext = NULL WHERE name = $1 AND version = $2",
                &[&name, &version],
            )?,
        };
        Ok(())
    }

    fn touch(&mut self, name: &str, version: i64, now: i64) -> Result<(), VaultError> {
        self.exec(
            "UPDATE vault_versions SET last_used_at = $3 WHERE name = $1 AND version = $2",
            &[&name, &version, &now],
        )?;
        Ok(())
    }

    fn max_token_version(&mut self, agent: &str) -> Result<Option<i64>, VaultError> {
        Ok(self
            .opt(
                "SELECT MAX(version) FROM vault_agent_tokens WHERE agent = $1",
                &[&agent],
            )?
            .and_then(|r| r.get(0)))
    }

    fn revoke_tokens(&mut self, agent: &str, now: i64, actor: &str) -> Result<usize, VaultError> {
        let valid = self.exec(
            "UPDATE vault_agent_tokens SET revoked_at = $2, revoked_by = $3
             WHERE agent = $1 AND revoked_at IS NULL AND (valid_until IS NULL OR valid_until > $2)",
            &[&agent, &now, &actor],
        )?;
        // Rotated-out tokens past their grace are ended too, so none is left unrevoked.
        self.exec(
            "UPDATE vault_agent_tokens SET revoked_at = $2, revoked_by = $3
             WHERE agent = $1 AND revoked_at IS NULL",
            &[&agent, &now, &actor],
        )?;
        Ok(usize::try_from(valid).unwrap_or(usize::MAX))
    }

    fn cap_tokens(&mut self, agent: &str, until: i64) -> Result<(), VaultError> {
        self.exec(
            "UPDATE vault_agent_tokens SET valid_until = LEAST(COALESCE(valid_until, $2), $2)
             WHERE agent = $1 AND revoked_at IS NULL",
            &[&agent, &until],
        )?;
        Ok(())
    }

    fn insert_token(
        &mut self,
        agent: &str,
        version: i64,
        hash: &str,
        actor: &str,
        now: i64,
    ) -> Result<(), VaultError> {
        self.exec(
            "INSERT INTO vault_agent_tokens (agent, version, token_hash, created_by, created_at)
             VALUES ($1, $2, $3, $4, $5)",
            &[&agent, &version, &hash, &actor, &now],
        )?;
        Ok(())
    }

    fn token(
        &mut self,
        hash: &str,
        now: i64,
    ) -> Result<Option<(String, i64, Option<i64>)>, VaultError> {
        Ok(self
            .opt(
                "SELECT agent, version, valid_until FROM vault_agent_tokens
                 WHERE token_hash = $1 AND revoked_at IS NULL
                   AND (valid_until IS NULL OR valid_until > $2)",
                &[&hash, &now],
            )?
            .map(|r| (r.get(0), r.get(1), r.get(2))))
    }

    fn tokens(&mut self, agent: &str) -> Result<Vec<TokenRow>, VaultError> {
        Ok(self
            .rows(
                "SELECT version, token_hash, created_by, created_at, valid_until, revoked_at
                 FROM vault_agent_tokens WHERE agent = $1 ORDER BY version",
                &[&agent],
            )?
            .iter()
            .map(|r| TokenRow {
                version: r.get(0),
                token_hash: r.get(1),
                created_by: r.get(2),
                created_at: r.get(3),
                valid_until: r.get(4),
                revoked_at: r.get(5),
            })
            .collect())
    }

    fn token_agents(&mut self) -> Result<Vec<String>, VaultError> {
        Ok(self
            .rows(
                "SELECT DISTINCT agent FROM vault_agent_tokens ORDER BY agent",
                &[],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    fn append_audit(&mut self, now: i64, record: &Record<'_>) -> Result<(), VaultError> {
        let failed = |e: RulesError| VaultError::AuditWriteFailed {
            action: record.action,
            reason: e.to_string(),
        };
        let version = record.version.map(to_sql_version);
        self.c()
            .execute(
                "INSERT INTO vault_audit (at, action, actor, secret, version, agent, upstream, request_id, fingerprint)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &now,
                    &record.action,
                    &record.actor,
                    &record.secret,
                    &version,
                    &record.agent,
                    &record.upstream,
                    &record.request_id,
                    &record.fingerprint,
                ],
            )
            .map_err(failed)?;
        if record.is_change() {
            // Delivered to every listening replica when (and only if) the change commits.
            let subject = record.agent.or(record.secret).unwrap_or_default();
            let payload = format!("{} {subject}", record.action);
            self.c()
                .execute("SELECT pg_notify($1, $2)", &[&VAULT_CHANNEL, &payload])
                .map_err(failed)?;
        }
        Ok(())
    }

    fn audit(&mut self, after: i64, limit: i64) -> Result<Vec<AuditEntry>, VaultError> {
        Ok(self
            .rows(
                "SELECT seq, at, action, actor, secret, version, agent, upstream, request_id, fingerprint
                 FROM vault_audit WHERE seq > $1 ORDER BY seq LIMIT $2",
                &[&after, &limit],
            )?
            .iter()
            .map(|r| AuditEntry {
                seq: from_sql_version(r.get(0)),
                at: time(r.get(1)),
                action: r.get(2),
                actor: r.get(3),
                secret: r.get(4),
                version: r.get::<_, Option<i64>>(5).map(from_sql_version),
                agent: r.get(6),
                upstream: r.get(7),
                request_id: r.get(8),
                fingerprint: r.get(9),
            })
            .collect())
    }

    fn action_counts(&mut self) -> Result<Vec<(String, u64)>, VaultError> {
        Ok(self
            .rows(
                "SELECT action, n FROM vault_action_counts ORDER BY action",
                &[],
            )?
            .iter()
            .map(|r| (r.get::<_, String>(0), from_sql_version(r.get(1))))
            .collect())
    }

    fn commit(self: Box<Self>) -> Result<(), VaultError> {
        match *self {
            Self::Write(tx) => tx.commit().map_err(pg),
            Self::Read(_) => Ok(()),
        }
    }
}
