//! Tasks: a tool call that answers at once with a task id while the tool goes on working.
//!
//! Long-running tools (indexing a repository, waiting for a human) should not hold a request
//! open. A tool that declares [`TaskSupport`] may run as a task: [`TaskStore::start`] passes the
//! call through the gate's checks first (the tool exists, is offered, its capability is
//! granted, its arguments validate), so a caller who may not call the tool never gets a task;
//! then it records the task, runs the whole gate call in the background with the task's own
//! cancellation token, and answers with the task's first state. The caller reads the status and
//! the inlined result later ([`TaskStore::get`]), answers the tool's questions
//! ([`TaskStore::answer`]), or cancels it ([`TaskStore::cancel`]).
//!
//! Why these rules:
//! - **Tasks belong to their principal.** Every read, answer and cancel names the principal;
//!   another principal's task is reported exactly as an unknown one (`task_not_found`), so task
//!   ids leak nothing. Ids are 128 random bits besides.
//! - **Bounded.** Each principal holds at most [`TaskConfig::max_per_principal`] tasks
//!   (running, or finished and not yet expired); one more is refused with `too_many_tasks`.
//! - **Expiry.** A task is kept for [`TaskConfig::ttl`] from its creation and never removed
//!   earlier; after it, it is gone (a running one is cancelled). Expired tasks are swept on
//!   every access, so no timer runs.
//! - **Questions become input requests.** While a task runs, the tool's client channel is a
//!   task peer: a question (elicitation, sampling, roots) is parked under a fresh key, the task
//!   shows `input_required` with its `inputRequests`, and the tool waits until the answer is
//!   delivered. A task with several questions at once stays `input_required` until all are
//!   answered.
//! - **Errors.** A tool that reported an error (or a refusal met while running) completes with
//!   an error result; only an internal failure (a panic) makes the task `failed`, with a
//!   JSON-RPC error object.
//!
//! The store sits above the registry: it runs calls through [`ToolRegistry::call`] and nothing
//! below imports it.

//!
//! The module's parts: [`snapshot`] (what a task looks like from outside, and its wire shape),
//! [`peer`] (the client channel of a running task, and its status notifications), and here
//! the store itself.

mod peer;
mod snapshot;

pub use self::snapshot::{TaskOutcome, TaskSnapshot, TaskStatus};

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::content::ToolOutput;
use crate::context::CallOptions;
use crate::error::GateError;
use crate::principal::Caller;
use crate::registry::ToolRegistry;
use crate::tool::{TaskSupport, quoted_name};

use self::peer::{SwitchPeer, TaskPeer, spawn_notifier};

/// JSON-RPC "internal error", the code of a task that failed inside the server.
const INTERNAL_ERROR: i64 = -32603;

/// Capabilities a task peer may need from the client.
const CLIENT_CAPABILITIES: [&str; 3] = ["elicitation", "sampling", "roots"];

/// How long tasks live, how often clients should poll, how many a principal may hold.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskConfig {
    /// How long a task is kept from its creation (default 15 minutes). Never shorter than
    /// what clients are told (`ttlMs`).
    pub ttl: Duration,
    /// The polling interval suggested to clients (default 500 ms).
    pub poll_interval: Duration,
    /// Tasks a principal may hold at once, running or finished and not expired (default 64).
    pub max_per_principal: usize,
}

impl Default for TaskConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(15 * 60),
            poll_interval: Duration::from_millis(500),
            max_per_principal: 64,
        }
    }
}

impl TaskConfig {
    /// Sets the time to live.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets the suggested polling interval.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets how many tasks a principal may hold.
    pub fn max_per_principal(mut self, max: usize) -> Self {
        self.max_per_principal = max;
        self
    }
}

/// Why a task operation was refused. Each variant has a stable [`TaskError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    /// No task of that id for this principal: unknown, expired, or another principal's.
    #[error("There is no task `{id}`. It may have expired; call the tool again if you need it.")]
    NotFound {
        /// The id asked for, cut short past 128 bytes ([`crate::quoted_name`]).
        id: String,
    },
    /// The principal already holds as many tasks as allowed.
    #[error(
        "You already hold {max} tasks. Wait for one to expire or cancel one, then call `{tool}` again."
    )]
    TooManyTasks {
        /// The tool that was called.
        tool: String,
        /// The limit.
        max: usize,
    },
    /// The tool does not run as a task.
    #[error("The tool `{tool}` does not run as a task; call it directly.")]
    NotSupported {
        /// The tool.
        tool: String,
    },
}

impl TaskError {
    /// The stable code: `task_not_found`, `too_many_tasks` or `task_not_supported`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "task_not_found",
            Self::TooManyTasks { .. } => crate::error::ErrorCode::TooManyTasks.as_str(),
            Self::NotSupported { .. } => "task_not_supported",
        }
    }
}

/// What [`TaskStore::start`] did with a call.
#[derive(Debug)]
#[non_exhaustive]
pub enum Started {
    /// A task was created; this is its first state.
    Task(Box<TaskSnapshot>),
    /// The call ended without a task: refused by the gate's checks, or (a tool with
    /// [`ToolSpec::task_after_input`](crate::ToolSpec::task_after_input)) finished or asked
    /// the client before it first waited.
    Finished(Result<ToolOutput, GateError>),
}

/// One recorded task.
struct TaskRecord {
    owner: String,
    tool: String,
    status: TaskStatus,
    status_message: Option<String>,
    created_at: SystemTime,
    updated_at: SystemTime,
    /// False while a `task_after_input` tool still runs inside its call.
    visible: bool,
    pending: Map<String, Value>,
    waiters: HashMap<String, oneshot::Sender<Value>>,
    asked: u64,
    outcome: Option<TaskOutcome>,
    cancel: CancellationToken,
    notifier: Option<mpsc::UnboundedSender<TaskSnapshot>>,
}

struct TaskBoard {
    tools: ToolRegistry,
    config: TaskConfig,
    tasks: Mutex<HashMap<String, TaskRecord>>,
    version: watch::Sender<u64>,
}

/// The app's tasks. Cheap to clone (shared).
#[derive(Clone)]
pub struct TaskStore {
    board: Arc<TaskBoard>,
}

impl std::fmt::Debug for TaskStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskStore")
            .field("config", &self.board.config)
            .finish()
    }
}

impl TaskBoard {
    /// The task table with every expired task removed (a running one is cancelled first).
    fn lock(&self) -> MutexGuard<'_, HashMap<String, TaskRecord>> {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let now = SystemTime::now();
        let ttl = self.config.ttl;
        tasks.retain(|id, t| {
            let alive = now.duration_since(t.created_at).unwrap_or_default() < ttl;
            if !alive {
                tracing::debug!(task = %id, "task expired");
                t.cancel.cancel();
            }
            alive
        });
        tasks
    }

    fn snapshot(&self, id: &str, t: &TaskRecord) -> TaskSnapshot {
        TaskSnapshot {
            id: id.to_string(),
            tool: t.tool.clone(),
            status: t.status,
            status_message: t.status_message.clone(),
            created_at: t.created_at,
            updated_at: t.updated_at,
            ttl: self.config.ttl,
            poll_interval: self.config.poll_interval,
            input_requests: t.pending.clone(),
            outcome: t.outcome.clone(),
        }
    }

    /// Records a change of `id`: its time, the waiters of [`TaskStore::wait`], its notifier.
    fn changed(&self, id: &str, t: &mut TaskRecord) {
        t.updated_at = SystemTime::now();
        if t.visible
            && let Some(n) = &t.notifier
        {
            let _ = n.send(self.snapshot(id, t));
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// The visible task `id` of `owner`.
    fn find<'a>(
        tasks: &'a mut HashMap<String, TaskRecord>,
        owner: &str,
        id: &str,
    ) -> Result<&'a mut TaskRecord, TaskError> {
        match tasks.get_mut(id) {
            Some(t) if t.visible && t.owner == owner => Ok(t),
            // The id is the caller's: quoted no longer than an id may be.
            _ => Err(TaskError::NotFound {
                id: quoted_name(id).into_owned(),
            }),
        }
    }

    /// Parks a question of the task's tool; the answer arrives on `reply`.
    fn ask(
        &self,
        id: &str,
        method: &str,
        params: Value,
        reply: oneshot::Sender<Value>,
    ) -> Option<String> {
        let mut tasks = self.lock();
        let t = tasks.get_mut(id)?;
        if t.status.is_terminal() {
            return None;
        }
        t.asked += 1;
        let key = format!("kberg.task.{}", t.asked);
        t.pending
            .insert(key.clone(), json!({"method": method, "params": params}));
        t.waiters.insert(key.clone(), reply);
        t.status = TaskStatus::InputRequired;
        self.changed(id, t);
        Some(key)
    }

    /// Withdraws a question nobody waits for any more.
    fn withdraw(&self, id: &str, key: &str) {
        let mut tasks = self.lock();
        if let Some(t) = tasks.get_mut(id) {
            t.waiters.remove(key);
            if t.pending.remove(key).is_some() {
                if t.pending.is_empty() && t.status == TaskStatus::InputRequired {
                    t.status = TaskStatus::Working;
                }
                self.changed(id, t);
            }
        }
    }

    /// Makes a task that ran inside its call visible, as it starts waiting.
    fn reveal(&self, id: &str) -> Option<TaskSnapshot> {
        let mut tasks = self.lock();
        let t = tasks.get_mut(id)?;
        t.visible = true;
        self.changed(id, t);
        Some(self.snapshot(id, t))
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Records how the task's call ended (unless the task is over already: cancelled).
    fn finish(&self, id: &str, result: Result<ToolOutput, GateError>) {
        let mut tasks = self.lock();
        let Some(t) = tasks.get_mut(id) else {
            return;
        };
        if t.status.is_terminal() {
            return;
        }
        let (status, outcome) = match result {
            Ok(out) => (TaskStatus::Completed, Some(TaskOutcome::Completed(out))),
            Err(GateError::Cancelled { .. }) => (TaskStatus::Cancelled, None),
            Err(e @ GateError::ToolPanicked { .. }) => (
                TaskStatus::Failed,
                Some(TaskOutcome::Failed {
                    code: INTERNAL_ERROR,
                    message: e.to_string(),
                }),
            ),
            Err(GateError::InputRequired { tool, .. }) => (
                TaskStatus::Failed,
                Some(TaskOutcome::Failed {
                    code: INTERNAL_ERROR,
                    message: format!(
                        "the tool `{tool}` asked the client on a channel that cannot wait for the answer"
                    ),
                }),
            ),
            Err(e) => (
                TaskStatus::Completed,
                Some(TaskOutcome::Completed(e.to_output())),
            ),
        };
        t.status = status;
        t.outcome = outcome;
        t.pending.clear();
        t.waiters.clear();
        self.changed(id, t);
        // The notifier ends once it has sent the terminal state.
        t.notifier = None;
    }
}

impl TaskStore {
    /// A store running its tasks' calls through `tools`.
    pub fn new(tools: ToolRegistry, config: TaskConfig) -> Self {
        Self {
            board: Arc::new(TaskBoard {
                tools,
                config,
                tasks: Mutex::new(HashMap::new()),
                version: watch::channel(0).0,
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &TaskConfig {
        &self.board.config
    }

    /// Starts `name` as a task for `caller`.
    ///
    /// The gate's checks (steps 1-4) run first: a refusal is [`Started::Finished`] with the
    /// error, and no task exists. A tool without task support is [`TaskError::NotSupported`];
    /// a principal at its limit, [`TaskError::TooManyTasks`]. Otherwise the task is recorded
    /// (a [`TaskStore::get`] right after this returns finds it) and the whole gate call runs in
    /// the background under the task's own cancellation token, with a task peer as its client
    /// channel. `opts.peer`, if any, is asked which capabilities the client has and receives
    /// the tool's notifications; with `notify_status` it also receives a
    /// `notifications/tasks` notification with the detailed task on every change.
    ///
    /// Must be called within a tokio runtime.
    pub async fn start(
        &self,
        caller: &Caller,
        name: &str,
        args: Value,
        opts: CallOptions,
        notify_status: bool,
    ) -> Result<Started, TaskError> {
        let board = &self.board;
        let spec = match board.tools.check(caller, name, &args) {
            Ok(spec) => spec,
            Err(e) => return Ok(Started::Finished(Err(e))),
        };
        if spec.task_support == TaskSupport::Forbidden {
            return Err(TaskError::NotSupported {
                tool: name.to_string(),
            });
        }
        let owner = caller.principal().id.clone();
        let id = new_task_id();
        let cancel = CancellationToken::new();
        let origin = opts.peer.clone();
        let notifier = match (&origin, notify_status) {
            (Some(peer), true) => Some(spawn_notifier(Arc::clone(peer))),
            _ => None,
        };
        let first = {
            let mut tasks = board.lock();
            let held = tasks.values().filter(|t| t.owner == owner).count();
            if held >= board.config.max_per_principal {
                return Err(TaskError::TooManyTasks {
                    tool: name.to_string(),
                    max: board.config.max_per_principal,
                });
            }
            let now = SystemTime::now();
            let record = TaskRecord {
                owner,
                tool: name.to_string(),
                status: TaskStatus::Working,
                status_message: None,
                created_at: now,
                updated_at: now,
                visible: !spec.task_after_input,
                pending: Map::new(),
                waiters: HashMap::new(),
                asked: 0,
                outcome: None,
                cancel: cancel.clone(),
                notifier,
            };
            let first = board.snapshot(&id, &record);
            tasks.insert(id.clone(), record);
            board.version.send_modify(|v| *v += 1);
            first
        };
        let supported = CLIENT_CAPABILITIES
            .iter()
            .filter(|c| origin.as_ref().is_some_and(|p| p.supports(c)))
            .map(|c| c.to_string())
            .collect();
        let task_peer = Arc::new(TaskPeer {
            board: Arc::downgrade(board),
            id: id.clone(),
            origin: origin.clone(),
            supported,
        });
        let mut run_opts = opts;
        run_opts.cancel = Some(cancel);
        let tools = board.tools.clone();
        let caller = caller.clone();
        let tool = name.to_string();
        if !spec.task_after_input {
            run_opts.peer = Some(task_peer);
            let weak = Arc::downgrade(board);
            tokio::spawn(async move {
                let result = tools.call(&caller, &tool, args, run_opts).await;
                if let Some(board) = weak.upgrade() {
                    board.finish(&id, result);
                }
            });
            return Ok(Started::Task(Box::new(first)));
        }
        // Runs inside the call until the tool first waits: then the task becomes visible and
        // the call answers with it, while the tool goes on in the background.
        let escalated = Arc::new(AtomicBool::new(false));
        run_opts.peer = Some(Arc::new(SwitchPeer {
            call: origin,
            task: task_peer,
            escalated: Arc::clone(&escalated),
        }));
        let (tx, rx) = oneshot::channel::<Started>();
        let weak = Arc::downgrade(board);
        let task_id = id.clone();
        tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut fut = std::pin::pin!(tools.call(&caller, &tool, args, run_opts));
            let result = std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(r),
                Poll::Pending => {
                    if let Some(tx) = tx.take() {
                        escalated.store(true, Ordering::SeqCst);
                        let first = weak.upgrade().and_then(|b| b.reveal(&task_id));
                        match first {
                            Some(s) => {
                                let _ = tx.send(Started::Task(Box::new(s)));
                            }
                            // The task expired already; the call answers as cancelled.
                            None => {
                                let _ = tx.send(Started::Finished(Err(GateError::Cancelled {
                                    tool: tool.clone(),
                                })));
                            }
                        }
                    }
                    Poll::Pending
                }
            })
            .await;
            let Some(board) = weak.upgrade() else {
                return;
            };
            match tx.take() {
                // Finished before it ever waited: no task, the call answers with the result.
                Some(tx) => {
                    board.remove(&task_id);
                    let _ = tx.send(Started::Finished(result));
                }
                None => board.finish(&task_id, result),
            }
        });
        Ok(rx.await.unwrap_or_else(|_| {
            Started::Finished(Err(GateError::ToolPanicked {
                tool: name.to_string(),
            }))
        }))
    }

    /// The task `id` of the principal `owner`.
    pub fn get(&self, owner: &str, id: &str) -> Result<TaskSnapshot, TaskError> {
        let mut tasks = self.board.lock();
        let t = TaskBoard::find(&mut tasks, owner, id)?;
        Ok(self.board.snapshot(id, t))
    }

    /// The tasks of the principal `owner`, oldest first.
    pub fn list(&self, owner: &str) -> Vec<TaskSnapshot> {
        let tasks = self.board.lock();
        let mut v: Vec<TaskSnapshot> = tasks
            .iter()
            .filter(|(_, t)| t.visible && t.owner == owner)
            .map(|(id, t)| self.board.snapshot(id, t))
            .collect();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        v
    }

    /// Delivers answers to the task's questions (keys of its `inputRequests`). Answers to keys
    /// the task is not waiting for are ignored; the task goes back to `working` once nothing
    /// is pending.
    pub fn answer(
        &self,
        owner: &str,
        id: &str,
        responses: impl IntoIterator<Item = (String, Value)>,
    ) -> Result<(), TaskError> {
        let mut tasks = self.board.lock();
        let t = TaskBoard::find(&mut tasks, owner, id)?;
        let mut any = false;
        for (key, value) in responses {
            if let Some(waiter) = t.waiters.remove(&key) {
                t.pending.remove(&key);
                let _ = waiter.send(value);
                any = true;
            }
        }
        if any {
            if t.pending.is_empty() && t.status == TaskStatus::InputRequired {
                t.status = TaskStatus::Working;
            }
            self.board.changed(id, t);
        }
        Ok(())
    }

    /// Cancels the task: it is `cancelled` at once and its tool's cancellation token fires.
    /// Cancelling a finished task changes nothing and is not an error.
    pub fn cancel(&self, owner: &str, id: &str) -> Result<(), TaskError> {
        let mut tasks = self.board.lock();
        let t = TaskBoard::find(&mut tasks, owner, id)?;
        if t.status.is_terminal() {
            return Ok(());
        }
        t.cancel.cancel();
        t.status = TaskStatus::Cancelled;
        t.pending.clear();
        t.waiters.clear();
        self.board.changed(id, t);
        t.notifier = None;
        Ok(())
    }

    /// Waits until the task is over (or, if it expires meanwhile, answers not found).
    ///
    /// Must be called within a tokio runtime with its timer enabled (`enable_time`, or
    /// `enable_all` as `#[tokio::main]` builds it): the waiter wakes at the task's expiry.
    pub async fn wait(&self, owner: &str, id: &str) -> Result<TaskSnapshot, TaskError> {
        self.wait_until(owner, id, |s| s.status.is_terminal()).await
    }

    /// Waits until the task's status is `status` or terminal (or, if it expires meanwhile,
    /// answers not found). Needs a tokio timer, as [`wait`](Self::wait) does.
    pub async fn wait_for(
        &self,
        owner: &str,
        id: &str,
        status: TaskStatus,
    ) -> Result<TaskSnapshot, TaskError> {
        self.wait_until(owner, id, |s| s.status == status || s.status.is_terminal())
            .await
    }

    /// Waits until the task's snapshot is `done`, or the task is gone.
    ///
    /// Expired tasks are swept on access only, and expiry is no change of its own: a waiter
    /// woken by changes alone would wait for ever on a task that expires while nothing else
    /// happens (a tool that never ends). So it also wakes when the task's time is up.
    async fn wait_until(
        &self,
        owner: &str,
        id: &str,
        done: impl Fn(&TaskSnapshot) -> bool,
    ) -> Result<TaskSnapshot, TaskError> {
        let mut changes = self.board.version.subscribe();
        loop {
            let s = self.get(owner, id)?;
            if done(&s) {
                return Ok(s);
            }
            // `None` past the clock's range: the task never expires.
            let expiry = s.created_at.checked_add(self.board.config.ttl);
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return self.get(owner, id);
                    }
                }
                () = until(expiry) => {}
            }
        }
    }
}

/// Sleeps until `at` by the system clock (the clock of a task's expiry), for ever if `None`.
async fn until(at: Option<SystemTime>) {
    match at {
        Some(at) => {
            let left = at
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            tokio::time::sleep(left).await;
        }
        None => std::future::pending().await,
    }
}

/// 128 random bits, hex.
fn new_task_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        // No entropy source: fall back on the clock and a counter (still unique per process).
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes[..8].copy_from_slice(&(t as u64).to_le_bytes());
        bytes[8..].copy_from_slice(&n.to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
