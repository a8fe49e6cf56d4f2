//! The command line as a client of a running gateway's admin API: `bridle serve` starts the
//! admin API and prints its credential once; `bridle agents`, `bridle secrets` and `bridle
//! scope` with `--url` change the running gateway, which applies each change at once (a revoked
//! agent's live session is refused on its next call) and records it as the admin through the
//! `cli` surface; `bridle audit verify|query|export` read that record offline.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod bridle_support;

use bridle_rules::{AgentCatalog, RulesStore};
use bridle_support::*;
use kberg_agent::{McpSurface, ToolSurface};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const DEMO: &str = "schema_version: 2
revision: 1
project:
  name: Demo
permissions:
  claude:
    rules: {propose: true, approve: false}
agent_profiles:
  claude:
    vendor_guardrail_suggestions:
      - id: read-before-edit
        statement: Read a file before editing it.
        source_ref: https://docs.example.org/agents/claude
      - id: small-commits
        statement: Keep each commit small.
";
const CLAUDE_TOKEN: &str = "claude-secret-admin-cli-0123";
const CANARY: &str = "cli-secret-canary-93b7";

#[test]
fn the_command_line_changes_the_running_gateway_through_its_admin_api() {
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
    assert!(admin.url.starts_with("http://127.0.0.1:"), "{}", admin.url);
    let admin_token = admin.token();
    let run = |cmd: &[&str], stdin: &str| {
        succeeded(
            &admin.run_with_stdin(dir, cmd, stdin),
            &format!("bridle {cmd:?}"),
        )
    };

    // An agent token issued through the API works on the MCP endpoint at once.
    let out = run(&["agents", "token", "issue", "bot"], "");
    let bot_token = out
        .lines()
        .find(|l| l.starts_with("bdl_"))
        .unwrap_or_else(|| panic!("no token printed: {out}"))
        .to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mcp = server.url.clone();
    let session = rt.block_on(async {
        let s = McpSurface::connect_http_with_bearer(&mcp, &bot_token)
            .await
            .unwrap();
        let r = s
            .call("list_projects", json!({}), CancellationToken::new())
            .await
            .unwrap();
        assert!(!r.is_error, "{r:?}");
        s
    });
    let listed = run(&["agents", "list"], "");
    assert!(listed.contains("bot [claude]"), "{listed}");
    assert!(listed.contains("1 live session"), "{listed}");

    // Revoked through the API: the live session is refused on its very next call.
    let out = run(&["agents", "token", "revoke", "bot"], "");
    assert!(out.contains("ended 1 live session"), "{out}");
    rt.block_on(async {
        match session
            .call("list_projects", json!({}), CancellationToken::new())
            .await
        {
            Err(_) => {}
            Ok(r) => assert!(r.is_error, "a revoked agent still served: {r:?}"),
        }
        assert!(
            McpSurface::connect_http_with_bearer(&mcp, &bot_token)
                .await
                .is_err()
        );
    });

    // A secret through the API; its value is never printed back.
    let out = run(
        &["secrets", "create", "gitea-token"],
        &format!("{CANARY}\n"),
    );
    assert!(out.contains("created `gitea-token` version 1"), "{out}");
    let out = run(&["secrets", "rotate", "gitea-token"], "second-value\n");
    assert!(out.contains("version 2"), "{out}");
    let out = run(&["secrets", "list", "--json"], "");
    assert!(
        out.contains("gitea-token") && !out.contains(CANARY),
        "{out}"
    );
    assert!(
        !out.contains("admin-token."),
        "admin credentials stay hidden"
    );
    let err = failed(
        &admin.run(dir, &["secrets", "import"]),
        "secrets import --url",
    );
    assert!(err.contains("without --url"), "{err}");

    // A scope ticket decided through the API.
    let store = RulesStore::open(dir, AgentCatalog::builtin()).unwrap();
    let ticket = store
        .request_scope("demo", "claude", None, "touch the CI", "the fix needs it")
        .unwrap();
    let out = run(&["scope", "list"], "");
    assert!(out.contains(&format!("#{}", ticket.id)), "{out}");
    let out = run(
        &["scope", "approve", &ticket.id.to_string(), "--note", "fine"],
        "",
    );
    assert!(out.contains("is approved"), "{out}");
    assert_eq!(store.scope_ticket(ticket.id).unwrap().status, "approved");

    // A refusal is the API's problem details, in a sentence.
    let err = failed(
        &admin.run(dir, &["agents", "token", "issue", "claude"]),
        "a token for a file-token agent",
    );
    assert!(err.contains("token_in_secret_file"), "{err}");
    // Without a credential the command says what it needs.
    let err = failed(
        &run_bridle(dir, &["agents", "list", "--url", &admin.url]),
        "no credential",
    );
    assert!(err.contains("credential"), "{err}");
    // The listener's address alone reaches the API too (its path is added).
    let listener = admin.url.trim_end_matches("/admin/api/v1");
    assert_ne!(listener, admin.url);
    let listed = succeeded(
        &admin.with_url(listener).run(dir, &["agents", "list"]),
        "agents list at the listener's address",
    );
    assert!(listed.contains("claude"), "{listed}");

    // The gateway recorded every change as the admin through the cli surface.
    let o = run_bridle(
        dir,
        &[
            "audit", "query", "--source", "user", "--json", "--limit", "100",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let page: Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: Vec<(String, String, String)> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["source"]["admin"].as_str().unwrap().to_string(),
                e["source"]["surface"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expect = |k: &str| (k.to_string(), "admin".to_string(), "cli".to_string());
    assert_eq!(
        kinds,
        [
            expect("agent_rotate"),
            expect("agent_revoke"),
            expect("secret_create"),
            expect("secret_rotate"),
            expect("approval"),
        ]
    );
    // Vendor seeds queued offline are `vendor` entries with their source; an offline approval
    // is a `user` entry through cli.
    let o = run_bridle(dir, &["rules", "queue-suggestions", "--project", "demo"]);
    assert!(o.status.success(), "{o:?}");
    let o = run_bridle(dir, &["audit", "query", "--source", "vendor", "--json"]);
    let vendor: Value = serde_json::from_slice(&o.stdout).unwrap();
    let seeds = vendor["entries"].as_array().unwrap();
    assert!(
        !seeds.is_empty(),
        "the built-in profiles suggest something: {vendor}"
    );
    assert!(
        seeds.iter().all(|e| e["kind"] == "proposal"
            && e["source"]["feed"].as_str().unwrap().starts_with("vendor:"))
    );
    let first: u64 = seeds[0]["subject"].as_str().unwrap()["proposal #".len()..]
        .parse()
        .unwrap();
    let o = run_bridle(
        dir,
        &["rules", "approve", &first.to_string(), "--by", "carol"],
    );
    assert!(o.status.success(), "{o:?}");
    let o = run_bridle(dir, &["audit", "query", "--actor", "carol", "--json"]);
    let carol: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(carol["entries"][0]["kind"], "approval");
    assert_eq!(carol["entries"][0]["source"]["surface"], "cli");
    // The other seed, rejected through the API.
    let second: u64 = seeds[1]["subject"].as_str().unwrap()["proposal #".len()..]
        .parse()
        .unwrap();
    let queue = run(&["rules", "queue"], "");
    assert!(queue.contains(&format!("#{second}")), "{queue}");
    let out = run(
        &[
            "rules",
            "reject",
            &second.to_string(),
            "--reason",
            "not for us",
        ],
        "",
    );
    assert!(out.contains(&format!("rejected #{second}")), "{out}");
    let o = run_bridle(dir, &["audit", "query", "--kind", "rejection", "--json"]);
    let rejected: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rejected["entries"][0]["source"]["admin"], "admin");
    assert_eq!(rejected["entries"][0]["source"]["surface"], "cli");
    assert_eq!(
        rejected["entries"][0]["subject"],
        format!("proposal #{second}")
    );

    let export = run_bridle(dir, &["audit", "export"]);
    assert!(export.status.success());
    let text = String::from_utf8_lossy(&export.stdout);
    assert!(!text.contains(CANARY) && !text.contains(&bot_token) && !text.contains(&admin_token));
    assert!(
        text.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok())
    );
    let o = run_bridle(dir, &["audit", "verify"]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("intact"));
    drop(server);

    // A hand-edited row: verify fails and names it.
    let db = edit_a_row(dir);
    let o = run_bridle(dir, &["audit", "verify"]);
    assert!(!o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("BROKEN at entry {db} (edited)")),
        "{out}"
    );
}

/// Edits the `secret_create` entry's row by hand; returns its id.
fn edit_a_row(dir: &std::path::Path) -> u64 {
    let o = run_bridle(
        dir,
        &["audit", "query", "--kind", "secret_create", "--json"],
    );
    let page: Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = page["entries"][0]["id"].as_u64().unwrap();
    let db = rusqlite::Connection::open(dir.join("audit.db")).unwrap();
    let n = db
        .execute(
            "UPDATE gateway_audit SET subject = 'nothing-to-see v1' WHERE id = ?1",
            [id as i64],
        )
        .unwrap();
    assert_eq!(n, 1);
    id
}

#[test]
fn the_admin_credential_is_shown_once_or_taken_from_a_file_and_the_listener_stays_on_loopback() {
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
    // First start: created in the vault and printed.
    let server = Server::start(dir);
    let token = AdminAccess::from_first_start(&server, dir).token();
    drop(server);
    // Second start: the same credential, never printed again.
    let server = Server::start(dir);
    let url2 = server.printed_line("bridle: admin API on ");
    let note = server.next_line();
    assert!(note.contains("shown when it was created"), "{note}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let http = reqwest::Client::new();
    let status = |url: String, token: String| {
        let http = http.clone();
        rt.block_on(async move {
            http.get(format!("{url}/agents"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    assert_eq!(status(url2.clone(), token.clone()), 200);
    assert_eq!(status(url2.clone(), CLAUDE_TOKEN.to_string()), 401);
    drop(server);

    // From a file (a Docker secret): nothing is created or printed.
    let file = dir.join("admin-secret");
    std::fs::write(&file, "file-admin-token-abcdef-0123456789abcdef\n").unwrap();
    let mut yaml = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
    yaml.push_str(&format!(
        "admin:\n  name: ops\n  token_file: {}\n",
        file.display()
    ));
    std::fs::write(dir.join("bridle.yaml"), &yaml).unwrap();
    let server = Server::start(dir);
    let url3 = server.printed_line("bridle: admin API on ");
    let note = server.next_line();
    assert!(note.contains("admin-secret"), "{note}");
    assert_eq!(
        status(
            url3.clone(),
            "file-admin-token-abcdef-0123456789abcdef".into()
        ),
        200
    );
    assert_eq!(
        status(url3, token),
        401,
        "the vault credential is not in use now"
    );
    drop(server);

    // A non-loopback admin listener is refused at start, named.
    std::fs::write(
        dir.join("bridle.yaml"),
        yaml.replace("admin:\n", "admin:\n  listen: 0.0.0.0:7879\n"),
    )
    .unwrap();
    let o = run_bridle(dir, &["serve", "--listen", "127.0.0.1:0"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("admin.listen") && err.contains("loopback"),
        "{err}"
    );
    // Off: no admin API.
    std::fs::write(
        dir.join("bridle.yaml"),
        yaml.replace("admin:\n", "admin:\n  enabled: false\n"),
    )
    .unwrap();
    let server = Server::start(dir);
    // Everything up to the memory hint, the last line of the start-up text.
    let mut seen = Vec::new();
    loop {
        let line = server
            .stdout
            .recv_timeout(kberg_testkit::WAIT)
            .expect("the start-up text ends with the memory hint");
        let last = line.starts_with("bridle: memory is off");
        seen.push(line);
        if last {
            break;
        }
    }
    assert!(seen.iter().all(|l| !l.contains("admin API")), "{seen:?}");
}

#[test]
fn a_url_that_answers_with_a_web_page_is_not_taken_for_the_admin_api() {
    // A wrong --url (a reverse proxy's catch-all page, another service) answers 200 with HTML:
    // the command must say so, not report an empty vault or an approval that never happened.
    let tmp = tempfile::tempdir().unwrap();
    let token_file = tmp.path().join("admin-token");
    std::fs::write(&token_file, "bda_not-checked-here").unwrap();
    let site = static_site(
        None,
        "text/html; charset=utf-8",
        "<!doctype html><title>Welcome</title><p>It works!</p>\n",
        3,
    );
    let access = AdminAccess {
        url: site,
        token_file,
    };
    for args in [
        &["secrets", "list"][..],
        &["rules", "approve", "1"][..],
        &["audit", "export"][..],
    ] {
        let out = access.run(tmp.path(), args);
        let e = failed(&out, &args.join(" "));
        assert!(e.contains("not JSON"), "{args:?}: {e}");
        assert!(e.contains("text/html"), "{args:?}: {e}");
    }
}

#[test]
fn the_mcp_endpoint_given_as_the_admin_url_is_named_as_not_the_admin_api() {
    // The MCP endpoint and the admin API listen on two ports: a --url with the wrong one gets
    // the MCP listener's 404, which must say that --url is not the admin listener, not "the
    // admin API refused (404 ?): no details".
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let server = Server::start(&dir);
    let access = AdminAccess::from_first_start(&server, tmp.path());
    let mcp_base = server.url.trim_end_matches("/mcp").to_string();
    for url in [mcp_base.clone(), server.url.clone()] {
        let wrong = AdminAccess {
            url: url.clone(),
            token_file: access.token_file.clone(),
        };
        let out = wrong.run(&dir, &["agents", "list"]);
        let e = failed(&out, &format!("agents list --url {url}"));
        assert!(e.contains("404"), "{url}: {e}");
        assert!(e.contains("not the admin API"), "{url}: {e}");
        assert!(e.contains("admin API on"), "{url}: {e}");
        assert!(!e.contains("no details"), "{url}: {e}");
    }
    // The right one still answers.
    let out = access.run(&dir, &["agents", "list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
