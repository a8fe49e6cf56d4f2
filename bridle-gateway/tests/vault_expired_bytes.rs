//! A rotated-out version whose grace period has ended has its ciphertext destroyed by the
//! rotation that finds it expired; on SQLite, as after a revoke, the destroyed bytes are
//! moved out of the write-ahead log at once, so they are left neither in the log nor in the
//! main file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

use std::time::Duration;

use bridle_gateway::vault::{MasterKey, Vault, VaultConfig};

fn ciphertext(db: &std::path::Path, version: i64) -> Option<Vec<u8>> {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row(
        "SELECT ciphertext FROM vault_versions WHERE name = 's' AND version = ?1",
        [version],
        |r| r.get(0),
    )
    .unwrap()
}

/// Before, only a revoke checkpointed the log: a version destroyed because its grace ended
/// stayed readable in `vault.db-wal` (and in the main file's old page) until SQLite's next
/// automatic checkpoint, which a small vault may not reach for a long time.
#[test]
fn an_expired_ciphertext_leaves_no_bytes_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("vault.db");
    let vault = Vault::open(&db, &MasterKey::from_bytes([4; 32]), VaultConfig::default()).unwrap();
    vault.create("s", &"old-value".into(), "admin").unwrap();
    let old = ciphertext(&db, 1).expect("version 1 is sealed");
    vault
        .rotate("s", &"new-value".into(), "admin", Duration::ZERO)
        .unwrap();
    assert_eq!(ciphertext(&db, 1), None, "destroyed by the rotation");
    assert_eq!(vault.version("s", 1).unwrap_err().code(), "version_expired");
    for file in [db.clone(), dir.path().join("vault.db-wal")] {
        if let Ok(bytes) = std::fs::read(&file) {
            assert!(
                !bytes.windows(old.len()).any(|w| w == old),
                "{} still holds the expired ciphertext",
                file.display()
            );
        }
    }
}
