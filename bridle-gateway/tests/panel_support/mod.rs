//! The web panel's test harness: a gateway data directory with the demo project, admins whose
//! credentials a test can revoke, and the panel with the admin API either as one in-process
//! router (for `oneshot` page tests) or served on a loopback port (for the browser tests).

#![allow(dead_code)] // Each test file uses part of the harness.

pub mod browser;
pub mod live;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use bridle_gateway::GatewayContext;
use bridle_gateway::admin::{AdminCredentials, AdminIdentity, AdminServer, AdminState};
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir};
use bridle_gateway::panel::PanelConfig;
use bridle_rules::{ChangeRequest, Origin, Severity};
use tower::ServiceExt;

pub const ALICE: &str = "alice-admin-token-0123456789";
pub const BOB: &str = "bob-admin-token-9876543210";
/// An admin who may only watch (a `watcher` of the admin API the panel calls).
pub const WATCHER: &str = "watcher-admin-token-5555555555";

/// Admin credentials a test can revoke while a session is open.
#[derive(Default)]
pub struct RevocableAdmins {
    tokens: Mutex<HashMap<String, String>>,
}

impl RevocableAdmins {
    pub fn with(admins: &[(&str, &str)]) -> Arc<Self> {
        let this = Self::default();
        {
            let mut t = this.tokens.lock().unwrap();
            for (name, token) in admins {
                t.insert((*token).to_string(), (*name).to_string());
            }
        }
        Arc::new(this)
    }

    pub fn revoke(&self, token: &str) {
        self.tokens.lock().unwrap().remove(token);
    }
}

impl AdminCredentials for RevocableAdmins {
    fn verify(&self, token: &str) -> Option<AdminIdentity> {
        self.tokens
            .lock()
            .unwrap()
            .get(token)
            .map(|name| AdminIdentity::new(name.clone()))
    }
}

/// A gateway (not listening) over a fresh data directory with the demo project, its three
/// demo agents plus `bot` (a claude with vault-issued tokens only), and three admins.
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub ctx: Arc<GatewayContext>,
    pub admins: Arc<RevocableAdmins>,
    pub gateway: bridle_gateway::Gateway,
}

impl Fixture {
    pub async fn new() -> Self {
        Self::build(|b| b).await
    }

    /// As [`Fixture::new`], with this memory service (session memories, pattern examples).
    pub async fn with_memory(memory: bridle_memory::MemoryService) -> Self {
        Self::build(move |b| b.memory(memory)).await
    }

    /// As [`Fixture::new`], with the gateway builder adjusted first.
    pub async fn build(
        configure: impl FnOnce(bridle_gateway::GatewayBuilder) -> bridle_gateway::GatewayBuilder,
    ) -> Self {
        Self::build_with_yaml("", configure).await
    }

    /// As [`Fixture::build`], with `extra` (top-level sections) appended to `bridle.yaml`.
    pub async fn build_with_yaml(
        extra: &str,
        configure: impl FnOnce(bridle_gateway::GatewayBuilder) -> bridle_gateway::GatewayBuilder,
    ) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir(tmp.path()).unwrap();
        let yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
        let yaml = yaml.replace(
            "agents:\n",
            "agents:\n  bot:\n    type: claude\n    projects: [demo]\n",
        );
        std::fs::write(tmp.path().join("bridle.yaml"), format!("{yaml}{extra}")).unwrap();
        let config = GatewayConfig::load(tmp.path()).unwrap();
        let gateway = configure(bridle_gateway::GatewayBuilder::new(tmp.path(), config))
            .build()
            .await
            .unwrap();
        let ctx = Arc::clone(gateway.context());
        ctx.store.create("demo", &demo_document(), "test").unwrap();
        let admins = RevocableAdmins::with(&[("alice", ALICE), ("bob", BOB), ("watcher", WATCHER)]);
        Self {
            tmp,
            ctx,
            admins,
            gateway,
        }
    }

    /// The admin API's state over the fixture, `watcher` only watching.
    pub fn state(&self) -> AdminState {
        self.gateway
            .admin_state(Arc::clone(&self.admins) as Arc<dyn AdminCredentials>)
            .watcher("watcher")
    }

    /// The panel and the API as one router, as the admin listener serves them.
    pub fn router(&self, config: PanelConfig) -> Router {
        self.router_over(config, self.state())
    }

    /// As [`Fixture::router`], over an admin API that is read-only for everyone.
    pub fn read_only_router(&self, config: PanelConfig) -> Router {
        self.router_over(config, self.state().read_only(true))
    }

    fn router_over(&self, config: PanelConfig, state: AdminState) -> Router {
        bridle_gateway::admin::router(state.clone())
            .merge(bridle_gateway::panel::router(config, &state).unwrap())
    }

    /// An agent's proposal of a new guardrail on `demo`.
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

    pub fn request_scope(&self, action: &str) -> u64 {
        self.ctx
            .store
            .request_scope(
                "demo",
                "claude",
                Some("sess-1"),
                action,
                "to finish the task",
            )
            .unwrap()
            .id
    }

    pub fn revision(&self) -> u64 {
        self.ctx.store.load("demo").unwrap().document.revision
    }

    pub fn proposal_status(&self, id: u64) -> String {
        self.ctx
            .store
            .proposal(id)
            .unwrap()
            .status
            .as_str()
            .to_string()
    }
}

/// The panel's configuration of the tests (the watcher is one in [`Fixture::state`]); tests
/// add to this.
pub fn panel_config() -> PanelConfig {
    PanelConfig::default()
}

/// One answer of the in-process router.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn location(&self) -> &str {
        self.header("location").unwrap_or_default()
    }

    /// The session cookie this answer sets (`name=value`), if any.
    pub fn session_cookie(&self) -> Option<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| !v.contains("Max-Age=0"))
            .and_then(|v| v.split(';').next())
            .map(str::to_string)
    }

    pub fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    }
}

/// Drives the in-process router like a same-origin browser.
pub struct Client {
    pub router: Router,
    pub cookie: Option<String>,
    pub host: String,
    /// The client address the server sees (as `axum::serve` with connect info sets it).
    pub peer: Option<SocketAddr>,
}

pub enum Caller {
    /// `Sec-Fetch-Site: same-origin` and a matching `Origin`.
    SameOrigin,
    /// `Sec-Fetch-Site: cross-site` and a foreign `Origin`.
    CrossSite,
    /// No fetch metadata; a foreign `Origin` (an older browser).
    ForeignOriginOnly,
    /// Neither header (not a browser).
    NoHeaders,
    /// An `Origin` of this value and no fetch metadata.
    Origin(String),
}

impl Client {
    pub fn new(router: Router) -> Self {
        Self {
            router,
            cookie: None,
            host: "127.0.0.1:7879".into(),
            peer: None,
        }
    }

    pub async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Reply {
            status,
            headers,
            body: String::from_utf8(bytes.to_vec()).unwrap(),
        }
    }

    fn builder(&self, method: &str, path: &str) -> axum::http::request::Builder {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &self.host);
        if let Some(c) = &self.cookie {
            b = b.header(header::COOKIE, c);
        }
        if let Some(peer) = self.peer {
            b = b.extension(axum::extract::ConnectInfo(peer));
        }
        b
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.builder("GET", path).body(Body::empty()).unwrap())
            .await
    }

    pub async fn get_htmx(&self, path: &str) -> Reply {
        self.send(
            self.builder("GET", path)
                .header("hx-request", "true")
                .body(Body::empty())
                .unwrap(),
        )
        .await
    }

    pub async fn post_as(
        &self,
        path: &str,
        form: &[(&str, &str)],
        site: Caller,
        htmx: bool,
    ) -> Reply {
        let mut b = self
            .builder("POST", path)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        let own = format!("http://{}", self.host);
        b = match site {
            Caller::SameOrigin => b
                .header("sec-fetch-site", "same-origin")
                .header(header::ORIGIN, own),
            Caller::CrossSite => b
                .header("sec-fetch-site", "cross-site")
                .header(header::ORIGIN, "http://evil.example"),
            Caller::ForeignOriginOnly => b.header(header::ORIGIN, "http://evil.example"),
            Caller::NoHeaders => b,
            Caller::Origin(o) => b.header(header::ORIGIN, o),
        };
        if htmx {
            b = b.header("hx-request", "true");
        }
        let body = serde_urlencoded::to_string(form).unwrap();
        self.send(b.body(Body::from(body)).unwrap()).await
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Reply {
        self.post_as(path, form, Caller::SameOrigin, false).await
    }

    pub async fn post_htmx(&self, path: &str, form: &[(&str, &str)]) -> Reply {
        self.post_as(path, form, Caller::SameOrigin, true).await
    }

    /// Logs in with `token`; panics unless the panel accepts it.
    pub async fn login(&mut self, token: &str) {
        let r = self
            .post("/panel/login", &[("token", token), ("next", "/panel")])
            .await;
        assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
        self.cookie = Some(r.session_cookie().expect("a session cookie"));
    }
}

/// A panel served on a loopback port, as `bridle serve` serves it.
pub struct Served {
    pub fixture: Fixture,
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    pub async fn start(config: PanelConfig) -> Self {
        Self::start_on(config, Fixture::new().await).await
    }

    /// As [`Served::start`], over this fixture (one with memory, say).
    pub async fn start_on(config: PanelConfig, fixture: Fixture) -> Self {
        let server = AdminServer::bind(SocketAddr::from(([127, 0, 0, 1], 0)), fixture.state())
            .await
            .unwrap()
            .panel(Some(config));
        let addr = server.local_addr();
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
            fixture,
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(kberg_testkit::WAIT, task)
                .await
                .expect("the server stops")
                .unwrap();
        }
    }
}

/// A client signed in as alice on the default test panel.
pub async fn signed_in(fixture: &Fixture) -> Client {
    let mut c = Client::new(fixture.router(panel_config()));
    c.login(ALICE).await;
    c
}

/// A memory service over an in-memory store with a constant embedder (ranking then rests on
/// the keyword half of the hybrid search).
pub fn memory_service() -> bridle_memory::MemoryService {
    bridle_memory::MemoryService::with(
        Arc::new(bridle_memory::EmbeddedStore::open_in_memory().unwrap()),
        Arc::new(bridle_memory::ConstantEmbedder::new(8)),
        bridle_memory::PatternIndexConfig::default(),
    )
}

pub async fn remember(
    m: &bridle_memory::MemoryService,
    project: &str,
    agent: &str,
    tag: &str,
    text: &str,
) {
    m.session
        .remember(bridle_memory::NewMemory {
            kind: "decision".into(),
            text: text.into(),
            project: project.into(),
            agent: Some(agent.into()),
            session: Some("s-1".into()),
            tags: vec![tag.into()],
        })
        .await
        .unwrap();
}

/// A memory service with three session memories (two of `demo`, one of `other`) and one
/// indexed example (`retry-example`, from the returned folder).
pub async fn stocked_memory() -> (bridle_memory::MemoryService, tempfile::TempDir) {
    let memory = memory_service();
    remember(
        &memory,
        "demo",
        "claude",
        "db",
        "We use SQLite for the queue.",
    )
    .await;
    remember(
        &memory,
        "demo",
        "codex",
        "ops",
        "Retries back off <script>alert(1)</script> exponentially.",
    )
    .await;
    remember(
        &memory,
        "other",
        "codex",
        "db",
        "The other project uses Postgres.",
    )
    .await;
    let repo = tempfile::tempdir().unwrap();
    std::fs::write(
        repo.path().join("retry.rs"),
        "/// Retries with exponential backoff.\npub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n",
    )
    .unwrap();
    let report = memory
        .patterns
        .index(
            &bridle_memory::ExampleRepo {
                url: repo.path().display().to_string(),
                reference_tag: "retry-example".into(),
                arch_tag: "retry".into(),
            },
            &bridle_memory::NoProgress,
        )
        .await
        .unwrap();
    assert!(report.chunks > 0);
    (memory, repo)
}
