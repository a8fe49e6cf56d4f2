//! The databases under the rules store: versioned migrations (an old SQLite file moved forward
//! with its data, a newer database refused), and, with the `postgres` feature, PostgreSQL as
//! the source of truth for documents, replicas migrating at once, change notifications across
//! replicas, the vendor-feed ledger shared by replicas, and clear errors for a bad URL or
//! password.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

#[cfg(feature = "postgres")]
#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use std::path::Path;

use bridle_rules::db::{applied_sqlite, migrate_sqlite};
use bridle_rules::vendor::FeedLedger;
use bridle_rules::{
    AgentCatalog, Origin, ProposalStatus, RulesDocument, RulesStore, SQLITE_MIGRATIONS, to_yaml,
};

const BEFORE_VERSIONING: &str = include_str!("fixtures/bridle-db-before-versioning.sql");

/// A data folder as an older Bridle left it: `bridle.db` without `schema_migrations`, and the
/// YAML file of project `shop` at revision 1.
fn old_data_folder(dir: &Path) {
    std::fs::create_dir_all(dir.join("projects")).unwrap();
    let mut doc = RulesDocument::new("Shop");
    doc.revision = 1;
    doc.permissions.insert("claude".into(), Default::default());
    let text = to_yaml(&doc).unwrap();
    std::fs::write(dir.join("projects/shop.yaml"), &text).unwrap();
    let conn = rusqlite::Connection::open(dir.join("bridle.db")).unwrap();
    conn.execute_batch(BEFORE_VERSIONING).unwrap();
    conn.execute(
        "INSERT INTO revisions (project, revision, document) VALUES ('shop', 1, ?1)",
        [&text],
    )
    .unwrap();
}

#[test]
fn an_old_sqlite_database_is_migrated_forward_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    old_data_folder(dir.path());
    let store = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
    FeedLedger::open(&store).unwrap();

    let conn = rusqlite::Connection::open(dir.path().join("bridle.db")).unwrap();
    assert_eq!(applied_sqlite(&conn, "rules").unwrap(), [1, 2]);
    assert_eq!(applied_sqlite(&conn, "vendor_feed").unwrap(), [1]);
    let indexes: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN ('proposals_queue', 'changes_project')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexes, 2, "step 2 ran");

    // The workflow in flight is all there and goes on.
    let all = store.queue(Some("shop"), true).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].status, ProposalStatus::Pending);
    assert_eq!(all[0].origin.agent_session.as_deref(), Some("s-1"));
    assert_eq!(all[1].status, ProposalStatus::Rejected);
    assert_eq!(
        all[1].decision_note.as_deref(),
        Some("not for this project")
    );
    assert_eq!(store.scope_tickets(false).unwrap().len(), 1);
    assert_eq!(store.last_change_id().unwrap(), 1);
    let approved = store.approve(1, "alice").unwrap();
    assert_eq!(approved.applied_revision, Some(2));
    assert!(
        store
            .load("shop")
            .unwrap()
            .document
            .guardrail("tests-first")
            .is_some()
    );
    assert_eq!(store.document_at("shop", 1).unwrap().revision, 1);
    assert_eq!(store.changes(None, 0).unwrap().len(), 2);
    // Ids continue after the old rows.
    let p = store
        .propose(
            "shop",
            &Origin::agent("claude", None),
            &bridle_rules::ChangeRequest::Pattern {
                standard: Some("ddd".into()),
                custom: None,
            },
            None,
        )
        .unwrap();
    assert_eq!(p.id, 3);
    // The feed ledger kept its validators.
    let ledger = FeedLedger::open(&store).unwrap();
    let v = ledger
        .validators("shop", "claude", "https://docs.example.invalid/claude")
        .unwrap()
        .unwrap();
    assert_eq!(v.etag.as_deref(), Some("\"v1\""));

    // Opening again applies nothing.
    let mut conn = rusqlite::Connection::open(dir.path().join("bridle.db")).unwrap();
    assert!(
        migrate_sqlite(&mut conn, &SQLITE_MIGRATIONS)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_sqlite_database_newer_than_the_build_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("bridle.db")).unwrap();
    conn.execute(
        "INSERT INTO schema_migrations (store, version, name, checksum, applied_at) VALUES ('rules', 7, 'future', 'x', 'now')",
        [],
    )
    .unwrap();
    let e = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap_err();
    assert_eq!(e.code(), "database_too_new");
    let msg = e.to_string();
    assert!(msg.contains("schema version 7"), "{msg}");
    assert!(msg.contains("supports (2)"), "{msg}");
}

#[test]
fn an_edited_migration_step_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("bridle.db")).unwrap();
    conn.execute(
        "UPDATE schema_migrations SET checksum = 'edited' WHERE store = 'rules' AND version = 2",
        [],
    )
    .unwrap();
    let e = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap_err();
    assert_eq!(e.code(), "migration_changed");
    assert!(e.to_string().contains("step 2"), "{e}");
}

#[cfg(feature = "postgres")]
mod postgres {
    use std::time::Duration;

    use bridle_rules::db::postgres::{LISTENING, PgDatabase, PgSettings};
    use bridle_rules::{
        AgentCatalog, ChangeRequest, DocumentSource, Origin, POSTGRES_MIGRATIONS, RulesDocument,
        RulesStore, Severity,
    };

    use super::pg_cluster::{PASSWORD, PgCluster};

    fn open(cluster: &PgCluster, name: &str, dir: &std::path::Path) -> RulesStore {
        let db = PgDatabase::connect(&cluster.settings(name)).unwrap();
        RulesStore::open_postgres(dir, AgentCatalog::builtin(), db).unwrap()
    }

    /// Two stores on one database, each with its own data folder (kept alive by the first
    /// value).
    fn two_replicas(
        cluster: &PgCluster,
        name: &str,
    ) -> ([tempfile::TempDir; 2], RulesStore, RulesStore) {
        let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
        let a = open(cluster, name, dirs[0].path());
        let b = open(cluster, name, dirs[1].path());
        (dirs, a, b)
    }

    #[test]
    fn replicas_migrating_at_once_apply_each_step_once() {
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let settings = cluster.settings(&name);
                std::thread::spawn(move || {
                    PgDatabase::connect(&settings)
                        .unwrap()
                        .migrate(&POSTGRES_MIGRATIONS)
                        .unwrap()
                })
            })
            .collect();
        let applied: Vec<Vec<u32>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(applied.iter().filter(|a| *a == &[1, 2, 3]).count(), 1);
        assert_eq!(applied.iter().filter(|a| a.is_empty()).count(), 3);
        let db = PgDatabase::connect(&cluster.settings(&name)).unwrap();
        assert_eq!(db.applied("rules").unwrap(), [1, 2, 3]);
    }

    #[test]
    fn a_postgres_database_newer_than_the_build_is_refused() {
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let dir = tempfile::tempdir().unwrap();
        open(cluster, &name, dir.path());
        let db = PgDatabase::connect(&cluster.settings(&name)).unwrap();
        db.client()
            .unwrap()
            .batch("INSERT INTO schema_migrations (store, version, name, checksum, applied_at) VALUES ('rules', 4, 'future', 'x', 'now')")
            .unwrap();
        let e = RulesStore::open_postgres(dir.path(), AgentCatalog::builtin(), db).unwrap_err();
        assert_eq!(e.code(), "database_too_new");
        assert!(e.to_string().contains("schema version 4"), "{e}");
    }

    /// With PostgreSQL the database holds the documents: YAML files in the data folder are
    /// imported once (a folder that ran on SQLite moves over), every change is written out as
    /// YAML, a replica's folder catches up when it opens, and a hand edit of a file is not the
    /// document.
    #[test]
    fn the_database_is_the_source_of_truth_and_files_are_written_out() {
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let a_dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(a_dir.path().join("projects")).unwrap();
        let mut doc = RulesDocument::new("Shop");
        doc.revision = 4;
        doc.permissions.insert("claude".into(), Default::default());
        std::fs::write(
            a_dir.path().join("projects/shop.yaml"),
            bridle_rules::to_yaml(&doc).unwrap(),
        )
        .unwrap();
        let a = open(cluster, &name, a_dir.path());
        assert_eq!(a.document_source(), DocumentSource::Database);
        assert_eq!(a.projects().unwrap(), ["shop"]);
        assert_eq!(a.load("shop").unwrap().document.revision, 4);
        assert_eq!(a.changes(None, 0).unwrap().len(), 1, "the import is logged");

        // Replica B has an empty folder; it gets the file when it opens.
        let b_dir = tempfile::tempdir().unwrap();
        let b = open(cluster, &name, b_dir.path());
        assert!(b_dir.path().join("projects/shop.yaml").is_file());

        let p = b
            .propose(
                "shop",
                &Origin::agent("claude", None),
                &ChangeRequest::Guardrail {
                    id: "tests-first".into(),
                    statement: "Write a failing test first.".into(),
                    severity: Severity::HardInstruction,
                    applies_to: vec!["all_agents".into()],
                },
                None,
            )
            .unwrap();
        a.approve(p.id, "alice").unwrap();
        // B reads the approval made on A at once (no file of B's changed).
        assert!(
            b.load("shop")
                .unwrap()
                .document
                .guardrail("tests-first")
                .is_some()
        );
        let a_file = std::fs::read_to_string(a_dir.path().join("projects/shop.yaml")).unwrap();
        assert!(a_file.contains("tests-first"), "A wrote the file out");

        // A hand edit of A's file is not the document, and the next open writes it back.
        std::fs::write(
            a_dir.path().join("projects/shop.yaml"),
            "schema_version: 2\nproject: {name: x\n",
        )
        .unwrap();
        assert_eq!(a.load("shop").unwrap().document.revision, 5);
        drop(a);
        let a = open(cluster, &name, a_dir.path());
        let a_file = std::fs::read_to_string(a_dir.path().join("projects/shop.yaml")).unwrap();
        assert!(a_file.contains("tests-first"), "{a_file}");
        assert_eq!(a.load("shop").unwrap().document.revision, 5);
    }

    /// A load reads the newest revision's text from the database every time and parses it only
    /// when that text differs from the one it parsed last: a revision written by another
    /// replica, a text rewritten in place under the same revision number, and a text that no
    /// longer parses are each seen by the very next load, and a store that reads a bad text
    /// reports it on every load until it is fixed.
    #[test]
    fn every_change_of_the_stored_text_reaches_the_next_load() {
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let (_dirs, a, b) = two_replicas(cluster, &name);
        let mut doc = RulesDocument::new("Shop");
        doc.project.overview = "first".into();
        a.create("shop", &doc, "alice").unwrap();
        let overview = |s: &RulesStore| s.load("shop").unwrap().document.project.overview;
        assert_eq!(overview(&b), "first");
        assert_eq!(overview(&b), "first");

        // A new revision written by the other replica.
        let mut next = a.load("shop").unwrap().document;
        next.project.overview = "second".into();
        a.save_edit("shop", &next, next.revision, "alice", "overview")
            .unwrap();
        assert_eq!(overview(&b), "second");

        // The newest revision's text rewritten in place (same revision number).
        let db = PgDatabase::connect(&cluster.settings(&name)).unwrap();
        let set_latest = |text: &str| {
            db.client()
                .unwrap()
                .execute(
                    "UPDATE revisions SET document = $2 WHERE project = $1 AND revision = \
                     (SELECT MAX(revision) FROM revisions WHERE project = $1)",
                    &[&"shop", &text],
                )
                .unwrap()
        };
        let mut in_place = b.load("shop").unwrap().document;
        in_place.project.overview = "third".into();
        assert_eq!(set_latest(&bridle_rules::to_yaml(&in_place).unwrap()), 1);
        assert_eq!(overview(&b), "third");

        // A text that does not parse is an error on every load, not the last good document.
        set_latest("schema_version: 2\nproject: {name: x\n");
        for _ in 0..2 {
            let e = b.load("shop").unwrap_err();
            assert_eq!(e.code(), "parse_error", "{e}");
        }
        set_latest(&bridle_rules::to_yaml(&in_place).unwrap());
        assert_eq!(overview(&b), "third");
        assert_eq!(overview(&a), "third");
    }

    /// The set of every document that permission checks read: kept while the documents
    /// version stands, and every write seen by the next call on any replica, also a revision
    /// rewritten or deleted by hand in SQL.
    #[test]
    fn every_write_of_a_stored_document_reaches_the_next_documents_set() {
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let (_dirs, a, b) = two_replicas(cluster, &name);
        let overviews = |s: &RulesStore| -> Vec<(String, String)> {
            s.documents()
                .unwrap()
                .iter()
                .map(|(p, d)| (p.to_string(), d.unwrap().document.project.overview.clone()))
                .collect()
        };
        let one = |p: &str, o: &str| vec![(p.to_string(), o.to_string())];
        assert!(b.documents().unwrap().is_empty());
        let mut doc = RulesDocument::new("Shop");
        doc.project.overview = "first".into();
        a.create("shop", &doc, "alice").unwrap();
        assert_eq!(overviews(&b), one("shop", "first"));
        // Kept: the same set while nothing was written.
        let kept = b.documents().unwrap();
        assert!(std::sync::Arc::ptr_eq(&kept, &b.documents().unwrap()));
        // Checking a database means a query: never done without one.
        assert!(b.unchanged_documents().is_none());
        let recent = b.recent_documents(std::time::Duration::from_secs(3600));
        assert!(std::sync::Arc::ptr_eq(&kept, &recent.unwrap()));

        // A new revision written by the other replica.
        let mut next = a.load("shop").unwrap().document;
        next.project.overview = "second".into();
        a.save_edit("shop", &next, next.revision, "alice", "overview")
            .unwrap();
        assert_eq!(overviews(&b), one("shop", "second"));
        assert!(!std::sync::Arc::ptr_eq(&kept, &b.documents().unwrap()));

        // By hand: the newest revision's text rewritten in place, then a second project
        // inserted, then the first one's revisions deleted.
        let db = PgDatabase::connect(&cluster.settings(&name)).unwrap();
        let sql = |statement: &str, params: &[&(dyn tokio_postgres::types::ToSql + Sync)]| {
            db.client().unwrap().execute(statement, params).unwrap()
        };
        next.project.overview = "third".into();
        let third = bridle_rules::to_yaml(&next).unwrap();
        let updated = sql(
            "UPDATE revisions SET document = $2 WHERE project = $1 AND revision = \
             (SELECT MAX(revision) FROM revisions WHERE project = $1)",
            &[&"shop", &third],
        );
        assert_eq!(updated, 1);
        assert_eq!(overviews(&b), one("shop", "third"));
        let mut garden = RulesDocument::new("Garden");
        garden.project.overview = "green".into();
        garden.revision = 1;
        let garden = bridle_rules::to_yaml(&garden).unwrap();
        sql(
            "INSERT INTO revisions (project, revision, document) VALUES ('garden', 1, $1)",
            &[&garden],
        );
        let both = vec![
            ("garden".to_string(), "green".to_string()),
            ("shop".to_string(), "third".to_string()),
        ];
        assert_eq!(overviews(&b), both);
        assert_eq!(overviews(&a), both);
        // A text that does not parse: listed with its error, and that set is kept (the
        // version moves with the text), until the text is repaired.
        sql(
            "UPDATE revisions SET document = $1 WHERE project = 'shop'",
            &[&"schema_version: 2\nproject: {name: x\n"],
        );
        let broken = b.documents().unwrap();
        let e = broken.get("shop").unwrap().unwrap_err();
        assert_eq!(e.code(), "parse_error", "{e}");
        assert!(broken.get("garden").unwrap().is_ok());
        assert!(std::sync::Arc::ptr_eq(&broken, &b.documents().unwrap()));
        assert_eq!(b.load("shop").unwrap_err().code(), "parse_error");
        sql(
            "UPDATE revisions SET document = $1 WHERE project = 'shop'",
            &[&third],
        );
        assert_eq!(overviews(&b), both);

        sql("DELETE FROM revisions WHERE project = 'shop'", &[]);
        assert_eq!(overviews(&b), one("garden", "green"));
        assert_eq!(b.load("shop").unwrap_err().code(), "unknown_project");
        assert_eq!(b.load("../shop").unwrap_err().code(), "invalid_name");
    }

    /// An approval on replica A reaches a listener of replica B through NOTIFY.
    #[test]
    fn a_change_on_one_replica_is_announced_to_the_others() {
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let (_dirs, a, b) = two_replicas(cluster, &name);
        let mut heard = Some(b.postgres().unwrap().listen());
        let mut doc = RulesDocument::new("Shop");
        doc.permissions.insert("claude".into(), Default::default());
        let mut next = |b: &RulesStore| {
            let mut rx = heard.take().unwrap();
            let (r, back) = b
                .postgres()
                .unwrap()
                .run(async move {
                    let r = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await;
                    (r, rx)
                })
                .unwrap();
            heard = Some(back);
            r.expect("a notification within the deadline").unwrap()
        };
        // The listener says when it is listening; from then on nothing is missed.
        assert_eq!(next(&b), LISTENING);
        a.create("p0", &doc, "alice").unwrap();
        let payload = next(&b);
        assert!(payload.starts_with("rules:p0:"), "{payload}");
        let id: u64 = payload.rsplit(':').next().unwrap().parse().unwrap();
        let logged = b.changes(None, id - 1).unwrap();
        assert_eq!(logged[0].id, id);
    }

    /// Two replicas (two stores on two pools, two data folders) run one feed's page at the same
    /// moment: each suggestion is queued once, the ledger holds one provenance row per queued
    /// proposal and the source's validators, and both replicas read the same ledger.
    #[test]
    fn two_replicas_ingesting_one_page_queue_each_suggestion_once() {
        use bridle_rules::vendor::{
            DocumentFormat, FeedLedger, FetchOutcome, FetchedPage, LEDGER_PG_MIGRATIONS, Validators,
        };
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let a = open(cluster, &name, a_dir.path());
        let b = open(cluster, &name, b_dir.path());
        let mut doc = RulesDocument::new("Shop");
        doc.permissions.insert("claude".into(), Default::default());
        a.create("shop", &doc, "alice").unwrap();
        let url = "https://docs.example.invalid/claude";
        let text: String = (0..12)
            .map(|i| format!("- Always run check number {i} before committing.\n"))
            .collect();
        let page = FetchedPage {
            format: DocumentFormat::Markdown,
            text,
            validators: Validators {
                etag: Some("\"v1\"".into()),
                last_modified: None,
            },
        };
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let reports: Vec<_> = std::thread::scope(|s| {
            let runs: Vec<_> = [&a, &b]
                .into_iter()
                .map(|store| {
                    let (page, barrier) = (page.clone(), std::sync::Arc::clone(&barrier));
                    s.spawn(move || {
                        let ledger = FeedLedger::open(store).unwrap();
                        barrier.wait();
                        ledger
                            .ingest(
                                store,
                                "shop",
                                "claude",
                                url,
                                FetchOutcome::Page(page),
                                "2026-12-02T00:00:00Z",
                            )
                            .unwrap()
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let queued: usize = reports.iter().map(|r| r.queued.len()).sum();
        let skipped: usize = reports.iter().map(|r| r.skipped).sum();
        assert_eq!(queued, 12, "{reports:?}");
        assert_eq!(skipped, 12, "each replica skipped what the other queued");
        let queue = b.queue(Some("shop"), true).unwrap();
        assert_eq!(
            queue.len(),
            12,
            "each suggestion is in the queue exactly once"
        );

        // Both replicas read one ledger: the provenance of every queued proposal, whichever
        // replica queued it, and the validators one replica recorded.
        for store in [&a, &b] {
            let ledger = FeedLedger::open(store).unwrap();
            assert_eq!(ledger.candidates("shop").unwrap().len(), 12);
            for p in &queue {
                let c = ledger.candidate(p.id).unwrap().unwrap();
                assert_eq!(c.source_url, url);
                assert!(c.excerpt.contains(&c.statement), "{c:?}");
            }
            let v = ledger.validators("shop", "claude", url).unwrap().unwrap();
            assert_eq!(v.etag.as_deref(), Some("\"v1\""));
        }
        assert_eq!(
            FeedLedger::open(&a).unwrap().candidate(999_999).unwrap(),
            None
        );

        // A 304 on replica B touches the row replica A's run wrote and queues nothing.
        let report = FeedLedger::open(&b)
            .unwrap()
            .ingest(
                &b,
                "shop",
                "claude",
                url,
                FetchOutcome::NotModified,
                "2026-12-02T01:00:00Z",
            )
            .unwrap();
        assert!(report.not_modified && report.queued.is_empty());
        assert_eq!(b.queue(Some("shop"), true).unwrap().len(), 12);

        // The ledger's schema is versioned in the database, and nothing is in B's SQLite file.
        let db = PgDatabase::connect(&cluster.settings(&name)).unwrap();
        assert_eq!(
            db.applied("vendor_feed").unwrap(),
            [LEDGER_PG_MIGRATIONS.latest()]
        );
        assert!(!b_dir.path().join("bridle.db").exists());

        // Bad paths answer as on SQLite: an unknown project or agent, before anything is read.
        let ledger = FeedLedger::open(&a).unwrap();
        let e = ledger
            .ingest(&a, "nope", "claude", url, FetchOutcome::NotModified, "t")
            .unwrap_err();
        assert_eq!(e.code(), "unknown_project", "{e}");
        let e = ledger
            .ingest(&a, "shop", "nobody", url, FetchOutcome::NotModified, "t")
            .unwrap_err();
        assert_eq!(e.code(), "unknown_agent", "{e}");
    }

    #[test]
    fn a_bad_url_or_password_is_a_clear_error_without_the_password() {
        for url in ["mysql://x@h/db", "postgres://x@127.0.0.1:1"] {
            let e = PgSettings::from_url(url).unwrap_err();
            assert_eq!(e.code(), "database_config", "{url}: {e}");
        }
        let cluster = PgCluster::shared();
        let settings = PgSettings::from_url(&cluster.url("postgres"))
            .unwrap()
            .with_password("wrong-secret-value");
        assert!(!format!("{settings:?}").contains("wrong-secret-value"));
        let e = PgDatabase::connect(&settings).unwrap_err();
        assert_eq!(e.code(), "database_error");
        assert!(!e.to_string().contains("wrong-secret-value"), "{e}");
        assert!(e.to_string().contains("password"), "{e}");
        // The right one connects.
        let ok = PgSettings::from_url(&cluster.url("postgres"))
            .unwrap()
            .with_password(PASSWORD);
        PgDatabase::connect(&ok).unwrap();
    }

    /// The store's writers rely on the advisory lock, and so on each statement seeing what the
    /// writer before committed: a server whose default isolation is stricter (a DBA's
    /// `default_transaction_isolation`) changes nothing: concurrent approvals on several
    /// replicas all succeed (none fails to serialize) and none is lost.
    #[test]
    fn a_stricter_default_isolation_changes_nothing() {
        let cluster = PgCluster::shared();
        for isolation in ["repeatable read", "serializable"] {
            let name = cluster.create_database();
            PgDatabase::connect(&cluster.settings(&name))
                .unwrap()
                .client()
                .unwrap()
                .batch(&format!(
                    "ALTER DATABASE {name} SET default_transaction_isolation = '{isolation}'"
                ))
                .unwrap();
            let dir = tempfile::tempdir().unwrap();
            let store = open(cluster, &name, dir.path());
            let mut doc = RulesDocument::new("Shop");
            doc.permissions.insert("claude".into(), Default::default());
            store.create("shop", &doc, "alice").unwrap();
            let ids: Vec<u64> = (0..8)
                .map(|i| {
                    let change = ChangeRequest::Guardrail {
                        id: format!("g{i}"),
                        statement: format!("Statement {i}."),
                        severity: Severity::Guidance,
                        applies_to: vec!["all_agents".into()],
                    };
                    let origin = Origin::agent("claude", None);
                    store.propose("shop", &origin, &change, None).unwrap().id
                })
                .collect();
            let replicas: Vec<_> = ids
                .iter()
                .map(|_| {
                    let dir = tempfile::tempdir().unwrap();
                    let s = open(cluster, &name, dir.path());
                    (dir, s)
                })
                .collect();
            let start = std::sync::Arc::new(std::sync::Barrier::new(ids.len()));
            let outcomes: Vec<_> = std::thread::scope(|scope| {
                let handles: Vec<_> = ids
                    .iter()
                    .zip(&replicas)
                    .map(|(id, (_, s))| {
                        let start = std::sync::Arc::clone(&start);
                        scope.spawn(move || {
                            start.wait();
                            s.approve(*id, "alice")
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            for o in &outcomes {
                assert!(o.is_ok(), "{isolation}: {o:?}");
            }
            let doc = store.load("shop").unwrap().document;
            assert_eq!(doc.guardrails.len(), 8, "{isolation}");
            assert_eq!(doc.revision, 9, "{isolation}");
        }
    }

    /// A writer that holds a write lock and never finishes (a replica frozen or cut off
    /// mid-transaction; the server keeps its session until TCP gives up, hours later) holds
    /// up the others only for the write-lock wait (`WRITE_LOCK_WAIT` unless set): they give up
    /// with a clear error and nothing written, as SQLite's writers do after its busy timeout,
    /// and write again once it is gone.
    #[test]
    fn a_writer_stuck_holding_the_lock_holds_the_others_up_for_a_bounded_time() {
        const KEY: i64 = 0x7465_7374_0000_0001;
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let wait = Duration::from_millis(200);
        let db = PgDatabase::connect(&cluster.settings(&name).with_write_lock_wait(wait)).unwrap();
        let stuck = db.client().unwrap().begin(Some(KEY)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiting = db.clone();
        std::thread::spawn(move || {
            let _ = tx.send(waiting.client().unwrap().begin(Some(KEY)).map(drop));
        });
        let e = rx
            .recv_timeout(wait * 300)
            .expect("the second writer never gave up")
            .unwrap_err();
        assert_eq!(e.code(), "database_error", "{e}");
        assert!(e.to_string().contains("another writer"), "{e}");
        drop(stuck);
        db.client()
            .unwrap()
            .begin(Some(KEY))
            .unwrap()
            .commit()
            .unwrap();
    }

    /// A transaction without a lock (how the stores read several rows that belong together:
    /// a listing of the review queue, then each proposal) is one snapshot whatever the
    /// server's default isolation: a row another replica commits in between is not seen
    /// half-way through, and it writes nothing.
    #[test]
    fn a_read_without_a_lock_is_one_snapshot() {
        let cluster = PgCluster::shared();
        let name = cluster.create_database();
        let db = PgDatabase::connect(&cluster.settings(&name)).unwrap();
        let other = db.client().unwrap();
        other
            .batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1)")
            .unwrap();
        let count = |c: &bridle_rules::db::postgres::PgClient| -> i64 {
            c.query_opt("SELECT count(*) FROM t", &[])
                .unwrap()
                .unwrap()
                .get(0)
        };
        let read = db.client().unwrap().begin(None).unwrap();
        assert_eq!(count(&read), 1);
        other.execute("INSERT INTO t VALUES (2)", &[]).unwrap();
        assert_eq!(count(&other), 2);
        assert_eq!(count(&read), 1, "the read saw a commit made after it began");
        assert!(read.execute("INSERT INTO t VALUES (3)", &[]).is_err());
        drop(read);
        assert_eq!(count(&other), 2);
    }
}
