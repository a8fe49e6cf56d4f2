//! Preview / commit: two-step writes.
//!
//! A write tool built with [`ToolBuilder::previews`](crate::ToolBuilder::previews) never changes
//! anything on its first call. The gate runs it in the [`CallPhase::Preview`] phase (the tool
//! does a dry run and describes what it would do) and answers with that preview plus a commit
//! token. The model (or the human behind it) calls the same tool again with the same arguments
//! and `commit_token`; the gate checks the token and runs the tool in [`CallPhase::Commit`].
//!
//! A token is bound to the tool, the principal and the SHA-256 of the canonical arguments (see
//! [`canonical_json`](crate::canonical_json)); it is single use and expires. Tokens are random
//! (192 bits) and kept server-side in [`CommitTokens`], which is what makes "single use" hold
//! even against a client that replays the exact request: the first redemption marks the token
//! used, under a lock, and the mark outlives the token until its expiry, so a replay answers
//! `commit_token_used` and nothing runs twice. Altered arguments answer
//! `commit_arguments_changed` without consuming the token; a token issued to another principal
//! or for another tool answers `commit_token_invalid`, as an unknown one does, so a token's
//! existence never leaks.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::content::{Content, ToolOutput};
use crate::digest::sha256_hex;

/// The argument name a preview tool's commit token travels in.
pub const COMMIT_TOKEN_FIELD: &str = "commit_token";

/// Which step of a call the tool is running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallPhase {
    /// An ordinary call: do the work.
    #[default]
    Direct,
    /// A preview: describe what would change and change nothing.
    Preview,
    /// The commit of an earlier preview: do exactly the work that was previewed.
    Commit,
}

impl CallPhase {
    /// `direct`, `preview` or `commit`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallPhase::Direct => "direct",
            CallPhase::Preview => "preview",
            CallPhase::Commit => "commit",
        }
    }
}

/// How long tokens live and how many may wait at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitConfig {
    /// How long a commit token stays valid (default 10 minutes).
    pub ttl: Duration,
    /// How many tokens (pending, or used / expired ones kept to answer precisely) are held;
    /// when full, used and expired ones are dropped, then the pending ones closest to expiry
    /// (default 10,000).
    pub max_tokens: usize,
}

impl Default for CommitConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(600),
            max_tokens: 10_000,
        }
    }
}

impl CommitConfig {
    /// Sets the token lifetime.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets how many tokens are kept.
    pub fn with_max_tokens(mut self, n: usize) -> Self {
        self.max_tokens = n.max(1);
        self
    }
}

#[derive(Debug)]
struct Issued {
    tool: String,
    principal: String,
    digest: String,
    expires_at: SystemTime,
    used: bool,
}

/// The server-side record of commit tokens. Owned by the [`ToolRegistry`](crate::ToolRegistry).
#[derive(Debug, Default)]
pub(crate) struct CommitTokens {
    issued: Mutex<HashMap<String, Issued>>,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Redeem {
    Invalid,
    Used,
    Expired,
    ArgumentsChanged,
}

/// A short, stable fingerprint of a token for the audit log (the token itself is a bearer
/// secret and is never logged).
pub(crate) fn token_fingerprint(token: &str) -> String {
    let mut h = sha256_hex(token.as_bytes());
    h.truncate(16);
    format!("ct:{h}")
}

impl CommitTokens {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Issued>> {
        // Every update below is a single map operation, so a poisoned map is still consistent.
        self.issued
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Issues a token for `tool`, `principal` and the arguments' `digest`.
    pub(crate) fn issue(
        &self,
        tool: &str,
        principal: &str,
        digest: &str,
        config: &CommitConfig,
    ) -> Result<(String, SystemTime), getrandom::Error> {
        let mut raw = [0u8; 24];
        getrandom::fill(&mut raw)?;
        let token = format!("ct1.{}", URL_SAFE_NO_PAD.encode(raw));
        let now = SystemTime::now();
        let expires_at = now + config.ttl;
        let mut map = self.lock();
        if map.len() >= config.max_tokens {
            // Make room for a tenth of the capacity at once, so the sweep is amortized: used
            // and expired tokens go first (they only answer "used" / "expired"), then the
            // pending ones closest to expiry.
            let target = config.max_tokens - config.max_tokens.div_ceil(10);
            map.retain(|_, t| !t.used && t.expires_at > now);
            if map.len() > target {
                let mut by_expiry: Vec<(SystemTime, String)> =
                    map.iter().map(|(k, t)| (t.expires_at, k.clone())).collect();
                by_expiry.sort_unstable();
                for (_, k) in by_expiry.into_iter().take(map.len() - target) {
                    map.remove(&k);
                }
            }
        }
        map.insert(
            token.clone(),
            Issued {
                tool: tool.to_string(),
                principal: principal.to_string(),
                digest: digest.to_string(),
                expires_at,
                used: false,
            },
        );
        Ok((token, expires_at))
    }

    /// Checks a token as [`CommitTokens::redeem`] does, without marking it used.
    pub(crate) fn check(
        &self,
        token: &str,
        tool: &str,
        principal: &str,
        digest: &str,
    ) -> Result<(), Redeem> {
        self.verify(token, tool, principal, digest, false)
    }

    /// Checks a token and, if it is good, marks it used. Atomic: of two concurrent redemptions
    /// of one token, exactly one succeeds.
    pub(crate) fn redeem(
        &self,
        token: &str,
        tool: &str,
        principal: &str,
        digest: &str,
    ) -> Result<(), Redeem> {
        self.verify(token, tool, principal, digest, true)
    }

    fn verify(
        &self,
        token: &str,
        tool: &str,
        principal: &str,
        digest: &str,
        spend: bool,
    ) -> Result<(), Redeem> {
        let now = SystemTime::now();
        let mut map = self.lock();
        let Some(t) = map.get_mut(token) else {
            return Err(Redeem::Invalid);
        };
        if t.tool != tool || t.principal != principal {
            return Err(Redeem::Invalid);
        }
        if now >= t.expires_at {
            // Kept (until capacity sweeps it) so that a second try still reads as expired.
            return Err(Redeem::Expired);
        }
        if t.used {
            return Err(Redeem::Used);
        }
        if t.digest != digest {
            return Err(Redeem::ArgumentsChanged);
        }
        t.used |= spend;
        Ok(())
    }
}

/// Wraps a tool's preview output with the commit token and the instruction to use it.
pub(crate) fn preview_output(
    out: ToolOutput,
    tool: &str,
    token: &str,
    expires_at: SystemTime,
) -> ToolOutput {
    let secs = expires_at
        .duration_since(SystemTime::now())
        .map_or(0, |d| d.as_secs());
    let mut content = out.content;
    content.push(Content::Text(format!(
        "This is a preview; nothing has changed yet. To apply exactly this, call `{tool}` again \
         with the same arguments plus \"{COMMIT_TOKEN_FIELD}\": \"{token}\" (valid once, for {secs} s)."
    )));
    let expires_unix = expires_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ToolOutput {
        content,
        structured: Some(json!({
            "status": "preview",
            COMMIT_TOKEN_FIELD: token,
            "expires_at": expires_unix,
            "preview": out.structured.unwrap_or(Value::Null),
        })),
        is_error: false,
    }
}

/// The JSON Schema of the preview envelope (the structured result of a preview call).
pub(crate) fn preview_envelope_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "status": {"const": "preview"},
            COMMIT_TOKEN_FIELD: {"type": "string"},
            "expires_at": {"type": "integer"},
            "preview": {}
        },
        "required": ["status", COMMIT_TOKEN_FIELD]
    })
}

/// The schema a caller is shown for a preview tool: the tool's own, plus the optional
/// `commit_token` argument.
pub(crate) fn project_commit_field(schema: &mut Value) {
    if let Some(props) = schema
        .as_object_mut()
        .and_then(|o| {
            if !o.contains_key("properties") {
                o.insert("properties".into(), json!({}));
            }
            o.get_mut("properties")
        })
        .and_then(Value::as_object_mut)
    {
        props.insert(
            COMMIT_TOKEN_FIELD.into(),
            json!({
                "type": "string",
                "description": "Leave out to get a preview. To apply a preview, send the \
                                commit_token it gave you with the same arguments."
            }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lifecycle() {
        let t = CommitTokens::default();
        let cfg = CommitConfig::default();
        let (tok, _) = t.issue("rm", "ann", "d1", &cfg).unwrap();
        assert_eq!(t.redeem(&tok, "rm", "bob", "d1"), Err(Redeem::Invalid));
        assert_eq!(t.redeem(&tok, "other", "ann", "d1"), Err(Redeem::Invalid));
        assert_eq!(
            t.redeem(&tok, "rm", "ann", "d2"),
            Err(Redeem::ArgumentsChanged)
        );
        assert_eq!(t.redeem(&tok, "rm", "ann", "d1"), Ok(()));
        assert_eq!(t.redeem(&tok, "rm", "ann", "d1"), Err(Redeem::Used));
        assert_eq!(
            t.redeem("ct1.nope", "rm", "ann", "d1"),
            Err(Redeem::Invalid)
        );
        let (tok, _) = t
            .issue("rm", "ann", "d1", &cfg.with_ttl(Duration::ZERO))
            .unwrap();
        assert_eq!(t.check(&tok, "rm", "ann", "d1"), Err(Redeem::Expired));
        assert_eq!(t.redeem(&tok, "rm", "ann", "d1"), Err(Redeem::Expired));
        // Checking does not spend.
        let (tok, _) = t.issue("rm", "ann", "d1", &cfg).unwrap();
        assert_eq!(t.check(&tok, "rm", "ann", "d1"), Ok(()));
        assert_eq!(t.check(&tok, "rm", "ann", "d1"), Ok(()));
        assert_eq!(t.redeem(&tok, "rm", "ann", "d1"), Ok(()));
        assert_eq!(t.check(&tok, "rm", "ann", "d1"), Err(Redeem::Used));
    }

    #[test]
    fn capacity_is_bounded() {
        let t = CommitTokens::default();
        let cfg = CommitConfig::default().with_max_tokens(3);
        for i in 0..10 {
            t.issue("rm", "ann", &i.to_string(), &cfg).unwrap();
        }
        assert!(t.lock().len() <= 3);
    }
}
