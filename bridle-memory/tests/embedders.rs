//! The HTTP embedders against stand-in servers on 127.0.0.1.
//!
//! No embedding server can run here, so each stand-in reproduces its service's documented wire
//! format and nothing more:
//! - OpenAI-compatible `POST /v1/embeddings` (as LM Studio, llama.cpp's server and vLLM serve
//!   it): request `{"model", "input": [..], "encoding_format"}`; response
//!   `{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [..]}],
//!   "model", "usage": {"prompt_tokens", "total_tokens"}}`; errors as
//!   `{"error": {"message", "type"}}` with a 4xx/5xx status.
//! - Ollama `POST /api/embed`: request `{"model", "input": [..]}`; response
//!   `{"model", "embeddings": [[..], ..], "total_duration", "load_duration",
//!   "prompt_eval_count"}`; errors as `{"error": "..."}`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use bridle_memory::{Embedder, HttpEmbedderConfig, MemoryError, OllamaEmbedder, OpenAiEmbedder};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// A server running on a free port; aborted when dropped (also when a test fails).
struct Server {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(router: axum::Router) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    Server { url, task }
}

/// A deterministic vector of `dim` for a text.
fn vec_for(text: &str, dim: usize) -> Vec<f32> {
    (0..dim)
        .map(|i| ((text.len() + i * 7) % 13) as f32 / 13.0)
        .collect()
}

#[derive(Clone)]
struct Fake {
    dim: usize,
    key: Option<&'static str>,
    calls: Arc<AtomicUsize>,
    reverse: bool,
}

fn inputs(body: &Value) -> Vec<String> {
    match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

async fn openai(
    State(f): State<Fake>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    f.calls.fetch_add(1, Ordering::SeqCst);
    if let Some(k) = f.key {
        let auth = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if auth != format!("Bearer {k}") {
            return (
                StatusCode::UNAUTHORIZED,
                Json(
                    json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}),
                ),
            );
        }
    }
    if body["model"] != "nomic-embed-text" {
        return (
            StatusCode::NOT_FOUND,
            Json(
                json!({"error": {"message": format!("model {} not found", body["model"]), "type": "invalid_request_error"}}),
            ),
        );
    }
    let texts = inputs(&body);
    let mut data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vec_for(t, f.dim)}))
        .collect();
    if f.reverse {
        data.reverse();
    }
    (
        StatusCode::OK,
        Json(
            json!({"object": "list", "data": data, "model": body["model"], "usage": {"prompt_tokens": 3, "total_tokens": 3}}),
        ),
    )
}

async fn ollama(State(f): State<Fake>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    f.calls.fetch_add(1, Ordering::SeqCst);
    if body["model"] != "all-minilm" {
        return (
            StatusCode::NOT_FOUND,
            Json(
                json!({"error": format!("model \"{}\" not found, try pulling it first", body["model"])}),
            ),
        );
    }
    let embeddings: Vec<Vec<f32>> = inputs(&body).iter().map(|t| vec_for(t, f.dim)).collect();
    (
        StatusCode::OK,
        Json(
            json!({"model": body["model"], "embeddings": embeddings, "total_duration": 14143917, "load_duration": 1019500, "prompt_eval_count": 8}),
        ),
    )
}

fn fake(dim: usize) -> Fake {
    Fake {
        dim,
        key: None,
        calls: Arc::new(AtomicUsize::new(0)),
        reverse: false,
    }
}

fn openai_router(f: Fake) -> axum::Router {
    axum::Router::new()
        .route("/v1/embeddings", post(openai))
        .with_state(f)
}

fn ollama_router(f: Fake) -> axum::Router {
    axum::Router::new()
        .route("/api/embed", post(ollama))
        .with_state(f)
}

#[tokio::test]
async fn openai_probes_the_dimension_and_keeps_input_order() {
    let mut f = fake(12);
    f.reverse = true;
    let s = serve(openai_router(f.clone())).await;
    // Every base-URL spelling reaches the same endpoint; a query (a hosted service's
    // `?api-version=`) stays the query.
    for base in [
        s.url.clone(),
        format!("{}/v1/", s.url),
        format!("{}/v1?api-version=2024-02-01", s.url),
    ] {
        let e = OpenAiEmbedder::connect(HttpEmbedderConfig::new(base, "nomic-embed-text"))
            .await
            .expect("connect");
        assert_eq!(e.dimension(), 12);
        assert_eq!(e.model(), "nomic-embed-text");
        let texts = vec!["a".to_string(), "bbbb".to_string(), "cc".to_string()];
        let v = e.embed(&texts).await.expect("embed");
        assert_eq!(
            v,
            texts.iter().map(|t| vec_for(t, 12)).collect::<Vec<_>>(),
            "order follows `index`"
        );
        assert!(e.embed(&[]).await.expect("empty").is_empty());
    }
    assert_eq!(
        f.calls.load(Ordering::SeqCst),
        6,
        "one probe and one batch per connection"
    );
}

#[tokio::test]
async fn openai_sends_the_key_and_reports_refusals() {
    let mut f = fake(4);
    f.key = Some("sk-test");
    let s = serve(openai_router(f)).await;
    let err = OpenAiEmbedder::connect(HttpEmbedderConfig::new(&s.url, "nomic-embed-text"))
        .await
        .expect_err("no key");
    assert_eq!(err.code(), "embedder_unavailable");
    assert!(err.to_string().contains("401"), "{err}");
    let e = OpenAiEmbedder::connect(
        HttpEmbedderConfig::new(&s.url, "nomic-embed-text").api_key("sk-test"),
    )
    .await
    .expect("with key");
    assert_eq!(e.dimension(), 4);
    let err =
        OpenAiEmbedder::connect(HttpEmbedderConfig::new(&s.url, "other-model").api_key("sk-test"))
            .await
            .expect_err("unknown model");
    assert!(err.to_string().contains("not found"), "{err}");
}

#[tokio::test]
async fn a_declared_dimension_that_the_server_does_not_honour_is_refused() {
    let s = serve(openai_router(fake(8))).await;
    let e =
        OpenAiEmbedder::connect(HttpEmbedderConfig::new(&s.url, "nomic-embed-text").dimension(384))
            .await
            .expect("no probe when declared");
    let err = e
        .embed(&["x".to_string()])
        .await
        .expect_err("wrong dimension");
    assert!(
        matches!(
            err,
            MemoryError::DimensionMismatch {
                expected: 384,
                actual: 8
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_server_that_is_down_is_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    drop(listener);
    let err = OpenAiEmbedder::connect(HttpEmbedderConfig::new(&url, "m"))
        .await
        .expect_err("down");
    assert_eq!(err.code(), "embedder_unavailable");
    let err = OllamaEmbedder::connect(HttpEmbedderConfig::new(&url, "m"))
        .await
        .expect_err("down");
    assert_eq!(err.code(), "embedder_unavailable");
}

/// A server that never accepts a connection (its accept queue full, so the kernel drops each
/// new connection's first packet) fails a request at the connect timeout, not at the request
/// timeout: the error says the connection was not accepted. The connect timeout is short here
/// and the request timeout long, so the request timeout would end the request only without a
/// connect timeout (after it, with "timed out" alone).
#[tokio::test]
async fn a_server_that_never_accepts_fails_at_the_connect_timeout() {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("bind");
    let addr = socket.local_addr().expect("addr");
    // A backlog of 0 holds one connection not yet accepted; nothing accepts it.
    let listener = socket.listen(0).expect("listen");
    let _queued = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the first connection fills the accept queue");
    let mut config = HttpEmbedderConfig::new(format!("http://{addr}"), "m");
    assert!(
        bridle_memory::DEFAULT_CONNECT_TIMEOUT < config.timeout,
        "{config:?}"
    );
    config.connect_timeout = std::time::Duration::from_millis(100);
    config.timeout = std::time::Duration::from_secs(30);
    for err in [
        OpenAiEmbedder::connect(config.clone())
            .await
            .expect_err("never accepted"),
        OllamaEmbedder::connect(config)
            .await
            .expect_err("never accepted"),
    ] {
        assert_eq!(err.code(), "embedder_unavailable", "{err}");
        assert!(err.to_string().contains("connect timed out"), "{err}");
    }
    drop(listener);
}

#[tokio::test]
async fn a_malformed_answer_is_a_protocol_error() {
    let router = axum::Router::new()
        .route(
            "/v1/embeddings",
            post(|| async { (StatusCode::OK, "<html>proxy error</html>") }),
        )
        .route(
            "/api/embed",
            post(|| async { Json(json!({"embeddings": [["x"]]})) }),
        );
    let s = serve(router).await;
    let err = OpenAiEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect_err("not json");
    assert_eq!(err.code(), "embedder_protocol");
    let err = OllamaEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect_err("not numbers");
    assert_eq!(err.code(), "embedder_protocol");
}

#[tokio::test]
async fn ollama_embeds_batches() {
    let f = fake(6);
    let s = serve(ollama_router(f.clone())).await;
    let e = OllamaEmbedder::connect(HttpEmbedderConfig::new(format!("{}/", s.url), "all-minilm"))
        .await
        .expect("connect");
    assert_eq!(e.dimension(), 6);
    let texts: Vec<String> = (0..5).map(|i| "x".repeat(i + 1)).collect();
    let v = e.embed(&texts).await.expect("embed");
    assert_eq!(v.len(), 5);
    assert_eq!(v[3], vec_for("xxxx", 6));
    let err = OllamaEmbedder::connect(HttpEmbedderConfig::new(&s.url, "llama-missing"))
        .await
        .expect_err("unknown model");
    assert!(err.to_string().contains("try pulling it first"), "{err}");
    let err = OllamaEmbedder::connect(HttpEmbedderConfig::new(&s.url, " "))
        .await
        .expect_err("empty model");
    assert_eq!(err.code(), "invalid_input");
}

/// A body that never ends: 64 KiB of `byte` after 64 KiB, for ever.
fn endless(byte: u8) -> axum::body::Body {
    let chunk = axum::body::Bytes::from(vec![byte; 64 << 10]);
    axum::body::Body::from_stream(futures::stream::repeat_with(move || {
        Ok::<_, std::io::Error>(chunk.clone())
    }))
}

#[tokio::test]
async fn an_endless_answer_is_read_to_a_bound() {
    // An answer that never ends is refused once past the bound instead of filling memory; an
    // endless error is read no further than the start its message needs.
    let router = axum::Router::new()
        .route(
            "/v1/embeddings",
            post(|| async { (StatusCode::OK, endless(b' ')) }),
        )
        .route(
            "/api/embed",
            post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, endless(b'e')) }),
        );
    let s = serve(router).await;
    let err = OpenAiEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect_err("endless");
    assert_eq!(err.code(), "embedder_protocol", "{err}");
    assert!(err.to_string().contains("larger than"), "{err}");
    let err = OllamaEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect_err("endless error");
    assert_eq!(err.code(), "embedder_unavailable", "{err}");
    assert!(err.to_string().contains("500"), "{err}");
    assert!(err.to_string().len() < 1000, "{err}");
}

/// What an embedder's errors say reaches the model (a memory tool's refusal): a URL configured
/// with a user part or a query (where a hosted service's key may have been pasted) is named
/// without them, whether nothing listens or the server does not speak HTTP (the HTTP client's
/// own error text appends the URL); neither the config's `Debug` nor an error shows the API
/// key, not even when the service refuses it and quotes it back.
#[tokio::test]
async fn credentials_in_the_url_or_the_key_are_not_in_the_errors() {
    let with_canaries = |addr: &str| format!("http://canary-user:canary-pass@{addr}/?key=canary-q");
    // Nothing listens.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let dead = listener.local_addr().expect("addr").to_string();
    drop(listener);
    // Answers every connection with bytes that are not HTTP.
    let garbage = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let garbled = garbage.local_addr().expect("addr").to_string();
    let task = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut conn, _)) = garbage.accept().await {
            let _ = conn.write_all(b"this is not HTTP\r\n\r\n").await;
        }
    });
    for addr in [&dead, &garbled] {
        let config = HttpEmbedderConfig::new(with_canaries(addr), "m").api_key("canary-api-key");
        let debug = format!("{config:?}");
        assert!(!debug.contains("canary"), "{debug}");
        let err = OpenAiEmbedder::connect(config.clone())
            .await
            .expect_err("no embedder there");
        assert_eq!(err.code(), "embedder_unavailable", "{err}");
        assert!(!err.to_string().contains("canary"), "{err}");
        assert!(err.to_string().contains(addr.as_str()), "{err}");
        let err = OllamaEmbedder::connect(config)
            .await
            .expect_err("no embedder there");
        assert!(!err.to_string().contains("canary"), "{err}");
    }
    task.abort();

    // Refuses the key, quoting it, as some services do.
    let refusing = serve(
        axum::Router::new().fallback(|headers: HeaderMap| async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            (
                StatusCode::UNAUTHORIZED,
                Json(json!({"error": {"message": format!("invalid key: {auth}")}})),
            )
        }),
    )
    .await;
    let config = HttpEmbedderConfig::new(&refusing.url, "m").api_key("canary-api-key");
    for err in [
        OpenAiEmbedder::connect(config.clone())
            .await
            .expect_err("refused"),
        OllamaEmbedder::connect(config).await.expect_err("refused"),
    ] {
        assert!(
            err.to_string().contains("invalid key: Bearer [redacted]"),
            "{err}"
        );
    }

    // Refuses a URL's credentials, quoting the request line and the Basic credential the
    // HTTP client made of the user part (percent-escaped as written, decoded as sent).
    let quoting = serve(axum::Router::new().fallback(
        |uri: axum::http::Uri, headers: HeaderMap| async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            (StatusCode::FORBIDDEN, format!("refused {uri} with {auth}"))
        },
    ))
    .await;
    let addr = quoting
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let config = HttpEmbedderConfig::new(
        format!("http://canary-user:canary%2Fpass@{addr}/?key=canary-q%21"),
        "m",
    );
    for err in [
        OpenAiEmbedder::connect(config.clone())
            .await
            .expect_err("refused"),
        OllamaEmbedder::connect(config).await.expect_err("refused"),
    ] {
        let text = err.to_string();
        assert!(text.contains("403"), "{text}");
        assert!(
            text.contains("refused /v1/embeddings?[redacted]")
                || text.contains("refused /api/embed?[redacted]"),
            "the query stays the query: {text}"
        );
        assert!(text.contains("Basic [redacted]"), "{text}");
        assert!(!text.contains("canary"), "{text}");
        // "canary-user:canary/pass" as the HTTP client sends it.
        assert!(!text.contains("Y2FuYXJ5"), "{text}");
    }
}

/// A server that gives `answer` (status 200) to every request.
fn answering(answer: Value) -> axum::Router {
    axum::Router::new().fallback(move || {
        let answer = answer.clone();
        async move { Json(answer) }
    })
}

/// Which wire an answer is given on.
#[derive(Debug, Clone, Copy)]
enum Wire {
    OpenAi,
    Ollama,
}

/// What an embedder of `wire` makes of `answer`: with `declared` `None`, the dimension probe
/// at connect time; with `Some((dimension, texts))`, an embedding of that many texts after
/// connecting with the dimension declared.
async fn outcome(
    wire: Wire,
    answer: Value,
    declared: Option<(usize, usize)>,
) -> Result<Vec<Vec<f32>>, MemoryError> {
    let s = serve(answering(answer)).await;
    let mut config = HttpEmbedderConfig::new(&s.url, "m");
    if let Some((dimension, _)) = declared {
        config = config.dimension(dimension);
    }
    let e: Box<dyn Embedder> = match wire {
        Wire::OpenAi => Box::new(OpenAiEmbedder::connect(config).await?),
        Wire::Ollama => Box::new(OllamaEmbedder::connect(config).await?),
    };
    let texts = declared.map_or(1, |(_, n)| n);
    let texts: Vec<String> = (0..texts).map(|i| format!("text {i}")).collect();
    match declared {
        Some(_) => e.embed(&texts).await,
        None => Ok(vec![vec![0.0; e.dimension()]]),
    }
}

/// An answer in the right shape with fields no client reads (as servers add them) is read.
#[tokio::test]
async fn unknown_fields_in_an_answer_are_ignored() {
    let extra = json!({"nested": [1, {"a": null, "b": [true, "x"]}], "s": "embedding"});
    let v = outcome(
        Wire::OpenAi,
        json!({"object": "list", "extra": extra, "data": [
            {"index": null, "embedding": [0, 0, 1], "usage": {"tokens": 3}},
            {"object": "embedding", "embedding": [0.5, -1, 2e-3], "extra": extra, "index": 1},
        ], "model": "m", "usage": {"prompt_tokens": 3, "total_tokens": 3}, "id": null}),
        Some((3, 2)),
    )
    .await
    .expect("read");
    assert_eq!(v, vec![vec![0.0, 0.0, 1.0], vec![0.5, -1.0, 0.002]]);
    let v = outcome(
        Wire::Ollama,
        json!({"model": "m", "extra": extra, "embeddings": [[1, 2], [3, 4.5]], "total_duration": 1}),
        Some((2, 2)),
    )
    .await
    .expect("read");
    assert_eq!(v, vec![vec![1.0, 2.0], vec![3.0, 4.5]]);
}

/// An answer given on a wire, the texts asked for ([`outcome`]), and what its refusal says.
type Case = (Wire, Value, Option<(usize, usize)>, &'static str);

/// Every answer that is not what was asked for is refused with its own stable error, at the
/// dimension probe and after it: numbers sent as strings, a vector that is not a list of
/// numbers, an `index` out of range, negative, not an integer or given twice (a vector in
/// another input's place would be stored under the wrong text), more vectors than inputs.
#[tokio::test]
async fn an_answer_of_the_wrong_shape_is_refused_with_its_reason() {
    use Wire::{Ollama, OpenAi};
    let item = |index: Value, embedding: Value| json!({"index": index, "embedding": embedding});
    let cases: Vec<Case> = vec![
        // OpenAI-compatible.
        (
            OpenAi,
            json!({"data": [item(json!(0), json!(["0.1", "0.2"]))]}),
            None,
            "an item has no numeric `embedding`",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(0), json!([0.1, "0.2"]))]}),
            Some((2, 1)),
            "an item has no numeric `embedding`",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(0), json!({"0": 0.1}))]}),
            None,
            "an item has no numeric `embedding`",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(0), json!("AACAPw=="))]}),
            None,
            "an item has no numeric `embedding`",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(0), json!([[0.1]]))]}),
            None,
            "an item has no numeric `embedding`",
        ),
        (
            OpenAi,
            json!({"data": [{"index": 0}]}),
            None,
            "an item has no numeric `embedding`",
        ),
        (
            OpenAi,
            json!({"data": [7]}),
            None,
            "an item has no numeric `embedding`",
        ),
        (
            OpenAi,
            json!({"data": {"0": item(json!(0), json!([1]))}}),
            None,
            "no `data` array in the answer",
        ),
        (
            OpenAi,
            json!({"embeddings": [[1]]}),
            None,
            "no `data` array in the answer",
        ),
        (
            OpenAi,
            json!([item(json!(0), json!([1]))]),
            None,
            "no `data` array in the answer",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(1), json!([1]))]}),
            None,
            "index 1 out of range for 1 inputs",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(u64::MAX), json!([1]))]}),
            Some((1, 1)),
            "out of range for 1 inputs",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(0), json!([1])), {"embedding": [2]}, {"embedding": [3]}]}),
            Some((1, 2)),
            "index 2 out of range for 2 inputs",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(-1), json!([1]))]}),
            None,
            "an item's `index` is not a non-negative integer",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(-1), json!([1])), item(json!(0), json!([2]))]}),
            Some((1, 2)),
            "an item's `index` is not a non-negative integer",
        ),
        (
            OpenAi,
            json!({"data": [item(json!("0"), json!([1]))]}),
            None,
            "an item's `index` is not a non-negative integer",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(0.5), json!([1]))]}),
            None,
            "an item's `index` is not a non-negative integer",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(0), json!([1])), item(json!(1), json!([2])), item(json!(0), json!([3]))]}),
            Some((1, 2)),
            "more than one item has index 0",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(0), json!([1])), item(json!(0), json!([2]))]}),
            None,
            "more than one item has index 0",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(1), json!([1]))]}),
            Some((1, 2)),
            "no embedding for input 0",
        ),
        (
            OpenAi,
            json!({"data": [item(json!(0), json!([1e39]))]}),
            Some((1, 1)),
            "NaN or infinite",
        ),
        // Ollama.
        (
            Ollama,
            json!({"embeddings": [["0.1", "0.2"]]}),
            None,
            "an embedding is not a list of numbers",
        ),
        (
            Ollama,
            json!({"embeddings": [[0.1, null]]}),
            Some((2, 1)),
            "an embedding is not a list of numbers",
        ),
        (
            Ollama,
            json!({"embeddings": [{"0": 0.1}]}),
            None,
            "an embedding is not a list of numbers",
        ),
        (
            Ollama,
            json!({"embeddings": ["AACAPw=="]}),
            None,
            "an embedding is not a list of numbers",
        ),
        (
            Ollama,
            json!({"embeddings": null}),
            None,
            "no `embeddings` array in the answer",
        ),
        (
            Ollama,
            json!({"embedding": [1, 2]}),
            None,
            "no `embeddings` array in the answer",
        ),
        (
            Ollama,
            json!("embeddings"),
            None,
            "no `embeddings` array in the answer",
        ),
        (
            Ollama,
            json!({"embeddings": [[1], [2], [3]]}),
            Some((1, 2)),
            "asked for 2 embeddings, got 3",
        ),
        (
            Ollama,
            json!({"embeddings": [[1, 2], [3, 4]]}),
            None,
            "asked for 1 embeddings, got 2",
        ),
        (
            Ollama,
            json!({"embeddings": [[1]]}),
            Some((1, 2)),
            "asked for 2 embeddings, got 1",
        ),
        (
            Ollama,
            json!({"embeddings": [[-1e39]]}),
            Some((1, 1)),
            "NaN or infinite",
        ),
    ];
    for (wire, answer, declared, reason) in cases {
        let shown = format!("{wire:?} {answer} {declared:?}");
        let err = outcome(wire, answer, declared)
            .await
            .expect_err(&format!("refused: {shown}"));
        assert_eq!(err.code(), "embedder_protocol", "{shown}: {err}");
        assert!(err.to_string().contains(reason), "{shown}: {err}");
    }
}

/// A vector longer than the model's dimension is refused naming both lengths (and, once the
/// dimension is known, is not read into memory past it).
#[tokio::test]
async fn a_vector_longer_than_the_dimension_is_a_mismatch() {
    for (wire, answer) in [
        (
            Wire::OpenAi,
            json!({"data": [{"embedding": [1, 2, 3, 4, 5]}]}),
        ),
        (Wire::Ollama, json!({"embeddings": [[1, 2, 3, 4, 5]]})),
    ] {
        let err = outcome(wire, answer, Some((3, 1)))
            .await
            .expect_err("too long");
        assert!(
            matches!(
                err,
                MemoryError::DimensionMismatch {
                    expected: 3,
                    actual: 5
                }
            ),
            "{wire:?}: {err}"
        );
    }
}

/// An answer that arrives slowly, a little at a time and never ends, is cut by the request's
/// timeout, which covers reading the body and not only its start.
#[tokio::test]
async fn a_dripping_answer_is_cut_by_the_timeout() {
    use futures::StreamExt;
    let router = axum::Router::new().fallback(|| async {
        let start = futures::stream::iter([Ok::<_, std::io::Error>(axum::body::Bytes::from(
            "{\"data\": [",
        ))]);
        (
            StatusCode::OK,
            axum::body::Body::from_stream(start.chain(futures::stream::pending())),
        )
    });
    let s = serve(router).await;
    let mut config = HttpEmbedderConfig::new(&s.url, "m");
    config.timeout = std::time::Duration::from_millis(200);
    for err in [
        OpenAiEmbedder::connect(config.clone())
            .await
            .expect_err("never ends"),
        OllamaEmbedder::connect(config)
            .await
            .expect_err("never ends"),
    ] {
        assert_eq!(err.code(), "embedder_unavailable", "{err}");
        assert!(err.to_string().contains("timed out"), "{err}");
    }
}

/// A server that counts the requests it gets and answers each with one vector on both wires.
fn counting(hits: Arc<AtomicUsize>) -> axum::Router {
    axum::Router::new().fallback(move || {
        let hits = hits.clone();
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            Json(json!({"data": [{"index": 0, "embedding": [1, 0]}], "embeddings": [[1, 0]]}))
        }
    })
}

/// A server that redirects every request with `status` to `to`.
fn redirecting(status: StatusCode, to: String) -> axum::Router {
    axum::Router::new().fallback(move || {
        let to = to.clone();
        async move { (status, [(axum::http::header::LOCATION, to)], "moved") }
    })
}

/// A base URL that redirects to another origin (a moved server, a proxy's login page, an
/// `https` address sent to `http`) is not followed: a 307 or 308 would send the texts being
/// embedded (stored memories, private code) and the URL's credentials there. The error names
/// where it pointed, without its credentials. A redirect within the origin is followed.
#[tokio::test]
async fn a_redirect_to_another_origin_is_not_followed() {
    let hits = Arc::new(AtomicUsize::new(0));
    let elsewhere = serve(counting(hits.clone())).await;
    for status in [
        StatusCode::MOVED_PERMANENTLY,
        StatusCode::FOUND,
        StatusCode::SEE_OTHER,
        StatusCode::TEMPORARY_REDIRECT,
        StatusCode::PERMANENT_REDIRECT,
    ] {
        let s = serve(redirecting(
            status,
            format!("{}/v1/embeddings?key=canary-q", elsewhere.url),
        ))
        .await;
        let config = HttpEmbedderConfig::new(&s.url, "m").api_key("canary-key");
        for err in [
            OpenAiEmbedder::connect(config.clone())
                .await
                .expect_err("not followed"),
            OllamaEmbedder::connect(config)
                .await
                .expect_err("not followed"),
        ] {
            let text = err.to_string();
            assert_eq!(err.code(), "embedder_unavailable", "{status}: {text}");
            assert!(text.contains(&status.as_u16().to_string()), "{text}");
            assert!(text.contains("outside the base URL's origin"), "{text}");
            assert!(text.contains(&elsewhere.url), "names where: {text}");
            assert!(!text.contains("canary"), "{text}");
        }
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "nothing reached the other origin"
    );

    // Within the origin: followed, and the answer read.
    let router = axum::Router::new()
        .route(
            "/v1/embeddings",
            post(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(axum::http::header::LOCATION, "/moved/v1/embeddings")],
                )
            }),
        )
        .merge(counting(hits.clone()));
    let s = serve(router).await;
    let e = OpenAiEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect("followed within the origin");
    assert_eq!(e.dimension(), 2);
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // Within the origin for ever: followed a few times, then refused.
    let s = serve(redirecting(
        StatusCode::TEMPORARY_REDIRECT,
        "/again".to_string(),
    ))
    .await;
    let err = OllamaEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect_err("a loop");
    assert_eq!(err.code(), "embedder_unavailable", "{err}");
    assert!(err.to_string().contains("kept redirecting"), "{err}");
}

/// A field no client reads is skipped as it is read, however deeply it nests (without
/// recursion, so without using the thread's stack), and the answer is read.
#[tokio::test]
async fn a_deeply_nested_unknown_field_is_skipped() {
    let deep = format!(
        "{{\"x\": {}1{}, \"data\": [{{\"embedding\": [1]}}], \"embeddings\": [[1]]}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let router = axum::Router::new().fallback(move || {
        let deep = deep.clone();
        async move { (StatusCode::OK, deep) }
    });
    let s = serve(router).await;
    let e = OpenAiEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect("read");
    assert_eq!(e.dimension(), 1);
    let e = OllamaEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect("read");
    assert_eq!(e.dimension(), 1);
}

/// An answer whose header never ends is refused by the HTTP client's bound on a response
/// head, not read until the timeout (nor into memory without end).
#[tokio::test]
async fn an_endless_header_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let line = format!("x-filler: {}\r\n", "a".repeat(1000));
                if conn.write_all(b"HTTP/1.1 200 OK\r\n").await.is_err() {
                    return;
                }
                while conn.write_all(line.as_bytes()).await.is_ok() {}
            });
        }
    });
    for err in [
        OpenAiEmbedder::connect(HttpEmbedderConfig::new(&url, "m"))
            .await
            .expect_err("endless header"),
        OllamaEmbedder::connect(HttpEmbedderConfig::new(&url, "m"))
            .await
            .expect_err("endless header"),
    ] {
        assert_eq!(err.code(), "embedder_unavailable", "{err}");
        assert!(!err.to_string().contains("timed out"), "{err}");
    }
    task.abort();
}

/// An embedding server's error answer is quoted with its control characters escaped: a colour
/// escape, CR LF, a NUL and bidirectional overrides would otherwise let a hostile server
/// drive the terminal, or forge lines in the log, of whoever prints the error. Newlines stay.
#[tokio::test]
async fn control_characters_in_a_quoted_error_are_escaped() {
    const HOSTILE: &str = "boom \u{1b}[31mred\u{1b}[0m\r\nforged: all good\0 \u{202e}desrever\u{202c} \u{2066}x\u{2069}";
    let router = axum::Router::new()
        .route(
            "/v1/embeddings",
            post(|| async {
                (
                    StatusCode::BAD_REQUEST,
                    Json(json!({"error": {"message": HOSTILE, "type": "invalid_request_error"}})),
                )
            }),
        )
        .route(
            "/api/embed",
            post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, HOSTILE) }),
        );
    let s = serve(router).await;
    let openai = OpenAiEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect_err("refused");
    let ollama = OllamaEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect_err("refused");
    for err in [openai, ollama] {
        assert_eq!(err.code(), "embedder_unavailable", "{err}");
        let text = err.to_string();
        let raw: Vec<char> = text
            .chars()
            .filter(|c| {
                (c.is_control() && *c != '\n' && *c != '\t')
                    || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            })
            .collect();
        assert!(raw.is_empty(), "raw control characters {raw:?} in {text:?}");
        // (The OpenAI-compatible answer is quoted as the JSON it is, which escapes ESC, CR
        // and NUL itself but not the bidirectional controls.)
        assert!(text.contains("\\u{202e}desrever\\u{202c}"), "{text}");
        assert!(text.contains("\\u{2066}x\\u{2069}"), "{text}");
    }
    // The plain-text answer keeps its newline, its ESC, CR and NUL shown as escapes.
    let ollama = OllamaEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m"))
        .await
        .expect_err("refused");
    assert!(
        ollama
            .to_string()
            .contains("boom \\u{1b}[31mred\\u{1b}[0m\\r\nforged: all good\\u{0} "),
        "{ollama}"
    );
}

/// A probe answered with a vector longer than any embedding model's is refused at connect
/// time: before, it was taken as the model's dimension, and every vector stored, searched and
/// read afterwards had to be as long (a broken or hostile server's 64 MiB answer makes tens of
/// millions of components). A dimension declared that large is refused too.
#[tokio::test]
async fn a_probe_longer_than_any_model_is_refused() {
    let long: Vec<u8> = vec![0; 70_000];
    for (wire, answer) in [
        (Wire::OpenAi, json!({"data": [{"embedding": long}]})),
        (Wire::Ollama, json!({"embeddings": [long]})),
    ] {
        let err = outcome(wire, answer, None)
            .await
            .expect_err("longer than any model");
        assert_eq!(err.code(), "embedder_protocol", "{wire:?}: {err}");
        assert!(err.to_string().contains("70000 components"), "{err}");
    }
    // The longest a model may have is taken.
    let most = vec![0.5f32; 1 << 16];
    let v = outcome(Wire::Ollama, json!({"embeddings": [most]}), None)
        .await
        .expect("as long as a model may be");
    assert_eq!(v[0].len(), 1 << 16);
    let s = serve(answering(json!({"embeddings": [[1.0]]}))).await;
    let err = OllamaEmbedder::connect(HttpEmbedderConfig::new(&s.url, "m").dimension(1 << 20))
        .await
        .expect_err("declared too large");
    assert_eq!(err.code(), "invalid_input", "{err}");
}
