//! A 2025-11-25 session's own state and what it is sent unasked: the log level the client set,
//! the watchers of accepted listens, `list_changed` for the three registries, and resource
//! updates for its subscriptions.
//!
//! Why the split between one fan-out and per-session tasks: an idle session must cost little
//! (the memory bench holds 1,000 of them). `list_changed` goes to every session alike, so one
//! task per transport ([`ListChangedFanout`]) watches the registries and notifies every
//! session's peer; a session costs an entry in its map. Only a session that subscribes to a
//! resource gets a task of its own, which holds its subscriptions and forwards their updates.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use kberg_core::{Caller, ResourceEvent, Subscriber};
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::{Peer, RoleServer};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::KbergHandler;
use super::listen::PendingListen;
use crate::app::McpApp;
use crate::peer::LogFilter;

/// What a session's handlers ask its subscription task to do.
pub(super) enum Command {
    /// Subscribe to the URI; the answer is the request's.
    Subscribe(String, oneshot::Sender<Result<(), rmcp::ErrorData>>),
    Unsubscribe(String),
}

/// Per-session state. Dropped with the session's last handler clone, which leaves the
/// `list_changed` fan-out and ends the session's subscription task (if it had one) and with it
/// every resource subscription the session held.
pub(super) struct SessionState {
    pub(super) log: Arc<LogFilter>,
    /// The subscription task's commands; started by the first `resources/subscribe`.
    pub(super) forwarder: OnceLock<mpsc::UnboundedSender<Command>>,
    /// Watchers of `subscriptions/listen` requests whose filter was accepted but whose
    /// `listen` has not started yet. rmcp sends the acknowledgement between the two calls, so
    /// the watchers must exist before it: a change the client causes right after the
    /// acknowledgement is then still seen.
    pub(super) pending_listens: Mutex<Vec<PendingListen>>,
    /// This session's entry in the fan-out, once it was initialized.
    pub(super) fanout_entry: OnceLock<u64>,
    pub(super) fanout: Arc<ListChangedFanout>,
    /// The session id and the client of its `initialize`, built at the session's first call
    /// and shared by every later call.
    pub(super) origin: OnceLock<Arc<kberg_core::CallOrigin>>,
    /// Set by the session's `initialize`: a second one is refused, since its parameters would
    /// replace the negotiated ones (and with them the protocol version every later request is
    /// served by).
    pub(super) initialized: std::sync::atomic::AtomicBool,
}

impl SessionState {
    pub(super) fn new(fanout: Arc<ListChangedFanout>) -> Self {
        Self {
            log: Arc::new(LogFilter::new("debug")),
            forwarder: OnceLock::new(),
            pending_listens: Mutex::new(Vec::new()),
            fanout_entry: OnceLock::new(),
            fanout,
            origin: OnceLock::new(),
            initialized: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Drop for SessionState {
    fn drop(&mut self) {
        if let Some(id) = self.fanout_entry.get() {
            self.fanout.leave(*id);
        }
    }
}

/// The sessions of one transport that get `list_changed` notifications, and the one task that
/// sends them (started with the first session).
pub(crate) struct ListChangedFanout {
    peers: Mutex<HashMap<u64, Peer<RoleServer>>>,
    next_id: AtomicU64,
    task: OnceLock<()>,
}

impl ListChangedFanout {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            peers: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            task: OnceLock::new(),
        })
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Peer<RoleServer>>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a session's peer; starts the fan-out task on first use.
    fn join(
        self: &Arc<Self>,
        app: &McpApp,
        shutdown: &CancellationToken,
        peer: Peer<RoleServer>,
    ) -> u64 {
        self.task.get_or_init(|| {
            tokio::spawn(fan_out(Arc::downgrade(self), app.clone(), shutdown.clone()));
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.peers().insert(id, peer);
        id
    }

    fn leave(&self, id: u64) {
        self.peers().remove(&id);
    }
}

/// How long the fan-out waits for one session to take a notification.
const NOTIFY_WAIT: Duration = Duration::from_secs(5);

/// Which registry changed.
#[derive(Clone, Copy)]
enum ListChanged {
    Tools,
    Resources,
    Prompts,
}

/// Watches the three registries (changes from the moment it starts) and tells every joined
/// session, until the server shuts down or the transport's state is gone. A session whose
/// transport closed is dropped from the map.
async fn fan_out(fanout: Weak<ListChangedFanout>, app: McpApp, shutdown: CancellationToken) {
    let mut tools = app.tools().changes();
    let mut resources = app.resources().changes();
    let mut prompts = app.prompts().changes();
    tools.mark_unchanged();
    resources.mark_unchanged();
    prompts.mark_unchanged();
    let (mut t_open, mut r_open, mut p_open) = (true, true, true);
    loop {
        let changed = tokio::select! {
            r = tools.changed(), if t_open => match r {
                Ok(()) => Some(ListChanged::Tools),
                Err(_) => { t_open = false; None }
            },
            r = resources.changed(), if r_open => match r {
                Ok(()) => Some(ListChanged::Resources),
                Err(_) => { r_open = false; None }
            },
            r = prompts.changed(), if p_open => match r {
                Ok(()) => Some(ListChanged::Prompts),
                Err(_) => { p_open = false; None }
            },
            () = shutdown.cancelled() => break,
        };
        if !(t_open || r_open || p_open) {
            break;
        }
        let Some(which) = changed else { continue };
        let Some(fanout) = fanout.upgrade() else {
            break;
        };
        let peers: Vec<(u64, Peer<RoleServer>)> = fanout
            .peers()
            .iter()
            .map(|(id, p)| (*id, p.clone()))
            .collect();
        // Every session at once, each with a bounded wait: a client that does not read its
        // stream delays the others by at most NOTIFY_WAIT and misses only this hint.
        let sends = peers.into_iter().map(|(id, peer)| async move {
            let send = async {
                match which {
                    ListChanged::Tools => peer.notify_tool_list_changed().await,
                    ListChanged::Resources => peer.notify_resource_list_changed().await,
                    ListChanged::Prompts => peer.notify_prompt_list_changed().await,
                }
            };
            (id, tokio::time::timeout(NOTIFY_WAIT, send).await)
        });
        for (id, sent) in futures::future::join_all(sends).await {
            match sent {
                Ok(Ok(())) => {}
                Ok(Err(rmcp::ServiceError::TransportClosed)) => fanout.leave(id),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "a list_changed notification was not sent")
                }
                Err(_) => {
                    tracing::debug!("a session took no list_changed notification in time; skipped")
                }
            }
        }
    }
    tracing::debug!("list_changed fan-out ended");
}

impl KbergHandler {
    /// Joins this session to the `list_changed` fan-out (once, at `initialize`).
    pub(super) fn join_list_changed(&self, peer: &Peer<RoleServer>) {
        self.session().fanout_entry.get_or_init(|| {
            self.session()
                .fanout
                .join(&self.shared.app, &self.shared.shutdown, peer.clone())
        });
    }

    /// Starts the session's subscription task once: it holds the session's resource
    /// subscriptions (on `caller`'s behalf: a session belongs to the principal that opened it,
    /// and at most the app's `max_resource_subscriptions` of them) and forwards their updates.
    /// Its subscriber coalesces updates, so a client that stops reading its stream while a
    /// resource keeps changing makes the session hold one waiting update per URI, not one per
    /// change.
    pub(super) fn forwarder(
        &self,
        peer: &Peer<RoleServer>,
        caller: Caller,
    ) -> &mpsc::UnboundedSender<Command> {
        self.session().forwarder.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let subscriber = self
                .shared
                .app
                .resources()
                .subscriber_for(caller)
                .with_limit(self.shared.app.inner.max_resource_subscriptions);
            tokio::spawn(forward(
                peer.clone(),
                subscriber,
                rx,
                self.shared.shutdown.clone(),
            ));
            tx
        })
    }
}

/// A subscribing session's task: its subscriptions' updates, until every handler of the
/// session is gone, the transport closed or the server shuts down.
pub(super) async fn forward(
    peer: Peer<RoleServer>,
    mut subscriber: Subscriber,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    loop {
        let sent = tokio::select! {
            cmd = commands.recv() => match cmd {
                // Every handler of the session is gone: the session ended.
                None => break,
                Some(Command::Subscribe(uri, reply)) => {
                    // The app's visibility is asked here: its panic is contained, so that the
                    // request is answered and the session's subscriptions carry on.
                    let subscribed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        subscriber.subscribe(&uri)
                    }));
                    let _ = reply.send(match subscribed {
                        Ok(r) => r.map_err(super::errors::resource_error),
                        Err(_panic) => Err(super::errors::panicked("resources/subscribe")),
                    });
                    Ok(())
                }
                Some(Command::Unsubscribe(uri)) => {
                    subscriber.unsubscribe(&uri);
                    Ok(())
                }
            },
            ev = subscriber.next() => match ev {
                Some(ResourceEvent::Updated { uri }) => {
                    peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await
                }
                Some(_) => Ok(()),
                None => break,
            },
            () = shutdown.cancelled() => break,
        };
        if let Err(e) = sent {
            if matches!(e, rmcp::ServiceError::TransportClosed) {
                break;
            }
            tracing::debug!(error = %e, "a notification could not be sent");
        }
    }
    tracing::debug!("session subscriptions ended");
}
