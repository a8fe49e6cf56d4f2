//! [`SecretDesk`]: how async code reaches a blocking [`SecretSource`].
//!
//! The vault is a database whose every write is committed with `synchronous = FULL`, so a use
//! recorded inline would hold a tokio worker for a disk flush, and a version lookup would wait
//! on the connection's lock while another call's record commits. On a two-worker runtime two
//! such calls stall every other request. The desk runs lookups on tokio's blocking pool, and
//! hands uses to one recording thread that writes them in batches: whatever arrived while the
//! previous batch was being committed goes into the next transaction, so under load many
//! forwarded calls share one commit, and an idle gateway commits each use at once. A source
//! that does not block ([`SecretSource::blocks`], a folder of files) is called inline.

use std::sync::{Arc, Mutex};

use std::sync::mpsc;

use tokio::sync::oneshot;

use super::credential::{Credential, SecretError, SecretSource, SecretUse};

/// The most uses one transaction records.
const MAX_BATCH: usize = 256;

/// A [`SecretSource`] for async callers: cheap to clone, every clone shares one recording
/// thread (started on the first use that needs it; it ends when the last clone is dropped).
#[derive(Clone)]
pub(crate) struct SecretDesk {
    source: Arc<dyn SecretSource>,
    uses: Arc<Mutex<Option<mpsc::Sender<UseJob>>>>,
}

impl std::fmt::Debug for SecretDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretDesk").finish_non_exhaustive()
    }
}

/// One use waiting to be recorded, and who waits for the outcome.
struct UseJob {
    name: String,
    version: u64,
    upstream: String,
    agent: String,
    request: String,
    done: oneshot::Sender<Result<(), SecretError>>,
}

impl UseJob {
    fn as_use(&self) -> SecretUse<'_> {
        SecretUse {
            name: &self.name,
            version: self.version,
            upstream: &self.upstream,
            agent: &self.agent,
            request: &self.request,
        }
    }
}

impl SecretDesk {
    /// A desk in front of `source`.
    pub(crate) fn new(source: Arc<dyn SecretSource>) -> Self {
        Self {
            source,
            uses: Arc::new(Mutex::new(None)),
        }
    }

    /// The active version of `name` (see [`SecretSource::version`]), looked up on the blocking
    /// pool.
    pub(crate) async fn version(&self, name: &str) -> Result<u64, SecretError> {
        self.blocking(name, |source, name| source.version(name))
            .await
    }

    /// The active value of `name` and its version (see [`SecretSource::current`]), read on the
    /// blocking pool.
    pub(crate) async fn current(&self, name: &str) -> Result<(Credential, u64), SecretError> {
        self.blocking(name, |source, name| source.current(name))
            .await
    }

    /// Records a use (see [`SecretSource::record_use`]) and answers once it is committed, in a
    /// batch with the other uses waiting at the same time. An error means it was not recorded,
    /// and the request must not be sent.
    pub(crate) async fn record_use(&self, used: &SecretUse<'_>) -> Result<(), SecretError> {
        if !self.source.blocks(used.name) {
            return self.source.record_use(used);
        }
        let (done, outcome) = oneshot::channel();
        let job = UseJob {
            name: used.name.to_owned(),
            version: used.version,
            upstream: used.upstream.to_owned(),
            agent: used.agent.to_owned(),
            request: used.request.to_owned(),
            done,
        };
        self.queue(job)?;
        outcome
            .await
            .unwrap_or_else(|_| Err(not_recorded(used.name)))
    }

    /// Puts `job` in the recording thread's queue, starting the thread if none runs.
    fn queue(&self, job: UseJob) -> Result<(), SecretError> {
        let mut uses = self
            .uses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let job = match uses.as_ref() {
            Some(queue) => match queue.send(job) {
                Ok(()) => return Ok(()),
                // The thread has gone (a batch panicked): start another below.
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let name = job.name.clone();
        let (queue, jobs) = mpsc::channel();
        let source = Arc::clone(&self.source);
        std::thread::Builder::new()
            .name("secret-uses".into())
            .spawn(move || record_batches(source.as_ref(), &jobs))
            .map_err(|e| SecretError::Unreadable {
                name: name.clone(),
                message: format!("the recording thread did not start: {e}"),
            })?;
        queue.send(job).map_err(|_| not_recorded(&name))?;
        *uses = Some(queue);
        Ok(())
    }

    async fn blocking<T: Send + 'static>(
        &self,
        name: &str,
        lookup: impl FnOnce(&dyn SecretSource, &str) -> Result<T, SecretError> + Send + 'static,
    ) -> Result<T, SecretError> {
        if !self.source.blocks(name) {
            return lookup(self.source.as_ref(), name);
        }
        let source = Arc::clone(&self.source);
        let owned = name.to_owned();
        tokio::task::spawn_blocking(move || lookup(source.as_ref(), &owned))
            .await
            .unwrap_or_else(|e| {
                Err(SecretError::Unreadable {
                    name: name.to_owned(),
                    message: format!("the lookup did not finish: {e}"),
                })
            })
    }
}

fn not_recorded(name: &str) -> SecretError {
    SecretError::Unreadable {
        name: name.to_owned(),
        message: "the use could not be recorded (the gateway is stopping)".to_owned(),
    }
}

/// The recording thread: waits for a use, takes every other use waiting (up to [`MAX_BATCH`]),
/// records them with one call of [`SecretSource::record_uses`], answers each, and goes again.
/// Ends when every desk has gone.
fn record_batches(source: &dyn SecretSource, jobs: &mpsc::Receiver<UseJob>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let outcomes = {
            let uses: Vec<SecretUse<'_>> = batch.iter().map(UseJob::as_use).collect();
            source.record_uses(&uses)
        };
        tracing::trace!(uses = batch.len(), "secret uses recorded in one batch");
        // A job left without an outcome is dropped, and its call told the use was not recorded.
        for (job, outcome) in batch.into_iter().zip(outcomes) {
            let _ = job.done.send(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Records batch sizes; holds the first batch until told to go on, so that the uses sent
    /// meanwhile queue up behind it. Refuses uses of `bad`.
    struct Counting {
        batches: Mutex<Vec<usize>>,
        entered: tokio::sync::Notify,
        gate: std::sync::Barrier,
        calls: AtomicUsize,
    }

    impl SecretSource for Counting {
        fn version(&self, _name: &str) -> Result<u64, SecretError> {
            Ok(7)
        }
        fn current(&self, _name: &str) -> Result<(Credential, u64), SecretError> {
            Ok((Credential::new("v"), 7))
        }
        fn record_use(&self, used: &SecretUse<'_>) -> Result<(), SecretError> {
            if used.name == "bad" {
                return Err(SecretError::Missing { name: "bad".into() });
            }
            Ok(())
        }
        fn record_uses(&self, uses: &[SecretUse<'_>]) -> Vec<Result<(), SecretError>> {
            self.batches.lock().unwrap().push(uses.len());
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                self.entered.notify_one();
                self.gate.wait();
            }
            uses.iter().map(|u| self.record_use(u)).collect()
        }
    }

    fn use_of(name: &str) -> SecretUse<'_> {
        SecretUse {
            name,
            version: 7,
            upstream: "up",
            agent: "claude",
            request: "tool",
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn uses_that_wait_share_the_next_batch_and_each_gets_its_own_outcome() {
        let source = Arc::new(Counting {
            batches: Mutex::new(Vec::new()),
            entered: tokio::sync::Notify::new(),
            gate: std::sync::Barrier::new(2),
            calls: AtomicUsize::new(0),
        });
        let desk = SecretDesk::new(Arc::clone(&source) as Arc<dyn SecretSource>);
        let first = {
            let desk = desk.clone();
            tokio::spawn(async move { desk.record_use(&use_of("a")).await })
        };
        source.entered.notified().await;
        // The first batch is being written: these queue up behind it (`queue` has put each in
        // the channel when it returns).
        let mut answers = Vec::new();
        for name in ["b", "bad", "c", "d"] {
            let (done, answer) = oneshot::channel();
            desk.queue(UseJob {
                name: name.to_string(),
                version: 7,
                upstream: "up".into(),
                agent: "claude".into(),
                request: "tool".into(),
                done,
            })
            .unwrap();
            answers.push(answer);
        }
        let release = Arc::clone(&source);
        tokio::task::spawn_blocking(move || {
            release.gate.wait();
        });
        assert!(first.await.unwrap().is_ok());
        let mut outcomes = Vec::new();
        for answer in answers {
            outcomes.push(answer.await.unwrap());
        }
        assert!(outcomes[0].is_ok());
        assert_eq!(
            outcomes[1],
            Err(SecretError::Missing { name: "bad".into() })
        );
        assert!(outcomes[2].is_ok() && outcomes[3].is_ok());
        assert_eq!(*source.batches.lock().unwrap(), vec![1, 4]);
    }

    #[test]
    fn a_desk_records_from_any_runtime_and_its_thread_ends_with_it() {
        /// Counts the uses it records (and blocks, as the vault does).
        struct Recording(AtomicUsize);
        impl SecretSource for Recording {
            fn version(&self, _name: &str) -> Result<u64, SecretError> {
                Ok(1)
            }
            fn current(&self, _name: &str) -> Result<(Credential, u64), SecretError> {
                Ok((Credential::new("v"), 1))
            }
            fn record_use(&self, _used: &SecretUse<'_>) -> Result<(), SecretError> {
                self.0.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        }
        let source = Arc::new(Recording(AtomicUsize::new(0)));
        let desk = SecretDesk::new(Arc::clone(&source) as Arc<dyn SecretSource>);
        for _ in 0..2 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime
                .block_on(desk.record_use(&use_of("a")))
                .expect("recorded on this runtime");
            drop(runtime);
        }
        assert_eq!(source.0.load(Ordering::SeqCst), 2);
        // The thread holds the source until the last desk goes.
        assert_eq!(Arc::strong_count(&source), 3);
        drop(desk);
        while Arc::strong_count(&source) > 1 {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_folder_is_read_and_recorded_inline_without_a_runtime_task() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tok"), "t1\n").unwrap();
        let desk = SecretDesk::new(Arc::new(super::super::FolderSecrets::new(dir.path())));
        // Polled once, with no runtime at all: no thread is started.
        let answered = futures::FutureExt::now_or_never(async {
            let (value, version) = desk.current("tok").await?;
            assert_eq!(desk.version("tok").await?, version);
            desk.record_use(&use_of("tok")).await?;
            Ok::<_, SecretError>(value)
        });
        let value = answered.expect("ready at once").unwrap();
        assert_eq!(value.expose(), "t1");
        assert!(desk.uses.lock().unwrap().is_none());
    }
}
