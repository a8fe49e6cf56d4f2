//! The PostgreSQL backend of the rules store, for several gateway replicas on one database.
//!
//! Here the database is the source of truth for documents ([`DocumentSource::Database`]): the
//! newest row of `revisions` is a project's document, and the YAML files are written out from
//! it. Writers on every replica are serialized by one transaction-scoped advisory lock, so the
//! revision check, the promotion and the decision of an approval happen as one step even when two
//! replicas approve the same proposal at once (the second finds it decided). Every change-log
//! row is announced on [`CHANGES_CHANNEL`] at commit, so the other replicas learn of it at once.
//!
//! Columns are read with `Row::get`, whose types hold by construction: the tables are this
//! module's migrations, and opening refuses a database whose recorded steps differ.

use tokio_postgres::Row;

use crate::db::postgres::{CHANGES_CHANNEL, PgDatabase, PgTransaction};
use crate::db::{Migration, Migrations};
use crate::error::RulesError;
use crate::model::Source;

use super::backend::{
    Decision, DocumentSource, NewChange, NewProposal, NewTicket, PENDING_COUNTS, PROPOSAL_COLUMNS,
    PageRow, ProposalRow, RulesBackend, RulesTx, TICKET_COLUMNS, pending_counts,
};
use super::request::{ChangeRecord, PendingCounts, QueueFilter, ScopeTicket};

/// The advisory-lock key of rules writers.
const RULES_LOCK: i64 = 0x6272_6964_6c65_0002;

/// The rules tables in PostgreSQL. Steps 1 and 2 are [`SQLITE_MIGRATIONS`](super::SQLITE_MIGRATIONS)'s
/// steps in this dialect; step 3, the documents version, exists only here, where the database
/// holds the documents. Never edit a released step, add one.
pub const POSTGRES_MIGRATIONS: Migrations = Migrations {
    store: "rules",
    steps: &[
        Migration {
            version: 1,
            name: "baseline",
            sql: "
CREATE TABLE proposals (
    id BIGSERIAL PRIMARY KEY,
    project TEXT NOT NULL,
    source TEXT NOT NULL,
    proposed_by TEXT NOT NULL,
    agent_session TEXT,
    source_ref TEXT,
    base_revision BIGINT,
    change TEXT NOT NULL,
    summary TEXT NOT NULL,
    fingerprint TEXT,
    status TEXT NOT NULL DEFAULT 'pending',
    created_at TEXT NOT NULL,
    decided_by TEXT,
    decided_at TEXT,
    decision_note TEXT,
    applied_revision BIGINT
);
CREATE UNIQUE INDEX proposals_fingerprint
    ON proposals(project, fingerprint) WHERE fingerprint IS NOT NULL;
CREATE TABLE changes (
    id BIGSERIAL PRIMARY KEY,
    project TEXT NOT NULL,
    revision BIGINT NOT NULL,
    source TEXT NOT NULL,
    actor TEXT NOT NULL,
    summary TEXT NOT NULL,
    proposal_id BIGINT,
    at TEXT NOT NULL
);
CREATE TABLE revisions (
    project TEXT NOT NULL,
    revision BIGINT NOT NULL,
    document TEXT NOT NULL,
    PRIMARY KEY (project, revision)
);
CREATE TABLE scope_requests (
    id BIGSERIAL PRIMARY KEY,
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
        Migration {
            version: 3,
            name: "documents_version",
            // One number that every statement writing `revisions` raises in its own
            // transaction, by the store or by hand: a replica reads it to know whether any
            // document changed since it last read them all.
            sql: "
CREATE TABLE documents_version (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    version BIGINT NOT NULL
);
INSERT INTO documents_version (only_row, version) VALUES (TRUE, 0);
CREATE FUNCTION rules_documents_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE documents_version SET version = version + 1;
    RETURN NULL;
END
$$;
CREATE TRIGGER revisions_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON revisions
    FOR EACH STATEMENT EXECUTE FUNCTION rules_documents_changed();
",
        },
    ],
};

/// The PostgreSQL rules database.
#[derive(Debug, Clone)]
pub(crate) struct PostgresRules {
    db: PgDatabase,
}

impl PostgresRules {
    /// Migrates the database to this build's schema.
    pub(crate) fn open(db: PgDatabase) -> Result<Self, RulesError> {
        db.migrate(&POSTGRES_MIGRATIONS)?;
        Ok(Self { db })
    }
}

impl RulesBackend for PostgresRules {
    fn begin(&self, write: bool) -> Result<Box<dyn RulesTx + '_>, RulesError> {
        let client = self.db.client()?;
        let tx = client.begin(write.then_some(RULES_LOCK))?;
        Ok(Box::new(PostgresTx { tx }))
    }

    fn documents(&self) -> DocumentSource {
        DocumentSource::Database
    }

    fn documents_version(&self) -> Result<Option<u64>, RulesError> {
        let row = self
            .db
            .client()?
            .query_opt("SELECT version FROM documents_version", &[])?;
        Ok(row.map(|r| r.get::<_, i64>(0) as u64))
    }

    fn latest_documents(&self) -> Result<Vec<(String, String)>, RulesError> {
        // One statement: one round trip and one snapshot for every project.
        Ok(self
            .db
            .client()?
            .query(
                "SELECT DISTINCT ON (project) project, document FROM revisions \
                 ORDER BY project, revision DESC",
                &[],
            )?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    fn latest_document(&self, project: &str) -> Result<Option<String>, RulesError> {
        // One statement is its own snapshot: no BEGIN and ROLLBACK round trips around it.
        Ok(self
            .db
            .client()?
            .query_opt(LATEST_DOCUMENT, &[&project])?
            .map(|r| r.get(0)))
    }

    fn pending_counts(&self) -> Result<PendingCounts, RulesError> {
        // One statement is its own snapshot of both tables.
        let row = self.db.client()?.query_opt(PENDING_COUNTS, &[])?;
        Ok(row.map_or_else(PendingCounts::default, |r| {
            pending_counts(r.get(0), r.get(1))
        }))
    }
}

/// The newest revision's text of one project.
const LATEST_DOCUMENT: &str =
    "SELECT document FROM revisions WHERE project = $1 ORDER BY revision DESC LIMIT 1";

/// One transaction (reads too run in one: a consistent snapshot of several queries, see
/// [`PgClient::begin`](crate::db::postgres::PgClient::begin)).
struct PostgresTx {
    tx: PgTransaction,
}

fn as_u64s(rows: &[Row]) -> Vec<u64> {
    rows.iter().map(|r| r.get::<_, i64>(0) as u64).collect()
}

/// The `kind` and `id` of a stored change (each `None` when absent or not a string), or `None`
/// for a text that is not a JSON object: a hand edit or a corrupted row. `change::jsonb` in a
/// statement fails the whole statement on one such row (so one bad row of a project failed
/// every guardrail proposed there), and the servers before PostgreSQL 16 (the tests run 15)
/// have no check (`IS JSON`, `pg_input_is_valid`) that would skip it without PL/pgSQL; so the
/// statements select the few rows whose text holds the id as the store writes it
/// ([`json_string`]) and read them here, as SQLite's `json_valid` guard reads them there.
fn change_fields(change: &str) -> Option<(Option<String>, Option<String>)> {
    let serde_json::Value::Object(fields) = serde_json::from_str(change).ok()? else {
        return None;
    };
    let text = |key: &str| fields.get(key).and_then(|v| v.as_str()).map(str::to_string);
    Some((text("kind"), text("id")))
}

/// `text` as a JSON string, quoted and escaped as the store writes it in a change: what the
/// statements above look for in the text before reading a row's JSON.
fn json_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// A proposal's row, read as [`PROPOSAL_COLUMNS`] lists them.
fn proposal_row(r: &Row) -> ProposalRow {
    ProposalRow {
        id: r.get(0),
        project: r.get(1),
        source: r.get(2),
        proposed_by: r.get(3),
        agent_session: r.get(4),
        source_ref: r.get(5),
        base_revision: r.get(6),
        change: r.get(7),
        summary: r.get(8),
        status: r.get(9),
        created_at: r.get(10),
        decided_by: r.get(11),
        decided_at: r.get(12),
        decision_note: r.get(13),
        applied_revision: r.get(14),
    }
}

fn i64_opt(v: Option<u64>) -> Option<i64> {
    v.map(|v| v as i64)
}

impl RulesTx for PostgresTx {
    fn postgres(&self) -> Option<&crate::db::postgres::PgClient> {
        Some(&self.tx)
    }

    fn latest_document(&mut self, project: &str) -> Result<Option<String>, RulesError> {
        Ok(self
            .tx
            .query_opt(LATEST_DOCUMENT, &[&project])?
            .map(|r| r.get(0)))
    }

    fn document_projects(&mut self) -> Result<Vec<String>, RulesError> {
        Ok(self
            .tx
            .query(
                "SELECT DISTINCT project FROM revisions ORDER BY project",
                &[],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    fn put_revision(&mut self, project: &str, revision: u64, text: &str) -> Result<(), RulesError> {
        self.tx.execute(
            "INSERT INTO revisions (project, revision, document) VALUES ($1, $2, $3)
             ON CONFLICT (project, revision) DO UPDATE SET document = EXCLUDED.document",
            &[&project, &(revision as i64), &text],
        )?;
        Ok(())
    }

    fn revision(&mut self, project: &str, revision: u64) -> Result<Option<String>, RulesError> {
        Ok(self
            .tx
            .query_opt(
                "SELECT document FROM revisions WHERE project = $1 AND revision = $2",
                &[&project, &(revision as i64)],
            )?
            .map(|r| r.get(0)))
    }

    fn latest_revision(&mut self, project: &str) -> Result<Option<u64>, RulesError> {
        Ok(self
            .tx
            .query_opt(
                "SELECT revision FROM revisions WHERE project = $1 ORDER BY revision DESC LIMIT 1",
                &[&project],
            )?
            .and_then(|r| u64::try_from(r.get::<_, i64>(0)).ok()))
    }

    fn insert_proposal(&mut self, p: &NewProposal<'_>) -> Result<Option<u64>, RulesError> {
        let row = self.tx.query_opt(
            "INSERT INTO proposals (project, source, proposed_by, agent_session, source_ref, base_revision, change, summary, fingerprint, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT DO NOTHING RETURNING id",
            &[
                &p.project,
                &p.origin.source.as_str(),
                &p.origin.proposed_by,
                &p.origin.agent_session,
                &p.origin.source_ref,
                &i64_opt(p.base_revision),
                &p.change_json,
                &p.summary,
                &p.fingerprint,
                &p.created_at,
            ],
        )?;
        Ok(row.map(|r| r.get::<_, i64>(0) as u64))
    }

    fn proposal(&mut self, id: u64) -> Result<Option<ProposalRow>, RulesError> {
        let row = self.tx.query_opt(
            &format!("SELECT {PROPOSAL_COLUMNS} FROM proposals WHERE id = $1"),
            &[&(id as i64)],
        )?;
        Ok(row.as_ref().map(proposal_row))
    }

    fn proposal_ids(
        &mut self,
        project: Option<&str>,
        include_decided: bool,
    ) -> Result<Vec<u64>, RulesError> {
        let rows = self.tx.query(
            "SELECT id FROM proposals WHERE ($1::text IS NULL OR project = $1) AND ($2 OR status = 'pending') ORDER BY id",
            &[&project, &include_decided],
        )?;
        Ok(as_u64s(&rows))
    }

    fn proposal_page(
        &mut self,
        filter: &QueueFilter,
        after: u64,
        limit: usize,
    ) -> Result<Vec<PageRow>, RulesError> {
        let rows = self.tx.query(
            &format!(
                "SELECT {PROPOSAL_COLUMNS} FROM proposals
                 WHERE ($1::text IS NULL OR project = $1) AND ($2::text IS NULL OR status = $2)
                   AND ($3::text IS NULL OR source = $3) AND ($4::text IS NULL OR proposed_by = $4)
                   AND id > $5
                 ORDER BY id LIMIT $6"
            ),
            &[
                &filter.project,
                &filter.status.map(|s| s.as_str()),
                &filter.source.map(|s| s.as_str()),
                &filter.proposed_by,
                // Above every id BIGSERIAL gives: nothing follows.
                &i64::try_from(after).unwrap_or(i64::MAX),
                &i64::try_from(limit).unwrap_or(i64::MAX),
            ],
        )?;
        Ok(rows
            .iter()
            .map(|r| {
                let row = proposal_row(r);
                (u64::try_from(row.id).unwrap_or(0), Ok(row))
            })
            .collect())
    }

    fn pending_proposals(&mut self, project: &str) -> Result<u64, RulesError> {
        let rows = self.tx.query(
            "SELECT count(*) FROM proposals WHERE project = $1 AND status = 'pending'",
            &[&project],
        )?;
        let n: i64 = rows.first().map_or(0, |r| r.get(0));
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn pending_proposals_by(
        &mut self,
        project: &str,
        proposed_by: &str,
    ) -> Result<u64, RulesError> {
        let rows = self.tx.query(
            "SELECT count(*) FROM proposals WHERE project = $1 AND status = 'pending' AND proposed_by = $2",
            &[&project, &proposed_by],
        )?;
        let n: i64 = rows.first().map_or(0, |r| r.get(0));
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn pending_guardrail_proposals(
        &mut self,
        project: &str,
        id: &str,
    ) -> Result<Vec<u64>, RulesError> {
        // Read in Rust, not with `change::jsonb`: see [`change_fields`].
        let rows = self.tx.query(
            "SELECT id, change FROM proposals
             WHERE project = $1 AND status = 'pending' AND strpos(change, $2) > 0
             ORDER BY id",
            &[&project, &json_string(id)],
        )?;
        Ok(rows
            .iter()
            .filter(|r| {
                change_fields(r.get(1)).is_some_and(|(kind, gid)| {
                    kind.as_deref() == Some("guardrail") && gid.as_deref() == Some(id)
                })
            })
            .map(|r| r.get::<_, i64>(0) as u64)
            .collect())
    }

    fn guardrail_ids_from(&mut self, project: &str, base: &str) -> Result<Vec<String>, RulesError> {
        // What SQLite's statement selects, read in Rust, not with `change::jsonb`: see
        // [`change_fields`]. The text holds `"<base>` (the id's opening quote and its start).
        let mut opening = json_string(base);
        opening.pop();
        let rows = self.tx.query(
            "SELECT change FROM proposals WHERE project = $1 AND strpos(change, $2) > 0",
            &[&project, &opening],
        )?;
        let dashed = format!("{base}-");
        Ok(rows
            .iter()
            .filter_map(|r| change_fields(r.get(0)).and_then(|(_, gid)| gid))
            .filter(|gid| gid == base || gid.starts_with(&dashed))
            .collect())
    }

    fn decide_proposal(&mut self, id: u64, d: &Decision<'_>) -> Result<(), RulesError> {
        self.tx.execute(
            "UPDATE proposals SET status = $1, decided_by = $2, decided_at = $3, decision_note = $4, applied_revision = $5 WHERE id = $6",
            &[
                &d.status,
                &d.decided_by,
                &d.at,
                &d.note,
                &i64_opt(d.applied_revision),
                &(id as i64),
            ],
        )?;
        Ok(())
    }

    fn record_change(&mut self, c: &NewChange<'_>) -> Result<u64, RulesError> {
        let row = self.tx.query_opt(
            "INSERT INTO changes (project, revision, source, actor, summary, proposal_id, at) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            &[
                &c.project,
                &(c.revision as i64),
                &c.source.as_str(),
                &c.actor,
                &c.summary,
                &i64_opt(c.proposal_id),
                &c.at,
            ],
        )?;
        let id = row
            .map(|r| r.get::<_, i64>(0) as u64)
            .ok_or_else(|| RulesError::Postgres("the change log returned no id".into()))?;
        // Delivered to every listener when this transaction commits, never before.
        self.tx.execute(
            "SELECT pg_notify($1, $2)",
            &[&CHANGES_CHANNEL, &format!("rules:{}:{id}", c.project)],
        )?;
        Ok(id)
    }

    fn changes(
        &mut self,
        project: Option<&str>,
        after: u64,
    ) -> Result<Vec<ChangeRecord>, RulesError> {
        let rows = self.tx.query(
            "SELECT id, project, revision, source, actor, summary, proposal_id, at FROM changes
             WHERE ($1::text IS NULL OR project = $1) AND id > $2 ORDER BY id",
            &[&project, &(after as i64)],
        )?;
        Ok(rows
            .iter()
            .map(|r| ChangeRecord {
                id: r.get::<_, i64>(0) as u64,
                project: r.get(1),
                revision: r.get::<_, i64>(2) as u64,
                source: Source::parse(r.get::<_, &str>(3)).unwrap_or(Source::User),
                actor: r.get(4),
                summary: r.get(5),
                proposal_id: r.get::<_, Option<i64>>(6).map(|v| v as u64),
                at: r.get(7),
            })
            .collect())
    }

    fn last_change_id(&mut self) -> Result<u64, RulesError> {
        let row = self.tx.query_opt("SELECT max(id) FROM changes", &[])?;
        Ok(row.and_then(|r| r.get::<_, Option<i64>>(0)).unwrap_or(0) as u64)
    }

    fn insert_ticket(&mut self, t: &NewTicket<'_>) -> Result<u64, RulesError> {
        let row = self.tx.query_opt(
            "INSERT INTO scope_requests (project, agent, agent_session, action, reason, created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
            &[&t.project, &t.agent, &t.agent_session, &t.action, &t.reason, &t.created_at],
        )?;
        row.map(|r| r.get::<_, i64>(0) as u64)
            .ok_or_else(|| RulesError::Postgres("the ticket insert returned no id".into()))
    }

    fn ticket(&mut self, id: u64) -> Result<Option<ScopeTicket>, RulesError> {
        let row = self.tx.query_opt(
            &format!("SELECT {TICKET_COLUMNS} FROM scope_requests WHERE id = $1"),
            &[&(id as i64)],
        )?;
        Ok(row.map(|r| ScopeTicket {
            id: r.get::<_, i64>(0) as u64,
            project: r.get(1),
            agent: r.get(2),
            agent_session: r.get(3),
            action: r.get(4),
            reason: r.get(5),
            status: r.get(6),
            created_at: r.get(7),
            decided_by: r.get(8),
            decided_at: r.get(9),
            note: r.get(10),
        }))
    }

    fn ticket_ids(&mut self, include_decided: bool) -> Result<Vec<u64>, RulesError> {
        let rows = self.tx.query(
            "SELECT id FROM scope_requests WHERE ($1 OR status = 'pending') ORDER BY id",
            &[&include_decided],
        )?;
        Ok(as_u64s(&rows))
    }

    fn pending_tickets(&mut self, project: &str) -> Result<u64, RulesError> {
        let rows = self.tx.query(
            "SELECT count(*) FROM scope_requests WHERE project = $1 AND status = 'pending'",
            &[&project],
        )?;
        let n: i64 = rows.first().map_or(0, |r| r.get(0));
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn pending_tickets_by(&mut self, project: &str, agent: &str) -> Result<u64, RulesError> {
        let rows = self.tx.query(
            "SELECT count(*) FROM scope_requests WHERE project = $1 AND status = 'pending' AND agent = $2",
            &[&project, &agent],
        )?;
        let n: i64 = rows.first().map_or(0, |r| r.get(0));
        Ok(u64::try_from(n).unwrap_or(0))
    }

    fn decide_ticket(&mut self, id: u64, d: &Decision<'_>) -> Result<(), RulesError> {
        self.tx.execute(
            "UPDATE scope_requests SET status = $1, decided_by = $2, decided_at = $3, note = $4 WHERE id = $5",
            &[&d.status, &d.decided_by, &d.at, &d.note, &(id as i64)],
        )?;
        Ok(())
    }

    fn commit(self: Box<Self>) -> Result<(), RulesError> {
        self.tx.commit()
    }
}
