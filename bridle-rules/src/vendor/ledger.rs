//! The feed ledger: what a vendor feed has already seen and queued, kept in the rules store's
//! database so it outlives a run.
//!
//! It lives where the store's state lives. On SQLite that is the data folder's file, one
//! gateway per folder. On PostgreSQL (feature `postgres`, a store opened with
//! `RulesStore::open_postgres`) it is the database every replica shares, so a source's
//! validators and each queued candidate's provenance are the same on every replica: a page one
//! replica read is answered `304 Not Modified` for another, and a reviewer on any replica sees
//! where a suggestion came from. Queueing itself is de-duplicated by fingerprint inside the
//! rules store's serialized write transaction, so two replicas running one feed at the same
//! moment queue each suggestion once: one queues it, the other finds it queued and skips it.
//!
//! A page is queued all or nothing. [`FeedLedger::ingest`] queues a page's candidates in one
//! write transaction of the rules store and writes their provenance rows and the source's
//! validators in that same transaction. A new candidate the store refuses (the feed's
//! [`MAX_PENDING_PER_PROPOSER`](crate::MAX_PENDING_PER_PROPOSER) as `vendor:<agent>`,
//! `too_many_pending`; the project's [`MAX_PENDING_PROPOSALS`](crate::MAX_PENDING_PROPOSALS),
//! `proposal_rejected`) or a row that cannot be written refuses the whole page with that error
//! and writes nothing, validators included: the next run reads the page again (no `304`) and
//! queues all of it once the queue has room. Queueing the first candidates only would leave a
//! proposal without its provenance after a failed write, and would let the rest wait unseen
//! until the page changed. On PostgreSQL likewise: the ledger's rows are written on the store's
//! transaction (`RulesTx::postgres`), as on SQLite (`RulesTx::sqlite`).
//!
//! [`FeedLedger`] holds the logic once; each dialect only stores and fetches rows
//! ([`LedgerConn`], here for SQLite and in `ledger_postgres` for PostgreSQL).

use std::path::PathBuf;

use rusqlite::{Connection, OptionalExtension, params};

use super::extract::extract_at_most;
use super::feed::{
    FetchOutcome, MAX_CANDIDATES_PER_PAGE, SourceReport, Validators, VendorCandidate,
};
use crate::db::{Migration, Migrations, migrate_sqlite};
use crate::store::backend::RulesTx;
use crate::{RulesError, RulesStore, redact_url};

/// The ledger's tables (in the store's SQLite file). Step 1 is the schema from before
/// versioning, so such a file is adopted as it is; never edit a released step, add one. The
/// PostgreSQL tables are `LEDGER_PG_MIGRATIONS` (feature `postgres`).
pub const LEDGER_MIGRATIONS: Migrations = Migrations {
    store: "vendor_feed",
    steps: &[Migration {
        version: 1,
        name: "baseline",
        sql: "
CREATE TABLE IF NOT EXISTS vendor_feed_sources (
    project TEXT NOT NULL,
    agent TEXT NOT NULL,
    url TEXT NOT NULL,
    etag TEXT,
    last_modified TEXT,
    fetched_at TEXT NOT NULL,
    PRIMARY KEY (project, agent, url)
);
CREATE TABLE IF NOT EXISTS vendor_candidates (
    proposal_id INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    agent TEXT NOT NULL,
    statement TEXT NOT NULL,
    source_url TEXT NOT NULL,
    fetched_at TEXT NOT NULL,
    excerpt TEXT NOT NULL
);
",
    }],
};

/// Where the ledger's rows are.
#[derive(Debug, Clone)]
enum LedgerDb {
    /// The store's SQLite file.
    Sqlite(PathBuf),
    /// The PostgreSQL database the store (and every replica) uses.
    #[cfg(feature = "postgres")]
    Postgres(crate::db::postgres::PgDatabase),
}

/// One connection to the ledger's rows, in its dialect.
pub(super) enum LedgerConn {
    Sqlite(Connection),
    #[cfg(feature = "postgres")]
    Postgres(crate::db::postgres::PgClient),
}

/// The feed's memory, in the store's database: validators per (project, agent, source) and the
/// provenance of every queued candidate.
#[derive(Debug, Clone)]
pub struct FeedLedger {
    db: LedgerDb,
}

impl FeedLedger {
    /// Opens the ledger of a store (creating or migrating its tables): in the store's SQLite
    /// file, or, for a store on PostgreSQL, in that database.
    pub fn open(store: &RulesStore) -> Result<Self, RulesError> {
        #[cfg(feature = "postgres")]
        if let Some(db) = store.postgres() {
            db.migrate(&super::ledger_postgres::LEDGER_PG_MIGRATIONS)?;
            return Ok(Self {
                db: LedgerDb::Postgres(db.clone()),
            });
        }
        let path = store.db_path().to_path_buf();
        migrate_sqlite(&mut sqlite_connect(&path)?, &LEDGER_MIGRATIONS)?;
        Ok(Self {
            db: LedgerDb::Sqlite(path),
        })
    }

    fn connect(&self) -> Result<LedgerConn, RulesError> {
        match &self.db {
            LedgerDb::Sqlite(path) => Ok(LedgerConn::Sqlite(sqlite_connect(path)?)),
            #[cfg(feature = "postgres")]
            LedgerDb::Postgres(db) => Ok(LedgerConn::Postgres(db.client()?)),
        }
    }

    /// The validators kept for a source, if it was read before.
    pub fn validators(
        &self,
        project: &str,
        agent: &str,
        url: &str,
    ) -> Result<Option<Validators>, RulesError> {
        self.connect()?.validators(project, agent, url)
    }

    /// Where a queued proposal came from, if the feed queued it.
    pub fn candidate(&self, proposal_id: u64) -> Result<Option<VendorCandidate>, RulesError> {
        self.connect()?.candidate(proposal_id)
    }

    /// Every candidate the feed queued in a project, oldest first.
    pub fn candidates(&self, project: &str) -> Result<Vec<VendorCandidate>, RulesError> {
        self.connect()?.candidates(project)
    }

    /// Queues what a fetched source holds for `agent` in `project`, with each queued
    /// candidate's provenance and the source's validators, all or nothing (see the module
    /// doc): a new candidate refused by a pending limit refuses the page with that error
    /// (`too_many_pending`, `proposal_rejected`) and nothing is written, so the next run reads
    /// the page again. `store` is the store the ledger was opened on. A `NotModified` outcome
    /// queues nothing. The validators are kept under `url` as given (the next fetch looks them
    /// up by it); the proposals, the candidates' provenance and the log line name it as
    /// [`redact_url`] shows it, since a reviewer, the audit log and every rendered file see
    /// those. A candidate queued before (by this process or, on PostgreSQL, by another
    /// replica) is skipped, and so is every candidate past the page's first
    /// [`MAX_CANDIDATES_PER_PAGE`].
    pub fn ingest(
        &self,
        store: &RulesStore,
        project: &str,
        agent: &str,
        url: &str,
        outcome: FetchOutcome,
        fetched_at: &str,
    ) -> Result<SourceReport, RulesError> {
        store.catalog().get(agent)?;
        // Fail on an unknown project before touching anything.
        store.load(project)?;
        let mut report = SourceReport {
            fetched_at: fetched_at.to_string(),
            ..SourceReport::default()
        };
        let page = match outcome {
            FetchOutcome::NotModified => {
                report.not_modified = true;
                self.connect()?
                    .touch_source(project, agent, url, fetched_at)?;
                return Ok(report);
            }
            FetchOutcome::Page(page) => page,
        };
        let shown = redact_url(url);
        let found = extract_at_most(&page.text, page.format, MAX_CANDIDATES_PER_PAGE);
        report.over_limit = found.left_out;
        let looked_at = found.candidates.len();
        let statements: Vec<String> = found
            .candidates
            .iter()
            .map(|c| c.statement.clone())
            .collect();
        let source = SourceRow {
            project,
            agent,
            url,
            validators: &page.validators,
            fetched_at,
        };
        // The page's proposals, their provenance and the source's validators in the store's
        // write transaction: all of them or, on a refusal or a failed write, none.
        let queued = store.queue_vendor_page(project, agent, &shown, &statements, |tx, ids| {
            let queued: Vec<VendorCandidate> = found
                .candidates
                .into_iter()
                .zip(ids)
                .filter_map(|(found, id)| {
                    id.map(|proposal_id| VendorCandidate {
                        proposal_id,
                        project: project.to_string(),
                        agent: agent.to_string(),
                        statement: found.statement,
                        source_url: shown.clone(),
                        fetched_at: fetched_at.to_string(),
                        excerpt: found.excerpt,
                    })
                })
                .collect();
            // Both backends offer their transaction's connection; one that did not
            // could not keep a page whole, so it is refused rather than split.
            let writer = LedgerWriter::of(tx).ok_or_else(|| {
                RulesError::DatabaseConfig(
                    "this store's database does not take the vendor feed's ledger rows in \
                         its transaction"
                        .into(),
                )
            })?;
            writer.put_page(&queued, &source)?;
            Ok(queued)
        })?;
        report.skipped = found.left_out + (looked_at - queued.len());
        report.queued = queued;
        tracing::info!(
            project,
            agent,
            url = ?shown,
            queued = report.queued.len(),
            skipped = report.skipped,
            over_limit = report.over_limit,
            "vendor feed source ingested"
        );
        Ok(report)
    }
}

/// A source's row: its validators and when it was fetched.
struct SourceRow<'a> {
    project: &'a str,
    agent: &'a str,
    url: &'a str,
    validators: &'a Validators,
    fetched_at: &'a str,
}

/// A connection in a write transaction, on which a page's ledger rows are written.
enum LedgerWriter<'a> {
    Sqlite(&'a Connection),
    #[cfg(feature = "postgres")]
    Postgres(&'a crate::db::postgres::PgClient),
}

impl<'a> LedgerWriter<'a> {
    /// The rules store's own transaction, when its backend offers its connection.
    fn of(tx: &'a dyn RulesTx) -> Option<Self> {
        if let Some(conn) = tx.sqlite() {
            return Some(Self::Sqlite(conn));
        }
        #[cfg(feature = "postgres")]
        if let Some(client) = tx.postgres() {
            return Some(Self::Postgres(client));
        }
        None
    }

    /// Records the page's queued candidates' provenance, then the source's validators.
    fn put_page(
        &self,
        queued: &[VendorCandidate],
        source: &SourceRow<'_>,
    ) -> Result<(), RulesError> {
        for c in queued {
            self.put_candidate(c)?;
        }
        self.put_source(source)
    }

    /// Records (or replaces) a queued candidate's provenance.
    fn put_candidate(&self, c: &VendorCandidate) -> Result<(), RulesError> {
        match self {
            LedgerWriter::Sqlite(conn) => {
                conn.execute(
                    &format!("INSERT OR REPLACE INTO vendor_candidates ({CANDIDATE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
                    params![
                        c.proposal_id as i64,
                        c.project,
                        c.agent,
                        c.statement,
                        c.source_url,
                        c.fetched_at,
                        c.excerpt
                    ],
                )?;
                Ok(())
            }
            #[cfg(feature = "postgres")]
            LedgerWriter::Postgres(client) => super::ledger_postgres::put_candidate(client, c),
        }
    }

    /// Records a source's validators and fetch time.
    fn put_source(&self, s: &SourceRow<'_>) -> Result<(), RulesError> {
        match self {
            LedgerWriter::Sqlite(conn) => {
                conn.execute(
                    "INSERT INTO vendor_feed_sources (project, agent, url, etag, last_modified, fetched_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (project, agent, url) DO UPDATE SET etag = excluded.etag, last_modified = excluded.last_modified, fetched_at = excluded.fetched_at",
                    params![
                        s.project,
                        s.agent,
                        s.url,
                        s.validators.etag,
                        s.validators.last_modified,
                        s.fetched_at
                    ],
                )?;
                Ok(())
            }
            #[cfg(feature = "postgres")]
            LedgerWriter::Postgres(c) => super::ledger_postgres::put_source(
                c,
                s.project,
                s.agent,
                s.url,
                s.validators,
                s.fetched_at,
            ),
        }
    }
}

fn sqlite_connect(path: &std::path::Path) -> Result<Connection, RulesError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(conn)
}

/// The columns every candidate query reads, in [`candidate_row`]'s order.
pub(super) const CANDIDATE_COLUMNS: &str =
    "proposal_id, project, agent, statement, source_url, fetched_at, excerpt";

impl LedgerConn {
    fn validators(
        &self,
        project: &str,
        agent: &str,
        url: &str,
    ) -> Result<Option<Validators>, RulesError> {
        match self {
            LedgerConn::Sqlite(conn) => Ok(conn
                .query_row(
                    "SELECT etag, last_modified FROM vendor_feed_sources WHERE project = ?1 AND agent = ?2 AND url = ?3",
                    params![project, agent, url],
                    |r| {
                        Ok(Validators {
                            etag: r.get(0)?,
                            last_modified: r.get(1)?,
                        })
                    },
                )
                .optional()?),
            #[cfg(feature = "postgres")]
            LedgerConn::Postgres(c) => super::ledger_postgres::validators(c, project, agent, url),
        }
    }

    fn candidate(&self, proposal_id: u64) -> Result<Option<VendorCandidate>, RulesError> {
        match self {
            LedgerConn::Sqlite(conn) => {
                let mut stmt = conn.prepare(&format!(
                    "SELECT {CANDIDATE_COLUMNS} FROM vendor_candidates WHERE proposal_id = ?1"
                ))?;
                Ok(stmt
                    .query_row(params![proposal_id as i64], candidate_row)
                    .optional()?)
            }
            #[cfg(feature = "postgres")]
            LedgerConn::Postgres(c) => super::ledger_postgres::candidate(c, proposal_id),
        }
    }

    fn candidates(&self, project: &str) -> Result<Vec<VendorCandidate>, RulesError> {
        match self {
            LedgerConn::Sqlite(conn) => {
                let mut stmt = conn.prepare(&format!(
                    "SELECT {CANDIDATE_COLUMNS} FROM vendor_candidates WHERE project = ?1 ORDER BY proposal_id"
                ))?;
                let rows = stmt.query_map(params![project], candidate_row)?;
                Ok(rows.collect::<Result<_, _>>()?)
            }
            #[cfg(feature = "postgres")]
            LedgerConn::Postgres(c) => super::ledger_postgres::candidates(c, project),
        }
    }

    /// Records that an unchanged source was checked at `fetched_at`.
    fn touch_source(
        &self,
        project: &str,
        agent: &str,
        url: &str,
        fetched_at: &str,
    ) -> Result<(), RulesError> {
        match self {
            LedgerConn::Sqlite(conn) => {
                conn.execute(
                    "UPDATE vendor_feed_sources SET fetched_at = ?4 WHERE project = ?1 AND agent = ?2 AND url = ?3",
                    params![project, agent, url, fetched_at],
                )?;
                Ok(())
            }
            #[cfg(feature = "postgres")]
            LedgerConn::Postgres(c) => {
                super::ledger_postgres::touch_source(c, project, agent, url, fetched_at)
            }
        }
    }
}

fn candidate_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<VendorCandidate> {
    Ok(VendorCandidate {
        proposal_id: r.get::<_, i64>(0)? as u64,
        project: r.get(1)?,
        agent: r.get(2)?,
        statement: r.get(3)?,
        source_url: r.get(4)?,
        fetched_at: r.get(5)?,
        excerpt: r.get(6)?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

    use super::*;
    use crate::vendor::feed::FetchedPage;
    use crate::vendor::{DocumentFormat, extract::EXCERPT_CHARS};
    use crate::{AgentCatalog, ChangeRequest, RulesDocument};

    /// A page of thousands of distinct sentences that share their first six words (so every
    /// one would get the same id base) queues at most the limit, with distinct ids, and looks
    /// the ids up once per queued candidate, not once per try.
    #[test]
    fn a_page_of_thousands_of_alike_sentences_queues_at_most_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
        store
            .create("shop", &RulesDocument::new("Shop"), "alice")
            .unwrap();
        let ledger = FeedLedger::open(&store).unwrap();
        // One paragraph, so every excerpt is a window of one long block.
        let text: String = (0..3000)
            .map(|i| format!("You should always run the tests for module {i}. "))
            .collect();
        let page = |text: &str| {
            FetchOutcome::Page(FetchedPage {
                format: DocumentFormat::Markdown,
                text: text.to_string(),
                validators: Validators::default(),
            })
        };
        let url = "http://vendor.example/guide";
        let ingest = |text: &str| {
            crate::store::ID_LOOKUPS.with(|n| n.set(0));
            let report = ledger
                .ingest(
                    &store,
                    "shop",
                    "claude",
                    url,
                    page(text),
                    "2026-01-01T00:00:00Z",
                )
                .unwrap();
            (report, crate::store::ID_LOOKUPS.with(|n| n.get()))
        };

        let (report, lookups) = ingest(&text);
        assert_eq!(report.queued.len(), MAX_CANDIDATES_PER_PAGE);
        assert_eq!(report.over_limit, 3000 - MAX_CANDIDATES_PER_PAGE);
        assert_eq!(report.skipped, report.over_limit);
        assert!(lookups <= MAX_CANDIDATES_PER_PAGE, "{lookups} id lookups");
        for c in &report.queued {
            assert!(c.excerpt.contains(&c.statement), "{}", c.excerpt);
            assert!(c.excerpt.chars().count() <= EXCERPT_CHARS + 2);
        }
        let ids = |store: &RulesStore| {
            let mut ids: Vec<String> = store
                .queue(Some("shop"), true)
                .unwrap()
                .into_iter()
                .map(|p| match p.change {
                    ChangeRequest::Guardrail { id, .. } => id,
                    other => panic!("not a guardrail: {other:?}"),
                })
                .collect();
            ids.sort();
            ids.dedup();
            ids
        };
        let base = "claude-you-should-always-run-the-tests";
        let queued = ids(&store);
        assert_eq!(queued.len(), MAX_CANDIDATES_PER_PAGE, "ids are distinct");
        assert!(queued.contains(&base.to_string()));
        assert!(queued.contains(&format!("{base}-{MAX_CANDIDATES_PER_PAGE}")));

        // The page again: its first candidates are known, the rest still past the limit.
        let (again, lookups) = ingest(&text);
        assert!(again.queued.is_empty());
        assert_eq!(again.skipped, 3000);
        assert!(lookups <= MAX_CANDIDATES_PER_PAGE, "{lookups} id lookups");

        // Another page with the same opening words continues the numbering, still one lookup
        // per candidate however many ids the base already has.
        let more: String = (0..10)
            .map(|i| format!("You should always run the tests for package {i}. "))
            .collect();
        let (report, lookups) = ingest(&more);
        assert_eq!(report.queued.len(), 10);
        assert_eq!(lookups, 10);
        let all = ids(&store);
        assert_eq!(all.len(), MAX_CANDIDATES_PER_PAGE + 10);
        assert!(all.contains(&format!("{base}-{}", MAX_CANDIDATES_PER_PAGE + 10)));
    }
}
