//! The vendor feed against a real HTTP server on 127.0.0.1: conditional requests, and every way
//! a vendor's server can go wrong (down, slow, redirected elsewhere, an error page, a huge
//! body, not text), each a clear error that queues nothing.

#![cfg(feature = "fetch")]
#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bridle_rules::vendor::{
    DocumentFormat, FeedLedger, VendorFeed, VendorFeedConfig, VendorSource,
};
use bridle_rules::{AgentCatalog, ProposalStatus, RulesDocument, RulesStore, Source};
use kberg_testkit::eventually_async;

const GUIDE_HTML: &str = "<!doctype html><html><head><meta content=\"Claude’s guide\"><title>Claude’s guide</title><script>if (a < b) { never(); }</script></head><body><nav><a href=\"/\">Use the docs home page for everything</a></nav><main><h1>Best practices</h1><p>Claude reads CLAUDE.md at the start of a session. You should keep CLAUDE.md short and specific.</p><ul><li><b>Always</b> run the tests before committing a change.</li><li>Never commit secrets to the repository.</li></ul></main></body></html>";

const GUIDE_MD: &str = "# Codex tips\n\n- Prefer small, reviewable diffs over sweeping rewrites.\n- Read AGENTS.md first.\n\n```sh\nalways-ignored --code\n```\n";

const ERROR_PAGE: &str = "<html><body><h1>Internal error</h1><p>You should contact the administrator of this site about this error.</p></body></html>";

/// Counts requests, and how many came with validators.
#[derive(Default)]
struct Hits {
    guide: AtomicUsize,
    conditional: AtomicUsize,
}

async fn guide(State(hits): State<Arc<Hits>>, headers: HeaderMap) -> Response {
    hits.guide.fetch_add(1, Ordering::SeqCst);
    if headers.get(header::IF_NONE_MATCH) == Some(&HeaderValue::from_static("\"v1\"")) {
        hits.conditional.fetch_add(1, Ordering::SeqCst);
        return StatusCode::NOT_MODIFIED.into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::ETAG, "\"v1\""),
        ],
        GUIDE_HTML,
    )
        .into_response()
}

const LAST_MODIFIED: &str = "Sun, 29 Nov 2026 10:00:00 GMT";

async fn guide_md(State(hits): State<Arc<Hits>>, headers: HeaderMap) -> Response {
    if headers.get(header::IF_MODIFIED_SINCE) == Some(&HeaderValue::from_static(LAST_MODIFIED)) {
        hits.conditional.fetch_add(1, Ordering::SeqCst);
        return StatusCode::NOT_MODIFIED.into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "text/plain"),
            (header::LAST_MODIFIED, LAST_MODIFIED),
        ],
        GUIDE_MD,
    )
        .into_response()
}

struct Site {
    base: String,
    hits: Arc<Hits>,
    _server: tokio::task::JoinHandle<()>,
}

async fn site() -> Site {
    let hits = Arc::new(Hits::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let elsewhere = format!("http://localhost:{port}/guide.html");
    let app = Router::new()
        .route("/guide.html", get(guide))
        .route("/guide.md", get(guide_md))
        .route(
            "/moved",
            get(|| async {
                (
                    StatusCode::PERMANENT_REDIRECT,
                    [(header::LOCATION, "/guide.html")],
                )
            }),
        )
        .route(
            "/elsewhere",
            get(move || async move { (StatusCode::FOUND, [(header::LOCATION, elsewhere)]) }),
        )
        .route(
            "/loop",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/loop")]) }),
        )
        .route(
            "/error",
            get(|| async {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    [(header::CONTENT_TYPE, "text/html")],
                    ERROR_PAGE,
                )
            }),
        )
        .route(
            "/gone",
            get(|| async {
                (
                    StatusCode::NOT_FOUND,
                    [(header::CONTENT_TYPE, "text/html")],
                    ERROR_PAGE,
                )
            }),
        )
        .route(
            "/huge",
            get(|| async {
                let page = format!("<p>{}</p>", "You should read this. ".repeat(200_000));
                ([(header::CONTENT_TYPE, "text/html")], page)
            }),
        )
        .route(
            "/huge-stream",
            get(|| async {
                let chunks = (0..400)
                    .map(|_| Ok::<_, std::io::Error>("You should always stream. ".repeat(1_000)));
                Response::builder()
                    .header(header::CONTENT_TYPE, "text/markdown")
                    .body(Body::from_stream(futures::stream::iter(chunks)))
                    .unwrap()
            }),
        )
        .route(
            "/pdf",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "application/pdf")],
                    "%PDF-1.7 never",
                )
            }),
        )
        .route("/slow", get(std::future::pending::<&'static str>))
        .with_state(hits.clone());
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Site {
        base: format!("http://127.0.0.1:{port}"),
        hits,
        _server: server,
    }
}

fn store() -> (tempfile::TempDir, RulesStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = RulesStore::open(dir.path(), AgentCatalog::builtin()).unwrap();
    store
        .create("shop", &RulesDocument::new("Shop"), "alice")
        .unwrap();
    (dir, store)
}

fn feed(sources: &[(&str, String)], timeout_secs: u64, max_bytes: u64) -> VendorFeed {
    let mut profiles: BTreeMap<String, Vec<VendorSource>> = BTreeMap::new();
    for (agent, url) in sources {
        profiles
            .entry(agent.to_string())
            .or_default()
            .push(VendorSource {
                url: url.clone(),
                format: None,
            });
    }
    VendorFeed::new(VendorFeedConfig {
        profiles,
        interval_minutes: None,
        projects: Vec::new(),
        max_bytes,
        timeout_secs,
    })
    .unwrap()
}

#[tokio::test]
async fn candidates_are_queued_once_with_provenance_and_unchanged_pages_queue_nothing() {
    let site = site().await;
    let (_dir, store) = store();
    let html_url = format!("{}/guide.html", site.base);
    let md_url = format!("{}/guide.md", site.base);
    let feed = feed(
        &[("claude", html_url.clone()), ("codex", md_url.clone())],
        10,
        1 << 20,
    );

    let run = feed.run(&store, "shop").await.unwrap();
    assert_eq!(run.failures().count(), 0, "{:?}", run.sources);
    let statements: Vec<String> = run
        .sources
        .iter()
        .flat_map(|s| s.outcome.as_ref().unwrap().queued.iter())
        .map(|c| c.statement.clone())
        .collect();
    assert_eq!(
        statements,
        vec![
            "You should keep CLAUDE.md short and specific.",
            "Always run the tests before committing a change.",
            "Never commit secrets to the repository.",
            "Prefer small, reviewable diffs over sweeping rewrites.",
        ]
    );

    // Each queued proposal is vendor-seeded, pending, and keeps URL, fetch time and excerpt.
    let ledger = FeedLedger::open(&store).unwrap();
    let queue = store.queue(Some("shop"), false).unwrap();
    assert_eq!(queue.len(), 4);
    for p in &queue {
        assert_eq!(p.status, ProposalStatus::Pending);
        assert_eq!(p.origin.source, Source::Vendor);
        let c = ledger.candidate(p.id).unwrap().unwrap();
        assert_eq!(p.origin.source_ref.as_deref(), Some(c.source_url.as_str()));
        assert!(c.excerpt.contains(&c.statement));
        assert!(c.fetched_at.ends_with('Z'), "{}", c.fetched_at);
    }
    let first = ledger.candidate(queue[0].id).unwrap().unwrap();
    assert_eq!(first.source_url, html_url);
    assert_eq!(
        first.excerpt,
        "Claude reads CLAUDE.md at the start of a session. You should keep CLAUDE.md short and specific."
    );
    assert!(store.load("shop").unwrap().document.guardrails.is_empty());

    // The second run sends the validators; both pages answer 304 and nothing is queued.
    let again = feed.run(&store, "shop").await.unwrap();
    for s in &again.sources {
        let report = s.outcome.as_ref().unwrap();
        assert!(report.not_modified, "{}", s.url);
        assert!(report.queued.is_empty());
    }
    assert_eq!(site.hits.conditional.load(Ordering::SeqCst), 2);
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), 4);
}

#[tokio::test]
async fn a_same_site_redirect_is_followed() {
    let site = site().await;
    let (_dir, store) = store();
    let feed = feed(&[("claude", format!("{}/moved", site.base))], 10, 1 << 20);
    let run = feed.run(&store, "shop").await.unwrap();
    let report = run.sources[0].outcome.as_ref().unwrap();
    assert_eq!(report.queued.len(), 3);
    assert_eq!(site.hits.guide.load(Ordering::SeqCst), 1);
}

/// Runs one failing source and checks its error code, that the message names the URL, and
/// that nothing was queued or remembered.
async fn fails_with(path: &str, code: &str, timeout_secs: u64, max_bytes: u64) -> String {
    let site = site().await;
    let (_dir, store) = store();
    let url = format!("{}{path}", site.base);
    let feed = feed(&[("claude", url.clone())], timeout_secs, max_bytes);
    let run = feed.run(&store, "shop").await.unwrap();
    let err = run.sources[0].outcome.as_ref().unwrap_err();
    assert_eq!(err.code(), code, "{err}");
    let message = err.to_string();
    assert!(message.contains(&url), "{message}");
    assert!(store.queue(Some("shop"), true).unwrap().is_empty());
    let ledger = FeedLedger::open(&store).unwrap();
    assert_eq!(ledger.validators("shop", "claude", &url).unwrap(), None);
    assert!(ledger.candidates("shop").unwrap().is_empty());
    message
}

#[tokio::test]
async fn a_redirect_to_another_site_is_refused() {
    let message = fails_with("/elsewhere", "feed_redirected", 10, 1 << 20).await;
    assert!(message.contains("http://localhost:"), "{message}");
}

#[tokio::test]
async fn a_redirect_loop_is_refused() {
    fails_with("/loop", "feed_redirected", 10, 1 << 20).await;
}

#[tokio::test]
async fn an_error_page_is_not_read_as_guidance() {
    let message = fails_with("/error", "feed_http_status", 10, 1 << 20).await;
    assert!(message.contains("HTTP 500"), "{message}");
    fails_with("/gone", "feed_http_status", 10, 1 << 20).await;
}

#[tokio::test]
async fn a_huge_body_is_refused_by_length_and_while_streaming() {
    fails_with("/huge", "feed_too_large", 10, 1 << 20).await;
    fails_with("/huge-stream", "feed_too_large", 10, 1 << 20).await;
}

#[tokio::test]
async fn a_page_that_is_not_text_is_refused() {
    fails_with("/pdf", "feed_not_text", 10, 1 << 20).await;
}

#[tokio::test]
async fn a_slow_server_times_out() {
    fails_with("/slow", "feed_timeout", 1, 1 << 20).await;
}

#[tokio::test]
async fn a_server_that_is_down_is_unreachable_and_the_other_sources_still_run() {
    let site = site().await;
    let (_dir, store) = store();
    // A port that was free a moment ago and has nothing listening now.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/guide.html", l.local_addr().unwrap())
    };
    let feed = feed(
        &[
            ("claude", dead.clone()),
            ("codex", format!("{}/guide.md", site.base)),
        ],
        5,
        1 << 20,
    );
    let run = feed.run(&store, "shop").await.unwrap();
    let failed: Vec<_> = run.failures().collect();
    assert_eq!(failed.len(), 1);
    let err = failed[0].outcome.as_ref().unwrap_err();
    assert_eq!(err.code(), "feed_unreachable", "{err}");
    assert!(err.to_string().contains(&dead));
    assert_eq!(run.queued(), 1);
}

#[tokio::test]
async fn bad_urls_unknown_agents_and_local_files() {
    let (dir, store) = store();
    for (url, code) in [
        ("ftp://vendor.example/guide", "feed_bad_url"),
        ("http://", "feed_bad_url"),
    ] {
        let run = feed(&[("claude", url.to_string())], 5, 1 << 20)
            .run(&store, "shop")
            .await
            .unwrap();
        assert_eq!(
            run.sources[0].outcome.as_ref().unwrap_err().code(),
            code,
            "{url}"
        );
    }
    let file = dir.path().join("guide.md");
    std::fs::write(&file, GUIDE_MD).unwrap();
    let url = file.display().to_string();
    let run = feed(&[("hal", url.clone())], 5, 1 << 20)
        .run(&store, "shop")
        .await
        .unwrap();
    assert_eq!(
        run.sources[0].outcome.as_ref().unwrap_err().code(),
        "unknown_agent"
    );
    let run = feed(&[("codex", url.clone())], 5, 1 << 20)
        .run(&store, "shop")
        .await
        .unwrap();
    assert_eq!(run.queued(), 1);
    let run = feed(&[("codex", url)], 5, 10)
        .run(&store, "shop")
        .await
        .unwrap();
    assert_eq!(
        run.sources[0].outcome.as_ref().unwrap_err().code(),
        "feed_too_large"
    );
    let missing = dir.path().join("missing.md").display().to_string();
    let run = feed(&[("codex", missing)], 5, 1 << 20)
        .run(&store, "shop")
        .await
        .unwrap();
    assert_eq!(
        run.sources[0].outcome.as_ref().unwrap_err().code(),
        "io_error"
    );
    assert_eq!(
        DocumentFormat::from_file_name("guide.md"),
        Some(DocumentFormat::Markdown)
    );
}

#[tokio::test]
async fn an_interval_run_queues_then_stops_on_shutdown() {
    let site = site().await;
    let (_dir, store) = store();
    let mut profiles = BTreeMap::new();
    profiles.insert(
        "claude".to_string(),
        vec![VendorSource {
            url: format!("{}/guide.html", site.base),
            format: None,
        }],
    );
    let feed = VendorFeed::new(VendorFeedConfig {
        profiles,
        interval_minutes: Some(60),
        projects: vec!["shop".to_string()],
        ..VendorFeedConfig::default()
    })
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher_store = store.clone();
    let watcher = async move {
        // The first tick runs at once; wait for its proposals with a deadline, then stop.
        eventually_async("the first run to queue", || {
            let queued =
                (watcher_store.queue(Some("shop"), false).unwrap().len() >= 3).then_some(());
            async move { queued }
        })
        .await;
        let _ = stop.send(());
    };
    let runner = feed.run_every(&store, async {
        let _ = stopped.await;
    });
    tokio::join!(runner, watcher);
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), 3);
}

#[tokio::test]
async fn a_configured_run_queues_into_every_project_or_the_named_ones() {
    let site = site().await;
    let (_dir, store) = store();
    store
        .create("docs", &RulesDocument::new("Docs"), "alice")
        .unwrap();
    let mut profiles = BTreeMap::new();
    profiles.insert(
        "claude".to_string(),
        vec![VendorSource {
            url: format!("{}/guide.html", site.base),
            format: None,
        }],
    );
    // No projects named: every project the store holds.
    let every = VendorFeed::new(VendorFeedConfig {
        profiles: profiles.clone(),
        ..VendorFeedConfig::default()
    })
    .unwrap();
    let runs = every.run_configured(&store).await.unwrap();
    let names: Vec<&str> = runs.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(names, ["docs", "shop"]);
    for (project, run) in &runs {
        assert_eq!(run.as_ref().unwrap().queued(), 3, "{project}");
    }

    // Named projects, one of them unknown: that one fails with a clear error, the other runs
    // (and queues nothing new: the page is unchanged).
    let named = VendorFeed::new(VendorFeedConfig {
        profiles,
        projects: vec!["nope".to_string(), "shop".to_string()],
        ..VendorFeedConfig::default()
    })
    .unwrap();
    let runs = named.run_configured(&store).await.unwrap();
    assert_eq!(runs.len(), 2);
    assert!(runs[0].1.is_err(), "{:?}", runs[0].1);
    assert_eq!(runs[1].1.as_ref().unwrap().queued(), 0);
    assert_eq!(store.queue(Some("shop"), false).unwrap().len(), 3);
}
