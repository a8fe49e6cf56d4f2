//! [`UpstreamThread`]: a thread with a current-thread tokio runtime that upstream clients run
//! on, shared by as many aggregators as its owner hands it to.

use std::sync::Arc;

use super::config::ConfigError;

/// How long an upstream thread waits for blocking work (a name lookup) when it ends.
const WIND_UP: std::time::Duration = std::time::Duration::from_secs(5);

/// A thread with a current-thread tokio runtime for the upstream clients of one or more
/// aggregators (see [`UpstreamRuntime::Thread`](super::UpstreamRuntime::Thread)).
///
/// Clones share the thread. It runs until every clone is dropped and every supervisor spawned
/// on it has stopped (each aggregator's supervisors stop when it is shut down or dropped), then
/// drops what is left on it (a closed session's loop, a child's stderr drain), waiting at most
/// five seconds for blocking work. It logs to the `tracing` subscriber its starter logs to,
/// also when that is only the starter's thread's default.
///
/// An app that runs many aggregators (a gateway with one connection per upstream and agent)
/// starts one and hands it to all of them, so the number of threads does not grow with the
/// number of connections:
///
/// ```
/// use kberg_server::aggregate::{AggregatorConfig, UpstreamRuntime, UpstreamThread};
///
/// let thread = UpstreamThread::start("app-upstreams").expect("a thread");
/// let first = AggregatorConfig::new().runtime(UpstreamRuntime::Thread(thread.clone()));
/// let second = AggregatorConfig::new().runtime(UpstreamRuntime::Thread(thread));
/// # let _ = (first, second);
/// ```
#[derive(Clone)]
pub struct UpstreamThread {
    running: Arc<RunningThread>,
}

/// The started thread: its name, its runtime, and what keeps it running.
struct RunningThread {
    name: String,
    handle: tokio::runtime::Handle,
    /// Each clone of this sender keeps the thread running: one here, one per supervisor.
    alive: tokio::sync::mpsc::Sender<()>,
}

impl std::fmt::Debug for UpstreamThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamThread")
            .field("name", &self.running.name)
            .finish_non_exhaustive()
    }
}

/// Two handles are equal when they share one thread.
impl PartialEq for UpstreamThread {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.running, &other.running)
    }
}

impl Eq for UpstreamThread {}

impl UpstreamThread {
    /// Starts a thread named `name` with its runtime. Fails with
    /// [`ConfigError::RuntimeUnavailable`] when the runtime or the thread cannot be created
    /// (the process is out of threads or memory).
    pub fn start(name: impl Into<String>) -> Result<Self, ConfigError> {
        let name = name.into();
        let unavailable = |e: std::io::Error| ConfigError::RuntimeUnavailable {
            reason: e.to_string(),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(unavailable)?;
        let handle = rt.handle().clone();
        let (alive, mut ended) = tokio::sync::mpsc::channel::<()>(1);
        let dispatch = tracing::dispatcher::get_default(tracing::Dispatch::clone);
        std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let _logs = tracing::dispatcher::set_default(&dispatch);
                // Nothing is ever sent: `recv` returns `None` once every sender is gone.
                rt.block_on(async move { while ended.recv().await.is_some() {} });
                rt.shutdown_timeout(WIND_UP);
            })
            .map_err(unavailable)?;
        Ok(Self {
            running: Arc::new(RunningThread {
                name,
                handle,
                alive,
            }),
        })
    }

    /// The thread's name.
    pub fn name(&self) -> &str {
        &self.running.name
    }

    /// Spawns `task` on the thread; the thread keeps running at least until it ends.
    pub(crate) fn spawn_kept<F>(&self, task: F) -> tokio::task::JoinHandle<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let alive = self.running.alive.clone();
        self.running.handle.spawn(async move {
            let _alive = alive;
            task.await;
        })
    }
}
