//! The vault as the upstream routes' [`SecretSource`].
//!
//! The upstream routes ask for a secret's active version on every forwarded call and for its
//! value only when they (re)connect; every injected request is recorded through
//! [`Vault::record_use`]. This adapter maps the vault's errors onto the routes' [`SecretError`]:
//! a missing secret, one whose active version was revoked, or a use of a version revoked or
//! past its grace since its value was read, is `Missing` (so the call is refused as lacking
//! its credential, never sent without one, and never taken for a failure of the vault);
//! anything else is `Unreadable` with the vault's stable code and sentence.

use crate::upstreams::{Credential, SecretError, SecretSource, SecretUse};

use super::error::VaultError;
use super::{SecretUseRecord, Vault};

fn to_secret_error(name: &str, e: VaultError) -> SecretError {
    match e {
        VaultError::SecretNotFound(_)
        | VaultError::NoActiveVersion(_)
        | VaultError::VersionRevoked { .. }
        | VaultError::VersionExpired { .. } => SecretError::Missing {
            name: name.to_owned(),
        },
        e => SecretError::Unreadable {
            name: name.to_owned(),
            message: format!("{}: {e}", e.code()),
        },
    }
}

impl SecretSource for Vault {
    fn version(&self, name: &str) -> Result<u64, SecretError> {
        self.active_version(name)
            .map_err(|e| to_secret_error(name, e))
    }

    fn current(&self, name: &str) -> Result<(Credential, u64), SecretError> {
        let current = self.current(name).map_err(|e| to_secret_error(name, e))?;
        let text = current
            .value
            .expose_str()
            .ok_or_else(|| SecretError::Unreadable {
                name: name.to_owned(),
                message: "the value is not UTF-8 text, so it cannot go in a header".to_owned(),
            })?;
        Ok((Credential::new(text), current.version))
    }

    fn record_use(&self, used: &SecretUse<'_>) -> Result<(), SecretError> {
        let mut outcomes = SecretSource::record_uses(self, std::slice::from_ref(used));
        outcomes.pop().unwrap_or_else(|| {
            Err(SecretError::Unreadable {
                name: used.name.to_owned(),
                message: "the vault answered no outcome for the use".to_owned(),
            })
        })
    }

    fn record_uses(&self, uses: &[SecretUse<'_>]) -> Vec<Result<(), SecretError>> {
        let records: Vec<SecretUseRecord<'_>> = uses
            .iter()
            .map(|used| SecretUseRecord {
                name: used.name,
                version: used.version,
                upstream: used.upstream,
                request_id: used.request,
                actor: used.agent,
            })
            .collect();
        match Vault::record_uses(self, &records) {
            Ok(outcomes) => uses
                .iter()
                .zip(outcomes)
                .map(|(used, outcome)| outcome.map_err(|e| to_secret_error(used.name, e)))
                .collect(),
            // Nothing of the batch was recorded: every call of it is refused.
            Err(e) => {
                let message = format!("{}: {e}", e.code());
                uses.iter()
                    .map(|used| {
                        Err(SecretError::Unreadable {
                            name: used.name.to_owned(),
                            message: message.clone(),
                        })
                    })
                    .collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vault::{MasterKey, SecretValue, VaultConfig};

    #[test]
    fn the_vault_serves_the_upstream_routes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vault = Vault::open(
            &dir.path().join("vault.db"),
            &MasterKey::from_bytes([3; 32]),
            VaultConfig::default(),
        )
        .expect("open");
        let source: &dyn SecretSource = &vault;
        assert_eq!(
            source.version("gitea").expect_err("missing"),
            SecretError::Missing {
                name: "gitea".into()
            }
        );
        vault
            .create("gitea", &"tok-1".into(), "admin")
            .expect("create");
        let (cred, version) = source.current("gitea").expect("current");
        assert_eq!((cred.expose(), version), ("tok-1", 1));
        vault
            .rotate("gitea", &"tok-2".into(), "admin", std::time::Duration::ZERO)
            .expect("rotate");
        assert_eq!(source.version("gitea").expect("version"), 2);
        source
            .record_use(&SecretUse {
                name: "gitea",
                version: 2,
                upstream: "gitea",
                agent: "claude",
                request: "gitea.list_repos",
            })
            .expect("recorded");
        let log = vault.audit_log(0, 10).expect("log");
        let used = log.iter().find(|e| e.action == "use").expect("use record");
        assert_eq!(used.actor, "claude");
        assert_eq!(used.request_id.as_deref(), Some("gitea.list_repos"));
        vault.revoke("gitea", 2, "admin").expect("revoke");
        assert!(matches!(
            source.current("gitea"),
            Err(SecretError::Missing { .. })
        ));
        // A use of a version revoked (or past its grace) since its value was read is refused
        // as a missing credential, not as a vault that failed.
        for version in [1, 2] {
            let refused = source
                .record_use(&SecretUse {
                    name: "gitea",
                    version,
                    upstream: "gitea",
                    agent: "claude",
                    request: "gitea.list_repos",
                })
                .expect_err("revoked or expired");
            assert!(
                matches!(refused, SecretError::Missing { .. }),
                "{version}: {refused:?}"
            );
        }
        vault
            .create("binary", &SecretValue::new(vec![0xff, 0xfe]), "admin")
            .expect("create");
        assert!(matches!(
            source.current("binary"),
            Err(SecretError::Unreadable { .. })
        ));
    }
}
