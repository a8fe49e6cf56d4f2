//! `bridle scope list|approve|deny`: agents' scope-expansion tickets.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;

use crate::{BoxError, open_store, who};

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
                println!(
                    "#{} [{}] {} by {}: {} (because: {})",
                    t.id, t.status, t.project, t.agent, t.action, t.reason
                );
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
