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
//! client must start a new session (and authenticate again), and a listen stream it holds open
//! ends (on every replica: see [`track`]). A client can end its own session (a 2025-11-25
//! `DELETE` the transport answers with success): [`track`] then has the registry *forget* it
//! ([`SessionRegistry::forget`]): it leaves the listing at once and a listen stream it holds
//! open ends, as for an end, but it is not remembered as ended (the transport answers its id
//! `404` from then on, and it was no operator's doing). Sessions not seen for the idle
//! timeout are dropped from the registry (looked for at most once per [`SWEEP_EVERY`], not on
//! every request).
//!
//! A session is seen by its requests, and also while it holds a listen stream (a 2025-11-25
//! `GET` answered with `text/event-stream`) open: an agent waiting for notifications sends
//! nothing for as long as it waits, and the transport does not count such a session as idle,
//! so neither does the registry ([`SessionRegistry::listening`], which [`track`] holds for the
//! life of each such response's body). Such a session is not dropped as idle, is listed as
//! seen now, and, with a ledger, is written as seen at every exchange, so no replica drops it
//! (nor, in PostgreSQL, its resumable state, which every replica would then answer `404`). The
//! cost is on the stream's opening and closing only, never on a `POST`.
//!
//! Likewise a session is seen while a request of it is in flight, until it is answered (a
//! call answered as an event stream: until that stream ends): one long tool call
//! (an upstream given a long timeout) is activity, as the transport counts it, not idleness.
//! Inside [`track`], the record of the request's session, which the authenticator's
//! [`SessionRegistry::admit`] updates under the lock it takes anyway, counts the request in
//! flight, and the end of the answer counts it out and stamps the time with two atomic
//! operations, without the lock; the sweep, the listing and the exchange with a ledger read
//! those counts as they read the open listen streams.
//!
//! The authenticator sees a session id before the transport has checked it, and an agent can
//! present ids it made up (the transport answers each `404`). So on the MCP endpoint, wrapped
//! in [`track`], an id the registry does not know yet is recorded only once the transport has
//! answered its request with success ([`SessionRegistry::admit`]); a made-up id is never
//! listed. Outside [`track`] the id is recorded as it is seen. Either way the registry records
//! at most [`MAX_SESSIONS_PER_AGENT`] sessions per agent (an agent that holds that many gets
//! no new record until one goes idle, here and in a shared ledger), and an id longer than
//! [`MAX_SESSION_ID_LEN`], which no transport hands out, is not recorded at all.
//!
//! One gateway keeps all of this in memory. Replicas on one PostgreSQL database share it
//! through a [`SessionLedger`] ([`ledger`]; [`postgres`] with the feature): each replica still
//! answers from memory, and [`SessionRegistry::follow`] exchanges what changed with the ledger
//! every [`SYNC_EVERY`] (at once when a session is first seen, ended or forgotten), so a request
//! never waits for the database. An end, and a forgotten session, reach the other replicas
//! through the ledger's announcements, sooner than the period: a replica holding a listen
//! stream of a session its client deleted elsewhere ends it at once, and stops writing the
//! session as seen before that could bring it back. A replica that missed an announcement
//! drops the session at its next read, which no longer has it.

pub mod ledger;
#[cfg(feature = "postgres")]
pub mod postgres;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kberg_core::{AuditEvent, AuditOutcome, AuditSink, ClientInfo};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::error::GatewayError;
pub use ledger::{ENDED_PREFIX, FORGOTTEN_PREFIX, SessionBatch, SessionLedger, SessionSnapshot};

/// How often a registry with a ledger exchanges what changed for what the other replicas
/// wrote: the longest a session first seen on another replica, or a count, takes to show.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);

/// The most sessions the registry records for one agent: more than a transport lets one
/// principal hold open (kberg-server's default share is 64 of 256).
pub const MAX_SESSIONS_PER_AGENT: usize = 256;

/// The longest session id the registry records (transports hand out ids of 32 to 36
/// characters).
pub const MAX_SESSION_ID_LEN: usize = 128;

/// How often, at most, a request looks for sessions gone idle (or the idle timeout, when that
/// is shorter).
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

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
    /// When it last sent a request (now, while it holds a listen stream open or has a request
    /// in flight; when its last request was answered, if later).
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
    /// A session was ended by an operator, closed by its client or expired.
    Disconnected {
        /// The session id.
        id: String,
        /// The agent.
        agent: String,
        /// `ended` (by an operator), `closed` (its client deleted it) or `idle`.
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

/// What a registry with a ledger changed since it last wrote to it.
#[derive(Default)]
struct Unwritten {
    /// Requests per session id (the record itself is read from the book when written).
    touched: HashMap<String, u64>,
    calls: HashMap<String, CallCounts>,
    ended: Vec<String>,
    forgotten: Vec<String>,
}

#[derive(Default)]
struct Book {
    /// The live sessions: with a ledger, its last snapshot with this replica's changes since.
    sessions: HashMap<String, SessionRecord>,
    ended: HashMap<String, SystemTime>,
    /// Sessions their clients deleted (see [`SessionRegistry::forget`]), kept as long as ends
    /// so that an answer or a read racing the deletion does not list them again.
    forgotten: HashMap<String, SystemTime>,
    calls: HashMap<String, CallCounts>,
    unwritten: Unwritten,
    /// Listen streams open per session id (see [`SessionRegistry::listening`]).
    streams: HashMap<String, OpenStreams>,
    /// Requests in flight per session id (see [`track`]); an entry whose session is gone and
    /// whose requests have all ended is dropped at the next sweep.
    busy: HashMap<String, Arc<Busy>>,
    /// When idle sessions were last looked for.
    swept: Option<SystemTime>,
}

/// The requests of one session in flight, counted without the registry's lock when they end.
#[derive(Default)]
struct Busy {
    /// Requests in flight.
    count: AtomicUsize,
    /// When the last one ended (milliseconds since the Unix epoch).
    ended_ms: AtomicU64,
}

impl Busy {
    /// When the session was last seen by its requests in flight at `now`: now while one is,
    /// else when the last one ended.
    fn seen_ms(&self, now: u64) -> u64 {
        if self.count.load(Ordering::Acquire) > 0 {
            now
        } else {
            self.ended_ms.load(Ordering::Acquire)
        }
    }
}

/// One request in flight of a session: dropped when it is answered (an event stream: when
/// the stream's body is dropped).
struct InFlight(Arc<Busy>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // Stamped before it is counted out, so whoever sees no request in flight sees when
        // the last one ended.
        self.0
            .ended_ms
            .fetch_max(ms(SystemTime::now()), Ordering::AcqRel);
        self.0.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The listen streams one session holds open.
struct OpenStreams {
    count: usize,
    /// Cancelled when the session is ended: its streams end.
    ended: CancellationToken,
}

/// The live registry.
#[derive(Clone)]
pub struct SessionRegistry {
    book: Arc<Mutex<Book>>,
    events: tokio::sync::broadcast::Sender<SessionEvent>,
    idle: Duration,
    ledger: Option<Arc<dyn SessionLedger>>,
    /// Wakes [`SessionRegistry::follow`] before its period (a session first seen or ended).
    wake: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for SessionRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionRegistry")
            .field("idle", &self.idle)
            .field("ledger", &self.ledger)
            .finish_non_exhaustive()
    }
}

impl Default for SessionRegistry {
    fn default() -> Self {
        Self::new(Duration::from_secs(30 * 60))
    }
}

/// Whether a request's `MCP-Protocol-Version` is of the 2026-07-28 generation or later, which
/// has no sessions on the wire.
fn is_stateless(protocol_version: Option<&str>) -> bool {
    protocol_version.is_some_and(|v| v >= "2026-07-28")
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
            ledger: None,
            wake: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// A registry shared with the other replicas through `ledger` (see
    /// [`SessionRegistry::follow`]). It reads the ledger once here, so the sessions ended
    /// recently on any replica are refused from the first request.
    pub fn with_ledger(
        idle: Duration,
        ledger: Arc<dyn SessionLedger>,
    ) -> Result<Self, GatewayError> {
        let mut registry = Self::new(idle);
        registry.ledger = Some(ledger);
        registry.sync()?;
        Ok(registry)
    }

    /// How long a session may go unseen before it is dropped.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// The ledger this registry shares, if any.
    pub fn ledger(&self) -> Option<&Arc<dyn SessionLedger>> {
        self.ledger.as_ref()
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
        let (id, generation) = match session_id {
            // A 2026-07-28 request has no session on the wire: the transport serves it
            // whatever `Mcp-Session-Id` it carries, so that header names no session here
            // either (recording it would list every id a client makes up).
            _ if is_stateless(protocol_version) => {
                (format!("{agent}/stateless"), Generation::Stateless)
            }
            // No transport hands out such an id: the request is refused there, and the
            // registry keeps no record of it.
            Some(s) if s.len() > MAX_SESSION_ID_LEN => return true,
            Some(s) => (s.to_string(), Generation::Stateful),
            // A 2025-11-25 `initialize` (no session yet): the session appears with the
            // requests that carry the id the server assigns.
            None => return true,
        };
        let mut book = self.book();
        if generation == Generation::Stateful && book.ended.contains_key(&id) {
            return false;
        }
        let idle = self.idle;
        if book.swept.is_none_or(|at| {
            now.duration_since(at)
                .is_ok_and(|d| d >= SWEEP_EVERY.min(idle))
        }) {
            book.swept = Some(now);
            let now_ms = ms(now);
            let expired: Vec<(String, String)> = book
                .sessions
                .values()
                // A session holding a listen stream open is seen now.
                .filter(|s| !book.streams.contains_key(&s.id))
                .filter(|s| {
                    // So is one with a request in flight; else it was seen when its last one
                    // ended, if that is later than its last request began.
                    let seen = book
                        .busy
                        .get(&s.id)
                        .map_or(s.last_seen_ms, |b| s.last_seen_ms.max(b.seen_ms(now_ms)));
                    now.duration_since(SystemTime::UNIX_EPOCH + Duration::from_millis(seen))
                        .is_ok_and(|d| d > idle)
                })
                .map(|s| (s.id.clone(), s.agent.clone()))
                .collect();
            let b = &mut *book;
            b.busy.retain(|id, busy| {
                b.sessions.contains_key(id) && !expired.iter().any(|(e, _)| e == id)
                    || busy.count.load(Ordering::Acquire) > 0
            });
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
            book.forgotten
                .retain(|_, at| now.duration_since(*at).is_ok_and(|d| d < idle * 2));
        }
        let shared = self.ledger.is_some();
        // Counted for a new stateful id only: a known one, or a 2026-07-28 client's one
        // record, costs no pass over the sessions.
        let full = generation == Generation::Stateful
            && !book.sessions.contains_key(&id)
            && book.sessions.values().filter(|s| s.agent == agent).count()
                >= MAX_SESSIONS_PER_AGENT;
        let forgotten = book.forgotten.contains_key(&id);
        match book.sessions.get_mut(&id) {
            Some(s) if s.agent == agent => {
                s.last_seen_ms = ms(now);
                s.requests += 1;
                if protocol_version.is_some() {
                    s.protocol_version = protocol_version.map(str::to_string);
                }
                Self::in_flight(&mut book, &id);
                if shared {
                    *book.unwritten.touched.entry(id).or_default() += 1;
                }
            }
            // A session id presented by another agent than the one that opened it is not
            // that session; the transport refuses it, the registry does not merge them.
            Some(_) => {}
            // The agent holds its whole share: no new record until one goes idle.
            None if full => {}
            // Deleted by its client: a request answered as it was deleted does not bring it
            // back (the transport answers any later one `404`).
            None if forgotten => {}
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
                if shared {
                    *book.unwritten.touched.entry(id.clone()).or_default() += 1;
                    self.wake.notify_one();
                }
                Self::in_flight(&mut book, &id);
                book.sessions.insert(id, record.clone());
                let _ = self
                    .events
                    .send(SessionEvent::Connected { session: record });
            }
        }
        true
    }

    /// Counts the request being served in flight for the session `id`, when it runs inside
    /// [`track`], which holds the count until the request is answered. Outside
    /// [`track`] (or for a request already counted) it does nothing.
    fn in_flight(book: &mut Book, id: &str) {
        let _ = TRACKED.try_with(|slot| {
            let mut slot = slot.borrow_mut();
            if slot.in_flight.is_some() {
                return;
            }
            let busy = match book.busy.get(id) {
                Some(b) => Arc::clone(b),
                None => Arc::clone(book.busy.entry(id.to_string()).or_default()),
            };
            busy.count.fetch_add(1, Ordering::AcqRel);
            slot.in_flight = Some(InFlight(busy));
        });
    }

    /// Records a request by `agent` as [`SessionRegistry::touch`] does, but for a session id
    /// the registry does not know yet when the request runs inside [`track`]: that one is
    /// recorded once the transport has answered the request with success, so an id the
    /// transport refuses (made up, or from another gateway) is never listed. Returns `false`
    /// when the session was ended by an operator (the request must be refused).
    pub fn admit(
        &self,
        agent: &str,
        agent_type: Option<&str>,
        session_id: Option<&str>,
        protocol_version: Option<&str>,
    ) -> bool {
        if let Some(id) = session_id
            .filter(|id| id.len() <= MAX_SESSION_ID_LEN && !is_stateless(protocol_version))
        {
            let new = {
                let book = self.book();
                if book.ended.contains_key(id) {
                    return false;
                }
                !book.sessions.contains_key(id)
            };
            if new {
                let sighting = Sighting {
                    agent: agent.to_string(),
                    agent_type: agent_type.map(str::to_string),
                    session_id: id.to_string(),
                    protocol_version: protocol_version.map(str::to_string),
                };
                if TRACKED
                    .try_with(|slot| slot.borrow_mut().sighted = Some(sighting))
                    .is_ok()
                {
                    return true;
                }
            }
        }
        self.touch(agent, agent_type, session_id, protocol_version)
    }

    /// Records the client identity a call of `agent` carried, on the agent's most recent
    /// session.
    pub fn saw_client(&self, agent: &str, client: &ClientInfo) {
        let mut book = self.book();
        let Some(s) = book
            .sessions
            .values_mut()
            .filter(|s| s.agent == agent)
            .max_by_key(|s| s.last_seen_ms)
        else {
            return;
        };
        if s.client_name.as_deref() == Some(client.name.as_str())
            && s.client_version.as_deref() == Some(client.version.as_str())
        {
            return;
        }
        s.client_name = Some(client.name.clone());
        s.client_version = Some(client.version.clone());
        if self.ledger.is_some() {
            let id = s.id.clone();
            book.unwritten.touched.entry(id).or_default();
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
        if let Some(open) = book.streams.get(id) {
            open.ended.cancel();
        }
        if self.ledger.is_some() {
            book.unwritten.touched.remove(id);
            book.unwritten.ended.push(id.to_string());
            self.wake.notify_one();
        }
        let _ = self.events.send(SessionEvent::Disconnected {
            id: id.to_string(),
            agent: s.agent,
            reason: "ended",
        });
        true
    }

    /// A session another replica ended (heard from the ledger): refused from now on here too.
    fn heard_end(&self, id: &str) {
        let mut book = self.book();
        book.ended.insert(id.to_string(), SystemTime::now());
        book.unwritten.touched.remove(id);
        if let Some(open) = book.streams.get(id) {
            open.ended.cancel();
        }
        if let Some(s) = book.sessions.remove(id) {
            let _ = self.events.send(SessionEvent::Disconnected {
                id: id.to_string(),
                agent: s.agent,
                reason: "ended",
            });
        }
    }

    /// Forgets a session its client deleted (a 2025-11-25 `DELETE` the transport answered with
    /// success; [`track`] calls this): it leaves the registry now, a listen stream it holds
    /// open ends (as for [`SessionRegistry::end`]), and with a ledger it is removed there too
    /// and announced, so every replica drops it at once. Unlike an end, it is not remembered as
    /// ended: its id is not refused here (the transport answers it `404`), nor reported as
    /// ended by an operator. Returns whether it was listed. A session an operator ended is
    /// left as it is.
    pub fn forget(&self, id: &str) -> bool {
        let mut book = self.book();
        if book.ended.contains_key(id) {
            return false;
        }
        // Written even when not listed here: it may be another replica's session, not yet
        // read here, which this replica's transport resumed to delete it.
        if self.ledger.is_some() {
            book.unwritten.forgotten.push(id.to_string());
            self.wake.notify_one();
        }
        self.drop_forgotten(&mut book, id)
    }

    /// A session deleted by its client on another replica (heard from the ledger).
    fn heard_forget(&self, id: &str) {
        let mut book = self.book();
        if !book.ended.contains_key(id) {
            self.drop_forgotten(&mut book, id);
        }
    }

    /// Drops a forgotten session from `book`, ends its listen streams and publishes its
    /// disconnect. Returns whether it was listed.
    fn drop_forgotten(&self, book: &mut Book, id: &str) -> bool {
        book.forgotten.insert(id.to_string(), SystemTime::now());
        book.unwritten.touched.remove(id);
        if let Some(open) = book.streams.get(id) {
            open.ended.cancel();
        }
        let Some(s) = book.sessions.remove(id) else {
            return false;
        };
        let _ = self.events.send(SessionEvent::Disconnected {
            id: id.to_string(),
            agent: s.agent,
            reason: "closed",
        });
        true
    }

    /// Writes what this replica changed to the ledger and reads back what every replica
    /// wrote (blocking; nothing to do without a ledger). What could not be written stays to
    /// be written next time.
    pub fn sync(&self) -> Result<(), GatewayError> {
        let Some(ledger) = &self.ledger else {
            return Ok(());
        };
        let batch = self.unwritten_batch();
        if let Err(e) = ledger.write(&batch) {
            self.put_back(batch);
            return Err(e);
        }
        let snapshot = ledger.read(self.idle)?;
        self.apply(snapshot);
        Ok(())
    }

    fn unwritten_batch(&self) -> SessionBatch {
        let mut guard = self.book();
        let book = &mut *guard;
        let mut unwritten = std::mem::take(&mut book.unwritten);
        // A session holding a listen stream open is seen now: written so at every exchange,
        // so that no replica's read drops it (nor its resumable state) as idle.
        let now = ms(SystemTime::now());
        for id in book.streams.keys() {
            if let Some(s) = book.sessions.get_mut(id) {
                s.last_seen_ms = s.last_seen_ms.max(now);
                unwritten.touched.entry(id.clone()).or_default();
            }
        }
        // So is one with a request in flight; one whose last request ended since it was last
        // written is written as seen then.
        for (id, busy) in &book.busy {
            let seen = busy.seen_ms(now);
            if let Some(s) = book.sessions.get_mut(id)
                && seen > s.last_seen_ms
            {
                s.last_seen_ms = seen;
                unwritten.touched.entry(id.clone()).or_default();
            }
        }
        SessionBatch {
            touched: unwritten
                .touched
                .into_iter()
                .filter_map(|(id, n)| book.sessions.get(&id).map(|s| (s.clone(), n)))
                .collect(),
            calls: unwritten.calls.into_iter().collect(),
            ended: unwritten.ended,
            forgotten: unwritten.forgotten,
        }
    }

    fn put_back(&self, batch: SessionBatch) {
        let mut book = self.book();
        let unwritten = &mut book.unwritten;
        for (s, n) in batch.touched {
            *unwritten.touched.entry(s.id).or_default() += n;
        }
        for (agent, c) in batch.calls {
            let mine = unwritten.calls.entry(agent).or_default();
            mine.made += c.made;
            mine.refused += c.refused;
        }
        let later = std::mem::replace(&mut unwritten.ended, batch.ended);
        unwritten.ended.extend(later);
        let later = std::mem::replace(&mut unwritten.forgotten, batch.forgotten);
        unwritten.forgotten.extend(later);
    }

    /// Makes the ledger's snapshot the book, with what this replica changed since it was
    /// taken laid over it (a session first seen here since is kept, though the ledger does
    /// not have it yet); publishes the sessions that appeared or left meanwhile. A session
    /// listed here that the ledger no longer has is dropped: gone idle, or deleted by its
    /// client on another replica (one holding a listen stream here is never idle, since it is
    /// written as seen at every exchange, so it was deleted: its streams end, as when the
    /// announcement is heard).
    fn apply(&self, snapshot: SessionSnapshot) {
        let mut book = self.book();
        for (id, at) in snapshot.ended {
            book.ended
                .entry(id)
                .or_insert(SystemTime::UNIX_EPOCH + Duration::from_millis(at));
        }
        let mut sessions: HashMap<String, SessionRecord> = snapshot
            .sessions
            .into_iter()
            .filter(|s| !book.ended.contains_key(&s.id) && !book.forgotten.contains_key(&s.id))
            .map(|s| (s.id.clone(), s))
            .collect();
        for (id, n) in &book.unwritten.touched {
            let Some(mine) = book.sessions.get(id) else {
                continue;
            };
            match sessions.get_mut(id) {
                Some(s) if s.agent == mine.agent => {
                    s.requests += n;
                    s.last_seen_ms = s.last_seen_ms.max(mine.last_seen_ms);
                    if mine.client_name.is_some() {
                        s.client_name.clone_from(&mine.client_name);
                        s.client_version.clone_from(&mine.client_version);
                    }
                }
                Some(_) => {}
                None => {
                    sessions.insert(id.clone(), mine.clone());
                }
            }
        }
        let mut calls = snapshot.calls;
        for (agent, c) in &book.unwritten.calls {
            let sum = calls.entry(agent.clone()).or_default();
            sum.made += c.made;
            sum.refused += c.refused;
        }
        for s in sessions.values() {
            if !book.sessions.contains_key(&s.id) {
                let _ = self
                    .events
                    .send(SessionEvent::Connected { session: s.clone() });
            }
        }
        for s in book.sessions.values() {
            if !sessions.contains_key(&s.id) && !book.ended.contains_key(&s.id) {
                let open = book.streams.get(&s.id);
                if let Some(open) = open {
                    open.ended.cancel();
                }
                let _ = self.events.send(SessionEvent::Disconnected {
                    id: s.id.clone(),
                    agent: s.agent.clone(),
                    reason: if open.is_some() { "closed" } else { "idle" },
                });
            }
        }
        book.sessions = sessions;
        book.calls = calls;
    }

    /// Keeps this registry and its ledger in step until `stop`: every [`SYNC_EVERY`] (and at
    /// once when a session is first seen, ended or forgotten here) it writes what changed and
    /// reads what every replica wrote; an end announced by any replica is refused here as soon
    /// as it is heard, and a session forgotten on any replica leaves the listing here then. A last write when stopped. Returns at once without a ledger.
    pub async fn follow(self, stop: CancellationToken) {
        let Some(ledger) = self.ledger.clone() else {
            return;
        };
        let mut ends = ledger.ends();
        let mut tick = tokio::time::interval(SYNC_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
                () = self.wake.notified() => {}
                Some(m) = ends.recv() => {
                    if let Some(id) = m.strip_prefix(ENDED_PREFIX) {
                        self.heard_end(id);
                        continue;
                    }
                    if let Some(id) = m.strip_prefix(FORGOTTEN_PREFIX) {
                        self.heard_forget(id);
                        continue;
                    }
                    // (Re)listening: ends may have been missed; read the ledger again.
                }
            }
            failing = self.sync_logged(failing).await;
        }
        self.sync_logged(failing).await;
    }

    /// [`SessionRegistry::sync`] on a blocking task; logs the first failure of a run of them
    /// and the recovery. Returns whether it failed.
    async fn sync_logged(&self, failing: bool) -> bool {
        let registry = self.clone();
        let outcome = tokio::task::spawn_blocking(move || registry.sync())
            .await
            .map_err(|e| crate::error::task_failed("the sessions ledger sync", &e))
            .and_then(|r| r.map_err(|e| e.to_string()));
        match outcome {
            Ok(()) if failing => {
                tracing::info!("the sessions ledger is reachable again");
                false
            }
            Ok(()) => false,
            Err(e) if !failing => {
                tracing::warn!(error = %e, "the sessions ledger could not be synchronized; retrying");
                true
            }
            Err(_) => true,
        }
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
        let now = ms(SystemTime::now());
        let book = self.book();
        let mut v: Vec<SessionRecord> = book
            .sessions
            .values()
            .map(|s| Self::as_seen(&book, s, now))
            .collect();
        v.sort_by(|a, b| b.last_seen_ms.cmp(&a.last_seen_ms).then(a.id.cmp(&b.id)));
        v
    }

    /// One session.
    pub fn session(&self, id: &str) -> Option<SessionRecord> {
        let book = self.book();
        book.sessions
            .get(id)
            .map(|s| Self::as_seen(&book, s, ms(SystemTime::now())))
    }

    /// `s` as listed at `now`: seen now while it holds a listen stream open or has a request
    /// in flight, else when its last request ended.
    fn as_seen(book: &Book, s: &SessionRecord, now: u64) -> SessionRecord {
        let mut s = s.clone();
        if book.streams.contains_key(&s.id) {
            s.last_seen_ms = s.last_seen_ms.max(now);
        }
        if let Some(busy) = book.busy.get(&s.id) {
            s.last_seen_ms = s.last_seen_ms.max(busy.seen_ms(now));
        }
        s
    }

    /// Counts a listen stream of the session `id` open until the returned guard is dropped:
    /// meanwhile the session is seen now (it is not dropped as idle, and with a ledger it is
    /// written as seen at every exchange), and when the last one closes it is seen then, so
    /// its idle timeout runs from the stream's end. [`track`] holds one for the body of each
    /// successful 2025-11-25 `GET` answered with `text/event-stream`.
    ///
    /// When the session is ended ([`SessionRegistry::end`], or on another replica) or
    /// forgotten ([`SessionRegistry::forget`], here or on another replica), the
    /// guard's [`ListenGuard::ended`] is cancelled: [`track`] then ends the stream, so an
    /// agent whose session an operator ended (or whose tokens were revoked) stops receiving
    /// notifications on it, as its requests are refused.
    pub fn listening(&self, id: &str) -> ListenGuard {
        let mut guard = self.book();
        let book = &mut *guard;
        let open = book
            .streams
            .entry(id.to_string())
            .or_insert_with(|| OpenStreams {
                count: 0,
                ended: CancellationToken::new(),
            });
        open.count += 1;
        let ended = open.ended.clone();
        if book.ended.contains_key(id) || book.forgotten.contains_key(id) {
            // Ended (or deleted) between its request's check and its answer.
            ended.cancel();
        }
        if let Some(s) = book.sessions.get_mut(id) {
            s.last_seen_ms = s.last_seen_ms.max(ms(SystemTime::now()));
        }
        ListenGuard {
            registry: self.clone(),
            id: id.to_string(),
            ended,
        }
    }

    /// Closes one listen stream of `id` (its [`ListenGuard`] was dropped).
    fn stream_closed(&self, id: &str) {
        let mut guard = self.book();
        let book = &mut *guard;
        if let Some(open) = book.streams.get_mut(id) {
            open.count = open.count.saturating_sub(1);
            if open.count == 0 {
                book.streams.remove(id);
            }
        }
        if let Some(s) = book.sessions.get_mut(id) {
            s.last_seen_ms = s.last_seen_ms.max(ms(SystemTime::now()));
            if self.ledger.is_some() {
                book.unwritten.touched.entry(id.to_string()).or_default();
            }
        }
    }

    /// Calls made and refused by `agent` since the gateway started (with a ledger: since the
    /// state database was created, summed over every replica).
    pub fn calls(&self, agent: &str) -> CallCounts {
        self.book().calls.get(agent).copied().unwrap_or_default()
    }

    /// Counts a call of `agent` that ran (`ok`) or was refused.
    fn count_call(&self, agent: &str, ok: bool) {
        let mut book = self.book();
        let add = |c: &mut CallCounts| {
            if ok {
                c.made += 1;
            } else {
                c.refused += 1;
            }
        };
        add(book.calls.entry(agent.to_string()).or_default());
        if self.ledger.is_some() {
            add(book.unwritten.calls.entry(agent.to_string()).or_default());
        }
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

/// One open listen stream of a session ([`SessionRegistry::listening`]). Dropping it closes
/// the stream in the registry, on every path (a body dropped mid-stream, a panic's unwind).
pub struct ListenGuard {
    registry: SessionRegistry,
    id: String,
    ended: CancellationToken,
}

impl ListenGuard {
    /// Cancelled when the session is ended (by an operator, here or on another replica) or
    /// deleted by its client (here or on another replica): the stream should end.
    pub fn ended(&self) -> &CancellationToken {
        &self.ended
    }
}

impl std::fmt::Debug for ListenGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenGuard")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        self.registry.stream_closed(&self.id);
    }
}

/// The session id of a 2025-11-25 request of `method` (a `GET`: a listen stream, when answered
/// with `text/event-stream`; a `DELETE`: the client ending its session), if it names one the
/// registry could record.
fn session_of(req: &axum::extract::Request, method: &axum::http::Method) -> Option<String> {
    if req.method() != method {
        return None;
    }
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    if is_stateless(header("mcp-protocol-version")) {
        return None;
    }
    header("mcp-session-id")
        .filter(|id| !id.is_empty() && id.len() <= MAX_SESSION_ID_LEN)
        .map(str::to_string)
}

tokio::task_local! {
    /// The request [`track`] is waiting on the answer of: where [`SessionRegistry::admit`]
    /// leaves a session id it saw for the first time, or the count of the request in flight
    /// for the session it updated.
    static TRACKED: std::cell::RefCell<Tracked>;
}

/// What [`SessionRegistry::admit`] leaves for [`track`] of the request it waits on.
#[derive(Default)]
struct Tracked {
    /// A session id seen for the first time, to record once the answer is a success.
    sighted: Option<Sighting>,
    /// The request, counted in flight for its session until its answer has been sent.
    in_flight: Option<InFlight>,
}

/// A request naming a session id the registry does not know yet.
struct Sighting {
    agent: String,
    agent_type: Option<String>,
    session_id: String,
    protocol_version: Option<String>,
}

/// Wraps the MCP endpoint's router so that a session id is listed only once the transport has
/// accepted it: a request naming an id the registry does not know yet (its authenticator
/// calls [`SessionRegistry::admit`]) is recorded after the transport answered it with success.
/// The transport answers `404` to an id it never handed out, so made-up ids take no place in
/// the listing nor in the agent's share of [`MAX_SESSIONS_PER_AGENT`].
///
/// It also keeps a session that holds a listen stream open from going idle: the body of a
/// successful 2025-11-25 `GET` answered with `text/event-stream` holds a
/// [`SessionRegistry::listening`] guard until it is dropped (the stream ended, either way),
/// and ends when the session is ended or forgotten. Likewise a request of a session the
/// registry lists (updated by the authenticator's [`SessionRegistry::admit`]) keeps it seen
/// while it is in flight: until it is answered, or, answered with an event stream, until that
/// stream's body is dropped; its idle timeout runs from then.
///
/// And it forgets a session its client ended: a 2025-11-25 `DELETE` the transport answered
/// with success (`2xx`) has the registry [`SessionRegistry::forget`] the id it named. One the
/// transport refused (an id it never handed out, another agent's session: `404`) forgets
/// nothing.
pub fn track(router: axum::Router, sessions: SessionRegistry) -> axum::Router {
    router.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let sessions = sessions.clone();
            async move {
                // Method comparisons for a POST; the rest for a GET or a DELETE only.
                let listen = session_of(&req, &axum::http::Method::GET);
                let deleted = session_of(&req, &axum::http::Method::DELETE);
                let (resp, tracked) = TRACKED
                    .scope(std::cell::RefCell::new(Tracked::default()), async move {
                        let resp = next.run(req).await;
                        (resp, TRACKED.with(|slot| slot.take()))
                    })
                    .await;
                let Tracked { sighted, in_flight } = tracked;
                if let Some(id) = &deleted
                    && resp.status().is_success()
                {
                    sessions.forget(id);
                } else if let Some(s) = sighted
                    && resp.status().is_success()
                {
                    sessions.touch(
                        &s.agent,
                        s.agent_type.as_deref(),
                        Some(&s.session_id),
                        s.protocol_version.as_deref(),
                    );
                }
                match listen {
                    Some(id) if is_event_stream(&resp) => {
                        let guard = sessions.listening(&id);
                        let ended = guard.ended().clone().cancelled_owned();
                        resp.map(|body| {
                            use futures::StreamExt as _;
                            // Ends when the session is ended; the guard is held by the body,
                            // dropped with it.
                            axum::body::Body::from_stream(
                                body.into_data_stream().take_until(ended).map(move |chunk| {
                                    let _open = (&guard, &in_flight);
                                    chunk
                                }),
                            )
                        })
                    }
                    // A call answered as an event stream runs until the stream ends: it stays
                    // in flight while the body lives.
                    _ if in_flight.is_some() && is_event_stream(&resp) => resp.map(|body| {
                        use futures::StreamExt as _;
                        axum::body::Body::from_stream(body.into_data_stream().map(move |chunk| {
                            let _in_flight = &in_flight;
                            chunk
                        }))
                    }),
                    // Answered whole: no longer in flight (`in_flight` is dropped here).
                    _ => resp,
                }
            }
        },
    ))
}

/// Whether `resp` is a successful event stream (a listen stream, for a `GET`).
fn is_event_stream(resp: &axum::response::Response) -> bool {
    resp.status().is_success()
        && resp
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
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
        self.registry.count_call(&event.principal, outcome == "ok");
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

    /// A ledger in memory, as two registries in one process share it (what PostgreSQL does
    /// for replicas), with its ends and forgotten sessions fed to every subscriber.
    #[derive(Debug, Default)]
    struct MemoryLedger {
        inner: Mutex<(
            SessionSnapshot,
            Vec<tokio::sync::mpsc::UnboundedSender<String>>,
            Vec<String>,
        )>,
    }

    impl SessionLedger for MemoryLedger {
        fn write(&self, batch: &SessionBatch) -> Result<(), GatewayError> {
            let mut g = self.inner.lock().expect("lock");
            let (snap, subs, forgotten) = &mut *g;
            for id in &batch.ended {
                snap.sessions.retain(|s| &s.id != id);
                snap.ended.push((id.clone(), 1));
                for tx in subs.iter() {
                    let _ = tx.send(format!("{ENDED_PREFIX}{id}"));
                }
            }
            for id in &batch.forgotten {
                snap.sessions.retain(|s| &s.id != id);
                forgotten.push(id.clone());
                for tx in subs.iter() {
                    let _ = tx.send(format!("{FORGOTTEN_PREFIX}{id}"));
                }
            }
            for (s, n) in &batch.touched {
                if snap.ended.iter().any(|(id, _)| *id == s.id) || forgotten.contains(&s.id) {
                    continue;
                }
                match snap.sessions.iter_mut().find(|x| x.id == s.id) {
                    Some(x) if x.agent == s.agent => {
                        x.requests += n;
                        x.last_seen_ms = x.last_seen_ms.max(s.last_seen_ms);
                    }
                    Some(_) => {}
                    None => snap.sessions.push(SessionRecord {
                        requests: *n,
                        ..s.clone()
                    }),
                }
            }
            for (agent, c) in &batch.calls {
                let sum = snap.calls.entry(agent.clone()).or_default();
                sum.made += c.made;
                sum.refused += c.refused;
            }
            Ok(())
        }

        fn read(&self, idle: Duration) -> Result<SessionSnapshot, GatewayError> {
            let mut g = self.inner.lock().expect("lock");
            let since = ms(SystemTime::now()).saturating_sub(idle.as_millis() as u64);
            g.0.sessions.retain(|s| s.last_seen_ms >= since);
            Ok(g.0.clone())
        }

        fn ends(&self) -> tokio::sync::mpsc::UnboundedReceiver<String> {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            self.inner.lock().expect("lock").1.push(tx);
            rx
        }
    }

    /// A ledger that refuses every write (an unreachable database).
    #[derive(Debug)]
    struct DownLedger;

    impl SessionLedger for DownLedger {
        fn write(&self, _: &SessionBatch) -> Result<(), GatewayError> {
            Err(GatewayError::Serve("the database is down".into()))
        }
        fn read(&self, _: Duration) -> Result<SessionSnapshot, GatewayError> {
            Err(GatewayError::Serve("the database is down".into()))
        }
        fn ends(&self) -> tokio::sync::mpsc::UnboundedReceiver<String> {
            tokio::sync::mpsc::unbounded_channel().1
        }
    }

    #[test]
    fn replicas_sharing_a_ledger_see_one_registry_and_sum_the_counts() {
        let ledger: Arc<dyn SessionLedger> = Arc::new(MemoryLedger::default());
        let a =
            SessionRegistry::with_ledger(Duration::from_secs(60), Arc::clone(&ledger)).expect("a");
        let b = SessionRegistry::with_ledger(Duration::from_secs(60), ledger).expect("b");
        assert!(a.touch("claude", Some("claude"), Some("s1"), Some("2025-11-25")));
        assert!(a.touch("claude", Some("claude"), Some("s1"), None));
        assert!(b.touch("codex", Some("codex"), None, Some("2026-07-28")));
        a.count_call("claude", true);
        b.count_call("claude", true);
        assert!(
            b.session("s1").is_none(),
            "nothing shared before an exchange"
        );
        a.sync().expect("a writes");
        b.sync().expect("b writes and reads");
        a.sync().expect("a reads");
        for r in [&a, &b] {
            assert_eq!(r.sessions().len(), 2);
            assert_eq!(r.session("s1").map(|s| s.requests), Some(2));
            assert_eq!(r.calls("claude").made, 2);
        }
        // Touched on both: the counts add up, and what is unwritten shows locally at once.
        assert!(b.touch("claude", None, Some("s1"), None));
        assert_eq!(b.session("s1").map(|s| s.requests), Some(3));
        b.sync().expect("b");
        assert!(a.touch("claude", None, Some("s1"), None));
        a.sync().expect("a");
        b.sync().expect("b");
        assert_eq!(a.session("s1").map(|s| s.requests), Some(4));
        assert_eq!(b.session("s1").map(|s| s.requests), Some(4));
        // Another agent presenting the id is not merged into it anywhere.
        assert!(b.touch("codex", None, Some("s1"), None));
        b.sync().expect("b");
        assert_eq!(b.session("s1").map(|s| s.agent), Some("claude".into()));
        // Ended on B: B refuses it at once, A once it heard (or after its next read).
        let mut ends = b.ledger().expect("shared").ends();
        assert!(b.end("s1"));
        assert!(!b.touch("claude", None, Some("s1"), None));
        b.sync().expect("b writes the end");
        let heard = ends.try_recv().expect("the end is announced");
        a.heard_end(heard.strip_prefix(ENDED_PREFIX).expect("an end"));
        assert!(!a.touch("claude", None, Some("s1"), None), "A refuses it");
        assert!(a.session("s1").is_none());
        a.sync().expect("a");
        assert!(a.session("s1").is_none(), "an end is not undone by a read");
        // A third replica starting later refuses it from its first request.
        let c = SessionRegistry::with_ledger(
            Duration::from_secs(60),
            Arc::clone(b.ledger().expect("shared")),
        )
        .expect("c");
        assert!(!c.touch("claude", None, Some("s1"), None));
        assert_eq!(c.calls("claude").made, 2);
    }

    #[test]
    fn what_could_not_be_written_is_written_later() {
        let r = SessionRegistry::new(Duration::from_secs(60));
        let r = SessionRegistry {
            ledger: Some(Arc::new(DownLedger)),
            ..r
        };
        assert!(r.touch("claude", None, Some("s1"), None));
        r.count_call("claude", false);
        assert!(r.end("s1"));
        assert!(r.touch("claude", None, Some("s2"), None));
        assert!(r.sync().is_err());
        let batch = r.unwritten_batch();
        assert_eq!(batch.ended, ["s1"]);
        assert_eq!(batch.touched.len(), 1);
        assert_eq!(batch.touched[0].1, 1);
        assert_eq!(
            batch.calls,
            [(
                "claude".to_string(),
                CallCounts {
                    made: 0,
                    refused: 1
                }
            )]
        );
        // And the local view kept serving meanwhile.
        assert!(!r.touch("claude", None, Some("s1"), None));
        assert_eq!(r.calls("claude").refused, 1);
    }

    #[test]
    fn idle_sessions_expire() {
        let r = SessionRegistry::new(Duration::ZERO);
        assert!(r.touch("claude", None, Some("s1"), None));
        std::thread::sleep(Duration::from_millis(5));
        assert!(r.touch("codex", None, Some("s2"), None));
        assert!(r.session("s1").is_none());
    }

    /// Touches `clock` on `r` until the session `gone` has expired (the idle timeout has
    /// passed since it was last seen).
    fn until_expired(r: &SessionRegistry, clock: &str, gone: &str) {
        kberg_testkit::eventually(&format!("{gone} to expire"), || {
            assert!(r.touch("codex", None, Some(clock), None));
            r.session(gone).is_none()
        });
    }

    #[test]
    fn a_session_holding_a_listen_stream_open_does_not_go_idle() {
        let r = SessionRegistry::new(Duration::from_millis(50));
        assert!(r.touch("claude", None, Some("listening"), None));
        assert!(r.touch("claude", None, Some("quiet"), None));
        let stream = r.listening("listening");
        until_expired(&r, "clock", "quiet");
        let s = r
            .session("listening")
            .expect("a session with an open stream stays");
        assert!(r.sessions().iter().any(|x| x.id == "listening"));
        assert_eq!(s.requests, 1, "an open stream is not a request");
        // Two streams: open while either is.
        let second = r.listening("listening");
        drop(stream);
        assert!(r.touch("claude", None, Some("quiet-2"), None));
        until_expired(&r, "clock", "quiet-2");
        assert!(r.session("listening").is_some());
        // Closed: it goes idle as any session, from the stream's end.
        drop(second);
        until_expired(&r, "clock", "listening");
        assert!(r.book().streams.is_empty(), "nothing left behind");
    }

    /// A router, wrapped in [`track`] around `r`, whose `POST /json` and `POST /sse` record
    /// their session as the gateway's authenticator does, say so on `entered`, and answer:
    /// `/json` once `release` is notified, `/sse` at once with an event stream that never
    /// ends (the body of a call still running).
    fn slow_endpoint(
        r: &SessionRegistry,
        entered: tokio::sync::mpsc::UnboundedSender<()>,
        release: Arc<tokio::sync::Notify>,
    ) -> axum::Router {
        let authenticated = move |r: SessionRegistry, req: &axum::extract::Request| {
            let id = req
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let version = req
                .headers()
                .get("mcp-protocol-version")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            assert!(r.admit("claude", None, id.as_deref(), version.as_deref()));
        };
        let (json_r, sse_r) = (r.clone(), r.clone());
        let sse_entered = entered.clone();
        let app = axum::Router::new()
            .route(
                "/json",
                axum::routing::post(move |req: axum::extract::Request| async move {
                    authenticated(json_r, &req);
                    entered.send(()).expect("the test waits");
                    release.notified().await;
                    "done"
                }),
            )
            .route(
                "/sse",
                axum::routing::post(move |req: axum::extract::Request| async move {
                    authenticated(sse_r, &req);
                    sse_entered.send(()).expect("the test waits");
                    (
                        [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                        axum::body::Body::from_stream(futures::stream::pending::<
                            Result<axum::body::Bytes, std::convert::Infallible>,
                        >()),
                    )
                }),
            );
        track(app, r.clone())
    }

    fn post(path: &str, session: &str, version: &str) -> axum::extract::Request {
        axum::http::Request::post(path)
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", version)
            .body(axum::body::Body::empty())
            .expect("a request")
    }

    /// Before, a session whose only activity was one long call (its request answered later
    /// than the idle timeout) was dropped as idle while the call ran, as the transport, which
    /// counts a request in flight as activity, kept it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_with_a_request_in_flight_does_not_go_idle() {
        use tower::ServiceExt as _;
        let r = SessionRegistry::new(Duration::from_millis(50));
        for id in ["busy", "streaming", "quiet"] {
            assert!(r.touch("claude", None, Some(id), Some("2025-11-25")));
        }
        let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
        let release = Arc::new(tokio::sync::Notify::new());
        let app = slow_endpoint(&r, entered_tx, Arc::clone(&release));
        let call = tokio::spawn(app.clone().oneshot(post("/json", "busy", "2025-11-25")));
        entered.recv().await.expect("the call started");
        let stream = app
            .clone()
            .oneshot(post("/sse", "streaming", "2025-11-25"))
            .await
            .expect("an answer");
        entered.recv().await.expect("the streamed call started");
        // A 2026-07-28 client's one record, kept by its call in flight too.
        let stateless = tokio::spawn(app.oneshot(post("/json", "", "2026-07-28")));
        entered.recv().await.expect("the stateless call started");

        let kept = r.clone();
        tokio::task::spawn_blocking(move || until_expired(&kept, "clock", "quiet"))
            .await
            .expect("expired");
        for id in ["busy", "streaming", "claude/stateless"] {
            assert!(r.session(id).is_some(), "{id}: dropped while its call runs");
        }
        let before = ms(SystemTime::now());
        assert!(
            r.session("busy").expect("kept").last_seen_ms >= before,
            "listed as seen now"
        );

        // Answered: each goes idle as any session, from its answer's end.
        release.notify_waiters();
        call.await.expect("joined").expect("answered");
        stateless.await.expect("joined").expect("answered");
        drop(stream);
        let kept = r.clone();
        tokio::task::spawn_blocking(move || {
            for id in ["busy", "streaming", "claude/stateless"] {
                until_expired(&kept, "clock", id);
            }
        })
        .await
        .expect("expired");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_with_a_request_in_flight_on_one_replica_is_kept_by_every_replica() {
        use tower::ServiceExt as _;
        let ledger: Arc<dyn SessionLedger> = Arc::new(MemoryLedger::default());
        let idle = Duration::from_millis(500);
        let a = SessionRegistry::with_ledger(idle, Arc::clone(&ledger)).expect("a");
        let b = SessionRegistry::with_ledger(idle, ledger).expect("b");
        for id in ["busy", "quiet"] {
            assert!(a.touch("claude", None, Some(id), Some("2025-11-25")));
        }
        let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
        let release = Arc::new(tokio::sync::Notify::new());
        let app = slow_endpoint(&a, entered_tx, Arc::clone(&release));
        let call = tokio::spawn(app.oneshot(post("/json", "busy", "2025-11-25")));
        entered.recv().await.expect("the call started");
        let (ra, rb) = (a.clone(), b.clone());
        tokio::task::spawn_blocking(move || {
            kberg_testkit::eventually("the quiet session to expire", || {
                ra.sync().expect("a");
                rb.sync().expect("b");
                ra.session("quiet").is_none() && rb.session("quiet").is_none()
            });
        })
        .await
        .expect("expired");
        for r in [&a, &b] {
            assert!(r.session("busy").is_some(), "kept while its call runs");
        }
        release.notify_waiters();
        call.await.expect("joined").expect("answered");
        let (ra, rb) = (a.clone(), b.clone());
        tokio::task::spawn_blocking(move || {
            kberg_testkit::eventually("the answered session to expire", || {
                ra.sync().expect("a");
                rb.sync().expect("b");
                ra.session("busy").is_none() && rb.session("busy").is_none()
            });
        })
        .await
        .expect("expired");
    }

    #[test]
    fn a_session_listening_on_one_replica_is_kept_by_every_replica() {
        let ledger: Arc<dyn SessionLedger> = Arc::new(MemoryLedger::default());
        // Long enough that a replica's exchanges never lag it (as SYNC_EVERY never lags the
        // half hour of a served gateway).
        let idle = Duration::from_millis(500);
        let a = SessionRegistry::with_ledger(idle, Arc::clone(&ledger)).expect("a");
        let b = SessionRegistry::with_ledger(idle, ledger).expect("b");
        assert!(a.touch("claude", None, Some("listening"), None));
        assert!(a.touch("claude", None, Some("quiet"), None));
        let stream = a.listening("listening");
        a.sync().expect("a writes");
        b.sync().expect("b reads");
        assert!(b.session("quiet").is_some());
        // Each replica exchanges with the ledger (as `follow` does every SYNC_EVERY) until
        // the quiet session has gone idle everywhere.
        kberg_testkit::eventually("the quiet session to expire", || {
            a.sync().expect("a");
            b.sync().expect("b");
            a.session("quiet").is_none() && b.session("quiet").is_none()
        });
        for r in [&a, &b] {
            assert!(r.session("listening").is_some(), "kept while listening");
        }
        // Closed on A: it goes idle everywhere, as any session.
        assert!(!stream.ended().is_cancelled());
        drop(stream);
        kberg_testkit::eventually("the closed session to expire", || {
            a.sync().expect("a");
            b.sync().expect("b");
            a.session("listening").is_none() && b.session("listening").is_none()
        });
    }

    #[test]
    fn ending_a_session_ends_its_listen_streams_on_every_replica() {
        let ledger: Arc<dyn SessionLedger> = Arc::new(MemoryLedger::default());
        let a =
            SessionRegistry::with_ledger(Duration::from_secs(60), Arc::clone(&ledger)).expect("a");
        let b = SessionRegistry::with_ledger(Duration::from_secs(60), ledger).expect("b");
        assert!(a.touch("claude", None, Some("s1"), None));
        assert!(a.touch("claude", None, Some("s2"), None));
        let (s1, s2) = (a.listening("s1"), a.listening("s2"));
        a.sync().expect("a");
        b.sync().expect("b");
        // Ended on B: A's stream of it ends once A heard, the other one goes on.
        let mut ends = a.ledger().expect("shared").ends();
        assert!(b.end("s1"));
        b.sync().expect("b writes the end");
        let heard = ends.try_recv().expect("the end is announced");
        a.heard_end(heard.strip_prefix(ENDED_PREFIX).expect("an end"));
        assert!(s1.ended().is_cancelled());
        assert!(!s2.ended().is_cancelled());
        // Ended here (as a revocation ends every session of the agent).
        assert_eq!(a.end_agent("claude"), 1);
        assert!(s2.ended().is_cancelled());
        // A stream answered after its session was ended ends at once.
        assert!(a.listening("s2").ended().is_cancelled());
    }

    #[test]
    fn a_session_its_client_deleted_is_forgotten_on_every_replica_not_ended() {
        let ledger: Arc<dyn SessionLedger> = Arc::new(MemoryLedger::default());
        let a =
            SessionRegistry::with_ledger(Duration::from_secs(60), Arc::clone(&ledger)).expect("a");
        let b = SessionRegistry::with_ledger(Duration::from_secs(60), ledger).expect("b");
        assert!(a.touch("claude", None, Some("s1"), None));
        assert!(a.touch("claude", None, Some("s2"), None));
        a.sync().expect("a");
        b.sync().expect("b");
        let (on_b, other_on_b) = (b.listening("s1"), b.listening("s2"));
        let (mut a_events, mut b_events) = (a.subscribe(), b.subscribe());
        let mut heard = a.ledger().expect("shared").ends();
        // B counted a request of it just before; A's client deleted it.
        assert!(b.touch("claude", None, Some("s1"), None));
        assert!(a.forget("s1"));
        assert!(a.session("s1").is_none(), "gone here at once");
        assert!(!a.forget("s1"), "listed no more");
        a.sync().expect("a writes the forget");
        // B writes its request after the forget: that does not bring it back, and B's read
        // drops it (its stream ends) though B has not heard yet.
        b.sync().expect("b");
        assert!(b.session("s1").is_none());
        assert!(on_b.ended().is_cancelled());
        assert!(!other_on_b.ended().is_cancelled());
        // Hearing it then changes nothing more: one disconnect on each replica.
        let m = heard.try_recv().expect("the forget is announced");
        b.heard_forget(m.strip_prefix(FORGOTTEN_PREFIX).expect("a forget"));
        a.sync().expect("a");
        b.sync().expect("b");
        for (r, events) in [(&a, &mut a_events), (&b, &mut b_events)] {
            assert!(r.session("s1").is_none());
            assert!(r.session("s2").is_some());
            let mut gone = Vec::new();
            while let Ok(e) = events.try_recv() {
                if let SessionEvent::Disconnected { id, reason, .. } = e {
                    gone.push((id, reason));
                }
            }
            assert_eq!(gone, [("s1".to_string(), "closed")]);
            // Not ended: its id is not refused (the transport answers it), nor listed again.
            assert!(r.touch("claude", None, Some("s1"), None));
            assert!(r.session("s1").is_none());
            assert!(!r.end("s1"));
        }
        // Heard before B's read: its stream ends at once.
        let on_a = a.listening("s2");
        assert!(b.forget("s2"));
        a.heard_forget("s2");
        assert!(on_a.ended().is_cancelled());
        assert!(a.session("s2").is_none());
        // An ended session is not forgotten: it stays refused.
        assert!(a.touch("claude", None, Some("s3"), None));
        assert!(a.end("s3"));
        assert!(!a.forget("s3"));
        assert!(!a.touch("claude", None, Some("s3"), None));
        assert!(a.unwritten_batch().forgotten.is_empty());
    }

    #[test]
    fn made_up_session_ids_fill_only_the_agents_own_share() {
        let r = SessionRegistry::default();
        for i in 0..(MAX_SESSIONS_PER_AGENT + 500) {
            assert!(r.touch("claude", None, Some(&format!("made-up-{i}")), None));
        }
        let held = |agent: &str| r.sessions().iter().filter(|s| s.agent == agent).count();
        assert_eq!(held("claude"), MAX_SESSIONS_PER_AGENT);
        // Known sessions of the agent still count their requests; other agents are untouched.
        assert!(r.touch("claude", None, Some("made-up-0"), None));
        assert_eq!(r.session("made-up-0").map(|s| s.requests), Some(2));
        assert!(r.touch("codex", None, Some("codex-1"), None));
        assert!(r.session("codex-1").is_some());
        // An id no transport hands out is not recorded.
        let long = "x".repeat(MAX_SESSION_ID_LEN + 1);
        assert!(r.touch("codex", None, Some(&long), None));
        assert!(r.session(&long).is_none());
        assert_eq!(held("codex"), 1);
    }
}
