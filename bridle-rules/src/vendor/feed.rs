//! The vendor feed without its transport: what is configured, what was seen, what was queued.
//!
//! A feed run fetches each source configured for an agent profile and queues what it finds.
//! Two things must survive between runs: each source's validators (`ETag`, `Last-Modified`),
//! so an unchanged page is answered `304 Not Modified` and queues nothing; and, for every
//! queued candidate, the source URL, the fetch time and the excerpt it came from, so a reviewer
//! sees a suggestion in context. Both live in the [`FeedLedger`] (module `ledger`), two tables
//! beside the review queue in the store's database.
//!
//! [`FeedLedger::ingest`] queues a page all or nothing: its proposals, their provenance and
//! the source's validators commit together, on SQLite and on PostgreSQL. A run refused by a pending limit or failing half way writes none
//! of them and leaves the old validators, so the next run fetches the page again and queues it
//! (queueing is idempotent by fingerprint). A page that could not be read (an
//! error status, a redirect elsewhere, a body over the limit) never reaches `ingest`, so it
//! queues nothing and changes no state.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::extract::DocumentFormat;
use crate::{RulesError, redact_url};

pub use super::ledger::{FeedLedger, LEDGER_MIGRATIONS};

/// The default size limit of a fetched page: 2 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 2 * 1024 * 1024;

/// The most candidates taken from one page (or one text given to
/// [`RulesStore::queue_vendor_guidance`](crate::RulesStore::queue_vendor_guidance)): 50. A
/// guidance page holds a handful of instructions; a page with thousands (a generated one, or
/// a hostile server's) would flood the review queue and hold the store's write lock for as
/// long as it takes to queue them. Those past the limit, in document order, are not queued
/// and are reported as skipped ([`SourceReport::over_limit`]).
pub const MAX_CANDIDATES_PER_PAGE: usize = 50;

/// The default time limit of one fetch, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;

fn default_max_bytes() -> u64 {
    DEFAULT_MAX_BYTES
}

fn default_timeout_secs() -> u64 {
    DEFAULT_TIMEOUT_SECS
}

/// The vendor feed's configuration: the published guidance pages of each agent profile, and
/// when and how to fetch them.
///
/// ```yaml
/// profiles:
///   claude:
///     - url: https://vendor.example/claude-code/best-practices
///   codex:
///     - url: https://vendor.example/codex/agents-md.md
///       format: markdown
/// interval_minutes: 1440   # omit to run only on demand
/// projects: [shop]         # whose review queues get the suggestions; omit for every project
/// max_bytes: 2097152
/// timeout_secs: 30
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VendorFeedConfig {
    /// Per agent type (`claude`, `codex`, ...): the pages its vendor publishes.
    #[serde(default)]
    pub profiles: BTreeMap<String, Vec<VendorSource>>,
    /// Run every this many minutes; `None` runs only on demand.
    #[serde(default)]
    pub interval_minutes: Option<u64>,
    /// The projects whose review queues receive the suggestions; empty means every project
    /// the store holds at the time of the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<String>,
    /// The largest page accepted, in bytes.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// The time limit of one fetch, in seconds.
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
}

impl Default for VendorFeedConfig {
    fn default() -> Self {
        Self {
            profiles: BTreeMap::new(),
            interval_minutes: None,
            projects: Vec::new(),
            max_bytes: DEFAULT_MAX_BYTES,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
        }
    }
}

/// One published guidance page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VendorSource {
    /// An `http://` or `https://` URL, or a local file path (anything without `://`). A page
    /// behind basic auth is `https://user:<token>@host/...`: the credentials are sent with the
    /// fetch and shown nowhere (views, errors, log lines and audit entries show
    /// [`redact_url`]'s form).
    pub url: String,
    /// How the page is written, when its `Content-Type` (or file name) does not say, or says
    /// wrongly (a raw Markdown file served as `text/plain` reads fine either way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<DocumentFormat>,
}

/// Why a feed source could not be read or queued. Every variant has a stable
/// [`FeedError::code`]; none of them queues anything.
///
/// A source URL may carry credentials (`https://user:<token>@docs.internal/guide`, for a page
/// behind basic auth). An error shows it without them: the fetcher builds each one with the
/// [`redact_url`] form, and the message hides a URL's user part and query however the error was
/// built, so it can reach an API answer or a log line as it is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    /// The URL does not parse, has an unsupported scheme, or needs TLS this build lacks.
    #[error("{}: not a usable feed URL: {reason}", redact_url(.url))]
    BadUrl {
        /// The source URL, its credentials hidden ([`redact_url`]).
        url: String,
        /// Why.
        reason: String,
    },
    /// No connection could be made (nothing listening, name not found, connection reset).
    #[error("{}: the feed cannot be reached ({reason}); nothing was queued", redact_url(.url))]
    Unreachable {
        /// The source URL, its credentials hidden ([`redact_url`]).
        url: String,
        /// What the connection attempt said.
        reason: String,
    },
    /// The server did not answer within the time limit.
    #[error("{}: no complete answer within {secs} s; nothing was queued", redact_url(.url))]
    Timeout {
        /// The source URL, its credentials hidden ([`redact_url`]).
        url: String,
        /// The limit.
        secs: u64,
    },
    /// The server redirected to another site (or too many times).
    #[error(
        "{}: redirected to {}; a feed is only followed on its own site, so nothing was queued (update the source's URL if the page moved)",
        redact_url(.url),
        redact_url(.to)
    )]
    Redirected {
        /// The source URL, its credentials hidden ([`redact_url`]).
        url: String,
        /// Where the server pointed, its credentials hidden.
        to: String,
    },
    /// The server answered with an error status (its error page is not read).
    #[error("{}: the server answered HTTP {status}; nothing was queued", redact_url(.url))]
    HttpStatus {
        /// The source URL, its credentials hidden ([`redact_url`]).
        url: String,
        /// The status code.
        status: u16,
    },
    /// The page is larger than the configured limit.
    #[error(
        "{}: the page is larger than the limit of {limit} bytes; nothing was queued",
        redact_url(.url)
    )]
    TooLarge {
        /// The source URL, its credentials hidden ([`redact_url`]).
        url: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// The page is not HTML, Markdown or plain text.
    #[error(
        "{}: the page is `{content_type}`, not HTML, Markdown or plain text; nothing was queued",
        redact_url(.url)
    )]
    NotText {
        /// The source URL, its credentials hidden ([`redact_url`]).
        url: String,
        /// The `Content-Type` it came with.
        content_type: String,
    },
    /// A local source file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Queueing failed in the rules store (unknown project or agent, database error, ...).
    #[error(transparent)]
    Rules(#[from] RulesError),
}

impl FeedError {
    /// The stable code of this error (a store error keeps its own code).
    pub fn code(&self) -> &'static str {
        match self {
            FeedError::BadUrl { .. } => "feed_bad_url",
            FeedError::Unreachable { .. } => "feed_unreachable",
            FeedError::Timeout { .. } => "feed_timeout",
            FeedError::Redirected { .. } => "feed_redirected",
            FeedError::HttpStatus { .. } => "feed_http_status",
            FeedError::TooLarge { .. } => "feed_too_large",
            FeedError::NotText { .. } => "feed_not_text",
            FeedError::Io { .. } => "io_error",
            FeedError::Rules(e) => e.code(),
        }
    }
}

/// A source's cache validators, sent back as `If-None-Match` / `If-Modified-Since`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Validators {
    /// The `ETag` the server sent.
    pub etag: Option<String>,
    /// The `Last-Modified` the server sent.
    pub last_modified: Option<String>,
}

/// A page that was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPage {
    /// How it is written.
    pub format: DocumentFormat,
    /// Its text (invalid UTF-8 replaced, never refused).
    pub text: String,
    /// Its validators, for the next run.
    pub validators: Validators,
}

/// What fetching a source gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchOutcome {
    /// The server said the page is unchanged since the validators were taken.
    NotModified,
    /// The page.
    Page(FetchedPage),
}

/// A queued candidate and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VendorCandidate {
    /// The proposal in the review queue.
    pub proposal_id: u64,
    /// The project it was queued in.
    pub project: String,
    /// The agent profile it is for.
    pub agent: String,
    /// The suggested guardrail statement.
    pub statement: String,
    /// The source it was read from, its credentials hidden ([`redact_url`]): this is what a
    /// reviewer and the audit log see.
    pub source_url: String,
    /// When the page was fetched (RFC 3339, UTC).
    pub fetched_at: String,
    /// The passage it was found in.
    pub excerpt: String,
}

/// What one source gave in one run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct SourceReport {
    /// When it was fetched (RFC 3339, UTC).
    pub fetched_at: String,
    /// The page was unchanged (`304`), so nothing was read.
    pub not_modified: bool,
    /// Candidates queued by this run.
    pub queued: Vec<VendorCandidate>,
    /// Candidates found but not queued: queued before, already policy, or past the limit.
    pub skipped: usize,
    /// Of `skipped`, the candidates past [`MAX_CANDIDATES_PER_PAGE`], never looked at.
    pub over_limit: usize,
}

/// Reads a local source file, refusing one over `max_bytes`. Its format comes from the file
/// name, else from the text.
pub fn read_file_source(path: &Path, max_bytes: u64) -> Result<FetchOutcome, FeedError> {
    let io = |source| FeedError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(FeedError::TooLarge {
            url: path.display().to_string(),
            limit: max_bytes,
        });
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let format = path
        .file_name()
        .and_then(|n| DocumentFormat::from_file_name(&n.to_string_lossy()))
        .unwrap_or_else(|| DocumentFormat::sniff(&text));
    Ok(FetchOutcome::Page(FetchedPage {
        format,
        text,
        validators: Validators::default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However an error was built, its message shows a source URL (and a redirect's target)
    /// without the credentials it carries.
    #[test]
    fn an_error_message_hides_the_credentials_of_its_urls() {
        const CANARY: &str = "canary-feed-error-token-2Wd8";
        let url = format!("https://reader:{CANARY}@docs.internal/guide?sig={CANARY}");
        let errors = [
            FeedError::BadUrl {
                url: url.clone(),
                reason: "scheme".into(),
            },
            FeedError::Unreachable {
                url: url.clone(),
                reason: "Connection refused".into(),
            },
            FeedError::Timeout {
                url: url.clone(),
                secs: 3,
            },
            FeedError::Redirected {
                url: url.clone(),
                to: format!("https://x:{CANARY}@elsewhere.example/"),
            },
            FeedError::HttpStatus {
                url: url.clone(),
                status: 401,
            },
            FeedError::TooLarge {
                url: url.clone(),
                limit: 1,
            },
            FeedError::NotText {
                url: url.clone(),
                content_type: "application/pdf".into(),
            },
        ];
        for e in errors {
            let message = e.to_string();
            assert!(!message.contains(CANARY), "{message}");
            assert!(
                message.starts_with("https://***@docs.internal/guide?***: "),
                "{message}"
            );
        }
    }
}
