//! Gate refusals as tool results: the one place a [`GateError`] becomes what a caller sees.
//!
//! Every transport (kberg-server on both protocol generations, the in-process agent loop, the
//! aggregator relaying an upstream's refusal) shows a refused call the same way: an error result
//! whose text is the sentence and whose structured content carries the stable `code`, the
//! `message`, the `tool`, whether it is `retryable`, and the variant's own fields.

use serde_json::{Value, json};

use crate::content::ToolOutput;
use crate::error::GateError;

impl GateError {
    /// Machine-readable details: always `code`, `message`, `tool` and `retryable`, plus
    /// `reason`, `capability` or `errors` where the variant has them.
    pub fn details(&self) -> Value {
        let code = self.code();
        let mut obj = serde_json::Map::with_capacity(6);
        obj.insert("code".into(), Value::String(code.as_str().into()));
        obj.insert("message".into(), Value::String(self.to_string()));
        obj.insert("tool".into(), Value::String(self.tool().into()));
        obj.insert("retryable".into(), Value::Bool(code.is_retryable()));
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
                    Value::Array(errors.iter().map(|e| json!(e)).collect()),
                );
            }
            GateError::InputRequired { requests, .. } => {
                obj.insert("inputRequests".into(), requests.clone());
            }
            GateError::HandleInvalid { pointer, .. } | GateError::HandleExpired { pointer, .. } => {
                obj.insert("pointer".into(), Value::String(pointer.clone()));
            }
            GateError::ScopeRequired { field, .. } => {
                obj.insert("field".into(), Value::String(field.clone()));
            }
            GateError::ScopeUnknown { scope, .. } | GateError::ScopeForbidden { scope, .. } => {
                obj.insert("scope".into(), Value::String(scope.clone()));
            }
            GateError::PendingHumanConfirm { ticket, reason, .. } => {
                obj.insert("ticket".into(), Value::String(ticket.clone()));
                obj.insert("reason".into(), Value::String(reason.clone()));
            }
            _ => {}
        }
        Value::Object(obj)
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
}
