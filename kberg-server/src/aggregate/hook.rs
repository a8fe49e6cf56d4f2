//! A hook on forwarded tool calls: what the calling request's `_meta` passes on, and the span a
//! forwarded call runs in.
//!
//! A gateway in front of other MCP servers often needs the calling request's context to travel
//! with the call it forwards: W3C trace context (`traceparent`, `tracestate` in `params._meta`,
//! as the MCP tracing conventions carry it), a correlation id, a tenant tag. Which keys, and
//! whether they are rewritten on the way (a tracer puts its own client span's id into
//! `traceparent`), is the embedding app's business, so the aggregator does not decide it: it asks
//! a [`ForwardHook`] once per forwarded tool call, merges the keys the hook returns into the
//! forwarded request's `_meta`, runs the call inside the [`tracing::Span`] the hook gives, and
//! tells the hook how the call ended. [`CarryMeta`] is the plain hook that copies named keys
//! unchanged. Without a hook nothing is carried and nothing is added to a call.
//!
//! The hook sees names (namespace, method, the upstream's tool name) and the caller's `_meta`,
//! never the arguments. What it learns of an upstream's error result (its `code`) has the
//! upstream's credentials redacted, so a hook can put it into a span attribute or a log field
//! as it is.

use std::sync::Arc;

use serde_json::{Map, Value};

/// A forwarded tool call, as a [`ForwardHook`] sees it before it is sent.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct OutgoingCall<'a> {
    /// The upstream's namespace.
    pub namespace: &'a str,
    /// The MCP method sent upstream (`tools/call`).
    pub method: &'a str,
    /// The tool's name on the upstream (without the namespace).
    pub tool: &'a str,
    /// The calling request's `_meta`, when it had one.
    pub caller_meta: Option<&'a Map<String, Value>>,
}

/// How a forwarded call ended, as a [`ForwardHook`] learns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForwardOutcome<'a> {
    /// The upstream answered with a tool result that is not an error (for a call the upstream
    /// runs as a task: the task completed with one).
    Answered,
    /// The upstream answered with a tool result flagged `isError` (directly, or as its task's
    /// result); `code` is its structured
    /// content's `code`, when it has one, with the upstream's credentials replaced by
    /// [`REDACTED`](super::REDACTED) (as in everything else the upstream says).
    ToolError {
        /// The result's `structuredContent.code`, if any, its credentials redacted.
        code: Option<&'a str>,
    },
    /// The upstream answered with a JSON-RPC error of this code.
    Refused {
        /// The JSON-RPC error code.
        code: i32,
    },
    /// No usable answer: the aggregator's stable code (`upstream_unavailable`,
    /// `upstream_timeout`, also for a task still unfinished at its time to live,
    /// `upstream_invalid_result`, `upstream_error`, `cancelled`, also for a call the gate
    /// dropped as cancelled, and `tool_failed` for a task that failed or was cancelled on the
    /// upstream, or whose question could not be relayed to the calling client).
    Failed {
        /// The stable code the caller sees.
        code: &'a str,
    },
}

/// Decides what a forwarded tool call carries from its caller (keys of the calling request's
/// `_meta`, such as W3C trace context), and the span it runs in. [`CarryMeta`] is the plain
/// hook that copies named keys unchanged.
pub trait ForwardHook: Send + Sync + 'static {
    /// Called once per forwarded tool call, before it is sent. Keys put into `meta` join the
    /// forwarded request's `_meta` (the aggregator's own keys, such as `progressToken`, are set
    /// after them). The call is sent and awaited inside the returned span
    /// ([`tracing::Span::none`] for none).
    fn outgoing(&self, call: &OutgoingCall<'_>, meta: &mut Map<String, Value>) -> tracing::Span;

    /// Called once the call has ended, with the span [`ForwardHook::outgoing`] returned. A call
    /// the upstream runs as a task ends with the task: the task is followed (its polls, its
    /// questions relayed) inside the span, and the outcome is the task's end, not its creation.
    /// A call dropped before it ended (the gate drops a cancelled call) is told
    /// `Failed { code: "cancelled" }` as it is dropped.
    fn finished(&self, span: &tracing::Span, outcome: ForwardOutcome<'_>) {
        let _ = (span, outcome);
    }
}

/// The hook that copies the named keys of the caller's `_meta` unchanged, and adds no span.
#[derive(Debug, Clone, Default)]
pub struct CarryMeta {
    keys: Arc<[String]>,
}

impl CarryMeta {
    /// Carries these `_meta` keys (`["traceparent", "tracestate"]` for W3C trace context).
    pub fn keys<I, S>(keys: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            keys: keys.into_iter().map(Into::into).collect(),
        }
    }
}

impl ForwardHook for CarryMeta {
    fn outgoing(&self, call: &OutgoingCall<'_>, meta: &mut Map<String, Value>) -> tracing::Span {
        if let Some(from) = call.caller_meta {
            for k in self.keys.iter() {
                if let Some(v) = from.get(k) {
                    meta.insert(k.clone(), v.clone());
                }
            }
        }
        tracing::Span::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn carries_only_the_named_keys() {
        let caller = json!({"traceparent": "00-aa-bb-01", "progressToken": 7, "secret": "x"});
        let call = OutgoingCall {
            namespace: "fs",
            method: "tools/call",
            tool: "read",
            caller_meta: caller.as_object(),
        };
        let mut meta = Map::new();
        let span = CarryMeta::keys(["traceparent", "tracestate"]).outgoing(&call, &mut meta);
        assert!(span.is_none());
        assert_eq!(Value::Object(meta), json!({"traceparent": "00-aa-bb-01"}));
    }
}
