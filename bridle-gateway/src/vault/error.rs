//! The vault's one error type.
//!
//! Every failure of the vault carries a stable code (`VaultError::code`) that callers, logs and
//! API responses can match on, plus a sentence for people. No variant ever carries a secret value:
//! names, versions, paths and the reason are all an error says.

use std::path::PathBuf;

/// Why a vault operation failed. Match on [`VaultError::code`] for a stable string.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VaultError {
    /// `master_key_missing`: the master key file does not exist.
    #[error("the vault master key file {} does not exist", path.display())]
    MasterKeyMissing {
        /// Where the key was looked for.
        path: PathBuf,
    },
    /// `master_key_unreadable`: the master key file exists but could not be read.
    #[error("the vault master key file {} cannot be read: {source}", path.display())]
    MasterKeyUnreadable {
        /// The key file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `master_key_invalid`: the key file does not hold 32 bytes (raw, 64 hex digits or base64).
    #[error("the vault master key file {} is not a 32-byte key: {reason}", path.display())]
    MasterKeyInvalid {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it (its length, never its content).
        reason: String,
    },
    /// `master_key_create_failed`: a new master key file could not be written.
    #[error("the vault master key file {} cannot be created: {source}", path.display())]
    MasterKeyCreateFailed {
        /// The key file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `wrong_master_key`: the database was created under a different master key.
    #[error(
        "the vault database {} was created with a different master key; refusing to open it",
        path.display()
    )]
    WrongMasterKey {
        /// The database file.
        path: PathBuf,
    },
    /// `vault_database`: SQLite failed (open, schema, query or commit).
    #[error("the vault database failed: {0}")]
    Database(#[from] rusqlite::Error),
    /// `vault_database`: PostgreSQL failed (connection, schema, query or commit); the message
    /// is the server's, never a value.
    #[error("the vault database failed: {0}")]
    Postgres(String),
    /// `vault_schema`: the database holds a vault schema this build does not know.
    #[error("the vault database has schema version {found}, this build knows {expected}")]
    Schema {
        /// The version found in the database.
        found: i64,
        /// The version this build writes.
        expected: i64,
    },
    /// `audit_write_failed`: the audit record could not be written, so the operation was undone.
    #[error(
        "the vault could not record the {action} in its audit log, so nothing changed: {reason}"
    )]
    AuditWriteFailed {
        /// The operation that was refused (`create`, `rotate`, `revoke`, `use`, ...).
        action: &'static str,
        /// Why SQLite refused the record.
        reason: String,
    },
    /// `decrypt_failed`: a ciphertext does not authenticate (tampered, moved or corrupted row).
    #[error("secret {name} version {version} does not decrypt: the row was altered or corrupted")]
    DecryptFailed {
        /// The secret's name.
        name: String,
        /// The version.
        version: u64,
    },
    /// `randomness_unavailable`: the operating system's random source failed.
    #[error("no randomness available from the operating system: {0}")]
    Randomness(String),
    /// `invalid_name`: a secret or agent name outside the allowed charset or length.
    #[error("invalid {kind} name {}: {reason}", super::shown_name(.name))]
    InvalidName {
        /// `secret` or `agent`.
        kind: &'static str,
        /// The name as given (names are not secret).
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// `invalid_actor`: the actor recorded for an operation is empty or too long.
    #[error("invalid actor: {0}")]
    InvalidActor(&'static str),
    /// `invalid_value`: a secret value is empty or too long.
    #[error("invalid value for secret {name}: {reason}")]
    InvalidValue {
        /// The secret's name.
        name: String,
        /// The rule it breaks (never the value).
        reason: String,
    },
    /// `secret_exists`: `create` on a name that is already in the vault.
    #[error("secret {0} already exists; rotate it instead")]
    SecretExists(String),
    /// `secret_not_found`: no secret of that name in the vault.
    #[error("secret {} is not in the vault", super::shown_name(.0))]
    SecretNotFound(String),
    /// `version_not_found`: the secret has no such version.
    #[error("secret {name} has no version {version}")]
    VersionNotFound {
        /// The secret's name.
        name: String,
        /// The version asked for.
        version: u64,
    },
    /// `version_revoked`: the version was revoked; its ciphertext is gone.
    #[error("secret {name} version {version} was revoked")]
    VersionRevoked {
        /// The secret's name.
        name: String,
        /// The version.
        version: u64,
    },
    /// `version_expired`: the version was rotated out and its grace period has ended.
    #[error("secret {name} version {version} was rotated out and its grace period has ended")]
    VersionExpired {
        /// The secret's name.
        name: String,
        /// The version.
        version: u64,
    },
    /// `no_active_version`: every version of the secret is revoked or expired.
    #[error("secret {0} has no active version (its active version was revoked); rotate it")]
    NoActiveVersion(String),
    /// `invalid_reference`: a secret reference that is not `vault:`, `docker:` or `file:` + name.
    #[error("invalid secret reference {reference:?}: {reason}")]
    InvalidReference {
        /// The reference as it may be shown: its source part, and the length of the rest (a
        /// value pasted where a reference belongs is never repeated).
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `source_not_configured`: a `file:` reference while no legacy secrets folder is configured.
    #[error("secret reference {0} needs a secrets folder, and none is configured")]
    SourceNotConfigured(String),
    /// `source_secret_missing`: the referenced file does not exist.
    #[error("secret {reference} is missing: {} does not exist", path.display())]
    SourceSecretMissing {
        /// The reference, e.g. `docker:gitea_token`.
        reference: String,
        /// The file that was looked for.
        path: PathBuf,
    },
    /// `source_secret_empty`: the referenced file is empty (or only a line break).
    #[error("secret {reference} is empty ({}); an empty credential is never used", path.display())]
    SourceSecretEmpty {
        /// The reference.
        reference: String,
        /// The file.
        path: PathBuf,
    },
    /// `source_unreadable`: the referenced file or folder cannot be read.
    #[error("secret source {} cannot be read: {source}", path.display())]
    SourceUnreadable {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `agent_token_invalid`: a token presented for hashing is empty or absurdly long.
    #[error("invalid agent token: {0}")]
    InvalidToken(&'static str),
}

impl VaultError {
    /// The stable code of this error, e.g. `master_key_missing`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MasterKeyMissing { .. } => "master_key_missing",
            Self::MasterKeyUnreadable { .. } => "master_key_unreadable",
            Self::MasterKeyInvalid { .. } => "master_key_invalid",
            Self::MasterKeyCreateFailed { .. } => "master_key_create_failed",
            Self::WrongMasterKey { .. } => "wrong_master_key",
            Self::Database(_) | Self::Postgres(_) => "vault_database",
            Self::Schema { .. } => "vault_schema",
            Self::AuditWriteFailed { .. } => "audit_write_failed",
            Self::DecryptFailed { .. } => "decrypt_failed",
            Self::Randomness(_) => "randomness_unavailable",
            Self::InvalidName { .. } => "invalid_name",
            Self::InvalidActor(_) => "invalid_actor",
            Self::InvalidValue { .. } => "invalid_value",
            Self::SecretExists(_) => "secret_exists",
            Self::SecretNotFound(_) => "secret_not_found",
            Self::VersionNotFound { .. } => "version_not_found",
            Self::VersionRevoked { .. } => "version_revoked",
            Self::VersionExpired { .. } => "version_expired",
            Self::NoActiveVersion(_) => "no_active_version",
            Self::InvalidReference { .. } => "invalid_reference",
            Self::SourceNotConfigured(_) => "source_not_configured",
            Self::SourceSecretMissing { .. } => "source_secret_missing",
            Self::SourceSecretEmpty { .. } => "source_secret_empty",
            Self::SourceUnreadable { .. } => "source_unreadable",
            Self::InvalidToken(_) => "agent_token_invalid",
        }
    }
}
