//! Gateway replicas on one PostgreSQL database (`database: postgres://...` in bridle.yaml): an
//! approval made on replica A reaches an agent subscribed to its rules on replica B through
//! `LISTEN/NOTIFY` (B's polling tick is set far beyond the test's deadline, so only the
//! notification can deliver it), a project created on A appears on B, and a bad `database:`
//! setting stops the gateway with a clear message that never holds the password.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

#[path = "../../bridle-rules/tests/support/pg_cluster.rs"]
mod pg_cluster;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_gateway::db::StateDatabase;
use bridle_gateway::gateway::open_vault;
use bridle_gateway::resources::{rules_uri, watch};
use bridle_gateway::{GatewayContext, build_app};
use bridle_rules::db::postgres::PgDatabase;
use bridle_rules::{ChangeRequest, DocumentSource, Origin};
use kberg_core::ResourceEvent;
use pg_cluster::{PASSWORD, PgCluster};

/// A data directory configured for the cluster's database, its password in a secret file.
fn data_dir(cluster: &PgCluster, dbname: &str) -> (tempfile::TempDir, GatewayConfig) {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let mut config = GatewayConfig::load(tmp.path()).unwrap();
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
    tokio::time::timeout(Duration::from_secs(30), sub.next())
        .await
        .expect("an event within the deadline")
        .expect("the registry is alive")
}

/// Waits (polling the server, with a deadline) until `n` connections listen for changes.
async fn until_listening(cluster: &PgCluster, dbname: &str, n: i64) {
    let db = PgDatabase::connect(&cluster.settings(dbname)).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let name = dbname.to_string();
        let d = db.clone();
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
        if listening >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watcher never listened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !resources.exists(&second) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no resource on B for the project created on A"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

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

    // The right setting opens.
    StateDatabase::open(dir.path(), &config, &vault).unwrap();
}
