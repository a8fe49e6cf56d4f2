//! Bearer-token auth with live grants: a token resolves to its configured agent, looked up in
//! the live agent registry on every request (so an agent created through the admin API connects
//! at once, a removed one is refused and a changed type applies), and its Kberg grants are
//! computed on every request from the live project documents, so a permission change applies to
//! the next request.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::{Grants, Principal};
use kberg_server::{AuthError, Authenticator, BearerTokens, HeaderMap};

use crate::config::{ConfigError, read_secret};
use crate::context::GatewayContext;
use crate::error::GatewayError;
use crate::vault::{CachedToken, Vault};

/// Bearer-token auth with live grants.
#[derive(Clone)]
pub struct BridleAuth {
    tokens: BearerTokens,
    ctx: Arc<GatewayContext>,
    vault: Option<Arc<Vault>>,
}

impl std::fmt::Debug for BridleAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridleAuth")
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl BridleAuth {
    /// Reads every configured agent's token from the secrets folder.
    pub fn new(data_dir: &Path, ctx: Arc<GatewayContext>) -> Result<Self, GatewayError> {
        let secrets = ctx.config.secrets_path(data_dir);
        let mut tokens = BearerTokens::new();
        let mut seen: HashMap<String, String> = HashMap::new();
        for (name, agent) in &ctx.config.agents {
            let Some(secret) = &agent.token_secret else {
                continue;
            };
            let token = read_secret(&secrets, secret)?;
            if let Some(other) = seen.insert(token.clone(), name.clone()) {
                return Err(ConfigError::Invalid {
                    file: data_dir.join("bridle.yaml"),
                    message: format!(
                        "agents `{other}` and `{name}` share a token; each agent needs its own"
                    ),
                }
                .into());
            }
            tokens.insert(
                token,
                Principal::new(name.clone()).with_agent(agent.agent_type.clone()),
            );
        }
        Ok(Self {
            tokens,
            ctx,
            vault: None,
        })
    }
}

impl BridleAuth {
    /// Also accepts the agent tokens the vault issued (`bridle agents token ...`): stored only as
    /// keyed hashes, revoked at once, rotated with a grace period.
    pub fn with_vault(mut self, vault: Arc<Vault>) -> Self {
        self.vault = Some(vault);
        self
    }

    /// The principal of a vault-issued token (its agent's type is filled in by the caller),
    /// with its agent's grants when they were read with it. A token the vault's cache vouches
    /// for is answered here; any other is checked in the database on the blocking pool,
    /// together with its agent's grants (one trip).
    async fn vault_principal(
        &self,
        headers: &HeaderMap,
    ) -> Result<(Arc<Principal>, Option<Grants>), AuthError> {
        let Some(vault) = &self.vault else {
            return Err(AuthError::Invalid);
        };
        let token = kberg_server::bearer_token(headers)?.ok_or(AuthError::Missing)?;
        let lookup = match vault.check_token_cached(token) {
            CachedToken::Found(found) => {
                return Ok((Arc::new(Principal::new(found.agent)), None));
            }
            CachedToken::Malformed => return Err(AuthError::Invalid),
            CachedToken::Unknown(lookup) => lookup,
        };
        let (vault, ctx) = (Arc::clone(vault), Arc::clone(&self.ctx));
        let found = tokio::task::spawn_blocking(move || {
            vault.agent_for_token_lookup(lookup).map(|found| {
                found.map(|m| {
                    let grants = ctx.grants_for(&m.agent);
                    (m.agent, grants)
                })
            })
        })
        .await
        .map_err(|_| AuthError::Invalid)?;
        match found {
            Ok(Some((agent, grants))) => Ok((Arc::new(Principal::new(agent)), Some(grants))),
            Ok(None) => Err(AuthError::Invalid),
            Err(e) => {
                tracing::warn!(error = %e, "the vault could not check a token");
                Err(AuthError::Invalid)
            }
        }
    }
}

#[async_trait]
impl Authenticator for BridleAuth {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        let (who, from_file, grants) = match self.tokens.authenticate(headers).await {
            Ok(who) => (who, true, None),
            Err(AuthError::Invalid) => {
                let (who, grants) = self.vault_principal(headers).await?;
                (who, false, grants)
            }
            Err(e) => return Err(e),
        };
        // The agent as it is now: removed agents are refused, a changed type applies, and a
        // token file read at start opens only an agent that still authenticates with a file
        // (not one of the same name created later with vault-issued tokens).
        let Some(agent) = self.ctx.agent(&who.id) else {
            return Err(AuthError::Invalid);
        };
        if from_file && agent.token_secret.is_none() {
            return Err(AuthError::Invalid);
        }
        let who = Principal::clone(&who).with_agent(agent.agent_type);
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if !self.ctx.sessions.admit(
            &who.id,
            who.agent.as_deref(),
            header("mcp-session-id"),
            header("mcp-protocol-version"),
        ) {
            // An operator ended this session: the client must start a new one.
            return Err(AuthError::Invalid);
        }
        // Files that a few `stat`s find unchanged are read here; anything else (a change to
        // read, a database to ask) on the blocking pool.
        let grants = match grants {
            Some(grants) => grants,
            None if let Some(documents) = self.ctx.store.unchanged_documents() => {
                self.ctx.grants_in(&who.id, &documents)
            }
            None => {
                let ctx = Arc::clone(&self.ctx);
                let id = who.id.clone();
                tokio::task::spawn_blocking(move || ctx.grants_for(&id))
                    .await
                    .unwrap_or_default()
            }
        };
        Ok(Arc::new(who.with_grants(grants)))
    }
}
