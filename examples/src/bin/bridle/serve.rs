//! `bridle serve` and `bridle init`: the gateway on loopback, laid out on first start.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

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

pub(crate) async fn serve(
    dir: &Path,
    listen: Option<String>,
    shutdown_grace: Duration,
    json_log: bool,
) -> Result<(), BoxError> {
    init(dir)?;
    let mut config = crate::load_config(dir)?;
    if let Some(l) = listen {
        config.listen = l;
    }
    let addr = config.listen_addr()?;
    config.check_exposure(addr)?;
    let mut builder = GatewayBuilder::new(dir, config.clone()).shutdown_grace(shutdown_grace);
    if config.memory.is_some() {
        builder = builder.memory(open_memory(dir, &config).await?);
    }
    let gateway = builder.build().await?;
    if let Some(path) = gateway.master_key_created() {
        let notice = format!(
            "created the vault's master key at {} (mode 0600). Back it up: without it the vault cannot be read.",
            path.display()
        );
        // A JSON log is read by a collector: every stderr line must be one JSON object.
        if json_log {
            tracing::warn!("{notice}");
        } else {
            eprintln!("bridle: {notice}");
        }
    }
    let has_memory = gateway.has_memory();
    let bound = gateway.bind(addr).await?;
    print_connect_help(dir, &config, &bound.url());
    if !has_memory {
        println!("{ENABLE_HINT}");
    }
    bound.run(shutdown_signal()).await?;
    tracing::info!("bridle serve stopped");
    Ok(())
}

/// `bridle health`: GETs `/healthz` (or `/readyz`) of the gateway at `url`, else at the
/// configured listen address; prints the answer; exit 0 on `200`.
pub(crate) async fn health(
    dir: &Path,
    url: Option<String>,
    ready: bool,
) -> Result<ExitCode, BoxError> {
    let base = match url {
        Some(u) => u.trim_end_matches('/').to_string(),
        None => {
            let mut addr = crate::load_config(dir)?.listen_addr()?;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            format!("http://{addr}")
        }
    };
    let path = if ready { "/readyz" } else { "/healthz" };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let response = client.get(format!("{base}{path}")).send().await?;
    let status = response.status();
    println!("{}", response.text().await.unwrap_or_default());
    Ok(if status.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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
                tracing::info!("shutdown signal received");
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
        // A token file is read when the command runs; a vault-issued token was shown once when
        // it was issued, so the command reads it from $BRIDLE_TOKEN.
        let token_source = match &agent.token_secret {
            Some(secret) => format!(
                "$(cat {})",
                shell_quote(&secrets.join(secret).display().to_string())
            ),
            None => {
                println!(
                    "(agent `{name}` uses a vault-issued token: `bridle agents token issue {name}` prints it once; export it as BRIDLE_TOKEN)"
                );
                "$BRIDLE_TOKEN".to_string()
            }
        };
        let token_file = &token_source;
        let bearer = format!("\"Authorization: Bearer {token_source}\"");
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
                if agent.token_secret.is_some() {
                    println!("  and before starting codex: export BRIDLE_TOKEN=\"{token_file}\"");
                }
            }
            other => {
                println!(
                    "{other} (agent `{name}`): connect to {url} with header \"Authorization: Bearer {token_file}\""
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
