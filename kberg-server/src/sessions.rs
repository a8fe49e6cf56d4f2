//! The 2025-11-25 sessions behind rmcp's Streamable HTTP service: [`SessionTable`], Kberg's
//! implementation of rmcp's `SessionManager`, which keeps less per idle session than rmcp's
//! own `LocalSessionManager`.
//!
//! Why not rmcp's: `LocalSessionManager` puts a worker task between the HTTP service and each
//! session's MCP service, joined by five channels, and a tokio channel allocates its first
//! block of 32 message slots when it is created (about 12 kB for a JSON-RPC message). Here a
//! session is a routing table behind a lock: the HTTP side pushes the client's messages into
//! one channel of boxed messages that the session's MCP service reads, and the service's
//! `send` finds the SSE stream a message belongs to and writes it there itself. An idle
//! session is its entry in the table, that table, the one channel, and rmcp's own service task
//! (which every session manager gets).
//!
//! Routing (as rmcp's manager routes): a response or error goes to the stream of the POST that
//! carried its request and ends that stream; a progress notification goes to the stream of the
//! request that gave its token; a server request made while handling a client request
//! (elicitation, sampling, roots, which rmcp marks with `OriginatingRequestId`) goes to that
//! request's stream, and so does a tool's log message, which Kberg's client channel marks the
//! same way (rmcp's manager sends every log message to the standalone stream; the official
//! TypeScript and Python SDKs send a tool's on its request's stream, which a client that opens
//! no GET stream also reads); everything else goes to the session's standalone (GET) stream,
//! except an answer whose request's stream is gone (the client cancelled the request, or the
//! events kept after its client went away expired): it is dropped, since the specification
//! forbids a response on the standalone stream. Until a cancelled request's answer comes, its
//! progress is dropped too and a request to the client made while handling it fails, rather
//! than reach the standalone stream. A second
//! GET while one is open gets a stream that only carries keep-alives (rmcp's "shadow" stream,
//! so that competing reconnections do not take each other's place).
//!
//! Resumption (SSE `Last-Event-ID`, which the specification makes optional for servers): every
//! event gets an id, `<index>/<stream>` on a request's stream and `<index>` on the standalone
//! stream (whose index 0 is the priming event rmcp sends first), and the last
//! [`SessionSettings::replay`] events of each stream are kept while the stream lives. A GET with
//! `Last-Event-ID` gets the kept events *after* that id, as the specification says (rmcp's own
//! manager also repeats the event named). The id `0` is that of the priming event rmcp opens
//! every GET stream with, so it names no stream in particular: a GET after `0` gets what one
//! without `Last-Event-ID` gets, never again what an earlier GET stream delivered. A session
//! restored from rmcp's session store (on another replica, or after a restart) numbers its
//! streams and events from a random base of its own, so an id from another instance of the
//! session names nothing here (a request stream's is not found; a standalone one's is taken as
//! no `Last-Event-ID`), never another stream's events. A request's stream whose client went away before the
//! answer is kept with its events for [`SessionSettings::completed_ttl`], so a client that
//! reconnects still gets the answer; the events the standalone stream could not deliver because
//! none was open are delivered when the next one opens.
//!
//! A full stream (a client that stopped reading) holds up only the messages for that stream:
//! each waits for room in it, in order, without holding the session's routing lock, so the
//! session's other requests, its other streams, DELETE and idle expiry go on.
//!
//! Lifetime: a session ends on DELETE (or, with a session store, when the guard finds that the
//! store no longer has it: its client ended it on another instance), when its MCP service ends
//! (server shutdown), or when it has been idle for [`SessionSettings::idle_timeout`]: no message either way, no request in
//! flight and no standalone stream open. A session whose `initialize` never arrives ends after
//! [`SessionSettings::init_timeout`]. An ended session leaves the table at once, so a request
//! naming it is a `404` (or, with rmcp's session store configured, a restore).

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::Stream;
use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, GetExtensions, GetMeta, ProgressToken, RequestId,
    ServerJsonRpcMessage, ServerNotification,
};
use rmcp::service::OriginatingRequestId;
use rmcp::transport::Transport;
use rmcp::transport::common::server_side_http::session_id;
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use tokio::sync::{mpsc, oneshot};

/// How the session table keeps sessions and their streams.
#[derive(Debug, Clone)]
pub(crate) struct SessionSettings {
    /// A session idle this long ends; `None` keeps idle sessions until they are deleted.
    pub(crate) idle_timeout: Option<Duration>,
    /// A session whose `initialize` has not arrived this long after its creation ends.
    pub(crate) init_timeout: Duration,
    /// The `retry` of the priming event that opens each request's stream (`None`: no priming
    /// event). Must match the HTTP service's, which primes the standalone stream.
    pub(crate) sse_retry: Option<Duration>,
    /// Events a stream buffers for a client that reads slowly; beyond it a message for that
    /// stream waits for room (as with rmcp's manager), the session's other work does not. Also
    /// the depth of the client-to-service channel.
    pub(crate) capacity: usize,
    /// Events kept per stream for `Last-Event-ID` (at most `capacity`).
    pub(crate) replay: usize,
    /// How long the events of a request's stream whose client went away are kept for a resume.
    pub(crate) completed_ttl: Duration,
}

impl Default for SessionSettings {
    /// rmcp's defaults, with Kberg's idle expiry.
    fn default() -> Self {
        Self {
            idle_timeout: Some(Duration::from_secs(30 * 60)),
            init_timeout: Duration::from_secs(60),
            sse_retry: Some(Duration::from_secs(3)),
            capacity: 16,
            replay: 16,
            completed_ttl: Duration::from_secs(60),
        }
    }
}

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    /// No live session has this id.
    #[error("session not found: {0}")]
    NotFound(SessionId),
    /// The session ended while the operation ran.
    #[error("the session has ended")]
    Ended,
    /// A `Last-Event-ID` that names no event of this server's.
    #[error("invalid Last-Event-ID `{0}`")]
    BadEventId(String),
    /// A `Last-Event-ID` of a request's stream that is no longer kept.
    #[error("no stream to resume for Last-Event-ID `{0}`")]
    NoStream(String),
    /// The first message of a session was not a request.
    #[error("a session starts with the initialize request")]
    NotARequest,
    /// A request to the client made while handling a request the client has cancelled.
    #[error("the request it was made for was cancelled by the client")]
    Cancelled,
}

type Sessions = RwLock<HashMap<SessionId, Arc<Session>>>;

/// The live 2025-11-25 sessions of one HTTP endpoint (rmcp's `SessionManager`).
pub(crate) struct SessionTable {
    sessions: Arc<Sessions>,
    settings: Arc<SessionSettings>,
}

impl SessionTable {
    pub(crate) fn new(settings: SessionSettings) -> Self {
        Self {
            sessions: Arc::new(RwLock::new(HashMap::new())),
            settings: Arc::new(settings),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<SessionId, Arc<Session>>> {
        // Inserts and removals are single statements; a poisoned lock holds a consistent map.
        self.sessions.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many sessions are live.
    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether `id` names a live session.
    pub(crate) fn is_live(&self, id: &str) -> bool {
        self.read().get(id).is_some_and(|s| !s.has_ended())
    }

    /// Keeps in `map` only the entries whose key is a live session's id, or that `keep`
    /// keeps anyway.
    pub(crate) fn retain_live<V>(&self, map: &mut HashMap<String, V>, keep: impl Fn(&V) -> bool) {
        let live = self.read();
        map.retain(|id, v| keep(v) || live.contains_key(id.as_str()));
    }

    fn session(&self, id: &SessionId) -> Result<Arc<Session>, SessionError> {
        self.read()
            .get(id)
            .filter(|s| !s.has_ended())
            .cloned()
            .ok_or_else(|| SessionError::NotFound(id.clone()))
    }

    /// A new session under `id` with `routes`, in the table, and the transport its MCP
    /// service runs on.
    fn open(&self, id: SessionId, routes: Routes) -> SessionTransport {
        let (inbound, receiver) = mpsc::channel(self.settings.capacity.max(1));
        let session = Arc::new(Session {
            id: id.clone(),
            table: Arc::downgrade(&self.sessions),
            settings: Arc::clone(&self.settings),
            inbound: std::sync::Mutex::new(Some(inbound)),
            routes: tokio::sync::Mutex::new(routes),
            created: Instant::now(),
            last_active_ms: AtomicU64::new(0),
            ended: AtomicBool::new(false),
            ending: tokio::sync::Notify::new(),
        });
        self.sessions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::clone(&session));
        SessionTransport {
            session,
            inbound: receiver,
        }
    }
}

impl SessionManager for SessionTable {
    type Error = SessionError;
    type Transport = SessionTransport;

    async fn create_session(&self) -> Result<(SessionId, SessionTransport), SessionError> {
        let id = session_id();
        let transport = self.open(id.clone(), Routes::default());
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, SessionError> {
        let session = self.session(id)?;
        let ClientJsonRpcMessage::Request(request) = &message else {
            return Err(SessionError::NotARequest);
        };
        let (answer, answered) = oneshot::channel();
        {
            let mut routes = session.routes.lock().await;
            if routes.ended {
                return Err(SessionError::Ended);
            }
            routes.handshake = Some((request.id.clone(), answer));
        }
        session.push(message).await?;
        answered.await.map_err(|_| SessionError::Ended)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, SessionError> {
        Ok(self.session(id).is_ok())
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), SessionError> {
        let removed = self
            .sessions
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        if let Some(session) = removed {
            session.end().await;
        }
        Ok(())
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, SessionError> {
        let session = self.session(id)?;
        session.touch();
        let events = {
            let mut routes = session.routes.lock().await;
            if routes.ended {
                return Err(SessionError::Ended);
            }
            // A request whose id is still in flight in this session (a client that retried
            // without waiting) is answered `-32600` on its own stream and never reaches the
            // service: routed, it would take over the first request's stream, which would
            // then wait for ever and keep the session from expiring.
            if let ClientJsonRpcMessage::Request(request) = &message
                && routes
                    .keys
                    .contains_key(&RouteKey::Request(request.id.clone()))
            {
                return Ok(SseEvents(duplicate_id(request.id.clone())));
            }
            let stream = routes.next_stream;
            routes.next_stream = routes.next_stream.wrapping_add(1);
            let (tx, rx) = mpsc::channel(self.settings.capacity.max(1));
            let mut entry = RequestStream {
                tx: Some(tx),
                waiting: VecDeque::new(),
                events: Replay::new(0),
                keys: Vec::new(),
                completed: None,
            };
            if let Some(retry) = self.settings.sse_retry {
                let priming = entry.events.stamp(
                    ServerSseMessage::retry(retry),
                    Some(stream),
                    self.settings.replay,
                );
                entry.offer(priming);
            }
            // Registered before the request reaches the service, so its answer finds the way.
            if let ClientJsonRpcMessage::Request(request) = &message {
                entry.keys.push(RouteKey::Request(request.id.clone()));
                if let Some(token) = request.request.get_meta().get_progress_token() {
                    entry.keys.push(RouteKey::Progress(token));
                }
            }
            for key in &entry.keys {
                routes.keys.insert(key.clone(), stream);
            }
            routes.streams.insert(stream, entry);
            SseEvents(rx)
        };
        session.push(message).await?;
        Ok(events)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), SessionError> {
        let session = self.session(id)?;
        if let ClientJsonRpcMessage::Notification(n) = &message
            && let ClientNotification::CancelledNotification(c) = &n.notification
            && let Some(request) = &c.params.request_id
        {
            // The client gave up on the request: its stream ends; its events stay for a while.
            let mut routes = session.routes.lock().await;
            routes.cancel(&RouteKey::Request(request.clone()));
        }
        session.push(message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, SessionError> {
        let session = self.session(id)?;
        session.touch();
        let mut routes = session.routes.lock().await;
        if routes.ended {
            return Err(SessionError::Ended);
        }
        Ok(routes.open_standalone(&self.settings, None))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, SessionError> {
        let session = self.session(id)?;
        session.touch();
        let (index, stream) = parse_event_id(&last_event_id)
            .ok_or_else(|| SessionError::BadEventId(last_event_id.clone()))?;
        let mut routes = session.routes.lock().await;
        if routes.ended {
            return Err(SessionError::Ended);
        }
        let Some(stream) = stream else {
            // `0` is the id of the priming event rmcp opens every GET stream with, the same on
            // each: a client that saw nothing after it may have seen it on any of them, and
            // replaying every kept event would repeat what earlier GET streams delivered. It
            // gets what a GET without `Last-Event-ID` gets: what no stream could deliver. So
            // does an id this instance of the session never gave (another replica's).
            let last_seen = routes.standalone_events.stamped(index).then_some(index);
            return Ok(routes.open_standalone(&self.settings, last_seen));
        };
        let entry = routes
            .streams
            .get_mut(&stream)
            .ok_or(SessionError::NoStream(last_event_id))?;
        let (tx, rx) = mpsc::channel(self.settings.capacity.max(1));
        for event in entry.events.after(index) {
            let _ = tx.try_send(event.clone());
        }
        // What waited for room in the old connection's stream was stamped, so it is among the
        // replayed events; its senders give up when they see the stream's channel replaced.
        let answered = entry.waiting.iter().any(|w| w.ends);
        entry.waiting.clear();
        // A completed stream ends after its replay (so does one whose answer was waiting); a
        // live one goes on on the new connection.
        if entry.completed.is_none() {
            if answered {
                routes.complete_stream(stream);
            } else {
                entry.tx = Some(tx);
            }
        }
        Ok(SseEvents(rx))
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<SessionTransport>, SessionError> {
        if self.session(&id).is_ok() {
            return Ok(RestoreOutcome::AlreadyPresent);
        }
        // Another instance of this session (another replica's, or this one's before a
        // restart) numbered its streams and events from the start too: this one numbers them
        // from a base of its own, so an event id the client got from the other is not taken
        // for one of these (a resume would replay another stream's events).
        Ok(RestoreOutcome::Restored(
            self.open(id, Routes::numbered_from(restored_base())),
        ))
    }
}

/// Where a restored session's stream and event numbers start: far from a fresh session's
/// (which start at 0 and 1) and from another restored instance's, below 2^53 so that they stay
/// exact in a JavaScript client, with room for 2^32 streams and events.
fn restored_base() -> u64 {
    use std::hash::BuildHasher;
    // Each `RandomState` is keyed afresh (from the system's random source once per thread,
    // then stepped), which is all the difference between instances this needs.
    let random = std::hash::RandomState::new().hash_one(std::time::SystemTime::now());
    (1 << 32) + random % ((1 << 53) - (1 << 33))
}

/// `<index>/<stream>` (a request's stream) or `<index>` (the standalone stream).
fn parse_event_id(id: &str) -> Option<(u64, Option<u64>)> {
    match id.split_once('/') {
        Some((index, stream)) => Some((index.parse().ok()?, Some(stream.parse().ok()?))),
        None => Some((id.parse().ok()?, None)),
    }
}

/// One session: the channel to its MCP service and where its messages go.
struct Session {
    id: SessionId,
    table: Weak<Sessions>,
    settings: Arc<SessionSettings>,
    /// Client messages to the MCP service; taken when the session ends, which ends the
    /// service's input once what is queued has been read.
    inbound: std::sync::Mutex<Option<mpsc::Sender<Box<ClientJsonRpcMessage>>>>,
    /// Where messages go. Never held while waiting for room in a stream (see
    /// [`Session::deliver`]): a client that stops reading must not stop the session.
    routes: tokio::sync::Mutex<Routes>,
    created: Instant,
    /// Milliseconds after `created` of the last message or stream either way.
    last_active_ms: AtomicU64,
    ended: AtomicBool,
    /// Wakes the messages waiting for room in a stream when the session ends.
    ending: tokio::sync::Notify,
}

impl Session {
    fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    fn touch(&self) {
        let now = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_active_ms.fetch_max(now, Ordering::Relaxed);
    }

    fn last_active(&self) -> Instant {
        self.created + Duration::from_millis(self.last_active_ms.load(Ordering::Relaxed))
    }

    /// Hands a client message to the session's MCP service.
    async fn push(&self, message: ClientJsonRpcMessage) -> Result<(), SessionError> {
        self.touch();
        let inbound = self
            .inbound
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or(SessionError::Ended)?;
        inbound
            .send(Box::new(message))
            .await
            .map_err(|_| SessionError::Ended)
    }

    /// Ends the session: out of the table, its service's input closed, its streams ended.
    async fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.ending.notify_waiters();
        if let Some(table) = self.table.upgrade() {
            let mut sessions = table.write().unwrap_or_else(PoisonError::into_inner);
            // Only this session: a restore may have put a new one under the same id.
            if sessions
                .get(&self.id)
                .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), self))
            {
                sessions.remove(&self.id);
            }
        }
        self.inbound
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let mut routes = self.routes.lock().await;
        routes.ended = true;
        routes.handshake = None;
        routes.streams.clear();
        routes.keys.clear();
        routes.standalone = None;
        routes.standalone_waiting.clear();
        routes.shadows.clear();
    }

    /// Sends a message of the session's MCP service to the stream it belongs to.
    ///
    /// The message is numbered and offered under the routing lock. If its stream is full (or
    /// earlier messages already wait for it), it joins the stream's queue of waiting events
    /// and this waits for room *after* releasing the lock, then sends the oldest waiting
    /// event: the stream's events keep their order, and a client that stopped reading holds
    /// up only the senders of its own stream, as rmcp's manager does, not the session.
    async fn deliver(&self, message: ServerJsonRpcMessage) -> Result<(), SessionError> {
        self.touch();
        let replay = self.settings.replay;
        let mut routes = self.routes.lock().await;
        let answers = match &message {
            ServerJsonRpcMessage::Response(r) => Some(&r.id),
            ServerJsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        if routes.ended {
            // Nobody is left to tell about an answer; a request or notification fails.
            return if answers.is_some() {
                tracing::debug!(session = %self.id, "the session ended; an answer was dropped");
                Ok(())
            } else {
                Err(SessionError::Ended)
            };
        }
        if let (Some(id), Some((handshake, _))) = (answers, &routes.handshake)
            && id == handshake
            && let Some((_, answer)) = routes.handshake.take()
        {
            routes.initialized = true;
            let _ = answer.send(message);
            return Ok(());
        }
        let route = routes.route(&message);
        if route.is_none() && routes.for_cancelled(&message) {
            // The client cancelled the request this belongs to and waits for none of it: not
            // its answer, not its progress, not a question its tool would ask on the
            // standalone stream (that request fails here, and the tool with it).
            tracing::debug!(session = %self.id, "a message for a cancelled request was dropped");
            return match message {
                ServerJsonRpcMessage::Request(_) => Err(SessionError::Cancelled),
                _ => Ok(()),
            };
        }
        let is_answer = matches!(
            message,
            ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_)
        );
        if route.is_none() && is_answer {
            // An answer whose request was cancelled, or whose stream's events have expired:
            // the client waits for it nowhere, and the standalone stream must not carry a
            // response. (Progress of a task outlives its request's stream, and goes there.)
            tracing::debug!(session = %self.id, "an answer nobody waits for was dropped");
            return Ok(());
        }
        let (stream, tx, mine) = match route {
            Some((stream, ends)) => {
                let Some(entry) = routes.streams.get_mut(&stream) else {
                    return Ok(());
                };
                let event = entry.events.stamp(
                    ServerSseMessage::from_message(message),
                    Some(stream),
                    replay,
                );
                let index = entry.events.next - 1;
                let waiting = Waiting { event, ends, index };
                match offer(entry.tx.as_ref(), &mut entry.waiting, waiting) {
                    Offer::Sent => {
                        if ends {
                            routes.remove_stream(stream);
                        }
                        return Ok(());
                    }
                    Offer::Gone(_) => {
                        // The client went away; what it missed waits for a resume.
                        routes.request_client_gone(stream, ends);
                        return Ok(());
                    }
                    Offer::Wait(tx) => (Some(stream), tx, index),
                }
            }
            None => {
                let event = routes.standalone_events.stamp(
                    ServerSseMessage::from_message(message),
                    None,
                    replay,
                );
                let index = routes.standalone_events.next - 1;
                let waiting = Waiting {
                    event,
                    ends: false,
                    index,
                };
                let routes = &mut *routes;
                match offer(
                    routes.standalone.as_ref(),
                    &mut routes.standalone_waiting,
                    waiting,
                ) {
                    Offer::Sent => return Ok(()),
                    Offer::Gone(index) => {
                        routes.standalone_gone(Some(index));
                        return Ok(());
                    }
                    Offer::Wait(tx) => (None, tx, index),
                }
            }
        };
        drop(routes);
        self.send_when_room(stream, tx, mine).await;
        Ok(())
    }

    /// Waits for room in the channel `tx` of `stream` (`None`: the standalone stream) and
    /// sends the oldest event waiting for it, until the event numbered `mine` has been sent.
    /// Gives up if the session ends, or the stream went away or was replaced meanwhile (its
    /// waiting events were then dealt with).
    async fn send_when_room(
        &self,
        stream: Option<u64>,
        tx: mpsc::Sender<ServerSseMessage>,
        mine: u64,
    ) {
        let ending = self.ending.notified();
        let mut ending = std::pin::pin!(ending);
        // Registered before the flag is read, so an end between the two still wakes this.
        ending.as_mut().enable();
        if self.has_ended() {
            return;
        }
        loop {
            let permit = tokio::select! {
                permit = tx.reserve() => permit.ok(),
                () = ending.as_mut() => return,
            };
            let mut routes = self.routes.lock().await;
            if routes.ended {
                return;
            }
            let routes = &mut *routes;
            let (current, waiting) = match stream {
                Some(stream) => match routes.streams.get_mut(&stream) {
                    Some(entry) => (entry.tx.as_ref(), &mut entry.waiting),
                    None => return,
                },
                None => (routes.standalone.as_ref(), &mut routes.standalone_waiting),
            };
            if !current.is_some_and(|current| current.same_channel(&tx)) {
                return;
            }
            let Some(permit) = permit else {
                // The client went away while this waited.
                match stream {
                    Some(stream) => routes.request_client_gone(stream, false),
                    None => routes.standalone_gone(None),
                }
                return;
            };
            let Some(next) = waiting.pop_front() else {
                return;
            };
            permit.send(next.event);
            if next.ends {
                // The answer: its stream is done, with whatever still waited behind it.
                if let Some(stream) = stream {
                    routes.remove_stream(stream);
                }
                return;
            }
            // Another sender's event was still ahead of this one (its sender gave up before
            // sending it): wait for room again.
            if waiting.front().is_none_or(|w| w.index > mine) {
                return;
            }
        }
    }

    /// When the session's transport must next look at the clock: the end of the handshake
    /// window, the idle deadline, or the expiry of a completed stream's events.
    async fn next_wake(&self) -> Option<Instant> {
        let routes = self.routes.lock().await;
        if routes.ended {
            return None;
        }
        // A time the clock cannot hold (an idle timeout of `Duration::MAX`) is never reached.
        let expiry = if routes.initialized {
            self.settings
                .idle_timeout
                .and_then(|idle| self.last_active().checked_add(idle))
        } else {
            self.created.checked_add(self.settings.init_timeout)
        };
        let eviction = routes
            .streams
            .values()
            .filter_map(|s| s.completed)
            .min()
            .and_then(|at| at.checked_add(self.settings.completed_ttl));
        match (expiry, eviction) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// At a wake-up: drops expired completed streams and says whether the session expired.
    async fn check_expiry(&self) -> bool {
        let now = Instant::now();
        let mut routes = self.routes.lock().await;
        let ttl = self.settings.completed_ttl;
        routes
            .streams
            .retain(|_, s| s.completed.is_none_or(|at| now.duration_since(at) < ttl));
        if !routes.initialized {
            return now.duration_since(self.created) >= self.settings.init_timeout;
        }
        let Some(idle) = self.settings.idle_timeout else {
            return false;
        };
        if now.duration_since(self.last_active()) < idle {
            return false;
        }
        let busy = routes.streams.values().any(|s| s.completed.is_none())
            || routes.standalone.as_ref().is_some_and(|tx| !tx.is_closed());
        if busy {
            // A request in flight or an open GET stream: not idle; look again later.
            self.touch();
            return false;
        }
        true
    }
}

/// The streams of a session and which messages go to which.
#[derive(Default)]
struct Routes {
    ended: bool,
    /// The `initialize` request's id and where its answer goes, until it is answered.
    handshake: Option<(RequestId, oneshot::Sender<ServerJsonRpcMessage>)>,
    initialized: bool,
    next_stream: u64,
    /// The streams of requests: in flight, or completed and kept for a resume.
    streams: HashMap<u64, RequestStream>,
    /// The request ids and progress tokens of requests in flight, to their stream.
    keys: HashMap<RouteKey, u64>,
    /// The primary standalone (GET) stream.
    standalone: Option<mpsc::Sender<ServerSseMessage>>,
    /// Events that wait for room in the standalone stream, oldest first.
    standalone_waiting: VecDeque<Waiting>,
    /// The standalone stream's events; index 0 is rmcp's priming event.
    standalone_events: Replay,
    /// The first standalone event sent while no standalone stream was open.
    undelivered_from: Option<u64>,
    /// Further GET streams while the primary is open: keep-alives only.
    shadows: Vec<mpsc::Sender<ServerSseMessage>>,
    /// The request ids and progress tokens of the latest requests the client cancelled, one
    /// list per request, until the request's answer comes (at most [`MAX_CANCELLED`]): what
    /// their tools still send goes nowhere.
    cancelled: VecDeque<Vec<RouteKey>>,
}

/// Most cancelled requests remembered per session (the oldest is forgotten beyond).
const MAX_CANCELLED: usize = 64;

/// Most keep-alive-only GET streams per session (the oldest is ended beyond).
const MAX_SHADOW_STREAMS: usize = 32;

impl Routes {
    /// Routes whose streams are numbered from `base` and whose standalone events from
    /// `base + 1` (a fresh session's: from 0 and 1).
    fn numbered_from(base: u64) -> Self {
        Self {
            next_stream: base,
            standalone_events: Replay::new(base + 1),
            ..Self::default()
        }
    }

    /// The stream a message goes to and whether it ends that stream; `None` is the standalone.
    fn route(&self, message: &ServerJsonRpcMessage) -> Option<(u64, bool)> {
        let find = |key: RouteKey| self.keys.get(&key).copied();
        match message {
            ServerJsonRpcMessage::Response(r) => find(RouteKey::Request(r.id.clone())).map(end),
            ServerJsonRpcMessage::Error(e) => {
                e.id.clone()
                    .and_then(|id| find(RouteKey::Request(id)))
                    .map(end)
            }
            ServerJsonRpcMessage::Notification(n) => match &n.notification {
                ServerNotification::ProgressNotification(p) => {
                    find(RouteKey::Progress(p.params.progress_token.clone())).map(keep)
                }
                // The server's own `notifications/cancelled` names one of *its* requests, whose
                // ids are not the client's: it is routed by the request it was sent for, if
                // marked, like any other notification, never by looking its id up among the
                // client's requests.
                // A tool's log message, marked with the request whose tool sent it.
                other => other
                    .extensions()
                    .get::<OriginatingRequestId>()
                    .and_then(|origin| find(RouteKey::Request(origin.0.clone())))
                    .map(keep),
            },
            ServerJsonRpcMessage::Request(r) => {
                let origin = r.request.extensions().get::<OriginatingRequestId>()?;
                let stream = find(RouteKey::Request(origin.0.clone()));
                if stream.is_none() {
                    tracing::debug!(
                        originating_request = ?origin.0.to_string(),
                        "the request this server request belongs to has completed; \
                         it goes to the standalone stream"
                    );
                }
                stream.map(keep)
            }
        }
    }

    /// The client cancelled the request of `key`: its stream ends (its events stay), and what
    /// its tool still sends for it is dropped ([`Routes::for_cancelled`]) until its answer.
    fn cancel(&mut self, key: &RouteKey) {
        let Some(stream) = self.keys.get(key).copied() else {
            return;
        };
        if let Some(entry) = self.streams.get(&stream) {
            if self.cancelled.len() >= MAX_CANCELLED {
                self.cancelled.pop_front();
            }
            self.cancelled.push_back(entry.keys.clone());
        }
        self.complete_stream(stream);
    }

    /// Whether `message`, which found no stream, belongs to a request the client cancelled: its
    /// answer (which forgets the request), its progress, or a request made while handling it.
    fn for_cancelled(&mut self, message: &ServerJsonRpcMessage) -> bool {
        let key = match message {
            ServerJsonRpcMessage::Response(r) => RouteKey::Request(r.id.clone()),
            ServerJsonRpcMessage::Error(e) => match &e.id {
                Some(id) => RouteKey::Request(id.clone()),
                None => return false,
            },
            ServerJsonRpcMessage::Notification(n) => match &n.notification {
                ServerNotification::ProgressNotification(p) => {
                    RouteKey::Progress(p.params.progress_token.clone())
                }
                _ => return false,
            },
            ServerJsonRpcMessage::Request(r) => {
                match r.request.extensions().get::<OriginatingRequestId>() {
                    Some(origin) => RouteKey::Request(origin.0.clone()),
                    None => return false,
                }
            }
        };
        let Some(at) = self.cancelled.iter().position(|keys| keys.contains(&key)) else {
            return false;
        };
        if matches!(
            message,
            ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_)
        ) {
            self.cancelled.remove(at);
        }
        true
    }

    fn complete_stream(&mut self, stream: u64) {
        if let Some(entry) = self.streams.get_mut(&stream) {
            // Events that waited for room are kept with the others, for a resume.
            entry.tx = None;
            entry.waiting.clear();
            entry.completed = Some(Instant::now());
            for key in entry.keys.drain(..) {
                self.keys.remove(&key);
            }
        }
    }

    fn remove_stream(&mut self, stream: u64) {
        if let Some(entry) = self.streams.remove(&stream) {
            for key in entry.keys {
                self.keys.remove(&key);
            }
        }
    }

    /// The client of request stream `stream` went away: what it missed (with the events that
    /// waited for room) is kept for a resume, and the stream is complete if its answer was
    /// among them (`answered`: the event that found it gone was the answer).
    fn request_client_gone(&mut self, stream: u64, answered: bool) {
        let Some(entry) = self.streams.get_mut(&stream) else {
            return;
        };
        let answered = answered || entry.waiting.iter().any(|w| w.ends);
        entry.tx = None;
        entry.waiting.clear();
        if answered {
            self.complete_stream(stream);
        }
    }

    /// The client of the standalone stream went away: the events from the first that waited
    /// for room (or else from `missed`) are delivered when the next GET opens.
    fn standalone_gone(&mut self, missed: Option<u64>) {
        let first = self.standalone_waiting.front().map(|w| w.index).or(missed);
        self.standalone = None;
        self.standalone_waiting.clear();
        if let Some(first) = first {
            self.undelivered_from.get_or_insert(first);
        }
    }

    /// A GET stream: the primary one when none is open, otherwise a keep-alive-only one. The
    /// primary one starts with the kept events after `last_seen` (a resume), or else with
    /// those the previous one could not deliver.
    fn open_standalone(&mut self, settings: &SessionSettings, last_seen: Option<u64>) -> SseEvents {
        if self.standalone.as_ref().is_some_and(|tx| !tx.is_closed()) {
            self.shadows.retain(|tx| !tx.is_closed());
            if self.shadows.len() >= MAX_SHADOW_STREAMS {
                self.shadows.remove(0);
            }
            let (tx, rx) = mpsc::channel(1);
            self.shadows.push(tx);
            return SseEvents(rx);
        }
        if self.standalone.is_some() {
            // Its client went away before a send noticed.
            self.standalone_gone(None);
        }
        let from = match last_seen {
            Some(index) => Some(index.saturating_add(1)),
            None => self.undelivered_from,
        };
        let (tx, rx) = mpsc::channel(settings.capacity.max(1));
        if let Some(from) = from {
            for event in self.standalone_events.after(from.saturating_sub(1)) {
                let _ = tx.try_send(event.clone());
            }
        }
        self.undelivered_from = None;
        self.standalone = Some(tx);
        SseEvents(rx)
    }
}

fn end(stream: u64) -> (u64, bool) {
    (stream, true)
}

fn keep(stream: u64) -> (u64, bool) {
    (stream, false)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq)]
enum RouteKey {
    Request(RequestId),
    Progress(ProgressToken),
}

/// The stream of one POSTed request.
struct RequestStream {
    /// `None` once the client went away or the request completed.
    tx: Option<mpsc::Sender<ServerSseMessage>>,
    /// Events that wait for room in `tx`, oldest first.
    waiting: VecDeque<Waiting>,
    events: Replay,
    keys: Vec<RouteKey>,
    /// When the request completed without its client there to read the answer.
    completed: Option<Instant>,
}

impl RequestStream {
    /// Sends to a stream that was just created (it has room).
    fn offer(&self, event: ServerSseMessage) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(event);
        }
    }
}

/// An event that found its stream full. Its [`Session::deliver`] waits for room, then sends
/// the oldest waiting event, until its own has been sent.
struct Waiting {
    event: ServerSseMessage,
    /// It is the answer that ends a request's stream.
    ends: bool,
    /// Its number in its stream.
    index: u64,
}

/// What became of an event offered to a stream.
enum Offer {
    Sent,
    /// The stream's client went away (or none is connected); the event's number.
    Gone(u64),
    /// The event waits for room in this channel.
    Wait(mpsc::Sender<ServerSseMessage>),
}

/// Offers `event` to the stream `tx`: sent at once if nothing waits and there is room, else
/// queued behind the events already waiting, so the stream's order holds.
fn offer(
    tx: Option<&mpsc::Sender<ServerSseMessage>>,
    waiting: &mut VecDeque<Waiting>,
    mut event: Waiting,
) -> Offer {
    let Some(tx) = tx else {
        return Offer::Gone(event.index);
    };
    if waiting.is_empty() {
        match tx.try_send(event.event) {
            Ok(()) => return Offer::Sent,
            Err(mpsc::error::TrySendError::Closed(_)) => return Offer::Gone(event.index),
            Err(mpsc::error::TrySendError::Full(back)) => event.event = back,
        }
    }
    waiting.push_back(event);
    Offer::Wait(tx.clone())
}

/// The numbering of a stream's events and the last ones sent, for `Last-Event-ID`.
struct Replay {
    /// The index of the first event stamped.
    first: u64,
    next: u64,
    kept: VecDeque<ServerSseMessage>,
}

impl Default for Replay {
    /// The standalone stream's: index 0 is the priming event the HTTP service sends.
    fn default() -> Self {
        Self::new(1)
    }
}

impl Replay {
    fn new(first: u64) -> Self {
        Self {
            first,
            next: first,
            kept: VecDeque::new(),
        }
    }

    /// Whether `index` names an event this stream has stamped.
    fn stamped(&self, index: u64) -> bool {
        (self.first..self.next).contains(&index)
    }

    /// Gives `event` the next id (on `stream`, or the standalone stream) and keeps a copy.
    fn stamp(
        &mut self,
        mut event: ServerSseMessage,
        stream: Option<u64>,
        keep: usize,
    ) -> ServerSseMessage {
        let index = self.next;
        self.next += 1;
        event.event_id = Some(match stream {
            Some(stream) => format!("{index}/{stream}"),
            None => index.to_string(),
        });
        if keep > 0 {
            if self.kept.len() >= keep {
                self.kept.pop_front();
            }
            self.kept.push_back(event.clone());
        }
        event
    }

    /// The kept events after the one numbered `index`.
    fn after(&self, index: u64) -> impl Iterator<Item = &ServerSseMessage> {
        let first_kept = self.next - self.kept.len() as u64;
        let skip = index.saturating_add(1).saturating_sub(first_kept);
        self.kept
            .iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
    }
}

/// The events of one SSE stream, as rmcp's HTTP service writes them out.
pub(crate) struct SseEvents(mpsc::Receiver<ServerSseMessage>);

/// A stream with one event: the `-32600` answer to a request whose id is already in flight.
fn duplicate_id(id: RequestId) -> mpsc::Receiver<ServerSseMessage> {
    let (tx, rx) = mpsc::channel(1);
    let error = rmcp::model::ErrorData::invalid_request(
        "a request with this id is still in flight in this session; use a new id",
        None,
    );
    let answer = ServerJsonRpcMessage::Error(rmcp::model::JsonRpcError::new(Some(id), error));
    // The channel has room for this one event and nothing else was sent on it.
    let _ = tx.try_send(ServerSseMessage::from_message(answer));
    rx
}

impl Stream for SseEvents {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// The transport a session's MCP service runs on: it reads the client's messages from the
/// session's channel and sends its own straight to their streams.
pub(crate) struct SessionTransport {
    session: Arc<Session>,
    inbound: mpsc::Receiver<Box<ClientJsonRpcMessage>>,
}

impl Transport<RoleServer> for SessionTransport {
    type Error = SessionError;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SessionError>> + Send + 'static {
        let session = Arc::clone(&self.session);
        async move { session.deliver(item).await }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let message = match self.session.next_wake().await {
                None => self.inbound.recv().await,
                Some(at) => tokio::select! {
                    m = self.inbound.recv() => m,
                    () = tokio::time::sleep_until(at.into()) => {
                        if self.session.check_expiry().await {
                            tracing::debug!(session = %self.session.id, "the session expired");
                            self.session.end().await;
                            return None;
                        }
                        continue;
                    }
                },
            };
            return message.map(|m| *m);
        }
    }

    async fn close(&mut self) -> Result<(), SessionError> {
        self.session.end().await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use serde_json::{Value, json};

    use super::*;

    fn client(v: Value) -> ClientJsonRpcMessage {
        serde_json::from_value(v).expect("a client message")
    }

    fn server(v: Value) -> ServerJsonRpcMessage {
        serde_json::from_value(v).expect("a server message")
    }

    fn answer(id: i64) -> ServerJsonRpcMessage {
        server(json!({"jsonrpc": "2.0", "id": id, "result": {}}))
    }

    fn call(id: i64, meta: Value) -> ClientJsonRpcMessage {
        client(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "t", "arguments": {}, "_meta": meta}}))
    }

    /// A session past its handshake, and the transport its service would run on.
    async fn session(settings: SessionSettings) -> (SessionTable, SessionId, SessionTransport) {
        let table = SessionTable::new(settings);
        let (id, mut transport) = table.create_session().await.expect("create");
        let init = client(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
        );
        let handshake = table.initialize_session(&id, init);
        let service = async {
            let m = transport.receive().await.expect("the initialize request");
            assert!(matches!(m, ClientJsonRpcMessage::Request(_)));
            transport.send(answer(0)).await.expect("answer");
        };
        let (answered, ()) = tokio::join!(handshake, service);
        assert!(matches!(
            answered.expect("handshake"),
            ServerJsonRpcMessage::Response(_)
        ));
        (table, id, transport)
    }

    /// A server request (`roots/list`) made while handling the client's request `origin`.
    fn asked_for(origin: i64) -> ServerJsonRpcMessage {
        let mut ask = server(json!({"jsonrpc": "2.0", "id": 100, "method": "roots/list"}));
        if let ServerJsonRpcMessage::Request(r) = &mut ask {
            r.request
                .extensions_mut()
                .insert(OriginatingRequestId(RequestId::Number(origin)));
        }
        ask
    }

    async fn next(events: &mut (impl Stream<Item = ServerSseMessage> + Unpin)) -> ServerSseMessage {
        tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("an event in time")
            .expect("the stream is open")
    }

    fn json_of(event: &ServerSseMessage) -> Value {
        serde_json::to_value(event.message.as_deref().expect("a message")).expect("json")
    }

    #[tokio::test]
    async fn an_answer_goes_to_its_request_stream_and_ends_it() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let mut events = table
            .create_stream(&id, call(1, json!({"progressToken": "p1"})))
            .await
            .expect("stream");
        let priming = next(&mut events).await;
        assert_eq!(priming.event_id.as_deref(), Some("0/0"));
        assert!(priming.message.is_none() && priming.retry.is_some());
        assert!(transport.receive().await.is_some());
        transport
            .send(server(
                json!({"jsonrpc": "2.0", "method": "notifications/progress",
                                 "params": {"progressToken": "p1", "progress": 1}}),
            ))
            .await
            .expect("progress");
        transport.send(answer(1)).await.expect("answer");
        let progress = next(&mut events).await;
        assert_eq!(progress.event_id.as_deref(), Some("1/0"));
        assert_eq!(json_of(&progress)["method"], "notifications/progress");
        let done = next(&mut events).await;
        assert_eq!(done.event_id.as_deref(), Some("2/0"));
        assert_eq!(json_of(&done)["id"], 1);
        assert!(events.next().await.is_none(), "the answer ends the stream");
    }

    #[tokio::test]
    async fn unrouted_messages_wait_for_the_standalone_stream() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let changed =
            || server(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        transport
            .send(changed())
            .await
            .expect("sent with no stream open");
        let mut get = table.create_standalone_stream(&id).await.expect("get");
        let first = next(&mut get).await;
        assert_eq!(first.event_id.as_deref(), Some("1"));
        transport.send(changed()).await.expect("sent");
        assert_eq!(next(&mut get).await.event_id.as_deref(), Some("2"));
        // A second GET while the first is open carries nothing.
        let mut shadow = table.create_standalone_stream(&id).await.expect("shadow");
        transport.send(changed()).await.expect("sent");
        assert_eq!(next(&mut get).await.event_id.as_deref(), Some("3"));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), shadow.next())
                .await
                .is_err(),
            "the shadow stream stays silent"
        );
        // Reconnecting after event 1 replays 2 and 3, not 1 again.
        drop(get);
        let mut resumed = table.resume(&id, "1".into()).await.expect("resume");
        assert_eq!(next(&mut resumed).await.event_id.as_deref(), Some("2"));
        assert_eq!(next(&mut resumed).await.event_id.as_deref(), Some("3"));
    }

    #[tokio::test]
    async fn the_answer_of_a_cancelled_request_goes_nowhere() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let mut get = table.create_standalone_stream(&id).await.expect("get");
        let mut events = table
            .create_stream(&id, call(5, json!({"progressToken": "p5"})))
            .await
            .expect("stream");
        assert_eq!(next(&mut events).await.event_id.as_deref(), Some("0/0"));
        assert!(transport.receive().await.is_some());
        let cancel = client(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                   "params": {"requestId": 5, "reason": "gave up"}}),
        );
        table.accept_message(&id, cancel).await.expect("cancel");
        assert!(transport.receive().await.is_some(), "the service sees it");
        assert!(events.next().await.is_none(), "the request's stream ends");
        // Until the tool has stopped, what it sends goes nowhere: its progress, and a question
        // to the client, which fails.
        transport
            .send(server(
                json!({"jsonrpc": "2.0", "method": "notifications/progress",
                       "params": {"progressToken": "p5", "progress": 1}}),
            ))
            .await
            .expect("progress dropped quietly");
        assert!(
            matches!(
                transport.send(asked_for(5)).await,
                Err(SessionError::Cancelled)
            ),
            "a question for a cancelled request fails"
        );
        // The service answers anyway (the tool had finished, or answers its cancellation):
        // neither as a result nor as an error does it reach the standalone stream.
        transport.send(answer(5)).await.expect("answer");
        transport
            .send(server(json!({"jsonrpc": "2.0", "id": 5,
                                "error": {"code": -32603, "message": "cancelled"}})))
            .await
            .expect("error");
        transport
            .send(server(
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
            ))
            .await
            .expect("notification");
        let first = next(&mut get).await;
        assert_eq!(
            json_of(&first)["method"],
            "notifications/tools/list_changed",
            "the first event of the standalone stream: {:?}",
            first.message
        );
        // Nor is it kept for the next GET.
        drop(get);
        let mut again = table.create_standalone_stream(&id).await.expect("get");
        transport
            .send(server(
                json!({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}),
            ))
            .await
            .expect("notification");
        assert_eq!(
            json_of(&next(&mut again).await)["method"],
            "notifications/prompts/list_changed"
        );
    }

    #[tokio::test]
    async fn the_servers_cancel_of_its_own_request_is_not_routed_by_a_client_id() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let mut get = table.create_standalone_stream(&id).await.expect("get");
        let mut events = table
            .create_stream(&id, call(3, json!({})))
            .await
            .expect("stream");
        assert_eq!(next(&mut events).await.event_id.as_deref(), Some("0/0"));
        assert!(transport.receive().await.is_some());
        // The server cancels its request 3 (an elicitation, say): a number the client's own
        // request 3 also uses.
        transport
            .send(server(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                "params": {"requestId": 3, "reason": "timed out"}}),
            ))
            .await
            .expect("cancel");
        let first = next(&mut get).await;
        assert_eq!(json_of(&first)["method"], "notifications/cancelled");
        // The client's request 3 is untouched: its answer is the next on its stream.
        transport.send(answer(3)).await.expect("answer");
        assert_eq!(json_of(&next(&mut events).await)["id"], 3);
    }

    #[tokio::test]
    async fn resuming_after_the_priming_event_repeats_nothing_delivered() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let changed =
            || server(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        let mut get = table.create_standalone_stream(&id).await.expect("get");
        transport.send(changed()).await.expect("sent");
        transport.send(changed()).await.expect("sent");
        assert_eq!(next(&mut get).await.event_id.as_deref(), Some("1"));
        assert_eq!(next(&mut get).await.event_id.as_deref(), Some("2"));
        drop(get);
        // A second GET (rmcp primes it with id `0` too) drops before anything else arrives;
        // the client resumes after that `0`: events 1 and 2 went out already.
        let second = table.create_standalone_stream(&id).await.expect("get");
        drop(second);
        let mut resumed = table.resume(&id, "0".into()).await.expect("resume");
        transport.send(changed()).await.expect("sent");
        assert_eq!(
            next(&mut resumed).await.event_id.as_deref(),
            Some("3"),
            "nothing delivered before is repeated"
        );
        // What no stream could deliver is still delivered after a `0`.
        drop(resumed);
        transport
            .send(changed())
            .await
            .expect("sent with no stream open");
        let mut again = table.resume(&id, "0".into()).await.expect("resume");
        assert_eq!(next(&mut again).await.event_id.as_deref(), Some("4"));
    }

    #[tokio::test]
    async fn an_answer_the_client_missed_is_kept_for_a_resume() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let mut events = table
            .create_stream(&id, call(7, json!({})))
            .await
            .expect("stream");
        assert_eq!(next(&mut events).await.event_id.as_deref(), Some("0/0"));
        drop(events);
        assert!(transport.receive().await.is_some());
        transport.send(answer(7)).await.expect("answer");
        let mut resumed = table.resume(&id, "0/0".into()).await.expect("resume");
        let done = next(&mut resumed).await;
        assert_eq!(json_of(&done)["id"], 7);
        assert!(
            resumed.next().await.is_none(),
            "a completed stream ends after its replay"
        );
        assert!(matches!(
            table.resume(&id, "x/y".into()).await,
            Err(SessionError::BadEventId(_))
        ));
        assert!(matches!(
            table.resume(&id, "0/99".into()).await,
            Err(SessionError::NoStream(_))
        ));
    }

    #[tokio::test]
    async fn a_server_request_rides_its_originating_request_stream() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let mut events = table
            .create_stream(&id, call(3, json!({})))
            .await
            .expect("stream");
        let _priming = next(&mut events).await;
        assert!(transport.receive().await.is_some());
        transport.send(asked_for(3)).await.expect("ask");
        assert_eq!(json_of(&next(&mut events).await)["method"], "roots/list");
    }

    /// A log message marked with the request whose tool sent it goes on that request's stream;
    /// an unmarked one, or one marked with a request no longer in flight, on the standalone.
    #[tokio::test]
    async fn a_marked_log_message_rides_its_request_stream() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let mut events = table
            .create_stream(&id, call(3, json!({})))
            .await
            .expect("stream");
        let _priming = next(&mut events).await;
        assert!(transport.receive().await.is_some());
        let mut standalone = table
            .create_standalone_stream(&id)
            .await
            .expect("standalone");
        let log = |data: &str, origin: Option<i64>| {
            let mut m = server(json!({"jsonrpc": "2.0", "method": "notifications/message",
                                      "params": {"level": "info", "data": data}}));
            if let (ServerJsonRpcMessage::Notification(n), Some(o)) = (&mut m, origin) {
                n.notification
                    .extensions_mut()
                    .insert(OriginatingRequestId(RequestId::Number(o)));
            }
            m
        };
        transport.send(log("mine", Some(3))).await.expect("log");
        assert_eq!(json_of(&next(&mut events).await)["params"]["data"], "mine");
        transport.send(log("nobody's", None)).await.expect("log");
        transport.send(log("gone", Some(99))).await.expect("log");
        assert_eq!(
            json_of(&next(&mut standalone).await)["params"]["data"],
            "nobody's"
        );
        assert_eq!(
            json_of(&next(&mut standalone).await)["params"]["data"],
            "gone"
        );
    }

    #[tokio::test]
    async fn delete_ends_the_session_and_its_streams() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let mut events = table
            .create_stream(&id, call(1, json!({})))
            .await
            .expect("stream");
        let _priming = next(&mut events).await;
        table.close_session(&id).await.expect("close");
        assert!(!table.has_session(&id).await.expect("has"));
        assert_eq!(table.len(), 0);
        assert!(events.next().await.is_none());
        // The service reads what was queued, then the end of its input.
        assert!(transport.receive().await.is_some());
        assert!(transport.receive().await.is_none());
        // A late answer is dropped quietly; a notification fails.
        assert!(transport.send(answer(1)).await.is_ok());
        let note = server(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        assert!(matches!(
            transport.send(note).await,
            Err(SessionError::Ended)
        ));
        assert!(matches!(
            table.create_stream(&id, call(2, json!({}))).await,
            Err(SessionError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn an_idle_session_expires_but_not_while_a_request_is_in_flight() {
        let settings = SessionSettings {
            idle_timeout: Some(Duration::from_millis(30)),
            ..SessionSettings::default()
        };
        let (table, id, mut transport) = session(settings).await;
        let _events = table
            .create_stream(&id, call(1, json!({})))
            .await
            .expect("stream");
        assert!(transport.receive().await.is_some());
        // In flight: the transport wakes, sees the request, and keeps waiting.
        let waited = tokio::time::timeout(Duration::from_millis(200), transport.receive()).await;
        assert!(
            waited.is_err(),
            "a session with a request in flight is not idle"
        );
        transport.send(answer(1)).await.expect("answer");
        assert!(transport.receive().await.is_none(), "idle: the input ends");
        assert!(!table.has_session(&id).await.expect("has"));
        assert_eq!(table.len(), 0);
    }

    /// `f`, or a failure after the same 10 s as [`next`].
    async fn within<F: Future>(what: &str, f: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .unwrap_or_else(|_| panic!("{what} did not finish in time"))
    }

    fn list_changed() -> ServerJsonRpcMessage {
        server(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))
    }

    fn progress(token: &str, n: u32) -> ServerJsonRpcMessage {
        server(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                      "params": {"progressToken": token, "progress": n}}))
    }

    /// Sends `message` as the service does, checks that it waits (its stream is full) and
    /// lets it go on in a task of its own.
    async fn send_waiting(
        transport: &mut SessionTransport,
        message: ServerJsonRpcMessage,
    ) -> tokio::task::JoinHandle<Result<(), SessionError>> {
        let mut send = Box::pin(transport.send(message));
        assert!(
            futures::poll!(send.as_mut()).is_pending(),
            "the stream has no room: the send waits"
        );
        tokio::spawn(send)
    }

    fn ids(events: &[ServerSseMessage]) -> Vec<String> {
        events
            .iter()
            .map(|e| e.event_id.clone().unwrap_or_default())
            .collect()
    }

    #[tokio::test]
    async fn a_get_stream_nobody_reads_holds_up_only_its_own_messages() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let capacity = SessionSettings::default().capacity;
        let mut get = table.create_standalone_stream(&id).await.expect("get");
        for _ in 0..capacity {
            within("a send with room", transport.send(list_changed()))
                .await
                .expect("sent");
        }
        let mut waiting = Vec::new();
        for _ in 0..3 {
            waiting.push(send_waiting(&mut transport, list_changed()).await);
        }
        // The session goes on: a new request gets its stream, reaches the service, and is
        // answered.
        let mut post = within(
            "a new request's stream",
            table.create_stream(&id, call(5, json!({}))),
        )
        .await
        .expect("stream");
        assert!(
            within("the service's receive", transport.receive())
                .await
                .is_some()
        );
        within("the answer", transport.send(answer(5)))
            .await
            .expect("answer");
        let _priming = next(&mut post).await;
        assert_eq!(json_of(&next(&mut post).await)["id"], 5);
        // Once read, the GET stream has every event, in order.
        let mut got = Vec::new();
        for _ in 0..capacity + 3 {
            got.push(next(&mut get).await);
        }
        let expected: Vec<String> = (1..=capacity as u64 + 3).map(|i| i.to_string()).collect();
        assert_eq!(ids(&got), expected);
        for send in waiting {
            within("a waiting send", send)
                .await
                .expect("joined")
                .expect("sent");
        }

        // Full again, and the client never reads: DELETE still ends the session, and what
        // waited gives up.
        for _ in 0..capacity {
            within("a send with room", transport.send(list_changed()))
                .await
                .expect("sent");
        }
        let stuck = send_waiting(&mut transport, list_changed()).await;
        within("DELETE", table.close_session(&id))
            .await
            .expect("close");
        assert!(!table.has_session(&id).await.expect("has"));
        within("the waiting send", stuck)
            .await
            .expect("joined")
            .expect("given up quietly");
        let mut rest = 0;
        while within("the GET stream's end", get.next()).await.is_some() {
            rest += 1;
        }
        assert_eq!(rest, capacity, "what was buffered, then the end");
    }

    #[tokio::test]
    async fn a_full_request_stream_keeps_its_order_and_ends_with_its_answer() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let capacity = SessionSettings::default().capacity;
        let mut events = table
            .create_stream(&id, call(1, json!({"progressToken": "p"})))
            .await
            .expect("stream");
        assert!(transport.receive().await.is_some());
        // The priming event and capacity - 1 progress notifications fill the stream.
        for n in 1..capacity as u32 {
            within("a send with room", transport.send(progress("p", n)))
                .await
                .expect("sent");
        }
        let late = send_waiting(&mut transport, progress("p", capacity as u32)).await;
        let answered = send_waiting(&mut transport, answer(1)).await;
        let mut got = Vec::new();
        while let Some(event) = within("the request's stream", events.next()).await {
            got.push(event);
        }
        let expected: Vec<String> = (0..=capacity as u64 + 1)
            .map(|i| format!("{i}/0"))
            .collect();
        assert_eq!(ids(&got), expected, "in order, and the answer ends it");
        assert_eq!(json_of(got.last().expect("the answer"))["id"], 1);
        for send in [late, answered] {
            within("a waiting send", send)
                .await
                .expect("joined")
                .expect("sent");
        }
    }

    #[tokio::test]
    async fn what_waited_for_a_client_that_went_away_is_kept_for_a_resume() {
        let (table, id, mut transport) = session(SessionSettings::default()).await;
        let capacity = SessionSettings::default().capacity as u32;
        // A request's stream: its answer waits behind a full stream when the client leaves.
        let events = table
            .create_stream(&id, call(2, json!({"progressToken": "q"})))
            .await
            .expect("stream");
        assert!(transport.receive().await.is_some());
        for n in 1..capacity {
            within("a send with room", transport.send(progress("q", n)))
                .await
                .expect("sent");
        }
        let answered = send_waiting(&mut transport, answer(2)).await;
        drop(events);
        within("the waiting answer", answered)
            .await
            .expect("joined")
            .expect("kept");
        let last_read = format!("{}/0", capacity - 1);
        let mut resumed = table.resume(&id, last_read).await.expect("resume");
        assert_eq!(json_of(&next(&mut resumed).await)["id"], 2);
        assert!(
            within("the resumed stream's end", resumed.next())
                .await
                .is_none(),
            "a completed stream ends after its replay"
        );

        // The GET stream: what waited is delivered on the next GET.
        let get = table.create_standalone_stream(&id).await.expect("get");
        for _ in 0..capacity {
            within("a send with room", transport.send(list_changed()))
                .await
                .expect("sent");
        }
        let mut waiting = Vec::new();
        for _ in 0..2 {
            waiting.push(send_waiting(&mut transport, list_changed()).await);
        }
        drop(get);
        for send in waiting {
            within("a waiting send", send)
                .await
                .expect("joined")
                .expect("kept");
        }
        let mut again = table
            .create_standalone_stream(&id)
            .await
            .expect("GET again");
        let first = u64::from(capacity) + 1;
        assert_eq!(
            ids(&[next(&mut again).await, next(&mut again).await]),
            [first.to_string(), (first + 1).to_string()]
        );
    }

    #[tokio::test]
    async fn a_restored_session_takes_no_event_id_of_another_instance_for_its_own() {
        // Replica B restores a session whose first instance (replica A) numbered its streams
        // and events from the start.
        let table = SessionTable::new(SessionSettings::default());
        let id: SessionId = "restored-elsewhere".into();
        let Ok(RestoreOutcome::Restored(mut transport)) = table.restore_session(id.clone()).await
        else {
            panic!("restored");
        };
        let mut events = table
            .create_stream(&id, call(7, json!({})))
            .await
            .expect("stream");
        let priming = next(&mut events).await;
        let (_, stream) =
            parse_event_id(priming.event_id.as_deref().expect("an id")).expect("one of ours");
        assert!(
            stream.is_some_and(|s| s >= 1 << 32),
            "{:?}",
            priming.event_id
        );
        assert!(transport.receive().await.is_some());
        drop(events);
        transport.send(answer(7)).await.expect("kept for a resume");
        // A's first request stream was `0`: its ids name nothing here, and the answer to 7 is
        // not replayed to a client resuming A's stream.
        assert!(matches!(
            table.resume(&id, "1/0".into()).await,
            Err(SessionError::NoStream(_))
        ));
        let mine = format!("0/{}", stream.expect("a stream"));
        let mut resumed = table
            .resume(&id, mine)
            .await
            .expect("its own stream resumes");
        assert_eq!(json_of(&next(&mut resumed).await)["id"], 7);
        // The standalone stream's ids are its own too: A's `1` replays none of B's events.
        let changed =
            || server(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        let mut get = table.create_standalone_stream(&id).await.expect("get");
        transport.send(changed()).await.expect("sent");
        let first = next(&mut get).await;
        assert_ne!(first.event_id.as_deref(), Some("1"));
        drop(get);
        let mut again = table.resume(&id, "1".into()).await.expect("a GET");
        transport.send(changed()).await.expect("sent");
        let next_id = next(&mut again).await.event_id;
        assert_ne!(next_id, first.event_id, "B's event is not repeated");
    }

    #[tokio::test]
    async fn restore_reopens_a_known_id_once() {
        let table = SessionTable::new(SessionSettings::default());
        let id: SessionId = "restored-id".into();
        assert!(matches!(
            table.restore_session(id.clone()).await,
            Ok(RestoreOutcome::Restored(_))
        ));
        assert!(table.has_session(&id).await.expect("has"));
        assert!(matches!(
            table.restore_session(id.clone()).await,
            Ok(RestoreOutcome::AlreadyPresent)
        ));
    }
}
