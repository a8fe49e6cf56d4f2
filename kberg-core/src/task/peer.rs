//! The client channel of a running task, and the notifier that tells the client of its
//! changes.
//!
//! A task outlives the call that started it, so its tool cannot ask the client directly: a
//! [`TaskPeer`] parks each question in the task (its `inputRequests`) and waits for the answer
//! delivered through the store. A `task_after_input` tool first runs inside its call; its
//! [`SwitchPeer`] is the call's own channel until the tool first waits, the task's after.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::context::{ClientPeer, PeerError};

use super::{TaskBoard, TaskSnapshot};

/// Sends each state change of a task to the client that started it, in order.
pub(super) fn spawn_notifier(peer: Arc<dyn ClientPeer>) -> mpsc::UnboundedSender<TaskSnapshot> {
    let (tx, mut rx) = mpsc::unbounded_channel::<TaskSnapshot>();
    tokio::spawn(async move {
        while let Some(s) = rx.recv().await {
            let params = Value::Object(s.detailed_json());
            if let Err(e) = peer.notify("notifications/tasks", params).await {
                tracing::debug!(task = %s.id, error = %e, "a task status notification was not sent");
                if matches!(e, PeerError::Disconnected) {
                    break;
                }
            }
        }
    });
    tx
}

/// The client channel of a running task: questions become the task's input requests.
pub(super) struct TaskPeer {
    pub(super) board: Weak<TaskBoard>,
    pub(super) id: String,
    pub(super) origin: Option<Arc<dyn ClientPeer>>,
    pub(super) supported: Vec<String>,
}

#[async_trait]
impl ClientPeer for TaskPeer {
    async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError> {
        // The call that started the task may be over; a notification that cannot be delivered
        // any more is not the tool's failure.
        if let Some(p) = &self.origin
            && let Err(e) = p.notify(method, params).await
        {
            tracing::debug!(task = %self.id, error = %e, "a task's notification was not delivered");
        }
        Ok(())
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        let board = self.board.upgrade().ok_or(PeerError::Disconnected)?;
        let (tx, rx) = oneshot::channel();
        let key = board
            .ask(&self.id, method, params, tx)
            .ok_or(PeerError::Cancelled)?;
        drop(board);
        tokio::select! {
            answer = rx => answer.map_err(|_| PeerError::Cancelled),
            () = cancel.cancelled() => {
                if let Some(board) = self.board.upgrade() {
                    board.withdraw(&self.id, &key);
                }
                Err(PeerError::Cancelled)
            }
        }
    }

    fn supports(&self, capability: &str) -> bool {
        self.supported.iter().any(|c| c == capability)
    }
}

/// The client channel of a `task_after_input` tool: the call's own until the tool first
/// waits, the task's after.
pub(super) struct SwitchPeer {
    pub(super) call: Option<Arc<dyn ClientPeer>>,
    pub(super) task: Arc<TaskPeer>,
    pub(super) escalated: Arc<AtomicBool>,
}

impl SwitchPeer {
    fn current(&self) -> Option<&dyn ClientPeer> {
        if self.escalated.load(Ordering::SeqCst) {
            Some(self.task.as_ref())
        } else {
            self.call.as_deref()
        }
    }
}

#[async_trait]
impl ClientPeer for SwitchPeer {
    async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError> {
        match self.current() {
            Some(p) => p.notify(method, params).await,
            None => Ok(()),
        }
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        match self.current() {
            Some(p) => p.request(method, params, cancel).await,
            None => Err(PeerError::NotSupported(method.to_string())),
        }
    }

    fn supports(&self, capability: &str) -> bool {
        self.current().is_some_and(|p| p.supports(capability))
    }
}
