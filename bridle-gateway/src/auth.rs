//! Bearer-token auth with live grants: a token resolves to its configured agent, whose Kberg
//! grants are computed on every request from the live project documents, so a permission change
//! applies to the next request.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::Principal;
use kberg_server::{AuthError, Authenticator, BearerTokens, HeaderMap};

use crate::config::{ConfigError, read_secret};
use crate::context::GatewayContext;
use crate::error::GatewayError;

/// Bearer-token auth with live grants.
#[derive(Clone)]
pub struct BridleAuth {
    tokens: BearerTokens,
    ctx: Arc<GatewayContext>,
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
            let token = read_secret(&secrets, &agent.token_secret)?;
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
        Ok(Self { tokens, ctx })
    }
}

#[async_trait]
impl Authenticator for BridleAuth {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        let who = self.tokens.authenticate(headers).await?;
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if !self.ctx.sessions.touch(
            &who.id,
            who.agent.as_deref(),
            header("mcp-session-id"),
            header("mcp-protocol-version"),
        ) {
            // An operator ended this session: the client must start a new one.
            return Err(AuthError::Invalid);
        }
        let ctx = Arc::clone(&self.ctx);
        let id = who.id.clone();
        let grants = tokio::task::spawn_blocking(move || ctx.grants_for(&id))
            .await
            .unwrap_or_default();
        Ok(Arc::new(Principal::clone(&who).with_grants(grants)))
    }
}
