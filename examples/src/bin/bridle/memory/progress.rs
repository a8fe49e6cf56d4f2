//! What `bridle memory index|refresh` shows while it works, on stderr.
//!
//! On a terminal an `indicatif` bar redraws one line (the embedding step, which takes nearly all
//! of the time, counts chunks); in a pipe or a log file, where redrawing escapes would be noise,
//! the library's [`LineProgress`] writes one plain line per step instead. The choice is made once,
//! from whether stderr is a terminal.

use std::io::IsTerminal;

use async_trait::async_trait;
use bridle_memory::{LineProgress, Progress, ProgressEvent};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The bar's layout once the number of chunks is known.
const BAR_TEMPLATE: &str = "{spinner} [{bar:30}] {pos}/{len} {msg} ({elapsed})";

/// Progress of indexing as the command line shows it.
pub(crate) enum IndexProgress {
    /// stderr is a terminal.
    Bar(ProgressBar),
    /// stderr is a pipe or a file.
    Lines(LineProgress<std::io::Stderr>),
}

impl IndexProgress {
    /// A bar if stderr is a terminal, plain lines otherwise.
    pub(crate) fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            Self::bar(ProgressDrawTarget::stderr())
        } else {
            Self::Lines(LineProgress::new(std::io::stderr()))
        }
    }

    fn bar(target: ProgressDrawTarget) -> Self {
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(ProgressStyle::default_spinner());
        Self::Bar(bar)
    }

    /// The work ended: the bar stays on screen with its last message (and the error when it
    /// failed), so the report printed after it reads as its conclusion.
    pub(crate) fn finish(&self, failure: Option<&str>) {
        if let Self::Bar(bar) = self {
            match failure {
                None => bar.finish(),
                Some(why) => bar.abandon_with_message(format!("failed: {why}")),
            }
        }
    }
}

#[async_trait]
impl Progress for IndexProgress {
    async fn report(&self, event: ProgressEvent) {
        match self {
            Self::Lines(lines) => lines.report(event).await,
            Self::Bar(bar) => {
                if let (done, Some(total)) = event.fraction() {
                    if bar.length().is_none() {
                        // A fixed template cannot fail to parse; keep the spinner if it ever does.
                        if let Ok(style) = ProgressStyle::with_template(BAR_TEMPLATE) {
                            bar.set_style(style.progress_chars("=> "));
                        }
                    }
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                }
                bar.set_message(event.message());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_bar_follows_the_embedding_step() {
        let progress = IndexProgress::bar(ProgressDrawTarget::hidden());
        progress
            .report(ProgressEvent::Fetching {
                source: "repo".into(),
            })
            .await;
        let IndexProgress::Bar(bar) = &progress else {
            unreachable!("built as a bar")
        };
        assert_eq!(bar.length(), None);
        assert_eq!(bar.message(), "fetching repo");
        progress
            .report(ProgressEvent::Chunked {
                files: 3,
                chunks: 96,
            })
            .await;
        progress
            .report(ProgressEvent::Embedded {
                done: 48,
                total: 96,
            })
            .await;
        assert_eq!((bar.position(), bar.length()), (48, Some(96)));
        assert_eq!(bar.message(), "embedded 48/96 chunks");
        progress.report(ProgressEvent::Storing { chunks: 96 }).await;
        progress.finish(None);
        assert!(bar.is_finished());
        assert_eq!(bar.position(), 96);
    }
}
