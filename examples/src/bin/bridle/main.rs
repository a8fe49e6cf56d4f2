//! `bridle`: the Bridle gateway and its command line.
//!
//! - `bridle serve`: one MCP endpoint on loopback for every coding agent (rules tools and
//!   resources, per-agent bearer tokens from the secrets folder). On first start it lays out a
//!   data directory on embedded defaults and prints how Claude Code, Codex and Gemini CLI connect.
//! - `bridle health [--ready]`: asks a running gateway's `/healthz` (or `/readyz`); exits 0
//!   when it answers 200 (the container image's health check).
//! - `bridle render --project P --agent A [--out DIR] [--check | --force]`: writes an agent's
//!   instruction file, or (with `--check`) shows the diff and exits 1 when the file on disk is
//!   stale; a file Bridle did not write is replaced only with `--force`.
//! - `bridle rules queue|approve|reject|log|source-vendor|run-feed|queue-suggestions|upgrade`:
//!   the human side of the review queue. Approving is only ever done by a person (here or in the
//!   web panel), never by an agent.
//! - `bridle kanboard serve --url URL --project ID`: the Kanboard tools alone, over stdio.
//! - `bridle scope list|approve|deny`: decide agents' scope-expansion tickets.
//! - `bridle agents ...`, `bridle secrets ...`, `bridle scope ...`, `bridle rules ...`,
//!   `bridle memory ...`, `bridle audit ...` with `--url` (or
//!   `$BRIDLE_ADMIN_URL`) and an admin credential (`--admin-token-file`, `$BRIDLE_ADMIN_TOKEN_FILE`
//!   or `$BRIDLE_ADMIN_TOKEN`): the same commands as clients of a running gateway's admin API,
//!   so the gateway applies and records each change at once; without `--url` they work offline
//!   on the data directory.
//! - `bridle memory index|refresh|search|purge`: the pattern examples of a project's rules
//!   document in Bridle's memory (needs a `memory:` section in `bridle.yaml`); index and
//!   refresh show progress on stderr and write `last_indexed` back to the document.
//!
//! - `bridle audit verify|query|export`: the audit log of every change and tool call, through
//!   the admin API with `--url`, else read from the data directory; `verify` names the first
//!   edited, inserted or deleted entry.
//!
//! The data directory is `--data-dir`, else `$BRIDLE_DATA_DIR`, else `./bridle-data`. Other
//! settings come from `bridle.yaml`, with the environment's laid over it (`BRIDLE_LISTEN`,
//! `BRIDLE_MASTER_KEY_FILE`, `KANBOARD_URL`, ...; `bridle_gateway::edge` lists them) and the
//! command line's flags over both. Logs go to stderr, as text or (`--log-format json`) JSON.
//! `bridle serve` exports OpenTelemetry traces over OTLP when `traces:` in `bridle.yaml` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) says where.

#![allow(clippy::print_stdout)] // A command-line program prints its results on stdout.

/// mimalloc instead of glibc's malloc: the gateway's tokio workers and its upstream threads free
/// what another thread allocated on every forwarded call, and glibc's arenas then contend on
/// their locks. Measured on a forwarded call with 16 clients: about a third more calls a second
/// and about 28 % less CPU per call (`benches/README.md`, gateway upstream).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod agents;
mod audit;
mod client;
mod kanboard;
mod memory;
mod render;
mod rules;
mod scope;
mod secrets;
mod serve;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use bridle_gateway::config::GatewayConfig;
use bridle_gateway::edge::EdgeSettings;
use bridle_gateway::telemetry::Telemetry;
use bridle_rules::{AgentCatalog, Renderer, RulesStore};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "bridle",
    version,
    about = "Bridle: one set of rules for every coding agent"
)]
struct Cli {
    /// The data directory (default: $BRIDLE_DATA_DIR, else ./bridle-data).
    #[arg(long, global = true, help_heading = "Global options")]
    data_dir: Option<PathBuf>,
    /// Log level on stderr: error, warn, info, debug, trace (default: $BRIDLE_LOG, else warn).
    #[arg(long, global = true, help_heading = "Global options")]
    log: Option<String>,
    /// Log format on stderr: `text` (for people) or `json` (one object a line, for log
    /// collectors) (default: $BRIDLE_LOG_FORMAT, else text).
    #[arg(long, global = true, value_enum, help_heading = "Global options")]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the data directory on embedded defaults (serve does this too). Works offline.
    /// On a new directory it prints each demo agent's vault token, this once.
    Init {
        /// Keep each demo agent's token as a 0600 file in `secrets/` (`<agent>-token`) instead
        /// of in the vault: for setups that hand every credential over as a file.
        #[arg(long)]
        token_files: bool,
    },
    /// Serve the MCP endpoint on loopback, and the admin API beside it (`admin:` in bridle.yaml;
    /// its credential is created in the vault and printed once on first start).
    Serve {
        /// Address to listen on, overriding $BRIDLE_LISTEN and the configuration; port 0
        /// picks a free port. Not loopback only with `allowed_hosts` and `allowed_origins`.
        #[arg(long)]
        listen: Option<String>,
        /// Address of the admin API (loopback only), overriding `admin.listen`; default: the
        /// port after the MCP endpoint's.
        #[arg(long)]
        admin_listen: Option<String>,
        /// Seconds in-flight calls may take to finish after SIGTERM or Ctrl-C (at most a day).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(..=86_400))]
        shutdown_grace: u64,
    },
    /// Ask a running gateway whether it is alive (`/healthz`) or ready (`--ready`, `/readyz`);
    /// exits 0 when it is. The container image's health check.
    Health {
        /// The gateway's base URL (default: its listen address from the configuration, with
        /// an unspecified address asked on loopback).
        #[arg(long)]
        url: Option<String>,
        /// Ask `/readyz` instead of `/healthz`.
        #[arg(long)]
        ready: bool,
    },
    /// Render a project's rules into an agent's instruction file.
    Render {
        /// The project id.
        #[arg(long)]
        project: String,
        /// The agent type (claude, codex, kimi, deepseek, gemini, cursor, copilot, ...);
        /// several, comma-separated, when their files differ (`claude,codex,cursor`).
        #[arg(long)]
        agent: String,
        /// The project root to write into, a folder that exists (default: the current
        /// directory).
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Do not write; show the diff and exit 1 when the file on disk is stale.
        #[arg(long)]
        check: bool,
        /// Replace a file Bridle did not write (one without its "Generated by Bridle" notice,
        /// such as a hand-written CLAUDE.md); without it such a file is left as it is and
        /// nothing is written.
        #[arg(long, conflicts_with = "check")]
        force: bool,
    },
    /// The review queue: proposals from agents and vendor guidance (through a running gateway
    /// with --url, offline on the data directory without).
    Rules {
        #[command(subcommand)]
        command: rules::RulesCommand,
        #[command(flatten)]
        remote: client::Remote,
    },
    /// Scope-expansion tickets opened by agents (through a running gateway with --url).
    Scope {
        #[command(subcommand)]
        command: scope::ScopeCommand,
        #[command(flatten)]
        remote: client::Remote,
    },
    /// Pattern examples in Bridle's memory (needs a `memory:` section in bridle.yaml); through a
    /// running gateway with --url, offline on the data directory without.
    Memory {
        #[command(subcommand)]
        command: memory::MemoryCommand,
        #[command(flatten)]
        remote: client::Remote,
    },
    /// The vault's secrets (values are never shown); through a running gateway with --url.
    Secrets {
        #[command(subcommand)]
        command: secrets::SecretsCommand,
        #[command(flatten)]
        remote: client::Remote,
    },
    /// Agents and their vault-issued tokens; through a running gateway with --url.
    Agents {
        #[command(subcommand)]
        command: agents::AgentsCommand,
        #[command(flatten)]
        remote: client::Remote,
    },
    /// The audit log: verify its hash chain, query it, export it; through a running gateway
    /// with --url, offline on the data directory without.
    Audit {
        #[command(subcommand)]
        command: audit::AuditCommand,
        #[command(flatten)]
        remote: client::Remote,
    },
    /// The Kanboard tools on their own.
    #[command(subcommand)]
    Kanboard(kanboard::KanboardCommand),
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn data_dir(cli: &Cli) -> PathBuf {
    cli.data_dir
        .clone()
        .or_else(|| std::env::var_os("BRIDLE_DATA_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("bridle-data"))
}

/// A line of text from outside (an agent's guardrail statement or scope reason, a client's
/// name) as a terminal shows it: each control character, bidirectional control and Unicode
/// tag character written as its escape (`\r`, `\u{1b}`, `\u{202e}`, `\u{e0049}`), so a
/// carriage return, a terminal escape sequence or a right-to-left override cannot rewrite what
/// a person reads before deciding, and text a terminal shows nothing of is seen.
pub(crate) fn printable(line: &str) -> std::borrow::Cow<'_, str> {
    escaped_for_terminal(line, false)
}

/// A message for the terminal (the command's error, which may quote what a server, a file or
/// an agent said) as [`printable`] writes a line, its own line breaks kept.
pub(crate) fn printable_message(text: &str) -> std::borrow::Cow<'_, str> {
    escaped_for_terminal(text, true)
}

/// `text` with each control character (line breaks too unless `keep_line_breaks`), each
/// bidirectional control and each tag character written as its escape; borrowed when there is
/// none.
fn escaped_for_terminal(text: &str, keep_line_breaks: bool) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && !(keep_line_breaks && c == '\n'))
            || bridle_rules::is_bidi_control(c)
            || bridle_rules::is_tag_character(c)
    };
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

pub(crate) fn who(by: Option<String>) -> String {
    by.or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "cli".to_string())
}

/// The store and renderer for command-line use: the configuration's templates folder when
/// there is a configuration, the data directory's `templates/` otherwise.
/// With `database: postgres://...` the store opens on that database (the password resolved
/// through the vault), as `bridle serve` does. A `bridle.yaml` that does not load is an error,
/// never passed over: the data directory's defaults would stand in for the database and
/// templates it names. A data directory that does not exist is an error too: a mistyped
/// `--data-dir` must not become a new, empty store.
pub(crate) fn open_store(dir: &Path) -> Result<(RulesStore, Renderer), BoxError> {
    if !dir.is_dir() {
        return Err(format!(
            "no data directory at {} (`bridle init` lays one out; --data-dir or $BRIDLE_DATA_DIR names another)",
            dir.display()
        )
        .into());
    }
    let config = if dir.join("bridle.yaml").exists() {
        Some(load_config(dir)?)
    } else {
        None
    };
    let templates = match &config {
        Some(c) => c.templates_path(dir),
        None => dir.join("templates"),
    };
    let catalog = AgentCatalog::load(&templates)?;
    let store = match config.as_ref().filter(|c| c.database.is_some()) {
        Some(c) => {
            let (vault, _) = bridle_gateway::gateway::open_vault(dir, c)?;
            bridle_gateway::db::StateDatabase::open(dir, c, &vault)?
                .open_rules(dir, catalog.clone())?
        }
        None => RulesStore::open(dir, catalog.clone())?,
    };
    Ok((store, Renderer::new(catalog)?))
}

/// The configuration of a data directory: `bridle.yaml` with the environment's settings laid
/// over it (see `bridle_gateway::edge` for the variables and their precedence).
pub(crate) fn load_config(dir: &Path) -> Result<GatewayConfig, BoxError> {
    let mut config = GatewayConfig::load(dir)?;
    let edge = EdgeSettings::from_lookup(|k| std::env::var(k).ok());
    if !edge.is_empty() {
        let set = config.overlay(&edge)?;
        tracing::info!(?set, "settings from the environment laid over bridle.yaml");
    }
    Ok(config)
}

/// Logs to stderr (stdout may carry results, or an MCP stdio channel) through the gateway's
/// filter, which never lets rmcp's message bodies into the log. With `telemetry`, the
/// gateway's trace spans go to its exporter beside the log (each layer with its own filter).
fn init_logging(level: &str, format: LogFormat, telemetry: Option<&Telemetry>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;
    let filter = bridle_gateway::logging::log_targets(level);
    let log: Boxed = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .with_filter(filter)
            .boxed(),
    };
    let mut layers = vec![log];
    if let Some(t) = telemetry {
        layers.push(Box::new(t.layer()));
    }
    let _ = tracing_subscriber::registry().with(layers).try_init();
}

/// The traces `bridle serve` exports, from `bridle.yaml` and the environment (read before
/// logging starts, so the exporter sees the first request): `None` when none are configured.
/// A data directory without `bridle.yaml` yet (a first start) has only the environment's.
fn serve_telemetry(dir: &Path) -> Result<Option<Telemetry>, BoxError> {
    let traces = if dir.join("bridle.yaml").exists() {
        load_config(dir)?.traces
    } else {
        let mut traces = None;
        EdgeSettings::from_lookup(|k| std::env::var(k).ok()).overlay_traces(&mut traces)?;
        traces
    };
    Ok(match traces {
        Some(section) => Some(Telemetry::otlp(&section)?),
        None => None,
    })
}

/// The log levels `--log` and `$BRIDLE_LOG` take (in any case).
const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (level, from) = match (&cli.log, std::env::var("BRIDLE_LOG").ok()) {
        (Some(l), _) => (l.clone(), "--log"),
        (None, Some(l)) if !l.is_empty() => (l, "BRIDLE_LOG"),
        _ => ("warn".to_string(), ""),
    };
    // The log filter reads anything else as `info`: a typo must not pass unnoticed.
    if !LOG_LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
        eprintln!(
            "error: {from} `{level}` is not a log level: one of {}",
            LOG_LEVELS.join(", ")
        );
        return ExitCode::FAILURE;
    }
    let format = match cli.log_format {
        Some(f) => f,
        None => match std::env::var("BRIDLE_LOG_FORMAT").ok().as_deref() {
            None | Some("") | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                eprintln!("error: BRIDLE_LOG_FORMAT `{other}` is neither `text` nor `json`");
                return ExitCode::FAILURE;
            }
        },
    };
    let dir = data_dir(&cli);
    let telemetry = match &cli.command {
        Command::Serve { .. } => match serve_telemetry(&dir) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {}", printable_message(&e.to_string()));
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    init_logging(&level, format, telemetry.as_ref());
    // A panic's message may quote the data it failed on: logged by location only, unless asked.
    bridle_gateway::logging::install_panic_hook(
        bridle_gateway::logging::PanicMessages::from_env_value(
            std::env::var("BRIDLE_LOG_PANIC_MESSAGES").ok().as_deref(),
        ),
    );
    let outcome = run(
        cli.command,
        &dir,
        format == LogFormat::Json,
        telemetry.clone(),
    );
    // Sends the spans still queued (outside the runtime: the exporter's client blocks).
    if let Some(t) = telemetry {
        t.shutdown();
    }
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", printable_message(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

fn run(
    command: Command,
    dir: &Path,
    json_log: bool,
    telemetry: Option<Telemetry>,
) -> Result<ExitCode, BoxError> {
    match command {
        Command::Init { token_files } => {
            serve::init(dir, token_files)?;
            println!("data directory ready: {}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            listen,
            admin_listen,
            shutdown_grace,
        } => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(serve::serve(
                dir,
                listen,
                admin_listen,
                std::time::Duration::from_secs(shutdown_grace),
                json_log,
                telemetry,
            ))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Health { url, ready } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(serve::health(dir, url, ready))
        }
        Command::Render {
            project,
            agent,
            out,
            check,
            force,
        } => render::render(dir, &project, &agent, &out, check, force),
        Command::Rules { command, remote } => match remote.client()? {
            Some(api) => rules::rules_remote(&api, command),
            None => rules::rules(dir, command),
        },
        Command::Scope { command, remote } => match remote.client()? {
            Some(api) => scope::scope_remote(&api, command),
            None => scope::scope(dir, command),
        },
        Command::Secrets { command, remote } => match remote.client()? {
            Some(api) => secrets::secrets_remote(&api, command),
            None => secrets::secrets(dir, command),
        },
        Command::Agents { command, remote } => match remote.client()? {
            Some(api) => agents::agents_remote(&api, command),
            None => agents::agents(dir, command),
        },
        Command::Audit { command, remote } => match remote.client()? {
            Some(api) => audit::audit_remote(&api, command),
            None => audit::audit(dir, command),
        },
        Command::Memory { command, remote } => match remote.client()? {
            Some(api) => memory::remote::memory_remote(&api, command),
            None => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(memory::memory(dir, command))
            }
        },
        Command::Kanboard(c) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(kanboard::kanboard(c))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
