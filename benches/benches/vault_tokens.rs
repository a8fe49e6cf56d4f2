//! What a token check costs when the vault lives in PostgreSQL (shared by replicas; a check is
//! answered from the vault's token cache, which the replicas' change notifications invalidate)
//! against the same check on the embedded SQLite vault (whose cache is trusted under its
//! token-change marker), in the same run.
//!
//! - `check/sqlite` vs `check/postgres`: `Vault::agent_for_token` of a valid token: on
//!   `<tmp>/vault.db`, with its token-change marker dated an hour back as on a gateway that has
//!   run a while (the token is then in the cache: a keyed hash and a `stat`), and on a
//!   PostgreSQL 15 cluster on 127.0.0.1 started for the run (`initdb` + `pg_ctl`, as the tests
//!   do; fsync off), where the verified token is in the cache once its listening connection is
//!   up. This is the check every MCP request with a vault-issued token makes.
//! - `check/sqlite_uncached` and `check/postgres_uncached`: the same check of a well-formed
//!   token the vault never issued, which is never cached: one indexed lookup in the file, or one
//!   database round trip (what every check cost before the caches, and what a check costs while
//!   the marker is young or the listening connection is down).
//! - `revoke/sqlite` vs `revoke/postgres`: issuing a token and revoking it (two write
//!   transactions, each with its audit record; PostgreSQL's also takes the writers' advisory lock
//!   and sends `NOTIFY`).
//!
//! Run with `cargo bench -p kberg-benches --features postgres --bench vault_tokens` (needs the
//! PostgreSQL server binaries: `apt-get install -y postgresql`).

#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::hint::black_box;

use std::time::{Duration, SystemTime};

use bridle_gateway::vault::{CachedToken, MasterKey, TokenCacheStatus, Vault, VaultConfig};
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
    wait_for_cache(&postgres, |s| s.listening);
    (dir, sqlite, postgres, cluster)
}

/// Waits (30 s at most) until the PostgreSQL vault's token cache status satisfies `ready`.
fn wait_for_cache(postgres: &Vault, ready: impl Fn(&TokenCacheStatus) -> bool) {
    let mut status = postgres
        .token_cache()
        .expect("a PostgreSQL vault has a token cache");
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), status.wait_for(|s| ready(s)))
                .await
                .expect("the token cache's status within 30 s")
                .expect("the cache is alive");
        });
}

fn bench(c: &mut Criterion) {
    let (dir, sqlite, postgres, _cluster) = vaults();
    let mut group = c.benchmark_group("check");
    for (name, vault) in [("sqlite", &sqlite), ("postgres", &postgres)] {
        let heard = postgres
            .token_cache()
            .map_or(0, |s| s.borrow().changes_heard);
        let issued = vault.set_agent_token("claude", "bench").expect("issue");
        let token = issued.token.expose_str().expect("utf-8").to_owned();
        if name == "sqlite" {
            // As on a gateway that has run a while: no token change for an hour.
            std::fs::File::open(dir.path().join("vault.db-tokens"))
                .and_then(|f| f.set_modified(SystemTime::now() - Duration::from_secs(3600)))
                .expect("the marker dated back");
        } else {
            // The issue's own notification empties the agent's entries when it comes back.
            wait_for_cache(vault, |s| s.changes_heard > heard);
        }
        assert!(vault.agent_for_token(&token).expect("check").is_some());
        assert!(
            matches!(vault.check_token_cached(&token), CachedToken::Found(_)),
            "{name}: the verified token is cached"
        );
        group.bench_function(name, |b| {
            b.iter(|| black_box(vault.agent_for_token(black_box(&token)).expect("check")))
        });
    }
    let unknown = format!("bdl_{}", "A".repeat(43));
    for (name, vault) in [
        ("sqlite_uncached", &sqlite),
        ("postgres_uncached", &postgres),
    ] {
        assert!(vault.agent_for_token(&unknown).expect("check").is_none());
        group.bench_function(name, |b| {
            b.iter(|| black_box(vault.agent_for_token(black_box(&unknown)).expect("check")))
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
