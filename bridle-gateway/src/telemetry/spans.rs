//! The spans: one per MCP request on a traced endpoint (server), one per forwarded tool call
//! (client), with the semantic conventions' names and attributes.

use kberg_core::check_name;
use kberg_server::aggregate::{ForwardHook, ForwardOutcome, OutgoingCall};
use opentelemetry::trace::Status;
use serde_json::{Map, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{TRACE_META_KEYS, TRACE_TARGET, propagation};

/// What a server span is made from: the request's method and target, and what the transport
/// knows about its session.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct McpRequest<'a> {
    pub method: &'a str,
    /// The tool (`tools/call`) or prompt (`prompts/get`) named, when it is a valid name.
    pub target: Option<&'a str>,
    pub id: Option<&'a Value>,
    pub session: Option<&'a str>,
    pub protocol: Option<&'a str>,
    pub meta: Option<&'a Map<String, Value>>,
}

/// A method's target as a span name part: only a well-formed tool or prompt name (whatever a
/// client sends is not copied into a span).
pub(crate) fn target_of<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a str> {
    if !matches!(method, "tools/call" | "prompts/get") {
        return None;
    }
    let name = params?.get("name")?.as_str()?;
    check_name(name).is_ok().then_some(name)
}

/// A method as a span shows it (its name and `mcp.method.name`): an MCP method, or `_OTHER`,
/// the conventions' word for a method outside the known set, so a client cannot mint a new
/// span name with each request.
fn method_shown(method: &str) -> &str {
    if crate::ops::metrics::is_mcp_method(method) {
        method
    } else {
        "_OTHER"
    }
}

fn span_name(method: &str, target: Option<&str>) -> String {
    let method = method_shown(method);
    match target {
        Some(t) => format!("{method} {t}"),
        None => method.to_string(),
    }
}

/// The attributes both kinds share, set on `span`.
fn common(span: &tracing::Span, method: &str, target: Option<&str>) {
    span.set_attribute("mcp.method.name", method_shown(method).to_string());
    match (method, target) {
        ("tools/call", Some(t)) => {
            span.set_attribute("gen_ai.tool.name", t.to_string());
            span.set_attribute("gen_ai.operation.name", "execute_tool");
        }
        ("prompts/get", Some(t)) => span.set_attribute("gen_ai.prompt.name", t.to_string()),
        _ => {}
    }
}

/// The server span of one MCP request, a child of the span its `_meta` names (or a root).
pub(crate) fn server_span(r: &McpRequest<'_>) -> tracing::Span {
    let span = tracing::info_span!(
        target: TRACE_TARGET,
        "mcp.server",
        otel.name = %span_name(r.method, r.target),
        otel.kind = "server",
    );
    if let Some(parent) = propagation::extract(r.meta) {
        let _ = span.set_parent(parent);
    }
    common(&span, r.method, r.target);
    if let Some(id) = r.id {
        let id = match id {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        span.set_attribute("jsonrpc.request.id", id);
    }
    if let Some(s) = r.session {
        span.set_attribute("mcp.session.id", s.to_string());
    }
    if let Some(v) = r.protocol {
        span.set_attribute("mcp.protocol.version", v.to_string());
    }
    span.set_attribute("network.transport", "tcp");
    span.set_attribute("network.protocol.name", "http");
    span
}

/// Writes `span`'s context into `meta` as `traceparent` / `tracestate`, replacing the caller's.
pub(crate) fn inject(span: &tracing::Span, meta: &mut Map<String, Value>) {
    for k in TRACE_META_KEYS {
        meta.remove(k);
    }
    propagation::inject(&span.context(), meta);
}

/// Marks `span` failed with `error_type` (the conventions' `error.type`).
pub(crate) fn fail(span: &tracing::Span, error_type: &str) {
    span.set_attribute("error.type", error_type.to_string());
    span.set_status(Status::error(error_type.to_string()));
}

/// Records a JSON-RPC answer on the request's server span: a JSON-RPC error (its code as
/// `error.type` and `rpc.response.status_code`), or a tool result flagged `isError` (its
/// refusal `code`, else `tool_error`).
pub(crate) fn record_answer(span: &tracing::Span, answer: &Value) {
    if let Some(code) = answer.pointer("/error/code").and_then(Value::as_i64) {
        span.set_attribute("rpc.response.status_code", code.to_string());
        fail(span, &code.to_string());
    } else if answer.pointer("/result/isError") == Some(&Value::Bool(true)) {
        let code = answer
            .pointer("/result/structuredContent/code")
            .and_then(Value::as_str)
            .filter(|c| check_name(c).is_ok())
            .unwrap_or("tool_error");
        fail(span, code);
    }
}

/// The aggregator hook with traces on: each forwarded tool call runs in a client span, a child
/// of the span its caller's `_meta` names (the gateway's server span, put there by
/// [`super::http`]), and the forwarded request's `_meta` names the client span.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceHook;

impl ForwardHook for TraceHook {
    fn outgoing(&self, call: &OutgoingCall<'_>, meta: &mut Map<String, Value>) -> tracing::Span {
        let target = check_name(call.tool).is_ok().then_some(call.tool);
        let span = tracing::info_span!(
            target: TRACE_TARGET,
            "mcp.client",
            otel.name = %span_name(call.method, target),
            otel.kind = "client",
        );
        if let Some(parent) = propagation::extract(call.caller_meta) {
            let _ = span.set_parent(parent);
        }
        common(&span, call.method, target);
        span.set_attribute("bridle.upstream", call.namespace.to_string());
        inject(&span, meta);
        span
    }

    fn finished(&self, span: &tracing::Span, outcome: ForwardOutcome<'_>) {
        match outcome {
            ForwardOutcome::ToolError { code } => fail(
                span,
                code.filter(|c| check_name(c).is_ok())
                    .unwrap_or("tool_error"),
            ),
            ForwardOutcome::Refused { code } => {
                span.set_attribute("rpc.response.status_code", code.to_string());
                fail(span, &code.to_string());
            }
            ForwardOutcome::Failed { code } => fail(span, code),
            _ => {}
        }
    }
}
