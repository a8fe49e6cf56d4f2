//! Human-confirm gating: writes above an app-defined threshold wait for a person.
//!
//! The app states when a call needs a human with a [`ConfirmPolicy`]: a predicate over the tool,
//! its (validated) arguments and the caller, for example "a bulk delete of more than 50 items".
//! When it fires, the gate does not run the call. It files a [`ConfirmTicket`] in the
//! [`TicketStore`] and answers `pending_human_confirm` with the ticket id. The app shows tickets
//! in its own UI through the [`TicketDesk`]: list them, approve or deny them. Approval runs the
//! call exactly as it was asked (the same principal, with the grants, projection and scopes it
//! held when it asked, and the same arguments) through the gate again, so the tool must still be
//! registered, offered and valid for those arguments (handles are resolved again, and must not
//! have expired); the result is kept on the ticket for the caller to fetch. A ticket is decided once: the pending -> running transition is
//! a compare-and-set in the store, so two approvals never both run the call.
//!
//! Where the caller's client supports elicitation, the policy may ask the human through it
//! instead ([`ConfirmRequest::or_ask_client`]): on a 2025-11-25 session the client shows the
//! question now; on the stateless 2026-07-28 protocol the call answers `input_required` and runs
//! when the client re-sends it with the answer. A client without elicitation falls back to a
//! ticket.
//!
//! [`MemoryTicketStore`] keeps tickets in memory; `SqliteTicketStore` (feature `sqlite`) keeps
//! them in a SQLite file so they survive a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::capability::Grants;
use crate::content::{ToolOutput, output_from_json, output_to_json};
use crate::error::{ErrorCode, GateError};
use crate::preview::CallPhase;
use crate::principal::{Caller, Principal, SurfaceProjection};
use crate::scope::ScopeSet;
use crate::tool::{FnTool, ToolBuilder, ToolError, ToolSpec};

/// What a policy asks for when a call needs a human.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmRequest {
    reason: String,
    ask_client: bool,
}

impl ConfirmRequest {
    /// A ticket, with the reason shown to the model and the human (`"deletes 120 notes"`).
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
            ask_client: false,
        }
    }

    /// Asks the human through the client (elicitation) when the client supports it, and files
    /// a ticket only when it does not.
    pub fn or_ask_client(mut self) -> Self {
        self.ask_client = true;
        self
    }

    /// The reason.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Whether the client may be asked.
    pub fn asks_client(&self) -> bool {
        self.ask_client
    }
}

/// Decides which calls need a human. Called after the arguments validated and before the tool
/// runs; must be quick and must not block. A policy that panics refuses the call (`tool_failed`,
/// "internal error"): the tool does not run.
pub trait ConfirmPolicy: Send + Sync {
    /// `Some` when this call needs a human's approval.
    fn check(&self, tool: &ToolSpec, args: &Value, caller: &Caller) -> Option<ConfirmRequest>;
}

impl<F> ConfirmPolicy for F
where
    F: Fn(&ToolSpec, &Value, &Caller) -> Option<ConfirmRequest> + Send + Sync,
{
    fn check(&self, tool: &ToolSpec, args: &Value, caller: &Caller) -> Option<ConfirmRequest> {
        self(tool, args, caller)
    }
}

/// Who may decide tickets, how long they wait, and how many one principal may have waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfirmConfig {
    /// How long a ticket waits for a decision (default 24 hours; at most 100 years, which a
    /// longer one is taken for).
    pub ttl: Duration,
    /// The grant an approver must hold (default `kberg.confirm`).
    pub approver_grant: String,
    /// Whether the principal that asked may approve its own ticket (default `false`: the point
    /// is a second party).
    pub allow_self_approval: bool,
    /// How many pending, unexpired tickets one principal may have (default 100). A call that would file one more is refused
    /// `too_many_pending_tickets` and nothing is filed: each ticket holds the call's arguments
    /// and answers at once, so without a bound a principal holding the write grant could file
    /// them as fast as it can call. Checked when a ticket is filed; calls of one principal
    /// filed at the same moment may each pass the check, so the bound can be overshot by the
    /// calls that principal has in flight at once.
    pub max_pending_per_principal: usize,
}

impl Default for ConfirmConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(24 * 3600),
            approver_grant: "kberg.confirm".into(),
            allow_self_approval: false,
            max_pending_per_principal: 100,
        }
    }
}

impl ConfirmConfig {
    /// Sets how long tickets wait.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Sets the grant approvers must hold.
    pub fn with_approver_grant(mut self, grant: impl Into<String>) -> Self {
        self.approver_grant = grant.into();
        self
    }

    /// Lets a principal approve its own tickets.
    pub fn allow_self_approval(mut self, allow: bool) -> Self {
        self.allow_self_approval = allow;
        self
    }

    /// Sets how many pending tickets one principal may have (at least 1).
    pub fn with_max_pending_per_principal(mut self, n: usize) -> Self {
        self.max_pending_per_principal = n.max(1);
        self
    }
}

/// Where a ticket stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TicketStatus {
    /// Waiting for a human.
    Pending,
    /// Approved; the call is running.
    Running,
    /// Approved and run; the result is on the ticket.
    Done,
    /// Approved, but the call was refused or failed; the error is on the ticket.
    Failed,
    /// Denied; the call never ran.
    Denied,
    /// Not decided in time; the call never ran.
    Expired,
}

impl TicketStatus {
    /// The stable string form.
    pub fn as_str(self) -> &'static str {
        match self {
            TicketStatus::Pending => "pending",
            TicketStatus::Running => "running",
            TicketStatus::Done => "done",
            TicketStatus::Failed => "failed",
            TicketStatus::Denied => "denied",
            TicketStatus::Expired => "expired",
        }
    }
}

/// What an approved call produced.
#[derive(Debug, Clone, PartialEq)]
pub enum TicketOutcome {
    /// The tool ran and returned this.
    Output(ToolOutput),
    /// The gate refused it or the tool failed.
    Error {
        /// The stable code.
        code: ErrorCode,
        /// The sentence for the model.
        message: String,
        /// The machine-readable details ([`GateError::details`]).
        details: Value,
    },
}

impl TicketOutcome {
    pub(crate) fn from_result(r: Result<ToolOutput, GateError>) -> Self {
        match r {
            Ok(out) => TicketOutcome::Output(out),
            Err(e) => TicketOutcome::Error {
                code: e.code(),
                message: e.to_string(),
                details: e.details(),
            },
        }
    }

    fn to_json(&self) -> Value {
        match self {
            TicketOutcome::Output(out) => json!({"output": output_to_json(out)}),
            TicketOutcome::Error {
                code,
                message,
                details,
            } => json!({"error": {"code": code, "message": message, "details": details}}),
        }
    }

    fn from_json(v: &Value) -> Result<Self, String> {
        if let Some(out) = v.get("output") {
            return output_from_json(out).map(TicketOutcome::Output);
        }
        let e = v
            .get("error")
            .ok_or("outcome has neither output nor error")?;
        Ok(TicketOutcome::Error {
            code: serde_json::from_value(e.get("code").cloned().unwrap_or(Value::Null))
                .map_err(|err| format!("unknown error code: {err}"))?,
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            details: e.get("details").cloned().unwrap_or(Value::Null),
        })
    }
}

impl Serialize for TicketOutcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for TicketOutcome {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        TicketOutcome::from_json(&v).map_err(serde::de::Error::custom)
    }
}

/// A call waiting for (or decided by) a human.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConfirmTicket {
    /// The ticket id (random, wire-safe).
    pub id: String,
    /// The tool.
    pub tool: String,
    /// The arguments exactly as asked (handles still opaque, the scope filled in).
    pub arguments: Value,
    /// Why a human is needed (the policy's words).
    pub reason: String,
    /// The phase the call runs in when approved (`commit` for a previewed write).
    pub phase: CallPhase,
    /// The principal that asked.
    pub principal: Principal,
    /// Its effective grants when it asked.
    pub grants: Grants,
    /// Its effective projection when it asked.
    pub projection: SurfaceProjection,
    /// Its scopes when it asked.
    pub scopes: ScopeSet,
    /// When it was filed.
    pub created_at: SystemTime,
    /// When it stops being approvable.
    pub expires_at: SystemTime,
    /// Where it stands.
    pub status: TicketStatus,
    /// Who approved or denied it.
    pub decided_by: Option<String>,
    /// When.
    pub decided_at: Option<SystemTime>,
    /// The denier's note.
    pub note: Option<String>,
    /// What the approved call produced.
    pub outcome: Option<TicketOutcome>,
}

impl ConfirmTicket {
    /// The status as of `now`: a pending ticket past its expiry reads as expired.
    pub fn status_at(&self, now: SystemTime) -> TicketStatus {
        if self.status == TicketStatus::Pending && now >= self.expires_at {
            TicketStatus::Expired
        } else {
            self.status
        }
    }

    /// The caller the approved call runs as: the same principal, grants, projection, scopes.
    pub fn caller(&self) -> Caller {
        Caller::new(self.principal.clone())
            .narrowed(&self.grants, self.projection)
            .with_scopes(self.scopes.clone())
    }
}

/// A ticket store failure.
#[derive(Debug, Clone, thiserror::Error)]
#[error("ticket store: {0}")]
pub struct StoreError(pub String);

/// Where tickets are kept. Implementations must make [`TicketStore::replace_if`] atomic: it is
/// what guarantees a ticket is decided, and its call run, at most once. Calls are short and
/// synchronous (an in-memory map, one SQLite statement).
pub trait TicketStore: Send + Sync {
    /// Files a new ticket.
    fn insert(&self, ticket: &ConfirmTicket) -> Result<(), StoreError>;
    /// One ticket.
    fn get(&self, id: &str) -> Result<Option<ConfirmTicket>, StoreError>;
    /// Every ticket, oldest first.
    fn list(&self) -> Result<Vec<ConfirmTicket>, StoreError>;
    /// Replaces the ticket `next.id` with `next` if its stored status is `expected`. Returns
    /// whether it did.
    fn replace_if(&self, expected: TicketStatus, next: &ConfirmTicket) -> Result<bool, StoreError>;
    /// Deletes a ticket if its stored status is `expected`. Returns whether it did.
    fn remove_if(&self, id: &str, expected: TicketStatus) -> Result<bool, StoreError>;
    /// How many tickets of `principal` (its [`Principal::id`]) are pending and not expired at
    /// `now`: what [`ConfirmConfig::max_pending_per_principal`] is checked against each time a
    /// ticket is filed. The default lists every ticket; a store that can count by principal and
    /// status (an index, a `COUNT` query) should.
    fn count_pending(&self, principal: &str, now: SystemTime) -> Result<usize, StoreError> {
        Ok(self
            .list()?
            .iter()
            .filter(|t| t.principal.id == principal && t.status_at(now) == TicketStatus::Pending)
            .count())
    }
}

/// Marks failed a ticket found `running` whose call was interrupted: the process (or replica)
/// that ran it ended before the call finished. Nothing can tell whether the call took effect, so
/// it is never run again; its outcome becomes `tool_failed` with a sentence that says so. A store
/// calls this for each such ticket when it opens (which tickets qualify is the store's rule:
/// SQLite takes every running one, a store shared by replicas only those whose replica is gone).
///
/// The write is [`TicketStore::replace_if`] from `running`, so a ticket decided meanwhile is left
/// as it is. Returns whether the ticket was marked.
pub fn mark_interrupted(
    store: &(impl TicketStore + ?Sized),
    mut ticket: ConfirmTicket,
) -> Result<bool, StoreError> {
    tracing::warn!(ticket = %ticket.id, "ticket's call was interrupted by the end of the process that ran it; marked failed");
    let message = format!(
        "The approved call to `{}` was interrupted by a restart; it may or may not have taken effect and is not run again.",
        ticket.tool
    );
    ticket.status = TicketStatus::Failed;
    ticket.outcome = Some(TicketOutcome::Error {
        code: ErrorCode::ToolFailed,
        details: json!({"code": ErrorCode::ToolFailed, "message": message, "tool": ticket.tool, "retryable": false}),
        message,
    });
    store.replace_if(TicketStatus::Running, &ticket)
}

/// Tickets in memory; they end with the process.
#[derive(Debug, Default)]
pub struct MemoryTicketStore {
    tickets: Mutex<Tickets>,
}

/// The tickets, and beside them each principal's pending ones, so counting a principal's
/// pending tickets (on every ticket filed) looks at that principal's alone.
#[derive(Debug, Default)]
struct Tickets {
    by_id: HashMap<String, ConfirmTicket>,
    /// Principal id -> (ticket id -> expiry) of its pending tickets. A ticket leaves when it is
    /// decided or removed, or when a count finds it expired (it can never be pending again
    /// without being replaced, which puts it back).
    pending: HashMap<String, HashMap<String, SystemTime>>,
}

impl Tickets {
    fn index(&mut self, t: &ConfirmTicket) {
        if t.status == TicketStatus::Pending {
            self.pending
                .entry(t.principal.id.clone())
                .or_default()
                .insert(t.id.clone(), t.expires_at);
        }
    }

    fn unindex(&mut self, t: &ConfirmTicket) {
        if let Some(own) = self.pending.get_mut(&t.principal.id) {
            own.remove(&t.id);
            if own.is_empty() {
                self.pending.remove(&t.principal.id);
            }
        }
    }
}

impl MemoryTicketStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tickets> {
        // Each operation updates the map and its index together without a step that can
        // panic in between, so a poisoned lock still guards consistent state.
        self.tickets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl TicketStore for MemoryTicketStore {
    fn insert(&self, ticket: &ConfirmTicket) -> Result<(), StoreError> {
        let mut tickets = self.lock();
        if tickets.by_id.contains_key(&ticket.id) {
            return Err(StoreError(format!("ticket {} already exists", ticket.id)));
        }
        tickets.index(ticket);
        tickets.by_id.insert(ticket.id.clone(), ticket.clone());
        Ok(())
    }

    fn get(&self, id: &str) -> Result<Option<ConfirmTicket>, StoreError> {
        Ok(self.lock().by_id.get(id).cloned())
    }

    fn list(&self) -> Result<Vec<ConfirmTicket>, StoreError> {
        let mut v: Vec<ConfirmTicket> = self.lock().by_id.values().cloned().collect();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        Ok(v)
    }

    fn replace_if(&self, expected: TicketStatus, next: &ConfirmTicket) -> Result<bool, StoreError> {
        let mut tickets = self.lock();
        let old = match tickets.by_id.get_mut(&next.id) {
            Some(t) if t.status == expected => std::mem::replace(t, next.clone()),
            _ => return Ok(false),
        };
        tickets.unindex(&old);
        tickets.index(next);
        Ok(true)
    }

    fn remove_if(&self, id: &str, expected: TicketStatus) -> Result<bool, StoreError> {
        let mut tickets = self.lock();
        if !tickets.by_id.get(id).is_some_and(|t| t.status == expected) {
            return Ok(false);
        }
        if let Some(old) = tickets.by_id.remove(id) {
            tickets.unindex(&old);
        }
        Ok(true)
    }

    fn count_pending(&self, principal: &str, now: SystemTime) -> Result<usize, StoreError> {
        let mut tickets = self.lock();
        let Some(own) = tickets.pending.get_mut(principal) else {
            return Ok(0);
        };
        // Expired ones are dropped from the index as they are met, so a principal's entry
        // holds at most the bound plus what expired since its last count.
        own.retain(|_, expires_at| now < *expires_at);
        let n = own.len();
        if n == 0 {
            tickets.pending.remove(principal);
        }
        Ok(n)
    }
}

/// Why a ticket operation was refused. Each maps to a stable [`ErrorCode`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TicketError {
    /// No such ticket, or not one this caller may see.
    #[error("There is no ticket `{ticket}`.")]
    Unknown {
        /// The ticket id asked for, cut short past 128 bytes ([`crate::quoted_name`]).
        ticket: String,
    },
    /// Not decided yet.
    #[error("Ticket `{ticket}` is still waiting for a person's decision. Ask again later.")]
    Pending {
        /// The ticket.
        ticket: String,
    },
    /// A human denied it; the call never ran.
    #[error("Ticket `{ticket}` was denied; the call did not run.{}", note.as_ref().map(|n| format!(" Note: {n}")).unwrap_or_default())]
    Denied {
        /// The ticket.
        ticket: String,
        /// The denier's note.
        note: Option<String>,
    },
    /// It expired undecided; the call never ran.
    #[error("Ticket `{ticket}` expired before anyone approved it; the call did not run.")]
    Expired {
        /// The ticket.
        ticket: String,
    },
    /// It was already decided; nothing runs twice.
    #[error("Ticket `{ticket}` was already decided ({}).", status.as_str())]
    AlreadyDecided {
        /// The ticket.
        ticket: String,
        /// Its status.
        status: TicketStatus,
    },
    /// This principal may not decide it.
    #[error("You may not decide ticket `{ticket}`.")]
    Forbidden {
        /// The ticket.
        ticket: String,
    },
    /// The store failed.
    #[error("The ticket store failed: {message}")]
    Store {
        /// What failed.
        message: String,
    },
    /// The approved call was refused by the gate or failed.
    #[error("{message}")]
    CallFailed {
        /// The ticket.
        ticket: String,
        /// The call's code.
        code: ErrorCode,
        /// The call's sentence.
        message: String,
        /// The call's details.
        details: Value,
    },
}

impl From<StoreError> for TicketError {
    fn from(e: StoreError) -> Self {
        TicketError::Store { message: e.0 }
    }
}

impl TicketError {
    /// The refusal of an id no ticket (this caller may see) has. The id is the caller's, of
    /// any length: it is quoted cut as [`crate::quoted_name`] cuts it, or the answer and its
    /// log lines would repeat megabytes of it, twice (the message and the details).
    fn unknown(id: &str) -> Self {
        TicketError::Unknown {
            ticket: crate::tool::quoted_name(id).into_owned(),
        }
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            TicketError::Unknown { .. } => ErrorCode::TicketUnknown,
            TicketError::Pending { .. } => ErrorCode::TicketPending,
            TicketError::Denied { .. } => ErrorCode::TicketDenied,
            TicketError::Expired { .. } => ErrorCode::TicketExpired,
            TicketError::AlreadyDecided { .. } => ErrorCode::TicketAlreadyDecided,
            TicketError::Forbidden { .. } => ErrorCode::TicketForbidden,
            TicketError::Store { .. } => ErrorCode::TicketStoreFailed,
            TicketError::CallFailed { code, .. } => *code,
        }
    }

    /// Machine-readable details: `code`, `message`, `retryable`, and `ticket` (plus `status`,
    /// `note`, or the failed call's details where present).
    pub fn details(&self) -> Value {
        if let TicketError::CallFailed {
            ticket, details, ..
        } = self
        {
            let mut d = details.clone();
            if let Some(o) = d.as_object_mut() {
                o.insert("ticket".into(), Value::String(ticket.clone()));
            }
            return d;
        }
        let code = self.code();
        let mut v = json!({
            "code": code.as_str(),
            "message": self.to_string(),
            "retryable": code.is_retryable(),
        });
        let obj = v.as_object_mut().expect("json! object literal");
        match self {
            TicketError::Unknown { ticket }
            | TicketError::Pending { ticket }
            | TicketError::Expired { ticket }
            | TicketError::Forbidden { ticket } => {
                obj.insert("ticket".into(), Value::String(ticket.clone()));
            }
            TicketError::Denied { ticket, note } => {
                obj.insert("ticket".into(), Value::String(ticket.clone()));
                if let Some(n) = note {
                    obj.insert("note".into(), Value::String(n.clone()));
                }
            }
            TicketError::AlreadyDecided { ticket, status } => {
                obj.insert("ticket".into(), Value::String(ticket.clone()));
                obj.insert("status".into(), Value::String(status.as_str().into()));
            }
            _ => {}
        }
        v
    }

    /// The model-visible result: error flag, sentence, details.
    pub fn to_output(&self) -> ToolOutput {
        ToolOutput::error_with(self.to_string(), self.details())
    }
}

/// A fresh random ticket id.
pub(crate) fn new_ticket_id() -> Result<String, StoreError> {
    let mut raw = [0u8; 16];
    getrandom::fill(&mut raw).map_err(|e| StoreError(format!("no randomness: {e}")))?;
    Ok(format!("tk_{}", URL_SAFE_NO_PAD.encode(raw)))
}

/// What the desk needs of the gate, and all it sees of it: the ticket store and settings in
/// force, the change signal, and a way to run an approved ticket's call through the gate. The
/// [`ToolRegistry`](crate::ToolRegistry) implements it; the desk holds no registry.
#[async_trait]
pub(crate) trait TicketRunner: Send + Sync {
    /// Where tickets are kept.
    fn store(&self) -> Arc<dyn TicketStore>;
    /// Who may decide tickets and how long they wait.
    fn config(&self) -> ConfirmConfig;
    /// A receiver of the ticket list's version.
    fn changes(&self) -> watch::Receiver<u64>;
    /// Bumps the ticket list's version.
    fn changed(&self);
    /// Runs an approved ticket's call through the gate, skipping only the confirm step.
    async fn run_approved(
        &self,
        ticket: &ConfirmTicket,
        approver: &str,
    ) -> Result<ToolOutput, GateError>;
}

/// The app's window on tickets: list, approve, deny, fetch results. Get one from
/// [`ToolRegistry::tickets`](crate::ToolRegistry::tickets); cheap to clone.
#[derive(Clone)]
pub struct TicketDesk {
    runner: Arc<dyn TicketRunner>,
}

impl std::fmt::Debug for TicketDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TicketDesk").finish_non_exhaustive()
    }
}

impl TicketDesk {
    pub(crate) fn new(runner: Arc<dyn TicketRunner>) -> Self {
        Self { runner }
    }

    fn store(&self) -> Arc<dyn TicketStore> {
        self.runner.store()
    }

    /// A receiver whose value changes whenever a ticket is filed, approved, finished or
    /// denied: what an app's UI waits on to refresh its list of pending approvals.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.runner.changes()
    }

    /// Every ticket, oldest first; pending tickets past their expiry read as expired.
    pub fn list(&self) -> Result<Vec<ConfirmTicket>, TicketError> {
        let now = SystemTime::now();
        let mut v = self.store().list()?;
        for t in &mut v {
            t.status = t.status_at(now);
        }
        Ok(v)
    }

    /// The tickets still waiting for a decision.
    pub fn pending(&self) -> Result<Vec<ConfirmTicket>, TicketError> {
        Ok(self
            .list()?
            .into_iter()
            .filter(|t| t.status == TicketStatus::Pending)
            .collect())
    }

    /// One ticket (expiry applied as in [`TicketDesk::list`]).
    pub fn get(&self, id: &str) -> Result<ConfirmTicket, TicketError> {
        let mut t = self
            .store()
            .get(id)?
            .ok_or_else(|| TicketError::unknown(id))?;
        t.status = t.status_at(SystemTime::now());
        Ok(t)
    }

    fn check_decider(&self, t: &ConfirmTicket, decider: &Principal) -> Result<(), TicketError> {
        let cfg = self.runner.config();
        let may = decider.grants.contains(&cfg.approver_grant)
            && (cfg.allow_self_approval || decider.id != t.principal.id);
        if may {
            Ok(())
        } else {
            tracing::warn!(ticket = %t.id, decider = %decider.id, "ticket decision refused: no right");
            Err(TicketError::Forbidden {
                ticket: t.id.clone(),
            })
        }
    }

    /// Loads a ticket a decider may act on now: exists, the decider has the right, still
    /// pending and not expired (an expired one is marked so).
    fn decidable(&self, id: &str, decider: &Principal) -> Result<ConfirmTicket, TicketError> {
        let store = self.store();
        let t = store.get(id)?.ok_or_else(|| TicketError::unknown(id))?;
        self.check_decider(&t, decider)?;
        match t.status_at(SystemTime::now()) {
            TicketStatus::Pending => Ok(t),
            TicketStatus::Expired => {
                if t.status == TicketStatus::Pending {
                    let mut expired = t.clone();
                    expired.status = TicketStatus::Expired;
                    store.replace_if(TicketStatus::Pending, &expired)?;
                }
                Err(TicketError::Expired { ticket: t.id })
            }
            status => Err(TicketError::AlreadyDecided {
                ticket: t.id,
                status,
            }),
        }
    }

    /// Approves a pending ticket and runs its call, exactly as asked, through the gate. Returns
    /// what the call produced (also kept on the ticket). Refused with `ticket_unknown`,
    /// `ticket_forbidden` (the approver lacks the approver grant, or asked itself),
    /// `ticket_expired` or `ticket_already_decided`.
    ///
    /// Once approved, the call runs to its end on a task of its own (within a tokio runtime)
    /// and its outcome is kept on the ticket even if this future is dropped meanwhile (the
    /// approver's request gone): dropping the call midway would leave the ticket `running`
    /// for good, its asker told `ticket_pending` for ever.
    pub async fn approve(
        &self,
        id: &str,
        approver: &Principal,
    ) -> Result<TicketOutcome, TicketError> {
        let store = self.store();
        let t = self.decidable(id, approver)?;
        let mut running = t.clone();
        running.status = TicketStatus::Running;
        running.decided_by = Some(approver.id.clone());
        running.decided_at = Some(SystemTime::now());
        if !store.replace_if(TicketStatus::Pending, &running)? {
            // Someone decided it between our read and our write.
            let status = store.get(id)?.map_or(TicketStatus::Expired, |t| t.status);
            return Err(TicketError::AlreadyDecided {
                ticket: id.into(),
                status,
            });
        }
        tracing::info!(ticket = %id, approver = %approver.id, tool = %t.tool, "ticket approved");
        self.runner.changed();
        let run = Self::run_and_keep(Arc::clone(&self.runner), running, approver.id.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime.spawn(run).await.unwrap_or_else(|e| {
                tracing::error!(ticket = %id, error = %e, "an approved ticket's run stopped unexpectedly");
                Err(TicketError::Store {
                    message: format!("the approved call of ticket {id} stopped unexpectedly"),
                })
            }),
            Err(_) => run.await,
        }
    }

    /// Runs an approved (`running`) ticket's call and keeps its outcome on the ticket.
    async fn run_and_keep(
        runner: Arc<dyn TicketRunner>,
        running: ConfirmTicket,
        approver: String,
    ) -> Result<TicketOutcome, TicketError> {
        let result = runner.run_approved(&running, &approver).await;
        let outcome = TicketOutcome::from_result(result);
        let mut done = running;
        done.status = match outcome {
            TicketOutcome::Output(_) => TicketStatus::Done,
            TicketOutcome::Error { .. } => TicketStatus::Failed,
        };
        done.outcome = Some(outcome.clone());
        if !runner.store().replace_if(TicketStatus::Running, &done)? {
            tracing::error!(ticket = %done.id, "ticket changed while its call ran; result not stored");
        }
        runner.changed();
        Ok(outcome)
    }

    /// Denies a pending ticket; its call never runs. Refused like [`TicketDesk::approve`].
    pub fn deny(
        &self,
        id: &str,
        denier: &Principal,
        note: Option<&str>,
    ) -> Result<(), TicketError> {
        let store = self.store();
        let t = self.decidable(id, denier)?;
        let mut denied = t;
        denied.status = TicketStatus::Denied;
        denied.decided_by = Some(denier.id.clone());
        denied.decided_at = Some(SystemTime::now());
        denied.note = note.map(str::to_string);
        if !store.replace_if(TicketStatus::Pending, &denied)? {
            let status = store.get(id)?.map_or(TicketStatus::Expired, |t| t.status);
            return Err(TicketError::AlreadyDecided {
                ticket: id.into(),
                status,
            });
        }
        tracing::info!(ticket = %id, denier = %denier.id, "ticket denied");
        self.runner.changed();
        Ok(())
    }

    /// Deletes settled tickets (done, failed, denied, or expired undecided) filed before
    /// `before`, so stores do not grow forever. Pending and running tickets are kept. Returns how
    /// many were deleted.
    pub fn forget_settled(&self, before: SystemTime) -> Result<usize, TicketError> {
        let store = self.store();
        let now = SystemTime::now();
        let mut n = 0;
        for t in store.list()? {
            if t.created_at >= before {
                continue;
            }
            let settled = !matches!(
                t.status_at(now),
                TicketStatus::Pending | TicketStatus::Running
            );
            if settled && store.remove_if(&t.id, t.status)? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// A small-model-safe Read tool named `name` through which the model that asked fetches a
    /// ticket's result: arguments `{"ticket": "tk_…"}`; the answer is the call's output, or an
    /// error result carrying the ticket's code (`ticket_pending`, `ticket_denied`, ...). Register
    /// it in the same registry; it does not keep the registry alive.
    pub fn result_tool(&self, name: &str) -> FnTool {
        let runner = Arc::downgrade(&self.runner);
        ToolBuilder::new(name)
            .description(
                "Get the result of a call that waited for a person's approval, by its ticket id.",
            )
            .small_model_safe()
            .handler(move |args: TicketArgs, ctx| {
                let runner = runner.clone();
                async move {
                    let runner = runner
                        .upgrade()
                        .ok_or_else(|| ToolError::failed("the app is shutting down"))?;
                    Ok(
                        match TicketDesk::new(runner).result(&args.ticket, ctx.caller()) {
                            Ok(out) => out,
                            Err(e) => e.to_output(),
                        },
                    )
                }
            })
    }

    /// The result of a ticket's call, for the principal that asked (anyone else is told the
    /// ticket is unknown). `ticket_pending` while undecided or running, `ticket_denied`,
    /// `ticket_expired`, the call's own error code if it was refused or failed, or its output.
    pub fn result(&self, id: &str, caller: &Caller) -> Result<ToolOutput, TicketError> {
        let t = self
            .store()
            .get(id)?
            .filter(|t| t.principal.id == caller.principal().id)
            .ok_or_else(|| TicketError::unknown(id))?;
        match (t.status_at(SystemTime::now()), t.outcome) {
            (TicketStatus::Pending | TicketStatus::Running, _) => {
                Err(TicketError::Pending { ticket: t.id })
            }
            (TicketStatus::Denied, _) => Err(TicketError::Denied {
                ticket: t.id,
                note: t.note,
            }),
            (TicketStatus::Expired, _) => Err(TicketError::Expired { ticket: t.id }),
            (_, Some(TicketOutcome::Output(out))) => Ok(out),
            (
                _,
                Some(TicketOutcome::Error {
                    code,
                    message,
                    details,
                }),
            ) => Err(TicketError::CallFailed {
                ticket: t.id,
                code,
                message,
                details,
            }),
            (status, None) => Err(TicketError::Store {
                message: format!("ticket {} is {} but has no outcome", t.id, status.as_str()),
            }),
        }
    }
}

/// The arguments of [`TicketDesk::result_tool`].
#[derive(Deserialize, schemars::JsonSchema)]
struct TicketArgs {
    /// The ticket id from a `pending_human_confirm` answer.
    ticket: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip() {
        for o in [
            TicketOutcome::Output(ToolOutput::text("ok")),
            TicketOutcome::Error {
                code: ErrorCode::CapabilityRequired,
                message: "m".into(),
                details: json!({"code": "capability_required"}),
            },
        ] {
            let v = serde_json::to_value(&o).unwrap();
            assert_eq!(serde_json::from_value::<TicketOutcome>(v).unwrap(), o);
        }
        assert!(
            serde_json::from_value::<TicketOutcome>(json!({"error": {"code": "nope"}})).is_err()
        );
    }

    fn ticket(id: &str, status: TicketStatus) -> ConfirmTicket {
        let now = SystemTime::now();
        ConfirmTicket {
            id: id.into(),
            tool: "bulk_delete".into(),
            arguments: json!({"ids": [1, 2]}),
            reason: "more than one".into(),
            phase: CallPhase::Direct,
            principal: Principal::new("agent"),
            grants: Grants::default(),
            projection: SurfaceProjection::default(),
            scopes: ScopeSet::default(),
            created_at: now,
            expires_at: now + Duration::from_secs(60),
            status,
            decided_by: Some("admin".into()),
            decided_at: Some(now),
            note: None,
            outcome: None,
        }
    }

    #[test]
    fn an_interrupted_ticket_is_marked_failed_once_and_a_decided_one_is_left_alone() {
        let store = MemoryTicketStore::new();
        store
            .insert(&ticket("tk_run", TicketStatus::Running))
            .unwrap();
        let running = store.get("tk_run").unwrap().unwrap();
        assert!(mark_interrupted(&store, running.clone()).unwrap());
        let marked = store.get("tk_run").unwrap().unwrap();
        assert_eq!(marked.status, TicketStatus::Failed);
        let Some(TicketOutcome::Error {
            code,
            message,
            details,
        }) = &marked.outcome
        else {
            panic!("no error outcome: {marked:?}");
        };
        assert_eq!(*code, ErrorCode::ToolFailed);
        assert!(
            message.contains("`bulk_delete` was interrupted"),
            "{message}"
        );
        assert_eq!(
            details,
            &json!({"code": "tool_failed", "message": message, "tool": "bulk_delete", "retryable": false})
        );
        // The same ticket again (a second store opening with a stale copy): already failed.
        assert!(!mark_interrupted(&store, running).unwrap());
        assert_eq!(store.get("tk_run").unwrap().unwrap(), marked);

        // A ticket that finished meanwhile keeps its outcome.
        let mut done = ticket("tk_done", TicketStatus::Done);
        done.outcome = Some(TicketOutcome::Output(ToolOutput::text("deleted")));
        store.insert(&done).unwrap();
        assert!(!mark_interrupted(&store, done.clone()).unwrap());
        assert_eq!(store.get("tk_done").unwrap().unwrap(), done);
    }
}
