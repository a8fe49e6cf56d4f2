//! The Kanboard client against a hostile server on 127.0.0.1: an answer longer than
//! [`MAX_ANSWER_BYTES`] (streamed in pieces with no declared length, or declared up front) is
//! refused with `kanboard_bad_answer` instead of being buffered whole. The oversize answers are
//! otherwise valid JSON-RPC (a `true` result padded with whitespace), so a client that read
//! them whole would succeed; one just under the limit still does. An error whose message or
//! data runs to megabytes (a stack trace, a dump) reaches the agent cut to a few hundred
//! characters, and a batch answer with a huge stray item is named without its content.

#![cfg(feature = "kanboard")] // The Kanboard client is built with the `kanboard` feature.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Path;
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use bridle_gateway::kanboard::client::MAX_ANSWER_BYTES;
use bridle_gateway::kanboard::{Credential, KanboardClient};
use serde_json::Value;

/// The answer's JSON, before its padding.
const ANSWER: &str = r#"{"jsonrpc":"2.0","result":true,"id":1}"#;

/// How big each streamed piece is.
const PIECE: usize = 64 * 1024;

/// Answers every POST with [`ANSWER`] padded with spaces to the length in the path:
/// `/stream/<n>` in pieces with no `Content-Length`, `/declared/<n>` as one body with its
/// length.
async fn hostile(Path((how, total)): Path<(String, usize)>) -> Response {
    let mut body = ANSWER.as_bytes().to_vec();
    body.resize(total, b' ');
    let builder = Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json");
    if how == "declared" {
        return builder.body(Body::from(body)).unwrap();
    }
    let pieces: Vec<Bytes> = body.chunks(PIECE).map(Bytes::copy_from_slice).collect();
    let stream = futures::stream::iter(pieces.into_iter().map(Ok::<_, std::convert::Infallible>));
    builder.body(Body::from_stream(stream)).unwrap()
}

/// Answers `/error/<n>` with a JSON-RPC error whose message and data are `n` bytes each (with
/// multi-byte characters, so a cut at a byte count would split one), and `/stray/<n>` with a
/// batch answer holding an item of `n` bytes that answers no request.
async fn wordy(Path((how, total)): Path<(String, usize)>) -> Response {
    let text: String = "é".repeat(total / 2);
    let body = if how == "error" {
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": text, "data": text}})
    } else {
        serde_json::json!([{"jsonrpc": "2.0", "id": 99, "result": text}])
    };
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn start() -> String {
    let app = Router::new()
        .route("/{how}/{total}", post(hostile))
        .route("/wordy/{how}/{total}", post(wordy));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn call(base: &str, path: &str) -> Result<Value, bridle_gateway::kanboard::KanboardError> {
    let client = KanboardClient::new(
        format!("{base}{path}").parse().unwrap(),
        Duration::from_secs(30),
    )
    .unwrap();
    let credential = Credential::AppToken {
        token: "app-token".into(),
        acting_user_id: None,
    };
    client.call(&credential, "getVersion", Value::Null).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_limit_is_refused_not_buffered() {
    let base = start().await;

    // Just under the limit: read and answered as usual.
    let fits = call(&base, &format!("/stream/{MAX_ANSWER_BYTES}")).await;
    assert_eq!(fits.unwrap(), Value::Bool(true));

    // Streamed past the limit, with no length declared.
    let over = 4 * MAX_ANSWER_BYTES;
    let e = call(&base, &format!("/stream/{over}")).await.unwrap_err();
    assert_eq!(e.code(), "kanboard_bad_answer", "{e}");
    assert!(e.to_string().contains("getVersion"), "{e}");
    assert!(e.to_string().contains(&MAX_ANSWER_BYTES.to_string()), "{e}");

    // A declared length over the limit: refused before the body is read.
    let e = call(&base, &format!("/declared/{}", MAX_ANSWER_BYTES + 1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "kanboard_bad_answer", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_of_megabytes_is_cut_for_the_agent() {
    let base = start().await;
    let credential = Credential::AppToken {
        token: "app-token".into(),
        acting_user_id: None,
    };
    let big = 2 * 1024 * 1024;

    let e = call(&base, &format!("/wordy/error/{big}"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "kanboard_invalid_params", "{e}");
    let shown = e.to_string();
    assert!(shown.len() < 2048, "{} bytes", shown.len());
    assert!(
        shown.contains("getVersion") && shown.contains("éé"),
        "{shown}"
    );

    let client = KanboardClient::new(
        format!("{base}/wordy/stray/{big}").parse().unwrap(),
        Duration::from_secs(30),
    )
    .unwrap();
    let e = client
        .batch(
            &credential,
            &[("getVersion", Value::Null), ("getMe", Value::Null)],
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "kanboard_bad_answer", "{e}");
    let shown = e.to_string();
    assert!(shown.len() < 2048, "{} bytes", shown.len());
}
