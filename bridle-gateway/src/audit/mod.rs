//! The gateway's audit log: one append-only, tamper-evident record of every change and every
//! tool call, saying who acted (an admin through a surface, an agent, a vendor feed, the gateway
//! itself), what changed and how it ended.
//!
//! It exists so an operator can answer "who changed this rule, and which agent called that tool"
//! after the fact, and notice when someone edited the record itself. It lives in one SQLite file
//! given by the caller (for example `<data>/audit.db`), or, when the gateway's state is in
//! PostgreSQL, in that database ([`AuditLog::open_postgres`]), where every replica appends to
//! one hash chain.
//!
//! - **Two write paths.** Changes (approvals, secret operations, agent and upstream changes) go
//!   through [`AuditLog::record`], which writes synchronously and returns the error when the
//!   entry cannot be written, so the operation that wanted it can fail too. Tool calls go through
//!   [`AuditLog::record_tool_call`] or the log's [`kberg_core::AuditSink`] implementation, which
//!   never wait: they queue the entry for one writer thread that batches inserts in
//!   transactions (see `writer` for the flush policy).
//! - **A full queue** (the disk cannot keep up) never blocks a call and never loses silently:
//!   the entry is counted ([`AuditLog::lost`]) and the next write appends a `system`
//!   `entries_lost` entry with the count. [`AuditLog::flush`] writes what is queued (for shutdown
//!   and tests).
//! - **Tamper evidence.** Each entry stores the SHA-256 of its canonical content and the previous
//!   entry's hash; [`AuditLog::verify`] walks the chain and names the first edited, inserted or
//!   deleted entry. Someone able to rewrite the file can recompute every hash after an edit; keep
//!   [`VerifyReport::head_id`] and the head hash ([`AuditLog::head`]) elsewhere to detect that.
//! - **Retention** by age or count ([`Retention`]) removes the oldest entries, keeps the last
//!   removed entry's hash as the chain's new anchor, and records itself as a `retention_trim`
//!   entry, so a trimmed log still verifies. A pass runs in bounded steps (at most
//!   [`TRIM_STEP`] entries each, [`AuditConfig::trim_step`]), each its own short transaction
//!   under the appenders' lock that moves the anchor and appends ONE `retention_trim` entry of
//!   its own (saying how many it removed through which id, and whether more is due): a log
//!   with millions of entries due never holds the lock for minutes (appends on every replica
//!   would wait, time out and be lost), writers of this process and other replicas append
//!   between steps, and a pass that stops half-way (an error, a restart) leaves a whole chain
//!   whose every anchor move is explained by an entry; the next pass goes on from there (a log
//!   being dropped stops its writer thread's pass after the step in hand). One
//!   entry per step rather than one summary at the end: a summary written last would leave
//!   the moves of an interrupted pass unexplained. Steady state is one step, one entry.
//!   The configured retention runs in the writer thread, between its batches: first as the
//!   log opens (open never waits for it: a backlog due after retention is newly set on a large
//!   log, or after a long downtime, would hold the gateway's start for minutes while health
//!   checks fail and orchestrators restart it, restarting the pass), then every
//!   [`AuditConfig::retention_every`]. A failed pass is logged (and told to
//!   [`AuditConfig::on_retention`]) and tried again at the next interval; it never fails open.
//! - **Nothing secret.** Entries hold names, revisions, digests and stable codes; tool calls keep
//!   kberg-core's redacted argument digest and never an argument value.
//!
//! ```
//! use bridle_gateway::audit::{AuditConfig, AuditLog, AuditQuery, Entry, Kind, Surface};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let log = AuditLog::open(AuditConfig::new(dir.path().join("audit.db")))?;
//! log.record(Entry::user("alice", Surface::Cli, Kind::SecretRotate).subject("gitea-token"))?;
//! assert!(log.verify()?.is_intact());
//! assert_eq!(log.query(&AuditQuery::all().actor("alice"))?.entries.len(), 1);
//! # Ok(()) }
//! ```

mod backend;
mod entry;
mod error;
mod gateway;
#[cfg(feature = "postgres")]
mod postgres;
mod query;
mod row;
mod sink;
mod store;
mod writer;

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use backend::AuditDb;

pub use entry::{
    Change, ClientName, Entry, Kind, Outcome, Source, SourceType, Surface, ToolCallInfo,
};
pub use error::AuditError;
pub use gateway::agent_entry;
#[cfg(feature = "postgres")]
pub use postgres::AUDIT_PG_MIGRATIONS;
pub use query::{AuditPage, AuditQuery, MAX_PAGE};
pub use row::StoredEntry;
pub use store::{BreakKind, ChainBreak, Retention, TRIM_STEP, TrimReport, VerifyReport};

use writer::{CallQueue, Shared, SharedConnection, lock_conn, ms_since_epoch};

/// How the log is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditConfig {
    /// The SQLite file (created if missing).
    pub path: PathBuf,
    /// Tool-call entries the queue holds before new ones are counted as lost (default 8192).
    pub capacity: usize,
    /// Entries per transaction at most; a full batch wakes the writer (default 256).
    pub max_batch: usize,
    /// How long a queued entry waits at most before its batch is written (default 50 ms).
    pub max_delay: Duration,
    /// Commit with `synchronous=FULL` (survives power loss) instead of `NORMAL` (survives a
    /// crash of the process) (default `false`).
    pub fsync: bool,
    /// How long entries are kept (default: forever).
    pub retention: Retention,
    /// How often the writer thread applies [`AuditConfig::retention`] (default 10 minutes). Its
    /// first pass starts as the log opens, in the writer thread (open does not wait for it); a
    /// failed pass is logged and tried again this long after.
    pub retention_every: Duration,
    /// The most entries one retention step removes, each step its own short transaction
    /// (default [`TRIM_STEP`], at least 2).
    pub trim_step: u64,
    /// Told of the writer thread's retention passes (default: none).
    pub on_retention: Option<RetentionHook>,
}

/// What the writer thread's retention passes (the start-up one and the periodic ones) tell
/// [`AuditConfig::on_retention`]. Passes run with [`AuditLog::trim`] and its kin report to their
/// caller instead.
#[derive(Debug)]
#[non_exhaustive]
pub enum RetentionEvent<'a> {
    /// A step committed (the log is free for other writers); the pass so far.
    Step(&'a TrimReport),
    /// The pass ended; what it removed, `None` when nothing was due.
    Done(Option<&'a TrimReport>),
    /// The pass stopped at an error (also logged): the steps before it stay made, and the rest
    /// is due at the next pass, [`AuditConfig::retention_every`] later.
    Failed(&'a AuditError),
}

/// A callback for [`RetentionEvent`]s, run on the writer thread: while it runs, tool-call
/// entries wait in the queue (changes are written), so it should be quick, and it must not
/// panic (that would stop the writer thread).
#[derive(Clone)]
pub struct RetentionHook(Arc<dyn Fn(&RetentionEvent<'_>) + Send + Sync>);

impl RetentionHook {
    /// Wraps `f`.
    pub fn new(f: impl Fn(&RetentionEvent<'_>) + Send + Sync + 'static) -> Self {
        RetentionHook(Arc::new(f))
    }

    pub(crate) fn call(&self, event: &RetentionEvent<'_>) {
        (self.0)(event)
    }
}

impl std::fmt::Debug for RetentionHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetentionHook")
    }
}

/// Two hooks are equal when they are the same callback.
impl PartialEq for RetentionHook {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for RetentionHook {}

impl AuditConfig {
    /// Defaults, with the database at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        AuditConfig {
            path: path.into(),
            capacity: 8192,
            max_batch: 256,
            max_delay: Duration::from_millis(50),
            fsync: false,
            retention: Retention::keep_all(),
            retention_every: Duration::from_secs(600),
            trim_step: TRIM_STEP,
            on_retention: None,
        }
    }

    /// Sets the queue capacity (at least 1).
    pub fn with_capacity(mut self, n: usize) -> Self {
        self.capacity = n.max(1);
        self
    }

    /// Sets the batch size (at least 1).
    pub fn with_max_batch(mut self, n: usize) -> Self {
        self.max_batch = n.max(1);
        self
    }

    /// Sets the longest wait of a queued entry.
    pub fn with_max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Sets whether commits reach the disk before returning.
    pub fn with_fsync(mut self, fsync: bool) -> Self {
        self.fsync = fsync;
        self
    }

    /// Sets the retention.
    pub fn with_retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// Sets how often retention runs.
    pub fn with_retention_every(mut self, every: Duration) -> Self {
        self.retention_every = every;
        self
    }

    /// Sets the most entries one retention step removes (at least 2: a step adds its own
    /// `retention_trim` entry, so it must remove more than one for a pass under a count limit
    /// to end).
    pub fn with_trim_step(mut self, n: u64) -> Self {
        self.trim_step = n.max(2);
        self
    }

    /// Sets the callback told of the writer thread's retention passes ([`RetentionEvent`]).
    pub fn with_on_retention(
        mut self,
        f: impl Fn(&RetentionEvent<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.on_retention = Some(RetentionHook::new(f));
        self
    }
}

/// The writer side: the connection every write takes, the queue, and the writer thread.
struct AuditWriter {
    conn: SharedConnection,
    queue: Arc<CallQueue>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// A second connection for reads, so queries and verification do not wait for writes.
    reader: Mutex<AuditDb>,
    retention: Retention,
    trim_step: u64,
}

impl Drop for AuditWriter {
    fn drop(&mut self) {
        // The thread writes what is queued, then stops.
        self.queue.close();
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(t) = thread
            && t.join().is_err()
        {
            tracing::error!("audit writer thread panicked");
        }
    }
}

/// The audit log. Cheap to clone (all clones share one database and writer thread); the writer
/// thread writes what is queued and stops when the last clone is dropped.
#[derive(Clone)]
pub struct AuditLog {
    writer: Arc<AuditWriter>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("queued", &self.writer.queue.len())
            .field("lost", &self.lost())
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Opens (creating if needed) the log at `config.path` and starts the writer thread, which
    /// begins with the retention pass that is due: open returns without waiting for it, and
    /// the pass's failure is logged (and told to [`AuditConfig::on_retention`]), never
    /// returned here.
    pub fn open(config: AuditConfig) -> Result<Self, AuditError> {
        let conn = AuditDb::Sqlite(store::open(&config.path, config.fsync)?);
        let reader = AuditDb::Sqlite(store::open(&config.path, config.fsync)?);
        Self::start(conn, reader, &config)
    }

    /// Opens (creating and migrating its tables if needed) the log in the PostgreSQL database
    /// the gateway's replicas share and starts the writer thread, which begins with the
    /// retention pass that is due (as [`AuditLog::open`]: open does not wait for it).
    /// Every replica appends to one hash chain: appends are serialized across replicas (an
    /// advisory lock and the chain's head row taken `FOR UPDATE` in each append's transaction),
    /// so entries written concurrently by two replicas still form one valid chain.
    /// `config.path` and `config.fsync` are not used (the server decides durability).
    #[cfg(feature = "postgres")]
    pub fn open_postgres(
        db: bridle_rules::db::postgres::PgDatabase,
        config: AuditConfig,
    ) -> Result<Self, AuditError> {
        postgres::open(&db)?;
        Self::start(
            AuditDb::Postgres(db.clone()),
            AuditDb::Postgres(db),
            &config,
        )
    }

    fn start(conn: AuditDb, reader: AuditDb, config: &AuditConfig) -> Result<Self, AuditError> {
        let conn: SharedConnection = Arc::new(Shared::new(conn));
        let queue = Arc::new(CallQueue::new(
            config.capacity,
            config.max_batch,
            config.max_delay,
        ));
        let trim_step = config.trim_step.max(2);
        // No retention here: the writer thread starts with the pass that is due (see
        // `writer::run`), so a backlog of millions of entries never holds the caller (the
        // gateway's start) and a failing step never fails the open.
        let thread = {
            let (queue, conn) = (Arc::clone(&queue), Arc::clone(&conn));
            let (retention, every) = (config.retention, config.retention_every);
            let hook = config.on_retention.clone();
            std::thread::Builder::new()
                .name("bridle-audit".into())
                .spawn(move || writer::run(queue, conn, retention, every, trim_step, hook))?
        };
        Ok(AuditLog {
            writer: Arc::new(AuditWriter {
                conn,
                queue,
                thread: Mutex::new(Some(thread)),
                reader: Mutex::new(reader),
                retention: config.retention,
                trim_step,
            }),
        })
    }

    /// Records a change synchronously, after everything queued before it; returns its id. When
    /// the entry cannot be written the error is returned and nothing of it is stored: the
    /// operation that wanted the record must fail.
    pub fn record(&self, entry: Entry) -> Result<u64, AuditError> {
        let at = ms_since_epoch(SystemTime::now());
        let mut conn = lock_conn(&self.writer.conn);
        // Queued tool calls first, so the chain keeps the order things happened in. Their own
        // failure is counted and reported by the queue; it does not decide this write.
        let _ = self.writer.queue.write_pending(&mut conn);
        let ids = conn.append(&[(entry, at)])?;
        ids.first()
            .copied()
            .ok_or_else(|| AuditError::Database(rusqlite::Error::QueryReturnedNoRows))
    }

    /// Queues an entry of the call path (a tool call, a secret use) for the writer thread
    /// without waiting; `false` when the queue
    /// was full and the entry was lost (counted in [`AuditLog::lost`] and reported by a
    /// `system` `entries_lost` entry).
    pub fn record_tool_call(&self, entry: Entry) -> bool {
        self.writer
            .queue
            .push(entry, ms_since_epoch(SystemTime::now()))
    }

    /// Queues an entry stamped with the time it happened (the gate's time of the call).
    pub(crate) fn enqueue_at(&self, entry: Entry, at: SystemTime) -> bool {
        self.writer.queue.push(entry, ms_since_epoch(at))
    }

    /// Writes everything queued so far, and any unrecorded loss, before returning.
    pub fn flush(&self) -> Result<(), AuditError> {
        let mut conn = lock_conn(&self.writer.conn);
        self.writer.queue.write_pending(&mut conn).map(drop)
    }

    /// Tool-call entries lost since the log opened (queue full, or their batch failed).
    pub fn lost(&self) -> u64 {
        self.writer.queue.lost_total()
    }

    /// Tool-call entries waiting for the writer thread.
    pub fn queued(&self) -> usize {
        self.writer.queue.len()
    }

    /// Walks the chain from its anchor to its head and reports the first break.
    pub fn verify(&self) -> Result<VerifyReport, AuditError> {
        self.reader().verify()
    }

    /// The last id written and its hash: keep them elsewhere to detect a rewrite of the whole
    /// file.
    pub fn head(&self) -> Result<(u64, String), AuditError> {
        let ends = self.reader().ends()?;
        Ok((u64::try_from(ends.head_id).unwrap_or(0), ends.head_hash))
    }

    /// Applies the configured retention now; `None` when nothing was due.
    pub fn apply_retention(&self) -> Result<Option<TrimReport>, AuditError> {
        self.trim(self.writer.retention)
    }

    /// Applies `retention` now (whatever is configured); `None` when nothing was due. The pass
    /// runs in steps of at most [`AuditConfig::trim_step`] entries, each its own transaction
    /// recorded by its own `system` `retention_trim` entry; other writers (this process's,
    /// other replicas') append between steps. On an error the steps already made stay made
    /// (the chain is whole after each) and the rest is due at the next pass.
    pub fn trim(&self, retention: Retention) -> Result<Option<TrimReport>, AuditError> {
        self.trim_with_progress(retention, |_| ControlFlow::Continue(()))
    }

    /// [`AuditLog::trim`], calling `on_step` after each committed step with the pass so far
    /// (the log is free for other writers while it runs); `Break` ends the pass after that step,
    /// leaving the rest due for the next pass.
    pub fn trim_with_progress(
        &self,
        retention: Retention,
        mut on_step: impl FnMut(&TrimReport) -> ControlFlow<()>,
    ) -> Result<Option<TrimReport>, AuditError> {
        writer::run_retention(
            &self.writer.conn,
            &self.writer.queue,
            retention,
            self.writer.trim_step,
            ms_since_epoch(SystemTime::now()),
            &mut on_step,
        )
    }

    /// One page of entries matching `query`.
    pub fn query(&self, query: &AuditQuery) -> Result<AuditPage, AuditError> {
        self.reader().page(query)
    }

    /// Writes every entry `query` matches to `out` as JSON Lines (one [`StoredEntry`] object a
    /// line); returns how many.
    pub fn export_jsonl(&self, query: &AuditQuery, out: &mut dyn Write) -> Result<u64, AuditError> {
        let reader = self.reader();
        query::export(|q| reader.page(q), query, out)
    }

    fn reader(&self) -> MutexGuard<'_, AuditDb> {
        self.writer.reader.lock().unwrap_or_else(|p| p.into_inner())
    }
}
