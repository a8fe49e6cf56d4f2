//! W3C trace context in an MCP request's `params._meta`: read from it, written into it.
//!
//! The MCP conventions carry `traceparent` and `tracestate` as plain string keys of `_meta`;
//! these are the carrier types OpenTelemetry's propagator reads and writes through.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};

struct MetaReader<'a>(&'a Map<String, Value>);

impl Extractor for MetaReader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct MetaWriter<'a>(&'a mut Map<String, Value>);

impl Injector for MetaWriter<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), Value::String(value));
    }
}

/// The remote parent a request's `_meta` names, if it names a valid one.
pub(crate) fn extract(meta: Option<&Map<String, Value>>) -> Option<Context> {
    use opentelemetry::trace::TraceContextExt;
    let meta = meta?;
    let cx = TraceContextPropagator::new().extract(&MetaReader(meta));
    cx.span().span_context().is_valid().then_some(cx)
}

/// Writes `cx`'s span as `traceparent` (and `tracestate`) into `meta`; an invalid context
/// writes nothing.
pub(crate) fn inject(cx: &Context, meta: &mut Map<String, Value>) {
    TraceContextPropagator::new().inject_context(cx, &mut MetaWriter(meta));
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;
    use serde_json::json;

    #[test]
    fn reads_and_writes_traceparent() {
        let meta = json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"});
        let cx = extract(meta.as_object()).expect("valid");
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        let mut out = Map::new();
        inject(&cx, &mut out);
        assert_eq!(Value::Object(out), meta);
    }

    #[test]
    fn junk_is_no_parent() {
        assert!(extract(json!({"traceparent": "nonsense"}).as_object()).is_none());
        assert!(extract(json!({"traceparent": 7}).as_object()).is_none());
        assert!(extract(None).is_none());
    }
}
