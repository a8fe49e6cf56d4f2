//! What every live event stream of the admin API owes the listener (the sessions stream,
//! `/sessions/events`, and an index run's, `/index-runs/{id}/events` and the answer of
//! `POST …/index`): one admin holds at most [`AdminState::max_streams_per_admin`] of them at
//! once, and none outlives the server or the credential that opened it.
//!
//! A stream is admitted once, when it opens, but may stay open for hours; a credential revoked
//! or rotated away in the meantime must not keep watching. So a [`StreamHold`] asks again,
//! every [`AdminState::stream_recheck`], whether the credential still opens the API, and ends
//! the stream once it does not. The hold also keeps the admin's slot, given back when the
//! stream ends or its client goes away.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::AdminState;
use super::auth::Admitted;
use super::error::ApiError;

/// The live event streams open now, per admin, and how many one may hold.
pub(crate) struct StreamSlots {
    max: usize,
    open: Mutex<HashMap<String, usize>>,
}

impl StreamSlots {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            open: Mutex::new(HashMap::new()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // A panic while holding the lock leaves counts, not a broken invariant.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot for one more stream of `admin`, given back when dropped; `None` at the limit.
    fn take(self: &Arc<Self>, admin: &str) -> Option<StreamSlot> {
        let mut table = self.table();
        let open = table.entry(admin.to_string()).or_insert(0);
        if *open >= self.max {
            return None;
        }
        *open += 1;
        Some(StreamSlot {
            slots: Arc::clone(self),
            admin: admin.to_string(),
        })
    }
}

/// One open stream's place among its admin's.
struct StreamSlot {
    slots: Arc<StreamSlots>,
    admin: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut table = self.slots.table();
        if let Some(open) = table.get_mut(&self.admin) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                table.remove(&self.admin);
            }
        }
    }
}

/// An open stream's hold on the listener: its admin's slot, the credential it checks again,
/// and the server's shutdown.
pub(crate) struct StreamHold {
    admitted: Admitted,
    recheck: Duration,
    shutdown: CancellationToken,
    _slot: StreamSlot,
}

impl AdminState {
    /// Takes one of the admitted admin's stream slots for a stream about to open, or 429
    /// `too_many_streams` when they hold as many as allowed.
    pub(crate) fn hold_stream(&self, admitted: Admitted) -> Result<StreamHold, ApiError> {
        let slot =
            self.streams_open
                .take(admitted.admin())
                .ok_or_else(|| ApiError::TooManyRequests {
                    code: "too_many_streams",
                    detail: format!(
                        "admin `{}` holds {} event streams open already; close one first",
                        admitted.admin(),
                        self.streams_open.max
                    ),
                    retry_after: None,
                })?;
        Ok(StreamHold {
            admitted,
            recheck: self.stream_recheck,
            shutdown: self.streams.clone(),
            _slot: slot,
        })
    }
}

impl StreamHold {
    /// `events` (the stream `what`, for the log), ending early when the server shuts down or
    /// the credential no longer opens the API; the slot is given back when it ends or is
    /// dropped.
    pub(crate) fn guard<S>(
        self,
        what: &'static str,
        events: S,
    ) -> impl Stream<Item = S::Item> + Send + 'static
    where
        S: Stream + Send + 'static,
    {
        events.take_until(self.ended(what))
    }

    /// Completes when the stream must end.
    async fn ended(self, what: &'static str) {
        let mut recheck =
            tokio::time::interval_at(tokio::time::Instant::now() + self.recheck, self.recheck);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                _ = recheck.tick() => {
                    // The check may read the vault: on the blocking pool, as at admission.
                    let admitted = self.admitted.clone();
                    let valid = tokio::task::spawn_blocking(move || admitted.still_valid())
                        .await
                        .unwrap_or(false);
                    if valid {
                        continue;
                    }
                    tracing::info!(
                        admin = self.admitted.admin(),
                        stream = what,
                        "event stream ended: its credential no longer opens the admin API"
                    );
                    return;
                }
            }
        }
    }
}
