//! The embedded backend of the vault: its tables in one SQLite file (`<data>/vault.db`).
//!
//! The database runs in WAL mode with `synchronous = FULL`, so a process killed at any instant
//! leaves the last committed state readable, and with `secure_delete`, so a destroyed ciphertext
//! is overwritten on disk rather than left in a free page (and the WAL is checkpointed after a
//! revoke, and after a rotation that destroyed an expired version). Writers take
//! `BEGIN IMMEDIATE`, so the gateway and the command line can share the file. The
//! `vault_audit` table refuses UPDATE and DELETE through triggers.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bridle_rules::RulesError;
use bridle_rules::db::{Migration, Migrations, migrate_sqlite};
use rusqlite::{Connection, OptionalExtension, params};

use super::audit::AuditEntry;
use super::crypto::VaultKeys;
use super::error::VaultError;
use super::store::{
    NewVersion, Record, SCHEMA_VERSION, SecretRow, TokenRow, VaultBackend, VaultTx, VersionInfo,
    VersionRow, from_sql_version, time, to_sql_version,
};

/// The vault's tables as numbered, checksummed steps (`schema_migrations`, store `vault`).
/// Step 1 is the schema from before versioning, so such a file is adopted as it is; never edit
/// a released step, add one. (`vault_meta.schema_version` stays 1 for the builds before.)
pub const VAULT_MIGRATIONS: Migrations = Migrations {
    store: "vault",
    steps: &[
        Migration {
            version: 1,
            name: "baseline",
            sql: "
CREATE TABLE IF NOT EXISTS vault_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS vault_secrets (
    name           TEXT PRIMARY KEY,
    active_version INTEGER NOT NULL,
    created_by     TEXT NOT NULL,
    created_at     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS vault_versions (
    name         TEXT NOT NULL REFERENCES vault_secrets(name),
    version      INTEGER NOT NULL,
    nonce        BLOB,
    ciphertext   BLOB,
    fingerprint  TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    grace_until  INTEGER,
    revoked_at   INTEGER,
    revoked_by   TEXT,
    last_used_at INTEGER,
    PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS vault_agent_tokens (
    agent       TEXT NOT NULL,
    version     INTEGER NOT NULL,
    token_hash  TEXT NOT NULL UNIQUE,
    created_by  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    valid_until INTEGER,
    revoked_at  INTEGER,
    revoked_by  TEXT,
    PRIMARY KEY (agent, version)
);
CREATE TABLE IF NOT EXISTS vault_audit (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    action      TEXT NOT NULL,
    actor       TEXT NOT NULL,
    secret      TEXT,
    version     INTEGER,
    agent       TEXT,
    upstream    TEXT,
    request_id  TEXT,
    fingerprint TEXT
);
CREATE TRIGGER IF NOT EXISTS vault_audit_no_update BEFORE UPDATE ON vault_audit
BEGIN SELECT RAISE(ABORT, 'vault_audit is append-only'); END;
CREATE TRIGGER IF NOT EXISTS vault_audit_no_delete BEFORE DELETE ON vault_audit
BEGIN SELECT RAISE(ABORT, 'vault_audit is append-only'); END;
",
        },
        // How many records each action has, kept by the database with every record appended
        // (the log is append-only), so reading the counts (`/metrics`, which needs no token)
        // reads a handful of rows instead of every record of a log that only grows. Counted
        // afresh from the log and created only if missing, so a file adopted from before
        // versioning (which applies every step) gets the same counts.
        Migration {
            version: 2,
            name: "action_counts",
            sql: "
CREATE TABLE IF NOT EXISTS vault_action_counts (
    action TEXT PRIMARY KEY,
    n      INTEGER NOT NULL
);
DELETE FROM vault_action_counts;
INSERT INTO vault_action_counts (action, n)
    SELECT action, COUNT(*) FROM vault_audit GROUP BY action;
CREATE TRIGGER IF NOT EXISTS vault_audit_counted AFTER INSERT ON vault_audit
BEGIN
    INSERT OR IGNORE INTO vault_action_counts (action, n) VALUES (NEW.action, 0);
    UPDATE vault_action_counts SET n = n + 1 WHERE action = NEW.action;
END;
",
        },
    ],
};

/// A migration failure as the vault's error: a database error stays one; a schema this build
/// does not know (newer, or a step edited since) is `vault_schema`.
fn schema_error(e: RulesError) -> VaultError {
    match e {
        RulesError::Database(e) => VaultError::Database(e),
        RulesError::DatabaseTooNew {
            found, supported, ..
        } => VaultError::Schema {
            found: i64::from(found),
            expected: i64::from(supported),
        },
        other => {
            tracing::warn!(error = %other, "the vault's schema does not match this build");
            VaultError::Schema {
                found: -1,
                expected: i64::from(VAULT_MIGRATIONS.latest()),
            }
        }
    }
}

/// Opens (creating if needed) the vault database and checks it belongs to `keys`.
fn open(path: &Path, keys: &VaultKeys) -> Result<Connection, VaultError> {
    create_private_file(path)?;
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(30))?;
    // `journal_mode` answers with a row, so it is read rather than executed.
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(mode, "the vault database could not switch to WAL mode");
    }
    conn.execute_batch(
        "PRAGMA synchronous = FULL; PRAGMA secure_delete = ON; PRAGMA foreign_keys = ON;",
    )?;
    migrate_sqlite(&mut conn, &VAULT_MIGRATIONS).map_err(schema_error)?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let meta = |key: &str| {
        tx.query_row("SELECT value FROM vault_meta WHERE key = ?1", [key], |r| {
            r.get::<_, String>(0)
        })
        .optional()
    };
    match meta("schema_version")? {
        None => {
            tx.execute(
                "INSERT INTO vault_meta (key, value) VALUES ('schema_version', ?1)",
                [SCHEMA_VERSION.to_string()],
            )?;
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
                "INSERT INTO vault_meta (key, value) VALUES ('key_check', ?1)",
                [&check],
            )?;
        }
        Some(stored) if stored == check => {}
        Some(_) => {
            return Err(VaultError::WrongMasterKey {
                path: path.to_path_buf(),
            });
        }
    }
    tx.commit()?;
    Ok(conn)
}

/// Creates an empty database file with mode 0600 if there is none (SQLite gives its `-wal` and
/// `-shm` files the same mode).
fn create_private_file(path: &Path) -> Result<(), VaultError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(VaultError::Database(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("cannot create {}: {e}", path.display())),
        ))),
    }
}

/// The SQLite vault database: one connection, shared behind a mutex.
pub(crate) struct SqliteVault {
    conn: Mutex<Connection>,
}

impl SqliteVault {
    /// Opens (creating it, mode 0600) and migrates the file, and checks it belongs to `keys`.
    pub(crate) fn open(path: &Path, keys: &VaultKeys) -> Result<Self, VaultError> {
        Ok(Self {
            conn: Mutex::new(open(path, keys)?),
        })
    }

    fn connection(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (an open transaction
        // is rolled back when its guard drops), so a poisoned lock is still safe to use.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl VaultBackend for SqliteVault {
    fn begin(&self, write: bool) -> Result<Box<dyn VaultTx + '_>, VaultError> {
        let conn = self.connection();
        if write {
            conn.execute_batch("BEGIN IMMEDIATE")?;
        }
        Ok(Box::new(SqliteTx { conn, open: write }))
    }

    fn after_destroy(&self) {
        // Move the overwritten pages out of the WAL into the main file now, so the old
        // ciphertext does not linger in the log until the next automatic checkpoint. A reader
        // holding an old snapshot can delay this; the change itself is committed.
        if let Err(e) = self
            .connection()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        {
            tracing::warn!(error = %e, "vault checkpoint after a destroyed ciphertext failed");
        }
    }
}

/// A transaction (write) or the bare connection (read).
struct SqliteTx<'a> {
    conn: MutexGuard<'a, Connection>,
    open: bool,
}

impl Drop for SqliteTx<'_> {
    fn drop(&mut self) {
        if self.open
            && let Err(e) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::warn!(error = %e, "rolling back a vault transaction failed");
        }
    }
}

fn version_info(r: &rusqlite::Row<'_>) -> rusqlite::Result<VersionInfo> {
    Ok(VersionInfo {
        version: r.get(0)?,
        fingerprint: r.get(1)?,
        created_by: r.get(2)?,
        created_at: r.get(3)?,
        grace_until: r.get(4)?,
        revoked_at: r.get(5)?,
        revoked_by: r.get(6)?,
        last_used_at: r.get(7)?,
    })
}

impl VaultTx for SqliteTx<'_> {
    fn secret(&mut self, name: &str) -> Result<Option<SecretRow>, VaultError> {
        Ok(self
            .conn
            .query_row(
                "SELECT active_version, created_by, created_at FROM vault_secrets WHERE name = ?1",
                [name],
                |r| {
                    Ok(SecretRow {
                        active_version: r.get(0)?,
                        created_by: r.get(1)?,
                        created_at: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }

    fn secret_names(&mut self) -> Result<Vec<String>, VaultError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT name FROM vault_secrets ORDER BY name")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn insert_secret(&mut self, name: &str, actor: &str, now: i64) -> Result<(), VaultError> {
        self.conn.execute(
            "INSERT INTO vault_secrets (name, active_version, created_by, created_at) VALUES (?1, 1, ?2, ?3)",
            params![name, actor, now],
        )?;
        Ok(())
    }

    fn set_active(&mut self, name: &str, version: i64) -> Result<(), VaultError> {
        self.conn.execute(
            "UPDATE vault_secrets SET active_version = ?2 WHERE name = ?1",
            params![name, version],
        )?;
        Ok(())
    }

    fn max_version(&mut self, name: &str) -> Result<Option<i64>, VaultError> {
        Ok(self.conn.query_row(
            "SELECT MAX(version) FROM vault_versions WHERE name = ?1",
            [name],
            |r| r.get(0),
        )?)
    }

    fn version(&mut self, name: &str, version: i64) -> Result<Option<VersionRow>, VaultError> {
        Ok(self
            .conn
            .query_row(
                "SELECT nonce, ciphertext, fingerprint, grace_until, revoked_at FROM vault_versions
                 WHERE name = ?1 AND version = ?2",
                params![name, version],
                |r| {
                    Ok(VersionRow {
                        nonce: r.get(0)?,
                        ciphertext: r.get(1)?,
                        fingerprint: r.get(2)?,
                        grace_until: r.get(3)?,
                        revoked_at: r.get(4)?,
                    })
                },
            )
            .optional()?)
    }

    fn versions(&mut self, name: &str) -> Result<Vec<VersionInfo>, VaultError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT version, fingerprint, created_by, created_at, grace_until, revoked_at, revoked_by,
                    last_used_at
             FROM vault_versions WHERE name = ?1 ORDER BY version",
        )?;
        let rows = stmt.query_map([name], version_info)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn insert_version(&mut self, v: &NewVersion<'_>) -> Result<(), VaultError> {
        self.conn.execute(
            "INSERT INTO vault_versions (name, version, nonce, ciphertext, fingerprint, created_by, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![v.name, v.version, v.nonce, v.ciphertext, v.fingerprint, v.actor, v.now],
        )?;
        Ok(())
    }

    fn set_grace(&mut self, name: &str, version: i64, until: i64) -> Result<(), VaultError> {
        self.conn.execute(
            "UPDATE vault_versions SET grace_until = ?3
             WHERE name = ?1 AND version = ?2 AND revoked_at IS NULL",
            params![name, version, until],
        )?;
        Ok(())
    }

    fn expired_versions(&mut self, name: &str, now: i64) -> Result<Vec<(i64, String)>, VaultError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT version, fingerprint FROM vault_versions
             WHERE name = ?1 AND grace_until IS NOT NULL AND grace_until <= ?2
               AND ciphertext IS NOT NULL ORDER BY version",
        )?;
        let rows = stmt.query_map(params![name, now], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn destroy(
        &mut self,
        name: &str,
        version: i64,
        revoked: Option<(i64, &str)>,
    ) -> Result<(), VaultError> {
        match revoked {
            Some((at, by)) => self.conn.execute(
                "UPDATE vault_versions SET nonce = NULL, ciphertext = NULL, revoked_at = ?3, revoked_by = ?4
                 WHERE name = ?1 AND version = ?2",
                params![name, version, at, by],
            )?,
            None => self.conn.execute(
                "UPDATE vault_versions SET nonce = NULL, ciphertext = NULL WHERE name = ?1 AND version = ?2",
                params![name, version],
            )?,
        };
        Ok(())
    }

    fn touch(&mut self, name: &str, version: i64, now: i64) -> Result<(), VaultError> {
        self.conn.execute(
            "UPDATE vault_versions SET last_used_at = ?3 WHERE name = ?1 AND version = ?2",
            params![name, version, now],
        )?;
        Ok(())
    }

    fn max_token_version(&mut self, agent: &str) -> Result<Option<i64>, VaultError> {
        Ok(self.conn.query_row(
            "SELECT MAX(version) FROM vault_agent_tokens WHERE agent = ?1",
            [agent],
            |r| r.get(0),
        )?)
    }

    fn revoke_tokens(&mut self, agent: &str, now: i64, actor: &str) -> Result<usize, VaultError> {
        let valid = self.conn.execute(
            "UPDATE vault_agent_tokens SET revoked_at = ?2, revoked_by = ?3
             WHERE agent = ?1 AND revoked_at IS NULL AND (valid_until IS NULL OR valid_until > ?2)",
            params![agent, now, actor],
        )?;
        // Rotated-out tokens past their grace are ended too, so none is left unrevoked.
        self.conn.execute(
            "UPDATE vault_agent_tokens SET revoked_at = ?2, revoked_by = ?3
             WHERE agent = ?1 AND revoked_at IS NULL",
            params![agent, now, actor],
        )?;
        Ok(valid)
    }

    fn cap_tokens(&mut self, agent: &str, until: i64) -> Result<(), VaultError> {
        self.conn.execute(
            "UPDATE vault_agent_tokens SET valid_until = MIN(COALESCE(valid_until, ?2), ?2)
             WHERE agent = ?1 AND revoked_at IS NULL",
            params![agent, until],
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
        self.conn.execute(
            "INSERT INTO vault_agent_tokens (agent, version, token_hash, created_by, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![agent, version, hash, actor, now],
        )?;
        Ok(())
    }

    fn token(
        &mut self,
        hash: &str,
        now: i64,
    ) -> Result<Option<(String, i64, Option<i64>)>, VaultError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT agent, version, valid_until FROM vault_agent_tokens
                 WHERE token_hash = ?1 AND revoked_at IS NULL
                   AND (valid_until IS NULL OR valid_until > ?2)",
            )?
            .query_row(params![hash, now], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?)
    }

    fn tokens(&mut self, agent: &str) -> Result<Vec<TokenRow>, VaultError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT version, token_hash, created_by, created_at, valid_until, revoked_at
             FROM vault_agent_tokens WHERE agent = ?1 ORDER BY version",
        )?;
        let rows = stmt.query_map([agent], |r| {
            Ok(TokenRow {
                version: r.get(0)?,
                token_hash: r.get(1)?,
                created_by: r.get(2)?,
                created_at: r.get(3)?,
                valid_until: r.get(4)?,
                revoked_at: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn token_agents(&mut self) -> Result<Vec<String>, VaultError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT DISTINCT agent FROM vault_agent_tokens ORDER BY agent")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn append_audit(&mut self, now: i64, record: &Record<'_>) -> Result<(), VaultError> {
        self.conn
            .execute(
                "INSERT INTO vault_audit (at, action, actor, secret, version, agent, upstream, request_id, fingerprint)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    now,
                    record.action,
                    record.actor,
                    record.secret,
                    record.version.map(to_sql_version),
                    record.agent,
                    record.upstream,
                    record.request_id,
                    record.fingerprint,
                ],
            )
            .map(drop)
            .map_err(|e| VaultError::AuditWriteFailed {
                action: record.action,
                reason: e.to_string(),
            })
    }

    fn audit(&mut self, after: i64, limit: i64) -> Result<Vec<AuditEntry>, VaultError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, at, action, actor, secret, version, agent, upstream, request_id, fingerprint
             FROM vault_audit WHERE seq > ?1 ORDER BY seq LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![after, limit], |r| {
            Ok(AuditEntry {
                seq: from_sql_version(r.get(0)?),
                at: time(r.get(1)?),
                action: r.get(2)?,
                actor: r.get(3)?,
                secret: r.get(4)?,
                version: r.get::<_, Option<i64>>(5)?.map(from_sql_version),
                agent: r.get(6)?,
                upstream: r.get(7)?,
                request_id: r.get(8)?,
                fingerprint: r.get(9)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn action_counts(&mut self) -> Result<Vec<(String, u64)>, VaultError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT action, n FROM vault_action_counts ORDER BY action")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, from_sql_version(r.get(1)?)))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn commit(mut self: Box<Self>) -> Result<(), VaultError> {
        if self.open {
            self.conn.execute_batch("COMMIT")?;
            self.open = false;
        }
        Ok(())
    }
}
