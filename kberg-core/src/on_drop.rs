//! [`SpawnOnDrop`]: work that must still happen when a future is dropped half-way. A leaf
//! module.

use std::future::Future;

/// Spawns its future on the current tokio runtime when dropped, unless disarmed first.
///
/// A tool call is cancelled by dropping its future, so a call that asked a peer for something
/// (a request to the client, an upstream's task) cannot tell the peer to stop in the code after
/// the `await`: that code never runs. Arm a guard with the "stop" message before waiting and
/// disarm it once the answer is in. A drop cannot wait, so the message goes on a task of its
/// own; outside a runtime (a process shutting down) it is not sent.
///
/// ```
/// use kberg_core::SpawnOnDrop;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (told, mut heard) = tokio::sync::oneshot::channel();
/// let guard = SpawnOnDrop::new(async move {
///     let _ = told.send("stop");
/// });
/// drop(guard); // the wait was abandoned: the peer is told
/// assert_eq!((&mut heard).await, Ok("stop"));
///
/// let (told, mut heard) = tokio::sync::oneshot::channel::<&str>();
/// let mut guard = SpawnOnDrop::new(async move {
///     let _ = told.send("stop");
/// });
/// guard.disarm(); // the answer came: nothing to stop
/// assert!(heard.await.is_err());
/// # }
/// ```
#[must_use = "a guard dropped at once spawns its future at once"]
pub struct SpawnOnDrop<F>
where
    F: Future<Output = ()> + Send + 'static,
{
    future: Option<F>,
}

impl<F> SpawnOnDrop<F>
where
    F: Future<Output = ()> + Send + 'static,
{
    /// A guard that spawns `future` when dropped. Nothing runs before that.
    pub fn new(future: F) -> Self {
        Self {
            future: Some(future),
        }
    }

    /// Drops the future unrun: the guard's drop does nothing.
    pub fn disarm(&mut self) {
        self.future = None;
    }
}

impl<F> Drop for SpawnOnDrop<F>
where
    F: Future<Output = ()> + Send + 'static,
{
    fn drop(&mut self) {
        if let Some(future) = self.future.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(future);
        }
    }
}

impl<F> std::fmt::Debug for SpawnOnDrop<F>
where
    F: Future<Output = ()> + Send + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnOnDrop")
            .field("armed", &self.future.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_a_runtime_the_future_is_dropped_unrun() {
        let (told, heard) = std::sync::mpsc::channel::<()>();
        drop(SpawnOnDrop::new(async move {
            let _ = told.send(());
        }));
        // The future (and the sender it owned) is gone without having sent.
        assert!(heard.recv().is_err());
    }

    #[tokio::test]
    async fn a_future_dropped_half_way_still_gets_its_message_out() {
        let (told, heard) = tokio::sync::oneshot::channel();
        let (started, wait) = tokio::sync::oneshot::channel::<()>();
        let call = tokio::spawn(async move {
            let _guard = SpawnOnDrop::new(async move {
                let _ = told.send("cancelled");
            });
            let _ = started.send(());
            std::future::pending::<()>().await;
        });
        wait.await.expect("the call started");
        call.abort();
        assert_eq!(heard.await, Ok("cancelled"));
    }
}
