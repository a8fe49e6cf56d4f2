//! The live registry of connected agents and their sessions, for operators.
//!
//! Every authenticated request passes [`SessionRegistry::touch`] (from the gateway's
//! authenticator): a 2025-11-25 client is tracked by its `Mcp-Session-Id` (from the first request
//! after `initialize`), a 2026-07-28 client, which has no sessions on the wire, by its agent and
//! protocol version header. Tool calls add the client's
//! self-reported identity (`clientInfo`: recorded, never trusted for permissions) and, through
//! the audit sink ([`SessionRegistry::audit_sink`]), count calls made and refused per agent.
//!
//! An operator can end a session: the next request that carries its id is refused, so the
//! client must start a new session (and authenticate again). Sessions not seen for the idle
//! timeout are dropped from the registry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kberg_core::{AuditEvent, AuditOutcome, AuditSink, ClientInfo};
use serde::Serialize;

/// How a connection speaks MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Generation {
    /// 2025-11-25 and earlier: `initialize`, `Mcp-Session-Id`.
    Stateful,
    /// 2026-07-28: stateless, `_meta` on every request.
    Stateless,
}

/// What an operator sees of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionRecord {
    /// The session id (`Mcp-Session-Id`), or `<agent>/stateless` for a 2026-07-28 client.
    pub id: String,
    /// The agent (its principal id).
    pub agent: String,
    /// The agent's configured type.
    pub agent_type: Option<String>,
    /// The client's self-reported name, when a call carried it.
    pub client_name: Option<String>,
    /// The client's self-reported version.
    pub client_version: Option<String>,
    /// The protocol generation.
    pub generation: Generation,
    /// The `MCP-Protocol-Version` the client sent, if any.
    pub protocol_version: Option<String>,
    /// When the gateway first saw it (milliseconds since the Unix epoch).
    pub started_ms: u64,
    /// When it last sent a request.
    pub last_seen_ms: u64,
    /// Requests it made.
    pub requests: u64,
}

/// Calls made and refused by one agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CallCounts {
    /// Tool calls that ran.
    pub made: u64,
    /// Tool calls the gate or a tool refused.
    pub refused: u64,
}

/// An event of the registry, for live streams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SessionEvent {
    /// A session was seen for the first time.
    Connected {
        /// The session.
        session: SessionRecord,
    },
    /// A session was ended by an operator or expired.
    Disconnected {
        /// The session id.
        id: String,
        /// The agent.
        agent: String,
        /// `ended` or `idle`.
        reason: &'static str,
    },
    /// A tool call finished.
    Call {
        /// The agent.
        agent: String,
        /// The tool.
        tool: String,
        /// `ok` or the refusal code.
        outcome: String,
    },
}

#[derive(Default)]
struct Book {
    sessions: HashMap<String, SessionRecord>,
    ended: HashMap<String, SystemTime>,
    calls: HashMap<String, CallCounts>,
}

/// The live registry.
#[derive(Clone)]
pub struct SessionRegistry {
    book: Arc<Mutex<Book>>,
    events: tokio::sync::broadcast::Sender<SessionEvent>,
    idle: Duration,
}

impl std::fmt::Debug for SessionRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionRegistry")
            .field("idle", &self.idle)
            .finish_non_exhaustive()
    }
}

impl Default for SessionRegistry {
    fn default() -> Self {
        Self::new(Duration::from_secs(30 * 60))
    }
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl SessionRegistry {
    /// A registry that forgets sessions not seen for `idle`.
    pub fn new(idle: Duration) -> Self {
        let (events, _) = tokio::sync::broadcast::channel(256);
        Self {
            book: Arc::new(Mutex::new(Book::default())),
            events,
            idle,
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a request by `agent`. Returns `false` when the session was ended by an operator
    /// (the request must be refused).
    pub fn touch(
        &self,
        agent: &str,
        agent_type: Option<&str>,
        session_id: Option<&str>,
        protocol_version: Option<&str>,
    ) -> bool {
        let now = SystemTime::now();
        let stateless = protocol_version.is_some_and(|v| v >= "2026-07-28");
        let (id, generation) = match session_id {
            Some(s) => (s.to_string(), Generation::Stateful),
            None if stateless => (format!("{agent}/stateless"), Generation::Stateless),
            // A 2025-11-25 `initialize` (no session yet): the session appears with the
            // requests that carry the id the server assigns.
            None => return true,
        };
        let mut book = self.book();
        if session_id.is_some() && book.ended.contains_key(&id) {
            return false;
        }
        let idle = self.idle;
        let expired: Vec<(String, String)> = book
            .sessions
            .values()
            .filter(|s| {
                now.duration_since(SystemTime::UNIX_EPOCH + Duration::from_millis(s.last_seen_ms))
                    .is_ok_and(|d| d > idle)
            })
            .map(|s| (s.id.clone(), s.agent.clone()))
            .collect();
        for (sid, a) in expired {
            book.sessions.remove(&sid);
            let _ = self.events.send(SessionEvent::Disconnected {
                id: sid,
                agent: a,
                reason: "idle",
            });
        }
        book.ended
            .retain(|_, at| now.duration_since(*at).is_ok_and(|d| d < idle * 2));
        match book.sessions.get_mut(&id) {
            Some(s) if s.agent == agent => {
                s.last_seen_ms = ms(now);
                s.requests += 1;
                if protocol_version.is_some() {
                    s.protocol_version = protocol_version.map(str::to_string);
                }
            }
            // A session id presented by another agent than the one that opened it is not
            // that session; the transport refuses it, the registry does not merge them.
            Some(_) => {}
            None => {
                let record = SessionRecord {
                    id: id.clone(),
                    agent: agent.to_string(),
                    agent_type: agent_type.map(str::to_string),
                    client_name: None,
                    client_version: None,
                    generation,
                    protocol_version: protocol_version.map(str::to_string),
                    started_ms: ms(now),
                    last_seen_ms: ms(now),
                    requests: 1,
                };
                book.sessions.insert(id, record.clone());
                let _ = self
                    .events
                    .send(SessionEvent::Connected { session: record });
            }
        }
        true
    }

    /// Records the client identity a call of `agent` carried, on the agent's most recent
    /// session.
    pub fn saw_client(&self, agent: &str, client: &ClientInfo) {
        let mut book = self.book();
        if let Some(s) = book
            .sessions
            .values_mut()
            .filter(|s| s.agent == agent)
            .max_by_key(|s| s.last_seen_ms)
        {
            s.client_name = Some(client.name.clone());
            s.client_version = Some(client.version.clone());
        }
    }

    /// Ends a session: it leaves the registry and its next request is refused. Returns whether
    /// it was known.
    pub fn end(&self, id: &str) -> bool {
        let mut book = self.book();
        let Some(s) = book.sessions.remove(id) else {
            return false;
        };
        book.ended.insert(id.to_string(), SystemTime::now());
        let _ = self.events.send(SessionEvent::Disconnected {
            id: id.to_string(),
            agent: s.agent,
            reason: "ended",
        });
        true
    }

    /// Ends every session of `agent` (its token was revoked). Returns how many.
    pub fn end_agent(&self, agent: &str) -> usize {
        let ids: Vec<String> = self
            .book()
            .sessions
            .values()
            .filter(|s| s.agent == agent)
            .map(|s| s.id.clone())
            .collect();
        ids.iter().filter(|id| self.end(id)).count()
    }

    /// The live sessions, most recently seen first.
    pub fn sessions(&self) -> Vec<SessionRecord> {
        let mut v: Vec<SessionRecord> = self.book().sessions.values().cloned().collect();
        v.sort_by(|a, b| b.last_seen_ms.cmp(&a.last_seen_ms).then(a.id.cmp(&b.id)));
        v
    }

    /// One session.
    pub fn session(&self, id: &str) -> Option<SessionRecord> {
        self.book().sessions.get(id).cloned()
    }

    /// Calls made and refused by `agent` since the gateway started.
    pub fn calls(&self, agent: &str) -> CallCounts {
        self.book().calls.get(agent).copied().unwrap_or_default()
    }

    /// A live stream of connects, disconnects and calls.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<SessionEvent> {
        self.events.subscribe()
    }

    /// An audit sink that counts each agent's calls and publishes them as events; put it in
    /// front of the gateway's real audit sink.
    pub fn audit_sink(&self, next: Option<Arc<dyn AuditSink>>) -> Arc<dyn AuditSink> {
        Arc::new(CountingSink {
            registry: self.clone(),
            next,
        })
    }
}

struct CountingSink {
    registry: SessionRegistry,
    next: Option<Arc<dyn AuditSink>>,
}

/// `ok`, or the stable code of the refusal a call ended in (`error` when it has none).
pub(crate) fn outcome_code(outcome: &AuditOutcome) -> String {
    match outcome {
        AuditOutcome::Ok => "ok".to_string(),
        other => serde_json::to_value(other)
            .ok()
            .and_then(|v| v.get("code").and_then(|c| c.as_str()).map(str::to_string))
            .unwrap_or_else(|| "error".into()),
    }
}

impl AuditSink for CountingSink {
    fn record(&self, event: &AuditEvent) {
        let outcome = outcome_code(&event.outcome);
        {
            let mut book = self.registry.book();
            let c = book.calls.entry(event.principal.clone()).or_default();
            if outcome == "ok" {
                c.made += 1;
            } else {
                c.refused += 1;
            }
        }
        let _ = self.registry.events.send(SessionEvent::Call {
            agent: event.principal.clone(),
            tool: event.tool.clone(),
            outcome,
        });
        if let Some(next) = &self.next {
            next.record(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_tracked_ended_and_refused_after() {
        let r = SessionRegistry::default();
        let mut events = r.subscribe();
        assert!(r.touch("claude", Some("claude"), Some("s1"), Some("2025-11-25")));
        assert!(r.touch("claude", Some("claude"), Some("s1"), None));
        assert!(r.touch("codex", Some("codex"), None, Some("2026-07-28")));
        let all = r.sessions();
        assert_eq!(all.len(), 2);
        let s1 = r.session("s1").expect("s1 is live");
        assert_eq!(s1.requests, 2);
        assert_eq!(s1.generation, Generation::Stateful);
        assert_eq!(
            r.session("codex/stateless").map(|s| s.generation),
            Some(Generation::Stateless)
        );
        r.saw_client("claude", &ClientInfo::new("claude-code", "2.1"));
        assert_eq!(
            r.session("s1").and_then(|s| s.client_name),
            Some("claude-code".into())
        );
        assert!(matches!(
            events.try_recv(),
            Ok(SessionEvent::Connected { .. })
        ));
        assert!(r.end("s1"));
        assert!(!r.end("s1"));
        assert!(
            !r.touch("claude", Some("claude"), Some("s1"), None),
            "an ended session is refused"
        );
        assert!(r.touch("claude", Some("claude"), Some("s2"), None));
        assert_eq!(r.end_agent("claude"), 1);
        assert!(r.sessions().iter().all(|s| s.agent != "claude"));
    }

    #[test]
    fn idle_sessions_expire() {
        let r = SessionRegistry::new(Duration::ZERO);
        assert!(r.touch("claude", None, Some("s1"), None));
        std::thread::sleep(Duration::from_millis(5));
        assert!(r.touch("codex", None, Some("s2"), None));
        assert!(r.session("s1").is_none());
    }
}
