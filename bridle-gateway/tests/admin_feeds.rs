//! The admin API's vendor-feed resource over real HTTP: the configured sources, a run on
//! demand that queues vendor proposals recorded as `vendor` audit entries, the failures of a
//! dead source and an unknown project reported per entry, and the refusals (no feed, no or
//! wrong credential, an agent's token). Beside it, the project-level operations the command
//! line's `rules source-vendor|queue-suggestions|upgrade` use: a one-off page read (with every
//! way it can be refused), the document's own profile suggestions, and a schema upgrade. A feed
//! URL with credentials (a page behind basic auth) is fetched with them and shown nowhere.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode as SiteStatus, header};
use axum::routing::get;
use base64::Engine;
use bridle_gateway::GatewayBuilder;
use bridle_gateway::admin::AdminTokens;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_rules::{AgentCatalog, RulesStore};
use kberg_testkit::log::LogBuffer;
use reqwest::StatusCode;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const ADMIN: &str = "feed-admin-token-0123456789abcdef";

const GUIDE: &str = "<html><body><h1>Codex</h1><ul><li>Always run the linter before you commit.</li>\
<li>Never push to main directly.</li></ul></body></html>";

async fn site() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route(
        "/guide.html",
        get(|| async { ([(header::CONTENT_TYPE, "text/html")], GUIDE) }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/guide.html")
}

/// A closed loopback port: a source nothing answers at.
async fn dead_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/gone.html")
}

struct Running {
    _tmp: tempfile::TempDir,
    admin: String,
    mcp: String,
    agent_token: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn start(feed_yaml: &str) -> Running {
    start_with(feed_yaml, &[]).await
}

/// A gateway whose data directory also holds these project files, as written by hand.
async fn start_with(feed_yaml: &str, files: &[(&str, &str)]) -> Running {
    let tmp = tempfile::tempdir().unwrap();
    init_data_dir_with_token_files(tmp.path()).unwrap();
    let cfg = tmp.path().join("bridle.yaml");
    let mut yaml = std::fs::read_to_string(&cfg).unwrap();
    yaml.push_str(feed_yaml);
    std::fs::write(&cfg, yaml).unwrap();
    RulesStore::open(tmp.path(), AgentCatalog::builtin())
        .unwrap()
        .create("demo", &demo_document(), "test")
        .unwrap();
    for (name, text) in files {
        std::fs::write(tmp.path().join("projects").join(name), text).unwrap();
    }
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let mut admins = AdminTokens::new().unwrap();
    admins.insert("alice", ADMIN).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .admin("127.0.0.1:0".parse().unwrap(), Arc::new(admins))
        .build()
        .await
        .unwrap();
    let bound = gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let admin = bound.admin_url().unwrap();
    let mcp = bound.url();
    let agent_token = std::fs::read_to_string(tmp.path().join("secrets/codex-token"))
        .unwrap()
        .trim()
        .to_string();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let task = tokio::spawn(async move {
        bound.run(async move { s.cancelled().await }).await.unwrap();
    });
    Running {
        _tmp: tmp,
        admin,
        mcp,
        agent_token,
        stop,
        task,
    }
}

impl Running {
    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the gateway stops")
            .unwrap();
    }
}

/// An admin GET that must answer 200, decoded.
async fn get_ok(http: &reqwest::Client, url: String) -> Value {
    json(
        http.get(url).bearer_auth(ADMIN).send().await.unwrap(),
        StatusCode::OK,
    )
    .await
}

async fn json(resp: reqwest::Response, status: StatusCode) -> Value {
    assert_eq!(resp.status(), status);
    resp.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_demand_queues_vendor_proposals_and_reports_each_failure() {
    let url = site().await;
    let dead = dead_url().await;
    // No interval: only the run on demand fetches.
    let gw = start(&format!(
        "vendor_feed:\n  profiles:\n    codex:\n      - url: {url}\n      - url: {dead}\n  projects: [demo, nope]\n"
    ))
    .await;
    let http = reqwest::Client::new();

    let feed = get_ok(&http, format!("{}/vendor-feed", gw.admin)).await;
    assert_eq!(feed["sources"].as_array().unwrap().len(), 2, "{feed}");
    assert_eq!(feed["sources"][0]["agent"], "codex");
    assert_eq!(feed["projects"], serde_json::json!(["demo", "nope"]));
    assert!(feed.get("interval_minutes").is_none(), "{feed}");

    let run = json(
        http.post(format!("{}/vendor-feed/run", gw.admin))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(run["queued"], 2, "{run}");
    assert_eq!(
        run["failed"], 2,
        "the dead source and the unknown project: {run}"
    );
    let demo = &run["projects"][0];
    assert_eq!(demo["project"], "demo");
    assert_eq!(demo["sources"][0]["queued"].as_array().unwrap().len(), 2);
    assert_eq!(
        demo["sources"][1]["error"]["code"], "feed_unreachable",
        "{run}"
    );
    assert_eq!(
        run["projects"][1]["error"]["code"], "unknown_project",
        "{run}"
    );

    // The proposals wait in the queue as vendor proposals, and the audit log has them as
    // `vendor` entries with their source.
    let queue = get_ok(&http, format!("{}/queue?project=demo", gw.admin)).await;
    assert_eq!(queue["items"].as_array().unwrap().len(), 2, "{queue}");
    let audit = get_ok(&http, format!("{}/audit?source=vendor", gw.admin)).await;
    let entries = audit["items"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{audit}");
    assert!(
        entries.iter().all(|e| e["source"]["url"] == url.as_str()),
        "{audit}"
    );

    // A second run: the page is already known, nothing new.
    let again = json(
        http.post(format!("{}/vendor-feed/run", gw.admin))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(again["queued"], 0, "{again}");

    // Refusals: no credential, a wrong one, an agent's token; the agent's token also works on
    // the MCP endpoint, so it is a real one.
    for token in [None, Some("not-an-admin"), Some(gw.agent_token.as_str())] {
        let mut req = http.post(format!("{}/vendor-feed/run", gw.admin));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{token:?}");
    }
    let mcp = http
        .post(&gw.mcp)
        .bearer_auth(&gw.agent_token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), StatusCode::OK);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_feed_the_resource_answers_vendor_feed_off() {
    let gw = start("").await;
    let http = reqwest::Client::new();
    for resp in [
        http.get(format!("{}/vendor-feed", gw.admin))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap(),
        http.post(format!("{}/vendor-feed/run", gw.admin))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap(),
    ] {
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "vendor_feed_off", "{body}");
    }
    // The wrong method is a clear 405.
    let resp = http
        .get(format!("{}/vendor-feed/run", gw.admin))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    gw.stop().await;
}

/// A site whose page answers only when released: each request is reported on `arrived`, then
/// waits for `release`.
async fn held_site(
    arrived: tokio::sync::mpsc::UnboundedSender<()>,
    release: Arc<tokio::sync::Notify>,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route(
        "/guide.html",
        get(move || {
            let (arrived, release) = (arrived.clone(), Arc::clone(&release));
            async move {
                let released = release.notified();
                arrived.send(()).unwrap();
                released.await;
                ([(header::CONTENT_TYPE, "text/html")], GUIDE)
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/guide.html")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_while_one_is_under_way_is_refused_with_feed_run_in_progress() {
    let (arrived_tx, mut arrived) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Notify::new());
    let url = held_site(arrived_tx, Arc::clone(&release)).await;
    let gw = start(&format!(
        "vendor_feed:\n  profiles:\n    codex:\n      - url: {url}\n  projects: [demo]\n"
    ))
    .await;
    let http = reqwest::Client::new();

    let first = tokio::spawn({
        let (http, url) = (http.clone(), format!("{}/vendor-feed/run", gw.admin));
        async move { http.post(url).bearer_auth(ADMIN).send().await.unwrap() }
    });
    // The first run is fetching the page now.
    arrived.recv().await.unwrap();

    let second = http
        .post(format!("{}/vendor-feed/run", gw.admin))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::CONFLICT);
    assert_eq!(
        second.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["code"], "feed_run_in_progress", "{body}");

    release.notify_one();
    let first = json(first.await.unwrap(), StatusCode::OK).await;
    assert_eq!(first["queued"], 2, "{first}");
    assert_eq!(first["failed"], 0, "{first}");

    // Once it has ended, a run goes ahead again (the page, unchanged, queues nothing new).
    let again = tokio::spawn({
        let (http, url) = (http.clone(), format!("{}/vendor-feed/run", gw.admin));
        async move { http.post(url).bearer_auth(ADMIN).send().await.unwrap() }
    });
    arrived.recv().await.unwrap();
    release.notify_one();
    let again = json(again.await.unwrap(), StatusCode::OK).await;
    assert_eq!(again["failed"], 0, "{again}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_rules_store_cannot_list_projects_for_answers_rules_store_unavailable() {
    let url = site().await;
    // No `projects:`: the run lists every project of the store.
    let gw = start(&format!(
        "vendor_feed:\n  profiles:\n    codex:\n      - url: {url}\n"
    ))
    .await;
    let http = reqwest::Client::new();
    let projects = gw._tmp.path().join("projects");
    let moved = gw._tmp.path().join("projects.moved");
    std::fs::rename(&projects, &moved).unwrap();

    let resp = http
        .post(format!("{}/vendor-feed/run", gw.admin))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        resp.headers()[header::CONTENT_TYPE],
        "application/problem+json"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "rules_store_unavailable", "{body}");
    // The store's internals (the folder's path) stay in the gateway's log.
    let shown = body.to_string();
    assert!(
        !shown.contains(&gw._tmp.path().display().to_string()),
        "{shown}"
    );

    // With the folder back, the run goes ahead.
    std::fs::rename(&moved, &projects).unwrap();
    let run = json(
        http.post(format!("{}/vendor-feed/run", gw.admin))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(run["queued"], 2, "{run}");
    gw.stop().await;
}

fn shop_v1() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../bridle-rules/tests/fixtures/shop-v1.yaml"),
    )
    .unwrap()
}

async fn post(http: &reqwest::Client, url: String, body: Option<Value>) -> reqwest::Response {
    let mut req = http.post(url).bearer_auth(ADMIN);
    if let Some(b) = body {
        req = req.json(&b);
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_off_page_read_queues_vendor_proposals_without_a_configured_feed() {
    let url = site().await;
    let gw = start("").await;
    let http = reqwest::Client::new();
    let read = |body: Value| {
        post(
            &http,
            format!("{}/projects/demo/vendor-guidance", gw.admin),
            Some(body),
        )
    };

    let first = json(
        read(serde_json::json!({ "agent": "codex", "url": url })).await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(first["project"], "demo");
    assert_eq!(first["queued"].as_array().unwrap().len(), 2, "{first}");
    assert_eq!(first["skipped"], 0);
    // Read again: the suggestions are known, nothing new is queued.
    let again = json(
        read(serde_json::json!({ "agent": "codex", "url": url, "format": "html" })).await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(again["queued"], serde_json::json!([]), "{again}");
    assert_eq!(again["skipped"], 2, "{again}");

    // The proposals are vendor proposals with the page as their source, in the queue and in
    // the audit log.
    let queue = get_ok(
        &http,
        format!("{}/queue?project=demo&source=vendor", gw.admin),
    )
    .await;
    assert_eq!(queue["items"].as_array().unwrap().len(), 2, "{queue}");
    let audit = get_ok(&http, format!("{}/audit?source=vendor", gw.admin)).await;
    let entries = audit["items"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{audit}");
    assert!(
        entries.iter().all(|e| e["source"]["url"] == url.as_str()),
        "{audit}"
    );

    // Every refusal is a problem with a stable code, and queues nothing.
    let dead = dead_url().await;
    let cases = [
        (
            serde_json::json!({ "agent": "codex", "url": "/etc/passwd" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "feed_bad_url",
        ),
        (
            serde_json::json!({ "agent": "codex", "url": "file:///etc/passwd" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "feed_bad_url",
        ),
        (
            serde_json::json!({ "agent": "codex", "url": url, "format": "pdf" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            serde_json::json!({ "agent": "nobody", "url": url }),
            StatusCode::NOT_FOUND,
            "unknown_agent_type",
        ),
        (
            serde_json::json!({ "agent": "codex", "url": dead }),
            StatusCode::BAD_GATEWAY,
            "feed_unreachable",
        ),
        (
            serde_json::json!({ "agent": "codex", "url": url, "extra": 1 }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            serde_json::json!({ "agent": 7, "url": url }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
    ];
    for (body, status, code) in cases {
        let resp = read(body.clone()).await;
        assert_eq!(resp.status(), status, "{body}");
        let problem: Value = resp.json().await.unwrap();
        assert_eq!(problem["code"], code, "{body}: {problem}");
    }
    let resp = post(
        &http,
        format!("{}/projects/nope/vendor-guidance", gw.admin),
        Some(serde_json::json!({ "agent": "codex", "url": url })),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["code"],
        "unknown_project"
    );
    let resp = http
        .post(format!("{}/projects/demo/vendor-guidance", gw.admin))
        .bearer_auth(ADMIN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let resp = http
        .post(format!("{}/projects/demo/vendor-guidance", gw.admin))
        .bearer_auth(&gw.agent_token)
        .json(&serde_json::json!({ "agent": "codex", "url": url }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    let after = get_ok(&http, format!("{}/queue?project=demo&status=all", gw.admin)).await;
    assert_eq!(
        after["items"].as_array().unwrap().len(),
        2,
        "nothing more was queued: {after}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_document_is_upgraded_and_its_profile_suggestions_queued() {
    let gw = start_with("", &[("shop.yaml", &shop_v1())]).await;
    let http = reqwest::Client::new();

    let queued = json(
        post(
            &http,
            format!("{}/projects/shop/profile-suggestions", gw.admin),
            None,
        )
        .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(queued["queued"].as_array().unwrap().len(), 1, "{queued}");
    let again = json(
        post(
            &http,
            format!("{}/projects/shop/profile-suggestions", gw.admin),
            None,
        )
        .await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(again["queued"], serde_json::json!([]), "{again}");
    assert_eq!(again["skipped"], 1, "{again}");
    let audit = get_ok(
        &http,
        format!("{}/audit?source=vendor&project=shop", gw.admin),
    )
    .await;
    assert_eq!(audit["items"].as_array().unwrap().len(), 1, "{audit}");

    let up = json(
        post(&http, format!("{}/projects/shop/upgrade", gw.admin), None).await,
        StatusCode::OK,
    )
    .await;
    assert_eq!(up["migrated_from"], 1, "{up}");
    // The hand-written file had no revision: the migrated one is the first.
    assert_eq!(up["revision"], 1, "{up}");
    let doc = http
        .get(format!("{}/projects/shop", gw.admin))
        .bearer_auth(ADMIN)
        .header("accept", "application/yaml")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(doc.starts_with("schema_version: 2\nrevision: 1\n"), "{doc}");
    // The history and the audit log both name the admin and the migration.
    let history = get_ok(&http, format!("{}/projects/shop/history", gw.admin)).await;
    let last = history["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["summary"], "migrate from schema_version 1",
        "{history}"
    );
    assert_eq!(last["actor"], "admin:alice@api", "{history}");
    let audit = get_ok(
        &http,
        format!("{}/audit?kind=rules_change&project=shop", gw.admin),
    )
    .await;
    let entries = audit["items"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(entries[0]["change"]["before"], "0", "{audit}");
    assert_eq!(entries[0]["change"]["after"], "1", "{audit}");

    // A current document is left alone: no new revision, no entry.
    let current = json(
        post(&http, format!("{}/projects/shop/upgrade", gw.admin), None).await,
        StatusCode::OK,
    )
    .await;
    assert!(current.get("migrated_from").is_none(), "{current}");
    assert_eq!(current["revision"], 1, "{current}");

    for path in ["upgrade", "profile-suggestions"] {
        let resp = post(&http, format!("{}/projects/nope/{path}", gw.admin), None).await;
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(
            resp.json::<Value>().await.unwrap()["code"],
            "unknown_project",
            "{path}"
        );
        let resp = http
            .post(format!("{}/projects/shop/{path}", gw.admin))
            .bearer_auth(&gw.agent_token)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    gw.stop().await;
}

/// Every log line of this test binary, from every thread and every test in it.
fn logs() -> &'static LogBuffer {
    LogBuffer::global(tracing::Level::DEBUG)
}

/// The token of the pages behind basic auth; it must appear nowhere but in the requests.
const CANARY: &str = "canary-feed-basic-auth-8Jq4Zr";

/// A vendor site behind basic auth: `/private/guide.html` answers the guide to `reader` with
/// [`CANARY`] (401 to anyone else), `/private/error` a 500 either way. It keeps every
/// `Authorization` header it receives.
async fn private_site(seen: Arc<Mutex<Vec<String>>>) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("reader:{CANARY}"))
    );
    let keep = move |headers: &HeaderMap| {
        let auth = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        seen.lock().unwrap().push(auth.clone());
        auth
    };
    let keep_error = keep.clone();
    let app = Router::new()
        .route(
            "/private/guide.html",
            get(move |headers: HeaderMap| {
                let authorized = keep(&headers) == expected;
                async move {
                    if authorized {
                        (SiteStatus::OK, [(header::CONTENT_TYPE, "text/html")], GUIDE)
                    } else {
                        (
                            SiteStatus::UNAUTHORIZED,
                            [(header::CONTENT_TYPE, "text/html")],
                            "",
                        )
                    }
                }
            }),
        )
        .route(
            "/private/error",
            get(move |headers: HeaderMap| {
                keep_error(&headers);
                async { SiteStatus::INTERNAL_SERVER_ERROR }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn assert_no_canary(what: &str, text: &str) {
    assert!(
        !text.contains(CANARY),
        "{what} holds the feed's token:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_url_with_credentials_is_fetched_with_them_and_shown_nowhere() {
    let logs = logs();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let addr = private_site(Arc::clone(&seen)).await;
    let dead = dead_url().await.replace("http://", "");
    let guide = format!("http://reader:{CANARY}@{addr}/private/guide.html");
    let error = format!("http://reader:{CANARY}@{addr}/private/error");
    let gone = format!("http://reader:{CANARY}@{dead}?key={CANARY}");
    let gw = start(&format!(
        "vendor_feed:\n  profiles:\n    codex:\n      - url: '{guide}'\n      - url: '{error}'\n      - url: '{gone}'\n"
    ))
    .await;
    let http = reqwest::Client::new();
    let shown_guide = format!("http://***@{addr}/private/guide.html");
    let shown_error = format!("http://***@{addr}/private/error");
    let shown_gone = format!("http://***@{dead}?***");

    // The configuration, as the API shows it.
    let feed = get_ok(&http, format!("{}/vendor-feed", gw.admin)).await;
    assert_no_canary("GET /vendor-feed", &feed.to_string());
    let urls: Vec<&str> = feed["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["url"].as_str().unwrap())
        .collect();
    assert_eq!(urls, [&shown_guide, &shown_error, &shown_gone], "{feed}");

    // A run: the guide is read with the credentials, the other two fail, and neither the
    // sources nor the failures name the token.
    let run = json(
        http.post(format!("{}/vendor-feed/run", gw.admin))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_no_canary("the run's result", &run.to_string());
    assert_eq!(run["queued"], 2, "{run}");
    let sources = &run["projects"][0]["sources"];
    assert_eq!(sources[0]["url"], shown_guide.as_str(), "{run}");
    assert_eq!(sources[1]["url"], shown_error.as_str(), "{run}");
    assert_eq!(sources[1]["error"]["code"], "feed_http_status", "{run}");
    assert!(
        sources[1]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{shown_error}: the server answered HTTP 500")),
        "{run}"
    );
    assert_eq!(sources[2]["error"]["code"], "feed_unreachable", "{run}");
    assert!(
        sources[2]["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&shown_gone),
        "{run}"
    );
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("reader:{CANARY}"))
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [expected.clone(), expected.clone()],
        "the fetch sends the URL's credentials as basic auth"
    );

    // A one-off read of a page behind basic auth that fails, and one refused before any fetch:
    // the problems name the page without the token.
    for (url, status, code) in [
        (error.clone(), StatusCode::BAD_GATEWAY, "feed_http_status"),
        (
            format!("ftp://reader:{CANARY}@{addr}/guide"),
            StatusCode::UNPROCESSABLE_ENTITY,
            "feed_bad_url",
        ),
    ] {
        let resp = post(
            &http,
            format!("{}/projects/demo/vendor-guidance", gw.admin),
            Some(serde_json::json!({ "agent": "codex", "url": url })),
        )
        .await;
        assert_eq!(resp.status(), status, "{url}");
        let problem = resp.text().await.unwrap();
        assert_no_canary("a one-off read's problem", &problem);
        assert!(problem.contains(code), "{problem}");
        assert!(problem.contains("://***@"), "{problem}");
    }
    assert_eq!(seen.lock().unwrap().len(), 3);

    // The queued proposals, their audit entries and, once one is approved, the document and
    // what an agent is handed name the page without the token.
    let queue = get_ok(&http, format!("{}/queue?project=demo", gw.admin)).await;
    assert_no_canary("the review queue", &queue.to_string());
    let items = queue["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{queue}");
    assert!(
        items
            .iter()
            .all(|p| p["origin"]["source_ref"] == shown_guide.as_str()),
        "{queue}"
    );
    let audit = get_ok(&http, format!("{}/audit?source=vendor", gw.admin)).await;
    assert_no_canary("the audit log", &audit.to_string());
    let entries = audit["items"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{audit}");
    assert!(
        entries
            .iter()
            .all(|e| e["source"]["url"] == shown_guide.as_str()),
        "{audit}"
    );
    let id = items[0]["id"].as_u64().unwrap();
    let approved = post(&http, format!("{}/queue/{id}/approve", gw.admin), None).await;
    assert_eq!(approved.status(), StatusCode::OK);
    for path in ["projects/demo", "projects/demo/render/codex"] {
        let text = http
            .get(format!("{}/{path}", gw.admin))
            .bearer_auth(ADMIN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_no_canary(path, &text);
        assert!(text.contains(&shown_guide), "{path}: {text}");
    }

    // The log has the run's lines, without the token.
    let log = logs.wait_for("vendor feed source failed").await;
    assert!(log.contains(&shown_error), "{log}");
    assert!(log.contains("vendor page read requested"), "{log}");
    assert_no_canary("the log", &log);
    gw.stop().await;
    assert_no_canary("the log", &logs.text());
}
