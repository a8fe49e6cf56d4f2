//! The README's examples, compiled. Both serve on a fixed port until stopped (the second also
//! starts an upstream child process and reaches a host that is not here), so they are
//! type-checked and not run; what they do is run by the other tests. Each is here verbatim (the
//! last test checks that it still is). Change an example in both places.

#![allow(dead_code)]

type Outcome = Result<(), Box<dyn std::error::Error>>;

#[rustfmt::skip]
async fn serving_an_app_over_http() -> Outcome {
use kberg_core::{Grants, Principal, ToolRegistry, ToolBuilder, ToolOutput, WriteCapability};
use kberg_server::{BearerTokens, HttpConfig, Limits, McpApp};

let tools = ToolRegistry::new();
// ... declare capabilities, register tools (see kberg-core) ...
    let notes_write = WriteCapability::new("notes.write", "Create and edit notes");
    tools.declare(notes_write.clone())?;
    tools.register(ToolBuilder::new("add_note").write(notes_write)
        .handler(|_a: serde_json::Value, _| async move { Ok(ToolOutput::text("added")) }))?;
let app = McpApp::builder("notes", "1.0.0")
    .tools(tools)              // also .resources(ResourceRegistry) and .prompts(PromptRegistry)
    .instructions("Use search_notes before add_note.")
    .build();

let auth = BearerTokens::new()
    .with_token("reader-secret", Principal::new("reader"))
    .with_token("writer-secret", Principal::new("writer").with_grants(Grants::of(["notes.write"])));

let config = HttpConfig::new("127.0.0.1:8765".parse()?)
    .auth(auth)
    .limits(Limits::default().max_sessions(32));

kberg_server::serve(app, config, async { let _ = tokio::signal::ctrl_c().await; }).await?;
    Ok(())
}

#[rustfmt::skip]
async fn an_aggregator_in_front_of_two_upstreams() -> Outcome {
use std::time::Duration;
use kberg_core::{ResourceRegistry, ToolRegistry, WriteCapability};
use kberg_server::aggregate::{Aggregator, AggregatorConfig, Forward, UpstreamConfig, UpstreamTransport};
use kberg_server::{HttpConfig, McpApp};

let tools = ToolRegistry::new();
let resources = ResourceRegistry::new();
let fs_write = WriteCapability::new("fs.write", "Change files");
let config = AggregatorConfig::new()
    // A child process on stdio (env vars for local credentials)...
    .upstream(UpstreamConfig::new("fs", UpstreamTransport::stdio("mcp-server-filesystem").arg("/srv/data")))
    // ...or Streamable HTTP with headers the aggregator injects and never shows to clients.
    .upstream(UpstreamConfig::new("tickets", UpstreamTransport::http("https://tickets.internal/mcp")
        .header("authorization", "Bearer upstream-secret"))
        // One forwarded request may wait this long (default 60 s), then `upstream_timeout`.
        .call_timeout(Duration::from_secs(20)))
    // Upstream tools are Read unless a pattern gives them a capability.
    .write_rule("fs__write_*", fs_write.clone())
    .write_rule("fs__edit_*", fs_write);
// Tools always; resources (as `fs+file:///...`) and prompts when asked for.
let forward = Forward::new().resources(resources.clone());
let aggregator = Aggregator::start_with(config, tools.clone(), forward)?; // config errors come back here
let app = McpApp::builder("gateway", "1.0.0").tools(tools).resources(resources).build();
kberg_server::serve(app, HttpConfig::new("127.0.0.1:8765".parse()?), std::future::pending::<()>()).await?;
    drop(aggregator);
    Ok(())
}

#[test]
fn the_readme_examples_are_the_ones_here() {
    kberg_testkit::readme::assert_examples_in(
        include_str!("../README.md"),
        include_str!("readme.rs"),
    );
}
