//! Gate refusals as tool results: the one place a [`GateError`] becomes what a caller sees.
//!
//! Every transport (kberg-server on both protocol generations, the in-process agent loop, the
//! aggregator relaying an upstream's refusal) shows a refused call the same way: an error result
//! whose text is the sentence and whose structured content carries the stable `code`, the
//! `message`, the `tool`, whether it is `retryable`, and the variant's own fields.

use serde_json::{Map, Value, json};

use crate::content::ToolOutput;
use crate::error::{ErrorCode, GateError};

/// A refused call as its caller sees it: a stable [`ErrorCode`], a sentence, the tool, and any
/// details the code names. The gate builds one for every [`GateError`]; transports and the
/// aggregator build their own refusals (`too_many_calls`, `upstream_timeout`, ...) with it, so
/// every refusal on the wire has the same shape: an error result whose text is the sentence and
/// whose structured content is [`Refusal::details`].
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    code: ErrorCode,
    tool: String,
    message: String,
    extra: Map<String, Value>,
}

impl Refusal {
    /// A refusal of a call to `tool` with this code and sentence.
    pub fn new(code: ErrorCode, tool: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            tool: tool.into(),
            message: message.into(),
            extra: Map::new(),
        }
    }

    /// Adds a detail (`upstream`, `capability`, ...). The four common keys are not replaced.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        let key = key.into();
        if !matches!(key.as_str(), "code" | "message" | "tool" | "retryable") {
            self.extra.insert(key, value.into());
        }
        self
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The sentence for the model.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Machine-readable details: always `code`, `message`, `tool` and `retryable`, then the
    /// added details.
    pub fn details(&self) -> Value {
        let mut obj = Map::with_capacity(4 + self.extra.len());
        obj.insert("code".into(), Value::String(self.code.as_str().into()));
        obj.insert("message".into(), Value::String(self.message.clone()));
        obj.insert("tool".into(), Value::String(self.tool.clone()));
        obj.insert("retryable".into(), Value::Bool(self.code.is_retryable()));
        for (k, v) in &self.extra {
            obj.insert(k.clone(), v.clone());
        }
        Value::Object(obj)
    }

    /// The model-visible tool result: error flag set, the sentence as text content, and
    /// [`Refusal::details`] as structured content.
    pub fn to_output(&self) -> ToolOutput {
        ToolOutput::error_with(self.message.clone(), self.details())
    }
}

impl GateError {
    /// This error as a [`Refusal`]: its code, sentence and tool, plus `reason`, `capability`,
    /// `errors`, `inputRequests`, `pointer`, `field`, `scope` or `ticket` where the variant has
    /// them.
    pub fn refusal(&self) -> Refusal {
        let r = Refusal::new(self.code(), self.tool(), self.to_string());
        match self {
            GateError::Refused { reason, .. } => r.with("reason", reason.as_str()),
            GateError::CapabilityRequired { capability, .. } => {
                r.with("capability", capability.as_str())
            }
            GateError::InvalidArguments { errors, .. } => r.with(
                "errors",
                Value::Array(errors.iter().map(|e| json!(e)).collect()),
            ),
            GateError::InputRequired { requests, .. } => r.with("inputRequests", requests.clone()),
            GateError::HandleInvalid { pointer, .. } | GateError::HandleExpired { pointer, .. } => {
                r.with("pointer", pointer.as_str())
            }
            GateError::ScopeRequired { field, .. } => r.with("field", field.as_str()),
            GateError::ScopeUnknown { scope, .. } | GateError::ScopeForbidden { scope, .. } => {
                r.with("scope", scope.as_str())
            }
            GateError::PendingHumanConfirm { ticket, reason, .. } => r
                .with("ticket", ticket.as_str())
                .with("reason", reason.as_str()),
            _ => r,
        }
    }

    /// Machine-readable details ([`Refusal::details`] of [`GateError::refusal`]).
    pub fn details(&self) -> Value {
        self.refusal().details()
    }

    /// The model-visible tool result ([`Refusal::to_output`] of [`GateError::refusal`]).
    pub fn to_output(&self) -> ToolOutput {
        self.refusal().to_output()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(s["tool"], "delete_note");
        assert_eq!(s["retryable"], false);
        assert!(out.all_text().contains("notes.write"));
    }

    #[test]
    fn field_errors_are_listed() {
        let e = GateError::InvalidArguments {
            tool: "t".into(),
            errors: vec![crate::validate::FieldError {
                pointer: "/title".into(),
                expected: "a string".into(),
                found: "a number".into(),
                message: "`title` must be a string.".into(),
            }],
        };
        let d = e.details();
        assert_eq!(d["errors"][0]["pointer"], "/title");
        assert_eq!(d["retryable"], true);
    }

    #[test]
    fn other_refusals_share_the_shape() {
        let r = Refusal::new(ErrorCode::UpstreamTimeout, "fs__read", "It timed out.")
            .with("upstream", "fs")
            .with("code", "forged");
        let out = r.to_output();
        assert!(out.is_error);
        assert_eq!(out.all_text(), "It timed out.");
        assert_eq!(
            out.structured,
            Some(
                json!({"code": "upstream_timeout", "message": "It timed out.",
                        "tool": "fs__read", "retryable": true, "upstream": "fs"})
            )
        );
    }
}
