//! A `tracing` writer that keeps every log line in memory, so a test can read what was logged:
//! prove that a secret (a canary value, a token) never reached a log line, or wait for a line
//! that says something happened.
//!
//! ```
//! use kberg_testkit::log::LogBuffer;
//!
//! let logs = LogBuffer::default();
//! tracing::subscriber::with_default(logs.subscriber(tracing::Level::INFO), || {
//!     tracing::info!("vault opened");
//!     tracing::debug!("not kept at INFO");
//! });
//! assert!(logs.text().contains("vault opened"));
//! assert!(!logs.text().contains("not kept"));
//! ```

use std::sync::{Arc, Mutex};

use crate::eventually::WAIT;

/// A `MakeWriter` (and `io::Write`) that appends every log line to one shared buffer; clones
/// share it.
#[derive(Clone, Default)]
pub struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// A plain-text `fmt` subscriber (no colours) that writes every event up to `max` here.
    pub fn subscriber(&self, max: tracing::Level) -> impl tracing::Subscriber + Send + Sync {
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(max)
            .with_writer(self.clone())
            .finish()
    }

    /// The buffer of every log line of this test binary, from every thread and every test in
    /// it: on the first call, a [`LogBuffer::subscriber`] up to `max` becomes the process's
    /// global default (a thread-local one would miss what a library logs on its own threads).
    /// Later calls return the same buffer whatever `max` they pass, so a binary uses one level.
    ///
    /// # Panics
    ///
    /// If something else in the binary already set the global default subscriber.
    pub fn global(max: tracing::Level) -> &'static LogBuffer {
        static GLOBAL: std::sync::OnceLock<LogBuffer> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(|| {
            let logs = LogBuffer::default();
            tracing::subscriber::set_global_default(logs.subscriber(max))
                .expect("one global subscriber per test binary");
            logs
        })
    }

    /// Makes this buffer, behind `filter` (for example a binary's own `Targets`), the
    /// process's global log for the rest of the test binary, as [`LogBuffer::global`] does
    /// with a plain level.
    ///
    /// # Panics
    ///
    /// If the binary already set the global default subscriber.
    pub fn install_global<F>(&self, filter: F)
    where
        F: tracing_subscriber::layer::Filter<tracing_subscriber::Registry> + Send + Sync + 'static,
    {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::{Layer as _, fmt};
        let layer = fmt::layer()
            .with_ansi(false)
            .with_writer(self.clone())
            .with_filter(filter);
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .expect("one global subscriber per test binary");
    }

    /// Waits until `needle` was logged and returns the whole log then; panics with the log so
    /// far after [`WAIT`].
    pub async fn wait_for(&self, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let text = self.text();
            if text.contains(needle) {
                return text;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "`{needle}` was never logged; log so far:\n{text}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
