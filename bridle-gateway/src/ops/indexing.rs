//! Indexing progress as metrics: how far the re-index of each pattern-example repository has
//! come, while it runs and after it ended.
//!
//! An index run through the gateway's `refresh_pattern_example` tool reports each step to the
//! memory tools' [`IndexListener`]; [`IndexingProgress`] sits in front of the gateway's own
//! listener (the `last_indexed` write-back) and keeps four gauges per repository, labelled by
//! its reference tag (a configured name, never a path or URL):
//!
//! - `bridle_indexing_active`: 1 while a run is at work, else 0;
//! - `bridle_indexing_files`: files read and chunked by the last run;
//! - `bridle_indexing_chunks_done` and `bridle_indexing_chunks_planned`: chunks embedded so
//!   far, out of the chunks the run made (equal once it has stored them).
//!
//! `bridle memory index` on the command line runs in its own process and shows its progress
//! there; these gauges are the gateway's runs. A run that fails before its first step (a tag
//! memory does not know: the tool's caller names it) adds no series.

use std::sync::Arc;

use async_trait::async_trait;
use bridle_memory::tools::IndexListener;
use bridle_memory::{IndexReport, MemoryError, ProgressEvent};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::metrics::RepoLabel;

/// The indexing gauges, per repository.
#[derive(Debug, Clone, Default)]
pub(crate) struct IndexingGauges {
    active: Family<RepoLabel, Gauge>,
    files: Family<RepoLabel, Gauge>,
    chunks_done: Family<RepoLabel, Gauge>,
    chunks_planned: Family<RepoLabel, Gauge>,
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl IndexingGauges {
    /// Registers the gauges in `registry` (the gateway's, prefixed `bridle`).
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let g = Self::default();
        registry.register(
            "indexing_active",
            "Whether a re-index of the pattern-example repository (by reference tag) is at work (1) or not (0).",
            g.active.clone(),
        );
        registry.register(
            "indexing_files",
            "Files read and chunked by the repository's last re-index.",
            g.files.clone(),
        );
        registry.register(
            "indexing_chunks_done",
            "Chunks of the repository's current or last re-index embedded so far.",
            g.chunks_done.clone(),
        );
        registry.register(
            "indexing_chunks_planned",
            "Chunks the repository's current or last re-index made, all of which it embeds.",
            g.chunks_planned.clone(),
        );
        g
    }

    fn label(repo: &str) -> RepoLabel {
        RepoLabel {
            repo: repo.to_string(),
        }
    }

    /// One step of the run on `repo`.
    pub(crate) fn step(&self, repo: &str, event: &ProgressEvent) {
        let l = Self::label(repo);
        match event {
            ProgressEvent::Fetching { .. } => {
                self.active.get_or_create(&l).set(1);
                self.chunks_done.get_or_create(&l).set(0);
            }
            ProgressEvent::Chunked { files, chunks } => {
                self.files.get_or_create(&l).set(count(*files));
                self.chunks_planned.get_or_create(&l).set(count(*chunks));
            }
            ProgressEvent::Embedded { done, total } => {
                self.chunks_done.get_or_create(&l).set(count(*done));
                self.chunks_planned.get_or_create(&l).set(count(*total));
            }
            _ => {}
        }
    }

    /// The run on `repo` ended: with its report, or without (it failed). A failed run that
    /// never reported a step (an unknown tag, which an agent may make up in any number) leaves
    /// no series: only a repository that was worked on has gauges.
    pub(crate) fn ended(&self, repo: &str, report: Option<&IndexReport>) {
        let l = Self::label(repo);
        match report {
            Some(r) => {
                self.files.get_or_create(&l).set(count(r.files));
                self.chunks_done.get_or_create(&l).set(count(r.chunks));
                self.chunks_planned.get_or_create(&l).set(count(r.chunks));
                self.active.get_or_create(&l).set(0);
            }
            None => {
                if let Some(active) = self.active.get(&l) {
                    active.set(0);
                }
            }
        }
    }
}

/// Keeps the indexing gauges, then tells `next` (the gateway's write-back).
pub struct IndexingProgress {
    metrics: Arc<super::GatewayMetrics>,
    next: Arc<dyn IndexListener>,
}

impl IndexingProgress {
    /// Counts into `metrics`, then passes every call on to `next`.
    pub fn new(metrics: Arc<super::GatewayMetrics>, next: Arc<dyn IndexListener>) -> Self {
        Self { metrics, next }
    }
}

#[async_trait]
impl IndexListener for IndexingProgress {
    async fn indexed(&self, report: &IndexReport) {
        self.metrics
            .indexing
            .ended(&report.reference_tag, Some(report));
        self.next.indexed(report).await;
    }

    async fn progress(&self, reference_tag: &str, event: &ProgressEvent) {
        self.metrics.indexing.step(reference_tag, event);
        self.next.progress(reference_tag, event).await;
    }

    async fn failed(&self, reference_tag: &str, error: &MemoryError) {
        self.metrics.indexing.ended(reference_tag, None);
        self.next.failed(reference_tag, error).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_run_shows_its_progress_and_its_end() {
        let m = Arc::new(super::super::GatewayMetrics::new());
        m.indexing.step(
            "svc",
            &ProgressEvent::Fetching {
                source: "/src".into(),
            },
        );
        m.indexing.step(
            "svc",
            &ProgressEvent::Chunked {
                files: 3,
                chunks: 40,
            },
        );
        m.indexing.step(
            "svc",
            &ProgressEvent::Embedded {
                done: 16,
                total: 40,
            },
        );
        let page = m.render(async { Default::default() }).await.unwrap();
        for line in [
            r#"bridle_indexing_active{repo="svc"} 1"#,
            r#"bridle_indexing_files{repo="svc"} 3"#,
            r#"bridle_indexing_chunks_done{repo="svc"} 16"#,
            r#"bridle_indexing_chunks_planned{repo="svc"} 40"#,
        ] {
            assert!(page.contains(line), "{line} in\n{page}");
        }
        m.indexing.ended("svc", None);
        let page = m.render(async { Default::default() }).await.unwrap();
        assert!(
            page.contains(r#"bridle_indexing_active{repo="svc"} 0"#),
            "{page}"
        );
    }
}
