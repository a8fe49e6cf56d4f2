//! One request's view of its client, per protocol generation: whether it is a stateless
//! 2026-07-28 request, its cursor, who the client says it is, and the channel back to the
//! client a tool or prompt asks through (a session peer on 2025-11-25, a round-trip peer
//! answering from `inputResponses` and `requestState` on 2026-07-28), and the
//! `input_required` result built when a handler stopped on a question.

use std::collections::BTreeMap;
use std::sync::Arc;

use kberg_core::ClientPeer;
use rmcp::model::{InputRequests, InputRequiredResult, PaginatedRequestParams, ProtocolVersion};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::Value;

use super::KbergHandler;
use crate::convert;
use crate::peer::{LogFilter, RoundTripPeer, SessionPeer};

/// Where a 2026-07-28 request declares the client's capabilities.
pub(super) const CLIENT_CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// Where a request names its protocol version (2026-07-28 requests always do).
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

/// Where a 2026-07-28 request names its client.
const CLIENT_INFO_META: &str = "io.modelcontextprotocol/clientInfo";

/// Where a 2026-07-28 request asks for log messages from a level up.
const LOG_LEVEL_META: &str = "io.modelcontextprotocol/logLevel";

/// The value of `key` in a small JSON object such as a request's `_meta` or its `clientInfo`.
///
/// `serde_json`'s map (an `IndexMap` here, the workspace keeps key order) hashes the key with
/// SipHash on every lookup, which costs more than comparing it against the handful of keys a
/// `_meta` holds: up to [`SCAN_LIMIT`] entries are scanned in order, a larger map is looked up.
/// Keys are unique, so both find the same entry.
pub(super) fn field<'a>(map: &'a serde_json::Map<String, Value>, key: &str) -> Option<&'a Value> {
    if map.len() > SCAN_LIMIT {
        return map.get(key);
    }
    map.iter().find(|(k, _)| k.as_str() == key).map(|(_, v)| v)
}

/// The largest map [`field`] scans instead of hashing the key.
const SCAN_LIMIT: usize = 12;

/// Whether the request is a stateless 2026-07-28 (or later) one: the version its `_meta`
/// names, else the one its session negotiated. The same answer as
/// `ctx.protocol_version()`, read in place: that decodes (and allocates) the version on each
/// call.
pub(super) fn is_stateless(ctx: &RequestContext<RoleServer>) -> bool {
    let newer = |v: &str| v >= ProtocolVersion::V_2026_07_28.as_str();
    match field(&ctx.meta.0.0, PROTOCOL_VERSION_META).and_then(Value::as_str) {
        Some(v) => newer(v),
        None => ctx
            .peer
            .peer_info()
            .is_some_and(|i| newer(i.protocol_version.as_str())),
    }
}

/// The client a 2026-07-28 request's `_meta` names, read in place: its name and version
/// (strings both, as the schema requires; rmcp has refused a request whose `clientInfo` is
/// malformed before it reaches a handler) and its display title.
fn meta_client_info(ctx: &RequestContext<RoleServer>) -> Option<kberg_core::ClientInfo> {
    let info = field(&ctx.meta.0.0, CLIENT_INFO_META)?.as_object()?;
    let text = |k: &str| field(info, k).and_then(Value::as_str);
    Some(kept_client_info(
        text("name")?.to_string(),
        text("version")?.to_string(),
        text("title").map(str::to_string),
    ))
}

/// The longest client name, version or title kept, in characters.
const MAX_CLIENT_INFO_CHARS: usize = 256;

/// A client's self-reported identity as it is kept: each field cut at
/// [`MAX_CLIENT_INFO_CHARS`]. It is whatever the client sent, shared by every call of a session
/// and recorded with each in the audit log.
fn kept_client_info(
    name: String,
    version: String,
    title: Option<String>,
) -> kberg_core::ClientInfo {
    let cut = |s: String| super::errors::cut(s, MAX_CLIENT_INFO_CHARS);
    let mut client = kberg_core::ClientInfo::new(cut(name), cut(version));
    client.title = title.map(cut);
    client
}

pub(super) fn cursor_of(p: &Option<PaginatedRequestParams>) -> Option<&str> {
    p.as_ref().and_then(|p| p.cursor.as_deref())
}

/// Who the client says it is: the request's `_meta` clientInfo (2026-07-28), else the session's
/// `initialize` (2025-11-25).
pub(super) fn client_info(ctx: &RequestContext<RoleServer>) -> Option<kberg_core::ClientInfo> {
    let i = ctx
        .meta
        .client_info()
        .or_else(|| ctx.peer.peer_info().map(|p| p.client_info.clone()))?;
    Some(kept_client_info(i.name, i.version, i.title))
}

/// The `Mcp-Session-Id` a 2025-11-25 request came with, when it came over HTTP.
fn session_id(ctx: &RequestContext<RoleServer>) -> Option<String> {
    let parts = ctx.extensions.get::<axum::http::request::Parts>()?;
    let id = parts.headers.get("mcp-session-id")?.to_str().ok()?;
    Some(id.to_string())
}

/// A request's client channel, the stateless peer behind it (2026-07-28 only) and the answers
/// the client has given so far.
pub(super) type PeerParts = (
    Arc<dyn ClientPeer>,
    Option<Arc<RoundTripPeer>>,
    BTreeMap<String, Value>,
);

/// Decodes the `requestState` this server issued: the answers of earlier rounds.
pub(super) fn decode_state(state: Option<&str>) -> Result<BTreeMap<String, Value>, McpError> {
    match state {
        None => Ok(BTreeMap::new()),
        Some(s) => serde_json::from_str(s).map_err(|_| {
            McpError::invalid_params("requestState is not one this server issued", None)
        }),
    }
}

impl KbergHandler {
    /// Where a call came in, for the tool and the audit sink. A 2025-11-25 session (or the
    /// stdio connection) builds it once, at its first call, from its `Mcp-Session-Id` and its
    /// `initialize`'s clientInfo, and shares it with every later call; a 2026-07-28 request has
    /// no session, so its origin is only the clientInfo its `_meta` carries (or none at all).
    pub(super) fn call_origin(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Option<Arc<kberg_core::CallOrigin>> {
        if is_stateless(ctx) {
            // Only what the request carries: without `_meta` clientInfo rmcp's stand-in peer
            // info would name rmcp itself, which is no client's claim.
            let client = meta_client_info(ctx)?;
            return Some(Arc::new(kberg_core::CallOrigin::new(None, Some(client))));
        }
        let origin = self.session().origin.get_or_init(|| {
            Arc::new(kberg_core::CallOrigin::new(
                session_id(ctx),
                client_info(ctx),
            ))
        });
        Some(Arc::clone(origin))
    }

    /// The channel back to the client for one request, per protocol generation: on
    /// 2026-07-28 a [`RoundTripPeer`] answering from the request's `inputResponses` and
    /// `requestState` (returned too, with the answers so far, to build an `input_required`
    /// result); on a 2025-11-25 session a [`SessionPeer`] sending server-initiated requests.
    pub(super) fn client_peer(
        &self,
        ctx: &RequestContext<RoleServer>,
        request_state: Option<&str>,
        input_responses: Option<&rmcp::model::InputResponses>,
    ) -> Result<PeerParts, McpError> {
        if !is_stateless(ctx) {
            let peer: Arc<dyn ClientPeer> = Arc::new(SessionPeer {
                peer: ctx.peer.clone(),
                log: Arc::clone(&self.session().log),
                request: ctx.id.clone(),
            });
            return Ok((peer, None, BTreeMap::new()));
        }
        let mut answers = decode_state(request_state)?;
        if let Some(new) = input_responses {
            answers.extend(new.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        // 2026-07-28: log messages only when the request names a level.
        let log =
            LogFilter::requested(field(&ctx.meta.0.0, LOG_LEVEL_META).and_then(Value::as_str));
        let capabilities = match field(&ctx.meta.0.0, CLIENT_CAPABILITIES_META) {
            Some(c) => Some(c.clone()),
            None => ctx
                .peer
                .peer_info()
                .and_then(|i| serde_json::to_value(&i.capabilities).ok()),
        };
        let p = Arc::new(RoundTripPeer::new(
            ctx.peer.clone(),
            capabilities,
            answers.clone(),
            log,
        ));
        let peer: Arc<dyn ClientPeer> = p.clone();
        Ok((peer, Some(p), answers))
    }

    /// An `input_required` result for a handler that stopped on `requests`: every question of
    /// this run (not only the one that stopped it) and the answers so far as `requestState`.
    pub(super) fn input_required(
        round_trip: &RoundTripPeer,
        requests: Value,
        answers: &BTreeMap<String, Value>,
        what: &str,
    ) -> Result<InputRequiredResult, McpError> {
        let pending = round_trip.pending();
        let requests = if pending.is_empty() {
            requests
        } else {
            Value::Object(pending)
        };
        let requests: InputRequests = convert::from_json("the input requests", requests)
            .inspect_err(|_| {
                tracing::warn!(handler = %what, "a handler asked the client something malformed");
            })?;
        let state = serde_json::to_string(answers)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(InputRequiredResult::new(Some(requests), Some(state)))
    }
}

#[cfg(test)]
mod tests {
    use super::{SCAN_LIMIT, field};
    use serde_json::{Map, Value, json};

    fn map(n: usize) -> Map<String, Value> {
        (0..n).map(|i| (format!("key{i}"), json!(i))).collect()
    }

    #[test]
    fn a_scanned_map_and_a_looked_up_one_answer_alike() {
        for n in [0, 1, 5, SCAN_LIMIT, SCAN_LIMIT + 1, 40] {
            let m = map(n);
            for i in 0..n {
                let key = format!("key{i}");
                assert_eq!(field(&m, &key), m.get(&key), "{n} entries, {key}");
                assert_eq!(field(&m, &key), Some(&json!(i)));
            }
            assert_eq!(field(&m, "absent"), None, "{n} entries");
            // A key is matched whole, never by a prefix.
            assert_eq!(field(&m, "key"), None, "{n} entries");
            assert_eq!(field(&m, ""), None, "{n} entries");
        }
    }
}
