//! The audit log's retention passes in `/metrics`, scraped over real HTTP on loopback: a pass
//! that removes entries counts an `ok` pass and the entries it removed, and a pass that fails
//! (the database refuses the removal) counts a `failed` pass. Before, a retention that failed
//! every interval was only a log line. Each scrape waits for the pass's end, told by the
//! gateway's retention hook, never for time.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod ops_support;

use std::path::Path;

use bridle_gateway::audit::{AuditConfig, AuditLog, Change, Entry, Kind, RetentionEvent, Surface};
use ops_support::{append_config, bind, data_dir, run};

/// The value of one series (`name{labels}`) in an OpenMetrics text page.
fn value(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn scrape(base: &str) -> String {
    let r = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.text().await.unwrap()
}

/// Ten changes in the data directory's audit log, written before the gateway opens it.
fn ten_entries(dir: &Path) {
    let log = AuditLog::open(AuditConfig::new(dir.join("audit.db"))).unwrap();
    for i in 0..10 {
        log.record(
            Entry::user("alice", Surface::Api, Kind::RulesChange)
                .project("demo")
                .change(Change::revisions(format!("r{i}"), format!("r{}", i + 1))),
        )
        .unwrap();
    }
}

/// How a retention pass ended, as the gateway's hook was told.
#[derive(Debug, PartialEq)]
enum PassEnd {
    Removed(u64),
    Failed,
}

/// A gateway over `dir` whose audit log keeps at most 3 entries; returns it running and the
/// end of its start-up retention pass, waited for on the hook.
async fn start(dir: &Path) -> (ops_support::Running, PassEnd) {
    append_config(dir, "audit:\n  max_entries: 3\n");
    let (tx, mut ended) = tokio::sync::mpsc::unbounded_channel();
    let bound = bind(dir, |b| {
        b.on_audit_retention(move |event| {
            let end = match event {
                RetentionEvent::Done(r) => PassEnd::Removed(r.map_or(0, |r| r.removed)),
                RetentionEvent::Failed(_) => PassEnd::Failed,
                _ => return,
            };
            let _ = tx.send(end);
        })
    })
    .await;
    let gw = run(bound);
    let end = ended.recv().await.expect("the start-up pass ends");
    (gw, end)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_that_removes_entries_is_counted_with_what_it_removed() {
    let tmp = data_dir(None, "");
    ten_entries(tmp.path());
    let (gw, end) = start(tmp.path()).await;
    let PassEnd::Removed(removed) = end else {
        panic!("the pass failed");
    };
    assert!(removed >= 8, "{removed}");

    let page = scrape(&gw.base).await;
    assert_eq!(
        value(&page, "bridle_audit_retention_passes_total{outcome=\"ok\"}"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        value(
            &page,
            "bridle_audit_retention_passes_total{outcome=\"failed\"}"
        ),
        Some(0.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "bridle_audit_retention_removed_total"),
        Some(removed as f64),
        "{page}"
    );
    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_pass_is_counted_as_failed() {
    let tmp = data_dir(None, "");
    ten_entries(tmp.path());
    // The database refuses every removal, as a damaged table or a read-only file would.
    rusqlite::Connection::open(tmp.path().join("audit.db"))
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER fail_trim BEFORE DELETE ON gateway_audit
             BEGIN SELECT RAISE(ABORT, 'the disk is failing'); END;",
        )
        .unwrap();
    let (gw, end) = start(tmp.path()).await;
    assert_eq!(end, PassEnd::Failed);

    let page = scrape(&gw.base).await;
    assert_eq!(
        value(
            &page,
            "bridle_audit_retention_passes_total{outcome=\"failed\"}"
        ),
        Some(1.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "bridle_audit_retention_passes_total{outcome=\"ok\"}"),
        Some(0.0),
        "{page}"
    );
    assert_eq!(
        value(&page, "bridle_audit_retention_removed_total"),
        Some(0.0),
        "{page}"
    );
    gw.stop.cancel();
    gw.served.await.unwrap().unwrap();
}
