//! Why a forwarded request, or a connection to an upstream, did not work out.
//!
//! [`UpstreamError`] is the aggregator's one error type for a request it forwarded: each variant
//! has a stable [`ErrorCode`] (`upstream_unavailable`, `upstream_timeout`,
//! `upstream_invalid_result`, `upstream_error`, or `cancelled`), and its sentence never
//! includes an upstream's credentials. A forwarded tool call turns it into the same refusal
//! shape every other refusal has ([`kberg_core::Refusal`]); prompt and resource requests, whose
//! answers are plain messages, carry it as `<code>: <sentence>`. [`ConnectError`] says why a
//! connection attempt failed; the supervisor shows it as the upstream's
//! [`Unavailable`](super::UpstreamStatus::Unavailable) reason.

use std::time::Duration;

use kberg_core::ErrorCode;

/// Why a forwarded request got no usable answer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The upstream is not connected, or its transport failed during the request.
    #[error("its server `{namespace}` is not connected ({reason})")]
    Unavailable {
        /// The upstream's namespace.
        namespace: String,
        /// Why (never includes credentials).
        reason: String,
    },
    /// No answer within the upstream's call timeout; the request was cancelled upstream.
    #[error(
        "its server `{namespace}` did not answer within {after:?}; the request was cancelled there"
    )]
    Timeout {
        /// The upstream's namespace.
        namespace: String,
        /// The call timeout that passed.
        after: Duration,
    },
    /// An upstream task was still unfinished when its time to live (its `ttlMs`, at most
    /// [`MAX_CALL_TIMEOUT`](super::MAX_CALL_TIMEOUT)) had passed since the aggregator was given
    /// it; the task was cancelled upstream.
    #[error(
        "its server `{namespace}` did not finish the task within {after:?}, its time to live; the task was cancelled there"
    )]
    TaskTimeout {
        /// The upstream's namespace.
        namespace: String,
        /// The task's time to live.
        after: Duration,
    },
    /// The caller cancelled; the request was cancelled upstream.
    #[error("the caller cancelled the request")]
    Cancelled,
    /// The upstream answered with a JSON-RPC error.
    #[error("the server `{namespace}` refused: {message}")]
    Refused {
        /// The upstream's namespace.
        namespace: String,
        /// Its JSON-RPC error code.
        code: i32,
        /// Its message.
        message: String,
    },
    /// The upstream answered with something that is not the documented result.
    #[error("the server `{namespace}` answered with something that is not {expected} ({found})")]
    InvalidResult {
        /// The upstream's namespace.
        namespace: String,
        /// What was asked for (`a tool result`, `a prompt`, `resource contents`).
        expected: &'static str,
        /// What came instead.
        found: String,
    },
    /// Anything else the client library reported.
    #[error("the request to `{namespace}` failed: {message}")]
    Failed {
        /// The upstream's namespace.
        namespace: String,
        /// What failed.
        message: String,
    },
}

impl UpstreamError {
    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            UpstreamError::Unavailable { .. } => ErrorCode::UpstreamUnavailable,
            UpstreamError::Timeout { .. } | UpstreamError::TaskTimeout { .. } => {
                ErrorCode::UpstreamTimeout
            }
            UpstreamError::Cancelled => ErrorCode::Cancelled,
            UpstreamError::InvalidResult { .. } => ErrorCode::UpstreamInvalidResult,
            UpstreamError::Refused { .. } | UpstreamError::Failed { .. } => {
                ErrorCode::UpstreamError
            }
        }
    }

    /// `<code>: <sentence>`, for answers that are plain messages (`prompts/get`,
    /// `resources/read`).
    pub fn coded_message(&self) -> String {
        format!("{}: {self}", self.code())
    }
}

/// Why a connection attempt to an upstream failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The child process could not be started.
    #[error("could not start `{command}`: {message}")]
    Spawn {
        /// The command.
        command: String,
        /// What the operating system said.
        message: String,
    },
    /// The upstream did not complete the MCP handshake.
    #[error("`{target}` did not initialize: {message}")]
    Initialize {
        /// The command or URL.
        target: String,
        /// What the client library said.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("the HTTP client could not be built: {0}")]
    HttpClient(String),
    /// A configured header cannot be sent (a name that is not a header name, or a value with a
    /// line break or another control character): the upstream is not called without it. The
    /// value is never shown.
    #[error("the header `{0}` cannot be sent: its name or value is not valid in HTTP")]
    InvalidHeader(String),
    /// The attempt did not finish in time.
    #[error("it did not finish connecting within {0:?}")]
    Timeout(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_their_code() {
        let e = UpstreamError::Timeout {
            namespace: "fs".into(),
            after: Duration::from_secs(2),
        };
        assert_eq!(e.code(), ErrorCode::UpstreamTimeout);
        assert!(
            e.coded_message()
                .starts_with("upstream_timeout: its server `fs`")
        );
        let e = UpstreamError::Refused {
            namespace: "fs".into(),
            code: -32602,
            message: "bad".into(),
        };
        assert_eq!(
            e.coded_message(),
            "upstream_error: the server `fs` refused: bad"
        );
    }
}
