//! Waiting for a condition a test cannot be signalled about: poll it until it holds, and fail
//! after a generous deadline. The condition is what is tested, never the time it took; the
//! deadline only turns a hang into a failure with a message.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a test waits for anything that should happen (never a timing assertion).
pub const WAIT: Duration = Duration::from_secs(60);

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(10);

/// Polls `condition` on this thread until it holds; panics naming `what` after [`WAIT`].
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(POLL);
    }
}

/// Polls the async `condition` until it yields `Some`, and returns that value; panics naming
/// `what` after [`WAIT`]. The runtime's clock is used, so a paused test clock advances.
pub async fn eventually_async<T, F, Fut>(what: &str, mut condition: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = condition().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls the async `probe` until it yields `Ok`, and returns that value; panics naming `what`
/// and the last `Err` after [`WAIT`]. For a wait whose failure is only understood with what
/// was seen instead (the list as it stood, the last reply): the probe returns it as its `Err`.
pub async fn eventually_async_ok<T, E, F, Fut>(what: &str, mut probe: F) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(seen) => assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}: {seen}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The message of the panic that ended `task`.
    async fn panic_text<T: std::fmt::Debug>(task: tokio::task::JoinHandle<T>) -> String {
        let panic = task.await.unwrap_err().into_panic();
        panic.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn returns_once_the_condition_holds() {
        let n = AtomicUsize::new(0);
        eventually("three polls", || n.fetch_add(1, Ordering::SeqCst) >= 2);
        assert_eq!(n.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn async_form_returns_the_value_and_fails_with_the_name() {
        let mut n = 0;
        let v = eventually_async("a value", || {
            n += 1;
            let v = (n == 3).then_some(n);
            async move { v }
        })
        .await;
        assert_eq!(v, 3);
        let text = panic_text(tokio::spawn(eventually_async("the impossible", || async {
            None::<()>
        })))
        .await;
        assert!(text.contains("the impossible"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn ok_form_returns_the_value_and_fails_with_what_it_last_saw() {
        let mut n = 0;
        let v = eventually_async_ok("a value", || {
            n += 1;
            let v = if n == 3 { Ok(n) } else { Err(n) };
            async move { v }
        })
        .await;
        assert_eq!(v, 3);
        let text = panic_text(tokio::spawn(eventually_async_ok(
            "the impossible",
            || async { Err::<(), _>("the last sight") },
        )))
        .await;
        assert_eq!(
            text, "timed out waiting for the impossible: the last sight",
            "{text}"
        );
    }
}
