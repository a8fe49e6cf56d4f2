//! What a token check costs when the vault lives in PostgreSQL (shared by replicas; a check is
//! answered from the vault's token cache, which the replicas' change notifications invalidate)
//! against the same check on the embedded SQLite vault, in the same run.
//!
//! - `check/sqlite` vs `check/postgres`: `Vault::agent_for_token` of a valid token: on
//!   `<tmp>/vault.db` (keyed hash, one indexed lookup), and on a PostgreSQL 15 cluster on
//!   127.0.0.1 started for the run (`initdb` + `pg_ctl`, as the tests do; fsync off), where the
//!   verified token is in the cache once its listening connection is up. This is the check every
//!   MCP request with a vault-issued token makes.
//! - `check/postgres_uncached`: the same check of a well-formed token the vault never issued,
//!   which is never cached: one database round trip, what every check cost before the cache (and
//!   what a check costs while the listening connection is down).
//! - `revoke/sqlite` vs `revoke/postgres`: issuing a token and revoking it (two write
//!   transactions, each with its audit record; PostgreSQL's also takes the writers' advisory lock
//!   and sends `NOTIFY`).
//!
//! Run with `cargo bench -p kberg-benches --features postgres --bench vault_tokens` (needs the
//! PostgreSQL server binaries: `apt-get install -y postgresql`).

#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::hint::black_box;

use std::time::Duration;

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
    // The cache is bypassed until its listening connection is up.
    let mut status = postgres
        .token_cache()
        .expect("a PostgreSQL vault has a token cache");
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| s.listening))
                .await
                .expect("the token cache listens")
                .expect("the cache is alive");
        });
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
    let unknown = format!("bdl_{}", "A".repeat(43));
    assert!(postgres.agent_for_token(&unknown).expect("check").is_none());
    group.bench_function("postgres_uncached", |b| {
        b.iter(|| {
            black_box(
                postgres
                    .agent_for_token(black_box(&unknown))
                    .expect("check"),
            )
        })
    });
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
