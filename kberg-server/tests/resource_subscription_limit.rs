//! The app's `max_resource_subscriptions` over real HTTP, on both protocol generations: a
//! template makes endless URIs subscribable, so a 2025-11-25 session's `resources/subscribe`
//! past the limit is refused with `-32602` and subscribes nothing, and a 2026-07-28
//! `subscriptions/listen` filter naming more URIs than the limit is accepted with its first
//! ones, which its acknowledgement lists.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod common;

use std::collections::BTreeSet;

use common::*;
use futures::StreamExt;
use kberg_core::{ResourceContents, ResourceRegistry, ResourceTemplate, reader_fn};
use kberg_server::McpApp;
use kberg_testkit::serve::{RunningServer, loopback};
use serde_json::{Value, json};

/// An app whose `notes://{id}` template matches every note id, served on 127.0.0.1, with the
/// subscription limit `limit` (`None`: the default).
async fn serve(limit: Option<usize>) -> (McpApp, RunningServer) {
    let resources = ResourceRegistry::new();
    resources
        .register_template(
            ResourceTemplate::new("notes://{id}", "note"),
            reader_fn(
                |uri, _| async move { Ok(vec![ResourceContents::text(uri, None, "a note")]) },
            ),
        )
        .unwrap();
    let builder = McpApp::builder("subscription-limit", "0").resources(resources);
    let app = match limit {
        Some(n) => builder.max_resource_subscriptions(n),
        None => builder,
    }
    .build();
    let server = RunningServer::start(app.clone(), loopback().auth(auth())).await;
    (app, server)
}

async fn subscribe(c: &Raw, sid: &str, id: i64, method: &str, uri: &str) -> Value {
    c.post(
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"uri": uri}}),
        Some(sid),
    )
    .await
    .reply(id)
}

#[tokio::test]
async fn a_session_cannot_subscribe_past_its_limit() {
    let (app, server) = serve(Some(3)).await;
    let c = Raw::new(&server.url, Some(READER));
    let sid = c.initialize().await;
    for i in 1..=3 {
        let ok = subscribe(&c, &sid, i, "resources/subscribe", &format!("notes://{i}")).await;
        assert!(ok.get("result").is_some(), "{ok}");
    }
    let refused = subscribe(&c, &sid, 4, "resources/subscribe", "notes://4").await;
    let error = refused
        .get("error")
        .unwrap_or_else(|| panic!("expected an error: {refused}"));
    assert_eq!(error["code"], -32602, "{refused}");
    assert_eq!(error["data"]["code"], "too_many_subscriptions", "{refused}");
    assert_eq!(error["data"]["limit"], 3, "{refused}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("notes://4") && message.contains("at most 3"),
        "{message}"
    );
    // Nothing was subscribed.
    assert_eq!(
        app.resources().subscribed_uris(),
        ["notes://1", "notes://2", "notes://3"]
    );
    assert_eq!(app.resources().notify_updated("notes://4"), 0);

    // A URI already held is no new subscription; unsubscribing makes room.
    let again = subscribe(&c, &sid, 5, "resources/subscribe", "notes://1").await;
    assert!(again.get("result").is_some(), "{again}");
    let gone = subscribe(&c, &sid, 6, "resources/unsubscribe", "notes://1").await;
    assert!(gone.get("result").is_some(), "{gone}");
    let ok = subscribe(&c, &sid, 7, "resources/subscribe", "notes://4").await;
    assert!(ok.get("result").is_some(), "{ok}");
    assert_eq!(
        app.resources().subscribed_uris(),
        ["notes://2", "notes://3", "notes://4"]
    );

    // Another session has a limit of its own.
    let sid2 = c.initialize().await;
    let ok = subscribe(&c, &sid2, 1, "resources/subscribe", "notes://9").await;
    assert!(ok.get("result").is_some(), "{ok}");
}

/// Opens a `subscriptions/listen` for `uris` as [`READER`]; returns the acknowledgement's
/// accepted resource URIs (each once) and the stream, still open.
async fn listen_as_reader(
    url: &str,
    uris: &[String],
) -> (
    BTreeSet<String>,
    impl futures::Stream<Item = reqwest::Result<Vec<u8>>> + Unpin,
) {
    let (ack, stream) = listen(url, READER, uris).await;
    let accepted = ack["params"]["notifications"]["resourceSubscriptions"]
        .as_array()
        .unwrap_or_else(|| panic!("no accepted resources: {ack}"))
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect();
    (accepted, stream)
}

#[tokio::test]
async fn a_listen_filter_past_the_limit_keeps_its_first_uris() {
    let (app, server) = serve(Some(3)).await;
    // An unknown URI and a repeated one take no place; the first three notes do.
    let uris: Vec<String> = [
        "nowhere://x",
        "notes://1",
        "notes://1",
        "notes://2",
        "notes://3",
        "notes://4",
        "notes://5",
    ]
    .map(String::from)
    .to_vec();
    let (accepted, mut stream) = listen_as_reader(&server.url, &uris).await;
    assert_eq!(
        accepted,
        BTreeSet::from(["notes://1", "notes://2", "notes://3"].map(String::from))
    );
    assert_eq!(
        app.resources().subscribed_uris(),
        ["notes://1", "notes://2", "notes://3"]
    );
    assert_eq!(app.resources().notify_updated("notes://4"), 0);
    // What was accepted is watched.
    assert_eq!(app.resources().notify_updated("notes://3"), 1);
    let mut seen = String::new();
    while !seen.contains("notifications/resources/updated") {
        let chunk = tokio::time::timeout(kberg_testkit::WAIT, stream.next())
            .await
            .expect("the update in time")
            .expect("stream open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("notes://3"), "{seen}");
}

#[tokio::test]
async fn a_listen_filter_is_cut_at_the_default_limit() {
    let (app, server) = serve(None).await;
    let uris: Vec<String> = (0..1500).map(|i| format!("notes://{i}")).collect();
    let (accepted, _stream) = listen_as_reader(&server.url, &uris).await;
    assert_eq!(accepted.len(), 1000);
    let first: BTreeSet<String> = uris[..1000].iter().cloned().collect();
    assert!(accepted == first, "not the filter's first 1,000 URIs");
    assert_eq!(app.resources().subscribed_uris().len(), 1000);
    assert_eq!(app.resources().notify_updated("notes://999"), 1);
    assert_eq!(app.resources().notify_updated("notes://1000"), 0);
}
