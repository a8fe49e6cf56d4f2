//! The feed ledger's page is all or nothing: [`FeedLedger::ingest`] queues a fetched page's
//! candidates, records each one's provenance and the source's validators together, so a page
//! one of whose candidates is refused (the feed's pending limit) or whose ledger rows cannot be
//! written leaves no proposal, no provenance row and the old validators; a normal page queues
//! everything with its provenance, and reading it again queues nothing new. The bodies run on
//! SQLite and, with the `postgres` feature, on PostgreSQL.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

#[cfg(feature = "postgres")]
#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use bridle_rules::vendor::{
    DocumentFormat, FeedLedger, FetchOutcome, FetchedPage, SourceReport, Validators,
};
use bridle_rules::{AgentCatalog, MAX_PENDING_PER_PROPOSER, RulesDocument, RulesError, RulesStore};

const URL: &str = "https://docs.example.invalid/claude/tips";

/// `n` distinct instructions, one per list item, told apart by `topic`.
fn lines(topic: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("- Always run the {topic} check number {i} before committing.\n"))
        .collect()
}

fn page(text: String, etag: &str) -> FetchOutcome {
    FetchOutcome::Page(FetchedPage {
        format: DocumentFormat::Markdown,
        text,
        validators: Validators {
            etag: Some(etag.into()),
            last_modified: None,
        },
    })
}

fn ingest(store: &RulesStore, outcome: FetchOutcome) -> Result<SourceReport, RulesError> {
    FeedLedger::open(store).unwrap().ingest(
        store,
        "shop",
        "claude",
        URL,
        outcome,
        "2026-12-06T00:00:00Z",
    )
}

fn pending(store: &RulesStore) -> usize {
    store.queue(Some("shop"), false).unwrap().len()
}

fn provenance_rows(store: &RulesStore) -> usize {
    FeedLedger::open(store)
        .unwrap()
        .candidates("shop")
        .unwrap()
        .len()
}

fn validators(store: &RulesStore) -> Option<Validators> {
    FeedLedger::open(store)
        .unwrap()
        .validators("shop", "claude", URL)
        .unwrap()
}

/// Fills the feed's share of the queue (`vendor:claude`) up to two below its limit, from
/// another source than the page's.
fn fill_to_two_below_the_limit(store: &RulesStore) {
    let mut left = MAX_PENDING_PER_PROPOSER - 2;
    let mut round = 0;
    while left > 0 {
        let n = left.min(40);
        let report = store
            .queue_vendor_guidance(
                "shop",
                "claude",
                "https://other.example.invalid/",
                &lines(&format!("filler{round}"), n),
            )
            .unwrap();
        assert_eq!(report.queued.len(), n);
        left -= n;
        round += 1;
    }
    assert_eq!(pending(store), MAX_PENDING_PER_PROPOSER - 2);
}

/// A page whose third new candidate is past the feed's pending limit is refused whole, with
/// the limit's stable error: no proposal, no provenance row, no validators. Once the queue has
/// room the same page (read again, since its validators were not saved) queues all of it.
fn a_page_refused_midway_leaves_nothing(store: &RulesStore) {
    fill_to_two_below_the_limit(store);
    let e = ingest(store, page(lines("page", 5), "\"v1\"")).unwrap_err();
    assert_eq!(e.code(), "too_many_pending", "{e}");
    assert_eq!(
        pending(store),
        MAX_PENDING_PER_PROPOSER - 2,
        "no candidate of the refused page is queued"
    );
    assert_eq!(provenance_rows(store), 0, "no provenance row is left");
    assert_eq!(validators(store), None, "the validators are not saved");

    // Room for the page: reviewed filler.
    for p in store.queue(Some("shop"), false).unwrap().iter().take(5) {
        store.reject(p.id, "alice", "not for us").unwrap();
    }
    let report = ingest(store, page(lines("page", 5), "\"v1\"")).unwrap();
    assert_eq!(report.queued.len(), 5, "{report:?}");
    assert_eq!(provenance_rows(store), 5);
    assert_eq!(validators(store).unwrap().etag.as_deref(), Some("\"v1\""));
}

/// A normal page queues every candidate with its provenance and keeps the validators; the
/// page read again (new validators, same text) queues nothing and adds no provenance row.
fn a_page_queues_everything_with_provenance_once(store: &RulesStore) {
    let report = ingest(store, page(lines("page", 7), "\"v1\"")).unwrap();
    assert_eq!(report.queued.len(), 7, "{report:?}");
    assert_eq!(report.skipped, 0);
    let ledger = FeedLedger::open(store).unwrap();
    for c in &report.queued {
        let p = store.proposal(c.proposal_id).unwrap();
        assert_eq!(p.origin.source_ref.as_deref(), Some(URL));
        let kept = ledger.candidate(c.proposal_id).unwrap().unwrap();
        assert_eq!(&kept, c);
        assert!(kept.excerpt.contains(&kept.statement), "{kept:?}");
    }
    assert_eq!(validators(store).unwrap().etag.as_deref(), Some("\"v1\""));

    let again = ingest(store, page(lines("page", 7), "\"v2\"")).unwrap();
    assert!(again.queued.is_empty(), "{again:?}");
    assert_eq!(again.skipped, 7);
    assert_eq!(pending(store), 7);
    assert_eq!(provenance_rows(store), 7);
    assert_eq!(validators(store).unwrap().etag.as_deref(), Some("\"v2\""));
}

fn sqlite_store() -> (tempfile::TempDir, RulesStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
    store
        .create("shop", &RulesDocument::new("Shop"), "alice")
        .unwrap();
    (dir, store)
}

#[test]
fn sqlite_a_page_refused_midway_leaves_nothing() {
    let (_dir, store) = sqlite_store();
    a_page_refused_midway_leaves_nothing(&store);
}

#[test]
fn sqlite_a_page_queues_everything_with_provenance_once() {
    let (_dir, store) = sqlite_store();
    a_page_queues_everything_with_provenance_once(&store);
}

/// A ledger row that cannot be written (here a trigger refuses the third provenance row, or
/// the source's row: a full disk, a constraint) fails the whole page: no proposal is left
/// without its provenance, none is queued at all, and the validators stay as they were.
#[test]
fn sqlite_a_ledger_write_failing_midway_leaves_nothing() {
    for (table, when) in [
        (
            "vendor_candidates",
            "(SELECT count(*) FROM vendor_candidates) >= 2",
        ),
        ("vendor_feed_sources", "1"),
    ] {
        let (dir, store) = sqlite_store();
        // The ledger's tables exist once a ledger is opened.
        FeedLedger::open(&store).unwrap();
        let conn = rusqlite::Connection::open(dir.path().join("bridle.db")).unwrap();
        conn.execute_batch(&format!(
            "CREATE TRIGGER refuse BEFORE INSERT ON {table} WHEN {when}
             BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        ))
        .unwrap();
        let e = ingest(&store, page(lines("page", 5), "\"v1\"")).unwrap_err();
        assert!(e.to_string().contains("disk full"), "{table}: {e}");
        assert_eq!(pending(&store), 0, "{table}: a proposal was left");
        assert_eq!(provenance_rows(&store), 0, "{table}");
        assert_eq!(validators(&store), None, "{table}");

        conn.execute_batch("DROP TRIGGER refuse").unwrap();
        let report = ingest(&store, page(lines("page", 5), "\"v1\"")).unwrap();
        assert_eq!(report.queued.len(), 5, "{table}: {report:?}");
        assert_eq!(provenance_rows(&store), 5, "{table}");
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use bridle_rules::db::postgres::PgDatabase;
    use bridle_rules::{AgentCatalog, RulesDocument, RulesStore};

    use super::pg_cluster::PgCluster;

    fn pg_store() -> (tempfile::TempDir, RulesStore) {
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let dir = tempfile::tempdir().unwrap();
        let db = PgDatabase::connect(&cluster.settings(&name)).unwrap();
        let store = RulesStore::open_postgres(dir.path(), AgentCatalog::builtin(), db).unwrap();
        store
            .create("shop", &RulesDocument::new("Shop"), "alice")
            .unwrap();
        (dir, store)
    }

    #[test]
    fn postgres_a_page_refused_midway_leaves_nothing() {
        let (_dir, store) = pg_store();
        super::a_page_refused_midway_leaves_nothing(&store);
    }

    #[test]
    fn postgres_a_page_queues_everything_with_provenance_once() {
        let (_dir, store) = pg_store();
        super::a_page_queues_everything_with_provenance_once(&store);
    }

    /// As `sqlite_a_ledger_write_failing_midway_leaves_nothing`: the third provenance row
    /// refused (a trigger) fails the page with nothing written, since the ledger's rows are
    /// written in the store's own transaction (`RulesTx::postgres`).
    #[test]
    fn postgres_a_ledger_write_failing_midway_leaves_nothing() {
        let (_dir, store) = pg_store();
        bridle_rules::vendor::FeedLedger::open(&store).unwrap();
        let db = store.postgres().unwrap();
        db.client()
            .unwrap()
            .batch(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN
                     IF (SELECT count(*) FROM vendor_candidates) >= 2 THEN
                         RAISE EXCEPTION 'disk full';
                     END IF;
                     RETURN NEW;
                 END $$;
                 CREATE TRIGGER refuse BEFORE INSERT ON vendor_candidates
                     FOR EACH ROW EXECUTE FUNCTION refuse();",
            )
            .unwrap();
        let e = super::ingest(&store, super::page(super::lines("page", 5), "\"v1\"")).unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        assert_eq!(super::pending(&store), 0, "a proposal was left");
        assert_eq!(super::provenance_rows(&store), 0);
        assert_eq!(super::validators(&store), None);
    }
}
