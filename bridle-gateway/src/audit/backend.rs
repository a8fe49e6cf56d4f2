//! Which database the log lives in: a SQLite file (one gateway, the default) or the PostgreSQL
//! database the gateway's replicas share. The log's logic (queueing, batching, the hash chain,
//! verification, queries) is the same; this dispatches each storage step to its dialect.

use super::entry::Entry;
use super::error::AuditError;
use super::query::{self, AuditPage, AuditQuery};
use super::store::{self, ChainEnds, Retention, TrimPass, VerifyReport};

/// A connection (SQLite) or a pool (PostgreSQL) the log reads or writes through.
pub(crate) enum AuditDb {
    Sqlite(rusqlite::Connection),
    #[cfg(feature = "postgres")]
    Postgres(bridle_rules::db::postgres::PgDatabase),
}

impl AuditDb {
    /// Appends `entries` to the chain in one transaction; returns their ids.
    pub fn append(&mut self, entries: &[(Entry, i64)]) -> Result<Vec<u64>, AuditError> {
        match self {
            AuditDb::Sqlite(c) => store::append(c, entries),
            #[cfg(feature = "postgres")]
            AuditDb::Postgres(db) => super::postgres::append(db, entries),
        }
    }

    /// The highest id older than `retention`'s age limit at `now_ms` (read once per pass).
    pub fn age_through(
        &self,
        retention: Retention,
        now_ms: i64,
    ) -> Result<Option<i64>, AuditError> {
        match self {
            AuditDb::Sqlite(c) => store::age_through(c, retention, now_ms),
            #[cfg(feature = "postgres")]
            AuditDb::Postgres(db) => super::postgres::age_through(db, retention, now_ms),
        }
    }

    /// One step of a retention pass in its own transaction; `None` when nothing is due, else
    /// whether more is due after it.
    pub fn trim_step(
        &mut self,
        pass: &mut TrimPass,
        at_ms: i64,
    ) -> Result<Option<bool>, AuditError> {
        match self {
            AuditDb::Sqlite(c) => store::trim_step(c, pass, at_ms),
            #[cfg(feature = "postgres")]
            AuditDb::Postgres(db) => super::postgres::trim_step(db, pass, at_ms),
        }
    }

    /// Whether other writers wait for the database's write lock by polling (SQLite's busy
    /// handler) rather than in a queue the database serves in order (PostgreSQL's lock
    /// manager): then a writer releasing the lock and taking it again at once would keep
    /// winning, and a retention pass pauses between its steps.
    pub fn waiters_poll(&self) -> bool {
        matches!(self, AuditDb::Sqlite(_))
    }

    /// The chain's ends.
    pub fn ends(&self) -> Result<ChainEnds, AuditError> {
        match self {
            AuditDb::Sqlite(c) => store::ends(c),
            #[cfg(feature = "postgres")]
            AuditDb::Postgres(db) => super::postgres::ends(db),
        }
    }

    /// Walks the chain.
    pub fn verify(&mut self) -> Result<VerifyReport, AuditError> {
        match self {
            AuditDb::Sqlite(c) => store::verify(c),
            #[cfg(feature = "postgres")]
            AuditDb::Postgres(db) => super::postgres::verify(db),
        }
    }

    /// One page of `query`.
    pub fn page(&self, query: &AuditQuery) -> Result<AuditPage, AuditError> {
        match self {
            AuditDb::Sqlite(c) => query::page(c, query),
            #[cfg(feature = "postgres")]
            AuditDb::Postgres(db) => super::postgres::page(db, query),
        }
    }
}
