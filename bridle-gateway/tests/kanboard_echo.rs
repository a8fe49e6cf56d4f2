//! The Kanboard client against a server on 127.0.0.1 that echoes the credential it was sent:
//! in a JSON-RPC error's message and data, in a batch item, in a result (a key and a value).
//! Kanboard behind a plugin or a proxy that quotes the request's `Authorization` header hands
//! back the token, the `user:token` pair or its base64 form; none of them may reach the agent,
//! whose errors and results are built from these answers.

#![cfg(feature = "kanboard")] // The Kanboard client is built with the `kanboard` feature.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{HeaderMap, header};
use axum::response::Response;
use axum::routing::post;
use base64::Engine;
use bridle_gateway::kanboard::{Credential, KanboardClient, KanboardError};
use serde_json::{Value, json};

/// The token the client sends; nothing the client returns may hold it, in any form.
const CANARY: &str = "canary-kb-token-7f3a";

/// Answers with what the request's `Authorization` header carried: `/error/<form>` as a
/// JSON-RPC error, `/result/<form>` as a result, `/batch/<form>` as a stray batch item, where
/// `<form>` is `header` (the header as sent), `pair` (the decoded `user:token`) or `token`.
async fn echo(Path((how, form)): Path<(String, String)>, headers: HeaderMap) -> Response {
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let b64 = sent.strip_prefix("Basic ").unwrap_or_default();
    let pair = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap_or_default(),
    )
    .unwrap_or_default();
    let token = pair
        .split_once(':')
        .map(|(_, t)| t.to_string())
        .unwrap_or_default();
    let quoted = match form.as_str() {
        "header" => sent,
        "pair" => pair,
        // Not an echo: a user name of the board.
        "name" => "admin".to_string(),
        _ => token,
    };
    let body = match how.as_str() {
        "error" => json!({"jsonrpc": "2.0", "id": 1, "error": {
            "code": -32000,
            "message": format!("access denied for {quoted}"),
            "data": quoted,
        }}),
        "params" => json!({"jsonrpc": "2.0", "id": 1, "error": {
            "code": -32602,
            "message": "Invalid params",
            "data": format!("bad credential {quoted}"),
        }}),
        "batch" => json!([{"jsonrpc": "2.0", "id": 99, "result": quoted}]),
        _ => json!({"jsonrpc": "2.0", "id": 1, "result": {
            "title": format!("seen {quoted}"),
            quoted.clone(): [quoted],
        }}),
    };
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn start() -> String {
    let app = Router::new().route("/{how}/{form}", post(echo));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn client(base: &str, path: &str) -> KanboardClient {
    KanboardClient::new(
        format!("{base}{path}").parse().unwrap(),
        Duration::from_secs(30),
    )
    .unwrap()
}

fn credentials() -> [Credential; 2] {
    [
        Credential::AppToken {
            token: CANARY.into(),
            acting_user_id: None,
        },
        Credential::User {
            username: "claude-bot".into(),
            token: CANARY.into(),
        },
    ]
}

/// Every form the credential takes on the wire, for the assertions.
fn forms(credential: &Credential) -> Vec<String> {
    let user = match credential {
        Credential::AppToken { .. } => "jsonrpc",
        Credential::User { username, .. } => username.as_str(),
    };
    let pair = format!("{user}:{CANARY}");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&pair);
    vec![CANARY.to_string(), pair, b64]
}

fn assert_clean(what: &str, text: &str, credential: &Credential) {
    for form in forms(credential) {
        assert!(!text.contains(&form), "{what} holds `{form}`: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_echoed_credential_reaches_no_error_and_no_result() {
    let base = start().await;
    for credential in credentials() {
        for form in ["header", "pair", "token"] {
            for how in ["error", "params"] {
                let e: KanboardError = client(&base, &format!("/{how}/{form}"))
                    .call(&credential, "getMe", Value::Null)
                    .await
                    .unwrap_err();
                assert_clean(&format!("{how}/{form}"), &e.to_string(), &credential);
                assert!(e.to_string().contains("[redacted]"), "{e}");
            }

            let result = client(&base, &format!("/result/{form}"))
                .call(&credential, "getMe", Value::Null)
                .await
                .unwrap();
            assert_clean(&format!("result/{form}"), &result.to_string(), &credential);
            assert!(result["title"].as_str().unwrap().starts_with("seen "));

            let e = client(&base, &format!("/batch/{form}"))
                .batch(&credential, &[("getMe", Value::Null)])
                .await
                .unwrap_err();
            assert_eq!(e.code(), "kanboard_bad_answer", "{e}");
            assert_clean(&format!("batch/{form}"), &e.to_string(), &credential);
        }
    }
}

/// A password as short as a word (Kanboard's API takes a user's password too; its first user is
/// `admin` with the password `admin`) is no token to search for in every answer: the names on
/// the board that match it are left as they are, and the header's base64 form and the
/// `user:password` pair are still scrubbed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_as_short_as_a_word_leaves_the_boards_names_alone() {
    let base = start().await;
    let credential = Credential::User {
        username: "admin".into(),
        token: "admin".into(),
    };
    let result = client(&base, "/result/name")
        .call(&credential, "getMe", Value::Null)
        .await
        .unwrap();
    assert_eq!(result["title"], "seen admin", "{result}");
    assert_eq!(result["admin"], json!(["admin"]), "{result}");
    let e = client(&base, "/error/header")
        .call(&credential, "getMe", Value::Null)
        .await
        .unwrap_err();
    let b64 = base64::engine::general_purpose::STANDARD.encode("admin:admin");
    assert!(!e.to_string().contains(&b64), "{e}");
    // The decoded `user:password` pair is no word of the board either: it is scrubbed too.
    let e = client(&base, "/error/pair")
        .call(&credential, "getMe", Value::Null)
        .await
        .unwrap_err();
    assert!(!e.to_string().contains("admin:admin"), "{e}");
    assert!(e.to_string().contains("[redacted]"), "{e}");
}
