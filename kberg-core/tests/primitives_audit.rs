//! The audit log: what an event records (digests of redacted arguments, tickets, commit-token
//! fingerprints, phase, scope), the JSON Lines and SQLite sinks and their flush policy, and a
//! crash test: a child process (this test binary, re-executed with an environment variable)
//! writes events and is killed with SIGKILL; the file is torn at most in its last line and
//! holds every event flushed before the kill.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kberg_testkit::eventually;

use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct Login {
    user: String,
    password: String,
}

fn registry_with(builder: ToolRegistryBuilder) -> ToolRegistry {
    let tools = builder.build();
    let cap = WriteCapability::new("accounts.login", "Log in");
    tools.declare(cap.clone()).unwrap();
    tools
        .register(
            ToolBuilder::new("login")
                .write(cap)
                .sensitive("password")
                .handler(|a: Login, _c| async move {
                    if a.password.is_empty() {
                        return Err(ToolError::failed("a password is required"));
                    }
                    Ok(ToolOutput::text(format!("hi {}", a.user)))
                }),
        )
        .unwrap();
    tools
}

fn user(id: &str) -> Caller {
    Caller::new(Principal::new(id).with_grants(Grants::of(["accounts.login"])))
}

async fn login(tools: &ToolRegistry, who: &str, password: &str) {
    tools
        .call(
            &user(who),
            "login",
            json!({"user": who, "password": password}),
            CallOptions::default(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn events_carry_a_redacted_argument_digest() {
    let sink = Arc::new(MemoryAuditSink::new());
    let tools = registry_with(ToolRegistry::builder().audit_sink(sink.clone()));
    login(&tools, "ann", "hunter2").await;
    login(&tools, "ann", "letmein").await;
    login(&tools, "bob", "hunter2").await;
    let _ = tools
        .call(&user("ann"), "nope", json!({}), CallOptions::default())
        .await;
    let ev = sink.events();
    assert_eq!(ev.len(), 4);
    let sensitive = ["password".to_string()];
    let expected = argument_digest(&json!({"user": "ann", "password": "hunter2"}), &sensitive);
    assert_eq!(ev[0].args_digest.as_deref(), Some(expected.as_str()));
    // The secret does not change the digest; the user does.
    assert_eq!(ev[0].args_digest, ev[1].args_digest);
    assert_ne!(ev[0].args_digest, ev[2].args_digest);
    // ...and the digest is not the unredacted one.
    assert_ne!(
        ev[0].args_digest.as_deref(),
        Some(argument_digest(&json!({"user": "ann", "password": "hunter2"}), &[]).as_str())
    );
    assert_eq!(ev[0].phase, CallPhase::Direct);
    assert_eq!(ev[3].kind, "unknown");
    assert_eq!(ev[3].args_digest, None);
    for e in &ev {
        assert!(!e.to_record().to_string().contains("hunter2"));
    }
}

#[tokio::test]
async fn events_name_tickets_commit_tokens_and_scope() {
    let sink = Arc::new(MemoryAuditSink::new());
    let tools = ToolRegistry::builder()
        .confirm_policy(|_s: &ToolSpec, a: &Value, _c: &Caller| {
            (a["n"].as_u64() > Some(50)).then(|| ConfirmRequest::new("big"))
        })
        .audit_sink(sink.clone())
        .build();
    let cap = WriteCapability::new("w", "write");
    tools.declare(cap.clone()).unwrap();
    tools
        .declare_scope(ScopeSpec::new("inbox", "The inbox"))
        .unwrap();
    tools
        .register(
            ToolBuilder::new("purge")
                .write(cap)
                .previews()
                .scope_field("box")
                .raw_handler(
                    json!({"type": "object", "properties": {"box": {"type": "string"}, "n": {"type": "integer"}}}),
                    |_a, _c| async { Ok(ToolOutput::text("done")) },
                ),
        )
        .unwrap();
    let who = Caller::new(Principal::new("agent").with_grants(Grants::of(["w"])))
        .with_scopes(ScopeSet::any().with_current("inbox"));
    let preview = tools
        .call(&who, "purge", json!({"n": 60}), CallOptions::default())
        .await
        .unwrap();
    let token = preview.structured.unwrap()[COMMIT_TOKEN_FIELD]
        .as_str()
        .unwrap()
        .to_string();
    let e = tools
        .call(
            &who,
            "purge",
            json!({"n": 60, "commit_token": token}),
            CallOptions::default(),
        )
        .await
        .unwrap_err();
    let ticket = e.details()["ticket"].as_str().unwrap().to_string();
    let admin = Principal::new("alice").with_grants(Grants::of(["kberg.confirm"]));
    tools.tickets().approve(&ticket, &admin).await.unwrap();
    let ev = sink.events();
    assert_eq!(ev.len(), 3);
    assert_eq!(ev[0].phase, CallPhase::Preview);
    assert_eq!(ev[1].phase, CallPhase::Commit);
    assert_eq!(ev[2].phase, CallPhase::Commit);
    let fp = ev[0].commit_token.clone().unwrap();
    assert!(fp.starts_with("ct:"));
    assert_eq!(ev[1].commit_token.as_deref(), Some(fp.as_str()));
    assert_eq!(
        ev[1].outcome,
        AuditOutcome::Error(ErrorCode::PendingHumanConfirm)
    );
    assert_eq!(ev[1].ticket.as_deref(), Some(ticket.as_str()));
    assert_eq!(ev[2].ticket.as_deref(), Some(ticket.as_str()));
    assert_eq!(ev[2].approved_by.as_deref(), Some("alice"));
    assert_eq!(ev[2].principal, "agent");
    assert_eq!(ev[2].outcome, AuditOutcome::Ok);
    for e in &ev {
        assert_eq!(e.scope.as_deref(), Some("inbox"));
        assert!(!e.to_record().to_string().contains(&token));
        // Preview and commit are digests of the same arguments (the token is not part of them).
        assert_eq!(e.args_digest, ev[0].args_digest);
    }
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn jsonl_sink_writes_one_record_per_line_and_appends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let sink = Arc::new(JsonlAuditSink::open(&path, FlushPolicy::default()).unwrap());
    let tools = registry_with(ToolRegistry::builder().audit_sink(sink.clone()));
    login(&tools, "ann", "hunter2").await;
    sink.flush().unwrap();
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 1);
    let r = &lines[0];
    assert_eq!(r["principal"], "ann");
    assert_eq!(r["tool"], "login");
    assert_eq!(r["kind"], "write");
    assert_eq!(r["capability"], "accounts.login");
    assert_eq!(r["outcome"], "ok");
    assert_eq!(r["code"], Value::Null);
    assert_eq!(r["phase"], "direct");
    assert_eq!(r["args_digest"].as_str().unwrap().len(), 64);
    assert!(r["at_ms"].as_u64().unwrap() > 0);
    // Dropping the sink flushes; reopening appends.
    drop(tools);
    drop(sink);
    let sink = Arc::new(JsonlAuditSink::open(&path, FlushPolicy::default()).unwrap());
    let tools = registry_with(ToolRegistry::builder().audit_sink(sink.clone()));
    let _ = tools
        .call(
            &Caller::new(Principal::new("eve")),
            "login",
            json!({}),
            CallOptions::default(),
        )
        .await;
    sink.flush().unwrap();
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["outcome"], "error");
    assert_eq!(lines[1]["code"], "capability_required");
    assert!(!std::fs::read_to_string(&path).unwrap().contains("hunter2"));
}

/// A registry logging to a JSON Lines file at `path` under `policy`, after `n` logins.
async fn logged(path: &Path, policy: FlushPolicy, n: usize) -> (ToolRegistry, Arc<JsonlAuditSink>) {
    let sink = Arc::new(JsonlAuditSink::open(path, policy).unwrap());
    let tools = registry_with(ToolRegistry::builder().audit_sink(sink.clone()));
    for i in 0..n {
        login(&tools, &format!("u{i}"), "pw").await;
    }
    (tools, sink)
}

#[tokio::test]
async fn drop_flushes_what_the_policy_held_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let policy = FlushPolicy::default()
        .with_max_events(1_000_000)
        .with_max_delay(Duration::from_secs(3600));
    let (tools, sink) = logged(&path, policy, 25).await;
    drop(tools);
    drop(sink);
    assert_eq!(read_lines(&path).len(), 25);
}

#[tokio::test]
async fn count_and_delay_both_trigger_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    // Count: 5 events with an hour-long delay are flushed because there are 5.
    let path = dir.path().join("count.jsonl");
    let policy = FlushPolicy::default()
        .with_max_events(5)
        .with_max_delay(Duration::from_secs(3600));
    let (_tools, _sink) = logged(&path, policy, 5).await;
    eventually("five flushed lines", || {
        std::fs::read_to_string(&path).unwrap().lines().count() == 5
    });
    // Delay: one event with a huge count threshold is flushed once it is old enough.
    let path = dir.path().join("delay.jsonl");
    let policy = FlushPolicy::default()
        .with_max_events(1_000_000)
        .with_max_delay(Duration::from_millis(20));
    let sink = Arc::new(JsonlAuditSink::open(&path, policy).unwrap());
    let tools = registry_with(ToolRegistry::builder().audit_sink(sink.clone()));
    login(&tools, "late", "pw").await;
    eventually("the delayed line", || {
        std::fs::read_to_string(&path).unwrap().lines().count() == 1
    });
}

#[tokio::test]
async fn overflow_drops_are_counted_in_gap_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let policy = FlushPolicy::default()
        .with_capacity(1)
        .with_overflow(Overflow::Drop);
    let total = 5_000;
    let (tools, sink) = logged(&path, policy, total as usize).await;
    drop(tools);
    drop(sink);
    let lines = read_lines(&path);
    let written = lines.iter().filter(|l| l.get("tool").is_some()).count() as u64;
    let dropped: u64 = lines
        .iter()
        .filter_map(|l| l.pointer("/gap/dropped").and_then(Value::as_u64))
        .sum();
    assert_eq!(
        written + dropped,
        total,
        "every event is written or counted"
    );
}

#[test]
fn a_torn_last_line_is_cut_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    std::fs::write(&path, "{\"a\":1}\n{\"b\":2}\n{\"c\":").unwrap();
    drop(JsonlAuditSink::open(&path, FlushPolicy::default()).unwrap());
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "{\"a\":1}\n{\"b\":2}\n"
    );
    // A file that is nothing but a partial line (longer than one read block) is emptied.
    std::fs::write(&path, "x".repeat(10_000)).unwrap();
    drop(JsonlAuditSink::open(&path, FlushPolicy::default()).unwrap());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    // A directory is not a log file.
    assert!(matches!(
        JsonlAuditSink::open(dir.path(), FlushPolicy::default()),
        Err(AuditLogError::Io(_))
    ));
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_sink_inserts_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.db");
    let sink = Arc::new(SqliteAuditSink::open(&path, FlushPolicy::default()).unwrap());
    let tools = registry_with(ToolRegistry::builder().audit_sink(sink.clone()));
    login(&tools, "ann", "hunter2").await;
    let _ = tools
        .call(
            &Caller::new(Principal::new("eve")),
            "login",
            json!({}),
            CallOptions::default(),
        )
        .await;
    sink.flush().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let rows: Vec<(String, String, Option<String>, Option<String>)> = conn
        .prepare("SELECT principal, outcome, code, args_digest FROM audit_events ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].0, "ann");
    assert_eq!(rows[0].1, "ok");
    assert_eq!(rows[0].3.as_ref().unwrap().len(), 64);
    assert_eq!(rows[1].2.as_deref(), Some("capability_required"));
    // A directory is not a database.
    assert!(matches!(
        SqliteAuditSink::open(dir.path(), FlushPolicy::default()),
        Err(AuditLogError::Database(_))
    ));
}

// ---- crash test -------------------------------------------------------------------------

const CHILD_ENV: &str = "KBERG_AUDIT_CRASH_CHILD";
const FLUSHED: u64 = 300;

/// Records to several sinks.
struct Fanout(Vec<Arc<dyn AuditSink>>);

impl AuditSink for Fanout {
    fn record(&self, e: &AuditEvent) {
        for s in &self.0 {
            s.record(e);
        }
    }
}

/// The child: write `FLUSHED` events, flush, say so, then keep writing until killed.
fn crash_child(dir: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        // Nothing is flushed by count or time: only the explicit flush and full buffers write.
        let policy = FlushPolicy::default()
            .with_max_events(usize::MAX)
            .with_max_delay(Duration::from_secs(3600))
            .with_overflow(Overflow::Block);
        let jsonl = Arc::new(JsonlAuditSink::open(dir.join("audit.jsonl"), policy).unwrap());
        #[allow(unused_mut)]
        let mut sinks: Vec<Arc<dyn AuditSink>> = vec![jsonl.clone()];
        #[cfg(feature = "sqlite")]
        let db = Arc::new(SqliteAuditSink::open(dir.join("audit.db"), policy).unwrap());
        #[cfg(feature = "sqlite")]
        sinks.push(db.clone());
        let tools = registry_with(ToolRegistry::builder().audit_sink(Arc::new(Fanout(sinks))));
        for i in 0..FLUSHED {
            login(&tools, &i.to_string(), "hunter2").await;
        }
        jsonl.flush().unwrap();
        #[cfg(feature = "sqlite")]
        db.flush().unwrap();
        let tmp = dir.join("flushed.tmp");
        std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(FLUSHED.to_string().as_bytes()))
            .unwrap();
        std::fs::rename(&tmp, dir.join("flushed")).unwrap();
        // Keep writing until the parent kills us (bounded, in case the parent is gone).
        let started = Instant::now();
        let mut i = FLUSHED;
        while started.elapsed() < Duration::from_secs(120) {
            login(&tools, &i.to_string(), "hunter2").await;
            i += 1;
        }
    });
    std::process::exit(3);
}

/// Kills the child however the test ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn principals_are_a_prefix(seqs: &[u64]) -> usize {
    for (i, s) in seqs.iter().enumerate() {
        assert_eq!(*s, i as u64, "events are written in order with no hole");
    }
    seqs.len()
}

#[test]
fn a_killed_writer_loses_at_most_the_unflushed_tail() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        crash_child(&PathBuf::from(dir));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "a_killed_writer_loses_at_most_the_unflushed_tail",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let log = dir.path().join("audit.jsonl");
    eventually("the child's flush", || {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("the child exited early: {status}");
        }
        dir.path().join("flushed").exists()
    });
    let flushed_len = std::fs::metadata(&log).unwrap().len();
    // Let it write well past the flushed point (its 64 KiB buffer spills mid-line), then kill.
    eventually("the child writing on", || {
        std::fs::metadata(&log).unwrap().len() > flushed_len + 200_000
    });
    child.0.kill().unwrap();
    child.0.wait().unwrap();

    let bytes = std::fs::read(&log).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let (complete, tail) = match text.rfind('\n') {
        Some(i) => (&text[..=i], &text[i + 1..]),
        None => ("", &text[..]),
    };
    let seqs: Vec<u64> = complete
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("every complete line is a record");
            v["principal"].as_str().unwrap().parse().unwrap()
        })
        .collect();
    let n = principals_are_a_prefix(&seqs);
    assert!(
        n as u64 >= FLUSHED,
        "only {n} of {FLUSHED} flushed events survived"
    );
    assert!(
        serde_json::from_str::<Value>(tail).is_err() || tail.is_empty(),
        "the tail is at most one partial record"
    );
    assert!(!text.contains("hunter2"));

    // Reopening cuts the partial line and appends cleanly after the last whole record.
    let sink = JsonlAuditSink::open(&log, FlushPolicy::default()).unwrap();
    let sink = Arc::new(sink);
    let tools = registry_with(ToolRegistry::builder().audit_sink(sink.clone()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(login(&tools, "after", "pw"));
    sink.flush().unwrap();
    let lines = read_lines(&log);
    assert_eq!(lines.len(), n + 1);
    assert_eq!(lines[n]["principal"], "after");

    #[cfg(feature = "sqlite")]
    {
        let conn = rusqlite::Connection::open(dir.path().join("audit.db")).unwrap();
        let ok: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
        let seqs: Vec<u64> = conn
            .prepare("SELECT principal FROM audit_events ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|p| p.unwrap().parse().unwrap())
            .collect();
        let m = principals_are_a_prefix(&seqs);
        assert!(m as u64 >= FLUSHED, "only {m} committed rows survived");
    }
}

#[tokio::test]
async fn block_overflow_waits_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let policy = FlushPolicy::default()
        .with_capacity(2)
        .with_max_events(1_000)
        .with_overflow(Overflow::Block);
    let (_tools, sink) = logged(&path, policy, 1_000).await;
    sink.flush().unwrap();
    assert_eq!(sink.dropped(), 0);
    let lines = read_lines(&path);
    assert_eq!(lines.len(), 1_000);
    assert!(
        lines
            .iter()
            .enumerate()
            .all(|(i, l)| l["principal"] == format!("u{i}"))
    );
}

/// A name no tool can have (longer than a name may be) is quoted cut, in the refusal and in the
/// audit record: the record kept whatever the caller sent, megabytes of it per call, and the
/// refusal said it three times.
#[tokio::test]
async fn an_impossible_tool_name_is_recorded_and_quoted_cut() {
    let sink = Arc::new(MemoryAuditSink::new());
    let tools = ToolRegistry::builder().audit_sink(sink.clone()).build();
    let long = "é".repeat(100_000);
    let e = tools
        .call(&user("ann"), &long, json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownTool);
    assert!(e.tool().len() < 200, "{}", e.tool().len());
    assert!(e.tool().starts_with("éé") && e.tool().ends_with("..."));
    assert!(e.details().to_string().len() < 1_000);
    let ev = sink.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].tool, e.tool());
    // A name that could be a tool's is kept as sent.
    let fine = "n".repeat(128);
    let e = tools
        .call(&user("ann"), &fine, json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.tool(), fine);
    assert_eq!(sink.events()[1].tool, fine);
}
