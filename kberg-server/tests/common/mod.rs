//! Shared fixtures of the integration tests: a small Kberg app with Read and Write tools,
//! resources and prompts; a real HTTP server on 127.0.0.1 (free port) that stops when dropped
//! (also when a test fails); and a raw HTTP client that speaks Streamable HTTP by hand so bad
//! input can be sent exactly as a broken client would.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kberg_core::{
    Grants, Principal, PromptArgument, PromptMessage, PromptRegistry, PromptResult, PromptSpec,
    ResourceContents, ResourceDescriptor, ResourceRegistry, ResourceTemplate, SurfaceProjection,
    ToolBuilder, ToolError, ToolOutput, ToolRegistry, WriteCapability, reader_fn,
};
use kberg_server::{BearerTokens, HttpConfig, Limits, McpApp};
use kberg_testkit::serve::{RunningServer, loopback};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub const READER: &str = "reader-token";
pub const WRITER: &str = "writer-token";
pub const COMPACT: &str = "compact-token";
pub const PROTO_OLD: &str = "2025-11-25";
pub const PROTO_NEW: &str = "2026-07-28";

/// What the tools report back to the test.
pub struct Probe {
    /// The slow tool sends once it started.
    pub started: tokio::sync::Mutex<mpsc::UnboundedReceiver<()>>,
    /// The slow tool sends once it saw its cancellation token fire.
    pub cancelled: tokio::sync::Mutex<mpsc::UnboundedReceiver<()>>,
    /// Calls of `ask_name` (each round runs the tool again).
    pub ask_runs: AtomicUsize,
    /// Who each `count` call's client said it was.
    pub clients: Arc<std::sync::Mutex<Vec<Option<kberg_core::ClientInfo>>>>,
}

#[derive(Deserialize, JsonSchema)]
struct Echo {
    /// What to echo.
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct AddNote {
    /// The note's title.
    title: String,
    /// Its priority, 1 to 5.
    #[schemars(range(min = 1, max = 5))]
    priority: u8,
}

#[derive(Deserialize, JsonSchema)]
struct Empty {}

#[derive(Deserialize, JsonSchema)]
struct Chatter {
    /// How many log messages to send.
    n: u32,
}

pub fn app() -> (McpApp, Arc<Probe>) {
    let tools = ToolRegistry::new();
    let write = WriteCapability::new("notes.write", "Create and edit notes");
    tools.declare(write.clone()).expect("declare");
    tools
        .register(
            ToolBuilder::new("echo")
                .description("Echo the text back")
                .small_model_safe()
                .handler(|a: Echo, _ctx| async move { Ok(ToolOutput::text(a.text)) }),
        )
        .expect("echo");
    tools
        .register(
            ToolBuilder::new("add_note")
                .description("Create a note")
                .write(write)
                .handler(|a: AddNote, _ctx| async move {
                    Ok(ToolOutput::text(format!(
                        "created {} (p{})",
                        a.title, a.priority
                    )))
                }),
        )
        .expect("add_note");
    tools
        .refuse("drop_database", "The app never offers this.")
        .expect("refuse");

    let (started_tx, started_rx) = mpsc::unbounded_channel();
    let (cancel_tx, cancel_rx) = mpsc::unbounded_channel();
    tools
        .register(
            ToolBuilder::new("slow")
                .description("Wait until cancelled")
                .handler(move |_a: Empty, ctx| {
                    let started = started_tx.clone();
                    let cancelled = cancel_tx.clone();
                    async move {
                        let token = ctx.cancellation().clone();
                        tokio::spawn(async move {
                            token.cancelled().await;
                            let _ = cancelled.send(());
                        });
                        let _ = started.send(());
                        tokio::time::sleep(Duration::from_secs(120)).await;
                        Ok(ToolOutput::text("finished without being cancelled"))
                    }
                }),
        )
        .expect("slow");
    let clients = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&clients);
    tools
        .register(
            ToolBuilder::new("count")
                .description("Report progress twice")
                .handler(move |_a: Empty, ctx| {
                    if let Ok(mut s) = seen.lock() {
                        s.push(ctx.client().cloned());
                    }
                    async move {
                        ctx.progress(1.0, Some(2.0), Some("half")).await?;
                        ctx.log("info", Some("count"), json!("counting")).await?;
                        ctx.progress(2.0, Some(2.0), Some("done")).await?;
                        Ok(ToolOutput::text("counted"))
                    }
                }),
        )
        .expect("count");
    tools
        .register(
            ToolBuilder::new("chatter")
                .description("Send n log messages, then answer")
                .handler(|a: Chatter, ctx| async move {
                    for i in 0..a.n {
                        ctx.log("info", Some("chatter"), json!(i)).await?;
                    }
                    Ok(ToolOutput::text(format!("chattered {}", a.n)))
                }),
        )
        .expect("chatter");
    let probe = Arc::new(Probe {
        started: tokio::sync::Mutex::new(started_rx),
        cancelled: tokio::sync::Mutex::new(cancel_rx),
        ask_runs: AtomicUsize::new(0),
        clients,
    });
    let p = Arc::clone(&probe);
    tools
        .register(
            ToolBuilder::new("ask_name")
                .description("Ask the user for their name")
                .handler(move |_a: Empty, ctx| {
                    let p = Arc::clone(&p);
                    async move {
                        p.ask_runs.fetch_add(1, Ordering::SeqCst);
                        let answer = ctx
                            .elicit(
                                "What is your name?",
                                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                            )
                            .await?;
                        match answer["action"].as_str() {
                            Some("accept") => Ok(ToolOutput::text(format!(
                                "hello {}",
                                answer["content"]["name"].as_str().unwrap_or("?")
                            ))),
                            _ => Err(ToolError::failed("the user declined")),
                        }
                    }
                }),
        )
        .expect("ask_name");

    tools
        .register(
            ToolBuilder::new("survey")
                .description("Ask three named questions at once")
                .handler(|_a: Empty, ctx| async move {
                    let answers = kberg_server::input::ask(
                        &ctx,
                        vec![
                            kberg_server::input::Question::elicit(
                                "user_name",
                                "Your name?",
                                json!({"type": "object", "properties": {"name": {"type": "string"}}}),
                            ),
                            kberg_server::input::Question::sample(
                                "capital",
                                json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Capital of France?"}}], "maxTokens": 10}),
                            ),
                            kberg_server::input::Question::roots("roots"),
                        ],
                    )
                    .await?;
                    Ok(ToolOutput::text(format!(
                        "{} / {} / {}",
                        answers["user_name"]["content"]["name"].as_str().unwrap_or("?"),
                        answers["capital"]["content"]["text"].as_str().unwrap_or("?"),
                        answers["roots"]["roots"].as_array().map_or(0, Vec::len),
                    )))
                }),
        )
        .expect("survey");

    let resources = ResourceRegistry::new();
    resources
        .register_text(
            ResourceDescriptor::new("notes://1", "first").mime_type("text/plain"),
            "the first note",
        )
        .expect("notes://1");
    resources
        .register_text(
            ResourceDescriptor::new("notes://2", "second"),
            "the second note",
        )
        .expect("notes://2");
    resources
        .register_template(
            ResourceTemplate::new("drafts://{id}", "draft"),
            reader_fn(|uri, vars| async move {
                Ok(vec![ResourceContents::text(
                    uri,
                    Some("text/plain"),
                    format!("draft {}", vars.get("id").map(String::as_str).unwrap_or("")),
                )])
            }),
        )
        .expect("template");

    let prompts = PromptRegistry::new();
    prompts
        .register(
            PromptSpec::new("greet", "Greet someone").argument(
                PromptArgument::required("name", "Who to greet")
                    .with_completions(["alice", "albert", "bob"]),
            ),
            |args| async move {
                Ok(PromptResult {
                    description: None,
                    messages: vec![PromptMessage::user(format!(
                        "Say hello to {}",
                        args.get("name").map(String::as_str).unwrap_or("")
                    ))],
                })
            },
        )
        .expect("greet");

    let app = McpApp::builder("kberg-test", "0.1.0")
        .instructions("A test app.")
        .tools(tools)
        .resources(resources)
        .prompts(prompts)
        .build();
    (app, probe)
}

pub fn auth() -> BearerTokens {
    BearerTokens::new()
        .with_token(READER, Principal::new("reader"))
        .with_token(
            WRITER,
            Principal::new("writer").with_grants(Grants::of(["notes.write"])),
        )
        .with_token(
            COMPACT,
            Principal::new("small").with_projection(SurfaceProjection::Compact),
        )
}

/// A running server; stopped when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub url: String,
    pub app: McpApp,
    pub probe: Arc<Probe>,
    /// Stops the server when the fixture drops.
    server: RunningServer,
}

pub async fn start_with(limits: Limits) -> TestServer {
    start_config(loopback().auth(auth()).limits(limits)).await
}

pub async fn start() -> TestServer {
    start_with(Limits::default()).await
}

pub async fn start_config(config: HttpConfig) -> TestServer {
    let (app, probe) = app();
    let server = RunningServer::start(app.clone(), config).await;
    TestServer {
        addr: server.addr,
        url: server.url.clone(),
        app,
        probe,
        server,
    }
}

/// A response, fully read.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Resp {
    /// The JSON-RPC messages of the body (a JSON body or the `data:` lines of an SSE body).
    pub fn messages(&self) -> Vec<Value> {
        if let Ok(v) = serde_json::from_str::<Value>(&self.text) {
            return vec![v];
        }
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .collect()
    }

    /// The message answering request `id`.
    pub fn reply(&self, id: i64) -> Value {
        self.messages()
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no reply to {id} in: {}", self.text))
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

/// A hand-driven Streamable HTTP client.
#[derive(Clone)]
pub struct Raw {
    pub http: reqwest::Client,
    pub url: String,
    pub token: Option<String>,
}

impl Raw {
    pub fn new(url: &str, token: Option<&str>) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(kberg_testkit::WAIT)
                .build()
                .expect("client"),
            url: url.to_string(),
            token: token.map(str::to_string),
        }
    }

    /// Opens a 2025-11-25 GET SSE stream on the session `sid`; returns the response as it
    /// came (a refusal, or a stream that stays open), its body unread.
    pub async fn open_get(&self, sid: &str) -> reqwest::Response {
        self.http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header(
                "authorization",
                format!("Bearer {}", self.token.as_deref().unwrap_or("")),
            )
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", PROTO_OLD)
            .send()
            .await
            .expect("GET")
    }

    /// POSTs `body` with the usual headers, overridden or extended by `extra`
    /// (an empty value removes a default header).
    pub async fn post_with(&self, body: impl Into<reqwest::Body>, extra: &[(&str, &str)]) -> Resp {
        let mut headers = vec![
            ("accept", "application/json, text/event-stream".to_string()),
            ("content-type", "application/json".to_string()),
        ];
        if let Some(t) = &self.token {
            headers.push(("authorization", format!("Bearer {t}")));
        }
        for (k, v) in extra {
            headers.retain(|(hk, _)| !hk.eq_ignore_ascii_case(k));
            if !v.is_empty() {
                headers.push((k, v.to_string()));
            }
        }
        let mut rb = self.http.post(&self.url).body(body);
        for (k, v) in headers {
            rb = rb.header(k, v);
        }
        read(rb.send().await.expect("request sent")).await
    }

    pub async fn post(&self, body: Value, session: Option<&str>) -> Resp {
        let mut extra = vec![];
        if let Some(s) = session {
            extra.push(("mcp-session-id", s));
            extra.push(("mcp-protocol-version", PROTO_OLD));
        }
        self.post_with(body.to_string(), &extra).await
    }

    /// `initialize` + `notifications/initialized`; returns the session id.
    pub async fn initialize(&self) -> String {
        let r = self
            .post(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": PROTO_OLD,
                    "capabilities": {"elicitation": {}},
                    "clientInfo": {"name": "raw-test", "version": "0"}
                }}),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "initialize failed: {}", r.text);
        let sid = r.header("mcp-session-id").expect("session id header");
        let n = self
            .post(
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                Some(&sid),
            )
            .await;
        assert_eq!(n.status, 202, "initialized notification: {}", n.text);
        sid
    }

    /// A stateless 2026-07-28 request with the required headers and `_meta`.
    pub async fn stateless(&self, id: i64, method: &str, params: Value) -> Resp {
        self.stateless_meta(id, method, params, json!({})).await
    }

    /// [`Raw::stateless`] with `_meta` entries added or replaced by `extra`.
    pub async fn stateless_meta(
        &self,
        id: i64,
        method: &str,
        mut params: Value,
        extra: Value,
    ) -> Resp {
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
            "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
        });
        if let (Some(m), Value::Object(e)) = (meta.as_object_mut(), extra) {
            m.extend(e);
        }
        if !params.is_object() {
            params = json!({});
        }
        params["_meta"] = meta;
        let name = params
            .get("name")
            .or_else(|| params.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut extra: Vec<(&str, &str)> =
            vec![("mcp-protocol-version", PROTO_NEW), ("mcp-method", method)];
        if let Some(n) = &name {
            extra.push(("mcp-name", n));
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.post_with(body.to_string(), &extra).await
    }

    /// `DELETE` of session `sid` (ends it), with this client's token.
    pub async fn delete(&self, sid: &str) -> Resp {
        let mut rb = self
            .http
            .delete(&self.url)
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", PROTO_OLD);
        if let Some(t) = &self.token {
            rb = rb.header("authorization", format!("Bearer {t}"));
        }
        read(rb.send().await.expect("DELETE sent")).await
    }

    pub async fn call_old(&self, sid: &str, id: i64, name: &str, args: Value) -> Value {
        let r = self
            .post(
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                       "params": {"name": name, "arguments": args}}),
                Some(sid),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        r.reply(id)
    }
}

/// Sessions kept in memory, shared by several server instances as a database would be (a
/// [`kberg_server::SessionStore`] for `HttpConfig::session_store`).
#[derive(Default)]
pub struct SharedStore(
    pub std::sync::Mutex<std::collections::HashMap<String, kberg_server::StoredSession>>,
);

#[async_trait::async_trait]
impl kberg_server::SessionStore for SharedStore {
    async fn load(
        &self,
        id: &str,
    ) -> Result<Option<kberg_server::StoredSession>, kberg_server::SessionStoreFailure> {
        Ok(self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned())
    }
    async fn store(
        &self,
        id: &str,
        s: &kberg_server::StoredSession,
    ) -> Result<(), kberg_server::SessionStoreFailure> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.into(), s.clone());
        Ok(())
    }
    async fn delete(&self, id: &str) -> Result<(), kberg_server::SessionStoreFailure> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        Ok(())
    }
}

pub async fn read(resp: reqwest::Response) -> Resp {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap_or_default();
    Resp {
        status,
        headers,
        text,
    }
}

/// Sends a 2026-07-28 `subscriptions/listen` as `token` asking for `uris`' updates; returns the
/// response as it came (a refusal, or a stream that stays open), its body unread.
pub async fn listen_response(url: &str, token: &str, uris: &[String]) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
            "io.modelcontextprotocol/clientCapabilities": {},
        },
        "notifications": {"resourceSubscriptions": uris}
    }});
    reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .header("mcp-protocol-version", PROTO_NEW)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .expect("listen sent")
}

/// Opens a 2026-07-28 `subscriptions/listen` as `token` asking for `uris`' updates; returns its
/// acknowledgement (the first message) and the stream, still open.
pub async fn listen(
    url: &str,
    token: &str,
    uris: &[String],
) -> (
    Value,
    impl futures::Stream<Item = reqwest::Result<Vec<u8>>> + Unpin,
) {
    use futures::StreamExt;
    let resp = listen_response(url, token, uris).await;
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = Box::pin(resp.bytes_stream().map(|c| c.map(|b| b.to_vec())));
    let mut buf = String::new();
    let ack = loop {
        if let Some(v) = buf
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .find_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        {
            break v;
        }
        let chunk = tokio::time::timeout(kberg_testkit::WAIT, stream.next())
            .await
            .expect("the acknowledgement within the test's limit")
            .expect("stream open")
            .expect("a chunk");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    };
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    (ack, stream)
}
