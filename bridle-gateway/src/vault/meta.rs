//! What the vault says about its secrets: metadata only, never a value.
//!
//! `list` and `get` return these types. They hold names, versions, states, who created what
//! and when, when each version was last used, and a fingerprint (64 bits of a keyed HMAC of the
//! value) that tells two values apart without revealing either.

use chrono::{DateTime, Utc};
use serde::Serialize;

/// A secret's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretMeta {
    /// The secret's name.
    pub name: String,
    /// The version [`Vault::current`](super::Vault::current) returns.
    pub active_version: u64,
    /// Who created the secret (its first version).
    pub created_by: String,
    /// When the secret was created.
    pub created_at: DateTime<Utc>,
    /// The latest use of any of its versions.
    pub last_used_at: Option<DateTime<Utc>>,
    /// Every version, oldest first.
    pub versions: Vec<VersionMeta>,
}

/// One version's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionMeta {
    /// The version number (1 for the created value, +1 per rotation).
    pub version: u64,
    /// Whether the version can be used.
    pub state: VersionState,
    /// A keyed HMAC of the value, 16 hex digits; never the value or a prefix of it.
    pub fingerprint: String,
    /// Who wrote this version.
    pub created_by: String,
    /// When this version was written.
    pub created_at: DateTime<Utc>,
    /// When this version was last recorded as used in a request.
    pub last_used_at: Option<DateTime<Utc>>,
}

/// The state of a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum VersionState {
    /// The version in use.
    Active,
    /// Rotated out, still usable until `until`.
    Grace {
        /// When the grace period ends.
        until: DateTime<Utc>,
    },
    /// Rotated out and its grace period is over: no longer usable.
    Expired {
        /// When the grace period ended.
        since: DateTime<Utc>,
    },
    /// Revoked: the ciphertext is destroyed.
    Revoked {
        /// When it was revoked.
        at: DateTime<Utc>,
        /// Who revoked it.
        by: String,
    },
}

impl VersionState {
    /// Whether a version in this state can be read.
    pub fn is_usable(&self) -> bool {
        matches!(self, Self::Active | Self::Grace { .. })
    }
}

/// An agent token version's metadata (never the token or its full hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentTokenMeta {
    /// The agent.
    pub agent: String,
    /// The token version (1 for the first token, +1 per set or rotation).
    pub version: u64,
    /// The first 16 hex digits of the token's keyed hash.
    pub fingerprint: String,
    /// Who issued it.
    pub created_by: String,
    /// When it was issued.
    pub created_at: DateTime<Utc>,
    /// When a rotation's grace period ends it, if it was rotated out.
    pub valid_until: Option<DateTime<Utc>>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
    /// Whether it authenticates now.
    pub valid: bool,
}
