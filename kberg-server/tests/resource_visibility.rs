//! The app's `ResourceVisibility` over real HTTP, on both protocol generations: a resource
//! hidden from a principal is left out of its `resources/list`, and reading it, subscribing to
//! it (2025-11-25) or naming it in a `subscriptions/listen` filter (2026-07-28) answers exactly
//! as for a URI never registered. Another principal still sees it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod common;

use common::*;
use kberg_core::Caller;
use serde_json::{Value, json};

/// A server whose `notes://2` is hidden from the principal `reader` (token [`READER`]).
async fn start_hiding_the_second_note() -> TestServer {
    let s = start().await;
    s.app
        .resources()
        .set_visibility(|uri: &str, caller: &Caller| {
            !(uri == "notes://2" && caller.principal().id == "reader")
        });
    s
}

fn listed(r: &Resp) -> Vec<String> {
    let reply = r.reply(1);
    reply["result"]["resources"]
        .as_array()
        .unwrap_or_else(|| panic!("{reply}"))
        .iter()
        .map(|d| d["uri"].as_str().unwrap().to_string())
        .collect()
}

/// The error of a reply, with the URI it names replaced, so that two refusals of different
/// URIs compare equal when they say the same thing.
fn error_without(reply: &Value, uri: &str) -> Value {
    let error = reply
        .get("error")
        .unwrap_or_else(|| panic!("expected an error: {reply}"));
    serde_json::from_str(&error.to_string().replace(uri, "<uri>")).unwrap()
}

#[tokio::test]
async fn a_hidden_resource_is_unknown_on_2026_07_28() {
    let s = start_hiding_the_second_note().await;
    let reader = Raw::new(&s.url, Some(READER));
    let writer = Raw::new(&s.url, Some(WRITER));

    let mine = listed(&reader.stateless(1, "resources/list", json!({})).await);
    assert!(mine.contains(&"notes://1".to_string()), "{mine:?}");
    assert!(!mine.contains(&"notes://2".to_string()), "{mine:?}");
    let theirs = listed(&writer.stateless(1, "resources/list", json!({})).await);
    assert!(theirs.contains(&"notes://2".to_string()), "{theirs:?}");

    let hidden = reader
        .stateless(1, "resources/read", json!({"uri": "notes://2"}))
        .await
        .reply(1);
    let unknown = reader
        .stateless(1, "resources/read", json!({"uri": "notes://none"}))
        .await
        .reply(1);
    assert_eq!(
        error_without(&hidden, "notes://2"),
        error_without(&unknown, "notes://none")
    );
    assert!(!hidden.to_string().contains("second"), "{hidden}");
    let read = writer
        .stateless(1, "resources/read", json!({"uri": "notes://2"}))
        .await
        .reply(1);
    assert!(read.get("result").is_some(), "{read}");
}

#[tokio::test]
async fn a_hidden_resource_cannot_be_subscribed_to_on_2025_11_25() {
    let s = start_hiding_the_second_note().await;
    let reader = Raw::new(&s.url, Some(READER));
    let sid = reader.initialize().await;
    let subscribe = |id: i64, uri: &'static str| {
        let reader = reader.clone();
        let sid = sid.clone();
        async move {
            reader
                .post(
                    json!({"jsonrpc": "2.0", "id": id, "method": "resources/subscribe",
                           "params": {"uri": uri}}),
                    Some(&sid),
                )
                .await
                .reply(id)
        }
    };
    let ok = subscribe(1, "notes://1").await;
    assert!(ok.get("result").is_some(), "{ok}");
    let hidden = subscribe(2, "notes://2").await;
    let unknown = subscribe(3, "notes://none").await;
    assert_eq!(
        error_without(&hidden, "notes://2"),
        error_without(&unknown, "notes://none")
    );
    assert_eq!(s.app.resources().subscribed_uris(), ["notes://1"]);

    let listed = listed(
        &reader
            .post(
                json!({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}),
                Some(&sid),
            )
            .await,
    );
    assert!(!listed.contains(&"notes://2".to_string()), "{listed:?}");
}

#[tokio::test]
async fn a_listen_filter_leaves_a_hidden_resource_out() {
    let s = start_hiding_the_second_note().await;
    let uris = ["notes://1", "notes://2"].map(String::from);
    let (ack, _stream) = listen(&s.url, READER, &uris).await;
    let accepted = ack["params"].to_string();
    assert!(accepted.contains("notes://1"), "{ack}");
    assert!(!accepted.contains("notes://2"), "{ack}");
    assert_eq!(s.app.resources().subscribed_uris(), ["notes://1"]);
}
