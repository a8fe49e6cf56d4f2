//! OpenTelemetry traces of the gateway's MCP traffic, exported over OTLP when configured.
//!
//! Metrics say how much and how fast; a trace says where one call went. An agent's
//! `tools/call` enters the gateway, passes the gate, and is forwarded to an upstream MCP server:
//! with traces on, that is one connected trace of three spans, named and attributed after the
//! OpenTelemetry semantic conventions for MCP:
//!
//! - the gateway's server span (`tools/call gitea__list_repos`, kind server) around each MCP
//!   request on its endpoint ([`http`]), a child of the caller's span when the request's
//!   `params._meta` carries W3C `traceparent` / `tracestate`;
//! - the gateway's client span (`tools/call list_repos`, kind client) around the forwarded call
//!   ([`TraceHook`], the aggregator's [`ForwardHook`](kberg_server::aggregate::ForwardHook)),
//!   whose context travels in the forwarded request's `_meta`;
//! - the upstream's own server span, when the upstream traces too (another Kberg server can put
//!   [`http::trace_requests`] on its router).
//!
//! Attributes are names only: `mcp.method.name`, `gen_ai.tool.name`, `gen_ai.operation.name`,
//! `mcp.session.id`, `mcp.protocol.version`, `jsonrpc.request.id`, `error.type`. Argument values,
//! results and tokens never become attributes, and the spans carry no log events. A method
//! outside MCP's is `_OTHER` in a span's name and `mcp.method.name`, so a client cannot mint
//! a span name per request.
//!
//! Spans are `tracing` spans of target [`TRACE_TARGET`], turned into OpenTelemetry spans by the
//! layer [`Telemetry::layer`] gives a binary's subscriber. With traces off (no `traces:` in
//! `bridle.yaml`, no OTLP endpoint in the environment, or a build without feature `traces`) no
//! span is created, no exporter exists and a request pays nothing; trace context the caller sent
//! is still passed on to upstreams unchanged ([`kberg_server::aggregate::CarryMeta`]).
//! Export runs on the exporter's own thread with a bounded queue: a collector that is down or
//! slow drops spans, never delays a call.

#[cfg(feature = "traces")]
mod export;
#[cfg(feature = "traces")]
pub mod http;
#[cfg(feature = "traces")]
mod propagation;
#[cfg(feature = "traces")]
mod spans;

#[cfg(feature = "traces")]
pub use export::{Telemetry, TelemetryError};
#[cfg(feature = "traces")]
pub use spans::TraceHook;

use serde::{Deserialize, Serialize};

/// The `tracing` target of every span this module creates; a binary's log layer leaves it out
/// ([`crate::logging::log_targets`] does) and the trace layer takes only it.
pub const TRACE_TARGET: &str = "bridle::trace";

/// The `_meta` keys of W3C trace context, passed on to upstreams.
pub const TRACE_META_KEYS: [&str; 2] = ["traceparent", "tracestate"];

/// The default service name spans are exported under.
pub const DEFAULT_SERVICE_NAME: &str = "bridle";

/// The `traces:` section of `bridle.yaml`: where spans go.
///
/// ```yaml
/// traces:
///   otlp:
///     endpoint: http://collector:4318/v1/traces
///     timeout_secs: 10
///   service_name: bridle
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracesSection {
    /// The OTLP collector spans are sent to.
    pub otlp: OtlpSection,
    /// The `service.name` resource attribute (default `bridle`).
    #[serde(default = "default_service_name")]
    pub service_name: String,
}

/// Where and how spans are sent over OTLP (HTTP, protobuf).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpSection {
    /// The full traces URL (`http://collector:4318/v1/traces`).
    pub endpoint: String,
    /// How long one export may take before it is given up (default 10 s).
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
}

fn default_service_name() -> String {
    DEFAULT_SERVICE_NAME.to_string()
}

fn default_timeout_secs() -> u64 {
    10
}

impl TracesSection {
    /// Spans sent to the OTLP traces URL `endpoint`, with the defaults otherwise.
    pub fn otlp(endpoint: impl Into<String>) -> Self {
        Self {
            otlp: OtlpSection {
                endpoint: endpoint.into(),
                timeout_secs: default_timeout_secs(),
            },
            service_name: default_service_name(),
        }
    }

    /// Checks the section as the configuration loader does: an `http://` or `https://` URL, a
    /// timeout of at least a second, a service name.
    pub fn check(&self) -> Result<(), String> {
        let e = &self.otlp.endpoint;
        // Named redacted: an endpoint may carry a collector's credential (`user:key@`,
        // `?api_key=`), with or without a scheme (read as an authority then).
        let shown = match e.contains("://") {
            true => bridle_rules::redact_url(e),
            false => bridle_rules::redact_url(&format!("x://{e}"))
                .trim_start_matches("x://")
                .to_string(),
        };
        let rest = e
            .strip_prefix("http://")
            .or_else(|| e.strip_prefix("https://"))
            .ok_or_else(|| {
                format!("traces.otlp.endpoint `{shown}` is not an http:// or https:// URL")
            })?;
        if rest.is_empty() || rest.starts_with('/') {
            return Err(format!("traces.otlp.endpoint `{shown}` names no host"));
        }
        if self.otlp.timeout_secs == 0 {
            return Err("traces.otlp.timeout_secs must be at least 1".into());
        }
        if self.service_name.trim().is_empty() {
            return Err("traces.service_name must not be empty".into());
        }
        Ok(())
    }
}

/// The traces URL for an OTLP base endpoint as `OTEL_EXPORTER_OTLP_ENDPOINT` gives it
/// (`http://collector:4318` → `http://collector:4318/v1/traces`), after the OTLP exporter
/// specification.
pub fn traces_url_of_base(base: &str) -> String {
    format!("{}/v1/traces", base.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_endpoints_get_the_traces_path() {
        assert_eq!(
            traces_url_of_base("http://c:4318/"),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url_of_base("http://c:4318"),
            "http://c:4318/v1/traces"
        );
    }

    #[test]
    fn bad_sections_are_named() {
        assert!(
            TracesSection::otlp("http://c:4318/v1/traces")
                .check()
                .is_ok()
        );
        assert!(
            TracesSection::otlp("c:4318")
                .check()
                .unwrap_err()
                .contains("not an http")
        );
        assert!(
            TracesSection::otlp("http://")
                .check()
                .unwrap_err()
                .contains("no host")
        );
        let mut s = TracesSection::otlp("http://c");
        s.otlp.timeout_secs = 0;
        assert!(s.check().is_err());
    }

    #[test]
    fn a_refused_endpoint_is_named_without_its_credential() {
        for bad in [
            "ftp://otel:CANARY-otlp-key@collector:4318",
            "collector:4318/v1/traces?api_key=CANARY-otlp-key",
        ] {
            let err = TracesSection::otlp(bad).check().unwrap_err();
            assert!(!err.contains("CANARY"), "{err}");
        }
    }
}
