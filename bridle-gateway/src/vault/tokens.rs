//! Agent bearer tokens: generated here, shown once, stored only as a keyed hash.
//!
//! A token is `bdl_` followed by 32 random bytes in URL-safe base64 (43 characters, 256 bits of
//! entropy); the prefix lets secret scanners and people recognise one. The database keeps only
//! HMAC-SHA256 of the token under a key derived from the master key, so authenticating is one
//! indexed lookup of the hash (usually none: see `token_cache`), and a copied
//! database yields no token (nor a way to test guesses
//! offline without the key). Each agent has numbered token versions: `set` replaces every token
//! at once, `rotate` adds one and lets the previous ones work for a grace period, `revoke` ends
//! them all at once.

use std::time::Duration;

use base64::Engine;
use zeroize::Zeroizing;

use super::Vault;
use super::crypto::FINGERPRINT_HEX;
use super::error::VaultError;
use super::meta::AgentTokenMeta;
use super::name::{check_actor, check_name};
use super::store::{Record, after_ms, from_sql_version, now_ms, time, to_sql_version};
use super::token_cache::Lookup;
use super::value::SecretValue;

/// The prefix of every agent token.
pub const TOKEN_PREFIX: &str = "bdl_";
/// Random bytes in a token.
const TOKEN_BYTES: usize = 32;
/// Tokens longer than this are not looked up (nothing issued is near it).
const MAX_TOKEN_LEN: usize = 512;

/// A freshly issued token: show it to the operator once; it cannot be read back.
#[derive(Debug, Clone)]
pub struct IssuedToken {
    /// The agent it authenticates.
    pub agent: String,
    /// Its version.
    pub version: u64,
    /// The token (prints as `[redacted]`).
    pub token: SecretValue,
}

/// What the token cache said about a presented token ([`Vault::check_token_cached`]).
#[derive(Debug)]
pub enum CachedToken {
    /// A token the cache vouches for.
    Found(AgentMatch),
    /// Empty or longer than any token: no agent's.
    Malformed,
    /// Not in the cache (or the cache cannot be trusted now): the database decides.
    Unknown(TokenLookup),
}

/// A token check the cache could not answer, to finish with
/// [`Vault::agent_for_token_lookup`]: the token's keyed hash and the cache's generation when it
/// was asked (so that what the database says is cached only if no token changed since). It
/// holds no token, only its hash, and its `Debug` shows neither.
pub struct TokenLookup {
    hash: String,
    generation: Option<u64>,
}

impl std::fmt::Debug for TokenLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenLookup").finish_non_exhaustive()
    }
}

/// Who a presented token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentMatch {
    /// The agent.
    pub agent: String,
    /// The token version that matched.
    pub version: u64,
}

impl Vault {
    /// The keyed hash of a token (64 hex digits), as stored and looked up.
    pub fn token_hash(&self, token: &str) -> String {
        self.keys().token_hash(token.as_bytes())
    }

    /// Issues a new token for `agent` and revokes every token it had (first registration, or
    /// "replace now" after a leak).
    pub fn set_agent_token(&self, agent: &str, actor: &str) -> Result<IssuedToken, VaultError> {
        self.issue(agent, actor, None)
    }

    /// Issues a new token for `agent`; its tokens that are valid now stay valid for `grace`
    /// (or less, if an earlier rotation ends them sooner).
    pub fn rotate_agent_token(
        &self,
        agent: &str,
        grace: Duration,
        actor: &str,
    ) -> Result<IssuedToken, VaultError> {
        self.issue(agent, actor, Some(grace))
    }

    fn issue(
        &self,
        agent: &str,
        actor: &str,
        grace: Option<Duration>,
    ) -> Result<IssuedToken, VaultError> {
        check_name("agent", agent)?;
        check_actor(actor)?;
        let token = generate_token()?;
        let hash = self.token_hash(token.expose_str().unwrap_or_default());
        let fingerprint = &hash[..FINGERPRINT_HEX];
        let mut tx = self.write()?;
        self.mark_token_change();
        let now = now_ms();
        let latest = tx.max_token_version(agent)?;
        let version = latest.map_or(1, |v| from_sql_version(v) + 1);
        let action = match grace {
            None => {
                tx.revoke_tokens(agent, now, actor)?;
                "agent_token_set"
            }
            Some(grace) => {
                tx.cap_tokens(agent, after_ms(now, grace))?;
                "agent_token_rotate"
            }
        };
        tx.insert_token(agent, to_sql_version(version), &hash, actor, now)?;
        tx.append_audit(
            now,
            &Record {
                action,
                actor,
                agent: Some(agent),
                version: Some(version),
                fingerprint: Some(fingerprint),
                ..Record::default()
            },
        )?;
        tx.commit()?;
        self.forget_cached_tokens(agent);
        tracing::info!(
            agent,
            version,
            actor,
            action,
            fingerprint,
            "agent token issued"
        );
        Ok(IssuedToken {
            agent: agent.to_owned(),
            version,
            token,
        })
    }

    /// Ends every token of `agent` at once; returns how many were still valid or in grace.
    pub fn revoke_agent_tokens(&self, agent: &str, actor: &str) -> Result<usize, VaultError> {
        check_name("agent", agent)?;
        check_actor(actor)?;
        let mut tx = self.write()?;
        self.mark_token_change();
        let now = now_ms();
        let revoked = tx.revoke_tokens(agent, now, actor)?;
        tx.append_audit(
            now,
            &Record {
                action: "agent_token_revoke",
                actor,
                agent: Some(agent),
                ..Record::default()
            },
        )?;
        tx.commit()?;
        self.forget_cached_tokens(agent);
        tracing::info!(agent, actor, revoked, "agent tokens revoked");
        Ok(revoked)
    }

    /// The agent a presented bearer token authenticates, if any: a valid, unrevoked token whose
    /// grace period (if rotated out) has not ended. Answered from the token cache when it can
    /// be trusted, otherwise by a read of the database.
    pub fn agent_for_token(&self, token: &str) -> Result<Option<AgentMatch>, VaultError> {
        match self.check_token_cached(token) {
            CachedToken::Found(found) => Ok(Some(found)),
            CachedToken::Malformed => Ok(None),
            CachedToken::Unknown(lookup) => self.agent_for_token_lookup(lookup),
        }
    }

    /// What the token cache can say about a presented bearer token without the database: a
    /// token this vault verified within [`super::TOKEN_CACHE_MAX_AGE`], with no token change
    /// since (on SQLite, the token-change marker unchanged and settled; on PostgreSQL, the
    /// change notifications heard), is [`CachedToken::Found`]. It costs a keyed hash, a short
    /// lock and on SQLite one `stat`, so it may be called on an async task. Any other token is
    /// [`CachedToken::Unknown`], whose [`TokenLookup`] finishes the check in the database
    /// ([`Vault::agent_for_token_lookup`], on a blocking thread) without hashing the token or
    /// asking the cache again.
    pub fn check_token_cached(&self, token: &str) -> CachedToken {
        if token.is_empty() || token.len() > MAX_TOKEN_LEN {
            return CachedToken::Malformed;
        }
        let hash = self.token_hash(token);
        let generation = match self.cached_token(&hash, now_ms()) {
            Lookup::Hit(found) => return CachedToken::Found(found),
            Lookup::Miss(generation) => Some(generation),
            Lookup::Bypass => None,
        };
        CachedToken::Unknown(TokenLookup { hash, generation })
    }

    /// The agent of a presented bearer token if the token cache vouches for it
    /// ([`Vault::check_token_cached`]). `None` means "ask [`Vault::agent_for_token`]", never that
    /// the token is refused.
    pub fn cached_agent_for_token(&self, token: &str) -> Option<AgentMatch> {
        match self.check_token_cached(token) {
            CachedToken::Found(found) => Some(found),
            CachedToken::Malformed | CachedToken::Unknown(_) => None,
        }
    }

    /// Finishes the check of a token the cache did not vouch for
    /// ([`Vault::check_token_cached`]) with a read of the database, and offers what it found to
    /// the cache. The cache takes it only if no token changed since the lookup was made.
    pub fn agent_for_token_lookup(
        &self,
        lookup: TokenLookup,
    ) -> Result<Option<AgentMatch>, VaultError> {
        let TokenLookup { hash, generation } = lookup;
        let now = now_ms();
        let found = self
            .read()?
            .token(&hash, now)?
            .map(|(agent, version, until)| {
                let found = AgentMatch {
                    agent,
                    version: from_sql_version(version),
                };
                (found, until)
            });
        if let (Some(cache), Some(generation), Some((found, until))) =
            (self.token_cache.as_deref(), generation, &found)
        {
            cache.insert(generation, &hash, found, *until, now);
        }
        Ok(found.map(|(found, _)| found))
    }

    /// Every token version of `agent`, oldest first (metadata only).
    pub fn agent_tokens(&self, agent: &str) -> Result<Vec<AgentTokenMeta>, VaultError> {
        check_name("agent", agent)?;
        let now = now_ms();
        let rows = self.read()?.tokens(agent)?;
        Ok(rows
            .into_iter()
            .map(|r| AgentTokenMeta {
                agent: agent.to_owned(),
                version: from_sql_version(r.version),
                fingerprint: r.token_hash.chars().take(FINGERPRINT_HEX).collect(),
                created_by: r.created_by,
                created_at: time(r.created_at),
                valid_until: r.valid_until.map(time),
                revoked_at: r.revoked_at.map(time),
                valid: r.revoked_at.is_none() && r.valid_until.is_none_or(|u| u > now),
            })
            .collect())
    }

    /// Every agent that has at least one token row, by name.
    pub fn agents_with_tokens(&self) -> Result<Vec<String>, VaultError> {
        self.read()?.token_agents()
    }
}

/// A new random token: the prefix and 32 random bytes, URL-safe base64 without padding.
fn generate_token() -> Result<SecretValue, VaultError> {
    let mut raw = Zeroizing::new([0u8; TOKEN_BYTES]);
    getrandom::fill(raw.as_mut()).map_err(|e| VaultError::Randomness(e.to_string()))?;
    let mut token = String::with_capacity(TOKEN_PREFIX.len() + 43);
    token.push_str(TOKEN_PREFIX);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode_string(raw.as_ref(), &mut token);
    Ok(SecretValue::from(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_prefixed_url_safe_and_distinct() {
        let a = generate_token().expect("random");
        let b = generate_token().expect("random");
        let a = a.expose_str().expect("utf-8");
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        assert!(
            a[TOKEN_PREFIX.len()..]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_ne!(a, b.expose_str().expect("utf-8"));
    }
}
