//! The workspace README's examples and kberg-agent's, compiled (and run where nothing outside
//! this machine is needed). Each is here verbatim (the last tests check that it still is),
//! inside a function that sets up what the README leaves out. Change an example in both places.

// The README's examples print what they show.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use kberg_core::*;
use kberg_server::McpApp;
use kberg_server::aggregate::{
    Aggregator, AggregatorConfig, Forward, UpstreamConfig, UpstreamTransport,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

type Outcome = Result<(), Box<dyn std::error::Error>>;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Search {
    query: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddNote {
    title: String,
}

fn search(query: &str) -> String {
    format!("no notes match {query}")
}

fn add(title: &str) -> String {
    format!("added {title}")
}

#[rustfmt::skip]
#[tokio::test]
async fn guardrails_in_one_example() -> Outcome {
use kberg_core::*;

let tools = ToolRegistry::new();
let notes_write = WriteCapability::new("notes.write", "Create and edit notes");
tools.declare(notes_write.clone())?;
tools.register(ToolBuilder::new("search_notes").small_model_safe()
    .handler(|a: Search, _| async move { Ok(ToolOutput::text(search(&a.query))) }))?;
tools.register(ToolBuilder::new("add_note").write(notes_write)
    .handler(|a: AddNote, _| async move { Ok(ToolOutput::text(add(&a.title))) }))?;
tools.refuse("delete_all", "Bulk deletion is not offered; delete notes one at a time.")?;
    let reader = Caller::new(Principal::new("reader"));
    let writer = Caller::new(Principal::new("writer").with_grants(Grants::of(["notes.write"])));
    let found = tools.call(&reader, "search_notes", json!({"query": "milk"}), CallOptions::default()).await?;
    assert_eq!(found.all_text(), "no notes match milk");
    let denied = tools.call(&reader, "add_note", json!({"title": "milk"}), CallOptions::default()).await.expect_err("no grant");
    assert_eq!(denied.code(), ErrorCode::CapabilityRequired);
    let added = tools.call(&writer, "add_note", json!({"title": "milk"}), CallOptions::default()).await?;
    assert_eq!(added.all_text(), "added milk");
    let refused = tools.call(&writer, "delete_all", json!({}), CallOptions::default()).await.expect_err("refused");
    assert_eq!(refused.code(), ErrorCode::Refused);
    assert!(refused.to_string().contains("delete notes one at a time"), "{refused}");
    Ok(())
}

/// Compiled, not run: it starts an upstream child process and reaches a host that is not here.
#[allow(dead_code)]
#[rustfmt::skip]
fn sidecar_aggregator() -> Outcome {
let config = AggregatorConfig::new()
    .upstream(UpstreamConfig::new("fs", UpstreamTransport::stdio("mcp-server-filesystem").arg("/srv")))
    .upstream(UpstreamConfig::new("tickets", UpstreamTransport::http("https://tickets.internal/mcp")
        .header("authorization", "Bearer upstream-secret"))
        .call_timeout(Duration::from_secs(20)))
    .write_rule("fs__write_*", WriteCapability::new("fs.write", "Change files"));
let (tools, resources) = (ToolRegistry::new(), ResourceRegistry::new());
let aggregator = Aggregator::start_with(config, tools.clone(), Forward::new().resources(resources.clone()))?;
let app = McpApp::builder("gateway", "1.0.0").tools(tools).resources(resources).build();
    drop((aggregator, app));
    Ok(())
}

/// Compiled, not run: it talks to an Ollama server.
#[allow(dead_code)]
#[rustfmt::skip]
async fn the_agent_loop(registry: ToolRegistry, cancel: CancellationToken) {
use kberg_agent::{Agent, AgentConfig, LocalSurface, Message};
use kberg_core::{Caller, Grants, Principal, SurfaceProjection};
use kberg_providers::ollama::{OllamaConfig, OllamaProvider};

let caller = Caller::new(Principal::new("assistant")
    .with_grants(Grants::of(["notes.write"]))
    .with_projection(SurfaceProjection::Compact));
let agent = Agent::new(
    OllamaProvider::new(OllamaConfig::new("qwen2.5")),
    LocalSurface::new(registry, caller),
)
.with_config(AgentConfig::default().system_prompt("Use the tools.").max_turns(8).stream(true));
let outcome = agent.run(vec![Message::user("add a note: buy milk")], &cancel).await;
println!("{} ({} repair turns)", outcome.text, outcome.repair_turns);
}

#[test]
fn the_workspace_readme_examples_are_the_ones_here() {
    kberg_testkit::readme::assert_examples_in(
        include_str!("../../README.md"),
        include_str!("readme.rs"),
    );
}

#[test]
fn the_agent_readme_example_is_the_one_here() {
    kberg_testkit::readme::assert_examples_in(
        include_str!("../../kberg-agent/README.md"),
        include_str!("readme.rs"),
    );
}

/// Every README of the workspace with a `rust` example is checked by a `tests/readme.rs`: a
/// README that gains its first example without one fails here, naming it.
#[test]
fn every_readme_with_rust_examples_has_its_check() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The READMEs checked here rather than by a test of their own crate.
    let checked_here = ["README.md", "kberg-agent/README.md"];
    let mut readmes = vec![root.join("README.md")];
    for entry in std::fs::read_dir(&root).unwrap() {
        let readme = entry.unwrap().path().join("README.md");
        if readme.is_file() {
            readmes.push(readme);
        }
    }
    let mut seen = 0;
    for readme in readmes {
        let text = std::fs::read_to_string(&readme).unwrap();
        if kberg_testkit::readme::rust_blocks(&text).is_empty() {
            continue;
        }
        seen += 1;
        let rel = readme
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let (test, include) = if checked_here.contains(&rel.as_str()) {
            (
                root.join("examples/tests/readme.rs"),
                format!("include_str!(\"../../{rel}\")"),
            )
        } else {
            let test = readme.with_file_name("tests").join("readme.rs");
            (test, "include_str!(\"../README.md\")".to_string())
        };
        let source = std::fs::read_to_string(&test).unwrap_or_else(|e| {
            panic!(
                "{rel} has rust examples but {} cannot be read: {e}",
                test.display()
            )
        });
        assert!(
            source.contains("kberg_testkit::readme::assert_examples_in(")
                && source.contains(&include),
            "{} does not check {rel} ({include})",
            test.display()
        );
    }
    assert!(seen >= 8, "only {seen} READMEs with rust examples found");
}
