//! The audit log: every call, on disk, without slowing the call path.
//!
//! The gate hands each [`AuditEvent`] to its sink synchronously, so a sink that wrote to disk
//! inline would put disk latency on every tool call. These sinks instead push the event onto a
//! bounded in-memory queue (a clone and a short mutex hold, no I/O; the writer thread is woken
//! only when a batch starts or fills, not per event) and a dedicated writer thread does the
//! writing. Two sinks share that machinery: [`JsonlAuditSink`], an append-only JSON Lines file
//! (one [`AuditEvent::to_record`] object per line), and `SqliteAuditSink` (feature `sqlite`), a
//! table in a SQLite database.
//!
//! ## Flush policy
//!
//! The writer thread writes each event as it arrives into a buffer and *flushes* (hands the
//! bytes to the operating system for the file; commits the open transaction for SQLite) when
//! [`FlushPolicy::max_events`] events are unflushed, when the oldest unflushed event is
//! [`FlushPolicy::max_delay`] old, on [`JsonlAuditSink::flush`], and when the sink is dropped.
//! Once flushed, an event survives the process being killed (SIGKILL, a panic, an abort). So a
//! crash loses at most the events recorded in the last `max_delay`, and never more than
//! `max_events` (plus the batch being written); with [`FlushPolicy::fsync`] a flush also reaches
//! the disk and survives power loss. A JSON Lines file is never torn except, possibly, its last
//! line; opening the file again cuts such a partial line off before appending.
//!
//! When the queue is full (the disk cannot keep up), [`Overflow::Drop`] (the default) drops
//! the event instead of blocking the call, counts it, and writes a gap record with the count
//! before the next event; [`Overflow::Block`] makes the call wait for room instead.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::audit::{AuditEvent, AuditSink};

/// What a sink does when its queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Overflow {
    /// Drop the event, count it, and write a gap record (the call never waits).
    #[default]
    Drop,
    /// Wait for room (the call waits for the disk).
    Block,
}

/// When the writer thread flushes; see the module documentation for what each setting means
/// for a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FlushPolicy {
    /// Flush once this many events are unflushed (default 64).
    pub max_events: usize,
    /// Flush once the oldest unflushed event is this old (default 100 ms).
    pub max_delay: Duration,
    /// Also fsync on every flush (default `false`).
    pub fsync: bool,
    /// Events the queue holds before [`Overflow`] applies (default 8192).
    pub capacity: usize,
    /// What to do when the queue is full.
    pub overflow: Overflow,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        Self {
            max_events: 64,
            max_delay: Duration::from_millis(100),
            fsync: false,
            capacity: 8192,
            overflow: Overflow::Drop,
        }
    }
}

impl FlushPolicy {
    /// Sets the event count that triggers a flush (at least 1).
    pub fn with_max_events(mut self, n: usize) -> Self {
        self.max_events = n.max(1);
        self
    }

    /// Sets the delay that triggers a flush.
    pub fn with_max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Sets whether flushes fsync.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Sets the queue capacity (at least 1).
    pub fn with_capacity(mut self, n: usize) -> Self {
        self.capacity = n.max(1);
        self
    }

    /// Sets the overflow behaviour.
    pub fn with_overflow(mut self, o: Overflow) -> Self {
        self.overflow = o;
        self
    }
}

/// A failure to open or flush an audit log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditLogError {
    /// The file could not be opened or written.
    #[error("audit log I/O: {0}")]
    Io(#[from] io::Error),
    /// The database could not be opened or written.
    #[error("audit database: {0}")]
    Database(String),
    /// The writer thread is gone (it panicked); events are no longer written.
    #[error("the audit writer thread has stopped")]
    WriterStopped,
}

/// What the writer thread does with events; one per sink type.
trait EventWriter: Send + 'static {
    fn write(&mut self, e: &AuditEvent) -> Result<(), AuditLogError>;
    fn gap(&mut self, dropped: u64, at: SystemTime) -> Result<(), AuditLogError>;
    fn flush(&mut self) -> Result<(), AuditLogError>;
}

/// What the call path and the writer thread share.
#[derive(Default)]
struct Queue {
    events: Vec<AuditEvent>,
    /// When the oldest queued event arrived.
    first_at: Option<Instant>,
    /// Events dropped since the last gap record.
    dropped: u64,
    /// Flush requests made / completed, and the error of the last completed flush.
    flush_requested: u64,
    flushed_through: u64,
    last_error: Option<String>,
    closed: bool,
    writer_alive: bool,
}

/// The queue between the callers and the writer thread, and the signals each side waits on.
struct WriteQueue {
    queue: Mutex<Queue>,
    /// Wakes the writer: first event of a batch, batch full, flush, close.
    wake: Condvar,
    /// Wakes callers waiting for room (`Overflow::Block`) or for a flush.
    done: Condvar,
    dropped_total: AtomicU64,
}

impl WriteQueue {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is a plain buffer; a panic elsewhere leaves it consistent.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Marks the writer gone when its thread ends, even by a panic, so no caller waits forever.
struct WriterAlive(Arc<WriteQueue>);

impl Drop for WriterAlive {
    fn drop(&mut self) {
        self.0.lock().writer_alive = false;
        self.0.done.notify_all();
    }
}

/// The queue and writer thread behind a sink.
///
/// The call path takes a mutex, pushes the event and, only when it starts a batch or fills
/// one, wakes the writer: under load that is one wake-up per `max_events` events or per
/// `max_delay`, not one per event. The writer takes the whole batch, writes it and flushes.
struct Background {
    shared: Arc<WriteQueue>,
    thread: Option<JoinHandle<()>>,
    policy: FlushPolicy,
}

impl Background {
    fn start<W: EventWriter>(mut writer: W, policy: FlushPolicy, name: &str) -> io::Result<Self> {
        let shared = Arc::new(WriteQueue {
            queue: Mutex::new(Queue {
                writer_alive: true,
                ..Queue::default()
            }),
            wake: Condvar::new(),
            done: Condvar::new(),
            dropped_total: AtomicU64::new(0),
        });
        let alive = WriterAlive(Arc::clone(&shared));
        let batch_limit = policy.max_events.min(policy.capacity).max(1);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let shared = Arc::clone(&alive.0);
                loop {
                    let (batch, dropped, flush_id, closing) = {
                        let mut q = shared.lock();
                        loop {
                            if q.closed
                                || q.flush_requested > q.flushed_through
                                || q.events.len() >= batch_limit
                            {
                                break;
                            }
                            match q.first_at {
                                None => {
                                    q = shared.wake.wait(q).unwrap_or_else(|p| p.into_inner());
                                }
                                Some(t) => {
                                    let age = t.elapsed();
                                    if age >= policy.max_delay {
                                        break;
                                    }
                                    q = shared
                                        .wake
                                        .wait_timeout(q, policy.max_delay - age)
                                        .unwrap_or_else(|p| p.into_inner())
                                        .0;
                                }
                            }
                        }
                        q.first_at = None;
                        let batch = std::mem::take(&mut q.events);
                        let dropped = std::mem::take(&mut q.dropped);
                        // Room again for callers blocked by `Overflow::Block`.
                        shared.done.notify_all();
                        (batch, dropped, q.flush_requested, q.closed)
                    };
                    let mut error = None;
                    if dropped > 0
                        && let Err(e) = writer.gap(dropped, SystemTime::now())
                    {
                        tracing::error!(error = %e, "audit gap record not written");
                        error = Some(e.to_string());
                    }
                    for e in &batch {
                        if let Err(err) = writer.write(e) {
                            tracing::error!(error = %err, tool = %e.tool, "audit event not written");
                            error = Some(err.to_string());
                        }
                    }
                    if let Err(e) = writer.flush() {
                        tracing::error!(error = %e, "audit log flush failed");
                        error = Some(e.to_string());
                    }
                    {
                        let mut q = shared.lock();
                        q.flushed_through = flush_id;
                        q.last_error = error;
                    }
                    shared.done.notify_all();
                    if closing {
                        break;
                    }
                }
                drop(alive);
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
            policy,
        })
    }

    fn record(&self, event: &AuditEvent) {
        let shared = &self.shared;
        let mut q = shared.lock();
        if !q.writer_alive {
            tracing::error!("audit writer thread has stopped; event lost");
            return;
        }
        let capacity = self.policy.capacity.max(1);
        while q.events.len() >= capacity {
            match self.policy.overflow {
                Overflow::Drop => {
                    q.dropped += 1;
                    if shared.dropped_total.fetch_add(1, Ordering::Relaxed) == 0 {
                        tracing::warn!("audit log cannot keep up; dropping events (counted)");
                    }
                    return;
                }
                Overflow::Block => {
                    shared.wake.notify_one();
                    q = shared.done.wait(q).unwrap_or_else(|p| p.into_inner());
                    if !q.writer_alive {
                        return;
                    }
                }
            }
        }
        q.events.push(event.clone());
        let len = q.events.len();
        if len == 1 {
            q.first_at = Some(Instant::now());
        }
        if len == 1 || len == self.policy.max_events.min(capacity).max(1) {
            shared.wake.notify_one();
        }
    }

    fn flush(&self) -> Result<(), AuditLogError> {
        let shared = &self.shared;
        let mut q = shared.lock();
        q.flush_requested += 1;
        let id = q.flush_requested;
        shared.wake.notify_one();
        while q.flushed_through < id {
            if !q.writer_alive {
                return Err(AuditLogError::WriterStopped);
            }
            q = shared.done.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        match &q.last_error {
            None => Ok(()),
            Some(msg) => Err(AuditLogError::Io(io::Error::other(msg.clone()))),
        }
    }

    fn dropped(&self) -> u64 {
        self.shared.dropped_total.load(Ordering::Relaxed)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Closing makes the thread write what is queued, flush and stop.
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("audit writer thread panicked");
        }
    }
}

/// Appends every event to a JSON Lines file, one [`AuditEvent::to_record`] object per line,
/// from a writer thread. See the module documentation for the flush policy.
pub struct JsonlAuditSink {
    bg: Background,
}

impl std::fmt::Debug for JsonlAuditSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlAuditSink")
            .field("dropped", &self.bg.dropped())
            .finish_non_exhaustive()
    }
}

struct JsonlWriter {
    out: BufWriter<File>,
    fsync: bool,
}

impl EventWriter for JsonlWriter {
    fn write(&mut self, e: &AuditEvent) -> Result<(), AuditLogError> {
        let mut line = e.to_record().to_string();
        line.push('\n');
        self.out.write_all(line.as_bytes())?;
        Ok(())
    }

    fn gap(&mut self, dropped: u64, at: SystemTime) -> Result<(), AuditLogError> {
        let at_ms = at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut line = serde_json::json!({"at_ms": at_ms, "gap": {"dropped": dropped}}).to_string();
        line.push('\n');
        self.out.write_all(line.as_bytes())?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), AuditLogError> {
        self.out.flush()?;
        if self.fsync {
            self.out.get_ref().sync_data()?;
        }
        Ok(())
    }
}

/// Cuts a partial last line (a write interrupted by a crash) off the end of `file`, so the
/// next record starts on a line of its own. Returns how many bytes were cut.
fn cut_partial_tail(file: &mut File) -> io::Result<u64> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(0);
    }
    let mut end = len;
    let mut buf = [0u8; 4096];
    loop {
        let start = end.saturating_sub(buf.len() as u64);
        let n = (end - start) as usize;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
            let keep = start + i as u64 + 1;
            if keep < len {
                file.set_len(keep)?;
            }
            return Ok(len - keep);
        }
        if start == 0 {
            file.set_len(0)?;
            return Ok(len);
        }
        end = start;
    }
}

impl JsonlAuditSink {
    /// Opens (creating if needed) the file at `path` for appending, after cutting off a partial
    /// last line left by a crash, and starts the writer thread.
    pub fn open(path: impl AsRef<Path>, policy: FlushPolicy) -> Result<Self, AuditLogError> {
        let path = path.as_ref();
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let cut = cut_partial_tail(&mut file)?;
        if cut > 0 {
            tracing::warn!(path = %path.display(), bytes = cut, "cut a partial last audit line left by a crash");
        }
        let writer = JsonlWriter {
            out: BufWriter::with_capacity(64 * 1024, file),
            fsync: policy.fsync,
        };
        Ok(Self {
            bg: Background::start(writer, policy, "kberg-audit-jsonl")?,
        })
    }

    /// Waits until every event recorded so far is flushed.
    pub fn flush(&self) -> Result<(), AuditLogError> {
        self.bg.flush()
    }

    /// Events dropped because the queue was full, since the sink opened (each drop is also
    /// reported in a gap record).
    pub fn dropped(&self) -> u64 {
        self.bg.dropped()
    }
}

impl AuditSink for JsonlAuditSink {
    fn record(&self, event: &AuditEvent) {
        self.bg.record(event);
    }
}

#[cfg(feature = "sqlite")]
pub use sqlite::SqliteAuditSink;

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use rusqlite::{Connection, params};

    const SCHEMA: &str = "
        CREATE TABLE IF NOT EXISTS audit_events (
            id INTEGER PRIMARY KEY,
            at_ms INTEGER NOT NULL,
            principal TEXT NOT NULL,
            agent TEXT,
            tool TEXT NOT NULL,
            kind TEXT NOT NULL,
            capability TEXT,
            via_deprecated TEXT,
            outcome TEXT NOT NULL,
            code TEXT,
            duration_us INTEGER NOT NULL,
            args_digest TEXT,
            ticket TEXT,
            approved_by TEXT,
            commit_token TEXT,
            phase TEXT NOT NULL,
            scope TEXT
        );
        CREATE INDEX IF NOT EXISTS audit_events_at ON audit_events (at_ms);
        CREATE TABLE IF NOT EXISTS audit_gaps (at_ms INTEGER NOT NULL, dropped INTEGER NOT NULL);
    ";

    fn db(e: rusqlite::Error) -> AuditLogError {
        AuditLogError::Database(e.to_string())
    }

    struct SqliteWriter {
        conn: Connection,
        in_tx: bool,
    }

    impl SqliteWriter {
        fn begin(&mut self) -> Result<(), AuditLogError> {
            if !self.in_tx {
                self.conn.execute_batch("BEGIN").map_err(db)?;
                self.in_tx = true;
            }
            Ok(())
        }
    }

    impl EventWriter for SqliteWriter {
        fn write(&mut self, e: &AuditEvent) -> Result<(), AuditLogError> {
            self.begin()?;
            let r = e.to_record();
            let s = |k: &str| r.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let n = |k: &str| r.get(k).and_then(|v| v.as_u64()).unwrap_or(0) as i64;
            self.conn
                .prepare_cached(
                    "INSERT INTO audit_events (at_ms, principal, agent, tool, kind, capability,
                     via_deprecated, outcome, code, duration_us, args_digest, ticket, approved_by,
                     commit_token, phase, scope)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        n("at_ms"),
                        s("principal"),
                        s("agent"),
                        s("tool"),
                        s("kind"),
                        s("capability"),
                        s("via_deprecated"),
                        s("outcome"),
                        s("code"),
                        n("duration_us"),
                        s("args_digest"),
                        s("ticket"),
                        s("approved_by"),
                        s("commit_token"),
                        s("phase"),
                        s("scope"),
                    ])
                })
                .map_err(db)?;
            Ok(())
        }

        fn gap(&mut self, dropped: u64, at: SystemTime) -> Result<(), AuditLogError> {
            self.begin()?;
            let at_ms = at
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            self.conn
                .execute(
                    "INSERT INTO audit_gaps (at_ms, dropped) VALUES (?1, ?2)",
                    params![at_ms, dropped as i64],
                )
                .map_err(db)?;
            Ok(())
        }

        fn flush(&mut self) -> Result<(), AuditLogError> {
            if self.in_tx {
                self.in_tx = false;
                self.conn.execute_batch("COMMIT").map_err(db)?;
            }
            Ok(())
        }
    }

    /// Inserts every event into the `audit_events` table of a SQLite database (columns as in
    /// [`AuditEvent::to_record`]), from a writer thread; a flush commits the open transaction.
    /// Dropped events are counted in `audit_gaps`.
    pub struct SqliteAuditSink {
        bg: Background,
    }

    impl std::fmt::Debug for SqliteAuditSink {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("SqliteAuditSink")
                .field("dropped", &self.bg.dropped())
                .finish_non_exhaustive()
        }
    }

    impl SqliteAuditSink {
        /// Opens (creating if needed) the database at `path` in WAL mode, creates the tables,
        /// and starts the writer thread.
        pub fn open(path: impl AsRef<Path>, policy: FlushPolicy) -> Result<Self, AuditLogError> {
            let conn = Connection::open(path).map_err(db)?;
            conn.pragma_update(None, "journal_mode", "WAL")
                .map_err(db)?;
            conn.pragma_update(
                None,
                "synchronous",
                if policy.fsync { "FULL" } else { "NORMAL" },
            )
            .map_err(db)?;
            conn.busy_timeout(Duration::from_secs(5)).map_err(db)?;
            conn.execute_batch(SCHEMA).map_err(db)?;
            let writer = SqliteWriter { conn, in_tx: false };
            Ok(Self {
                bg: Background::start(writer, policy, "kberg-audit-sqlite")?,
            })
        }

        /// Waits until every event recorded so far is committed.
        pub fn flush(&self) -> Result<(), AuditLogError> {
            self.bg.flush()
        }

        /// Events dropped because the queue was full, since the sink opened (each drop is also
        /// counted in `audit_gaps`).
        pub fn dropped(&self) -> u64 {
            self.bg.dropped()
        }
    }

    impl AuditSink for SqliteAuditSink {
        fn record(&self, event: &AuditEvent) {
            self.bg.record(event);
        }
    }
}
