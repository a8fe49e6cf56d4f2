//! Reading the vault's audit log.
//!
//! Every create, rotate, revoke, import and recorded use of a secret, and every agent token
//! operation, appends one row to `vault_audit` in the same transaction as the change (see
//! `store`). Values appear only as fingerprints (keyed HMACs). This module reads the log back
//! for the admin API and for tests.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Vault;
use super::error::VaultError;

/// One audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditEntry {
    /// The record's position in the log (increasing, never reused).
    pub seq: u64,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// `create`, `import`, `rotate`, `revoke`, `expire`, `use`, `agent_token_set`,
    /// `agent_token_rotate` or `agent_token_revoke`.
    pub action: String,
    /// Who did it (an admin, an agent, `gateway`).
    pub actor: String,
    /// The secret concerned.
    pub secret: Option<String>,
    /// The secret or token version concerned.
    pub version: Option<u64>,
    /// The agent concerned (token operations).
    pub agent: Option<String>,
    /// The upstream a secret was injected into (uses).
    pub upstream: Option<String>,
    /// The request a secret was injected into (uses).
    pub request_id: Option<String>,
    /// The fingerprint of the value (or token hash) concerned.
    pub fingerprint: Option<String>,
}

impl Vault {
    /// Up to `limit` audit records with `seq > after`, oldest first.
    pub fn audit_log(&self, after: u64, limit: usize) -> Result<Vec<AuditEntry>, VaultError> {
        self.read()?.audit(
            i64::try_from(after).unwrap_or(i64::MAX),
            i64::try_from(limit).unwrap_or(i64::MAX),
        )
    }
}

impl Vault {
    /// How many audit records each action has (`create`, `use`, `rotate`, ...), in action
    /// order: the vault's operations since it was created, for the gateway's metrics. The
    /// database keeps the counts as records are appended, so this reads one row per action,
    /// however long the log.
    pub fn action_counts(&self) -> Result<Vec<(String, u64)>, VaultError> {
        self.read()?.action_counts()
    }

    /// Proves that the vault's database answers: a read transaction and one lookup by key,
    /// whatever the size of the audit log (readiness, which anyone may ask many times a
    /// second).
    pub fn ping(&self) -> Result<(), VaultError> {
        self.read()?.secret("").map(drop)
    }
}
