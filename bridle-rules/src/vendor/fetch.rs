//! The feed's HTTP side (feature `fetch`): reading a vendor's page safely, and running every
//! configured source on demand or on an interval.
//!
//! A vendor page is someone else's server, so every way it can go wrong ends in a
//! [`FeedError`] and queues nothing: a server that is down or slow, a redirect to another site
//! (followed only within the source's own origin, at most five times), an error status (its
//! error page is never read as guidance), a `Content-Type` that is not text, or a body over the
//! limit (refused from `Content-Length` when given, else while streaming, never buffered
//! whole). Requests carry the validators of the last run, so an unchanged page costs one
//! `304 Not Modified` and queues nothing.
//!
//! A source behind basic auth is configured as `https://user:<token>@host/...`. Only the
//! request sees that URL (reqwest sends its user part as an `Authorization` header); errors,
//! log lines and [`SourceRun`]s carry [`redact_url`]'s form, user part and query as `***`.

use std::time::Duration;

use reqwest::header::{
    CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, LOCATION,
};
use reqwest::{StatusCode, Url, redirect};

use super::extract::DocumentFormat;
use super::feed::{
    FeedError, FeedLedger, FetchOutcome, FetchedPage, SourceReport, Validators, VendorFeedConfig,
    VendorSource, read_file_source,
};
use crate::fsutil::now_rfc3339;
use crate::{RulesStore, redact_url};

/// How many same-site redirects a fetch follows.
const MAX_REDIRECTS: usize = 5;

/// Fetches guidance pages with conditional requests and hard limits.
#[derive(Debug, Clone)]
pub struct FeedFetcher {
    client: reqwest::Client,
    max_bytes: u64,
    timeout: Duration,
}

impl FeedFetcher {
    /// A fetcher that refuses pages over `max_bytes` and answers slower than `timeout`.
    pub fn new(max_bytes: u64, timeout: Duration) -> Result<Self, FeedError> {
        let policy = redirect::Policy::custom(|attempt| {
            let same_site = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            if same_site && attempt.previous().len() <= MAX_REDIRECTS {
                attempt.follow()
            } else {
                // Hand the 3xx back; `fetch` turns it into `Redirected` naming the target.
                attempt.stop()
            }
        });
        let client = reqwest::Client::builder()
            .redirect(policy)
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("bridle-vendor-feed/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FeedError::BadUrl {
                url: String::new(),
                reason: format!("the HTTP client could not be built: {e}"),
            })?;
        Ok(Self {
            client,
            max_bytes,
            timeout,
        })
    }

    /// Fetches `url`, sending `known` validators so an unchanged page answers `304`. A user part
    /// in `url` (`https://user:<token>@host/...`) is sent as basic auth; every error names the
    /// URL without it ([`redact_url`]).
    pub async fn fetch(
        &self,
        url: &str,
        known: Option<&Validators>,
        format: Option<DocumentFormat>,
    ) -> Result<FetchOutcome, FeedError> {
        // The real URL goes to the request alone; errors carry this one.
        let shown = redact_url(url);
        let parsed = Url::parse(url).map_err(|e| FeedError::BadUrl {
            url: shown.clone(),
            reason: e.to_string(),
        })?;
        match parsed.scheme() {
            "http" => {}
            "https" if cfg!(feature = "rustls") => {}
            "https" => {
                return Err(FeedError::BadUrl {
                    url: shown.clone(),
                    reason: "this build has no TLS; rebuild with the `rustls` feature, or save the page and use the file".into(),
                });
            }
            other => {
                return Err(FeedError::BadUrl {
                    url: shown.clone(),
                    reason: format!("scheme `{other}` is not http or https"),
                });
            }
        }
        let mut request = self.client.get(parsed);
        if let Some(v) = known {
            if let Some(etag) = &v.etag {
                request = request.header(IF_NONE_MATCH, etag);
            }
            if let Some(lm) = &v.last_modified {
                request = request.header(IF_MODIFIED_SINCE, lm);
            }
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| self.transport(&shown, e))?;
        let status = response.status();
        if status == StatusCode::NOT_MODIFIED {
            return Ok(FetchOutcome::NotModified);
        }
        if status.is_redirection() {
            let to = response
                .headers()
                .get(LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| response.url().join(l).ok())
                .map_or_else(
                    || "an unnamed location".to_string(),
                    |u| redact_url(u.as_str()),
                );
            return Err(FeedError::Redirected { url: shown, to });
        }
        if !status.is_success() {
            return Err(FeedError::HttpStatus {
                url: shown,
                status: status.as_u16(),
            });
        }
        let header = |name| {
            response
                .headers()
                .get(name)
                .and_then(|v: &reqwest::header::HeaderValue| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header(CONTENT_TYPE);
        let validators = Validators {
            etag: header(ETAG),
            last_modified: header(LAST_MODIFIED),
        };
        let declared = match &content_type {
            Some(ct) => match DocumentFormat::from_content_type(ct) {
                Some(f) => Some(f),
                None => {
                    return Err(FeedError::NotText {
                        url: shown,
                        content_type: ct.clone(),
                    });
                }
            },
            None => None,
        };
        let too_large = || FeedError::TooLarge {
            url: shown.clone(),
            limit: self.max_bytes,
        };
        if header(CONTENT_LENGTH)
            .and_then(|l| l.parse::<u64>().ok())
            .is_some_and(|l| l > self.max_bytes)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.transport(&shown, e))?
        {
            if (body.len() + chunk.len()) as u64 > self.max_bytes {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        let format = format
            .or(declared)
            .unwrap_or_else(|| DocumentFormat::sniff(&text));
        Ok(FetchOutcome::Page(FetchedPage {
            format,
            text,
            validators,
        }))
    }

    /// A transport failure of the source `shown` (already redacted).
    fn transport(&self, shown: &str, e: reqwest::Error) -> FeedError {
        if e.is_timeout() {
            FeedError::Timeout {
                url: shown.to_string(),
                secs: self.timeout.as_secs(),
            }
        } else {
            // The innermost cause says what happened ("Connection refused", ...). reqwest's own
            // message names the URL with its query (where a token can be): it is dropped.
            let e = e.without_url();
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                reason = s.to_string();
                source = s.source();
            }
            FeedError::Unreachable {
                url: shown.to_string(),
                reason,
            }
        }
    }
}

/// What one source did in a run: its report, or why it was not read.
#[derive(Debug)]
pub struct SourceRun {
    /// The agent profile.
    pub agent: String,
    /// The source, its credentials hidden ([`redact_url`]).
    pub url: String,
    /// What happened.
    pub outcome: Result<SourceReport, FeedError>,
}

/// What a run over every configured source did. One failing source does not stop the others.
#[derive(Debug, Default)]
pub struct FeedRun {
    /// Per source, in configuration order.
    pub sources: Vec<SourceRun>,
}

impl FeedRun {
    /// How many candidates the run queued.
    pub fn queued(&self) -> usize {
        self.sources
            .iter()
            .filter_map(|s| s.outcome.as_ref().ok())
            .map(|r| r.queued.len())
            .sum()
    }

    /// The sources that failed.
    pub fn failures(&self) -> impl Iterator<Item = &SourceRun> {
        self.sources.iter().filter(|s| s.outcome.is_err())
    }
}

/// The vendor feed: every configured source, fetched and queued into a project's review queue.
#[derive(Debug, Clone)]
pub struct VendorFeed {
    config: VendorFeedConfig,
    fetcher: FeedFetcher,
}

impl VendorFeed {
    /// A feed over `config`'s sources and limits.
    pub fn new(config: VendorFeedConfig) -> Result<Self, FeedError> {
        let fetcher = FeedFetcher::new(config.max_bytes, Duration::from_secs(config.timeout_secs))?;
        Ok(Self { config, fetcher })
    }

    /// The configuration.
    pub fn config(&self) -> &VendorFeedConfig {
        &self.config
    }

    /// Fetches every source of every agent profile once and queues what is new in `project`.
    pub async fn run(&self, store: &RulesStore, project: &str) -> Result<FeedRun, FeedError> {
        let ledger = FeedLedger::open(store)?;
        let mut run = FeedRun::default();
        for (agent, sources) in &self.config.profiles {
            for source in sources {
                let outcome = self
                    .run_source(store, &ledger, project, agent, source)
                    .await;
                let url = redact_url(&source.url);
                if let Err(e) = &outcome {
                    // The URL and the error quote a configured source and what its server or file said:
                    // written escaped, so a line break in them cannot start a log line.
                    tracing::warn!(project, agent, url = ?url, code = e.code(), error = ?e.to_string(), "vendor feed source failed");
                }
                run.sources.push(SourceRun {
                    agent: agent.clone(),
                    url,
                    outcome,
                });
            }
        }
        Ok(run)
    }

    /// Reads one page for one agent profile into `project`'s review queue now, with this feed's
    /// limits and ledger (the page's validators are kept, so a second read of an unchanged page
    /// queues nothing), whether or not the page is one of the configured sources. This is
    /// `bridle rules source-vendor` and the admin API's one-off read.
    pub async fn read_page(
        &self,
        store: &RulesStore,
        project: &str,
        agent: &str,
        source: &VendorSource,
    ) -> Result<SourceReport, FeedError> {
        let ledger = FeedLedger::open(store)?;
        let outcome = self
            .run_source(store, &ledger, project, agent, source)
            .await;
        if let Err(e) = &outcome {
            tracing::warn!(project, agent, url = ?redact_url(&source.url), code = e.code(), error = ?e.to_string(), "vendor page could not be read");
        }
        outcome
    }

    async fn run_source(
        &self,
        store: &RulesStore,
        ledger: &FeedLedger,
        project: &str,
        agent: &str,
        source: &VendorSource,
    ) -> Result<SourceReport, FeedError> {
        let fetched_at = now_rfc3339();
        // Anything with a scheme is a URL (and only http and https are fetched); the rest is a
        // local file.
        let outcome = if source.url.contains("://") {
            let known = ledger.validators(project, agent, &source.url)?;
            self.fetcher
                .fetch(&source.url, known.as_ref(), source.format)
                .await?
        } else {
            let mut outcome =
                read_file_source(std::path::Path::new(&source.url), self.config.max_bytes)?;
            if let (FetchOutcome::Page(page), Some(format)) = (&mut outcome, source.format) {
                page.format = format;
            }
            outcome
        };
        // The store is SQLite and files: keep its blocking calls off the async workers.
        let (store, ledger) = (store.clone(), ledger.clone());
        let (project, agent, url) = (project.to_string(), agent.to_string(), source.url.clone());
        let report = tokio::task::spawn_blocking(move || {
            ledger.ingest(&store, &project, &agent, &url, outcome, &fetched_at)
        })
        .await
        .map_err(|e| FeedError::Unreachable {
            url: redact_url(&source.url),
            reason: format!("the queueing task stopped: {e}"),
        })??;
        Ok(report)
    }

    /// The projects a configured run queues into: the configured ones, else every project the
    /// store holds now.
    pub fn projects(&self, store: &RulesStore) -> Result<Vec<String>, FeedError> {
        if self.config.projects.is_empty() {
            Ok(store.projects()?)
        } else {
            Ok(self.config.projects.clone())
        }
    }

    /// Runs the feed once into each of [`projects`](Self::projects), in order. A project's
    /// failure (an unknown project, a store error) is its entry's error; the others still run.
    pub async fn run_configured(&self, store: &RulesStore) -> ConfiguredRuns {
        let known = store.projects()?;
        let mut runs = Vec::new();
        for project in self.projects(store)? {
            let run = if known.contains(&project) {
                self.run(store, &project).await
            } else {
                Err(crate::RulesError::UnknownProject(project.clone()).into())
            };
            runs.push((project, run));
        }
        Ok(runs)
    }

    /// Runs the feed ([`run_configured`](Self::run_configured)) every `interval_minutes`, the
    /// first run at once, until `shutdown` completes. Returns at once when no interval is
    /// configured. Each run's outcome is logged per project ([`log_runs`]).
    pub async fn run_every(
        &self,
        store: &RulesStore,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        self.every(shutdown, || self.run_configured(store)).await;
    }

    /// The schedule behind [`run_every`](Self::run_every), for a caller that wraps each run
    /// (the gateway records every queued proposal in its audit log): calls `run` every
    /// `interval_minutes`, the first call at once, until `shutdown` completes, and logs each
    /// outcome. A run still going when `shutdown` completes is dropped. Returns at once when no
    /// interval is configured.
    pub async fn every<F, Fut>(&self, shutdown: impl std::future::Future<Output = ()>, mut run: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = ConfiguredRuns>,
    {
        let Some(minutes) = self.config.interval_minutes.filter(|m| *m > 0) else {
            return;
        };
        let mut ticks = tokio::time::interval(Duration::from_secs(minutes.saturating_mul(60)));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return,
                _ = ticks.tick() => {
                    let runs = tokio::select! {
                        () = &mut shutdown => return,
                        runs = run() => runs,
                    };
                    log_runs(&runs);
                }
            }
        }
    }
}

/// What [`VendorFeed::run_configured`] returns: per project, its run or why it could not run;
/// the outer error when the projects could not be listed.
pub type ConfiguredRuns = Result<Vec<(String, Result<FeedRun, FeedError>)>, FeedError>;

/// Logs one scheduled run's outcome: a line per project (what was queued and how many sources
/// failed, or the project's error), or why the projects could not be listed.
pub fn log_runs(runs: &ConfiguredRuns) {
    match runs {
        Ok(runs) => {
            for (project, run) in runs {
                match run {
                    Ok(run) => tracing::info!(
                        project,
                        queued = run.queued(),
                        failed = run.failures().count(),
                        "vendor feed run"
                    ),
                    Err(e) => {
                        tracing::warn!(project, code = e.code(), error = ?e.to_string(), "vendor feed run failed")
                    }
                }
            }
        }
        Err(e) => {
            tracing::warn!(code = e.code(), error = ?e.to_string(), "vendor feed: the projects could not be listed");
        }
    }
}
