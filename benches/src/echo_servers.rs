//! The servers the wire-level benches measure against each other, each serving the same trivial
//! `echo` tool (it returns its `text` argument) on 127.0.0.1: Kberg (kberg-server, the gate on
//! every call) and bare rmcp (rmcp's own `ServerHandler` behind rmcp's Streamable HTTP service,
//! configured as kberg-server configures it). Shared by `wire.rs` and `session_memory.rs` so
//! both compare the same two servers.

use std::net::SocketAddr;
use std::sync::Arc;

use kberg_core::{ToolBuilder, ToolOutput, ToolRegistry};
use kberg_server::{HttpConfig, HttpServer, Limits, McpApp};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::loopback::{BoxError, STATEFUL};

/// The `echo` tool's argument schema.
pub fn echo_schema() -> Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

/// Kberg: the echo tool in a ToolRegistry, served by kberg-server (open access on loopback)
/// with `limits`, until `stop` is cancelled.
pub async fn start_kberg(stop: CancellationToken, limits: Limits) -> Result<SocketAddr, BoxError> {
    let tools = ToolRegistry::new();
    tools.register(
        ToolBuilder::new("echo")
            .description("Echo the text back")
            // The echo never waits: the synchronous handler kind, which the gate calls
            // directly (no boxed future).
            .raw_sync_handler(echo_schema(), |args, _ctx| {
                Ok(ToolOutput::text(args["text"].as_str().unwrap_or_default()))
            }),
    )?;
    let app = McpApp::builder("wire-bench", "1.0.0").tools(tools).build();
    let config = HttpConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)))
        .shutdown_token(stop.clone())
        .limits(limits);
    let server = HttpServer::bind(app, config).await?;
    let addr = server.local_addr();
    tokio::spawn(async move {
        if let Err(e) = server.run(async move { stop.cancelled().await }).await {
            tracing::warn!(error = %e, "the kberg server ended");
        }
    });
    Ok(addr)
}

/// Bare rmcp: rmcp's own `ServerHandler` with the same echo tool, served by rmcp's Streamable
/// HTTP service in the same mode kberg-server configures (stateful sessions).
#[derive(Clone)]
pub struct BareEcho {
    info: ServerConfig,
    tool: rmcp::model::Tool,
}

impl BareEcho {
    /// The handler with its server description and the `echo` tool.
    pub fn new() -> Result<Self, BoxError> {
        let info: ServerConfig = serde_json::from_value(json!({
            "protocolVersion": STATEFUL,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bare-rmcp", "version": "1.0.0"},
        }))?;
        let schema = match echo_schema() {
            Value::Object(m) => m,
            _ => return Err("the echo schema is an object".into()),
        };
        Ok(Self {
            info,
            tool: rmcp::model::Tool::new("echo", "Echo the text back", Arc::new(schema)),
        })
    }
}

impl ServerHandler for BareEcho {
    fn get_info(&self) -> ServerConfig {
        self.info.clone()
    }

    // The result type is non-exhaustive outside rmcp: no struct literal.
    #[allow(clippy::field_reassign_with_default)]
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut r = ListToolsResult::default();
        r.tools = vec![self.tool.clone()];
        Ok(r)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "echo" {
            return Err(ErrorData::invalid_params("unknown tool", None));
        }
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// Serves [`BareEcho`] on 127.0.0.1 (a free port, TCP_NODELAY on accepted sockets) with
/// rmcp's Streamable HTTP service and session manager at their defaults (idle sessions expire
/// after rmcp's 5 minutes), until `stop` is cancelled.
pub async fn start_rmcp(stop: CancellationToken) -> Result<SocketAddr, BoxError> {
    let handler = BareEcho::new()?;
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_json_response(true)
        .with_cancellation_token(stop.clone());
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().route_service("/mcp", service);
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr()?;
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
    Ok(addr)
}
