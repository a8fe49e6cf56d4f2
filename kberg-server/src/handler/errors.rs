//! How kberg-core's and rmcp's failures become JSON-RPC errors on the wire: the methods this
//! server knows (a known method with malformed params is `-32602`, an unknown one `-32601`),
//! the methods 2026-07-28 removed, and resource, cursor and prompt errors with their stable
//! `data`. Clients and the conformance suite match on these, so they live in one place.

use kberg_core::{PromptError, ResourceError};
use rmcp::ErrorData as McpError;
use serde_json::json;

/// Methods this server implements; a request naming one with malformed params is `-32602`.
pub(super) const KNOWN_METHODS: [&str; 19] = [
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
    // The tasks extension as the handler implements it (`tasks/list` and `tasks/result` are
    // gone from it, so they stay unknown).
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
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
/// (`missing field `name``, `invalid type: integer `5`, expected a string (field `taskId`)`),
/// cut at [`MAX_PROBLEM_CHARS`] (it may quote a value the client sent).
pub(crate) fn invalid_params(method: &str, params: Option<serde_json::Value>) -> McpError {
    let message = match params_problem(method, params) {
        Some(p) => format!("invalid params for `{method}`: {p}"),
        None => format!("invalid params for `{method}`"),
    };
    McpError::invalid_params(message, None)
}

/// The longest description of a params problem, in characters.
const MAX_PROBLEM_CHARS: usize = 200;

/// The longest field name quoted in a params problem, in characters (it is the client's key).
const MAX_FIELD_CHARS: usize = 64;

/// The most params fields looked at to find the one a problem is about: each look reads one
/// field again, and params have a handful of fields.
const MAX_FIELDS_SEARCHED: usize = 32;

/// `s` cut to at most `max` characters, marked with `...` where it was cut.
pub(super) fn cut(mut s: String, max: usize) -> String {
    kberg_core::cut_chars(&mut s, max, "...");
    s
}

/// What reading `params` as a `T` fails on, naming the field whose value is wrong when that
/// can be told.
fn problem<T: serde::de::DeserializeOwned>(params: Option<serde_json::Value>) -> Option<String> {
    let params = match params {
        None => return Some("the request has no params".to_string()),
        Some(v) if v.is_object() => v,
        Some(_) => return Some("params must be an object".to_string()),
    };
    let e = T::deserialize(&params).err()?.to_string();
    let told = cut(e.clone(), MAX_PROBLEM_CHARS);
    // serde names a missing, unknown or repeated field, but not a field whose value is
    // wrong. Read each field alone: a sound one then fails on a missing field or not at
    // all, the bad one the same way as the whole. Only one field failing so is named (two
    // alike, or a shape that fails the same way whatever it is given, name nothing).
    if e.contains(" field `") {
        return Some(told);
    }
    let mut failing = params
        .as_object()?
        .iter()
        .take(MAX_FIELDS_SEARCHED)
        .filter(|(name, value)| {
            let alone = serde_json::Map::from_iter([((*name).clone(), (*value).clone())]);
            T::deserialize(&serde_json::Value::Object(alone))
                .is_err_and(|alone| alone.to_string() == e)
        })
        .map(|(name, _)| name);
    Some(match (failing.next(), failing.next()) {
        (Some(name), None) => {
            format!("{told} (field `{}`)", cut(name.clone(), MAX_FIELD_CHARS))
        }
        _ => told,
    })
}

/// What reading `params` as `method`'s params fails on, when this server knows the shape.
fn params_problem(method: &str, params: Option<serde_json::Value>) -> Option<String> {
    use rmcp::model::{
        CallToolRequestParams, CancelTaskParams, CompleteRequestParams, GetPromptRequestParams,
        GetTaskParams, InitializeRequestParams, PaginatedRequestParams, ReadResourceRequestParams,
        SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams, UpdateTaskParams,
    };
    match method {
        "tools/call" => problem::<CallToolRequestParams>(params),
        "resources/read" => problem::<ReadResourceRequestParams>(params),
        "resources/subscribe" => problem::<SubscribeRequestParams>(params),
        "resources/unsubscribe" => problem::<UnsubscribeRequestParams>(params),
        "prompts/get" => problem::<GetPromptRequestParams>(params),
        "completion/complete" => problem::<CompleteRequestParams>(params),
        "logging/setLevel" => problem::<SetLevelRequestParams>(params),
        "initialize" => problem::<InitializeRequestParams>(params),
        "tasks/get" => problem::<GetTaskParams>(params),
        "tasks/update" => problem::<UpdateTaskParams>(params),
        "tasks/cancel" => problem::<CancelTaskParams>(params),
        // A list's params are optional: only ones that are there can be wrong.
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => {
            params.and_then(|v| problem::<PaginatedRequestParams>(Some(v)))
        }
        _ => None,
    }
}

/// The answer to a request whose handling panicked in the app's code (a `ToolVisibility` or
/// `ResourceVisibility` it set): `-32603` with `data.code = "internal_error"`, so a client can
/// tell it from the server's other internal errors; logged once, naming only the method (the
/// request's params, and the panic's payload, may quote anything).
pub(super) fn panicked(method: &str) -> McpError {
    tracing::error!(
        method,
        "the app's code panicked while a request was handled; it was answered internal_error"
    );
    McpError::internal_error(
        "the server stopped handling this request unexpectedly (internal error)",
        Some(json!({"code": "internal_error"})),
    )
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

/// The longest resource URI an error quotes, in characters: the URI is the client's, and may
/// be as long as a request body.
const MAX_URI_CHARS: usize = 256;

pub(super) fn resource_error(e: ResourceError) -> McpError {
    let quoted = |uri: String| cut(uri, MAX_URI_CHARS);
    match e {
        ResourceError::NotFound { uri } => {
            let uri = quoted(uri);
            McpError::resource_not_found(
                format!("resource not found: {uri}"),
                Some(json!({"uri": uri})),
            )
        }
        ResourceError::InvalidCursor => invalid_cursor(),
        // Past the subscriber's limit: `-32602` (invalid params: the request asks for more
        // than the server allows, the client's to fix), with `data.code` and the limit, so a
        // client can tell it from an unknown URI (`-32002`) and unsubscribe first.
        ResourceError::TooManySubscriptions { uri, limit } => {
            let uri = quoted(uri);
            McpError::invalid_params(
                format!(
                    "cannot subscribe to {uri}: a session may be subscribed to at most {limit} \
                 resources at once; unsubscribe from one first"
                ),
                Some(json!({"code": "too_many_subscriptions", "uri": uri, "limit": limit})),
            )
        }
        ResourceError::ReadFailed { uri, message } => {
            let uri = quoted(uri);
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
            (
                "tasks/get",
                Some(json!({"taskId": 5})),
                "invalid type: integer `5`, expected a string (field `taskId`)",
            ),
            ("tasks/get", Some(json!({})), "missing field `taskId`"),
            (
                "tasks/cancel",
                Some(json!({"taskId": true, "_meta": {}})),
                "(field `taskId`)",
            ),
            (
                "tasks/update",
                Some(json!({"taskId": "t", "inputResponses": []})),
                "(field `inputResponses`)",
            ),
            (
                "tasks/update",
                Some(json!({"taskId": "t"})),
                "missing field `inputResponses`",
            ),
            (
                "tools/call",
                Some(json!({"name": 5, "arguments": {}})),
                "(field `name`)",
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
        assert!(
            e.message.ends_with("... (field `arguments`)"),
            "{}",
            e.message
        );
        assert!(e.message.chars().count() < 260, "{}", e.message);
        let e = invalid_params("tasks/get", Some(json!({"taskId": "t", "_meta": 1})));
        assert!(e.message.ends_with("(field `_meta`)"), "{}", e.message);
        // A method whose shape this server does not read again keeps the plain message.
        assert_eq!(
            invalid_params("notifications/initialized", Some(json!(1))).message,
            "invalid params for `notifications/initialized`"
        );
    }

    #[test]
    fn a_field_is_named_only_when_it_alone_fails_so() {
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Two {
            a: String,
            b: String,
        }
        let says = |v| problem::<Two>(Some(v)).unwrap_or_default();
        assert_eq!(
            says(json!({"a": "x", "b": 1})),
            "invalid type: integer `1`, expected a string (field `b`)"
        );
        // Both wrong alike: serde meant one of them, which is not told.
        assert_eq!(
            says(json!({"a": 1, "b": 1})),
            "invalid type: integer `1`, expected a string"
        );
        // Wrong differently: the first in serde's order is the one reported and named.
        assert_eq!(
            says(json!({"a": 1, "b": true})),
            "invalid type: integer `1`, expected a string (field `a`)"
        );
        assert_eq!(says(json!({"a": "x"})), "missing field `b`");
        assert_eq!(problem::<Two>(Some(json!({"a": "x", "b": "y"}))), None);
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
