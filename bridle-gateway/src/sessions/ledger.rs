//! [`SessionLedger`]: where the registry of every replica meets, when there are several.
//!
//! One gateway process keeps its registry in memory (the embedded default: nothing to share,
//! nothing to restore after a restart, since a restart ends every session anyway). Replicas on
//! one PostgreSQL database share a ledger instead, so each one's admin API lists the sessions
//! seen on any of them, an operator ending a session on one makes every other refuse it, and
//! call counts are the sum over the replicas.
//!
//! The registry never asks the ledger on a request's path: each replica keeps answering from
//! memory and exchanges a [`SessionBatch`] of what changed for a fresh [`SessionSnapshot`] on a
//! short period (and at once when a session is first seen or ended), so the cost of sharing is
//! a few queries per period, whatever the request rate. Ends travel faster than the period:
//! the ledger announces them ([`SessionLedger::ends`]) and every replica refuses the session as
//! soon as it hears.
//!
//! A session its client deleted (a 2025-11-25 `DELETE` the transport answered with success) is
//! *forgotten* rather than ended: its rows go, nothing remembers it as ended (the transport's
//! own `404` answers its id from then on, and no operator ended it), and it is announced like
//! an end, so every replica drops it from its listing, and ends a listen stream it holds of it,
//! as soon as it hears. The ledger keeps the forgotten id for as long as an end, so that a
//! replica that counted a request of it just before (and writes that a moment later) does not
//! bring it back.

use std::collections::HashMap;
use std::time::Duration;

use crate::error::GatewayError;
use crate::sessions::{CallCounts, SessionRecord};

/// The prefix of an end on [`SessionLedger::ends`] (the session id follows), which sets it
/// apart from the feed's own markers whatever the id.
pub const ENDED_PREFIX: &str = "ended ";

/// The prefix of a forgotten session (deleted by its client) on [`SessionLedger::ends`] (the
/// session id follows).
pub const FORGOTTEN_PREFIX: &str = "forgotten ";

/// What one replica changed since its last exchange with the ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionBatch {
    /// Sessions seen since, each as this replica knows it now, with the requests it made
    /// here since (added to the ledger's count, not written over it).
    pub touched: Vec<(SessionRecord, u64)>,
    /// Calls made and refused per agent here since (added likewise).
    pub calls: Vec<(String, CallCounts)>,
    /// Sessions an operator ended here since.
    pub ended: Vec<String>,
    /// Sessions their clients deleted here since (forgotten: removed, not ended).
    pub forgotten: Vec<String>,
}

impl SessionBatch {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.touched.is_empty()
            && self.calls.is_empty()
            && self.ended.is_empty()
            && self.forgotten.is_empty()
    }
}

/// What every replica has written, as the ledger holds it now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionSnapshot {
    /// The live sessions (seen within the idle timeout on any replica).
    pub sessions: Vec<SessionRecord>,
    /// Calls made and refused per agent, summed over the replicas.
    pub calls: HashMap<String, CallCounts>,
    /// The sessions ended recently (their next request is refused), with when (milliseconds
    /// since the Unix epoch).
    pub ended: Vec<(String, u64)>,
}

/// A store of sessions shared by several gateway replicas.
///
/// Its calls block (the registry makes them from a blocking task, never on a request's path).
pub trait SessionLedger: Send + Sync + std::fmt::Debug {
    /// Writes what one replica changed: sessions upserted (an ended or forgotten one is not
    /// brought back; a session id presented by another agent than its own is not merged into
    /// it), request and call counts added, ended sessions removed, remembered as ended and
    /// announced to every replica, forgotten sessions removed (with their resumable state),
    /// remembered as forgotten only to keep them from coming back, and announced likewise.
    fn write(&self, batch: &SessionBatch) -> Result<(), GatewayError>;

    /// Drops the sessions not seen for `idle` and the ends older than twice that, and reads
    /// what is left.
    fn read(&self, idle: Duration) -> Result<SessionSnapshot, GatewayError>;

    /// A live feed of the sessions ended on any replica (this one included), each as
    /// [`ENDED_PREFIX`] and its id, and of those forgotten, each as [`FORGOTTEN_PREFIX`] and its
    /// id. Anything else on it is a marker of the feed itself (it is
    /// listening, first and after a reconnect, or it lost its connection): ends may have been
    /// missed, so the registry reads the ledger again.
    fn ends(&self) -> tokio::sync::mpsc::UnboundedReceiver<String>;
}
