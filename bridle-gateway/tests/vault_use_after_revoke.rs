//! A use is recorded in the same serialized write as every revoke and rotation, and the caller
//! sends nothing when the record is refused; so a value read just before its version was
//! revoked, or just before its grace period ended, is refused when its use is recorded, and
//! the revoked credential never goes out.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

use std::time::Duration;

use bridle_gateway::vault::{MasterKey, SecretUseRecord, Vault, VaultConfig};

fn open(dir: &std::path::Path) -> Vault {
    Vault::open(
        &dir.join("vault.db"),
        &MasterKey::from_bytes([5; 32]),
        VaultConfig::default(),
    )
    .expect("vault opens")
}

fn use_of(name: &str, version: u64) -> SecretUseRecord<'_> {
    SecretUseRecord {
        name,
        version,
        upstream: "gitea",
        request_id: "tool",
        actor: "claude",
    }
}

/// Before, the use of a version revoked (or past its grace) after its value was read was
/// recorded like any other, and the request went out with the revoked credential.
#[test]
fn a_use_of_a_version_revoked_or_expired_since_it_was_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let vault = open(dir.path());
    vault.create("gitea", &"leaked".into(), "admin").unwrap();
    let read = vault.current("gitea").unwrap();
    vault.revoke("gitea", read.version, "admin").unwrap();
    let refused = vault
        .record_use("gitea", read.version, "gitea", "tool", "claude")
        .expect_err("revoked since it was read");
    assert_eq!(refused.code(), "version_revoked");

    vault.create("kanboard", &"old".into(), "admin").unwrap();
    let read = vault.current("kanboard").unwrap();
    vault
        .rotate("kanboard", &"new".into(), "admin", Duration::ZERO)
        .unwrap();
    let outcomes = vault
        .record_uses(&[use_of("kanboard", read.version), use_of("kanboard", 2)])
        .unwrap();
    let codes: Vec<&str> = outcomes
        .iter()
        .map(|o| o.as_ref().map_or_else(|e| e.code(), |()| "ok"))
        .collect();
    assert_eq!(codes, ["version_expired", "ok"]);

    // Only the accepted use is in the log.
    let used: Vec<(Option<String>, Option<u64>)> = vault
        .audit_log(0, 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.action == "use")
        .map(|e| (e.secret, e.version))
        .collect();
    assert_eq!(used, [(Some("kanboard".to_owned()), Some(2))]);
}

#[test]
fn a_use_of_a_version_in_its_grace_period_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let vault = open(dir.path());
    vault.create("gitea", &"old".into(), "admin").unwrap();
    vault
        .rotate("gitea", &"new".into(), "admin", Duration::from_secs(3600))
        .unwrap();
    vault
        .record_use("gitea", 1, "gitea", "tool", "claude")
        .expect("in grace");
}
