//! Vendor sourcing: turning an agent vendor's published guidance into guardrail candidates.
//!
//! Vendors publish advice for their agents as Markdown or HTML pages. A sourcing run reads one,
//! keeps the sentences and list items that read as instructions (`always`, `never`, `must`,
//! `should`, `avoid`, `prefer`, `do not`, ...) and queues each as a vendor-seeded proposal for
//! review; nothing becomes policy until a person approves it. The job is split by layer:
//!
//! - [`extract`](mod@extract): HTML and Markdown into candidates, each with the passage it came
//!   from (maintained parsers, Unicode sentence boundaries; never panics on any input).
//! - [`feed`]: the configuration (sources per agent profile, interval, limits), the
//!   [`FeedLedger`] that remembers each source's `ETag` / `Last-Modified` and every queued
//!   candidate's source URL, fetch time and excerpt (`ledger`: in the store's SQLite file, or
//!   in PostgreSQL shared by the replicas when the store is there), and [`FeedLedger::ingest`],
//!   which queues a fetched page's candidates.
//! - `fetch` (feature `fetch`): the HTTP side, [`FeedFetcher`] (conditional requests, no
//!   redirect to another site, a size limit, error statuses refused) and [`VendorFeed`], which
//!   runs every configured source on demand or on an interval.
//!
//! HTTP is behind a feature because the crate is a library of rules with no transport: the
//! command line and the gateway both turn `fetch` on and share one implementation, and an
//! embedder that brings its own pages uses [`FeedLedger::ingest`] without an HTTP client.
//!
//! Candidates are identified by a [`fingerprint`] of their normalized text, so running a
//! source twice queues nothing new.

pub mod extract;
pub mod feed;
#[cfg(feature = "fetch")]
mod fetch;
mod ledger;
#[cfg(feature = "postgres")]
mod ledger_postgres;

pub use extract::{
    DocumentFormat, Excerpted, Extracted, extract, extract_at_most, extract_candidates,
};
pub use feed::{
    FeedError, FeedLedger, FetchOutcome, FetchedPage, LEDGER_MIGRATIONS, MAX_CANDIDATES_PER_PAGE,
    SourceReport, Validators, VendorCandidate, VendorFeedConfig, VendorSource, read_file_source,
};
#[cfg(feature = "fetch")]
pub use fetch::{ConfiguredRuns, FeedFetcher, FeedRun, SourceRun, VendorFeed, log_runs};
#[cfg(feature = "postgres")]
pub use ledger_postgres::LEDGER_PG_MIGRATIONS;

/// A statement's identity for de-duplication: lowercase letters and digits, single spaces.
pub fn fingerprint(statement: &str) -> String {
    statement
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_ignore_case_and_punctuation() {
        assert_eq!(
            fingerprint("Always run the TESTS!"),
            fingerprint("always run the tests")
        );
    }
}
