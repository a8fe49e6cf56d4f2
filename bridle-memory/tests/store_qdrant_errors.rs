//! The Qdrant store's errors quote no credential, against a stand-in Qdrant on 127.0.0.1.
//!
//! No Qdrant server runs here (`store_qdrant` is the ignored tier against a real one), so the
//! stand-in speaks only what these tests need of Qdrant's gRPC wire: HTTP/2 without TLS, and
//! every call (`/qdrant.Qdrant/HealthCheck`, `/qdrant.Collections/CollectionExists`, ...)
//! refused "trailers-only", as gRPC servers refuse a call: status 200, `content-type:
//! application/grpc`, `grpc-status` and a percent-encoded `grpc-message` in the headers, no
//! body. Like a server (or a proxy in front of one) that echoes what it refuses, its message and
//! an `x-echo` header quote the `api-key` header and the `:authority` the request carried.
#![cfg(feature = "qdrant")]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use bridle_memory::{MemoryError, QdrantConfig, QdrantStore, VectorStore};
use tokio::net::TcpListener;

/// What every credential in these tests contains.
const CANARY: &str = "canary";
const KEY: &str = "canary-api-key";
/// A user part and a query that hold credentials.
const USER_PART: &str = "bot:canary-pass";
const QUERY: &str = "api_key=canary-query";

/// The stand-in Qdrant on a free port, with what each call carried; aborted when dropped (also
/// when a test fails).
struct StandIn {
    addr: SocketAddr,
    /// One line per call: its `api-key` header and `:authority`.
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let router = axum::Router::new()
            .fallback(refuse)
            .with_state(Arc::clone(&seen));
        // axum serves HTTP/2 without TLS to a client that opens with its preface, as tonic does.
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self { addr, seen, task }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().expect("not poisoned").clone()
    }
}

/// `text` as `grpc-message` carries it: bytes outside printable ASCII, and `%`, as `%XX`.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b' '..=b'~' if b != b'%' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Refuses the call as unauthenticated, quoting the key and the authority it was sent with.
async fn refuse(
    State(seen): State<Arc<Mutex<Vec<String>>>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let key = headers
        .get("api-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let authority = uri.authority().map(ToString::to_string).unwrap_or_default();
    seen.lock()
        .expect("not poisoned")
        .push(format!("api-key={key} authority={authority}"));
    let message = format!("Invalid api-key: {key} (refused {authority}{})", uri.path());
    Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        // UNAUTHENTICATED
        .header("grpc-status", "16")
        .header("grpc-message", percent_encoded(&message))
        .header("x-echo", format!("{key} {authority}"))
        .body(Body::empty())
        .expect("a response")
}

/// Connects to `url` with `api_key`. Connecting reaches no server (see
/// `connecting_reaches_no_server`); should that change, the stand-in runs on this runtime and
/// must stay free to answer, hence the blocking section.
fn connect(url: String, api_key: Option<&str>) -> QdrantStore {
    let mut config = QdrantConfig::new(url);
    config.api_key = api_key.map(str::to_string);
    let store =
        tokio::task::block_in_place(|| QdrantStore::connect(config)).expect("a client is built");
    let debug = format!("{store:?}");
    assert!(!debug.contains(CANARY), "{debug}");
    store
}

/// The first call's error, checked to quote no credential in its `Display` or `Debug` and to
/// say where something was hidden; returns its `Display`.
async fn scrubbed_error(store: &QdrantStore) -> String {
    let err = store
        .collection("docs")
        .await
        .expect_err("the stand-in refuses every call");
    assert!(matches!(err, MemoryError::Store(_)), "{err:?}");
    let (shown, debug) = (err.to_string(), format!("{err:?}"));
    for text in [&shown, &debug] {
        assert!(!text.contains(CANARY), "{text}");
        assert!(text.contains("[redacted]"), "{text}");
    }
    shown
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_the_server_echoes_is_not_quoted() {
    let stand_in = StandIn::start().await;
    let store = connect(format!("http://{}", stand_in.addr), Some(KEY));
    let shown = scrubbed_error(&store).await;
    assert!(
        stand_in
            .seen()
            .iter()
            .any(|s| s.starts_with(&format!("api-key={KEY} "))),
        "the key was sent: {:?}",
        stand_in.seen()
    );
    // The status, the server's own words and the headers' names survive.
    assert!(
        shown.starts_with("the vector store failed: qdrant: "),
        "{shown}"
    );
    assert!(
        shown.contains("The request does not have valid authentication credentials"),
        "{shown}"
    );
    assert!(
        shown.contains("Invalid api-key: [redacted] (refused 127.0.0.1:"),
        "{shown}"
    );
    assert!(
        shown.contains("/qdrant.Collections/CollectionExists"),
        "{shown}"
    );
    assert!(
        shown.contains("\"x-echo\": \"[redacted] 127.0.0.1:"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_credentials_the_server_echoes_are_not_quoted() {
    let stand_in = StandIn::start().await;
    let addr = stand_in.addr;
    let store = connect(format!("http://{USER_PART}@{addr}/?{QUERY}"), None);
    let debug = format!("{store:?}");
    assert!(
        debug.contains(&format!("http://***@{addr}/?***")),
        "{debug}"
    );
    let shown = scrubbed_error(&store).await;
    assert!(
        stand_in
            .seen()
            .iter()
            .any(|s| s.ends_with(&format!("authority={USER_PART}@{addr}"))),
        "the user part was sent: {:?}",
        stand_in.seen()
    );
    assert!(
        shown.contains(&format!(
            "Invalid api-key:  (refused [redacted]@{addr}/qdrant.Collections/CollectionExists)"
        )),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_failure_names_the_url_without_its_credentials() {
    // TLS to the stand-in, which speaks plain HTTP/2: the client cannot connect and says to
    // which URL, as it was configured.
    let stand_in = StandIn::start().await;
    let addr = stand_in.addr;
    let store = connect(format!("https://{USER_PART}@{addr}/?{QUERY}"), Some(KEY));
    let shown = scrubbed_error(&store).await;
    assert!(
        shown.contains(&format!(
            "Failed to connect to https://[redacted]@{addr}/?[redacted]: "
        )),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_client_cannot_send_is_not_quoted() {
    // A key read from a file with its line end is no valid header value; the client refuses to
    // send it and says why, quoting it.
    let stand_in = StandIn::start().await;
    let store = connect(
        format!("http://{}", stand_in.addr),
        Some(&format!("{KEY}\n")),
    );
    let shown = scrubbed_error(&store).await;
    assert!(
        shown.contains(
            "Client specified an invalid argument Malformed API key or token: [redacted]"
        ),
        "{shown}"
    );
}

/// Connecting is lazy, as documented: the store is built without a call to the server (the
/// client's version check, which would also print to standard output, is off), and the first
/// call is the first the server sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_reaches_no_server() {
    let stand_in = StandIn::start().await;
    let store = connect(format!("http://{}", stand_in.addr), None);
    assert!(stand_in.seen().is_empty(), "{:?}", stand_in.seen());
    store
        .collection("docs")
        .await
        .expect_err("the stand-in refuses every call");
    assert_eq!(stand_in.seen().len(), 1, "{:?}", stand_in.seen());
}
