//! The token cache of a vault in PostgreSQL, with two vault handles on two connection pools to
//! one database (as two gateway replicas have): a token revoked, replaced or rotated out through
//! one handle is refused by the other as soon as that one has heard the change's notification
//! (the tests wait on the handle's cache status, never on a sleep); a listening connection that
//! drops empties the cache, so a change missed meanwhile is not answered from it; and no token
//! reaches a log line on the way.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::time::Duration;

use bridle_gateway::vault::{MasterKey, TokenCacheStatus, Vault, VaultConfig};
use bridle_rules::db::postgres::PgDatabase;
use kberg_testkit::log::LogBuffer;
use pg_cluster::PgCluster;

/// Every log line of this test binary, from every thread (the vault's listener runs on its
/// database thread, so a thread-local subscriber would miss it).
fn logs() -> &'static LogBuffer {
    LogBuffer::global(tracing::Level::TRACE)
}

fn key() -> MasterKey {
    MasterKey::from_bytes([42; 32])
}

/// A vault handle on a pool of its own to `dbname`.
fn handle(cluster: &PgCluster, dbname: &str) -> Vault {
    let db = PgDatabase::connect(&cluster.settings(dbname)).unwrap();
    Vault::open_postgres(db, &key(), VaultConfig::default()).unwrap()
}

/// Waits (with a deadline) until the handle's cache status satisfies `ready`.
fn wait_for(vault: &Vault, what: &str, ready: impl Fn(&TokenCacheStatus) -> bool) {
    let mut status = vault
        .token_cache()
        .expect("a PostgreSQL vault has a token cache");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(kberg_testkit::WAIT, status.wait_for(|s| ready(s)))
            .await
            .unwrap_or_else(|_| panic!("{what}: not within the deadline"))
            .expect("the cache is alive");
    });
}

fn heard(vault: &Vault) -> u64 {
    vault.token_cache().unwrap().borrow().changes_heard
}

fn check(vault: &Vault, token: &str) -> Option<String> {
    vault.agent_for_token(token).unwrap().map(|m| m.agent)
}

#[test]
fn a_token_change_through_one_handle_is_refused_by_the_other_once_it_is_heard() {
    let logs = logs();
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let a = handle(cluster, &dbname);
    let b = handle(cluster, &dbname);
    wait_for(&a, "A listens", |s| s.listening);
    wait_for(&b, "B listens", |s| s.listening);

    // Issued through A: B accepts it at once (a new token is never refused from the cache).
    let first = a.set_agent_token("bot", "admin:alice").unwrap();
    let first = first.token.expose_str().unwrap().to_owned();
    assert_eq!(check(&b, &first).as_deref(), Some("bot"));
    // Answered again (now from the cache), and by A.
    assert_eq!(check(&b, &first).as_deref(), Some("bot"));
    assert_eq!(check(&a, &first).as_deref(), Some("bot"));
    let other = a.set_agent_token("claude", "admin:alice").unwrap();
    let other = other.token.expose_str().unwrap().to_owned();
    assert_eq!(check(&b, &other).as_deref(), Some("claude"));
    wait_for(&b, "B hears both issues", |s| s.changes_heard >= 2);

    // Rotated out through A without grace: A refuses the old token at once, B once it heard.
    let before = heard(&b);
    let second = a
        .rotate_agent_token("bot", Duration::ZERO, "admin:alice")
        .unwrap();
    let second = second.token.expose_str().unwrap().to_owned();
    assert_eq!(check(&a, &first), None);
    wait_for(&b, "B hears the rotation", |s| s.changes_heard > before);
    assert_eq!(check(&b, &first), None);
    assert_eq!(check(&b, &second).as_deref(), Some("bot"));
    assert_eq!(check(&b, &second).as_deref(), Some("bot"));

    // Revoked through A: the same.
    let before = heard(&b);
    assert_eq!(a.revoke_agent_tokens("bot", "admin:alice").unwrap(), 1);
    assert_eq!(check(&a, &second), None);
    wait_for(&b, "B hears the revocation", |s| s.changes_heard > before);
    assert_eq!(check(&b, &second), None);
    // Another agent's cached token is untouched by it.
    assert_eq!(check(&b, &other).as_deref(), Some("claude"));

    // Replaced through B: A refuses the old one once it heard. A's count is taken once A has
    // heard its own four changes above, or its wait below could end on the last of those,
    // arriving late, instead of on the replacement.
    wait_for(&a, "A hears its own changes", |s| s.changes_heard >= 4);
    assert_eq!(check(&a, &other).as_deref(), Some("claude"));
    let before = heard(&a);
    let replaced = b.set_agent_token("claude", "admin:alice").unwrap();
    let replaced = replaced.token.expose_str().unwrap().to_owned();
    wait_for(&a, "A hears the replacement", |s| s.changes_heard > before);
    assert_eq!(check(&a, &other), None);
    assert_eq!(check(&a, &replaced).as_deref(), Some("claude"));

    // No token reached a log line, though the changes were logged.
    let text = logs.text();
    assert!(text.contains("agent tokens revoked"), "{text}");
    assert!(text.contains("agent token issued"), "{text}");
    for token in [&first, &second, &other, &replaced] {
        assert!(
            !text.contains(token.as_str()),
            "a token leaked into the logs"
        );
    }
}

#[test]
fn a_dropped_listening_connection_empties_the_cache_before_it_is_used_again() {
    let logs = logs();
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let b = handle(cluster, &dbname);
    wait_for(&b, "B listens", |s| s.listening);
    let issued = b.set_agent_token("bot", "admin:alice").unwrap();
    let token = issued.token.expose_str().unwrap().to_owned();
    // B's own notification of the issue comes back to it (and drops bot's entries): after it.
    wait_for(&b, "B hears its own change", |s| s.changes_heard >= 1);
    assert_eq!(check(&b, &token).as_deref(), Some("bot"));

    // A revocation B cannot hear of (written without its notification, as if sent while B's
    // listening connection was down): B still answers from its cache, which is what the
    // notifications are there to prevent.
    let admin = PgDatabase::connect(&cluster.settings(&dbname)).unwrap();
    admin
        .client()
        .unwrap()
        .execute(
            "UPDATE vault_agent_tokens SET revoked_at = 1, revoked_by = 'sql' WHERE agent = 'bot'",
            &[],
        )
        .unwrap();
    assert_eq!(check(&b, &token).as_deref(), Some("bot"));

    // The listening connection drops: the cache is emptied, and bypassed until it listens again
    // (then emptied once more), so the missed revocation holds.
    let killed = admin
        .client()
        .unwrap()
        .query_opt(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = $1 AND query = 'LISTEN bridle_vault'",
            &[&dbname],
        )
        .unwrap()
        .map(|r| r.get::<_, i64>(0))
        .unwrap_or(0);
    assert_eq!(killed, 1, "one listening connection");
    wait_for(&b, "B notices the drop and listens again", |s| {
        s.interruptions >= 1 && s.listening
    });
    assert_eq!(check(&b, &token), None);
    assert!(
        !logs.text().contains(token.as_str()),
        "a token leaked into the logs"
    );
}

#[test]
fn a_sqlite_vault_has_no_token_cache() {
    let dir = tempfile::tempdir().unwrap();
    let v = Vault::open(&dir.path().join("vault.db"), &key(), VaultConfig::default()).unwrap();
    assert!(v.token_cache().is_none());
    let issued = v.set_agent_token("bot", "admin:alice").unwrap();
    let token = issued.token.expose_str().unwrap().to_owned();
    assert_eq!(check(&v, &token).as_deref(), Some("bot"));
    v.revoke_agent_tokens("bot", "admin:alice").unwrap();
    assert_eq!(check(&v, &token), None);
}
