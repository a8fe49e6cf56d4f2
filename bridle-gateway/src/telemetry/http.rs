//! The request layer that traces an MCP endpoint: a server span per JSON-RPC request, with the
//! caller's trace context read from `params._meta` and the span's own written back in its
//! place before the server sees the request.
//!
//! Why the body is rewritten: the server (rmcp) hands a request to its session's task, so a
//! `tracing` span entered here is not current where the tool runs. The request's `_meta`
//! travels with it, though, and reaches the tool as its context's `_meta`: naming the server
//! span there is how the forwarded call's client span ([`super::TraceHook`]) becomes its child.
//! Only POSTs whose body fits the endpoint's limit are read; others pass untouched and
//! untraced. The span ends when the response has been sent (a streamed answer, when its stream
//! ends), and records an HTTP refusal (`error.type` the status code) or the answer's JSON-RPC
//! error or tool result flagged `isError`, whether the answer is JSON or an SSE stream (read by
//! the SSE parser from a copy of the stream, off the response's path).

use axum::Router;
use axum::body::Bytes;
use axum::body::{Body, HttpBody as _};
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use serde_json::Value;

use super::spans::{self, McpRequest};

#[derive(Debug, Clone)]
struct Traced {
    path: &'static str,
    max_body: usize,
}

/// Traces every MCP request to `router`'s endpoint at `path` (bodies up to `max_body` bytes are
/// read; larger ones are the endpoint's to refuse). Used by the gateway with traces on, and
/// by any Kberg server that wants its requests traced the same way.
pub fn trace_requests(router: Router, path: &'static str, max_body: usize) -> Router {
    router.layer(axum::middleware::from_fn_with_state(
        Traced { path, max_body },
        trace_request,
    ))
}

async fn trace_request(State(t): State<Traced>, req: Request, next: Next) -> Response {
    if req.uri().path() != t.path || req.method() != Method::POST {
        return next.run(req).await;
    }
    let length = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let Some(length) = length.filter(|l| *l <= t.max_body) else {
        return next.run(req).await;
    };
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, length).await {
        Ok(b) => b,
        // Not whole: the endpoint refuses an empty body.
        Err(_) => return next.run(Request::from_parts(parts, Body::empty())).await,
    };
    let Ok(mut message) = serde_json::from_slice::<Value>(&bytes) else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let Some(method) = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
    };
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let span = {
        let params = message.get("params");
        spans::server_span(&McpRequest {
            method: &method,
            target: spans::target_of(&method, params),
            id: message.get("id"),
            session: header("mcp-session-id"),
            protocol: header("mcp-protocol-version").or_else(|| {
                params?
                    .pointer("/_meta/io.modelcontextprotocol~1protocolVersion")?
                    .as_str()
            }),
            meta: params
                .and_then(|p| p.get("_meta"))
                .and_then(Value::as_object),
        })
    };
    // Requests (with an id) carry the server span onward in their `_meta`; a notification
    // has nothing to pass on.
    let is_request = message.get("id").is_some();
    let body = match message.get_mut("params").and_then(Value::as_object_mut) {
        Some(params) if is_request => {
            let meta = params
                .entry("_meta")
                .or_insert_with(|| Value::Object(Default::default()));
            match meta.as_object_mut() {
                Some(meta) => {
                    spans::inject(&span, meta);
                    serde_json::to_vec(&message)
                        .map(Body::from)
                        .unwrap_or_else(|_| Body::from(bytes))
                }
                None => Body::from(bytes),
            }
        }
        _ => Body::from(bytes),
    };
    let mut parts = parts;
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    let resp = {
        use tracing::Instrument;
        next.run(Request::from_parts(parts, body))
            .instrument(span.clone())
            .await
    };
    let status = resp.status();
    if status.is_client_error() || status.is_server_error() {
        spans::fail(&span, status.as_str());
        return resp;
    }
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json && let Some(size) = resp.body().size_hint().exact() {
        let (parts, body) = resp.into_parts();
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        return match axum::body::to_bytes(body, size).await {
            Ok(bytes) => {
                if let Ok(answer) = serde_json::from_slice::<Value>(&bytes) {
                    spans::record_answer(&span, &answer);
                }
                Response::from_parts(parts, Body::from(bytes))
            }
            Err(_) => Response::from_parts(parts, Body::empty()),
        };
    }
    // A streamed answer (2025-11-25 answers a call as an SSE stream): the span lasts until the
    // stream ends, and the SSE parser reads a copy of the stream on the side (the client's
    // bytes pass untouched) to record the answer's event on it.
    let (parts, body) = resp.into_parts();
    let (copy, copies) = futures::channel::mpsc::unbounded::<Bytes>();
    tokio::spawn(record_streamed_answer(span.clone(), copies));
    let body = body.into_data_stream().map(move |chunk| {
        let _open = &span;
        if let Ok(bytes) = &chunk {
            // The reader stops once it has the answer; later copies have nowhere to go.
            let _ = copy.unbounded_send(bytes.clone());
        }
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// Reads a streamed answer's events (`copies`, the stream's bytes as they are sent) with the
/// SSE parser and records the first JSON-RPC response among them (a result or an error, not a
/// notification or a request the server sends meanwhile) on the request's server span.
async fn record_streamed_answer(
    span: tracing::Span,
    copies: futures::channel::mpsc::UnboundedReceiver<Bytes>,
) {
    let mut events = std::pin::pin!(sse_stream::SseStream::from_bytes_stream(
        copies.map(Ok::<_, std::convert::Infallible>)
    ));
    while let Some(Ok(event)) = events.next().await {
        let Some(data) = event.data else { continue };
        let Ok(message) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        if message.get("result").is_some() || message.get("error").is_some() {
            spans::record_answer(&span, &message);
            return;
        }
    }
}
