//! One shape for every failure of the admin API: RFC 9457 problem details
//! (`application/problem+json`) with a stable `code`.
//!
//! Scripts and the panel branch on `code`, never on the sentence in `detail`, so a code never
//! changes meaning. Every refusal the API makes, from a missing credential to a stale revision
//! or a YAML document that does not parse, goes through [`ApiError`] and comes out as one
//! [`ProblemDetails`] body.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bridle_rules::{RulesError, RulesErrorKind};
use serde::Serialize;
use utoipa::ToSchema;

/// The media type of a problem-details body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem-details body.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProblemDetails {
    /// A URI naming the problem type: `urn:bridle:problem:<code>`.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// A short summary of the problem type.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong this time, in a sentence.
    pub detail: String,
    /// The stable code (see the README's table).
    pub code: String,
    /// The individual problems (YAML positions, document checks), when there are several.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// On a revision conflict: the document's current revision. On
    /// `stored_document_invalid`: the revision a `PUT` with `repair` must be based on (the one
    /// the broken document names, else the newest in its history), when it may be repaired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<u64>,
}

/// One problem inside a document or request.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FieldError {
    /// A stable code for this problem.
    pub code: String,
    /// The sentence.
    pub message: String,
    /// The field, as a dotted path, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The 1-based line in the submitted YAML, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The 1-based column in the submitted YAML, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u64>,
}

/// Why an admin request failed. Each variant has a stable [`ApiError::code`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// No credential, or one that is not an admin's (an agent's token included).
    #[error("{0}")]
    Unauthorized(String),
    /// An admin who may not do this: a change by a watcher or on a read-only API
    /// (`read_only`), or a request to the admin listener under a `Host` it does not answer to
    /// (`host_not_allowed`).
    #[error("{detail}")]
    Forbidden {
        /// The code.
        code: &'static str,
        /// The sentence.
        detail: String,
    },
    /// Too many attempts: failed credentials from one address or with one token
    /// (`too_many_attempts`), or too many open event streams (`too_many_streams`).
    #[error("{detail}")]
    TooManyRequests {
        /// The code.
        code: &'static str,
        /// The sentence.
        detail: String,
        /// When to try again, sent as `Retry-After` (whole seconds, at least one).
        retry_after: Option<std::time::Duration>,
    },
    /// An id that names nothing.
    #[error("{detail}")]
    NotFound {
        /// The code (`unknown_project`, `not_found`, ...).
        code: &'static str,
        /// The sentence.
        detail: String,
    },
    /// An edit based on an older revision than the document's.
    #[error("{detail}")]
    RevisionConflict {
        /// The sentence.
        detail: String,
        /// The document's revision now.
        current_revision: u64,
    },
    /// A change that conflicts with the current state (already decided, already exists).
    #[error("{detail}")]
    Conflict {
        /// The code.
        code: &'static str,
        /// The sentence.
        detail: String,
    },
    /// The body is not JSON (or YAML) that parses.
    #[error("{detail}")]
    Malformed {
        /// The code (`malformed_json`, `invalid_yaml`).
        code: &'static str,
        /// The sentence.
        detail: String,
        /// The positions, when known.
        errors: Vec<FieldError>,
    },
    /// The body parses but does not say something valid (wrong types, a failing document check).
    #[error("{detail}")]
    Invalid {
        /// The code (`invalid_request`, `invalid_document`, `invalid_name`, ...).
        code: &'static str,
        /// The sentence.
        detail: String,
        /// The problems.
        errors: Vec<FieldError>,
    },
    /// A project's stored document does not load (a file broken by hand, one written by a
    /// newer build, a migration that fails): the state the request met is at fault, not the
    /// request (`stored_document_invalid`). See [`ApiError::stored`].
    #[error("{detail}")]
    StoredDocument {
        /// The sentence.
        detail: String,
        /// The problems in the stored document (with its lines), when known.
        errors: Vec<FieldError>,
        /// The revision a `PUT` with `repair` must be based on, when the document may be
        /// repaired and a revision is known (answered as `current_revision`).
        repair_base: Option<u64>,
    },
    /// A query string that does not parse (bad cursor or limit).
    #[error("{0}")]
    BadQuery(String),
    /// The body is larger than the configured limit.
    #[error("the request body is larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body is not of a media type the endpoint takes.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// The route exists but not with this method.
    #[error("this resource does not support that method")]
    MethodNotAllowed,
    /// No route has this path.
    #[error("no admin API resource at `{0}`")]
    UnknownRoute(String),
    /// A part of the gateway this resource needs is not running (no vault, no audit log).
    #[error("{detail}")]
    Unavailable {
        /// The code (`vault_unavailable`, `audit_log_off`, ...).
        code: &'static str,
        /// The sentence.
        detail: String,
    },
    /// A service the gateway reached for the request failed (a vendor page that is not there,
    /// too slow, too large or not text).
    #[error("{detail}")]
    BadGateway {
        /// The code (`feed_unreachable`, `feed_http_status`, ...).
        code: &'static str,
        /// The sentence.
        detail: String,
    },
    /// The change was made, but its audit entry could not be written (the log says why).
    #[error("{0}")]
    AuditUnavailable(String),
    /// Something failed inside the gateway (the database, a file). Logged; the client gets a
    /// sentence without internals.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden { code, .. } => code,
            ApiError::TooManyRequests { code, .. } => code,
            ApiError::NotFound { code, .. } => code,
            ApiError::RevisionConflict { .. } => "revision_conflict",
            ApiError::Conflict { code, .. } => code,
            ApiError::Malformed { code, .. } => code,
            ApiError::Invalid { code, .. } => code,
            ApiError::StoredDocument { .. } => "stored_document_invalid",
            ApiError::BadQuery(_) => "invalid_query",
            ApiError::BodyTooLarge { .. } => "body_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::UnknownRoute(_) => "unknown_route",
            ApiError::Unavailable { code, .. } => code,
            ApiError::BadGateway { code, .. } => code,
            ApiError::AuditUnavailable(_) => "audit_unavailable",
            ApiError::Internal(_) => "internal",
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotFound { .. } | ApiError::UnknownRoute(_) => StatusCode::NOT_FOUND,
            ApiError::RevisionConflict { .. }
            | ApiError::Conflict { .. }
            | ApiError::StoredDocument { .. } => StatusCode::CONFLICT,
            ApiError::Malformed { .. } | ApiError::BadQuery(_) => StatusCode::BAD_REQUEST,
            ApiError::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::BadGateway { .. } => StatusCode::BAD_GATEWAY,
            ApiError::Internal(_) | ApiError::AuditUnavailable(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// A request-level invalid value (`invalid_request`).
    pub fn invalid(detail: impl Into<String>) -> Self {
        ApiError::Invalid {
            code: "invalid_request",
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    /// The problem-details body.
    pub fn problem(&self) -> ProblemDetails {
        let status = self.status();
        let (errors, current_revision) = match self {
            ApiError::Malformed { errors, .. } | ApiError::Invalid { errors, .. } => {
                (errors.clone(), None)
            }
            ApiError::StoredDocument {
                errors,
                repair_base,
                ..
            } => (errors.clone(), *repair_base),
            ApiError::RevisionConflict {
                current_revision, ..
            } => (Vec::new(), Some(*current_revision)),
            _ => (Vec::new(), None),
        };
        ProblemDetails {
            type_uri: format!("urn:bridle:problem:{}", self.code()),
            title: status.canonical_reason().unwrap_or("Error").to_string(),
            status: status.as_u16(),
            detail: self.to_string(),
            code: self.code().to_string(),
            errors,
            current_revision,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(detail = %detail, "admin API request failed");
        }
        let problem = self.problem();
        // A ProblemDetails is plain data; serializing it cannot fail.
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut response = (self.status(), body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if matches!(self, ApiError::BodyTooLarge { .. }) {
            // The rest of the body was never read, so the connection cannot carry another
            // request: say so, or a client that reuses it sends its next request into a
            // connection the server is closing.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if let ApiError::TooManyRequests {
            retry_after: Some(after),
            ..
        } = &self
        {
            // Rounded up: a client that waits this long is not refused again.
            let seconds = after
                .as_secs()
                .saturating_add(u64::from(after.subsec_nanos() > 0))
                .max(1)
                .to_string();
            if let Ok(v) = HeaderValue::from_str(&seconds) {
                headers.insert(header::RETRY_AFTER, v);
            }
        }
        if matches!(self, ApiError::Unauthorized(_)) {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"bridle-admin\", error=\"invalid_token\""),
            );
        }
        response
    }
}

impl ApiError {
    /// The answer when `change` was made but its audit entry could not be written.
    pub fn audit_failed(change: &str, e: &crate::audit::AuditError) -> Self {
        ApiError::AuditUnavailable(format!(
            "{change} was made, but the audit log could not record it ({}); see the gateway's log",
            e.code()
        ))
    }
}

impl ApiError {
    /// `e`, met while reading project `project`'s stored document (no document of the
    /// request's): a document's error ([`RulesErrorKind::Document`]) is then the stored
    /// document's, answered `stored_document_invalid` (409) with its problems and lines, where
    /// [`From`] would blame the request (`invalid_yaml`, `invalid_document`, ...). Any other
    /// error is answered as [`From`] answers it.
    pub fn stored(project: &str, e: RulesError) -> Self {
        ApiError::stored_copy(project, None, e)
    }

    /// As [`ApiError::stored`], for the copy the store keeps of one `revision` of the
    /// document (`GET /projects/{p}/revisions/{r}`): the detail names that copy, which is not
    /// fixed in the project's file nor replaced by a repair, and says to read another.
    pub fn stored_revision(project: &str, revision: u64, e: RulesError) -> Self {
        ApiError::stored_copy(project, Some(revision), e)
    }

    fn stored_copy(project: &str, revision: Option<u64>, e: RulesError) -> Self {
        let newer = matches!(e, RulesError::TooNew { .. });
        if !matches!(e.kind(), RulesErrorKind::Document) {
            return e.into();
        }
        let code = e.code();
        let (sentence, errors) = match ApiError::from(e) {
            ApiError::Malformed { detail, errors, .. }
            | ApiError::Invalid { detail, errors, .. } => (detail, errors),
            other => (other.to_string(), Vec::new()),
        };
        // One problem with a place: the place in the sentence too, for a reader of the detail
        // alone (the panel, the CLI).
        let at = match errors.as_slice() {
            [
                FieldError {
                    line: Some(line),
                    column,
                    ..
                },
            ] => match column {
                Some(column) => format!(" at line {line}, column {column}"),
                None => format!(" at line {line}"),
            },
            _ => String::new(),
        };
        let remedy = match (newer, revision) {
            (true, _) => "a newer Bridle wrote it: upgrade this gateway".to_string(),
            (false, Some(_)) => "read another revision from the project's history".to_string(),
            (false, None) => format!(
                "fix it where the gateway stores it (`projects/{project}.yaml` in the data \
                 directory when files hold the documents), then try again, or replace it \
                 whole (`PUT` with `repair`)"
            ),
        };
        let what = match revision {
            Some(r) => format!("the kept copy of revision {r} of project `{project}`"),
            None => format!("the stored document of project `{project}`"),
        };
        ApiError::StoredDocument {
            detail: format!("{what} does not load ({code}){at}: {sentence}; {remedy}"),
            errors,
            repair_base: None,
        }
    }
}

impl From<RulesError> for ApiError {
    fn from(e: RulesError) -> Self {
        // Whose fault it is comes from the store's one classification
        // ([`RulesError::kind`]), as for the agents' tools; a document's errors are the
        // admin's, who submits documents (create, replace). Only the status and code are
        // chosen here.
        if !matches!(e.kind(), RulesErrorKind::Request | RulesErrorKind::Document) {
            // Files, the database, templates: internals, logged, not shown.
            tracing::error!(error = ?e.to_string(), code = e.code(), "rules store failed");
            return ApiError::Internal(format!(
                "the rules store failed ({}); see the gateway's log",
                e.code()
            ));
        }
        let detail = e.to_string();
        match e {
            RulesError::Parse {
                position, message, ..
            } => ApiError::Malformed {
                code: "invalid_yaml",
                detail: format!("the YAML document does not parse: {message}"),
                errors: vec![FieldError {
                    code: "parse_error".into(),
                    message,
                    field: position.field,
                    line: position.line,
                    column: position.column,
                }],
            },
            RulesError::Invalid { problems, .. } => ApiError::Invalid {
                code: "invalid_document",
                detail: format!("the document is invalid ({} problems)", problems.len()),
                errors: problems
                    .into_iter()
                    .map(|p| FieldError {
                        code: p.code.into(),
                        message: p.message,
                        field: Some(p.field),
                        line: p.line,
                        column: None,
                    })
                    .collect(),
            },
            RulesError::TooNew {
                found, supported, ..
            } => ApiError::Invalid {
                code: "schema_too_new",
                detail: format!(
                    "schema_version {found} is newer than this gateway supports ({supported})"
                ),
                errors: Vec::new(),
            },
            RulesError::Migration { from, message, .. } => ApiError::Invalid {
                code: "migration_failed",
                detail: format!("migrating from schema_version {from} failed: {message}"),
                errors: Vec::new(),
            },
            RulesError::Conflict { actual, .. } => ApiError::RevisionConflict {
                detail,
                current_revision: actual,
            },
            RulesError::UnknownProject(_) => ApiError::NotFound {
                code: "unknown_project",
                detail,
            },
            RulesError::UnknownAgent { .. } => ApiError::NotFound {
                code: "unknown_agent_type",
                detail,
            },
            RulesError::NotFound { .. } => ApiError::NotFound {
                code: "not_found",
                detail,
            },
            RulesError::AlreadyDecided { .. } => ApiError::Conflict {
                code: "already_decided",
                detail,
            },
            RulesError::Rejected(_) => ApiError::Conflict {
                code: "change_refused",
                detail,
            },
            RulesError::InvalidName { .. } => ApiError::Invalid {
                code: "invalid_name",
                detail,
                errors: Vec::new(),
            },
            RulesError::TooManyPending { .. } | RulesError::TooManyPendingScope { .. } => {
                ApiError::Conflict {
                    code: "too_many_pending",
                    detail,
                }
            }
            // Written by a newer build sharing the database: it exists, this build cannot
            // show or decide it.
            RulesError::Unreadable { .. } => ApiError::Conflict {
                code: "unreadable_record",
                detail,
            },
            // A variant the store calls the caller's that has no status of its own here yet:
            // the request was wrong, in the store's words and under its code.
            other => ApiError::Invalid {
                code: other.code(),
                detail,
                errors: Vec::new(),
            },
        }
    }
}

impl From<crate::vault::VaultError> for ApiError {
    fn from(e: crate::vault::VaultError) -> Self {
        use crate::vault::VaultError as V;
        let detail = e.to_string();
        match e {
            V::SecretNotFound(_) => ApiError::NotFound {
                code: "unknown_secret",
                detail,
            },
            V::VersionNotFound { .. } => ApiError::NotFound {
                code: "unknown_version",
                detail,
            },
            V::SecretExists(_) => ApiError::Conflict {
                code: "secret_exists",
                detail,
            },
            V::VersionRevoked { .. } => ApiError::Conflict {
                code: "version_revoked",
                detail,
            },
            V::NoActiveVersion(_) => ApiError::Conflict {
                code: "no_active_version",
                detail,
            },
            V::InvalidName { .. } => ApiError::Invalid {
                code: "invalid_name",
                detail,
                errors: Vec::new(),
            },
            V::InvalidValue { .. } => ApiError::Invalid {
                code: "invalid_value",
                detail,
                errors: Vec::new(),
            },
            // The key, the database, decryption: internals, logged, not shown.
            other => {
                tracing::error!(error = %other, code = other.code(), "vault failed");
                ApiError::Internal(format!(
                    "the vault failed ({}); see the gateway's log",
                    other.code()
                ))
            }
        }
    }
}

impl From<crate::audit::AuditError> for ApiError {
    fn from(e: crate::audit::AuditError) -> Self {
        match e {
            crate::audit::AuditError::InvalidCursor(_) => {
                ApiError::BadQuery("`cursor` is not one this API returned".into())
            }
            other => {
                tracing::error!(error = %other, code = other.code(), "audit log failed");
                ApiError::Internal(format!(
                    "the audit log failed ({}); see the gateway's log",
                    other.code()
                ))
            }
        }
    }
}

impl From<crate::agent_registry::AgentRegistryError> for ApiError {
    fn from(e: crate::agent_registry::AgentRegistryError) -> Self {
        use crate::agent_registry::AgentRegistryError as A;
        let code = e.code();
        let detail = e.to_string();
        match e {
            A::Exists(_) | A::Refused(_) => ApiError::Conflict { code, detail },
            A::Unknown(_) => ApiError::NotFound { code, detail },
            A::Invalid(_) => ApiError::Invalid {
                code,
                detail,
                errors: Vec::new(),
            },
            // bridle.yaml could not be read or written: nothing changed; the admin is told why
            // (the file's own problem, no secret in it).
            other => {
                tracing::error!(error = %other, code, "the agent registry could not persist");
                ApiError::Unavailable { code, detail }
            }
        }
    }
}
