//! The HTTP edge every provider shares: sending with timeouts, retrying 429, 5xx and a
//! connection closed before any reply with backoff that honours `Retry-After`, cancellation,
//! turning failures into [`ProviderError`]s a user can act on, and decoding a streamed body
//! line by line.
//!
//! Providers differ only in their wire shapes; how a request is sent, retried, timed out and
//! cancelled, and what "nothing is listening" or "unknown model" tells the user, is decided here
//! once. So is what an error may show: the endpoint's URL redacted, the HTTP client's error text
//! without the URL it appends, and a server's words without any credential the request carried
//! (see [`crate::endpoint`]); every error a provider returns, streamed or not, passes
//! [`scrub_error`](crate::endpoint::scrub_error).

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use kberg_agent::{ChatDelta, ChatStream, ProviderError};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::endpoint::{Target, UrlCredentials, quoted, redact_url, scrub_error};
use crate::window;

/// Timeouts and retries for a provider's HTTP requests.
///
/// The default ([`HttpOptions::local_cpu`]) suits a model server on the same machine without a
/// GPU, which is what the Ollama and OpenAI-compatible providers point at by default: such a
/// server reads a long prompt at a few hundred tokens a second and writes a few tens, and on a
/// loaded two-core machine one turn of a 0.5B model with a tool listing was measured at 147 s.
/// [`HttpOptions::hosted`] fails faster, for hosted APIs (the Anthropic provider's default).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HttpOptions {
    /// Time allowed for a whole non-streamed reply, or for a streamed reply's headers
    /// (default 600 s; 120 s for [`HttpOptions::hosted`]).
    pub timeout: Duration,
    /// Time allowed between two pieces of a streamed reply (default 300 s: a CPU-only server
    /// sends nothing while it reads the prompt; 60 s for [`HttpOptions::hosted`]).
    pub stream_idle_timeout: Duration,
    /// Time allowed for a whole turn, streamed or not: from the first request being sent,
    /// through its retries and their waits, to the end of the reply (default `None`: no such
    /// bound). [`timeout`](Self::timeout) bounds one attempt's non-streamed reply and
    /// [`stream_idle_timeout`](Self::stream_idle_timeout) only the gap between two pieces of a
    /// stream, so without it a server that sends a byte every few seconds holds a streamed turn
    /// for ever. Off by default because a model server without a GPU rightly streams one turn
    /// for many minutes; set it to what a turn may take on yours. When it passes, the turn ends
    /// with [`ProviderError::TurnTimeout`] carrying this duration (code `timeout`; after the
    /// deltas decoded before it, when streamed).
    pub turn_timeout: Option<Duration>,
    /// Retries after a 429, a 5xx or a connection closed before any reply came (default 2).
    pub max_retries: u32,
    /// The first backoff when the server sends no `Retry-After`; it doubles per retry
    /// (default 500 ms).
    pub initial_backoff: Duration,
    /// The longest wait before a retry, whatever `Retry-After` says (default 30 s).
    pub max_retry_wait: Duration,
    /// The largest non-streamed reply body read (default [`DEFAULT_MAX_BODY_BYTES`]); a larger
    /// one is refused with [`ProviderError::TooLarge`] as soon as it passes the bound.
    pub max_body_bytes: usize,
    /// The longest line of a streamed reply (SSE or NDJSON; default
    /// [`DEFAULT_MAX_LINE_BYTES`]); a longer one ends the stream with
    /// [`ProviderError::TooLarge`], so a server that never sends a newline cannot grow the
    /// buffer without bound.
    pub max_line_bytes: usize,
    /// The most bytes of one streamed reply read (default [`DEFAULT_MAX_STREAM_BYTES`]); past
    /// it the stream ends with [`ProviderError::TooLarge`], so a server that streams without
    /// end cannot grow the assembled answer without bound.
    pub max_stream_bytes: usize,
}

/// The default bound of a non-streamed reply body: 16 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 << 20;

/// The default bound of one streamed line: 4 MiB (one SSE `data:` line carries one JSON
/// chunk, a few hundred bytes in practice; a whole tool call's arguments fit many times over).
pub const DEFAULT_MAX_LINE_BYTES: usize = 4 << 20;

/// The default bound of a whole streamed reply: 64 MiB, four times a non-streamed body's, as a
/// stream frames each token in a chunk of its own (a few hundred bytes for a few characters).
pub const DEFAULT_MAX_STREAM_BYTES: usize = 64 << 20;

impl Default for HttpOptions {
    fn default() -> Self {
        Self::local_cpu()
    }
}

impl HttpOptions {
    /// For a model server on this machine without a GPU (the default): 600 s per reply, 300 s
    /// between two pieces of a streamed reply, 2 retries.
    pub fn local_cpu() -> Self {
        Self {
            timeout: Duration::from_secs(600),
            stream_idle_timeout: Duration::from_secs(300),
            turn_timeout: None,
            max_retries: 2,
            initial_backoff: Duration::from_millis(500),
            max_retry_wait: Duration::from_secs(30),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
        }
    }

    /// For a hosted API: 120 s per reply, 60 s between two pieces of a streamed reply.
    pub fn hosted() -> Self {
        Self {
            timeout: Duration::from_secs(120),
            stream_idle_timeout: Duration::from_secs(60),
            ..Self::local_cpu()
        }
    }

    /// Sets the largest non-streamed reply body read.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = n;
        self
    }

    /// Sets the longest line of a streamed reply.
    pub fn max_line_bytes(mut self, n: usize) -> Self {
        self.max_line_bytes = n;
        self
    }

    /// Sets the most bytes of one streamed reply read.
    pub fn max_stream_bytes(mut self, n: usize) -> Self {
        self.max_stream_bytes = n;
        self
    }

    /// Sets the request timeout.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Sets the streaming idle timeout.
    pub fn stream_idle_timeout(mut self, t: Duration) -> Self {
        self.stream_idle_timeout = t;
        self
    }

    /// Sets the time allowed for a whole turn (see [`HttpOptions::turn_timeout`]).
    pub fn turn_timeout(mut self, t: Duration) -> Self {
        self.turn_timeout = Some(t);
        self
    }

    /// Sets the number of retries.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// Sets the first backoff.
    pub fn initial_backoff(mut self, t: Duration) -> Self {
        self.initial_backoff = t;
        self
    }

    /// Sets the longest wait before a retry.
    pub fn max_retry_wait(mut self, t: Duration) -> Self {
        self.max_retry_wait = t;
        self
    }
}

/// What a provider tells the shared edge about itself, for its requests and error messages;
/// built once, with the provider.
pub(crate) struct Endpoint {
    /// `Ollama`, `the OpenAI-compatible server`, ...
    pub label: &'static str,
    /// Where requests go, how that is shown, and what an error must not quote.
    pub target: Target,
    /// The model asked for.
    pub model: String,
    /// What to do when nothing answers (naming the base URL redacted).
    pub unreachable_hint: String,
    /// What to do when the model is unknown.
    pub model_hint: String,
    /// What to do when the key is rejected.
    pub key_hint: &'static str,
    /// What to do when the conversation does not fit the model's context window.
    pub window_hint: &'static str,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("label", &self.label)
            .field("url", &self.target.shown)
            .finish_non_exhaustive()
    }
}

/// What went wrong in the HTTP client, with its causes (`connection refused`, a DNS failure),
/// without the URL it appends to its own text (which carries the query).
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The most redirects one request follows.
const MAX_REDIRECTS: usize = 10;

/// Whether a redirect from `from` to `to` stays in one origin (scheme, host and port).
fn same_origin(from: &reqwest::Url, to: &reqwest::Url) -> bool {
    from.scheme() == to.scheme()
        && from.host_str() == to.host_str()
        && from.port_or_known_default() == to.port_or_known_default()
}

/// Follows a redirect only within the origin of the URL first asked. The HTTP client drops
/// only the headers it knows to be credentials (`Authorization`, cookies) on a redirect to
/// another origin, not Anthropic's `x-api-key`, and a 307 or 308 sends the conversation along:
/// a base URL that answers with a redirect elsewhere (a proxy's login page, a moved gateway,
/// an `https` address sent to `http`) would hand both to whoever is there. A redirect not
/// followed is answered to the caller as the 3xx it is, naming where it pointed ([`post`]).
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        // The URLs asked so far: the first, then each redirect followed.
        let followed = attempt.previous().len().saturating_sub(1);
        let stays = attempt
            .previous()
            .first()
            .is_some_and(|first| same_origin(first, attempt.url()));
        if stays && followed < MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// Builds an HTTP client (connection pooling; per-request timeouts are applied by [`post`]).
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .redirect(redirect_policy())
        .build()
        .unwrap_or_else(|e| {
            // Building fails only when the TLS backend cannot initialise; a default client then
            // reports the same problem on first use instead of at construction.
            tracing::warn!(error = %e, "HTTP client builder failed; using the default client");
            reqwest::Client::new()
        })
}

/// The message in an error body (`error.message`, `error` (a string), `message`, or the
/// text), with every credential in `credentials` replaced, then quoted: its control
/// characters escaped and cut to its start. Replaced before it is cut, so no credential is
/// left half shown at the cut.
pub(crate) fn error_message(body: &[u8], credentials: &UrlCredentials) -> String {
    let parsed = serde_json::from_slice::<Value>(body).ok();
    quoted_message(&error_text(parsed.as_ref(), body), credentials)
}

/// A message of an error body as [`error_message`] quotes it.
fn quoted_message(text: &str, credentials: &UrlCredentials) -> String {
    shortened(credentials.scrub(text).trim())
}

/// The whole message in an error body (`parsed`, when it is JSON).
fn error_text(parsed: Option<&Value>, body: &[u8]) -> String {
    if let Some(v) = parsed {
        let found = v
            .pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str);
        if let Some(m) = found {
            return m.to_string();
        }
    }
    String::from_utf8_lossy(body).into_owned()
}

/// `text` quoted ([`quoted`]: its control characters escaped) and cut to 300 characters
/// (with `...`), or `(empty body)`.
fn shortened(text: &str) -> String {
    if text.is_empty() {
        "(empty body)".to_string()
    } else {
        quoted(text, 300)
    }
}

/// The longest `Retry-After` read: a day. The wait reaches the caller
/// (`retry_after` of [`ProviderError::RateLimited`]), which may sleep for it; a server's
/// `Retry-After: 99999999999` (or a date centuries ahead) is a broken value, not a wait.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// `Retry-After` as a duration: delta-seconds or an HTTP date, at most [`MAX_RETRY_AFTER`].
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let wait = if let Ok(secs) = v.parse::<u64>() {
        Duration::from_secs(secs)
    } else if let Ok(secs) = v.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        Duration::from_secs_f64(secs.min(MAX_RETRY_AFTER.as_secs_f64()))
    } else {
        let at = httpdate::parse_http_date(v).ok()?;
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

async fn cancellable<T>(
    cancel: &CancellationToken,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, ProviderError> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(ProviderError::Cancelled),
        v = fut => Ok(v),
    }
}

/// The waits between retries when the server sends no `Retry-After`: `initial_backoff`,
/// doubling, each with a random jitter of up to its own length added (so clients that failed
/// together do not retry in step), at most `max_retry_wait`. The same policy (backon's
/// exponential backoff with jitter) as the aggregator's reconnects.
fn retry_delays(opts: &HttpOptions) -> impl Iterator<Item = Duration> + Send + use<> {
    let max = opts.max_retry_wait;
    backon::BackoffBuilder::build(
        backon::ExponentialBuilder::new()
            .with_min_delay(opts.initial_backoff)
            .with_max_delay(max.max(opts.initial_backoff))
            .with_factor(2.0)
            .with_jitter()
            .without_max_times(),
    )
    .map(move |d| d.min(max))
}

/// Posts `body` as JSON with `headers`, retrying 429, 5xx and a connection closed before any
/// reply. Returns the successful response (headers read, body not yet) and when the attempt
/// that got it was sent, from which a whole reply's [`HttpOptions::timeout`] runs.
pub(crate) async fn post(
    client: &reqwest::Client,
    opts: &HttpOptions,
    ep: &Endpoint,
    headers: &[(&'static str, String)],
    body: &Value,
    cancel: &CancellationToken,
) -> Result<(reqwest::Response, tokio::time::Instant), ProviderError> {
    let target = &ep.target;
    let credentials = &target.credentials;
    let mut attempt: u32 = 0;
    let mut delays = retry_delays(opts);
    loop {
        attempt += 1;
        let mut req = client.post(&target.url).json(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let started = tokio::time::Instant::now();
        let sent = cancellable(cancel, tokio::time::timeout(opts.timeout, req.send())).await?;
        let resp = match sent {
            Err(_) => return Err(ProviderError::Timeout(opts.timeout)),
            Ok(Err(e)) if e.is_timeout() => return Err(ProviderError::Timeout(opts.timeout)),
            Ok(Err(e)) if e.is_connect() => {
                let error = credentials.scrub(&describe(e));
                tracing::debug!(%error, url = %target.shown, "connection failed");
                return Err(ProviderError::Unreachable {
                    url: target.shown.clone(),
                    hint: format!("{} ({error})", ep.unreachable_hint),
                });
            }
            Ok(Err(e)) if e.is_builder() => {
                // Nothing was sent: the base URL is not one a request can go to.
                let error = credentials.scrub(&describe(e));
                return Err(ProviderError::Unreachable {
                    url: target.shown.clone(),
                    hint: format!(
                        "{} cannot be reached at {}: the base URL is not a usable http(s) URL ({error})",
                        ep.label, target.shown
                    ),
                });
            }
            Ok(Err(e)) => {
                // Connected, but the exchange broke before a reply came. Most often the server
                // closed a kept-alive connection as the request went out on it (it times idle
                // ones out: uvicorn under vLLM after 5 s, while a tool ran), so the request
                // never reached it; or it failed mid-request. Either way nothing came back,
                // and the request is sent again as after a 5xx.
                let error = credentials.scrub(&describe(e));
                if attempt <= opts.max_retries {
                    let wait = delays.next().unwrap_or(opts.max_retry_wait);
                    tracing::warn!(
                        attempt,
                        wait_ms = wait.as_millis() as u64,
                        url = %target.shown,
                        error = ?error,
                        "{} closed the connection before replying; retrying",
                        ep.label
                    );
                    cancellable(cancel, tokio::time::sleep(wait)).await?;
                    continue;
                }
                let tries = if attempt > 1 {
                    format!(" each of {attempt} times")
                } else {
                    String::new()
                };
                return Err(ProviderError::Truncated {
                    detail: format!(
                        "{} closed the connection before replying{tries}: {error}",
                        ep.label
                    ),
                });
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if status.is_success() {
            return Ok((resp, started));
        }
        if status.is_redirection() {
            return Err(not_followed(&resp, ep));
        }
        let wait_hint = retry_after(resp.headers());
        let body = cancellable(cancel, tokio::time::timeout(opts.timeout, error_body(resp)))
            .await?
            .unwrap_or_default();
        let parsed = serde_json::from_slice::<Value>(&body).ok();
        let text = error_text(parsed.as_ref(), &body);
        let detail = quoted_message(&text, credentials);
        let code = status.as_u16();
        // `?`: the words keep the server's line breaks, which written as they are would start
        // a log line of the server's choosing.
        tracing::debug!(status = code, attempt, url = %target.shown, detail = ?detail, "{} answered {code}", ep.label);
        let retryable = code == 429 || status.is_server_error();
        if retryable && attempt <= opts.max_retries {
            let backoff = delays.next().unwrap_or(opts.max_retry_wait);
            let wait = wait_hint.unwrap_or(backoff).min(opts.max_retry_wait);
            tracing::warn!(
                status = code,
                attempt,
                wait_ms = wait.as_millis() as u64,
                url = %target.shown,
                "{} answered {code}; retrying",
                ep.label
            );
            cancellable(cancel, tokio::time::sleep(wait)).await?;
            continue;
        }
        return Err(match code {
            429 => ProviderError::RateLimited {
                attempts: attempt,
                retry_after: wait_hint,
                detail,
            },
            401 | 403 => ProviderError::Unauthorized {
                status: code,
                detail: format!("{detail}. {}", ep.key_hint),
            },
            404 if detail.to_ascii_lowercase().contains("model") => ProviderError::ModelNotFound {
                model: ep.model.clone(),
                hint: format!("{} ({detail})", ep.model_hint),
            },
            404 => ProviderError::Rejected {
                status: code,
                detail: format!("{detail}; check the base URL ({})", target.shown),
            },
            c if c >= 500 => ProviderError::ServerError {
                status: c,
                attempts: attempt,
                detail,
            },
            c => match window::overflow(parsed.as_ref(), &text) {
                Some(overflow) => overflow.error(&detail, ep.window_hint),
                None => ProviderError::Rejected { status: c, detail },
            },
        });
    }
}

/// Whether a reply says it is an HTML page.
fn is_html(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/html"))
}

/// Whether `body`, of a reply labelled HTML, is a page (starts with a tag) rather than the
/// API's answer under a wrong label, which is read as usual.
fn is_page(body: &[u8]) -> bool {
    body.trim_ascii_start().starts_with(b"<")
}

/// The error for a web page (a server's own UI, a proxy's sign-in page) where the API should
/// be: read as a reply it would be "not JSON", as a stream one that "ended early".
fn html_page(body: &[u8], ep: &Endpoint) -> ProviderError {
    ProviderError::malformed(format!(
        "{} answered an HTML page, not its API ({}); check the base URL ({})",
        ep.label,
        error_message(body, &ep.target.credentials),
        ep.target.shown
    ))
}

/// The error for a redirect [`redirect_policy`] did not follow (another origin, or too many),
/// naming where it pointed (redacted) so a user can make that the base URL if it is right.
fn not_followed(resp: &reqwest::Response, ep: &Endpoint) -> ProviderError {
    let target = &ep.target;
    let to = resp
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .and_then(|l| resp.url().join(l).ok());
    let why = match &to {
        Some(to) if same_origin(resp.url(), to) => {
            format!("kept redirecting the request (more than {MAX_REDIRECTS} times)")
        }
        Some(to) => format!(
            "redirected the request to {}, outside the base URL's origin; it was not followed, \
             so neither the key nor the conversation went there. If that address is right, \
             make it the base URL",
            redact_url(to.as_str())
        ),
        None => "answered a redirect without a usable location".to_string(),
    };
    let status = resp.status().as_u16();
    let detail = target
        .credentials
        .scrub(&format!("{} {why} (base URL {})", ep.label, target.shown));
    tracing::debug!(status, url = %target.shown, %detail, "a redirect was not followed");
    ProviderError::Rejected { status, detail }
}

/// How much of an error reply is read: enough for any real error message, and a server that
/// answers an error with an endless body costs no more than this.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The first [`MAX_ERROR_BODY_BYTES`] of an error reply (what is beyond is not read); a body
/// that breaks off gives what came.
async fn error_body(resp: reqwest::Response) -> Vec<u8> {
    let mut body = resp.bytes_stream();
    let mut bytes = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        let room = MAX_ERROR_BODY_BYTES - bytes.len();
        bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if bytes.len() >= MAX_ERROR_BODY_BYTES {
            break;
        }
    }
    bytes
}

/// Reads a whole JSON reply, at most `max_body_bytes` of it: a `Content-Length` above the bound
/// is refused before reading, and a body without one is refused as soon as it passes it.
async fn read_json(
    resp: reqwest::Response,
    sent: tokio::time::Instant,
    opts: &HttpOptions,
    ep: &Endpoint,
    cancel: &CancellationToken,
) -> Result<Value, ProviderError> {
    let html = is_html(&resp);
    let limit = opts.max_body_bytes;
    let too_large = || ProviderError::TooLarge {
        what: "reply body",
        limit,
    };
    if resp
        .content_length()
        .is_some_and(|n| n > u64::try_from(limit).unwrap_or(u64::MAX))
    {
        return Err(too_large());
    }
    let read = async {
        let mut body = resp.bytes_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| ProviderError::Truncated {
                detail: format!("the reply body could not be read: {}", describe(e)),
            })?;
            if bytes.len() + chunk.len() > limit {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    };
    // The body gets what is left of the reply's time, not a timeout of its own: a server that
    // takes most of it to send its headers and then trickles the body is still bounded by it.
    // A timeout past what the clock can hold (`Duration::MAX`, "no timeout") is no bound.
    let read = async {
        match sent.checked_add(opts.timeout) {
            Some(at) => tokio::time::timeout_at(at, read).await,
            None => Ok(read.await),
        }
    };
    let bytes = cancellable(cancel, read)
        .await?
        .map_err(|_| ProviderError::Timeout(opts.timeout))??;
    serde_json::from_slice(&bytes).map_err(|e| {
        if html && is_page(&bytes) {
            html_page(&bytes, ep)
        } else {
            ProviderError::malformed(format!("the reply is not JSON: {e}"))
        }
    })
}

/// Posts `body`, reads the whole JSON reply and makes the turn of it with `parse`. Every error,
/// also one `parse` makes of the reply (an in-band error quoting the request), is scrubbed of
/// the endpoint's credentials.
pub(crate) async fn post_for_json<T>(
    client: &reqwest::Client,
    opts: &HttpOptions,
    ep: &Endpoint,
    headers: &[(&'static str, String)],
    body: &Value,
    cancel: &CancellationToken,
    parse: impl FnOnce(&Value) -> Result<T, ProviderError>,
) -> Result<T, ProviderError> {
    let deadline = TurnDeadline::start(opts, ep);
    let turn = async {
        let (resp, sent) = post(client, opts, ep, headers, body, cancel).await?;
        parse(&read_json(resp, sent, opts, ep, cancel).await?)
    };
    within(deadline, turn)
        .await
        .map_err(|e| scrub_error(&ep.target.credentials, e))
}

/// When a turn must be over ([`HttpOptions::turn_timeout`]), counted from when it began.
#[derive(Debug, Clone, Copy)]
struct TurnDeadline {
    at: tokio::time::Instant,
    limit: Duration,
    label: &'static str,
}

impl TurnDeadline {
    /// The deadline of a turn beginning now, if the options set one (one past what the clock
    /// can hold, `Duration::MAX`, is none).
    fn start(opts: &HttpOptions, ep: &Endpoint) -> Option<Self> {
        let limit = opts.turn_timeout?;
        Some(Self {
            at: tokio::time::Instant::now().checked_add(limit)?,
            limit,
            label: ep.label,
        })
    }

    /// The error that ends a turn past its deadline, logged too.
    fn passed(&self) -> ProviderError {
        tracing::warn!(
            turn_timeout_ms = self.limit.as_millis() as u64,
            "{} did not finish the turn within its turn_timeout; the turn was ended",
            self.label
        );
        ProviderError::TurnTimeout(self.limit)
    }
}

/// Waits until `deadline`, or for ever when there is none.
async fn until(deadline: Option<TurnDeadline>) -> TurnDeadline {
    match deadline {
        Some(d) => {
            tokio::time::sleep_until(d.at).await;
            d
        }
        None => std::future::pending().await,
    }
}

/// `fut`, ended with [`ProviderError::TurnTimeout`] if `deadline` passes first.
async fn within<T>(
    deadline: Option<TurnDeadline>,
    fut: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    tokio::select! {
        biased;
        d = until(deadline) => Err(d.passed()),
        v = fut => v,
    }
}

/// Posts `body` and decodes the streamed reply with `decoder`. Every error, also one ending
/// the stream (an error event, a line that is not the documented shape), is scrubbed of the
/// endpoint's credentials.
pub(crate) async fn post_for_stream<D: LineDecoder>(
    client: &reqwest::Client,
    opts: &HttpOptions,
    ep: &Endpoint,
    headers: &[(&'static str, String)],
    body: &Value,
    decoder: D,
    cancel: &CancellationToken,
) -> Result<ChatStream, ProviderError> {
    let credentials = std::sync::Arc::clone(&ep.target.credentials);
    let deadline = TurnDeadline::start(opts, ep);
    let head = async {
        let (resp, _) = post(client, opts, ep, headers, body, cancel).await?;
        let html = is_html(&resp);
        let mut body = resp.bytes_stream();
        // A reply labelled HTML is looked at first: a page is refused, anything else is read
        // as the stream it is.
        let mut first = None;
        if html {
            let read = cancellable(
                cancel,
                tokio::time::timeout(opts.stream_idle_timeout, body.next()),
            )
            .await?;
            if let Ok(Some(Ok(chunk))) = &read
                && is_page(chunk)
            {
                return Err(html_page(chunk, ep));
            }
            first = match read {
                Ok(piece) => piece,
                Err(_) => return Err(ProviderError::Timeout(opts.stream_idle_timeout)),
            };
        }
        Ok(futures::stream::iter(first).chain(body))
    };
    let body = within(deadline, head)
        .await
        .map_err(|e| scrub_error(&credentials, e))?;
    let stream = lines_of(
        Box::pin(body),
        decoder,
        StreamBounds {
            idle: opts.stream_idle_timeout,
            deadline,
            max_line: opts.max_line_bytes,
            max_total: opts.max_stream_bytes,
        },
        cancel.clone(),
    );
    Ok(Box::pin(stream.map(move |item| {
        item.map_err(|e| scrub_error(&credentials, e))
    })))
}

/// The most tool calls one reply may hold, streamed or not: far more than a turn makes (the
/// agent runs a few per message and answers each call past its limit), few enough that a
/// server sending thousands of tiny calls in one reply cannot have each of them answered.
pub(crate) const MAX_CALLS_PER_REPLY: usize = 1024;

/// The error for a reply holding more than [`MAX_CALLS_PER_REPLY`] tool calls.
pub(crate) fn too_many_calls() -> ProviderError {
    ProviderError::malformed(format!(
        "the reply holds implausibly many tool calls (more than {MAX_CALLS_PER_REPLY})"
    ))
}

/// A tool as the OpenAI-style `tools` entry Ollama and OpenAI-compatible servers read.
#[cfg(any(feature = "ollama", feature = "openai"))]
pub(crate) fn function_tool(t: &kberg_agent::ToolDefinition) -> Value {
    serde_json::json!({"type": "function", "function": {
        "name": t.name, "description": t.description, "parameters": t.parameters}})
}

/// Turns the lines of a streamed body into deltas. `line` gets each complete line (without its
/// end-of-line); `end` is called once at the end of the body and reports a missing end marker.
/// Once [`complete`](LineDecoder::complete) says the reply's end marker came, nothing more of
/// the body is read: what a server sends after it is no part of the turn, and a server that
/// keeps the connection open after it must not hold the turn until the idle timeout.
pub(crate) trait LineDecoder: Send + 'static {
    /// Decodes one line.
    fn line(&mut self, line: &str, out: &mut Vec<ChatDelta>) -> Result<(), ProviderError>;
    /// The body ended.
    fn end(&mut self, out: &mut Vec<ChatDelta>) -> Result<(), ProviderError>;
    /// Whether the reply's end marker has been decoded.
    fn complete(&self) -> bool;
}

struct LineState<D, S> {
    /// The body, until the stream is over: then it is dropped at once, which closes the
    /// connection (and so stops a model server generating for nobody) even while the caller
    /// still holds the stream.
    body: Option<S>,
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline: each byte is scanned once.
    scanned: usize,
    max_line: usize,
    /// Bytes of the body read so far, and their bound.
    received: usize,
    max_total: usize,
    decoder: D,
    pending: VecDeque<Result<ChatDelta, ProviderError>>,
    done: bool,
    idle: Duration,
    deadline: Option<TurnDeadline>,
    cancel: CancellationToken,
}

/// What bounds a streamed reply's reading: the longest pause between two pieces, the turn's
/// deadline, the longest line and the most bytes.
struct StreamBounds {
    idle: Duration,
    deadline: Option<TurnDeadline>,
    max_line: usize,
    max_total: usize,
}

impl<D: LineDecoder, S> LineState<D, S> {
    fn feed(&mut self, chunk: &[u8]) {
        self.received = self.received.saturating_add(chunk.len());
        if self.received > self.max_total {
            let e = ProviderError::TooLarge {
                what: "streamed reply",
                limit: self.max_total,
            };
            self.fail(Vec::new(), e);
            return;
        }
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        let mut out = Vec::new();
        while let Some(pos) = self.buf[start + self.scanned..]
            .iter()
            .position(|b| *b == b'\n')
        {
            let end = start + self.scanned + pos;
            self.scanned = 0;
            if end - start > self.max_line {
                self.fail(out, self.too_long());
                return;
            }
            let line = &self.buf[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let text = String::from_utf8_lossy(line);
            if let Err(e) = self.decoder.line(&text, &mut out) {
                self.fail(out, e);
                return;
            }
            if self.decoder.complete() {
                // The reply is over; the rest of the body is not read.
                self.pending.extend(out.into_iter().map(Ok));
                self.buf.clear();
                self.done = true;
                return;
            }
            start = end + 1;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        if self.buf.len() > self.max_line {
            self.fail(out, self.too_long());
            return;
        }
        self.pending.extend(out.into_iter().map(Ok));
    }

    fn too_long(&self) -> ProviderError {
        ProviderError::TooLarge {
            what: "streamed line",
            limit: self.max_line,
        }
    }

    /// Ends the stream with `e` after the deltas decoded before it.
    fn fail(&mut self, out: Vec<ChatDelta>, e: ProviderError) {
        self.pending.extend(out.into_iter().map(Ok));
        self.pending.push_back(Err(e));
        self.buf.clear();
        self.done = true;
    }

    fn finish(&mut self) {
        let mut out = Vec::new();
        let mut result = Ok(());
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = rest.strip_suffix(b"\r").unwrap_or(&rest);
            result = self.decoder.line(&String::from_utf8_lossy(line), &mut out);
        }
        if result.is_ok() {
            result = self.decoder.end(&mut out);
        }
        self.pending.extend(out.into_iter().map(Ok));
        if let Err(e) = result {
            self.pending.push_back(Err(e));
        }
        self.done = true;
    }
}

/// Decodes a streamed reply body with `decoder`, one line at a time. A pause longer than the
/// idle timeout, or the turn's deadline passing, ends the stream with
/// [`ProviderError::Timeout`]; a body that breaks off ends it with
/// [`ProviderError::Truncated`]; cancellation with [`ProviderError::Cancelled`]; a line or a
/// whole body over its bound with [`ProviderError::TooLarge`].
fn lines_of<D, S, B>(
    body: S,
    decoder: D,
    bounds: StreamBounds,
    cancel: CancellationToken,
) -> ChatStream
where
    D: LineDecoder,
    S: futures::Stream<Item = Result<B, reqwest::Error>> + Send + Unpin + 'static,
    B: AsRef<[u8]>,
{
    let StreamBounds {
        idle,
        deadline,
        max_line,
        max_total,
    } = bounds;
    let state = LineState {
        body: Some(body),
        buf: Vec::new(),
        scanned: 0,
        max_line,
        received: 0,
        max_total,
        decoder,
        pending: VecDeque::new(),
        done: false,
        idle,
        deadline,
        cancel,
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        loop {
            if st.done {
                // Cancelled, failed or complete: nothing more is read, so the connection is
                // released now, not when the caller gets round to dropping the stream.
                st.body = None;
            }
            if let Some(item) = st.pending.pop_front() {
                return Some((item, st));
            }
            // The body is gone once the stream is over.
            let body = st.body.as_mut()?;
            let next = tokio::select! {
                biased;
                () = st.cancel.cancelled() => {
                    st.done = true;
                    st.pending.push_back(Err(ProviderError::Cancelled));
                    continue;
                }
                d = until(st.deadline) => {
                    st.done = true;
                    st.pending.push_back(Err(d.passed()));
                    continue;
                }
                n = tokio::time::timeout(st.idle, body.next()) => n,
            };
            match next {
                Err(_) => {
                    st.done = true;
                    st.pending.push_back(Err(ProviderError::Timeout(st.idle)));
                }
                Ok(None) => st.finish(),
                Ok(Some(Err(e))) => {
                    st.done = true;
                    st.pending.push_back(Err(ProviderError::Truncated {
                        detail: format!("the connection broke: {}", describe(e)),
                    }));
                }
                Ok(Some(Ok(chunk))) => st.feed(chunk.as_ref()),
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_double_with_jitter_within_the_cap() {
        let opts = HttpOptions::default()
            .initial_backoff(Duration::from_millis(100))
            .max_retry_wait(Duration::from_millis(700));
        let mut floor = Duration::from_millis(100);
        for d in retry_delays(&opts).take(30) {
            assert!(d >= floor.min(opts.max_retry_wait), "{d:?} < {floor:?}");
            assert!(d <= (floor * 2).min(opts.max_retry_wait), "{d:?}");
            floor = (floor * 2).min(Duration::from_millis(700));
        }
    }
    use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};

    fn headers(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(retry_after(&headers("7")), Some(Duration::from_secs(7)));
        assert_eq!(
            retry_after(&headers(" 1.5 ")),
            Some(Duration::from_millis(1500))
        );
        let later = SystemTime::now() + Duration::from_secs(120);
        let d = retry_after(&headers(&httpdate::fmt_http_date(later))).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        // A date in the past means "now".
        assert_eq!(
            retry_after(&headers("Wed, 21 Oct 2015 07:28:00 GMT")),
            Some(Duration::ZERO)
        );
        // An absurd wait, in any form, is read as the longest one taken.
        for absurd in [
            "99999999999",
            "18446744073709551615",
            "1e12",
            "Fri, 31 Dec 9999 23:59:59 GMT",
        ] {
            assert_eq!(
                retry_after(&headers(absurd)),
                Some(Duration::from_secs(86_400)),
                "{absurd}"
            );
        }
        assert_eq!(retry_after(&headers("soon")), None);
        assert_eq!(retry_after(&headers("-3")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    fn message(body: &[u8]) -> String {
        error_message(body, &UrlCredentials::default())
    }

    #[test]
    fn error_messages_are_found_in_each_shape() {
        assert_eq!(message(br#"{"error": {"message": "bad key"}}"#), "bad key");
        assert_eq!(
            message(br#"{"error": "model not found"}"#),
            "model not found"
        );
        assert_eq!(message(br#"{"message": "nope"}"#), "nope");
        assert_eq!(message(b"  plain text  "), "plain text");
        assert_eq!(message(b""), "(empty body)");
        let long = "x".repeat(1000);
        assert!(message(long.as_bytes()).len() < 320);
        // A JSON error's message is cut the same way.
        let json_long = serde_json::json!({"error": {"message": long}}).to_string();
        assert!(message(json_long.as_bytes()).len() < 320);
        assert_eq!(message(&[0xff, 0xfe]), "\u{fffd}\u{fffd}");
    }

    #[test]
    fn a_credential_at_the_cut_is_replaced_whole() {
        let key = "sk-canary-key-0001";
        let base = "http://h:1/v1";
        let c = UrlCredentials::of_urls(&[base, &crate::endpoint::join(base, "/x")], &[key]);
        // The key straddles the 300th character: cut first, its start would be shown.
        let body = format!("{}{key} refused", "x".repeat(290));
        let shown = error_message(body.as_bytes(), &c);
        assert!(!shown.contains("sk-canary"), "{shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
    }
}
