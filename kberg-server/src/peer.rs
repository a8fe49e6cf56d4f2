//! kberg-core's [`ClientPeer`] on the wire, once per protocol generation.
//!
//! A tool talks to its client through `ToolContext` (progress, log, elicitation, sampling,
//! roots) without knowing which generation the client speaks. The two generations differ in
//! how a server *asks* the client something:
//!
//! - 2025-11-25 and earlier ([`SessionPeer`]): a server-initiated JSON-RPC request on the
//!   session; the tool waits for the answer. If the call is cancelled while waiting, the
//!   server cancels its own request (`notifications/cancelled` to the client).
//! - 2026-07-28 ([`RoundTripPeer`]): server-initiated requests are gone. The n-th question a tool
//!   asks gets the key `kberg.n`; if the client's re-sent call already carries an answer under
//!   that key (in `inputResponses`, or in the `requestState` of an earlier round), the answer
//!   is returned; otherwise the tool stops with `PeerError::InputRequired` and the server
//!   answers the call with an `input_required` result. Tools are re-run from the start, so a
//!   tool asks its questions in a deterministic order. A tool may name a question itself (the
//!   `kberg/inputKey` entry of the request's `_meta`, see [`crate::input`]) and may ask several
//!   at once: every question asked during one run is collected and returned together.
//!
//! Notifications (progress, log messages) go out on the request's own response stream in both
//! generations: on a session, a log message is marked with the id of the request whose tool
//! sent it, and the session's stream routing follows the mark while that request is in flight
//! (after it, on the session's standalone stream).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kberg_core::{ClientPeer, PeerError, RateBudget, SpawnOnDrop};
use rmcp::model::{GetExtensions, RequestId, ServerNotification, ServerRequest};
use rmcp::service::{OriginatingRequestId, PeerRequestOptions, RequestHandle};
use rmcp::{Peer, RoleServer, ServiceError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// MCP log levels, lowest first.
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// Above every level: no log message passes.
const OFF: u8 = 8;

/// The `_meta` entry of a request's params in which a tool names its question.
pub(crate) const INPUT_KEY_META: &str = "kberg/inputKey";

/// The client capability a server-to-client method needs.
pub(crate) fn capability_of(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Removes the key hint from a request's params; returns it.
pub(crate) fn take_input_key(params: &mut Value) -> Option<String> {
    let meta = params.get_mut("_meta")?.as_object_mut()?;
    let key = meta.remove(INPUT_KEY_META)?;
    if meta.is_empty()
        && let Some(obj) = params.as_object_mut()
    {
        obj.remove("_meta");
    }
    key.as_str().map(str::to_string)
}

/// The rank of a level name; unknown names rank as `info`.
pub(crate) fn level_rank(level: &str) -> u8 {
    LEVELS
        .iter()
        .position(|l| l.eq_ignore_ascii_case(level))
        .unwrap_or(1) as u8
}

/// Which log messages (`notifications/message`) reach one client: those at or above its
/// minimum level (`logging/setLevel` on a session, the request's `logLevel` on 2026-07-28), at
/// a bounded rate ([`kberg_core::LOG_MESSAGE_BURST`] at once, then one per
/// [`kberg_core::LOG_MESSAGE_INTERVAL`]), as MCP asks of a server. Shared by every call of a
/// session, so the bound holds for the session's calls together; a 2026-07-28 request has its
/// own. A message over the bound is left out, not queued.
#[derive(Debug)]
pub(crate) struct LogFilter {
    level: AtomicU8,
    rate: Mutex<RateBudget>,
}

impl LogFilter {
    fn with_rank(rank: u8) -> Self {
        Self {
            level: AtomicU8::new(rank),
            rate: Mutex::new(RateBudget::log()),
        }
    }

    pub(crate) fn new(level: &str) -> Self {
        Self::with_rank(level_rank(level))
    }

    /// No log message passes (2026-07-28 requests that carry no `logLevel`).
    pub(crate) fn off() -> Self {
        Self::with_rank(OFF)
    }

    /// The filter a 2026-07-28 request's `_meta` `logLevel` asks for: one of the schema's
    /// levels, spelled as the schema spells them; anything else (or none) asks for no log
    /// messages at all.
    pub(crate) fn requested(level: Option<&str>) -> Self {
        match level.and_then(|l| LEVELS.iter().position(|known| *known == l)) {
            Some(rank) => Self::with_rank(rank as u8),
            None => Self::off(),
        }
    }

    pub(crate) fn set(&self, level: &str) {
        self.level.store(level_rank(level), Ordering::Relaxed);
    }

    /// Whether a message's level is at or above the minimum.
    fn allows(&self, params: &Value) -> bool {
        let level = params
            .get("level")
            .and_then(Value::as_str)
            .unwrap_or("info");
        level_rank(level) >= self.level.load(Ordering::Relaxed)
    }

    /// Whether a message goes out: its level is allowed and the rate bound has room (which it
    /// then takes).
    fn passes(&self, params: &Value) -> bool {
        if !self.allows(params) {
            return false;
        }
        let sent = self
            .rate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take(tokio::time::Instant::now());
        if !sent {
            tracing::trace!("a log message over the rate bound was not sent");
        }
        sent
    }
}

/// Whether declared capabilities (their JSON form) include `capability`.
fn supports(caps: Option<&Value>, capability: &str) -> bool {
    caps.and_then(|c| c.get(capability))
        .is_some_and(|c| !c.is_null())
}

fn service_error(e: ServiceError) -> PeerError {
    match e {
        ServiceError::McpError(e) => PeerError::Rejected {
            code: i64::from(e.code.0),
            message: e.message.to_string(),
        },
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => PeerError::Disconnected,
        ServiceError::Cancelled { .. } => PeerError::Cancelled,
        other => PeerError::Malformed(other.to_string()),
    }
}

async fn send_notification(
    peer: &Peer<RoleServer>,
    method: &str,
    params: Value,
) -> Result<(), PeerError> {
    send_related_notification(peer, method, params, None).await
}

/// Sends a notification; one `related` to a request is marked with that request's id
/// (`OriginatingRequestId`, never on the wire), which the session's stream routing reads to send
/// it on that request's response stream while the request is in flight.
async fn send_related_notification(
    peer: &Peer<RoleServer>,
    method: &str,
    params: Value,
    related: Option<&RequestId>,
) -> Result<(), PeerError> {
    let mut n: ServerNotification =
        serde_json::from_value(json!({"method": method, "params": params}))
            .map_err(|e| PeerError::Malformed(format!("notification `{method}`: {e}")))?;
    if let Some(id) = related {
        n.extensions_mut().insert(OriginatingRequestId(id.clone()));
    }
    peer.send_notification(n).await.map_err(service_error)
}

/// The client channel of a call on a 2025-11-25 (or older) session, or over stdio. The
/// client's capabilities are those it declared at `initialize`, read only when a tool asks.
pub(crate) struct SessionPeer {
    pub(crate) peer: Peer<RoleServer>,
    pub(crate) log: Arc<LogFilter>,
    /// The request the call answers: what the tool sends (its log messages too) goes on that
    /// request's response stream while it is in flight, as the official SDKs send it.
    pub(crate) request: RequestId,
}

#[async_trait]
impl ClientPeer for SessionPeer {
    async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError> {
        if method == "notifications/message" && !self.log.passes(&params) {
            return Ok(());
        }
        // Progress is routed by its token already; marking it would only cost an allocation
        // per report.
        let related = (method != "notifications/progress").then_some(&self.request);
        send_related_notification(&self.peer, method, params, related).await
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        let mut params = params;
        take_input_key(&mut params);
        if let Some(cap) = capability_of(method)
            && !self.supports(cap)
        {
            return Err(PeerError::NotSupported(cap.to_string()));
        }
        let mut request: ServerRequest =
            serde_json::from_value(json!({"method": method, "params": params}))
                .map_err(|e| PeerError::Malformed(format!("request `{method}`: {e}")))?;
        // The request belongs on the stream of the call it is made for. rmcp marks an outgoing
        // request with the request its sending task is handling, replacing any mark: inside the
        // aggregator's relay that is the *upstream's* request, whose id means nothing among this
        // client's (the question went to the wrong stream, or to none the client reads). So it
        // is marked here and sent from a task of its own, where rmcp has no request to mark it
        // with.
        request
            .extensions_mut()
            .insert(OriginatingRequestId(self.request.clone()));
        let peer = self.peer.clone();
        let handle: RequestHandle<RoleServer> = tokio::spawn(async move {
            peer.send_request_with_option(request, PeerRequestOptions::no_options())
                .await
        })
        .await
        .map_err(|_| PeerError::Disconnected)?
        .map_err(service_error)?;
        // If this future is dropped or cancelled before the client answers (the tool call was
        // cancelled), tell the client to stop working on what we asked.
        let mut guard = {
            let peer = self.peer.clone();
            let id = serde_json::to_value(&handle.id).unwrap_or(Value::Null);
            SpawnOnDrop::new(async move {
                let params =
                    json!({"requestId": id, "reason": "the tool call that asked was cancelled"});
                if let Err(e) = send_notification(&peer, "notifications/cancelled", params).await {
                    tracing::debug!(error = %e, "could not cancel a request to the client");
                }
            })
        };
        let outcome = tokio::select! {
            r = handle.await_response() => r,
            () = cancel.cancelled() => return Err(PeerError::Cancelled),
        };
        guard.disarm();
        let result = outcome.map_err(service_error)?;
        serde_json::to_value(result).map_err(|e| PeerError::Malformed(e.to_string()))
    }

    fn supports(&self, capability: &str) -> bool {
        let declared = self
            .peer
            .peer_info()
            .and_then(|i| serde_json::to_value(&i.capabilities).ok());
        supports(declared.as_ref(), capability)
    }
}

/// Answers a tool's questions from the re-sent call (2026-07-28 multi-round-trip requests).
pub(crate) struct RoundTripPeer {
    pub(crate) peer: Peer<RoleServer>,
    /// The capabilities the request declared, as JSON (read only when a tool asks).
    pub(crate) capabilities: Option<Value>,
    /// Every answer known so far: earlier rounds (from `requestState`) and this one.
    pub(crate) answers: BTreeMap<String, Value>,
    pub(crate) asked: AtomicUsize,
    /// This request's own threshold (its `_meta` `logLevel`), shared with nothing.
    pub(crate) log: LogFilter,
    /// Questions asked during this run that have no answer yet, by key.
    pub(crate) pending: Mutex<serde_json::Map<String, Value>>,
    /// A capability the tool needed and the client did not declare.
    pub(crate) missing: Mutex<Option<String>>,
}

impl RoundTripPeer {
    pub(crate) fn new(
        peer: Peer<RoleServer>,
        capabilities: Option<Value>,
        answers: BTreeMap<String, Value>,
        log: LogFilter,
    ) -> Self {
        Self {
            peer,
            capabilities,
            answers,
            asked: AtomicUsize::new(0),
            log,
            pending: Mutex::new(serde_json::Map::new()),
            missing: Mutex::new(None),
        }
    }

    /// Every unanswered question of this run.
    pub(crate) fn pending(&self) -> serde_json::Map<String, Value> {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The capability the tool needed that the client did not declare, if any.
    pub(crate) fn missing_capability(&self) -> Option<String> {
        self.missing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Why an answer does not have the shape MCP documents for its method's result, if it does
/// not: `elicitation/create` -> an object with `action` (`accept`, `decline` or `cancel`);
/// `sampling/createMessage` -> an object with a `role` string and `content`; `roots/list` -> an
/// object with a `roots` array. Answers to other methods are not checked.
pub(crate) fn answer_problem(method: &str, answer: &Value) -> Option<&'static str> {
    let Some(o) = answer.as_object() else {
        return Some("is not an object");
    };
    match method {
        "elicitation/create" => match o.get("action").and_then(Value::as_str) {
            Some("accept" | "decline" | "cancel") => None,
            Some(_) => Some("has an unknown `action`"),
            None => Some("has no `action` string"),
        },
        "sampling/createMessage" => (!(o.get("role").is_some_and(Value::is_string)
            && o.contains_key("content")))
        .then_some("needs a `role` string and `content`"),
        "roots/list" => {
            (!o.get("roots").is_some_and(Value::is_array)).then_some("needs a `roots` array")
        }
        _ => None,
    }
}

/// The key of the n-th unnamed question a tool asks in one call.
pub(crate) fn question_key(n: usize) -> String {
    format!("kberg.{n}")
}

#[async_trait]
impl ClientPeer for RoundTripPeer {
    async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError> {
        if method == "notifications/message" && !self.log.passes(&params) {
            return Ok(());
        }
        send_notification(&self.peer, method, params).await
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        if cancel.is_cancelled() {
            return Err(PeerError::Cancelled);
        }
        if let Some(cap) = capability_of(method)
            && !self.supports(cap)
        {
            return Err(PeerError::NotSupported(cap.to_string()));
        }
        let mut params = params;
        let key = take_input_key(&mut params)
            .unwrap_or_else(|| question_key(self.asked.fetch_add(1, Ordering::Relaxed)));
        if let Some(answer) = self.answers.get(&key) {
            match answer_problem(method, answer) {
                None => return Ok(answer.clone()),
                // An answer that does not fit its question never reaches the handler: the
                // question goes out again in this round's `input_required` result.
                Some(problem) => {
                    tracing::debug!(key = ?key, method, problem, "an input response does not fit its question; asking again");
                }
            }
        }
        let question = json!({"method": method, "params": params});
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), question.clone());
        let mut requests = serde_json::Map::new();
        requests.insert(key, question);
        Err(PeerError::InputRequired {
            requests: Value::Object(requests),
        })
    }

    fn supports(&self, capability: &str) -> bool {
        let ok = supports(self.capabilities.as_ref(), capability);
        if !ok {
            *self.missing.lock().unwrap_or_else(|p| p.into_inner()) = Some(capability.to_string());
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_asks_for_a_known_level_or_for_none() {
        let warning = json!({"level": "warning"});
        let debug = json!({"level": "debug"});
        let t = LogFilter::requested(Some("info"));
        assert!(t.allows(&warning) && !t.allows(&debug));
        assert!(LogFilter::requested(Some("debug")).allows(&debug));
        for asked in [None, Some("verbose"), Some("INFO"), Some("")] {
            let t = LogFilter::requested(asked);
            assert!(!t.allows(&json!({"level": "emergency"})), "{asked:?}");
        }
    }

    #[test]
    fn levels_rank_in_order() {
        assert!(level_rank("debug") < level_rank("info"));
        assert!(level_rank("warning") < level_rank("error"));
        assert_eq!(level_rank("EMERGENCY"), 7);
        assert_eq!(level_rank("nonsense"), 1);
        let t = LogFilter::new("warning");
        assert!(!t.allows(&json!({"level": "info"})));
        assert!(t.allows(&json!({"level": "error"})));
        t.set("debug");
        assert!(t.allows(&json!({"level": "debug"})));
        assert!(!LogFilter::off().allows(&json!({"level": "emergency"})));
    }

    /// A flood of log messages passes its burst, then one per interval; a message below the
    /// level takes nothing from the budget.
    #[tokio::test(start_paused = true)]
    async fn log_messages_pass_at_a_bounded_rate() {
        let filter = LogFilter::new("info");
        let info = json!({"level": "info", "data": "x"});
        let debug = json!({"level": "debug", "data": "x"});
        for _ in 0..1_000 {
            assert!(!filter.passes(&debug));
        }
        let sent = (0..1_000).filter(|_| filter.passes(&info)).count();
        assert_eq!(sent, kberg_core::LOG_MESSAGE_BURST as usize);
        tokio::time::advance(kberg_core::LOG_MESSAGE_INTERVAL).await;
        assert!(filter.passes(&info));
        assert!(!filter.passes(&info));
        // A level change leaves the rate bound as it was.
        filter.set("debug");
        assert!(!filter.passes(&debug));
    }

    #[test]
    fn key_hints_are_taken_out_of_params() {
        let mut p = json!({"message": "m", "_meta": {"kberg/inputKey": "user_name"}});
        assert_eq!(take_input_key(&mut p).as_deref(), Some("user_name"));
        assert_eq!(p, json!({"message": "m"}));
        let mut p = json!({"_meta": {"kberg/inputKey": "k", "other": 1}});
        assert_eq!(take_input_key(&mut p).as_deref(), Some("k"));
        assert_eq!(p, json!({"_meta": {"other": 1}}));
        let mut p = json!({"message": "m"});
        assert_eq!(take_input_key(&mut p), None);
        let mut p = json!("not an object");
        assert_eq!(take_input_key(&mut p), None);
    }

    #[test]
    fn answers_are_checked_against_their_methods_result_shape() {
        let e = "elicitation/create";
        assert_eq!(
            answer_problem(e, &json!({"action": "accept", "content": {}})),
            None
        );
        assert_eq!(answer_problem(e, &json!({"action": "decline"})), None);
        assert!(answer_problem(e, &json!(12345)).is_some());
        assert!(answer_problem(e, &json!({"content": {}})).is_some());
        assert!(answer_problem(e, &json!({"action": "maybe"})).is_some());
        let s = "sampling/createMessage";
        assert_eq!(
            answer_problem(
                s,
                &json!({"role": "assistant", "content": {"type": "text", "text": "x"}})
            ),
            None
        );
        assert!(answer_problem(s, &json!({"content": "x"})).is_some());
        let r = "roots/list";
        assert_eq!(answer_problem(r, &json!({"roots": []})), None);
        assert!(answer_problem(r, &json!({"roots": "a"})).is_some());
        assert_eq!(answer_problem("x/y", &json!({})), None);
    }
}
