//! Gate step 5b: human confirmation.
//!
//! After the arguments validated (and a commit token checked), the app's [`ConfirmPolicy`] may
//! hold a call for a person. Where the policy allows it and the client supports elicitation the
//! person is asked through the client now ([`ask_client`]); otherwise, or when asking fails, the
//! call is filed as a [`ConfirmTicket`] ([`file_ticket`]) and answers `pending_human_confirm`,
//! unless its principal already has as many pending tickets as the app allows
//! ([`ConfirmConfig::max_pending_per_principal`]): then nothing is filed and the call answers
//! `too_many_pending_tickets`.
//! The ticket desk later runs an approved ticket back through the gate, skipping only this step.
//!
//! [`ConfirmPolicy`]: crate::confirm::ConfirmPolicy
//! [`ConfirmConfig::max_pending_per_principal`]: crate::confirm::ConfirmConfig::max_pending_per_principal

use std::time::SystemTime;

use serde_json::{Value, json};

use crate::catalog::Entry;
use crate::catalog::GateSettings;
use crate::confirm::{ConfirmRequest, ConfirmTicket, TicketStatus, new_ticket_id};
use crate::context::{CallOptions, PeerError, ToolContext};
use crate::digest::{canonical_json, redact};
use crate::error::GateError;
use crate::gate::Trail;
use crate::preview::{CallPhase, expiry_after};
use crate::principal::Caller;

/// The longest argument text shown in a confirmation question.
const MAX_SHOWN_ARGS: usize = 600;

/// The most characters of the asking agent's name (or principal's id) a question shows.
const MAX_SHOWN_WHO: usize = 64;

/// The agent's name or the principal's id as the question shows it: on one line, its line
/// breaks, tabs and the characters [`crate::text::escaped_when_quoted`] names written as
/// escapes, cut at [`MAX_SHOWN_WHO`] characters and marked `…`. The app's authenticator may
/// take it from outside (a token's subject, a header), and a person deciding reads the
/// question: a name must not add a line of its own ("approved by the admin") or rewrite the
/// terminal or the order of what is shown.
fn shown_who(who: &str) -> String {
    let flat = who.replace('\n', "\\n").replace('\t', "\\t");
    let (mut shown, cut) = crate::text::quote_escaped(&flat, MAX_SHOWN_WHO);
    if cut {
        shown.push('…');
    }
    shown
}

/// Asks the human through the client (elicitation). `None` when the client cannot be asked
/// (no channel, no elicitation support, or the request failed): the caller files a ticket.
/// `Some(Ok)` means approved.
pub(crate) async fn ask_client(
    entry: &Entry,
    args: &Value,
    caller: &Caller,
    opts: &CallOptions,
    req: &ConfirmRequest,
) -> Option<Result<(), GateError>> {
    let name = entry.spec.name.clone();
    let peer = opts.peer.as_ref()?;
    if !peer.supports("elicitation") {
        return None;
    }
    let ctx = ToolContext::new(caller.clone(), opts.clone());
    let mut shown = canonical_json(&redact(args, &entry.spec.sensitive_fields));
    if shown.len() > MAX_SHOWN_ARGS {
        shown.truncate(crate::text::char_floor(&shown, MAX_SHOWN_ARGS));
        shown.push('…');
    }
    let principal = caller.principal();
    let who = shown_who(principal.agent.as_deref().unwrap_or(&principal.id));
    let message = format!(
        "{who} wants to run `{name}` ({}) with {shown}. Allow it?",
        req.reason()
    );
    let schema = json!({
        "type": "object",
        "properties": {"approve": {"type": "boolean", "title": "Allow this call"}},
        "required": ["approve"]
    });
    match ctx.elicit(&message, schema).await {
        Ok(answer) => {
            let accepted = answer.get("action").and_then(Value::as_str) == Some("accept")
                && answer.pointer("/content/approve") == Some(&Value::Bool(true));
            tracing::info!(tool = %name, accepted, "confirmation asked through the client");
            Some(if accepted {
                Ok(())
            } else {
                Err(GateError::ConfirmDeclined { tool: name })
            })
        }
        Err(PeerError::InputRequired { requests }) => Some(Err(GateError::InputRequired {
            tool: name,
            requests,
        })),
        Err(PeerError::Cancelled) => Some(Err(GateError::Cancelled { tool: name })),
        Err(e) => {
            tracing::warn!(tool = %name, error = ?e.to_string(), "elicitation failed; filing a ticket");
            None
        }
    }
}

/// Whether `caller` may file one more ticket: refused `too_many_pending_tickets` when it already
/// has the configured number pending (expired ones do not count).
pub(crate) fn room_for_ticket(
    tool: &str,
    caller: &Caller,
    settings: &GateSettings,
    now: SystemTime,
) -> Result<(), GateError> {
    let limit = settings.confirm_config.max_pending_per_principal;
    let principal = caller.principal().id.as_str();
    let pending = settings
        .tickets
        .count_pending(principal, now)
        .map_err(|e| {
            tracing::error!(tool, error = %e.0, "pending tickets not counted; confirm ticket not filed");
            GateError::ToolFailed {
                tool: tool.to_string(),
                message: "the call needs a person's approval, but the request could not be filed (internal error)".into(),
            }
        })?;
    if pending >= limit {
        tracing::warn!(
            tool,
            principal,
            pending,
            limit,
            "confirm ticket refused: too many pending"
        );
        return Err(GateError::TooManyPendingTickets {
            tool: tool.to_string(),
            limit,
        });
    }
    Ok(())
}

/// Files a ticket for a call a human must approve; the answer for the caller (the refusal
/// `too_many_pending_tickets`, with nothing filed, when the caller has no room for one).
pub(crate) fn file_ticket(
    entry: &Entry,
    args: Value,
    caller: &Caller,
    settings: &GateSettings,
    req: &ConfirmRequest,
    phase: CallPhase,
    trail: &mut Trail,
) -> GateError {
    let name = entry.spec.name.clone();
    let failed = |what: String| {
        tracing::error!(tool = %name, error = %what, "confirm ticket not filed");
        GateError::ToolFailed {
            tool: name.clone(),
            message: "the call needs a person's approval, but the request could not be filed (internal error)".into(),
        }
    };
    let now = SystemTime::now();
    if let Err(refusal) = room_for_ticket(&name, caller, settings, now) {
        return refusal;
    }
    let id = match new_ticket_id() {
        Ok(id) => id,
        Err(e) => return failed(e.0),
    };
    let ticket = ConfirmTicket {
        id: id.clone(),
        tool: name.clone(),
        arguments: args,
        reason: req.reason().to_string(),
        phase,
        principal: caller.principal().clone(),
        grants: caller.grants().clone(),
        projection: caller.projection(),
        scopes: caller.scopes().clone(),
        created_at: now,
        expires_at: expiry_after(now, settings.confirm_config.ttl),
        status: TicketStatus::Pending,
        decided_by: None,
        decided_at: None,
        note: None,
        outcome: None,
    };
    if let Err(e) = settings.tickets.insert(&ticket) {
        return failed(e.0);
    }
    tracing::info!(tool = %name, ticket = %id, principal = %caller.principal().id, "call held for a person's approval");
    trail.ticket = Some(id.clone());
    GateError::PendingHumanConfirm {
        tool: name,
        ticket: id,
        reason: req.reason().to_string(),
    }
}
