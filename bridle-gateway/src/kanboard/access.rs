//! Who may reach Kanboard, with which credential, on which projects: [`VaultAccess`], the
//! gateway's [`KanboardAccess`] over its secret source and a `kanboard:` configuration section.
//!
//! Every call asks the secret source for the agent's token (so a rotation applies to the next
//! call) and records the use, like the upstream routes do; a source that cannot record the use
//! gets no credential, so nothing is sent. The agent's Kanboard projects are the union of the
//! mappings of its Bridle projects, computed per call from a function the gateway gives (the
//! agent's configured projects), so a changed mapping or project list applies at once. The
//! projects it may change are the mappings of those of its Bridle projects whose rules also let
//! its type write: the `kanboard.write` capability the gate checks is the union over all its
//! projects, so it alone would let a project that only allows reading be changed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::Caller;
use serde::{Deserialize, Serialize};

use super::{Credential, CredentialError, KanboardAccess};
use crate::upstreams::{SecretDesk, SecretError, SecretSource, SecretUse};

fn default_timeout_secs() -> u64 {
    30
}

/// How one agent reaches Kanboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KanboardAgent {
    /// The secret holding the token.
    pub secret: String,
    /// The Kanboard user the token belongs to (a personal API token); omitted, the secret is
    /// the application token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// With the application token: the Kanboard user id comments are written as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acting_user_id: Option<i64>,
}

/// The `kanboard:` section of a gateway configuration.
///
/// ```yaml
/// kanboard:
///   url: http://127.0.0.1:8080/jsonrpc.php
///   timeout_secs: 30
///   agents:
///     claude: {secret: kanboard-claude, user: claude-bot}
///     codex: {secret: kanboard-app, acting_user_id: 4}
///   projects:            # Bridle project -> Kanboard project ids
///     shop: [1, 3]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KanboardConfig {
    /// Kanboard's JSON-RPC endpoint (ends in `/jsonrpc.php`).
    pub url: String,
    /// The time limit of one Kanboard request, in seconds (at least 1; default 30).
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Per agent (its principal id): its credential.
    #[serde(default)]
    pub agents: BTreeMap<String, KanboardAgent>,
    /// Per Bridle project: the Kanboard projects it maps to.
    #[serde(default)]
    pub projects: BTreeMap<String, Vec<i64>>,
}

impl KanboardConfig {
    /// Checks the section as `bridle.yaml` is read (`bridle check`, a start, an edit through
    /// the admin API), naming the field at fault: `timeout_secs` is at least 1, `url` is an
    /// `http://` or `https://` URL, and every name under `agents` is one `is_agent` knows. These
    /// used to be checked only when the gateway was built, so a configuration that passed
    /// `bridle check` could still fail to start. The message never quotes the URL: it may carry
    /// a credential.
    pub fn check(&self, is_agent: impl Fn(&str) -> bool) -> Result<(), String> {
        // Zero would be no time for any call: refused as `traces.otlp.timeout_secs` is, where
        // it used to be taken as 1 without a word.
        if self.timeout_secs == 0 {
            return Err("kanboard.timeout_secs must be at least 1".into());
        }
        crate::config::check_http_url("kanboard.url", &self.url)?;
        if let Some(agent) = self.agents.keys().find(|a| !is_agent(a)) {
            return Err(format!(
                "kanboard.agents names `{agent}`, which is not a configured agent: configure it, or remove it from kanboard.agents"
            ));
        }
        Ok(())
    }
}

/// One Bridle project a caller may use with Kanboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridleProject {
    /// The project's name (a key of [`KanboardConfig::projects`]).
    pub name: String,
    /// Whether the project's rules let the caller change Kanboard there (`kanboard.write`).
    pub write: bool,
}

impl BridleProject {
    /// A project whose Kanboard projects the caller may read only.
    pub fn read_only(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            write: false,
        }
    }

    /// A project whose Kanboard projects the caller may read and change.
    pub fn writable(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            write: true,
        }
    }
}

/// The Bridle projects a caller may use with Kanboard (the gateway's agent configuration and
/// the projects' rules decide), each with whether it may write there. Called on the blocking
/// pool, so it may read files or a database.
pub type BridleProjects = Arc<dyn Fn(&Caller) -> Vec<BridleProject> + Send + Sync>;

/// [`KanboardAccess`] over a secret source and a [`KanboardConfig`].
pub struct VaultAccess {
    config: KanboardConfig,
    secrets: SecretDesk,
    bridle_projects: BridleProjects,
}

impl std::fmt::Debug for VaultAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VaultAccess")
            .field("agents", &self.config.agents.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl VaultAccess {
    /// Access per `config`, tokens from `secrets`, each caller's Bridle projects from
    /// `bridle_projects`.
    pub fn new(
        config: KanboardConfig,
        secrets: Arc<dyn SecretSource>,
        bridle_projects: BridleProjects,
    ) -> Self {
        Self {
            config,
            secrets: SecretDesk::new(secrets),
            bridle_projects,
        }
    }

    /// The Kanboard projects mapped to the caller's Bridle projects, or only to those it may
    /// write in when `write`. The Bridle projects are read on the blocking pool: the gateway's
    /// function reads the project documents (files, or PostgreSQL), which would otherwise hold
    /// an async worker for every Kanboard call.
    async fn mapped(&self, caller: &Caller, write: bool) -> BTreeSet<i64> {
        let (projects, caller) = (Arc::clone(&self.bridle_projects), caller.clone());
        let bridle = match tokio::task::spawn_blocking(move || projects(&caller)).await {
            Ok(bridle) => bridle,
            Err(e) => {
                tracing::warn!(error = %crate::logging::one_line(&e), "reading the caller's Bridle projects failed");
                Vec::new()
            }
        };
        bridle
            .iter()
            .filter(|p| p.write || !write)
            .filter_map(|p| self.config.projects.get(&p.name))
            .flatten()
            .copied()
            .collect()
    }
}

/// What a secret source's error means for the caller: a secret that is gone (revoked,
/// deleted, or revoked as this call recorded its use) is missing; a source that failed may
/// answer later.
fn unavailable(e: SecretError) -> CredentialError {
    match e {
        SecretError::Missing { .. } | SecretError::Empty { .. } => {
            CredentialError::Missing(e.to_string())
        }
        _ => CredentialError::Unavailable(e.to_string()),
    }
}

#[async_trait]
impl KanboardAccess for VaultAccess {
    async fn credential(&self, caller: &Caller) -> Result<Credential, CredentialError> {
        let agent_id = caller.principal().id.as_str();
        let agent = self
            .config
            .agents
            .get(agent_id)
            .ok_or(CredentialError::NotConfigured)?;
        let (secret, version) = match self.secrets.current(&agent.secret).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(agent = agent_id, error = %crate::logging::one_line(&e), "no Kanboard credential");
                return Err(unavailable(e));
            }
        };
        let used = SecretUse {
            name: &agent.secret,
            version,
            upstream: "kanboard",
            agent: agent_id,
            request: "kanboard",
        };
        if let Err(e) = self.secrets.record_use(&used).await {
            tracing::warn!(agent = agent_id, error = %crate::logging::one_line(&e), "the use of the Kanboard credential could not be recorded; nothing is sent");
            return Err(unavailable(e));
        }
        let token = secret.expose().to_string();
        Ok(match &agent.user {
            Some(username) => Credential::User {
                username: username.clone(),
                token,
            },
            None => Credential::AppToken {
                token,
                acting_user_id: agent.acting_user_id,
            },
        })
    }

    async fn projects(&self, caller: &Caller) -> BTreeSet<i64> {
        self.mapped(caller, false).await
    }

    async fn writable_projects(&self, caller: &Caller) -> BTreeSet<i64> {
        self.mapped(caller, true).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstreams::FolderSecrets;
    use kberg_core::Principal;

    #[tokio::test]
    async fn tokens_come_from_the_secrets_on_every_call_and_projects_from_the_mapping() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("kanboard-claude"), "t1\n").expect("write");
        let config: KanboardConfig = serde_saphyr::from_str(
            "url: http://127.0.0.1:9/jsonrpc.php\nagents:\n  claude: {secret: kanboard-claude, user: claude-bot}\n  codex: {secret: missing}\nprojects:\n  shop: [1, 3]\n  ops: [3, 4]\n",
        )
        .expect("config");
        let access = VaultAccess::new(
            config,
            Arc::new(FolderSecrets::new(dir.path())),
            Arc::new(|c: &Caller| match c.principal().id.as_str() {
                "claude" => vec![
                    BridleProject::writable("shop"),
                    BridleProject::read_only("ops"),
                ],
                _ => vec![BridleProject::writable("shop")],
            }),
        );
        let claude = Caller::new(Principal::new("claude"));
        match &access.credential(&claude).await {
            Ok(Credential::User { username, token }) => {
                assert_eq!((username.as_str(), token.as_str()), ("claude-bot", "t1"));
            }
            other => panic!("unexpected {other:?}"),
        }
        // A rotated token is used on the next call.
        std::fs::write(dir.path().join("kanboard-claude"), "t2-longer\n").expect("write");
        match &access.credential(&claude).await {
            Ok(Credential::User { token, .. }) => assert_eq!(token, "t2-longer"),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            access.projects(&claude).await,
            [1, 3, 4].into_iter().collect()
        );
        // Project 3 is also ops's, but shop (which may write) maps it too; 4 is only ops's.
        assert_eq!(
            access.writable_projects(&claude).await,
            [1, 3].into_iter().collect()
        );
        let codex = Caller::new(Principal::new("codex"));
        assert!(matches!(
            access.credential(&codex).await,
            Err(CredentialError::Missing(_))
        ));
        assert_eq!(
            access
                .credential(&Caller::new(Principal::new("stranger")))
                .await
                .err(),
            Some(CredentialError::NotConfigured)
        );
    }

    /// The caller's Bridle projects are read off the async thread: the gateway's function reads
    /// the project documents (files, or PostgreSQL), which would hold a worker while it waits.
    /// On a runtime of one thread, a function run there waits in vain for this task of the same
    /// runtime.
    #[tokio::test(flavor = "current_thread")]
    async fn the_bridle_projects_are_read_off_the_async_thread() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config: KanboardConfig = serde_saphyr::from_str(
            "url: http://127.0.0.1:9/jsonrpc.php\nprojects:\n  shop: [1, 3]\n",
        )
        .expect("config");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Mutex::new(rx);
        let access = VaultAccess::new(
            config,
            Arc::new(FolderSecrets::new(dir.path())),
            Arc::new(move |_c: &Caller| {
                let rx = rx.lock().expect("lock");
                match rx.recv_timeout(kberg_testkit::WAIT) {
                    Ok(()) => vec![BridleProject::writable("shop")],
                    Err(_) => Vec::new(),
                }
            }),
        );
        let told = tokio::spawn(async move { tx.send(()).expect("send") });
        let claude = Caller::new(Principal::new("claude"));
        assert_eq!(
            access.projects(&claude).await,
            [1, 3].into_iter().collect(),
            "the projects function ran on the runtime's one thread"
        );
        told.await.expect("told");
    }
}
