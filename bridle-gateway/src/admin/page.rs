//! What every admin endpoint shares on the way in: bodies and query strings that fail with
//! problem details instead of axum's plain-text rejections, and cursor paging for lists.
//!
//! A list is sorted by a key that only grows (an id, a name); a page's `next_cursor` is that
//! key of its last item, opaque to clients (base64url), and the next page starts after it, so
//! paging stays stable while items are added.

use std::fmt::Display;
use std::str::FromStr;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::de::DeserializeOwned;

use super::AdminState;
use super::error::ApiError;

/// The page size when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;
/// The largest `limit` accepted.
pub const MAX_LIMIT: usize = 500;

/// A JSON body, or problem details: 400 `malformed_json`, 422 `invalid_request` (wrong types or
/// missing fields), 413 `body_too_large`, 415 `unsupported_media_type`.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<AdminState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AdminState) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection, state.body_limit)),
        }
    }
}

/// A JSON body that may be absent (an empty body, or JSON `null`, is `T::default()`).
#[derive(Debug, Clone)]
pub struct OptionalJson<T>(pub T);

impl<T: DeserializeOwned + Default + Send> FromRequest<AdminState> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AdminState) -> Result<Self, ApiError> {
        let is_json = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(is_json_media_type);
        // Over the limit is 413; a body that cannot be read at all (a broken chunked
        // encoding) is malformed, as it is for a required body.
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::BodyTooLarge {
                        limit: state.body_limit,
                    }
                } else {
                    ApiError::Malformed {
                        code: "malformed_json",
                        detail: rejection.body_text(),
                        errors: Vec::new(),
                    }
                }
            })?;
        if bytes.is_empty() {
            return Ok(OptionalJson(T::default()));
        }
        if !is_json {
            return Err(ApiError::UnsupportedMediaType(
                "the body must be sent as `Content-Type: application/json`".into(),
            ));
        }
        // The OpenAPI document describes such a body as the object or `null`, so a client
        // that sends `null` for "none" gets what an empty body gets.
        serde_json::from_slice::<Option<T>>(&bytes)
            .map(|body| OptionalJson(body.unwrap_or_default()))
            .map_err(|e| match e.classify() {
                serde_json::error::Category::Data => ApiError::invalid(e.to_string()),
                _ => ApiError::Malformed {
                    code: "malformed_json",
                    detail: format!("the body is not valid JSON: {e}"),
                    errors: Vec::new(),
                },
            })
    }
}

/// Whether a `Content-Type` is JSON as a required body's ([`ApiJson`]) takes it:
/// `application/json` or `application/<anything>+json`, in any case, with any parameters
/// (`application/jsonl` is not).
fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.split_once('/') {
        Some(("application", subtype)) => subtype == "json" || subtype.ends_with("+json"),
        _ => false,
    }
}

fn json_rejection(rejection: JsonRejection, limit: usize) -> ApiError {
    match rejection {
        JsonRejection::JsonDataError(e) => ApiError::invalid(e.body_text()),
        JsonRejection::JsonSyntaxError(e) => ApiError::Malformed {
            code: "malformed_json",
            detail: e.body_text(),
            errors: Vec::new(),
        },
        JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType(
            "the body must be sent as `Content-Type: application/json`".into(),
        ),
        other if other.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::BodyTooLarge { limit }
        }
        other => ApiError::Malformed {
            code: "malformed_json",
            detail: other.body_text(),
            errors: Vec::new(),
        },
    }
}

/// A query string, or 400 `invalid_query`.
#[derive(Debug, Clone)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e: QueryRejection| ApiError::BadQuery(e.body_text()))
    }
}

/// Path parameters, or 404 `not_found` (a path segment that cannot be an id names nothing).
#[derive(Debug, Clone)]
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e: PathRejection| ApiError::NotFound {
                code: "not_found",
                detail: format!("no such resource: {}", e.body_text()),
            })
    }
}

/// A list's `source` filter (`user`, `agent` or `vendor`; absent or empty: none), or 400
/// `invalid_query`: a misspelt source would match nothing and pass for an empty list.
pub(crate) fn source_filter(
    source: Option<&str>,
) -> Result<Option<bridle_rules::Source>, ApiError> {
    match source.filter(|s| !s.is_empty()) {
        None => Ok(None),
        Some(s) => bridle_rules::Source::parse(s).map(Some).ok_or_else(|| {
            ApiError::BadQuery(format!("`source` must be user, agent or vendor, not `{s}`"))
        }),
    }
}

/// One page of items, and where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paged<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// The cursor of the next page; `None` on the last one.
    pub next_cursor: Option<String>,
}

/// Cuts `items` (sorted by `key`, ascending) into the page after `cursor` of at most `limit`.
pub fn paginate<T, K>(
    items: Vec<T>,
    key: impl Fn(&T) -> K,
    cursor: Option<&str>,
    limit: Option<usize>,
) -> Result<Paged<T>, ApiError>
where
    K: Ord + Display + FromStr,
{
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(ApiError::BadQuery(format!(
            "`limit` must be between 1 and {MAX_LIMIT}"
        )));
    }
    let after: Option<K> =
        match cursor.filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => Some(decode_cursor(c).ok_or_else(|| {
                ApiError::BadQuery("`cursor` is not one this API returned".into())
            })?),
        };
    let mut rest = items
        .into_iter()
        .filter(|item| after.as_ref().is_none_or(|a| key(item) > *a));
    let page: Vec<T> = rest.by_ref().take(limit).collect();
    let next_cursor = if rest.next().is_some() {
        page.last().map(|last| encode_cursor(&key(last)))
    } else {
        None
    };
    Ok(Paged {
        items: page,
        next_cursor,
    })
}

/// A list key as an opaque cursor.
pub(crate) fn encode_cursor(key: &impl Display) -> String {
    URL_SAFE_NO_PAD.encode(key.to_string())
}

/// The key of a cursor [`encode_cursor`] made; `None` for anything else.
pub(crate) fn decode_cursor<K: FromStr>(cursor: &str) -> Option<K> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    String::from_utf8(bytes).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn pages_follow_the_cursor_to_the_end() {
        let items: Vec<u64> = (1..=5).collect();
        let p1 = paginate(items.clone(), |i| *i, None, Some(2)).unwrap();
        assert_eq!(p1.items, vec![1, 2]);
        let p2 = paginate(items.clone(), |i| *i, p1.next_cursor.as_deref(), Some(2)).unwrap();
        assert_eq!(p2.items, vec![3, 4]);
        let p3 = paginate(items.clone(), |i| *i, p2.next_cursor.as_deref(), Some(2)).unwrap();
        assert_eq!(p3.items, vec![5]);
        assert_eq!(p3.next_cursor, None);
        assert!(paginate(items.clone(), |i| *i, Some("!!"), None).is_err());
        assert!(paginate(items.clone(), |i| *i, None, Some(0)).is_err());
        assert!(paginate(items, |i| *i, None, Some(MAX_LIMIT + 1)).is_err());
    }
}
