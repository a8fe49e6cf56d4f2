//! `bridle memory index|refresh|search|purge`: a project's pattern examples in Bridle's memory;
//! `bridle memory reembed`: session memories embedded again after the embedding model changed.
//!
//! With `--url` each goes through a running gateway's admin API ([`remote`]), so the gateway
//! indexes, searches and purges in its own memory and records each change at once; without it
//! they work offline on the data directory, in this process.

mod progress;
pub(crate) mod remote;

use std::path::Path;
use std::process::ExitCode;

use bridle_gateway::config::GatewayConfig;
use bridle_gateway::memory::write_last_indexed;
use bridle_rules::RulesStore;
use clap::Subcommand;

use crate::{BoxError, open_store, who};

#[derive(Debug, Subcommand)]
pub(crate) enum MemoryCommand {
    /// Index the example repository the project lists under `patterns.custom[].example_repos`
    /// with this reference tag (a git URL or a local path): through a running gateway with
    /// --url; offline, in this process, without.
    Index {
        /// The project id.
        #[arg(long)]
        project: String,
        /// The example's reference tag.
        #[arg(long)]
        tag: String,
    },
    /// Re-index an example that was indexed before; its chunks are replaced atomically
    /// (through a running gateway with --url; offline without).
    Refresh {
        /// The project id.
        #[arg(long)]
        project: String,
        /// The example's reference tag.
        #[arg(long)]
        tag: String,
    },
    /// Search the project's pattern examples by meaning (through a running gateway with --url;
    /// offline without).
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
    /// Embed the session memories again, from their stored text, with the embedding model
    /// configured now (after `memory.embedder` changed: until then a recall that meets a memory
    /// of the old model is refused with `model_mismatch`). Memories the configured model
    /// embedded are left alone (through a running gateway with --url; offline without).
    Reembed,
    /// Remove an example's chunks from memory (through a running gateway with --url; offline
    /// without).
    Purge {
        /// The project id.
        #[arg(long)]
        project: String,
        /// The example's reference tag.
        #[arg(long)]
        tag: String,
    },
}

/// Opens the memory service the configuration describes, or says how to configure it. The
/// `memory` commands open it so: an embedding server that cannot be reached fails them at once.
pub(crate) async fn open_memory(
    dir: &Path,
    config: &GatewayConfig,
) -> Result<bridle_memory::MemoryService, BoxError> {
    let memory_config = memory_config(dir, config)?;
    Ok(bridle_memory::MemoryService::open(&memory_config).await?)
}

/// [`open_memory`] for `bridle serve`: an embedding server that is down, slow or failing at
/// start (it starts after the gateway) leaves memory open, its tools answering the retryable
/// `embedder_unavailable` until the server answers, rather than keeping the gateway from
/// starting. A lasting refusal (a bad key, a wrong model) still fails the start.
pub(crate) async fn open_served_memory(
    dir: &Path,
    config: &GatewayConfig,
) -> Result<bridle_memory::MemoryService, BoxError> {
    let memory_config = memory_config(dir, config)?;
    Ok(bridle_memory::MemoryService::open_lazily(&memory_config).await?)
}

/// The memory service's configuration, or how to write it.
fn memory_config(
    dir: &Path,
    config: &GatewayConfig,
) -> Result<bridle_memory::MemoryConfig, BoxError> {
    let Some(section) = &config.memory else {
        return Err(format!(
            "memory is not configured in {}: add a `memory:` section (see bridle-gateway/README.md)",
            dir.join("bridle.yaml").display()
        )
        .into());
    };
    Ok(section.to_config(dir, &config.secrets_path(dir))?)
}

/// `memory` cloning private example repositories with the secrets `memory.indexing.git_credentials`
/// names, from the vault (opened only when there are any), as a running gateway does.
fn with_clone_credentials(
    dir: &Path,
    config: &GatewayConfig,
    memory: bridle_memory::MemoryService,
) -> Result<bridle_memory::MemoryService, BoxError> {
    let wanted = config
        .memory
        .as_ref()
        .is_some_and(|m| !m.indexing.git_credentials.is_empty());
    if !wanted {
        return Ok(memory);
    }
    let (vault, _) = bridle_gateway::gateway::open_vault(dir, config)?;
    let docker = vault.config().docker_secrets_dir.clone();
    let secrets: std::sync::Arc<dyn bridle_gateway::upstreams::SecretSource> = std::sync::Arc::new(
        bridle_gateway::secrets::GatewaySecrets::new(vault, config.secrets_path(dir), docker),
    );
    Ok(bridle_gateway::memory::with_clone_credentials(
        memory, config, &secrets,
    ))
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

/// Indexes `repo` with progress on stderr, leaving the bar (if any) finished or failed.
async fn index(
    memory: &bridle_memory::MemoryService,
    repo: &bridle_memory::ExampleRepo,
    progress: &progress::IndexProgress,
) -> Result<bridle_memory::IndexReport, BoxError> {
    let result = memory.patterns.index(repo, progress).await;
    let failure = result.as_ref().err().map(ToString::to_string);
    progress.finish(failure.as_deref());
    Ok(result?)
}

pub(crate) async fn memory(dir: &Path, command: MemoryCommand) -> Result<ExitCode, BoxError> {
    let (store, _) = open_store(dir)?;
    let config = crate::load_config(dir)?;
    let memory = open_memory(dir, &config).await?;
    let memory = with_clone_credentials(dir, &config, memory)?;
    let progress = progress::IndexProgress::for_stderr();
    let (project, report) = match command {
        MemoryCommand::Index { project, tag } => {
            let repo = example_repo(&store, &project, &tag)?;
            (project, index(&memory, &repo, &progress).await?)
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
            (project, index(&memory, &repo, &progress).await?)
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
            print_hits(&hits, json)?;
            return Ok(ExitCode::SUCCESS);
        }
        MemoryCommand::Reembed => {
            let report = memory.session.reembed().await?;
            print_reembedded(report.reembedded, report.unchanged);
            return Ok(ExitCode::SUCCESS);
        }
        MemoryCommand::Purge { project, tag } => {
            // The project must exist; the tag need not be listed any more.
            store.load(&project)?;
            let removed = memory.patterns.purge(&tag).await?;
            println!(
                "purged `{tag}`: {} removed",
                kberg_core::counted(removed as u64, "chunk", "chunks")
            );
            return Ok(ExitCode::SUCCESS);
        }
    };
    let changed = write_last_indexed(&store, Some(&project), &report, &who(None))?;
    print_indexed(&report);
    for (project, revision) in changed {
        println!("project {project} is now at revision {revision}");
    }
    Ok(ExitCode::SUCCESS)
}

/// What an index did, as one line (offline and through the API alike).
fn print_indexed(report: &bridle_memory::IndexReport) {
    println!(
        "indexed `{}` from {}: {} chunks from {} files (replaced {}), last_indexed {}",
        report.reference_tag,
        report.source_repo,
        report.chunks,
        report.files,
        report.replaced,
        report.last_indexed
    );
}

/// What a re-embedding did, as one line (offline and through the API alike).
fn print_reembedded(reembedded: u64, unchanged: u64) {
    println!(
        "embedded {reembedded} session memories again with the configured model ({unchanged} unchanged)"
    );
}

/// Search hits, as JSON or as a few lines each.
fn print_hits(hits: &[bridle_memory::PatternHit], json: bool) -> Result<(), BoxError> {
    if json {
        println!("{}", serde_json::to_string_pretty(hits)?);
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
    Ok(())
}
