//! Streamable HTTP hosting: the axum [`router`], the one-call [`serve`], and the guard layer
//! that runs before rmcp sees a request.
//!
//! The guard layer does, in this fixed order:
//! 1. DNS-rebinding protection (`Host` / `Origin` allow-lists): `403`;
//! 2. authentication through the configured [`Authenticator`](crate::Authenticator): `401`
//!    with `WWW-Authenticate: Bearer`; the principal travels to the handler in the request's
//!    extensions;
//! 3. session ownership: a session id created by one principal is unknown (`404`) to others;
//!    with a session store, a session held here that the store no longer has (its client
//!    ended it on another instance) ends here too and is `404` (see
//!    [`session_store`](crate::session_store): looked up at most once per
//!    `session_recheck_interval`);
//! 4. limits that need to see the request before rmcp does: concurrent sessions on
//!    `initialize`, in all and per principal (`503`), concurrent listen streams on GET SSE
//!    and `subscriptions/listen`, in all and per principal (`503`). A 2026-07-28 request
//!    names its method in the `Mcp-Method` header (rmcp checks it against the body), so its
//!    body is not read here; a session-less legacy request is read (body limit: `413`) and
//!    must be one JSON-RPC 2.0 message;
//! 5. answers that JSON-RPC prescribes for unreadable bodies: `400` with `-32700` (not JSON) or
//!    `-32600` (not one valid request) where rmcp would say `415`.
//!
//! Everything after that (JSON-RPC framing, SSE, sessions, version negotiation, the 2026-07-28
//! header and `_meta` validation) is rmcp's `StreamableHttpService`, configured from
//! [`HttpConfig`].
//!
//! Accepted sockets get `TCP_NODELAY`: rmcp answers each call as a small SSE stream, and with
//! Nagle's algorithm every call would wait for the peer's delayed ACK (about 44 ms).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use futures::{FutureExt, StreamExt};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::app::McpApp;
use crate::auth::{AuthError, Authenticator};
use crate::config::HttpConfig;
use crate::error::ServerError;
use crate::guard;
use crate::handler::{
    Authenticated, KbergHandler, ListenClosed, REQUEST_PRINCIPAL, TransportContext,
};
use crate::limits::{StreamCounter, StreamPermit, StreamRefusal};
use crate::sessions::{SessionSettings, SessionTable};

// The header names the guard reads on every request, built once: a lookup by a `&str` name
// parses and checks the name on each call, a lookup by a `HeaderName` only hashes it.
/// `Mcp-Session-Id`.
const SESSION_HEADER: axum::http::HeaderName =
    axum::http::HeaderName::from_static("mcp-session-id");
/// `Mcp-Protocol-Version`.
const PROTOCOL_VERSION_HEADER: axum::http::HeaderName =
    axum::http::HeaderName::from_static("mcp-protocol-version");
/// `Mcp-Method` (2026-07-28).
const METHOD_HEADER: axum::http::HeaderName = axum::http::HeaderName::from_static("mcp-method");

struct GuardState {
    auth: Arc<dyn Authenticator>,
    allow: guard::AllowList,
    max_body: usize,
    max_sessions: usize,
    /// [`Limits::sessions_per_principal`](crate::Limits::sessions_per_principal).
    max_sessions_per_principal: usize,
    sessions: Arc<SessionTable>,
    streams: Arc<StreamCounter>,
    /// Serializes `initialize` so the session count checks and the session's creation are one
    /// step (initializes are rare; calls never take this lock). A resume from the session
    /// store takes it to check the limits and record itself in `resuming`.
    initializing: tokio::sync::Mutex<()>,
    /// The sessions being resumed from the session store by a request in flight, and whose
    /// they are: such a session opens inside rmcp while its request is served, so it counts
    /// against the limits from the check until it is live (else concurrent resumes, each
    /// checked before any had opened, would all go through).
    resuming: std::sync::Mutex<HashMap<String, String>>,
    /// Which principal created each live session (shared with the session store, which
    /// records the owner of a session it resumes).
    owners: crate::session_store::SessionOwners,
    /// The session store sessions are also kept in, if any (another replica's session may
    /// then be named, and resumed, here).
    store: Option<Arc<dyn crate::SessionStore>>,
    /// [`HttpConfig::session_recheck_interval`]: how old the last look in `store` at a session
    /// held here may be before its next request looks again.
    recheck_interval: std::time::Duration,
}

/// rmcp's Streamable HTTP service as kberg-server configures it.
type RmcpService = StreamableHttpService<KbergHandler, SessionTable>;

/// The guard and the rmcp service behind it, shared by every request on the route.
struct Guarded {
    guard: GuardState,
    rmcp: RmcpService,
}

impl Guarded {
    /// Hands a request that passed the guard to rmcp. rmcp's future is boxed: it is several
    /// kilobytes, and held inline it would make every guard future that awaits it as large,
    /// to be copied each time one is built and moved.
    async fn run(&self, req: Request) -> Response {
        Box::pin(self.rmcp.handle(req)).await.map(Body::new)
    }
}

/// The MCP endpoint's service: the guard, then rmcp, called directly.
///
/// A hand-written service rather than an axum `from_fn` layer around rmcp's tower service:
/// that pair boxed the inner service and its future on every request and copied rmcp's
/// configuration for each call; this one shares both behind one `Arc` and boxes one future.
#[derive(Clone)]
struct McpEndpoint(Arc<Guarded>);

impl tower::Service<Request> for McpEndpoint {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let guarded = Arc::clone(&self.0);
        Box::pin(async move { Ok(guard_layer(guarded, req).await) })
    }
}

impl GuardState {
    fn owners(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, crate::session_store::SessionOwner>> {
        // Single-statement updates of a plain map; a poisoned lock holds a consistent map.
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether one more session, for `principal`, would be over a session limit: the refusal
    /// to answer if so. The principal's own share is checked first, since it cannot retry
    /// into a place other principals' sessions will leave. Only the principal's live sessions
    /// count. `forget_ended` (an `initialize`): first drop the owners of sessions that ended
    /// (expired or closed), so they do not pile up in the map, but not of those recorded
    /// within [`OWNER_GRACE`](crate::session_store::OWNER_GRACE): a session resumed from the
    /// store has its owner recorded just before it opens, and opened without one it would
    /// be anyone's.
    ///
    /// Sessions being resumed (see [`GuardState::resuming`]) count as open.
    fn session_limit_refusal(&self, principal: &str, forget_ended: bool) -> Option<Response> {
        let (held, opening) = {
            let resuming = self.resuming();
            let mut owners = self.owners();
            if forget_ended {
                // One pass over the map against the session table, copying no ids.
                self.sessions
                    .retain_live(&mut owners, crate::session_store::SessionOwner::is_recent);
            }
            let opening: Vec<&String> = resuming
                .iter()
                .filter(|(sid, _)| !self.sessions.is_live(sid))
                .map(|(_, p)| p)
                .collect();
            let held = owners
                .iter()
                .filter(|(sid, o)| o.principal == principal && self.sessions.is_live(sid))
                .count()
                + opening.iter().filter(|p| p.as_str() == principal).count();
            (held, opening.len())
        };
        if held >= self.max_sessions_per_principal {
            tracing::warn!(
                ?principal,
                held,
                "refused a session over the principal's session limit"
            );
            return Some(status(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_sessions_for_principal",
                "Too many open sessions for this principal; end one of them (DELETE) and retry.",
            ));
        }
        (self.sessions.len() + opening >= self.max_sessions).then(|| {
            status(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_sessions",
                "Too many open sessions; end one (DELETE) and retry.",
            )
        })
    }
}

impl GuardState {
    fn resuming(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // Single-statement updates of a plain map; a poisoned lock holds a consistent map.
        self.resuming.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before a request naming the session `sid`, not live here, goes on to rmcp, which
    /// resumes it from the session store: checks the session limits for `principal` and
    /// counts the session as open until the returned slot is dropped (the request was
    /// served). `Ok(None)`: another request is resuming it already, and it counts once.
    async fn begin_resume(
        &self,
        sid: &str,
        principal: &str,
    ) -> Result<Option<ResumeSlot<'_>>, Response> {
        // With `initialize`s too: each sees the other's session counted.
        let _one_at_a_time = self.initializing.lock().await;
        if self.resuming().contains_key(sid) {
            return Ok(None);
        }
        if let Some(refusal) = self.session_limit_refusal(principal, false) {
            return Err(refusal);
        }
        self.resuming()
            .insert(sid.to_string(), principal.to_string());
        Ok(Some(ResumeSlot {
            guard: self,
            sid: sid.to_string(),
        }))
    }
}

/// A session being resumed, counted against the limits until dropped.
struct ResumeSlot<'a> {
    guard: &'a GuardState,
    sid: String,
}

impl Drop for ResumeSlot<'_> {
    fn drop(&mut self) {
        self.guard.resuming().remove(&self.sid);
    }
}

/// The answer to a listen stream of `principal` that `refused` (both `503`): its own share is
/// full (`too_many_streams_for_principal`), or every stream is taken (`too_many_streams`).
fn stream_refusal(refused: StreamRefusal, principal: &str) -> Response {
    match refused {
        StreamRefusal::PrincipalShare => {
            tracing::warn!(
                ?principal,
                "refused a listen stream over the principal's share"
            );
            status(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_streams_for_principal",
                "Too many open listen streams for this principal; close one of them and retry.",
            )
        }
        StreamRefusal::Full => status(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "Too many open listen streams; close one and retry.",
        ),
    }
}

fn status(code: StatusCode, error: &str, message: &str) -> Response {
    let body = json!({"error": error, "message": message});
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn unauthorized(e: &AuthError) -> Response {
    let mut r = status(StatusCode::UNAUTHORIZED, e.code(), &e.to_string());
    let challenge = match e {
        AuthError::Missing => "Bearer realm=\"mcp\"".to_string(),
        AuthError::Invalid => {
            "Bearer realm=\"mcp\", error=\"invalid_token\", error_description=\"the token is not valid\""
                .to_string()
        }
    };
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// Keeps `permit` until the response body has been sent or dropped.
fn hold(resp: Response, permit: StreamPermit) -> Response {
    let (parts, body) = resp.into_parts();
    let stream = body.into_data_stream().map(move |chunk| {
        let _held = &permit;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

/// How long a `subscriptions/listen` whose client closed its stream gets to end (see
/// [`ListenBody`]) before its stream is dropped anyway.
const LISTEN_WIND_DOWN: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs a `subscriptions/listen` request: marks it with a [`ListenClosed`] and keeps `permit`
/// in its answer's body (see [`ListenBody`]).
async fn run_listen(mut req: Request, next: &Guarded, permit: StreamPermit) -> Response {
    let closed = CancellationToken::new();
    req.extensions_mut().insert(ListenClosed(closed.clone()));
    let (parts, body) = as_jsonrpc_error(next.run(req).await).await.into_parts();
    let body = ListenBody {
        inner: Some(body.into_data_stream()),
        closed,
        permit: Some(permit),
    };
    Response::from_parts(parts, Body::from_stream(body))
}

/// The body of a `subscriptions/listen` answer. A client ends a listen by closing the stream,
/// and the server drops the body before it ended: then this cancels the listen's
/// [`ListenClosed`] and reads rmcp's side of the stream to its end on a task of its own (for at
/// most [`LISTEN_WIND_DOWN`]), so the listen returns and rmcp sends its final result into a
/// stream that is still there. Dropping rmcp's stream instead would cancel the request's
/// service, which then fails to send that result and logs an ERROR for an ordinary close.
struct ListenBody {
    inner: Option<axum::body::BodyDataStream>,
    closed: CancellationToken,
    /// The listen-stream slot, given back when the listen has ended.
    permit: Option<StreamPermit>,
}

impl futures::Stream for ListenBody {
    type Item = Result<axum::body::Bytes, axum::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let Some(inner) = self.inner.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let next = inner.poll_next_unpin(cx);
        if let std::task::Poll::Ready(None) = next {
            self.inner = None;
        }
        next
    }
}

impl Drop for ListenBody {
    fn drop(&mut self) {
        let Some(mut inner) = self.inner.take() else {
            return;
        };
        self.closed.cancel();
        let permit = self.permit.take();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _permit = permit;
                let ended = tokio::time::timeout(LISTEN_WIND_DOWN, async {
                    while inner.next().await.is_some() {}
                })
                .await;
                if ended.is_err() {
                    tracing::warn!("a closed listen stream did not end in time; dropped");
                }
            });
        }
    }
}

/// The fields of a JSON-RPC message this layer needs; every other field is skipped (but its
/// syntax is still checked, so a body that passes is well-formed JSON).
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    id: Option<serde_json::Value>,
    /// Present on a response; only whether it is there matters.
    #[serde(default)]
    result: Option<serde::de::IgnoredAny>,
    /// Present on an error response.
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
}

/// What [`peek`] learned about a message.
#[derive(Debug, Default, PartialEq)]
struct Peeked {
    method: Option<String>,
    id: Option<serde_json::Value>,
}

/// A JSON-RPC error reply without an id: the request's id could not be read.
fn jsonrpc_error(code: i64, message: &str) -> Response {
    jsonrpc_error_for(StatusCode::BAD_REQUEST, None, code, message)
}

fn jsonrpc_error_for(
    status: StatusCode,
    id: Option<serde_json::Value>,
    code: i64,
    message: &str,
) -> Response {
    // Without a readable id the key is left out, as the MCP schema has it (`id?: RequestId`)
    // and rmcp's own error bodies do; `null` is not a request id there.
    let mut body = json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}});
    if let Some(id) = id {
        body["id"] = id;
    }
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Checks that a body is one well-formed JSON-RPC 2.0 message and returns its method (absent
/// for responses). Malformed JSON is `-32700`; valid JSON that is not a JSON-RPC 2.0 message
/// (wrong or missing `jsonrpc`, a batch, a scalar, an object with neither a `method` nor an
/// `id` with `result` or `error`) is `-32600`. Both with HTTP 400.
#[allow(clippy::result_large_err)]
fn peek(body: &[u8]) -> Result<Peeked, Response> {
    let value_kind = body.iter().find(|b| !b.is_ascii_whitespace()).copied();
    match serde_json::from_slice::<Peek<'_>>(body) {
        // serde reads a struct from an array too (`["2.0", "ping"]`); a message is an object.
        Ok(_) if value_kind != Some(b'{') => Err(jsonrpc_error(
            -32600,
            if value_kind == Some(b'[') {
                "Invalid Request: batches are not supported"
            } else {
                "Invalid Request: the body must be one JSON-RPC 2.0 message object"
            },
        )),
        Ok(p) => {
            if p.jsonrpc.as_deref() != Some("2.0") {
                return Err(jsonrpc_error(
                    -32600,
                    "Invalid Request: `jsonrpc` must be \"2.0\"",
                ));
            }
            if p.method.is_none() && (p.id.is_none() || p.result.is_none() == p.error.is_none()) {
                return Err(jsonrpc_error(
                    -32600,
                    "Invalid Request: a message needs a `method` (a request or notification), \
                     or an `id` with `result` or `error` (a response)",
                ));
            }
            Ok(Peeked {
                method: p.method.map(|m| m.into_owned()),
                id: p.id,
            })
        }
        Err(e) if e.is_syntax() || e.is_eof() => Err(jsonrpc_error(
            -32700,
            &format!("Parse error: the body is not valid JSON ({e})"),
        )),
        Err(_) => Err(jsonrpc_error(
            -32600,
            if value_kind == Some(b'[') {
                "Invalid Request: batches are not supported"
            } else {
                "Invalid Request: the body must be one JSON-RPC 2.0 message object"
            },
        )),
    }
}

/// The `-32602` error for an `initialize` body whose params are not an initialize request's
/// (`protocolVersion`, `capabilities`, `clientInfo`), or `None` when they are.
fn initialize_params_error(body: &[u8]) -> Option<rmcp::ErrorData> {
    #[derive(Deserialize)]
    struct Params {
        #[serde(default)]
        params: Option<serde_json::Value>,
    }
    let params = serde_json::from_slice::<Params>(body).ok()?.params;
    let fits = params
        .as_ref()
        .is_some_and(|p| rmcp::model::InitializeRequestParams::deserialize(p).is_ok());
    (!fits).then(|| crate::handler::invalid_params("initialize", params))
}

/// rmcp answers a JSON body it cannot read as one JSON-RPC message with `415` and a text body;
/// JSON-RPC prescribes `-32700` (not JSON) or `-32600` (not a valid request). Rewrites that
/// answer, and passes every other response through untouched.
async fn as_jsonrpc_error(resp: Response) -> Response {
    const PREFIX: &str = "fail to deserialize request body";
    if resp.status() != StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        return status(
            StatusCode::BAD_REQUEST,
            "bad_body",
            "Bad Request: unreadable body",
        );
    };
    let text = String::from_utf8_lossy(&bytes);
    let Some(detail) = text.strip_prefix(PREFIX) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    // serde_json's data errors (the JSON parsed but is not a request) versus syntax errors.
    const NOT_A_REQUEST: [&str; 7] = [
        "unrecognized JSON-RPC message",
        "invalid type",
        "invalid value",
        "missing field",
        "unknown field",
        "unknown variant",
        "did not match any variant",
    ];
    if NOT_A_REQUEST.iter().any(|m| detail.contains(m)) {
        jsonrpc_error(
            -32600,
            &format!(
                "Invalid Request: not one JSON-RPC 2.0 message ({})",
                detail.trim()
            ),
        )
    } else {
        jsonrpc_error(
            -32700,
            &format!(
                "Parse error: the body is not valid JSON ({})",
                detail.trim()
            ),
        )
    }
}

/// The answer to a request whose body broke off (a malformed chunk, a connection error):
/// `400 bad_body`, marked `Connection: close` since the body was not read to its end and the
/// connection cannot carry another request (a client that reused it would write into a
/// closing socket).
fn unreadable_body() -> Response {
    let mut reply = status(
        StatusCode::BAD_REQUEST,
        "bad_body",
        "Bad Request: unreadable body",
    );
    reply.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    reply
}

/// rmcp answers a body that broke off while it read it (a request in a session, or a
/// 2026-07-28 one, whose body this layer hands on unread) `500` with a plain-text sentence,
/// as if the server had failed. It is the client's body: the answer is the one this layer
/// gives when it reads the body itself ([`unreadable_body`]). Every other response passes
/// through as it was.
async fn broken_body_as_bad_request(resp: Response) -> Response {
    const PREFIX: &[u8] = b"Failed to read request body";
    let (parts, body) = resp.into_parts();
    match axum::body::to_bytes(body, 64 * 1024).await {
        Ok(bytes) if bytes.starts_with(PREFIX) => unreadable_body(),
        Ok(bytes) => Response::from_parts(parts, Body::from(bytes)),
        Err(_) => Response::from_parts(parts, Body::empty()),
    }
}

/// Whether a response's body is plain text: rmcp's HTTP-level refusals carry no content type
/// or `text/plain`.
fn is_plain_text(headers: &axum::http::HeaderMap) -> bool {
    headers.get(header::CONTENT_TYPE).is_none_or(|v| {
        v.to_str().is_ok_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/plain")
        })
    })
}

/// The longest part of a plain-text refusal quoted in its JSON form; rmcp's are one
/// sentence, which may quote a header the client sent.
const MAX_PLAIN_REFUSAL_BYTES: usize = 4096;

/// The longest plain-text refusal read: more than any header hyper lets through (its buffer
/// for a request's head holds about 400 kB), so a refusal quoting a long header is still
/// classified by its whole sentence before the quote is cut to [`MAX_PLAIN_REFUSAL_BYTES`].
const MAX_PLAIN_REFUSAL_READ: usize = 1024 * 1024;

/// rmcp answers some refusals with a plain-text sentence: a missing session (`400`), an unknown
/// one (`404`), a method (`405`), `Accept` (`406`) or `Content-Type` (`415`) it does not serve,
/// an unsupported `MCP-Protocol-Version` (`400`). They get the shape of this layer's own
/// refusals, `{"error": "<code>", "message": "<sentence>"}` as JSON, so a client reads every
/// refusal of the endpoint one way; the status and rmcp's sentence are kept.
async fn plain_refusal_as_json(resp: Response) -> Response {
    let (parts, body) = resp.into_parts();
    let mut message = match axum::body::to_bytes(body, MAX_PLAIN_REFUSAL_READ).await {
        Ok(bytes) if !bytes.is_empty() => String::from_utf8_lossy(&bytes).trim().to_string(),
        _ => parts
            .status
            .canonical_reason()
            .unwrap_or("Refused")
            .to_string(),
    };
    let code = match parts.status {
        StatusCode::BAD_REQUEST if message.contains("Session ID is required") => "session_required",
        StatusCode::BAD_REQUEST if message.contains("MCP-Protocol-Version") => {
            "unsupported_protocol_version"
        }
        StatusCode::NOT_FOUND => "session_not_found",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_ACCEPTABLE => "not_acceptable",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        _ => "bad_request",
    };
    if message.len() > MAX_PLAIN_REFUSAL_BYTES {
        message.truncate(kberg_core::char_floor(&message, MAX_PLAIN_REFUSAL_BYTES));
        message.push_str("...");
    }
    let mut reply = status(parts.status, code, &message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            reply.headers_mut().append(name.clone(), value.clone());
        }
    }
    if parts.status == StatusCode::METHOD_NOT_ALLOWED
        && !reply.headers().contains_key(header::ALLOW)
    {
        reply
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
    }
    reply
}

/// Whether the request says its body is JSON (rmcp answers other content types with 415).
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
}

async fn guard_layer(next: Arc<Guarded>, mut req: Request) -> Response {
    let g = &next.guard;
    if let Err(refusal) = g.allow.check(req.uri(), req.headers()) {
        tracing::warn!(?refusal, "refused a request by Host/Origin");
        // A missing or malformed `Host` is a malformed request, not a refused host.
        let (code, error) = match refusal {
            guard::Refusal::BadHost => (StatusCode::BAD_REQUEST, "bad_request"),
            _ => (StatusCode::FORBIDDEN, "forbidden"),
        };
        return status(code, error, refusal.message());
    }
    // The app's authenticator runs with its panic contained: the request is answered `500`
    // rather than dropped with its connection. Neither the headers (the credential) nor the
    // panic's payload is logged.
    let authenticated = AssertUnwindSafe(g.auth.authenticate(req.headers()))
        .catch_unwind()
        .await;
    let principal = match authenticated {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "refused a request without valid credentials");
            return unauthorized(&e);
        }
        Err(_panic) => {
            tracing::error!("the authenticator panicked; the request was answered 500");
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "the server could not authenticate this request (internal error)",
            );
        }
    };
    req.extensions_mut()
        .insert(Authenticated(std::sync::Arc::clone(&principal)));
    let mut resp = REQUEST_PRINCIPAL
        .scope(
            std::sync::Arc::clone(&principal),
            route(&next, req, principal),
        )
        .await;
    if resp.status().is_client_error() && is_plain_text(resp.headers()) {
        resp = plain_refusal_as_json(resp).await;
    } else if resp.status() == StatusCode::INTERNAL_SERVER_ERROR && is_plain_text(resp.headers()) {
        resp = broken_body_as_bad_request(resp).await;
    }
    if resp.status() == StatusCode::PAYLOAD_TOO_LARGE {
        // Whoever refused the body (this guard or rmcp's own limit inside a session) left the
        // rest of it unread: the connection cannot carry another request.
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// Whether the request names a known version of the 2026-07-28 generation (or a later one)
/// in its `MCP-Protocol-Version` header. An unknown version is not modern: rmcp answers it
/// `400 Bad Request`, as both generations require, where the 2026-07-28 shortcuts here would
/// have treated it as one of theirs.
fn is_modern(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(PROTOCOL_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str()
                && rmcp::model::ProtocolVersion::KNOWN_VERSIONS
                    .iter()
                    .any(|known| known.as_str() == v)
        })
}

/// Who created the session `sid` that `store` keeps (a session of another instance that this
/// one may end): `Ok(None)` when there is no store or it does not have the session.
async fn stored_owner(
    store: Option<&dyn crate::SessionStore>,
    sid: &str,
) -> Result<Option<String>, crate::SessionStoreFailure> {
    let Some(store) = store else {
        return Ok(None);
    };
    Ok(store.load(sid).await?.map(|s| s.owner))
}

/// The answer to a `DELETE` the session store could not serve (`503`): nothing was ended.
fn store_unavailable(e: &crate::SessionStoreFailure) -> Response {
    tracing::warn!(error = ?e.to_string(), "the session store failed during a DELETE; nothing was ended");
    status(
        StatusCode::SERVICE_UNAVAILABLE,
        "session_store_unavailable",
        "Service Unavailable: the session store could not end the session; retry the DELETE.",
    )
}

/// Ends the session `sid`, held here, that the session store no longer has: closed in the
/// session table (its streams end, its service stops) and its owner forgotten, unless a
/// newer instance of the session has taken the entry meanwhile.
async fn end_here(g: &GuardState, sid: &str, recheck: &Arc<crate::session_store::Recheck>) {
    use rmcp::transport::streamable_http_server::session::SessionManager;
    let _ = g.sessions.close_session(&sid.into()).await;
    let mut owners = g.owners();
    if owners
        .get(sid)
        .and_then(|o| o.recheck.as_ref())
        .is_some_and(|r| Arc::ptr_eq(r, recheck))
    {
        owners.remove(sid);
    }
}

/// The guard after authentication, run with the request's principal in
/// [`REQUEST_PRINCIPAL`]: session ownership, the stream and session limits, and the body checks.
async fn route(
    next: &Guarded,
    req: Request,
    principal: std::sync::Arc<kberg_core::Principal>,
) -> Response {
    let g = &next.guard;
    let session = match req.headers().get(SESSION_HEADER).map(|v| v.to_str()) {
        None => None,
        Some(Ok(sid)) => Some(sid.to_string()),
        // Not visible ASCII, so no id this server gave (rmcp would read it as no id at all
        // and answer that one is required, or start a new session for an `initialize`): it
        // names an unknown session. A 2026-07-28 request ignores the header.
        Some(Err(_)) if is_modern(req.headers()) => None,
        Some(Err(_)) => {
            return status(
                StatusCode::NOT_FOUND,
                "session_not_found",
                "Not Found: Session not found",
            );
        }
    };
    if let Some(sid) = &session {
        // One look at the owner map gives the owner and, for a session known to be in the
        // session store, its recheck (`None` without a store: nothing more is done).
        let (foreign, recheck) = match g.owners().get(sid) {
            Some(o) => (o.principal != principal.id, o.recheck.clone()),
            None => (false, None),
        };
        // 2026-07-28 has no sessions: its requests ignore the header (rmcp serves them, or
        // answers a GET or DELETE `405`, whatever session it names), so it refuses nothing.
        if (foreign || recheck.is_some()) && !is_modern(req.headers()) {
            if foreign {
                tracing::warn!(principal = ?principal.id, "refused a request naming another principal's session");
                return status(
                    StatusCode::NOT_FOUND,
                    "session_not_found",
                    "Not Found: Session not found",
                );
            }
            if let (Some(recheck), Some(store)) = (recheck, g.store.as_deref())
                && !recheck.still_stored(store, sid, g.recheck_interval).await
            {
                // Its client ended it on another instance (or the store dropped it): it ends
                // here too, and like any ended session it is `404`.
                end_here(g, sid, &recheck).await;
                return status(
                    StatusCode::NOT_FOUND,
                    "session_not_found",
                    "Not Found: Session not found",
                );
            }
        }
    }

    // A legacy request naming a session that is not live here is resumed from the session
    // store (another instance's session): that opens a session, so it counts against
    // `max_sessions` and the principal's share like an `initialize` (else a principal could
    // start sessions on other instances, each within its share there, and gather them here).
    // It counts from this check until its request is served (the session then is live, or
    // was not resumed), so that resumes arriving together cannot all pass the check. A DELETE
    // resumes nothing: the limits do not refuse it. (rmcp ignores the header on 2026-07-28
    // requests.)
    let _resuming = match &session {
        Some(sid)
            if g.store.is_some()
                && req.method() != Method::DELETE
                && !is_modern(req.headers())
                && !g.sessions.is_live(sid) =>
        {
            match g.begin_resume(sid, &principal.id).await {
                Ok(slot) => slot,
                Err(refusal) => return refusal,
            }
        }
        _ => None,
    };

    match (req.method().clone(), session) {
        (Method::GET, Some(_)) => {
            let permit = match g.streams.try_acquire(&principal.id) {
                Ok(permit) => permit,
                Err(refused) => return stream_refusal(refused, &principal.id),
            };
            let resp = next.run(req).await;
            if resp.status().is_success() {
                hold(resp, permit)
            } else {
                resp
            }
        }
        (Method::DELETE, Some(sid)) => {
            // A session that is not live here (never was, or ended) is 404, as for any other
            // request naming it. With a session store it may be another instance's: rmcp ends
            // whatever id a DELETE names without looking it up, so the store is asked here
            // whether the caller owns such a session (one live here had its owner checked
            // above). (A 2026-07-28 DELETE goes on to rmcp, which answers it `405` whatever it
            // names.)
            //
            // With a store the session then leaves the store before it ends here. rmcp ends it
            // here first and deletes it from the store after, ignoring a failure: the session
            // would be ended here while the other instances went on serving it (every look
            // finds it) and any of them could resume it. A DELETE the store cannot serve
            // (whose owner it cannot tell, or that it cannot record) ends nothing and is
            // `503`; the client's retry ends the session.
            if !is_modern(req.headers()) {
                if !g.sessions.is_live(&sid) {
                    match stored_owner(g.store.as_deref(), &sid).await {
                        Ok(Some(owner)) if owner == principal.id => {}
                        Ok(_) => {
                            return status(
                                StatusCode::NOT_FOUND,
                                "session_not_found",
                                "Not Found: Session not found",
                            );
                        }
                        Err(e) => return store_unavailable(&e),
                    }
                }
                if let Some(store) = g.store.as_deref()
                    && let Err(e) = store.delete(&sid).await
                {
                    return store_unavailable(&e);
                }
            }
            let mut resp = next.run(req).await;
            if resp.status().is_success() {
                g.owners().remove(&sid);
                // The session is gone when the answer leaves: `200 OK`, not rmcp's `202
                // Accepted`. The specification names no success code; the official Python
                // client accepts only 200 or 204 and logs a failure otherwise.
                if resp.status() == StatusCode::ACCEPTED {
                    *resp.status_mut() = StatusCode::OK;
                }
            }
            resp
        }
        (Method::POST, session) if is_json(req.headers()) => {
            let modern = is_modern(req.headers());
            let header_method = req
                .headers()
                .get(METHOD_HEADER)
                .and_then(|v| v.to_str().ok());
            // The hot path reads no body here: a legacy request in a session, or a 2026-07-28
            // request whose `Mcp-Method` header rmcp checks against its body. Only
            // session-less legacy requests (`initialize`) and header-less 2026-07-28 ones are
            // read and peeked. (rmcp serves a 2026-07-28 request statelessly whatever
            // `Mcp-Session-Id` it carries, so a session header decides nothing for one: a
            // listen stream takes its slot with or without it.)
            let fast = if modern {
                header_method.is_some_and(|m| m != "initialize")
            } else {
                session.is_some()
            };
            if fast {
                if header_method == Some("subscriptions/listen") {
                    let permit = match g.streams.try_acquire(&principal.id) {
                        Ok(permit) => permit,
                        Err(refused) => return stream_refusal(refused, &principal.id),
                    };
                    return run_listen(req, next, permit).await;
                }
                return as_jsonrpc_error(next.run(req).await).await;
            }
            let (parts, body) = req.into_parts();
            let bytes = match axum::body::to_bytes(body, g.max_body).await {
                Ok(b) => b,
                Err(e) => {
                    // `to_bytes` fails on the length limit or on a broken body; tell them
                    // apart by the error's source chain.
                    let too_big = std::error::Error::source(&e)
                        .is_some_and(|s| s.to_string().contains("length limit"));
                    if too_big {
                        // `guard_layer` marks every 413 `Connection: close`.
                        return status(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "payload_too_large",
                            &format!("Payload Too Large: the body exceeds {} bytes", g.max_body),
                        );
                    }
                    return unreadable_body();
                }
            };
            let peeked = match peek(&bytes) {
                Ok(p) => p,
                Err(reply) => return reply,
            };
            if !modern
                && session.is_none()
                && peeked.method.as_deref() == Some("initialize")
                && let Some(error) = initialize_params_error(&bytes)
            {
                // rmcp reads an `initialize` whose params do not fit as some other request and
                // answers that a session is required, which misleads a client whose only fault
                // is its params.
                return jsonrpc_error_for(
                    StatusCode::BAD_REQUEST,
                    peeked.id,
                    i64::from(error.code.0),
                    &error.message,
                );
            }
            if modern && peeked.method.as_deref() == Some("initialize") {
                // 2026-07-28 removed the handshake (SEP-2575): answer before a session exists.
                return jsonrpc_error_for(
                    StatusCode::NOT_FOUND,
                    peeked.id,
                    -32601,
                    "method not found: initialize (removed in 2026-07-28)",
                );
            }
            let req = Request::from_parts(parts, Body::from(bytes));
            match (peeked.method.as_deref(), session) {
                (Some("initialize"), None) => {
                    let _one_at_a_time = g.initializing.lock().await;
                    if let Some(refusal) = g.session_limit_refusal(&principal.id, true) {
                        return refusal;
                    }
                    let resp = next.run(req).await;
                    if let Some(sid) = resp
                        .headers()
                        .get(SESSION_HEADER)
                        .and_then(|v| v.to_str().ok())
                    {
                        // The session store's write (if any) recorded the owner already, with
                        // the session's recheck: kept.
                        g.owners().entry(sid.to_string()).or_insert_with(|| {
                            crate::session_store::SessionOwner::now(principal.id.clone())
                        });
                    }
                    resp
                }
                (Some("subscriptions/listen"), _) => {
                    let permit = match g.streams.try_acquire(&principal.id) {
                        Ok(permit) => permit,
                        Err(refused) => return stream_refusal(refused, &principal.id),
                    };
                    run_listen(req, next, permit).await
                }
                _ => as_jsonrpc_error(next.run(req).await).await,
            }
        }
        _ => next.run(req).await,
    }
}

/// The MCP endpoint as an axum [`Router`] with one route, `config.path`, to merge into the
/// app's own router. The guard layer (Host/Origin, auth, limits) applies to that route only.
/// Cancel `config.shutdown` to end every session and stream.
pub fn router(app: McpApp, config: &HttpConfig) -> Result<Router, ServerError> {
    if !config.path.starts_with('/') {
        return Err(ServerError::Config(format!(
            "the endpoint path `{}` must start with `/`",
            config.path
        )));
    }
    let limits = &config.limits;
    if limits.max_body_bytes == 0
        || limits.max_calls_per_principal == 0
        || limits.max_sessions_per_principal == Some(0)
        || limits.max_listen_streams_per_principal == Some(0)
    {
        return Err(ServerError::Config(
            "max_body_bytes, max_calls_per_principal, max_sessions_per_principal and \
             max_listen_streams_per_principal must be at least 1"
                .into(),
        ));
    }
    let shared = TransportContext::new(
        app,
        limits.max_calls_per_principal,
        None,
        config.shutdown.clone(),
    )
    .map_err(|e| ServerError::Config(e.message.to_string()))?;

    let sessions = Arc::new(SessionTable::new(SessionSettings {
        idle_timeout: limits.session_idle_timeout,
        ..SessionSettings::default()
    }));

    // Host and Origin are checked by the guard layer, which always runs first on this route;
    // rmcp's own copy of the check is switched off so each request checks (and clones) the
    // lists once.
    let owners = crate::session_store::SessionOwners::default();
    let mut rmcp_config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_sse_keep_alive(config.sse_keep_alive)
        .with_legacy_session_mode(true)
        .with_json_response(true)
        .with_cancellation_token(config.shutdown.clone())
        .with_max_request_body_bytes(limits.max_body_bytes);
    rmcp_config.session_store = config.session_store.as_ref().map(|store| {
        Arc::new(crate::session_store::OwnedSessions {
            store: Arc::clone(store),
            owners: Arc::clone(&owners),
        }) as Arc<dyn rmcp::transport::streamable_http_server::session::store::SessionStore>
    });
    let service = StreamableHttpService::new(
        move || Ok(KbergHandler::new(Arc::clone(&shared))),
        Arc::clone(&sessions),
        rmcp_config,
    );
    // With one principal a share would only shrink the limit (see
    // `Authenticator::single_principal`): an unset share is then no share, and only the
    // whole limit applies (and is what a refusal names).
    let single = config.auth.single_principal();
    let sessions_share = match limits.max_sessions_per_principal {
        None if single => usize::MAX,
        _ => limits.sessions_per_principal(),
    };
    let streams_share = match limits.max_listen_streams_per_principal {
        None if single => usize::MAX,
        _ => limits.listen_streams_per_principal(),
    };
    let guard = GuardState {
        auth: Arc::clone(&config.auth),
        allow: guard::AllowList::new(&config.allowed_hosts, &config.allowed_origins),
        max_body: limits.max_body_bytes,
        max_sessions: limits.max_sessions,
        max_sessions_per_principal: sessions_share,
        sessions,
        streams: StreamCounter::new(limits.max_listen_streams, streams_share),
        initializing: tokio::sync::Mutex::new(()),
        resuming: Default::default(),
        owners,
        store: config.session_store.clone(),
        recheck_interval: config.session_recheck_interval,
    };
    let endpoint = McpEndpoint(Arc::new(Guarded {
        guard,
        rmcp: service,
    }));
    Ok(Router::new().route_service(&config.path, endpoint))
}

/// A bound HTTP server, not yet serving. Bind first to learn the address (port 0 picks a free
/// one), then [`run`](HttpServer::run).
#[derive(Debug)]
pub struct HttpServer {
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    local_addr: SocketAddr,
}

impl HttpServer {
    /// Binds `config.addr` and prepares the router.
    pub async fn bind(app: McpApp, config: HttpConfig) -> Result<Self, ServerError> {
        let listener =
            TcpListener::bind(config.addr)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.addr,
                    source,
                })?;
        Self::from_listener(listener, app, config)
    }

    /// Serves on an already bound listener (`config.addr` is ignored).
    pub fn from_listener(
        listener: TcpListener,
        app: McpApp,
        config: HttpConfig,
    ) -> Result<Self, ServerError> {
        let local_addr = listener.local_addr()?;
        let router = router(app, &config)?;
        Ok(Self {
            listener,
            router,
            shutdown: config.shutdown.clone(),
            local_addr,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Changes the router before it serves: merge the app's own routes beside the MCP
    /// endpoint (they do not pass its guard layer) or wrap everything in a layer.
    pub fn map_router(mut self, f: impl FnOnce(Router) -> Router) -> Self {
        self.router = f(self.router);
        self
    }

    /// The token that ends every session and stream when cancelled.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Serves until `shutdown` completes, then ends every session and stream and waits for
    /// in-flight responses to finish.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let token = self.shutdown.clone();
        let listener = self.listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "could not set TCP_NODELAY");
            }
        });
        tracing::info!(addr = %self.local_addr, "serving MCP over HTTP");
        let stop = token.clone();
        axum::serve(listener, self.router)
            .with_graceful_shutdown(async move {
                tokio::select! {
                    () = shutdown => {}
                    () = stop.cancelled() => {}
                }
                // Long-lived SSE streams would hold graceful shutdown open forever; ending the
                // sessions closes them.
                stop.cancel();
            })
            .await?;
        token.cancel();
        Ok(())
    }
}

/// Binds `config.addr` and serves `app` until `shutdown` completes.
pub async fn serve(
    app: McpApp,
    config: HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    HttpServer::bind(app, config).await?.run(shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard_state() -> GuardState {
        GuardState {
            auth: Arc::new(crate::OpenAccess::anonymous()),
            allow: guard::AllowList::new(&[], &[]),
            max_body: 1024,
            max_sessions: 8,
            max_sessions_per_principal: 8,
            sessions: Arc::new(SessionTable::new(SessionSettings::default())),
            streams: StreamCounter::new(8, 8),
            initializing: tokio::sync::Mutex::new(()),
            resuming: Default::default(),
            owners: crate::session_store::SessionOwners::default(),
            store: None,
            recheck_interval: std::time::Duration::from_secs(1),
        }
    }

    /// The session store records a resumed session's owner just before rmcp opens the
    /// session: an `initialize` that forgets the owners of sessions not open meanwhile must
    /// not forget that one, or the session would open with no owner, for anyone to use.
    #[test]
    fn an_initialize_keeps_the_owner_of_a_session_being_resumed() {
        let g = guard_state();
        g.owners().insert(
            "resuming".into(),
            crate::session_store::SessionOwner::now("alice".into()),
        );
        assert!(g.session_limit_refusal("bob", true).is_none());
        assert_eq!(
            g.owners().get("resuming").map(|o| o.principal.as_str()),
            Some("alice"),
            "the owner of a session about to open was forgotten"
        );
        // The owner of a session that never opened in that time is forgotten.
        let long_ago = std::time::Instant::now()
            .checked_sub(crate::session_store::OWNER_GRACE * 2)
            .expect("the clock has run for longer than that");
        g.owners().insert(
            "gone".into(),
            crate::session_store::SessionOwner {
                principal: "alice".into(),
                since: long_ago,
                recheck: None,
            },
        );
        assert!(g.session_limit_refusal("bob", true).is_none());
        assert!(
            g.owners().get("gone").is_none(),
            "an ended session's owner kept"
        );
        assert!(g.owners().get("resuming").is_some());
    }

    #[tokio::test]
    async fn peek_classifies_bodies() {
        let ok = peek(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).ok();
        assert_eq!(
            ok,
            Some(Peeked {
                method: Some("tools/list".into()),
                id: Some(json!(1))
            })
        );
        let response = peek(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).ok();
        assert_eq!(response.map(|p| p.method), Some(None));
        let escaped = peek(br#"{"jsonrpc":"2.0","id":"a","method":"tools\/list"}"#).ok();
        assert_eq!(
            escaped.and_then(|p| p.method).as_deref(),
            Some("tools/list")
        );
        for (body, code) in [
            (&b"{nope"[..], -32700),
            (b"", -32700),
            (b"[]", -32600),
            (b"42", -32600),
            (br#"{"jsonrpc":"1.0","method":"x"}"#, -32600),
            (br#"{"method":"x"}"#, -32600),
            (br#"{"jsonrpc":2,"method":"x"}"#, -32600),
            (br#"{"jsonrpc":"2.0"}"#, -32600),
            (br#"{"jsonrpc":"2.0","id":1}"#, -32600),
            (
                br#"{"jsonrpc":"2.0","id":1,"result":{},"error":{}}"#,
                -32600,
            ),
            (br#"{"jsonrpc":"2.0","result":{}}"#, -32600),
        ] {
            let Err(resp) = peek(body) else {
                panic!("{:?} accepted", String::from_utf8_lossy(body));
            };
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
            let bytes = axum::body::to_bytes(resp.into_body(), 4096)
                .await
                .expect("error body");
            let v: serde_json::Value = serde_json::from_slice(&bytes).expect("JSON-RPC error");
            assert_eq!(v["error"]["code"], code, "{v}");
            assert!(v.get("id").is_none(), "no id key, not a null one: {v}");
        }
    }

    proptest::proptest! {
        #[test]
        fn peek_never_panics(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = peek(&body);
        }

        #[test]
        fn peek_accepts_every_wellformed_request(method in "[a-z/]{1,30}", id in 0i64..1_000_000) {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}}).to_string();
            let got = peek(body.as_bytes()).ok().and_then(|p| p.method);
            proptest::prop_assert_eq!(got, Some(method));
        }
    }
}
