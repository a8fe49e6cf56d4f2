//! `bridle agents list|token issue|rotate|revoke`: agents and their vault-issued bearer tokens.
//! A token is printed once, when it is issued; the vault keeps only a keyed hash. The running
//! gateway checks the vault on every request, so a revoked token is refused at once.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use bridle_gateway::gateway::open_vault;
use clap::Subcommand;
use kberg_core::counted;

use bridle_gateway::audit::{Entry, Kind, Surface};

use crate::audit::record_offline;
use crate::client::{AdminClient, seg};
use crate::{BoxError, who};

#[derive(Debug, Subcommand)]
pub(crate) enum AgentsCommand {
    /// The configured agents, their type, projects and token versions.
    List,
    /// Vault-issued bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Issue a token for an agent (printed once).
    Issue {
        /// The agent's name.
        agent: String,
    },
    /// Issue a new token; the current ones stay valid for --grace-secs.
    Rotate {
        /// The agent's name.
        agent: String,
        /// How long the previous tokens stay valid, in seconds (at most 30 days, as
        /// through the admin API).
        #[arg(
            long,
            default_value_t = 0,
            value_parser = clap::value_parser!(u64).range(..=bridle_gateway::admin::MAX_GRACE_SECS)
        )]
        grace_secs: u64,
    },
    /// Revoke every token of an agent, at once.
    Revoke {
        /// The agent's name.
        agent: String,
    },
}

pub(crate) fn agents(dir: &Path, command: AgentsCommand) -> Result<ExitCode, BoxError> {
    let config = crate::load_config(dir)?;
    let (vault, _) = open_vault(dir, &config)?;
    let actor = format!("user:{} (cli)", who(None));
    let known = |agent: &str| -> Result<(), BoxError> {
        if config.agents.contains_key(agent) {
            Ok(())
        } else {
            Err(format!(
                "`{agent}` is not a configured agent (agents: {})",
                config.agents.keys().cloned().collect::<Vec<_>>().join(", ")
            )
            .into())
        }
    };
    match command {
        AgentsCommand::List => {
            for (name, a) in &config.agents {
                let tokens = vault.agent_tokens(name)?;
                println!(
                    "{name} [{}] projects: {}; token: {}{}",
                    a.agent_type,
                    if a.projects.is_empty() {
                        "all".to_string()
                    } else {
                        a.projects.join(", ")
                    },
                    if a.token_secret.is_some() {
                        "secret file"
                    } else {
                        "vault"
                    },
                    if tokens.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " ({})",
                            counted(
                                tokens.len() as u64,
                                "vault token version",
                                "vault token versions"
                            )
                        )
                    }
                );
            }
        }
        AgentsCommand::Token(TokenCommand::Issue { agent }) => {
            known(&agent)?;
            let t = vault.set_agent_token(&agent, &actor)?;
            record_offline(
                dir,
                Entry::user(who(None), Surface::Cli, Kind::AgentRotate)
                    .about_agent(&agent)
                    .subject(format!("token v{}", t.version))
                    .detail("token issued; earlier tokens revoked"),
            );
            println!("token for `{agent}` (version {}), shown once:", t.version);
            println!("{}", t.token.expose_str().unwrap_or_default());
        }
        AgentsCommand::Token(TokenCommand::Rotate { agent, grace_secs }) => {
            known(&agent)?;
            let t = vault.rotate_agent_token(&agent, Duration::from_secs(grace_secs), &actor)?;
            record_offline(
                dir,
                Entry::user(who(None), Surface::Cli, Kind::AgentRotate)
                    .about_agent(&agent)
                    .subject(format!("token v{}", t.version))
                    .detail(format!(
                        "token rotated; earlier tokens valid for {grace_secs}s"
                    )),
            );
            println!(
                "new token for `{agent}` (version {}), shown once:",
                t.version
            );
            println!("{}", t.token.expose_str().unwrap_or_default());
        }
        AgentsCommand::Token(TokenCommand::Revoke { agent }) => {
            known(&agent)?;
            let n = vault.revoke_agent_tokens(&agent, &actor)?;
            record_offline(
                dir,
                Entry::user(who(None), Surface::Cli, Kind::AgentRevoke)
                    .about_agent(&agent)
                    .subject("every token")
                    .detail(format!("{} revoked", counted(n as u64, "token", "tokens"))),
            );
            println!(
                "revoked {} of `{agent}`",
                counted(n as u64, "token", "tokens")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The same commands through a running gateway's admin API.
pub(crate) fn agents_remote(
    api: &AdminClient,
    command: AgentsCommand,
) -> Result<ExitCode, BoxError> {
    match command {
        AgentsCommand::List => {
            for a in api.all("/agents")? {
                let projects: Vec<&str> = a["projects"]
                    .as_array()
                    .map(|p| p.iter().filter_map(|v| v.as_str()).collect())
                    .unwrap_or_default();
                println!(
                    "{} [{}] projects: {}; token: {}{}; {}",
                    a["name"].as_str().unwrap_or("?"),
                    a["agent_type"].as_str().unwrap_or("?"),
                    if projects.is_empty() {
                        "all".to_string()
                    } else {
                        projects.join(", ")
                    },
                    if a["token_source"] == "vault" {
                        "vault"
                    } else {
                        "secret file"
                    },
                    match a["token_versions"].as_array().map(Vec::len) {
                        Some(n) if n > 0 => format!(
                            " ({})",
                            counted(n as u64, "vault token version", "vault token versions")
                        ),
                        _ => String::new(),
                    },
                    counted(
                        a["sessions"].as_u64().unwrap_or(0),
                        "live session",
                        "live sessions"
                    ),
                );
            }
        }
        AgentsCommand::Token(TokenCommand::Issue { agent }) => {
            let t = api.post(&format!("/agents/{}/token", seg(&agent)), None)?;
            println!(
                "token for `{agent}` (version {}), shown once:",
                t["version"].as_u64().unwrap_or(0)
            );
            println!("{}", t["token"].as_str().unwrap_or_default());
            warn_if_unrecorded(&t);
        }
        AgentsCommand::Token(TokenCommand::Rotate { agent, grace_secs }) => {
            let t = api.post(
                &format!("/agents/{}/rotate", seg(&agent)),
                Some(serde_json::json!({ "grace_secs": grace_secs })),
            )?;
            println!(
                "new token for `{agent}` (version {}), shown once:",
                t["version"].as_u64().unwrap_or(0)
            );
            println!("{}", t["token"].as_str().unwrap_or_default());
            warn_if_unrecorded(&t);
        }
        AgentsCommand::Token(TokenCommand::Revoke { agent }) => {
            let r = api.post(&format!("/agents/{}/revoke", seg(&agent)), None)?;
            println!(
                "revoked {} of `{agent}`; ended {}",
                counted(r["revoked_tokens"].as_u64().unwrap_or(0), "token", "tokens"),
                counted(
                    r["ended_sessions"].as_u64().unwrap_or(0),
                    "live session",
                    "live sessions"
                )
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A token the gateway issued but could not record in its audit log comes with a warning
/// (the token is still returned, since it cannot be shown again): said on stderr, as the
/// offline commands do.
fn warn_if_unrecorded(issued: &serde_json::Value) {
    if let Some(w) = issued["warning"].as_str() {
        eprintln!("warning: {w}");
    }
}
