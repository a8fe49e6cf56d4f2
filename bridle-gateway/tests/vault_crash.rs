//! Crash safety: a writer killed with SIGKILL at any point leaves the vault readable, its last
//! committed state intact, and its metadata and audit log consistent.
//!
//! This test binary is its own writer. Run normally, it starts itself again as a child (the
//! environment variable below says so), reads the child's "committed N" lines, and kills it with
//! SIGKILL right after a commit, while the child is already inside its next write. Then it
//! reopens the database and checks every version, every state and every audit count, and does
//! it again for several rounds on the same database.

#![allow(
    clippy::print_stdout,
    reason = "a harness-less test reports its result on stdout, like the libtest harness"
)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bridle_gateway::vault::{MasterKey, SecretValue, Vault, VaultConfig, VersionState};
use rusqlite::Connection;

const CHILD_ENV: &str = "BRIDLE_VAULT_CRASH_CHILD";
const SECRETS: [&str; 3] = ["gitea", "kanboard", "embedder"];
const ROUNDS: usize = 6;
/// The child stops by itself after this many writes if nobody kills it.
const CHILD_MAX_WRITES: usize = 20_000;
const HOUR: Duration = Duration::from_secs(3600);

fn key() -> MasterKey {
    MasterKey::from_bytes([0x5a; 32])
}

fn open(dir: &Path) -> Vault {
    Vault::open(&dir.join("vault.db"), &key(), VaultConfig::default()).expect("vault opens")
}

/// The value written for `version` of `name`: long enough that a write spans several pages.
fn value_for(name: &str, version: u64) -> SecretValue {
    let mut v = format!("{name}#{version}#").into_bytes();
    v.resize(6000, b'x');
    SecretValue::new(v)
}

fn main() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        writer(Path::new(&dir));
        return;
    }
    println!("\nrunning 1 test");
    kill_nine_during_writes_leaves_a_consistent_vault();
    println!("test kill_nine_during_writes_leaves_a_consistent_vault ... ok\n");
    println!("test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n");
}

/// The child: rotations, revokes, uses and token rotations, as fast as it can, reporting each
/// committed rotation on stdout.
fn writer(dir: &Path) {
    let vault = open(dir);
    for name in SECRETS {
        if vault.get(name).is_err() {
            vault
                .create(name, &value_for(name, 1), "crash-writer")
                .expect("create");
        }
    }
    let mut out = std::io::stdout().lock();
    for i in 0..CHILD_MAX_WRITES {
        let name = SECRETS[i % SECRETS.len()];
        let meta = vault.get(name).expect("get");
        let next = meta.versions.last().map_or(1, |v| v.version) + 1;
        let version = vault
            .rotate(name, &value_for(name, next), "crash-writer", HOUR)
            .expect("rotate");
        assert_eq!(version, next);
        if i % 4 == 0 && version > 2 {
            let _ = vault.revoke(name, version - 2, "crash-writer");
        }
        if i % 3 == 0 {
            vault
                .record_use(name, version, "upstream", &format!("req-{i}"), "agent")
                .expect("use");
        }
        if i % 5 == 0 {
            vault
                .rotate_agent_token("claude", HOUR, "crash-writer")
                .expect("token");
        }
        // A closed pipe means the parent is gone: stop.
        if writeln!(out, "committed {i}")
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
    }
}

/// Kills the child when dropped, so a failing assertion never leaves it running.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kill_nine_during_writes_leaves_a_consistent_vault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("own executable");
    let mut rotations_before = 0u64;
    for round in 0..ROUNDS {
        let child = Command::new(&exe)
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the writer");
        let mut child = KillOnDrop(child);
        let stdout = child.0.stdout.take().expect("piped stdout");
        // Kill after a different number of commits each round.
        let target = 15 + round * 11;
        let mut committed = 0u64;
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("writer output");
            assert!(
                line.starts_with("committed "),
                "unexpected writer output {line:?}"
            );
            committed += 1;
            if committed as usize >= target {
                break;
            }
        }
        assert_eq!(committed as usize, target, "the writer stopped early");
        // SIGKILL: no destructor, no rollback, no checkpoint runs in the child.
        child.0.kill().expect("SIGKILL the writer");
        let status = child.0.wait().expect("reap the writer");
        assert!(!status.success(), "the writer was killed, not finished");

        let rotations = check_consistent(dir.path());
        // Every rotation the writer reported is there; at most the one in flight beyond it.
        assert!(
            rotations >= rotations_before + committed
                && rotations <= rotations_before + committed + 1,
            "round {round}: {rotations} rotations in the database, {rotations_before} before and {committed} reported"
        );
        rotations_before = rotations;
    }
}

/// Reopens the vault and checks everything; returns the number of rotations recorded.
fn check_consistent(dir: &Path) -> u64 {
    let raw = Connection::open(dir.join("vault.db")).expect("raw open");
    let integrity: String = raw
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity check");
    assert_eq!(integrity, "ok");
    let vault = open(dir);
    let log = vault.audit_log(0, usize::MAX).expect("audit log");
    let mut counts: BTreeMap<(String, &str), u64> = BTreeMap::new();
    for e in &log {
        if let Some(secret) = &e.secret {
            let action = match e.action.as_str() {
                "create" => "create",
                "rotate" => "rotate",
                "revoke" => "revoke",
                _ => continue,
            };
            *counts.entry((secret.clone(), action)).or_default() += 1;
        }
    }
    let mut rotations = 0;
    for name in SECRETS {
        let meta = vault.get(name).expect("every secret is there");
        let latest = meta.versions.last().expect("a version").version;
        assert_eq!(
            meta.active_version, latest,
            "{name}: the active version is the newest"
        );
        let numbers: Vec<u64> = meta.versions.iter().map(|v| v.version).collect();
        assert_eq!(
            numbers,
            (1..=latest).collect::<Vec<_>>(),
            "{name}: no gap, no duplicate"
        );
        let count = |action| counts.get(&(name.to_owned(), action)).copied().unwrap_or(0);
        assert_eq!(count("create"), 1, "{name}");
        assert_eq!(
            count("rotate"),
            latest - 1,
            "{name}: one rotate record per rotation"
        );
        let revoked = meta
            .versions
            .iter()
            .filter(|v| matches!(v.state, VersionState::Revoked { .. }))
            .count() as u64;
        assert_eq!(
            count("revoke"),
            revoked,
            "{name}: one revoke record per revoked version"
        );
        for v in &meta.versions {
            let ciphertext: Option<Vec<u8>> = raw
                .query_row(
                    "SELECT ciphertext FROM vault_versions WHERE name = ?1 AND version = ?2",
                    rusqlite::params![name, v.version as i64],
                    |r| r.get(0),
                )
                .expect("row");
            match &v.state {
                VersionState::Revoked { .. } => {
                    assert!(
                        ciphertext.is_none(),
                        "{name} v{}: revoked but not destroyed",
                        v.version
                    );
                }
                state => {
                    assert!(state.is_usable(), "{name} v{}: {state:?}", v.version);
                    let value = vault.version(name, v.version).expect("decrypts");
                    assert_eq!(value, value_for(name, v.version), "{name} v{}", v.version);
                }
            }
        }
        let current = vault.current(name).expect("the active version decrypts");
        assert_eq!(current.version, latest);
        rotations += latest - 1;
    }
    let tokens = vault.agent_tokens("claude").expect("tokens");
    let numbers: Vec<u64> = tokens.iter().map(|t| t.version).collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
    rotations
}
