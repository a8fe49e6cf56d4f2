//! A PostgreSQL server that is frozen rather than gone (it still acknowledges TCP and never
//! answers: a stopped process, a stalled disk) against the stores' client-side deadline
//! (`PgSettings::with_statement_deadline`).
//!
//! One backend of a real throwaway cluster is frozen with `SIGSTOP` (its pid from
//! `pg_backend_pid()`; a guard sends `SIGCONT` however the test ends, and the postmaster and
//! every other backend run on). A store call on that connection fails with `database_error`
//! instead of hanging, the connection is dropped rather than handed out again (the next call
//! works on a fresh one while the old backend is still frozen), and a transaction cut off
//! half-way wrote nothing.
//!
//! Each call under test runs on a thread of its own and is waited for on a channel for at most
//! [`HANG_BOUND`]: a hang detector, far above any deadline used here, not a timing assertion.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bridle_rules::db::postgres::{CHANGES_CHANNEL, LISTENING, NOT_LISTENING, PgClient, PgDatabase};
use bridle_rules::{AgentCatalog, RulesDocument, RulesStore};

use pg_cluster::PgCluster;

/// How long a call under test may take before the test calls it hung.
const HANG_BOUND: Duration = Duration::from_secs(90);

/// The deadline the tests set: short, so a frozen backend is given up on quickly, and long
/// enough for a healthy one (it also caps making a connection) on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(2);

/// An advisory-lock key of these tests' writers.
const KEY: i64 = 0x7465_7374_0000_0002;

/// A backend stopped with `SIGSTOP`, resumed with `SIGCONT` when dropped.
struct Frozen(u32);

impl Frozen {
    fn stop(pid: u32) -> Self {
        signal("-STOP", pid);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal("-CONT", self.0);
    }
}

fn signal(which: &str, pid: u32) {
    let status = Command::new("kill")
        .arg(which)
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill {which} {pid} failed");
}

/// The server process behind a connection.
fn backend_pid(c: &PgClient) -> u32 {
    let pid: i32 = c
        .query_opt("SELECT pg_backend_pid()", &[])
        .unwrap()
        .unwrap()
        .get(0);
    u32::try_from(pid).unwrap()
}

/// Runs `f` on a thread of its own and returns its result, failing the test if it has not
/// answered within [`HANG_BOUND`].
fn answered<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG_BOUND)
        .unwrap_or_else(|_| panic!("{what} hung: no answer within {HANG_BOUND:?}"))
}

fn assert_deadline_error(e: &bridle_rules::RulesError) {
    assert_eq!(e.code(), "database_error", "{e}");
    let said = format!("did not answer within {} ms", DEADLINE.as_millis());
    assert!(e.to_string().contains(&said), "{e}");
}

/// A store call on a frozen backend fails with the stable error, and the store goes on: the
/// pool (one connection) hands out a fresh connection, not the frozen one, even while that
/// backend is still stopped.
#[test]
fn a_store_call_on_a_frozen_backend_fails_and_the_pool_recovers() {
    let cluster = PgCluster::shared();
    let name = cluster.create_database();
    let settings = cluster
        .settings(&name)
        .with_max_connections(1)
        .with_statement_deadline(DEADLINE);
    let db = PgDatabase::connect(&settings).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        RulesStore::open_postgres(dir.path(), AgentCatalog::builtin(), db.clone()).unwrap(),
    );
    let mut doc = RulesDocument::new("Shop");
    doc.permissions.insert("claude".into(), Default::default());
    store.create("shop", &doc, "alice").unwrap();

    // The pool's one connection, back in the pool.
    let frozen_pid = backend_pid(&db.client().unwrap());
    let frozen = Frozen::stop(frozen_pid);

    let s = Arc::clone(&store);
    let e = answered("a queue listing on a frozen backend", move || {
        s.queue(Some("shop"), true)
    })
    .unwrap_err();
    assert_deadline_error(&e);

    // Still frozen: the next calls run on a new connection.
    let s = Arc::clone(&store);
    let listed = answered("a queue listing after the deadline", move || {
        s.queue(Some("shop"), true)
    })
    .unwrap();
    assert!(listed.is_empty());
    let d = db.clone();
    let pid = answered("a pooled connection after the deadline", move || {
        backend_pid(&d.client().unwrap())
    });
    assert_ne!(
        pid, frozen_pid,
        "the frozen connection went back to the pool"
    );

    // A write goes through too, and is there once the old backend is resumed.
    let s = Arc::clone(&store);
    answered("a write after the deadline", move || {
        let mut doc = RulesDocument::new("Shop, edited");
        doc.permissions.insert("claude".into(), Default::default());
        s.save_edit("shop", &doc, 1, "alice", "rename")
    })
    .unwrap();
    drop(frozen);
    assert_eq!(store.load("shop").unwrap().document.revision, 2);
}

/// A transaction whose backend freezes half-way fails at the deadline, its connection is
/// dropped at once (no `ROLLBACK` waited for on it), and what it wrote before is never
/// committed: the server rolls it back when it finds the connection gone.
#[test]
fn a_transaction_cut_off_half_way_writes_nothing() {
    let cluster = PgCluster::shared();
    let name = cluster.create_database();
    let db =
        PgDatabase::connect(&cluster.settings(&name).with_statement_deadline(DEADLINE)).unwrap();
    db.client()
        .unwrap()
        .batch("CREATE TABLE t (x INTEGER)")
        .unwrap();
    let count = |db: &PgDatabase| -> i64 {
        db.client()
            .unwrap()
            .query_opt("SELECT count(*) FROM t", &[])
            .unwrap()
            .unwrap()
            .get(0)
    };

    let tx = db.client().unwrap().begin(Some(KEY)).unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).unwrap();
    let frozen = Frozen::stop(backend_pid(&tx));
    let e = answered(
        "a statement on a frozen backend, then the rollback",
        move || {
            let outcome = tx.execute("INSERT INTO t VALUES (2)", &[]);
            drop(tx);
            outcome
        },
    )
    .unwrap_err();
    assert_deadline_error(&e);
    let d = db.clone();
    assert_eq!(answered("a count while frozen", move || count(&d)), 0);

    drop(frozen);
    // Taking the same lock waits (on the server) until the old backend has found its
    // connection gone and ended, rolling back and freeing the lock.
    let d = db.clone();
    answered("a writer after the frozen one", move || {
        let tx = d.client()?.begin(Some(KEY))?;
        let n: i64 = tx
            .query_opt("SELECT count(*) FROM t", &[])?
            .map_or(-1, |r| r.get(0));
        tx.execute("INSERT INTO t VALUES (3)", &[])?;
        tx.commit()?;
        Ok::<_, bridle_rules::RulesError>(n)
    })
    .map(|n| assert_eq!(n, 0, "the cut-off transaction's row was committed"))
    .unwrap();
    assert_eq!(count(&db), 1);
}

/// A `COMMIT` the server does not answer fails at the deadline and says that its outcome is
/// unknown (the server may have applied it before it froze).
#[test]
fn a_commit_on_a_frozen_backend_fails_and_says_its_outcome_is_unknown() {
    let cluster = PgCluster::shared();
    let name = cluster.create_database();
    let db =
        PgDatabase::connect(&cluster.settings(&name).with_statement_deadline(DEADLINE)).unwrap();
    db.client()
        .unwrap()
        .batch("CREATE TABLE t (x INTEGER)")
        .unwrap();
    let tx = db.client().unwrap().begin(Some(KEY)).unwrap();
    tx.execute("INSERT INTO t VALUES (1)", &[]).unwrap();
    let frozen = Frozen::stop(backend_pid(&tx));
    let e = answered("a commit on a frozen backend", move || tx.commit()).unwrap_err();
    assert_eq!(e.code(), "database_error", "{e}");
    let said = format!(
        "did not confirm the commit within {} ms",
        DEADLINE.as_millis()
    );
    assert!(e.to_string().contains(&said), "{e}");
    assert!(e.to_string().contains("unknown"), "{e}");
    drop(frozen);
    let d = db.clone();
    answered("a statement after the frozen commit", move || {
        d.client()?.query_opt("SELECT 1", &[]).map(drop)
    })
    .unwrap();
}

/// A listening connection whose backend freezes (TCP still acknowledged, so its keepalives
/// succeed) is noticed by its periodic check: `NOT_LISTENING` is sent, it is re-made on a new
/// connection (`LISTENING`) while the old backend is still frozen, and notifications flow again.
#[test]
fn a_frozen_listening_connection_is_noticed_and_remade() {
    let cluster = PgCluster::shared();
    let name = cluster.create_database();
    let db = PgDatabase::connect(
        &cluster
            .settings(&name)
            .with_max_connections(1)
            .with_statement_deadline(DEADLINE),
    )
    .unwrap();
    let rx = db.listen();
    let next = |mut rx: tokio::sync::mpsc::UnboundedReceiver<String>, what: &str| {
        answered(what, move || {
            let m = rx.blocking_recv();
            (rx, m)
        })
    };
    let (rx, m) = next(rx, "the first LISTENING");
    assert_eq!(m.as_deref(), Some(LISTENING));
    // The one other session on this database is the listening one.
    let pids: Vec<i32> = db
        .client()
        .unwrap()
        .query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
             AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(pids.len(), 1, "{pids:?}");
    let frozen = Frozen::stop(u32::try_from(pids[0]).unwrap());

    let (rx, m) = next(rx, "NOT_LISTENING after the listening backend froze");
    assert_eq!(m.as_deref(), Some(NOT_LISTENING));
    let (rx, m) = next(rx, "LISTENING on a new connection");
    assert_eq!(m.as_deref(), Some(LISTENING));
    db.client()
        .unwrap()
        .batch(&format!("NOTIFY {CHANGES_CHANNEL}, 'after'"))
        .unwrap();
    let (_rx, m) = next(rx, "a notification on the new connection");
    assert_eq!(m.as_deref(), Some("after"));
    drop(frozen);
}
