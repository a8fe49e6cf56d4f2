//! Errors of kberg-core, in two families.
//!
//! [`CoreError`] is what the *app* sees when it sets a registry up wrongly (a duplicate tool
//! name, a schema that does not compile, a write tool bound to an undeclared capability). These
//! happen at registration time so they never surprise a model at run time.
//!
//! [`GateError`] is what a *caller* (a model, an MCP client) sees when a tool call does not run
//! or fails. Every variant carries a stable [`ErrorCode`]: a string that never changes meaning,
//! so programs match on it, plus a short sentence a small model can act on. The gate turns one
//! into the model-visible tool result ([`GateError::to_output`]: error flag set, the sentence as
//! text, the code and details in structured content); this module only names and words them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::validate::FieldError;

/// A mistake in how the app configured a registry. Returned by registration calls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CoreError {
    /// A tool, refusal, resource or prompt with this name is already registered.
    #[error("`{name}` is already registered")]
    Duplicate {
        /// The name (tool, prompt) or URI (resource) that clashed.
        name: String,
    },
    /// A capability id was declared twice. Ids are never reassigned.
    #[error("capability `{id}` is already declared; a capability id is never reassigned")]
    DuplicateCapability {
        /// The capability id.
        id: String,
    },
    /// A write tool names a capability the registry has not declared.
    #[error("tool `{tool}` needs capability `{capability}`, which is not declared")]
    UndeclaredCapability {
        /// The tool.
        tool: String,
        /// The capability it names.
        capability: String,
    },
    /// A deprecated capability names a replacement that is not declared (or itself).
    #[error("capability `{id}` is replaced by `{replaced_by}`, which is not declared")]
    BadReplacement {
        /// The deprecated capability.
        id: String,
        /// The replacement it names.
        replaced_by: String,
    },
    /// A tool's input or output schema is not a valid JSON Schema, or puts a handle argument
    /// where the gate would not resolve it.
    #[error("the {which} schema of tool `{tool}` does not compile: {reason}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// `input` or `output`.
        which: &'static str,
        /// What the schema compiler said.
        reason: String,
    },
    /// A name is empty, too long, or uses characters MCP clients reject.
    #[error("invalid name `{name}`: {reason}")]
    InvalidName {
        /// The offending name.
        name: String,
        /// Why it is not accepted.
        reason: &'static str,
    },
    /// A URI template is malformed.
    #[error("invalid URI template `{template}`: {reason}")]
    InvalidTemplate {
        /// The template.
        template: String,
        /// Why it is not accepted.
        reason: &'static str,
    },
}

/// The stable, documented codes a caller can receive from the gate.
///
/// The string form ([`ErrorCode::as_str`]) is the public contract: it is what appears in the
/// `code` field of a refused call's structured content and it never changes meaning. New codes
/// may be added; existing ones are never renamed or reassigned.
///
/// | code | meaning | retry? |
/// |---|---|---|
/// | `unknown_tool` | no tool of that name exists | no |
/// | `refused` | the app registered this name as not offered; the reason says why | no |
/// | `not_in_surface` | the tool exists but is not offered to this caller's surface | no |
/// | `capability_required` | a write tool whose capability the caller was not granted | no |
/// | `invalid_arguments` | arguments do not match the schema; `errors` names every field | yes, corrected |
/// | `cancelled` | the call was cancelled before it finished | no |
/// | `tool_failed` | the tool ran and reported a failure | maybe |
/// | `input_required` | the tool needs an answer from the client first (2026-07-28 multi-round-trip) | yes, with the answers |
/// | `handle_invalid` | an argument is not a handle this app minted for this caller and kind (forged, altered, from another app or principal); `pointer` names it | yes, with a handle from a result |
/// | `handle_expired` | a genuine handle whose expiry has passed; `pointer` names it | yes, with a fresh handle |
/// | `commit_token_invalid` | the `commit_token` was never issued, or was issued to another principal or for another tool | yes, preview again |
/// | `commit_token_used` | the `commit_token` was already used; the write ran once and will not run again | no |
/// | `commit_token_expired` | the `commit_token` is past its expiry | yes, preview again |
/// | `commit_arguments_changed` | the arguments differ from the previewed ones (canonical digest mismatch) | yes, with the previewed arguments |
/// | `scope_required` | the tool works in a scope and the caller has no current scope and gave none | yes, naming a scope |
/// | `scope_unknown` | the scope named is not declared by the app | yes, with a declared scope |
/// | `scope_forbidden` | the scope is declared but this caller may not use it | no |
/// | `pending_human_confirm` | the call needs a human's approval; it has not run; `ticket` identifies the request | no, wait for the human |
/// | `confirm_declined` | the human asked through the client declined the call | no |
/// | `ticket_unknown` | no such ticket (or not one this caller may see) | no |
/// | `ticket_pending` | the ticket has not been decided yet | yes, later |
/// | `ticket_denied` | a human denied the ticket; the call never ran | no |
/// | `ticket_expired` | the ticket expired before a human approved it; the call never ran | no |
/// | `ticket_already_decided` | the ticket was already approved or denied; nothing runs twice | no |
/// | `ticket_forbidden` | this principal may not approve or deny tickets (or not this one) | no |
/// | `ticket_store_failed` | the ticket store could not be read or written | maybe |
/// | `too_many_pending_tickets` | the caller already has as many tickets waiting for a human as allowed (`ConfirmConfig::max_pending_per_principal`); no ticket was filed and the call has not run | no, wait for the human to decide |
/// | `too_many_calls` | (kberg-server) the caller already has as many calls in flight as allowed | yes, after one finishes |
/// | `upstream_unavailable` | (aggregator) the forwarded tool's upstream server is not connected; `upstream` names it | yes, later |
/// | `upstream_timeout` | (aggregator) the upstream did not answer within its call timeout; the call was cancelled there | yes, later |
/// | `upstream_invalid_result` | (aggregator) the upstream answered with something that is not the documented result | no |
/// | `upstream_error` | (aggregator) the upstream refused a forwarded prompt or resource request, or it failed otherwise | maybe |
/// | `tool_timeout` | (agent loop) the tool showed no sign of work for the agent's idle timeout, or ran past its total timeout; the call was cancelled, and what it did before is unknown | no |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// No tool of that name exists.
    UnknownTool,
    /// The name is a registered refusal.
    Refused,
    /// The tool exists but the caller's surface projection does not offer it.
    NotInSurface,
    /// A write tool whose capability is not granted to the caller.
    CapabilityRequired,
    /// The arguments failed schema validation.
    InvalidArguments,
    /// The call was cancelled.
    Cancelled,
    /// The tool itself failed.
    ToolFailed,
    /// The tool needs input from the client before it can finish.
    InputRequired,
    /// An argument is not a handle this app minted for this caller and kind.
    HandleInvalid,
    /// A genuine handle that has expired.
    HandleExpired,
    /// A commit token that was never issued (to this caller, for this tool).
    CommitTokenInvalid,
    /// A commit token that was already used.
    CommitTokenUsed,
    /// A commit token past its expiry.
    CommitTokenExpired,
    /// The arguments differ from the previewed ones.
    CommitArgumentsChanged,
    /// The tool needs a scope and none is current or given.
    ScopeRequired,
    /// The scope is not declared by the app.
    ScopeUnknown,
    /// The caller may not use this scope.
    ScopeForbidden,
    /// The call waits for a human's approval (a ticket).
    PendingHumanConfirm,
    /// The human asked through the client declined.
    ConfirmDeclined,
    /// No such ticket.
    TicketUnknown,
    /// The ticket is not decided yet.
    TicketPending,
    /// The ticket was denied.
    TicketDenied,
    /// The ticket expired undecided.
    TicketExpired,
    /// The ticket was already decided.
    TicketAlreadyDecided,
    /// The principal may not decide this ticket.
    TicketForbidden,
    /// The ticket store failed.
    TicketStoreFailed,
    /// The caller already has as many tickets waiting for a human as the app allows; no ticket
    /// was filed.
    TooManyPendingTickets,
    /// The caller already has as many calls in flight as the server allows.
    TooManyCalls,
    /// The caller already holds as many tasks as the app allows (running, or finished and not
    /// yet expired).
    TooManyTasks,
    /// A forwarded call's upstream server is not connected.
    UpstreamUnavailable,
    /// A forwarded call's upstream server did not answer in time; the call was cancelled there.
    UpstreamTimeout,
    /// A forwarded call's upstream server answered with something that is not the documented
    /// result shape.
    UpstreamInvalidResult,
    /// A forwarded request's upstream server refused it, or the request failed otherwise.
    UpstreamError,
    /// (agent loop) The tool showed no sign of work for too long, or ran past the total
    /// timeout; the call was cancelled.
    ToolTimeout,
}

impl ErrorCode {
    /// Every code, for documentation and tests.
    pub const ALL: [ErrorCode; 34] = [
        ErrorCode::UnknownTool,
        ErrorCode::Refused,
        ErrorCode::NotInSurface,
        ErrorCode::CapabilityRequired,
        ErrorCode::InvalidArguments,
        ErrorCode::Cancelled,
        ErrorCode::ToolFailed,
        ErrorCode::InputRequired,
        ErrorCode::HandleInvalid,
        ErrorCode::HandleExpired,
        ErrorCode::CommitTokenInvalid,
        ErrorCode::CommitTokenUsed,
        ErrorCode::CommitTokenExpired,
        ErrorCode::CommitArgumentsChanged,
        ErrorCode::ScopeRequired,
        ErrorCode::ScopeUnknown,
        ErrorCode::ScopeForbidden,
        ErrorCode::PendingHumanConfirm,
        ErrorCode::ConfirmDeclined,
        ErrorCode::TicketUnknown,
        ErrorCode::TicketPending,
        ErrorCode::TicketDenied,
        ErrorCode::TicketExpired,
        ErrorCode::TicketAlreadyDecided,
        ErrorCode::TicketForbidden,
        ErrorCode::TicketStoreFailed,
        ErrorCode::TooManyPendingTickets,
        ErrorCode::TooManyCalls,
        ErrorCode::TooManyTasks,
        ErrorCode::UpstreamUnavailable,
        ErrorCode::UpstreamTimeout,
        ErrorCode::UpstreamInvalidResult,
        ErrorCode::UpstreamError,
        ErrorCode::ToolTimeout,
    ];

    /// The stable string form of the code.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::UnknownTool => "unknown_tool",
            ErrorCode::Refused => "refused",
            ErrorCode::NotInSurface => "not_in_surface",
            ErrorCode::CapabilityRequired => "capability_required",
            ErrorCode::InvalidArguments => "invalid_arguments",
            ErrorCode::Cancelled => "cancelled",
            ErrorCode::ToolFailed => "tool_failed",
            ErrorCode::InputRequired => "input_required",
            ErrorCode::HandleInvalid => "handle_invalid",
            ErrorCode::HandleExpired => "handle_expired",
            ErrorCode::CommitTokenInvalid => "commit_token_invalid",
            ErrorCode::CommitTokenUsed => "commit_token_used",
            ErrorCode::CommitTokenExpired => "commit_token_expired",
            ErrorCode::CommitArgumentsChanged => "commit_arguments_changed",
            ErrorCode::ScopeRequired => "scope_required",
            ErrorCode::ScopeUnknown => "scope_unknown",
            ErrorCode::ScopeForbidden => "scope_forbidden",
            ErrorCode::PendingHumanConfirm => "pending_human_confirm",
            ErrorCode::ConfirmDeclined => "confirm_declined",
            ErrorCode::TicketUnknown => "ticket_unknown",
            ErrorCode::TicketPending => "ticket_pending",
            ErrorCode::TicketDenied => "ticket_denied",
            ErrorCode::TicketExpired => "ticket_expired",
            ErrorCode::TicketAlreadyDecided => "ticket_already_decided",
            ErrorCode::TicketForbidden => "ticket_forbidden",
            ErrorCode::TicketStoreFailed => "ticket_store_failed",
            ErrorCode::TooManyPendingTickets => "too_many_pending_tickets",
            ErrorCode::TooManyCalls => "too_many_calls",
            ErrorCode::TooManyTasks => "too_many_tasks",
            ErrorCode::UpstreamUnavailable => "upstream_unavailable",
            ErrorCode::UpstreamTimeout => "upstream_timeout",
            ErrorCode::UpstreamInvalidResult => "upstream_invalid_result",
            ErrorCode::UpstreamError => "upstream_error",
            ErrorCode::ToolTimeout => "tool_timeout",
        }
    }

    /// Whether the same caller could succeed by sending a corrected call. The agent loop uses
    /// this to decide between a repair turn and a final answer.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::InvalidArguments
                | ErrorCode::ToolFailed
                | ErrorCode::InputRequired
                | ErrorCode::HandleInvalid
                | ErrorCode::HandleExpired
                | ErrorCode::CommitTokenInvalid
                | ErrorCode::CommitTokenExpired
                | ErrorCode::CommitArgumentsChanged
                | ErrorCode::ScopeRequired
                | ErrorCode::ScopeUnknown
                | ErrorCode::TicketPending
                | ErrorCode::TicketStoreFailed
                | ErrorCode::TooManyCalls
                | ErrorCode::TooManyTasks
                | ErrorCode::UpstreamUnavailable
                | ErrorCode::UpstreamTimeout
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a tool call did not produce a result. Every variant maps to one [`ErrorCode`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// No tool of that name exists.
    #[error("There is no tool named `{tool}`. Use one of the tools you were given.")]
    UnknownTool {
        /// The name the caller used.
        tool: String,
    },
    /// The app registered this name as deliberately not offered.
    #[error("The tool `{tool}` is not offered: {reason}")]
    Refused {
        /// The refused name.
        tool: String,
        /// The app's stable reason.
        reason: String,
    },
    /// The tool exists but is not part of this caller's surface.
    #[error("The tool `{tool}` is not available to you. Use one of the tools you were given.")]
    NotInSurface {
        /// The tool.
        tool: String,
    },
    /// A write tool whose capability the caller has not been granted.
    #[error(
        "The tool `{tool}` changes data and needs the `{capability}` permission, which you have not been granted. Do not retry; ask the user to grant it."
    )]
    CapabilityRequired {
        /// The tool.
        tool: String,
        /// The capability that would allow it.
        capability: String,
    },
    /// The arguments do not match the tool's input schema.
    #[error("{}", invalid_arguments_sentence(tool, errors))]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// One entry per offending field.
        errors: Vec<FieldError>,
    },
    /// The call was cancelled before it completed.
    #[error("The call to `{tool}` was cancelled before it finished.")]
    Cancelled {
        /// The tool.
        tool: String,
    },
    /// The tool ran and reported a failure.
    #[error("The tool `{tool}` failed: {message}")]
    ToolFailed {
        /// The tool.
        tool: String,
        /// The tool's own message.
        message: String,
    },
    /// The tool panicked. Its code is `tool_failed` like any failure; the variant exists so
    /// that a task can tell an internal failure (a `failed` task) from a tool that reported
    /// one (a `completed` task whose result is an error). The panic's payload is never shown.
    #[error("The tool `{tool}` failed: the tool stopped unexpectedly (internal error)")]
    ToolPanicked {
        /// The tool.
        tool: String,
    },
    /// The tool asked the client for input on a call path that answers in a new round trip
    /// (MCP 2026-07-28). The transport turns this into an `input_required` result.
    #[error("The tool `{tool}` needs input from the client before it can finish.")]
    InputRequired {
        /// The tool.
        tool: String,
        /// The pending requests, keyed by name.
        requests: Value,
    },
    /// An argument is not a handle this app minted for this caller and kind: forged, altered,
    /// minted by another app or for another principal, or of another kind.
    #[error(
        "The value at `{pointer}` for `{tool}` is not a valid handle. Pass a handle exactly as an earlier result gave it to you."
    )]
    HandleInvalid {
        /// The tool.
        tool: String,
        /// JSON pointer to the argument.
        pointer: String,
    },
    /// A genuine handle whose expiry has passed.
    #[error(
        "The handle at `{pointer}` for `{tool}` has expired. Look the item up again to get a fresh handle."
    )]
    HandleExpired {
        /// The tool.
        tool: String,
        /// JSON pointer to the argument.
        pointer: String,
    },
    /// The commit token was never issued to this caller for this tool.
    #[error(
        "The commit_token for `{tool}` is not valid. Call `{tool}` without a commit_token to get a new preview."
    )]
    CommitTokenInvalid {
        /// The tool.
        tool: String,
    },
    /// The commit token was already used: the write ran once and does not run again.
    #[error(
        "The commit_token for `{tool}` was already used; that change has been applied once and will not be applied again."
    )]
    CommitTokenUsed {
        /// The tool.
        tool: String,
    },
    /// The commit token expired.
    #[error(
        "The commit_token for `{tool}` has expired. Call `{tool}` without a commit_token to get a new preview."
    )]
    CommitTokenExpired {
        /// The tool.
        tool: String,
    },
    /// The arguments differ from those that were previewed.
    #[error(
        "The arguments differ from the ones previewed for this commit_token. Send exactly the previewed arguments, or call `{tool}` without a commit_token to preview the new ones."
    )]
    CommitArgumentsChanged {
        /// The tool.
        tool: String,
    },
    /// The tool works within a scope and none is current or given.
    #[error("The tool `{tool}` needs a scope: set `{field}` to one of the scopes you may use.")]
    ScopeRequired {
        /// The tool.
        tool: String,
        /// The scope argument's name.
        field: String,
    },
    /// The scope named is not declared by the app.
    #[error("There is no scope `{scope}` (tool `{tool}`). Use one of the scopes you were given.")]
    ScopeUnknown {
        /// The tool.
        tool: String,
        /// The scope asked for, cut short past 128 bytes ([`crate::quoted_name`]).
        scope: String,
    },
    /// The caller may not use this scope.
    #[error("You may not use the scope `{scope}` (tool `{tool}`). Do not retry with it.")]
    ScopeForbidden {
        /// The tool.
        tool: String,
        /// The scope asked for.
        scope: String,
    },
    /// The call needs a human's approval; it has not run.
    #[error(
        "The call to `{tool}` needs a person's approval ({reason}), so it has not run. Tell the user it waits for approval as ticket `{ticket}`; do not call it again."
    )]
    PendingHumanConfirm {
        /// The tool.
        tool: String,
        /// The ticket the human approves or denies.
        ticket: String,
        /// Why approval is needed (the app's words).
        reason: String,
    },
    /// The human, asked through the client, declined.
    #[error("The user declined the call to `{tool}`. Do not retry it unless the user asks.")]
    ConfirmDeclined {
        /// The tool.
        tool: String,
    },
    /// The call needs a human's approval, but the caller already has as many calls waiting for
    /// one as the app allows; no ticket was filed and the call has not run.
    #[error(
        "The call to `{tool}` needs a person's approval, but you already have {limit} calls waiting for one, the most allowed, so it was not filed and has not run. Do not call it again now; wait until a person has decided the waiting ones."
    )]
    TooManyPendingTickets {
        /// The tool.
        tool: String,
        /// How many pending tickets a principal may have.
        limit: usize,
    },
}

fn invalid_arguments_sentence(tool: &str, errors: &[FieldError]) -> String {
    // A diagnosis stops at MAX_FIELD_ERRORS: a list that long may have been cut.
    let mut s = if errors.len() >= crate::validate::MAX_FIELD_ERRORS {
        format!(
            "The arguments for `{tool}` are invalid ({} problems or more; the first {} are listed). Fix these and call it again:",
            errors.len(),
            errors.len()
        )
    } else {
        format!(
            "The arguments for `{tool}` are invalid ({} problem{}). Fix these and call it again:",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        )
    };
    for e in errors {
        s.push_str("\n- ");
        s.push_str(&e.message);
    }
    s
}

impl GateError {
    /// The stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            GateError::UnknownTool { .. } => ErrorCode::UnknownTool,
            GateError::Refused { .. } => ErrorCode::Refused,
            GateError::NotInSurface { .. } => ErrorCode::NotInSurface,
            GateError::CapabilityRequired { .. } => ErrorCode::CapabilityRequired,
            GateError::InvalidArguments { .. } => ErrorCode::InvalidArguments,
            GateError::Cancelled { .. } => ErrorCode::Cancelled,
            GateError::ToolFailed { .. } | GateError::ToolPanicked { .. } => ErrorCode::ToolFailed,
            GateError::InputRequired { .. } => ErrorCode::InputRequired,
            GateError::HandleInvalid { .. } => ErrorCode::HandleInvalid,
            GateError::HandleExpired { .. } => ErrorCode::HandleExpired,
            GateError::CommitTokenInvalid { .. } => ErrorCode::CommitTokenInvalid,
            GateError::CommitTokenUsed { .. } => ErrorCode::CommitTokenUsed,
            GateError::CommitTokenExpired { .. } => ErrorCode::CommitTokenExpired,
            GateError::CommitArgumentsChanged { .. } => ErrorCode::CommitArgumentsChanged,
            GateError::ScopeRequired { .. } => ErrorCode::ScopeRequired,
            GateError::ScopeUnknown { .. } => ErrorCode::ScopeUnknown,
            GateError::ScopeForbidden { .. } => ErrorCode::ScopeForbidden,
            GateError::PendingHumanConfirm { .. } => ErrorCode::PendingHumanConfirm,
            GateError::ConfirmDeclined { .. } => ErrorCode::ConfirmDeclined,
            GateError::TooManyPendingTickets { .. } => ErrorCode::TooManyPendingTickets,
        }
    }

    /// The tool name the caller asked for.
    pub fn tool(&self) -> &str {
        match self {
            GateError::UnknownTool { tool }
            | GateError::Refused { tool, .. }
            | GateError::NotInSurface { tool }
            | GateError::CapabilityRequired { tool, .. }
            | GateError::InvalidArguments { tool, .. }
            | GateError::Cancelled { tool }
            | GateError::ToolFailed { tool, .. }
            | GateError::ToolPanicked { tool }
            | GateError::InputRequired { tool, .. }
            | GateError::HandleInvalid { tool, .. }
            | GateError::HandleExpired { tool, .. }
            | GateError::CommitTokenInvalid { tool }
            | GateError::CommitTokenUsed { tool }
            | GateError::CommitTokenExpired { tool }
            | GateError::CommitArgumentsChanged { tool }
            | GateError::ScopeRequired { tool, .. }
            | GateError::ScopeUnknown { tool, .. }
            | GateError::ScopeForbidden { tool, .. }
            | GateError::PendingHumanConfirm { tool, .. }
            | GateError::ConfirmDeclined { tool }
            | GateError::TooManyPendingTickets { tool, .. } => tool,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_strings() {
        let strings: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            strings,
            [
                "unknown_tool",
                "refused",
                "not_in_surface",
                "capability_required",
                "invalid_arguments",
                "cancelled",
                "tool_failed",
                "input_required",
                "handle_invalid",
                "handle_expired",
                "commit_token_invalid",
                "commit_token_used",
                "commit_token_expired",
                "commit_arguments_changed",
                "scope_required",
                "scope_unknown",
                "scope_forbidden",
                "pending_human_confirm",
                "confirm_declined",
                "ticket_unknown",
                "ticket_pending",
                "ticket_denied",
                "ticket_expired",
                "ticket_already_decided",
                "ticket_forbidden",
                "ticket_store_failed",
                "too_many_pending_tickets",
                "too_many_calls",
                "too_many_tasks",
                "upstream_unavailable",
                "upstream_timeout",
                "upstream_invalid_result",
                "upstream_error",
                "tool_timeout",
            ]
        );
        for c in ErrorCode::ALL {
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                Value::String(c.as_str().into())
            );
        }
    }
}
