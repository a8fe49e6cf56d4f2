//! `bridle serve` and `bridle init`: the gateway on loopback, laid out on first start.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::config::{GatewayConfig, MCP_PATH, demo_document, init_data_dir};
use bridle_gateway::memory::{AgentProjects, ENABLE_HINT, RulesWriteBack};
use bridle_gateway::resources::watch;
use bridle_gateway::{BridleAuth, GatewayContext, build_app, build_app_with};
use bridle_rules::{AgentCatalog, RulesStore};
use kberg_server::{HttpConfig, HttpServer};

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
    if !addr.ip().is_loopback() {
        return Err(
            format!("{addr} is not a loopback address; Bridle serves on loopback only").into(),
        );
    }
    let memory = match &config.memory {
        Some(_) => Some(open_memory(dir, &config).await?),
        None => None,
    };
    let shared = GatewayContext::open(dir, config)?;
    let auth = BridleAuth::new(dir, Arc::clone(&shared))?;
    let tools = memory.as_ref().map(|m| {
        let mut tools = m.tools();
        tools.on_indexed = Some(Arc::new(RulesWriteBack {
            gw: Arc::clone(&shared),
        }) as Arc<dyn bridle_memory::tools::IndexListener>);
        tools.access = Some(Arc::new(AgentProjects {
            gw: Arc::clone(&shared),
        }) as Arc<dyn bridle_memory::tools::ProjectAccess>);
        tools
    });
    let app = match tools {
        Some(tools) => build_app_with(&shared, Some(tools))?,
        None => build_app(&shared)?,
    };
    let http = HttpConfig::new(addr).path(MCP_PATH).auth(auth);
    let server = HttpServer::bind(app.clone(), http).await?;
    let url = format!("http://{}{MCP_PATH}", server.local_addr());
    print_connect_help(dir, &shared.config, &url);
    if memory.is_none() {
        println!("{ENABLE_HINT}");
    }

    let stop = server.shutdown_token();
    let watcher = tokio::spawn(watch(
        Arc::clone(&shared),
        app.resources().clone(),
        dir.join("projects"),
        Duration::from_millis(250),
        stop.clone(),
    ));
    server.run(shutdown_signal()).await?;
    stop.cancel();
    let _ = watcher.await;
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

/// Prints the listening address and, per agent, the command that registers the gateway in its
/// client. Each command line is meant to be pasted into a POSIX shell as printed: the token is
/// read from its secret file when the command runs (so it never appears in this output), and
/// the file's path is shell-quoted.
fn print_connect_help(dir: &Path, config: &GatewayConfig, url: &str) {
    let secrets = config.secrets_path(dir);
    let secrets = std::fs::canonicalize(&secrets).unwrap_or(secrets);
    println!("bridle: listening on {url}");
    println!();
    for (name, agent) in &config.agents {
        let token_file = shell_quote(&secrets.join(&agent.token_secret).display().to_string());
        let bearer = format!("\"Authorization: Bearer $(cat {token_file})\"");
        match agent.agent_type.as_str() {
            "claude" => {
                println!("Claude Code (agent `{name}`):");
                println!(
                    "  claude mcp add --scope user --transport http bridle {url} --header {bearer}"
                );
            }
            "gemini" => {
                println!("Gemini CLI (agent `{name}`):");
                println!(
                    "  gemini mcp add --scope user --transport http bridle {url} --header {bearer}"
                );
            }
            "codex" => {
                println!("Codex (agent `{name}`), in ~/.codex/config.toml:");
                println!("  [mcp_servers.bridle]");
                println!("  url = \"{url}\"");
                println!("  bearer_token_env_var = \"BRIDLE_TOKEN\"");
                println!(
                    "  and before starting codex: export BRIDLE_TOKEN=\"$(cat {token_file})\""
                );
            }
            other => {
                println!(
                    "{other} (agent `{name}`): connect to {url} with header \"Authorization: Bearer <contents of {token_file}>\""
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

/// `text` as one POSIX shell word: unchanged when it holds only characters no shell treats
/// specially, else in single quotes (a single quote inside becomes `'\''`).
fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}
