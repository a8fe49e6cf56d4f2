//! Progress of long work (indexing a repository), and the listeners that show it.
//!
//! [`ProgressEvent`]s carry a `fraction()` and a `message()`, which is all a progress bar needs:
//! the MCP tool turns them into `notifications/progress` (with `mcp_progress()`, whose figure
//! grows with every report as MCP requires), [`LineProgress`] writes plain lines for
//! a pipe or a log, and a command line draws a bar on a terminal with a bar library (the `bridle`
//! binary uses indicatif's `ProgressBar::set_position` / `set_message`) by implementing
//! [`Progress`] in a few lines. The library itself draws no terminal escapes.

use async_trait::async_trait;

/// A step of long indexing work.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ProgressEvent {
    /// Cloning or opening the source.
    Fetching {
        /// The URL or path.
        source: String,
    },
    /// Files were read and chunked.
    Chunked {
        /// Files kept.
        files: usize,
        /// Chunks made.
        chunks: usize,
    },
    /// Chunks embedded so far.
    Embedded {
        /// Done.
        done: usize,
        /// Total.
        total: usize,
    },
    /// Writing the new chunks in place of the old ones.
    Storing {
        /// How many.
        chunks: usize,
    },
}

impl ProgressEvent {
    /// `(progress, total)` for a progress bar: the embedding step dominates, so it counts
    /// chunks; the other steps are markers.
    pub fn fraction(&self) -> (f64, Option<f64>) {
        match self {
            ProgressEvent::Fetching { .. } => (0.0, None),
            ProgressEvent::Chunked { chunks, .. } => (0.0, Some(*chunks as f64)),
            ProgressEvent::Embedded { done, total } => (*done as f64, Some(*total as f64)),
            ProgressEvent::Storing { chunks } => (*chunks as f64, Some(*chunks as f64)),
        }
    }

    /// `(progress, total)` for an MCP `notifications/progress`, whose `progress` must grow with
    /// each report of a call: the steps around the chunks count one each, so a refresh's
    /// reports run fetching 0, chunked 1, embedded 1 + done, storing chunks + 2, out of
    /// chunks + 2. ([`ProgressEvent::fraction`] counts chunks only, for a bar, and repeats a
    /// figure from one step to the next.)
    pub fn mcp_progress(&self) -> (f64, Option<f64>) {
        match self {
            ProgressEvent::Fetching { .. } => (0.0, None),
            ProgressEvent::Chunked { chunks, .. } => (1.0, Some(*chunks as f64 + 2.0)),
            ProgressEvent::Embedded { done, total } => {
                (*done as f64 + 1.0, Some(*total as f64 + 2.0))
            }
            ProgressEvent::Storing { chunks } => (*chunks as f64 + 2.0, Some(*chunks as f64 + 2.0)),
        }
    }

    /// A one-line description.
    pub fn message(&self) -> String {
        match self {
            ProgressEvent::Fetching { source } => format!("fetching {source}"),
            ProgressEvent::Chunked { files, chunks } => {
                format!("{chunks} chunks from {files} files")
            }
            ProgressEvent::Embedded { done, total } => format!("embedded {done}/{total} chunks"),
            ProgressEvent::Storing { chunks } => format!("storing {chunks} chunks"),
        }
    }
}

/// Receives progress of long work.
#[async_trait]
pub trait Progress: Send + Sync {
    /// Called at each step; must return quickly.
    async fn report(&self, event: ProgressEvent);
}

/// Progress that goes nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

#[async_trait]
impl Progress for NoProgress {
    async fn report(&self, _event: ProgressEvent) {}
}

/// Plain progress lines for a pipe or a log file: one line per step, no escape codes, and
/// embedding steps only at each tenth of the work (and the last), so a log stays short:
/// `embedded 48/96 chunks`.
pub struct LineProgress<W: std::io::Write + Send> {
    out: std::sync::Mutex<W>,
    /// The last tenth written for the embedding step.
    tenth: std::sync::atomic::AtomicUsize,
}

impl<W: std::io::Write + Send> LineProgress<W> {
    /// Lines written to `out`.
    pub fn new(out: W) -> Self {
        Self {
            out: std::sync::Mutex::new(out),
            tenth: std::sync::atomic::AtomicUsize::new(usize::MAX),
        }
    }

    /// Gives the writer back.
    pub fn into_inner(self) -> W {
        self.out.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl<W: std::io::Write + Send> Progress for LineProgress<W> {
    async fn report(&self, event: ProgressEvent) {
        if let ProgressEvent::Embedded { done, total } = &event {
            let tenth = if *total == 0 { 10 } else { done * 10 / total };
            let last = self.tenth.swap(tenth, std::sync::atomic::Ordering::Relaxed);
            if tenth == last && done != total {
                return;
            }
        }
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "{}", event.message());
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refresh's events give MCP figures that grow with every report, ending at the total.
    #[test]
    fn mcp_figures_grow_with_every_step() {
        let mut events = vec![
            ProgressEvent::Fetching { source: "r".into() },
            ProgressEvent::Chunked {
                files: 3,
                chunks: 4,
            },
        ];
        events.extend((1..=4).map(|done| ProgressEvent::Embedded { done, total: 4 }));
        events.push(ProgressEvent::Storing { chunks: 4 });
        let figures: Vec<(f64, Option<f64>)> =
            events.iter().map(ProgressEvent::mcp_progress).collect();
        assert!(figures.windows(2).all(|w| w[1].0 > w[0].0), "{figures:?}");
        assert_eq!(figures.last(), Some(&(6.0, Some(6.0))));
        assert!(figures[1..].iter().all(|(_, total)| *total == Some(6.0)));
    }

    #[tokio::test]
    async fn lines_have_no_escapes_and_thin_out_embedding_steps() {
        let lines = LineProgress::new(Vec::new());
        lines
            .report(ProgressEvent::Fetching { source: "r".into() })
            .await;
        for done in 1..=100 {
            lines
                .report(ProgressEvent::Embedded { done, total: 100 })
                .await;
        }
        lines.report(ProgressEvent::Storing { chunks: 100 }).await;
        let text = String::from_utf8(lines.into_inner()).unwrap_or_default();
        assert!(!text.contains('\x1b') && !text.contains('\r'));
        let embedded = text.lines().filter(|l| l.starts_with("embedded")).count();
        assert_eq!(embedded, 11, "{text}");
        assert!(text.contains("embedded 100/100 chunks\nstoring 100 chunks\n"));
    }
}
