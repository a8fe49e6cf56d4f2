//! The PostgreSQL side of the stores: settings, a connection pool, a way for the synchronous
//! store API to use it, versioned migrations, and change notifications.
//!
//! The stores' API is synchronous (the gateway calls it from blocking tasks, the command line
//! from plain `main`), while `tokio-postgres` is async. [`PgDatabase`] therefore owns a small
//! runtime on a thread of its own: the pool (`deadpool-postgres`) and every connection's I/O task
//! live there, and a synchronous caller waits for a query's reply on a channel. That works the
//! same from a blocking task, a plain thread or the command line, and never nests runtimes.
//!
//! Writers on several gateway replicas are serialized with a transaction-scoped advisory lock
//! ([`PgClient::begin`] with `lock`), the PostgreSQL counterpart of SQLite's `BEGIN IMMEDIATE`,
//! waited for at most [`WRITE_LOCK_WAIT`] by default (SQLite's busy timeout).
//! Changes are announced with `NOTIFY` in the writing transaction (delivered at commit) and
//! received by [`PgDatabase::listen`]. A listening connection sits idle for long stretches, so
//! one that died unseen (a peer that vanished, a dropped route, a NAT that forgot it) would
//! otherwise only be noticed by the kernel's default keepalive after two hours; it uses TCP
//! keepalives and a user timeout so it is noticed within [`LISTEN_DEAD_AFTER`] and re-made.
//!
//! A server that is frozen rather than gone (a stopped process, a stalled disk, a hung storage
//! layer) still acknowledges TCP and never answers, so neither the TCP bounds nor the server's
//! own `lock_timeout` end a query sent to it; without a bound of its own, every caller of the
//! store (every gateway worker, on every replica sharing the database) would wait for ever.
//! Each statement and transaction step of a [`PgClient`] is therefore raced against a client-side
//! deadline ([`STATEMENT_DEADLINE`] unless [`PgSettings::with_statement_deadline`] says
//! otherwise), and getting a connection from the pool is bounded by the pool's wait, create and
//! recycle timeouts. A step past its deadline fails with `database_error`, and its connection,
//! in an unknown state (a reply may still come), is closed rather than returned to the pool:
//! the server rolls back a transaction open on it once it finds the connection gone. A
//! listening connection, whose keepalives such a server answers, is checked with a round trip
//! bounded the same way every [`LISTEN_CHECK_INTERVAL`].

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use super::{MIGRATIONS_TABLE, Migrations};
use crate::error::RulesError;
use crate::fsutil::now_rfc3339;

/// The advisory-lock key every schema migration takes (any fixed number; one per purpose).
const MIGRATION_LOCK: i64 = 0x6272_6964_6c65_0001;

/// The longest a writer waits for another writer's advisory lock ([`PgClient::begin`] with a
/// lock) before it gives up with an error and writes nothing, by default
/// ([`PgSettings::with_write_lock_wait`]): SQLite's busy timeout, here (the longest the
/// stores' SQLite files use). Writers hold the lock for a few statements, so a wait this long
/// means one is stuck (a replica frozen or cut off mid-transaction, whose session the server
/// keeps until TCP gives up, hours later).
pub const WRITE_LOCK_WAIT: Duration = Duration::from_secs(30);

/// The longest a statement or transaction step (`BEGIN`, `COMMIT`, `ROLLBACK`) waits for the
/// server's reply, by default ([`PgSettings::with_statement_deadline`]); the step that takes
/// the write lock may wait the write-lock wait on top. Past it the step fails with
/// `database_error` and its connection is closed, never handed out again.
///
/// Two minutes: the stores' statements read or write a few rows by index and answer within
/// milliseconds, and their heaviest (every project's newest document, a page of the review
/// queue or the audit log) within well under a second, so a reply this late means the server
/// is frozen or so overloaded that failing is kinder than waiting. It is four times
/// [`WRITE_LOCK_WAIT`] (the server-side bound on the one wait a healthy server may rightly
/// impose, there for a writer stuck holding the lock), so a writer's transaction that waited
/// out the lock and then meets a slow, loaded server still finishes; and as the lock step's
/// deadline is the lock wait on top of this one, a lock wait that ran out is reported as such
/// (the server's `lock_timeout`), never as a frozen server.
pub const STATEMENT_DEADLINE: Duration = Duration::from_secs(120);

/// The longest a caller waits for a free connection of a full pool (at most the statement
/// deadline).
pub const POOL_WAIT: Duration = Duration::from_secs(30);

/// The longest making a new pooled connection (TCP, TLS, authentication) or checking a pooled
/// one before handing it out may take (at most the statement deadline): a server that
/// accepts connections and never answers their startup fails the call after this.
pub const POOL_CONNECT: Duration = Duration::from_secs(10);

/// The `NOTIFY` channel on which every store announces a change.
pub const CHANGES_CHANNEL: &str = "bridle_changes";

/// What [`PgDatabase::listen`] sends each time its connection starts listening.
pub const LISTENING: &str = "listening";

/// What [`PgDatabase::listen`] sends when its connection failed (before it is re-made): until
/// the next [`LISTENING`], notifications may be missed, so a receiver that trusts them (a
/// cache) stops trusting them.
pub const NOT_LISTENING: &str = "not_listening";

/// How long a listening connection may be silent before the first TCP keepalive probe.
pub const LISTEN_KEEPALIVE_IDLE: Duration = Duration::from_secs(10);

/// The pause between unanswered keepalive probes of a listening connection.
pub const LISTEN_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// How many unanswered probes end a listening connection.
pub const LISTEN_KEEPALIVE_RETRIES: u32 = 3;

/// The longest a listening connection that died unseen goes unnoticed: the idle time plus the
/// unanswered probes (10 s + 3 x 5 s); data sent and never acknowledged ends it as soon (the
/// connection's TCP user timeout). It then fails, [`NOT_LISTENING`] is sent, and it is re-made.
pub const LISTEN_DEAD_AFTER: Duration = Duration::from_secs(25);

/// How often a listening connection is checked with a round trip (`SELECT 1`) that must be
/// answered within the statement deadline ([`STATEMENT_DEADLINE`] unless set): a server that
/// is frozen rather than gone still acknowledges TCP, so keepalives never end a connection to
/// it, and without the check it would be trusted as listening for ever while nothing arrives
/// (also after a failover moved the database elsewhere). Making the connection and its
/// `LISTEN` are bounded by the deadline too.
pub const LISTEN_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// The longest a pooled connection waits for the server to acknowledge what it sent (its TCP
/// user timeout): a query sent to a server whose host vanished (a network partition, a
/// failover) fails after this instead of after the kernel's own retransmissions, about 15
/// minutes, during which it held its caller and a pool slot.
pub const POOL_UNACKNOWLEDGED_LIMIT: Duration = Duration::from_secs(30);

/// The connection settings of the pool's connections: `config` with
/// [`POOL_UNACKNOWLEDGED_LIMIT`] (keepalives as configured: they are used, not left idle, and
/// the pool checks a connection it hands out).
fn pool_config(config: &tokio_postgres::Config) -> tokio_postgres::Config {
    let mut config = config.clone();
    config.tcp_user_timeout(POOL_UNACKNOWLEDGED_LIMIT);
    config
}

/// The connection settings of a listening connection: `config` with keepalives on and the
/// bounds above (the pool's connections keep their keepalive defaults: they are used, not
/// left idle).
fn listen_config(config: &tokio_postgres::Config) -> tokio_postgres::Config {
    let mut config = config.clone();
    config
        .keepalives(true)
        .keepalives_idle(LISTEN_KEEPALIVE_IDLE)
        .keepalives_interval(LISTEN_KEEPALIVE_INTERVAL)
        .keepalives_retries(LISTEN_KEEPALIVE_RETRIES)
        .tcp_user_timeout(LISTEN_DEAD_AFTER);
    config
}

/// How to reach the server: a `postgres://` URL and, separately, the password (read from the
/// vault or a secret file, never written in the URL of a configuration file). `Debug` shows
/// neither the password nor one embedded in the URL.
#[derive(Clone)]
pub struct PgSettings {
    config: tokio_postgres::Config,
    max_connections: usize,
    write_lock_wait: Duration,
    statement_deadline: Duration,
}

impl std::fmt::Debug for PgSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSettings")
            .field("hosts", &self.config.get_hosts())
            .field("ports", &self.config.get_ports())
            .field("dbname", &self.config.get_dbname())
            .field("user", &self.config.get_user())
            .field(
                "password",
                &self.config.get_password().map(|_| "<redacted>"),
            )
            .field("max_connections", &self.max_connections)
            .field("write_lock_wait", &self.write_lock_wait)
            .field("statement_deadline", &self.statement_deadline)
            .finish()
    }
}

impl PgSettings {
    /// Reads a `postgres://user@host:port/dbname` URL (`postgresql://` too). Anything else, a
    /// `key=value` connection string included, is refused with `database_config`, as is a URL
    /// that names no database.
    pub fn from_url(url: &str) -> Result<Self, RulesError> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(RulesError::DatabaseConfig(
                "a PostgreSQL database is given as a `postgres://user@host:port/dbname` URL".into(),
            ));
        }
        let config: tokio_postgres::Config = url.parse().map_err(|e: tokio_postgres::Error| {
            // The parser's message names the bad part, never the password's value.
            RulesError::DatabaseConfig(format!("the database URL does not parse: {e}"))
        })?;
        if config.get_dbname().is_none() {
            return Err(RulesError::DatabaseConfig(
                "the database URL names no database (`postgres://user@host:port/dbname`)".into(),
            ));
        }
        Ok(Self {
            config,
            max_connections: 8,
            write_lock_wait: WRITE_LOCK_WAIT,
            statement_deadline: STATEMENT_DEADLINE,
        })
    }

    /// Sets the password (from the vault or a secret file).
    pub fn with_password(mut self, password: &str) -> Self {
        self.config.password(password);
        self
    }

    /// Whether a password is set (also one written in the URL).
    pub fn has_password(&self) -> bool {
        self.config.get_password().is_some()
    }

    /// Sets the pool's size (8 by default).
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets how long a writer waits for another writer's lock ([`WRITE_LOCK_WAIT`] by
    /// default; at least a millisecond).
    pub fn with_write_lock_wait(mut self, wait: Duration) -> Self {
        self.write_lock_wait = wait.max(Duration::from_millis(1));
        self
    }

    /// Sets how long a statement or transaction step waits for the server's reply before it
    /// fails with `database_error` and its connection is closed ([`STATEMENT_DEADLINE`] by
    /// default; at least a millisecond). It also caps the pool's waits ([`POOL_WAIT`],
    /// [`POOL_CONNECT`]). Keep it well above the slowest statement a healthy server may run;
    /// the step that takes the write lock may wait the write-lock wait on top of it.
    pub fn with_statement_deadline(mut self, deadline: Duration) -> Self {
        self.statement_deadline = deadline.max(Duration::from_millis(1));
        self
    }

    /// The database name.
    pub fn dbname(&self) -> &str {
        self.config.get_dbname().unwrap_or_default()
    }
}

/// The thread that runs the pool's connections. Dropping it lets the thread finish.
struct DbRuntime {
    handle: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// A pool of connections to one PostgreSQL database, usable from synchronous code. Cheap to
/// clone (all clones share the pool).
#[derive(Clone)]
pub struct PgDatabase {
    pool: Pool,
    settings: Arc<PgSettings>,
    runtime: Arc<DbRuntime>,
}

impl std::fmt::Debug for PgDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgDatabase")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

pub(crate) fn pg_error(e: &tokio_postgres::Error) -> RulesError {
    match e.as_db_error() {
        Some(db) => RulesError::Postgres(format!("{} ({})", db.message(), db.code().code())),
        None => RulesError::Postgres(e.to_string()),
    }
}

/// Whether `e` says the connection it came on is gone: no server error at all (closed, an I/O
/// failure) or one that ended the session (`FATAL`, `PANIC`).
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed()
        || e.as_db_error()
            .is_none_or(|db| matches!(db.severity(), "FATAL" | "PANIC"))
}

/// A pool error as the store's error (a backend error keeps PostgreSQL's message and code).
fn pool_error(e: deadpool_postgres::PoolError) -> RulesError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_error(&e),
        other => RulesError::Postgres(format!("no database connection: {other}")),
    }
}

impl PgDatabase {
    /// Starts the pool's thread and checks that one connection can be made.
    pub fn connect(settings: &PgSettings) -> Result<Self, RulesError> {
        let (handle_tx, handle_rx) = std::sync::mpsc::sync_channel(1);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("bridle-postgres".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(rt.handle().clone()));
                // Runs the connections' tasks until the database handle is dropped.
                rt.block_on(async move {
                    let _ = stop_rx.await;
                });
            })
            .map_err(|e| RulesError::Postgres(format!("starting the database thread: {e}")))?;
        let handle = handle_rx
            .recv()
            .map_err(|_| RulesError::Postgres("the database thread did not start".into()))?
            .map_err(|e| RulesError::Postgres(format!("starting the database runtime: {e}")))?;
        let manager = Manager::from_config(
            pool_config(&settings.config),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(settings.max_connections)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT.min(settings.statement_deadline)))
            .create_timeout(Some(POOL_CONNECT.min(settings.statement_deadline)))
            .recycle_timeout(Some(POOL_CONNECT.min(settings.statement_deadline)))
            .build()
            .map_err(|e| RulesError::Postgres(format!("building the connection pool: {e}")))?;
        let db = Self {
            pool,
            settings: Arc::new(settings.clone()),
            runtime: Arc::new(DbRuntime {
                handle,
                _stop: stop_tx,
            }),
        };
        db.client()?;
        tracing::info!(database = settings.dbname(), "connected to PostgreSQL");
        Ok(db)
    }

    /// The database's name.
    pub fn dbname(&self) -> &str {
        self.settings.dbname()
    }

    /// Runs a future on the database's runtime and waits for it.
    pub fn run<F, T>(&self, f: F) -> Result<T, RulesError>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let task = self.runtime.handle.spawn(f);
        futures::executor::block_on(task)
            .map_err(|e| RulesError::Postgres(format!("a database task failed: {e}")))
    }

    /// The runtime the pool's connections run on (for tasks such as [`PgDatabase::listen`]).
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime.handle
    }

    /// A pooled connection, returned to the pool when dropped (closed instead when a step on
    /// it outlived its deadline). Waits for it at most [`POOL_WAIT`] and [`POOL_CONNECT`] (each
    /// at most the statement deadline).
    pub fn client(&self) -> Result<PgClient, RulesError> {
        self.client_with(Some(self.settings.statement_deadline))
    }

    /// A pooled connection whose steps wait at most `deadline` (`None`: without a bound).
    fn client_with(&self, deadline: Option<Duration>) -> Result<PgClient, RulesError> {
        let pool = self.pool.clone();
        let object = self
            .run(async move { pool.get().await })?
            .map_err(pool_error)?;
        Ok(PgClient {
            object: Some(object),
            write_lock_wait: self.settings.write_lock_wait,
            deadline,
            runtime: Arc::clone(&self.runtime),
            closed: AtomicBool::new(false),
        })
    }

    /// Brings the database up to `set`'s latest version (one transaction; concurrent replicas
    /// wait for each other on an advisory lock). Returns the versions applied now.
    ///
    /// Its statements have no client-side deadline: another replica's migration may rightly
    /// hold the lock, and a step may rightly run, for long; a server frozen then holds up the
    /// start of a replica (where it is seen), not the workers of a running one.
    pub fn migrate(&self, set: &Migrations) -> Result<Vec<u32>, RulesError> {
        let client = self.client_with(None)?;
        // Another replica's migration may rightly take long: waited for without a bound.
        let tx = client.begin_waiting(Some(MIGRATION_LOCK), None)?;
        tx.batch(MIGRATIONS_TABLE)?;
        let applied: Vec<(u32, String)> = tx
            .query(
                "SELECT version, checksum FROM schema_migrations WHERE store = $1",
                &[&set.store],
            )?
            .iter()
            .map(|r| (r.get::<_, i32>(0) as u32, r.get::<_, String>(1)))
            .collect();
        let pending = set.pending(&applied)?;
        let mut done = Vec::new();
        for step in pending {
            tx.batch(step.sql)?;
            tx.execute(
                "INSERT INTO schema_migrations (store, version, name, checksum, applied_at) VALUES ($1, $2, $3, $4, $5)",
                &[&set.store, &(step.version as i32), &step.name, &step.checksum(), &now_rfc3339()],
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

    /// The versions the database records for a store, ascending.
    pub fn applied(&self, store: &str) -> Result<Vec<u32>, RulesError> {
        let client = self.client()?;
        let exists = client
            .query_opt("SELECT to_regclass('schema_migrations')::text", &[])?
            .and_then(|r| r.get::<_, Option<String>>(0))
            .is_some();
        if !exists {
            return Ok(Vec::new());
        }
        Ok(client
            .query(
                "SELECT version FROM schema_migrations WHERE store = $1 ORDER BY version",
                &[&store],
            )?
            .iter()
            .map(|r| r.get::<_, i32>(0) as u32)
            .collect())
    }

    /// Listens on [`CHANGES_CHANNEL`] on a connection of its own (outside the pool) and sends
    /// each notification's payload to the returned receiver. Each time the connection is
    /// listening (first, and after a failure, re-made with a growing pause) it sends
    /// [`LISTENING`], so a receiver rescans whatever it may have missed before; each time the
    /// connection fails it sends [`NOT_LISTENING`]. The task ends when the receiver is dropped.
    /// The connection uses TCP keepalives, so one that died unseen fails within
    /// [`LISTEN_DEAD_AFTER`], and is checked every [`LISTEN_CHECK_INTERVAL`] with a round trip
    /// bounded by the statement deadline, so one whose server froze fails too.
    pub fn listen(&self) -> tokio::sync::mpsc::UnboundedReceiver<String> {
        self.listen_on(CHANGES_CHANNEL)
    }

    /// As [`PgDatabase::listen`], on another channel (another store's: the gateway's vault
    /// announces its changes on a channel of its own). `channel` is a fixed identifier of
    /// lower-case letters and underscores; any other name listens on nothing and is logged.
    pub fn listen_on(&self, channel: &'static str) -> tokio::sync::mpsc::UnboundedReceiver<String> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        if channel.is_empty() || !channel.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            tracing::error!(channel, "not a channel name; nothing is listened to");
            return rx;
        }
        let config = listen_config(&self.settings.config);
        let deadline = self.settings.statement_deadline;
        self.runtime.handle.spawn(async move {
            let mut pause = Duration::from_millis(100);
            while !tx.is_closed() {
                match listen_once(&config, channel, deadline, &tx).await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::warn!(error = ?e.to_string(), "listening for database changes failed; reconnecting");
                        if tx.send(NOT_LISTENING.into()).is_err() {
                            return;
                        }
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        });
        rx
    }
}

/// One LISTEN connection, until it fails (`Err`: also a server that does not answer within
/// `deadline`) or the receiver is gone (`Ok`).
async fn listen_once(
    config: &tokio_postgres::Config,
    channel: &str,
    deadline: Duration,
    tx: &tokio::sync::mpsc::UnboundedSender<String>,
) -> Result<(), RulesError> {
    use futures::StreamExt;
    let silent = || {
        RulesError::Postgres(format!(
            "the listening connection's server did not answer within {} ms",
            deadline.as_millis()
        ))
    };
    let (client, mut connection) = tokio::time::timeout(deadline, config.connect(NoTls))
        .await
        .map_err(|_| silent())?
        .map_err(|e| pg_error(&e))?;
    let (msg_tx, mut msg_rx) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                    if msg_tx.send(Ok(n.payload().to_string())).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = msg_tx.send(Err(pg_error(&e)));
                    return;
                }
            }
        }
        let _ = msg_tx.send(Err(RulesError::Postgres(
            "the listening connection closed".into(),
        )));
    });
    let listening =
        tokio::time::timeout(deadline, client.batch_execute(&format!("LISTEN {channel}"))).await;
    match listening {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            driver.abort();
            return Err(pg_error(&e));
        }
        Err(_) => {
            driver.abort();
            return Err(silent());
        }
    }
    if tx.send(LISTENING.into()).is_err() {
        driver.abort();
        return Ok(());
    }
    let mut check = tokio::time::interval_at(
        tokio::time::Instant::now() + LISTEN_CHECK_INTERVAL,
        LISTEN_CHECK_INTERVAL,
    );
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome = loop {
        tokio::select! {
            () = tx.closed() => break Ok(()),
            _ = check.tick() => {
                // Notifications that arrive meanwhile wait in `msg_rx`.
                match tokio::time::timeout(deadline, client.batch_execute("SELECT 1")).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => break Err(pg_error(&e)),
                    Err(_) => break Err(silent()),
                }
            }
            m = msg_rx.recv() => match m {
                Some(Ok(payload)) => {
                    if tx.send(payload).is_err() {
                        break Ok(());
                    }
                }
                Some(Err(e)) => break Err(e),
                None => break Err(RulesError::Postgres("the listening connection closed".into())),
            },
        }
    };
    driver.abort();
    drop(client);
    outcome
}

/// A pooled connection used from synchronous code.
pub struct PgClient {
    /// Present until the client is dropped.
    object: Option<deadpool_postgres::Object>,
    /// How long [`PgClient::begin`] waits for a lock.
    write_lock_wait: Duration,
    /// How long a step waits for the server's reply (`None`: without a bound).
    deadline: Option<Duration>,
    /// The runtime the connection runs on, where the deadline's timer runs; kept alive while
    /// the client lives.
    runtime: Arc<DbRuntime>,
    /// Set once a step outlived its deadline (or a rollback failed): nothing more is sent, and
    /// the connection is closed instead of returned to the pool when the client is dropped.
    closed: AtomicBool,
}

impl std::fmt::Debug for PgClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgClient").finish_non_exhaustive()
    }
}

/// Which kind of step outlived its deadline (what the error says about its effect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A statement, `BEGIN` or `ROLLBACK`: a transaction open on the connection is rolled back
    /// when the server finds it closed.
    Statement,
    /// A `COMMIT`: the server may have applied it before it stopped answering.
    Commit,
}

// The client's futures only talk to the connection task (on the database runtime) over
// channels, so waiting for them with a plain executor is sound from any thread. The deadline's
// timer is made in that runtime's context (whose time driver runs it) and raced with them.
//
// Statements with parameters are prepared once per pooled connection and kept in its cache
// (a statement sent by text is prepared again on every call: one more round trip each).
impl PgClient {
    fn object(&self) -> &deadpool_postgres::Object {
        self.object
            .as_ref()
            .expect("a client holds its connection until it is dropped")
    }

    /// Waits for one step's reply, at most `deadline` (`None`: without a bound). Past it, the
    /// connection is marked closed (it is closed, not pooled, when the client is dropped) and
    /// the step fails; so does every later step on this client, at once.
    fn wait<T>(
        &self,
        step: Step,
        deadline: Option<Duration>,
        reply: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<Result<T, tokio_postgres::Error>, RulesError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(RulesError::Postgres(
                "this database connection was closed after a step on it failed; nothing more is sent on it, try again".into(),
            ));
        }
        let Some(deadline) = deadline else {
            return Ok(futures::executor::block_on(reply));
        };
        let timer = {
            let _context = self.runtime.handle.enter();
            tokio::time::sleep(deadline)
        };
        let reply = std::pin::pin!(reply);
        let timer = std::pin::pin!(timer);
        match futures::executor::block_on(futures::future::select(reply, timer)) {
            futures::future::Either::Left((reply, _)) => Ok(reply),
            futures::future::Either::Right(((), _)) => {
                self.closed.store(true, Ordering::Release);
                let ms = deadline.as_millis();
                tracing::warn!(
                    deadline_ms = ms as u64,
                    commit = step == Step::Commit,
                    "the database did not answer in time; closing the connection"
                );
                Err(RulesError::Postgres(match step {
                    Step::Statement => format!(
                        "the database did not answer within {ms} ms (is the server frozen, stalled or overloaded?); the connection is closed, never reused, which rolls back a transaction open on it; try again"
                    ),
                    Step::Commit => format!(
                        "the database did not confirm the commit within {ms} ms (is the server frozen, stalled or overloaded?); the connection is closed, never reused, and whether the change was applied is unknown"
                    ),
                }))
            }
        }
    }

    /// [`Self::wait`] with the client's deadline, a server error as the store's error. A step
    /// that failed because the connection is gone (closed, broken, or ended by the server: a
    /// `FATAL` error such as an administrator's `pg_terminate_backend`) marks the client
    /// closed, so its connection is not handed out by the pool again: the pool's own check
    /// sees a closed connection only once its task has noticed, which may be later.
    fn step<T>(
        &self,
        step: Step,
        reply: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, RulesError> {
        self.wait(step, self.deadline, reply)?.map_err(|e| {
            if connection_lost(&e) {
                self.closed.store(true, Ordering::Release);
            }
            pg_error(&e)
        })
    }

    /// Runs statements without parameters.
    pub fn batch(&self, sql: &str) -> Result<(), RulesError> {
        self.step(Step::Statement, self.object().batch_execute(sql))
    }

    /// Runs one statement; returns the rows it touched.
    pub fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, RulesError> {
        self.step(Step::Statement, async {
            let statement = self.object().prepare_cached(sql).await?;
            self.object().execute(&statement, params).await
        })
    }

    /// Runs a query.
    pub fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, RulesError> {
        self.step(Step::Statement, async {
            let statement = self.object().prepare_cached(sql).await?;
            self.object().query(&statement, params).await
        })
    }

    /// Runs a query whose text is made per call (filters chosen by the caller), without
    /// keeping it in the connection's statement cache, which would otherwise grow by one entry
    /// for every variant.
    pub fn query_uncached(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, RulesError> {
        self.step(Step::Statement, self.object().query(sql, params))
    }

    /// Runs a query that returns at most one row.
    pub fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, RulesError> {
        self.step(Step::Statement, async {
            let statement = self.object().prepare_cached(sql).await?;
            self.object().query_opt(&statement, params).await
        })
    }

    /// Starts a transaction on this connection. With `lock`, it first takes that
    /// transaction-scoped advisory lock, so writers holding the same key (on any replica) run
    /// one after another, waiting at most the settings' write-lock wait ([`WRITE_LOCK_WAIT`]
    /// by default) for it (then an error, and nothing written); such a transaction is `READ COMMITTED` whatever the server's
    /// `default_transaction_isolation`, so each statement after the lock sees what the writer
    /// before committed (under a stricter default, its snapshot would predate the wait, and a
    /// check made in it would be stale or fail to serialize). Without `lock` it is a read:
    /// `REPEATABLE READ, READ ONLY`, one snapshot for all its statements (rows that belong
    /// together, such as a listing and the rows it names, are read as of one moment), which
    /// writes nothing. Rolled back when dropped without [`PgTransaction::commit`].
    pub fn begin(self, lock: Option<i64>) -> Result<PgTransaction, RulesError> {
        let wait = self.write_lock_wait;
        self.begin_waiting(lock, Some(wait))
    }

    /// [`Self::begin`], waiting for the lock at most `wait` (`None`: as long as the server's
    /// `lock_timeout` lets it, for a migration, which may rightly hold its lock for long).
    fn begin_waiting(
        self,
        lock: Option<i64>,
        wait: Option<Duration>,
    ) -> Result<PgTransaction, RulesError> {
        let Some(key) = lock else {
            // A read: one snapshot for all its statements, and never a serialization failure.
            self.batch("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
            return Ok(PgTransaction { client: Some(self) });
        };
        // One round trip; `SET LOCAL` ends with the transaction.
        self.batch(&match wait {
            Some(wait) => format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = {}",
                wait.as_millis()
            ),
            None => "BEGIN ISOLATION LEVEL READ COMMITTED".into(),
        })?;
        let tx = PgTransaction { client: Some(self) };
        // The lock may rightly be waited for (the server ends the wait), then the statement
        // runs: its deadline is the lock wait on top of a statement's.
        let deadline = match (tx.deadline, wait) {
            (Some(deadline), Some(wait)) => Some(deadline.saturating_add(wait)),
            _ => None,
        };
        let locked = tx.wait(Step::Statement, deadline, async {
            let statement = tx
                .object()
                .prepare_cached("SELECT pg_advisory_xact_lock($1)")
                .await?;
            tx.object().execute(&statement, &[&key]).await
        })?;
        match locked {
            Ok(_) => Ok(tx),
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) => {
                Err(RulesError::Postgres(format!(
                    "another writer has held the database's write lock for over {} ms (a replica stuck in the middle of a change?); nothing was written, try again",
                    wait.unwrap_or_default().as_millis()
                )))
            }
            Err(e) => Err(pg_error(&e)),
        }
    }
}

impl Drop for PgClient {
    fn drop(&mut self) {
        if self.closed.load(Ordering::Acquire)
            && let Some(object) = self.object.take()
        {
            // Taken out of the pool and dropped: its connection task ends and the socket is
            // closed, so the server ends the session (rolling back what it had open).
            drop(deadpool_postgres::Object::take(object));
        }
    }
}

/// An open transaction on a pooled connection.
#[derive(Debug)]
pub struct PgTransaction {
    client: Option<PgClient>,
}

impl std::ops::Deref for PgTransaction {
    type Target = PgClient;
    fn deref(&self) -> &PgClient {
        self.client
            .as_ref()
            .expect("a transaction holds its connection until commit or drop")
    }
}

impl PgTransaction {
    /// Commits. When the server does not confirm within the deadline the connection is
    /// closed and the error says that the outcome is unknown.
    pub fn commit(mut self) -> Result<(), RulesError> {
        match self.client.take() {
            Some(c) => c.step(Step::Commit, c.object().batch_execute("COMMIT")),
            None => Ok(()),
        }
    }
}

impl Drop for PgTransaction {
    fn drop(&mut self) {
        let Some(c) = self.client.take() else {
            return;
        };
        if c.closed.load(Ordering::Acquire) {
            // A step outlived its deadline: no `ROLLBACK` is waited for on a connection that
            // does not answer; closing it (when `c` is dropped) rolls the transaction back.
            return;
        }
        if let Err(e) = c.batch("ROLLBACK") {
            // The connection's state is unknown: keep it out of the pool.
            tracing::warn!(error = ?e.to_string(), "rolling back a transaction failed; dropping the connection");
            c.closed.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_connection_notices_a_dead_peer_within_the_bound() {
        let settings = PgSettings::from_url("postgres://u@127.0.0.1:5432/db").unwrap();
        let config = listen_config(&settings.config);
        assert!(config.get_keepalives());
        assert_eq!(config.get_keepalives_idle(), LISTEN_KEEPALIVE_IDLE);
        assert_eq!(
            config.get_keepalives_interval(),
            Some(LISTEN_KEEPALIVE_INTERVAL)
        );
        assert_eq!(
            config.get_keepalives_retries(),
            Some(LISTEN_KEEPALIVE_RETRIES)
        );
        assert_eq!(config.get_tcp_user_timeout(), Some(&LISTEN_DEAD_AFTER));
        assert_eq!(
            LISTEN_KEEPALIVE_IDLE + LISTEN_KEEPALIVE_INTERVAL * LISTEN_KEEPALIVE_RETRIES,
            LISTEN_DEAD_AFTER
        );
        // The settings given are left as they were.
        assert_eq!(settings.config.get_tcp_user_timeout(), None);
    }

    #[test]
    fn only_a_postgres_url_naming_a_database_is_read() {
        for given in [
            "host=127.0.0.1 port=5432 dbname=db user=u",
            "mysql://u@127.0.0.1/db",
            "postgres://u@127.0.0.1:5432",
        ] {
            let e = PgSettings::from_url(given).unwrap_err();
            assert_eq!(e.code(), "database_config", "{given}: {e}");
        }
        for given in [
            "postgres://u@127.0.0.1/db",
            "postgresql://u@127.0.0.1:5433/db",
        ] {
            assert_eq!(
                PgSettings::from_url(given).unwrap().dbname(),
                "db",
                "{given}"
            );
        }
    }

    #[test]
    fn a_pooled_connection_gives_up_on_a_vanished_server_within_the_bound() {
        let settings = PgSettings::from_url("postgres://u:pw@127.0.0.1:5432/db").unwrap();
        let config = pool_config(&settings.config);
        assert_eq!(
            config.get_tcp_user_timeout(),
            Some(&POOL_UNACKNOWLEDGED_LIMIT)
        );
        assert_eq!(config.get_password(), settings.config.get_password());
        assert_eq!(config.get_dbname(), Some("db"));
    }
}
