//! The SQLite side of the log: the schema, appending entries to the chain, retention, and
//! walking the chain to verify it.
//!
//! Two tables: `gateway_audit` (one row per entry, [`Row`]'s columns) and `gateway_audit_chain`
//! (one row: the anchor, the id and hash the chain starts after, which retention moves forward,
//! and the head, the last id and hash written). Every append runs in a `BEGIN IMMEDIATE`
//! transaction that reads the head, links the new rows to it and moves it, so two writers (two
//! processes, say) can never fork the chain, and a failed transaction leaves no trace.
//! Retention ([`TrimPass`], driven by `writer::run_retention`) runs in steps, each its own
//! `BEGIN IMMEDIATE` transaction removing at most [`TRIM_STEP`] entries: the file's write lock
//! is never held for a long delete, and the chain is whole after every step.

use std::path::Path;
use std::time::Duration;

use bridle_rules::db::{Migration, Migrations, migrate_sqlite};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::Serialize;

use super::entry::{Entry, Kind};
use super::error::AuditError;
use super::row::{COLUMNS, GENESIS, Row};

/// The log's tables as numbered, checksummed steps (`schema_migrations`, store `audit`). Step 1
/// is the schema from before versioning, so such a file is adopted as it is; never edit a
/// released step, add one.
pub const AUDIT_MIGRATIONS: Migrations = Migrations {
    store: "audit",
    steps: &[Migration {
        version: 1,
        name: "baseline",
        sql: "
    CREATE TABLE IF NOT EXISTS gateway_audit (
        id INTEGER PRIMARY KEY,
        at_ms INTEGER NOT NULL,
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
        duration_us INTEGER,
        detail TEXT,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS gateway_audit_at ON gateway_audit (at_ms);
    CREATE INDEX IF NOT EXISTS gateway_audit_actor ON gateway_audit (source_type, actor);
    CREATE INDEX IF NOT EXISTS gateway_audit_agent ON gateway_audit (agent);
    CREATE INDEX IF NOT EXISTS gateway_audit_project ON gateway_audit (project);
    CREATE INDEX IF NOT EXISTS gateway_audit_kind ON gateway_audit (kind);
    CREATE TABLE IF NOT EXISTS gateway_audit_chain (
        one INTEGER PRIMARY KEY CHECK (one = 1),
        anchor_id INTEGER NOT NULL,
        anchor_hash TEXT NOT NULL,
        head_id INTEGER NOT NULL,
        head_hash TEXT NOT NULL
    );
",
    }],
};

/// Where the chain starts (after retention) and ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChainEnds {
    pub anchor_id: i64,
    pub anchor_hash: String,
    pub head_id: i64,
    pub head_hash: String,
}

/// Opens the database at `path` (WAL, a busy timeout) and creates the tables.
pub(crate) fn open(path: &Path, fsync: bool) -> Result<Connection, AuditError> {
    let mut conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", if fsync { "FULL" } else { "NORMAL" })?;
    conn.busy_timeout(Duration::from_secs(5))?;
    migrate_sqlite(&mut conn, &AUDIT_MIGRATIONS).map_err(|e| match e {
        bridle_rules::RulesError::Database(e) => AuditError::Database(e),
        other => AuditError::Schema(other.to_string()),
    })?;
    conn.execute(
        "INSERT OR IGNORE INTO gateway_audit_chain (one, anchor_id, anchor_hash, head_id, head_hash)
         VALUES (1, 0, ?1, 0, ?1)",
        params![GENESIS],
    )?;
    Ok(conn)
}

/// The chain's ends as stored.
pub(crate) fn ends(conn: &Connection) -> Result<ChainEnds, AuditError> {
    Ok(conn.query_row(
        "SELECT anchor_id, anchor_hash, head_id, head_hash FROM gateway_audit_chain WHERE one = 1",
        [],
        |r| {
            Ok(ChainEnds {
                anchor_id: r.get(0)?,
                anchor_hash: r.get(1)?,
                head_id: r.get(2)?,
                head_hash: r.get(3)?,
            })
        },
    )?)
}

/// Appends `entries` (each with its time) in one transaction, in order; returns their ids.
pub(crate) fn append(
    conn: &mut Connection,
    entries: &[(Entry, i64)],
) -> Result<Vec<u64>, AuditError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let ids = append_in(&tx, entries)?;
    tx.commit()?;
    Ok(ids)
}

fn append_in(conn: &Connection, entries: &[(Entry, i64)]) -> Result<Vec<u64>, AuditError> {
    let head = ends(conn)?;
    let (mut id, mut prev) = (head.head_id, head.head_hash);
    let mut ids = Vec::with_capacity(entries.len());
    for (entry, at_ms) in entries {
        id += 1;
        let row = Row::from_entry(entry, id, *at_ms, &prev);
        row.insert(conn)?;
        prev = row.hash;
        ids.push(u64::try_from(id).unwrap_or(0));
    }
    conn.execute(
        "UPDATE gateway_audit_chain SET head_id = ?1, head_hash = ?2 WHERE one = 1",
        params![id, prev],
    )?;
    Ok(ids)
}

/// How long entries are kept. Both limits may be set; an entry goes when either says so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// Remove entries older than this.
    pub max_age: Option<Duration>,
    /// Keep at most this many entries (the chain's, counted as its head id minus its anchor
    /// id; the `retention_trim` entries included).
    pub max_entries: Option<u64>,
}

impl Retention {
    /// Keep everything (the default).
    pub fn keep_all() -> Self {
        Retention::default()
    }

    /// Sets the age limit.
    pub fn with_max_age(mut self, age: Duration) -> Self {
        self.max_age = Some(age);
        self
    }

    /// Sets the count limit (at least 1).
    pub fn with_max_entries(mut self, n: u64) -> Self {
        self.max_entries = Some(n.max(1));
        self
    }
}

/// The most entries one retention step removes, by default ([`super::AuditConfig::trim_step`]).
///
/// A pass removes what is due in steps, each its own short transaction under the appenders'
/// lock: a log that grew large before retention was set (or while the retention thread was
/// down) may have millions of entries due, and one transaction deleting them all would hold the
/// lock for minutes, while every append (on every replica, in PostgreSQL) waits, gives up after
/// the write-lock wait and loses its entries, and the PostgreSQL client's per-statement
/// deadline would cut the delete off every time, so the log would never shrink. Ten thousand
/// rows are a fraction of a second on either backend.
pub const TRIM_STEP: u64 = 10_000;

/// What a retention pass removed. A pass runs in steps ([`TRIM_STEP`]); the report covers every
/// step it committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrimReport {
    /// How many entries were removed, over all the pass's steps.
    pub removed: u64,
    /// The last removed id: the chain now starts after it.
    pub through_id: u64,
    /// The id of the `retention_trim` entry that records the pass's last step.
    pub entry_id: u64,
    /// How many steps the pass committed; each is recorded by its own `retention_trim` entry.
    pub steps: u64,
}

/// One retention pass in progress: what it applies, how far it got, and the age cutoff it
/// computed once at its start (the count limit is checked afresh in each step, against the
/// chain's ends under the lock, so appends and other passes between steps are counted).
#[derive(Debug, Clone)]
pub(crate) struct TrimPass {
    retention: Retention,
    /// Rows one step removes at most (at least 2, so that a step always removes more than the
    /// one `retention_trim` entry it adds, and a pass under a count limit ends).
    max_rows: i64,
    /// Entries with an id up to this one are due by age.
    age_through: Option<i64>,
    steps: u64,
    removed: u64,
    through_id: i64,
    entry_id: u64,
}

/// What one step removes: rows after the anchor, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepPlan {
    /// This many of the oldest rows, because the chain holds more than the count limit.
    pub count_take: i64,
    /// Rows up to this id (at most `max_rows` of them), because they are too old.
    pub age_through: Option<i64>,
    /// The most rows the step removes.
    pub max_rows: i64,
}

impl TrimPass {
    /// A pass applying `retention` `max_rows` at a time; `age_through` is the highest id older
    /// than the age limit (`None` without one, or when no entry is that old).
    pub fn new(retention: Retention, max_rows: u64, age_through: Option<i64>) -> Self {
        TrimPass {
            retention,
            max_rows: i64::try_from(max_rows.max(2)).unwrap_or(i64::MAX),
            age_through,
            steps: 0,
            removed: 0,
            through_id: 0,
            entry_id: 0,
        }
    }

    /// The chain's entries as its ends count them (the ids after the anchor are dense).
    fn held(ends: &ChainEnds) -> i64 {
        ends.head_id.saturating_sub(ends.anchor_id)
    }

    fn count_limit(&self) -> Option<i64> {
        // At least 1, as `Retention::with_max_entries` sets it: with 0, every step's own entry
        // would be over the limit again, and the pass would never end.
        self.retention
            .max_entries
            .map(|n| i64::try_from(n.max(1)).unwrap_or(i64::MAX))
    }

    /// What the next step removes, given the chain's ends read under the lock; `None` when
    /// nothing is due any more.
    pub fn plan(&self, ends: &ChainEnds) -> Option<StepPlan> {
        // Only when over the limit; then keep `max - 1` entries, so with the step's
        // `retention_trim` entry there are `max` (and the next step finds nothing due).
        let count_take = match self.count_limit() {
            Some(max) if Self::held(ends) > max => {
                (Self::held(ends) - (max - 1)).min(self.max_rows)
            }
            _ => 0,
        };
        let age_through = self.age_through.filter(|&t| t > ends.anchor_id);
        (count_take > 0 || age_through.is_some()).then_some(StepPlan {
            count_take,
            age_through,
            max_rows: self.max_rows,
        })
    }

    /// The `retention_trim` entry of the step that removes `removed` rows through `cutoff`
    /// from the chain whose ends were `ends`, and whether more will be due after it.
    pub fn step_entry(&self, ends: &ChainEnds, cutoff: i64, removed: u64) -> (Entry, bool) {
        // After the step the chain starts after `cutoff` and ends with the step's entry.
        let held_after = ends.head_id.saturating_add(1).saturating_sub(cutoff);
        let more = self.count_limit().is_some_and(|max| held_after > max)
            || self.age_through.is_some_and(|t| t > cutoff);
        let step = self.steps + 1;
        // A pass of one step reads as it always did; a longer one says where each step stands.
        let note = match (more, step) {
            (false, 1) => None,
            (true, _) => Some(format!("step {step} of the pass, more due")),
            (false, _) => Some(format!("step {step}, the pass's last")),
        };
        (trim_entry(self.retention, cutoff, removed, note), more)
    }

    /// Notes a committed step.
    pub fn committed(&mut self, cutoff: i64, removed: u64, entry_id: u64) {
        self.steps += 1;
        self.removed += removed;
        self.through_id = cutoff;
        self.entry_id = entry_id;
    }

    /// The pass so far; `None` before its first step.
    pub fn report(&self) -> Option<TrimReport> {
        (self.steps > 0).then(|| TrimReport {
            removed: self.removed,
            through_id: u64::try_from(self.through_id).unwrap_or(0),
            entry_id: self.entry_id,
            steps: self.steps,
        })
    }
}

/// The highest id of an entry older than `retention`'s age limit at `now_ms` (`None` without
/// one, or when no entry is that old). Read once per pass, outside the lock: it may scan every
/// entry that is due.
pub(crate) fn age_through(
    conn: &Connection,
    retention: Retention,
    now_ms: i64,
) -> Result<Option<i64>, AuditError> {
    let Some(before) = age_before(retention, now_ms) else {
        return Ok(None);
    };
    Ok(conn.query_row(
        "SELECT MAX(id) FROM gateway_audit WHERE at_ms < ?1",
        params![before],
        |r| r.get(0),
    )?)
}

/// The time before which entries are due by age.
pub(crate) fn age_before(retention: Retention, now_ms: i64) -> Option<i64> {
    retention
        .max_age
        .map(|age| now_ms.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)))
}

/// One step of `pass` in its own `BEGIN IMMEDIATE` transaction: removes at most the pass's
/// step size of the oldest due entries, moves the anchor to the last removed entry's hash and
/// records the step as a `system` `retention_trim` entry stamped `at_ms`. `None` when nothing
/// is due; else whether more is due after it.
pub(crate) fn trim_step(
    conn: &mut Connection,
    pass: &mut TrimPass,
    at_ms: i64,
) -> Result<Option<bool>, AuditError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let ends = ends(&tx)?;
    let Some(plan) = pass.plan(&ends) else {
        return Ok(None);
    };
    let mut cutoff: Option<i64> = None;
    if plan.count_take > 0 {
        let by_count: Option<i64> = tx.query_row(
            "SELECT MAX(id) FROM (SELECT id FROM gateway_audit WHERE id > ?1 ORDER BY id LIMIT ?2)",
            params![ends.anchor_id, plan.count_take],
            |r| r.get(0),
        )?;
        cutoff = cutoff.max(by_count);
    }
    if let Some(through) = plan.age_through {
        let by_age: Option<i64> = tx.query_row(
            "SELECT MAX(id) FROM (SELECT id FROM gateway_audit WHERE id > ?1 AND id <= ?2
             ORDER BY id LIMIT ?3)",
            params![ends.anchor_id, through, plan.max_rows],
            |r| r.get(0),
        )?;
        cutoff = cutoff.max(by_age);
    }
    let Some(cutoff) = cutoff else {
        return Ok(None);
    };
    let anchor_hash: String = tx.query_row(
        "SELECT hash FROM gateway_audit WHERE id = ?1",
        params![cutoff],
        |r| r.get(0),
    )?;
    let removed = tx.execute("DELETE FROM gateway_audit WHERE id <= ?1", params![cutoff])? as u64;
    tx.execute(
        "UPDATE gateway_audit_chain SET anchor_id = ?1, anchor_hash = ?2 WHERE one = 1",
        params![cutoff, anchor_hash],
    )?;
    let (entry, more) = pass.step_entry(&ends, cutoff, removed);
    let ids = append_in(&tx, &[(entry, at_ms)])?;
    tx.commit()?;
    pass.committed(cutoff, removed, ids.first().copied().unwrap_or(0));
    Ok(Some(more))
}

/// The `system` `retention_trim` entry recording a step that removed `removed` entries through
/// id `cutoff`, with `note` (where the step stands in its pass) after the limits.
pub(crate) fn trim_entry(
    retention: Retention,
    cutoff: i64,
    removed: u64,
    note: Option<String>,
) -> Entry {
    let mut limits = Vec::new();
    if let Some(age) = retention.max_age {
        limits.push(format!("max_age {}s", age.as_secs()));
    }
    if let Some(n) = retention.max_entries {
        limits.push(format!("max_entries {n}"));
    }
    let note = note.map(|n| format!("; {n}")).unwrap_or_default();
    Entry::system("audit", Kind::RetentionTrim)
        .subject(format!("through id {cutoff}"))
        .detail(format!(
            "removed {removed} entries through id {cutoff} ({}){note}",
            limits.join(", ")
        ))
}

/// What is wrong at the first entry where the chain breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BreakKind {
    /// The entry's content or hash was changed after it was written (its link to the entry
    /// before is intact, its own hash is not).
    Edited,
    /// The entry was not written by the log: it links to no entry before it.
    Inserted,
    /// Entries are missing before this id (the `id` of the break is the first missing one).
    Deleted,
}

/// The first place the chain breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChainBreak {
    /// The entry at fault: the edited or inserted one, or the first missing id.
    pub id: u64,
    /// What is wrong there.
    pub kind: BreakKind,
}

/// The result of [`super::AuditLog::verify`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Entries walked before the first break (all of them when intact).
    pub checked: u64,
    /// The id the chain starts after (0, or the last entry retention removed).
    pub anchor_id: u64,
    /// The last id written.
    pub head_id: u64,
    /// The first break, or `None` when every entry is intact.
    pub first_break: Option<ChainBreak>,
}

impl VerifyReport {
    /// Whether the chain is intact from the anchor to the head.
    pub fn is_intact(&self) -> bool {
        self.first_break.is_none()
    }
}

/// Walks the chain from the anchor to the head in one read transaction.
pub(crate) fn verify(conn: &mut Connection) -> Result<VerifyReport, AuditError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
    let ends = ends(&tx)?;
    // Rows at or before the anchor were removed by retention; one that is back is inserted.
    let stale: Option<i64> = tx
        .query_row(
            "SELECT MIN(id) FROM gateway_audit WHERE id <= ?1",
            params![ends.anchor_id],
            |r| r.get(0),
        )
        .optional()?
        .flatten();
    let mut st = tx.prepare(&format!(
        "SELECT {COLUMNS} FROM gateway_audit WHERE id > ?1 ORDER BY id"
    ))?;
    let mut rows = st.query(params![ends.anchor_id])?;
    let next_row = || -> Result<Option<Row>, AuditError> {
        Ok(match rows.next()? {
            Some(r) => Some(Row::from_sql(r)?),
            None => None,
        })
    };
    let prev_hash_of = |id: i64| -> Result<Option<String>, AuditError> {
        Ok(tx
            .query_row(
                "SELECT prev_hash FROM gateway_audit WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()?)
    };
    verify_chain(&ends, stale, next_row, prev_hash_of)
}

/// The chain walk itself, for either backend: `stale` is the lowest id at or before the anchor
/// still present, `next_row` yields the rows after the anchor in id order, and `prev_hash_of`
/// reads one row's `prev_hash`.
pub(crate) fn verify_chain(
    ends: &ChainEnds,
    stale: Option<i64>,
    mut next_row: impl FnMut() -> Result<Option<Row>, AuditError>,
    mut prev_hash_of: impl FnMut(i64) -> Result<Option<String>, AuditError>,
) -> Result<VerifyReport, AuditError> {
    let to_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut report = VerifyReport {
        checked: 0,
        anchor_id: to_u64(ends.anchor_id),
        head_id: to_u64(ends.head_id),
        first_break: None,
    };
    let mut expected_id = ends.anchor_id + 1;
    let mut expected_prev = ends.anchor_hash.clone();
    let broken = |id: i64, kind| ChainBreak {
        id: to_u64(id),
        kind,
    };
    if let Some(id) = stale {
        report.first_break = Some(broken(id, BreakKind::Inserted));
        return Ok(report);
    }
    while let Some(row) = next_row()? {
        let self_ok = row.compute_hash() == row.hash;
        let link_ok = row.prev_hash == expected_prev;
        let fault = if row.id > expected_id {
            Some(broken(expected_id, BreakKind::Deleted))
        } else if !link_ok && self_ok {
            // Either this row is a stranger with a hash of its own, or the row before was
            // edited and its hash recomputed. The row after (or the head) tells which: it
            // still links to this one only in the second case.
            let successor_links = match prev_hash_of(row.id + 1)? {
                Some(p) => p == row.hash,
                None => ends.head_hash == row.hash,
            };
            if successor_links && row.id > ends.anchor_id + 1 {
                Some(broken(row.id - 1, BreakKind::Edited))
            } else {
                Some(broken(row.id, BreakKind::Inserted))
            }
        } else if !link_ok {
            Some(broken(row.id, BreakKind::Inserted))
        } else if !self_ok {
            Some(broken(row.id, BreakKind::Edited))
        } else {
            None
        };
        if let Some(fault) = fault {
            report.first_break = Some(fault);
            return Ok(report);
        }
        report.checked += 1;
        expected_id = row.id + 1;
        expected_prev = row.hash;
    }
    // Rows missing at the end: the head says more was written than is there.
    if expected_id <= ends.head_id {
        report.first_break = Some(broken(expected_id, BreakKind::Deleted));
    } else if expected_id - 1 > ends.head_id {
        // Rows past the head: written by hand.
        report.first_break = Some(broken(ends.head_id + 1, BreakKind::Inserted));
    } else if expected_prev != ends.head_hash && ends.head_id > ends.anchor_id {
        // The last row was edited and its hash recomputed.
        report.first_break = Some(broken(ends.head_id, BreakKind::Edited));
    }
    Ok(report)
}
