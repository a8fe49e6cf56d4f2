//! The vendor-guidance feed inside the gateway: configured in `bridle.yaml`, run at once and
//! then on its interval while the gateway serves, its suggestions queued as vendor-seeded
//! proposals with their source, never merged; a bad section stops the start, named.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use bridle_gateway::GatewayBuilder;
use bridle_gateway::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};
use bridle_rules::{AgentCatalog, RulesStore, Source};
use tokio_util::sync::CancellationToken;

const GUIDE: &str = "<!doctype html><html><head><meta content=\"Claude’s guide\"></head><body>\
<h1>Best practices</h1><ul><li>Always run the test suite before you commit.</li>\
<li>Never commit secrets or tokens.</li></ul></body></html>";

/// A vendor site on loopback serving one guidance page, counting its fetches.
async fn site(hits: Arc<AtomicUsize>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route(
        "/guide.html",
        get(move || {
            hits.fetch_add(1, Ordering::SeqCst);
            async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], GUIDE) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/guide.html")
}

fn data_dir(feed_yaml: &str) -> tempfile::TempDir {
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
    tmp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_feed_runs_while_the_gateway_serves_and_queues_for_review() {
    let hits = Arc::new(AtomicUsize::new(0));
    let url = site(Arc::clone(&hits)).await;
    let tmp = data_dir(&format!(
        "vendor_feed:\n  profiles:\n    claude:\n      - url: {url}\n  interval_minutes: 60\n"
    ));
    let config = GatewayConfig::load(tmp.path()).unwrap();
    assert!(config.vendor_feed.is_some());
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .build()
        .await
        .unwrap();
    assert!(gateway.vendor_feed().is_some());
    let store = gateway.context().store.clone();
    let bound = gateway.bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let served = tokio::spawn(bound.run(async move { s.cancelled().await }));

    // The first run starts with the gateway; wait for its proposals with a deadline.
    let queued = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let queue = store.queue(Some("demo"), false).unwrap();
            if queue.len() >= 2 {
                return queue;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the feed's first run queued its suggestions");
    assert_eq!(queued.len(), 2, "{queued:?}");
    for p in &queued {
        assert_eq!(p.origin.source, Source::Vendor);
        assert_eq!(p.origin.proposed_by, "vendor:claude");
        assert_eq!(p.origin.source_ref.as_deref(), Some(url.as_str()));
    }
    // Nothing merged: the document has no new guardrail.
    let doc = store.load("demo").unwrap().document;
    assert_eq!(doc.guardrails.len(), demo_document().guardrails.len());

    stop.cancel();
    served.await.unwrap().unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 1, "one run before the stop");

    // On demand, the same configuration: the unchanged page queues nothing new.
    let config = GatewayConfig::load(tmp.path()).unwrap();
    let gateway = GatewayBuilder::new(tmp.path(), config)
        .build()
        .await
        .unwrap();
    let runs = gateway
        .vendor_feed()
        .unwrap()
        .run_configured(&gateway.context().store)
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].0, "demo");
    assert_eq!(runs[0].1.as_ref().unwrap().queued(), 0);
    assert_eq!(store.queue(Some("demo"), false).unwrap().len(), 2);
}

#[tokio::test]
async fn a_bad_feed_section_stops_the_start_naming_it() {
    let tmp = data_dir("vendor_feed:\n  profiles: {}\n  every: 5\n");
    let e = GatewayConfig::load(tmp.path()).unwrap_err().to_string();
    assert!(e.contains("every"), "{e}");
}
