//! Confirm tickets in PostgreSQL, with two ticket stores on two connection pools to one database
//! (as two gateway replicas have), each under a registry of its own with the same tool and
//! confirm policy: a ticket filed on replica A is seen, approved and its result fetched on
//! replica B; approvals racing on both replicas run the call exactly once; the bad paths
//! (unknown, expired, reused, denied, wrong approver) answer the same stable codes as kberg-core's
//! own stores; and a running ticket is marked interrupted only once its replica is gone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use bridle_gateway::tickets::{PgTicketStore, TICKETS_PG_MIGRATIONS};
use bridle_rules::db::postgres::PgDatabase;
use kberg_core::{
    CallOptions, Caller, ConfirmConfig, ConfirmRequest, ErrorCode, Grants, MemoryTicketStore,
    Principal, TicketDesk, TicketOutcome, TicketStatus, TicketStore, ToolBuilder, ToolOutput,
    ToolRegistry, ToolSpec, WriteCapability,
};
use pg_cluster::PgCluster;
use serde_json::{Value, json};

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Bulk {
    /// Ids of notes to delete.
    ids: Vec<u32>,
}

/// Holds calls that delete more than 50 notes for a person.
fn bulk_policy(spec: &ToolSpec, args: &Value, _c: &Caller) -> Option<ConfirmRequest> {
    let n = args["ids"].as_array().map_or(0, Vec::len);
    (spec.name == "bulk_delete" && n > 50).then(|| ConfirmRequest::new(format!("deletes {n}")))
}

/// One replica's app: the tool (counting its runs in `runs`) under a registry whose tickets
/// are in `store`.
fn replica(store: Arc<dyn TicketStore>, ttl: Duration, runs: &Arc<AtomicUsize>) -> ToolRegistry {
    let tools = ToolRegistry::builder()
        .confirm_policy(bulk_policy)
        .confirm_config(ConfirmConfig::default().with_ttl(ttl))
        .ticket_store(store)
        .build();
    let cap = WriteCapability::new("notes.delete", "Delete notes");
    tools.declare(cap.clone()).unwrap();
    let runs = Arc::clone(runs);
    tools
        .register(
            ToolBuilder::new("bulk_delete")
                .description("Delete many notes")
                .write(cap)
                .handler(move |a: Bulk, _ctx| {
                    let runs = Arc::clone(&runs);
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok(ToolOutput::text(format!("deleted {}", a.ids.len())))
                    }
                }),
        )
        .unwrap();
    tools
}

fn agent() -> Caller {
    Caller::new(
        Principal::new("agent-1")
            .with_agent("claude")
            .with_grants(Grants::of(["notes.delete"])),
    )
}

fn admin() -> Principal {
    Principal::new("alice").with_grants(Grants::of(["kberg.confirm"]))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Files a ticket through `tools` and returns its id.
fn file(tools: &ToolRegistry) -> String {
    let e = runtime()
        .block_on(tools.call(
            &agent(),
            "bulk_delete",
            json!({"ids": (0..60).collect::<Vec<u32>>()}),
            CallOptions::default(),
        ))
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::PendingHumanConfirm, "{e}");
    e.details()["ticket"].as_str().unwrap().to_string()
}

fn approve(desk: &TicketDesk, id: &str) -> Result<(), ErrorCode> {
    runtime()
        .block_on(desk.approve(id, &admin()))
        .map(drop)
        .map_err(|e| e.code())
}

/// A store of its own pool to `dbname`.
fn pg_store(cluster: &PgCluster, dbname: &str) -> Arc<PgTicketStore> {
    let db = PgDatabase::connect(&cluster.settings(dbname)).unwrap();
    Arc::new(PgTicketStore::open(db).unwrap())
}

#[test]
fn a_ticket_filed_on_one_replica_is_decided_once_on_either() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let runs = Arc::new(AtomicUsize::new(0));
    let day = Duration::from_secs(24 * 3600);
    let a = replica(pg_store(cluster, &dbname), day, &runs);
    let b = replica(pg_store(cluster, &dbname), day, &runs);
    let (desk_a, desk_b) = (a.tickets(), b.tickets());

    for round in 0..6 {
        let id = file(&a);
        // B sees A's ticket waiting.
        let pending = desk_b.pending().unwrap();
        assert!(pending.iter().any(|t| t.id == id), "round {round}");
        assert_eq!(desk_b.get(&id).unwrap().status, TicketStatus::Pending);

        // Both replicas approve at the same moment: one runs the call, the other is refused.
        let before = runs.load(Ordering::SeqCst);
        let barrier = Barrier::new(2);
        let outcomes: Vec<Result<(), ErrorCode>> = std::thread::scope(|s| {
            let racers: Vec<_> = [&desk_a, &desk_b]
                .into_iter()
                .map(|desk| {
                    let (barrier, id) = (&barrier, &id);
                    s.spawn(move || {
                        barrier.wait();
                        approve(desk, id)
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert_eq!(
            outcomes.iter().filter(|o| o.is_ok()).count(),
            1,
            "round {round}: {outcomes:?}"
        );
        assert!(
            outcomes.contains(&Err(ErrorCode::TicketAlreadyDecided)),
            "round {round}: {outcomes:?}"
        );
        assert_eq!(runs.load(Ordering::SeqCst), before + 1, "the call ran once");

        // The result is fetched on either replica; a third approval is refused on both.
        for desk in [&desk_a, &desk_b] {
            let out = desk.result(&id, &agent()).unwrap();
            assert_eq!(out.all_text(), "deleted 60");
            assert_eq!(approve(desk, &id), Err(ErrorCode::TicketAlreadyDecided));
            assert_eq!(desk.get(&id).unwrap().status, TicketStatus::Done);
        }
    }
    // Settled tickets are forgotten through either replica, once.
    let far = std::time::SystemTime::now() + day;
    assert_eq!(desk_b.forget_settled(far).unwrap(), 6);
    assert_eq!(desk_a.forget_settled(far).unwrap(), 0);
    assert!(desk_a.list().unwrap().is_empty());

    let db = PgDatabase::connect(&cluster.settings(&dbname)).unwrap();
    assert_eq!(
        db.applied("confirm_tickets").unwrap(),
        [TICKETS_PG_MIGRATIONS.latest()]
    );
}

/// The codes of the bad paths, with the ticket filed through `a` and decided through `b`.
fn bad_paths(store_a: Arc<dyn TicketStore>, store_b: Arc<dyn TicketStore>) -> Vec<String> {
    let runs = Arc::new(AtomicUsize::new(0));
    let day = Duration::from_secs(24 * 3600);
    let code = |r: Result<(), ErrorCode>| match r {
        Ok(()) => "ok".to_string(),
        Err(c) => c.as_str().to_string(),
    };
    let mut seen = Vec::new();
    {
        let a = replica(Arc::clone(&store_a), day, &runs);
        let b = replica(Arc::clone(&store_b), day, &runs);
        let desk = b.tickets();
        // Unknown.
        seen.push(code(approve(&desk, "tk_nope")));
        seen.push(code(desk.get("tk_nope").map(drop).map_err(|e| e.code())));
        seen.push(code(
            desk.result("tk_nope", &agent())
                .map(drop)
                .map_err(|e| e.code()),
        ));
        // Pending: the result is not there yet; the agent may not approve its own.
        let id = file(&a);
        seen.push(code(
            desk.result(&id, &agent()).map(drop).map_err(|e| e.code()),
        ));
        let own = agent().principal().clone();
        seen.push(code(
            runtime()
                .block_on(desk.approve(&id, &own))
                .map(drop)
                .map_err(|e| e.code()),
        ));
        // Another principal's result is an unknown ticket.
        let other = Caller::new(Principal::new("agent-2"));
        seen.push(code(
            desk.result(&id, &other).map(drop).map_err(|e| e.code()),
        ));
        // Denied on A, then approved or denied again on B: decided.
        a.tickets().deny(&id, &admin(), Some("too many")).unwrap();
        seen.push(code(approve(&desk, &id)));
        seen.push(code(desk.deny(&id, &admin(), None).map_err(|e| e.code())));
        seen.push(code(
            desk.result(&id, &agent()).map(drop).map_err(|e| e.code()),
        ));
        // Reused: approved once, approved again.
        let id = file(&a);
        seen.push(code(approve(&desk, &id)));
        seen.push(code(approve(&a.tickets(), &id)));
    }
    // Expired: filed with a zero lifetime, so it is past its expiry when B decides.
    let a = replica(store_a, Duration::ZERO, &runs);
    let b = replica(store_b, Duration::ZERO, &runs);
    let id = file(&a);
    seen.push(code(approve(&b.tickets(), &id)));
    seen.push(code(
        b.tickets().deny(&id, &admin(), None).map_err(|e| e.code()),
    ));
    seen.push(code(
        b.tickets()
            .result(&id, &agent())
            .map(drop)
            .map_err(|e| e.code()),
    ));
    assert_eq!(b.tickets().get(&id).unwrap().status, TicketStatus::Expired);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only the approved call ran");
    seen
}

#[test]
fn bad_paths_answer_the_codes_of_kberg_cores_own_stores() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let postgres = bad_paths(pg_store(cluster, &dbname), pg_store(cluster, &dbname));
    let shared: Arc<dyn TicketStore> = Arc::new(MemoryTicketStore::new());
    let memory = bad_paths(Arc::clone(&shared), shared);
    assert_eq!(
        postgres,
        [
            "ticket_unknown",
            "ticket_unknown",
            "ticket_unknown",
            "ticket_pending",
            "ticket_forbidden",
            "ticket_unknown",
            "ticket_already_decided",
            "ticket_already_decided",
            "ticket_denied",
            "ok",
            "ticket_already_decided",
            "ticket_expired",
            "ticket_expired",
            "ticket_expired",
        ]
    );
    assert_eq!(postgres, memory);
}

/// A ticket filed on `registry` (whose tickets are in `store`) and moved to `running`, the
/// state an approval is in while the tool runs; its id.
fn file_running(registry: &ToolRegistry, store: &PgTicketStore) -> String {
    let id = file(registry);
    let mut running = store.get(&id).unwrap().unwrap();
    running.status = TicketStatus::Running;
    assert!(store.replace_if(TicketStatus::Pending, &running).unwrap());
    id
}

/// That a registry whose tickets are in `store` answers the ticket's result as a call
/// interrupted, and nothing ran.
fn interrupted(store: Arc<PgTicketStore>, id: &str, runs: &Arc<AtomicUsize>) {
    let registry = replica(store, Duration::from_secs(3600), runs);
    let e = registry.tickets().result(id, &agent()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ToolFailed);
    assert!(e.to_string().contains("interrupted"), "{e}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran again");
}

#[test]
fn a_running_ticket_is_marked_interrupted_only_once_its_replica_is_gone() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let runs = Arc::new(AtomicUsize::new(0));
    let a_store = pg_store(cluster, &dbname);
    let a = replica(
        Arc::clone(&a_store) as Arc<dyn TicketStore>,
        Duration::from_secs(3600),
        &runs,
    );
    // Replica A approved it and its call is running.
    let id = file_running(&a, &a_store);

    // Replica B starting now leaves A's running call alone.
    let b_store = pg_store(cluster, &dbname);
    assert_ne!(a_store.runner(), b_store.runner());
    assert_eq!(
        b_store.get(&id).unwrap().unwrap().status,
        TicketStatus::Running
    );

    // A goes away mid-call; the next replica to start marks the call interrupted, once.
    drop(a);
    drop(a_store);
    let c_store = pg_store(cluster, &dbname);
    let t = c_store.get(&id).unwrap().unwrap();
    assert_eq!(t.status, TicketStatus::Failed);
    interrupted(c_store, &id, &runs);
}

/// Two replicas on one new database, both started: A (its registry and store) and B (its
/// store), and the count of A's tool runs.
struct Replicas {
    cluster: &'static PgCluster,
    dbname: String,
    runs: Arc<AtomicUsize>,
    a_store: Arc<PgTicketStore>,
    b_store: Arc<PgTicketStore>,
    a: ToolRegistry,
}

impl Replicas {
    fn start() -> Self {
        let cluster = PgCluster::shared();
        let dbname = cluster.create_database();
        let runs = Arc::new(AtomicUsize::new(0));
        let a_store = pg_store(cluster, &dbname);
        let b_store = pg_store(cluster, &dbname);
        let a = replica(
            Arc::clone(&a_store) as Arc<dyn TicketStore>,
            Duration::from_secs(3600),
            &runs,
        );
        Self {
            cluster,
            dbname,
            runs,
            a_store,
            b_store,
            a,
        }
    }
}

#[test]
fn a_replica_that_keeps_running_sees_a_gone_replicas_call_interrupted() {
    // No replica restarts after A goes away: B, running all along, is the one asked about the
    // ticket, and must not show A's call as running for ever.
    let Replicas {
        runs,
        a_store,
        b_store,
        a,
        ..
    } = Replicas::start();
    let id = file_running(&a, &a_store);
    // While A lives, B sees the call running, in a lookup and in the list.
    assert_eq!(
        b_store.get(&id).unwrap().unwrap().status,
        TicketStatus::Running
    );
    assert_eq!(b_store.list().unwrap()[0].status, TicketStatus::Running);

    drop(a);
    drop(a_store);
    assert_eq!(b_store.list().unwrap()[0].status, TicketStatus::Failed);
    let t = b_store.get(&id).unwrap().unwrap();
    assert_eq!(t.status, TicketStatus::Failed);
    interrupted(b_store, &id, &runs);
}

#[test]
fn a_replica_whose_lock_connection_was_lost_is_not_taken_for_gone() {
    // The connection holding A's runner lock is cut (a database restart, a proxy dropping
    // idle connections): the lock goes with it. A call A starts after that must not look
    // interrupted to B while A runs it.
    let Replicas {
        cluster,
        dbname,
        a_store,
        b_store,
        a,
        ..
    } = Replicas::start();
    cut_lock_connection(cluster, &dbname, &a_store);

    let id = file_running(&a, &a_store);
    assert_eq!(
        b_store.get(&id).unwrap().unwrap().status,
        TicketStatus::Running,
        "A is alive and running the call"
    );
}

/// Cuts the connection that holds `store`'s runner lock (as a database restart or a proxy
/// dropping idle connections would), and waits until the server has ended that session, so
/// the lock is free.
fn cut_lock_connection(cluster: &PgCluster, dbname: &str, store: &PgTicketStore) {
    let key = 0x6274_6b74_0000_0000_i64 | (store.runner() & 0xffff_ffff);
    let admin = PgDatabase::connect(&cluster.settings(dbname))
        .unwrap()
        .client()
        .unwrap();
    let holder: Vec<i32> = admin
        .query(
            "SELECT pid FROM pg_locks
             WHERE locktype = 'advisory' AND granted AND objsubid = 1
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND ((classid::bigint << 32) | objid::bigint) = $1",
            &[&key],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Advisory locks are listed for the whole cluster; other tests' databases number their
    // runners from 1 too.
    assert_eq!(holder.len(), 1, "one connection held the runner lock");
    admin
        .query_opt("SELECT pg_terminate_backend($1)", &[&holder[0]])
        .unwrap();
    // The server ends the session on its own time: wait until it is gone.
    kberg_testkit::eventually("the lock connection is gone", || {
        admin
            .query_opt(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                &[&holder[0]],
            )
            .unwrap()
            .is_some_and(|r| r.get::<_, i64>(0) == 0)
    });
}

#[test]
fn a_call_taken_for_interrupted_while_its_lock_was_lost_keeps_its_real_outcome() {
    // A runs a call; the connection holding its runner lock is cut meanwhile, so B, reading the
    // ticket, takes A for gone and marks the call interrupted. When A's call ends, its real
    // outcome replaces the mark instead of being lost.
    let Replicas {
        cluster,
        dbname,
        a_store,
        b_store,
        a,
        ..
    } = Replicas::start();
    let id = file_running(&a, &a_store);
    cut_lock_connection(cluster, &dbname, &a_store);
    assert_eq!(
        b_store.get(&id).unwrap().unwrap().status,
        TicketStatus::Failed,
        "B takes A for gone"
    );

    let mut done = a_store.get(&id).unwrap().unwrap();
    assert_eq!(done.status, TicketStatus::Failed);
    done.status = TicketStatus::Done;
    done.outcome = Some(TicketOutcome::Output(ToolOutput::text("deleted 60")));
    // Only the replica that ran the call gets that second chance: another's write that
    // expects the ticket running, or one that expects it pending, finds it decided.
    assert!(!b_store.replace_if(TicketStatus::Running, &done).unwrap());
    assert!(!a_store.replace_if(TicketStatus::Pending, &done).unwrap());
    assert_eq!(
        b_store.get(&id).unwrap().unwrap().status,
        TicketStatus::Failed
    );

    assert!(
        a_store.replace_if(TicketStatus::Running, &done).unwrap(),
        "A's outcome is kept"
    );
    let seen = b_store.get(&id).unwrap().unwrap();
    assert_eq!(seen.status, TicketStatus::Done);
    assert!(matches!(seen.outcome, Some(TicketOutcome::Output(_))));
}
