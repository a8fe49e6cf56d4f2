//! A real upstream MCP server for the gateway's integration tests: a Kberg server named
//! `tickets` on 127.0.0.1 (a free port) with one tool, `whoami`, that answers the principal the
//! upstream saw. The tests that switch an upstream off and on or change its project mappings
//! put it behind the gateway as the namespace `tickets`.

use kberg_core::{ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::{HttpConfig, HttpServer, McpApp};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

/// Starts the upstream; its MCP endpoint's URL and the token that stops it. `whoami` is a read
/// tool (its listing says `readOnlyHint: true`).
pub async fn start() -> (String, CancellationToken) {
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("whoami")
                .description("Who the upstream thinks you are.")
                .handler(|_a: NoArgs, ctx| async move {
                    Ok(ToolOutput::text(ctx.caller().principal().id.clone()))
                }),
        )
        .expect("register whoami");
    let app = McpApp::builder("tickets", "1.0").tools(tools).build();
    let server = HttpServer::bind(
        app,
        HttpConfig::new(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).path("/mcp"),
    )
    .await
    .expect("bind the upstream");
    let url = format!("http://{}/mcp", server.local_addr());
    let stop = server.shutdown_token();
    let s = stop.clone();
    tokio::spawn(async move { server.run(async move { s.cancelled().await }).await });
    (url, stop)
}
