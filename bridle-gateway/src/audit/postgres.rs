//! The PostgreSQL side of the log, for gateway replicas sharing one database: the same two
//! tables as the SQLite file in this dialect, and ONE hash chain however many replicas append.
//!
//! Every append (and every step of a retention pass) takes one transaction-scoped advisory lock, then
//! reads the chain's head row `FOR UPDATE`, links its rows to it and moves it, all in one
//! transaction: two replicas appending at the same moment run one after the other, so ids stay
//! dense and each entry links to the one written just before it, whichever replica wrote that.
//! A retention pass holds that lock only for one step (at most [`store::TRIM_STEP`] entries
//! deleted) at a time, never for the whole pass: appends wait on the lock for at most the
//! rules store's write-lock wait, and a long delete would make them fail, and be cut off by a
//! statement deadline itself.
//! Verification reads one snapshot (`REPEATABLE READ`), so it never sees half of an append.
//! Queries and exports are the SQLite ones in this dialect (`query::select` writes both).

use bridle_rules::db::postgres::{PgClient, PgDatabase};
use bridle_rules::db::{Migration, Migrations};
use tokio_postgres::types::ToSql;

use super::entry::Entry;
use super::error::AuditError;
use super::query::{self, Arg, AuditPage, AuditQuery};
use super::row::{COLUMNS, GENESIS, Row};
use super::store::{self, ChainEnds, Retention, TrimPass, VerifyReport};

/// The advisory-lock key of audit appends and retention passes.
const AUDIT_LOCK: i64 = 0x6272_6964_6c65_0004;

/// Rows read per round trip while verifying.
const VERIFY_CHUNK: i64 = 2000;

/// The log's tables in PostgreSQL (`schema_migrations`, store `audit`, numbered like the
/// SQLite steps). Never edit a released step, add one.
pub const AUDIT_PG_MIGRATIONS: Migrations = Migrations {
    store: "audit",
    steps: &[Migration {
        version: 1,
        name: "baseline",
        sql: "
CREATE TABLE gateway_audit (
    id BIGINT PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    source_type TEXT NOT NULL,
    actor TEXT NOT NULL,
    surface TEXT,
    agent_type TEXT,
    session TEXT,
    client_name TEXT,
    client_version TEXT,
    source_url TEXT,
    kind TEXT NOT NULL,
    project TEXT,
    subject TEXT,
    agent TEXT,
    before_rev TEXT,
    after_rev TEXT,
    digest TEXT,
    outcome TEXT NOT NULL,
    code TEXT,
    tool_kind TEXT,
    capability TEXT,
    duration_us BIGINT,
    detail TEXT,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
CREATE INDEX gateway_audit_at ON gateway_audit (at_ms);
CREATE INDEX gateway_audit_actor ON gateway_audit (source_type, actor);
CREATE INDEX gateway_audit_agent ON gateway_audit (agent);
CREATE INDEX gateway_audit_project ON gateway_audit (project);
CREATE INDEX gateway_audit_kind ON gateway_audit (kind);
CREATE TABLE gateway_audit_chain (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    anchor_id BIGINT NOT NULL,
    anchor_hash TEXT NOT NULL,
    head_id BIGINT NOT NULL,
    head_hash TEXT NOT NULL
);
",
    }],
};

fn pg(e: bridle_rules::RulesError) -> AuditError {
    match e {
        bridle_rules::RulesError::DatabaseTooNew { .. }
        | bridle_rules::RulesError::MigrationChanged { .. } => AuditError::Schema(e.to_string()),
        other => AuditError::Postgres(other.to_string()),
    }
}

/// Migrates the tables and creates the chain's row on a new database.
pub(crate) fn open(db: &PgDatabase) -> Result<(), AuditError> {
    db.migrate(&AUDIT_PG_MIGRATIONS).map_err(pg)?;
    db.client()
        .map_err(pg)?
        .execute(
            "INSERT INTO gateway_audit_chain (one, anchor_id, anchor_hash, head_id, head_hash)
             VALUES (1, 0, $1, 0, $1) ON CONFLICT (one) DO NOTHING",
            &[&GENESIS],
        )
        .map_err(pg)?;
    Ok(())
}

fn ends_in(c: &PgClient, lock: bool) -> Result<ChainEnds, AuditError> {
    let sql = if lock {
        "SELECT anchor_id, anchor_hash, head_id, head_hash FROM gateway_audit_chain WHERE one = 1 FOR UPDATE"
    } else {
        "SELECT anchor_id, anchor_hash, head_id, head_hash FROM gateway_audit_chain WHERE one = 1"
    };
    let r = c
        .query_opt(sql, &[])
        .map_err(pg)?
        .ok_or_else(|| AuditError::Postgres("the audit chain's row is missing".into()))?;
    Ok(ChainEnds {
        anchor_id: r.get(0),
        anchor_hash: r.get(1),
        head_id: r.get(2),
        head_hash: r.get(3),
    })
}

/// The chain's ends as stored.
pub(crate) fn ends(db: &PgDatabase) -> Result<ChainEnds, AuditError> {
    ends_in(&db.client().map_err(pg)?, false)
}

// Columns are read with `Row::get`, whose types hold by construction: the tables are this
// module's migrations, and opening refuses a database whose recorded steps differ.
fn row_of(r: &tokio_postgres::Row) -> Row {
    Row {
        id: r.get(0),
        at_ms: r.get(1),
        source_type: r.get(2),
        actor: r.get(3),
        surface: r.get(4),
        agent_type: r.get(5),
        session: r.get(6),
        client_name: r.get(7),
        client_version: r.get(8),
        source_url: r.get(9),
        kind: r.get(10),
        project: r.get(11),
        subject: r.get(12),
        agent: r.get(13),
        before_rev: r.get(14),
        after_rev: r.get(15),
        digest: r.get(16),
        outcome: r.get(17),
        code: r.get(18),
        tool_kind: r.get(19),
        capability: r.get(20),
        duration_us: r.get(21),
        detail: r.get(22),
        prev_hash: r.get(23),
        hash: r.get(24),
    }
}

fn insert(c: &PgClient, row: &Row) -> Result<(), AuditError> {
    c.execute(
        "INSERT INTO gateway_audit (id, at_ms, source_type, actor, surface, agent_type, session,
         client_name, client_version, source_url, kind, project, subject, agent, before_rev,
         after_rev, digest, outcome, code, tool_kind, capability, duration_us, detail,
         prev_hash, hash)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
         $18, $19, $20, $21, $22, $23, $24, $25)",
        &[
            &row.id,
            &row.at_ms,
            &row.source_type,
            &row.actor,
            &row.surface,
            &row.agent_type,
            &row.session,
            &row.client_name,
            &row.client_version,
            &row.source_url,
            &row.kind,
            &row.project,
            &row.subject,
            &row.agent,
            &row.before_rev,
            &row.after_rev,
            &row.digest,
            &row.outcome,
            &row.code,
            &row.tool_kind,
            &row.capability,
            &row.duration_us,
            &row.detail,
            &row.prev_hash,
            &row.hash,
        ],
    )
    .map_err(pg)?;
    Ok(())
}

/// Links `entries` to the head and moves it; the caller holds the lock's transaction.
fn append_in(c: &PgClient, entries: &[(Entry, i64)]) -> Result<Vec<u64>, AuditError> {
    let head = ends_in(c, true)?;
    let (mut id, mut prev) = (head.head_id, head.head_hash);
    let mut ids = Vec::with_capacity(entries.len());
    for (entry, at_ms) in entries {
        id += 1;
        let row = Row::from_entry(entry, id, *at_ms, &prev);
        insert(c, &row)?;
        prev = row.hash;
        ids.push(u64::try_from(id).unwrap_or(0));
    }
    c.execute(
        "UPDATE gateway_audit_chain SET head_id = $1, head_hash = $2 WHERE one = 1",
        &[&id, &prev],
    )
    .map_err(pg)?;
    Ok(ids)
}

/// Appends `entries` (each with its time) in one transaction after whatever any replica wrote
/// last; returns their ids.
pub(crate) fn append(db: &PgDatabase, entries: &[(Entry, i64)]) -> Result<Vec<u64>, AuditError> {
    let tx = db
        .client()
        .map_err(pg)?
        .begin(Some(AUDIT_LOCK))
        .map_err(pg)?;
    let ids = append_in(&tx, entries)?;
    tx.commit().map_err(pg)?;
    Ok(ids)
}

/// As [`store::age_through`]: read once per pass, outside the lock.
pub(crate) fn age_through(
    db: &PgDatabase,
    retention: Retention,
    now_ms: i64,
) -> Result<Option<i64>, AuditError> {
    let Some(before) = store::age_before(retention, now_ms) else {
        return Ok(None);
    };
    Ok(db
        .client()
        .map_err(pg)?
        .query_opt(
            "SELECT MAX(id) FROM gateway_audit WHERE at_ms < $1",
            &[&before],
        )
        .map_err(pg)?
        .and_then(|r| r.get(0)))
}

/// As [`store::trim_step`]: one step in its own transaction under the appenders' lock, so
/// appends on every replica take the lock between steps (PostgreSQL grants a released lock to
/// the sessions already waiting for it before a new request).
pub(crate) fn trim_step(
    db: &PgDatabase,
    pass: &mut TrimPass,
    at_ms: i64,
) -> Result<Option<bool>, AuditError> {
    let tx = db
        .client()
        .map_err(pg)?
        .begin(Some(AUDIT_LOCK))
        .map_err(pg)?;
    let ends = ends_in(&tx, true)?;
    let Some(plan) = pass.plan(&ends) else {
        return Ok(None);
    };
    let mut cutoff: Option<i64> = None;
    if plan.count_take > 0 {
        let by_count: Option<i64> = tx
            .query_opt(
                "SELECT MAX(id) FROM (SELECT id FROM gateway_audit WHERE id > $1 ORDER BY id
                 LIMIT $2) AS step",
                &[&ends.anchor_id, &plan.count_take],
            )
            .map_err(pg)?
            .and_then(|r| r.get(0));
        cutoff = cutoff.max(by_count);
    }
    if let Some(through) = plan.age_through {
        let by_age: Option<i64> = tx
            .query_opt(
                "SELECT MAX(id) FROM (SELECT id FROM gateway_audit WHERE id > $1 AND id <= $2
                 ORDER BY id LIMIT $3) AS step",
                &[&ends.anchor_id, &through, &plan.max_rows],
            )
            .map_err(pg)?
            .and_then(|r| r.get(0));
        cutoff = cutoff.max(by_age);
    }
    let Some(cutoff) = cutoff else {
        return Ok(None);
    };
    let anchor_hash: String = tx
        .query_opt("SELECT hash FROM gateway_audit WHERE id = $1", &[&cutoff])
        .map_err(pg)?
        .map(|r| r.get(0))
        .ok_or_else(|| AuditError::Postgres(format!("audit entry {cutoff} vanished")))?;
    let removed = tx
        .execute("DELETE FROM gateway_audit WHERE id <= $1", &[&cutoff])
        .map_err(pg)?;
    tx.execute(
        "UPDATE gateway_audit_chain SET anchor_id = $1, anchor_hash = $2 WHERE one = 1",
        &[&cutoff, &anchor_hash],
    )
    .map_err(pg)?;
    let (entry, more) = pass.step_entry(&ends, cutoff, removed);
    let ids = append_in(&tx, &[(entry, at_ms)])?;
    tx.commit().map_err(pg)?;
    pass.committed(cutoff, removed, ids.first().copied().unwrap_or(0));
    Ok(Some(more))
}

/// Walks the chain in one snapshot.
pub(crate) fn verify(db: &PgDatabase) -> Result<VerifyReport, AuditError> {
    let tx = db.client().map_err(pg)?.begin(None).map_err(pg)?;
    tx.batch("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .map_err(pg)?;
    let ends = ends_in(&tx, false)?;
    let stale: Option<i64> = tx
        .query_opt(
            "SELECT MIN(id) FROM gateway_audit WHERE id <= $1",
            &[&ends.anchor_id],
        )
        .map_err(pg)?
        .and_then(|r| r.get(0));
    let sql = format!("SELECT {COLUMNS} FROM gateway_audit WHERE id > $1 ORDER BY id LIMIT $2");
    let mut buffered: std::collections::VecDeque<Row> = std::collections::VecDeque::new();
    let mut after = ends.anchor_id;
    let mut done = false;
    let tx = &tx;
    let next_row = || -> Result<Option<Row>, AuditError> {
        if buffered.is_empty() && !done {
            let rows = tx.query(&sql, &[&after, &VERIFY_CHUNK]).map_err(pg)?;
            done = i64::try_from(rows.len()).unwrap_or(0) < VERIFY_CHUNK;
            buffered.extend(rows.iter().map(row_of));
            if let Some(last) = buffered.back() {
                after = last.id;
            }
        }
        Ok(buffered.pop_front())
    };
    let prev_hash_of = |id: i64| -> Result<Option<String>, AuditError> {
        Ok(tx
            .query_opt("SELECT prev_hash FROM gateway_audit WHERE id = $1", &[&id])
            .map_err(pg)?
            .map(|r| r.get(0)))
    };
    store::verify_chain(&ends, stale, next_row, prev_hash_of)
}

/// One page of `query`.
pub(crate) fn page(db: &PgDatabase, query: &AuditQuery) -> Result<AuditPage, AuditError> {
    let select = query::select(query, '$')?;
    let args: Vec<&(dyn ToSql + Sync)> = select
        .args
        .iter()
        .map(|a| match a {
            Arg::Int(i) => i as &(dyn ToSql + Sync),
            Arg::Text(t) => t as &(dyn ToSql + Sync),
        })
        .collect();
    let rows = db
        .client()
        .map_err(pg)?
        .query_uncached(&select.sql, &args)
        .map_err(pg)?;
    query::finish(&select, rows.iter().map(|r| Ok(row_of(r))))
}
