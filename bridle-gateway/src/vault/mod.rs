//! The vault: every credential the gateway holds, encrypted at rest, write-only to callers.
//!
//! The gateway owns agents' bearer tokens and the tokens it injects into upstream requests
//! (Gitea, Kanboard, any MCP server, embedder API keys). The vault keeps them in SQLite (one
//! gateway) or PostgreSQL (several replicas on one database, each given the same master key),
//! each value sealed with XChaCha20-Poly1305 under a key derived (HKDF-SHA256) from a 32-byte master
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
//!   then a WAL checkpoint), so not even the master key recovers it; on PostgreSQL the old row
//!   version lasts until `VACUUM` (run after each revoke) and in the server's write-ahead log
//!   and backups until they are recycled, still sealed under the master key;
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
//! `key` (the master key file), `crypto` (HKDF, AEAD, HMACs), `store` (the rows and the
//! transaction trait both backends implement), `sqlite` and `postgres` (the backends), `value`
//! (the redacted type), `name` (allowed names), `source` (read-only sources and references),
//! `meta` (metadata types), `tokens` (agent bearer tokens), `token_cache` (verified tokens,
//! invalidated by PostgreSQL's notifications or SQLite's token-change `marker`), `audit`
//! (reading the log),
//! `upstream` (the vault as the upstream routes' `SecretSource`), and this file (the secret
//! operations).

mod audit;
mod crypto;
mod error;
mod key;
mod marker;
mod meta;
mod name;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod source;
mod sqlite;
mod store;
mod token_cache;
mod tokens;
mod upstream;
mod value;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use audit::AuditEntry;
pub use error::VaultError;
pub use key::{DEFAULT_KEY_FILE, KeyOrigin, MASTER_KEY_LEN, MasterKey, default_key_path};
pub use marker::SETTLE as TOKEN_MARKER_SETTLE;
pub use meta::{AgentTokenMeta, SecretMeta, VersionMeta, VersionState};
pub use name::{MAX_ACTOR_LEN, MAX_NAME_LEN, is_valid_name};
#[cfg(feature = "postgres")]
pub use postgres::{VAULT_CHANNEL, VAULT_PG_MIGRATIONS};
pub use source::{MAX_VALUE_LEN, ResolvedSecret, SecretRef};
pub use sqlite::VAULT_MIGRATIONS;
#[cfg(feature = "postgres")]
pub use token_cache::TokenCacheStatus;
pub use token_cache::{CAPACITY as TOKEN_CACHE_CAPACITY, MAX_AGE as TOKEN_CACHE_MAX_AGE};
pub use tokens::{AgentMatch, CachedToken, IssuedToken, TOKEN_PREFIX, TokenLookup};
pub use value::{REDACTED, SecretValue};

use crypto::VaultKeys;
pub(crate) use name::shown_name;
use name::{check_actor, check_name};
use store::{
    NewVersion, Record, VaultBackend, VaultTx, VersionRow, after_ms, from_sql_version, now_ms,
    time, to_sql_version,
};

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

/// One use of a secret, for [`Vault::record_uses`]: which version of which secret went in a
/// request to which upstream, for whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretUseRecord<'a> {
    /// The secret's name.
    pub name: &'a str,
    /// The version injected.
    pub version: u64,
    /// The upstream the request went to.
    pub upstream: &'a str,
    /// The request it went with (the forwarded tool, or `connect`).
    pub request_id: &'a str,
    /// Whose request it was (usually the agent).
    pub actor: &'a str,
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

/// The vault. Cheap to share behind an `Arc`; every method is a short, blocking transaction on
/// its database (call it from `spawn_blocking` on a busy async runtime).
pub struct Vault {
    backend: Box<dyn VaultBackend>,
    keys: VaultKeys,
    path: PathBuf,
    config: VaultConfig,
    #[cfg(feature = "postgres")]
    postgres: Option<bridle_rules::db::postgres::PgDatabase>,
    /// Verified token hashes (`None` for a SQLite vault whose marker could not be made).
    token_cache: Option<std::sync::Arc<token_cache::TokenCache>>,
    /// A SQLite vault's token-change marker, which its cache is trusted under.
    marker: Option<marker::ChangeMarker>,
    /// Stops the task feeding `token_cache` when the vault is dropped.
    #[cfg(feature = "postgres")]
    _token_cache_feed: Option<tokio_util::sync::DropGuard>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault")
            .field("path", &self.path)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Vault {
    /// Opens the vault database at `db_path` (e.g. `<data>/vault.db`), creating it (mode 0600)
    /// on first use, and checks that it was created with this master key.
    pub fn open(db_path: &Path, key: &MasterKey, config: VaultConfig) -> Result<Self, VaultError> {
        let keys = VaultKeys::derive(key);
        let backend = sqlite::SqliteVault::open(db_path, &keys)?;
        tracing::debug!(path = %db_path.display(), "vault open");
        let marker = marker::ChangeMarker::beside(db_path)
            .inspect_err(|e| {
                tracing::warn!(
                    error = %e,
                    "no token-change marker beside the vault; every token check reads the vault"
                );
            })
            .ok();
        Ok(Self {
            backend: Box::new(backend),
            keys,
            path: db_path.to_path_buf(),
            config,
            #[cfg(feature = "postgres")]
            postgres: None,
            token_cache: marker
                .as_ref()
                .map(|_| std::sync::Arc::new(token_cache::TokenCache::new())),
            marker,
            #[cfg(feature = "postgres")]
            _token_cache_feed: None,
        })
    }

    /// Opens the vault in a PostgreSQL database shared by several gateway replicas, creating
    /// and migrating its tables, and checks that it was created with this master key: every
    /// replica must be given the same master key (the same key file or Docker secret), or it is
    /// refused with `wrong_master_key`. Changes are announced on [`VAULT_CHANNEL`]. Token
    /// checks are answered from a bounded cache of verified token hashes while this handle
    /// listens on that channel (a token revoked on another replica is refused as soon as its
    /// notification arrives; see [`Vault::token_cache`]), and from the database otherwise.
    #[cfg(feature = "postgres")]
    pub fn open_postgres(
        db: bridle_rules::db::postgres::PgDatabase,
        key: &MasterKey,
        config: VaultConfig,
    ) -> Result<Self, VaultError> {
        let keys = VaultKeys::derive(key);
        let backend = postgres::PgVault::open(db.clone(), &keys)?;
        let path = postgres::location(&db);
        tracing::debug!(path = %path.display(), "vault open");
        let cache = std::sync::Arc::new(token_cache::TokenCache::new());
        let stop = tokio_util::sync::CancellationToken::new();
        db.runtime().spawn(token_cache::follow(
            std::sync::Arc::clone(&cache),
            db.listen_on(VAULT_CHANNEL),
            stop.clone(),
        ));
        Ok(Self {
            backend: Box::new(backend),
            keys,
            path,
            config,
            postgres: Some(db),
            token_cache: Some(cache),
            marker: None,
            _token_cache_feed: Some(stop.drop_guard()),
        })
    }

    /// Where the vault's database is: the SQLite file, or `postgres:DBNAME`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The read-only sources.
    pub fn config(&self) -> &VaultConfig {
        &self.config
    }

    /// The PostgreSQL database the vault lives in, if it does.
    #[cfg(feature = "postgres")]
    pub fn postgres(&self) -> Option<&bridle_rules::db::postgres::PgDatabase> {
        self.postgres.as_ref()
    }

    /// Each change made to the vault by any replica (a token issued, rotated or revoked, a
    /// secret created, rotated, revoked or imported), as `ACTION NAME` (names are not secret),
    /// plus [`bridle_rules::db::postgres::LISTENING`] each time the listening connection is
    /// (re)made. `None` for a SQLite vault, which only this process writes.
    #[cfg(feature = "postgres")]
    pub fn changes(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<String>> {
        self.postgres.as_ref().map(|db| db.listen_on(VAULT_CHANNEL))
    }

    /// The state of the token cache of a vault in PostgreSQL (`None` for SQLite, whose cache
    /// follows the token-change marker beside its file): whether it is in use (its listening
    /// connection is up) and how many change notifications and connection failures it has
    /// seen. A test or a health check can wait on it for a change made elsewhere to have
    /// reached this handle.
    #[cfg(feature = "postgres")]
    pub fn token_cache(&self) -> Option<tokio::sync::watch::Receiver<TokenCacheStatus>> {
        self.postgres.as_ref()?;
        self.token_cache.as_ref().map(|c| c.status())
    }

    /// Marks a change of agent tokens for other processes on a SQLite vault, once inside the
    /// change's transaction and again after it (see [`marker`]).
    fn mark_token_change(&self) {
        if let Some(m) = &self.marker {
            m.touch();
        }
    }

    /// Drops the cached tokens of `agent` after a change made through this handle (on
    /// PostgreSQL its own notification comes back later), and marks the change.
    fn forget_cached_tokens(&self, agent: &str) {
        if let Some(cache) = &self.token_cache {
            cache.forget_agent(agent);
        }
        self.mark_token_change();
    }

    /// What the token cache says of `hash` at `now`.
    fn cached_token(&self, hash: &str, now: i64) -> token_cache::Lookup {
        match (&self.token_cache, &self.marker) {
            (None, _) => token_cache::Lookup::Bypass,
            (Some(cache), Some(m)) => {
                cache.lookup_marked(hash, now, m.stamp(), std::time::SystemTime::now())
            }
            (Some(cache), None) => cache.lookup(hash, now),
        }
    }

    pub(crate) fn keys(&self) -> &VaultKeys {
        &self.keys
    }

    pub(crate) fn write(&self) -> Result<Box<dyn VaultTx + '_>, VaultError> {
        self.backend.begin(true)
    }

    pub(crate) fn read(&self) -> Result<Box<dyn VaultTx + '_>, VaultError> {
        self.backend.begin(false)
    }

    /// Creates `name` with `value` as version 1. Refused if the name exists.
    pub fn create(&self, name: &str, value: &SecretValue, actor: &str) -> Result<u64, VaultError> {
        check_name("secret", name)?;
        check_actor(actor)?;
        check_value(name, value)?;
        let mut tx = self.write()?;
        let now = now_ms();
        let fingerprint = self.insert_new_secret(&mut *tx, name, value, actor, now, "create")?;
        tx.commit()?;
        tracing::info!(secret = name, version = 1, actor, %fingerprint, "vault secret created");
        Ok(1)
    }

    /// Writes the row of a new secret and its audit record; the caller commits.
    fn insert_new_secret(
        &self,
        tx: &mut dyn VaultTx,
        name: &str,
        value: &SecretValue,
        actor: &str,
        now: i64,
        action: &'static str,
    ) -> Result<String, VaultError> {
        if tx.secret(name)?.is_some() {
            return Err(VaultError::SecretExists(name.to_owned()));
        }
        let sealed = self.keys.seal(name, 1, value)?;
        let fingerprint = self.keys.fingerprint(value.expose());
        tx.insert_secret(name, actor, now)?;
        tx.insert_version(&NewVersion {
            name,
            version: 1,
            nonce: &sealed.nonce[..],
            ciphertext: &sealed.ciphertext,
            fingerprint: &fingerprint,
            actor,
            now,
        })?;
        tx.append_audit(
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
    /// grace period has ended have their ciphertext destroyed in the same transaction, and, as
    /// after a revoke, moved out of the database's logs (SQLite's WAL checkpoint, PostgreSQL's
    /// `VACUUM`).
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
        let mut tx = self.write()?;
        let now = now_ms();
        let active = tx
            .secret(name)?
            .ok_or_else(|| VaultError::SecretNotFound(name.to_owned()))?
            .active_version;
        let latest = tx.max_version(name)?.unwrap_or(0);
        let version = from_sql_version(latest) + 1;
        let sealed = self.keys.seal(name, version, value)?;
        let fingerprint = self.keys.fingerprint(value.expose());
        tx.set_grace(name, active, after_ms(now, grace))?;
        tx.insert_version(&NewVersion {
            name,
            version: to_sql_version(version),
            nonce: &sealed.nonce[..],
            ciphertext: &sealed.ciphertext,
            fingerprint: &fingerprint,
            actor,
            now,
        })?;
        tx.set_active(name, to_sql_version(version))?;
        tx.append_audit(
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
        let expired = destroy_expired(&mut *tx, name, actor, now)?;
        tx.commit()?;
        if expired > 0 {
            // As after a revoke: the destroyed bytes leave the database's logs now.
            self.backend.after_destroy();
        }
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

    /// Revokes `version` of `name`: its ciphertext is destroyed for good and it is never
    /// returned again. Revoking the active version leaves the secret without one until the
    /// next rotation (nothing falls back to an older value). Revoking twice is an error.
    pub fn revoke(&self, name: &str, version: u64, actor: &str) -> Result<(), VaultError> {
        check_name("secret", name)?;
        check_actor(actor)?;
        {
            let mut tx = self.write()?;
            let now = now_ms();
            let row = version_row(&mut *tx, name, version)?;
            if row.revoked_at.is_some() {
                return Err(VaultError::VersionRevoked {
                    name: name.to_owned(),
                    version,
                });
            }
            tx.destroy(name, to_sql_version(version), Some((now, actor)))?;
            tx.append_audit(
                now,
                &Record {
                    action: "revoke",
                    actor,
                    secret: Some(name),
                    version: Some(version),
                    fingerprint: Some(&row.fingerprint),
                    ..Record::default()
                },
            )?;
            tx.commit()?;
        }
        self.backend.after_destroy();
        tracing::info!(
            secret = name,
            version,
            actor,
            "vault secret version revoked"
        );
        Ok(())
    }

    /// The metadata of every secret, by name.
    pub fn list(&self) -> Result<Vec<SecretMeta>, VaultError> {
        let mut tx = self.read()?;
        let names = tx.secret_names()?;
        let now = now_ms();
        names.iter().map(|n| meta_of(&mut *tx, n, now)).collect()
    }

    /// The metadata of `name`.
    pub fn get(&self, name: &str) -> Result<SecretMeta, VaultError> {
        check_name("secret", name)?;
        meta_of(&mut *self.read()?, name, now_ms())
    }

    /// The active version number of `name`, without decrypting (indexed reads: cheap enough
    /// for every forwarded call). Refused like [`Vault::current`] if it was revoked.
    pub fn active_version(&self, name: &str) -> Result<u64, VaultError> {
        check_name("secret", name)?;
        let mut tx = self.read()?;
        let active = tx
            .secret(name)?
            .ok_or_else(|| VaultError::SecretNotFound(name.to_owned()))?
            .active_version;
        let revoked = tx
            .version(name, active)?
            .is_none_or(|v| v.revoked_at.is_some());
        if revoked {
            return Err(VaultError::NoActiveVersion(name.to_owned()));
        }
        Ok(from_sql_version(active))
    }

    /// The active value of `name`, for injection. Refused if the active version was revoked.
    pub fn current(&self, name: &str) -> Result<CurrentSecret, VaultError> {
        check_name("secret", name)?;
        let mut tx = self.read()?;
        let active = tx
            .secret(name)?
            .ok_or_else(|| VaultError::SecretNotFound(name.to_owned()))?
            .active_version;
        let version = from_sql_version(active);
        let row = version_row(&mut *tx, name, version)?;
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
        let row = version_row(&mut *self.read()?, name, version)?;
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
    /// The caller should not send the request if this fails. Under load, prefer
    /// [`Vault::record_uses`], which records many uses with one commit.
    pub fn record_use(
        &self,
        name: &str,
        version: u64,
        upstream: &str,
        request_id: &str,
        actor: &str,
    ) -> Result<(), VaultError> {
        let used = SecretUseRecord {
            name,
            version,
            upstream,
            request_id,
            actor,
        };
        match self.record_uses(std::slice::from_ref(&used))?.pop() {
            Some(outcome) => outcome,
            None => Err(VaultError::AuditWriteFailed {
                action: "use",
                reason: "the batch answered no outcome".to_owned(),
            }),
        }
    }

    /// Records many uses in one transaction, so they share one commit (one `fsync` with the
    /// embedded database): the gateway's forwarded calls record their uses this way, in
    /// batches of whatever arrived while the previous batch was being written.
    ///
    /// The outer error means nothing was recorded (the database failed); otherwise each use
    /// has its own outcome, in order: a use of an unknown secret or version, of a version
    /// revoked or past its grace period (since its value was read), or with an invalid name or
    /// actor, is refused on its own and the others are recorded.
    ///
    /// ```
    /// # use bridle_gateway::vault::{MasterKey, SecretUseRecord, Vault, VaultConfig};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let vault = Vault::open(&dir.path().join("vault.db"), &MasterKey::from_bytes([7; 32]), VaultConfig::default())?;
    /// vault.create("gitea", &"tok".into(), "admin")?;
    /// let use_of = |name| SecretUseRecord { name, version: 1, upstream: "gitea", request_id: "r1", actor: "claude" };
    /// let outcomes = vault.record_uses(&[use_of("gitea"), use_of("nope")])?;
    /// assert!(outcomes[0].is_ok());
    /// assert_eq!(outcomes[1].as_ref().unwrap_err().code(), "secret_not_found");
    /// # Ok::<(), bridle_gateway::vault::VaultError>(())
    /// ```
    pub fn record_uses(
        &self,
        uses: &[SecretUseRecord<'_>],
    ) -> Result<Vec<Result<(), VaultError>>, VaultError> {
        let mut outcomes = Vec::with_capacity(uses.len());
        let mut tx = self.write()?;
        let now = now_ms();
        let mut recorded = 0usize;
        for used in uses {
            // Refusals of one use (a bad name, an unknown version) are read-only checks made
            // before anything of that use is written, so the others still commit; a failed
            // write ends the whole batch (the transaction rolls back when `tx` drops).
            // A version revoked, or past its grace, since its value was read is refused too:
            // this write is serialized with revokes and rotations, and the caller sends nothing
            // on a refusal, so a revoked credential never goes out after its revoke committed.
            let checked = check_name("secret", used.name)
                .and_then(|()| check_actor(used.actor))
                .and_then(|()| version_row(&mut *tx, used.name, used.version))
                .and_then(|row| usable(used.name, used.version, row, now));
            let row = match checked {
                Ok(row) => row,
                Err(
                    e @ (VaultError::InvalidName { .. }
                    | VaultError::InvalidActor(_)
                    | VaultError::SecretNotFound(_)
                    | VaultError::VersionNotFound { .. }
                    | VaultError::VersionRevoked { .. }
                    | VaultError::VersionExpired { .. }),
                ) => {
                    outcomes.push(Err(e));
                    continue;
                }
                Err(e) => return Err(e),
            };
            tx.touch(used.name, to_sql_version(used.version), now)?;
            tx.append_audit(
                now,
                &Record {
                    action: "use",
                    actor: used.actor,
                    secret: Some(used.name),
                    version: Some(used.version),
                    upstream: Some(used.upstream),
                    request_id: Some(used.request_id),
                    fingerprint: Some(&row.fingerprint),
                    ..Record::default()
                },
            )?;
            recorded += 1;
            outcomes.push(Ok(()));
        }
        if recorded > 0 {
            tx.commit()?;
        }
        for (used, outcome) in uses.iter().zip(&outcomes) {
            if outcome.is_ok() {
                tracing::debug!(
                    secret = used.name,
                    version = used.version,
                    upstream = used.upstream,
                    request_id = used.request_id,
                    actor = used.actor,
                    "vault secret used"
                );
            }
        }
        Ok(outcomes)
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
            other => (None, self.config.read_source(other)?),
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
        let mut tx = self.write()?;
        let now = now_ms();
        for (name, value) in &files {
            match tx.secret(name)? {
                None => {
                    self.insert_new_secret(&mut *tx, name, value, actor, now, "import")?;
                    report.imported.push(name.clone());
                }
                Some(secret) => {
                    let active = tx
                        .version(name, secret.active_version)?
                        .filter(|v| v.revoked_at.is_none())
                        .map(|v| v.fingerprint);
                    if active.as_deref() == Some(&self.keys.fingerprint(value.expose())) {
                        report.unchanged.push(name.clone());
                    } else {
                        report.differs.push(name.clone());
                    }
                }
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

impl VaultConfig {
    /// The value of a `docker:` or `file:` reference, read from its folder (no database is
    /// involved, so this also serves before the vault itself is open, e.g. for the password of
    /// the database the vault lives in). A `vault:` reference is refused here.
    pub fn read_source(&self, reference: &SecretRef) -> Result<SecretValue, VaultError> {
        match reference {
            SecretRef::Vault(_) => Err(VaultError::InvalidReference {
                reference: reference.to_string(),
                reason: "a vault: reference cannot be read before the vault is open".into(),
            }),
            SecretRef::Docker(name) => {
                source::read_file(&reference.to_string(), &self.docker_secrets_dir, name)
            }
            SecretRef::File(name) => {
                let dir = self
                    .secrets_dir
                    .as_deref()
                    .ok_or_else(|| VaultError::SourceNotConfigured(reference.to_string()))?;
                source::read_file(&reference.to_string(), dir, name)
            }
        }
    }
}

/// The version row of `name`/`version`, or the error saying which of the two is missing.
fn version_row(tx: &mut dyn VaultTx, name: &str, version: u64) -> Result<VersionRow, VaultError> {
    match tx.version(name, to_sql_version(version))? {
        Some(row) => Ok(row),
        None if tx.secret(name)?.is_some() => Err(VaultError::VersionNotFound {
            name: name.to_owned(),
            version,
        }),
        None => Err(VaultError::SecretNotFound(name.to_owned())),
    }
}

/// The row of a version that may still be used at `now`: neither revoked nor past its grace
/// period (nor destroyed).
fn usable(name: &str, version: u64, row: VersionRow, now: i64) -> Result<VersionRow, VaultError> {
    if row.revoked_at.is_some() {
        return Err(VaultError::VersionRevoked {
            name: name.to_owned(),
            version,
        });
    }
    if row.grace_until.is_some_and(|until| until <= now) || row.ciphertext.is_none() {
        return Err(VaultError::VersionExpired {
            name: name.to_owned(),
            version,
        });
    }
    Ok(row)
}

/// Destroys the ciphertext of `name`'s versions whose grace period ended, with an `expire`
/// record each; returns how many.
fn destroy_expired(
    tx: &mut dyn VaultTx,
    name: &str,
    actor: &str,
    now: i64,
) -> Result<usize, VaultError> {
    let expired = tx.expired_versions(name, now)?;
    for (version, fingerprint) in &expired {
        tx.destroy(name, *version, None)?;
        tx.append_audit(
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

fn meta_of(tx: &mut dyn VaultTx, name: &str, now: i64) -> Result<SecretMeta, VaultError> {
    let secret = tx
        .secret(name)?
        .ok_or_else(|| VaultError::SecretNotFound(name.to_owned()))?;
    let active = secret.active_version;
    let versions: Vec<VersionMeta> = tx
        .versions(name)?
        .into_iter()
        .map(|v| {
            let state = match (v.revoked_at, v.grace_until) {
                (Some(at), _) => VersionState::Revoked {
                    at: time(at),
                    by: v.revoked_by.unwrap_or_default(),
                },
                (None, Some(until)) if until <= now => VersionState::Expired { since: time(until) },
                (None, Some(until)) => VersionState::Grace { until: time(until) },
                (None, None) if v.version == active => VersionState::Active,
                // A version after a revoked active one that was never rotated out cannot
                // exist; reading one means the row was edited, and it is shown as unusable.
                (None, None) => VersionState::Expired { since: time(0) },
            };
            VersionMeta {
                version: from_sql_version(v.version),
                state,
                fingerprint: v.fingerprint,
                created_by: v.created_by,
                created_at: time(v.created_at),
                last_used_at: v.last_used_at.map(time),
            }
        })
        .collect();
    let last_used_at = versions.iter().filter_map(|v| v.last_used_at).max();
    Ok(SecretMeta {
        name: name.to_owned(),
        active_version: from_sql_version(active),
        created_by: secret.created_by,
        created_at: time(secret.created_at),
        last_used_at,
        versions,
    })
}
