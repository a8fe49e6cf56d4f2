//! The admin API test harness: a running admin API over a fresh data directory with the demo
//! project, two admins, and helpers that check the problem-details shape.

#![allow(dead_code)] // Each test file uses part of the harness.

pub mod gateway;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::GatewayContext;
use bridle_gateway::admin::{AdminServer, AdminState, AdminTokens, LoginLimits};
use bridle_gateway::config::{
    GatewayConfig, demo_document, init_data_dir_with_token_files, read_secret,
};
use bridle_rules::{ChangeRequest, Origin, Severity};
use reqwest::StatusCode;
use serde_json::Value;

pub const ALICE: &str = "alice-admin-token-0123456789";
pub const BOB: &str = "bob-admin-token-9876543210";

/// A running admin API over a fresh data directory with the demo project.
pub struct Api {
    pub tmp: tempfile::TempDir,
    pub ctx: Arc<GatewayContext>,
    /// The listener's address.
    pub addr: SocketAddr,
    pub base: String,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Api {
    pub async fn start() -> Self {
        Self::start_with(|s| s).await
    }

    pub async fn start_with(configure: impl FnOnce(AdminState) -> AdminState) -> Self {
        Self::start_served(configure, |server| server).await
    }

    /// As [`Api::start_with`], the server adjusted too before it runs (hosts, the panel).
    pub async fn start_served(
        configure: impl FnOnce(AdminState) -> AdminState,
        serve: impl FnOnce(AdminServer) -> AdminServer,
    ) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir_with_token_files(tmp.path()).unwrap();
        let config = GatewayConfig::load(tmp.path()).unwrap();
        let ctx = GatewayContext::open(tmp.path(), config).unwrap();
        ctx.store.create("demo", &demo_document(), "test").unwrap();
        let mut admins = AdminTokens::new().unwrap();
        admins.insert("alice", ALICE).unwrap();
        admins.insert("bob", BOB).unwrap();
        // Tests send agents' and wrong tokens by the dozen from one address; the throttle has
        // tests of its own.
        let state = configure(
            AdminState::new(Arc::clone(&ctx), Arc::new(admins)).login_limits(LoginLimits::new(
                10_000,
                10_000,
                Duration::from_secs(60),
            )),
        );
        let server = serve(
            AdminServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), state)
                .await
                .unwrap(),
        );
        let addr = server.local_addr();
        let base = server.url();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self {
            tmp,
            ctx,
            addr,
            base,
            http: reqwest::Client::new(),
            stop: Some(stop),
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

    /// Every configured agent's bearer token, from the data directory.
    pub fn agent_tokens(&self) -> Vec<(String, String)> {
        let secrets = self.ctx.config.secrets_path(self.tmp.path());
        self.ctx
            .config
            .agents
            .iter()
            .map(|(name, a)| {
                (
                    name.clone(),
                    read_secret(&secrets, a.token_secret.as_deref().unwrap()).unwrap(),
                )
            })
            .collect()
    }

    pub fn propose_guardrail(&self, id: &str) -> u64 {
        self.ctx
            .store
            .propose(
                "demo",
                &Origin::agent("claude", Some("sess-1".into())),
                &ChangeRequest::Guardrail {
                    id: id.into(),
                    statement: format!("Statement for {id}."),
                    severity: Severity::HardInstruction,
                    applies_to: vec!["all_agents".into()],
                },
                None,
            )
            .unwrap()
            .id
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .expect("the server stops")
                .unwrap();
        }
    }
}

pub async fn json_ok(resp: reqwest::Response, status: StatusCode) -> Value {
    assert_eq!(resp.status(), status, "unexpected status");
    resp.json().await.unwrap()
}

/// Checks the problem-details shape and returns the body.
pub async fn problem(resp: reqwest::Response, status: StatusCode, code: &str) -> Value {
    let got = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(got, status, "status of {body}");
    assert_eq!(content_type, "application/problem+json", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["status"], status.as_u16(), "{body}");
    assert_eq!(body["type"], format!("urn:bridle:problem:{code}"));
    assert!(body["title"].as_str().is_some_and(|t| !t.is_empty()));
    assert!(body["detail"].as_str().is_some_and(|t| !t.is_empty()));
    body
}

/// Reads SSE events (`event:` name and `data:` JSON) from a streaming response.
pub struct Events {
    resp: reqwest::Response,
    buf: String,
}

impl Events {
    pub fn new(resp: reqwest::Response) -> Self {
        Self {
            resp,
            buf: String::new(),
        }
    }

    /// The next event (skipping keep-alive comments), or a failure after a deadline.
    pub async fn next(&mut self) -> (String, Value) {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Some(end) = self.buf.find("\n\n") {
                    let block: String = self.buf.drain(..end + 2).collect();
                    let mut name = String::new();
                    let mut data = String::new();
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("event:") {
                            name = v.trim().to_string();
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push_str(v.trim());
                        }
                    }
                    if name.is_empty() {
                        continue;
                    }
                    return (name, serde_json::from_str(&data).unwrap());
                }
                let chunk = self
                    .resp
                    .chunk()
                    .await
                    .unwrap()
                    .expect("the stream is open");
                self.buf.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .expect("an event within the deadline")
    }

    /// The response, to read what is left of it (events already buffered are dropped).
    pub fn into_response(self) -> reqwest::Response {
        self.resp
    }

    /// The next event named `name`, skipping others.
    pub async fn until(&mut self, name: &str) -> Value {
        loop {
            let (n, data) = self.next().await;
            if n == name {
                return data;
            }
        }
    }
}
