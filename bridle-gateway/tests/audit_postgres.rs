//! The audit log in PostgreSQL, as gateway replicas share it: two log handles on two connection
//! pools to one database (two replicas) appending at the same time, synchronously and through
//! their writer threads, produce ONE valid hash chain with dense ids that both handles verify;
//! queries, paging and export read it back from either handle; verification names a row edited
//! or deleted on the server; retention keeps the chain verifiable, and runs in bounded steps
//! between which another replica appends.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::time::Duration;

use bridle_gateway::audit::{
    AuditConfig, AuditLog, AuditQuery, BreakKind, Change, Entry, Kind, Outcome, Retention,
    RetentionEvent, Surface,
};
use bridle_rules::db::postgres::PgDatabase;
use pg_cluster::PgCluster;

/// A log handle on a pool of its own to `dbname` (`path` is not used for PostgreSQL).
fn handle(cluster: &PgCluster, dbname: &str) -> (AuditLog, PgDatabase) {
    let db = PgDatabase::connect(&cluster.settings(dbname)).unwrap();
    let config = AuditConfig::new("/nonexistent/audit.db").with_max_batch(16);
    (AuditLog::open_postgres(db.clone(), config).unwrap(), db)
}

fn sql(db: &PgDatabase, statement: &str) -> u64 {
    db.client().unwrap().execute(statement, &[]).unwrap()
}

fn ten_entries(log: &AuditLog) {
    for i in 0..10 {
        log.record(
            Entry::user("alice", Surface::Api, Kind::RulesChange)
                .project("demo")
                .change(Change::revisions(format!("r{i}"), format!("r{}", i + 1))),
        )
        .unwrap();
    }
}

#[test]
fn two_replicas_appending_at_once_keep_one_valid_chain() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (a, _) = handle(cluster, &dbname);
    let (b, db) = handle(cluster, &dbname);
    let threads: Vec<_> = [("a", a.clone()), ("b", b.clone())]
        .into_iter()
        .flat_map(|(replica, log)| {
            (0..2).map(move |t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for i in 0..100u64 {
                        if i % 5 == 0 {
                            log.record(
                                Entry::user(
                                    format!("admin-{replica}{t}"),
                                    Surface::Api,
                                    Kind::RulesChange,
                                )
                                .project("demo"),
                            )
                            .unwrap();
                        } else {
                            assert!(log.record_tool_call(Entry::tool_call(
                                format!("agent-{replica}{t}"),
                                "get_rules",
                                "read",
                                None,
                                Outcome::Ok,
                                Duration::from_micros(i),
                            )));
                        }
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    a.flush().unwrap();
    b.flush().unwrap();
    assert_eq!((a.lost(), b.lost()), (0, 0));

    // One chain: both handles verify all 400 entries and agree on its head.
    for log in [&a, &b] {
        let v = log.verify().unwrap();
        assert!(v.is_intact(), "{v:?}");
        assert_eq!((v.checked, v.head_id), (400, 400));
    }
    assert_eq!(a.head().unwrap(), b.head().unwrap());
    // Dense ids, each entry once.
    let ids: Vec<i64> = db
        .client()
        .unwrap()
        .query("SELECT id FROM gateway_audit ORDER BY id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, (1..=400).collect::<Vec<i64>>());
    // Either handle reads what the other wrote.
    for who in ["a0", "a1", "b0", "b1"] {
        let q = AuditQuery::all().actor(format!("agent-{who}")).limit(1000);
        assert_eq!(b.query(&q).unwrap().entries.len(), 80, "{who}");
        let q = AuditQuery::all().actor(format!("admin-{who}")).limit(1000);
        assert_eq!(a.query(&q).unwrap().entries.len(), 20, "{who}");
    }
}

#[test]
fn queries_page_and_export_on_postgres() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (a, _) = handle(cluster, &dbname);
    let (b, _) = handle(cluster, &dbname);
    ten_entries(&a);
    b.record(Entry::agent("claude-1", Kind::Proposal).project("other"))
        .unwrap();

    let q = AuditQuery::all().project("demo").limit(4);
    let first = b.query(&q).unwrap();
    assert_eq!(
        first.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    let cursor = first.next_cursor.expect("another page");
    let second = b.query(&q.clone().after(cursor)).unwrap();
    assert_eq!(
        second.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
        [5, 6, 7, 8]
    );
    let newest = a.query(&AuditQuery::all().newest_first().limit(1)).unwrap();
    assert_eq!(newest.entries[0].id, 11);
    assert_eq!(newest.entries[0].kind, Kind::Proposal);
    let bad = a
        .query(&AuditQuery::all().after("not-a-cursor"))
        .unwrap_err();
    assert_eq!(bad.code(), "audit_invalid_cursor");

    let mut out = Vec::new();
    assert_eq!(
        a.export_jsonl(&AuditQuery::all().project("demo"), &mut out)
            .unwrap(),
        10
    );
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 10);
    assert!(text.lines().all(|l| l.contains("\"demo\"")), "{text}");
}

#[test]
fn verify_names_a_row_edited_or_deleted_on_the_server() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (log, db) = handle(cluster, &dbname);
    ten_entries(&log);
    assert!(log.verify().unwrap().is_intact());

    sql(
        &db,
        "UPDATE gateway_audit SET project = 'elsewhere' WHERE id = 4",
    );
    let report = log.verify().unwrap();
    let fault = report.first_break.expect("a break");
    assert_eq!((fault.id, fault.kind), (4, BreakKind::Edited));
    assert_eq!(report.checked, 3);
    sql(
        &db,
        "UPDATE gateway_audit SET project = 'demo' WHERE id = 4",
    );
    assert!(log.verify().unwrap().is_intact());

    sql(&db, "DELETE FROM gateway_audit WHERE id = 7");
    let fault = log.verify().unwrap().first_break.expect("a break");
    assert_eq!((fault.id, fault.kind), (7, BreakKind::Deleted));
}

#[test]
fn retention_on_postgres_keeps_the_chain_verifiable() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (a, _) = handle(cluster, &dbname);
    let (b, _) = handle(cluster, &dbname);
    ten_entries(&a);
    let report = b
        .trim(Retention::keep_all().with_max_entries(4))
        .unwrap()
        .expect("something was due");
    assert_eq!(
        (
            report.removed,
            report.through_id,
            report.entry_id,
            report.steps
        ),
        (7, 7, 11, 1)
    );
    let left = a.query(&AuditQuery::all()).unwrap().entries;
    assert_eq!(
        left.iter().map(|e| e.id).collect::<Vec<_>>(),
        [8, 9, 10, 11]
    );
    assert_eq!(left[3].kind, Kind::RetentionTrim);
    let v = a.verify().unwrap();
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.anchor_id, v.head_id, v.checked), (7, 11, 4));
    assert_eq!(
        a.trim(Retention::keep_all().with_max_entries(4)).unwrap(),
        None
    );
    // Appends after the trim, from the other handle, link on.
    ten_entries(&b);
    let v = a.verify().unwrap();
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.head_id, v.checked), (21, 14));
}

#[test]
fn retention_on_postgres_runs_in_steps_and_other_replicas_append_between_them() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let db = PgDatabase::connect(&cluster.settings(&dbname)).unwrap();
    let a = AuditLog::open_postgres(
        db,
        AuditConfig::new("/nonexistent/audit.db")
            .with_max_batch(16)
            .with_trim_step(4),
    )
    .unwrap();
    let (b, _) = handle(cluster, &dbname);
    ten_entries(&a);
    ten_entries(&b);
    let mut seen = Vec::new();
    let report = a
        .trim_with_progress(Retention::keep_all().with_max_entries(8), |so_far| {
            // Each step committed on its own: the other replica sees a whole chain and takes
            // the appenders' lock at once.
            let v = b.verify().unwrap();
            assert!(v.is_intact(), "{v:?}");
            assert_eq!(v.anchor_id, so_far.through_id);
            if so_far.steps == 1 {
                assert_eq!(
                    b.record(Entry::user("bob", Surface::Api, Kind::SecretCreate))
                        .unwrap(),
                    22
                );
                assert!(b.record_tool_call(Entry::tool_call(
                    "carol",
                    "get_rules",
                    "read",
                    None,
                    Outcome::Ok,
                    Duration::from_micros(7),
                )));
                b.flush().unwrap();
            }
            seen.push(so_far.removed);
            std::ops::ControlFlow::Continue(())
        })
        .unwrap()
        .expect("something was due");
    // 20 entries, 4 a step: 1-4 (its entry 21; bob 22, carol 23), 5-8 (24), 9-12 (25),
    // 13-16 (26), 17-19 (27): eight left, the last five of them `retention_trim` or the
    // replica's appends.
    assert_eq!(seen, [4, 8, 12, 16, 19]);
    assert_eq!(
        (
            report.removed,
            report.through_id,
            report.entry_id,
            report.steps
        ),
        (19, 19, 27, 5)
    );
    let left = b.query(&AuditQuery::all()).unwrap().entries;
    assert_eq!(
        left.iter().map(|e| (e.id, e.kind)).collect::<Vec<_>>(),
        [
            (20, Kind::RulesChange),
            (21, Kind::RetentionTrim),
            (22, Kind::SecretCreate),
            (23, Kind::ToolCall),
            (24, Kind::RetentionTrim),
            (25, Kind::RetentionTrim),
            (26, Kind::RetentionTrim),
            (27, Kind::RetentionTrim),
        ]
    );
    assert_eq!(
        left[7].detail.as_deref(),
        Some("removed 3 entries through id 19 (max_entries 8); step 5, the pass's last")
    );
    for log in [&a, &b] {
        let v = log.verify().unwrap();
        assert!(v.is_intact(), "{v:?}");
        assert_eq!((v.anchor_id, v.head_id, v.checked), (19, 27, 8));
    }
    assert_eq!(
        b.trim(Retention::keep_all().with_max_entries(8)).unwrap(),
        None
    );
}

#[test]
fn a_nul_in_what_an_agent_sent_loses_no_entry() {
    // PostgreSQL text holds no NUL character. An agent names the tool it calls and its client
    // itself; one such name with a NUL must not fail the batch it is written in, which would
    // lose the other agents' entries queued beside it.
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (log, _) = handle(cluster, &dbname);
    for i in 0..5u64 {
        assert!(log.record_tool_call(Entry::tool_call(
            "claude",
            "get_rules",
            "read",
            None,
            Outcome::Ok,
            Duration::from_micros(i),
        )));
    }
    assert!(
        log.record_tool_call(
            Entry::tool_call(
                "mallory",
                "no\0such_tool",
                "unknown",
                None,
                Outcome::error("unknown_tool"),
                Duration::from_micros(1),
            )
            .client("evil\0client", Some("1\0.0".into()))
        )
    );
    log.flush().unwrap();
    assert_eq!(log.lost(), 0);
    let page = log.query(&AuditQuery::all().limit(100)).unwrap();
    assert_eq!(page.entries.len(), 6, "{page:?}");
    let odd = page.entries.last().unwrap();
    let json = serde_json::to_value(odd).unwrap();
    assert_eq!(json["subject"], "no\u{FFFD}such_tool", "{json}");
    assert!(log.verify().unwrap().is_intact());
    // A change recorded synchronously with a NUL is written too.
    log.record(Entry::user("x\0y", Surface::Api, Kind::RulesChange).subject("a\0b"))
        .unwrap();
    assert!(log.verify().unwrap().is_intact());
    // A filter with a NUL is read the way the entry was stored, not refused by the server.
    let found = log.query(&AuditQuery::all().actor("x\0y")).unwrap();
    assert_eq!(found.entries.len(), 1, "{found:?}");
}

#[test]
fn a_retention_step_failing_at_open_on_postgres_fails_neither_open_nor_appends() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (first, db) = handle(cluster, &dbname);
    ten_entries(&first);
    db.client()
        .unwrap()
        .batch(
            "CREATE FUNCTION no_trim() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'trimming refused'; END; $$;
             CREATE TRIGGER no_trim BEFORE DELETE ON gateway_audit
             FOR EACH ROW EXECUTE FUNCTION no_trim();",
        )
        .unwrap();
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let hook = {
        let heard = std::sync::Arc::clone(&heard);
        move |event: &RetentionEvent<'_>| {
            let line = match event {
                RetentionEvent::Failed(e) => format!("failed {}", e.code()),
                RetentionEvent::Done(Some(r)) => format!("done {}", r.removed),
                _ => return,
            };
            heard.lock().unwrap().push(line);
        }
    };
    // A replica starting with retention configured: its start-up pass fails in its writer
    // thread, and the open succeeds.
    let log = AuditLog::open_postgres(
        PgDatabase::connect(&cluster.settings(&dbname)).unwrap(),
        AuditConfig::new("/nonexistent/audit.db")
            .with_retention(Retention::keep_all().with_max_entries(3))
            .with_retention_every(Duration::from_millis(20))
            .with_on_retention(hook),
    )
    .unwrap();
    kberg_testkit::eventually("the start-up pass to fail", || {
        !heard.lock().unwrap().is_empty()
    });
    assert_eq!(heard.lock().unwrap()[0], "failed audit_database");
    log.record(Entry::user("bob", Surface::Api, Kind::SecretRotate))
        .unwrap();
    assert!(log.record_tool_call(Entry::tool_call(
        "claude",
        "get_rules",
        "read",
        None,
        Outcome::Ok,
        Duration::from_micros(5),
    )));
    log.flush().unwrap();
    assert_eq!(log.query(&AuditQuery::all()).unwrap().entries.len(), 12);
    // The next interval's pass goes through once deletes are allowed.
    sql(&db, "DROP TRIGGER no_trim ON gateway_audit");
    kberg_testkit::eventually("a later pass to trim", || {
        heard.lock().unwrap().iter().any(|l| l == "done 10")
    });
    assert!(log.verify().unwrap().is_intact());
}
