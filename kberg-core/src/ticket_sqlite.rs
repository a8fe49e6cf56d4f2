//! Confirm tickets in SQLite, so they survive a restart (feature `sqlite`).
//!
//! One row per ticket: its id, its status in a column of its own (so the compare-and-set of a
//! decision is one `UPDATE ... WHERE status = ?`, atomic even between processes sharing the
//! file), its principal and expiry (so a principal's pending tickets are one indexed `COUNT`),
//! and the whole ticket as JSON. A file made before the principal and expiry columns existed
//! gains them, filled from the stored tickets, when it is opened. A ticket found `running` when the store is opened was
//! approved by a process that died while its call ran; nothing can tell whether the call took
//! effect, so it is marked `failed` (code `tool_failed`, "interrupted") rather than run again:
//! nothing runs twice.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};

use crate::confirm::{ConfirmTicket, StoreError, TicketStatus, TicketStore, mark_interrupted};

fn db(e: rusqlite::Error) -> StoreError {
    StoreError(e.to_string())
}

fn to_json(t: &ConfirmTicket) -> Result<String, StoreError> {
    serde_json::to_string(t).map_err(|e| StoreError(format!("ticket does not serialize: {e}")))
}

fn from_json(s: &str) -> Result<ConfirmTicket, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError(format!("stored ticket is unreadable: {e}")))
}

/// Nanoseconds since the Unix epoch, as the table stores times (saturating, 0 before 1970).
fn unix_ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Tickets in a SQLite database file.
pub struct SqliteTicketStore {
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for SqliteTicketStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteTicketStore").finish_non_exhaustive()
    }
}

impl SqliteTicketStore {
    /// Opens (creating if needed) the store at `path`, and marks tickets whose call was
    /// interrupted by a previous process's death as failed.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let conn = Connection::open(path).map_err(db)?;
        Self::init(conn)
    }

    /// A store in memory (for tests; it ends with the value).
    pub fn open_in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory().map_err(db)?)
    }

    fn init(conn: Connection) -> Result<Self, StoreError> {
        conn.busy_timeout(Duration::from_secs(5)).map_err(db)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS confirm_tickets (
                id TEXT PRIMARY KEY,
                status TEXT NOT NULL,
                created_at_ns INTEGER NOT NULL,
                body TEXT NOT NULL,
                principal TEXT,
                expires_at_ns INTEGER
            );",
        )
        .map_err(db)?;
        let store = Self {
            conn: Mutex::new(conn),
        };
        store.add_count_columns()?;
        store.fail_interrupted()?;
        Ok(store)
    }

    /// Gives a file made before they existed the `principal` and `expires_at_ns` columns,
    /// filled from each stored ticket, and indexes them for [`TicketStore::count_pending`].
    fn add_count_columns(&self) -> Result<(), StoreError> {
        let conn = self.lock();
        let has_principal: bool = conn
            .query_row(
                "SELECT COUNT(*) FROM pragma_table_info('confirm_tickets') WHERE name = 'principal'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(db)?
            > 0;
        if !has_principal {
            conn.execute_batch(
                "ALTER TABLE confirm_tickets ADD COLUMN principal TEXT;
                 ALTER TABLE confirm_tickets ADD COLUMN expires_at_ns INTEGER;",
            )
            .map_err(db)?;
        }
        let unfilled: Vec<(String, String)> = {
            let mut st = conn
                .prepare("SELECT id, body FROM confirm_tickets WHERE principal IS NULL")
                .map_err(db)?;
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(db)?
                .collect::<Result<_, _>>()
                .map_err(db)?
        };
        for (id, body) in unfilled {
            // A row that does not parse keeps NULLs, so it is not counted; reading it through
            // `get` or `list` still reports it as unreadable.
            let Ok(t) = from_json(&body) else { continue };
            conn.execute(
                "UPDATE confirm_tickets SET principal = ?1, expires_at_ns = ?2 WHERE id = ?3",
                params![t.principal.id, unix_ns(t.expires_at), id],
            )
            .map_err(db)?;
        }
        conn.execute_batch(
            "CREATE INDEX IF NOT EXISTS confirm_tickets_pending
                 ON confirm_tickets (principal, status, expires_at_ns);",
        )
        .map_err(db)?;
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // The connection holds no half-done state between statements.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The tickets whose bodies `sql` (a query of one `body` column) selects.
    fn tickets_where(&self, sql: &str) -> Result<Vec<ConfirmTicket>, StoreError> {
        let conn = self.lock();
        let mut st = conn.prepare(sql).map_err(db)?;
        let rows = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db)?;
        rows.iter().map(|s| from_json(s)).collect()
    }

    fn fail_interrupted(&self) -> Result<(), StoreError> {
        let running =
            self.tickets_where("SELECT body FROM confirm_tickets WHERE status = 'running'")?;
        for t in running {
            mark_interrupted(self, t)?;
        }
        Ok(())
    }
}

impl TicketStore for SqliteTicketStore {
    fn insert(&self, ticket: &ConfirmTicket) -> Result<(), StoreError> {
        self.lock()
            .execute(
                "INSERT INTO confirm_tickets (id, status, created_at_ns, body, principal, expires_at_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    ticket.id,
                    ticket.status.as_str(),
                    unix_ns(ticket.created_at),
                    to_json(ticket)?,
                    ticket.principal.id,
                    unix_ns(ticket.expires_at)
                ],
            )
            .map_err(db)?;
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<ConfirmTicket>, StoreError> {
        let body: Option<String> = self
            .lock()
            .query_row(
                "SELECT body FROM confirm_tickets WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        body.as_deref().map(from_json).transpose()
    }

    fn list(&self) -> Result<Vec<ConfirmTicket>, StoreError> {
        self.tickets_where("SELECT body FROM confirm_tickets ORDER BY created_at_ns, id")
    }

    fn replace_if(&self, expected: TicketStatus, next: &ConfirmTicket) -> Result<bool, StoreError> {
        let n = self
            .lock()
            .execute(
                "UPDATE confirm_tickets SET status = ?1, body = ?2, principal = ?3, expires_at_ns = ?4
                 WHERE id = ?5 AND status = ?6",
                params![
                    next.status.as_str(),
                    to_json(next)?,
                    next.principal.id,
                    unix_ns(next.expires_at),
                    next.id,
                    expected.as_str()
                ],
            )
            .map_err(db)?;
        Ok(n == 1)
    }

    fn remove_if(&self, id: &str, expected: TicketStatus) -> Result<bool, StoreError> {
        let n = self
            .lock()
            .execute(
                "DELETE FROM confirm_tickets WHERE id = ?1 AND status = ?2",
                params![id, expected.as_str()],
            )
            .map_err(db)?;
        Ok(n == 1)
    }

    fn count_pending(&self, principal: &str, now: SystemTime) -> Result<usize, StoreError> {
        let n: i64 = self
            .lock()
            .query_row(
                "SELECT COUNT(*) FROM confirm_tickets
                 WHERE principal = ?1 AND status = 'pending' AND expires_at_ns > ?2",
                params![principal, unix_ns(now)],
                |r| r.get(0),
            )
            .map_err(db)?;
        Ok(usize::try_from(n).unwrap_or(0))
    }
}
