//! Gateway replicas on one PostgreSQL database (`database: postgres://...` in bridle.yaml): an
//! approval made on replica A reaches an agent subscribed to its rules on replica B through
//! `LISTEN/NOTIFY` (B's polling tick is set far beyond the test's deadline, so only the
//! notification can deliver it), a project created on A appears on B, an agent token issued on
//! A is accepted by B's MCP endpoint on the next request, and one rotated out or revoked on A is
//! refused by B as soon as B's vault has heard the change on its channel (B answers token checks
//! from a cache those notifications invalidate), and a bad `database:` setting (or another
//! master key) stops the gateway with a clear message that never holds the password.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_gateway::db::StateDatabase;
use bridle_gateway::gateway::open_vault;
use bridle_gateway::resources::{rules_uri, watch};
use bridle_gateway::vault::{MasterKey, Vault};
use bridle_gateway::{GatewayContext, build_app};
use bridle_rules::db::postgres::PgDatabase;
use bridle_rules::{ChangeRequest, DocumentSource, Origin};
use kberg_core::ResourceEvent;
use kberg_testkit::eventually_async;
use pg_cluster::{PASSWORD, PgCluster};

/// The master key every replica of these tests is given (one file, as a Docker secret would be).
fn shared_key() -> &'static Path {
    static KEY: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = KEY.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        MasterKey::load_or_create(&dir.path().join("master.key")).unwrap();
        dir
    });
    // The folder lives as long as the test process.
    Box::leak(dir.path().join("master.key").into_boxed_path())
}

/// A data directory configured for the cluster's database, its password in a secret file, and
/// the replicas' shared master key. Besides the demo agents (token files) there is `bot`, a
/// claude that authenticates with vault-issued tokens only.
fn data_dir(cluster: &PgCluster, dbname: &str) -> (tempfile::TempDir, GatewayConfig) {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let yaml = std::fs::read_to_string(tmp.path().join("bridle.yaml")).unwrap();
    let yaml = yaml.replace(
        "agents:\n",
        "agents:\n  bot:\n    type: claude\n    projects: [demo]\n",
    );
    std::fs::write(tmp.path().join("bridle.yaml"), yaml).unwrap();
    let mut config = GatewayConfig::load(tmp.path()).unwrap();
    config.vault.master_key = Some(shared_key().to_path_buf());
    config.database = Some(cluster.url(dbname));
    config.database_password = Some("file:pg-password".into());
    std::fs::write(
        config.secrets_path(tmp.path()).join("pg-password"),
        format!("{PASSWORD}\n"),
    )
    .unwrap();
    (tmp, config)
}

fn open(dir: &Path, config: GatewayConfig) -> Arc<GatewayContext> {
    let (vault, _) = open_vault(dir, &config).unwrap();
    let db = StateDatabase::open(dir, &config, &vault).unwrap();
    GatewayContext::open_with(dir, config, &db).unwrap()
}

async fn next_event(sub: &mut kberg_core::Subscriber) -> ResourceEvent {
    tokio::time::timeout(kberg_testkit::WAIT, sub.next())
        .await
        .expect("an event within the deadline")
        .expect("the registry is alive")
}

/// Waits (polling the server, with a deadline) until `n` connections listen for changes.
async fn until_listening(cluster: &PgCluster, dbname: &str, n: i64) {
    let db = PgDatabase::connect(&cluster.settings(dbname)).unwrap();
    eventually_async("the watcher to listen", || {
        let name = dbname.to_string();
        let d = db.clone();
        async move {
            let listening: i64 = tokio::task::spawn_blocking(move || {
                d.client()
                    .unwrap()
                    .query_opt(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN %'",
                        &[&name],
                    )
                    .unwrap()
                    .map(|r| r.get::<_, i64>(0))
                    .unwrap_or(0)
            })
            .await
            .unwrap();
            (listening >= n).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_on_replica_a_notifies_a_subscriber_on_replica_b() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (a_dir, a_config) = data_dir(cluster, &dbname);
    let (b_dir, b_config) = data_dir(cluster, &dbname);
    let a = open(a_dir.path(), a_config);
    a.store.create("demo", &demo_document(), "test").unwrap();
    let b = open(b_dir.path(), b_config);
    assert_eq!(b.store.document_source(), DocumentSource::Database);
    // B's data directory got the document written out when it opened.
    assert!(b_dir.path().join("projects/demo.yaml").is_file());

    let app = build_app(&b).unwrap();
    let resources = app.resources().clone();
    let uri = rules_uri("demo", "claude");
    assert!(resources.exists(&uri));
    let mut sub = resources.subscriber();
    sub.subscribe(&uri).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    // A tick far beyond every deadline below: only NOTIFY can wake B's watcher in time.
    let watcher = tokio::spawn(watch(
        Arc::clone(&b),
        resources.clone(),
        b_dir.path().join("projects"),
        Duration::from_secs(3600),
        stop.clone(),
    ));
    until_listening(cluster, &dbname, 1).await;

    let store = a.store.clone();
    let approved = tokio::task::spawn_blocking(move || {
        let p = store
            .propose(
                "demo",
                &Origin::agent("claude", Some("on-a".into())),
                &ChangeRequest::Pattern {
                    standard: Some("hexagonal".into()),
                    custom: None,
                },
                None,
            )
            .unwrap();
        store.approve(p.id, "alice").unwrap()
    })
    .await
    .unwrap();
    assert_eq!(approved.applied_revision, Some(2));
    assert_eq!(
        next_event(&mut sub).await,
        ResourceEvent::Updated { uri: uri.clone() }
    );
    let text = resources.read(&uri).await.unwrap();
    assert!(
        matches!(&text[0].body, kberg_core::ResourceBody::Text(t) if t.contains("hexagonal")),
        "B renders the approved document"
    );
    // B's copy of the YAML file follows the database.
    let file = std::fs::read_to_string(b_dir.path().join("projects/demo.yaml")).unwrap();
    assert!(file.contains("hexagonal"), "{file}");

    // A project created on A gets its resources on B.
    let store = a.store.clone();
    tokio::task::spawn_blocking(move || {
        let mut doc = demo_document();
        doc.project.name = "Second".into();
        store.create("second", &doc, "alice").unwrap();
    })
    .await
    .unwrap();
    let second = rules_uri("second", "claude");
    until("a resource on B for the project created on A", || {
        resources.exists(&second)
    })
    .await;

    stop.cancel();
    watcher.await.unwrap();
}

#[test]
fn a_bad_database_setting_stops_the_gateway_with_a_clear_message() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (dir, config) = data_dir(cluster, &dbname);
    let (vault, _) = open_vault(dir.path(), &config).unwrap();
    let fails = |config: &GatewayConfig| {
        StateDatabase::open(dir.path(), config, &vault)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };

    let mut c = config.clone();
    c.database = Some("mysql://db/bridle".into());
    assert!(fails(&c).contains("postgres://"), "{}", fails(&c));

    let mut c = config.clone();
    c.database = Some(format!(
        "postgres://bridle:{PASSWORD}@127.0.0.1:{}/{dbname}",
        cluster.port()
    ));
    let msg = fails(&c);
    assert!(msg.contains("database_password"), "{msg}");
    assert!(!msg.contains(PASSWORD), "{msg}");

    let mut c = config.clone();
    c.database = None;
    assert!(fails(&c).contains("names no PostgreSQL"), "{}", fails(&c));

    let mut c = config.clone();
    c.database_password = Some("file:missing".into());
    assert!(fails(&c).contains("file:missing"), "{}", fails(&c));

    std::fs::write(
        config.secrets_path(dir.path()).join("wrong"),
        "not-the-password",
    )
    .unwrap();
    let mut c = config.clone();
    c.database_password = Some("file:wrong".into());
    let msg = fails(&c);
    assert!(msg.contains("password authentication failed"), "{msg}");
    assert!(!msg.contains("not-the-password"), "{msg}");

    // A context opened without the database the configuration names is refused, not
    // silently put on SQLite.
    let e = GatewayContext::open(dir.path(), config.clone()).unwrap_err();
    assert!(e.to_string().contains("PostgreSQL"), "{e}");

    // The password of the database the vault lives in cannot come from that vault.
    let mut c = config.clone();
    c.database_password = Some("vault:pg-password".into());
    let msg = fails(&c);
    assert!(msg.contains("vault itself lives in this database"), "{msg}");
    let e = open_vault(dir.path(), &c).unwrap_err();
    assert!(e.to_string().contains("vault:pg-password"), "{e}");

    // A replica given another master key is refused, naming the database.
    let other_key = dir.path().join("other.key");
    MasterKey::load_or_create(&other_key).unwrap();
    let mut c = config.clone();
    c.vault.master_key = Some(other_key);
    let e = open_vault(dir.path(), &c).unwrap_err();
    assert!(e.to_string().contains("different master key"), "{e}");
    assert!(e.to_string().contains(&dbname), "{e}");

    // The right setting opens.
    StateDatabase::open(dir.path(), &config, &vault).unwrap();
}

/// A gateway replica serving MCP on a free loopback port.
struct Replica {
    ctx: Arc<GatewayContext>,
    vault: Arc<Vault>,
    mcp: String,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Replica {
    async fn start(dir: &Path, config: GatewayConfig) -> Self {
        let gateway = GatewayBuilder::new(dir, config).build().await.unwrap();
        let vault = Arc::clone(gateway.vault());
        let ctx = Arc::clone(gateway.context());
        let bound = gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mcp = bound.url();
        let stop = tokio_util::sync::CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move {
            bound.run(async move { s.cancelled().await }).await.unwrap();
        });
        Self {
            ctx,
            vault,
            mcp,
            stop,
            task,
        }
    }

    /// The status of an MCP `initialize` sent with `token`.
    async fn status(&self, token: &str) -> reqwest::StatusCode {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "replica-test", "version": "1"}
            }
        });
        reqwest::Client::new()
            .post(&self.mcp)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Opens a 2025-11-25 session with `token` (initialize, then the initialized
    /// notification under the session id the replica assigned) and returns its id.
    async fn open_session(&self, token: &str) -> String {
        let http = reqwest::Client::new();
        let init = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "replica-test", "version": "1"}
            }
        });
        let r = http
            .post(&self.mcp)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&init)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        let id = r
            .headers()
            .get("mcp-session-id")
            .expect("a session id")
            .to_str()
            .unwrap()
            .to_owned();
        let r = http
            .post(&self.mcp)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &id)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        id
    }

    /// Waits (with a deadline) until this replica's vault has heard `n` vault changes, so its
    /// token cache no longer holds what they changed.
    async fn has_heard(&self, n: u64) {
        let mut status = self.vault.token_cache().expect("a PostgreSQL vault");
        tokio::time::timeout(
            kberg_testkit::WAIT,
            status.wait_for(|s| s.changes_heard >= n),
        )
        .await
        .expect("the replica hears the vault's changes within the deadline")
        .expect("the cache is alive");
    }

    /// The ids of the live sessions of `agent` this replica knows.
    fn sessions_of(&self, agent: &str) -> Vec<String> {
        self.ctx
            .sessions
            .sessions()
            .into_iter()
            .filter(|s| s.agent == agent)
            .map(|s| s.id)
            .collect()
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

/// The next vault change a replica hears of, skipping `listening` markers.
async fn next_change(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    loop {
        let m = tokio::time::timeout(kberg_testkit::WAIT, rx.recv())
            .await
            .expect("a vault change within the deadline")
            .expect("the listener is alive");
        if m != bridle_rules::db::postgres::LISTENING {
            return m;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_issued_rotated_or_revoked_on_replica_a_holds_on_replica_b() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (a_dir, a_config) = data_dir(cluster, &dbname);
    let (b_dir, b_config) = data_dir(cluster, &dbname);
    let a = Replica::start(a_dir.path(), a_config).await;
    let b = Replica::start(b_dir.path(), b_config).await;
    assert!(a.vault.path().to_string_lossy().contains(&dbname));
    let mut changes = b
        .vault
        .changes()
        .expect("a PostgreSQL vault announces changes");
    assert_eq!(
        changes.recv().await.as_deref(),
        Some(bridle_rules::db::postgres::LISTENING)
    );
    // B's token cache listens too, so the changes below are counted from here.
    let mut status = b.vault.token_cache().expect("a PostgreSQL vault");
    tokio::time::timeout(kberg_testkit::WAIT, status.wait_for(|s| s.listening))
        .await
        .expect("B's token cache listens within the deadline")
        .expect("the cache is alive");

    // Issued on A: B accepts it on the first request.
    let vault = Arc::clone(&a.vault);
    let first = tokio::task::spawn_blocking(move || vault.set_agent_token("bot", "admin:alice"))
        .await
        .unwrap()
        .unwrap();
    let first = first.token.expose_str().unwrap().to_owned();
    assert_eq!(next_change(&mut changes).await, "agent_token_set bot");
    assert_eq!(b.status(&first).await, reqwest::StatusCode::OK);
    assert_eq!(
        b.status("bdl_not-a-token").await,
        reqwest::StatusCode::UNAUTHORIZED
    );

    // Rotated on A without grace: B refuses the old token and accepts the new one.
    let vault = Arc::clone(&a.vault);
    let second = tokio::task::spawn_blocking(move || {
        vault.rotate_agent_token("bot", Duration::ZERO, "admin:alice")
    })
    .await
    .unwrap()
    .unwrap();
    let second = second.token.expose_str().unwrap().to_owned();
    assert_eq!(next_change(&mut changes).await, "agent_token_rotate bot");
    b.has_heard(2).await;
    assert_eq!(b.status(&first).await, reqwest::StatusCode::UNAUTHORIZED);
    assert_eq!(b.status(&second).await, reqwest::StatusCode::OK);

    // An open session on B of the agent about to be revoked.
    let session = b.open_session(&second).await;
    assert_eq!(b.sessions_of("bot"), [session]);

    // Revoked on A: the very next request on A is 401, and on B once B has heard of it.
    let vault = Arc::clone(&a.vault);
    let revoked =
        tokio::task::spawn_blocking(move || vault.revoke_agent_tokens("bot", "admin:alice"))
            .await
            .unwrap()
            .unwrap();
    assert_eq!(revoked, 1);
    assert_eq!(a.status(&second).await, reqwest::StatusCode::UNAUTHORIZED);
    assert_eq!(next_change(&mut changes).await, "agent_token_revoke bot");
    b.has_heard(3).await;
    assert_eq!(b.status(&second).await, reqwest::StatusCode::UNAUTHORIZED);
    // And B ends its session of the revoked agent, as A ends its own (polled with a deadline:
    // B's follower runs beside this test's listener).
    until("B to end the revoked agent's session", || {
        b.sessions_of("bot").is_empty()
    })
    .await;

    // Both replicas read one audit table: the three changes, in order, once each.
    let vault = Arc::clone(&b.vault);
    let actions: Vec<String> = tokio::task::spawn_blocking(move || vault.audit_log(0, 100))
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions,
        [
            "agent_token_set",
            "agent_token_rotate",
            "agent_token_revoke"
        ]
    );
    drop(changes);
    a.stop().await;
    b.stop().await;
}

/// Polls `done` (with the shared deadline) until it holds, without blocking a worker thread.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    eventually_async(what, || {
        let held = done().then_some(());
        async move { held }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_seen_on_either_replica_are_listed_counted_and_ended_on_both() {
    use kberg_agent::{McpSurface, ToolSurface};
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (a_dir, a_config) = data_dir(cluster, &dbname);
    let (b_dir, b_config) = data_dir(cluster, &dbname);
    let token = std::fs::read_to_string(a_dir.path().join("secrets/claude-token")).unwrap();
    let b_token = std::fs::read_to_string(b_dir.path().join("secrets/claude-token")).unwrap();
    let a = Replica::start(a_dir.path(), a_config).await;
    a.ctx
        .store
        .create("demo", &demo_document(), "test")
        .unwrap();
    let b = Replica::start(b_dir.path(), b_config).await;
    assert!(a.ctx.sessions.ledger().is_some(), "a shared registry");

    // One session on each replica: a call made on A, one made and one refused on B.
    let on_a = McpSurface::connect_http_with_bearer(&a.mcp, token.trim())
        .await
        .unwrap();
    let r = on_a
        .call("list_projects", json!({}), CancellationToken::new())
        .await
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let on_b = McpSurface::connect_http_with_bearer(&b.mcp, b_token.trim())
        .await
        .unwrap();
    let r = on_b
        .call("list_projects", json!({}), CancellationToken::new())
        .await
        .unwrap();
    assert!(!r.is_error, "{r:?}");
    let r = on_b
        .call(
            "approve_proposal",
            json!({"id": 1}),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(r.is_error);

    // Each replica lists both sessions, and counts the calls of both.
    for (name, replica) in [("A", &a), ("B", &b)] {
        until(&format!("{name} lists both sessions"), || {
            replica.sessions_of("claude").len() == 2
        })
        .await;
        until(&format!("{name} counts the calls of both"), || {
            let c = replica.ctx.sessions.calls("claude");
            (c.made, c.refused) == (2, 1)
        })
        .await;
    }
    let a_ids = a.sessions_of("claude");
    let b_ids = b.sessions_of("claude");
    let mut sorted_a = a_ids.clone();
    sorted_a.sort();
    let mut sorted_b = b_ids.clone();
    sorted_b.sort();
    assert_eq!(sorted_a, sorted_b);
    let seen_on_a = a
        .ctx
        .sessions
        .sessions()
        .into_iter()
        .find(|s| s.agent == "claude" && s.client_name.is_some())
        .expect("the client's self-report travels with the session");
    assert!(seen_on_a.requests >= 2, "{seen_on_a:?}");

    // Both ended by an operator on B, A's own session included: A refuses it once it heard
    // (the end is announced, it does not wait for A's next exchange with the ledger).
    for id in &b_ids {
        assert!(b.ctx.sessions.end(id), "B knows {id}");
    }
    until("A forgets the sessions B ended", || {
        a.sessions_of("claude").is_empty()
    })
    .await;
    for (name, surface) in [("A", &on_a), ("B", &on_b)] {
        match surface
            .call("list_projects", json!({}), CancellationToken::new())
            .await
        {
            Err(_) => {}
            Ok(r) => assert!(r.is_error, "{name} still served an ended session: {r:?}"),
        }
    }
    // Ending one again on either replica is refused as unknown, and it stays ended.
    assert!(!a.ctx.sessions.end(&b_ids[0]));
    assert!(!b.ctx.sessions.end(&b_ids[0]));
    assert!(a.sessions_of("claude").is_empty());

    a.stop().await;
    b.stop().await;
}

/// A 2025-11-25 agent waiting for notifications holds only its GET (listen) stream open and
/// sends nothing: the transport does not count that session as idle, and neither may the
/// registry. Its replica writes it as seen at every exchange with the database, so a replica
/// dropping idle sessions (here the test, with an idle timeout of a few seconds) keeps its rows
/// while it drops those of a session that holds nothing open, and the listening session's next
/// request on another replica is resumed from the database rather than answered `404`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holding_only_a_listen_stream_open_keeps_its_rows_on_every_replica() {
    use bridle_gateway::sessions::SessionLedger;
    use bridle_gateway::sessions::postgres::PgSessionLedger;

    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (a_dir, a_config) = data_dir(cluster, &dbname);
    let (b_dir, b_config) = data_dir(cluster, &dbname);
    let token = std::fs::read_to_string(a_dir.path().join("secrets/claude-token")).unwrap();
    let b_token = std::fs::read_to_string(b_dir.path().join("secrets/claude-token")).unwrap();
    let a = Replica::start(a_dir.path(), a_config).await;
    let b = Replica::start(b_dir.path(), b_config).await;
    let http = reqwest::Client::new();

    // The listening session opens its GET stream on A and then sends nothing; the quiet one
    // is opened after it, so it was seen later and holds nothing open.
    let listening = a.open_session(token.trim()).await;
    let mut stream = http
        .get(&a.mcp)
        .bearer_auth(token.trim())
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &listening)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), reqwest::StatusCode::OK);
    assert!(
        stream.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // The stream delivers what the transport sends on it (its priming event first).
    let first = tokio::time::timeout(kberg_testkit::WAIT, stream.chunk())
        .await
        .expect("the stream's first event within the deadline")
        .unwrap()
        .expect("an event, not the stream's end");
    assert!(!first.is_empty());
    let quiet = a.open_session(token.trim()).await;

    // A replica whose idle timeout is a few seconds drops what was not seen that long.
    let db = PgDatabase::connect(&cluster.settings(&dbname)).unwrap();
    let ledger = PgSessionLedger::open(db.clone()).unwrap();
    let rows = |table: &'static str, id: String| {
        let db = db.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                db.client()
                    .unwrap()
                    .query_opt(&format!("SELECT 1 FROM {table} WHERE id = $1"), &[&id])
                    .unwrap()
                    .is_some()
            })
            .await
            .unwrap()
        }
    };
    for id in [&listening, &quiet] {
        let (i, t) = (id.clone(), "gateway_sessions");
        eventually_async("the session written", || {
            let r = rows(t, i.clone());
            async move { r.await.then_some(()) }
        })
        .await;
        let (i, t) = (id.clone(), "gateway_session_states");
        eventually_async("the session's state written", || {
            let r = rows(t, i.clone());
            async move { r.await.then_some(()) }
        })
        .await;
    }
    let ledger = Arc::new(ledger);
    eventually_async("the quiet session to go idle", || {
        let (ledger, quiet) = (Arc::clone(&ledger), quiet.clone());
        async move {
            let snapshot =
                tokio::task::spawn_blocking(move || ledger.read(Duration::from_secs(5)).unwrap())
                    .await
                    .unwrap();
            (!snapshot.sessions.iter().any(|s| s.id == quiet)).then_some(())
        }
    })
    .await;
    assert!(
        rows("gateway_sessions", listening.clone()).await,
        "the listening session's row was dropped as idle"
    );
    assert!(
        rows("gateway_session_states", listening.clone()).await,
        "the listening session's resumable state was dropped as idle"
    );
    assert!(!rows("gateway_session_states", quiet.clone()).await);

    // B resumes the listening session; the quiet one is gone, as any idle session.
    let post = |id: String| {
        http.post(&b.mcp)
            .bearer_auth(b_token.trim())
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
            .send()
    };
    assert_eq!(
        post(listening.clone()).await.unwrap().status(),
        reqwest::StatusCode::OK
    );
    assert_eq!(
        post(quiet.clone()).await.unwrap().status(),
        reqwest::StatusCode::NOT_FOUND
    );
    assert!(a.sessions_of("claude").contains(&listening));

    drop(stream);
    a.stop().await;
    b.stop().await;
}

/// A 2025-11-25 client ending its session (`DELETE`, answered `200` on replica A) takes it out
/// of every replica's listing at once: its rows go (`gateway_sessions` and its resumable
/// state), with no end recorded (it was not ended by an operator: its id is answered the
/// transport's `404`, not refused `401`), and a listen stream B holds of it ends. A `DELETE` the
/// transport refused (another agent naming the session) forgets nothing, and a session ended by
/// an operator is refused as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_its_client_deleted_on_one_replica_leaves_every_listing() {
    let cluster = PgCluster::shared();
    let dbname = cluster.create_database();
    let (a_dir, a_config) = data_dir(cluster, &dbname);
    let (b_dir, b_config) = data_dir(cluster, &dbname);
    let token = std::fs::read_to_string(a_dir.path().join("secrets/claude-token")).unwrap();
    let b_token = std::fs::read_to_string(b_dir.path().join("secrets/claude-token")).unwrap();
    let b_codex = std::fs::read_to_string(b_dir.path().join("secrets/codex-token")).unwrap();
    let (token, b_token, b_codex) = (token.trim(), b_token.trim(), b_codex.trim());
    let a = Replica::start(a_dir.path(), a_config).await;
    let b = Replica::start(b_dir.path(), b_config).await;
    let http = reqwest::Client::new();
    let request = |method: reqwest::Method, url: &str, token: &str, id: &str| {
        http.request(method, url)
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-11-25")
    };
    let tools_list = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});

    // Both sessions opened on A; the deleted one's listen stream is held on B (resumed there).
    let deleted = a.open_session(token).await;
    let kept = a.open_session(token).await;
    let mut stream = request(reqwest::Method::GET, &b.mcp, b_token, &deleted)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), reqwest::StatusCode::OK);
    let first = tokio::time::timeout(kberg_testkit::WAIT, stream.chunk())
        .await
        .expect("the stream's first event within the deadline")
        .unwrap();
    assert!(first.is_some_and(|c| !c.is_empty()));
    for (name, replica) in [("A", &a), ("B", &b)] {
        until(&format!("{name} lists both sessions"), || {
            let listed = replica.sessions_of("claude");
            listed.contains(&deleted) && listed.contains(&kept)
        })
        .await;
    }

    // Another agent naming the session on B is refused by the transport: nothing forgotten.
    let r = request(reqwest::Method::DELETE, &b.mcp, b_codex, &kept)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::NOT_FOUND);

    // Its client deletes it on A: A drops it at once, B once it heard, and B's stream ends.
    let r = request(reqwest::Method::DELETE, &a.mcp, token, &deleted)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    assert!(!a.sessions_of("claude").contains(&deleted));
    until("B drops the deleted session", || {
        !b.sessions_of("claude").contains(&deleted)
    })
    .await;
    tokio::time::timeout(kberg_testkit::WAIT, async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await
    .expect("B's listen stream of the deleted session to end within the deadline");

    // Its rows are gone, and no end is recorded: its id is the transport's 404 on either.
    let db = PgDatabase::connect(&cluster.settings(&dbname)).unwrap();
    let id = deleted.clone();
    let rows = tokio::task::spawn_blocking(move || {
        let client = db.client().unwrap();
        [
            "gateway_sessions",
            "gateway_session_states",
            "gateway_session_ends",
        ]
        .map(|table| {
            client
                .query_opt(&format!("SELECT 1 FROM {table} WHERE id = $1"), &[&id])
                .unwrap()
                .is_some()
        })
    })
    .await
    .unwrap();
    assert_eq!(rows, [false; 3], "rows left of the deleted session");
    // (B's transport looks in the database again at most every second, and serves the
    // session until then: those requests do not list it again either.)
    for (replica, token) in [(&a, token), (&b, b_token)] {
        eventually_async("the deleted session's id to be answered 404", || {
            let r = request(reqwest::Method::POST, &replica.mcp, token, &deleted)
                .json(&tools_list)
                .send();
            async move {
                let status = r.await.unwrap().status();
                assert_ne!(
                    status,
                    reqwest::StatusCode::UNAUTHORIZED,
                    "refused as ended"
                );
                (status == reqwest::StatusCode::NOT_FOUND).then_some(())
            }
        })
        .await;
    }
    // It stays gone (a replica's later exchanges do not bring it back); the other one stays.
    a.ctx.sessions.sync().unwrap();
    b.ctx.sessions.sync().unwrap();
    for replica in [&a, &b] {
        let listed = replica.sessions_of("claude");
        assert!(!listed.contains(&deleted), "{listed:?}");
        assert!(listed.contains(&kept), "{listed:?}");
    }

    // Ended by an operator on B: refused on A as before.
    assert!(b.ctx.sessions.end(&kept));
    until("A drops the ended session", || {
        !a.sessions_of("claude").contains(&kept)
    })
    .await;
    let r = request(reqwest::Method::POST, &a.mcp, token, &kept)
        .json(&tools_list)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);

    a.stop().await;
    b.stop().await;
}
