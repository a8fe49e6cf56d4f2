//! `bridle kanboard serve`: the Kanboard tools alone, as an MCP server over stdio, for people
//! who want only the wrapper (no gateway, no rules).
//!
//! One process serves one agent: the Kanboard credential comes from a file or from
//! `$KANBOARD_TOKEN` (with `--user`, a user's API token, so Kanboard's permissions and activity
//! stream apply to that user; without, the application token), and `--project` lists the only
//! Kanboard projects it may see. stdout carries nothing but the MCP stream; logs go to stderr.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::kanboard::{
    self, Credential, KANBOARD_WRITE, KanboardClient, KanboardTools, StaticAccess,
};
use clap::{Args, Subcommand};
use kberg_core::{Grants, Principal, ToolRegistry};
use kberg_server::McpApp;

use crate::BoxError;

/// The principal the stand-alone server runs as.
const AGENT: &str = "kanboard-stdio";

#[derive(Debug, Subcommand)]
pub(crate) enum KanboardCommand {
    /// Serve the Kanboard tools over stdio (MCP), for one agent.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Kanboard's JSON-RPC endpoint, ending in /jsonrpc.php.
    #[arg(long)]
    url: String,
    /// A Kanboard project id the agent may use (repeat for several).
    #[arg(long = "project", required = true)]
    projects: Vec<i64>,
    /// Authenticate as this Kanboard user (with the user's API token); without it, the token
    /// is the application token.
    #[arg(long)]
    user: Option<String>,
    /// With the application token: the Kanboard user id that comments are written as.
    #[arg(long)]
    acting_user_id: Option<i64>,
    /// A file holding the token (default: $KANBOARD_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Offer the read tools only (no `kanboard.write`).
    #[arg(long)]
    read_only: bool,
    /// Time limit of one Kanboard request, in seconds.
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
}

pub(crate) async fn kanboard(command: KanboardCommand) -> Result<(), BoxError> {
    let KanboardCommand::Serve(args) = command;
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .trim()
            .to_string(),
        None => std::env::var("KANBOARD_TOKEN")
            .map_err(|_| "give --token-file or set KANBOARD_TOKEN")?
            .trim()
            .to_string(),
    };
    if token.is_empty() {
        return Err("the Kanboard token is empty".into());
    }
    let credential = match args.user {
        Some(username) => Credential::User { username, token },
        None => Credential::AppToken {
            token,
            acting_user_id: args.acting_user_id,
        },
    };
    let endpoint = args
        .url
        .parse()
        // Shown without a user part or query: a credential may sit there, and this process's
        // stderr is kept by the agent that runs it.
        .map_err(|e| format!("--url {}: {e}", bridle_rules::redact_url(&args.url)))?;
    let client = KanboardClient::new(endpoint, Duration::from_secs(args.timeout_secs))?;
    let access = StaticAccess::new().agent(AGENT, credential, args.projects);
    let tools = ToolRegistry::builder()
        .audit_sink(Arc::new(kberg_core::TracingAuditSink))
        .build();
    kanboard::register(&tools, KanboardTools::new(client, Arc::new(access)))?;
    let app = McpApp::builder("bridle-kanboard", env!("CARGO_PKG_VERSION"))
        .title("Bridle Kanboard")
        .instructions("Kanboard tools. Call `project_context` before creating or moving tasks: columns, swimlanes, categories and users may then be given by name. Dates are ISO 8601. Give `create_task` a `reference` so that a repeated create finds the task instead of duplicating it.")
        .tools(tools)
        .build();
    let grants = if args.read_only {
        Grants::none()
    } else {
        Grants::of([KANBOARD_WRITE])
    };
    kberg_server::serve_stdio(app, Principal::new(AGENT).with_grants(grants)).await?;
    Ok(())
}
