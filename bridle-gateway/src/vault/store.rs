//! The vault's storage interface: the rows it reads and writes, and one transaction trait that
//! the SQLite and PostgreSQL backends each implement.
//!
//! [`Vault`](super::Vault) holds the logic once (checks, sealing, versions, grace periods,
//! audit records); a backend only stores and fetches rows. Five tables hold everything, in both
//! dialects: `vault_meta` (schema version and the master key's check value), `vault_secrets`
//! (one row per name, its active version), `vault_versions` (one row per version: nonce,
//! ciphertext, fingerprint, state), `vault_agent_tokens` (keyed hashes of agent bearer tokens)
//! and `vault_audit` (append-only). A write transaction is serialized against every other
//! writer of the same database, in any process or replica (SQLite's `BEGIN IMMEDIATE`, a
//! PostgreSQL advisory lock), and every change appends its audit record inside it: if the
//! record cannot be written, the change is rolled back with it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};

use super::audit::AuditEntry;
use super::error::VaultError;

/// The schema version `vault_meta` records (kept at 1; the steps are in `schema_migrations`).
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// A secret's row.
pub(crate) struct SecretRow {
    pub active_version: i64,
    pub created_by: String,
    pub created_at: i64,
}

/// A version row as the operations need it.
pub(crate) struct VersionRow {
    pub nonce: Option<Vec<u8>>,
    pub ciphertext: Option<Vec<u8>>,
    pub fingerprint: String,
    pub grace_until: Option<i64>,
    pub revoked_at: Option<i64>,
}

/// A version row as the metadata needs it.
pub(crate) struct VersionInfo {
    pub version: i64,
    pub fingerprint: String,
    pub created_by: String,
    pub created_at: i64,
    pub grace_until: Option<i64>,
    pub revoked_at: Option<i64>,
    pub revoked_by: Option<String>,
    pub last_used_at: Option<i64>,
}

/// A version to insert.
pub(crate) struct NewVersion<'a> {
    pub name: &'a str,
    pub version: i64,
    pub nonce: &'a [u8],
    pub ciphertext: &'a [u8],
    pub fingerprint: &'a str,
    pub actor: &'a str,
    pub now: i64,
}

/// An agent token row (metadata only).
pub(crate) struct TokenRow {
    pub version: i64,
    pub token_hash: String,
    pub created_by: String,
    pub created_at: i64,
    pub valid_until: Option<i64>,
    pub revoked_at: Option<i64>,
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

impl Record<'_> {
    /// Whether the record is of a change other replicas must learn of (everything but a
    /// recorded use, which is on the call path and changes no credential).
    #[cfg(feature = "postgres")]
    pub(crate) fn is_change(&self) -> bool {
        self.action != "use"
    }
}

/// One transaction (or, for reads, one connection) on a vault database. Dropped without
/// [`VaultTx::commit`], a write transaction is rolled back.
pub(crate) trait VaultTx {
    /// A secret's row.
    fn secret(&mut self, name: &str) -> Result<Option<SecretRow>, VaultError>;
    /// Every secret's name, sorted.
    fn secret_names(&mut self) -> Result<Vec<String>, VaultError>;
    /// Inserts a secret's row with active version 1.
    fn insert_secret(&mut self, name: &str, actor: &str, now: i64) -> Result<(), VaultError>;
    /// Makes `version` the secret's active version.
    fn set_active(&mut self, name: &str, version: i64) -> Result<(), VaultError>;
    /// The highest version of a secret (`None` without versions).
    fn max_version(&mut self, name: &str) -> Result<Option<i64>, VaultError>;
    /// One version.
    fn version(&mut self, name: &str, version: i64) -> Result<Option<VersionRow>, VaultError>;
    /// Every version of a secret, oldest first.
    fn versions(&mut self, name: &str) -> Result<Vec<VersionInfo>, VaultError>;
    /// Inserts a version.
    fn insert_version(&mut self, v: &NewVersion<'_>) -> Result<(), VaultError>;
    /// Ends a version's use at `until`, unless it was revoked.
    fn set_grace(&mut self, name: &str, version: i64, until: i64) -> Result<(), VaultError>;
    /// The versions whose grace ended by `now` and that still hold a ciphertext, with their
    /// fingerprints.
    fn expired_versions(&mut self, name: &str, now: i64) -> Result<Vec<(i64, String)>, VaultError>;
    /// Destroys a version's nonce and ciphertext; with `revoked` (when, by whom), marks it
    /// revoked too.
    fn destroy(
        &mut self,
        name: &str,
        version: i64,
        revoked: Option<(i64, &str)>,
    ) -> Result<(), VaultError>;
    /// Records a use of a version at `now`.
    fn touch(&mut self, name: &str, version: i64, now: i64) -> Result<(), VaultError>;

    /// The highest token version of an agent.
    fn max_token_version(&mut self, agent: &str) -> Result<Option<i64>, VaultError>;
    /// Revokes every unrevoked token of an agent; returns how many of them were still valid
    /// (not past a rotation's grace) at `now`.
    fn revoke_tokens(&mut self, agent: &str, now: i64, actor: &str) -> Result<usize, VaultError>;
    /// Ends every unrevoked token of an agent at `until` at the latest.
    fn cap_tokens(&mut self, agent: &str, until: i64) -> Result<(), VaultError>;
    /// Inserts a token version (its keyed hash).
    fn insert_token(
        &mut self,
        agent: &str,
        version: i64,
        hash: &str,
        actor: &str,
        now: i64,
    ) -> Result<(), VaultError>;
    /// The agent, version and end of validity (a rotation's grace, if any) of a token hash that
    /// is unrevoked and valid at `now`.
    fn token(
        &mut self,
        hash: &str,
        now: i64,
    ) -> Result<Option<(String, i64, Option<i64>)>, VaultError>;
    /// Every token version of an agent, oldest first.
    fn tokens(&mut self, agent: &str) -> Result<Vec<TokenRow>, VaultError>;
    /// Every agent with a token row, sorted.
    fn token_agents(&mut self) -> Result<Vec<String>, VaultError>;

    /// Appends an audit record; a failure is [`VaultError::AuditWriteFailed`], and the
    /// caller's `?` drops the transaction, which rolls the whole operation back.
    fn append_audit(&mut self, now: i64, record: &Record<'_>) -> Result<(), VaultError>;
    /// Up to `limit` audit records with `seq > after`, oldest first.
    fn audit(&mut self, after: i64, limit: i64) -> Result<Vec<AuditEntry>, VaultError>;
    /// How many audit records each action has, in action order.
    fn action_counts(&mut self) -> Result<Vec<(String, u64)>, VaultError>;

    /// Commits (a no-op for a read).
    fn commit(self: Box<Self>) -> Result<(), VaultError>;
}

/// A vault database: hands out transactions.
pub(crate) trait VaultBackend: Send + Sync {
    /// A write transaction (serialized against every other writer) or a read.
    fn begin(&self, write: bool) -> Result<Box<dyn VaultTx + '_>, VaultError>;
    /// Called after a committed revoke, so the backend can move destroyed bytes out of its
    /// logs at once (SQLite checkpoints its WAL).
    fn after_destroy(&self);
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The latest time the vault stores or shows, in milliseconds: 9999-12-31T23:59:59.999Z, the
/// last instant with a four-digit year (RFC 3339's limit). A grace period longer than any date
/// can say (`Duration::MAX`, a huge `--grace-secs`) ends then, and reads as that date rather
/// than as one `chrono` cannot hold.
pub(crate) const LATEST_MS: i64 = 253_402_300_799_999;

/// `now + d` in milliseconds, saturating at [`LATEST_MS`] (or at `now`, were the clock past it).
pub(crate) fn after_ms(now: i64, d: Duration) -> i64 {
    now.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .min(LATEST_MS.max(now))
}

/// A stored millisecond timestamp as a UTC time; one past [`LATEST_MS`] (a row written before
/// the bound, or edited) reads as [`LATEST_MS`], never as the epoch.
pub(crate) fn time(ms: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(ms.min(LATEST_MS)).unwrap_or_default()
}

/// Versions are stored as 64-bit integers (they never come near `i64::MAX`).
pub(crate) fn to_sql_version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A stored version back to `u64` (a negative value would be a corrupted row; it reads as 0).
pub(crate) fn from_sql_version(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_saturate_at_the_last_four_digit_year() {
        assert_eq!(
            time(LATEST_MS).to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(time(LATEST_MS + 1), time(LATEST_MS));
        assert_eq!(time(i64::MAX), time(LATEST_MS));
        assert_eq!(after_ms(1_000, Duration::MAX), LATEST_MS);
        assert_eq!(after_ms(1_000, Duration::ZERO), 1_000);
        assert_eq!(after_ms(1_000, Duration::from_millis(5)), 1_005);
        assert_eq!(after_ms(i64::MAX, Duration::from_secs(1)), i64::MAX);
    }
}
