//! A subscription outlives neither the resource's visibility nor a visibility that panics:
//! when the app's `ResourceVisibility` stops showing a subscribed resource to a principal (an
//! admin took a project away from an agent), `notify_updated` no longer tells that principal's
//! open `subscriptions/listen` stream of the resource's updates (its URI and their timing),
//! and the subscription ends. A visibility that panics counts as hiding the resource; the
//! app's `notify_updated` does not unwind, and the other subscriptions carry on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use common::*;
use futures::StreamExt;
use kberg_core::Caller;

/// Every resource shown.
const SHOWN: u8 = 0;
/// `notes://1` hidden from `reader`.
const HIDDEN: u8 = 1;
/// The visibility panics when asked about `notes://1` for `reader`.
const PANICS: u8 = 2;

/// A server whose visibility of `notes://1` to `reader` the test sets through the returned
/// switch.
async fn start_with_switch() -> (TestServer, Arc<AtomicU8>) {
    let s = start().await;
    let switch = Arc::new(AtomicU8::new(SHOWN));
    let seen = Arc::clone(&switch);
    s.app
        .resources()
        .set_visibility(move |uri: &str, caller: &Caller| {
            if uri != "notes://1" || caller.principal().id != "reader" {
                return true;
            }
            match seen.load(Ordering::SeqCst) {
                SHOWN => true,
                PANICS => panic!("the visibility failed"),
                _ => false,
            }
        });
    (s, switch)
}

/// Reads the stream until a `notifications/resources/updated` for `uri` arrives; returns all
/// that was read.
async fn until_updated(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<Vec<u8>>> + Unpin),
    uri: &str,
) -> String {
    let mut seen = String::new();
    loop {
        let done = seen
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
            .any(|m| m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri);
        if done {
            return seen;
        }
        let chunk = tokio::time::timeout(kberg_testkit::WAIT, stream.next())
            .await
            .unwrap_or_else(|_| panic!("the update of {uri} in time; read so far: {seen}"))
            .expect("stream open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// Listens as `reader` to both notes, checks `notes://1` is delivered while shown, sets the
/// switch to `to`, and checks that `notes://1`'s next update is not told while `notes://2`'s
/// still is.
async fn a_listen_stream_loses_notes_1_when(to: u8) {
    let (s, switch) = start_with_switch().await;
    let resources = s.app.resources();
    let uris = ["notes://1", "notes://2"].map(String::from);
    let (_ack, mut stream) = listen(&s.url, READER, &uris).await;
    assert_eq!(resources.subscribed_uris(), ["notes://1", "notes://2"]);
    assert_eq!(resources.notify_updated("notes://1"), 1);
    until_updated(&mut stream, "notes://1").await;

    switch.store(to, Ordering::SeqCst);
    assert_eq!(resources.notify_updated("notes://1"), 0);
    assert_eq!(resources.subscribed_uris(), ["notes://2"]);
    assert_eq!(resources.notify_updated("notes://2"), 1);
    let after = until_updated(&mut stream, "notes://2").await;
    assert!(!after.contains("notes://1"), "{after}");

    // Shown again, the resource's updates do not come back without a new subscription.
    switch.store(SHOWN, Ordering::SeqCst);
    assert_eq!(resources.notify_updated("notes://1"), 0);
}

#[tokio::test]
async fn a_resource_hidden_after_subscribing_is_no_longer_notified() {
    a_listen_stream_loses_notes_1_when(HIDDEN).await;
}

#[tokio::test]
async fn a_visibility_that_panics_when_notifying_hides_the_resource() {
    a_listen_stream_loses_notes_1_when(PANICS).await;
}
