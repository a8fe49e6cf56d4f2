//! `bridle audit verify|query|export --url` against a running `bridle serve`: the command line
//! reads the audit log through the admin API. A change made through the command line is in the
//! log the moment its command returns (queried right after, no waiting: the gateway recorded it
//! as `user` through the `cli` surface before it answered), an export holds what the query
//! shows, and after a hand edit of a row `verify` exits 1 naming that row. The bad paths: a
//! wrong credential, a filter the API refuses, and a gateway that is not there.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod bridle_support;

use bridle_support::*;
use serde_json::Value;

const CLAUDE_TOKEN: &str = "claude-secret-cli-audit-0123";
const DEMO: &str = "schema_version: 2
revision: 1
project:
  name: Demo
";

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn the_audit_log_is_read_through_the_running_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
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
    let mut yaml = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
    yaml.push_str("  bot:\n    type: claude\n    projects: [demo]\n");
    std::fs::write(dir.join("bridle.yaml"), yaml).unwrap();
    let server = Server::start(dir);
    let admin = AdminAccess::from_first_start(&server, dir);

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
    assert!(why.contains("cannot be reached"), "{why}");

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
