//! A scripted HTTP server on 127.0.0.1 for clients of services that cannot run here (model
//! servers, hosted APIs): it records every request and answers each with the next prepared
//! reply (a status, headers, a body sent in timed pieces, optionally cut off mid-body). The
//! replies are built by each test from the real service's documented wire format; this module
//! knows no wire of its own. A reply may also be made from the request it answers
//! ([`Reply::echo`]), as a service that quotes back what it refused.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The HTTP method.
    pub method: String,
    /// The request path.
    pub path: String,
    /// The query (without its `?`), when the request had one.
    pub query: Option<String>,
    /// The request headers.
    pub headers: HeaderMap,
    /// The body as JSON (`Null` when it was not JSON).
    pub body: Value,
}

/// One prepared reply.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The response headers.
    pub headers: Vec<(String, String)>,
    /// Pieces of the body, each sent after its delay.
    pub chunks: Vec<(Duration, String)>,
    /// Break the connection after the last piece instead of ending the body.
    pub abort: bool,
    /// Makes the body from the request answered, in place of `chunks` (see [`Reply::echo`]).
    pub echo: Option<fn(&Recorded) -> String>,
    /// How long the status line and headers wait (see [`Reply::headers_after`]).
    pub head_delay: Duration,
}

impl Reply {
    /// A JSON body, sent at once.
    pub fn json(status: u16, body: &Value) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            chunks: vec![(Duration::ZERO, body.to_string())],
            abort: false,
            echo: None,
            head_delay: Duration::ZERO,
        }
    }

    /// A body of `content_type` that `make` writes from the request it answers: a service
    /// quoting back its request line, headers or query (as error answers do), so a test can
    /// check what a client lets through of such a quote.
    pub fn echo(status: u16, content_type: &str, make: fn(&Recorded) -> String) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            chunks: Vec::new(),
            abort: false,
            echo: Some(make),
            head_delay: Duration::ZERO,
        }
    }

    /// A streamed body of `content_type`, each piece sent as soon as the last one went out.
    pub fn stream(content_type: &str, pieces: Vec<String>) -> Self {
        Self {
            status: 200,
            headers: vec![("content-type".into(), content_type.into())],
            chunks: pieces.into_iter().map(|p| (Duration::ZERO, p)).collect(),
            abort: false,
            echo: None,
            head_delay: Duration::ZERO,
        }
    }

    /// Adds a response header.
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }

    /// Waits `delay` before every piece.
    pub fn paced(mut self, delay: Duration) -> Self {
        for c in &mut self.chunks {
            c.0 = delay;
        }
        self
    }

    /// Sends the status line and headers only after `delay` (a server that thinks before it
    /// answers); the body's pieces follow with their own delays.
    pub fn headers_after(mut self, delay: Duration) -> Self {
        self.head_delay = delay;
        self
    }

    /// Breaks the connection after the last piece.
    pub fn aborted(mut self) -> Self {
        self.abort = true;
        self
    }

    /// Keeps only the first `n` pieces.
    pub fn truncated(mut self, n: usize) -> Self {
        self.chunks.truncate(n);
        self
    }
}

#[derive(Default)]
struct Script {
    requests: Mutex<Vec<Recorded>>,
    replies: Mutex<VecDeque<Reply>>,
}

/// A scripted server on 127.0.0.1; stopped when dropped (also when a test fails).
pub struct ScriptedServer {
    /// Where it listens.
    pub addr: SocketAddr,
    state: Arc<Script>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.stop.cancel();
        self.task.abort();
    }
}

impl ScriptedServer {
    /// Starts it with `replies`, answered in order (a request with none left gets a 500).
    pub async fn start(replies: Vec<Reply>) -> Self {
        let state = Arc::new(Script {
            requests: Mutex::default(),
            replies: Mutex::new(replies.into()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let st = Arc::clone(&state);
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: axum::body::Bytes| {
                let st = Arc::clone(&st);
                async move {
                    let (response, head_delay) = answer(st, method, uri, headers, body);
                    if !head_delay.is_zero() {
                        tokio::time::sleep(head_delay).await;
                    }
                    response
                }
            },
        );
        let stop = CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { s.cancelled().await })
                .await;
        });
        Self {
            addr,
            state,
            stop,
            task,
        }
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues one more reply.
    pub fn push(&self, reply: Reply) {
        self.state.replies.lock().unwrap().push_back(reply);
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().unwrap().clone()
    }
}

fn answer(
    st: Arc<Script>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (Response, Duration) {
    let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let recorded = Recorded {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().map(str::to_string),
        headers,
        body: json,
    };
    st.requests.lock().unwrap().push(recorded.clone());
    let Some(mut reply) = st.replies.lock().unwrap().pop_front() else {
        let refusal = Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::from("the test script has no reply for this request"))
            .unwrap();
        return (refusal, Duration::ZERO);
    };
    if let Some(make) = reply.echo {
        reply.chunks = vec![(Duration::ZERO, make(&recorded))];
    }
    let abort = reply.abort;
    let pieces = futures::stream::unfold(
        (reply.chunks.into_iter(), abort, false),
        |(mut it, abort, ended)| async move {
            if ended {
                return None;
            }
            match it.next() {
                Some((delay, piece)) => {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    Some((Ok::<_, std::io::Error>(piece), (it, abort, false)))
                }
                None if abort => Some((
                    // Let the pieces reach the client before the connection breaks.
                    {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Err(std::io::Error::new(
                            std::io::ErrorKind::ConnectionReset,
                            "cut off",
                        ))
                    },
                    (it, abort, true),
                )),
                None => None,
            }
        },
    );
    let mut b = Response::builder().status(reply.status);
    for (k, v) in &reply.headers {
        b = b.header(k, v);
    }
    (b.body(Body::from_stream(pieces)).unwrap(), reply.head_delay)
}
