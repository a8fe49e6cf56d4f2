//! Upstream MCP servers behind the gateway, over real HTTP on loopback: an HTTP upstream (a
//! Kberg app that records the credentials of every request) reached by agents through the
//! gateway with their own Bridle tokens. Checked: the right agent's secret on every request and
//! never the client's own token, per-agent secrets, read/write permissions per project,
//! rotation during traffic, a missing mapping refused, dead and hanging upstreams reported
//! while the rest keeps serving, and bad entries refused at start.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_rules::{AgentCatalog, ReadWrite, RulesStore};
use kberg_agent::{McpSurface, ToolResult, ToolSurface};
use kberg_core::{
    Annotations, Content, Grants, Principal, Role, ToolBuilder, ToolOutput, ToolRegistry,
    WriteCapability,
};
use kberg_server::{AuthError, Authenticator, HeaderMap, HttpConfig, HttpServer, McpApp};
use kberg_testkit::{WAIT, eventually_async_ok};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// What the upstream saw and which of its own tokens it accepts.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<String>>,
    /// How many of those requests carried a body (JSON-RPC POSTs, which a forwarded call is;
    /// the client's own GET stream, opened in the background after the handshake, is not).
    posts: Mutex<usize>,
    accepted: Mutex<Vec<String>>,
    /// The `Authorization` header of each `DELETE` (a session's close), `""` for none.
    closes: Mutex<Vec<String>>,
    /// Signalled on each `DELETE`.
    closed: tokio::sync::Notify,
}

/// Records the `Authorization` header of every request; accepts `token <accepted>`.
struct RecordingAuth(Arc<Recorder>);

#[async_trait]
impl Authenticator for RecordingAuth {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<Principal>, AuthError> {
        let value = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        self.0.seen.lock().unwrap().push(value.clone());
        if headers.contains_key("content-type") {
            *self.0.posts.lock().unwrap() += 1;
        }
        let Some(token) = value.strip_prefix("token ") else {
            return Err(AuthError::Missing);
        };
        if !self.0.accepted.lock().unwrap().iter().any(|t| t == token) {
            return Err(AuthError::Invalid);
        }
        Ok(Arc::new(
            Principal::new(account(token)).with_grants(Grants::of(["tickets.write".to_string()])),
        ))
    }
}

/// The upstream account a token belongs to. It never contains the token: the gateway scrubs an
/// injected credential out of anything the upstream echoes.
fn account(token: &str) -> String {
    format!("acct-{}", token.chars().rev().collect::<String>())
}

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
struct CreateArgs {
    /// The title.
    title: String,
}

async fn start_upstream(recorder: Arc<Recorder>) -> (String, CancellationToken) {
    let tools = ToolRegistry::new();
    let cap = WriteCapability::new("tickets.write", "create tickets");
    tools.declare(cap.clone()).unwrap();
    tools
        .register(
            ToolBuilder::new("whoami")
                .description("Who the upstream thinks you are.")
                .handler(|_a: NoArgs, ctx| async move {
                    Ok(ToolOutput::text(ctx.caller().principal().id.clone()))
                }),
        )
        .unwrap();
    // A result with a block for the user only that quotes the credential the upstream was sent
    // (read back from the account name), beside one for the model; the result's `_meta` and
    // the model's block's quote it too, as does the tool's own `_meta` (claude's credential).
    tools
        .register(
            ToolBuilder::new("announce")
                .description("Announce the deploy.")
                .meta("example.com/signed", json!({"as": "up-claude-1"}))
                .icon(kberg_core::Icon::new(
                    "https://icons.example/?t=up-claude-1",
                ))
                .handler(|_a: NoArgs, ctx| async move {
                    let id = &ctx.caller().principal().id;
                    let token: String = id.trim_start_matches("acct-").chars().rev().collect();
                    Ok(ToolOutput::contents(vec![
                        Content::text(format!("signed in with token {token}"))
                            .annotated(Annotations::for_audience([Role::User])),
                        Content::text("announced")
                            .annotated(Annotations::for_audience([Role::Assistant]))
                            .with_meta("example.com/by", json!(token)),
                    ])
                    .with_meta(token.clone(), json!({"token": token})))
                }),
        )
        .unwrap();
    tools
        .register(ToolBuilder::new("create_ticket").write(cap).handler(
            |a: CreateArgs, ctx| async move {
                Ok(ToolOutput::text(format!(
                    "created `{}` as {}",
                    a.title,
                    ctx.caller().principal().id
                )))
            },
        ))
        .unwrap();
    let app = McpApp::builder("tickets", "1.0").tools(tools).build();
    let config = HttpConfig::new("127.0.0.1:0".parse().unwrap())
        .path("/mcp")
        .auth(RecordingAuth(Arc::clone(&recorder)));
    let closes = recorder;
    let server = HttpServer::bind(app, config)
        .await
        .unwrap()
        .map_router(move |r| {
            r.layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let closes = Arc::clone(&closes);
                    async move {
                        if req.method() == axum::http::Method::DELETE {
                            let auth = req
                                .headers()
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_string();
                            closes.closes.lock().unwrap().push(auth);
                            closes.closed.notify_one();
                        }
                        next.run(req).await
                    }
                },
            ))
        });
    let url = format!("http://{}/mcp", server.local_addr());
    let stop = server.shutdown_token();
    let s = stop.clone();
    tokio::spawn(async move { server.run(async move { s.cancelled().await }).await });
    (url, stop)
}

fn write_secret(dir: &Path, name: &str, value: &str) {
    std::fs::write(dir.join("secrets").join(name), format!("{value}\n")).unwrap();
}

fn append_config(dir: &Path, extra: &str) {
    let mut yaml = std::fs::read_to_string(dir.join("bridle.yaml")).unwrap();
    yaml.push_str(extra);
    std::fs::write(dir.join("bridle.yaml"), yaml).unwrap();
}

/// A data directory with agents `claude` and `codex`, an upstream `tickets` at `url` with
/// per-agent secrets, and permissions: claude reads and writes, codex only reads.
fn data_dir(url: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    append_config(
        tmp.path(),
        &format!(
            "upstreams:\n  tickets:\n    http: {{url: '{url}'}}\n    credential:\n      per_agent: {{claude: tickets-claude, codex: tickets-codex}}\n      format: 'token {{secret}}'\n"
        ),
    );
    write_secret(tmp.path(), "tickets-claude", "up-claude-1");
    write_secret(tmp.path(), "tickets-codex", "up-codex-1");
    let store = RulesStore::open(tmp.path(), AgentCatalog::builtin()).unwrap();
    let mut doc = demo_document();
    doc.permissions.get_mut("claude").unwrap().tools.insert(
        "tickets".into(),
        ReadWrite {
            read: true,
            write: true,
        },
    );
    doc.permissions.get_mut("codex").unwrap().tools.insert(
        "tickets".into(),
        ReadWrite {
            read: true,
            write: false,
        },
    );
    store.create("demo", &doc, "test").unwrap();
    tmp
}

fn token(dir: &Path, agent: &str) -> String {
    std::fs::read_to_string(dir.join("secrets").join(format!("{agent}-token")))
        .unwrap()
        .trim()
        .to_string()
}

async fn call(s: &McpSurface, name: &str, args: serde_json::Value) -> ToolResult {
    s.call(name, args, CancellationToken::new())
        .await
        .expect("the surface answers")
}

fn code(r: &ToolResult) -> String {
    r.structured
        .as_ref()
        .and_then(|s| s["code"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The `tickets` upstream accepting both agents' first secrets, and a gateway over
/// [`data_dir`] in front of it, serving on a free port.
struct Running {
    recorder: Arc<Recorder>,
    tmp: tempfile::TempDir,
    gw_url: String,
    offered: Vec<String>,
    stop: CancellationToken,
    served: tokio::task::JoinHandle<Result<(), bridle_gateway::GatewayError>>,
    upstream_stop: CancellationToken,
}

async fn run_gateway() -> Running {
    let recorder = Arc::new(Recorder::default());
    recorder
        .accepted
        .lock()
        .unwrap()
        .extend(["up-claude-1".to_string(), "up-codex-1".to_string()]);
    let (url, upstream_stop) = start_upstream(Arc::clone(&recorder)).await;
    let tmp = data_dir(&url);
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .build()
        .await
        .unwrap();
    let offered = gateway
        .upstreams()
        .wait_offered("tickets", kberg_testkit::WAIT)
        .await;
    let bound = gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let gw_url = bound.url();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let served = tokio::spawn(bound.run(async move { s.cancelled().await }));
    Running {
        recorder,
        tmp,
        gw_url,
        offered,
        stop,
        served,
        upstream_stop,
    }
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        self.served.await.unwrap().unwrap();
        self.upstream_stop.cancel();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_reach_the_upstream_with_their_own_injected_secret() {
    let running = run_gateway().await;
    let (recorder, tmp, gw_url) = (&running.recorder, &running.tmp, &running.gw_url);
    assert_eq!(
        running.offered,
        vec![
            "tickets__announce",
            "tickets__create_ticket",
            "tickets__whoami"
        ]
    );

    let claude_token = token(tmp.path(), "claude");
    let codex_token = token(tmp.path(), "codex");
    let claude = McpSurface::connect_http_with_bearer(gw_url, &claude_token)
        .await
        .unwrap();
    let codex = McpSurface::connect_http_with_bearer(gw_url, &codex_token)
        .await
        .unwrap();
    let listed = claude.tools().await.unwrap();
    let whoami = listed.iter().find(|t| t.name == "tickets__whoami").unwrap();
    assert!(whoami.read_only, "a read upstream tool stays a read");
    let create = listed
        .iter()
        .find(|t| t.name == "tickets__create_ticket")
        .unwrap();
    assert!(!create.read_only);

    // Each agent acts as its own upstream user.
    let r = call(&claude, "tickets__whoami", json!({})).await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.text, account("up-claude-1"));
    let r = call(&codex, "tickets__whoami", json!({})).await;
    assert_eq!(r.text, account("up-codex-1"));
    let r = call(&claude, "tickets__create_ticket", json!({"title": "t1"})).await;
    assert_eq!(
        r.text,
        format!("created `t1` as {}", account("up-claude-1"))
    );
    // codex may read but not write.
    let r = call(&codex, "tickets__create_ticket", json!({"title": "t2"})).await;
    assert!(r.is_error);
    assert_eq!(r.code.map(|c| c.as_str()), Some("capability_required"));

    // Every request the upstream saw carried one of the mapped secrets, never a Bridle token.
    {
        let seen = recorder.seen.lock().unwrap();
        assert!(!seen.is_empty());
        for v in seen.iter() {
            assert!(
                v == "token up-claude-1" || v == "token up-codex-1",
                "unexpected credential upstream: {v}"
            );
            assert!(!v.contains(&claude_token) && !v.contains(&codex_token));
        }
    }

    // Rotation during traffic: the next call uses the new secret, the old one never again.
    recorder
        .accepted
        .lock()
        .unwrap()
        .push("up-claude-2".to_string());
    recorder.seen.lock().unwrap().clear();
    write_secret(tmp.path(), "tickets-claude", "up-claude-2");
    for _ in 0..5 {
        let r = call(&claude, "tickets__whoami", json!({})).await;
        assert_eq!(r.text, account("up-claude-2"));
    }
    assert!(
        !recorder
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|v| v == "token up-claude-1"),
        "the old version was sent after the rotation"
    );

    // A secret that disappears: refused, nothing sent (no request with a body: the
    // connection that carried it is closed, and the close of its session is all it sends).
    std::fs::remove_file(tmp.path().join("secrets/tickets-codex")).unwrap();
    let posts = *recorder.posts.lock().unwrap();
    let r = call(&codex, "tickets__whoami", json!({})).await;
    assert!(r.is_error);
    assert_eq!(code(&r), "credential_missing", "{r:?}");
    assert_eq!(*recorder.posts.lock().unwrap(), posts);

    running.stop().await;
}

/// Sets whether `codex` may read `tickets` in the `demo` project, through a store of its own
/// (as another process or an edit by hand would); `settled` puts the file's time an hour back,
/// so the gateway keeps the documents it reads.
fn codex_reads(dir: &Path, read: bool, settled: bool) {
    let store = RulesStore::open(dir, AgentCatalog::builtin()).unwrap();
    let mut doc = store.load("demo").unwrap().document;
    let base = doc.revision;
    doc.permissions
        .get_mut("codex")
        .unwrap()
        .tools
        .insert("tickets".into(), ReadWrite { read, write: false });
    store
        .save_edit("demo", &doc, base, "test", "codex reads tickets")
        .unwrap();
    if settled {
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        for path in [dir.join("projects/demo.yaml"), dir.join("projects")] {
            std::fs::File::open(&path)
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        }
    }
}

/// A forwarded call's permission check reads the documents its request's authentication
/// found current: a permission taken away or given back, in a file that has settled (kept)
/// or not (read again), is followed by the very next call, each time.
/// An upstream's block for the user only reaches the agent with its audience, so the agent's
/// client keeps it from the model, and scrubbed of the credential the gateway injected, as
/// every block is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_for_the_user_keep_their_audience_and_lose_the_credential() {
    let running = run_gateway().await;
    let claude =
        McpSurface::connect_http_with_bearer(&running.gw_url, &token(running.tmp.path(), "claude"))
            .await
            .unwrap();
    let r = call(&claude, "tickets__announce", json!({})).await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(
        r.text,
        "announced\n[1 block for the user only, not shown to you]"
    );
    assert_eq!(r.user_text, "signed in with token [redacted]");
    assert!(!format!("{r:?}").contains("up-claude-1"), "{r:?}");
    running.stop().await;
}

/// One stateless 2026-07-28 request to the gateway as `bearer`, its answer's JSON and text.
async fn raw(url: &str, bearer: &str, method: &str, params: serde_json::Value) -> (Value, String) {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "probe", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    let mut request = reqwest::Client::new()
        .post(url)
        .bearer_auth(bearer)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(name) = params["name"].as_str() {
        request = request.header("mcp-name", name);
    }
    let r = request
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    let body = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(&text)
        .trim()
        .to_string();
    (serde_json::from_str(&body).unwrap(), text)
}

/// What an upstream says in a `_meta` reaches the agent's client, not only its model: the
/// tool's in the listing, the result's and a block's. Each loses the injected credential.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_meta_an_upstream_sends_loses_the_credential() {
    let running = run_gateway().await;
    let claude = token(running.tmp.path(), "claude");
    let (listed, text) = raw(&running.gw_url, &claude, "tools/list", json!({})).await;
    assert!(!text.contains("up-claude-1"), "{text}");
    let announce = listed["result"]["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "tickets__announce"))
        .unwrap_or_else(|| panic!("listed: {listed}"));
    assert_eq!(
        announce["_meta"]["example.com/signed"],
        json!({"as": "[redacted]"})
    );
    assert_eq!(
        announce["icons"],
        json!([{"src": "https://icons.example/?t=[redacted]"}])
    );
    let (called, text) = raw(
        &running.gw_url,
        &claude,
        "tools/call",
        json!({"name": "tickets__announce", "arguments": {}}),
    )
    .await;
    assert!(!text.contains("up-claude-1"), "{text}");
    let result = &called["result"];
    assert_eq!(
        result["_meta"],
        json!({"[redacted]": {"token": "[redacted]"}}),
        "{called}"
    );
    assert_eq!(
        result["content"][1]["_meta"],
        json!({"example.com/by": "[redacted]"})
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_permission_is_followed_by_the_next_forwarded_call() {
    let running = run_gateway().await;
    let (recorder, tmp, gw_url) = (&running.recorder, &running.tmp, &running.gw_url);
    assert!(
        running.offered.contains(&"tickets__whoami".to_string()),
        "{:?}",
        running.offered
    );
    let codex = McpSurface::connect_http_with_bearer(gw_url, &token(tmp.path(), "codex"))
        .await
        .unwrap();

    for settled in [true, false, true] {
        codex_reads(tmp.path(), true, settled);
        for _ in 0..3 {
            let r = call(&codex, "tickets__whoami", json!({})).await;
            assert_eq!(r.text, account("up-codex-1"), "settled: {settled}: {r:?}");
        }
        let sent = recorder.seen.lock().unwrap().len();
        codex_reads(tmp.path(), false, settled);
        for _ in 0..3 {
            let r = call(&codex, "tickets__whoami", json!({})).await;
            assert_eq!(code(&r), "capability_required", "settled: {settled}: {r:?}");
        }
        assert_eq!(
            recorder.seen.lock().unwrap().len(),
            sent,
            "a refused call sends nothing upstream"
        );
    }

    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_mapping_is_refused_and_nothing_is_sent() {
    let recorder = Arc::new(Recorder::default());
    recorder
        .accepted
        .lock()
        .unwrap()
        .push("up-claude-1".to_string());
    let (url, upstream_stop) = start_upstream(Arc::clone(&recorder)).await;
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    append_config(
        tmp.path(),
        &format!(
            "upstreams:\n  tickets:\n    http: {{url: '{url}'}}\n    credential:\n      per_agent: {{claude: tickets-claude}}\n      format: 'token {{secret}}'\n"
        ),
    );
    write_secret(tmp.path(), "tickets-claude", "up-claude-1");
    let store = RulesStore::open(tmp.path(), AgentCatalog::builtin()).unwrap();
    let mut doc = demo_document();
    for agent in ["claude", "codex"] {
        doc.permissions.get_mut(agent).unwrap().tools.insert(
            "tickets".into(),
            ReadWrite {
                read: true,
                write: true,
            },
        );
    }
    store.create("demo", &doc, "test").unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .build()
        .await
        .unwrap();
    assert!(
        !gateway
            .upstreams()
            .wait_offered("tickets", kberg_testkit::WAIT)
            .await
            .is_empty()
    );
    let before = *recorder.posts.lock().unwrap();
    let codex = kberg_core::Caller::new(
        Principal::new("codex")
            .with_agent("codex")
            .with_grants(gateway.context().grants_for("codex")),
    );
    let out = gateway
        .app()
        .tools()
        .call(
            &codex,
            "tickets__whoami",
            json!({}),
            kberg_core::CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(out.is_error);
    assert_eq!(
        out.structured.as_ref().unwrap()["code"],
        "credential_missing"
    );
    assert_eq!(
        *recorder.posts.lock().unwrap(),
        before,
        "a request was sent"
    );
    gateway.upstreams().shutdown().await;
    upstream_stop.cancel();
}

/// A connection whose attempts fail (here: the upstream refuses codex's credential) answers
/// each call at once with why, instead of holding every call for the whole connect timeout
/// while it waits to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_failed_answers_at_once_not_after_the_connect_timeout() {
    let recorder = Arc::new(Recorder::default());
    recorder
        .accepted
        .lock()
        .unwrap()
        .push("up-claude-1".to_string());
    let (url, upstream_stop) = start_upstream(Arc::clone(&recorder)).await;
    let tmp = data_dir(&url);
    let config = GatewayConfig::load(tmp.path()).unwrap();
    // Far longer than the test waits for an answer.
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .connect_timeout(Duration::from_secs(3600))
        .build()
        .await
        .unwrap();
    gateway
        .upstreams()
        .wait_offered("tickets", kberg_testkit::WAIT)
        .await;
    let bound = gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let gw_url = bound.url();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let served = tokio::spawn(bound.run(async move { s.cancelled().await }));

    let codex = McpSurface::connect_http_with_bearer(&gw_url, &token(tmp.path(), "codex"))
        .await
        .unwrap();
    for attempt in 1..=2 {
        let r = tokio::time::timeout(WAIT, call(&codex, "tickets__whoami", json!({})))
            .await
            .unwrap_or_else(|_| panic!("call {attempt} waited for the connect timeout"));
        assert!(r.is_error, "{r:?}");
        assert_eq!(code(&r), "upstream_unavailable", "{r:?}");
    }
    stop.cancel();
    served.await.unwrap().unwrap();
    upstream_stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_upstream_answers_per_call_and_the_rest_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    append_config(
        tmp.path(),
        "upstreams:\n  ghost:\n    stdio: {command: /nonexistent/bridle-test-server}\n  hang:\n    stdio: {command: sleep, args: ['600']}\n",
    );
    let store = RulesStore::open(tmp.path(), AgentCatalog::builtin()).unwrap();
    store.create("demo", &demo_document(), "test").unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap();
    // The gateway's own tools keep working.
    let caller = kberg_core::Caller::new(Principal::new("claude").with_agent("claude"));
    let out = gateway
        .app()
        .tools()
        .call(
            &caller,
            "list_projects",
            json!({}),
            kberg_core::CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(!out.is_error);
    // And the operator sees why each upstream is down.
    eventually_async_ok("an error to be reported", || async {
        let reports = gateway.upstreams().reports().await;
        let ghost = reports.iter().find(|r| r.namespace == "ghost").unwrap();
        let hang = reports.iter().find(|r| r.namespace == "hang").unwrap();
        if let (Some(g), Some(h)) = (&ghost.last_error, &hang.last_error) {
            assert!(g.contains("could not start"), "{g}");
            assert!(h.contains("within"), "{h}");
            assert!(!ghost.connected && !hang.connected);
            return Ok(());
        }
        Err(format!("{reports:?}"))
    })
    .await;
    gateway.upstreams().shutdown().await;
}

#[test]
fn bad_upstream_entries_stop_the_gateway_at_start_naming_them() {
    let cases = [
        (
            "upstreams:\n  gitea:\n    http: {url: 'http://127.0.0.1:1/mcp'}\n    credential: {secret: t, format: 'token'}\n",
            "exactly once",
        ),
        (
            "upstreams:\n  gitea:\n    stdio: {command: gitea-mcp}\n    credential: {per_agent: {nobody: t}, env: GITEA_ACCESS_TOKEN}\n",
            "not a configured agent",
        ),
        (
            "upstreams:\n  gitea:\n    projects: [demo]\n",
            "how to reach it",
        ),
        // A token in the URL would reach the log in the HTTP client's errors: refused, and
        // the URL not quoted.
        (
            "upstreams:\n  gitea:\n    http: {url: 'https://git.example/mcp?token=canary-url-token'}\n",
            "`credential:`",
        ),
        (
            "upstreams:\n  gitea:\n    http: {url: 'https://bot:canary-url-pass@git.example/mcp'}\n",
            "user part",
        ),
    ];
    for (extra, needle) in cases {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir_with_token_files(tmp.path()).unwrap();
        append_config(tmp.path(), extra);
        let err = GatewayConfig::load(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("upstream `gitea`"), "{err}");
        assert!(err.contains(needle), "{err}");
        assert!(!err.contains("canary"), "{err}");
    }
}

/// Why a fresh data directory with `extra` added to its `bridle.yaml` does not load.
fn load_error(extra: &str) -> String {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    append_config(tmp.path(), extra);
    GatewayConfig::load(tmp.path()).unwrap_err().to_string()
}

/// An upstream named `kanboard` beside the `kanboard:` section would offer its tools under the
/// namespace the Kanboard tools already hold (`kanboard__...`): refused when the configuration
/// is read, saying why, rather than at start as a capability "already declared".
#[cfg(feature = "kanboard")]
#[test]
fn an_upstream_under_the_kanboard_tools_namespace_is_refused() {
    let err = load_error(
        "kanboard:\n  url: http://127.0.0.1:9/jsonrpc.php\nupstreams:\n  kanboard:\n    http: {url: 'http://127.0.0.1:9/mcp'}\n",
    );
    assert!(err.contains("upstream `kanboard`"), "{err}");
    assert!(err.contains("`kanboard:` section"), "{err}");
}

#[cfg(feature = "kanboard")]
#[test]
fn a_kanboard_timeout_of_zero_is_refused_naming_the_field() {
    let err = load_error("kanboard:\n  url: http://127.0.0.1:9/jsonrpc.php\n  timeout_secs: 0\n");
    assert!(err.contains("kanboard.timeout_secs"), "{err}");
}

#[test]
fn an_upstream_named_memory_beside_the_memory_tools_is_refused() {
    let err = load_error(
        "memory:\n  embedder:\n    local: {path: /nonexistent/model}\nupstreams:\n  memory:\n    http: {url: 'http://127.0.0.1:9/mcp'}\n",
    );
    assert!(err.contains("upstream `memory`"), "{err}");
    assert!(err.contains("`memory:` section"), "{err}");
}

/// The vault as the credential source: a secret created, rotated and revoked in the vault is
/// followed by the next call, every use is in the vault's log, and an agent that holds only a
/// vault-issued token authenticates with it until it is revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_secrets_and_vault_tokens_are_followed_per_request() {
    use bridle_gateway::gateway::open_vault;
    use bridle_gateway::vault::SecretValue;

    let recorder = Arc::new(Recorder::default());
    recorder
        .accepted
        .lock()
        .unwrap()
        .extend(["vault-v1".to_string(), "vault-v2".to_string()]);
    let closes = |r: &Recorder| r.closes.lock().unwrap().clone();
    let (url, upstream_stop) = start_upstream(Arc::clone(&recorder)).await;
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    append_config(
        tmp.path(),
        &format!(
            "upstreams:\n  tickets:\n    http: {{url: '{url}'}}\n    credential: {{secret: tickets-token, format: 'token {{secret}}'}}\n"
        ),
    );
    // An agent with no token file: it authenticates with a vault-issued token.
    let yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    let yaml = yaml.replace("agents:\n", "agents:\n  robot:\n    type: claude\n");
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    let mut doc = demo_document();
    doc.permissions.get_mut("claude").unwrap().tools.insert(
        "tickets".into(),
        ReadWrite {
            read: true,
            write: true,
        },
    );
    RulesStore::open(tmp.path(), AgentCatalog::builtin())
        .unwrap()
        .create("demo", &doc, "test")
        .unwrap();
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let (vault, created) = open_vault(tmp.path(), &config).unwrap();
    assert!(created.is_some(), "the first start creates the master key");
    vault
        .create("tickets-token", &SecretValue::from("vault-v1"), "user:test")
        .unwrap();
    let robot_token = vault.set_agent_token("robot", "user:test").unwrap();
    let robot_token = robot_token.token.expose_str().unwrap().to_string();

    let gateway = GatewayBuilder::new(tmp.path(), config)
        .build()
        .await
        .unwrap();
    assert!(gateway.master_key_created().is_none(), "the key is reused");
    assert!(
        !gateway
            .upstreams()
            .wait_offered("tickets", kberg_testkit::WAIT)
            .await
            .is_empty()
    );
    let bound = gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let gw_url = bound.url();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let served = tokio::spawn(bound.run(async move { s.cancelled().await }));

    // `robot` has no token file: its vault token authenticates it, as a `claude`.
    let robot = McpSurface::connect_http_with_bearer(&gw_url, &robot_token)
        .await
        .unwrap();
    let r = call(&robot, "tickets__whoami", json!({})).await;
    assert_eq!(r.text, account("vault-v1"), "{r:?}");

    // Rotated in the vault: the next calls carry the new version.
    vault
        .rotate(
            "tickets-token",
            &SecretValue::from("vault-v2"),
            "user:test",
            Duration::ZERO,
        )
        .unwrap();

    // Calls at once, the first after the rotation: one connection starts with the new
    // version, not one per call; their uses are recorded in shared batches, and each call is
    // recorded exactly once, before it is sent.
    let forwarded = |log: &[bridle_gateway::vault::AuditEntry]| {
        log.iter()
            .filter(|e| e.action == "use" && e.request_id.as_deref() != Some("connect"))
            .count()
    };
    let before = forwarded(&vault.audit_log(0, 10_000).unwrap());
    let answers =
        futures::future::join_all((0..24).map(|_| call(&robot, "tickets__whoami", json!({}))))
            .await;
    for r in &answers {
        assert_eq!(r.text, account("vault-v2"), "{r:?}");
    }
    let log = vault.audit_log(0, 10_000).unwrap();
    assert_eq!(forwarded(&log), before + 24, "{:?}", log.last());
    // The replaced connection's session is closed with the version now active, not the
    // rotated one.
    while closes(&recorder).is_empty() {
        tokio::time::timeout(WAIT, recorder.closed.notified())
            .await
            .expect("the replaced connection's session was not closed");
    }
    assert_eq!(closes(&recorder), ["token vault-v2"]);
    let uses: Vec<_> = log
        .into_iter()
        .filter(|e| e.action == "use" && e.secret.as_deref() == Some("tickets-token"))
        .collect();
    // Each connection start (the first, and the one after the rotation) is a use of its own,
    // recorded with the version it carried, before its first call.
    let connects: Vec<Option<u64>> = uses
        .iter()
        .filter(|e| e.request_id.as_deref() == Some("connect"))
        .map(|e| e.version)
        .collect();
    assert_eq!(connects, [Some(1), Some(2)], "{uses:?}");
    assert!(
        uses.iter()
            .all(|e| e.upstream.as_deref() == Some("tickets"))
    );

    // Revoked: refused, nothing sent; the connection that carried it is closed (which ends its
    // session: no call, only the close).
    vault.revoke("tickets-token", 2, "user:test").unwrap();
    recorder.seen.lock().unwrap().clear();
    let posts = *recorder.posts.lock().unwrap();
    let r = call(&robot, "tickets__whoami", json!({})).await;
    assert_eq!(code(&r), "credential_missing", "{r:?}");
    assert_eq!(*recorder.posts.lock().unwrap(), posts);
    let seen = recorder.seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|h| h.is_empty()),
        "only the revoked connection's close: {seen:?}"
    );
    // That close carries no credential: the revoked one no longer holds.
    while closes(&recorder).len() < 2 {
        tokio::time::timeout(WAIT, recorder.closed.notified())
            .await
            .expect("the revoked connection's session was not closed");
    }
    assert_eq!(closes(&recorder), ["token vault-v2", ""]);

    // Rotated to a value pasted with its line break: it cannot go in a header, so the call is
    // refused naming the secret, and nothing is forwarded (not as an unauthenticated request
    // either), and no use is recorded.
    let posts = *recorder.posts.lock().unwrap();
    let recorded = vault.audit_log(0, 1000).unwrap().len();
    vault
        .rotate(
            "tickets-token",
            &SecretValue::from("vault-v3\n"),
            "user:test",
            Duration::ZERO,
        )
        .unwrap();
    let r = call(&robot, "tickets__whoami", json!({})).await;
    assert_eq!(code(&r), "credential_missing", "{r:?}");
    assert!(r.text.contains("cannot be sent"), "{r:?}");
    assert!(!r.text.contains("vault-v3"), "{r:?}");
    assert_eq!(*recorder.posts.lock().unwrap(), posts);
    let seen = recorder.seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|h| h.is_empty()),
        "only the old session's close: {seen:?}"
    );
    let uses_since: Vec<_> = vault.audit_log(0, 1000).unwrap()[recorded..]
        .iter()
        .filter(|e| e.action == "use")
        .cloned()
        .collect();
    assert!(uses_since.is_empty(), "{uses_since:?}");

    // The agent's token revoked: its next request is refused at the door.
    vault.revoke_agent_tokens("robot", "user:test").unwrap();
    let after = robot
        .call("list_projects", json!({}), CancellationToken::new())
        .await;
    assert!(
        after.is_err() || after.as_ref().is_ok_and(|r| r.is_error),
        "a revoked token still served: {after:?}"
    );
    assert!(
        McpSurface::connect_http_with_bearer(&gw_url, &robot_token)
            .await
            .is_err()
    );

    stop.cancel();
    served.await.unwrap().unwrap();
    upstream_stop.cancel();
}
