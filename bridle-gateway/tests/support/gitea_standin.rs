//! A Gitea REST stand-in for tests that need a real Gitea behind an MCP server: an axum server
//! on 127.0.0.1 (free port) that speaks Gitea 1.25's `/api/v1` wire format for the endpoints the
//! Gitea MCP servers call, over a small seeded data set (see `model`), and records every request's
//! method, path and credentials so a test can assert which token reached Gitea on every request.
//!
//! Gitea itself cannot run here, so this follows its public API reference (the swagger of 1.25)
//! and its documented behaviour:
//! - credentials are read the way Gitea reads them: the `token` then `access_token` query
//!   parameters (answered with Gitea's `X-Gitea-Warning` deprecation header), then an
//!   `Authorization: token X` or `Authorization: Bearer X` header (scheme case-insensitive). An
//!   `Authorization` header of another scheme is ignored (the request is anonymous);
//! - a credential that names no token is answered on every route with 401
//!   `{"message":"access token does not exist [sha: <the token>]","url":"<base>/api/swagger"}`:
//!   Gitea 1.2x and Forgejo quote the rejected value back, so whatever relays the body relays it;
//! - anonymous requests to `/user*` and anonymous writes get 401 `token is required`; the seeded
//!   repositories are private, so anonymous reads of them are 404s (Gitea hides what one may not
//!   see); `/version` is public;
//! - errors are `{"message": ..., "url": ...}` (404s add `"errors": [...]`); lists are paged with
//!   `page` and `limit` (default 30, at most 50) and carry `X-Total-Count` and `Link` headers.
//!
//! Each token maps to one login, so two agents with two tokens act as two people.

#![allow(dead_code)] // each test file uses its own subset

mod model;
mod render;
mod routes;
mod writes;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use model::Instance;

/// The Gitea version the stand-in reports at `/api/v1/version`.
pub const GITEA_VERSION: &str = "1.25.3";

/// Where a request's credential came from, in the order Gitea looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// No credential Gitea reads: the request is anonymous.
    None,
    /// `?token=X` (deprecated in Gitea, still read).
    QueryToken(String),
    /// `?access_token=X` (deprecated in Gitea, still read).
    QueryAccessToken(String),
    /// `Authorization: token X`.
    TokenHeader(String),
    /// `Authorization: Bearer X`.
    BearerHeader(String),
}

impl Credential {
    /// The token value, whatever form carried it.
    pub fn token(&self) -> Option<&str> {
        match self {
            Self::None => None,
            Self::QueryToken(t)
            | Self::QueryAccessToken(t)
            | Self::TokenHeader(t)
            | Self::BearerHeader(t) => Some(t),
        }
    }

    fn of(headers: &HeaderMap, query: &[(String, String)]) -> Self {
        let q = |name: &str| {
            query
                .iter()
                .find(|(k, v)| k == name && !v.is_empty())
                .map(|(_, v)| v.clone())
        };
        if let Some(t) = q("token") {
            return Self::QueryToken(t);
        }
        if let Some(t) = q("access_token") {
            return Self::QueryAccessToken(t);
        }
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Self::None;
        };
        let (scheme, rest) = value.trim().split_once(' ').unwrap_or((value, ""));
        let token = rest.trim().to_owned();
        if token.is_empty() {
            return Self::None;
        }
        if scheme.eq_ignore_ascii_case("token") {
            Self::TokenHeader(token)
        } else if scheme.eq_ignore_ascii_case("bearer") {
            Self::BearerHeader(token)
        } else {
            Self::None
        }
    }
}

/// One request as the stand-in saw it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, e.g. `/api/v1/repos/acme/widgets/issues`.
    pub path: String,
    /// The raw query string, if any.
    pub query: Option<String>,
    /// The credential Gitea would use.
    pub credential: Credential,
    /// The raw `Authorization` header, whatever its scheme.
    pub authorization: Option<String>,
    /// The login the credential resolved to (`None`: anonymous or rejected).
    pub login: Option<String>,
    /// The status answered.
    pub status: u16,
}

/// A running stand-in; stopped when dropped.
pub struct GiteaStandIn {
    addr: SocketAddr,
    site: Arc<Site>,
    stop: CancellationToken,
}

/// The stand-in's state: the instance, the token table and the request log.
struct Site {
    base: String,
    tokens: BTreeMap<String, String>,
    db: Mutex<Instance>,
    log: Mutex<Vec<RecordedRequest>>,
}

impl GiteaStandIn {
    /// Starts a stand-in on a free port of 127.0.0.1; `tokens` are `(token, login)` pairs. Every
    /// login gets an account (alice and bob always exist) and is a member of the `acme`
    /// organization, which owns the private `acme/widgets`; `alice/notes` is alice's alone.
    pub async fn start<'a>(tokens: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let tokens: BTreeMap<String, String> = tokens
            .into_iter()
            .map(|(t, l)| (t.to_owned(), l.to_owned()))
            .collect();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0 for the Gitea stand-in");
        let addr = listener.local_addr().expect("stand-in address");
        let site = Arc::new(Site {
            base: format!("http://{addr}"),
            db: Mutex::new(Instance::seeded(tokens.values().map(String::as_str))),
            tokens,
            log: Mutex::new(Vec::new()),
        });
        let stop = CancellationToken::new();
        let app = Router::new().fallback(serve).with_state(site.clone());
        let shutdown = stop.clone();
        tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "Gitea stand-in stopped with an error");
            }
        });
        Self { addr, site, stop }
    }

    /// The instance's root URL (`http://127.0.0.1:PORT`), what `GITEA_URL` is set to.
    pub fn url(&self) -> String {
        self.site.base.clone()
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.site.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Every request so far, leaving the log empty.
    pub fn take_requests(&self) -> Vec<RecordedRequest> {
        self.site
            .log
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }

    /// Reads the instance's current data (to check what a write did).
    pub fn inspect<T>(&self, f: impl FnOnce(&Instance) -> T) -> T {
        let db = self.site.db.lock().expect("stand-in data lock");
        f(&db)
    }

    /// Stops it now (dropping it does the same).
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for GiteaStandIn {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// An answer before it becomes a response.
pub(crate) struct Reply {
    status: StatusCode,
    body: Option<Value>,
    headers: Vec<(&'static str, String)>,
}

impl Reply {
    fn json(status: StatusCode, body: Value) -> Self {
        Self {
            status,
            body: Some(body),
            headers: Vec::new(),
        }
    }

    fn empty(status: StatusCode) -> Self {
        Self {
            status,
            body: None,
            headers: Vec::new(),
        }
    }

    fn with_header(mut self, name: &'static str, value: String) -> Self {
        self.headers.push((name, value));
        self
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        let mut headers = HeaderMap::new();
        for (name, value) in self.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.append(name, v);
            }
        }
        match self.body {
            Some(body) => {
                headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json;charset=utf-8"),
                );
                let bytes = serde_json::to_vec(&body).unwrap_or_default();
                (self.status, headers, bytes).into_response()
            }
            None => (self.status, headers).into_response(),
        }
    }
}

/// Gitea's `APIError`: `{"message": ..., "url": "<base>/api/swagger"}`.
fn api_error(base: &str, status: StatusCode, message: impl Into<String>) -> Reply {
    Reply::json(
        status,
        json!({"message": message.into(), "url": format!("{base}/api/swagger")}),
    )
}

/// Gitea's `APINotFound` body.
fn not_found(base: &str, errors: &[String]) -> Reply {
    Reply::json(
        StatusCode::NOT_FOUND,
        json!({
            "errors": errors,
            "message": "The target couldn't be found.",
            "url": format!("{base}/api/swagger"),
        }),
    )
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `page` and `limit` as Gitea reads them: page from 1, limit 30 by default and at most 50.
struct Paging {
    page: usize,
    limit: usize,
}

impl Paging {
    fn of(query: &[(String, String)]) -> Self {
        let num = |k: &str| {
            query
                .iter()
                .find(|(n, _)| n == k)
                .and_then(|(_, v)| v.parse::<i64>().ok())
                .unwrap_or(0)
        };
        let page = num("page").max(1) as usize;
        let limit = match num("limit") {
            l if l <= 0 => 30,
            l => l.min(50) as usize,
        };
        Self { page, limit }
    }

    /// One page of `items` with `X-Total-Count` and `Link` (rel next, last, first, prev).
    fn reply(
        &self,
        base: &str,
        path: &str,
        query: &[(String, String)],
        items: Vec<Value>,
    ) -> Reply {
        let total = items.len();
        let page: Vec<Value> = items
            .into_iter()
            .skip((self.page - 1) * self.limit)
            .take(self.limit)
            .collect();
        let last = total.div_ceil(self.limit).max(1);
        let link = |p: usize, rel: &str| {
            let mut q: Vec<(String, String)> = query
                .iter()
                .filter(|(k, _)| k != "page" && k != "token" && k != "access_token")
                .cloned()
                .collect();
            q.push(("page".into(), p.to_string()));
            q.sort();
            let qs: Vec<String> = q
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect();
            format!("<{base}{path}?{}>; rel=\"{rel}\"", qs.join("&"))
        };
        let mut links = Vec::new();
        if self.page < last {
            links.push(link(self.page + 1, "next"));
            links.push(link(last, "last"));
        }
        if self.page > 1 {
            links.push(link(1, "first"));
            links.push(link(self.page - 1, "prev"));
        }
        let mut reply = Reply::json(StatusCode::OK, Value::Array(page))
            .with_header("x-total-count", total.to_string())
            .with_header(
                "access-control-expose-headers",
                "X-Total-Count, Link".into(),
            );
        if !links.is_empty() {
            reply = reply.with_header("link", links.join(","));
        }
        reply
    }
}

/// What one request needs to be answered.
pub(crate) struct Ask<'a> {
    method: &'a Method,
    path: &'a str,
    query: &'a [(String, String)],
    viewer: Option<&'a str>,
    body: &'a [u8],
    base: &'a str,
}

impl Ask<'_> {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

async fn serve(
    State(site): State<Arc<Site>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query: Vec<(String, String)> = Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let credential = Credential::of(&headers, &query);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let login = credential.token().and_then(|t| site.tokens.get(t)).cloned();
    let mut reply = match (&credential, &login) {
        (Credential::None, _) | (_, Some(_)) => {
            let ask = Ask {
                method: &method,
                path: uri.path(),
                query: &query,
                viewer: login.as_deref(),
                body: &body,
                base: &site.base,
            };
            match site.db.lock() {
                Ok(mut db) => routes::answer(&mut db, &ask),
                Err(_) => api_error(
                    &site.base,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "stand-in data poisoned",
                ),
            }
        }
        (c, None) => api_error(
            &site.base,
            StatusCode::UNAUTHORIZED,
            format!(
                "access token does not exist [sha: {}]",
                c.token().unwrap_or_default()
            ),
        ),
    };
    if matches!(
        credential,
        Credential::QueryToken(_) | Credential::QueryAccessToken(_)
    ) {
        reply = reply.with_header(
            "x-gitea-warning",
            "token and access_token API authentication is deprecated and will be removed in gitea 1.23. Please use AuthorizationHeaderToken instead. Existing queries will continue to work but without authorization.".into(),
        );
    }
    if let Ok(mut log) = site.log.lock() {
        log.push(RecordedRequest {
            method: method.to_string(),
            path: uri.path().to_owned(),
            query: uri.query().map(str::to_owned),
            credential,
            authorization,
            login,
            status: reply.status.as_u16(),
        });
    }
    reply.into_response()
}
