//! `bridle serve` and `bridle init`: the gateway on loopback, laid out on first start, with the
//! admin API and the web panel beside it (`admin:` in bridle.yaml; loopback, the port after the
//! MCP endpoint's by default). The admin credential is kept in the vault, created and printed
//! once on first start, or read from `admin.token_file` (a Docker secret).

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::admin::AdminCredentials;
use bridle_gateway::admin::credential::{
    VaultAdmins, admin_from_file, admin_secret_name, ensure_vault_admin,
};
use bridle_gateway::config::{
    GatewayConfig, demo_document, init_data_dir, init_data_dir_with_token_files,
};
use bridle_gateway::gateway::{issue_first_tokens, open_vault};
use bridle_gateway::memory::ENABLE_HINT;
use bridle_gateway::vault::IssuedToken;
use bridle_rules::{AgentCatalog, RulesStore};

use crate::BoxError;
use crate::memory::open_served_memory;

/// `println!` for a running gateway: a closed stdout (its reader gone, as in
/// `bridle serve | head -1`) loses the text but never stops the gateway, which only announces
/// on stdout and logs on stderr.
macro_rules! say {
    () => {
        say!("")
    };
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// Who the first start's vault operations are recorded as.
const FIRST_START_ACTOR: &str = "bridle-first-start";

/// Creates the data directory and the demo project when they do not exist; returns whether it
/// did. `token_files` lays out the agents' tokens as files instead of in the vault.
fn lay_out(dir: &Path, token_files: bool) -> Result<bool, BoxError> {
    let report = if token_files {
        init_data_dir_with_token_files(dir)?
    } else {
        init_data_dir(dir)?
    };
    let store = RulesStore::open(dir, AgentCatalog::builtin())?;
    if report.created && store.projects()?.is_empty() {
        store.create("demo", &demo_document(), "bridle-init")?;
    }
    Ok(report.created)
}

/// `bridle init`: lays out the data directory offline. On a new directory the demo agents'
/// vault tokens are issued and printed here, once.
pub(crate) fn init(dir: &Path, token_files: bool) -> Result<(), BoxError> {
    if !lay_out(dir, token_files)? {
        println!(
            "bridle: {} is already set up; nothing changed",
            dir.display()
        );
        return Ok(());
    }
    let config = crate::load_config(dir)?;
    let (vault, key_created) = open_vault(dir, &config)?;
    if let Some(path) = key_created {
        master_key_notice(&path, false);
    }
    let issued = issue_first_tokens(&vault, &config, FIRST_START_ACTOR)?;
    println!("bridle: set up {}", dir.display());
    for t in &issued {
        println!(
            "agent `{}`: token {} (shown this once; `bridle agents token rotate {}` issues a new one)",
            t.agent,
            t.token.expose_str().unwrap_or_default(),
            t.agent
        );
    }
    Ok(())
}

fn master_key_notice(path: &Path, json_log: bool) {
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

pub(crate) async fn serve(
    dir: &Path,
    listen: Option<String>,
    admin_listen: Option<String>,
    shutdown_grace: Duration,
    json_log: bool,
    telemetry: Option<bridle_gateway::telemetry::Telemetry>,
) -> Result<(), BoxError> {
    let first_start = lay_out(dir, false)?;
    let mut config = crate::load_config(dir)?;
    if let Some(l) = listen {
        config.listen = l;
    }
    if let Some(l) = admin_listen {
        config.admin.listen = Some(l);
    }
    let addr = config.listen_addr()?;
    config.check_exposure(addr)?;
    let admin_addr = config.admin.listen_addr(addr)?;
    let mut builder = GatewayBuilder::new(dir, config.clone()).shutdown_grace(shutdown_grace);
    if let Some(t) = telemetry {
        if let Some(traces) = &config.traces {
            tracing::info!(endpoint = %bridle_rules::redact_url(&traces.otlp.endpoint), service = %traces.service_name, "exporting traces over OTLP");
        }
        builder = builder.telemetry(t);
    }
    if config.memory.is_some() {
        builder = builder.memory(open_served_memory(dir, &config).await?);
    }
    let mut gateway = builder.build().await?;
    if let Some(path) = gateway.master_key_created() {
        master_key_notice(path, json_log);
    }
    // The demo agents' tokens exist in the clear only now, and are shown in the one-liners
    // below this once.
    let issued = if first_start {
        issue_first_tokens(gateway.vault(), &config, FIRST_START_ACTOR)?
    } else {
        Vec::new()
    };
    let mut new_admin_token = None;
    if config.admin.enabled {
        let name = config.admin.name.clone();
        let credentials: Arc<dyn AdminCredentials> = match &config.admin.token_file {
            Some(file) => Arc::new(admin_from_file(&name, file)?),
            None => {
                new_admin_token = ensure_vault_admin(gateway.vault(), &name, "bridle-serve")?;
                Arc::new(VaultAdmins::new(Arc::clone(gateway.vault()), vec![name]))
            }
        };
        gateway = gateway.with_admin(admin_addr, credentials);
    }
    let has_memory = gateway.has_memory();
    let bound = gateway.bind(addr).await?;
    // The panel as bridle.yaml's admin section describes it (behind_tls, allowed_origins; its
    // log-ins count within the admin API's login_limits), its connect snippets naming the MCP
    // address agents really reach.
    let mcp_url = bound.url();
    // Also in the log, which may be all an operator (or a supervisor) reads: stdout may be
    // closed, and with `--listen 127.0.0.1:0` the port is known only here.
    tracing::info!(url = %mcp_url, "the MCP endpoint is listening");
    let panel = bound.gateway().panel_config().mcp_url(mcp_url);
    let bound = bound.panel(Some(panel));
    print_connect_help(dir, &config, &bound.url(), &issued);
    if let Some(admin_url) = bound.admin_url() {
        say!("bridle: admin API on {admin_url}");
        match new_admin_token {
            Some(token) => {
                say!(
                    "admin credential for `{}` (kept in the vault as `{}`), shown once:",
                    config.admin.name,
                    admin_secret_name(&config.admin.name)
                );
                say!("{}", token.expose_str().unwrap_or_default());
                say!(
                    "Save it (for example as BRIDLE_ADMIN_TOKEN); `bridle secrets rotate {}` sets a new one.",
                    admin_secret_name(&config.admin.name)
                );
            }
            None => say!(
                "(the admin credential is {}; send it as `Authorization: Bearer <token>`)",
                match &config.admin.token_file {
                    Some(f) => format!("in {}", f.display()),
                    None => format!(
                        "in the vault as `{}`, shown when it was created",
                        admin_secret_name(&config.admin.name)
                    ),
                }
            ),
        }
        // The binary always builds the panel; the admin listener serves it under /panel/.
        let origin = admin_url.trim_end_matches(bridle_gateway::admin::BASE_PATH);
        say!("bridle: web panel on {origin}/panel/ (log in with the admin credential)");
        say!();
    }
    if !has_memory {
        say!("{ENABLE_HINT}");
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
    let url = format!("{base}{path}");
    let response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| crate::client::unreachable("the gateway", &url, e, "5 s"))?;
    let status = response.status();
    if status == reqwest::StatusCode::NOT_FOUND {
        // Another listener (the admin API's), or the MCP endpoint's URL with its `/mcp`: the
        // checks are not there.
        let at = url.split_once('?').map_or(url.as_str(), |(at, _)| at);
        return Err(format!(
            "{} answered 404 Not Found: is --url the gateway's MCP listener, without `/mcp` (the address `bridle serve` prints as \"listening on\")?",
            bridle_rules::redact_url(at)
        )
        .into());
    }
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
/// client. Each command line is meant to be pasted into a POSIX shell as printed. A token file
/// is read when the command runs (its path shell-quoted), so the token never appears here; a
/// vault token just issued (`issued`, first start only) is printed in its one-liner this once;
/// any other vault token is read from `$BRIDLE_TOKEN`.
fn print_connect_help(dir: &Path, config: &GatewayConfig, url: &str, issued: &[IssuedToken]) {
    let secrets = config.secrets_path(dir);
    let secrets = std::fs::canonicalize(&secrets).unwrap_or(secrets);
    say!("bridle: listening on {url}");
    say!();
    if !issued.is_empty() {
        say!(
            "First start: each agent's token is in its command below, shown this once (the vault keeps only a keyed hash)."
        );
        say!();
    }
    for (name, agent) in &config.agents {
        let fresh = issued.iter().find(|t| &t.agent == name);
        let token_source = match (&agent.token_secret, fresh) {
            (Some(secret), _) => format!(
                "$(cat {})",
                shell_quote(&secrets.join(secret).display().to_string())
            ),
            (None, Some(t)) => t.token.expose_str().unwrap_or_default().to_string(),
            (None, None) => {
                say!(
                    "(agent `{name}` uses a vault-issued token: `bridle agents token rotate {name}` prints a new one once; export it as BRIDLE_TOKEN)"
                );
                "$BRIDLE_TOKEN".to_string()
            }
        };
        let token_file = &token_source;
        let bearer = format!("\"Authorization: Bearer {token_source}\"");
        match agent.agent_type.as_str() {
            "claude" => {
                say!("Claude Code (agent `{name}`):");
                say!(
                    "  claude mcp add --scope user --transport http bridle {url} --header {bearer}"
                );
            }
            "gemini" => {
                say!("Gemini CLI (agent `{name}`):");
                say!(
                    "  gemini mcp add --scope user --transport http bridle {url} --header {bearer}"
                );
            }
            "codex" => {
                say!("Codex (agent `{name}`), in ~/.codex/config.toml:");
                say!("  [mcp_servers.bridle]");
                say!("  url = \"{url}\"");
                say!("  bearer_token_env_var = \"BRIDLE_TOKEN\"");
                if agent.token_secret.is_some() || fresh.is_some() {
                    say!("  and before starting codex: export BRIDLE_TOKEN=\"{token_file}\"");
                }
            }
            other => {
                say!(
                    "{other} (agent `{name}`): connect to {url} with header \"Authorization: Bearer {token_file}\""
                );
            }
        }
        say!();
    }
    say!(
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
