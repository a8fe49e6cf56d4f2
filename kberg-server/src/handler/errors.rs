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

/// The `-32602` answer to a known method whose params rmcp could not read, saying what is
/// wrong with them: the params are read again as the method's shape, and that error is told
/// (`missing field `name``, `invalid type: integer `5`, expected a string`), cut at
/// [`MAX_PROBLEM_CHARS`] (it may quote a value the client sent).
pub(super) fn invalid_params(method: &str, params: Option<serde_json::Value>) -> McpError {
    let message = match params_problem(method, params) {
        Some(mut p) => {
            if let Some((cut, _)) = p.char_indices().nth(MAX_PROBLEM_CHARS) {
                p.truncate(cut);
                p.push_str("...");
            }
            format!("invalid params for `{method}`: {p}")
        }
        None => format!("invalid params for `{method}`"),
    };
    McpError::invalid_params(message, None)
}

/// The longest description of a params problem, in characters.
const MAX_PROBLEM_CHARS: usize = 200;

/// What reading `params` as `method`'s params fails on, when this server knows the shape.
fn params_problem(method: &str, params: Option<serde_json::Value>) -> Option<String> {
    use rmcp::model::{
        CallToolRequestParams, CompleteRequestParams, GetPromptRequestParams,
        InitializeRequestParams, PaginatedRequestParams, ReadResourceRequestParams,
        SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams,
    };
    fn problem<T: serde::de::DeserializeOwned>(
        params: Option<serde_json::Value>,
    ) -> Option<String> {
        match params {
            None => Some("the request has no params".to_string()),
            Some(v) if !v.is_object() => Some("params must be an object".to_string()),
            Some(v) => serde_json::from_value::<T>(v).err().map(|e| e.to_string()),
        }
    }
    match method {
        "tools/call" => problem::<CallToolRequestParams>(params),
        "resources/read" => problem::<ReadResourceRequestParams>(params),
        "resources/subscribe" => problem::<SubscribeRequestParams>(params),
        "resources/unsubscribe" => problem::<UnsubscribeRequestParams>(params),
        "prompts/get" => problem::<GetPromptRequestParams>(params),
        "completion/complete" => problem::<CompleteRequestParams>(params),
        "logging/setLevel" => problem::<SetLevelRequestParams>(params),
        "initialize" => problem::<InitializeRequestParams>(params),
        // A list's params are optional: only ones that are there can be wrong.
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => {
            params.and_then(|v| problem::<PaginatedRequestParams>(Some(v)))
        }
        _ => None,
    }
}

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
    fn invalid_params_say_what_is_wrong() {
        let cases = [
            (
                "tools/call",
                Some(json!({"name": 5})),
                "invalid type: integer `5`, expected",
            ),
            ("tools/call", None, "the request has no params"),
            ("tools/call", Some(json!([1])), "params must be an object"),
            ("tools/call", Some(json!({})), "missing field `name`"),
            (
                "resources/read",
                Some(json!({"uri": ["x"]})),
                "invalid type: sequence",
            ),
            (
                "logging/setLevel",
                Some(json!({"level": "loud"})),
                "unknown variant `loud`",
            ),
            (
                "tools/list",
                Some(json!({"cursor": 7})),
                "invalid type: integer `7`",
            ),
        ];
        for (method, params, says) in cases {
            let e = invalid_params(method, params.clone());
            assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(
                e.message
                    .starts_with(&format!("invalid params for `{method}`: ")),
                "{method} {params:?}: {}",
                e.message
            );
            assert!(
                e.message.contains(says),
                "{method} {params:?}: {}",
                e.message
            );
        }
        // A long value the client sent is not echoed whole.
        let e = invalid_params(
            "tools/call",
            Some(json!({"name": "x", "arguments": "y".repeat(10_000)})),
        );
        assert!(e.message.contains("invalid type: string"), "{}", e.message);
        assert!(e.message.ends_with("..."), "{}", e.message);
        assert!(e.message.chars().count() < 260, "{}", e.message);
        // A method whose shape this server does not read again keeps the plain message.
        assert_eq!(
            invalid_params("notifications/initialized", Some(json!(1))).message,
            "invalid params for `notifications/initialized`"
        );
    }

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
