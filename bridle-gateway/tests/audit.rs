//! The audit log through its public API and a real SQLite file: every source round-trips and is
//! found by every filter; verification names the edited, inserted or deleted row after raw SQL
//! tampering; retention keeps the chain verifiable, after every one of its bounded steps, with
//! appends landing between steps; the start-up pass runs in the writer thread (open does not
//! wait for it, and its failure fails neither open nor appends); a canary argument never reaches the file; a
//! full queue is counted and reported; concurrent recorders keep one valid chain; random entries
//! keep the chain valid (proptest).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::audit::{
    AuditConfig, AuditLog, AuditQuery, BreakKind, Change, Entry, Kind, Outcome, Retention,
    RetentionEvent, Source, SourceType, Surface,
};
use kberg_core::{
    CallOptions, Caller, Grants, Principal, ToolBuilder, ToolOutput, ToolRegistry, WriteCapability,
};
use kberg_testkit::eventually;
use proptest::prelude::*;
use rusqlite::Connection;
use serde_json::json;

fn open(dir: &Path) -> AuditLog {
    AuditLog::open(AuditConfig::new(dir.join("audit.db"))).expect("open the audit log")
}

fn raw(dir: &Path) -> Connection {
    let c = Connection::open(dir.join("audit.db")).expect("open the file by hand");
    c.busy_timeout(Duration::from_secs(10))
        .expect("busy timeout");
    c
}

/// One entry of each source (and a tool call through the gate's sink later).
fn one_of_each(log: &AuditLog) -> Vec<u64> {
    vec![
        log.record(
            Entry::user("alice", Surface::Panel, Kind::Approval)
                .project("demo")
                .subject("proposal #3")
                .change(Change::revisions("r1", "r2")),
        )
        .expect("user entry"),
        log.record(
            Entry::agent("claude-1", Kind::Proposal)
                .agent_type("claude")
                .session("sess-9")
                .client("claude-code", Some("2.1.3".into()))
                .project("demo")
                .subject("guardrail"),
        )
        .expect("agent entry"),
        log.record(
            Entry::vendor(
                "vendor-x",
                Some("https://vendor.example/rules.yaml".into()),
                Kind::Proposal,
            )
            .project("other")
            .change(Change::digest("sha256:abc")),
        )
        .expect("vendor entry"),
        log.record(
            Entry::system("upstreams", Kind::UpstreamChange)
                .subject("gitea")
                .outcome(Outcome::error("upstream_unreachable")),
        )
        .expect("system entry"),
        log.record(
            Entry::user("bob", Surface::Cli, Kind::AgentCreate)
                .about_agent("codex-1")
                .project("demo"),
        )
        .expect("user entry about an agent"),
    ]
}

#[test]
fn each_source_round_trips_and_is_found_by_every_filter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    let started = chrono::Utc::now() - chrono::Duration::seconds(1);
    let ids = one_of_each(&log);
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);

    let all = log.query(&AuditQuery::all()).expect("query").entries;
    assert_eq!(all.len(), 5);
    assert_eq!(
        all[0].source,
        Source::User {
            admin: "alice".into(),
            surface: Surface::Panel
        }
    );
    assert_eq!(all[0].change, Change::revisions("r1", "r2"));
    match &all[1].source {
        Source::Agent {
            agent,
            agent_type,
            session,
            client,
        } => {
            assert_eq!(agent, "claude-1");
            assert_eq!(agent_type.as_deref(), Some("claude"));
            assert_eq!(session.as_deref(), Some("sess-9"));
            let client = client.as_ref().expect("client recorded");
            assert_eq!(
                (client.name.as_str(), client.version.as_deref()),
                ("claude-code", Some("2.1.3"))
            );
        }
        other => panic!("expected an agent source, got {other:?}"),
    }
    assert_eq!(
        all[2].source,
        Source::Vendor {
            feed: "vendor-x".into(),
            url: Some("https://vendor.example/rules.yaml".into())
        }
    );
    assert_eq!(all[3].outcome, Outcome::error("upstream_unreachable"));
    assert_eq!(all[2].prev_hash, all[1].hash);

    let ids_of = |q: AuditQuery| -> Vec<u64> {
        log.query(&q)
            .expect("query")
            .entries
            .iter()
            .map(|e| e.id)
            .collect()
    };
    assert_eq!(
        ids_of(AuditQuery::all().source(SourceType::User)),
        vec![1, 5]
    );
    assert_eq!(ids_of(AuditQuery::all().source(SourceType::Agent)), vec![2]);
    assert_eq!(
        ids_of(AuditQuery::all().source(SourceType::Vendor)),
        vec![3]
    );
    assert_eq!(
        ids_of(AuditQuery::all().source(SourceType::System)),
        vec![4]
    );
    assert_eq!(ids_of(AuditQuery::all().actor("bob")), vec![5]);
    assert_eq!(ids_of(AuditQuery::all().actor("vendor-x")), vec![3]);
    assert_eq!(ids_of(AuditQuery::all().agent("claude-1")), vec![2]);
    assert_eq!(ids_of(AuditQuery::all().agent("codex-1")), vec![5]);
    assert_eq!(ids_of(AuditQuery::all().project("demo")), vec![1, 2, 5]);
    assert_eq!(ids_of(AuditQuery::all().kind(Kind::Proposal)), vec![2, 3]);
    assert_eq!(
        ids_of(AuditQuery::all().project("demo").kind(Kind::Proposal)),
        vec![2]
    );
    assert_eq!(
        ids_of(AuditQuery::all().between(Some(started), None)).len(),
        5
    );
    assert!(ids_of(AuditQuery::all().between(None, Some(started))).is_empty());
    let later = chrono::Utc::now() + chrono::Duration::seconds(60);
    assert!(ids_of(AuditQuery::all().between(Some(later), None)).is_empty());

    // Paging, both directions.
    let mut seen = Vec::new();
    let mut q = AuditQuery::all().limit(2);
    loop {
        let page = log.query(&q).expect("page");
        seen.extend(page.entries.iter().map(|e| e.id));
        match page.next_cursor {
            Some(c) => q = q.after(c),
            None => break,
        }
    }
    assert_eq!(seen, vec![1, 2, 3, 4, 5]);
    let first = log
        .query(&AuditQuery::all().newest_first().limit(3))
        .expect("newest page");
    assert_eq!(
        first.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![5, 4, 3]
    );
    let cursor = first.next_cursor.expect("a second page");
    let second = log
        .query(&AuditQuery::all().newest_first().after(cursor.clone()))
        .expect("second page");
    assert_eq!(
        second.entries.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![2, 1]
    );
    assert_eq!(second.next_cursor, None);
    // A cursor of the other direction, or made up, is a clear error.
    for bad in [cursor.as_str(), "zz", "a-4"] {
        let err = log
            .query(&AuditQuery::all().after(bad))
            .expect_err("bad cursor");
        assert_eq!(err.code(), "audit_invalid_cursor");
    }

    // Export: one JSON object a line, in order, with the filters applied.
    let mut out = Vec::new();
    let n = log
        .export_jsonl(&AuditQuery::all().project("demo"), &mut out)
        .expect("export");
    assert_eq!(n, 3);
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["id"], 1);
    assert_eq!(lines[0]["source"]["type"], "user");
    assert_eq!(lines[0]["source"]["surface"], "panel");
    assert_eq!(lines[1]["source"]["client"]["name"], "claude-code");
    assert_eq!(lines[2]["kind"], "agent_create");
    assert!(log.verify().expect("verify").is_intact());
}

fn registry_with(log: &AuditLog) -> ToolRegistry {
    let r = ToolRegistry::builder()
        .audit_sink(Arc::new(log.clone()))
        .build();
    let cap = WriteCapability::new("notes.write", "Write notes");
    r.declare(cap.clone()).expect("declare");
    r.register(
        ToolBuilder::new("add_note")
            .write(cap)
            .sensitive("token")
            .raw_handler(
                json!({"type": "object", "properties": {
                    "text": {"type": "string"}, "token": {"type": "string"}
                }, "required": ["text"], "additionalProperties": false}),
                |_, _| async { Ok(ToolOutput::default()) },
            ),
    )
    .expect("register");
    r.register(ToolBuilder::new("read_note").raw_handler(
        json!({"type": "object", "properties": {"id": {"type": "string", "maxLength": 4}}}),
        |_, _| async { Ok(ToolOutput::default()) },
    ))
    .expect("register");
    r
}

fn call(r: &ToolRegistry, caller: &Caller, tool: &str, args: serde_json::Value) -> bool {
    futures_block_on(r.call(caller, tool, args, CallOptions::default())).is_ok()
}

fn futures_block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

#[test]
fn gate_events_become_agent_tool_call_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    let r = registry_with(&log);
    let writer = Caller::new(
        Principal::new("claude-1")
            .with_agent("claude")
            .with_grants(Grants::of(["notes.write"])),
    );
    let reader = Caller::new(Principal::new("codex-1").with_agent("codex"));
    assert!(call(&r, &writer, "add_note", json!({"text": "hi"})));
    assert!(!call(&r, &reader, "add_note", json!({"text": "hi"})));
    assert!(call(&r, &reader, "read_note", json!({"id": "n1"})));
    assert!(!call(&r, &reader, "no_such_tool", json!({})));
    log.flush().expect("flush");

    let calls = log
        .query(&AuditQuery::all().kind(Kind::ToolCall))
        .expect("query")
        .entries;
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[0].subject.as_deref(), Some("add_note"));
    assert_eq!(calls[0].agent.as_deref(), Some("claude-1"));
    let tool = calls[0].tool.as_ref().expect("tool info");
    assert_eq!(tool.tool_kind, "write");
    assert_eq!(tool.capability.as_deref(), Some("notes.write"));
    assert_eq!(calls[0].outcome, Outcome::Ok);
    assert!(
        calls[0].change.digest.is_some(),
        "the redacted argument digest is kept"
    );
    match &calls[0].source {
        Source::Agent { agent_type, .. } => assert_eq!(agent_type.as_deref(), Some("claude")),
        other => panic!("expected an agent source, got {other:?}"),
    }
    assert_eq!(calls[1].outcome, Outcome::error("capability_required"));
    assert_eq!(
        calls[2].tool.as_ref().map(|t| t.tool_kind.as_str()),
        Some("read")
    );
    assert_eq!(
        calls[3].tool.as_ref().map(|t| t.tool_kind.as_str()),
        Some("unknown")
    );
    assert_eq!(
        log.query(&AuditQuery::all().agent("codex-1"))
            .expect("by agent")
            .entries
            .len(),
        3
    );
    assert!(log.verify().expect("verify").is_intact());
}

/// Every byte of the database and its WAL and shared-memory files.
fn file_bytes(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for name in ["audit.db", "audit.db-wal", "audit.db-shm"] {
        let p: PathBuf = dir.join(name);
        if p.exists() {
            all.extend(std::fs::read(&p).expect("read the file"));
        }
    }
    all
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn a_canary_argument_never_reaches_the_database_file() {
    const CANARY: &str = "canary-7f3a9c1e5b2d4086";
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    let r = registry_with(&log);
    let caller = Caller::new(Principal::new("claude-1").with_grants(Grants::of(["notes.write"])));
    // As a sensitive field, as an ordinary field, as an unknown field (refused by validation),
    // as a tool name's argument that fails a bound, and as the tool name itself.
    assert!(call(
        &r,
        &caller,
        "add_note",
        json!({"text": "x", "token": CANARY})
    ));
    assert!(call(&r, &caller, "add_note", json!({"text": CANARY})));
    assert!(!call(
        &r,
        &caller,
        "add_note",
        json!({"text": "x", "extra": CANARY})
    ));
    assert!(!call(&r, &caller, "read_note", json!({"id": CANARY})));
    log.flush().expect("flush");
    assert_eq!(
        log.query(&AuditQuery::all()).expect("query").entries.len(),
        4
    );
    let mut export = Vec::new();
    log.export_jsonl(&AuditQuery::all(), &mut export)
        .expect("export");
    assert!(
        !contains(&export, CANARY.as_bytes()),
        "canary in the export"
    );
    drop(r);
    drop(log);
    let bytes = file_bytes(dir.path());
    assert!(!bytes.is_empty());
    assert!(
        !contains(&bytes, CANARY.as_bytes()),
        "canary in the database files"
    );
}

fn ten_entries(log: &AuditLog) {
    for i in 0..10 {
        log.record(
            Entry::user("alice", Surface::Api, Kind::RulesChange)
                .project("demo")
                .change(Change::revisions(format!("r{i}"), format!("r{}", i + 1))),
        )
        .expect("record");
    }
}

#[test]
fn verify_passes_on_a_clean_log_and_names_a_hand_edited_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    ten_entries(&log);
    let clean = log.verify().expect("verify");
    assert!(clean.is_intact());
    assert_eq!((clean.checked, clean.head_id), (10, 10));

    raw(dir.path())
        .execute(
            "UPDATE gateway_audit SET project = 'elsewhere' WHERE id = 4",
            [],
        )
        .expect("edit a row by hand");
    let report = log.verify().expect("verify");
    let fault = report.first_break.expect("a break");
    assert_eq!((fault.id, fault.kind), (4, BreakKind::Edited));
    assert_eq!(report.checked, 3);
}

#[test]
fn verify_names_an_edited_row_whose_hash_was_recomputed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    ten_entries(&log);
    // Edit row 6 and give it a self-consistent (but different) hash: row 7 no longer links.
    let c = raw(dir.path());
    c.execute(
        "UPDATE gateway_audit SET detail = 'rewritten', hash = (SELECT hash FROM gateway_audit WHERE id = 2) WHERE id = 6",
        [],
    )
    .expect("edit by hand");
    let fault = log.verify().expect("verify").first_break.expect("a break");
    assert_eq!(fault.id, 6);
}

#[test]
fn verify_names_an_inserted_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    ten_entries(&log);
    let c = raw(dir.path());
    // A copy of row 3 appended as row 11: its link and its hash fit nowhere.
    c.execute(
        "INSERT INTO gateway_audit SELECT 11, at_ms, source_type, actor, surface, agent_type, session,
         client_name, client_version, source_url, kind, project, subject, agent, before_rev,
         after_rev, digest, outcome, code, tool_kind, capability, duration_us, detail, prev_hash,
         hash FROM gateway_audit WHERE id = 3",
        [],
    )
    .expect("insert a row by hand");
    let fault = log.verify().expect("verify").first_break.expect("a break");
    assert_eq!((fault.id, fault.kind), (11, BreakKind::Inserted));

    // Replacing a middle row with a made-up one: named as inserted at its id.
    c.execute("DELETE FROM gateway_audit WHERE id = 11", [])
        .expect("undo");
    assert!(log.verify().expect("verify").is_intact());
    c.execute("DELETE FROM gateway_audit WHERE id = 5", [])
        .expect("remove");
    c.execute(
        "INSERT INTO gateway_audit SELECT 5, at_ms, source_type, 'mallory', surface, agent_type,
         session, client_name, client_version, source_url, kind, project, subject, agent,
         before_rev, after_rev, digest, outcome, code, tool_kind, capability, duration_us, detail,
         'f00d', hash FROM gateway_audit WHERE id = 2",
        [],
    )
    .expect("insert a forged row");
    let fault = log.verify().expect("verify").first_break.expect("a break");
    assert_eq!((fault.id, fault.kind), (5, BreakKind::Inserted));
}

#[test]
fn verify_names_a_deleted_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    ten_entries(&log);
    let c = raw(dir.path());
    c.execute("DELETE FROM gateway_audit WHERE id = 7", [])
        .expect("delete a row by hand");
    let report = log.verify().expect("verify");
    let fault = report.first_break.expect("a break");
    assert_eq!((fault.id, fault.kind), (7, BreakKind::Deleted));
    assert_eq!(report.checked, 6);

    // The last row gone: the stored head still says 10 were written.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    ten_entries(&log);
    raw(dir.path())
        .execute("DELETE FROM gateway_audit WHERE id = 10", [])
        .expect("delete the last row");
    let fault = log.verify().expect("verify").first_break.expect("a break");
    assert_eq!((fault.id, fault.kind), (10, BreakKind::Deleted));
}

#[test]
fn retention_trims_by_count_and_by_age_and_verify_still_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    ten_entries(&log);
    let report = log
        .trim(Retention::keep_all().with_max_entries(4))
        .expect("trim")
        .expect("something was due");
    assert_eq!(
        (report.removed, report.through_id, report.entry_id),
        (7, 7, 11)
    );
    let left = log.query(&AuditQuery::all()).expect("query").entries;
    assert_eq!(
        left.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![8, 9, 10, 11]
    );
    let trim_entry = &left[3];
    assert_eq!(trim_entry.kind, Kind::RetentionTrim);
    assert_eq!(trim_entry.source.source_type(), SourceType::System);
    assert!(
        trim_entry
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("removed 7 entries through id 7")),
        "{trim_entry:?}"
    );
    let v = log.verify().expect("verify");
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.anchor_id, v.head_id, v.checked), (7, 11, 4));
    // Nothing due: no entry.
    assert_eq!(
        log.trim(Retention::keep_all().with_max_entries(4))
            .expect("trim"),
        None
    );

    // A removed row put back by hand is named.
    let c = raw(dir.path());
    c.execute(
        "INSERT INTO gateway_audit SELECT 3, at_ms, source_type, actor, surface, agent_type, session,
         client_name, client_version, source_url, kind, project, subject, agent, before_rev,
         after_rev, digest, outcome, code, tool_kind, capability, duration_us, detail, prev_hash,
         hash FROM gateway_audit WHERE id = 8",
        [],
    )
    .expect("insert");
    let fault = log.verify().expect("verify").first_break.expect("a break");
    assert_eq!((fault.id, fault.kind), (3, BreakKind::Inserted));
    c.execute("DELETE FROM gateway_audit WHERE id = 3", [])
        .expect("undo");

    // By age: everything recorded before now goes once the clock has moved past it.
    ten_entries(&log);
    let last = log
        .query(&AuditQuery::all().newest_first().limit(1))
        .expect("query")
        .entries[0]
        .at;
    eventually("the clock to pass the last entry", || {
        chrono::Utc::now().timestamp_millis() > last.timestamp_millis()
    });
    let report = log
        .trim(Retention::keep_all().with_max_age(Duration::ZERO))
        .expect("trim")
        .expect("due");
    assert_eq!(report.removed, 14);
    let v = log.verify().expect("verify");
    assert!(v.is_intact(), "{v:?}");
    assert_eq!(v.checked, 1);
    log.record(Entry::user("alice", Surface::Cli, Kind::SecretCreate).subject("kanboard-token"))
        .expect("record after trims");
    assert!(log.verify().expect("verify").is_intact());
}

/// A log whose retention passes remove at most `step` entries a step.
fn open_stepped(dir: &Path, step: u64) -> AuditLog {
    AuditLog::open(AuditConfig::new(dir.join("audit.db")).with_trim_step(step))
        .expect("open the audit log")
}

fn ids_and_details(log: &AuditLog) -> Vec<(u64, Kind, Option<String>)> {
    log.query(&AuditQuery::all().limit(1000))
        .expect("query")
        .entries
        .into_iter()
        .map(|e| (e.id, e.kind, e.detail))
        .collect()
}

#[test]
fn retention_runs_in_bounded_steps_each_recorded_and_the_chain_whole_after_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_stepped(dir.path(), 3);
    ten_entries(&log);
    let retention = Retention::keep_all().with_max_entries(4);
    let mut seen = Vec::new();
    let report = log
        .trim_with_progress(retention, |so_far| {
            // Between steps the chain is whole and starts after the last removed entry.
            let v = log.verify().expect("verify between steps");
            assert!(v.is_intact(), "{v:?}");
            assert_eq!(v.anchor_id, so_far.through_id);
            seen.push(so_far.clone());
            std::ops::ControlFlow::Continue(())
        })
        .expect("trim")
        .expect("something was due");
    // Three steps of at most three: 1-3, 4-6, 7-9, each with its own entry (11, 12, 13); the
    // log then holds exactly `max_entries`.
    assert_eq!(
        seen.iter()
            .map(|r| (r.removed, r.through_id, r.entry_id, r.steps))
            .collect::<Vec<_>>(),
        [(3, 3, 11, 1), (6, 6, 12, 2), (9, 9, 13, 3)]
    );
    assert_eq!(
        (
            report.removed,
            report.through_id,
            report.entry_id,
            report.steps
        ),
        (9, 9, 13, 3)
    );
    let left = ids_and_details(&log);
    assert_eq!(
        left.iter()
            .map(|(id, kind, _)| (*id, *kind))
            .collect::<Vec<_>>(),
        [
            (10, Kind::RulesChange),
            (11, Kind::RetentionTrim),
            (12, Kind::RetentionTrim),
            (13, Kind::RetentionTrim)
        ]
    );
    assert_eq!(
        left[1].2.as_deref(),
        Some("removed 3 entries through id 3 (max_entries 4); step 1 of the pass, more due")
    );
    assert_eq!(
        left[3].2.as_deref(),
        Some("removed 3 entries through id 9 (max_entries 4); step 3, the pass's last")
    );
    let v = log.verify().expect("verify");
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.anchor_id, v.head_id, v.checked), (9, 13, 4));
    assert_eq!(log.trim(retention).expect("trim"), None);

    // By age, in steps too: everything older than the pass's start goes (the pass's own
    // entries are newer), and a step never removes more than three.
    ten_entries(&log);
    let last = log
        .query(&AuditQuery::all().newest_first().limit(1))
        .expect("query")
        .entries[0]
        .at;
    eventually("the clock to pass the last entry", || {
        chrono::Utc::now().timestamp_millis() > last.timestamp_millis()
    });
    let mut removed_per_step = Vec::new();
    let report = log
        .trim_with_progress(
            Retention::keep_all().with_max_age(Duration::ZERO),
            |so_far| {
                removed_per_step.push(so_far.removed);
                std::ops::ControlFlow::Continue(())
            },
        )
        .expect("trim")
        .expect("due");
    assert_eq!(removed_per_step, [3, 6, 9, 12, 14]);
    assert_eq!(
        (report.removed, report.through_id, report.steps),
        (14, 23, 5)
    );
    let v = log.verify().expect("verify");
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.anchor_id, v.checked), (23, 5));
}

#[test]
fn appends_made_between_retention_steps_land_and_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_stepped(dir.path(), 4);
    ten_entries(&log);
    ten_entries(&log);
    let report = log
        .trim_with_progress(Retention::keep_all().with_max_entries(8), |so_far| {
            if so_far.steps == 1 {
                // The log is free between steps: a change is written at once, a tool call
                // before the next step.
                let id = log
                    .record(Entry::user("bob", Surface::Api, Kind::SecretCreate))
                    .expect("record between steps");
                assert_eq!(id, 22);
                assert!(log.record_tool_call(Entry::tool_call(
                    "carol",
                    "get_rules",
                    "read",
                    None,
                    Outcome::Ok,
                    Duration::from_micros(7),
                )));
            }
            std::ops::ControlFlow::Continue(())
        })
        .expect("trim")
        .expect("due");
    // 20 entries, 4 a step: 1-4 (its entry 21; bob 22, carol 23), 5-8 (24), 9-12 (25),
    // 13-16 (26), 17-19 (27): eight left.
    assert_eq!(
        (
            report.removed,
            report.through_id,
            report.entry_id,
            report.steps
        ),
        (19, 19, 27, 5)
    );
    let left = log.query(&AuditQuery::all()).expect("query").entries;
    assert_eq!(
        left.iter().map(|e| e.id).collect::<Vec<_>>(),
        (20..=27).collect::<Vec<_>>()
    );
    assert_eq!(left[2].source.actor(), "bob");
    assert_eq!(left[3].source.actor(), "carol");
    assert_eq!(left[2].prev_hash, left[1].hash);
    assert_eq!(left[3].prev_hash, left[2].hash);
    assert_eq!(left[4].prev_hash, left[3].hash);
    let v = log.verify().expect("verify");
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.anchor_id, v.head_id, v.checked), (19, 27, 8));
}

#[test]
fn a_retention_pass_stopped_half_way_leaves_a_whole_explained_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_stepped(dir.path(), 3);
    ten_entries(&log);
    let retention = Retention::keep_all().with_max_entries(4);
    let report = log
        .trim_with_progress(retention, |_| std::ops::ControlFlow::Break(()))
        .expect("trim")
        .expect("due");
    assert_eq!(
        (
            report.removed,
            report.through_id,
            report.entry_id,
            report.steps
        ),
        (3, 3, 11, 1)
    );
    // The moved anchor is explained by the step's own entry, which says more is due.
    let v = log.verify().expect("verify");
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.anchor_id, v.head_id), (3, 11));
    let left = ids_and_details(&log);
    assert_eq!(left.last().map(|e| e.0), Some(11));
    assert_eq!(
        left.last().and_then(|e| e.2.as_deref()),
        Some("removed 3 entries through id 3 (max_entries 4); step 1 of the pass, more due")
    );
    // The next pass goes on from there.
    let report = log.trim(retention).expect("trim").expect("due");
    assert_eq!(
        (
            report.removed,
            report.through_id,
            report.entry_id,
            report.steps
        ),
        (6, 9, 13, 2)
    );
    let v = log.verify().expect("verify");
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.anchor_id, v.head_id, v.checked), (9, 13, 4));
}

#[test]
fn a_count_limit_of_zero_set_by_hand_ends_its_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_stepped(dir.path(), 3);
    ten_entries(&log);
    let mut retention = Retention::keep_all();
    retention.max_entries = Some(0);
    let report = log
        .trim_with_progress(retention, |so_far| {
            // Each step adds its own entry: under a limit of 0 taken literally, every step
            // would find that entry over the limit, and the pass would never end.
            if so_far.steps > 20 {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        })
        .expect("trim")
        .expect("due");
    // As a limit of 1: 1-3, 4-6, 7-9, 10-12, 13-14, and the last step's entry is left.
    assert_eq!(
        (report.steps, report.through_id, report.entry_id),
        (5, 14, 15)
    );
    let v = log.verify().expect("verify");
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.anchor_id, v.head_id, v.checked), (14, 15, 1));
}

/// What the writer thread's retention passes told the log's hook, in order.
#[derive(Default)]
struct Passes(std::sync::Mutex<Vec<String>>);

impl Passes {
    fn hear(self: &Arc<Self>) -> impl Fn(&RetentionEvent<'_>) + Send + Sync + 'static {
        let heard = Arc::clone(self);
        move |event| {
            let line = match event {
                RetentionEvent::Step(so_far) => format!("step {}", so_far.steps),
                RetentionEvent::Done(Some(r)) => {
                    format!("done {} through {}", r.removed, r.through_id)
                }
                RetentionEvent::Done(None) => "done, nothing due".into(),
                RetentionEvent::Failed(e) => format!("failed {}", e.code()),
                _ => "other".into(),
            };
            heard.0.lock().expect("events").push(line);
        }
    }

    fn heard(&self) -> Vec<String> {
        self.0.lock().expect("events").clone()
    }
}

#[test]
fn configured_retention_runs_in_the_writer_thread_as_the_log_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    ten_entries(&open(dir.path()));
    let passes = Arc::new(Passes::default());
    let log = AuditLog::open(
        AuditConfig::new(dir.path().join("audit.db"))
            .with_retention(Retention::keep_all().with_max_entries(3))
            .with_on_retention(passes.hear()),
    )
    .expect("reopen");
    eventually("the start-up pass to end", || {
        passes.heard().last().is_some_and(|l| l.starts_with("done"))
    });
    assert_eq!(passes.heard(), ["step 1", "done 8 through 8"]);
    assert_eq!(
        log.query(&AuditQuery::all()).expect("query").entries.len(),
        3
    );
    assert!(log.verify().expect("verify").is_intact());
    assert_eq!(log.apply_retention().expect("again"), None);
}

/// A backlog due at start (retention newly configured, a long downtime) is the writer thread's:
/// `open`, and so the gateway's start, does not wait for the pass, and changes are written
/// between its steps.
#[test]
fn open_returns_before_a_start_up_pass_of_many_steps_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    ten_entries(&open(dir.path()));
    let (release, held) = std::sync::mpsc::channel::<()>();
    let held = std::sync::Mutex::new(held);
    let (stepped, first_step) = std::sync::mpsc::channel::<u64>();
    let stepped = std::sync::Mutex::new(stepped);
    // The first step waits until the test has seen `open` return (bounded, so a regression
    // fails rather than hangs).
    let hook = move |event: &RetentionEvent<'_>| {
        if let RetentionEvent::Step(so_far) = event {
            let _ = stepped.lock().expect("sender").send(so_far.steps);
            if so_far.steps == 1 {
                let released = held
                    .lock()
                    .expect("receiver")
                    .recv_timeout(Duration::from_secs(30))
                    .is_ok();
                assert!(released, "open waited for the start-up pass");
            }
        }
    };
    let log = AuditLog::open(
        AuditConfig::new(dir.path().join("audit.db"))
            .with_trim_step(3)
            .with_retention(Retention::keep_all().with_max_entries(4))
            .with_on_retention(hook),
    )
    .expect("open while a backlog is due");
    assert_eq!(first_step.recv().expect("the first step"), 1);
    // A change made while the pass is under way (its first step held) is written at once.
    log.record(Entry::user("bob", Surface::Api, Kind::SecretRotate))
        .expect("a change during the pass");
    release.send(()).expect("release the first step");
    eventually("the pass to end", || {
        log.query(&AuditQuery::all().kind(Kind::RetentionTrim))
            .expect("query")
            .entries
            .last()
            .and_then(|e| e.detail.clone())
            .is_some_and(|d| !d.contains("more due"))
    });
    assert!(log.verify().expect("verify").is_intact());
    let left = log.query(&AuditQuery::all()).expect("query").entries;
    assert_eq!(left.len(), 4);
    assert!(left.iter().any(|e| e.source.actor() == "bob"));
}

/// A retention step failing at start (here, a trigger refusing the delete) does not fail
/// `open`: the pass is logged as failed, appends go on, and the next interval retries it.
#[test]
fn a_retention_step_failing_at_start_leaves_open_and_appends_working() {
    let dir = tempfile::tempdir().expect("tempdir");
    ten_entries(&open(dir.path()));
    raw(dir.path())
        .execute_batch(
            "CREATE TRIGGER no_trim BEFORE DELETE ON gateway_audit
             BEGIN SELECT RAISE(ABORT, 'trimming refused'); END;",
        )
        .expect("refuse deletes");
    let passes = Arc::new(Passes::default());
    let log = AuditLog::open(
        AuditConfig::new(dir.path().join("audit.db"))
            .with_retention(Retention::keep_all().with_max_entries(3))
            .with_retention_every(Duration::from_millis(20))
            .with_on_retention(passes.hear()),
    )
    .expect("a failing retention step does not fail open");
    eventually("the start-up pass to fail", || !passes.heard().is_empty());
    assert_eq!(passes.heard()[0], "failed audit_database");
    log.record(Entry::user("bob", Surface::Api, Kind::SecretRotate))
        .expect("a change after the failed pass");
    assert!(log.record_tool_call(Entry::tool_call(
        "claude-1",
        "read_file",
        "read",
        None,
        Outcome::Ok,
        Duration::from_micros(5),
    )));
    log.flush().expect("flush");
    assert_eq!(
        log.query(&AuditQuery::all()).expect("query").entries.len(),
        12
    );
    // The next interval's pass goes through once the delete is allowed.
    raw(dir.path())
        .execute_batch("DROP TRIGGER no_trim")
        .expect("allow deletes");
    eventually("a later pass to trim", || {
        passes.heard().iter().any(|l| l.starts_with("done 10"))
    });
    assert!(log.verify().expect("verify").is_intact());
}

#[test]
fn the_writer_survives_a_full_queue_and_reports_the_loss() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = AuditLog::open(
        AuditConfig::new(dir.path().join("audit.db"))
            .with_capacity(4)
            .with_max_batch(4)
            .with_max_delay(Duration::from_secs(3600)),
    )
    .expect("open");
    let call = |i: u32| {
        Entry::tool_call(
            "claude-1",
            format!("tool_{i}"),
            "read",
            None,
            Outcome::Ok,
            Duration::from_micros(5),
        )
    };
    // Hold the database's write lock from outside, so the writer blocks on its transaction.
    let blocker = raw(dir.path());
    blocker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the lock");
    for i in 0..4 {
        assert!(log.record_tool_call(call(i)));
    }
    eventually("the writer to take the full batch", || log.queued() == 0);
    for i in 4..8 {
        assert!(log.record_tool_call(call(i)), "room again");
    }
    let lost: Vec<bool> = (8..11).map(|i| log.record_tool_call(call(i))).collect();
    assert_eq!(
        lost,
        vec![false, false, false],
        "a full queue refuses, never blocks"
    );
    assert_eq!(log.lost(), 3);
    blocker.execute_batch("COMMIT").expect("release the lock");
    log.flush().expect("flush");

    let entries = log.query(&AuditQuery::all()).expect("query").entries;
    let tools: Vec<_> = entries
        .iter()
        .filter(|e| e.kind == Kind::ToolCall)
        .filter_map(|e| e.subject.clone())
        .collect();
    assert_eq!(
        tools,
        (0..8).map(|i| format!("tool_{i}")).collect::<Vec<_>>()
    );
    let lost = log
        .query(&AuditQuery::all().kind(Kind::EntriesLost))
        .expect("query")
        .entries;
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].source.source_type(), SourceType::System);
    assert!(
        lost[0].detail.as_deref().is_some_and(
            |d| d.starts_with("3 tool-call entries lost: 3 because the queue was full")
        ),
        "{:?}",
        lost[0]
    );
    // It keeps working afterwards.
    assert!(log.record_tool_call(call(99)));
    assert!(log.record_tool_call(Entry::secret_use(
        "claude-1",
        "gitea-token",
        3,
        "gitea",
        "req-17",
        Some("fp:1a2b".into())
    )));
    log.flush().expect("flush");
    assert_eq!(
        log.query(&AuditQuery::all()).expect("query").entries.len(),
        11
    );
    let used = log
        .query(&AuditQuery::all().kind(Kind::SecretUse).agent("claude-1"))
        .expect("query")
        .entries;
    assert_eq!(used.len(), 1);
    assert_eq!(used[0].subject.as_deref(), Some("gitea-token v3"));
    assert_eq!(used[0].change.digest.as_deref(), Some("fp:1a2b"));
    assert_eq!(
        used[0].detail.as_deref(),
        Some("injected into upstream gitea, request req-17")
    );
    assert!(log.verify().expect("verify").is_intact());
    assert_eq!(log.lost(), 3);
}

#[test]
fn a_change_that_cannot_be_written_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(dir.path());
    raw(dir.path())
        .execute_batch("DROP TABLE gateway_audit")
        .expect("break the table");
    let err = log
        .record(Entry::user("alice", Surface::Api, Kind::SecretRevoke).subject("gitea-token"))
        .expect_err("a failed write fails the operation");
    assert_eq!(err.code(), "audit_database");
    assert!(log.query(&AuditQuery::all()).is_err());
}

#[test]
fn concurrent_recorders_keep_one_valid_chain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = AuditLog::open(AuditConfig::new(dir.path().join("audit.db")).with_max_batch(16))
        .expect("open");
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for i in 0..150 {
                    if i % 10 == 0 {
                        log.record(
                            Entry::user(format!("admin-{t}"), Surface::Api, Kind::RulesChange)
                                .project(format!("p{t}")),
                        )
                        .expect("sync record");
                    } else {
                        assert!(log.record_tool_call(Entry::tool_call(
                            format!("agent-{t}"),
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
        .collect();
    for t in threads {
        t.join().expect("recorder thread");
    }
    log.flush().expect("flush");
    let v = log.verify().expect("verify");
    assert!(v.is_intact(), "{v:?}");
    assert_eq!((v.checked, v.head_id), (900, 900));
    assert_eq!(log.lost(), 0);
    for t in 0..6 {
        let q = AuditQuery::all().actor(format!("agent-{t}")).limit(1000);
        assert_eq!(log.query(&q).expect("query").entries.len(), 135);
    }
}

#[test]
fn entries_queued_before_drop_are_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let log = AuditLog::open(
            AuditConfig::new(dir.path().join("audit.db")).with_max_delay(Duration::from_secs(3600)),
        )
        .expect("open");
        for i in 0..5 {
            assert!(log.record_tool_call(Entry::tool_call(
                "a",
                "t",
                "read",
                None,
                Outcome::Ok,
                Duration::from_micros(i)
            )));
        }
    }
    let log = open(dir.path());
    assert_eq!(
        log.query(&AuditQuery::all()).expect("query").entries.len(),
        5
    );
    assert!(log.verify().expect("verify").is_intact());
}

fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9_-]{1,12}", "\\PC{0,24}"]
}

fn arb_entry() -> impl Strategy<Value = (Entry, bool)> {
    let kind = prop::sample::select(Kind::ALL.to_vec());
    let surface = prop::sample::select(vec![Surface::Panel, Surface::Api, Surface::Cli]);
    (
        0u8..5,
        arb_text(),
        kind,
        surface,
        prop::option::of(arb_text()),
        prop::option::of(arb_text()),
        prop::option::of(arb_text()),
        any::<bool>(),
    )
        .prop_map(|(which, name, kind, surface, project, rev, code, queued)| {
            let mut e = match which {
                0 => Entry::user(name, surface, kind),
                1 => Entry::agent(name, kind)
                    .session("s")
                    .client("c", rev.clone()),
                2 => Entry::vendor(name, rev.clone(), kind),
                3 => Entry::system(name, kind),
                _ => Entry::tool_call(
                    name,
                    "tool",
                    "write",
                    rev.clone(),
                    Outcome::Ok,
                    Duration::from_micros(3),
                ),
            };
            if let Some(p) = project {
                e = e.project(p);
            }
            if let Some(r) = rev {
                e = e.change(Change::revisions(r.clone(), r));
            }
            if let Some(c) = code {
                e = e.outcome(Outcome::error(c));
            }
            (e, queued)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn random_entries_keep_the_chain_valid(entries in prop::collection::vec(arb_entry(), 1..24)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = open(dir.path());
        for (e, queued) in &entries {
            if *queued {
                prop_assert!(log.record_tool_call(e.clone()));
            } else {
                log.record(e.clone()).expect("record");
            }
        }
        log.flush().expect("flush");
        let v = log.verify().expect("verify");
        prop_assert!(v.is_intact(), "{:?}", v);
        prop_assert_eq!(v.checked, entries.len() as u64);
        let stored = log.query(&AuditQuery::all().limit(100)).expect("query").entries;
        prop_assert_eq!(stored.len(), entries.len());
        for (s, (e, _)) in stored.iter().zip(&entries) {
            prop_assert_eq!(&s.source, e.source());
            prop_assert_eq!(s.kind, e.kind());
        }
    }
}
