//! The panel's way to the gateway: the admin API's own router, called in process.
//!
//! Each call is an ordinary HTTP request (method, path under `/admin/api/v1`, JSON body) with
//! the signed-in admin's credential as `Bearer`, sent through [`tower::ServiceExt::oneshot`]
//! to a clone of the API router. The API's answers come back as typed values or as its
//! problem details ([`Problem`]); a 401 means the credential no longer opens the API, and the
//! panel ends the session.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tower::ServiceExt;

use super::session::SignedIn;
use crate::admin::BASE_PATH;

/// The header the admin API reads the acting surface from.
const SURFACE_HEADER: &str = "bridle-surface";

/// The largest API answer the panel reads (a project list or a rendered file is far smaller).
const MAX_REPLY: usize = 16 * 1024 * 1024;

/// What a path segment keeps unescaped: RFC 3986 unreserved characters.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A user-given value as one path segment.
pub(crate) fn seg(value: &str) -> String {
    utf8_percent_encode(value, SEGMENT).to_string()
}

/// One problem inside a refused document (a YAML position, a failing check).
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub(crate) struct ProblemItem {
    #[serde(default)]
    pub(crate) code: String,
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) field: Option<String>,
    #[serde(default)]
    pub(crate) line: Option<u64>,
    #[serde(default)]
    pub(crate) column: Option<u64>,
}

/// The admin API's problem details, as the panel reads them.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub(crate) struct Problem {
    #[serde(default)]
    pub(crate) status: u16,
    #[serde(default)]
    pub(crate) code: String,
    #[serde(default)]
    pub(crate) detail: String,
    #[serde(default)]
    pub(crate) errors: Vec<ProblemItem>,
    #[serde(default)]
    pub(crate) current_revision: Option<u64>,
}

impl Problem {
    /// A failure on the panel's side of the call (no problem-details body to read).
    pub(crate) fn local(code: &str, detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_GATEWAY.as_u16(),
            code: code.into(),
            detail: detail.into(),
            errors: Vec::new(),
            current_revision: None,
        }
    }

    /// Whether the API has no such endpoint (a resource this gateway does not offer yet).
    pub(crate) fn is_missing_endpoint(&self) -> bool {
        self.code == "unknown_route"
    }
}

/// The in-process admin API client.
#[derive(Clone)]
pub(crate) struct AdminApi {
    router: Router,
}

impl AdminApi {
    pub(crate) fn new(router: Router) -> Self {
        Self { router }
    }

    /// Sends one request and returns the API's response as it comes (its body unread).
    async fn respond(
        &self,
        who: &SignedIn,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<axum::response::Response, Problem> {
        let mut request = Request::builder()
            .method(method.clone())
            .uri(format!("{BASE_PATH}{path}"));
        let bearer = HeaderValue::from_str(&format!("Bearer {}", who.credential.as_str()))
            .map_err(|_| Problem::local("panel_error", "the session's credential is unusable"))?;
        let mut bearer = bearer;
        bearer.set_sensitive(true);
        // The surface the admin API records for the change: `admin:<name>@panel`.
        request = request
            .header(header::AUTHORIZATION, bearer)
            .header(SURFACE_HEADER, "panel");
        let request = match body {
            Some(bytes) => request
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(bytes)),
            None => request.body(Body::empty()),
        }
        .map_err(|e| Problem::local("panel_error", format!("cannot build the API call: {e}")))?;
        let response = match self.router.clone().oneshot(request).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        tracing::debug!(%method, path, status = response.status().as_u16(), admin = %who.admin, "panel called the admin API");
        Ok(response)
    }

    /// Sends one request; `path` is under [`BASE_PATH`] (with its query string, if any).
    async fn send(
        &self,
        who: &SignedIn,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, axum::body::Bytes), Problem> {
        let response = self.respond(who, method, path, body).await?;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), MAX_REPLY)
            .await
            .map_err(|e| {
                Problem::local("panel_error", format!("cannot read the API answer: {e}"))
            })?;
        Ok((status, bytes))
    }

    fn decode<T: DeserializeOwned>(status: StatusCode, bytes: &[u8]) -> Result<T, Problem> {
        if status.is_success() {
            serde_json::from_slice(bytes).map_err(|e| {
                Problem::local(
                    "panel_error",
                    format!("the admin API answered in a shape the panel does not read: {e}"),
                )
            })
        } else {
            let mut problem: Problem = serde_json::from_slice(bytes).unwrap_or_else(|_| {
                Problem::local(
                    "panel_error",
                    "the admin API answered without problem details",
                )
            });
            problem.status = status.as_u16();
            Err(problem)
        }
    }

    /// `GET path`, decoded.
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        who: &SignedIn,
        path: &str,
    ) -> Result<T, Problem> {
        let (status, bytes) = self.send(who, Method::GET, path, None).await?;
        Self::decode(status, &bytes)
    }

    /// `GET path` as a body passed on as it comes, unread and unbounded (a Server-Sent Events
    /// stream, or an export that may be far larger than [`MAX_REPLY`]), or the API's problem.
    pub(crate) async fn stream(&self, who: &SignedIn, path: &str) -> Result<Body, Problem> {
        let response = self.respond(who, Method::GET, path, None).await?;
        let status = response.status();
        if status.is_success() {
            return Ok(response.into_body());
        }
        let bytes = axum::body::to_bytes(response.into_body(), MAX_REPLY)
            .await
            .map_err(|e| {
                Problem::local("panel_error", format!("cannot read the API answer: {e}"))
            })?;
        Err(Self::decode::<serde_json::Value>(status, &bytes)
            .err()
            .unwrap_or_else(|| Problem::local("panel_error", "the stream did not open")))
    }

    /// `method path` with a JSON body, decoded.
    pub(crate) async fn call<T: DeserializeOwned>(
        &self,
        who: &SignedIn,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, Problem> {
        let bytes = serde_json::to_vec(body)
            .map_err(|e| Problem::local("panel_error", format!("cannot encode the call: {e}")))?;
        let (status, bytes) = self.send(who, method, path, Some(bytes)).await?;
        Self::decode(status, &bytes)
    }

    /// `DELETE path`, decoded.
    pub(crate) async fn delete<T: DeserializeOwned>(
        &self,
        who: &SignedIn,
        path: &str,
    ) -> Result<T, Problem> {
        let (status, bytes) = self.send(who, Method::DELETE, path, None).await?;
        Self::decode(status, &bytes)
    }

    /// `POST path` with an empty body, decoded.
    pub(crate) async fn post_empty<T: DeserializeOwned>(
        &self,
        who: &SignedIn,
        path: &str,
    ) -> Result<T, Problem> {
        let (status, bytes) = self.send(who, Method::POST, path, None).await?;
        Self::decode(status, &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_escaped() {
        assert_eq!(seg("demo"), "demo");
        assert_eq!(seg("a/b?c#d"), "a%2Fb%3Fc%23d");
        assert_eq!(seg("../x"), "..%2Fx");
    }
}
