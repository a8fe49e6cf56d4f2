//! Errors of kberg-core, in two families.
//!
//! [`CoreError`] is what the *app* sees when it sets a registry up wrongly (a duplicate tool
//! name, a schema that does not compile, a write tool bound to an undeclared capability). These
//! happen at registration time so they never surprise a model at run time.
//!
//! [`GateError`] is what a *caller* (a model, an MCP client) sees when a tool call does not run
//! or fails. Every variant carries a stable [`ErrorCode`]: a string that never changes meaning,
//! so programs match on it, plus a short sentence a small model can act on. [`GateError::to_output`]
//! turns one into the model-visible tool result (error flag set, the sentence as text, the code
//! and details in structured content).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tool::ToolOutput;
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
    /// A tool's input or output schema is not a valid JSON Schema.
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
}

impl ErrorCode {
    /// Every code, for documentation and tests.
    pub const ALL: [ErrorCode; 8] = [
        ErrorCode::UnknownTool,
        ErrorCode::Refused,
        ErrorCode::NotInSurface,
        ErrorCode::CapabilityRequired,
        ErrorCode::InvalidArguments,
        ErrorCode::Cancelled,
        ErrorCode::ToolFailed,
        ErrorCode::InputRequired,
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
        }
    }

    /// Whether the same caller could succeed by sending a corrected call. The agent loop uses
    /// this to decide between a repair turn and a final answer.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::InvalidArguments | ErrorCode::ToolFailed | ErrorCode::InputRequired
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
    /// The tool asked the client for input on a call path that answers in a new round trip
    /// (MCP 2026-07-28). The transport turns this into an `input_required` result.
    #[error("The tool `{tool}` needs input from the client before it can finish.")]
    InputRequired {
        /// The tool.
        tool: String,
        /// The pending requests, keyed by name.
        requests: Value,
    },
}

fn invalid_arguments_sentence(tool: &str, errors: &[FieldError]) -> String {
    let mut s = format!(
        "The arguments for `{tool}` are invalid ({} problem{}). Fix these and call it again:",
        errors.len(),
        if errors.len() == 1 { "" } else { "s" }
    );
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
            GateError::ToolFailed { .. } => ErrorCode::ToolFailed,
            GateError::InputRequired { .. } => ErrorCode::InputRequired,
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
            | GateError::InputRequired { tool, .. } => tool,
        }
    }

    /// Machine-readable details: always `code`, `message`, `tool` and `retryable`, plus
    /// `reason`, `capability` or `errors` where the variant has them.
    pub fn details(&self) -> Value {
        let code = self.code();
        let mut v = json!({
            "code": code.as_str(),
            "message": self.to_string(),
            "tool": self.tool(),
            "retryable": code.is_retryable(),
        });
        let obj = v.as_object_mut().expect("json! object literal");
        match self {
            GateError::Refused { reason, .. } => {
                obj.insert("reason".into(), Value::String(reason.clone()));
            }
            GateError::CapabilityRequired { capability, .. } => {
                obj.insert("capability".into(), Value::String(capability.clone()));
            }
            GateError::InvalidArguments { errors, .. } => {
                obj.insert(
                    "errors".into(),
                    serde_json::to_value(errors).expect("FieldError serializes"),
                );
            }
            GateError::InputRequired { requests, .. } => {
                obj.insert("inputRequests".into(), requests.clone());
            }
            _ => {}
        }
        v
    }

    /// The model-visible tool result: error flag set, the sentence as text content, and
    /// [`GateError::details`] as structured content.
    pub fn to_output(&self) -> ToolOutput {
        ToolOutput::error_with(self.to_string(), self.details())
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
                "input_required"
            ]
        );
        for c in ErrorCode::ALL {
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                Value::String(c.as_str().into())
            );
        }
    }

    #[test]
    fn output_carries_code_and_flag() {
        let e = GateError::CapabilityRequired {
            tool: "delete_note".into(),
            capability: "notes.write".into(),
        };
        let out = e.to_output();
        assert!(out.is_error);
        let s = out.structured.clone().unwrap();
        assert_eq!(s["code"], "capability_required");
        assert_eq!(s["capability"], "notes.write");
        assert_eq!(s["retryable"], false);
        assert!(out.all_text().contains("notes.write"));
    }
}
