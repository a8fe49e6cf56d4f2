//! The tracer provider and its exporter: OTLP over HTTP/protobuf for a deployment, any
//! [`SpanExporter`] (the SDK's in-memory one in tests) for an embedder.
//!
//! OTLP export goes through a batch processor: spans wait in a bounded queue and are sent from
//! the processor's own thread with the tree's reqwest (its blocking client), so a collector that
//! is down, slow or refusing costs a call nothing; spans it cannot take are dropped and the
//! OpenTelemetry SDK says so in its own diagnostics.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter, Tracer};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;

use super::{TRACE_TARGET, TracesSection};

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The `traces:` section is not usable. Code `traces_invalid`.
    #[error("traces_invalid: {0}")]
    Invalid(String),
    /// The OTLP exporter could not be built. Code `traces_exporter`.
    #[error("traces_exporter: the OTLP exporter could not be built: {0}")]
    Exporter(String),
}

impl TelemetryError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            TelemetryError::Invalid(_) => "traces_invalid",
            TelemetryError::Exporter(_) => "traces_exporter",
        }
    }
}

/// Traces on: the tracer provider whose spans the [`Telemetry::layer`] feeds. Cloning shares
/// it. [`Telemetry::shutdown`] sends what is still queued.
#[derive(Debug, Clone)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: Tracer,
}

impl Telemetry {
    /// Spans exported over OTLP (HTTP, protobuf) as `section` says, through a batch processor.
    /// Builds no connection: a collector that is not there yet is no error.
    pub fn otlp(section: &TracesSection) -> Result<Self, TelemetryError> {
        use opentelemetry_otlp::WithExportConfig;
        section.check().map_err(TelemetryError::Invalid)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(section.otlp.endpoint.clone())
            .with_timeout(Duration::from_secs(section.otlp.timeout_secs))
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource(&section.service_name))
            .build();
        Ok(Self::from_provider(provider))
    }

    /// Spans handed to `exporter` one by one as they end (the SDK's in-memory exporter in
    /// tests, or an embedder's own), under `service_name`.
    pub fn with_exporter<E: SpanExporter + 'static>(exporter: E, service_name: &str) -> Self {
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter)
            .with_resource(resource(service_name))
            .build();
        Self::from_provider(provider)
    }

    fn from_provider(provider: SdkTracerProvider) -> Self {
        let tracer = provider.tracer("bridle-gateway");
        Self { provider, tracer }
    }

    /// The `tracing` layer that turns the gateway's spans (target [`TRACE_TARGET`], and nothing
    /// else: no log event, no other crate's span) into OpenTelemetry spans.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + 'static
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_tracked_inactivity(false)
            .with_filter(filter_fn(|m| m.is_span() && m.target() == TRACE_TARGET))
    }

    /// Sends the spans still queued now.
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!(error = %e, "queued spans could not be exported");
        }
    }

    /// Sends what is still queued and stops the exporter.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "the trace exporter did not shut down cleanly");
        }
    }
}

fn resource(service_name: &str) -> Resource {
    Resource::builder_empty()
        .with_service_name(service_name.to_string())
        .build()
}
