//! Keeping tool-call entries off the call path: a bounded queue and one writer thread that
//! batches them into transactions, as kberg-core's audit sinks do.
//!
//! The call path takes the queue's mutex, pushes the entry and, only when it starts a batch or
//! fills one, wakes the writer (one wake-up per batch under load, not one per call). The writer
//! waits until a batch is full or its oldest entry is `max_delay` old, then takes the database
//! connection, takes the whole queue *while holding the connection* and appends it in one
//! transaction. Synchronous writes and flushes take the connection the same way, so entries
//! reach the chain in the order they were recorded.
//!
//! Retention runs here too ([`run_retention`]): in bounded steps, each taking the connection
//! (and writing the queue first) and giving it back to the writers waiting for it.
//!
//! When the queue is full the entry is not queued and the call goes on: the loss is counted
//! ([`CallQueue::lost_total`]) and the next write first appends a `system` `entries_lost` entry
//! saying how many entries were lost and why. A batch whose transaction fails is counted the same
//! way.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use super::backend::AuditDb;
use super::entry::{Entry, Kind};
use super::error::AuditError;
use super::store::{Retention, TrimPass, TrimReport};
use super::{RetentionEvent, RetentionHook};

/// Milliseconds since the Unix epoch.
pub(crate) fn ms_since_epoch(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The queued entries and the losses not yet recorded.
#[derive(Default)]
struct Pending {
    entries: Vec<(Entry, i64)>,
    /// When the oldest queued entry arrived.
    first_at: Option<Instant>,
    /// Entries refused because the queue was full, since the last `entries_lost` entry.
    lost_full: u64,
    /// Entries whose batch failed to write, since the last `entries_lost` entry.
    lost_failed: u64,
    /// The error of the last failed batch.
    last_failure: Option<String>,
    closed: bool,
}

/// The bounded queue between the call path and the writer thread.
pub(crate) struct CallQueue {
    pending: Mutex<Pending>,
    wake: Condvar,
    lost_total: AtomicU64,
    capacity: usize,
    max_batch: usize,
    max_delay: Duration,
}

impl CallQueue {
    pub fn new(capacity: usize, max_batch: usize, max_delay: Duration) -> Self {
        let capacity = capacity.max(1);
        CallQueue {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            lost_total: AtomicU64::new(0),
            capacity,
            max_batch: max_batch.clamp(1, capacity),
            max_delay,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A plain buffer: a panic elsewhere leaves it consistent.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues one entry without waiting; `false` when the queue was full (the loss is counted).
    pub fn push(&self, entry: Entry, at_ms: i64) -> bool {
        let mut q = self.lock();
        if q.entries.len() >= self.capacity {
            q.lost_full += 1;
            if self.lost_total.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!("audit log cannot keep up; tool-call entries are lost (counted)");
            }
            return false;
        }
        q.entries.push((entry, at_ms));
        let len = q.entries.len();
        if len == 1 {
            q.first_at = Some(Instant::now());
        }
        if len == 1 || len == self.max_batch {
            self.wake.notify_one();
        }
        true
    }

    /// Entries lost since the log opened (queue full or failed batch).
    pub fn lost_total(&self) -> u64 {
        self.lost_total.load(Ordering::Relaxed)
    }

    /// Entries waiting for the writer.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether the log is being dropped ([`CallQueue::close`]).
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Tells the writer thread to write what is queued and stop.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }

    /// Appends everything queued, preceded by an `entries_lost` entry when losses are
    /// unrecorded. The caller holds the database connection, so nobody else can take the queue
    /// between here and the commit. Returns how many queued entries were written.
    pub fn write_pending(&self, conn: &mut AuditDb) -> Result<usize, AuditError> {
        let (batch, lost_full, lost_failed, failure) = {
            let mut q = self.lock();
            q.first_at = None;
            (
                std::mem::take(&mut q.entries),
                std::mem::take(&mut q.lost_full),
                std::mem::take(&mut q.lost_failed),
                q.last_failure.take(),
            )
        };
        if batch.is_empty() && lost_full + lost_failed == 0 {
            return Ok(0);
        }
        let n = batch.len();
        let mut entries = Vec::with_capacity(n + 1);
        if lost_full + lost_failed > 0 {
            entries.push((
                lost_entry(lost_full, lost_failed, failure.as_deref()),
                now_ms(),
            ));
        }
        entries.extend(batch);
        match conn.append(&entries) {
            Ok(_) => Ok(n),
            Err(e) => {
                tracing::error!(error = %e, entries = n, "audit batch not written; counted as lost");
                let mut q = self.lock();
                q.lost_full += lost_full;
                q.lost_failed += lost_failed + n as u64;
                q.last_failure = Some(e.to_string());
                self.lost_total.fetch_add(n as u64, Ordering::Relaxed);
                Err(e)
            }
        }
    }
}

fn now_ms() -> i64 {
    ms_since_epoch(SystemTime::now())
}

fn lost_entry(full: u64, failed: u64, failure: Option<&str>) -> Entry {
    let mut why = Vec::new();
    if full > 0 {
        why.push(format!("{full} because the queue was full"));
    }
    if failed > 0 {
        why.push(format!(
            "{failed} because their batch failed to write ({})",
            failure.unwrap_or("unknown error")
        ));
    }
    Entry::system("audit", Kind::EntriesLost)
        .subject(format!("{} entries", full + failed))
        .detail(format!(
            "{} tool-call entries lost: {}",
            full + failed,
            why.join("; ")
        ))
        .outcome(super::entry::Outcome::error("entries_lost"))
}

/// The connection all writes go through, and a count of the writers waiting for it.
///
/// A retention pass gives the connection up between its steps; but a thread that releases a
/// mutex and takes it again at once almost always wins it again (the waiter it woke has not run
/// yet), so `record` and the writer thread would wait for the whole pass after all. Every
/// writer counts itself in ([`lock_conn`]), and the pass, between steps, waits until as many
/// writers have taken the connection as had arrived ([`Shared::let_waiters_in`]).
pub(crate) struct Shared {
    db: Mutex<AuditDb>,
    turns: Mutex<Turns>,
    served: Condvar,
}

/// Writers that asked for the connection, and that got it, since the log opened.
#[derive(Default)]
struct Turns {
    arrived: u64,
    served: u64,
}

impl Shared {
    pub fn new(db: AuditDb) -> Self {
        Shared {
            db: Mutex::new(db),
            turns: Mutex::new(Turns::default()),
            served: Condvar::new(),
        }
    }

    fn turns(&self) -> MutexGuard<'_, Turns> {
        // Two counters: a panic elsewhere leaves them consistent.
        self.turns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every writer that was waiting for the connection has had it. The caller
    /// must not hold the connection.
    pub fn let_waiters_in(&self) {
        let mut t = self.turns();
        let arrived = t.arrived;
        while t.served < arrived {
            t = self.served.wait(t).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// How many writers are waiting for the connection now.
    #[cfg(test)]
    pub fn waiting(&self) -> u64 {
        let t = self.turns();
        t.arrived - t.served
    }
}

/// The connection all writes go through.
pub(crate) type SharedConnection = Arc<Shared>;

/// Takes the connection, counted as a waiting writer until it has it.
pub(crate) fn lock_conn(conn: &SharedConnection) -> MutexGuard<'_, AuditDb> {
    conn.turns().arrived += 1;
    // A connection whose holder panicked mid-transaction rolls back on the next BEGIN's failure
    // or on drop of the transaction; the handle itself stays usable.
    let guard = conn.db.lock().unwrap_or_else(|p| p.into_inner());
    conn.turns().served += 1;
    conn.served.notify_all();
    guard
}

/// The longest pause of a retention pass between two steps on SQLite (see
/// [`AuditDb::waiters_poll`]): as long as the step took, at most this.
const MAX_STEP_PAUSE: Duration = Duration::from_millis(250);

/// Applies `retention` as of `as_of_ms` in steps of at most `max_rows` entries ([`super::TRIM_STEP`]),
/// each its own transaction under the appenders' lock. Before each step the queued tool calls
/// are written (they keep their order); between steps the connection goes to the writers
/// waiting for it (and on SQLite, where other processes poll for the file's lock, the pass
/// pauses as long as the step took, at most [`MAX_STEP_PAUSE`]). After each committed step,
/// with the connection released, `on_step` hears the pass so far; `Break` ends the pass there
/// (the rest is due at the next one). `None` when nothing was due.
///
/// Every step leaves a whole chain and its own `retention_trim` entry, so a pass that ends
/// early (an error, `Break`, the process stopping) leaves nothing half-done or unexplained.
pub(crate) fn run_retention(
    conn: &SharedConnection,
    queue: &CallQueue,
    retention: Retention,
    max_rows: u64,
    as_of_ms: i64,
    on_step: &mut dyn FnMut(&TrimReport) -> ControlFlow<()>,
) -> Result<Option<TrimReport>, AuditError> {
    if retention.max_age.is_none() && retention.max_entries.is_none() {
        // Nothing can be due; what is queued is written all the same, as by every pass.
        let _ = queue.write_pending(&mut lock_conn(conn));
        return Ok(None);
    }
    let age_through = lock_conn(conn).age_through(retention, as_of_ms)?;
    let mut pass = TrimPass::new(retention, max_rows, age_through);
    loop {
        let started = Instant::now();
        let (step, polls) = {
            let mut c = lock_conn(conn);
            // An error is logged and counted by write_pending; the pass goes on.
            let _ = queue.write_pending(&mut c);
            (c.trim_step(&mut pass, now_ms()), c.waiters_poll())
        };
        let more = match step {
            Ok(Some(more)) => more,
            Ok(None) => break,
            Err(e) => {
                if let Some(done) = pass.report() {
                    tracing::warn!(
                        error = %e,
                        removed = done.removed,
                        through_id = done.through_id,
                        "audit retention pass stopped after {} steps; the rest is due at the next pass",
                        done.steps
                    );
                }
                return Err(e);
            }
        };
        if let Some(report) = pass.report()
            && on_step(&report).is_break()
        {
            break;
        }
        if !more {
            break;
        }
        conn.let_waiters_in();
        if polls {
            std::thread::sleep(started.elapsed().min(MAX_STEP_PAUSE));
        }
    }
    Ok(pass.report())
}

/// The writer thread's body: batches, periodic retention, and a last write on close.
pub(crate) fn run(
    queue: Arc<CallQueue>,
    conn: SharedConnection,
    retention: Retention,
    retention_every: Duration,
    trim_step: u64,
    hook: Option<RetentionHook>,
) {
    let tell = |event: RetentionEvent<'_>| {
        if let Some(h) = &hook {
            h.call(&event);
        }
    };
    // The first pass is due at once: the start-up pass runs here, between appends, rather
    // than in `open`, where a backlog (retention newly set on a large log, a long downtime)
    // would hold the gateway's start for minutes and a failing step would fail it. A failed
    // pass is logged and tried again at the next interval.
    let retains = retention.max_age.is_some() || retention.max_entries.is_some();
    let mut next_retention = retains.then(Instant::now);
    loop {
        let closing = {
            let mut q = queue.lock();
            loop {
                if q.closed || q.entries.len() >= queue.max_batch {
                    break;
                }
                let retention_left =
                    next_retention.map(|t| t.saturating_duration_since(Instant::now()));
                if retention_left == Some(Duration::ZERO) {
                    break;
                }
                let batch_left = q
                    .first_at
                    .map(|t| queue.max_delay.saturating_sub(t.elapsed()));
                if batch_left == Some(Duration::ZERO) {
                    break;
                }
                let wait = match (batch_left, retention_left) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                q = match wait {
                    None => queue.wake.wait(q).unwrap_or_else(|p| p.into_inner()),
                    Some(d) => {
                        queue
                            .wake
                            .wait_timeout(q, d)
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                };
            }
            q.closed
        };
        // An error is logged and counted by write_pending; the thread goes on.
        let _ = queue.write_pending(&mut lock_conn(&conn));
        if next_retention.is_some_and(|t| Instant::now() >= t) {
            // A log being dropped stops its pass after the step in hand (the chain is whole
            // and the step recorded; the rest is due at the next start) rather than holding the
            // shutdown for the whole backlog.
            let mut until_closed = |so_far: &TrimReport| {
                tell(RetentionEvent::Step(so_far));
                if queue.is_closed() {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            };
            match run_retention(
                &conn,
                &queue,
                retention,
                trim_step,
                now_ms(),
                &mut until_closed,
            ) {
                Ok(r) => {
                    if let Some(r) = &r {
                        tracing::info!(
                            removed = r.removed,
                            through_id = r.through_id,
                            steps = r.steps,
                            "audit retention"
                        );
                    }
                    tell(RetentionEvent::Done(r.as_ref()));
                }
                Err(e) => {
                    tracing::error!(
                        error = %e,
                        "audit retention pass failed; it is tried again at the next interval"
                    );
                    tell(RetentionEvent::Failed(&e));
                }
            }
            // Counted from the pass's end, so a pass longer than the interval is not followed
            // at once by the next; an interval too long to add means no further pass.
            next_retention = Instant::now().checked_add(retention_every);
        }
        if closing {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

    use super::*;

    #[test]
    fn a_writer_waiting_for_the_connection_gets_it_before_the_pass_takes_it_again() {
        let conn: SharedConnection = Arc::new(Shared::new(AuditDb::Sqlite(
            rusqlite::Connection::open_in_memory().unwrap(),
        )));
        let order = Arc::new(Mutex::new(Vec::new()));
        // A pass holds the connection (a step); a writer arrives and waits.
        let step = lock_conn(&conn);
        let waiter = {
            let (conn, order) = (Arc::clone(&conn), Arc::clone(&order));
            std::thread::spawn(move || {
                let _c = lock_conn(&conn);
                order.lock().unwrap().push("writer");
            })
        };
        kberg_testkit::eventually("the writer to wait", || conn.waiting() == 1);
        // Between steps: the waiting writer goes first.
        drop(step);
        conn.let_waiters_in();
        let next_step = lock_conn(&conn);
        order.lock().unwrap().push("next step");
        drop(next_step);
        waiter.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["writer", "next step"]);
    }

    #[test]
    fn a_closing_writer_stops_its_retention_pass_after_one_step() {
        let dir = tempfile::tempdir().unwrap();
        let mut db =
            AuditDb::Sqlite(super::super::store::open(&dir.path().join("a.db"), false).unwrap());
        let entries: Vec<_> = (0..10)
            .map(|_| (Entry::system("test", Kind::RulesChange), 1))
            .collect();
        db.append(&entries).unwrap();
        let conn: SharedConnection = Arc::new(Shared::new(db));
        let queue = Arc::new(CallQueue::new(8, 8, Duration::from_millis(50)));
        // The log is being dropped just as a pass is due: the pass makes one step (the chain is
        // whole and the step recorded) and leaves the rest to the next start, rather than
        // holding the shutdown for the whole backlog.
        queue.close();
        run(
            Arc::clone(&queue),
            Arc::clone(&conn),
            Retention::keep_all().with_max_entries(4),
            Duration::ZERO,
            3,
            None,
        );
        let ends = lock_conn(&conn).ends().unwrap();
        assert_eq!((ends.anchor_id, ends.head_id), (3, 11));
        assert!(lock_conn(&conn).verify().unwrap().is_intact());
    }
}
