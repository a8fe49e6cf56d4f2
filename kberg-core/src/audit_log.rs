//! The audit log: every call, on disk, without slowing the call path.
//!
//! The gate hands each [`AuditEvent`] to its sink synchronously, so a sink that wrote to disk
//! inline would put disk latency on every tool call. These sinks instead push the event into a
//! bounded channel (a clone and a channel send, no I/O) and a dedicated writer thread does the
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
//! crash loses at most the events recorded in the last `max_delay` (at most `max_events` of them
//! beyond those still queued in the channel); with [`FlushPolicy::fsync`] a flush also reaches
//! the disk and survives power loss. A JSON Lines file is never torn except, possibly, its last
//! line; opening the file again cuts such a partial line off before appending.
//!
//! When the channel is full (the disk cannot keep up), [`Overflow::Drop`] (the default) drops
//! the event instead of blocking the call, counts it, and writes a gap record with the count
//! before the next event; [`Overflow::Block`] makes the call wait for room instead.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crate::audit::{AuditEvent, AuditSink};

/// What a sink does when its channel is full.
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
    /// Events the channel holds before [`Overflow`] applies (default 8192).
    pub capacity: usize,
    /// What to do when the channel is full.
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

    /// Sets the channel capacity (at least 1).
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

enum Msg {
    Event(Box<AuditEvent>),
    Flush(SyncSender<Result<(), String>>),
}

/// The channel and writer thread behind a sink.
struct Background {
    tx: Option<SyncSender<Msg>>,
    thread: Option<JoinHandle<()>>,
    dropped: Arc<AtomicU64>,
    overflow: Overflow,
}

impl Background {
    fn start<W: EventWriter>(mut writer: W, policy: FlushPolicy, name: &str) -> io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<Msg>(policy.capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let dropped_w = Arc::clone(&dropped);
        let max_events = policy.max_events.max(1);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut unflushed = 0usize;
                let mut oldest: Option<Instant> = None;
                let do_flush = |w: &mut W, unflushed: &mut usize, oldest: &mut Option<Instant>| {
                    let r = w.flush();
                    if let Err(e) = &r {
                        tracing::error!(error = %e, "audit log flush failed");
                    }
                    *unflushed = 0;
                    *oldest = None;
                    r
                };
                loop {
                    let msg = match oldest {
                        Some(t) => rx.recv_timeout(policy.max_delay.saturating_sub(t.elapsed())),
                        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    };
                    match msg {
                        Ok(Msg::Event(e)) => {
                            let gap = dropped_w.swap(0, Ordering::Relaxed);
                            if gap > 0
                                && let Err(err) = writer.gap(gap, SystemTime::now())
                            {
                                tracing::error!(error = %err, "audit gap record not written");
                            }
                            if let Err(err) = writer.write(&e) {
                                tracing::error!(error = %err, tool = %e.tool, "audit event not written");
                            }
                            unflushed += 1;
                            oldest.get_or_insert_with(Instant::now);
                            if unflushed >= max_events {
                                let _ = do_flush(&mut writer, &mut unflushed, &mut oldest);
                            }
                        }
                        Ok(Msg::Flush(ack)) => {
                            let r = do_flush(&mut writer, &mut unflushed, &mut oldest);
                            let _ = ack.send(r.map_err(|e| e.to_string()));
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            let _ = do_flush(&mut writer, &mut unflushed, &mut oldest);
                        }
                        Err(RecvTimeoutError::Disconnected) => {
                            let gap = dropped_w.swap(0, Ordering::Relaxed);
                            if gap > 0 {
                                let _ = writer.gap(gap, SystemTime::now());
                            }
                            let _ = do_flush(&mut writer, &mut unflushed, &mut oldest);
                            break;
                        }
                    }
                }
            })?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            dropped,
            overflow: policy.overflow,
        })
    }

    fn record(&self, event: &AuditEvent) {
        let Some(tx) = &self.tx else { return };
        let msg = Msg::Event(Box::new(event.clone()));
        match self.overflow {
            Overflow::Drop => match tx.try_send(msg) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                        tracing::warn!("audit log cannot keep up; dropping events (counted)");
                    }
                }
                Err(TrySendError::Disconnected(_)) => {
                    tracing::error!("audit writer thread has stopped; event lost");
                }
            },
            Overflow::Block => {
                if tx.send(msg).is_err() {
                    tracing::error!("audit writer thread has stopped; event lost");
                }
            }
        }
    }

    fn flush(&self) -> Result<(), AuditLogError> {
        let tx = self.tx.as_ref().ok_or(AuditLogError::WriterStopped)?;
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        tx.send(Msg::Flush(ack_tx))
            .map_err(|_| AuditLogError::WriterStopped)?;
        match ack_rx.recv() {
            Ok(Ok(())) => Ok(()),
            Ok(Err(msg)) => Err(AuditLogError::Io(io::Error::other(msg))),
            Err(_) => Err(AuditLogError::WriterStopped),
        }
    }

    fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Closing the channel makes the thread write what is queued, flush and stop.
        self.tx.take();
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

    /// Events dropped because the channel was full (not yet reported in a gap record).
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

        /// Events dropped because the channel was full (not yet reported in `audit_gaps`).
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
