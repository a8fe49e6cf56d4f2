//! Connection auth: who is calling, decided once per HTTP request from its headers.
//!
//! An [`Authenticator`] maps request headers to a [`Principal`] (identity, grants, projection).
//! Because the principal is resolved on every request, grants behave identically on a
//! 2025-11-25 session, on a stateless 2026-07-28 request and over stdio (where the principal is
//! fixed when serving starts). [`BearerTokens`] is the default: a token-to-principal map
//! compared in constant time. [`OpenAccess`] serves everyone as one principal, for apps that
//! run open on loopback.

use std::sync::Arc;

use async_trait::async_trait;
use axum::http::HeaderMap;
use kberg_core::Principal;
use subtle::ConstantTimeEq;

/// Why a request carries no acceptable credentials. Both are answered with
/// `401 Unauthorized` and a `WWW-Authenticate: Bearer` challenge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The request has no credentials.
    #[error("credentials are required")]
    Missing,
    /// The credentials are malformed or unknown.
    #[error("the credentials are not valid")]
    Invalid,
}

impl AuthError {
    /// The stable code, as used in the `error` parameter of the challenge.
    pub const fn code(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing_credentials",
            AuthError::Invalid => "invalid_token",
        }
    }
}

/// Maps a request's headers to the principal that makes it. One that panics has its request
/// answered `500` with `{"error": "internal_error"}` (logged once, without the headers).
#[async_trait]
pub trait Authenticator: Send + Sync {
    /// Authenticates one request.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthError>;

    /// Whether every request this authenticator accepts is made by the same principal (as
    /// with [`OpenAccess`]). The HTTP server's per-principal shares of its session and
    /// listen-stream limits then default to the whole limit: a share only keeps principals
    /// from starving one another, and with one principal it would only shrink the limit.
    /// Default `false`.
    fn single_principal(&self) -> bool {
        false
    }
}

/// Serves every request as one fixed principal (anonymous by default). Only for loopback or
/// otherwise trusted networks.
#[derive(Debug, Clone)]
pub struct OpenAccess {
    principal: Arc<Principal>,
}

impl OpenAccess {
    /// Every request is [`Principal::anonymous`] (no grants).
    pub fn anonymous() -> Self {
        Self::as_principal(Principal::anonymous())
    }

    /// Every request is `principal`.
    pub fn as_principal(principal: Principal) -> Self {
        Self {
            principal: Arc::new(principal),
        }
    }
}

#[async_trait]
impl Authenticator for OpenAccess {
    async fn authenticate(&self, _headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        Ok(Arc::clone(&self.principal))
    }

    fn single_principal(&self) -> bool {
        true
    }
}

/// Bearer tokens (`Authorization: Bearer <token>`), each mapped to a principal. Tokens are
/// compared in constant time, and every configured token is compared on every request, so the
/// response time does not reveal which token (or which prefix) nearly matched.
#[derive(Clone, Default)]
pub struct BearerTokens {
    tokens: Vec<(Vec<u8>, Arc<Principal>)>,
}

impl std::fmt::Debug for BearerTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens themselves.
        f.debug_struct("BearerTokens")
            .field(
                "principals",
                &self.tokens.iter().map(|(_, p)| &p.id).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl BearerTokens {
    /// No tokens: every request is refused until one is added.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token for `principal`. Empty tokens are ignored (they would match an empty
    /// `Bearer` header).
    pub fn with_token(mut self, token: impl Into<String>, principal: Principal) -> Self {
        self.insert(token, principal);
        self
    }

    /// Adds a token for `principal`.
    pub fn insert(&mut self, token: impl Into<String>, principal: Principal) {
        let token: String = token.into();
        if token.is_empty() {
            tracing::warn!(principal = ?principal.id, "ignoring an empty bearer token");
            return;
        }
        self.tokens.push((token.into_bytes(), Arc::new(principal)));
    }

    /// The number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether no token is configured.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    fn lookup(&self, presented: &[u8]) -> Option<Arc<Principal>> {
        let mut found = None;
        for (token, principal) in &self.tokens {
            // `ct_eq` on slices of different lengths returns false without short-circuiting
            // on content; the loop always visits every token.
            if bool::from(token.as_slice().ct_eq(presented)) {
                found = Some(Arc::clone(principal));
            }
        }
        found
    }
}

/// The token of an `Authorization: Bearer <token>` header, if the header has that form.
pub fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, AuthError> {
    let Some(value) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value.to_str().map_err(|_| AuthError::Invalid)?;
    let (scheme, token) = value.trim().split_once(' ').ok_or(AuthError::Invalid)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Invalid);
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::Invalid);
    }
    Ok(Some(token))
}

#[async_trait]
impl Authenticator for BearerTokens {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        let token = bearer_token(headers)?.ok_or(AuthError::Missing)?;
        self.lookup(token.as_bytes()).ok_or(AuthError::Invalid)
    }

    /// True when every token maps to the same principal id.
    fn single_principal(&self) -> bool {
        let mut ids = self.tokens.iter().map(|(_, p)| p.id.as_str());
        ids.next()
            .is_some_and(|first| ids.all(|other| other == first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use kberg_core::Grants;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(a) = auth {
            h.insert(
                axum::http::header::AUTHORIZATION,
                HeaderValue::from_str(a).expect("test header"),
            );
        }
        h
    }

    #[tokio::test]
    async fn bearer_tokens_map_to_principals() {
        let auth = BearerTokens::new()
            .with_token("alpha", Principal::new("a").with_grants(Grants::of(["w"])))
            .with_token("beta", Principal::new("b"))
            .with_token("", Principal::new("empty"));
        assert_eq!(auth.len(), 2);
        let p = auth
            .authenticate(&headers(Some("Bearer alpha")))
            .await
            .expect("known token");
        assert_eq!(p.id, "a");
        assert!(p.grants.contains("w"));
        let p = auth
            .authenticate(&headers(Some("bearer beta")))
            .await
            .expect("scheme is case-insensitive");
        assert_eq!(p.id, "b");
        assert_eq!(
            auth.authenticate(&headers(None)).await,
            Err(AuthError::Missing)
        );
        for bad in [
            "Bearer alph",
            "Bearer alphaa",
            "Basic alpha",
            "Bearer",
            "Bearer  ",
            "alpha",
        ] {
            assert_eq!(
                auth.authenticate(&headers(Some(bad))).await,
                Err(AuthError::Invalid),
                "{bad}"
            );
        }
        assert!(!format!("{auth:?}").contains("alpha"));
    }

    #[tokio::test]
    async fn open_access_is_one_principal() {
        let p = OpenAccess::anonymous()
            .authenticate(&headers(Some("Bearer whatever")))
            .await
            .expect("open");
        assert_eq!(p.id, "anonymous");
    }
}
