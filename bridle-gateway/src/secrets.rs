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
use crate::vault::{SecretRef, Vault, VaultError};

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

    /// Whether a bare name is the vault's: every answer but "no such secret" (or a name the
    /// vault cannot hold) is. A revoked secret, or a vault that fails to answer, is refused by
    /// the vault; it never falls back to an older copy left in the `secrets/` folder.
    fn in_vault(&self, name: &str) -> bool {
        !matches!(
            self.vault.active_version(name),
            Err(VaultError::SecretNotFound(_) | VaultError::InvalidName { .. })
        )
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
        match self.vault_name(used.name) {
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

    fn blocks(&self, name: &str) -> bool {
        // A bare name asks the vault whether it holds it; `file:` and `docker:` do not.
        !matches!(self.source(name), Source::Folder(..))
    }

    fn record_uses(&self, uses: &[SecretUse<'_>]) -> Vec<Result<(), SecretError>> {
        let mut outcomes: Vec<Option<Result<(), SecretError>>> = vec![None; uses.len()];
        let mut in_vault = Vec::new();
        let mut at = Vec::new();
        for (i, used) in uses.iter().enumerate() {
            match self.vault_name(used.name) {
                Some(n) => {
                    in_vault.push(SecretUse {
                        name: n,
                        ..used.clone()
                    });
                    at.push(i);
                }
                None => outcomes[i] = Some(self.legacy.record_use(used)),
            }
        }
        if !in_vault.is_empty() {
            let recorded = SecretSource::record_uses(self.vault.as_ref(), &in_vault);
            for (i, outcome) in at.into_iter().zip(recorded) {
                outcomes[i] = Some(outcome);
            }
        }
        uses.iter()
            .zip(outcomes)
            .map(|(used, outcome)| {
                outcome.unwrap_or_else(|| {
                    Err(SecretError::Unreadable {
                        name: used.name.to_owned(),
                        message: "the vault answered no outcome for the use".to_owned(),
                    })
                })
            })
            .collect()
    }
}

impl GatewaySecrets {
    /// The vault's name for a use of `name`, or `None` for a secret kept in a folder.
    fn vault_name<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        match self.source(name) {
            Source::Vault(n) => Some(n),
            Source::VaultOrLegacy(n) if self.in_vault(n) => Some(n),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::vault::{MasterKey, VaultConfig};

    fn secrets(dir: &std::path::Path) -> GatewaySecrets {
        let vault = Vault::open(
            &dir.join("vault.db"),
            &MasterKey::from_bytes([3; 32]),
            VaultConfig::default(),
        )
        .expect("vault");
        let legacy = dir.join("secrets");
        std::fs::create_dir_all(&legacy).expect("dir");
        GatewaySecrets::new(Arc::new(vault), legacy, dir.join("run"))
    }

    fn value(s: &GatewaySecrets, name: &str) -> Result<String, SecretError> {
        s.current(name).map(|(c, _)| c.expose().to_string())
    }

    #[test]
    fn a_bare_name_reads_the_folder_only_while_the_vault_has_no_such_secret() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = secrets(dir.path());
        std::fs::write(dir.path().join("secrets/gitea-token"), "old-file-token\n").expect("write");
        // Not imported yet: the file answers.
        assert_eq!(value(&s, "gitea-token").as_deref(), Ok("old-file-token"));
        // Imported (the file stays behind), then rotated after a leak, then revoked.
        s.vault()
            .create("gitea-token", &"vault-token-1".into(), "admin")
            .expect("create");
        assert_eq!(value(&s, "gitea-token").as_deref(), Ok("vault-token-1"));
        let v2 = s
            .vault()
            .rotate(
                "gitea-token",
                &"vault-token-2".into(),
                "admin",
                std::time::Duration::ZERO,
            )
            .expect("rotate");
        s.vault()
            .revoke("gitea-token", v2, "admin")
            .expect("revoke");
        // Refused: neither the revoked value nor the stale file is used.
        let refused = value(&s, "gitea-token").expect_err("revoked");
        assert!(
            matches!(refused, SecretError::Missing { .. }),
            "{refused:?}"
        );
        assert!(!refused.to_string().contains("token-"), "{refused}");
        assert!(s.version("gitea-token").is_err());
    }

    #[test]
    fn a_token_pasted_as_a_bare_name_is_not_repeated_in_the_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = secrets(dir.path());
        let canary = "ghp_CANARYc4n4ry0123456789abcdefCANARY99";
        let refused = value(&s, canary).expect_err("no such secret");
        assert!(
            matches!(refused, SecretError::Missing { .. }),
            "{refused:?}"
        );
        let text = refused.to_string();
        assert!(!text.contains("CANARY"), "{text}");
        assert!(text.contains("not shown"), "{text}");
        let version = s.version(canary).expect_err("no such secret").to_string();
        assert!(!version.contains("CANARY"), "{version}");
        // The vault's own answer for it (the admin API's detail) does not repeat it either.
        let vault = s
            .vault()
            .get(canary)
            .expect_err("not in the vault")
            .to_string();
        assert!(!vault.contains("CANARY"), "{vault}");
        // A name that looks like one is still named.
        let named = value(&s, "gitea-token")
            .expect_err("no such secret")
            .to_string();
        assert!(named.contains("`gitea-token`"), "{named}");
    }
}
