//! `bridle agents list|token issue|rotate|revoke`: agents and their vault-issued bearer tokens.
//! A token is printed once, when it is issued; the vault keeps only a keyed hash. The running
//! gateway checks the vault on every request, so a revoked token is refused at once.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use bridle_gateway::gateway::open_vault;
use clap::Subcommand;

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
        /// How long the previous tokens stay valid.
        #[arg(long, default_value_t = 0)]
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
                        format!(" ({} vault token version(s))", tokens.len())
                    }
                );
            }
        }
        AgentsCommand::Token(TokenCommand::Issue { agent }) => {
            known(&agent)?;
            let t = vault.set_agent_token(&agent, &actor)?;
            println!("token for `{agent}` (version {}), shown once:", t.version);
            println!("{}", t.token.expose_str().unwrap_or_default());
        }
        AgentsCommand::Token(TokenCommand::Rotate { agent, grace_secs }) => {
            known(&agent)?;
            let t = vault.rotate_agent_token(&agent, Duration::from_secs(grace_secs), &actor)?;
            println!(
                "new token for `{agent}` (version {}), shown once:",
                t.version
            );
            println!("{}", t.token.expose_str().unwrap_or_default());
        }
        AgentsCommand::Token(TokenCommand::Revoke { agent }) => {
            known(&agent)?;
            let n = vault.revoke_agent_tokens(&agent, &actor)?;
            println!("revoked {n} token(s) of `{agent}`");
        }
    }
    Ok(ExitCode::SUCCESS)
}
