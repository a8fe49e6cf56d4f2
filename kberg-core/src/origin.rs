//! Who is at the other end of a call, as the transport knows it: the client's self-reported
//! identity ([`ClientInfo`]) and the session it came in on ([`CallOrigin`]). Plain data, kept
//! below both the audit events that record it and the tool context that shows it to tools.

use serde::{Deserialize, Serialize};

/// Who the calling client says it is: MCP `clientInfo` (from `initialize` on a 2025-11-25
/// session, from the request's `_meta` on 2026-07-28). It is self-reported: use it to tailor an
/// answer (say, which agent's rule format to render), never to decide what a caller may do;
/// that is the principal's grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The client's name (`claude-code`, `mcp`, `rmcp`, ...).
    pub name: String,
    /// Its version.
    pub version: String,
    /// A display name, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

impl ClientInfo {
    /// A client called `name` at `version`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            title: None,
        }
    }

    /// Sets the display name.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }
}

/// Where a call came in: the transport session it arrived on and the client's self-reported
/// identity. A transport builds it once per session (once per request on the stateless
/// 2026-07-28 protocol, which has no session and carries `clientInfo` in each request's `_meta`)
/// and shares it by `Arc`, so each call carries it for the cost of a reference count. The gate
/// hands it to the audit sink ([`crate::AuditEvent::origin`]); it is recorded, never trusted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CallOrigin {
    /// The transport session (`Mcp-Session-Id` on a 2025-11-25 session); `None` when the
    /// protocol has none.
    pub session: Option<String>,
    /// Who the client says it is.
    pub client: Option<ClientInfo>,
}

impl CallOrigin {
    /// An origin with this session and client.
    pub fn new(session: Option<String>, client: Option<ClientInfo>) -> Self {
        Self { session, client }
    }
}
