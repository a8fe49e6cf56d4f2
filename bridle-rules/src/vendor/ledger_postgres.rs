//! The feed ledger's rows in PostgreSQL, shared by every gateway replica on one database.
//!
//! The same two tables as the SQLite file, in this dialect (`BIGINT` proposal ids), migrated
//! as the `vendor_feed` store of `schema_migrations` beside the rules store's tables. Each
//! write is one statement, an upsert, so two replicas recording the same source or candidate
//! at once leave one row with the later values; which replica queued a candidate is decided
//! before, in the rules store's serialized transaction.
//!
//! Columns are read with `Row::get`, whose types hold by construction: the tables are this
//! module's migrations, and opening refuses a database whose recorded steps differ.

use tokio_postgres::Row;

use super::feed::{Validators, VendorCandidate};
use super::ledger::CANDIDATE_COLUMNS;
use crate::RulesError;
use crate::db::postgres::PgClient;
use crate::db::{Migration, Migrations};

/// The ledger's tables in PostgreSQL, numbered like
/// [`LEDGER_MIGRATIONS`](super::LEDGER_MIGRATIONS) (the same tables in this dialect). Never
/// edit a released step, add one.
pub const LEDGER_PG_MIGRATIONS: Migrations = Migrations {
    store: "vendor_feed",
    steps: &[Migration {
        version: 1,
        name: "baseline",
        sql: "
CREATE TABLE vendor_feed_sources (
    project TEXT NOT NULL,
    agent TEXT NOT NULL,
    url TEXT NOT NULL,
    etag TEXT,
    last_modified TEXT,
    fetched_at TEXT NOT NULL,
    PRIMARY KEY (project, agent, url)
);
CREATE TABLE vendor_candidates (
    proposal_id BIGINT PRIMARY KEY,
    project TEXT NOT NULL,
    agent TEXT NOT NULL,
    statement TEXT NOT NULL,
    source_url TEXT NOT NULL,
    fetched_at TEXT NOT NULL,
    excerpt TEXT NOT NULL
);
CREATE INDEX vendor_candidates_project ON vendor_candidates (project, proposal_id);
",
    }],
};

fn candidate_row(r: &Row) -> VendorCandidate {
    VendorCandidate {
        proposal_id: r.get::<_, i64>(0) as u64,
        project: r.get(1),
        agent: r.get(2),
        statement: r.get(3),
        source_url: r.get(4),
        fetched_at: r.get(5),
        excerpt: r.get(6),
    }
}

pub(super) fn validators(
    c: &PgClient,
    project: &str,
    agent: &str,
    url: &str,
) -> Result<Option<Validators>, RulesError> {
    Ok(c.query_opt(
        "SELECT etag, last_modified FROM vendor_feed_sources WHERE project = $1 AND agent = $2 AND url = $3",
        &[&project, &agent, &url],
    )?
    .map(|r| Validators {
        etag: r.get(0),
        last_modified: r.get(1),
    }))
}

pub(super) fn candidate(
    c: &PgClient,
    proposal_id: u64,
) -> Result<Option<VendorCandidate>, RulesError> {
    let Ok(id) = i64::try_from(proposal_id) else {
        return Ok(None);
    };
    Ok(c.query_opt(
        &format!("SELECT {CANDIDATE_COLUMNS} FROM vendor_candidates WHERE proposal_id = $1"),
        &[&id],
    )?
    .as_ref()
    .map(candidate_row))
}

pub(super) fn candidates(c: &PgClient, project: &str) -> Result<Vec<VendorCandidate>, RulesError> {
    Ok(c.query(
        &format!(
            "SELECT {CANDIDATE_COLUMNS} FROM vendor_candidates WHERE project = $1 ORDER BY proposal_id"
        ),
        &[&project],
    )?
    .iter()
    .map(candidate_row)
    .collect())
}

pub(super) fn touch_source(
    c: &PgClient,
    project: &str,
    agent: &str,
    url: &str,
    fetched_at: &str,
) -> Result<(), RulesError> {
    c.execute(
        "UPDATE vendor_feed_sources SET fetched_at = $4 WHERE project = $1 AND agent = $2 AND url = $3",
        &[&project, &agent, &url, &fetched_at],
    )?;
    Ok(())
}

pub(super) fn put_candidate(c: &PgClient, v: &VendorCandidate) -> Result<(), RulesError> {
    let id = i64::try_from(v.proposal_id).map_err(|_| {
        RulesError::Postgres(format!("proposal id {} is out of range", v.proposal_id))
    })?;
    c.execute(
        &format!(
            "INSERT INTO vendor_candidates ({CANDIDATE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (proposal_id) DO UPDATE SET project = excluded.project, agent = excluded.agent,
                 statement = excluded.statement, source_url = excluded.source_url,
                 fetched_at = excluded.fetched_at, excerpt = excluded.excerpt"
        ),
        &[
            &id,
            &v.project,
            &v.agent,
            &v.statement,
            &v.source_url,
            &v.fetched_at,
            &v.excerpt,
        ],
    )?;
    Ok(())
}

pub(super) fn put_source(
    c: &PgClient,
    project: &str,
    agent: &str,
    url: &str,
    validators: &Validators,
    fetched_at: &str,
) -> Result<(), RulesError> {
    c.execute(
        "INSERT INTO vendor_feed_sources (project, agent, url, etag, last_modified, fetched_at) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (project, agent, url) DO UPDATE SET etag = excluded.etag, last_modified = excluded.last_modified, fetched_at = excluded.fetched_at",
        &[
            &project,
            &agent,
            &url,
            &validators.etag,
            &validators.last_modified,
            &fetched_at,
        ],
    )?;
    Ok(())
}
