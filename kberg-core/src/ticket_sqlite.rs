//! Confirm tickets in SQLite, so they survive a restart (feature `sqlite`).
//!
//! One row per ticket: its id, its status in a column of its own (so the compare-and-set of a
//! decision is one `UPDATE ... WHERE status = ?`, atomic even between processes sharing the
//! file), and the whole ticket as JSON. A ticket found `running` when the store is opened was
//! approved by a process that died while its call ran; nothing can tell whether the call took
//! effect, so it is marked `failed` (code `tool_failed`, "interrupted") rather than run again:
//! nothing runs twice.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

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
                body TEXT NOT NULL
            );",
        )
        .map_err(db)?;
        let store = Self {
            conn: Mutex::new(conn),
        };
        store.fail_interrupted()?;
        Ok(store)
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
        let created = ticket
            .created_at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        self.lock()
            .execute(
                "INSERT INTO confirm_tickets (id, status, created_at_ns, body) VALUES (?1, ?2, ?3, ?4)",
                params![ticket.id, ticket.status.as_str(), created, to_json(ticket)?],
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
                "UPDATE confirm_tickets SET status = ?1, body = ?2 WHERE id = ?3 AND status = ?4",
                params![
                    next.status.as_str(),
                    to_json(next)?,
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
}
