//! The log as the gateway's record: the [`GatewayContext`] holds one [`AuditLog`], and every
//! part of the gateway that changes something (the admin API, the agents' proposal and scope
//! tools, the command line) records through [`GatewayContext::record_change`], so each change
//! carries its source (`user`, `agent`, `vendor`, `system`) in one chain.
//!
//! A change is recorded right after it is committed to its own store (the rules store, the
//! vault); when the entry cannot be written, the caller hears [`AuditError`] and must say so
//! (the admin API answers 500 `audit_unavailable`, naming the change as made).

use std::sync::Arc;

use kberg_core::AuditSink;

use super::{AuditError, AuditLog, Entry};
use crate::context::GatewayContext;

impl GatewayContext {
    /// Makes `log` the gateway's audit log (the first call wins; later ones return `false`).
    /// Set it before the MCP app is built so tool calls reach it.
    pub fn set_audit(&self, log: AuditLog) -> bool {
        self.audit.set(log).is_ok()
    }

    /// The audit log, when one is set.
    pub fn audit(&self) -> Option<&AuditLog> {
        self.audit.get()
    }

    /// Records a change synchronously; returns its entry id (`None` without a log). A failed
    /// write is logged and returned.
    pub fn record_change(&self, entry: Entry) -> Result<Option<u64>, AuditError> {
        let Some(log) = self.audit.get() else {
            tracing::debug!(kind = %entry.kind(), "no audit log: change not recorded");
            return Ok(None);
        };
        match log.record(entry) {
            Ok(id) => Ok(Some(id)),
            Err(e) => {
                tracing::error!(error = %e, code = e.code(), "an audit entry could not be written");
                Err(e)
            }
        }
    }

    /// The sink tool calls go to: the audit log when set, else log lines only.
    pub fn tool_call_sink(&self) -> Arc<dyn AuditSink> {
        match self.audit.get() {
            Some(log) => Arc::new(log.clone()),
            None => Arc::new(kberg_core::TracingAuditSink),
        }
    }
}

/// An `agent`-source entry for an agent's change (a proposal, a scope request): its name and
/// type, the session it named and the client it connected with (recorded, never trusted).
pub fn agent_entry(
    agent: &str,
    agent_type: &str,
    session: Option<&str>,
    client: Option<&kberg_core::ClientInfo>,
    kind: super::Kind,
) -> Entry {
    let mut e = Entry::agent(agent, kind).agent_type(agent_type);
    if let Some(s) = session {
        e = e.session(s);
    }
    if let Some(c) = client {
        e = e.client(c.name.clone(), Some(c.version.clone()));
    }
    e
}
