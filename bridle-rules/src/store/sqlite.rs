//! The embedded backend of the rules store: one SQLite file (`<data>/bridle.db`) beside the
//! YAML documents, which stay the source of truth ([`DocumentSource::Files`]).
//!
//! A connection per operation keeps the store `Clone` and usable from any thread; WAL and a busy
//! timeout let the gateway and the command line share the file, `BEGIN IMMEDIATE` makes
//! writers wait for each other, and a read runs in a deferred transaction (one snapshot).

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use crate::db::{Migration, Migrations, migrate_sqlite};
use crate::error::RulesError;
use crate::model::Source;

use super::backend::{
    Decision, DocumentSource, NewChange, NewProposal, NewTicket, PENDING_COUNTS, PROPOSAL_COLUMNS,
    PageRow, ProposalRow, RulesBackend, RulesTx, TICKET_COLUMNS, pending_counts,
};
use super::request::{ChangeRecord, PendingCounts, QueueFilter, ScopeTicket};

/// The rules tables in SQLite. Step 1 is the schema from before versioning (so such a file is
/// adopted as it is); never edit a released step, add one.
pub const SQLITE_MIGRATIONS: Migrations = Migrations {
    store: "rules",
    steps: &[
        Migration {
            version: 1,
            name: "baseline",
            sql: "
CREATE TABLE IF NOT EXISTS proposals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project TEXT NOT NULL,
    source TEXT NOT NULL,
    proposed_by TEXT NOT NULL,
    agent_session TEXT,
    source_ref TEXT,
    base_revision INTEGER,
    change TEXT NOT NULL,
    summary TEXT NOT NULL,
    fingerprint TEXT,
    status TEXT NOT NULL DEFAULT 'pending',
    created_at TEXT NOT NULL,
    decided_by TEXT,
    decided_at TEXT,
    decision_note TEXT,
    applied_revision INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS proposals_fingerprint
    ON proposals(project, fingerprint) WHERE fingerprint IS NOT NULL;
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project TEXT NOT NULL,
    revision INTEGER NOT NULL,
    source TEXT NOT NULL,
    actor TEXT NOT NULL,
    summary TEXT NOT NULL,
    proposal_id INTEGER,
    at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS revisions (
    project TEXT NOT NULL,
    revision INTEGER NOT NULL,
    document TEXT NOT NULL,
    PRIMARY KEY (project, revision)
);
CREATE TABLE IF NOT EXISTS scope_requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project TEXT NOT NULL,
    agent TEXT NOT NULL,
    agent_session TEXT,
    action TEXT NOT NULL,
    reason TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    created_at TEXT NOT NULL,
    decided_by TEXT,
    decided_at TEXT,
    note TEXT
);
",
        },
        Migration {
            version: 2,
            name: "queue_indexes",
            sql: "
CREATE INDEX proposals_queue ON proposals(project, status, id);
CREATE INDEX changes_project ON changes(project, id);
",
        },
    ],
};

/// The SQLite rules database.
#[derive(Debug, Clone)]
pub(crate) struct SqliteRules {
    path: PathBuf,
}

impl SqliteRules {
    /// Opens the file (creating it) and migrates it to this build's schema.
    pub(crate) fn open(path: &Path) -> Result<Self, RulesError> {
        let db = Self {
            path: path.to_path_buf(),
        };
        migrate_sqlite(&mut db.connect()?, &SQLITE_MIGRATIONS)?;
        Ok(db)
    }

    fn connect(&self) -> Result<Connection, RulesError> {
        let conn = Connection::open(&self.path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        Ok(conn)
    }
}

impl RulesBackend for SqliteRules {
    fn begin(&self, write: bool) -> Result<Box<dyn RulesTx + '_>, RulesError> {
        let conn = self.connect()?;
        // A read is a deferred transaction too: one snapshot from its first statement (WAL
        // lets writers go on meanwhile), so a listing and the rows it names agree.
        conn.execute_batch(if write { "BEGIN IMMEDIATE" } else { "BEGIN" })?;
        Ok(Box::new(SqliteTx { conn, open: true }))
    }

    fn documents(&self) -> DocumentSource {
        DocumentSource::Files
    }

    fn pending_counts(&self) -> Result<PendingCounts, RulesError> {
        Ok(self.connect()?.query_row(PENDING_COUNTS, [], |r| {
            Ok(pending_counts(r.get(0)?, r.get(1)?))
        })?)
    }
}

/// A connection in a transaction (a write one, or a read's snapshot) until committed
/// (`open` false).
struct SqliteTx {
    conn: Connection,
    open: bool,
}

impl Drop for SqliteTx {
    fn drop(&mut self) {
        if self.open
            && let Err(e) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::warn!(error = ?e.to_string(), "rolling back a rules transaction failed");
        }
    }
}

fn ids(conn: &Connection, sql: &str, p: impl rusqlite::Params) -> Result<Vec<u64>, RulesError> {
    let mut stmt = conn.prepare(sql)?;
    let out: Vec<i64> = stmt.query_map(p, |r| r.get(0))?.collect::<Result<_, _>>()?;
    Ok(out.into_iter().map(|v| v as u64).collect())
}

/// `e`, or [`RulesError::Unreadable`] when it says a column of the row did not convert: SQLite's
/// columns take any type, so a row another build (or a person) wrote may not read here, and
/// that row alone must fail, named.
fn row_error(e: rusqlite::Error, kind: &'static str, id: u64) -> RulesError {
    match e {
        rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => RulesError::Unreadable {
            kind,
            id: id.to_string(),
        },
        e => e.into(),
    }
}

/// A proposal's row, read as [`PROPOSAL_COLUMNS`] lists them.
fn proposal_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ProposalRow> {
    Ok(ProposalRow {
        id: r.get(0)?,
        project: r.get(1)?,
        source: r.get(2)?,
        proposed_by: r.get(3)?,
        agent_session: r.get(4)?,
        source_ref: r.get(5)?,
        base_revision: r.get(6)?,
        change: r.get(7)?,
        summary: r.get(8)?,
        status: r.get(9)?,
        created_at: r.get(10)?,
        decided_by: r.get(11)?,
        decided_at: r.get(12)?,
        decision_note: r.get(13)?,
        applied_revision: r.get(14)?,
    })
}

impl RulesTx for SqliteTx {
    fn latest_document(&mut self, project: &str) -> Result<Option<String>, RulesError> {
        Ok(self
            .conn
            .query_row(
                "SELECT document FROM revisions WHERE project = ?1 ORDER BY revision DESC LIMIT 1",
                params![project],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn document_projects(&mut self) -> Result<Vec<String>, RulesError> {
        let mut stmt = self
            .conn
            .prepare("SELECT DISTINCT project FROM revisions ORDER BY project")?;
        let out = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(out)
    }

    fn put_revision(&mut self, project: &str, revision: u64, text: &str) -> Result<(), RulesError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO revisions (project, revision, document) VALUES (?1, ?2, ?3)",
            params![project, revision as i64, text],
        )?;
        Ok(())
    }

    fn revision(&mut self, project: &str, revision: u64) -> Result<Option<String>, RulesError> {
        Ok(self
            .conn
            .query_row(
                "SELECT document FROM revisions WHERE project = ?1 AND revision = ?2",
                params![project, revision as i64],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn latest_revision(&mut self, project: &str) -> Result<Option<u64>, RulesError> {
        let newest: Option<i64> = self
            .conn
            .query_row(
                "SELECT revision FROM revisions WHERE project = ?1 ORDER BY revision DESC LIMIT 1",
                params![project],
                |r| r.get(0),
            )
            .optional()?;
        Ok(newest.and_then(|r| u64::try_from(r).ok()))
    }

    fn insert_proposal(&mut self, p: &NewProposal<'_>) -> Result<Option<u64>, RulesError> {
        let inserted = self.conn.execute(
            "INSERT OR IGNORE INTO proposals (project, source, proposed_by, agent_session, source_ref, base_revision, change, summary, fingerprint, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                p.project,
                p.origin.source.as_str(),
                p.origin.proposed_by,
                p.origin.agent_session,
                p.origin.source_ref,
                p.base_revision.map(|v| v as i64),
                p.change_json,
                p.summary,
                p.fingerprint,
                p.created_at
            ],
        )?;
        Ok((inserted == 1).then(|| self.conn.last_insert_rowid() as u64))
    }

    fn proposal(&mut self, id: u64) -> Result<Option<ProposalRow>, RulesError> {
        self.conn
            .query_row(
                &format!("SELECT {PROPOSAL_COLUMNS} FROM proposals WHERE id = ?1"),
                params![id as i64],
                proposal_row,
            )
            .optional()
            .map_err(|e| row_error(e, "proposal", id))
    }

    fn proposal_ids(
        &mut self,
        project: Option<&str>,
        include_decided: bool,
    ) -> Result<Vec<u64>, RulesError> {
        ids(
            &self.conn,
            "SELECT id FROM proposals WHERE (?1 IS NULL OR project = ?1) AND (?2 OR status = 'pending') ORDER BY id",
            params![project, include_decided],
        )
    }

    fn proposal_page(
        &mut self,
        filter: &QueueFilter,
        after: u64,
        limit: usize,
    ) -> Result<Vec<PageRow>, RulesError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {PROPOSAL_COLUMNS} FROM proposals
             WHERE (?1 IS NULL OR project = ?1) AND (?2 IS NULL OR status = ?2)
               AND (?3 IS NULL OR source = ?3) AND (?4 IS NULL OR proposed_by = ?4) AND id > ?5
             ORDER BY id LIMIT ?6"
        ))?;
        let rows = stmt.query_map(
            params![
                filter.project,
                filter.status.map(|s| s.as_str()),
                filter.source.map(|s| s.as_str()),
                filter.proposed_by,
                // Above every id SQLite gives (they are signed 64-bit): nothing follows.
                i64::try_from(after).unwrap_or(i64::MAX),
                i64::try_from(limit).unwrap_or(i64::MAX),
            ],
            // The id (an INTEGER PRIMARY KEY, always readable) apart, so a row whose other
            // columns do not convert is named and the page goes on after it.
            |r| Ok((r.get::<_, i64>(0)?, proposal_row(r))),
        )?;
        let mut out = Vec::new();
        for row in rows {
            let (id, row) = row?;
            let id = u64::try_from(id).unwrap_or(0);
            out.push((id, row.map_err(|e| row_error(e, "proposal", id))));
        }
        Ok(out)
    }

    fn pending_proposals(&mut self, project: &str) -> Result<u64, RulesError> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM proposals WHERE project = ?1 AND status = 'pending'",
            params![project],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn pending_proposals_by(
        &mut self,
        project: &str,
        proposed_by: &str,
    ) -> Result<u64, RulesError> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM proposals WHERE project = ?1 AND status = 'pending' AND proposed_by = ?2",
            params![project, proposed_by],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn pending_guardrail_proposals(
        &mut self,
        project: &str,
        id: &str,
    ) -> Result<Vec<u64>, RulesError> {
        // `json_valid` first (a CASE is evaluated lazily): one row that is not JSON must not
        // fail every proposal of the project.
        ids(
            &self.conn,
            "SELECT id FROM proposals
             WHERE project = ?1 AND status = 'pending'
               AND CASE WHEN json_valid(change)
                   THEN json_extract(change, '$.kind') = 'guardrail' AND json_extract(change, '$.id') = ?2
                   ELSE 0 END
             ORDER BY id",
            params![project, id],
        )
    }

    fn guardrail_ids_from(&mut self, project: &str, base: &str) -> Result<Vec<String>, RulesError> {
        // `json_valid` first, as above: `json_extract` of a row that is not JSON fails the
        // statement, and so vendor sourcing in the project. (`substr` and `length` count
        // characters; PostgreSQL selects the same ids in Rust.)
        let mut stmt = self.conn.prepare(
            "SELECT gid FROM (
                 SELECT CASE WHEN json_valid(change) THEN json_extract(change, '$.id') END AS gid
                 FROM proposals WHERE project = ?1)
             WHERE gid = ?2 OR substr(gid, 1, length(?2) + 1) = ?2 || '-'",
        )?;
        let ids = stmt
            .query_map(params![project, base], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    fn decide_proposal(&mut self, id: u64, d: &Decision<'_>) -> Result<(), RulesError> {
        self.conn.execute(
            "UPDATE proposals SET status = ?1, decided_by = ?2, decided_at = ?3, decision_note = ?4, applied_revision = ?5 WHERE id = ?6",
            params![
                d.status,
                d.decided_by,
                d.at,
                d.note,
                d.applied_revision.map(|v| v as i64),
                id as i64
            ],
        )?;
        Ok(())
    }

    fn record_change(&mut self, c: &NewChange<'_>) -> Result<u64, RulesError> {
        self.conn.execute(
            "INSERT INTO changes (project, revision, source, actor, summary, proposal_id, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                c.project,
                c.revision as i64,
                c.source.as_str(),
                c.actor,
                c.summary,
                c.proposal_id.map(|v| v as i64),
                c.at
            ],
        )?;
        Ok(self.conn.last_insert_rowid() as u64)
    }

    fn changes(
        &mut self,
        project: Option<&str>,
        after: u64,
    ) -> Result<Vec<ChangeRecord>, RulesError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, project, revision, source, actor, summary, proposal_id, at FROM changes
             WHERE (?1 IS NULL OR project = ?1) AND id > ?2 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![project, after as i64], |r| {
            let source: String = r.get(3)?;
            Ok(ChangeRecord {
                id: r.get::<_, i64>(0)? as u64,
                project: r.get(1)?,
                revision: r.get::<_, i64>(2)? as u64,
                source: Source::parse(&source).unwrap_or(Source::User),
                actor: r.get(4)?,
                summary: r.get(5)?,
                proposal_id: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
                at: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn last_change_id(&mut self) -> Result<u64, RulesError> {
        let id: Option<i64> = self
            .conn
            .query_row("SELECT max(id) FROM changes", [], |r| r.get(0))?;
        Ok(id.unwrap_or(0) as u64)
    }

    fn insert_ticket(&mut self, t: &NewTicket<'_>) -> Result<u64, RulesError> {
        self.conn.execute(
            "INSERT INTO scope_requests (project, agent, agent_session, action, reason, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![t.project, t.agent, t.agent_session, t.action, t.reason, t.created_at],
        )?;
        Ok(self.conn.last_insert_rowid() as u64)
    }

    fn ticket(&mut self, id: u64) -> Result<Option<ScopeTicket>, RulesError> {
        self.conn
            .query_row(
                &format!("SELECT {TICKET_COLUMNS} FROM scope_requests WHERE id = ?1"),
                params![id as i64],
                |r| {
                    Ok(ScopeTicket {
                        id: r.get::<_, i64>(0)? as u64,
                        project: r.get(1)?,
                        agent: r.get(2)?,
                        agent_session: r.get(3)?,
                        action: r.get(4)?,
                        reason: r.get(5)?,
                        status: r.get(6)?,
                        created_at: r.get(7)?,
                        decided_by: r.get(8)?,
                        decided_at: r.get(9)?,
                        note: r.get(10)?,
                    })
                },
            )
            .optional()
            .map_err(|e| row_error(e, "scope ticket", id))
    }

    fn ticket_ids(&mut self, include_decided: bool) -> Result<Vec<u64>, RulesError> {
        ids(
            &self.conn,
            "SELECT id FROM scope_requests WHERE (?1 OR status = 'pending') ORDER BY id",
            params![include_decided],
        )
    }

    fn pending_tickets(&mut self, project: &str) -> Result<u64, RulesError> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM scope_requests WHERE project = ?1 AND status = 'pending'",
            params![project],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn pending_tickets_by(&mut self, project: &str, agent: &str) -> Result<u64, RulesError> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM scope_requests WHERE project = ?1 AND status = 'pending' AND agent = ?2",
            params![project, agent],
            |r| r.get(0),
        )?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn decide_ticket(&mut self, id: u64, d: &Decision<'_>) -> Result<(), RulesError> {
        self.conn.execute(
            "UPDATE scope_requests SET status = ?1, decided_by = ?2, decided_at = ?3, note = ?4 WHERE id = ?5",
            params![d.status, d.decided_by, d.at, d.note, id as i64],
        )?;
        Ok(())
    }

    fn sqlite(&self) -> Option<&Connection> {
        Some(&self.conn)
    }

    fn commit(mut self: Box<Self>) -> Result<(), RulesError> {
        if self.open {
            self.open = false;
            self.conn.execute_batch("COMMIT")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_ticket(db: &SqliteRules) -> u64 {
        let mut tx = db.begin(true).unwrap();
        let id = tx
            .insert_ticket(&NewTicket {
                project: "shop",
                agent: "claude",
                agent_session: None,
                action: "act",
                reason: "why",
                created_at: "2026-01-01T00:00:00Z".into(),
            })
            .unwrap();
        tx.commit().unwrap();
        id
    }

    /// A read (a listing, then each row it names) is one snapshot: a ticket another process
    /// opens in between is not seen half-way through.
    #[test]
    fn a_read_is_one_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let db = SqliteRules::open(&dir.path().join("bridle.db")).unwrap();
        open_ticket(&db);
        let mut read = db.begin(false).unwrap();
        assert_eq!(read.ticket_ids(false).unwrap().len(), 1);
        let id = open_ticket(&db);
        assert_eq!(read.ticket_ids(false).unwrap().len(), 1);
        assert!(read.ticket(id).unwrap().is_none());
        drop(read);
        assert_eq!(db.begin(false).unwrap().ticket_ids(false).unwrap().len(), 2);
    }
}
