//! `bridle`: the Bridle gateway and its command line.
//!
//! - `bridle serve`: one MCP endpoint on loopback for every coding agent (rules tools and
//!   resources, per-agent bearer tokens from the secrets folder). On first start it lays out a
//!   data directory on embedded defaults and prints how Claude Code and Codex connect.
//! - `bridle render --project P --agent A [--out DIR] [--check]`: writes an agent's instruction
//!   file, or (with `--check`) shows the diff and exits 1 when the file on disk is stale.
//! - `bridle rules queue|approve|reject|log|source-vendor|queue-suggestions|upgrade`: the human side of the review
//!   queue. Approving is only ever done here (or, later, in the web panel), never by an agent.
//! - `bridle scope list|approve|deny`: decide agents' scope-expansion tickets.
//! - `bridle memory index|refresh|search|purge`: the pattern examples of a project's rules
//!   document in Bridle's memory (needs a `memory:` section in `bridle.yaml`); index and
//!   refresh show progress on stderr and write `last_indexed` back to the document.
//!
//! The data directory is `--data-dir`, else `$BRIDLE_DATA_DIR`, else `./bridle-data`.

#![allow(clippy::print_stdout)] // A command-line program prints its results on stdout.

#[path = "../bridle/mod.rs"]
mod bridle;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bridle::config::{GatewayConfig, MCP_PATH, demo_document, init_data_dir};
use bridle::gateway::{BridleAuth, Shared, build_app, build_app_with, watch};
use bridle::memory::{AgentProjects, ENABLE_HINT, RulesWriteBack, write_last_indexed};
use bridle_rules::{AgentCatalog, Renderer, RulesStore, fsutil::write_atomic};
use clap::{Parser, Subcommand};
use kberg_server::{HttpConfig, HttpServer};

#[derive(Debug, Parser)]
#[command(
    name = "bridle",
    version,
    about = "Bridle: one set of rules for every coding agent"
)]
struct Cli {
    /// The data directory (default: $BRIDLE_DATA_DIR, else ./bridle-data).
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Log level on stderr: error, warn, info, debug, trace.
    #[arg(long, global = true, default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create the data directory on embedded defaults (serve does this too).
    Init,
    /// Serve the MCP endpoint on loopback.
    Serve {
        /// Address to listen on (loopback only), overriding the configuration; port 0 picks a
        /// free port.
        #[arg(long)]
        listen: Option<String>,
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
        /// The project root to write into (default: the current directory).
        #[arg(long, default_value = ".")]
        out: PathBuf,
        /// Do not write; show the diff and exit 1 when the file on disk is stale.
        #[arg(long)]
        check: bool,
    },
    /// The review queue: proposals from agents and vendor guidance.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// Scope-expansion tickets opened by agents.
    #[command(subcommand)]
    Scope(ScopeCommand),
    /// Pattern examples in Bridle's memory (needs a `memory:` section in bridle.yaml).
    #[command(subcommand)]
    Memory(MemoryCommand),
}

#[derive(Debug, Subcommand)]
enum MemoryCommand {
    /// Index the example repository the project lists under `patterns.custom[].example_repos`
    /// with this reference tag (a git URL or a local path).
    Index {
        /// The project id.
        #[arg(long)]
        project: String,
        /// The example's reference tag.
        #[arg(long)]
        tag: String,
    },
    /// Re-index an example that was indexed before; its chunks are replaced atomically.
    Refresh {
        /// The project id.
        #[arg(long)]
        project: String,
        /// The example's reference tag.
        #[arg(long)]
        tag: String,
    },
    /// Search the project's pattern examples by meaning.
    Search {
        /// The project id.
        #[arg(long)]
        project: String,
        /// What to look for.
        query: String,
        /// Only examples of this architecture pattern.
        #[arg(long)]
        arch_tag: Option<String>,
        /// How many results.
        #[arg(long, default_value_t = 5)]
        k: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an example's chunks from memory.
    Purge {
        /// The project id.
        #[arg(long)]
        project: String,
        /// The example's reference tag.
        #[arg(long)]
        tag: String,
    },
}

#[derive(Debug, Subcommand)]
enum RulesCommand {
    /// List pending proposals (or all, with --all).
    Queue {
        /// Only this project.
        #[arg(long)]
        project: Option<String>,
        /// Include decided proposals.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a proposal: it becomes part of the project's rules, with its provenance.
    Approve {
        /// The proposal id.
        id: u64,
        /// Who approves (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Reject a proposal, saying why.
    Reject {
        /// The proposal id.
        id: u64,
        /// Why.
        #[arg(long)]
        reason: String,
        /// Who rejects (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// The change log, with the source of every change.
    Log {
        /// Only this project.
        #[arg(long)]
        project: Option<String>,
    },
    /// Read a vendor's published guidance (URL or file) and queue its suggestions for an agent.
    SourceVendor {
        /// The project id.
        #[arg(long)]
        project: String,
        /// The agent type the guidance is for.
        #[arg(long)]
        agent: String,
        /// An http(s) URL or a local file.
        #[arg(long)]
        from: String,
    },
    /// Queue the vendor suggestions written in a document's `agent_profiles` for review.
    QueueSuggestions {
        /// The project id.
        #[arg(long)]
        project: String,
    },
    /// Rewrite an older document in the current schema version.
    Upgrade {
        /// The project id.
        #[arg(long)]
        project: String,
    },
}

#[derive(Debug, Subcommand)]
enum ScopeCommand {
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

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn data_dir(cli: &Cli) -> PathBuf {
    cli.data_dir
        .clone()
        .or_else(|| std::env::var_os("BRIDLE_DATA_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("bridle-data"))
}

fn who(by: Option<String>) -> String {
    by.or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "cli".to_string())
}

/// The store and renderer for command-line use: the configuration's templates folder when
/// there is a configuration, the data directory's `templates/` otherwise.
fn open_store(dir: &Path) -> Result<(RulesStore, Renderer), BoxError> {
    let templates = match GatewayConfig::load(dir) {
        Ok(c) => c.templates_path(dir),
        Err(_) => dir.join("templates"),
    };
    let catalog = AgentCatalog::load(&templates)?;
    Ok((
        RulesStore::open(dir, catalog.clone())?,
        Renderer::new(catalog)?,
    ))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    kberg_examples::init_logging(&cli.log);
    let dir = data_dir(&cli);
    match run(cli.command, &dir) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command, dir: &Path) -> Result<ExitCode, BoxError> {
    match command {
        Command::Init => {
            init(dir)?;
            println!("data directory ready: {}", dir.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { listen } => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(serve(dir, listen))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Render {
            project,
            agent,
            out,
            check,
        } => render(dir, &project, &agent, &out, check),
        Command::Rules(c) => rules(dir, c),
        Command::Scope(c) => scope(dir, c),
        Command::Memory(c) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(memory(dir, c))
        }
    }
}

/// Creates the data directory and the demo project when they do not exist.
fn init(dir: &Path) -> Result<(), BoxError> {
    let report = init_data_dir(dir)?;
    let store = RulesStore::open(dir, AgentCatalog::builtin())?;
    if report.created && store.projects()?.is_empty() {
        store.create("demo", &demo_document(), "bridle-init")?;
    }
    Ok(())
}

fn render(
    dir: &Path,
    project: &str,
    agents: &str,
    out: &Path,
    check: bool,
) -> Result<ExitCode, BoxError> {
    let (store, renderer) = open_store(dir)?;
    let doc = store.load(project)?.document;
    // Render everything first: nothing is written unless every agent renders.
    let mut rendered: Vec<bridle_rules::Rendered> = Vec::new();
    for agent in agents.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        let r = renderer.render(project, &doc, agent)?;
        if let Some(other) = rendered.iter().find(|o| o.path == r.path) {
            return Err(format!(
                "agents `{}` and `{agent}` both write {}; render them into different folders",
                other.agent, r.path
            )
            .into());
        }
        rendered.push(r);
    }
    if rendered.is_empty() {
        return Err("name at least one agent with --agent".into());
    }
    let mut stale = false;
    for r in &rendered {
        let path = out.join(&r.path);
        if check {
            match Renderer::check(out, r)? {
                None => println!("{} is up to date", path.display()),
                Some(diff) => {
                    print!("{diff}");
                    eprintln!(
                        "{} is stale; run `bridle render --project {project} --agent {}` to update it",
                        path.display(),
                        r.agent
                    );
                    stale = true;
                }
            }
        } else {
            write_atomic(&path, r.content.as_bytes())?;
            println!("wrote {}", path.display());
        }
    }
    Ok(if stale {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn rules(dir: &Path, command: RulesCommand) -> Result<ExitCode, BoxError> {
    let (store, _) = open_store(dir)?;
    match command {
        RulesCommand::Queue { project, all, json } => {
            let queue = store.queue(project.as_deref(), all)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&queue)?);
            } else if queue.is_empty() {
                println!("no pending proposals");
            } else {
                for p in queue {
                    println!(
                        "#{} [{}] {}: {} (from {} {}{}{})",
                        p.id,
                        p.status.as_str(),
                        p.project,
                        p.summary,
                        p.origin.source.as_str(),
                        p.origin.proposed_by,
                        p.origin
                            .agent_session
                            .as_deref()
                            .map(|s| format!(", session {s}"))
                            .unwrap_or_default(),
                        p.origin
                            .source_ref
                            .as_deref()
                            .map(|s| format!(", {s}"))
                            .unwrap_or_default(),
                    );
                }
            }
        }
        RulesCommand::Approve { id, by } => {
            let p = store.approve(id, &who(by))?;
            println!(
                "approved #{}: {} (project {} is now at revision {})",
                p.id,
                p.summary,
                p.project,
                p.applied_revision.unwrap_or_default()
            );
        }
        RulesCommand::Reject { id, reason, by } => {
            let p = store.reject(id, &who(by), &reason)?;
            println!("rejected #{}: {}", p.id, p.summary);
        }
        RulesCommand::Log { project } => {
            for c in store.changes(project.as_deref(), 0)? {
                println!(
                    "{} {} r{} [{}] by {}: {}{}",
                    c.at,
                    c.project,
                    c.revision,
                    c.source.as_str(),
                    c.actor,
                    c.summary,
                    c.proposal_id
                        .map(|p| format!(" (proposal #{p})"))
                        .unwrap_or_default()
                );
            }
        }
        RulesCommand::SourceVendor {
            project,
            agent,
            from,
        } => {
            let text = read_source(&from)?;
            let report = store.queue_vendor_guidance(&project, &agent, &from, &text)?;
            println!(
                "queued {} suggestion(s) for review ({} already known)",
                report.queued.len(),
                report.skipped
            );
        }
        RulesCommand::QueueSuggestions { project } => {
            let report = store.queue_profile_suggestions(&project)?;
            println!(
                "queued {} suggestion(s) for review ({} already known)",
                report.queued.len(),
                report.skipped
            );
        }
        RulesCommand::Upgrade { project } => match store.upgrade(&project, &who(None))? {
            Some(from) => println!("migrated {project} from schema_version {from}"),
            None => println!("{project} is already at the current schema version"),
        },
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads vendor guidance from a URL or a file.
fn read_source(from: &str) -> Result<String, BoxError> {
    if from.starts_with("http://") || from.starts_with("https://") {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let text = runtime.block_on(async {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()?;
            let response = client.get(from).send().await?.error_for_status()?;
            response.text().await
        });
        return text.map_err(|e| {
            format!(
                "fetching {from} failed: {e}{}",
                if from.starts_with("https://") && cfg!(not(feature = "rustls")) {
                    " (this build has no TLS: rebuild with `--features rustls`, or save the page and pass the file)"
                } else {
                    ""
                }
            )
            .into()
        });
    }
    std::fs::read_to_string(from).map_err(|e| format!("{from}: {e}").into())
}

fn scope(dir: &Path, command: ScopeCommand) -> Result<ExitCode, BoxError> {
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

/// Opens the memory service the configuration describes, or says how to configure it.
async fn open_memory(
    dir: &Path,
    config: &GatewayConfig,
) -> Result<bridle_memory::MemoryService, BoxError> {
    let Some(section) = &config.memory else {
        return Err(format!(
            "memory is not configured in {}: add a `memory:` section (see README-bridle.md)",
            dir.join("bridle.yaml").display()
        )
        .into());
    };
    let memory_config = section.to_config(dir, &config.secrets_path(dir))?;
    Ok(bridle_memory::MemoryService::open(&memory_config).await?)
}

/// The example repository a project's rules document lists under `tag`.
fn example_repo(
    store: &RulesStore,
    project: &str,
    tag: &str,
) -> Result<bridle_memory::ExampleRepo, BoxError> {
    let doc = store.load(project)?.document;
    let repos: Vec<&bridle_rules::ExampleRepo> = doc
        .patterns
        .custom
        .iter()
        .flat_map(|p| p.example_repos.iter())
        .collect();
    match repos.iter().find(|r| r.reference_tag == tag) {
        Some(r) => Ok(bridle_memory::ExampleRepo {
            url: r.url.clone(),
            reference_tag: r.reference_tag.clone(),
            arch_tag: r.arch_tag.clone(),
        }),
        None => Err(format!(
            "project `{project}` lists no example repository tagged `{tag}` under patterns.custom[].example_repos (its tags: {})",
            if repos.is_empty() {
                "none".to_string()
            } else {
                repos
                    .iter()
                    .map(|r| r.reference_tag.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        )
        .into()),
    }
}

async fn memory(dir: &Path, command: MemoryCommand) -> Result<ExitCode, BoxError> {
    let (store, _) = open_store(dir)?;
    let config = GatewayConfig::load(dir)?;
    let memory = open_memory(dir, &config).await?;
    let progress = bridle_memory::BarProgress::new(std::io::stderr());
    let (project, report) = match command {
        MemoryCommand::Index { project, tag } => {
            let repo = example_repo(&store, &project, &tag)?;
            (project, memory.patterns.index(&repo, &progress).await?)
        }
        MemoryCommand::Refresh { project, tag } => {
            let repo = example_repo(&store, &project, &tag)?;
            let indexed = memory.patterns.examples().await?;
            if !indexed.iter().any(|e| e.reference_tag == tag) {
                return Err(format!(
                    "`{tag}` has not been indexed yet; run `bridle memory index --project {project} --tag {tag}`"
                )
                .into());
            }
            (project, memory.patterns.index(&repo, &progress).await?)
        }
        MemoryCommand::Search {
            project,
            query,
            arch_tag,
            k,
            json,
        } => {
            // Only the project's own examples: search wider, keep the project's tags.
            let doc = store.load(&project)?.document;
            let tags: Vec<String> = doc
                .patterns
                .custom
                .iter()
                .flat_map(|p| p.example_repos.iter())
                .map(|r| r.reference_tag.clone())
                .collect();
            let k = k.clamp(1, 50);
            let hits: Vec<bridle_memory::PatternHit> = memory
                .patterns
                .search(&query, arch_tag.as_deref(), (k * 4).min(200))
                .await?
                .into_iter()
                .filter(|h| tags.contains(&h.reference_tag))
                .take(k)
                .collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&hits)?);
            } else if hits.is_empty() {
                println!("no pattern examples match");
            } else {
                for h in hits {
                    println!(
                        "{:.3} {}:{}-{} [{}] ({}, {})",
                        h.score,
                        h.file_path,
                        h.start_line,
                        h.end_line,
                        h.chunk_type,
                        h.reference_tag,
                        h.arch_tag
                    );
                    for line in h.snippet.lines().take(6) {
                        println!("    {line}");
                    }
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        MemoryCommand::Purge { project, tag } => {
            // The project must exist; the tag need not be listed any more.
            store.load(&project)?;
            let removed = memory.patterns.purge(&tag).await?;
            println!("purged `{tag}`: {removed} chunk(s) removed");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let changed = write_last_indexed(&store, Some(&project), &report, &who(None))?;
    println!(
        "indexed `{}` from {}: {} chunks from {} files (replaced {}), last_indexed {}",
        report.reference_tag,
        report.source_repo,
        report.chunks,
        report.files,
        report.replaced,
        report.last_indexed
    );
    for (project, revision) in changed {
        println!("project {project} is now at revision {revision}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn serve(dir: &Path, listen: Option<String>) -> Result<(), BoxError> {
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
    let shared = Shared::open(dir, config)?;
    let auth = BridleAuth::new(dir, Arc::clone(&shared))?;
    let tools = memory.as_ref().map(|m| {
        let mut tools = m.tools();
        tools.on_indexed = Some(Arc::new(RulesWriteBack {
            shared: Arc::clone(&shared),
        }) as Arc<dyn bridle_memory::tools::IndexListener>);
        tools.access = Some(Arc::new(AgentProjects {
            shared: Arc::clone(&shared),
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
