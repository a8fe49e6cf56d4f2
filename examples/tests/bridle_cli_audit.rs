//! `bridle audit verify|query|export --url` against a running `bridle serve`: the command line
//! reads the audit log through the admin API. A change made through the command line is in the
//! log the moment its command returns (queried right after, no waiting: the gateway recorded it
//! as `user` through the `cli` surface before it answered), an export holds what the query
//! shows, and after a hand edit of a row `verify` exits 1 naming that row. The bad paths: a
//! wrong credential, a filter the API refuses, and a gateway that is not there.
//!
//! With the audit log failing, a change still stands and the command line says it is not
//! recorded.
//!
//! Offline (no `--url`) with `database: postgres://...` in `bridle.yaml`, the same commands read
//! the log in that database (a throwaway PostgreSQL cluster on loopback), never a local
//! `audit.db`; a row edited on the server is named, and a wrong password is a clear error that
//! does not show it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod bridle_support;
#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use bridle_support::*;
use serde_json::Value;

const CLAUDE_TOKEN: &str = "claude-secret-cli-audit-0123";
const DEMO: &str = "schema_version: 2
revision: 1
project:
  name: Demo
";

/// Lays out a data directory with agent `claude` and project `demo`; returns its `bridle.yaml`
/// for the test to extend.
fn demo_data_dir(dir: &std::path::Path) -> String {
    lay_out(
        dir,
        &[TestAgent {
            name: "claude",
            agent_type: "claude",
            token: CLAUDE_TOKEN,
            projects: &["demo"],
        }],
        &[("demo", DEMO)],
    );
    std::fs::read_to_string(dir.join("bridle.yaml")).unwrap()
}

/// `bridle serve` over the demo data directory with one more agent, `bot` (vault tokens only),
/// and the admin access of its first start.
fn serve_with_bot(dir: &std::path::Path) -> (Server, AdminAccess) {
    let mut yaml = demo_data_dir(dir);
    yaml.push_str("  bot:\n    type: claude\n    projects: [demo]\n");
    std::fs::write(dir.join("bridle.yaml"), yaml).unwrap();
    let server = Server::start(dir);
    let admin = AdminAccess::from_first_start(&server, dir);
    (server, admin)
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn the_audit_log_is_read_through_the_running_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (server, admin) = serve_with_bot(dir);

    let out = succeeded(&admin.run(dir, &["audit", "verify"]), "audit verify");
    assert!(out.starts_with("audit log intact: "), "{out}");

    // A change through the command line is in the log as soon as its command returns.
    let issued = succeeded(
        &admin.run(dir, &["agents", "token", "issue", "bot"]),
        "agents token issue",
    );
    let token = issued.lines().find(|l| l.starts_with("bdl_")).unwrap();
    let page = json(&succeeded(
        &admin.run(
            dir,
            &[
                "audit", "query", "--agent", "bot", "--source", "user", "--json",
            ],
        ),
        "audit query",
    ));
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!(items[0]["kind"], "agent_rotate", "{page}");
    assert_eq!(items[0]["source"]["surface"], "cli", "{page}");
    assert_eq!(items[0]["source"]["admin"], "admin", "{page}");

    // The plain form: one line an entry, the surface beside the admin.
    let lines = succeeded(
        &admin.run(dir, &["audit", "query", "--agent", "bot", "--newest-first"]),
        "audit query (lines)",
    );
    assert!(lines.contains("user:admin@cli agent_rotate"), "{lines}");

    // The export holds every entry the query shows, and no token.
    let file = dir.join("export.jsonl");
    let out = admin.run(
        dir,
        &[
            "audit",
            "export",
            "--source",
            "user",
            "--out",
            file.to_str().unwrap(),
        ],
    );
    succeeded(&out, "audit export");
    let exported = std::fs::read_to_string(&file).unwrap();
    let all_user = json(&succeeded(
        &admin.run(
            dir,
            &[
                "audit", "query", "--source", "user", "--json", "--limit", "1000",
            ],
        ),
        "audit query (user)",
    ));
    assert_eq!(
        exported.lines().count(),
        all_user["items"].as_array().unwrap().len(),
        "{exported}"
    );
    assert!(!exported.contains(token), "a token leaked into the export");
    let to_stdout = succeeded(
        &admin.run(dir, &["audit", "export", "--source", "user"]),
        "audit export (stdout)",
    );
    assert_eq!(to_stdout, exported);

    // Bad paths: a filter the API refuses, a wrong credential, no gateway at the URL.
    let why = failed(
        &admin.run(dir, &["audit", "query", "--kind", "no_such_kind"]),
        "a bad kind",
    );
    assert!(why.contains("400"), "{why}");
    let wrong = dir.join("wrong-token");
    std::fs::write(&wrong, "bda_not-the-credential").unwrap();
    let why = failed(
        &admin.with_token_file(wrong).run(dir, &["audit", "verify"]),
        "a wrong credential",
    );
    assert!(why.contains("401"), "{why}");
    let gone = AdminAccess {
        url: "http://127.0.0.1:9/admin/api/v1".into(),
        token_file: admin.token_file.clone(),
    };
    let why = failed(&gone.run(dir, &["audit", "verify"]), "no gateway");
    assert!(
        why.contains("cannot be reached: nothing listens there"),
        "{why}"
    );
    assert!(why.contains("at http://127.0.0.1:9/admin/api/v1/"), "{why}");

    // Someone edits the change's row by hand: verify through the gateway names that row.
    let id = items[0]["id"].as_u64().unwrap();
    let db = rusqlite::Connection::open(dir.join("audit.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE gateway_audit SET actor = 'mallory' WHERE id = ?1",
            [id as i64],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);
    let out = admin.run(dir, &["audit", "verify"]);
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!out.status.success(), "{printed}");
    assert!(
        printed.starts_with(&format!("audit log BROKEN at entry {id} (edited)")),
        "{printed}"
    );
    let report = json(&String::from_utf8_lossy(
        &admin.run(dir, &["audit", "verify", "--json"]).stdout,
    ));
    assert_eq!(report["intact"], false, "{report}");
    assert_eq!(report["first_break_id"], id, "{report}");
    drop(server);
}

/// With every audit insert failing (a trigger on `audit.db`), a change through the command line
/// still stands and says it is not recorded: a token is printed with a warning on stderr (it
/// cannot be shown again), any other change fails naming itself as made; no value is printed.
#[test]
fn a_change_the_audit_log_cannot_record_is_reported_by_the_command_line() {
    const CANARY: &str = "canary-cli-audit-failure-61f0c2";
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (server, admin) = serve_with_bot(dir);
    rusqlite::Connection::open(dir.join("audit.db"))
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER fail_audit BEFORE INSERT ON gateway_audit
             BEGIN SELECT RAISE(ABORT, 'the disk is full'); END;",
        )
        .unwrap();

    let out = admin.run(dir, &["agents", "token", "issue", "bot"]);
    let printed = succeeded(&out, "agents token issue");
    let token = printed.lines().find(|l| l.starts_with("bdl_")).unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("warning: the token was made, but the audit log could not record it"),
        "{said}"
    );
    assert!(!said.contains(token));
    let out = admin.run(dir, &["agents", "token", "rotate", "bot"]);
    succeeded(&out, "agents token rotate");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("warning: the rotation was made"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let value = dir.join("value.txt");
    std::fs::write(&value, CANARY).unwrap();
    let out = admin.run(
        dir,
        &[
            "secrets",
            "create",
            "gitea.token",
            "--from-file",
            value.to_str().unwrap(),
        ],
    );
    let why = failed(&out, "secrets create with the audit log broken");
    assert!(why.contains("500 audit_unavailable"), "{why}");
    assert!(why.contains("the secret was made"), "{why}");
    assert!(!why.contains(CANARY) && !String::from_utf8_lossy(&out.stdout).contains(CANARY));
    let listed = json(&succeeded(
        &admin.run(dir, &["secrets", "list", "--json"]),
        "secrets list",
    ));
    assert!(listed.to_string().contains("gitea.token"), "{listed}");
    let logged = server.logged();
    assert!(
        logged.contains("an audit entry could not be written"),
        "{logged}"
    );
    assert!(!logged.contains(CANARY), "the value reached the log");
    assert!(!logged.contains(token), "the token reached the log");
    drop(server);
}

#[test]
fn offline_audit_reads_the_postgres_log_the_configuration_names() {
    use bridle_gateway::audit::{AuditConfig, AuditLog, Entry, Kind, Surface};
    use bridle_rules::db::postgres::PgDatabase;

    let cluster = pg_cluster::PgCluster::shared();
    let dbname = cluster.create_database();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut yaml = demo_data_dir(dir);
    yaml.push_str(&format!(
        "database: {}\ndatabase_password: file:pg-password\n",
        cluster.url(&dbname)
    ));
    std::fs::write(dir.join("bridle.yaml"), yaml).unwrap();
    std::fs::write(dir.join("secrets/pg-password"), pg_cluster::PASSWORD).unwrap();

    // What the replicas recorded, in the database.
    let db = PgDatabase::connect(&cluster.settings(&dbname)).unwrap();
    let log = AuditLog::open_postgres(db.clone(), AuditConfig::new(dir.join("unused.db"))).unwrap();
    log.record(Entry::user("alice", Surface::Api, Kind::SecretRotate).subject("gitea-token"))
        .unwrap();
    log.record(Entry::agent("claude", Kind::Proposal).project("demo"))
        .unwrap();
    drop(log);

    let out = succeeded(&run_bridle(dir, &["audit", "verify"]), "audit verify");
    assert!(out.starts_with("audit log intact: 2 entries"), "{out}");
    let page = json(&succeeded(
        &run_bridle(dir, &["audit", "query", "--actor", "alice", "--json"]),
        "audit query",
    ));
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{page}");
    assert_eq!(entries[0]["subject"], "gitea-token", "{page}");
    let exported = succeeded(&run_bridle(dir, &["audit", "export"]), "audit export");
    assert_eq!(exported.lines().count(), 2, "{exported}");
    assert!(
        !dir.join("audit.db").exists(),
        "no local audit log was opened or created"
    );

    // A row edited on the server: verify exits 1 naming it.
    db.client()
        .unwrap()
        .batch("UPDATE gateway_audit SET actor = 'mallory' WHERE id = 1")
        .unwrap();
    let out = run_bridle(dir, &["audit", "verify"]);
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!out.status.success(), "{printed}");
    assert!(
        printed.starts_with("audit log BROKEN at entry 1 (edited)"),
        "{printed}"
    );

    // A wrong password is a clear error without the password.
    std::fs::write(dir.join("secrets/pg-password"), "not-the-pg-password").unwrap();
    let why = failed(&run_bridle(dir, &["audit", "verify"]), "a wrong password");
    assert!(why.contains("password"), "{why}");
    assert!(!why.contains("not-the-pg-password"), "{why}");
    assert!(!dir.join("audit.db").exists());
}

#[test]
fn a_page_size_outside_one_to_a_thousand_is_refused_offline_as_through_the_api() {
    // The admin API refuses `limit` 0 and over 1000; offline the same command must not quietly
    // read another page size instead.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    demo_data_dir(dir);
    use bridle_gateway::audit::{AuditConfig, AuditLog, Entry, Kind, Surface};
    let log = AuditLog::open(AuditConfig::new(dir.join("audit.db"))).unwrap();
    log.record(Entry::user("alice", Surface::Cli, Kind::SecretRotate))
        .unwrap();
    drop(log);
    let out = run_bridle(dir, &["audit", "query", "--limit", "1000"]);
    assert!(succeeded(&out, "audit query --limit 1000").contains("alice"));
    for limit in ["0", "1001"] {
        let out = run_bridle(dir, &["audit", "query", "--limit", limit]);
        let e = failed(&out, &format!("audit query --limit {limit}"));
        assert!(e.contains("--limit"), "{e}");
        assert!(e.contains("1..=1000"), "{e}");
    }
}

/// Retention in `bridle.yaml` is the running gateway's to apply: the offline commands, the
/// reads (`verify`, `query`, `export`) and a change recording itself, beside it or with it
/// stopped, remove nothing.
#[test]
fn offline_commands_apply_no_retention() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut yaml = demo_data_dir(dir);
    use bridle_gateway::audit::{AuditConfig, AuditLog, Entry, Kind, Surface};
    let log = AuditLog::open(AuditConfig::new(dir.join("audit.db"))).unwrap();
    for _ in 0..5 {
        log.record(Entry::user("alice", Surface::Cli, Kind::SecretRotate))
            .unwrap();
    }
    drop(log);
    yaml.push_str("audit:\n  max_entries: 2\n");
    std::fs::write(dir.join("bridle.yaml"), yaml).unwrap();
    let rows = || -> i64 {
        rusqlite::Connection::open(dir.join("audit.db"))
            .unwrap()
            .query_row("SELECT COUNT(*) FROM gateway_audit", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(rows(), 5);
    succeeded(&run_bridle(dir, &["audit", "verify"]), "audit verify");
    succeeded(&run_bridle(dir, &["audit", "query"]), "audit query");
    succeeded(&run_bridle(dir, &["audit", "export"]), "audit export");
    assert_eq!(rows(), 5, "a read removed entries");
    succeeded(
        &run_bridle(dir, &["agents", "token", "issue", "claude"]),
        "agents token issue",
    );
    assert_eq!(rows(), 6, "a change recorded offline removed entries");
}

/// What a server answers reaches the terminal only as printable text: an admin API (or anything
/// answering at `--url`) whose problem detail holds terminal escape sequences or a carriage
/// return has them written as escapes, so they cannot clear the screen or rewrite the line a
/// person reads. Line breaks of the command's own message stay.
#[test]
fn a_servers_answer_reaches_the_terminal_without_control_characters() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answering = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            request.extend_from_slice(&buf[..n]);
        }
        let body = r#"{"code":"denied","detail":"no\u001b[2J\u001b]0;owned\u0007\rfaked line"}"#;
        write!(
            conn,
            "HTTP/1.1 403 Forbidden\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
    });
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    demo_data_dir(dir);
    let token_file = dir.join("admin-token");
    std::fs::write(&token_file, "bda_not_checked_here").unwrap();
    let admin = AdminAccess { url, token_file };
    let why = failed(&admin.run(dir, &["audit", "verify"]), "a refusal");
    answering.join().unwrap();
    assert!(why.contains("denied"), "{why}");
    assert!(
        !why.chars().any(|c| c.is_control() && c != '\n'),
        "a control character reached the terminal: {why:?}"
    );
    assert!(why.contains("\\u{1b}[2J"), "{why:?}");
}

/// A server at `--url` whose list pages name the same next cursor again (a proxy answering
/// from a cache, a server in a bad state) would have a listing command ask for that page
/// for ever, holding every item it was given; the command stops at the repeated cursor and
/// says so.
#[test]
fn a_list_whose_pages_repeat_a_cursor_ends_with_an_error() {
    use std::io::{Read, Write};
    const PAGES: usize = 8;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answering = std::thread::spawn(move || {
        for _ in 0..PAGES {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
            }
            let body =
                r#"{"items":[{"name":"a","agent":"a","status":"active"}],"next_cursor":"c1"}"#;
            write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    demo_data_dir(dir);
    let token_file = dir.join("admin-token");
    std::fs::write(&token_file, "bda_not_checked_here").unwrap();
    let admin = AdminAccess { url, token_file };
    let why = failed(&admin.run(dir, &["secrets", "list"]), "a refusal");
    // The server answers a bounded number of pages (a command that follows the cursor
    // without end finds it gone after them); it is left waiting for the pages not asked for.
    drop(answering);
    assert!(why.contains("repeated"), "{why}");
}
