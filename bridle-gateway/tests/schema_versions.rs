//! The vault's and the audit log's SQLite files carry versioned schemas: a file written before
//! versioning (the same tables, no `schema_migrations`) is adopted with its data, and a file
//! newer than the build is refused with the store's stable code.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

use std::path::Path;

use bridle_gateway::audit::{AuditConfig, AuditLog, Entry, Kind, Surface};
use bridle_gateway::vault::{MasterKey, SecretValue, Vault, VaultConfig};
use rusqlite::Connection;

fn open_vault(dir: &Path) -> Result<Vault, bridle_gateway::vault::VaultError> {
    Vault::open(
        &dir.join("vault.db"),
        &MasterKey::from_bytes([7; 32]),
        VaultConfig {
            docker_secrets_dir: dir.join("run-secrets"),
            secrets_dir: None,
        },
    )
}

/// Makes a current file look like one written before versioning: the baseline's tables are the
/// old schema, so only the bookkeeping differs.
fn forget_versions(db: &Path) {
    Connection::open(db)
        .unwrap()
        .execute_batch("DROP TABLE schema_migrations")
        .unwrap();
}

fn versions(db: &Path, store: &str) -> Vec<u32> {
    bridle_rules::db::applied_sqlite(&Connection::open(db).unwrap(), store).unwrap()
}

fn claim_future_version(db: &Path, store: &str) {
    Connection::open(db)
        .unwrap()
        .execute(
            "INSERT INTO schema_migrations (store, version, name, checksum, applied_at) VALUES (?1, 9, 'future', 'x', 'now')",
            [store],
        )
        .unwrap();
}

#[test]
fn an_unversioned_vault_is_adopted_and_a_newer_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("vault.db");
    {
        let vault = open_vault(dir.path()).unwrap();
        vault
            .create("gitea", &SecretValue::new(b"s3cret".to_vec()), "alice")
            .unwrap();
    }
    forget_versions(&db);
    assert!(versions(&db, "vault").is_empty());
    let vault = open_vault(dir.path()).unwrap();
    assert_eq!(versions(&db, "vault"), [1, 2]);
    assert_eq!(
        vault.action_counts().unwrap(),
        [("create".to_string(), 1)],
        "counted from the adopted log, once"
    );
    assert_eq!(
        vault.current("gitea").unwrap().value.expose(),
        b"s3cret",
        "the secret survived"
    );
    drop(vault);

    claim_future_version(&db, "vault");
    let e = open_vault(dir.path()).unwrap_err();
    assert_eq!(e.code(), "vault_schema");
    assert!(e.to_string().contains("schema version 9"), "{e}");
}

#[test]
fn an_unversioned_audit_log_is_adopted_with_its_chain_and_a_newer_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("audit.db");
    {
        let log = AuditLog::open(AuditConfig::new(db.clone())).unwrap();
        log.record(Entry::user("alice", Surface::Panel, Kind::Approval).project("demo"))
            .unwrap();
        log.record(Entry::agent("claude-1", Kind::Proposal).project("demo"))
            .unwrap();
        log.flush().unwrap();
    }
    forget_versions(&db);
    let log = AuditLog::open(AuditConfig::new(db.clone())).unwrap();
    assert_eq!(versions(&db, "audit"), [1]);
    let report = log.verify().unwrap();
    assert!(report.is_intact(), "{report:?}");
    assert_eq!(report.checked, 2);
    // The chain goes on from the old head.
    log.record(Entry::user("bob", Surface::Cli, Kind::Approval))
        .unwrap();
    log.flush().unwrap();
    let report = log.verify().unwrap();
    assert!(report.is_intact() && report.checked == 3, "{report:?}");
    drop(log);

    claim_future_version(&db, "audit");
    let e = AuditLog::open(AuditConfig::new(db))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.code(), "audit_schema");
    assert!(e.to_string().contains("schema version 9"), "{e}");
}
