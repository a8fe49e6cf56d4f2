//! `bridle serve` and `bridle init`: the gateway on loopback, laid out on first start.

use std::path::Path;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir};
use bridle_gateway::memory::ENABLE_HINT;
use bridle_rules::{AgentCatalog, RulesStore};

use crate::BoxError;
use crate::memory::open_memory;

/// Creates the data directory and the demo project when they do not exist.
pub(crate) fn init(dir: &Path) -> Result<(), BoxError> {
    let report = init_data_dir(dir)?;
    let store = RulesStore::open(dir, AgentCatalog::builtin())?;
    if report.created && store.projects()?.is_empty() {
        store.create("demo", &demo_document(), "bridle-init")?;
    }
    Ok(())
}

pub(crate) async fn serve(dir: &Path, listen: Option<String>) -> Result<(), BoxError> {
    init(dir)?;
    let mut config = GatewayConfig::load(dir)?;
    if let Some(l) = listen {
        config.listen = l;
    }
    let addr = config.listen_addr()?;
    config.check_exposure(addr)?;
    let mut builder = GatewayBuilder::new(dir, config.clone());
    if config.memory.is_some() {
        builder = builder.memory(open_memory(dir, &config).await?);
    }
    let gateway = builder.build().await?;
    let has_memory = gateway.has_memory();
    let bound = gateway.bind(addr).await?;
    print_connect_help(dir, &config, &bound.url());
    if !has_memory {
        println!("{ENABLE_HINT}");
    }
    bound.run(shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn print_connect_help(dir: &Path, config: &GatewayConfig, url: &str) {
    let secrets = config.secrets_path(dir);
    let secrets = std::fs::canonicalize(&secrets).unwrap_or(secrets);
    println!("bridle: listening on {url}");
    println!();
    for (name, agent) in &config.agents {
        let token_file = secrets.join(&agent.token_secret);
        match agent.agent_type.as_str() {
            "claude" => {
                println!("Claude Code (agent `{name}`):");
                println!(
                    "  claude mcp add --transport http bridle {url} --header \"Authorization: Bearer $(cat {})\"",
                    token_file.display()
                );
            }
            "codex" => {
                println!("Codex (agent `{name}`), in ~/.codex/config.toml:");
                println!("  [mcp_servers.bridle]");
                println!("  url = \"{url}\"");
                println!("  bearer_token_env_var = \"BRIDLE_TOKEN\"");
                println!(
                    "  and before starting codex: export BRIDLE_TOKEN=\"$(cat {})\"",
                    token_file.display()
                );
            }
            other => {
                println!(
                    "{other} (agent `{name}`): connect to {url} with header \"Authorization: Bearer <contents of {}>\"",
                    token_file.display()
                );
            }
        }
        println!();
    }
    println!(
        "Review proposals with `bridle --data-dir {} rules queue`.",
        dir.display()
    );
}
