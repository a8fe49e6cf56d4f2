//! The log as kberg-core's [`AuditSink`]: every call the gate sees becomes an `agent`-source
//! `tool_call` entry, queued without waiting.
//!
//! The gate's [`AuditEvent`] names the principal (the agent), its agent label (the agent type),
//! the tool, its kind and capability, the outcome code, the duration and the scope (recorded as
//! the project). Its argument digest is kept (SHA-256 of the arguments after the tool's
//! sensitive fields are redacted); argument values never reach the sink. The event's origin
//! (filled by kberg-server) gives the session and the client's self-reported name and version:
//! on 2025-11-25 the `Mcp-Session-Id` and the `initialize`'s clientInfo; on 2026-07-28, which
//! has no session, no session and the clientInfo the request's `_meta` carries, if any.

use kberg_core::{AuditEvent, AuditOutcome, AuditSink, CallPhase};

use super::AuditLog;
use super::entry::{Change, Entry, Outcome};

/// The entry a gate event becomes.
pub(crate) fn entry_of(event: &AuditEvent) -> Entry {
    let outcome = match event.outcome {
        AuditOutcome::Ok => Outcome::Ok,
        AuditOutcome::Error(code) => Outcome::error(code.as_str()),
    };
    let mut entry = Entry::tool_call(
        event.principal.as_str(),
        event.tool.as_str(),
        event.kind,
        event.capability.clone(),
        outcome,
        event.duration,
    );
    if let Some(t) = &event.agent {
        entry = entry.agent_type(t.as_str());
    }
    if let Some(origin) = &event.origin {
        if let Some(s) = &origin.session {
            entry = entry.session(s.as_str());
        }
        if let Some(c) = &origin.client {
            entry = entry.client(c.name.as_str(), Some(c.version.clone()));
        }
    }
    if let Some(scope) = &event.scope {
        entry = entry.project(scope.as_str());
    }
    if let Some(d) = &event.args_digest {
        entry = entry.change(Change::digest(d.as_str()));
    }
    let mut notes = Vec::new();
    if event.phase != CallPhase::Direct {
        notes.push(format!("phase {}", event.phase.as_str()));
    }
    if let Some(t) = &event.ticket {
        notes.push(format!("ticket {t}"));
    }
    if let Some(a) = &event.approved_by {
        notes.push(format!("approved by {a}"));
    }
    if let Some(c) = &event.commit_token {
        notes.push(format!("commit token {c}"));
    }
    if let Some(d) = &event.via_deprecated {
        notes.push(format!("granted via deprecated capability {d}"));
    }
    if !notes.is_empty() {
        entry = entry.detail(notes.join(", "));
    }
    entry
}

impl AuditSink for AuditLog {
    fn record(&self, event: &AuditEvent) {
        // A full queue is counted and reported by the log; the call goes on.
        let _ = self.enqueue_at(entry_of(event), event.at);
    }
}
