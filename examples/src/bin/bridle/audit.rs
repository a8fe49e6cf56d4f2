//! `bridle audit verify|query|export`: the gateway's audit log. With `--url` through a running
//! gateway's admin API ([`audit_remote`]); without it offline, read where the gateway keeps
//! it: the data directory's SQLite file (`audit.db`, or `audit.path` in `bridle.yaml`), or,
//! with `database: postgres://...`, the PostgreSQL database every replica appends to. Reading
//! it while the gateway runs is safe either way.
//!
//! `verify` walks the hash chain and exits 1 naming the first edited, inserted or deleted
//! entry; `query` prints one page of entries (filters combine with AND; `--cursor` continues);
//! `export` writes every matching entry as JSON Lines.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bridle_gateway::audit::{AuditLog, AuditQuery, Kind, SourceType, StoredEntry};
use bridle_gateway::config::GatewayConfig;
use bridle_gateway::db::StateDatabase;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};

use crate::BoxError;
use crate::client::{AdminClient, seg};

#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Check the hash chain; exit 1 naming the first edited, inserted or deleted entry
    /// (through a running gateway with --url; offline on the data directory without).
    Verify {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print one page of entries (through a running gateway with --url; offline on the data
    /// directory without).
    Query {
        #[command(flatten)]
        filter: Filter,
        /// Newest first (default oldest first).
        #[arg(long)]
        newest_first: bool,
        /// Entries per page (1 to 1000; others are refused, offline as through the admin API).
        #[arg(
            long,
            default_value_t = 50,
            value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=bridle_gateway::audit::MAX_PAGE as u64)
        )]
        limit: usize,
        /// Continue after a page (the `next:` cursor it printed).
        #[arg(long)]
        cursor: Option<String>,
        /// Print JSON (the page, with `next_cursor`).
        #[arg(long)]
        json: bool,
    },
    /// Write every matching entry as JSON Lines (through a running gateway with --url; offline
    /// on the data directory without).
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

/// Opens the data directory's audit log where the gateway keeps it: the SQLite file, or, with
/// `database: postgres://...`, the PostgreSQL database the replicas share (the password read
/// from `database_password`'s secret folder; the vault is not opened), to read: no retention
/// is applied.
pub(crate) fn open_log(dir: &Path) -> Result<AuditLog, BoxError> {
    let config = crate::load_config(dir)?;
    open_configured_log(dir, &config)
}

fn open_configured_log(dir: &Path, config: &GatewayConfig) -> Result<AuditLog, BoxError> {
    let database = StateDatabase::open_configured(dir, config)?;
    if database.is_embedded() {
        let path = config.audit.db_path(dir);
        if !path.exists() {
            return Err(format!(
                "no audit log at {} (the gateway creates it on its first start)",
                path.display()
            )
            .into());
        }
    }
    // Read only: retention (a write) is the gateway's to apply, and a pass from here would
    // remove entries beside a running gateway, or with it stopped, on a mere read.
    let log_config = config
        .audit
        .log_config(dir)
        .with_retention(bridle_gateway::audit::Retention::keep_all());
    Ok(database.open_audit(log_config)?)
}

/// One entry as a line: id, time, source and actor, kind, what, outcome.
pub(crate) fn line(e: &StoredEntry) -> String {
    line_of(&serde_json::to_value(e).unwrap_or_default())
}

/// One entry, in its JSON shape (the log's and the admin API's alike), as a line.
fn line_of(e: &serde_json::Value) -> String {
    let s = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let source = &e["source"];
    let source_type = source["type"].as_str().unwrap_or("?");
    let actor = ["admin", "agent", "feed", "component"]
        .iter()
        .find_map(|k| source[k].as_str())
        .unwrap_or("?");
    let surface = source["surface"]
        .as_str()
        .map(|s| format!("@{s}"))
        .unwrap_or_default();
    let outcome = e["outcome"]["code"]
        .as_str()
        .map_or_else(|| "ok".to_string(), |c| format!("error {c}"));
    let mut what = Vec::new();
    if let Some(p) = s(&e["project"]) {
        what.push(format!("project {p}"));
    }
    if let Some(sub) = s(&e["subject"]) {
        what.push(sub);
    }
    let revision = |v: &serde_json::Value| {
        v.as_str()
            .map(str::to_string)
            .or_else(|| v.as_u64().map(|n| n.to_string()))
    };
    if let (Some(b), Some(a)) = (
        revision(&e["change"]["before"]),
        revision(&e["change"]["after"]),
    ) {
        what.push(format!("r{b} -> r{a}"));
    }
    // Milliseconds always, as the log keeps them (serde's form drops a zero fraction).
    let at = e["at"].as_str().unwrap_or("?");
    let at = DateTime::parse_from_rfc3339(at).map_or_else(
        |_| at.to_string(),
        |t| {
            t.with_timezone(&Utc)
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        },
    );
    let line = format!(
        "#{} {} {source_type}:{actor}{surface} {} {} [{outcome}]",
        e["id"].as_u64().unwrap_or(0),
        at,
        e["kind"].as_str().unwrap_or("?"),
        what.join(", ")
    );
    crate::printable(&line).into_owned()
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

/// The filters as the admin API's query string (the API checks them and answers a problem for
/// a bad one).
fn query_string(filter: &Filter) -> Vec<String> {
    let mut q = Vec::new();
    let time = |t: &DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let pairs = [
        ("from", filter.from.as_ref().map(time)),
        ("to", filter.to.as_ref().map(time)),
        ("source", filter.source.clone()),
        ("actor", filter.actor.clone()),
        ("agent", filter.agent.clone()),
        ("project", filter.project.clone()),
        ("kind", filter.kind.clone()),
    ];
    for (k, v) in pairs {
        if let Some(v) = v {
            q.push(format!("{k}={}", seg(&v)));
        }
    }
    q
}

fn with_query(path: &str, q: &[String]) -> String {
    if q.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", q.join("&"))
    }
}

/// `bridle audit verify|query|export --url`: the same commands through a running gateway's
/// admin API, which flushes its queued tool-call entries first, so the answer includes every
/// call made before it.
pub(crate) fn audit_remote(api: &AdminClient, command: AuditCommand) -> Result<ExitCode, BoxError> {
    match command {
        AuditCommand::Verify { json } => {
            let v = api.get("/audit/verify")?;
            let intact = v["intact"].as_bool().unwrap_or(false);
            let n = |k: &str| v[k].as_u64().unwrap_or(0);
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else if intact {
                println!(
                    "audit log intact: {} entries (after id {} through id {})",
                    n("checked"),
                    n("anchor_id"),
                    n("head_id")
                );
            } else {
                println!(
                    "audit log BROKEN at entry {} ({}): {} entries intact before it",
                    n("first_break_id"),
                    v["first_break_kind"].as_str().unwrap_or("?"),
                    n("checked")
                );
            }
            Ok(if intact {
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
            let mut q = query_string(&filter);
            q.push(format!("limit={limit}"));
            if newest_first {
                q.push("order=desc".into());
            }
            if let Some(c) = cursor {
                q.push(format!("cursor={}", seg(&c)));
            }
            let page = api.get(&with_query("/audit", &q))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&page)?);
            } else {
                for e in page["items"].as_array().into_iter().flatten() {
                    println!("{}", line_of(e));
                }
                if let Some(next) = page["next_cursor"].as_str() {
                    println!("next: --cursor {next}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        AuditCommand::Export { filter, out } => {
            let lines = api.json_lines(&with_query("/audit/export", &query_string(&filter)))?;
            let n = lines.lines().filter(|l| !l.trim().is_empty()).count();
            match out {
                Some(path) => {
                    std::fs::write(&path, lines.as_bytes())
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    eprintln!("wrote {n} entries to {}", path.display());
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut lock = stdout.lock();
                    lock.write_all(lines.as_bytes())?;
                    lock.flush()?;
                }
            }
            tracing::debug!(entries = n, "audit export through the admin API");
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
        let config = crate::load_config(dir)?;
        if !config.audit.enabled {
            return Ok(());
        }
        let database = StateDatabase::open_configured(dir, &config)?;
        // Retention is the gateway's to apply, not a one-line change's.
        let log_config = config
            .audit
            .log_config(dir)
            .with_retention(bridle_gateway::audit::Retention::keep_all());
        let log = database.open_audit(log_config)?;
        log.record(entry)?;
        Ok(())
    })();
    if let Err(e) = result {
        eprintln!("warning: the change was made, but the audit log could not record it: {e}");
    }
}
