//! The vault's SQLite tables and the writes every operation shares.
//!
//! All vault state lives in five tables of one database file (prefixed `vault_`, so the file can
//! be shared with other gateway tables): `vault_meta` (schema version and the master key's check
//! value), `vault_secrets` (one row per name, its active version), `vault_versions` (one row per
//! version: nonce, ciphertext, fingerprint, state), `vault_agent_tokens` (keyed hashes of agent
//! bearer tokens) and `vault_audit` (append-only: triggers refuse UPDATE and DELETE). The
//! database runs in WAL mode with `synchronous = FULL`, so a process killed at any instant leaves
//! the last committed state readable, and with `secure_delete`, so a destroyed ciphertext is
//! overwritten on disk rather than left in a free page. Every change and its audit record are
//! written in one `BEGIN IMMEDIATE` transaction: if the record cannot be written, the change is
//! rolled back with it.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bridle_rules::RulesError;
use bridle_rules::db::{Migration, Migrations, migrate_sqlite};
use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::crypto::VaultKeys;
use super::error::VaultError;

/// The schema version this build writes and reads.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// The vault's tables as numbered, checksummed steps (`schema_migrations`, store `vault`).
/// Step 1 is the schema from before versioning, so such a file is adopted as it is; never edit
/// a released step, add one. (`vault_meta.schema_version` stays 1 for the builds before.)
pub const VAULT_MIGRATIONS: Migrations = Migrations {
    store: "vault",
    steps: &[Migration {
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
    }],
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
pub(crate) fn open(path: &Path, keys: &VaultKeys) -> Result<Connection, VaultError> {
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

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `now + d` in milliseconds, saturating.
pub(crate) fn after_ms(now: i64, d: Duration) -> i64 {
    now.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A stored millisecond timestamp as a UTC time.
pub(crate) fn time(ms: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default()
}

/// One audit record to append.
#[derive(Default)]
pub(crate) struct Record<'a> {
    pub(crate) action: &'static str,
    pub(crate) actor: &'a str,
    pub(crate) secret: Option<&'a str>,
    pub(crate) version: Option<u64>,
    pub(crate) agent: Option<&'a str>,
    pub(crate) upstream: Option<&'a str>,
    pub(crate) request_id: Option<&'a str>,
    pub(crate) fingerprint: Option<&'a str>,
}

/// Appends `record` inside `tx`; a failure becomes [`VaultError::AuditWriteFailed`], and the
/// caller's `?` drops the transaction, which rolls the whole operation back.
pub(crate) fn append_audit(
    tx: &Transaction<'_>,
    now: i64,
    record: &Record<'_>,
) -> Result<(), VaultError> {
    tx.execute(
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

/// Versions are stored as SQLite integers (they never come near `i64::MAX`).
pub(crate) fn to_sql_version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A stored version back to `u64` (a negative value would be a corrupted row; it reads as 0).
pub(crate) fn from_sql_version(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}
