//! `bridle rules log|source-vendor|run-feed|queue-suggestions|upgrade --url` against a running
//! `bridle serve`: every rules command is a client of the admin API, so the gateway applies each
//! change at once and records it as the admin through the `cli` surface. A vendor page read
//! twice queues its suggestions once; the configured feed runs on demand; a document's own
//! profile suggestions are queued; an old document is upgraded in place and the log shows it.
//! The bad paths: a local file (the gateway reads none by request), an unknown project, and a
//! feed that is not configured.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod bridle_support;

use std::path::Path;

use bridle_support::*;
use serde_json::Value;

const CLAUDE_TOKEN: &str = "claude-secret-cli-rules-0123";
const DEMO: &str = "schema_version: 2
revision: 1
project:
  name: Demo
";
const GUIDE: &str = "# Agent guidance\n\n- You should keep pull requests small and focused.\n- Never disable failing tests to make a build pass.\n";

#[test]
fn every_rules_command_goes_through_the_running_gateway() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    lay_out(
        dir,
        &[TestAgent {
            name: "claude",
            agent_type: "claude",
            token: CLAUDE_TOKEN,
            projects: &["demo", "shop"],
        }],
        &[("demo", DEMO)],
    );
    let v1 =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../bridle-rules/tests/fixtures/shop-v1.yaml");
    std::fs::copy(v1, dir.join("projects/shop.yaml")).unwrap();
    // The page is read twice by `source-vendor` and once by the feed.
    let site = docs_site(GUIDE, 3);
    let page = format!("{site}/best-practices.md");
    let mut yaml = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
    yaml.push_str(&format!(
        "vendor_feed:\n  profiles:\n    claude:\n      - url: {page}\n  projects: [demo]\n"
    ));
    std::fs::write(dir.join("bridle.yaml"), yaml).unwrap();
    let server = Server::start(dir);
    let admin = AdminAccess::from_first_start(&server, dir);

    // One page, read twice: its two suggestions are queued once.
    let args = [
        "rules",
        "source-vendor",
        "--project",
        "demo",
        "--agent",
        "codex",
        "--from",
        page.as_str(),
    ];
    let out = succeeded(&admin.run(dir, &args), "rules source-vendor");
    assert!(
        out.starts_with("queued 2 suggestions for review (0 already known): #"),
        "{out}"
    );
    let out = succeeded(&admin.run(dir, &args), "rules source-vendor again");
    assert!(
        out.starts_with("queued 0 suggestions for review (2 already known)"),
        "{out}"
    );

    // The configured feed, on demand.
    let out = succeeded(&admin.run(dir, &["rules", "run-feed"]), "rules run-feed");
    assert_eq!(
        out.trim(),
        format!("demo claude {page}: queued 2, 0 already known")
    );

    // The document's own profile suggestions, then the upgrade of the old document.
    let out = succeeded(
        &admin.run(dir, &["rules", "queue-suggestions", "--project", "shop"]),
        "rules queue-suggestions",
    );
    assert!(
        out.starts_with("queued 1 suggestion for review (0 already known): #"),
        "{out}"
    );
    let out = succeeded(
        &admin.run(dir, &["rules", "upgrade", "--project", "shop"]),
        "rules upgrade",
    );
    assert_eq!(
        out.trim(),
        "migrated shop from schema_version 1 (now revision 1)"
    );
    let text = std::fs::read_to_string(dir.join("projects/shop.yaml")).unwrap();
    assert!(
        text.starts_with("schema_version: 2\nrevision: 1\n"),
        "{text}"
    );
    let out = succeeded(
        &admin.run(dir, &["rules", "upgrade", "--project", "shop"]),
        "rules upgrade again",
    );
    assert_eq!(out.trim(), "shop is already at the current schema version");

    // A person approves one of the page's suggestions: demo gets its first change.
    let queue: Value = serde_json::from_str(&succeeded(
        &admin.run(dir, &["rules", "queue", "--project", "demo", "--json"]),
        "rules queue --project demo",
    ))
    .unwrap();
    let id = queue[0]["id"].as_u64().unwrap().to_string();
    succeeded(&admin.run(dir, &["rules", "approve", &id]), "rules approve");

    // The log, for one project and for all, names the admin through the command line.
    let log = succeeded(
        &admin.run(dir, &["rules", "log", "--project", "shop"]),
        "rules log",
    );
    assert!(
        log.contains(" shop r1 [user] by admin:admin@cli: migrate from schema_version 1"),
        "{log}"
    );
    assert!(!log.contains(" demo "), "{log}");
    let all = succeeded(&admin.run(dir, &["rules", "log"]), "rules log (all)");
    assert!(all.contains(" shop r1 "), "{all}");
    assert!(all.contains(" demo r2 ["), "{all}");

    // Four vendor proposals still wait, and the audit log has all five, each recorded before
    // its command returned.
    let queue: Value = serde_json::from_str(&succeeded(
        &admin.run(dir, &["rules", "queue", "--json"]),
        "rules queue",
    ))
    .unwrap();
    assert_eq!(queue.as_array().unwrap().len(), 4, "{queue}");
    let audit: Value = serde_json::from_str(&succeeded(
        &admin.run(dir, &["audit", "query", "--source", "vendor", "--json"]),
        "audit query",
    ))
    .unwrap();
    assert_eq!(audit["items"].as_array().unwrap().len(), 5, "{audit}");

    // The bad paths: each fails with a clear message and changes nothing.
    let err = failed(
        &admin.run(
            dir,
            &[
                "rules",
                "source-vendor",
                "--project",
                "demo",
                "--agent",
                "codex",
                "--from",
                "/etc/hostname",
            ],
        ),
        "source-vendor of a local file",
    );
    assert!(err.contains("not an http(s) URL"), "{err}");
    let err = failed(
        &admin.run(dir, &["rules", "upgrade", "--project", "nope"]),
        "upgrade of an unknown project",
    );
    assert!(err.contains("unknown_project"), "{err}");
    let queue: Value = serde_json::from_str(&succeeded(
        &admin.run(dir, &["rules", "queue", "--json"]),
        "rules queue",
    ))
    .unwrap();
    assert_eq!(queue.as_array().unwrap().len(), 4, "{queue}");
    // A token never reaches what the command line prints.
    assert!(!all.contains(CLAUDE_TOKEN) && !log.contains(CLAUDE_TOKEN));
}

#[test]
fn run_feed_through_a_gateway_without_a_feed_says_so() {
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
    let server = Server::start(dir);
    let admin = AdminAccess::from_first_start(&server, dir);
    let err = failed(&admin.run(dir, &["rules", "run-feed"]), "run-feed");
    assert!(err.contains("vendor_feed_off"), "{err}");
}
