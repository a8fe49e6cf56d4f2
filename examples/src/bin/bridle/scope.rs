//! `bridle scope list|approve|deny`: agents' scope-expansion tickets, offline on the data
//! directory or (with `--url`) through a running gateway's admin API.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;

use crate::client::AdminClient;
use crate::{BoxError, open_store, printable, who};

#[derive(Debug, Subcommand)]
pub(crate) enum ScopeCommand {
    /// List pending tickets (or all, with --all).
    List {
        /// Include decided tickets.
        #[arg(long)]
        all: bool,
    },
    /// Approve a ticket.
    Approve {
        /// The ticket id.
        ticket: u64,
        /// Who decides (default: $USER).
        #[arg(long)]
        by: Option<String>,
        /// A note for the agent.
        #[arg(long)]
        note: Option<String>,
    },
    /// Deny a ticket.
    Deny {
        /// The ticket id.
        ticket: u64,
        /// Who decides (default: $USER).
        #[arg(long)]
        by: Option<String>,
        /// A note for the agent.
        #[arg(long)]
        note: Option<String>,
    },
}

pub(crate) fn scope(dir: &Path, command: ScopeCommand) -> Result<ExitCode, BoxError> {
    let (store, _) = open_store(dir)?;
    let (ticket, approve, by, note) = match command {
        ScopeCommand::List { all } => {
            let tickets = store.scope_tickets(all)?;
            if tickets.is_empty() {
                println!("no pending scope tickets");
            }
            for t in tickets {
                let line = format!(
                    "#{} [{}] {} by {}: {} (because: {})",
                    t.id, t.status, t.project, t.agent, t.action, t.reason
                );
                println!("{}", printable(&line));
            }
            return Ok(ExitCode::SUCCESS);
        }
        ScopeCommand::Approve { ticket, by, note } => (ticket, true, by, note),
        ScopeCommand::Deny { ticket, by, note } => (ticket, false, by, note),
    };
    let t = store.decide_scope(ticket, approve, &who(by), note.as_deref())?;
    println!("scope ticket #{} is {}", t.id, t.status);
    Ok(ExitCode::SUCCESS)
}

/// The same commands through a running gateway's admin API; the decider is the admin the
/// credential names (`--by` does not apply).
pub(crate) fn scope_remote(api: &AdminClient, command: ScopeCommand) -> Result<ExitCode, BoxError> {
    let (ticket, verb, by, note) = match command {
        ScopeCommand::List { all } => {
            let tickets = api.all(if all {
                "/scope-tickets?status=all"
            } else {
                "/scope-tickets"
            })?;
            if tickets.is_empty() {
                println!("no pending scope tickets");
            }
            for t in tickets {
                let s = |k: &str| t[k].as_str().unwrap_or("?").to_string();
                let line = format!(
                    "#{} [{}] {} by {}: {} (because: {})",
                    t["id"].as_u64().unwrap_or(0),
                    s("status"),
                    s("project"),
                    s("agent"),
                    s("action"),
                    s("reason")
                );
                println!("{}", printable(&line));
            }
            return Ok(ExitCode::SUCCESS);
        }
        ScopeCommand::Approve { ticket, by, note } => (ticket, "approve", by, note),
        ScopeCommand::Deny { ticket, by, note } => (ticket, "deny", by, note),
    };
    if by.is_some() {
        eprintln!(
            "note: --by does not apply through the admin API; the credential names the admin"
        );
    }
    let t = api.post(
        &format!("/scope-tickets/{ticket}/{verb}"),
        Some(serde_json::json!({ "note": note })),
    )?;
    println!(
        "scope ticket #{} is {}",
        t["id"].as_u64().unwrap_or(0),
        t["status"].as_str().unwrap_or("?")
    );
    Ok(ExitCode::SUCCESS)
}
