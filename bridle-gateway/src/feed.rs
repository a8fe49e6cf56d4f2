//! The vendor-guidance feed inside the gateway: `bridle_rules::vendor::VendorFeed` run on its
//! interval while the gateway serves and on demand (admin API, command line), with every
//! proposal it queues recorded in the audit log as a `vendor` entry (the feed's profile and the
//! source URL, its user part and query, where credentials go, as `***`). The feed itself
//! (fetching, extraction, the ledger) lives in bridle-rules.

use std::future::Future;
use std::sync::Arc;

use bridle_rules::redact_url;
use bridle_rules::vendor::{
    FeedError, FeedRun, SourceReport, VendorCandidate, VendorFeed, VendorSource,
};

use crate::audit::{Entry, Kind};
use crate::context::GatewayContext;

/// The audit entry of one queued vendor suggestion: source `vendor` (the feed's profile and the
/// page, its credentials hidden), kind `proposal`, the project and the proposal.
pub fn seed_entry(c: &VendorCandidate) -> Entry {
    Entry::vendor(
        format!("vendor:{}", c.agent),
        // bridle-rules records the page redacted; a candidate built by hand is redacted here.
        Some(redact_url(&c.source_url)),
        Kind::Proposal,
    )
    .project(&c.project)
    .subject(format!("proposal #{}", c.proposal_id))
}

/// The audit entry of one queued suggestion from a project document's own `agent_profiles`
/// (the document is the feed): source `vendor` (the profile, and where in the document the
/// suggestion stood), kind `proposal`, the project and the proposal.
pub fn profile_entry(project: &str, proposal: &bridle_rules::Proposal) -> Entry {
    Entry::vendor(
        proposal.origin.proposed_by.clone(),
        proposal.origin.source_ref.as_deref().map(redact_url),
        Kind::Proposal,
    )
    .project(project)
    .subject(format!("proposal #{}", proposal.id))
}

/// Lets one run of the gateway's feed go at a time: a run on demand while another (on demand or
/// on the interval) is under way is refused (the admin API's 409 `feed_run_in_progress`)
/// rather than fetching every page again beside it, and an interval run that comes due during
/// a run on demand waits for it. Clones share the guard.
#[derive(Debug, Clone, Default)]
pub struct FeedRuns(Arc<tokio::sync::Mutex<()>>);

impl FeedRuns {
    /// Starts a run now if none is under way: the guard ends it when dropped.
    pub fn try_start(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        Arc::clone(&self.0).try_lock_owned().ok()
    }

    /// Starts a run once the one under way (if any) has ended.
    pub async fn start(&self) -> tokio::sync::OwnedMutexGuard<()> {
        Arc::clone(&self.0).lock_owned().await
    }
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
                    tracing::warn!(proposal = c.proposal_id, error = %crate::logging::one_line(&e), "a vendor proposal's audit entry was not written");
                }
            }
        }
    }
    Ok(runs)
}

/// Reads one vendor page for `agent` into `project`'s review queue now (the admin API's and
/// the command line's one-off read), with `feed`'s limits and ledger, and records each queued
/// proposal as a `vendor` audit entry like a run does.
pub async fn read_page(
    ctx: &GatewayContext,
    feed: &VendorFeed,
    project: &str,
    agent: &str,
    source: &VendorSource,
) -> Result<SourceReport, FeedError> {
    let report = feed.read_page(&ctx.store, project, agent, source).await?;
    for c in &report.queued {
        if let Err(e) = ctx.record_change(seed_entry(c)) {
            tracing::warn!(proposal = c.proposal_id, error = %crate::logging::one_line(&e), "a vendor proposal's audit entry was not written");
        }
    }
    Ok(report)
}

/// Runs the feed every `interval_minutes` (the first run at once) until `shutdown` completes;
/// returns at once when it has no interval. Each run is [`run_feed`] (so its proposals are
/// audited) on bridle-rules' schedule, which logs each outcome per project; it holds `runs`, so
/// it waits for a run on demand under way and a run on demand meanwhile is refused.
pub async fn run_every(
    ctx: Arc<GatewayContext>,
    feed: Arc<VendorFeed>,
    runs: FeedRuns,
    shutdown: impl Future<Output = ()>,
) {
    let (ctx, feed, runs) = (&ctx, &feed, &runs);
    feed.every(shutdown, || async move {
        let _running = runs.start().await;
        run_feed(ctx, feed).await
    })
    .await;
}
