//! What a token check costs when the vault lives in PostgreSQL (shared by replicas, so every
//! check reads the database and a revocation holds everywhere at once) against the same check on
//! the embedded SQLite vault, in the same run.
//!
//! - `check/sqlite` vs `check/postgres`: `Vault::agent_for_token` of a valid token (keyed hash,
//!   one indexed lookup): on `<tmp>/vault.db`, and on a PostgreSQL 15 cluster on 127.0.0.1
//!   started for the run (`initdb` + `pg_ctl`, as the tests do; fsync off). This is the check
//!   every MCP request with a vault-issued token makes.
//! - `revoke/sqlite` vs `revoke/postgres`: issuing a token and revoking it (two write
//!   transactions, each with its audit record; PostgreSQL's also takes the writers' advisory lock
//!   and sends `NOTIFY`).
//!
//! Run with `cargo bench -p kberg-benches --features postgres --bench vault_tokens` (needs the
//! PostgreSQL server binaries: `apt-get install -y postgresql`).

#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::hint::black_box;

use bridle_gateway::vault::{MasterKey, Vault, VaultConfig};
use bridle_rules::db::postgres::PgDatabase;
use criterion::{Criterion, criterion_group, criterion_main};

fn vaults() -> (tempfile::TempDir, Vault, Vault, pg_cluster::PgCluster) {
    let key = MasterKey::from_bytes([7; 32]);
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite =
        Vault::open(&dir.path().join("vault.db"), &key, VaultConfig::default()).expect("sqlite");
    let cluster = pg_cluster::PgCluster::start();
    let dbname = cluster.create_database();
    let db = PgDatabase::connect(&cluster.settings(&dbname)).expect("connect");
    let postgres = Vault::open_postgres(db, &key, VaultConfig::default()).expect("postgres");
    (dir, sqlite, postgres, cluster)
}

fn bench(c: &mut Criterion) {
    let (_dir, sqlite, postgres, _cluster) = vaults();
    let mut group = c.benchmark_group("check");
    for (name, vault) in [("sqlite", &sqlite), ("postgres", &postgres)] {
        let issued = vault.set_agent_token("claude", "bench").expect("issue");
        let token = issued.token.expose_str().expect("utf-8").to_owned();
        assert!(vault.agent_for_token(&token).expect("check").is_some());
        group.bench_function(name, |b| {
            b.iter(|| black_box(vault.agent_for_token(black_box(&token)).expect("check")))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("revoke");
    for (name, vault) in [("sqlite", &sqlite), ("postgres", &postgres)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                vault.set_agent_token("bot", "bench").expect("issue");
                black_box(vault.revoke_agent_tokens("bot", "bench").expect("revoke"))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
