//! `bridle rules queue|approve|reject|log|source-vendor|queue-suggestions|upgrade`: the human
//! side of the review queue. With `--url`, `queue`, `approve` and `reject` go through a running
//! gateway's admin API; the others read or write the data directory (offline).

use std::path::Path;
use std::process::ExitCode;

use bridle_rules::vendor::{SourceReport, VendorFeed, VendorFeedConfig, VendorSource};
use clap::Subcommand;

use bridle_gateway::audit::{Change, Entry, Kind, Surface};

use crate::audit::record_offline;
use crate::client::AdminClient;
use crate::{BoxError, open_store, who};

#[derive(Debug, Subcommand)]
pub(crate) enum RulesCommand {
    /// List pending proposals (or all, with --all).
    Queue {
        /// Only this project.
        #[arg(long)]
        project: Option<String>,
        /// Include decided proposals.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a proposal: it becomes part of the project's rules, with its provenance.
    Approve {
        /// The proposal id.
        id: u64,
        /// Who approves (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Reject a proposal, saying why.
    Reject {
        /// The proposal id.
        id: u64,
        /// Why.
        #[arg(long)]
        reason: String,
        /// Who rejects (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// The change log, with the source of every change.
    Log {
        /// Only this project.
        #[arg(long)]
        project: Option<String>,
    },
    /// Read a vendor's published guidance (URL or file) and queue its suggestions for an agent.
    SourceVendor {
        /// The project id.
        #[arg(long)]
        project: String,
        /// The agent type the guidance is for.
        #[arg(long)]
        agent: String,
        /// An http(s) URL or a local file.
        #[arg(long)]
        from: String,
    },
    /// Run the vendor feed `bridle.yaml` configures (`vendor_feed:`) once: every profile's
    /// pages into every configured project's review queue. A running gateway also runs it on
    /// its interval.
    RunFeed,
    /// Queue the vendor suggestions written in a document's `agent_profiles` for review.
    QueueSuggestions {
        /// The project id.
        #[arg(long)]
        project: String,
    },
    /// Rewrite an older document in the current schema version.
    Upgrade {
        /// The project id.
        #[arg(long)]
        project: String,
    },
}

pub(crate) fn rules(dir: &Path, command: RulesCommand) -> Result<ExitCode, BoxError> {
    let (store, _) = open_store(dir)?;
    match command {
        RulesCommand::Queue { project, all, json } => {
            let queue = store.queue(project.as_deref(), all)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&queue)?);
            } else if queue.is_empty() {
                println!("no pending proposals");
            } else {
                for p in queue {
                    println!(
                        "#{} [{}] {}: {} (from {} {}{}{})",
                        p.id,
                        p.status.as_str(),
                        p.project,
                        p.summary,
                        p.origin.source.as_str(),
                        p.origin.proposed_by,
                        p.origin
                            .agent_session
                            .as_deref()
                            .map(|s| format!(", session {s}"))
                            .unwrap_or_default(),
                        p.origin
                            .source_ref
                            .as_deref()
                            .map(|s| format!(", {s}"))
                            .unwrap_or_default(),
                    );
                }
            }
        }
        RulesCommand::Approve { id, by } => {
            let p = store.approve(id, &who(by.clone()))?;
            let mut entry = Entry::user(who(by), Surface::Cli, Kind::Approval)
                .project(&p.project)
                .subject(format!("proposal #{id}"));
            if let Some(after) = p.applied_revision {
                entry = entry.change(Change::revisions(
                    after.saturating_sub(1).to_string(),
                    after.to_string(),
                ));
            }
            record_offline(dir, entry);
            println!(
                "approved #{}: {} (project {} is now at revision {})",
                p.id,
                p.summary,
                p.project,
                p.applied_revision.unwrap_or_default()
            );
        }
        RulesCommand::Reject { id, reason, by } => {
            let p = store.reject(id, &who(by.clone()), &reason)?;
            record_offline(
                dir,
                Entry::user(who(by), Surface::Cli, Kind::Rejection)
                    .project(&p.project)
                    .subject(format!("proposal #{id}")),
            );
            println!("rejected #{}: {}", p.id, p.summary);
        }
        RulesCommand::Log { project } => {
            for c in store.changes(project.as_deref(), 0)? {
                println!(
                    "{} {} r{} [{}] by {}: {}{}",
                    c.at,
                    c.project,
                    c.revision,
                    c.source.as_str(),
                    c.actor,
                    c.summary,
                    c.proposal_id
                        .map(|p| format!(" (proposal #{p})"))
                        .unwrap_or_default()
                );
            }
        }
        RulesCommand::SourceVendor {
            project,
            agent,
            from,
        } => {
            let report = source_vendor(&store, &project, &agent, &from)?;
            for c in &report.queued {
                record_offline(dir, bridle_gateway::feed::seed_entry(c));
            }
            println!(
                "queued {} suggestion(s) for review ({} already known{})",
                report.queued.len(),
                report.skipped,
                if report.not_modified {
                    "; the page is unchanged since the last run"
                } else {
                    ""
                }
            );
        }
        RulesCommand::RunFeed => return run_feed(dir, &store),
        RulesCommand::QueueSuggestions { project } => {
            let report = store.queue_profile_suggestions(&project)?;
            for id in &report.queued {
                // The built-in profiles' guidance: the feed is the profile catalog itself.
                let p = store.proposal(*id)?;
                record_offline(
                    dir,
                    Entry::vendor(
                        p.origin.proposed_by.clone(),
                        p.origin.source_ref.clone(),
                        Kind::Proposal,
                    )
                    .project(&project)
                    .subject(format!("proposal #{id}")),
                );
            }
            println!(
                "queued {} suggestion(s) for review ({} already known)",
                report.queued.len(),
                report.skipped
            );
        }
        RulesCommand::Upgrade { project } => match store.upgrade(&project, &who(None))? {
            Some(from) => println!("migrated {project} from schema_version {from}"),
            None => println!("{project} is already at the current schema version"),
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the configured vendor feed once and prints each source's outcome; fails (exit 1) when
/// any source or project failed, after running the others.
fn run_feed(dir: &Path, store: &bridle_rules::RulesStore) -> Result<ExitCode, BoxError> {
    let config = crate::load_config(dir)?;
    let Some(feed) = config.vendor_feed else {
        return Err("bridle.yaml configures no `vendor_feed:` (see the gateway README)".into());
    };
    let feed = VendorFeed::new(feed).map_err(|e| format!("{e} [{}]", e.code()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let runs = runtime
        .block_on(feed.run_configured(store))
        .map_err(|e| format!("{e} [{}]", e.code()))?;
    let mut failed = false;
    for (project, run) in runs {
        match run {
            Ok(run) => {
                for source in run.sources {
                    match source.outcome {
                        Ok(report) => {
                            for c in &report.queued {
                                record_offline(dir, bridle_gateway::feed::seed_entry(c));
                            }
                            println!(
                                "{project} {} {}: queued {}, {} already known{}",
                                source.agent,
                                source.url,
                                report.queued.len(),
                                report.skipped,
                                if report.not_modified {
                                    ", unchanged"
                                } else {
                                    ""
                                }
                            );
                        }
                        Err(e) => {
                            failed = true;
                            println!(
                                "{project} {} {}: failed [{}] {e}",
                                source.agent,
                                source.url,
                                e.code()
                            );
                        }
                    }
                }
            }
            Err(e) => {
                failed = true;
                println!("{project}: failed [{}] {e}", e.code());
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Reads one vendor page (URL or file) through the vendor feed, which sends the last run's
/// validators, refuses redirects to other sites, error pages and huge bodies, and records each
/// candidate's source, fetch time and excerpt.
fn source_vendor(
    store: &bridle_rules::RulesStore,
    project: &str,
    agent: &str,
    from: &str,
) -> Result<SourceReport, BoxError> {
    let mut config = VendorFeedConfig::default();
    config.profiles.insert(
        agent.to_string(),
        vec![VendorSource {
            url: from.to_string(),
            format: None,
        }],
    );
    let feed = VendorFeed::new(config).map_err(|e| format!("{e} [{}]", e.code()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let run = runtime
        .block_on(feed.run(store, project))
        .map_err(|e| format!("{e} [{}]", e.code()))?;
    match run.sources.into_iter().next().map(|s| s.outcome) {
        Some(Ok(report)) => Ok(report),
        Some(Err(e)) => Err(format!("{e} [{}]", e.code()).into()),
        None => Err("no source was read".into()),
    }
}

/// `queue`, `approve` and `reject` through a running gateway's admin API (the decider is the
/// admin the credential names; `--by` does not apply). The others work on the data directory.
pub(crate) fn rules_remote(api: &AdminClient, command: RulesCommand) -> Result<ExitCode, BoxError> {
    match command {
        RulesCommand::Queue { project, all, json } => {
            let mut path = format!("/queue?status={}", if all { "all" } else { "pending" });
            if let Some(p) = &project {
                path.push_str(&format!("&project={}", crate::client::seg(p)));
            }
            let items = api.all(&path)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&items)?);
            } else if items.is_empty() {
                println!("the review queue is empty");
            } else {
                for p in items {
                    let s = |v: &serde_json::Value| v.as_str().unwrap_or("?").to_string();
                    println!(
                        "#{} [{}] {}: {} (by {} {})",
                        p["id"].as_u64().unwrap_or(0),
                        s(&p["status"]),
                        s(&p["project"]),
                        s(&p["summary"]),
                        s(&p["origin"]["source"]),
                        s(&p["origin"]["proposed_by"]),
                    );
                }
            }
        }
        RulesCommand::Approve { id, by } => {
            if by.is_some() {
                eprintln!(
                    "note: --by does not apply through the admin API; the credential names the admin"
                );
            }
            let p = api.post(&format!("/queue/{id}/approve"), None)?;
            println!(
                "approved #{}: {} (project {} is now at revision {})",
                p["id"].as_u64().unwrap_or(0),
                p["summary"].as_str().unwrap_or("?"),
                p["project"].as_str().unwrap_or("?"),
                p["applied_revision"].as_u64().unwrap_or(0)
            );
        }
        RulesCommand::Reject { id, reason, by } => {
            if by.is_some() {
                eprintln!(
                    "note: --by does not apply through the admin API; the credential names the admin"
                );
            }
            let p = api.post(
                &format!("/queue/{id}/reject"),
                Some(serde_json::json!({ "reason": reason })),
            )?;
            println!(
                "rejected #{}: {}",
                p["id"].as_u64().unwrap_or(0),
                p["summary"].as_str().unwrap_or("?")
            );
        }
        _ => {
            return Err(
                "only `rules queue|approve|reject` go through the admin API; run the others without --url (they work on the data directory)"
                    .into(),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
