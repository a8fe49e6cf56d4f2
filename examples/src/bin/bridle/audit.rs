//! `bridle audit verify|query|export`: the gateway's audit log, read offline from the data
//! directory (`audit.db`, or `audit.path` in `bridle.yaml`). No running gateway is needed: the
//! log is a SQLite file the gateway appends to, and reading it while the gateway runs is safe.
//!
//! `verify` walks the hash chain and exits 1 naming the first edited, inserted or deleted
//! entry; `query` prints one page of entries (filters combine with AND; `--cursor` continues);
//! `export` writes every matching entry as JSON Lines.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bridle_gateway::audit::{AuditLog, AuditQuery, Kind, SourceType, StoredEntry};
use bridle_gateway::config::GatewayConfig;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};

use crate::BoxError;

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Check the hash chain; exit 1 naming the first edited, inserted or deleted entry.
    Verify {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print one page of entries.
    Query {
        #[command(flatten)]
        filter: Filter,
        /// Newest first (default oldest first).
        #[arg(long)]
        newest_first: bool,
        /// Entries per page (1 to 1000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Continue after a page (the `next:` cursor it printed).
        #[arg(long)]
        cursor: Option<String>,
        /// Print JSON (the page, with `next_cursor`).
        #[arg(long)]
        json: bool,
    },
    /// Write every matching entry as JSON Lines.
    Export {
        #[command(flatten)]
        filter: Filter,
        /// The file to write (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// The filters `query` and `export` share.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct Filter {
    /// Entries at or after this time (RFC 3339, e.g. 2026-12-01T00:00:00Z).
    #[arg(long)]
    pub from: Option<DateTime<Utc>>,
    /// Entries before this time (RFC 3339).
    #[arg(long)]
    pub to: Option<DateTime<Utc>>,
    /// user, agent, vendor or system.
    #[arg(long)]
    pub source: Option<String>,
    /// The admin, agent, feed or component that acted.
    #[arg(long)]
    pub actor: Option<String>,
    /// Entries concerning this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Entries of this project.
    #[arg(long)]
    pub project: Option<String>,
    /// The kind (tool_call, proposal, approval, secret_rotate, ...).
    #[arg(long)]
    pub kind: Option<String>,
}

impl Filter {
    /// The query these filters make.
    pub(crate) fn query(&self) -> Result<AuditQuery, BoxError> {
        let mut q = AuditQuery::all().between(self.from, self.to);
        if let Some(s) = &self.source {
            q = q.source(
                s.parse::<SourceType>()
                    .map_err(|()| format!("--source `{s}`: one of user, agent, vendor, system"))?,
            );
        }
        if let Some(k) = &self.kind {
            q = q.kind(k.parse::<Kind>().map_err(|()| {
                let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                format!("--kind `{k}`: one of {}", kinds.join(", "))
            })?);
        }
        if let Some(a) = &self.actor {
            q = q.actor(a);
        }
        if let Some(a) = &self.agent {
            q = q.agent(a);
        }
        if let Some(p) = &self.project {
            q = q.project(p);
        }
        Ok(q)
    }
}

/// Opens the data directory's audit log.
pub(crate) fn open_log(dir: &Path) -> Result<AuditLog, BoxError> {
    let config = GatewayConfig::load(dir)?;
    let path = config.audit.db_path(dir);
    if !path.exists() {
        return Err(format!(
            "no audit log at {} (the gateway creates it on its first start)",
            path.display()
        )
        .into());
    }
    Ok(AuditLog::open(config.audit.log_config(dir))?)
}

/// One entry as a line: id, time, source and actor, kind, what, outcome.
pub(crate) fn line(e: &StoredEntry) -> String {
    let source = serde_json::to_value(&e.source).unwrap_or_default();
    let source_type = source["type"].as_str().unwrap_or("?");
    let actor = ["admin", "agent", "feed", "component"]
        .iter()
        .find_map(|k| source[k].as_str())
        .unwrap_or("?");
    let surface = source["surface"]
        .as_str()
        .map(|s| format!("@{s}"))
        .unwrap_or_default();
    let outcome = serde_json::to_value(&e.outcome).unwrap_or_default();
    let outcome = outcome["code"]
        .as_str()
        .map_or_else(|| "ok".to_string(), |c| format!("error {c}"));
    let mut what = Vec::new();
    if let Some(p) = &e.project {
        what.push(format!("project {p}"));
    }
    if let Some(s) = &e.subject {
        what.push(s.clone());
    }
    if let (Some(b), Some(a)) = (&e.change.before, &e.change.after) {
        what.push(format!("r{b} -> r{a}"));
    }
    format!(
        "#{} {} {source_type}:{actor}{surface} {} {} [{outcome}]",
        e.id,
        e.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        e.kind,
        what.join(", ")
    )
}

pub(crate) fn audit(dir: &Path, command: AuditCommand) -> Result<ExitCode, BoxError> {
    let log = open_log(dir)?;
    match command {
        AuditCommand::Verify { json } => {
            let report = log.verify()?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else if let Some(b) = &report.first_break {
                let kind = serde_json::to_value(b.kind).unwrap_or_default();
                println!(
                    "audit log BROKEN at entry {} ({}): {} entries intact before it",
                    b.id,
                    kind.as_str().unwrap_or("?"),
                    report.checked
                );
            } else {
                let (head, hash) = log.head()?;
                println!(
                    "audit log intact: {} entries (after id {} through id {head}); head hash {hash}",
                    report.checked, report.anchor_id
                );
            }
            Ok(if report.is_intact() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        AuditCommand::Query {
            filter,
            newest_first,
            limit,
            cursor,
            json,
        } => {
            let mut q = filter.query()?.limit(limit);
            if newest_first {
                q = q.newest_first();
            }
            if let Some(c) = cursor {
                q = q.after(c);
            }
            let page = log.query(&q)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&page)?);
            } else {
                for e in &page.entries {
                    println!("{}", line(e));
                }
                if let Some(next) = &page.next_cursor {
                    println!("next: --cursor {next}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Export { filter, out } => {
            let q = filter.query()?;
            let n = match out {
                Some(path) => {
                    let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
                    let n = log.export_jsonl(&q, &mut f)?;
                    f.flush()?;
                    eprintln!("wrote {n} entries to {}", path.display());
                    n
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut lock = stdout.lock();
                    log.export_jsonl(&q, &mut lock)?
                }
            };
            tracing::debug!(entries = n, "audit export");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Records a change the command line made offline (on the data directory) in the audit log,
/// as a `user` entry through the `cli` surface. The change is already made: a failed record is
/// reported on stderr, and the command still succeeds.
pub(crate) fn record_offline(dir: &Path, entry: bridle_gateway::audit::Entry) {
    if !dir.join("bridle.yaml").is_file() {
        // Not a gateway's data directory (a bare rules folder): there is no log to write.
        return;
    }
    let result = (|| -> Result<(), BoxError> {
        let config = GatewayConfig::load(dir)?;
        if !config.audit.enabled {
            return Ok(());
        }
        let log = AuditLog::open(config.audit.log_config(dir))?;
        log.record(entry)?;
        Ok(())
    })();
    if let Err(e) = result {
        eprintln!("warning: the change was made, but the audit log could not record it: {e}");
    }
}
