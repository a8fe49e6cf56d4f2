//! A child-process upstream that quotes its credential partly encoded (some characters
//! percent-encoded or JSON-escaped, the others as they are: a user-part encoder leaves `+` and
//! `=` alone, a backend's JSON body escapes only `/`) gets it neither into the log through its
//! stderr nor to the calling client through a relayed log message, progress message or
//! question. The aggregator is told the credential only as it is ([`UpstreamConfig::stderr_redact`],
//! as the gateway tells it), and finds it in every mix of its encoded forms.
//!
//! The upstream is `aggregate_raw_upstream.py`: it prints `RAW_STDERR_TOKEN` on stderr at start,
//! and its `leak` tool says `RAW_LEAK_TOKEN` back in a question, a log message and a progress
//! message. Both are given the encoded forms; the values the aggregator knows are the
//! configured ones alone, so only the encoded search can find them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

mod peers;

use std::sync::Arc;

use kberg_core::{CallOptions, CancellationToken, ClientPeer, PeerError, ToolRegistry};
use kberg_server::aggregate::{Aggregator, AggregatorConfig, REDACTED, UpstreamConfig};
use kberg_testkit::log::LogBuffer;
use peers::*;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The credential, as configured: a base64-style key, with `/`, `+` and `=`.
const SECRET: &str = "canary/Part+Enc=7Kq/Zz==";
/// [`SECRET`] with some of its characters percent-encoded, in either case.
const PERCENT_IN_PART: &str = "canary%2FPart+Enc%3d7Kq/Zz%3D%3D";
/// [`SECRET`] with its `/` JSON-escaped and one `+` percent-encoded.
const ESCAPED_IN_PART: &str = "canary\\/Part%2BEnc=7Kq\\/Zz==";

/// What the upstream says, both partly encoded forms in one string.
fn quoted() -> String {
    format!("{PERCENT_IN_PART} and {ESCAPED_IN_PART}")
}

fn config(transport: kberg_server::aggregate::UpstreamTransport) -> AggregatorConfig {
    AggregatorConfig::new().upstream(
        UpstreamConfig::new("raw", transport)
            .call_timeout(std::time::Duration::from_secs(10))
            .stderr_redact([SECRET.to_string()]),
    )
}

#[tokio::test(flavor = "current_thread")]
async fn a_partly_encoded_credential_on_stderr_is_logged_redacted() {
    let captured = LogBuffer::default();
    let _guard = tracing::subscriber::set_default(captured.subscriber(tracing::Level::TRACE));
    let agg = Aggregator::start(
        config(raw_upstream().env("RAW_STDERR_TOKEN", quoted())),
        ToolRegistry::new(),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );
    let text = captured.wait_for("raw upstream ready").await;
    agg.shutdown().await;
    // No part of the credential, in any form (the log quotes the line, a backslash doubled).
    assert!(
        !text.contains("canary"),
        "the credential reached the log:\n{text}"
    );
    assert!(
        text.contains("raw upstream starting, token=[redacted] and [redacted]"),
        "{text}"
    );
    assert_eq!(
        text.matches("said one of its own credentials").count(),
        1,
        "{text}"
    );
}

/// The calling client: notes every notification and question it gets, and accepts every
/// question with `{"ok": true}`, which ends the `leak` tool's call after one round.
struct Noting(mpsc::UnboundedSender<(String, Value)>);

#[async_trait::async_trait]
impl ClientPeer for Noting {
    async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError> {
        let _ = self.0.send((method.to_string(), params));
        Ok(())
    }
    async fn request(
        &self,
        method: &str,
        params: Value,
        _cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        let _ = self.0.send((method.to_string(), params));
        Ok(json!({"action": "accept", "content": {"ok": true}}))
    }
    fn supports(&self, capability: &str) -> bool {
        capability == "elicitation"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_encoded_credential_in_relayed_messages_reaches_the_client_redacted() {
    let registry = ToolRegistry::new();
    let agg = Aggregator::start(
        config(raw_upstream().env("RAW_LEAK_TOKEN", quoted())),
        registry.clone(),
    )
    .expect("valid");
    assert!(
        agg.wait_connected("raw", 1, WAIT).await,
        "{:?}",
        agg.status("raw")
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let opts = CallOptions::with_cancel(CancellationToken::new())
        .with_peer(Arc::new(Noting(tx)))
        .with_progress_token(json!("progress-1"));
    let out = registry
        .call(&reader(), "raw__leak", json!({}), opts)
        .await
        .expect("answered");
    assert_eq!(out.all_text(), "told in 1 rounds");
    // The answer returns only after what the upstream said before it was handed on.
    let mut got: Vec<(String, Value)> = Vec::new();
    while let Ok(seen) = rx.try_recv() {
        got.push(seen);
    }
    agg.shutdown().await;
    let shown = serde_json::to_string(&got).unwrap();
    assert!(
        !shown.contains("canary"),
        "the credential reached the client:\n{shown}"
    );
    let twice = format!("{REDACTED} and {REDACTED}");
    let log = got
        .iter()
        .find(|(m, _)| m == "notifications/message")
        .map(|(_, p)| p)
        .expect("the log message was relayed");
    assert_eq!(log["logger"], format!("backend {twice}"), "{log}");
    assert_eq!(
        log["data"]["detail"]["error"],
        format!("invalid token {twice}"),
        "{log}"
    );
    assert_eq!(
        log["data"]["detail"]["tried"],
        json!(["plain text", twice]),
        "{log}"
    );
    let progress = got
        .iter()
        .find(|(m, _)| m == "notifications/progress")
        .map(|(_, p)| p)
        .expect("the progress message was relayed");
    assert_eq!(
        progress["message"],
        format!("signed in with {twice}, fetching"),
        "{progress}"
    );
    let questions: Vec<&Value> = got
        .iter()
        .filter(|(m, _)| m == "elicitation/create")
        .map(|(_, p)| &p["message"])
        .collect();
    assert_eq!(
        questions,
        [
            &json!(format!("Use the token {twice} for this call?")),
            &json!(format!("Finished with {twice}?")),
        ],
        "{shown}"
    );
}
