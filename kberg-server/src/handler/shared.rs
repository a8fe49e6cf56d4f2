//! What every handler of one transport shares: the app, the server description it answers
//! `initialize` and `server/discover` with, the per-principal call counter, the principal of a
//! transport without per-request credentials, and the cache of tool descriptions rmcp asks for
//! to check `Mcp-Param-*` headers. Built once per HTTP server or stdio connection.
//!
//! rmcp asks for a tool's description ([`HeaderSchemas::get`]) before the request reaches a
//! handler, without the request. With an app's [`kberg_core::ToolVisibility`] the answer
//! depends on who asks, so the HTTP layer runs each authenticated request inside
//! [`REQUEST_PRINCIPAL`], and a tool hidden from that principal has no description: rmcp skips
//! its header check, and the call answers as for an unknown tool, revealing nothing.

use std::sync::Arc;

use kberg_core::Principal;
use rmcp::ErrorData as McpError;
use rmcp::model::{ProtocolVersion, ServerConfig, TASKS_EXTENSION_ID};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::session::ListChangedFanout;
use crate::app::McpApp;
use crate::convert;
use crate::limits::CallCounter;

/// The principal of an authenticated HTTP request, as the auth layer leaves it in the request's
/// extensions.
#[derive(Debug, Clone)]
pub(crate) struct Authenticated(pub(crate) Arc<Principal>);

tokio::task_local! {
    /// The principal of the HTTP request being served, for the lookups rmcp makes without the
    /// request ([`HeaderSchemas::get`]). Set by the HTTP layer around the whole request.
    pub(crate) static REQUEST_PRINCIPAL: Arc<Principal>;
}

/// Tool descriptions rmcp asks for on every 2026-07-28 `tools/call` (to check `Mcp-Param-*`
/// headers against `x-mcp-header` annotations). Only tools whose schema has such annotations
/// need one; for the rest the answer is "none", which lets rmcp skip the check. Cached per
/// registry version so the hot path neither clones nor converts a schema.
pub(crate) struct HeaderSchemas {
    pub(super) version: tokio::sync::watch::Receiver<u64>,
    pub(super) cache: std::sync::RwLock<(
        u64,
        std::collections::HashMap<String, Option<rmcp::model::Tool>>,
    )>,
}

/// Whether a schema declares an `x-mcp-header` anywhere.
pub(super) fn mentions_header(v: &Value) -> bool {
    match v {
        Value::Object(o) => o
            .iter()
            .any(|(k, v)| k == "x-mcp-header" || mentions_header(v)),
        Value::Array(a) => a.iter().any(mentions_header),
        _ => false,
    }
}

impl HeaderSchemas {
    pub(super) fn new(app: &McpApp) -> Self {
        Self {
            version: app.tools().changes(),
            cache: std::sync::RwLock::new((u64::MAX, std::collections::HashMap::new())),
        }
    }

    pub(super) fn get(&self, app: &McpApp, name: &str) -> Option<rmcp::model::Tool> {
        let version = *self.version.borrow();
        {
            let c = self.cache.read().unwrap_or_else(|p| p.into_inner());
            if c.0 == version
                && let Some(t) = c.1.get(name)
            {
                return t.clone().filter(|_| Self::visible(app, name));
            }
        }
        // Unknown names are not cached (the map stays bounded by the registry).
        let spec = app.tools().spec(name)?;
        let tool = mentions_header(&spec.input_schema).then(|| convert::tool(&spec));
        let mut c = self.cache.write().unwrap_or_else(|p| p.into_inner());
        if c.0 != version {
            c.0 = version;
            c.1.clear();
        }
        c.1.insert(name.to_string(), tool.clone());
        drop(c);
        tool.filter(|_| Self::visible(app, name))
    }

    /// Whether the principal of the request being served may know of `name`. A lookup outside
    /// any request (no principal) is refused, so a hidden tool can never be described. rmcp
    /// looks a tool up in its HTTP service, outside the handler: an app visibility that panics
    /// there would drop the connection, so it counts as hidden here, and the call goes on to
    /// the handler, where the same visibility is asked again and its panic answered (and
    /// logged) as every other request's is.
    fn visible(app: &McpApp, name: &str) -> bool {
        REQUEST_PRINCIPAL
            .try_with(|p| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    app.tools()
                        .visible_to(name, &kberg_core::Caller::new(Arc::clone(p)))
                }))
                .unwrap_or(false)
            })
            .unwrap_or(false)
    }
}

/// State shared by every handler of one transport (an HTTP server or a stdio connection).
pub(crate) struct TransportContext {
    pub(crate) app: McpApp,
    pub(crate) header_schemas: HeaderSchemas,
    pub(crate) info: ServerConfig,
    pub(crate) calls: CallCounter,
    /// The principal of a transport without per-request credentials (stdio).
    pub(crate) fixed_principal: Option<Arc<Principal>>,
    pub(crate) shutdown: CancellationToken,
    /// The sessions told about registry changes, and the one task that tells them.
    pub(crate) list_changed: Arc<ListChangedFanout>,
}

impl TransportContext {
    pub(crate) fn new(
        app: McpApp,
        max_calls_per_principal: usize,
        fixed_principal: Option<Arc<Principal>>,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, McpError> {
        let inner = &app.inner;
        let mut server_info = json!({"name": inner.name, "version": inner.version});
        if let Some(t) = &inner.title {
            server_info["title"] = json!(t);
        }
        let mut info = json!({
            "protocolVersion": ProtocolVersion::LATEST,
            "capabilities": {
                "tools": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "completions": {},
                "logging": {},
                "extensions": {TASKS_EXTENSION_ID: {}},
            },
            "serverInfo": server_info,
        });
        if let Some(i) = &inner.instructions {
            info["instructions"] = json!(i);
        }
        let info: ServerConfig = convert::from_json("the server description", info)?;
        Ok(Arc::new(Self {
            header_schemas: HeaderSchemas::new(&app),
            app,
            info,
            calls: CallCounter::new(max_calls_per_principal),
            fixed_principal,
            shutdown,
            list_changed: ListChangedFanout::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_annotated_schemas_need_header_checks() {
        assert!(!mentions_header(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}})
        ));
        assert!(mentions_header(&json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"}}})));
        assert!(mentions_header(
            &json!({"anyOf": [{"properties": {"x": {"x-mcp-header": "X"}}}]})
        ));
    }
}
