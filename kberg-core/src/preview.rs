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
//!
//! The store is bounded twice ([`CommitConfig`]): each principal holds at most
//! `max_tokens_per_principal` tokens, and a principal at its bound loses its own oldest token
//! to a new one; all together hold at most `max_tokens`, and when that is reached the tokens
//! given up are the used and expired ones, then the oldest of the principals holding the most.
//! So a principal that floods previews only ever loses its own tokens, never another's.

use std::collections::{BinaryHeap, HashMap, VecDeque};
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

/// The longest lifetime a commit token or a confirm ticket is given: a longer one (an app's
/// "never", `Duration::MAX`) is this, 100 years, which the clock can always add to the time of
/// day and every store can record.
pub(crate) const MAX_LIFETIME: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// When something that lives `ttl` from `now` expires: at most [`MAX_LIFETIME`] later, never a
/// panic of the clock.
pub(crate) fn expiry_after(now: SystemTime, ttl: Duration) -> SystemTime {
    now.checked_add(ttl.min(MAX_LIFETIME)).unwrap_or(now)
}

/// How long tokens live and how many may wait at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommitConfig {
    /// How long a commit token stays valid (default 10 minutes; at most 100 years, which a
    /// longer one is taken for).
    pub ttl: Duration,
    /// How many tokens (pending, or used / expired ones kept to answer precisely) are held in
    /// all; when full, used and expired ones are dropped, then the oldest tokens of the
    /// principals holding the most, so a principal holding fewer than another never loses one
    /// to it (default 10,000; 0 is taken as 1).
    pub max_tokens: usize,
    /// How many tokens one principal holds; a principal at this bound that is issued another
    /// loses its own used and expired tokens, then its own oldest pending one, never another
    /// principal's (default 100; 0 is taken as 1).
    pub max_tokens_per_principal: usize,
}

impl Default for CommitConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(600),
            max_tokens: 10_000,
            max_tokens_per_principal: 100,
        }
    }
}

impl CommitConfig {
    /// Sets the token lifetime.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets how many tokens are kept in all.
    pub fn with_max_tokens(mut self, n: usize) -> Self {
        self.max_tokens = n.max(1);
        self
    }

    /// Sets how many tokens one principal holds (at least 1).
    pub fn with_max_tokens_per_principal(mut self, n: usize) -> Self {
        self.max_tokens_per_principal = n.max(1);
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

impl Issued {
    /// Whether it can still be committed: neither used nor expired.
    fn live(&self, now: SystemTime) -> bool {
        !self.used && now < self.expires_at
    }
}

/// The server-side record of commit tokens. Owned by the [`ToolRegistry`](crate::ToolRegistry).
#[derive(Debug, Default)]
pub(crate) struct CommitTokens {
    book: Mutex<Book>,
}

/// The tokens, and each principal's tokens in the order they were issued. Every token is in
/// both, under its principal.
#[derive(Debug, Default)]
struct Book {
    issued: HashMap<String, Issued>,
    by_principal: HashMap<String, VecDeque<String>>,
}

impl Book {
    /// Drops `principal`'s used and expired tokens.
    fn sweep_own(&mut self, principal: &str, now: SystemTime) {
        let Some(own) = self.by_principal.get_mut(principal) else {
            return;
        };
        let issued = &mut self.issued;
        own.retain(|k| {
            let live = issued.get(k).is_some_and(|t| t.live(now));
            if !live {
                issued.remove(k);
            }
            live
        });
        if own.is_empty() {
            self.by_principal.remove(principal);
        }
    }

    /// Drops every used and expired token.
    fn sweep_all(&mut self, now: SystemTime) {
        self.issued.retain(|_, t| t.live(now));
        let issued = &self.issued;
        self.by_principal.retain(|_, own| {
            own.retain(|k| issued.contains_key(k));
            !own.is_empty()
        });
    }

    /// Drops `principal`'s oldest token.
    fn evict_oldest(&mut self, principal: &str) {
        if let Some(own) = self.by_principal.get_mut(principal) {
            if let Some(k) = own.pop_front() {
                self.issued.remove(&k);
            }
            if own.is_empty() {
                self.by_principal.remove(principal);
            }
        }
    }

    /// Drops oldest tokens of the principals holding the most until `target` remain; of
    /// principals holding as many, `issuer` (who is being issued one) gives up first.
    fn evict_largest(&mut self, target: usize, issuer: &str) {
        let mut heap: BinaryHeap<(usize, bool, String)> = self
            .by_principal
            .iter()
            .map(|(p, own)| (own.len(), p == issuer, p.clone()))
            .collect();
        while self.issued.len() > target {
            let Some((n, is_issuer, p)) = heap.pop() else {
                break;
            };
            self.evict_oldest(&p);
            if n > 1 {
                heap.push((n - 1, is_issuer, p));
            }
        }
    }
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
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        // No update below can panic between changing the map and the per-principal lists, so
        // a poisoned lock still guards consistent state.
        self.book
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
        let expires_at = expiry_after(now, config.ttl);
        // The bounds are public fields: a zero set there (the builder makes each at least one)
        // would evict for ever below.
        let per_principal = config.max_tokens_per_principal.max(1);
        let max_tokens = config.max_tokens.max(1);
        let mut book = self.lock();
        let own = book.by_principal.get(principal).map_or(0, VecDeque::len);
        if own >= per_principal {
            // The principal pays for its own flood: its used and expired tokens go first (they
            // only answer "used" / "expired"), then its oldest pending ones.
            book.sweep_own(principal, now);
            while book.by_principal.get(principal).map_or(0, VecDeque::len) >= per_principal {
                book.evict_oldest(principal);
            }
        }
        if book.issued.len() >= max_tokens {
            // Make room for a tenth of the capacity at once, so the sweep is amortized: used
            // and expired tokens go first, then the oldest of whoever holds the most.
            let target = max_tokens - max_tokens.div_ceil(10);
            book.sweep_all(now);
            book.evict_largest(target, principal);
        }
        book.by_principal
            .entry(principal.to_string())
            .or_default()
            .push_back(token.clone());
        book.issued.insert(
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
        let mut book = self.lock();
        let Some(t) = book.issued.get_mut(token) else {
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
        meta: out.meta,
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

    /// Every token is listed under its principal and nothing else is.
    fn assert_consistent(t: &CommitTokens) {
        let book = t.lock();
        let listed: usize = book.by_principal.values().map(VecDeque::len).sum();
        assert_eq!(listed, book.issued.len());
        for (p, own) in &book.by_principal {
            assert!(!own.is_empty());
            for k in own {
                assert_eq!(&book.issued[k].principal, p);
            }
        }
    }

    #[test]
    fn capacity_is_bounded() {
        let t = CommitTokens::default();
        let cfg = CommitConfig::default().with_max_tokens(3);
        for i in 0..10 {
            t.issue("rm", "ann", &i.to_string(), &cfg).unwrap();
        }
        assert!(t.lock().issued.len() <= 3);
        assert_consistent(&t);
    }

    #[test]
    fn a_principal_at_its_bound_loses_its_own_oldest_token() {
        let t = CommitTokens::default();
        let cfg = CommitConfig::default().with_max_tokens_per_principal(3);
        let (bob, _) = t.issue("rm", "bob", "b", &cfg).unwrap();
        let ann: Vec<String> = (0..5)
            .map(|i| t.issue("rm", "ann", &i.to_string(), &cfg).unwrap().0)
            .collect();
        assert_eq!(t.check(&ann[0], "rm", "ann", "0"), Err(Redeem::Invalid));
        assert_eq!(t.check(&ann[1], "rm", "ann", "1"), Err(Redeem::Invalid));
        for (i, tok) in ann.iter().enumerate().skip(2) {
            assert_eq!(t.check(tok, "rm", "ann", &i.to_string()), Ok(()));
        }
        assert_eq!(t.check(&bob, "rm", "bob", "b"), Ok(()));
        assert_consistent(&t);

        // Its used tokens go before its pending ones.
        assert_eq!(t.redeem(&ann[3], "rm", "ann", "3"), Ok(()));
        let (newest, _) = t.issue("rm", "ann", "5", &cfg).unwrap();
        assert_eq!(t.check(&ann[2], "rm", "ann", "2"), Ok(()));
        assert_eq!(t.check(&ann[4], "rm", "ann", "4"), Ok(()));
        assert_eq!(t.check(&newest, "rm", "ann", "5"), Ok(()));
        assert_consistent(&t);
    }

    #[test]
    fn a_full_store_takes_from_whoever_holds_the_most() {
        let t = CommitTokens::default();
        let cfg = CommitConfig::default().with_max_tokens(10);
        let (bob, _) = t.issue("rm", "bob", "b", &cfg).unwrap();
        let (cat, _) = t.issue("rm", "cat", "c", &cfg).unwrap();
        for i in 0..50 {
            t.issue("rm", "ann", &i.to_string(), &cfg).unwrap();
        }
        assert!(t.lock().issued.len() <= 10);
        assert_eq!(t.check(&bob, "rm", "bob", "b"), Ok(()));
        assert_eq!(t.check(&cat, "rm", "cat", "c"), Ok(()));
        assert_consistent(&t);
    }
}
