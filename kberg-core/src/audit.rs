//! The audit hook: one [`AuditEvent`] for every call that reaches the gate, refused or run.
//!
//! The gate hands each event to an [`AuditSink`]. Sinks must return quickly: the call path
//! waits for `record`, so a sink that writes to disk buffers and flushes on its own schedule.
//! Events never carry argument values, only who called what and how it ended, so no secret a
//! caller passed can leak into the log through this hook.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::ErrorCode;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "code", rename_all = "snake_case")]
pub enum AuditOutcome {
    /// The tool ran and returned a result (which may itself be an error result).
    Ok,
    /// The gate refused the call, or the tool failed or was cancelled.
    Error(ErrorCode),
}

/// One call, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AuditEvent {
    /// When the call reached the gate.
    pub at: SystemTime,
    /// The principal's id.
    pub principal: String,
    /// The principal's agent label, if any.
    pub agent: Option<String>,
    /// The tool name as the caller sent it.
    pub tool: String,
    /// `read`, `write`, or `unknown` when no such tool exists.
    pub kind: &'static str,
    /// The capability of a write tool.
    pub capability: Option<String>,
    /// A deprecated capability id through which the grant was honoured.
    pub via_deprecated: Option<String>,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// Time spent in the gate, tool included.
    pub duration: Duration,
}

/// Where audit events go.
pub trait AuditSink: Send + Sync {
    /// Records one event. Must not block for long.
    fn record(&self, event: &AuditEvent);
}

/// Keeps events in memory; for tests and small apps that show recent calls.
#[derive(Debug, Default)]
pub struct MemoryAuditSink {
    events: Mutex<Vec<AuditEvent>>,
}

impl MemoryAuditSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<AuditEvent> {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl AuditSink for MemoryAuditSink {
    fn record(&self, event: &AuditEvent) {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(event.clone());
    }
}

/// Emits every event as a `tracing` event at INFO (target `kberg::audit`).
#[derive(Debug, Default, Clone, Copy)]
pub struct TracingAuditSink;

impl AuditSink for TracingAuditSink {
    fn record(&self, e: &AuditEvent) {
        let outcome = match e.outcome {
            AuditOutcome::Ok => "ok",
            AuditOutcome::Error(c) => c.as_str(),
        };
        tracing::info!(
            target: "kberg::audit",
            principal = %e.principal,
            tool = %e.tool,
            kind = e.kind,
            capability = e.capability.as_deref().unwrap_or(""),
            outcome,
            duration_us = e.duration.as_micros() as u64,
            "tool call"
        );
    }
}
