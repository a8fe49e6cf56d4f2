//! `bridle memory index|refresh|search|purge --url`: the same commands as clients of a running
//! gateway's admin API. The gateway indexes in its own memory service (one index per reference
//! tag at a time, progress streamed back and shown here as plain lines on stderr), writes
//! `last_indexed` back as a revision, and records each change as the admin the credential
//! names, through the `cli` surface, before it answers. Nothing here opens the data directory.

use std::process::ExitCode;

use bridle_memory::{IndexReport, PatternHit};
use serde_json::Value;

use super::{MemoryCommand, print_hits, print_indexed, print_reembedded};
use crate::BoxError;
use crate::client::{AdminClient, seg};

/// One example repository a project lists: its pattern and its view (`reference_tag`,
/// `last_indexed`, ...).
struct Listed {
    pattern: String,
    example: Value,
}

/// Every example repository the project's patterns list (404 `unknown_project` when there is
/// no such project).
fn listed(api: &AdminClient, project: &str) -> Result<Vec<Listed>, BoxError> {
    let list = api.get(&format!("/projects/{}/patterns", seg(project)))?;
    let mut out = Vec::new();
    for p in list["custom"].as_array().into_iter().flatten() {
        let pattern = p["name"].as_str().unwrap_or_default().to_string();
        for e in p["example_repos"].as_array().into_iter().flatten() {
            out.push(Listed {
                pattern: pattern.clone(),
                example: e.clone(),
            });
        }
    }
    Ok(out)
}

fn tag_of(l: &Listed) -> &str {
    l.example["reference_tag"].as_str().unwrap_or_default()
}

/// The example the project lists under `tag`, or the same refusal the offline form gives.
fn find(api: &AdminClient, project: &str, tag: &str) -> Result<Listed, BoxError> {
    let all = listed(api, project)?;
    let tags: Vec<String> = all.iter().map(|l| tag_of(l).to_string()).collect();
    all.into_iter().find(|l| tag_of(l) == tag).ok_or_else(|| {
        format!(
            "project `{project}` lists no example repository tagged `{tag}` under patterns.custom[].example_repos (its tags: {})",
            if tags.is_empty() { "none".to_string() } else { tags.join(", ") }
        )
        .into()
    })
}

/// Runs the command against the admin API at `api`.
pub(crate) fn memory_remote(
    api: &AdminClient,
    command: MemoryCommand,
) -> Result<ExitCode, BoxError> {
    match command {
        MemoryCommand::Index { project, tag } => index(api, &project, &tag, false),
        MemoryCommand::Refresh { project, tag } => index(api, &project, &tag, true),
        MemoryCommand::Search {
            project,
            query,
            arch_tag,
            k,
            json,
        } => {
            // Only the project's own examples: search wider, keep the project's tags.
            let tags: Vec<String> = listed(api, &project)?
                .iter()
                .map(|l| tag_of(l).to_string())
                .collect();
            let k = k.clamp(1, 50);
            let mut path = format!(
                "/memory/patterns?q={}&limit={}",
                seg(&query),
                (k * 4).min(100)
            );
            if let Some(a) = &arch_tag {
                path.push_str(&format!("&arch_tag={}", seg(a)));
            }
            let page = api.get(&path)?;
            let hits: Vec<PatternHit> =
                serde_json::from_value(page["items"].clone()).map_err(|e| {
                    format!("the admin API's search answer is not the documented shape: {e}")
                })?;
            let hits: Vec<PatternHit> = hits
                .into_iter()
                .filter(|h| tags.contains(&h.reference_tag))
                .take(k)
                .collect();
            print_hits(&hits, json)?;
            Ok(ExitCode::SUCCESS)
        }
        MemoryCommand::Reembed => {
            let done = api.post("/memory/sessions/reembed", None)?;
            print_reembedded(
                done["reembedded"].as_u64().unwrap_or(0),
                done["unchanged"].as_u64().unwrap_or(0),
            );
            Ok(ExitCode::SUCCESS)
        }
        MemoryCommand::Purge { project, tag } => {
            // The project must exist; the tag need not be listed any more.
            api.get(&format!("/projects/{}", seg(&project)))?;
            let purged = api.post(&format!("/memory/patterns/{}/purge", seg(&tag)), None)?;
            println!(
                "purged `{tag}`: {} removed",
                kberg_core::counted(purged["removed"].as_u64().unwrap_or(0), "chunk", "chunks")
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Starts an index (or, with `refresh`, a re-index of an example indexed before) on the gateway
/// and follows its progress to the end.
fn index(api: &AdminClient, project: &str, tag: &str, refresh: bool) -> Result<ExitCode, BoxError> {
    let found = find(api, project, tag)?;
    if refresh && found.example["last_indexed"].is_null() {
        return Err(format!(
            "`{tag}` has not been indexed yet; run `bridle memory index --project {project} --tag {tag}`"
        )
        .into());
    }
    let path = format!(
        "/projects/{}/patterns/{}/examples/{}/index",
        seg(project),
        seg(&found.pattern),
        seg(tag)
    );
    let mut source = String::new();
    let mut last: Option<Result<Value, String>> = None;
    api.events(&path, |name, data| {
        match name {
            "started" => {
                source = data["source"].as_str().unwrap_or("?").to_string();
                eprintln!("indexing `{tag}` from {source} on the gateway");
            }
            "progress" => eprintln!(
                "{} {}/{}: {}",
                data["step"].as_str().unwrap_or("working"),
                data["done"].as_u64().unwrap_or(0),
                data["total"].as_u64().unwrap_or(0),
                data["message"].as_str().unwrap_or("")
            ),
            "done" => {
                last = Some(Ok(data));
                return Ok(false);
            }
            "error" => {
                last = Some(Err(format!(
                    "indexing `{tag}` failed on the gateway ({}): {}; the previous index is kept",
                    data["code"].as_str().unwrap_or("?"),
                    data["detail"].as_str().unwrap_or("no details")
                )));
                return Ok(false);
            }
            _ => {}
        }
        Ok(true)
    })?;
    let done = match last {
        Some(Ok(done)) => done,
        Some(Err(e)) => return Err(e.into()),
        None => return Err("the index stream ended without its result".into()),
    };
    let mut report = done["report"].clone();
    report["source_repo"] = Value::String(source);
    let report: IndexReport = serde_json::from_value(report)
        .map_err(|e| format!("the admin API's index result is not the documented shape: {e}"))?;
    print_indexed(&report);
    if let Some(revision) = done["revision"].as_u64() {
        println!("project {project} is now at revision {revision}");
    }
    Ok(ExitCode::SUCCESS)
}
