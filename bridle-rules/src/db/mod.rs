//! Versioned schema migrations for the gateway's databases, SQLite and PostgreSQL alike.
//!
//! Every store that owns tables (the rules store, the vendor-feed ledger, the gateway's vault and
//! audit log) declares its schema as a [`Migrations`] list: numbered steps, each applied once and
//! recorded in a `schema_migrations` table with a checksum of its SQL. Opening a store applies the
//! steps the database lacks, in order, in one transaction; a database that records a step this
//! build does not know (written by a newer Bridle) is refused with [`RulesError::DatabaseTooNew`],
//! and a recorded step whose SQL has changed since with [`RulesError::MigrationChanged`].
//!
//! Step 1 of each store is its baseline: the schema as it was before versioning, written with
//! `IF NOT EXISTS`, so a database created by an older Bridle is adopted with its data and then
//! moved forward by the later steps.
//!
//! The runner is small and written here because the migration crates that speak both SQLite and
//! PostgreSQL pin an older `rusqlite` than the tree's (a second `rusqlite` would link a second
//! SQLite).

#[cfg(feature = "postgres")]
pub mod postgres;

use rusqlite::{Connection, TransactionBehavior, params};
use sha2::{Digest, Sha256};

use crate::error::RulesError;
use crate::fsutil::now_rfc3339;

/// One numbered schema step.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Its number: 1, 2, 3, ... without gaps.
    pub version: u32,
    /// A short name (`baseline`, `pending_index`).
    pub name: &'static str,
    /// The SQL that performs it (several statements are allowed).
    pub sql: &'static str,
}

impl Migration {
    /// The SHA-256 of its SQL, hex: what `schema_migrations` records to notice an edited step.
    pub fn checksum(&self) -> String {
        Sha256::digest(self.sql.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The schema of one store: its name in `schema_migrations` and its steps in order.
#[derive(Debug, Clone, Copy)]
pub struct Migrations {
    /// The store's name (`rules`, `vendor_feed`, `vault`, `audit`); several stores may share a
    /// database, each with its own steps.
    pub store: &'static str,
    /// The steps, numbered 1.. in order.
    pub steps: &'static [Migration],
}

impl Migrations {
    /// The newest version this build knows.
    pub fn latest(&self) -> u32 {
        self.steps.last().map_or(0, |m| m.version)
    }

    /// Checks what a database recorded against the known steps and returns the steps still to
    /// apply. `applied` is (version, checksum) pairs as stored.
    pub fn pending(&self, applied: &[(u32, String)]) -> Result<Vec<Migration>, RulesError> {
        let latest = self.latest();
        for (version, checksum) in applied {
            let Some(step) = self.steps.iter().find(|m| m.version == *version) else {
                return Err(RulesError::DatabaseTooNew {
                    store: self.store,
                    found: applied.iter().map(|(v, _)| *v).max().unwrap_or(*version),
                    supported: latest,
                });
            };
            if step.checksum() != *checksum {
                return Err(RulesError::MigrationChanged {
                    store: self.store,
                    version: step.version,
                    name: step.name,
                });
            }
        }
        Ok(self
            .steps
            .iter()
            .filter(|m| !applied.iter().any(|(v, _)| *v == m.version))
            .copied()
            .collect())
    }
}

/// The bookkeeping table, shared by every store in a database.
pub(crate) const MIGRATIONS_TABLE: &str = "CREATE TABLE IF NOT EXISTS schema_migrations (
    store TEXT NOT NULL,
    version INTEGER NOT NULL,
    name TEXT NOT NULL,
    checksum TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    PRIMARY KEY (store, version)
)";

/// Brings a SQLite database up to `set`'s latest version, in one `BEGIN IMMEDIATE` transaction
/// (so two processes opening the same file at once apply each step once). Returns the versions
/// applied now (empty when it was current).
pub fn migrate_sqlite(conn: &mut Connection, set: &Migrations) -> Result<Vec<u32>, RulesError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(MIGRATIONS_TABLE)?;
    let applied: Vec<(u32, String)> = {
        let mut stmt =
            tx.prepare("SELECT version, checksum FROM schema_migrations WHERE store = ?1")?;
        stmt.query_map(params![set.store], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    let pending = set.pending(&applied)?;
    let mut done = Vec::new();
    for step in pending {
        tx.execute_batch(step.sql)?;
        tx.execute(
            "INSERT INTO schema_migrations (store, version, name, checksum, applied_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![set.store, step.version, step.name, step.checksum(), now_rfc3339()],
        )?;
        tracing::info!(
            store = set.store,
            version = step.version,
            name = step.name,
            "schema migration applied"
        );
        done.push(step.version);
    }
    tx.commit()?;
    Ok(done)
}

/// The versions a SQLite database records for a store, ascending (empty when it has none).
pub fn applied_sqlite(conn: &Connection, store: &str) -> Result<Vec<u32>, RulesError> {
    let exists: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations')",
        [],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(Vec::new());
    }
    let mut stmt =
        conn.prepare("SELECT version FROM schema_migrations WHERE store = ?1 ORDER BY version")?;
    let out = stmt
        .query_map(params![store], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPS: Migrations = Migrations {
        store: "t",
        steps: &[
            Migration {
                version: 1,
                name: "baseline",
                sql: "CREATE TABLE IF NOT EXISTS a (x INTEGER);",
            },
            Migration {
                version: 2,
                name: "b",
                sql: "CREATE TABLE b (y INTEGER);",
            },
        ],
    };

    #[test]
    fn steps_apply_once_in_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate_sqlite(&mut conn, &STEPS).unwrap(), vec![1, 2]);
        assert!(migrate_sqlite(&mut conn, &STEPS).unwrap().is_empty());
        assert_eq!(applied_sqlite(&conn, "t").unwrap(), vec![1, 2]);
    }

    #[test]
    fn a_newer_or_edited_database_is_refused() {
        let newer = [(1, STEPS.steps[0].checksum()), (3, "x".to_string())];
        let e = STEPS.pending(&newer).unwrap_err();
        assert_eq!(e.code(), "database_too_new");
        assert!(e.to_string().contains("version 3"), "{e}");
        let edited = [(1, "0000".to_string())];
        let e = STEPS.pending(&edited).unwrap_err();
        assert_eq!(e.code(), "migration_changed");
    }
}
