//! The credential scenarios every provider runs: a base URL's query stays the query of the
//! endpoint, and no credential the request carried (the API key, the URL's user part and query
//! values, the `Basic` value made of the user part) reaches an error, its `Debug` or a log line,
//! whether a service quotes it back in an error answer or in a stream, or nothing listens.
//!
//! Every secret is a `CANARY-…` value, so one substring check finds any of them; the `Basic`
//! value (base64, which hides the word) is checked on its own.

use base64::Engine as _;
use kberg_agent::{ChatRequest, InferenceProvider, Message, ProviderError, collect_stream};
use kberg_testkit::log::LogBuffer;
use kberg_testkit::scripted::{Recorded, Reply, ScriptedServer};
use tokio_util::sync::CancellationToken;

use super::{MakeProvider, Wire};

/// The API key a keyed provider sends.
pub const KEY: &str = "CANARY-key-5d1f0e";
/// The user of the base URL's user part.
pub const USER: &str = "CANARY-user-73ab";
/// Its password as written in the URL (percent-encoded) ...
pub const PASS_WRITTEN: &str = "CANARY-pass%2F9q";
/// ... and as the HTTP client decodes it for the `Basic` credential.
pub const PASS: &str = "CANARY-pass/9q";
/// A credential in the base URL's query (a gateway's `?key=`).
pub const QUERY: &str = "CANARY-query-c41e";
/// A harmless query a hosted API requires (Azure OpenAI's `?api-version=`).
pub const API_VERSION: &str = "api-version=2024-02-01";

/// A buffer of every line this thread logs up to DEBUG while the guard lives (a scenario's
/// provider runs on the test's own thread).
///
/// The binary's global log ([`LogBuffer::global`], also up to DEBUG) is installed first:
/// `tracing` decides once per call site, for the whole process, whether anyone listens, and
/// another test's thread that reached a call site first with no subscriber at all had it cached
/// as unheard, so this thread's lines from it were dropped too ("the failure is logged" then
/// saw an empty log). With a global subscriber every thread has a listener.
pub fn this_threads_log() -> (LogBuffer, tracing::subscriber::DefaultGuard) {
    LogBuffer::global(tracing::Level::DEBUG);
    let logs = LogBuffer::default();
    let guard = tracing::subscriber::set_default(logs.subscriber(tracing::Level::DEBUG));
    (logs, guard)
}

/// `server` (`http://HOST:PORT`) with the canary user part, `path`, and a query of the API
/// version and the canary key.
pub fn with_credentials(server: &str, path: &str) -> String {
    let host = server.trim_start_matches("http://");
    format!("http://{USER}:{PASS_WRITTEN}@{host}{path}?{API_VERSION}&key={QUERY}")
}

/// The `Authorization: Basic` value the HTTP client makes of the user part, as written and as
/// decoded.
fn basic_values() -> [String; 2] {
    let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
    [
        b64(format!("{USER}:{PASS}")),
        b64(format!("{USER}:{PASS_WRITTEN}")),
    ]
}

/// Fails naming `what` when `text` holds a canary or the `Basic` value made of one.
pub fn assert_no_canary(what: &str, text: &str) {
    assert!(
        !text.contains("CANARY"),
        "{what} shows a credential: {text}"
    );
    for b in basic_values() {
        assert!(
            !text.contains(&b),
            "{what} shows the Basic credential: {text}"
        );
    }
}

/// The error and its `Debug` show no credential.
pub fn assert_hidden(e: &ProviderError) {
    assert_no_canary("the error", &e.to_string());
    assert_no_canary("the error's Debug", &format!("{e:?}"));
}

pub fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    }
}

/// One turn, streamed or not, to its error.
pub async fn failed_turn(p: &dyn InferenceProvider, stream: bool) -> ProviderError {
    let cancel = CancellationToken::new();
    if !stream {
        return p.chat(&request(), &cancel).await.unwrap_err();
    }
    match p.chat_stream(&request(), &cancel).await {
        Err(e) => e,
        Ok(s) => collect_stream(s, |_| {}).await.unwrap_err(),
    }
}

/// A non-streamed and a streamed turn to `server` + `base_path` with `?api-version=` land on
/// `endpoint` with that query.
pub async fn scenario_query_is_kept(
    wire: &dyn Wire,
    make: MakeProvider<'_>,
    base_path: &str,
    endpoint: &str,
) {
    let server = ScriptedServer::start(vec![wire.text("hi", false), wire.text("hi", true)]).await;
    let p = make(format!("{}{base_path}?{API_VERSION}", server.url()));
    let cancel = CancellationToken::new();
    assert_eq!(p.chat(&request(), &cancel).await.unwrap().text, "hi");
    let s = p.chat_stream(&request(), &cancel).await.unwrap();
    assert_eq!(collect_stream(s, |_| {}).await.unwrap().text, "hi");
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    for r in sent {
        assert_eq!(r.path, endpoint, "{r:?}");
        assert_eq!(r.query.as_deref(), Some(API_VERSION), "{r:?}");
    }
}

/// What a service quoting back its request writes: the request line, every `authorization`
/// and `x-api-key` header, the user part decoded from a `Basic` credential, and the query.
fn quote(r: &Recorded) -> String {
    let query = r.query.as_deref().unwrap_or("");
    let mut s = format!("{} {}?{query} HTTP/1.1", r.method, r.path);
    for name in ["authorization", "x-api-key"] {
        for v in r.headers.get_all(name) {
            let v = v.to_str().unwrap_or("");
            s.push_str(&format!("; {name}: {v}"));
            if let Some(b) = v.strip_prefix("Basic ") {
                let user = base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .unwrap_or_default();
                s.push_str(&format!(" (user {})", String::from_utf8_lossy(&user)));
            }
        }
    }
    s.push_str(&format!("; query {query} is not allowed"));
    s
}

fn quote_json(r: &Recorded) -> String {
    serde_json::json!({"error": {"message": quote(r), "type": "invalid_request_error"}}).to_string()
}

/// A refusal of a conversation past the context window that quotes the request.
fn quote_window(r: &Recorded) -> String {
    format!(
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens; {}",
        quote(r)
    )
}

fn quote_window_json(r: &Recorded) -> String {
    serde_json::json!({"error": {"message": quote_window(r), "type": "invalid_request_error",
        "code": "context_length_exceeded"}})
    .to_string()
}

/// 401, 403, 404, 500 and context-window 400 answers quoting the request (as JSON to a
/// non-streamed turn, as text to a streamed one) give errors that say `[redacted]` where the
/// credentials were, and the log at DEBUG holds none. `make` builds the provider with [`KEY`]
/// when it takes a key, and no retries.
pub async fn scenario_quoted_credentials(make: MakeProvider<'_>, base_path: &str) {
    type Quote = fn(&Recorded) -> String;
    let statuses: [(u16, &str, Quote, Quote); 5] = [
        (401, "unauthorized", quote_json, quote),
        (403, "unauthorized", quote_json, quote),
        (404, "rejected", quote_json, quote),
        (500, "server_error", quote_json, quote),
        (400, "context_too_long", quote_window_json, quote_window),
    ];
    let mut replies = Vec::new();
    for (status, _, json, text) in statuses {
        replies.push(Reply::echo(status, "application/json", json));
        replies.push(Reply::echo(status, "text/plain", text));
    }
    let server = ScriptedServer::start(replies).await;
    let p = make(with_credentials(&server.url(), base_path));
    let (logs, _logging) = this_threads_log();
    for (status, code, ..) in statuses {
        for stream in [false, true] {
            let e = failed_turn(p.as_ref(), stream).await;
            assert_eq!(e.code(), code, "{status}: {e}");
            assert!(e.to_string().contains("[redacted]"), "{status}: {e}");
            assert_hidden(&e);
        }
    }
    // The quotes held the credentials: the request carried them.
    let sent = server.requests();
    assert_eq!(sent.len(), 10);
    let first = quote(&sent[0]);
    assert!(
        first.contains(QUERY) && first.contains(USER) && first.contains(PASS),
        "{first}"
    );
    let log = logs.text();
    assert!(log.contains("401"), "the error answers are logged: {log}");
    assert_no_canary("the log", &log);
}

/// A reply of 200 that quotes the credentials inside the body (an error event of a stream, a
/// line that is not the documented shape): the error says `[redacted]` in their place.
/// `replies` are answered to `stream` turns in order.
pub async fn scenario_quoted_in_band(
    make: MakeProvider<'_>,
    base_path: &str,
    replies: Vec<(Reply, bool)>,
) {
    let streams: Vec<bool> = replies.iter().map(|(_, s)| *s).collect();
    let server = ScriptedServer::start(replies.into_iter().map(|(r, _)| r).collect()).await;
    let p = make(with_credentials(&server.url(), base_path));
    for stream in streams {
        let e = failed_turn(p.as_ref(), stream).await;
        assert!(e.to_string().contains("[redacted]"), "{e}");
        assert_hidden(&e);
    }
}

/// What a service quoting back a request's credentials in a 200 reply says: the user part
/// decoded, the query key, and [`KEY`] when the provider sends it.
pub fn in_band_quote(with_key: bool) -> String {
    let key = if with_key { KEY } else { "(none)" };
    format!("denied for key {key}, user {USER}:{PASS}, query key={QUERY}")
}

/// Nothing listens: the error names the host and port it tried and no credential, and neither
/// does the log at DEBUG.
pub async fn scenario_unreachable(make: MakeProvider<'_>, base_path: &str) {
    let url = kberg_testkit::closed_port_url();
    let host_port = url.trim_start_matches("http://").to_string();
    let p = make(with_credentials(&url, base_path));
    let (logs, _logging) = this_threads_log();
    for stream in [false, true] {
        let e = failed_turn(p.as_ref(), stream).await;
        assert_eq!(e.code(), "unreachable", "{e}");
        assert!(e.to_string().contains(&host_port), "{e}");
        let ProviderError::Unreachable { url, .. } = &e else {
            unreachable!("the code says unreachable");
        };
        assert!(url.contains(&host_port), "{url}");
        assert_hidden(&e);
    }
    let log = logs.text();
    assert!(log.contains(&host_port), "the failure is logged: {log}");
    assert_no_canary("the log", &log);
}

/// A config's and a provider's `Debug`: the host, no credential.
pub fn assert_debug_hides(what: &str, debug: &str) {
    assert_no_canary(what, debug);
    assert!(
        debug.contains("127.0.0.1:9"),
        "{what} names the host: {debug}"
    );
}

/// A reply redirecting the request to another origin (a host or port other than the base
/// URL's) is not followed: the request and its credentials (an `x-api-key` header, which the
/// HTTP client does not know to drop, the conversation itself) never reach that origin, and
/// the error says where the redirect pointed. A redirect within the base URL's origin is
/// followed.
pub async fn scenario_redirects(wire: &dyn Wire, make: MakeProvider<'_>, base_path: &str) {
    let elsewhere =
        ScriptedServer::start(vec![wire.text("hi", false), wire.text("hi", true)]).await;
    let target = format!("{}/v1/collect", elsewhere.url());
    let away =
        |status: u16| Reply::json(status, &serde_json::json!({})).header("location", &target);
    let server = ScriptedServer::start(vec![away(307), away(302), away(308), away(301)]).await;
    let p = make(with_credentials(&server.url(), base_path));
    let (logs, _logging) = this_threads_log();
    for stream in [false, true, false, true] {
        let e = failed_turn(p.as_ref(), stream).await;
        assert_eq!(e.code(), "rejected", "{e}");
        assert!(e.to_string().contains("redirect"), "{e}");
        assert!(e.to_string().contains(&target), "{e}");
        assert_hidden(&e);
    }
    assert_eq!(server.requests().len(), 4);
    assert!(
        elsewhere.requests().is_empty(),
        "the request followed the redirect: {:?}",
        elsewhere.requests()
    );
    assert_no_canary("the log", &logs.text());

    // Within the origin: followed.
    let server = ScriptedServer::start(vec![
        Reply::json(307, &serde_json::json!({})).header("location", "/moved/here"),
        wire.text("hi", false),
    ])
    .await;
    let p = make(format!("{}{base_path}", server.url()));
    let r = p.chat(&request(), &CancellationToken::new()).await.unwrap();
    assert_eq!(r.text, "hi");
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[1].path, "/moved/here");

    // Within the origin without end: given up, saying so.
    let looping = vec![Reply::json(307, &serde_json::json!({})).header("location", "/again"); 12];
    let server = ScriptedServer::start(looping).await;
    let e = failed_turn(make(format!("{}{base_path}", server.url())).as_ref(), false).await;
    assert_eq!(e.code(), "rejected", "{e}");
    assert!(e.to_string().contains("kept redirecting"), "{e}");
    assert_eq!(server.requests().len(), 11);
}
