//! How kberg-core's and rmcp's failures become JSON-RPC errors on the wire: the methods this
//! server knows (a known method with malformed params is `-32602`, an unknown one `-32601`),
//! the methods 2026-07-28 removed, and resource, cursor and prompt errors with their stable
//! `data`. Clients and the conformance suite match on these, so they live in one place.

use kberg_core::{PromptError, ResourceError};
use rmcp::ErrorData as McpError;
use serde_json::json;

/// Methods this server implements; a request naming one with malformed params is `-32602`.
pub(super) const KNOWN_METHODS: [&str; 16] = [
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "notifications/initialized",
];

/// Methods of 2025-11-25 that 2026-07-28 removed (SEP-2575): `-32601` on a 2026-07-28 request.
pub(super) const REMOVED_IN_2026: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

pub(super) fn removed(method: &str) -> McpError {
    McpError::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("method not found: {method} (removed in 2026-07-28)"),
        None,
    )
}

pub(super) fn invalid_cursor() -> McpError {
    McpError::invalid_params("invalid pagination cursor", None)
}

pub(super) fn resource_error(e: ResourceError) -> McpError {
    match e {
        ResourceError::NotFound { uri } => McpError::resource_not_found(
            format!("resource not found: {uri}"),
            Some(json!({"uri": uri})),
        ),
        ResourceError::InvalidCursor => invalid_cursor(),
        ResourceError::ReadFailed { uri, message } => {
            let code = read_failure_code(&message);
            McpError::internal_error(
                format!("reading {uri} failed: {message}"),
                Some(json!({"uri": uri, "code": code})),
            )
        }
        other => McpError::internal_error(other.to_string(), None),
    }
}

/// The stable code of a failed read for the error's `data.code`: a reader that starts its
/// message with `<code>: ` (lowercase letters and `_`, as the aggregator's
/// `upstream_unavailable: ...` / `upstream_timeout: ...` do) names it; otherwise `read_failed`.
pub(super) fn read_failure_code(message: &str) -> &str {
    match message.split_once(": ") {
        Some((code, _))
            if !code.is_empty()
                && code.len() <= 64
                && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') =>
        {
            code
        }
        _ => "read_failed",
    }
}

pub(super) fn prompt_error(e: PromptError) -> McpError {
    match e {
        PromptError::Failed { .. } => McpError::internal_error(e.to_string(), None),
        other => McpError::invalid_params(other.to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_reads_carry_a_stable_code_in_their_data() {
        let e = resource_error(ResourceError::ReadFailed {
            uri: "ev+test://x".into(),
            message: "upstream_timeout: its server `ev` did not answer within 1s".into(),
        });
        assert_eq!(e.code, rmcp::model::ErrorCode::INTERNAL_ERROR);
        let data = e.data.expect("data");
        assert_eq!(data["code"], "upstream_timeout");
        assert_eq!(data["uri"], "ev+test://x");
        for message in ["disk on fire", "Upstream: x", ": empty", "a b: c"] {
            let e = resource_error(ResourceError::ReadFailed {
                uri: "u".into(),
                message: message.into(),
            });
            assert_eq!(e.data.expect("data")["code"], "read_failed", "{message}");
        }
    }
}
