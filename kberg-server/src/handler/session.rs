//! A 2025-11-25 session's own state and its forwarding task: the log level the client set,
//! the watchers of accepted listens, and one task per session that sends resource updates
//! for its subscriptions and `list_changed` for the three registries until the session's
//! last handler is dropped or the server shuts down.

use std::sync::{Arc, Mutex, OnceLock};

use kberg_core::{ResourceError, ResourceEvent, Subscriber};
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::{Peer, RoleServer};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::KbergHandler;
use super::listen::PendingListen;
use crate::app::McpApp;
use crate::peer::LogThreshold;

/// What a session's handlers ask its forwarding task to do.
pub(super) enum Command {
    Subscribe(String, oneshot::Sender<Result<(), ResourceError>>),
    Unsubscribe(String),
}

/// Per-session state. Dropped with the session's last handler clone, which ends the session's
/// forwarding task and with it every resource subscription the session held.
pub(super) struct SessionState {
    pub(super) log: Arc<LogThreshold>,
    pub(super) forwarder: OnceLock<mpsc::UnboundedSender<Command>>,
    /// Watchers of `subscriptions/listen` requests whose filter was accepted but whose
    /// `listen` has not started yet. rmcp sends the acknowledgement between the two calls, so
    /// the watchers must exist before it: a change the client causes right after the
    /// acknowledgement is then still seen.
    pub(super) pending_listens: Mutex<Vec<PendingListen>>,
}

impl KbergHandler {
    /// Starts the session's forwarding task once: resource updates for its subscriptions and
    /// `list_changed` for the three registries.
    pub(super) fn forwarder(&self, peer: &Peer<RoleServer>) -> &mpsc::UnboundedSender<Command> {
        self.session.forwarder.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            let app = self.shared.app.clone();
            let subscriber = app.resources().subscriber();
            tokio::spawn(forward(
                app,
                peer.clone(),
                subscriber,
                rx,
                self.shared.shutdown.clone(),
            ));
            tx
        })
    }
}

pub(super) async fn forward(
    app: McpApp,
    peer: Peer<RoleServer>,
    mut subscriber: Subscriber,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let mut tools = app.tools().changes();
    let mut resources = app.resources().changes();
    let mut prompts = app.prompts().changes();
    tools.mark_unchanged();
    resources.mark_unchanged();
    prompts.mark_unchanged();
    let (mut t_open, mut r_open, mut p_open) = (true, true, true);
    loop {
        let sent = tokio::select! {
            cmd = commands.recv() => match cmd {
                // Every handler of the session is gone: the session ended.
                None => break,
                Some(Command::Subscribe(uri, reply)) => {
                    let _ = reply.send(subscriber.subscribe(&uri));
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
            r = tools.changed(), if t_open => match r {
                Ok(()) => peer.notify_tool_list_changed().await,
                Err(_) => { t_open = false; Ok(()) }
            },
            r = resources.changed(), if r_open => match r {
                Ok(()) => peer.notify_resource_list_changed().await,
                Err(_) => { r_open = false; Ok(()) }
            },
            r = prompts.changed(), if p_open => match r {
                Ok(()) => peer.notify_prompt_list_changed().await,
                Err(_) => { p_open = false; Ok(()) }
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
    tracing::debug!("session forwarding ended");
}
