//! Where the gateway's upstream credentials come from: [`GatewaySecrets`], the vault first, with
//! the read-only sources beside it.
//!
//! A credential in `bridle.yaml` names a secret: `gitea-token` (the vault's secret of that name;
//! a data directory from before the vault, whose secret is still a file in `secrets/`, keeps
//! working until `bridle secrets import` moves it in), `vault:gitea-token` (the vault only),
//! `docker:gitea_token` (a Docker secret file, `/run/secrets/gitea_token`) or
//! `file:gitea-token` (a file in the data directory's `secrets/` folder). Files are versioned
//! by their modification time, so replacing one counts as a rotation; every use of a vault
//! secret is recorded in the vault's append-only log, and a use that cannot be recorded fails
//! the call before anything is sent.

use std::path::PathBuf;
use std::sync::Arc;

use crate::upstreams::{Credential, FolderSecrets, SecretError, SecretSource, SecretUse};
use crate::vault::{SecretRef, Vault};

/// The vault, and the folders its `docker:` and `file:` references read.
#[derive(Clone)]
pub struct GatewaySecrets {
    vault: Arc<Vault>,
    legacy: FolderSecrets,
    docker: FolderSecrets,
}

impl std::fmt::Debug for GatewaySecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewaySecrets").finish_non_exhaustive()
    }
}

enum Source<'a> {
    Vault(&'a str),
    VaultOrLegacy(&'a str),
    Folder(&'a FolderSecrets, &'a str),
}

impl GatewaySecrets {
    /// Secrets from `vault`, with `secrets_dir` (the data directory's `secrets/`) for `file:`
    /// and unimported names, and `docker_dir` for `docker:`.
    pub fn new(vault: Arc<Vault>, secrets_dir: PathBuf, docker_dir: PathBuf) -> Self {
        Self {
            vault,
            legacy: FolderSecrets::new(secrets_dir),
            docker: FolderSecrets::new(docker_dir),
        }
    }

    /// The vault.
    pub fn vault(&self) -> &Arc<Vault> {
        &self.vault
    }

    fn source<'a>(&'a self, name: &'a str) -> Source<'a> {
        match name.parse::<SecretRef>() {
            Ok(SecretRef::Vault(_)) => Source::Vault(name.trim_start_matches("vault:")),
            Ok(SecretRef::Docker(_)) => Source::Folder(&self.docker, &name["docker:".len()..]),
            Ok(SecretRef::File(_)) => Source::Folder(&self.legacy, &name["file:".len()..]),
            Err(_) => Source::VaultOrLegacy(name),
        }
    }

    fn in_vault(&self, name: &str) -> bool {
        self.vault.active_version(name).is_ok()
    }
}

impl SecretSource for GatewaySecrets {
    fn version(&self, name: &str) -> Result<u64, SecretError> {
        match self.source(name) {
            Source::Vault(n) => SecretSource::version(self.vault.as_ref(), n),
            Source::VaultOrLegacy(n) if self.in_vault(n) => {
                SecretSource::version(self.vault.as_ref(), n)
            }
            Source::VaultOrLegacy(n) => self.legacy.version(n),
            Source::Folder(f, n) => f.version(n),
        }
    }

    fn current(&self, name: &str) -> Result<(Credential, u64), SecretError> {
        match self.source(name) {
            Source::Vault(n) => SecretSource::current(self.vault.as_ref(), n),
            Source::VaultOrLegacy(n) if self.in_vault(n) => {
                SecretSource::current(self.vault.as_ref(), n)
            }
            Source::VaultOrLegacy(n) => self.legacy.current(n),
            Source::Folder(f, n) => f.current(n),
        }
    }

    fn record_use(&self, used: &SecretUse<'_>) -> Result<(), SecretError> {
        let vault_name = match self.source(used.name) {
            Source::Vault(n) => Some(n),
            Source::VaultOrLegacy(n) if self.in_vault(n) => Some(n),
            _ => None,
        };
        match vault_name {
            Some(n) => SecretSource::record_use(
                self.vault.as_ref(),
                &SecretUse {
                    name: n,
                    ..used.clone()
                },
            ),
            None => self.legacy.record_use(used),
        }
    }
}
