//! The vendor-guidance feed inside the gateway: `bridle_rules::vendor::VendorFeed` run on its
//! interval while the gateway serves and on demand (admin API, command line), with every
//! proposal it queues recorded in the audit log as a `vendor` entry (the feed's profile and the
//! source URL). The feed itself (fetching, extraction, the ledger) lives in bridle-rules.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bridle_rules::vendor::{FeedError, FeedRun, VendorCandidate, VendorFeed};

use crate::audit::{Entry, Kind};
use crate::context::GatewayContext;

/// The audit entry of one queued vendor suggestion: source `vendor` (the feed's profile and the
/// page), kind `proposal`, the project and the proposal.
pub fn seed_entry(c: &VendorCandidate) -> Entry {
    Entry::vendor(
        format!("vendor:{}", c.agent),
        Some(c.source_url.clone()),
        Kind::Proposal,
    )
    .project(&c.project)
    .subject(format!("proposal #{}", c.proposal_id))
}

/// One project's outcome of a run: what each source gave, or why the project could not run.
pub type ProjectRun = (String, Result<FeedRun, FeedError>);

/// Runs `feed` once into each of its projects and records each queued proposal as a `vendor`
/// audit entry. An entry that cannot be written is logged (the proposal stays queued: the
/// review queue is the source of truth for it, and its provenance is stored with it).
pub async fn run_feed(
    ctx: &GatewayContext,
    feed: &VendorFeed,
) -> Result<Vec<ProjectRun>, FeedError> {
    let runs = feed.run_configured(&ctx.store).await?;
    for (_, run) in &runs {
        let Ok(run) = run else { continue };
        for source in &run.sources {
            let Ok(report) = &source.outcome else {
                continue;
            };
            for c in &report.queued {
                if let Err(e) = ctx.record_change(seed_entry(c)) {
                    tracing::warn!(proposal = c.proposal_id, error = %e, "a vendor proposal's audit entry was not written");
                }
            }
        }
    }
    Ok(runs)
}

/// Runs the feed every `interval_minutes` (the first run at once) until `shutdown` completes;
/// returns at once when it has no interval. Each run's outcome is logged per project.
pub async fn run_every(
    ctx: Arc<GatewayContext>,
    feed: Arc<VendorFeed>,
    shutdown: impl Future<Output = ()>,
) {
    let Some(minutes) = feed.config().interval_minutes.filter(|m| *m > 0) else {
        return;
    };
    let mut ticks = tokio::time::interval(Duration::from_secs(minutes.saturating_mul(60)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            _ = ticks.tick() => {
                let runs = tokio::select! {
                    () = &mut shutdown => return,
                    runs = run_feed(&ctx, &feed) => runs,
                };
                log_runs(runs);
            }
        }
    }
}

fn log_runs(runs: Result<Vec<ProjectRun>, FeedError>) {
    match runs {
        Ok(runs) => {
            for (project, run) in runs {
                match run {
                    Ok(run) => tracing::info!(
                        project,
                        queued = run.queued(),
                        failed = run.failures().count(),
                        "vendor feed run"
                    ),
                    Err(e) => {
                        tracing::warn!(project, code = e.code(), error = %e, "vendor feed run failed")
                    }
                }
            }
        }
        Err(e) => {
            tracing::warn!(code = e.code(), error = %e, "vendor feed: the projects could not be listed");
        }
    }
}
