//! `bridle rules queue|approve|reject|log|source-vendor|run-feed|queue-suggestions|upgrade`: the
//! human side of the review queue. With `--url` every one goes through a running gateway's admin
//! API, so the gateway applies and records the change at once; without it they read or write the
//! data directory (offline, for a gateway that is not running).

use std::path::Path;
use std::process::ExitCode;

use bridle_rules::redact_url;
use bridle_rules::vendor::{MAX_CANDIDATES_PER_PAGE, SourceReport, VendorFeed, VendorSource};
use clap::Subcommand;

use bridle_gateway::admin::feeds::{FeedRunView, QueuedSuggestions};
use bridle_gateway::admin::projects::ChangeEntry;
use bridle_gateway::audit::{Change, Entry, Kind, Surface};

use crate::audit::record_offline;
use crate::client::AdminClient;
use crate::{BoxError, open_store, printable, who};

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
                    let line = format!(
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
                    println!("{}", printable(&line));
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
                let project = c.project.clone();
                print_change(&project, &ChangeEntry::from(c));
            }
        }
        RulesCommand::SourceVendor {
            project,
            agent,
            from,
        } => {
            let report = source_vendor(dir, &store, &project, &agent, &from)?;
            for c in &report.queued {
                record_offline(dir, bridle_gateway::feed::seed_entry(c));
            }
            let ids: Vec<u64> = report.queued.iter().map(|c| c.proposal_id).collect();
            print_queued(&ids, report.skipped, report.over_limit, report.not_modified);
        }
        RulesCommand::RunFeed => return run_feed(dir, &store),
        RulesCommand::QueueSuggestions { project } => {
            let report = store.queue_profile_suggestions(&project)?;
            for id in &report.queued {
                let p = store.proposal(*id)?;
                record_offline(dir, bridle_gateway::feed::profile_entry(&project, &p));
            }
            print_queued(&report.queued, report.skipped, report.over_limit, false);
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
                            print_source(
                                &project,
                                &source.agent,
                                &source.url,
                                Ok(Tally {
                                    queued: report.queued.len(),
                                    skipped: report.skipped,
                                    over_limit: report.over_limit,
                                    not_modified: report.not_modified,
                                }),
                            );
                        }
                        Err(e) => {
                            failed = true;
                            print_source(
                                &project,
                                &source.agent,
                                &source.url,
                                Err((e.code(), &e.to_string())),
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

/// Reads one vendor page (URL or file) through the vendor feed, with the limits `bridle.yaml`
/// configures for it (or the defaults): it sends the last read's validators, refuses redirects
/// to other sites, error pages and huge bodies, and records each candidate's source, fetch time
/// and excerpt.
fn source_vendor(
    dir: &Path,
    store: &bridle_rules::RulesStore,
    project: &str,
    agent: &str,
    from: &str,
) -> Result<SourceReport, BoxError> {
    let config = crate::load_config(dir)?.vendor_feed.unwrap_or_default();
    let feed = VendorFeed::new(config).map_err(|e| format!("{e} [{}]", e.code()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let source = VendorSource {
        url: from.to_string(),
        format: None,
    };
    runtime
        .block_on(feed.read_page(store, project, agent, &source))
        .map_err(|e| format!("{e} [{}]", e.code()).into())
}

/// Every rules command through a running gateway's admin API (the decider is the admin the
/// credential names; `--by` does not apply). `source-vendor` reads only http(s) pages there:
/// the gateway does not read files by request.
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
                    let line = format!(
                        "#{} [{}] {}: {} (by {} {})",
                        p["id"].as_u64().unwrap_or(0),
                        s(&p["status"]),
                        s(&p["project"]),
                        s(&p["summary"]),
                        s(&p["origin"]["source"]),
                        s(&p["origin"]["proposed_by"]),
                    );
                    println!("{}", printable(&line));
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
        RulesCommand::Log { project } => {
            let projects = match project {
                Some(p) => vec![p],
                None => api
                    .all("/projects")?
                    .iter()
                    .filter_map(|p| p["name"].as_str().map(str::to_string))
                    .collect(),
            };
            let mut changes = Vec::new();
            for p in &projects {
                for c in api.all(&format!("/projects/{}/history", crate::client::seg(p)))? {
                    changes.push((p.clone(), serde_json::from_value::<ChangeEntry>(c)?));
                }
            }
            // Change ids grow across projects: one log in the order the changes were made.
            changes.sort_by_key(|(_, c)| c.id);
            for (project, c) in &changes {
                print_change(project, c);
            }
        }
        RulesCommand::SourceVendor {
            project,
            agent,
            from,
        } => {
            if !(from.starts_with("http://") || from.starts_with("https://")) {
                return Err(format!(
                    "`{}` is not an http(s) URL: the gateway reads no file by request; run this without --url to read a local file into the data directory",
                    redact_url(&from)
                )
                .into());
            }
            let r = api.post(
                &format!("/projects/{}/vendor-guidance", crate::client::seg(&project)),
                Some(serde_json::json!({ "agent": agent, "url": from })),
            )?;
            let r: QueuedSuggestions = serde_json::from_value(r)?;
            print_queued(&r.queued, r.skipped, r.over_limit, r.not_modified);
        }
        RulesCommand::RunFeed => {
            let run: FeedRunView = serde_json::from_value(api.post("/vendor-feed/run", None)?)?;
            for p in &run.projects {
                if let Some(e) = &p.error {
                    println!("{}: failed [{}] {}", p.project, e.code, e.message);
                    continue;
                }
                for source in &p.sources {
                    let outcome = match &source.error {
                        Some(e) => Err((e.code.as_str(), e.message.as_str())),
                        None => Ok(Tally {
                            queued: source.queued.len(),
                            skipped: source.skipped,
                            over_limit: source.over_limit,
                            not_modified: source.not_modified,
                        }),
                    };
                    print_source(&p.project, &source.agent, &source.url, outcome);
                }
            }
            if run.failed > 0 {
                return Ok(ExitCode::FAILURE);
            }
        }
        RulesCommand::QueueSuggestions { project } => {
            let r = api.post(
                &format!(
                    "/projects/{}/profile-suggestions",
                    crate::client::seg(&project)
                ),
                None,
            )?;
            let r: QueuedSuggestions = serde_json::from_value(r)?;
            print_queued(&r.queued, r.skipped, r.over_limit, false);
        }
        RulesCommand::Upgrade { project } => {
            let r = api.post(
                &format!("/projects/{}/upgrade", crate::client::seg(&project)),
                None,
            )?;
            match r["migrated_from"].as_u64() {
                Some(from) => println!(
                    "migrated {project} from schema_version {from} (now revision {})",
                    r["revision"].as_u64().unwrap_or(0)
                ),
                None => println!("{project} is already at the current schema version"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of `rules log`.
fn print_change(project: &str, c: &ChangeEntry) {
    let line = format!(
        "{} {project} r{} [{}] by {}: {}{}",
        c.at,
        c.revision,
        c.source,
        c.actor,
        c.summary,
        c.proposal_id
            .map(|p| format!(" (proposal #{p})"))
            .unwrap_or_default()
    );
    println!("{}", printable(&line));
}

/// What one read of a page did: queued, skipped (of them, past the limit a page may queue),
/// and whether the page was unchanged.
struct Tally {
    queued: usize,
    skipped: usize,
    over_limit: usize,
    not_modified: bool,
}

/// `, N past the limit of a page` when a page had more suggestions than one read queues.
fn past_limit(over_limit: usize) -> String {
    if over_limit == 0 {
        return String::new();
    }
    format!(", {over_limit} past the limit of {MAX_CANDIDATES_PER_PAGE} a page")
}

/// One source's line of `rules run-feed`: what it queued (how many, how many already known or
/// past the page's limit, whether the page was unchanged), or why it failed (code and
/// sentence). The URL is shown without the credentials it may carry (both the feed and the
/// gateway hand it over redacted; redacting again changes nothing).
fn print_source(project: &str, agent: &str, url: &str, outcome: Result<Tally, (&str, &str)>) {
    let url = redact_url(url);
    match outcome {
        Ok(t) => println!(
            "{project} {agent} {url}: queued {}, {} already known{}{}",
            t.queued,
            t.skipped.saturating_sub(t.over_limit),
            past_limit(t.over_limit),
            if t.not_modified { ", unchanged" } else { "" }
        ),
        Err((code, message)) => println!("{project} {agent} {url}: failed [{code}] {message}"),
    }
}

/// The line `source-vendor` and `queue-suggestions` print: how many were queued (and their
/// ids), how many were already known or past the page's limit, and whether the page was
/// unchanged.
fn print_queued(queued: &[u64], skipped: usize, over_limit: usize, not_modified: bool) {
    let ids: Vec<String> = queued.iter().map(|id| format!("#{id}")).collect();
    println!(
        "queued {} for review ({} already known{}{}){}",
        kberg_core::counted(ids.len() as u64, "suggestion", "suggestions"),
        skipped.saturating_sub(over_limit),
        past_limit(over_limit),
        if not_modified {
            "; the page is unchanged since the last run"
        } else {
            ""
        },
        if ids.is_empty() {
            String::new()
        } else {
            format!(": {}", ids.join(" "))
        }
    );
}
