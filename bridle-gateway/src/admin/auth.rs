//! Who may use the admin API: admins, never agents.
//!
//! [`AdminCredentials`] is the one question the API asks: "which admin, if any, does this bearer
//! token belong to?". It is deliberately small so the vault can answer it later; until then
//! [`AdminTokens`] answers it from a keyed-hash list (built in code, or read from a file of
//! `name token` lines). Agents' tokens are never in that list, so an agent gets 401 here,
//! always. The [`require_admin`] middleware runs before every handler except the OpenAPI
//! document and hands the handler an [`AdminIdentity`].
//!
//! It is also the one place that says what an admin may do: [`AdminAccess`] (a read-only API,
//! admins who may only watch) marks each identity, and a change (any method but `GET`, `HEAD`
//! and `OPTIONS`) by an identity that may not change things is refused 403 `read_only` before
//! any handler runs. The web panel asks the same credentials, so it shows such an admin no
//! forms. Refused bearer tokens are counted per client address and per token
//! (the admin throttle); past the limit the API answers 429 `too_many_attempts` with
//! `Retry-After`, without checking the token.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::Response;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::AdminState;
use super::error::ApiError;
use crate::audit::{Entry, Kind, Surface};

type HmacSha256 = Hmac<Sha256>;

/// The fewest characters an admin token read from a file may have: a shorter one could be
/// guessed (the gateway's own tokens have 47).
pub const MIN_TOKEN_FILE_CHARS: usize = 32;

/// An authenticated admin.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdminIdentity {
    /// The admin's name (lowercase letters, digits, `-`, `_`, `.`).
    pub name: String,
    /// Whether this admin may change anything (`false`: a watcher, or a read-only API). An
    /// [`AdminCredentials`] may say `false` itself; the API's [`AdminAccess`] can only narrow it.
    pub may_change: bool,
}

impl AdminIdentity {
    /// The admin `name`, who may change things unless the API's [`AdminAccess`] says otherwise.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            may_change: true,
        }
    }

    /// The actor recorded in the rules store's change log and decisions for a change made
    /// through this API: `admin:<name>@api` (the source is `user`; the suffix is the surface).
    pub fn actor(&self) -> String {
        format!("admin:{}@api", self.name)
    }
}

/// The request header an admin client names its surface in: `cli` (the `bridle` command line),
/// `panel` (the web panel) or `api` (the default: the API called directly). It is what the audit
/// log records as the surface; it grants nothing.
pub const SURFACE_HEADER: &str = "bridle-surface";

/// An authenticated admin and the surface they act through: what a handler records a change
/// as. An extractor: a handler behind [`require_admin`] takes it as an argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminActor {
    /// Who.
    pub identity: AdminIdentity,
    /// Through which surface.
    pub surface: Surface,
}

impl AdminActor {
    /// An admin acting through `surface`.
    pub fn new(name: impl Into<String>, surface: Surface) -> Self {
        Self {
            identity: AdminIdentity::new(name),
            surface,
        }
    }

    /// The actor the rules store and the vault record: `admin:<name>@<surface>`.
    pub fn actor(&self) -> String {
        format!("admin:{}@{}", self.identity.name, self.surface.as_str())
    }

    /// A `user`-source audit entry of this admin.
    pub fn entry(&self, kind: Kind) -> Entry {
        Entry::user(self.identity.name.clone(), self.surface, kind)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for AdminActor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<AdminActor>()
            .cloned()
            .ok_or_else(|| ApiError::Unauthorized("an admin bearer token is required".into()))
    }
}

/// Verifies a presented bearer token. Implementations compare in constant time and never log
/// the token.
pub trait AdminCredentials: Send + Sync + 'static {
    /// The admin the token belongs to, or `None`.
    fn verify(&self, token: &str) -> Option<AdminIdentity>;
}

/// Who may change things through the admin API, and so through every client of it (the web
/// panel, the command line): nobody when `read_only`, and never the `watchers`. Reads are
/// everyone's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdminAccess {
    /// The whole API only reads: every change is refused 403 `read_only`.
    pub read_only: bool,
    /// Admins who may only read, whatever `read_only` says.
    pub watchers: BTreeSet<String>,
}

impl AdminAccess {
    /// Whether `admin` may change anything.
    pub fn may_change(&self, admin: &str) -> bool {
        !self.read_only && !self.watchers.contains(admin)
    }
}

/// Credentials whose identities carry the API's [`AdminAccess`]: what every part of the admin
/// listener asks (the API's middleware, its live streams, the panel's log-in), so a watcher is
/// one everywhere.
pub(crate) struct GovernedCredentials {
    pub(crate) admins: Arc<dyn AdminCredentials>,
    pub(crate) access: AdminAccess,
}

impl AdminCredentials for GovernedCredentials {
    fn verify(&self, token: &str) -> Option<AdminIdentity> {
        self.admins.verify(token).map(|mut identity| {
            identity.may_change &= self.access.may_change(&identity.name);
            identity
        })
    }
}

/// The credential a request was admitted with, for a handler that must ask again later whether
/// it still opens the API (a live stream outlasts the request that opened it). [`require_admin`]
/// puts it in the request's extensions; the token is wiped from memory when the last copy goes.
#[derive(Clone)]
pub struct Admitted {
    token: Arc<Zeroizing<String>>,
    name: String,
    credentials: Arc<dyn AdminCredentials>,
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted")
            .field("admin", &self.name)
            .finish_non_exhaustive()
    }
}

impl Admitted {
    /// Whether the credential still belongs to the same admin (not revoked, not rotated away).
    pub fn still_valid(&self) -> bool {
        self.credentials
            .verify(&self.token)
            .is_some_and(|identity| identity.name == self.name)
    }

    /// The admin it was admitted as.
    pub fn admin(&self) -> &str {
        &self.name
    }
}

/// Why admin credentials could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialsError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line is not `name token`, or names an invalid admin.
    #[error("{path}: line {line}: {message}")]
    Line {
        /// The file.
        path: std::path::PathBuf,
        /// The 1-based line.
        line: usize,
        /// What is wrong (never the token).
        message: String,
    },
    /// No randomness for the hashing key.
    #[error("no randomness for the credential key: {0}")]
    Random(String),
}

/// Admin tokens held only as HMAC-SHA256 digests under a per-process random key: a memory dump
/// shows no token, and a verification compares every digest in constant time.
pub struct AdminTokens {
    key: [u8; 32],
    entries: Vec<(String, [u8; 32])>,
}

impl std::fmt::Debug for AdminTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminTokens")
            .field(
                "admins",
                &self.entries.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl AdminTokens {
    /// An empty list with a fresh random key.
    pub fn new() -> Result<Self, CredentialsError> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| CredentialsError::Random(e.to_string()))?;
        Ok(Self {
            key,
            entries: Vec::new(),
        })
    }

    /// Adds an admin with its token (only the digest is kept). An admin name must be a valid
    /// Bridle name; an empty token is refused.
    pub fn insert(&mut self, name: &str, token: &str) -> Result<(), String> {
        bridle_rules::check_name("admin", name).map_err(|e| e.to_string())?;
        if token.trim().is_empty() {
            return Err(format!("admin `{name}` has an empty token"));
        }
        let digest = self.digest(token.trim());
        self.entries.push((name.to_string(), digest));
        Ok(())
    }

    /// Reads a file of `name token` lines (blank lines and `#` comments skipped); a file
    /// longer than [`MAX_TOKEN_LIST_BYTES`] is refused.
    pub fn from_file(path: &Path) -> Result<Self, CredentialsError> {
        let text = read_token_file(path, MAX_TOKEN_LIST_BYTES)?;
        let mut tokens = Self::new()?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |message: String| CredentialsError::Line {
                path: path.to_path_buf(),
                line: i + 1,
                message,
            };
            let (name, token) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| bad("expected `name token`".into()))?;
            long_enough(name, token.trim()).map_err(bad)?;
            tokens.insert(name, token).map_err(bad)?;
        }
        Ok(tokens)
    }

    /// How many admins are listed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no admin is listed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn digest(&self, token: &str) -> [u8; 32] {
        let mut mac =
            HmacSha256::new_from_slice(&self.key).expect("HMAC accepts keys of any length");
        mac.update(token.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

/// The longest file of `name token` lines read ([`AdminTokens::from_file`]): 1 MiB, room for
/// thousands of admins.
pub const MAX_TOKEN_LIST_BYTES: u64 = 1024 * 1024;

/// How long reading a token file that is a named pipe waits for its writer: 30 seconds. A pipe
/// is allowed (`--admin-token-file <(...)`, a secrets agent writing it), but one nothing writes
/// to would hold `bridle serve` at start for ever, saying nothing; past this wait the file is
/// refused, named, with `TimedOut`.
pub const TOKEN_PIPE_WAIT: std::time::Duration = crate::files::PIPE_WAIT;

/// The text of a token file, read no further than `max` bytes: a longer file (or one that never
/// ends, a pipe or a device given by mistake) is refused, and what was read is wiped. A named
/// pipe is waited for at most [`TOKEN_PIPE_WAIT`].
pub(crate) fn read_token_file(
    path: &Path,
    max: u64,
) -> Result<Zeroizing<String>, CredentialsError> {
    read_token_file_within(path, max, TOKEN_PIPE_WAIT)
}

fn read_token_file_within(
    path: &Path,
    max: u64,
    wait: std::time::Duration,
) -> Result<Zeroizing<String>, CredentialsError> {
    let io = |source| CredentialsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let raw = crate::files::read_waiting(path, max, wait).map_err(io)?;
    if raw.len() as u64 > max {
        return Err(io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the file is longer than {max} bytes; it is not a token file"),
        )));
    }
    let text = std::str::from_utf8(&raw).map_err(|_| {
        io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })?;
    Ok(Zeroizing::new(text.to_owned()))
}

/// Refuses a token from a file shorter than [`MIN_TOKEN_FILE_CHARS`] (the message never holds
/// the token).
pub(crate) fn long_enough(admin: &str, token: &str) -> Result<(), String> {
    let chars = token.chars().count();
    if chars < MIN_TOKEN_FILE_CHARS {
        return Err(format!(
            "admin `{admin}`'s token has {chars} characters; a token file's must have at least {MIN_TOKEN_FILE_CHARS} (`openssl rand -hex 32` makes one)"
        ));
    }
    Ok(())
}

impl AdminCredentials for AdminTokens {
    fn verify(&self, token: &str) -> Option<AdminIdentity> {
        let presented = self.digest(token);
        let mut found: Option<&str> = None;
        // Every entry is compared, so the time taken does not say which one matched.
        for (name, digest) in &self.entries {
            if bool::from(digest.ct_eq(&presented)) {
                found = Some(name);
            }
        }
        found.map(AdminIdentity::new)
    }
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The middleware in front of every authenticated route: a `Bearer` token the API's
/// credentials accept, or 401 with `WWW-Authenticate`; 429 `too_many_attempts` (with
/// `Retry-After`) once too many tokens were refused from the client's address or this token was
/// refused too often; 403 `read_only` for a change by an admin who may only read. Checks under
/// way count against the limits as failures would: once they and the failures reach one, a
/// further token waits for a check to end before it is checked or refused.
///
/// Failures are counted by the client address the listener saw (`ConnectInfo`, which
/// [`super::AdminServer`] provides); a request without one (the panel's in-process calls, made
/// with the credential of a signed-in session) is counted by its token only.
pub async fn require_admin(
    State(state): State<AdminState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::Unauthorized("an admin bearer token is required".into()))?;
    let token = header
        .to_str()
        .ok()
        .and_then(|v| {
            let (scheme, rest) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::Unauthorized("the Authorization header must be `Bearer <token>`".into())
        })?;
    let address = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip());
    // Admitted as counted so far, the checks under way included: guesses sent at once are
    // not all checked because none had failed yet.
    let attempt = match state.throttle.admit(address, token).await {
        Ok(attempt) => attempt,
        Err(throttled) => {
            tracing::warn!(
                address = ?address,
                by = throttled.by,
                retry_after_s = throttled.retry_after.as_secs(),
                "admin API refused a bearer token unchecked after repeated failures"
            );
            return Err(ApiError::TooManyRequests {
                code: "too_many_attempts",
                detail: format!(
                    "too many refused admin credentials {}; try again later",
                    if throttled.by == "address" {
                        "from this address"
                    } else {
                        "with this token"
                    }
                ),
                retry_after: Some(throttled.retry_after),
            });
        }
    };
    // A check may read the vault (a database, perhaps PostgreSQL over the network): it runs on
    // the blocking pool, not on an async worker it would hold while it waits.
    let credentials = Arc::clone(&state.credentials);
    let presented = zeroize::Zeroizing::new(token.to_owned());
    let verified = tokio::task::spawn_blocking(move || credentials.verify(&presented))
        .await
        .map_err(|e| ApiError::Internal(crate::error::task_failed("the credential check", &e)))?;
    let Some(identity) = verified else {
        attempt.failed();
        tracing::warn!(address = ?address, "admin API refused a bearer token: not an admin credential");
        return Err(ApiError::Unauthorized(
            "the token is not an admin credential".into(),
        ));
    };
    // A success is not counted, and no longer under way.
    drop(attempt);
    let surface = match request.headers().get(SURFACE_HEADER) {
        None => Surface::Api,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<Surface>().ok())
            .ok_or_else(|| ApiError::Invalid {
                code: "invalid_surface",
                detail: format!("the `{SURFACE_HEADER}` header must be `api`, `cli` or `panel`"),
                errors: Vec::new(),
            })?,
    };
    if !is_safe(request.method()) && !identity.may_change {
        tracing::warn!(
            admin = %identity.name,
            method = %request.method(),
            path = request.uri().path(),
            "admin API refused a change: this admin may only read"
        );
        return Err(ApiError::Forbidden {
            code: "read_only",
            detail: format!(
                "admin `{}` may only read here: the admin API is read-only for them",
                identity.name
            ),
        });
    }
    tracing::debug!(admin = %identity.name, surface = surface.as_str(), "admin authenticated");
    let admitted = Admitted {
        token: Arc::new(Zeroizing::new(token.to_string())),
        name: identity.name.clone(),
        credentials: Arc::clone(&state.credentials),
    };
    request.extensions_mut().insert(admitted);
    request.extensions_mut().insert(AdminActor {
        identity: identity.clone(),
        surface,
    });
    request.extensions_mut().insert(identity);
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A named pipe at `dir/pipe`.
    #[cfg(unix)]
    /// A token file that is a named pipe nothing writes to (a secret mount gone wrong) made
    /// `bridle serve` wait for a writer for ever, saying nothing; it is refused once the wait
    /// is over, naming the file and why.
    #[cfg(unix)]
    #[test]
    fn a_token_pipe_without_a_writer_is_refused_after_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = crate::files::test_fifo(dir.path());
        let (answer, answered) = std::sync::mpsc::channel();
        let path = fifo.clone();
        let reader = std::thread::spawn(move || {
            let _ = answer.send(read_token_file_within(
                &path,
                64,
                std::time::Duration::from_millis(20),
            ));
        });
        let outcome = answered.recv_timeout(kberg_testkit::WAIT);
        if outcome.is_err() {
            // It waited for a writer: be one, so that the reader ends.
            drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
        }
        reader.join().unwrap();
        let e = outcome
            .expect("answered once the wait was over")
            .unwrap_err();
        assert!(
            matches!(&e, CredentialsError::Io { source, .. } if source.kind() == std::io::ErrorKind::TimedOut),
            "{e}"
        );
        let shown = e.to_string();
        assert!(shown.contains("pipe"), "{shown}");
        assert!(shown.contains(&fifo.display().to_string()), "{shown}");
    }

    /// A pipe with a writer (`--admin-token-file <(...)`, a secrets agent) is read as a file.
    #[cfg(unix)]
    #[test]
    fn a_token_pipe_with_a_writer_is_read() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let fifo = crate::files::test_fifo(dir.path());
        let path = fifo.clone();
        let writer = std::thread::spawn(move || {
            let mut w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            w.write_all(b"piped-token\n").unwrap();
        });
        let text = read_token_file_within(&fifo, 64, kberg_testkit::WAIT).unwrap();
        writer.join().unwrap();
        assert_eq!(text.trim(), "piped-token");
    }

    #[test]
    fn tokens_verify_by_digest_and_refuse_others() {
        let mut t = AdminTokens::new().unwrap();
        t.insert("alice", "a-secret").unwrap();
        t.insert("bob", "b-secret").unwrap();
        assert_eq!(t.verify("a-secret").unwrap().name, "alice");
        assert_eq!(t.verify("b-secret").unwrap().name, "bob");
        assert!(t.verify("a-secre").is_none());
        assert!(t.verify("").is_none());
        assert!(t.insert("Bad Name", "x").is_err());
        assert!(t.insert("carol", "  ").is_err());
        assert!(!format!("{t:?}").contains("secret"));
    }

    const TOK_1: &str = "tok-1-0123456789abcdef0123456789abcdef";
    const TOK_2: &str = "tok-2-0123456789abcdef0123456789abcdef";

    #[test]
    fn a_file_of_name_token_lines_loads_and_bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admins");
        std::fs::write(&path, format!("# admins\nalice {TOK_1}\n\nbob   {TOK_2}\n")).unwrap();
        let t = AdminTokens::from_file(&path).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.verify(TOK_2).unwrap().name, "bob");
        std::fs::write(&path, format!("alice {TOK_1}\njustaname\n")).unwrap();
        let err = AdminTokens::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(!err.contains(TOK_1));
    }

    #[test]
    fn a_file_token_shorter_than_32_characters_is_refused_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("admins");
        let short = "x".repeat(MIN_TOKEN_FILE_CHARS - 1);
        std::fs::write(&path, format!("alice {TOK_1}\nbob {short}\n")).unwrap();
        let err = AdminTokens::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("bob"), "{err}");
        assert!(err.contains("at least 32"), "{err}");
        assert!(!err.contains(&short), "the token is never shown: {err}");
        let exact = "y".repeat(MIN_TOKEN_FILE_CHARS);
        std::fs::write(&path, format!("bob {exact}\n")).unwrap();
        assert_eq!(AdminTokens::from_file(&path).unwrap().len(), 1);
    }

    #[test]
    fn access_narrows_identities_and_never_widens_them() {
        let mut t = AdminTokens::new().unwrap();
        t.insert("alice", TOK_1).unwrap();
        t.insert("eve", TOK_2).unwrap();
        let admins: Arc<dyn AdminCredentials> = Arc::new(t);
        let mut access = AdminAccess::default();
        access.watchers.insert("eve".into());
        let governed = GovernedCredentials {
            admins: Arc::clone(&admins),
            access: access.clone(),
        };
        assert!(governed.verify(TOK_1).unwrap().may_change);
        assert!(!governed.verify(TOK_2).unwrap().may_change);
        access.read_only = true;
        let governed = GovernedCredentials { admins, access };
        assert!(!governed.verify(TOK_1).unwrap().may_change);
    }
}
