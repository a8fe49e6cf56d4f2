//! Kanboard's JSON-RPC 2.0 API over HTTP, with its quirks turned into stable errors.
//!
//! Kanboard answers almost everything with HTTP 200: a JSON-RPC error object (`-32602 Invalid
//! params`, `-32601 Method not found`), `result: false` when validation failed (with no
//! reason), `result: null` when the object does not exist, and, behind a wrong URL, a web page.
//! Credentials and access are the exceptions: `401` and `403`, each with a JSON-RPC error and
//! `id: null`. [`KanboardClient`] maps every one of these to a [`KanboardError`] with a stable
//! code, so a tool never hands a model a bare `false` or a page of HTML.
//!
//! The client never retries: a create that timed out may have been applied, so repeating it
//! blindly would duplicate it (the tools find a retried create by its `reference` instead).
//! Credentials are given per call, so each agent's requests carry its own token and Kanboard's
//! own permissions and activity stream apply to that agent; they are never logged, and an
//! answer that quotes them (a plugin or a proxy echoing the request's `Authorization` header:
//! the token, or the header's base64 of `user:token`) has them replaced by `[redacted]` before
//! any error or result is built from it. The endpoint is named in errors (which reach the model) and in `Debug` without its user part
//! and query, where credentials in a URL go.

use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde_json::{Value, json};

/// The largest answer read from Kanboard, in bytes (8 MiB), far above what the tools'
/// procedures answer: the limit keeps a misconfigured URL or a hostile server from making the
/// gateway buffer an endless body. An answer over it fails with
/// [`KanboardError::TooLarge`] (code `kanboard_bad_answer`) as soon as its declared length or
/// the bytes read so far pass the limit.
pub const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// The longest text taken from an answer into an error (a JSON-RPC error's message or data, a
/// stray batch item), in bytes. Errors reach the agent's context: a plugin's stack trace or a
/// dump of megabytes is cut here, on a character boundary, with how long it was.
pub const MAX_ERROR_TEXT: usize = 512;

/// `text` cut to [`MAX_ERROR_TEXT`] bytes on a character boundary, saying how long it was.
/// Also for an agent's own argument quoted in a refusal: a refusal goes back into its context.
pub(crate) fn clipped(text: String) -> String {
    if text.len() <= MAX_ERROR_TEXT {
        return text;
    }
    let end = kberg_core::char_floor(&text, MAX_ERROR_TEXT);
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// How a request authenticates to Kanboard (HTTP Basic, as Kanboard's API expects).
#[derive(Clone)]
pub enum Credential {
    /// The application token (`jsonrpc:<token>`): every procedure, no user. Tools that act as a
    /// user (comments, "my tasks") use `acting_user_id` when set.
    AppToken {
        /// The API token from Kanboard's settings.
        token: String,
        /// The Kanboard user the application acts for, if any.
        acting_user_id: Option<i64>,
    },
    /// A user's personal API token (`<username>:<token>`): that user's permissions, and the
    /// activity stream names that user.
    User {
        /// The Kanboard username.
        username: String,
        /// The user's API token (or password).
        token: String,
    },
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::AppToken { acting_user_id, .. } => f
                .debug_struct("AppToken")
                .field("acting_user_id", acting_user_id)
                .finish_non_exhaustive(),
            Credential::User { username, .. } => f
                .debug_struct("User")
                .field("username", username)
                .finish_non_exhaustive(),
        }
    }
}

/// The token is wiped from memory when the credential is dropped (it is built per call from the
/// vault's value and lives only as long as the request).
impl Drop for Credential {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        match self {
            Credential::AppToken { token, .. } | Credential::User { token, .. } => token.zeroize(),
        }
    }
}

impl Credential {
    fn basic(&self) -> (&str, &str) {
        match self {
            Credential::AppToken { token, .. } => ("jsonrpc", token),
            Credential::User { username, token } => (username, token),
        }
    }

    /// Replaces every form this credential takes on the wire in `answer`'s strings and keys:
    /// the `Authorization` header's base64 of `user:token`, the decoded `user:token` pair, and
    /// the token alone. Returns whether any was there. A token shorter than
    /// [`MIN_REDACTED_LEN`](kberg_server::aggregate::MIN_REDACTED_LEN) bytes (a user's password
    /// as short as a word: Kanboard's first user is `admin` with the password `admin`) is not
    /// searched for alone: it would take every name on the board that matches it. The pair
    /// is searched for whatever its length: a proxy that quotes the decoded header quotes it,
    /// and no name on a board is `user:password`.
    fn scrub(&self, answer: &mut Value) -> bool {
        use base64::Engine;
        let (user, token) = self.basic();
        let pair = zeroize::Zeroizing::new(format!("{user}:{token}"));
        let encoded =
            zeroize::Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(&*pair));
        let scrub = crate::upstreams::scrub::scrub_json;
        let mut hit = scrub(answer, &encoded) | scrub(answer, &pair);
        if token.trim().len() >= kberg_server::aggregate::MIN_REDACTED_LEN {
            hit |= scrub(answer, token);
        }
        hit
    }
}

/// Why a Kanboard call failed. [`KanboardError::code`] is stable and reaches the model.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum KanboardError {
    /// Nothing answers at the configured URL.
    #[error("Kanboard at {url} cannot be reached ({reason}); the other tools keep working")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// What the connection said.
        reason: String,
    },
    /// Kanboard did not answer in time. A write may or may not have been applied.
    #[error(
        "Kanboard did not answer within {secs} s; a write may or may not have been applied, so check before repeating it"
    )]
    Timeout {
        /// The limit.
        secs: u64,
    },
    /// The URL answers, but not with Kanboard's JSON-RPC API (usually a web page).
    #[error(
        "{url} does not serve Kanboard's JSON-RPC API (it answered HTTP {status} with {what}); the URL should end in /jsonrpc.php"
    )]
    NotJsonRpc {
        /// The endpoint.
        url: String,
        /// The HTTP status.
        status: u16,
        /// What came back instead (`an HTML page`, `invalid JSON`).
        what: String,
    },
    /// 401: the credentials were refused (wrong token, or the user is locked out).
    #[error(
        "Kanboard refused the credentials of this agent (HTTP 401); an administrator must fix the agent's Kanboard token"
    )]
    Unauthorized,
    /// 403: the credentials are valid but may not do this.
    #[error("Kanboard denied access to `{method}` for this agent's Kanboard user (HTTP 403)")]
    Forbidden {
        /// The procedure.
        method: String,
    },
    /// `-32602`: Kanboard rejected the parameters.
    #[error("Kanboard rejected the parameters of `{method}`: {detail}")]
    InvalidParams {
        /// The procedure.
        method: String,
        /// Kanboard's `data` (`Wrong number of arguments`, ...).
        detail: String,
    },
    /// `-32601`: the procedure does not exist in this Kanboard.
    #[error("this Kanboard has no procedure `{method}` (it may be too old)")]
    MethodNotFound {
        /// The procedure.
        method: String,
    },
    /// Another JSON-RPC error.
    #[error("Kanboard answered `{method}` with error {code}: {message}")]
    Rpc {
        /// The procedure.
        method: String,
        /// The JSON-RPC code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// A batch answer that does not match the requests.
    #[error("Kanboard's answer to a batch did not match its requests: {0}")]
    BadBatch(String),
    /// An answer larger than [`MAX_ANSWER_BYTES`]; it was not read further.
    #[error(
        "Kanboard's answer to `{method}` is larger than {limit} bytes, more than any real answer; the rest was not read"
    )]
    TooLarge {
        /// The procedure (the first of a batch).
        method: String,
        /// The limit, in bytes.
        limit: usize,
    },
}

impl KanboardError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            KanboardError::Unreachable { .. } => "kanboard_unreachable",
            KanboardError::Timeout { .. } => "kanboard_timeout",
            KanboardError::NotJsonRpc { .. } => "kanboard_wrong_url",
            KanboardError::Unauthorized => "kanboard_unauthorized",
            KanboardError::Forbidden { .. } => "kanboard_forbidden",
            KanboardError::InvalidParams { .. } => "kanboard_invalid_params",
            KanboardError::MethodNotFound { .. } => "kanboard_method_not_found",
            KanboardError::Rpc { .. } => "kanboard_error",
            KanboardError::BadBatch(_) | KanboardError::TooLarge { .. } => "kanboard_bad_answer",
        }
    }
}

/// A JSON-RPC client for one Kanboard.
#[derive(Clone)]
pub struct KanboardClient {
    http: reqwest::Client,
    endpoint: Url,
    timeout: Duration,
}

impl std::fmt::Debug for KanboardClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KanboardClient")
            .field("endpoint", &self.shown_endpoint())
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl KanboardClient {
    /// A client for the endpoint (`https://kanboard.example/jsonrpc.php`), with a time limit
    /// per request.
    pub fn new(endpoint: Url, timeout: Duration) -> Result<Self, KanboardError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // A redirect would drop the credentials or send them elsewhere; show it instead.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("bridle-kanboard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| KanboardError::Unreachable {
                url: bridle_rules::redact_url(endpoint.as_str()),
                reason: e.without_url().to_string(),
            })?;
        Ok(Self {
            http,
            endpoint,
            timeout,
        })
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// The endpoint as errors and logs name it: without its user part and query
    /// (`bridle_rules::redact_url`).
    pub fn shown_endpoint(&self) -> String {
        bridle_rules::redact_url(self.endpoint.as_str())
    }

    /// Calls one procedure with named parameters (`params` is an object, or `Value::Null` for
    /// none). Returns Kanboard's `result` as it came (`false` and `null` included).
    pub async fn call(
        &self,
        credential: &Credential,
        method: &str,
        params: Value,
    ) -> Result<Value, KanboardError> {
        let mut request = json!({"jsonrpc": "2.0", "method": method, "id": 1});
        if !params.is_null() {
            request["params"] = params;
        }
        let answer = self.post(credential, method, &request).await?;
        single_result(method, &answer)
    }

    /// Calls several procedures in one JSON-RPC batch (one HTTP request). Each entry of the
    /// answer is that call's result or error, in the order given.
    pub async fn batch(
        &self,
        credential: &Credential,
        calls: &[(&str, Value)],
    ) -> Result<Vec<Result<Value, KanboardError>>, KanboardError> {
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let requests: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (method, params))| {
                let mut r = json!({"jsonrpc": "2.0", "method": method, "id": i + 1});
                if !params.is_null() {
                    r["params"] = params.clone();
                }
                r
            })
            .collect();
        let first = calls[0].0;
        let answer = self
            .post(credential, first, &Value::Array(requests))
            .await?;
        let Value::Array(items) = answer else {
            // A whole-batch failure (401/403 arrive as one object with id null).
            return Err(match single_result(first, &answer) {
                Err(e) => e,
                Ok(_) => KanboardError::BadBatch("a single answer to a batch".into()),
            });
        };
        let mut out: Vec<Option<Result<Value, KanboardError>>> = vec![None; calls.len()];
        for item in &items {
            let idx = item
                .get("id")
                .and_then(Value::as_u64)
                .and_then(|id| usize::try_from(id).ok())
                .filter(|id| (1..=calls.len()).contains(id))
                .ok_or_else(|| {
                    KanboardError::BadBatch(clipped(format!("unexpected id in {item}")))
                })?;
            out[idx - 1] = Some(single_result(calls[idx - 1].0, item));
        }
        out.into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.ok_or_else(|| KanboardError::BadBatch(format!("no answer to `{}`", calls[i].0)))
            })
            .collect()
    }

    async fn post(
        &self,
        credential: &Credential,
        method: &str,
        body: &Value,
    ) -> Result<Value, KanboardError> {
        let (user, pass) = credential.basic();
        let response = self
            .http
            .post(self.endpoint.clone())
            .basic_auth(user, Some(pass))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| self.transport(e))?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        match status {
            StatusCode::UNAUTHORIZED => return Err(KanboardError::Unauthorized),
            StatusCode::FORBIDDEN => {
                return Err(KanboardError::Forbidden {
                    method: method.to_string(),
                });
            }
            _ => {}
        }
        let bytes = self.read_answer(response, method).await?;
        tracing::debug!(
            method,
            status = status.as_u16(),
            bytes = bytes.len(),
            "kanboard answered"
        );
        let not_rpc = |what: &str| KanboardError::NotJsonRpc {
            url: self.shown_endpoint(),
            status: status.as_u16(),
            what: what.to_string(),
        };
        if content_type.contains("html") {
            return Err(not_rpc("an HTML page"));
        }
        let mut value: Value = serde_json::from_slice(&bytes).map_err(|_| {
            let head = String::from_utf8_lossy(&bytes[..bytes.len().min(256)]).to_lowercase();
            if head.contains("<html") || head.contains("<!doctype") {
                not_rpc("an HTML page")
            } else {
                not_rpc("a body that is not JSON")
            }
        })?;
        // Kanboard behind a plugin or a proxy that quotes the request may echo the credential
        // (in an error's message or data, in a result); the errors and results agents see
        // are built from this answer, so it loses every form of the credential here.
        if credential.scrub(&mut value) {
            tracing::warn!(
                method,
                "Kanboard's answer quoted the credential it was sent; scrubbed"
            );
        }
        if !status.is_success() {
            // JSON-RPC errors come with HTTP 200; anything else is not the API speaking.
            return match single_result(method, &value) {
                Err(e) => Err(e),
                Ok(_) => Err(not_rpc("an unexpected status")),
            };
        }
        let looks_rpc = match &value {
            Value::Object(o) => o.get("jsonrpc").is_some(),
            Value::Array(items) => items.iter().all(|i| i.get("jsonrpc").is_some()),
            _ => false,
        };
        if !looks_rpc {
            return Err(not_rpc("JSON that is not JSON-RPC"));
        }
        Ok(value)
    }

    /// The body of `response`, read piece by piece up to [`MAX_ANSWER_BYTES`]: a body that
    /// says or turns out to be longer is refused without buffering the rest.
    async fn read_answer(
        &self,
        mut response: reqwest::Response,
        method: &str,
    ) -> Result<Vec<u8>, KanboardError> {
        let too_large = || {
            tracing::warn!(
                method,
                limit = MAX_ANSWER_BYTES,
                "a Kanboard answer over the size limit was refused"
            );
            KanboardError::TooLarge {
                method: method.to_string(),
                limit: MAX_ANSWER_BYTES,
            }
        };
        let declared = response.content_length().unwrap_or(0);
        if declared > MAX_ANSWER_BYTES as u64 {
            return Err(too_large());
        }
        // The declared length is only a hint for the buffer (capped, as it may lie).
        let mut body = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
        while let Some(piece) = response.chunk().await.map_err(|e| self.transport(e))? {
            if body.len() + piece.len() > MAX_ANSWER_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&piece);
        }
        Ok(body)
    }

    fn transport(&self, e: reqwest::Error) -> KanboardError {
        if e.is_timeout() {
            return KanboardError::Timeout {
                secs: self.timeout.as_secs(),
            };
        }
        // The error's own text names the URL with its query; its causes do not.
        let e = e.without_url();
        let mut reason = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            reason = s.to_string();
            source = s.source();
        }
        KanboardError::Unreachable {
            url: self.shown_endpoint(),
            reason,
        }
    }
}

/// One JSON-RPC answer's result, or its error as a [`KanboardError`]. An error member that is
/// `null` or `false` (as JSON-RPC 1.0 servers send beside a result) is no error; one that is
/// only a sentence keeps the sentence as its message.
fn single_result(method: &str, answer: &Value) -> Result<Value, KanboardError> {
    if let Some(error) = answer
        .get("error")
        .filter(|e| !matches!(e, Value::Null | Value::Bool(false)))
    {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| error.as_str())
            .unwrap_or("no message")
            .to_string();
        let message = clipped(message);
        let detail = error
            .get("data")
            .map(|d| clipped(d.as_str().map_or_else(|| d.to_string(), str::to_string)))
            .unwrap_or_else(|| message.clone());
        return Err(match code {
            401 => KanboardError::Unauthorized,
            403 => KanboardError::Forbidden {
                method: method.to_string(),
            },
            -32602 => KanboardError::InvalidParams {
                method: method.to_string(),
                detail,
            },
            -32601 => KanboardError::MethodNotFound {
                method: method.to_string(),
            },
            _ => KanboardError::Rpc {
                method: method.to_string(),
                code,
                message,
            },
        });
    }
    answer
        .get("result")
        .cloned()
        .ok_or_else(|| KanboardError::BadBatch(format!("an answer to `{method}` without result")))
}

/// An id from Kanboard, which sends numbers (and, in older versions, numeric strings).
pub fn as_id(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_of_the_recorded_answers() {
        let bad = json!({"jsonrpc": "2.0", "error": {"code": -32602, "message": "Invalid params", "data": "Wrong number of arguments"}, "id": 23});
        let e = single_result("createTask", &bad).unwrap_err();
        assert_eq!(e.code(), "kanboard_invalid_params");
        assert!(e.to_string().contains("Wrong number of arguments"));
        let missing = json!({"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": 27});
        assert_eq!(
            single_result("noSuchMethod", &missing).unwrap_err().code(),
            "kanboard_method_not_found"
        );
        let ok = json!({"jsonrpc": "2.0", "result": false, "id": 12});
        assert_eq!(single_result("updateTask", &ok).unwrap(), json!(false));
        // An empty error member beside a result (JSON-RPC 1.0 style) is no error.
        for empty in [json!(null), json!(false)] {
            let ok = json!({"jsonrpc": "2.0", "result": 5, "error": empty, "id": 1});
            assert_eq!(single_result("createTask", &ok).unwrap(), json!(5));
        }
        // An error that is only a sentence keeps the sentence.
        let said = json!({"jsonrpc": "2.0", "error": "database is locked", "id": 1});
        let e = single_result("createTask", &said).unwrap_err();
        assert_eq!(e.code(), "kanboard_error");
        assert!(e.to_string().contains("database is locked"), "{e}");
        assert_eq!(as_id(&json!("12")), Some(12));
        assert_eq!(as_id(&json!(null)), None);
    }

    #[test]
    fn credentials_do_not_print() {
        let c = Credential::User {
            username: "claude".into(),
            token: "s3cret".into(),
        };
        assert!(!format!("{c:?}").contains("s3cret"));
        let c = Credential::AppToken {
            token: "s3cret".into(),
            acting_user_id: None,
        };
        assert!(!format!("{c:?}").contains("s3cret"));
        let url = "https://bot:s3cret@kanboard.example/jsonrpc.php?token=s3cret"
            .parse()
            .expect("a URL");
        let client = KanboardClient::new(url, Duration::from_secs(1)).expect("a client");
        let shown = format!("{client:?} {}", client.shown_endpoint());
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("kanboard.example/jsonrpc.php"), "{shown}");
    }
}
