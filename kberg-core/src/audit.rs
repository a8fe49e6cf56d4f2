//! The audit hook: one [`AuditEvent`] for every call that reaches the gate, refused or run.
//!
//! The gate hands each event to an [`AuditSink`]. Sinks must return quickly: the call path
//! waits for `record`, so a sink that writes to disk buffers and flushes on its own schedule.
//! Events never carry argument values, only who called what and how it ended, so no secret a
//! caller passed can leak into the log through this hook. They carry an argument *digest*
//! instead (SHA-256 of the canonical arguments after the tool's sensitive fields are redacted),
//! which proves what was asked without revealing it. [`crate::JsonlAuditSink`] and (feature
//! `sqlite`) `SqliteAuditSink` write events to disk off the call path.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::ErrorCode;
use crate::origin::CallOrigin;
use crate::preview::CallPhase;

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
    /// The tool name as the caller sent it; one longer than any tool's name may be (128 bytes)
    /// is cut there and marked with `...`.
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
    /// SHA-256 (hex) of the canonical arguments after redacting the tool's sensitive fields;
    /// `None` for a call refused before its arguments were looked at (unknown tool, refusal).
    pub args_digest: Option<String>,
    /// The confirm ticket, when the call filed one or runs because one was approved.
    pub ticket: Option<String>,
    /// Who approved the ticket this call runs under.
    pub approved_by: Option<String>,
    /// A fingerprint (`ct:` + 16 hex digits of its SHA-256) of the commit token issued by a
    /// preview or redeemed by a commit; the token itself is never logged.
    pub commit_token: Option<String>,
    /// The phase the tool ran in (direct, preview, commit).
    pub phase: CallPhase,
    /// The scope the call worked in.
    pub scope: Option<String>,
    /// The session and client the call came in on, when the transport named them (shared
    /// with the session, not copied per call).
    pub origin: Option<Arc<CallOrigin>>,
}

impl AuditEvent {
    /// The event as one flat JSON object: the record format of the audit log sinks.
    /// `at_ms` is milliseconds since the Unix epoch, `duration_us` microseconds; `outcome` is
    /// `ok` or `error` with `code` set for errors; absent optional fields are `null`.
    pub fn to_record(&self) -> serde_json::Value {
        let at_ms = self
            .at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let (outcome, code) = match self.outcome {
            AuditOutcome::Ok => ("ok", None),
            AuditOutcome::Error(c) => ("error", Some(c.as_str())),
        };
        serde_json::json!({
            "at_ms": at_ms,
            "principal": self.principal,
            "agent": self.agent,
            "tool": self.tool,
            "kind": self.kind,
            "capability": self.capability,
            "via_deprecated": self.via_deprecated,
            "outcome": outcome,
            "code": code,
            "duration_us": self.duration.as_micros() as u64,
            "args_digest": self.args_digest,
            "ticket": self.ticket,
            "approved_by": self.approved_by,
            "commit_token": self.commit_token,
            "phase": self.phase.as_str(),
            "scope": self.scope,
            "session": self.origin.as_ref().and_then(|o| o.session.as_deref()),
            "client": self.origin.as_ref().and_then(|o| o.client.as_ref()),
        })
    }
}

/// Where audit events go. A sink that panics is logged and the event lost; the call it records
/// is answered as it would have been (it has already run, or been refused).
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
