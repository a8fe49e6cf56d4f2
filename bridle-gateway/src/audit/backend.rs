//! Which database the log lives in: a SQLite file (one gateway, the default) or the PostgreSQL
//! database the gateway's replicas share. The log's logic (queueing, batching, the hash chain,
//! verification, queries) is the same; this dispatches each storage step to its dialect.

use super::entry::Entry;
use super::error::AuditError;
use super::query::{self, AuditPage, AuditQuery};
use super::store::{self, ChainEnds, Retention, TrimReport, VerifyReport};

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

    /// Applies `retention` at `now_ms`.
    pub fn trim(
        &mut self,
        retention: Retention,
        now_ms: i64,
    ) -> Result<Option<TrimReport>, AuditError> {
        match self {
            AuditDb::Sqlite(c) => store::trim(c, retention, now_ms),
            #[cfg(feature = "postgres")]
            AuditDb::Postgres(db) => super::postgres::trim(db, retention, now_ms),
        }
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
