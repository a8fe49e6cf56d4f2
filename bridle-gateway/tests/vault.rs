//! The vault through its public API, against real SQLite files and real key files, and (with
//! the `postgres` feature) the same tests against a real PostgreSQL server: each test is a
//! function of the backend, run once per backend by `on_both!` at the end of the file.
//!
//! Tampering is done the way an attacker with the database would do it: raw SQL on the file,
//! or on the server as its owner.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

#[cfg(feature = "postgres")]
#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bridle_gateway::vault::{
    CachedToken, KeyOrigin, MAX_VALUE_LEN, MasterKey, SecretRef, SecretUseRecord, SecretValue,
    Vault, VaultConfig, VaultError, VersionState, is_valid_name,
};
use kberg_testkit::eventually;
use kberg_testkit::log::LogBuffer;
use proptest::prelude::*;
use rusqlite::Connection;

const HOUR: Duration = Duration::from_secs(3600);

fn key(byte: u8) -> MasterKey {
    MasterKey::from_bytes([byte; 32])
}

/// Which database a test's vault lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
}

struct Fixture {
    dir: tempfile::TempDir,
    vault: Vault,
    backend: Backend,
    /// The PostgreSQL database, for that backend.
    dbname: Option<String>,
}

impl Fixture {
    fn new(backend: Backend) -> Self {
        Self::with_key(backend, &key(7))
    }

    /// A fresh vault created under `master`.
    fn with_key(backend: Backend, master: &MasterKey) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let dbname = match backend {
            Backend::Sqlite => None,
            #[cfg(feature = "postgres")]
            Backend::Postgres => Some(pg_cluster::PgCluster::shared().create_database()),
        };
        let vault = open_on(backend, dir.path(), dbname.as_deref(), master).expect("vault opens");
        Self {
            dir,
            vault,
            backend,
            dbname,
        }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("vault.db")
    }

    /// Another handle on the same database (another process or replica would hold one).
    fn reopen(&self, key: &MasterKey) -> Result<Vault, VaultError> {
        open_on(self.backend, self.dir.path(), self.dbname.as_deref(), key)
    }

    /// Raw access to the database, as anyone holding it has.
    fn raw(&self) -> Raw {
        match self.backend {
            Backend::Sqlite => {
                // No foreign key checks, which an attacker would not keep on either.
                let raw = Connection::open(self.db()).expect("raw connection");
                raw.execute_batch("PRAGMA foreign_keys = OFF")
                    .expect("pragma");
                Raw::Sqlite(raw)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => Raw::Postgres(
                bridle_rules::db::postgres::PgDatabase::connect(
                    &pg_cluster::PgCluster::shared()
                        .settings(self.dbname.as_deref().expect("a database"))
                        .with_max_connections(1),
                )
                .expect("raw connection"),
            ),
        }
    }

    /// SQL that switches off foreign keys and triggers for the rest of a raw batch (an owner
    /// of the server can; SQLite's raw connection has them off already).
    fn bypass(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "",
            #[cfg(feature = "postgres")]
            Backend::Postgres => "SET session_replication_role = replica;",
        }
    }

    /// A one-byte blob literal in this backend's SQL.
    fn byte_literal(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite => "x'00'",
            #[cfg(feature = "postgres")]
            Backend::Postgres => "'\\x00'::bytea",
        }
    }
}

/// A raw connection to a vault's database.
enum Raw {
    Sqlite(Connection),
    #[cfg(feature = "postgres")]
    Postgres(bridle_rules::db::postgres::PgDatabase),
}

impl Raw {
    /// Runs statements; the database's refusal as text.
    fn exec(&self, sql: &str) -> Result<(), String> {
        match self {
            Raw::Sqlite(c) => c.execute_batch(sql).map_err(|e| e.to_string()),
            #[cfg(feature = "postgres")]
            Raw::Postgres(db) => db
                .client()
                .and_then(|c| c.batch(sql))
                .map_err(|e| e.to_string()),
        }
    }

    /// The first column of every row of `sql`, as bytes.
    fn blobs(&self, sql: &str) -> Vec<Option<Vec<u8>>> {
        match self {
            Raw::Sqlite(c) => {
                let mut stmt = c.prepare(sql).expect("prepare");
                stmt.query_map([], |r| r.get(0))
                    .expect("query")
                    .map(|r| r.expect("row"))
                    .collect()
            }
            #[cfg(feature = "postgres")]
            Raw::Postgres(db) => db
                .client()
                .and_then(|c| c.query(sql, &[]))
                .expect("query")
                .iter()
                .map(|r| r.get(0))
                .collect(),
        }
    }

    /// The first column of every row of `sql`, as integers.
    fn ints(&self, sql: &str) -> Vec<i64> {
        match self {
            Raw::Sqlite(c) => {
                let mut stmt = c.prepare(sql).expect("prepare");
                stmt.query_map([], |r| r.get(0))
                    .expect("query")
                    .map(|r| r.expect("row"))
                    .collect()
            }
            #[cfg(feature = "postgres")]
            Raw::Postgres(db) => db
                .client()
                .and_then(|c| c.query(sql, &[]))
                .expect("query")
                .iter()
                .map(|r| r.get(0))
                .collect(),
        }
    }

    /// The first column of every row of `sql`, as text.
    fn texts(&self, sql: &str) -> Vec<String> {
        match self {
            Raw::Sqlite(c) => {
                let mut stmt = c.prepare(sql).expect("prepare");
                stmt.query_map([], |r| r.get(0))
                    .expect("query")
                    .map(|r| r.expect("row"))
                    .collect()
            }
            #[cfg(feature = "postgres")]
            Raw::Postgres(db) => db
                .client()
                .and_then(|c| c.query(sql, &[]))
                .expect("query")
                .iter()
                .map(|r| r.get(0))
                .collect(),
        }
    }

    /// Sets the ciphertext of every version of `name` to `bytes`.
    fn set_ciphertext(&self, name: &str, bytes: &[u8]) {
        match self {
            Raw::Sqlite(c) => {
                c.execute(
                    "UPDATE vault_versions SET ciphertext = ?1 WHERE name = ?2",
                    rusqlite::params![bytes, name],
                )
                .expect("update");
            }
            #[cfg(feature = "postgres")]
            Raw::Postgres(db) => {
                db.client()
                    .and_then(|c| {
                        c.execute(
                            "UPDATE vault_versions SET ciphertext = $1 WHERE name = $2",
                            &[&bytes, &name],
                        )
                    })
                    .expect("update");
            }
        }
    }
}

fn open_on(
    backend: Backend,
    dir: &Path,
    dbname: Option<&str>,
    key: &MasterKey,
) -> Result<Vault, VaultError> {
    let config = VaultConfig {
        docker_secrets_dir: dir.join("run-secrets"),
        secrets_dir: Some(dir.join("secrets")),
    };
    // Only PostgreSQL names a database.
    #[cfg(not(feature = "postgres"))]
    let _ = dbname;
    match backend {
        Backend::Sqlite => Vault::open(&dir.join("vault.db"), key, config),
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            let db = bridle_rules::db::postgres::PgDatabase::connect(
                &pg_cluster::PgCluster::shared().settings(dbname.expect("a database")),
            )
            .expect("connecting");
            Vault::open_postgres(db, key, config)
        }
    }
}

fn open(dir: &Path, key: &MasterKey) -> Vault {
    open_on(Backend::Sqlite, dir, None, key).expect("vault opens")
}

fn code<T: std::fmt::Debug>(r: Result<T, VaultError>) -> &'static str {
    r.expect_err("an error").code()
}

fn round_trip_and_metadata(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    assert_eq!(
        v.create("gitea-token", &"tok-1".into(), "admin:alice")
            .expect("create"),
        1
    );
    let cur = v.current("gitea-token").expect("current");
    assert_eq!((cur.version, cur.value.expose()), (1, &b"tok-1"[..]));
    let meta = v.get("gitea-token").expect("get");
    assert_eq!(meta.active_version, 1);
    assert_eq!(meta.created_by, "admin:alice");
    assert_eq!(meta.versions.len(), 1);
    assert_eq!(meta.versions[0].state, VersionState::Active);
    assert_eq!(meta.versions[0].fingerprint.len(), 16);
    assert_eq!(meta.last_used_at, None);
    assert_eq!(
        code(v.create("gitea-token", &"x".into(), "a")),
        "secret_exists"
    );
    assert_eq!(code(v.current("nope")), "secret_not_found");
    assert_eq!(code(v.version("gitea-token", 9)), "version_not_found");
    assert_eq!(code(v.create("bad name", &"x".into(), "a")), "invalid_name");
    assert_eq!(code(v.create("empty", &"".into(), "a")), "invalid_value");
    let largest = SecretValue::new(vec![b'x'; MAX_VALUE_LEN]);
    v.create("largest", &largest, "a")
        .expect("64 KiB is allowed");
    assert_eq!(v.current("largest").expect("current").value, largest);
    let too_big = SecretValue::new(vec![b'x'; MAX_VALUE_LEN + 1]);
    assert_eq!(
        code(v.rotate("largest", &too_big, "a", HOUR)),
        "invalid_value"
    );
    assert_eq!(code(v.create("ok", &"x".into(), "")), "invalid_actor");
    assert_eq!(
        code(v.rotate("nope", &"x".into(), "a", HOUR)),
        "secret_not_found"
    );

    // Same value, same fingerprint; different value, different fingerprint.
    v.create("same", &"tok-1".into(), "a").expect("create");
    v.create("other", &"tok-2".into(), "a").expect("create");
    let fp = |n| v.get(n).expect("get").versions[0].fingerprint.clone();
    assert_eq!(fp("same"), fp("gitea-token"));
    assert_ne!(fp("other"), fp("gitea-token"));
    let names: Vec<_> = v
        .list()
        .expect("list")
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, ["gitea-token", "largest", "other", "same"]);

    // Reopening keeps everything.
    let v = f.reopen(&key(7)).expect("reopens");
    assert_eq!(
        v.current("gitea-token").expect("current").value.expose(),
        b"tok-1"
    );
}

fn record_use_updates_last_use_and_appends_a_record(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    v.create("gitea", &"tok".into(), "admin").expect("create");
    v.record_use("gitea", 1, "gitea", "req-42", "agent:claude")
        .expect("use");
    let meta = v.get("gitea").expect("get");
    assert!(meta.last_used_at.is_some());
    assert_eq!(meta.versions[0].last_used_at, meta.last_used_at);
    let log = v.audit_log(0, 100).expect("log");
    let used = log
        .iter()
        .find(|e| e.action == "use")
        .expect("a use record");
    assert_eq!(used.actor, "agent:claude");
    assert_eq!(used.secret.as_deref(), Some("gitea"));
    assert_eq!(used.version, Some(1));
    assert_eq!(used.upstream.as_deref(), Some("gitea"));
    assert_eq!(used.request_id.as_deref(), Some("req-42"));
    assert_eq!(
        used.fingerprint.as_deref(),
        Some(&*meta.versions[0].fingerprint)
    );
    assert_eq!(
        code(v.record_use("gitea", 2, "gitea", "r", "a")),
        "version_not_found"
    );
    assert_eq!(
        code(v.record_use("nope", 1, "gitea", "r", "a")),
        "secret_not_found"
    );
}

fn record_uses_commits_a_batch_and_refuses_each_bad_use_alone(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    v.create("gitea", &"tok".into(), "admin").expect("create");
    v.rotate("gitea", &"tok-2".into(), "admin", HOUR)
        .expect("rotate");
    v.create("kanboard", &"kb".into(), "admin").expect("create");
    let use_of = |name, version, request_id, actor| SecretUseRecord {
        name,
        version,
        upstream: "up",
        request_id,
        actor,
    };
    let outcomes = v
        .record_uses(&[
            use_of("gitea", 2, "r1", "claude"),
            use_of("gitea", 9, "r2", "claude"),
            use_of("nope", 1, "r3", "claude"),
            use_of("bad/name", 1, "r4", "claude"),
            use_of("kanboard", 1, "r5", "bad\nactor"),
            use_of("gitea", 1, "r6", "codex"),
            use_of("kanboard", 1, "r7", "codex"),
        ])
        .expect("the batch is written");
    let codes: Vec<&str> = outcomes
        .iter()
        .map(|o| o.as_ref().map_or_else(VaultError::code, |()| "ok"))
        .collect();
    assert_eq!(
        codes,
        [
            "ok",
            "version_not_found",
            "secret_not_found",
            "invalid_name",
            "invalid_actor",
            "ok",
            "ok"
        ]
    );
    // Exactly the accepted uses are in the log, in order, each with its own request and actor.
    let used: Vec<(String, Option<u64>, Option<String>, String)> = v
        .audit_log(0, 100)
        .expect("log")
        .into_iter()
        .filter(|e| e.action == "use")
        .map(|e| {
            (
                e.secret.unwrap_or_default(),
                e.version,
                e.request_id,
                e.actor,
            )
        })
        .collect();
    assert_eq!(
        used,
        [
            ("gitea".into(), Some(2), Some("r1".into()), "claude".into()),
            ("gitea".into(), Some(1), Some("r6".into()), "codex".into()),
            (
                "kanboard".into(),
                Some(1),
                Some("r7".into()),
                "codex".into()
            ),
        ]
    );
    let meta = v.get("kanboard").expect("get");
    assert!(meta.last_used_at.is_some());
    // A batch of refusals only writes nothing, and an empty batch is a no-op.
    let before = v.audit_log(0, 100).expect("log");
    let outcomes = v
        .record_uses(&[use_of("nope", 1, "r8", "claude")])
        .expect("answered");
    assert_eq!(
        code(outcomes.into_iter().next().expect("one")),
        "secret_not_found"
    );
    assert!(v.record_uses(&[]).expect("empty").is_empty());
    assert_eq!(v.audit_log(0, 100).expect("log"), before);
}

fn wrong_master_key_is_refused_and_never_yields_garbage(b: Backend) {
    let f = Fixture::new(b);
    f.vault
        .create("gitea", &"tok".into(), "admin")
        .expect("create");
    let err = f.reopen(&key(8)).expect_err("wrong key");
    assert_eq!(err.code(), "wrong_master_key");
    assert!(err.to_string().contains("different master key"), "{err}");

    // Even with the key check forged (copied from a database made with the other key), every
    // row refuses to decrypt rather than returning bytes.
    let other = Fixture::with_key(b, &key(8));
    let forged = other
        .raw()
        .texts("SELECT value FROM vault_meta WHERE key = 'key_check'")
        .remove(0);
    assert!(
        forged
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/' || c == b'=')
    );
    f.raw()
        .exec(&format!(
            "UPDATE vault_meta SET value = '{forged}' WHERE key = 'key_check'"
        ))
        .expect("forge");
    let wrong = f.reopen(&key(8)).expect("opens with the forged check");
    let err = wrong.current("gitea").expect_err("no garbage");
    assert_eq!(err.code(), "decrypt_failed");
    assert!(err.to_string().contains("gitea version 1"), "{err}");
}

fn tampered_rows_are_refused(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    v.create("alpha", &"value-a".into(), "admin")
        .expect("create");
    v.create("bravo", &"value-b".into(), "admin")
        .expect("create");
    v.rotate("alpha", &"value-a2".into(), "admin", HOUR)
        .expect("rotate");
    let raw = f.raw();

    // Ciphertexts swapped between two names.
    raw.exec(&format!(
        "{}
         UPDATE vault_versions SET name = 'tmp' WHERE name = 'alpha' AND version = 1;
         UPDATE vault_versions SET name = 'alpha' WHERE name = 'bravo' AND version = 1;
         UPDATE vault_versions SET name = 'bravo' WHERE name = 'tmp';",
        f.bypass()
    ))
    .expect("swap names");
    assert_eq!(code(v.version("alpha", 1)), "decrypt_failed");
    assert_eq!(code(v.current("bravo")), "decrypt_failed");

    // Versions renumbered within one name.
    raw.exec(
        "UPDATE vault_versions SET version = 99 WHERE name = 'alpha' AND version = 2;
         UPDATE vault_versions SET version = 2 WHERE name = 'alpha' AND version = 1;
         UPDATE vault_versions SET version = 1 WHERE name = 'alpha' AND version = 99;",
    )
    .expect("swap versions");
    assert_eq!(code(v.current("alpha")), "decrypt_failed");

    // One flipped byte of ciphertext, and a truncated nonce.
    let f2 = Fixture::new(b);
    f2.vault
        .create("c", &"value-c".into(), "admin")
        .expect("create");
    f2.vault
        .create("d", &"value-d".into(), "admin")
        .expect("create");
    let raw = f2.raw();
    let mut ct = raw
        .blobs("SELECT ciphertext FROM vault_versions WHERE name = 'c'")
        .remove(0)
        .expect("ciphertext");
    ct[0] ^= 1;
    raw.set_ciphertext("c", &ct);
    assert_eq!(code(f2.vault.current("c")), "decrypt_failed");
    raw.exec(&format!(
        "UPDATE vault_versions SET nonce = {} WHERE name = 'd'",
        f2.byte_literal()
    ))
    .expect("truncate nonce");
    assert_eq!(code(f2.vault.current("d")), "decrypt_failed");
}

fn rotate_with_grace_keeps_the_old_version_until_it_ends(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    v.create("s", &"one".into(), "admin").expect("create");
    assert_eq!(
        v.rotate("s", &"two".into(), "admin", HOUR).expect("rotate"),
        2
    );
    let cur = v.current("s").expect("current");
    assert_eq!((cur.version, cur.value.expose()), (2, &b"two"[..]));
    assert_eq!(v.version("s", 1).expect("in grace").expose(), b"one");
    let meta = v.get("s").expect("get");
    assert!(matches!(meta.versions[0].state, VersionState::Grace { .. }));
    assert_eq!(meta.versions[1].state, VersionState::Active);

    // No grace: the previous version stops at once.
    assert_eq!(
        v.rotate("s", &"three".into(), "admin", Duration::ZERO)
            .expect("rotate"),
        3
    );
    assert_eq!(code(v.version("s", 2)), "version_expired");
    assert_eq!(
        v.version("s", 1).expect("still in its grace").expose(),
        b"one"
    );
    assert!(matches!(
        v.get("s").expect("get").versions[1].state,
        VersionState::Expired { .. }
    ));

    // A short grace ends by itself (polled with a deadline), and the next rotation destroys
    // the expired ciphertexts with an `expire` record each.
    v.rotate("s", &"four".into(), "admin", Duration::from_millis(150))
        .expect("rotate");
    eventually("the grace to end", || v.version("s", 3).is_err());
    assert_eq!(code(v.version("s", 3)), "version_expired");
    v.rotate("s", &"five".into(), "admin", HOUR)
        .expect("rotate");
    let destroyed = f.raw().ints(
        "SELECT version FROM vault_versions WHERE name = 's' AND ciphertext IS NULL ORDER BY version",
    );
    assert_eq!(destroyed, [2, 3]);
    let expired: Vec<_> = v
        .audit_log(0, 100)
        .expect("log")
        .into_iter()
        .filter(|e| e.action == "expire")
        .filter_map(|e| e.version)
        .collect();
    assert_eq!(expired, [2, 3]);
    assert_eq!(v.version("s", 1).expect("still in grace").expose(), b"one");
    assert_eq!(v.current("s").expect("current").value.expose(), b"five");
}

fn revoke_destroys_the_ciphertext(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    v.create("s", &"old-value".into(), "admin").expect("create");
    v.rotate("s", &"new-value".into(), "admin", HOUR)
        .expect("rotate");
    let old_ct = f
        .raw()
        .blobs("SELECT ciphertext FROM vault_versions WHERE name = 's' AND version = 1")
        .remove(0)
        .expect("ciphertext");
    v.revoke("s", 1, "admin:bob").expect("revoke");
    let raw = f.raw();
    let nonce = raw.blobs("SELECT nonce FROM vault_versions WHERE name = 's' AND version = 1");
    let ct = raw.blobs("SELECT ciphertext FROM vault_versions WHERE name = 's' AND version = 1");
    assert_eq!((nonce, ct), (vec![None], vec![None]));
    assert_eq!(code(v.version("s", 1)), "version_revoked");
    assert_eq!(code(v.revoke("s", 1, "admin")), "version_revoked");
    let meta = v.get("s").expect("get");
    assert!(
        matches!(&meta.versions[0].state, VersionState::Revoked { by, .. } if by == "admin:bob")
    );
    // Not even the bytes survive on disk (secure_delete, then a checkpoint). PostgreSQL keeps
    // them in its write-ahead log until it is recycled (documented); not checked there.
    let files = match b {
        Backend::Sqlite => vec![f.db(), f.dir.path().join("vault.db-wal")],
        #[cfg(feature = "postgres")]
        Backend::Postgres => Vec::new(),
    };
    for file in files {
        if let Ok(bytes) = std::fs::read(&file) {
            assert!(
                !bytes.windows(old_ct.len()).any(|w| w == old_ct),
                "{} still holds the revoked ciphertext",
                file.display()
            );
        }
    }

    // On PostgreSQL the dead row version holding the old ciphertext is vacuumed right after.
    #[cfg(feature = "postgres")]
    if b == Backend::Postgres {
        eventually("a VACUUM after the revoke", || {
            f.raw().ints(
                "SELECT COUNT(*) FROM pg_stat_user_tables WHERE relname = 'vault_versions' AND last_vacuum IS NOT NULL",
            ) == [1]
        });
    }

    // Revoking the active version leaves no active version: nothing falls back.
    v.revoke("s", 2, "admin").expect("revoke active");
    assert_eq!(code(v.current("s")), "no_active_version");
    assert_eq!(
        code(v.resolve(&"vault:s".parse().expect("ref"))),
        "no_active_version"
    );
    assert_eq!(
        v.rotate("s", &"fresh".into(), "admin", HOUR)
            .expect("rotate"),
        3
    );
    assert_eq!(v.current("s").expect("current").value.expose(), b"fresh");
    assert_eq!(code(v.version("s", 2)), "version_revoked");
}

fn audit_log_is_append_only_and_a_failed_record_changes_nothing(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    v.create("s", &"one".into(), "admin").expect("create");
    let raw = f.raw();
    let refused = raw
        .exec("UPDATE vault_audit SET actor = 'x'")
        .expect_err("update refused");
    assert!(refused.contains("append-only"), "{refused}");
    let refused = raw
        .exec("DELETE FROM vault_audit")
        .expect_err("delete refused");
    assert!(refused.contains("append-only"), "{refused}");

    // Make every audit insert fail, as a full disk or a broken table would.
    raw.exec(match b {
        Backend::Sqlite => {
            "CREATE TRIGGER fail_audit BEFORE INSERT ON vault_audit
             BEGIN SELECT RAISE(ABORT, 'audit disk full'); END;"
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => {
            "CREATE FUNCTION fail_audit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'audit disk full'; END; $$;
             CREATE TRIGGER fail_audit BEFORE INSERT ON vault_audit
             FOR EACH ROW EXECUTE FUNCTION fail_audit();"
        }
    })
    .expect("trigger");
    let before = v.audit_log(0, 100).expect("log");
    let err = v
        .create("t", &"two".into(), "admin")
        .expect_err("create refused");
    assert_eq!(err.code(), "audit_write_failed");
    assert!(err.to_string().contains("create"), "{err}");
    assert_eq!(code(v.get("t")), "secret_not_found");
    assert_eq!(
        code(v.rotate("s", &"two".into(), "admin", HOUR)),
        "audit_write_failed"
    );
    assert_eq!(v.current("s").expect("current").version, 1);
    assert_eq!(code(v.revoke("s", 1, "admin")), "audit_write_failed");
    assert_eq!(v.current("s").expect("not revoked").value.expose(), b"one");
    assert_eq!(
        code(v.record_use("s", 1, "up", "r1", "agent")),
        "audit_write_failed"
    );
    assert_eq!(v.get("s").expect("get").last_used_at, None);
    // A batch whose record fails is refused whole: no use of it is recorded.
    let batch = [
        SecretUseRecord {
            name: "s",
            version: 1,
            upstream: "up",
            request_id: "r2",
            actor: "agent",
        },
        SecretUseRecord {
            name: "nope",
            version: 1,
            upstream: "up",
            request_id: "r3",
            actor: "agent",
        },
    ];
    assert_eq!(code(v.record_uses(&batch)), "audit_write_failed");
    assert_eq!(v.get("s").expect("get").last_used_at, None);
    assert_eq!(
        code(v.set_agent_token("claude", "admin")),
        "audit_write_failed"
    );
    assert!(v.agent_tokens("claude").expect("tokens").is_empty());
    std::fs::create_dir_all(f.dir.path().join("import")).expect("dir");
    std::fs::write(f.dir.path().join("import/new"), "v").expect("write");
    assert_eq!(
        code(v.import_folder(&f.dir.path().join("import"), "admin")),
        "audit_write_failed"
    );
    assert_eq!(code(v.get("new")), "secret_not_found");
    assert_eq!(v.audit_log(0, 100).expect("log"), before);
}

#[test]
fn master_key_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("vault.key");
    let (created, origin) = MasterKey::load_or_create(&path).expect("create");
    assert_eq!(origin, KeyOrigin::Created);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert_eq!(std::fs::read(&path).expect("read").len(), 32);
    let (loaded, origin) = MasterKey::load_or_create(&path).expect("load");
    assert_eq!(origin, KeyOrigin::Loaded);
    // The loaded key opens what the created one wrote.
    drop(open(dir.path(), &created).create("s", &"v".into(), "a"));
    assert_eq!(
        open(dir.path(), &loaded)
            .current("s")
            .expect("current")
            .value
            .expose(),
        b"v"
    );

    // Hex and base64 forms of the same bytes are the same key.
    let bytes = std::fs::read(&path).expect("read");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let hex_path = dir.path().join("hex.key");
    std::fs::write(&hex_path, format!("{hex}\n")).expect("write");
    let from_hex = MasterKey::load(&hex_path).expect("hex key");
    assert_eq!(
        open(dir.path(), &from_hex)
            .current("s")
            .expect("current")
            .value
            .expose(),
        b"v"
    );
    let b64_path = dir.path().join("b64.key");
    std::fs::write(&b64_path, base64_std(&bytes)).expect("write");
    let from_b64 = MasterKey::load(&b64_path).expect("base64 key");
    assert_eq!(
        open(dir.path(), &from_b64)
            .current("s")
            .expect("current")
            .value
            .expose(),
        b"v"
    );

    // Bad files: clear errors, never a fallback, never the content.
    let missing = dir.path().join("missing.key");
    let err = MasterKey::load(&missing).expect_err("missing");
    assert_eq!(err.code(), "master_key_missing");
    assert!(err.to_string().contains("missing.key"), "{err}");
    for (name, content) in [
        ("empty.key", &b""[..]),
        ("short.key", &[1u8; 31][..]),
        ("long.key", &[1u8; 33][..]),
        ("text.key", &b"correct horse battery staple"[..]),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, content).expect("write");
        let err = MasterKey::load(&p).expect_err(name);
        assert_eq!(err.code(), "master_key_invalid", "{name}");
        assert!(
            err.to_string()
                .contains(&format!("holds {} bytes", content.len())),
            "{err}"
        );
        assert!(!err.to_string().contains("horse"), "{err}");
        // load_or_create never replaces a bad key with a new one.
        assert_eq!(
            MasterKey::load_or_create(&p).expect_err(name).code(),
            "master_key_invalid"
        );
    }
    let err = MasterKey::load(dir.path()).expect_err("a directory");
    assert_eq!(err.code(), "master_key_unreadable");
    let err = MasterKey::load_or_create(&dir.path().join("no-such-dir/vault.key"))
        .expect_err("no directory");
    assert_eq!(err.code(), "master_key_create_failed");
}

fn base64_std(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn database_file_is_private() {
    let f = Fixture::new(Backend::Sqlite);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(f.db())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let err = Vault::open(
        &f.dir.path().join("no-such-dir/vault.db"),
        &key(1),
        VaultConfig::default(),
    )
    .expect_err("no directory");
    assert_eq!(err.code(), "vault_database");
}

fn references_resolve_from_their_sources(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    let run = f.dir.path().join("run-secrets");
    let legacy = f.dir.path().join("secrets");
    std::fs::create_dir_all(&run).expect("dir");
    std::fs::create_dir_all(&legacy).expect("dir");
    std::fs::write(run.join("gitea_token"), "from-docker\n").expect("write");
    std::fs::write(legacy.join("kanboard"), "from-file").expect("write");
    std::fs::write(legacy.join("blank"), "\n").expect("write");
    v.create("gitea-token", &"from-vault".into(), "admin")
        .expect("create");

    let resolve = |r: &str| v.resolve(&r.parse::<SecretRef>().expect(r));
    let got = resolve("vault:gitea-token").expect("vault");
    assert_eq!(
        (got.version, got.value.expose()),
        (Some(1), &b"from-vault"[..])
    );
    let got = resolve("docker:gitea_token").expect("docker");
    assert_eq!(
        (got.version, got.value.expose()),
        (None, &b"from-docker"[..])
    );
    assert_eq!(
        resolve("file:kanboard").expect("file").value.expose(),
        b"from-file"
    );

    for (reference, want) in [
        ("docker:absent", "source_secret_missing"),
        ("file:absent", "source_secret_missing"),
        ("file:blank", "source_secret_empty"),
        ("vault:absent", "secret_not_found"),
    ] {
        let err = resolve(reference).expect_err(reference);
        assert_eq!(err.code(), want, "{reference}");
        assert!(
            err.to_string().contains("absent") || err.to_string().contains("blank"),
            "{err}"
        );
    }
    let err = resolve("docker:absent").expect_err("missing");
    assert!(err.to_string().contains("docker:absent"), "{err}");

    let no_legacy = Vault::open(
        &f.dir.path().join("other.db"),
        &key(7),
        VaultConfig::default(),
    )
    .expect("open");
    assert_eq!(
        code(no_legacy.resolve(&"file:kanboard".parse().expect("ref"))),
        "source_not_configured"
    );
    // References deserialize from configuration strings and refuse bad ones.
    let r: SecretRef = serde_json::from_str("\"docker:gitea_token\"").expect("ref");
    assert_eq!(r, SecretRef::Docker("gitea_token".into()));
    assert!(serde_json::from_str::<SecretRef>("\"env:X\"").is_err());
}

fn import_is_idempotent_and_all_or_nothing(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    let dir = f.dir.path().join("secrets");
    std::fs::create_dir_all(dir.join("subdir")).expect("dir");
    std::fs::write(dir.join("gitea_token"), "g\n").expect("write");
    std::fs::write(dir.join("kanboard"), "k").expect("write");
    std::fs::write(dir.join(".hidden"), "h").expect("write");

    let first = v.import_folder(&dir, "admin:cli").expect("import");
    assert_eq!(first.imported, ["gitea_token", "kanboard"]);
    assert!(first.unchanged.is_empty() && first.differs.is_empty());
    assert_eq!(
        v.current("gitea_token").expect("current").value.expose(),
        b"g"
    );
    let second = v.import_folder(&dir, "admin:cli").expect("import again");
    assert!(second.imported.is_empty());
    assert_eq!(second.unchanged, ["gitea_token", "kanboard"]);
    let imports = |v: &Vault| {
        v.audit_log(0, 100)
            .expect("log")
            .iter()
            .filter(|e| e.action == "import")
            .count()
    };
    assert_eq!(imports(v), 2);

    std::fs::write(dir.join("kanboard"), "changed").expect("write");
    let third = v.import_folder(&dir, "admin:cli").expect("import");
    assert_eq!(third.differs, ["kanboard"]);
    assert_eq!(v.current("kanboard").expect("current").value.expose(), b"k");
    assert_eq!(imports(v), 2);
    // The folder is only read.
    assert!(dir.join("gitea_token").exists());

    // One bad file stops the whole import, naming it, before anything is written.
    std::fs::write(dir.join("new-one"), "n").expect("write");
    std::fs::write(dir.join("bad name"), "x").expect("write");
    let err = v.import_folder(&dir, "admin:cli").expect_err("bad name");
    assert_eq!(err.code(), "invalid_name");
    assert!(err.to_string().contains("bad name"), "{err}");
    assert_eq!(code(v.get("new-one")), "secret_not_found");
    std::fs::remove_file(dir.join("bad name")).expect("rm");
    std::fs::write(dir.join("empty"), "").expect("write");
    let err = v.import_folder(&dir, "admin:cli").expect_err("empty");
    assert_eq!(err.code(), "source_secret_empty");
    assert!(err.to_string().contains("empty"), "{err}");
    assert_eq!(code(v.get("new-one")), "secret_not_found");
    assert_eq!(
        code(v.import_folder(&f.dir.path().join("nowhere"), "admin")),
        "source_unreadable"
    );
}

fn concurrent_rotations_give_exactly_consistent_versions(b: Backend) {
    const THREADS: usize = 4;
    const ROTATIONS: usize = 15;
    let f = Fixture::new(b);
    f.vault.create("s", &"v1".into(), "admin").expect("create");
    let shared = Arc::new(f.reopen(&key(7)).expect("opens"));
    let written = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            // Half the writers share one handle, half open their own connection to the file.
            let own = (t % 2 == 1).then(|| f.reopen(&key(7)).expect("opens"));
            let shared = Arc::clone(&shared);
            let written = Arc::clone(&written);
            scope.spawn(move || {
                let vault = own.as_ref().unwrap_or(&shared);
                for i in 0..ROTATIONS {
                    let value = format!("t{t}-r{i}");
                    let version = vault
                        .rotate("s", &value.as_str().into(), &format!("writer-{t}"), HOUR)
                        .expect("rotate");
                    written.lock().expect("lock").push((version, value));
                }
            });
        }
    });
    let vault = shared;
    let written = written.lock().expect("lock").clone();
    let versions: BTreeSet<u64> = written.iter().map(|(v, _)| *v).collect();
    let total = (THREADS * ROTATIONS) as u64;
    assert_eq!(versions.len() as u64, total, "no version handed out twice");
    assert_eq!(versions, (2..=total + 1).collect::<BTreeSet<_>>());
    let meta = vault.get("s").expect("get");
    assert_eq!(meta.active_version, total + 1);
    assert_eq!(meta.versions.len() as u64, total + 1);
    for (version, value) in &written {
        assert_eq!(
            vault.version("s", *version).expect("usable").expose(),
            value.as_bytes()
        );
    }
    let rotations = vault
        .audit_log(0, 1000)
        .expect("log")
        .iter()
        .filter(|e| e.action == "rotate")
        .count() as u64;
    assert_eq!(rotations, total);
}

fn agent_tokens_are_stored_as_keyed_hashes(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    let first = v.set_agent_token("claude", "admin").expect("set");
    let token1 = first.token.expose_str().expect("utf-8").to_owned();
    assert!(token1.starts_with("bdl_") && token1.len() >= 47);
    assert_eq!(format!("{:?}", first.token), "[redacted]");
    let found = v.agent_for_token(&token1).expect("lookup").expect("valid");
    assert_eq!((found.agent.as_str(), found.version), ("claude", 1));
    assert_eq!(v.agent_for_token("bdl_wrong").expect("lookup"), None);
    assert_eq!(v.agent_for_token("").expect("lookup"), None);

    // Only the keyed hash is in the database.
    let hashes = f.raw().texts("SELECT token_hash FROM vault_agent_tokens");
    assert_eq!(hashes, [v.token_hash(&token1)]);
    let holding = f.raw().ints(&format!(
        "SELECT COUNT(*) FROM vault_agent_tokens WHERE token_hash = '{token1}' OR created_by = '{token1}'"
    ));
    assert_eq!(holding, [0]);
    if b == Backend::Sqlite {
        assert!(
            !std::fs::read(f.db())
                .expect("db")
                .windows(token1.len())
                .any(|w| w == token1.as_bytes())
        );
    }

    // Rotate with grace: both work; rotate without: only the newest.
    let second = v
        .rotate_agent_token("claude", HOUR, "admin")
        .expect("rotate");
    let token2 = second.token.expose_str().expect("utf-8").to_owned();
    assert_eq!(second.version, 2);
    assert!(v.agent_for_token(&token1).expect("lookup").is_some());
    assert_eq!(
        v.agent_for_token(&token2)
            .expect("lookup")
            .map(|m| m.version),
        Some(2)
    );
    let third = v
        .rotate_agent_token("claude", Duration::ZERO, "admin")
        .expect("rotate");
    let token3 = third.token.expose_str().expect("utf-8").to_owned();
    assert_eq!(v.agent_for_token(&token1).expect("lookup"), None);
    assert_eq!(v.agent_for_token(&token2).expect("lookup"), None);
    assert!(v.agent_for_token(&token3).expect("lookup").is_some());
    let meta = v.agent_tokens("claude").expect("meta");
    assert_eq!(
        meta.iter().map(|m| m.valid).collect::<Vec<_>>(),
        [false, false, true]
    );

    // Another agent is independent; revoke ends one agent's tokens at once.
    let gemini = v.set_agent_token("gemini", "admin").expect("set");
    let gemini_token = gemini.token.expose_str().expect("utf-8").to_owned();
    assert_eq!(v.revoke_agent_tokens("claude", "admin").expect("revoke"), 1);
    assert_eq!(v.agent_for_token(&token3).expect("lookup"), None);
    assert_eq!(
        v.agent_for_token(&gemini_token)
            .expect("lookup")
            .map(|m| m.agent),
        Some("gemini".to_owned())
    );
    // Set replaces every token immediately.
    let replaced = v.set_agent_token("gemini", "admin").expect("set");
    assert_eq!(v.agent_for_token(&gemini_token).expect("lookup"), None);
    assert!(
        v.agent_for_token(replaced.token.expose_str().expect("utf-8"))
            .expect("lookup")
            .is_some()
    );
    assert_eq!(
        v.agents_with_tokens().expect("agents"),
        ["claude", "gemini"]
    );
    assert_eq!(
        code(v.set_agent_token("bad agent", "admin")),
        "invalid_name"
    );
    let actions: Vec<_> = v
        .audit_log(0, 100)
        .expect("log")
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions,
        [
            "agent_token_set",
            "agent_token_rotate",
            "agent_token_rotate",
            "agent_token_set",
            "agent_token_revoke",
            "agent_token_set"
        ]
    );
}

fn a_canary_value_appears_in_no_metadata_output_record_or_log_line(b: Backend) {
    const CANARY: &str = "CANARY-6b1f9e-secret-value";
    const CANARY2: &str = "CANARY-6b1f9e-rotated-value";
    // Every line of this test binary, from every thread: a subscriber set for this thread alone
    // can miss a line whose callsite another test's thread saw first with none.
    let logs = LogBuffer::global(tracing::Level::TRACE);
    let f = Fixture::new(b);
    let mut seen = Vec::<String>::new();
    {
        let v = &f.vault;
        v.create("canary", &CANARY.into(), "admin").expect("create");
        let cur = v.current("canary").expect("current");
        assert_eq!(cur.value.expose(), CANARY.as_bytes());
        seen.push(format!("{cur:?}"));
        v.record_use("canary", 1, "gitea", "req-1", "agent:claude")
            .expect("use");
        v.rotate("canary", &CANARY2.into(), "admin", HOUR)
            .expect("rotate");
        seen.push(format!("{:?}", v.version("canary", 1).expect("grace")));
        let secrets = f.dir.path().join("secrets");
        std::fs::create_dir_all(&secrets).expect("dir");
        std::fs::write(secrets.join("canary-file"), CANARY).expect("write");
        v.import_folder(&secrets, "admin").expect("import");
        let resolved = v
            .resolve(&"file:canary-file".parse().expect("ref"))
            .expect("resolve");
        assert_eq!(resolved.value.expose(), CANARY.as_bytes());
        seen.push(format!("{resolved:?}"));
        v.revoke("canary", 1, "admin").expect("revoke");
        let list = v.list().expect("list");
        seen.push(format!("{list:?}"));
        seen.push(format!("{list:#?}"));
        seen.push(serde_json::to_string(&list).expect("json"));
        seen.push(serde_json::to_string(&v.get("canary").expect("get")).expect("json"));
        let log = v.audit_log(0, 100).expect("log");
        seen.push(format!("{log:?}"));
        seen.push(serde_json::to_string(&log).expect("json"));
        seen.push(format!("{v:?}"));
        seen.push(serde_json::to_string(&SecretValue::from(CANARY)).expect("json"));
        seen.push(format!("{}", SecretValue::from(CANARY)));
        let err = v
            .create("canary", &CANARY.into(), "admin")
            .expect_err("exists");
        seen.push(format!("{err:?} {err}"));
        let err = v
            .rotate("canary", &"".into(), "admin", HOUR)
            .expect_err("empty");
        seen.push(format!("{err:?} {err}"));
    }
    let logs = logs.text();
    assert!(
        logs.contains("vault secret created"),
        "logs were captured: {logs}"
    );
    assert!(
        logs.contains("vault secret used"),
        "TRACE/DEBUG lines too: {logs}"
    );
    for text in seen.iter().chain(std::iter::once(&logs)) {
        for canary in [CANARY, CANARY2, "CANARY-6b1f9e"] {
            assert!(!text.contains(canary), "the value leaked into: {text}");
        }
    }
    // Nor is it in the database in clear.
    if b == Backend::Sqlite {
        let db = std::fs::read(f.db()).expect("db");
        assert!(!db.windows(13).any(|w| w == b"CANARY-6b1f9e"));
    }
    let raw_audit = f.raw().texts(
        "SELECT coalesce(secret, '') || coalesce(fingerprint, '') || actor FROM vault_audit",
    );
    assert!(!raw_audit.is_empty());
    assert!(raw_audit.iter().all(|r| !r.contains("CANARY-6b1f9e")));
    let in_rows = f.raw().ints(
        "SELECT COUNT(*) FROM vault_versions WHERE fingerprint LIKE '%CANARY%' OR created_by LIKE '%CANARY%'",
    );
    assert_eq!(in_rows, [0]);
}

/// Any name and value either round-trips or is refused with a clear error, as the name charset
/// and value limits say.
fn name_and_value_round_trip_or_are_refused(
    b: Backend,
    name: &str,
    value: Vec<u8>,
) -> Result<(), TestCaseError> {
    let f = Fixture::new(b);
    let value = SecretValue::new(value);
    match f.vault.create(name, &value, "prop") {
        Ok(version) => {
            prop_assert!(is_valid_name(name));
            prop_assert!(!value.is_empty());
            prop_assert_eq!(version, 1);
            let back = f.vault.current(name).expect("current");
            prop_assert_eq!(back.value.expose(), value.expose());
            prop_assert_eq!(f.vault.get(name).expect("get").name, name);
        }
        Err(e) => {
            let valid = is_valid_name(name);
            prop_assert!(!valid || value.is_empty(), "refused a valid pair: {e}");
            prop_assert_eq!(
                e.code(),
                if valid {
                    "invalid_value"
                } else {
                    "invalid_name"
                }
            );
            prop_assert!(!e.to_string().is_empty());
        }
    }
    Ok(())
}

fn names() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9][A-Za-z0-9._-]{0,20}",
        "[A-Za-z0-9._/ é:\\-]{0,20}",
        "[a-z]{125,132}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_names_and_values_round_trip_or_are_refused(
        name in names(),
        value in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        name_and_value_round_trip_or_are_refused(Backend::Sqlite, &name, value)?;
    }
}

#[cfg(feature = "postgres")]
proptest! {
    // Fewer cases: each one creates a database on the server.
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn random_names_and_values_round_trip_or_are_refused_on_postgres(
        name in names(),
        value in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        name_and_value_round_trip_or_are_refused(Backend::Postgres, &name, value)?;
    }
}

fn the_first_start_issues_each_vault_agent_one_token_once(b: Backend) {
    use bridle_gateway::config::{GatewayConfig, init_data_dir};
    use bridle_gateway::gateway::{issue_first_tokens, open_vault};
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(init_data_dir(dir.path()).expect("init").created);
    #[allow(unused_mut)] // Changed only for PostgreSQL.
    let mut config = GatewayConfig::load(dir.path()).expect("config");
    assert!(config.agents.values().all(|a| a.token_secret.is_none()));
    #[cfg(feature = "postgres")]
    if b == Backend::Postgres {
        let cluster = pg_cluster::PgCluster::shared();
        config.database = Some(cluster.url(&cluster.create_database()));
        config.database_password = Some("file:pg-password".into());
        let secrets = config.secrets_path(dir.path());
        std::fs::create_dir_all(&secrets).expect("secrets dir");
        std::fs::write(secrets.join("pg-password"), pg_cluster::PASSWORD).expect("write");
    }
    let (vault, created) = open_vault(dir.path(), &config).expect("vault");
    assert!(created.is_some(), "the master key was created");
    match b {
        Backend::Sqlite => assert!(vault.path().ends_with("vault.db")),
        #[cfg(feature = "postgres")]
        Backend::Postgres => assert!(vault.path().to_string_lossy().starts_with("postgres:")),
    }

    let issued = issue_first_tokens(&vault, &config, "test").expect("issue");
    let agents: BTreeSet<&str> = issued.iter().map(|t| t.agent.as_str()).collect();
    assert_eq!(agents, BTreeSet::from(["claude", "codex", "gemini"]));
    for t in &issued {
        let token = t.token.expose_str().expect("utf-8");
        let found = vault
            .agent_for_token(token)
            .expect("lookup")
            .expect("known");
        assert_eq!(found.agent, t.agent);
        assert!(
            !format!("{t:?}").contains(token),
            "a token printed in Debug"
        );
    }
    // Only once: a second call (a restart) issues nothing, and neither does one after a
    // revocation, which must survive the restart.
    assert!(
        issue_first_tokens(&vault, &config, "test")
            .expect("again")
            .is_empty()
    );
    vault.revoke_agent_tokens("claude", "test").expect("revoke");
    assert!(
        issue_first_tokens(&vault, &config, "test")
            .expect("after revoke")
            .is_empty()
    );
    let claude = issued.iter().find(|t| t.agent == "claude").expect("claude");
    assert!(
        vault
            .agent_for_token(claude.token.expose_str().expect("utf-8"))
            .expect("lookup")
            .is_none()
    );
    // No file of the data directory holds a token in the clear.
    for entry in std::fs::read_dir(dir.path()).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            let bytes = std::fs::read(&path).expect("read");
            for t in &issued {
                let token = t.token.expose();
                assert!(
                    !bytes.windows(token.len()).any(|w| w == token),
                    "{} holds a token",
                    path.display()
                );
            }
        }
    }
}

/// Runs each test function once per backend: `sqlite::NAME` and `postgres::NAME`.
/// The operation counts (`/metrics`) are kept by the database as records are appended and
/// equal a count of the log; a database from before they were kept has them counted from its
/// log when it is opened, and kept from then on.
fn action_counts_are_kept_with_the_log_and_counted_for_an_older_database(b: Backend) {
    let f = Fixture::new(b);
    let v = &f.vault;
    v.create("s", &"one-value".into(), "admin").expect("create");
    v.rotate("s", &"two-value".into(), "admin", Duration::ZERO)
        .expect("rotate");
    v.create("t", &"three-value".into(), "admin")
        .expect("create");
    v.set_agent_token("claude", "admin").expect("token");
    let counted = |v: &Vault| {
        let mut by_action = std::collections::BTreeMap::<String, u64>::new();
        for e in v.audit_log(0, 10_000).expect("log") {
            *by_action.entry(e.action).or_default() += 1;
        }
        by_action.into_iter().collect::<Vec<_>>()
    };
    let expected = counted(v);
    assert!(
        expected.iter().any(|(a, n)| a == "create" && *n == 2),
        "{expected:?}"
    );
    assert_eq!(v.action_counts().expect("counts"), expected);

    // As a database the step that keeps the counts was never applied to.
    f.raw()
        .exec(match b {
            Backend::Sqlite => {
                "DROP TRIGGER vault_audit_counted; DROP TABLE vault_action_counts;
                 DELETE FROM schema_migrations WHERE store = 'vault' AND version = 2;"
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                "DROP TRIGGER vault_audit_counted ON vault_audit;
                 DROP FUNCTION vault_audit_counted(); DROP TABLE vault_action_counts;
                 DELETE FROM schema_migrations WHERE store = 'vault' AND version = 2;"
            }
        })
        .expect("an older database");
    let older = f.reopen(&key(7)).expect("reopens");
    assert_eq!(older.action_counts().expect("counts"), expected);
    older
        .create("u", &"four-value".into(), "admin")
        .expect("create");
    assert_eq!(older.action_counts().expect("counts"), counted(&older));
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test]
            fn $name() {
                super::$name(super::Backend::Sqlite);
            })*
        }
        #[cfg(feature = "postgres")]
        mod postgres {
            $(#[test]
            fn $name() {
                super::$name(super::Backend::Postgres);
            })*
        }
    };
}

on_both!(
    round_trip_and_metadata,
    record_use_updates_last_use_and_appends_a_record,
    record_uses_commits_a_batch_and_refuses_each_bad_use_alone,
    wrong_master_key_is_refused_and_never_yields_garbage,
    tampered_rows_are_refused,
    rotate_with_grace_keeps_the_old_version_until_it_ends,
    revoke_destroys_the_ciphertext,
    audit_log_is_append_only_and_a_failed_record_changes_nothing,
    references_resolve_from_their_sources,
    import_is_idempotent_and_all_or_nothing,
    concurrent_rotations_give_exactly_consistent_versions,
    agent_tokens_are_stored_as_keyed_hashes,
    a_canary_value_appears_in_no_metadata_output_record_or_log_line,
    the_first_start_issues_each_vault_agent_one_token_once,
    action_counts_are_kept_with_the_log_and_counted_for_an_older_database,
);

/// Dates the SQLite vault's token-change marker an hour back, as on a gateway that has run a
/// while with no token change: its token cache is then trusted (see `TOKEN_MARKER_SETTLE`).
fn settle_marker(f: &Fixture) {
    std::fs::File::options()
        .write(true)
        .open(f.dir.path().join("vault.db-tokens"))
        .expect("the marker beside the vault")
        .set_modified(std::time::SystemTime::now() - HOUR)
        .expect("dated back");
}

/// A token check split as the gateway splits it (the cache asked on the request's task, the
/// database read on a blocking thread): a miss carries the token's keyed hash and the cache's
/// generation, shows neither in its `Debug`, and what the read finds is cached, unless a token
/// change overtook the lookup (the answer is still right, but it is not kept).
#[test]
fn a_split_token_check_caches_only_what_no_token_change_overtook() {
    let f = Fixture::new(Backend::Sqlite);
    let v = &f.vault;
    let issue = |agent: &str| {
        let t = v.set_agent_token(agent, "admin").expect("set");
        t.token.expose_str().expect("utf-8").to_owned()
    };
    let claude = issue("claude");
    settle_marker(&f);
    let unknown = |t: &str| match v.check_token_cached(t) {
        CachedToken::Unknown(lookup) => lookup,
        other => panic!("expected a miss, found {other:?}"),
    };
    let lookup = unknown(&claude);
    let shown = format!("{lookup:?}");
    assert_eq!(shown, "TokenLookup { .. }");
    assert!(!shown.contains(&v.token_hash(&claude)[..16]));
    let found = v.agent_for_token_lookup(lookup).expect("read");
    assert_eq!(found.map(|m| m.agent).as_deref(), Some("claude"));
    assert!(matches!(v.check_token_cached(&claude), CachedToken::Found(m) if m.agent == "claude"));

    // Overtaken: another agent's token changes between the lookup and the read.
    let codex = issue("codex");
    settle_marker(&f);
    let lookup = unknown(&codex);
    issue("gemini");
    settle_marker(&f);
    let found = v.agent_for_token_lookup(lookup).expect("read");
    assert_eq!(found.map(|m| m.agent).as_deref(), Some("codex"));
    unknown(&codex);

    // A guessed token is read and never cached; an empty or overlong one is not even hashed.
    let guessed = format!("bdl_{}", "A".repeat(43));
    assert_eq!(
        v.agent_for_token_lookup(unknown(&guessed)).expect("read"),
        None
    );
    unknown(&guessed);
    for malformed in [String::new(), "x".repeat(10_000)] {
        assert!(matches!(
            v.check_token_cached(&malformed),
            CachedToken::Malformed
        ));
    }
}

/// A SQLite vault answers a token it verified from its cache once its token-change marker has
/// settled, and follows a change made through another handle (as another process holds one) on
/// the very next check: also on checks racing the change on other threads, and also when the
/// marker is gone (then nothing is cached).
#[test]
fn a_sqlite_token_cache_follows_changes_made_through_another_handle() {
    let f = Fixture::new(Backend::Sqlite);
    let a = &f.vault;
    let b = f.reopen(&key(7)).expect("a second handle");
    let agent = |v: &Vault, t: &str| v.agent_for_token(t).expect("check").map(|m| m.agent);
    let cached = |t: &str| a.cached_agent_for_token(t).map(|m| m.agent);
    let claude = Some("claude".to_owned());
    let token = b.set_agent_token("claude", "admin").expect("set");
    let token = token.token.expose_str().expect("utf-8").to_owned();

    // A marker changed just now is not trusted: checks read the database and cache nothing.
    assert_eq!(agent(a, &token), claude);
    assert_eq!(cached(&token), None, "a young marker is not trusted");
    settle_marker(&f);
    assert_eq!(cached(&token), None, "nothing cached yet");
    assert_eq!(agent(a, &token), claude);
    assert_eq!(
        cached(&token),
        claude,
        "verified, then answered from the cache"
    );
    assert_eq!(cached("bdl_unknown"), None);
    assert_eq!(agent(a, "bdl_unknown"), None);
    assert_eq!(
        cached("bdl_unknown"),
        None,
        "an unknown token is never cached"
    );

    // Revoked through the other handle while four threads check the token in a loop: every
    // check that starts after the revocation returned refuses it.
    let revoked = std::sync::atomic::AtomicBool::new(false);
    let started = std::sync::Barrier::new(5);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                assert_eq!(cached(&token), claude, "cached before the change");
                started.wait();
                loop {
                    let after = revoked.load(std::sync::atomic::Ordering::SeqCst);
                    let found = agent(a, &token);
                    if after {
                        assert_eq!(found, None, "a revoked token accepted");
                        break;
                    }
                }
            });
        }
        started.wait();
        assert_eq!(b.revoke_agent_tokens("claude", "admin").expect("revoke"), 1);
        revoked.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    assert_eq!(cached(&token), None);

    // A rotation through the other handle: the new token works at once; once settled and
    // cached, a replacement through this handle ends both on the next check.
    let second = b.set_agent_token("claude", "admin").expect("set");
    let second = second.token.expose_str().expect("utf-8").to_owned();
    assert_eq!(agent(a, &second), claude);
    let third = b
        .rotate_agent_token("claude", HOUR, "admin")
        .expect("rotate");
    let third = third.token.expose_str().expect("utf-8").to_owned();
    settle_marker(&f);
    for t in [&second, &third] {
        assert_eq!(agent(a, t), claude);
        assert_eq!(cached(t), claude);
    }
    a.set_agent_token("claude", "admin").expect("set");
    assert_eq!(cached(&second), None);
    assert_eq!(agent(a, &second), None);
    assert_eq!(agent(a, &third), None);

    // A token issued through the other handle, the marker settled, the token cached.
    let issue_cached = || {
        let issued = b.set_agent_token("claude", "admin").expect("set");
        let token = issued.token.expose_str().expect("utf-8").to_owned();
        settle_marker(&f);
        assert_eq!(agent(a, &token), claude);
        assert_eq!(cached(&token), claude);
        token
    };
    let fourth = issue_cached();
    // A change no check saw while its marker was young (none came for a while): the new
    // stamp, settled by now, still empties the cache.
    b.revoke_agent_tokens("claude", "admin").expect("revoke");
    settle_marker(&f);
    assert_eq!(
        cached(&fourth),
        None,
        "a revoked token answered from the cache"
    );
    assert_eq!(agent(a, &fourth), None);

    let fifth = issue_cached();
    // No marker (removed by hand): nothing is trusted, every check reads the database; the
    // next token change makes it again.
    std::fs::remove_file(f.dir.path().join("vault.db-tokens")).expect("removed");
    assert_eq!(cached(&fifth), None, "no marker, no cache");
    assert_eq!(agent(a, &fifth), claude);
    assert_eq!(cached(&fifth), None);
    b.revoke_agent_tokens("claude", "admin").expect("revoke");
    assert!(f.dir.path().join("vault.db-tokens").is_file(), "made again");
    assert_eq!(agent(a, &fifth), None);
}
