//! A whole gateway for the admin tests: MCP endpoint and admin API on free loopback ports, the
//! vault and the audit log in a fresh data directory, the demo project, the three demo agents
//! (secret-file tokens) and one more, `bot` (a claude), that authenticates with vault-issued
//! tokens only.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::admin::AdminTokens;
use bridle_gateway::config::{
    GatewayConfig, demo_document, init_data_dir_with_token_files, read_secret,
};
use bridle_gateway::{GatewayBuilder, GatewayContext};
use bridle_rules::{AgentCatalog, RulesStore};
use tokio_util::sync::CancellationToken;

use super::{ALICE, BOB};

/// The admin section of every test gateway that does not write its own: refused tokens are
/// throttled only far beyond what a test sends.
pub const GENEROUS_ADMIN: &str =
    "admin:\n  login_limits:\n    per_address: 10000\n    per_credential: 10000\n";

/// An MCP client of a test gateway ([`Gw::mcp_client`]).
pub type McpClient = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// Calls `tool` with `args` (an object), checks that it is refused with `code` in the one
/// refusal shape (`code`, a `message`, `tool` naming the tool called, a boolean `retryable`),
/// and returns the refusal's structured content.
pub async fn refused_in_shape(
    c: &McpClient,
    tool: &str,
    args: serde_json::Value,
    code: &str,
) -> serde_json::Value {
    let serde_json::Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    let out = c
        .call_tool(rmcp::model::CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap();
    assert_eq!(out.is_error, Some(true), "{out:?}");
    let s = out.structured_content.unwrap();
    assert_eq!(s["code"], code, "{s}");
    assert!(s["message"].as_str().is_some_and(|m| !m.is_empty()), "{s}");
    assert_eq!(s["tool"], tool, "{s}");
    assert!(s["retryable"].is_boolean(), "{s}");
    s
}

/// A running gateway with its admin API.
pub struct Gw {
    pub tmp: tempfile::TempDir,
    pub ctx: Arc<GatewayContext>,
    pub vault: Arc<bridle_gateway::vault::Vault>,
    /// The MCP endpoint.
    pub mcp: String,
    /// The admin API's base URL.
    pub base: String,
    pub http: reqwest::Client,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Gw {
    pub async fn start() -> Self {
        Self::start_with(|b| b).await
    }

    /// As [`Gw::start`], with the builder adjusted first (memory, timeouts).
    pub async fn start_with(configure: impl FnOnce(GatewayBuilder) -> GatewayBuilder) -> Self {
        Self::start_with_yaml("", configure).await
    }

    /// As [`Gw::start_with`], with `extra` (top-level sections) appended to `bridle.yaml`.
    pub async fn start_with_yaml(
        extra: &str,
        configure: impl FnOnce(GatewayBuilder) -> GatewayBuilder,
    ) -> Self {
        Self::start_with_config(extra, |b, _, _| configure(b)).await
    }

    /// As [`Gw::start_with_yaml`], the builder adjusted with the data directory and the loaded
    /// configuration at hand (memory opened as its `memory:` section says, say).
    pub async fn start_with_config(
        extra: &str,
        configure: impl FnOnce(GatewayBuilder, &Path, &GatewayConfig) -> GatewayBuilder,
    ) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir_with_token_files(tmp.path()).unwrap();
        RulesStore::open(tmp.path(), AgentCatalog::builtin())
            .unwrap()
            .create("demo", &demo_document(), "test")
            .unwrap();
        let yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
        let yaml = yaml.replace(
            "agents:\n",
            "agents:\n  bot:\n    type: claude\n    projects: [demo]\n",
        );
        // Tests send agents' and wrong tokens by the dozen from one address; the throttle has
        // tests of its own. A test that writes its own `admin:` section sets what it needs.
        let admin = if extra.starts_with("admin:") || extra.contains("\nadmin:") {
            ""
        } else {
            GENEROUS_ADMIN
        };
        let yaml = format!("{yaml}{admin}{extra}");
        std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
        let config = GatewayConfig::load(tmp.path()).unwrap();
        let mut admins = AdminTokens::new().unwrap();
        admins.insert("alice", ALICE).unwrap();
        admins.insert("bob", BOB).unwrap();
        let builder = GatewayBuilder::new(tmp.path(), config.clone())
            .watch_every(Duration::from_millis(50))
            .admin("127.0.0.1:0".parse().unwrap(), Arc::new(admins));
        let gateway = configure(builder, tmp.path(), &config)
            .build()
            .await
            .unwrap();
        let ctx = Arc::clone(gateway.context());
        let vault = Arc::clone(gateway.vault());
        let bound = gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mcp = bound.url();
        let base = bound.admin_url().unwrap();
        let stop = CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move {
            bound.run(async move { s.cancelled().await }).await.unwrap();
        });
        Self {
            tmp,
            ctx,
            vault,
            mcp,
            base,
            http: reqwest::Client::new(),
            stop,
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(ALICE)
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(self.url(path)).bearer_auth(ALICE)
    }

    pub fn put(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.put(self.url(path)).bearer_auth(ALICE)
    }

    pub fn patch(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.patch(self.url(path)).bearer_auth(ALICE)
    }

    pub fn delete(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.delete(self.url(path)).bearer_auth(ALICE)
    }

    /// `bridle.yaml` as it is on disk now.
    pub fn config_on_disk(&self) -> GatewayConfig {
        GatewayConfig::load(self.tmp.path()).unwrap()
    }

    /// A demo agent's token from its secret file.
    pub fn file_token(&self, agent: &str) -> String {
        let secrets = self.ctx.config.secrets_path(self.tmp.path());
        read_secret(&secrets, &format!("{agent}-token")).unwrap()
    }

    /// An MCP client (rmcp's) of the gateway's endpoint, initialized with `token`.
    pub async fn mcp_client(&self, token: String) -> McpClient {
        use rmcp::ServiceExt as _;
        let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                self.mcp.as_str(),
            )
            .auth_header(token),
        );
        ().serve(transport).await.unwrap()
    }

    /// Every agent token in play: the demo agents' files and a fresh vault token of `bot`.
    /// Asserts that every agent's token is refused on `method path` with 401 `unauthorized`
    /// (admin routes take admin tokens only).
    pub async fn refuses_agents(&self, method: reqwest::Method, path: &str) {
        for (agent, token) in self.all_agent_tokens() {
            let resp = self
                .http
                .request(method.clone(), self.url(path))
                .bearer_auth(&token)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 401, "{agent}'s token on {method} {path}");
            super::problem(resp, reqwest::StatusCode::UNAUTHORIZED, "unauthorized").await;
        }
    }

    /// The kinds of the audit entries `GET /audit{query}` lists (`query` empty or `?...`).
    pub async fn audit_kinds(&self, query: &str) -> Vec<String> {
        let page = super::json_ok(
            self.get(&format!("/audit{query}")).send().await.unwrap(),
            reqwest::StatusCode::OK,
        )
        .await;
        page["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_string())
            .collect()
    }

    /// How many indexed pattern chunks a search for `query` (URL-encoded) finds
    /// (`GET /memory/patterns?q=`).
    pub async fn pattern_hits(&self, query: &str) -> usize {
        let found = super::json_ok(
            self.get(&format!("/memory/patterns?q={query}"))
                .send()
                .await
                .unwrap(),
            reqwest::StatusCode::OK,
        )
        .await;
        found["items"].as_array().unwrap().len()
    }

    /// The whole audit log as `GET /audit/export` gives it (JSON Lines).
    pub async fn audit_export(&self) -> String {
        let resp = self.get("/audit/export").send().await.unwrap();
        assert_eq!(resp.status(), reqwest::StatusCode::OK);
        resp.text().await.unwrap()
    }

    /// Whether `token` opens a session on the MCP endpoint and a tool call answers.
    pub async fn mcp_works(&self, token: &str) -> bool {
        use kberg_agent::{McpSurface, ToolSurface};
        match McpSurface::connect_http_with_bearer(&self.mcp, token).await {
            Ok(s) => s
                .call(
                    "list_projects",
                    serde_json::json!({}),
                    CancellationToken::new(),
                )
                .await
                .is_ok_and(|r| !r.is_error),
            Err(_) => false,
        }
    }

    pub fn all_agent_tokens(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = ["claude", "codex", "gemini"]
            .iter()
            .map(|a| (a.to_string(), self.file_token(a)))
            .collect();
        let t = self.vault.set_agent_token("bot", "test").unwrap();
        v.push(("bot".into(), t.token.expose_str().unwrap().to_string()));
        v
    }

    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("the gateway stops")
                .unwrap();
        }
    }
}

impl Gw {
    /// Sends one stateless `tools/call` (protocol 2026-07-28, JSON-RPC id 7) of `tool`, without
    /// arguments, as `agent`, with `more_meta` (an object) added to its `_meta`; checks that it
    /// is answered 200 and returns the answer unread ([`answer_in`] finds the result in it).
    pub async fn send_stateless_call(
        &self,
        agent: &str,
        tool: &str,
        more_meta: serde_json::Value,
    ) -> reqwest::Response {
        let mut meta = serde_json::json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        });
        if let (Some(meta), Some(more)) = (meta.as_object_mut(), more_meta.as_object()) {
            meta.extend(more.clone());
        }
        let r = self
            .http
            .post(&self.mcp)
            .bearer_auth(self.file_token(agent))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .json(
                &serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                "name": tool, "arguments": {}, "_meta": meta}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        r
    }
}

/// The JSON-RPC answer to request 7 (as [`Gw::send_stateless_call`] sends it) in `raw`, a JSON
/// body or an event stream.
pub fn answer_in(raw: &str) -> serde_json::Value {
    std::iter::once(raw)
        .chain(raw.lines().filter_map(|l| l.strip_prefix("data:")))
        .filter_map(|t| serde_json::from_str::<serde_json::Value>(t.trim()).ok())
        .find(|v| v.get("id") == Some(&serde_json::json!(7)))
        .unwrap_or_else(|| panic!("no answer in {raw}"))
}
