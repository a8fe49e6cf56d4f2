//! Confirm tickets in PostgreSQL (feature `postgres`), so every gateway replica sees one set:
//! a ticket filed on replica A is listed, approved or denied, and its result fetched, on
//! replica B, and decided exactly once across them.
//!
//! kberg-core keeps tickets behind its `TicketStore` trait (in memory, or in SQLite with
//! `SqliteTicketStore`) and has no network, so the PostgreSQL implementation lives here, in the
//! gateway, on the state database's pool. The table mirrors the SQLite one: an id, the status in
//! a column of its own (so a decision's compare-and-set is one `UPDATE ... WHERE status = $n`,
//! atomic across replicas: of two replicas approving one ticket at once, one row update wins and
//! the other finds the ticket decided), and the ticket as JSON. The schema is versioned as the
//! `confirm_tickets` store of `schema_migrations`.
//!
//! What differs from SQLite is the restart rule. SQLite marks every `running` ticket failed when
//! the store opens (its process died while the call ran). Here another replica may be running
//! one at that moment, so each store holds a session-level advisory lock of its own (its
//! *runner* number, drawn from a sequence) on a connection it keeps, and records that number on
//! each ticket it moves to `running`. Opening a store, and reading a running ticket of another
//! runner, marks failed (`tool_failed`, "interrupted") only the running tickets whose runner's
//! lock is free, that is whose replica is gone: nothing runs twice, nothing another replica is
//! running is touched, and a replica that ends mid-call is found out by those still running,
//! not only by the next to start. A store whose lock connection was cut takes its lock again
//! before it records itself running a call. A call already running when the connection was cut
//! may be seen as interrupted meanwhile (its ticket then says it may or may not have taken
//! effect); when that call ends, its real outcome replaces the mark. A ticket keeps the runner
//! that ran it after its call ends, so the store tells that case (the ticket failed while still
//! recorded as its own) from a ticket another replica decided.

use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use bridle_rules::RulesError;
use bridle_rules::db::postgres::{PgClient, PgDatabase};
use bridle_rules::db::{Migration, Migrations};
use kberg_core::{ConfirmTicket, StoreError, TicketStatus, TicketStore, mark_interrupted};

/// The confirm-ticket table in PostgreSQL. Never edit a released step, add one.
pub const TICKETS_PG_MIGRATIONS: Migrations = Migrations {
    store: "confirm_tickets",
    steps: &[Migration {
        version: 1,
        name: "baseline",
        sql: "
CREATE TABLE confirm_tickets (
    id            TEXT PRIMARY KEY,
    status        TEXT NOT NULL,
    created_at_ns BIGINT NOT NULL,
    runner        BIGINT,
    body          TEXT NOT NULL
);
CREATE INDEX confirm_tickets_created ON confirm_tickets (created_at_ns, id);
CREATE SEQUENCE confirm_ticket_runners;
",
    }],
};

/// The high half of every runner's advisory-lock key (the low half is the runner number), apart
/// from the other stores' lock keys.
const RUNNER_LOCK_BASE: i64 = 0x6274_6b74_0000_0000;

fn runner_lock(runner: i64) -> i64 {
    RUNNER_LOCK_BASE | (runner & 0xffff_ffff)
}

fn db(e: RulesError) -> StoreError {
    StoreError(e.to_string())
}

fn to_json(t: &ConfirmTicket) -> Result<String, StoreError> {
    serde_json::to_string(t).map_err(|e| StoreError(format!("ticket does not serialize: {e}")))
}

fn from_json(s: &str) -> Result<ConfirmTicket, StoreError> {
    serde_json::from_str(s).map_err(|e| StoreError(format!("stored ticket is unreadable: {e}")))
}

/// Confirm tickets in the gateway's PostgreSQL database, shared by every replica.
pub struct PgTicketStore {
    db: PgDatabase,
    runner: i64,
    /// The connection holding this store's runner lock, kept for the store's life (the lock
    /// ends with the connection, or when the store is dropped); made again, the lock taken
    /// again, when it is found lost as a call is about to start.
    lock: Mutex<PgClient>,
}

impl std::fmt::Debug for PgTicketStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTicketStore")
            .field("database", &self.db.dbname())
            .field("runner", &self.runner)
            .finish_non_exhaustive()
    }
}

impl PgTicketStore {
    /// Migrates the table, takes this store's runner lock, and marks failed the tickets whose
    /// call was interrupted by the end of the replica that ran it. A database newer than this
    /// build is refused (`database_too_new`).
    pub fn open(db: PgDatabase) -> Result<Self, RulesError> {
        db.migrate(&TICKETS_PG_MIGRATIONS)?;
        let lock = db.client()?;
        let runner: i64 = lock
            .query_opt("SELECT nextval('confirm_ticket_runners')", &[])?
            .map(|r| r.get(0))
            .ok_or_else(|| RulesError::Postgres("the runner sequence gave no value".into()))?;
        lock.execute("SELECT pg_advisory_lock($1)", &[&runner_lock(runner)])?;
        let store = Self {
            db,
            runner,
            lock: Mutex::new(lock),
        };
        store
            .fail_interrupted()
            .map_err(|e| RulesError::Postgres(e.0))?;
        Ok(store)
    }

    /// This store's runner number (recorded on the tickets whose call it runs).
    pub fn runner(&self) -> i64 {
        self.runner
    }

    fn client(&self) -> Result<PgClient, StoreError> {
        self.db.client().map_err(db)
    }

    /// Makes sure this store still holds its runner lock before it records itself running a
    /// call: a connection cut under it (a database restart, a proxy closing idle connections)
    /// took the lock along, and other replicas would take this one for gone and mark its call
    /// interrupted while it runs. A lost connection is replaced and the lock taken again.
    fn hold_lock(&self) -> Result<(), StoreError> {
        let mut lock = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if lock.query_opt("SELECT 1", &[]).is_ok() {
            return Ok(());
        }
        tracing::warn!(
            runner = self.runner,
            "the connection holding this ticket store's runner lock was lost; taking the lock again"
        );
        let fresh = self.client()?;
        fresh
            .execute("SELECT pg_advisory_lock($1)", &[&runner_lock(self.runner)])
            .map_err(db)?;
        *lock = fresh;
        Ok(())
    }

    /// The tickets `sql` selects (as `body, status, runner`), each running ticket whose runner
    /// is gone first marked interrupted: a replica that ends mid-call leaves its ticket for
    /// the replicas still running to settle the first time they read it, not only for the next
    /// one to start.
    fn bodies(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<ConfirmTicket>, StoreError> {
        let client = self.client()?;
        let rows = client.query(sql, params).map_err(db)?;
        let mut tickets = Vec::with_capacity(rows.len());
        for row in &rows {
            let ticket = from_json(&row.get::<_, String>(0))?;
            let status: String = row.get(1);
            let runner: Option<i64> = row.get(2);
            if status == TicketStatus::Running.as_str()
                && runner != Some(self.runner)
                && runner_gone(&client, runner)?
            {
                let id = ticket.id.clone();
                mark_interrupted(self, ticket)?;
                // Marked here, or by another replica at the same moment, or finished after
                // all: the row as it is now.
                let now = client
                    .query_opt("SELECT body FROM confirm_tickets WHERE id = $1", &[&id])
                    .map_err(db)?;
                if let Some(row) = now {
                    tickets.push(from_json(&row.get::<_, String>(0))?);
                }
                continue;
            }
            tickets.push(ticket);
        }
        Ok(tickets)
    }

    /// Marks failed each running ticket whose runner is gone (its advisory lock is free).
    fn fail_interrupted(&self) -> Result<(), StoreError> {
        self.bodies(
            "SELECT body, status, runner FROM confirm_tickets WHERE status = 'running'",
            &[],
        )
        .map(drop)
    }
}

/// Whether the replica that recorded `runner` on a running ticket is gone: its advisory lock
/// is free (taken here for a moment and given back). A ticket without a runner has none alive.
fn runner_gone(client: &PgClient, runner: Option<i64>) -> Result<bool, StoreError> {
    let Some(runner) = runner else {
        return Ok(true);
    };
    let key = runner_lock(runner);
    let free: bool = client
        .query_opt("SELECT pg_try_advisory_lock($1)", &[&key])
        .map_err(db)?
        .is_some_and(|r| r.get(0));
    if free {
        client
            .execute("SELECT pg_advisory_unlock($1)", &[&key])
            .map_err(db)?;
    }
    Ok(free)
}

impl Drop for PgTicketStore {
    fn drop(&mut self) {
        // The lock's connection goes back to the pool: free the lock, or this runner would
        // look alive for as long as that connection lives.
        let lock = self.lock.get_mut().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = lock.execute(
            "SELECT pg_advisory_unlock($1)",
            &[&runner_lock(self.runner)],
        ) {
            tracing::warn!(error = %e, runner = self.runner, "freeing a ticket store's runner lock failed");
        }
    }
}

impl TicketStore for PgTicketStore {
    fn insert(&self, ticket: &ConfirmTicket) -> Result<(), StoreError> {
        let created = ticket
            .created_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        self.client()?
            .execute(
                "INSERT INTO confirm_tickets (id, status, created_at_ns, body) VALUES ($1, $2, $3, $4)",
                &[&ticket.id, &ticket.status.as_str(), &created, &to_json(ticket)?],
            )
            .map_err(db)?;
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<ConfirmTicket>, StoreError> {
        Ok(self
            .bodies(
                "SELECT body, status, runner FROM confirm_tickets WHERE id = $1",
                &[&id],
            )?
            .pop())
    }

    fn list(&self) -> Result<Vec<ConfirmTicket>, StoreError> {
        self.bodies(
            "SELECT body, status, runner FROM confirm_tickets ORDER BY created_at_ns, id",
            &[],
        )
    }

    fn replace_if(&self, expected: TicketStatus, next: &ConfirmTicket) -> Result<bool, StoreError> {
        // A ticket moved to `running` records who runs it, so a replica that opens later can
        // tell a live call from an interrupted one.
        let runner = (next.status == TicketStatus::Running).then_some(self.runner);
        if runner.is_some() {
            self.hold_lock()?;
        }
        let client = self.client()?;
        let body = to_json(next)?;
        // The runner stays recorded when a call ends (or is marked interrupted): it is what
        // tells this store's own interrupted calls apart below.
        let n = client
            .execute(
                "UPDATE confirm_tickets SET status = $1, body = $2, runner = COALESCE($3, runner)
                 WHERE id = $4 AND status = $5",
                &[
                    &next.status.as_str(),
                    &body,
                    &runner,
                    &next.id,
                    &expected.as_str(),
                ],
            )
            .map_err(db)?;
        if n == 1 {
            return Ok(true);
        }
        if expected != TicketStatus::Running || next.status == TicketStatus::Running {
            return Ok(false);
        }
        // This store's call ended, but the ticket is no longer running. Only one thing moves a
        // ticket this store runs from `running` to `failed` besides the call's own end: another
        // replica that found this store's lock free (its connection was cut while the call
        // ran) and marked the call interrupted. The call's real outcome replaces that mark.
        let n = client
            .execute(
                "UPDATE confirm_tickets SET status = $1, body = $2
                 WHERE id = $3 AND status = 'failed' AND runner = $4",
                &[&next.status.as_str(), &body, &next.id, &self.runner],
            )
            .map_err(db)?;
        if n == 1 {
            tracing::warn!(
                ticket = %next.id,
                runner = self.runner,
                "a call this replica ran was marked interrupted by another replica while its lock connection was lost; its real outcome replaces the mark"
            );
        }
        Ok(n == 1)
    }

    fn remove_if(&self, id: &str, expected: TicketStatus) -> Result<bool, StoreError> {
        let n = self
            .client()?
            .execute(
                "DELETE FROM confirm_tickets WHERE id = $1 AND status = $2",
                &[&id, &expected.as_str()],
            )
            .map_err(db)?;
        Ok(n == 1)
    }

    /// Counted in the database from the tickets' JSON (principal id, and the expiry as serde
    /// writes a `SystemTime`), so nothing but the count crosses the wire and the table needs no
    /// column of its own for it.
    fn count_pending(&self, principal: &str, now: SystemTime) -> Result<usize, StoreError> {
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
        let nanos = i64::from(now.subsec_nanos());
        let n: i64 = self
            .client()?
            .query_opt(
                "SELECT COUNT(*) FROM confirm_tickets
                 WHERE status = 'pending'
                   AND body::jsonb #>> '{principal,id}' = $1
                   AND ((body::jsonb #>> '{expires_at,secs_since_epoch}')::bigint,
                        (body::jsonb #>> '{expires_at,nanos_since_epoch}')::bigint) > ($2, $3)",
                &[&principal, &secs, &nanos],
            )
            .map_err(db)?
            .map_or(0, |r| r.get(0));
        Ok(usize::try_from(n).unwrap_or(0))
    }
}
