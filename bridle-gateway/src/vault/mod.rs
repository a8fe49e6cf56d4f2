//! The vault: every credential the gateway holds, encrypted at rest, write-only to callers.
//!
//! The gateway owns agents' bearer tokens and the tokens it injects into upstream requests
//! (Gitea, Kanboard, any MCP server, embedder API keys). The vault keeps them in SQLite, each
//! value sealed with XChaCha20-Poly1305 under a key derived (HKDF-SHA256) from a 32-byte master
//! key file that lives outside the database. Callers can write values (`create`, `rotate`),
//! destroy them (`revoke`), and read metadata (`list`, `get`: names, versions, states, who and
//! when, a keyed fingerprint); only the injection path reads a value (`current`, `version`,
//! `resolve`), as a [`SecretValue`] that prints as `[redacted]`. Every change and every recorded
//! use appends an audit record in the same transaction, or nothing happens.
//!
//! # Threat model
//!
//! The vault protects against:
//! - a copy of the database (a backup, a stolen volume, a support bundle) without the key file:
//!   values are ciphertext, fingerprints and token hashes are keyed HMACs, so nothing in it can
//!   be decrypted, brute-forced offline or matched against a guessed value;
//! - edits to the database: a ciphertext moved to another name or version, or a row renamed or
//!   renumbered, fails authentication (`decrypt_failed`) instead of yielding another secret; a
//!   database opened with another master key is refused (`wrong_master_key`);
//! - secrets leaking through the gateway's own output: metadata, errors, logs and audit records
//!   never hold a value, and [`SecretValue`] prints and serializes as `[redacted]`;
//! - a revoked credential coming back: revoke overwrites its ciphertext (SQLite `secure_delete`,
//!   then a WAL checkpoint), so not even the master key recovers it;
//! - a crash mid-write: WAL and one transaction per operation leave the last committed state.
//!
//! It does not protect against:
//! - an attacker who holds both the database and the master key file, or who runs code as the
//!   gateway's user (they can read the key, or the process memory while a value is in use);
//! - an upstream or a network path that leaks the credential once it is injected;
//! - deletion: someone who can write the database file can destroy it or its audit log (the
//!   append-only triggers stop mistakes through this API, not a hostile writer); keep backups;
//! - loss of the master key: without it, nothing in the vault can be read again.
//!
//! # Layout
//! `key` (the master key file), `crypto` (HKDF, AEAD, HMACs), `store` (tables and shared
//! writes), `value` (the redacted type), `name` (allowed names), `source` (read-only sources
//! and references), `meta` (metadata types), `tokens` (agent bearer tokens), `audit` (reading
//! the log), `upstream` (the vault as the upstream routes' `SecretSource`), and this file (the
//! secret operations).

mod audit;
mod crypto;
mod error;
mod key;
mod meta;
mod name;
mod source;
mod store;
mod tokens;
mod upstream;
mod value;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

pub use audit::AuditEntry;
pub use error::VaultError;
pub use key::{DEFAULT_KEY_FILE, KeyOrigin, MASTER_KEY_LEN, MasterKey, default_key_path};
pub use meta::{AgentTokenMeta, SecretMeta, VersionMeta, VersionState};
pub use name::{MAX_ACTOR_LEN, MAX_NAME_LEN, is_valid_name};
pub use source::{MAX_VALUE_LEN, ResolvedSecret, SecretRef};
pub use tokens::{AgentMatch, IssuedToken, TOKEN_PREFIX};
pub use value::{REDACTED, SecretValue};

use crypto::VaultKeys;
use name::{check_actor, check_name};
use store::{Record, after_ms, append_audit, from_sql_version, now_ms, time, to_sql_version};

/// The default Docker secrets folder.
pub const DEFAULT_DOCKER_SECRETS_DIR: &str = "/run/secrets";
/// The default file name of the vault database in a data directory.
pub const DEFAULT_DB_FILE: &str = "vault.db";

/// Where the read-only sources are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultConfig {
    /// The folder `docker:NAME` references read (`/run/secrets` by default).
    pub docker_secrets_dir: PathBuf,
    /// The folder `file:NAME` references read (the data directory's `secrets/`), if any.
    pub secrets_dir: Option<PathBuf>,
}

impl Default for VaultConfig {
    fn default() -> Self {
        Self {
            docker_secrets_dir: PathBuf::from(DEFAULT_DOCKER_SECRETS_DIR),
            secrets_dir: None,
        }
    }
}

impl VaultConfig {
    /// The sources of a data directory: `/run/secrets` and `<data>/secrets`.
    pub fn for_data_dir(data_dir: &Path) -> Self {
        Self {
            secrets_dir: Some(data_dir.join("secrets")),
            ..Self::default()
        }
    }
}

/// The value of a secret's active version, for injection.
#[derive(Debug, Clone)]
pub struct CurrentSecret {
    /// The version, to pass to [`Vault::record_use`].
    pub version: u64,
    /// The value.
    pub value: SecretValue,
}

/// What [`Vault::import_folder`] did with each file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImportReport {
    /// Names created in the vault from a file.
    pub imported: Vec<String>,
    /// Names already in the vault with the same value (active version): nothing to do.
    pub unchanged: Vec<String>,
    /// Names already in the vault with a different value: left as the vault has them (rotate
    /// them explicitly if the file is the newer value).
    pub differs: Vec<String>,
}

/// The vault. Cheap to share behind an `Arc`; every method is a short, blocking SQLite
/// transaction (call it from `spawn_blocking` on a busy async runtime).
pub struct Vault {
    conn: Mutex<Connection>,
    keys: VaultKeys,
    path: PathBuf,
    config: VaultConfig,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault")
            .field("path", &self.path)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A version row as the operations need it.
struct VersionRow {
    nonce: Option<Vec<u8>>,
    ciphertext: Option<Vec<u8>>,
    grace_until: Option<i64>,
    revoked_at: Option<i64>,
}

impl Vault {
    /// Opens the vault database at `db_path` (e.g. `<data>/vault.db`), creating it (mode 0600)
    /// on first use, and checks that it was created with this master key.
    pub fn open(db_path: &Path, key: &MasterKey, config: VaultConfig) -> Result<Self, VaultError> {
        let keys = VaultKeys::derive(key);
        let conn = store::open(db_path, &keys)?;
        tracing::debug!(path = %db_path.display(), "vault open");
        Ok(Self {
            conn: Mutex::new(conn),
            keys,
            path: db_path.to_path_buf(),
            config,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The read-only sources.
    pub fn config(&self) -> &VaultConfig {
        &self.config
    }

    pub(crate) fn connection(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written (the transaction
        // rolls back when dropped), so a poisoned lock is still safe to use.
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn keys(&self) -> &VaultKeys {
        &self.keys
    }

    /// Creates `name` with `value` as version 1. Refused if the name exists.
    pub fn create(&self, name: &str, value: &SecretValue, actor: &str) -> Result<u64, VaultError> {
        check_name("secret", name)?;
        check_actor(actor)?;
        check_value(name, value)?;
        let mut conn = self.connection();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let fingerprint = self.insert_new_secret(&tx, name, value, actor, now, "create")?;
        tx.commit()?;
        tracing::info!(secret = name, version = 1, actor, %fingerprint, "vault secret created");
        Ok(1)
    }

    /// Writes the row of a new secret and its audit record; the caller commits.
    fn insert_new_secret(
        &self,
        tx: &rusqlite::Transaction<'_>,
        name: &str,
        value: &SecretValue,
        actor: &str,
        now: i64,
        action: &'static str,
    ) -> Result<String, VaultError> {
        let exists: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM vault_secrets WHERE name = ?1)",
            [name],
            |r| r.get(0),
        )?;
        if exists {
            return Err(VaultError::SecretExists(name.to_owned()));
        }
        let sealed = self.keys.seal(name, 1, value)?;
        let fingerprint = self.keys.fingerprint(value.expose());
        tx.execute(
            "INSERT INTO vault_secrets (name, active_version, created_by, created_at) VALUES (?1, 1, ?2, ?3)",
            params![name, actor, now],
        )?;
        tx.execute(
            "INSERT INTO vault_versions (name, version, nonce, ciphertext, fingerprint, created_by, created_at)
             VALUES (?1, 1, ?2, ?3, ?4, ?5, ?6)",
            params![name, &sealed.nonce[..], sealed.ciphertext, fingerprint, actor, now],
        )?;
        append_audit(
            tx,
            now,
            &Record {
                action,
                actor,
                secret: Some(name),
                version: Some(1),
                fingerprint: Some(&fingerprint),
                ..Record::default()
            },
        )?;
        Ok(fingerprint)
    }

    /// Makes `value` the new active version of `name` (n + 1) and keeps the previous active
    /// version usable through [`Vault::version`] for `grace` (zero: not at all). Versions whose
    /// grace period has ended have their ciphertext destroyed in the same transaction.
    pub fn rotate(
        &self,
        name: &str,
        value: &SecretValue,
        actor: &str,
        grace: Duration,
    ) -> Result<u64, VaultError> {
        check_name("secret", name)?;
        check_actor(actor)?;
        check_value(name, value)?;
        let mut conn = self.connection();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        let active: i64 = tx
            .query_row(
                "SELECT active_version FROM vault_secrets WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| VaultError::SecretNotFound(name.to_owned()))?;
        let latest: i64 = tx.query_row(
            "SELECT MAX(version) FROM vault_versions WHERE name = ?1",
            [name],
            |r| r.get(0),
        )?;
        let version = from_sql_version(latest) + 1;
        let sealed = self.keys.seal(name, version, value)?;
        let fingerprint = self.keys.fingerprint(value.expose());
        tx.execute(
            "UPDATE vault_versions SET grace_until = ?3
             WHERE name = ?1 AND version = ?2 AND revoked_at IS NULL",
            params![name, active, after_ms(now, grace)],
        )?;
        tx.execute(
            "INSERT INTO vault_versions (name, version, nonce, ciphertext, fingerprint, created_by, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                name,
                to_sql_version(version),
                &sealed.nonce[..],
                sealed.ciphertext,
                fingerprint,
                actor,
                now
            ],
        )?;
        tx.execute(
            "UPDATE vault_secrets SET active_version = ?2 WHERE name = ?1",
            params![name, to_sql_version(version)],
        )?;
        append_audit(
            &tx,
            now,
            &Record {
                action: "rotate",
                actor,
                secret: Some(name),
                version: Some(version),
                fingerprint: Some(&fingerprint),
                ..Record::default()
            },
        )?;
        let expired = self.destroy_expired(&tx, name, actor, now)?;
        tx.commit()?;
        tracing::info!(
            secret = name,
            version,
            actor,
            grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            expired,
            %fingerprint,
            "vault secret rotated"
        );
        Ok(version)
    }

    /// Destroys the ciphertext of `name`'s versions whose grace period ended, with an `expire`
    /// record each; returns how many.
    fn destroy_expired(
        &self,
        tx: &rusqlite::Transaction<'_>,
        name: &str,
        actor: &str,
        now: i64,
    ) -> Result<usize, VaultError> {
        let expired: Vec<(i64, String)> = {
            let mut stmt = tx.prepare_cached(
                "SELECT version, fingerprint FROM vault_versions
                 WHERE name = ?1 AND grace_until IS NOT NULL AND grace_until <= ?2
                   AND ciphertext IS NOT NULL",
            )?;
            let rows = stmt.query_map(params![name, now], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        for (version, fingerprint) in &expired {
            tx.execute(
                "UPDATE vault_versions SET nonce = NULL, ciphertext = NULL WHERE name = ?1 AND version = ?2",
                params![name, version],
            )?;
            append_audit(
                tx,
                now,
                &Record {
                    action: "expire",
                    actor,
                    secret: Some(name),
                    version: Some(from_sql_version(*version)),
                    fingerprint: Some(fingerprint),
                    ..Record::default()
                },
            )?;
        }
        Ok(expired.len())
    }

    /// Revokes `version` of `name`: its ciphertext is destroyed for good and it is never
    /// returned again. Revoking the active version leaves the secret without one until the
    /// next rotation (nothing falls back to an older value). Revoking twice is an error.
    pub fn revoke(&self, name: &str, version: u64, actor: &str) -> Result<(), VaultError> {
        check_name("secret", name)?;
        check_actor(actor)?;
        {
            let mut conn = self.connection();
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = now_ms();
            let row = self.version_row(&tx, name, version)?;
            if row.revoked_at.is_some() {
                return Err(VaultError::VersionRevoked {
                    name: name.to_owned(),
                    version,
                });
            }
            let fingerprint: String = tx.query_row(
                "SELECT fingerprint FROM vault_versions WHERE name = ?1 AND version = ?2",
                params![name, to_sql_version(version)],
                |r| r.get(0),
            )?;
            tx.execute(
                "UPDATE vault_versions SET nonce = NULL, ciphertext = NULL, revoked_at = ?3, revoked_by = ?4
                 WHERE name = ?1 AND version = ?2",
                params![name, to_sql_version(version), now, actor],
            )?;
            append_audit(
                &tx,
                now,
                &Record {
                    action: "revoke",
                    actor,
                    secret: Some(name),
                    version: Some(version),
                    fingerprint: Some(&fingerprint),
                    ..Record::default()
                },
            )?;
            tx.commit()?;
            // Move the overwritten pages out of the WAL into the main file now, so the old
            // ciphertext does not linger in the log until the next automatic checkpoint. A
            // reader holding an old snapshot can delay this; the revoke itself is committed.
            if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
                tracing::warn!(error = %e, "vault checkpoint after revoke failed");
            }
        }
        tracing::info!(
            secret = name,
            version,
            actor,
            "vault secret version revoked"
        );
        Ok(())
    }

    fn version_row(
        &self,
        conn: &Connection,
        name: &str,
        version: u64,
    ) -> Result<VersionRow, VaultError> {
        let row = conn
            .query_row(
                "SELECT nonce, ciphertext, grace_until, revoked_at FROM vault_versions
                 WHERE name = ?1 AND version = ?2",
                params![name, to_sql_version(version)],
                |r| {
                    Ok(VersionRow {
                        nonce: r.get(0)?,
                        ciphertext: r.get(1)?,
                        grace_until: r.get(2)?,
                        revoked_at: r.get(3)?,
                    })
                },
            )
            .optional()?;
        match row {
            Some(row) => Ok(row),
            None => {
                let exists: bool = conn.query_row(
                    "SELECT EXISTS (SELECT 1 FROM vault_secrets WHERE name = ?1)",
                    [name],
                    |r| r.get(0),
                )?;
                Err(if exists {
                    VaultError::VersionNotFound {
                        name: name.to_owned(),
                        version,
                    }
                } else {
                    VaultError::SecretNotFound(name.to_owned())
                })
            }
        }
    }

    /// The metadata of every secret, by name.
    pub fn list(&self) -> Result<Vec<SecretMeta>, VaultError> {
        let conn = self.connection();
        let names: Vec<String> = {
            let mut stmt = conn.prepare_cached("SELECT name FROM vault_secrets ORDER BY name")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        names.iter().map(|n| meta_of(&conn, n, now_ms())).collect()
    }

    /// The metadata of `name`.
    pub fn get(&self, name: &str) -> Result<SecretMeta, VaultError> {
        check_name("secret", name)?;
        meta_of(&self.connection(), name, now_ms())
    }

    /// The active version number of `name`, without decrypting (one indexed read: cheap enough
    /// for every forwarded call). Refused like [`Vault::current`] if it was revoked.
    pub fn active_version(&self, name: &str) -> Result<u64, VaultError> {
        check_name("secret", name)?;
        let conn = self.connection();
        let (active, revoked): (i64, bool) = conn
            .query_row(
                "SELECT s.active_version, v.revoked_at IS NOT NULL FROM vault_secrets s
                 JOIN vault_versions v ON v.name = s.name AND v.version = s.active_version
                 WHERE s.name = ?1",
                [name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?
            .ok_or_else(|| VaultError::SecretNotFound(name.to_owned()))?;
        if revoked {
            return Err(VaultError::NoActiveVersion(name.to_owned()));
        }
        Ok(from_sql_version(active))
    }

    /// The active value of `name`, for injection. Refused if the active version was revoked.
    pub fn current(&self, name: &str) -> Result<CurrentSecret, VaultError> {
        check_name("secret", name)?;
        let conn = self.connection();
        let active: i64 = conn
            .query_row(
                "SELECT active_version FROM vault_secrets WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| VaultError::SecretNotFound(name.to_owned()))?;
        let version = from_sql_version(active);
        let row = self.version_row(&conn, name, version)?;
        if row.revoked_at.is_some() {
            return Err(VaultError::NoActiveVersion(name.to_owned()));
        }
        let value = self.decrypt(name, version, &row)?;
        Ok(CurrentSecret { version, value })
    }

    /// The value of `version` of `name`: the active version, or a rotated-out one still in its
    /// grace period. Revoked and expired versions are refused.
    pub fn version(&self, name: &str, version: u64) -> Result<SecretValue, VaultError> {
        check_name("secret", name)?;
        let conn = self.connection();
        let row = self.version_row(&conn, name, version)?;
        if row.revoked_at.is_some() {
            return Err(VaultError::VersionRevoked {
                name: name.to_owned(),
                version,
            });
        }
        if let Some(until) = row.grace_until
            && until <= now_ms()
        {
            return Err(VaultError::VersionExpired {
                name: name.to_owned(),
                version,
            });
        }
        self.decrypt(name, version, &row)
    }

    fn decrypt(
        &self,
        name: &str,
        version: u64,
        row: &VersionRow,
    ) -> Result<SecretValue, VaultError> {
        match (&row.nonce, &row.ciphertext) {
            (Some(nonce), Some(ciphertext)) => self.keys.open(name, version, nonce, ciphertext),
            // Destroyed without a revoke mark: an expired version whose ciphertext was purged.
            _ => Err(VaultError::VersionExpired {
                name: name.to_owned(),
                version,
            }),
        }
    }

    /// Records that `version` of `name` was injected into a request to `upstream`: updates its
    /// last use and appends a `use` record (with the request id and actor, usually the agent).
    /// The caller should not send the request if this fails.
    pub fn record_use(
        &self,
        name: &str,
        version: u64,
        upstream: &str,
        request_id: &str,
        actor: &str,
    ) -> Result<(), VaultError> {
        check_name("secret", name)?;
        check_actor(actor)?;
        let mut conn = self.connection();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        self.version_row(&tx, name, version)?;
        let fingerprint: String = tx.query_row(
            "SELECT fingerprint FROM vault_versions WHERE name = ?1 AND version = ?2",
            params![name, to_sql_version(version)],
            |r| r.get(0),
        )?;
        tx.execute(
            "UPDATE vault_versions SET last_used_at = ?3 WHERE name = ?1 AND version = ?2",
            params![name, to_sql_version(version), now],
        )?;
        append_audit(
            &tx,
            now,
            &Record {
                action: "use",
                actor,
                secret: Some(name),
                version: Some(version),
                upstream: Some(upstream),
                request_id: Some(request_id),
                fingerprint: Some(&fingerprint),
                ..Record::default()
            },
        )?;
        tx.commit()?;
        tracing::debug!(
            secret = name,
            version,
            upstream,
            request_id,
            actor,
            "vault secret used"
        );
        Ok(())
    }

    /// Resolves a reference to its value: `vault:` from the vault (its active version),
    /// `docker:` and `file:` from their folders. A missing or empty secret is an error naming
    /// the reference.
    pub fn resolve(&self, reference: &SecretRef) -> Result<ResolvedSecret, VaultError> {
        let (version, value) = match reference {
            SecretRef::Vault(name) => {
                let current = self.current(name)?;
                (Some(current.version), current.value)
            }
            SecretRef::Docker(name) => (
                None,
                source::read_file(
                    &reference.to_string(),
                    &self.config.docker_secrets_dir,
                    name,
                )?,
            ),
            SecretRef::File(name) => {
                let dir = self
                    .config
                    .secrets_dir
                    .as_deref()
                    .ok_or_else(|| VaultError::SourceNotConfigured(reference.to_string()))?;
                (None, source::read_file(&reference.to_string(), dir, name)?)
            }
        };
        Ok(ResolvedSecret {
            reference: reference.clone(),
            version,
            value,
        })
    }

    /// Imports every secret file of `dir` (a Docker secrets folder or a data directory's
    /// `secrets/`) into the vault, in one transaction: new names are created (audit action
    /// `import`), names already holding the same value are left alone, and names holding a
    /// different value are reported and left alone. Running it twice changes nothing the second
    /// time. The files are only read; deleting them afterwards is the operator's call.
    pub fn import_folder(&self, dir: &Path, actor: &str) -> Result<ImportReport, VaultError> {
        check_actor(actor)?;
        let files = source::read_folder(dir)?;
        for (name, value) in &files {
            check_value(name, value)?;
        }
        let mut report = ImportReport::default();
        let mut conn = self.connection();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = now_ms();
        for (name, value) in &files {
            let active: Option<String> = tx
                .query_row(
                    "SELECT v.fingerprint FROM vault_secrets s JOIN vault_versions v
                       ON v.name = s.name AND v.version = s.active_version AND v.revoked_at IS NULL
                     WHERE s.name = ?1",
                    [name],
                    |r| r.get(0),
                )
                .optional()?;
            let exists: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM vault_secrets WHERE name = ?1)",
                [name],
                |r| r.get(0),
            )?;
            if !exists {
                self.insert_new_secret(&tx, name, value, actor, now, "import")?;
                report.imported.push(name.clone());
            } else if active.as_deref() == Some(&self.keys.fingerprint(value.expose())) {
                report.unchanged.push(name.clone());
            } else {
                report.differs.push(name.clone());
            }
        }
        tx.commit()?;
        tracing::info!(
            dir = %dir.display(),
            actor,
            imported = report.imported.len(),
            unchanged = report.unchanged.len(),
            differs = report.differs.len(),
            "vault import"
        );
        Ok(report)
    }
}

fn check_value(name: &str, value: &SecretValue) -> Result<(), VaultError> {
    if value.is_empty() {
        return Err(VaultError::InvalidValue {
            name: name.to_owned(),
            reason: "it is empty".to_owned(),
        });
    }
    if value.len() > MAX_VALUE_LEN {
        return Err(VaultError::InvalidValue {
            name: name.to_owned(),
            reason: format!("it is longer than {MAX_VALUE_LEN} bytes"),
        });
    }
    Ok(())
}

fn meta_of(conn: &Connection, name: &str, now: i64) -> Result<SecretMeta, VaultError> {
    let (active, created_by, created_at): (i64, String, i64) = conn
        .query_row(
            "SELECT active_version, created_by, created_at FROM vault_secrets WHERE name = ?1",
            [name],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?
        .ok_or_else(|| VaultError::SecretNotFound(name.to_owned()))?;
    let mut stmt = conn.prepare_cached(
        "SELECT version, fingerprint, created_by, created_at, grace_until, revoked_at, revoked_by,
                last_used_at
         FROM vault_versions WHERE name = ?1 ORDER BY version",
    )?;
    let rows = stmt.query_map([name], |r| {
        let version: i64 = r.get(0)?;
        let grace_until: Option<i64> = r.get(4)?;
        let revoked_at: Option<i64> = r.get(5)?;
        let revoked_by: Option<String> = r.get(6)?;
        let state = match (revoked_at, grace_until) {
            (Some(at), _) => VersionState::Revoked {
                at: time(at),
                by: revoked_by.unwrap_or_default(),
            },
            (None, Some(until)) if until <= now => VersionState::Expired { since: time(until) },
            (None, Some(until)) => VersionState::Grace { until: time(until) },
            (None, None) if version == active => VersionState::Active,
            // A version after a revoked active one that was never rotated out cannot exist;
            // reading one means the row was edited, and it is shown as unusable.
            (None, None) => VersionState::Expired { since: time(0) },
        };
        Ok(VersionMeta {
            version: from_sql_version(version),
            state,
            fingerprint: r.get(1)?,
            created_by: r.get(2)?,
            created_at: time(r.get(3)?),
            last_used_at: r.get::<_, Option<i64>>(7)?.map(time),
        })
    })?;
    let versions: Vec<VersionMeta> = rows.collect::<Result<_, _>>()?;
    let last_used_at = versions.iter().filter_map(|v| v.last_used_at).max();
    Ok(SecretMeta {
        name: name.to_owned(),
        active_version: from_sql_version(active),
        created_by,
        created_at: time(created_at),
        last_used_at,
        versions,
    })
}
