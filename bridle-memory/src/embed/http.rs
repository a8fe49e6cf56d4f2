//! The HTTP embedders: OpenAI-compatible `/v1/embeddings` and Ollama's `/api/embed`.
//!
//! Both are small JSON-over-HTTP clients sharing one request helper. The model's dimension is
//! either configured or learned by embedding one probe text at connect time, so a wrong model
//! name is reported when the gateway starts, not at the first search. A server that is down
//! then ([`passing`]) fails a command line at once; a gateway opens memory without it and
//! connects it later (`MemoryService::open_lazily`).
//!
//! Errors reach the model (a memory tool's refusal), so they name the endpoint as
//! [`redact_url`] shows it, never its user part, query or fragment, and the HTTP client's error
//! text without the URL it appends; neither `Debug` shows the API key. An error answer is
//! quoted with every credential the request carried replaced (the key, the URL's user part and
//! query values, the `Basic` value made of the user part: kberg-core's [`UrlCredentials`], the
//! rule the model providers apply too), since services echo what they refuse. The endpoint's
//! path is appended to the base URL's path, so a base with a query (`?api-version=`) keeps it.
//! An answer is read to a bound and its vectors straight out of its text ([`answer`]), so what
//! it costs in memory is about the size of the vectors asked for.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::answer::{self, Shape};
use super::{Embedder, check_vectors};
use crate::error::{MemoryError, Result};
use crate::scrub;
use kberg_core::{UrlCredentials, redact_url};

/// Where and how to reach an HTTP embedding service. Its `Debug` shows the URL without its
/// user part, query and fragment, and whether there is an API key, never the key.
#[derive(Clone)]
pub struct HttpEmbedderConfig {
    /// The server's base URL, e.g. `http://127.0.0.1:1234/v1` (LM Studio) or
    /// `http://127.0.0.1:11434` (Ollama). A trailing `/v1` is optional for OpenAI-compatible
    /// servers.
    pub base_url: String,
    /// The model name the server knows.
    pub model: String,
    /// A bearer token, for hosted services.
    pub api_key: Option<String>,
    /// The model's dimension (1 to 65,536); `None` probes it at connect time.
    pub dimension: Option<usize>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// How long opening a connection may take ([`DEFAULT_CONNECT_TIMEOUT`] unless set): a
    /// server that drops the connection's first packet or never accepts it fails the request
    /// then, rather than holding it for the whole `timeout`.
    pub connect_timeout: Duration,
    /// The model's input window in tokens (default 512); chunks and queries are cut to fit.
    /// Without the model's tokenizer, tokens are estimated at one per three bytes.
    pub max_input_tokens: usize,
}

impl std::fmt::Debug for HttpEmbedderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpEmbedderConfig")
            .field("base_url", &redact_url(&self.base_url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("dimension", &self.dimension)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_input_tokens", &self.max_input_tokens)
            .finish()
    }
}

impl HttpEmbedderConfig {
    /// A config for `model` at `base_url`, no key, dimension probed, 60 s timeout and
    /// [`DEFAULT_CONNECT_TIMEOUT`] to connect.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            dimension: None,
            timeout: Duration::from_secs(60),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_input_tokens: super::DEFAULT_MAX_INPUT_TOKENS,
        }
    }

    /// Sets the bearer token.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Declares the dimension (skips the probe).
    pub fn dimension(mut self, d: usize) -> Self {
        self.dimension = Some(d);
        self
    }
}

/// How long opening a connection to an embedding server may take by default. The request
/// timeout (60 s) is sized for a model that embeds a large batch slowly; a connection to a
/// local or hosted server opens in milliseconds, so a server that has not accepted one after
/// a few seconds (a firewall dropping the packets, a host away, a listener that never accepts)
/// is not going to: without a bound of its own, each new connection would wait out the whole
/// request timeout before the failure is known.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    url: String,
    /// `url` as errors name it.
    shown: String,
    model: String,
    api_key: Option<String>,
    /// What an error answer must not quote: the key, the URL's user part and query values,
    /// and the Basic credential the HTTP client makes of the user part.
    credentials: UrlCredentials,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.shown)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .finish_non_exhaustive()
    }
}

impl Client {
    fn new(config: &HttpEmbedderConfig, url: String) -> Result<Self> {
        if config.model.trim().is_empty() {
            return Err(MemoryError::InvalidInput(
                "an embedding model name is required".into(),
            ));
        }
        let shown = redact_url(&url);
        let http = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.connect_timeout)
            .redirect(redirect_policy())
            .build()
            .map_err(|e| MemoryError::EmbedderUnavailable {
                endpoint: shown.clone(),
                reason: format!("{NO_CLIENT}: {}", describe(e)),
            })?;
        Ok(Self {
            http,
            // The base URL as configured and the endpoint as the HTTP client writes it (which
            // may escape the user part or query differently).
            credentials: scrub::credentials(&[&config.base_url, &url], config.api_key.as_deref()),
            url,
            shown,
            model: config.model.clone(),
            api_key: config.api_key.clone(),
        })
    }

    /// Posts `body` and gives the answer's text (at most [`MAX_ANSWER_BYTES`]), or the error
    /// an error answer makes.
    async fn post(&self, body: Value) -> Result<Vec<u8>> {
        let unavailable = |reason: String| MemoryError::EmbedderUnavailable {
            endpoint: self.shown.clone(),
            reason,
        };
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(k) = &self.api_key {
            req = req.bearer_auth(k);
        }
        let mut resp = req.send().await.map_err(|e| unavailable(describe(e)))?;
        let status = resp.status();
        if status.is_redirection() {
            return Err(unavailable(self.not_followed(&resp)));
        }
        // An answer is read to a bound: a whole batch's vectors fit with room to spare, and an
        // error needs no more than its first lines.
        let limit = if status.is_success() {
            MAX_ANSWER_BYTES
        } else {
            MAX_ERROR_BYTES
        };
        let mut bytes = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| unavailable(describe(e)))? {
            if bytes.len() + chunk.len() > limit {
                if status.is_success() {
                    return Err(MemoryError::EmbedderProtocol(format!(
                        "the answer is larger than {limit} bytes"
                    )));
                }
                bytes.extend_from_slice(&chunk[..limit - bytes.len()]);
                break;
            }
            bytes.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            // A service may quote the key it refused, the request's URL with the user part
            // and query a credential can sit in, or the Basic credential made of that user part.
            // Scrubbed before it is cut, so a credential at the cut is replaced whole.
            let snippet = scrub::quote(
                &self.credentials,
                &String::from_utf8_lossy(&bytes),
                MAX_QUOTED_CHARS,
            );
            return Err(unavailable(format!("HTTP {status}: {snippet}")));
        }
        Ok(bytes)
    }
}

impl Client {
    /// Why a redirect answer was not followed ([`redirect_policy`]), naming where it pointed
    /// as [`redact_url`] shows it, and with the request's credentials replaced.
    fn not_followed(&self, resp: &reqwest::Response) -> String {
        let to = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| resp.url().join(l).ok());
        let why = match to {
            Some(to) if same_origin(resp.url(), &to) => {
                format!("kept redirecting the request (more than {MAX_REDIRECTS} times)")
            }
            Some(to) => format!(
                "redirected the request to {}, outside the base URL's origin; it was not \
                 followed, so neither the texts nor the key went there. If that address is \
                 right, make it the base URL",
                redact_url(to.as_str())
            ),
            None => "answered a redirect without a usable location".to_string(),
        };
        self.credentials
            .scrub(&format!("HTTP {}: {why}", resp.status()))
    }
}

/// The most redirects one request follows.
const MAX_REDIRECTS: usize = 10;

/// Whether `to` is in the origin (scheme, host and port) of `from`.
fn same_origin(from: &reqwest::Url, to: &reqwest::Url) -> bool {
    from.scheme() == to.scheme()
        && from.host_str() == to.host_str()
        && from.port_or_known_default() == to.port_or_known_default()
}

/// Follows a redirect only within the origin of the URL asked first. The HTTP client drops the
/// `Authorization` header on a redirect to another origin, but a 307 or 308 sends the body
/// along: the texts being embedded (stored memories, files of a private repository) would go
/// to whatever a base URL redirects to (a moved server, a proxy's login page, an `https`
/// address sent to `http`). A redirect not followed is the error [`Client::not_followed`] says.
fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        // The URLs asked so far: the first, then each redirect followed.
        let followed = attempt.previous().len().saturating_sub(1);
        let within = attempt
            .previous()
            .first()
            .is_some_and(|first| same_origin(first, attempt.url()));
        if within && followed < MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// The largest embedding answer read (64 MiB: a batch of 64 texts of 4,096 dimensions is
/// about 5 MiB of JSON).
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// How much of an error answer is read.
const MAX_ERROR_BYTES: usize = 64 << 10;

/// How much of an error answer an error quotes, in characters.
const MAX_QUOTED_CHARS: usize = 300;

/// What went wrong, without the URL the HTTP client's error text appends (with its query).
fn describe(e: reqwest::Error) -> String {
    if e.is_connect() && e.is_timeout() {
        "connect timed out: the server did not accept the connection in time".into()
    } else if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        "connection refused or unreachable".into()
    } else {
        e.without_url().to_string()
    }
}

/// Whether a failed connect may succeed later unchanged: the server was not reached (refused,
/// unreachable, timed out, the connection dropped) or answered 408, 429 or a 5xx (starting,
/// loading the model, overloaded). Any other answer (401, 403, 404 for a wrong model or path,
/// a redirect not followed), an answer that is not embeddings, or a configuration refused is
/// lasting: waiting will not fix it, so a gateway's start fails on it, naming it.
pub(crate) fn passing(e: &MemoryError) -> bool {
    let MemoryError::EmbedderUnavailable { reason, .. } = e else {
        return false;
    };
    // `Client::post` names an answer's status as `HTTP 503 Service Unavailable: ...`, and a
    // failure before any answer by what `describe` says of it.
    let Some(status) = reason.strip_prefix("HTTP ") else {
        return !reason.starts_with(NO_CLIENT);
    };
    let code: String = status.chars().take_while(char::is_ascii_digit).collect();
    match code.parse::<u16>() {
        Ok(code) => code == 408 || code == 429 || (500..600).contains(&code),
        Err(_) => false,
    }
}

/// How an HTTP client that could not be built is named (a lasting failure).
const NO_CLIENT: &str = "cannot build an HTTP client";

/// The largest dimension an embedder may have: far past any embedding model's (they have a few
/// hundred to a few thousand), and small enough that one vector is a quarter of a MiB. A probe
/// answered with a longer vector is refused rather than taken as the model's dimension: every
/// vector stored, searched and read afterwards would be that long.
pub(crate) const MAX_DIMENSION: usize = 1 << 16;

/// Learns the dimension by embedding one short text, unless it was configured. `embed` is
/// given the most components a vector may have ([`MAX_DIMENSION`]), past which it refuses it
/// unread.
async fn resolve_dimension<
    E: Fn(Vec<String>, usize) -> F,
    F: Future<Output = Result<Vec<Vec<f32>>>>,
>(
    configured: Option<usize>,
    embed: E,
) -> Result<usize> {
    if let Some(d) = configured {
        return if d == 0 || d > MAX_DIMENSION {
            Err(MemoryError::InvalidInput(format!(
                "an embedding dimension must be 1 to {MAX_DIMENSION}"
            )))
        } else {
            Ok(d)
        };
    }
    let v = match embed(vec!["dimension probe".to_string()], MAX_DIMENSION).await {
        Err(MemoryError::DimensionMismatch { actual, .. }) => {
            return Err(MemoryError::EmbedderProtocol(format!(
                "the probe's vector has {actual} components, more than the {MAX_DIMENSION} an \
                 embedding model may have"
            )));
        }
        other => other?,
    };
    match v.first().map(Vec::len) {
        Some(d) if d > 0 => Ok(d),
        _ => Err(MemoryError::EmbedderProtocol(
            "the probe returned no vector".into(),
        )),
    }
}

/// Which wire format a server speaks.
#[derive(Debug, Clone, Copy)]
enum Wire {
    OpenAi,
    Ollama,
}

/// A connected HTTP embedder of either wire: the client and the model's dimension.
#[derive(Debug, Clone)]
struct Connected {
    client: Client,
    wire: Wire,
    dimension: usize,
    max_input_tokens: usize,
}

impl Connected {
    async fn connect(config: HttpEmbedderConfig, url: String, wire: Wire) -> Result<Self> {
        let client = Client::new(&config, url)?;
        let dimension =
            resolve_dimension(config.dimension, |t, max| raw(&client, wire, t, Some(max))).await?;
        Ok(Self {
            client,
            wire,
            dimension,
            max_input_tokens: config.max_input_tokens.max(1),
        })
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let v = raw(
            &self.client,
            self.wire,
            texts.to_vec(),
            Some(self.dimension),
        )
        .await?;
        check_vectors(self.dimension, texts.len(), &v)?;
        Ok(v)
    }
}

/// The vectors the server answers for `texts`, read straight from the answer's text
/// ([`answer::read`]: no more than one vector per text is held, and none longer than
/// `dimension` once it is known).
async fn raw(
    client: &Client,
    wire: Wire,
    texts: Vec<String>,
    dimension: Option<usize>,
) -> Result<Vec<Vec<f32>>> {
    let n = texts.len();
    let (body, shape) = match wire {
        Wire::OpenAi => (
            json!({"model": client.model, "input": texts, "encoding_format": "float"}),
            Shape::OpenAi,
        ),
        Wire::Ollama => (
            json!({"model": client.model, "input": texts}),
            Shape::Ollama,
        ),
    };
    let bytes = client.post(body).await?;
    answer::read(shape, &bytes, n, dimension)
}

/// An OpenAI-compatible `/v1/embeddings` client (LM Studio, llama.cpp, vLLM, hosted APIs).
#[derive(Debug, Clone)]
pub struct OpenAiEmbedder(Connected);

impl OpenAiEmbedder {
    /// Connects: builds the client and resolves the dimension (probing the server if it was
    /// not configured).
    pub async fn connect(config: HttpEmbedderConfig) -> Result<Self> {
        let url = endpoint(&config.base_url, |base| {
            if base.ends_with("/v1") {
                format!("{base}/embeddings")
            } else {
                format!("{base}/v1/embeddings")
            }
        });
        Ok(Self(Connected::connect(config, url, Wire::OpenAi).await?))
    }
}

/// The endpoint under `base`: its path (without a trailing `/`) made into the endpoint's by
/// `path`, its query kept (a hosted service's `?api-version=`), its fragment dropped. A base
/// that does not parse is joined as text; the request then fails naming it redacted.
fn endpoint(base: &str, path: impl Fn(&str) -> String) -> String {
    match reqwest::Url::parse(base.trim()) {
        Ok(mut u) => {
            let p = path(u.path().trim_end_matches('/'));
            u.set_path(&p);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => path(base.trim().trim_end_matches('/')),
    }
}

/// An Ollama `/api/embed` client.
#[derive(Debug, Clone)]
pub struct OllamaEmbedder(Connected);

impl OllamaEmbedder {
    /// Connects: builds the client and resolves the dimension.
    pub async fn connect(config: HttpEmbedderConfig) -> Result<Self> {
        let url = endpoint(&config.base_url, |base| format!("{base}/api/embed"));
        Ok(Self(Connected::connect(config, url, Wire::Ollama).await?))
    }
}

/// Both public embedders are the same [`Connected`] behind a name per wire.
macro_rules! delegate_embedder {
    ($($t:ty),*) => {$(
        #[async_trait]
        impl Embedder for $t {
            fn dimension(&self) -> usize {
                self.0.dimension
            }

            fn model(&self) -> &str {
                &self.0.client.model
            }

            async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
                self.0.embed(texts).await
            }

            fn max_input_tokens(&self) -> usize {
                self.0.max_input_tokens
            }
        }
    )*};
}

delegate_embedder!(OpenAiEmbedder, OllamaEmbedder);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_server_away_or_failing_passes() {
        let unavailable = |reason: &str| MemoryError::EmbedderUnavailable {
            endpoint: "http://e".into(),
            reason: reason.into(),
        };
        for r in [
            "connection refused or unreachable",
            "timed out",
            "error sending request",
            "HTTP 503 Service Unavailable: loading",
            "HTTP 500 Internal Server Error: ",
            "HTTP 429 Too Many Requests: slow down",
            "HTTP 408 Request Timeout: ",
        ] {
            assert!(passing(&unavailable(r)), "{r}");
        }
        for r in [
            "HTTP 401 Unauthorized: bad key",
            "HTTP 404 Not Found: model \"m\" not found",
            "HTTP 307 Temporary Redirect: redirected the request to http://other",
            "cannot build an HTTP client: no TLS",
        ] {
            assert!(!passing(&unavailable(r)), "{r}");
        }
        assert!(!passing(&MemoryError::EmbedderProtocol("not JSON".into())));
        assert!(!passing(&MemoryError::InvalidInput("no model".into())));
    }

    #[test]
    fn debug_hides_the_api_key_and_the_url_credentials() {
        let config =
            HttpEmbedderConfig::new("https://bot:s3cret-pass@embed.example/v1?k=s3cret-q", "m")
                .api_key("s3cret-key");
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("embed.example/v1"), "{shown}");
        assert!(shown.contains("api_key: Some(\"[redacted]\")"), "{shown}");
        assert!(
            format!("{:?}", HttpEmbedderConfig::new("http://h", "m")).contains("api_key: None")
        );
        let client =
            Client::new(&config, format!("{}/embeddings", config.base_url)).expect("a client");
        let shown = format!("{client:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}
