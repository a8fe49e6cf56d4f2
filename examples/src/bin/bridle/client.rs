//! The command line as a client of a running gateway's admin API.
//!
//! With `--url` (or `$BRIDLE_ADMIN_URL`), `bridle agents`, `bridle secrets`, `bridle scope`,
//! `bridle rules queue|approve|reject`, `bridle memory` and `bridle audit` send their changes
//! (and their reads) to the gateway's admin API instead of writing the data directory, so the
//! running gateway applies each change at once and records it in its audit log as the admin
//! the credential names, through the `cli` surface. The credential is read from
//! `--admin-token-file`, else `$BRIDLE_ADMIN_TOKEN_FILE`, else `$BRIDLE_ADMIN_TOKEN`; it is
//! never taken from a command-line argument (it would show in the process list).
//!
//! A gateway that takes the connection and never answers must not hold the command for ever:
//! connecting waits at most [`CONNECT_TIMEOUT`], and each wait for the answer's next bytes at
//! most `--timeout` seconds (default $BRIDLE_ADMIN_TIMEOUT, else [`DEFAULT_TIMEOUT`]: ten
//! minutes, longer than a vendor-feed run over many sources at 30 s each; an audit export
//! streams, so it only needs its bytes to keep coming). Past it the command fails saying so.

use std::path::PathBuf;
use std::time::Duration;

use bridle_gateway::admin::SURFACE_HEADER;
use serde_json::Value;

use crate::BoxError;

/// Where the admin API is and how to authenticate, from the command line and environment.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct Remote {
    /// The admin API of a running gateway (`http://127.0.0.1:7879/admin/api/v1`, or just the
    /// listener, `http://127.0.0.1:7879`; default $BRIDLE_ADMIN_URL): changes go through it, so
    /// the gateway applies and records them at once. Without it the data directory is changed
    /// directly (offline).
    #[arg(long, global = true, help_heading = "Through a running gateway")]
    pub url: Option<String>,
    /// A file holding the admin credential (default $BRIDLE_ADMIN_TOKEN_FILE, else the
    /// credential itself in $BRIDLE_ADMIN_TOKEN).
    #[arg(long, global = true, help_heading = "Through a running gateway")]
    pub admin_token_file: Option<PathBuf>,
    /// How long to wait, in seconds, for the admin API's answer (for its next bytes, once it
    /// streams) before giving up (default $BRIDLE_ADMIN_TIMEOUT, else 600).
    #[arg(
        long,
        global = true,
        value_name = "SECS",
        help_heading = "Through a running gateway"
    )]
    pub timeout: Option<u64>,
}

/// How long connecting to the admin API may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the admin API's answer may keep the command waiting without a byte, unless
/// `--timeout` or $BRIDLE_ADMIN_TIMEOUT says otherwise: ten minutes.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

impl Remote {
    /// The client, when a URL was given.
    pub(crate) fn client(&self) -> Result<Option<AdminClient>, BoxError> {
        let url = self
            .url
            .clone()
            .or_else(|| std::env::var("BRIDLE_ADMIN_URL").ok())
            .filter(|u| !u.trim().is_empty());
        let Some(url) = url else {
            return Ok(None);
        };
        let file = self
            .admin_token_file
            .clone()
            .or_else(|| std::env::var_os("BRIDLE_ADMIN_TOKEN_FILE").map(PathBuf::from));
        let token = match &file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .trim()
                .to_string(),
            None => std::env::var("BRIDLE_ADMIN_TOKEN")
                .map(|t| t.trim().to_string())
                .map_err(|_| {
                    "the admin API needs a credential: --admin-token-file FILE, or $BRIDLE_ADMIN_TOKEN_FILE / $BRIDLE_ADMIN_TOKEN"
                })?,
        };
        if token.is_empty() {
            return Err("the admin credential is empty".into());
        }
        Ok(Some(AdminClient::new(&url, token, self.timeout()?)?))
    }

    /// `--timeout`, else $BRIDLE_ADMIN_TIMEOUT, else [`DEFAULT_TIMEOUT`].
    fn timeout(&self) -> Result<Duration, BoxError> {
        answer_timeout(self.timeout, std::env::var("BRIDLE_ADMIN_TIMEOUT").ok())
    }
}

/// A small blocking client of the admin API.
pub(crate) struct AdminClient {
    base: String,
    token: String,
    http: reqwest::Client,
    rt: tokio::runtime::Runtime,
    timeout: Duration,
}

impl AdminClient {
    /// A client of the admin API at `url` whose answers may keep it waiting at most `timeout`
    /// between bytes.
    pub(crate) fn new(url: &str, token: String, timeout: Duration) -> Result<Self, BoxError> {
        Ok(Self {
            base: api_base(url),
            token,
            http: reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .read_timeout(timeout)
                .build()?,
            timeout,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
        })
    }

    /// `GET path`.
    pub(crate) fn get(&self, path: &str) -> Result<Value, BoxError> {
        self.send(reqwest::Method::GET, path, None)
    }

    /// `POST path` with an optional JSON body.
    pub(crate) fn post(&self, path: &str, body: Option<Value>) -> Result<Value, BoxError> {
        self.send(reqwest::Method::POST, path, body)
    }

    /// Every item of a paged list. A next cursor the server already gave ends the listing with
    /// an error: following it would ask for the same pages for ever.
    pub(crate) fn all(&self, path: &str) -> Result<Vec<Value>, BoxError> {
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        let mut seen = std::collections::HashSet::new();
        loop {
            let url = match &cursor {
                Some(c) => format!("{path}{sep}limit=500&cursor={c}"),
                None => format!("{path}{sep}limit=500"),
            };
            let page = self.get(&url)?;
            if let Some(list) = page["items"].as_array() {
                items.extend(list.iter().cloned());
            }
            match page["next_cursor"].as_str() {
                Some(c) if !seen.insert(c.to_string()) => {
                    let at = format!("{}{}", self.base, path.split('?').next().unwrap_or(path));
                    return Err(format!(
                        "the admin API at {} repeated a page's cursor, so its list would never end; is something between this command and the gateway answering from a cache?",
                        bridle_rules::redact_url(&at)
                    )
                    .into());
                }
                Some(c) => cursor = Some(c.to_string()),
                None => return Ok(items),
            }
        }
    }

    /// `GET path` answered with JSON Lines (the audit export); an answer of another type (a
    /// web page at a wrong --url) is an error.
    pub(crate) fn json_lines(&self, path: &str) -> Result<String, BoxError> {
        let (url, req) = self.request(reqwest::Method::GET, path, None)?;
        self.rt.block_on(async {
            let resp = checked(&url, req.send().await, self.timeout).await?;
            let content_type = content_type(&resp);
            if !content_type.starts_with(bridle_gateway::admin::audit_log::JSONL) {
                return Err(not_the_api(
                    &url,
                    &format!("something that is not JSON Lines ({content_type})"),
                )
                .into());
            }
            resp.text().await.map_err(|e| self.cut_short(&url, e))
        })
    }

    /// `POST path` answered with Server-Sent Events: `on_event(name, data)` for each event
    /// until it returns `false` or the stream ends (an error when it ends before that).
    pub(crate) fn events(
        &self,
        path: &str,
        mut on_event: impl FnMut(&str, Value) -> Result<bool, BoxError>,
    ) -> Result<(), BoxError> {
        use futures::StreamExt;
        let (url, req) = self.request(reqwest::Method::POST, path, None)?;
        self.rt.block_on(async {
            let resp = checked(&url, req.send().await, self.timeout).await?;
            let chunks = futures::stream::unfold(resp, |mut resp| async move {
                match resp.chunk().await {
                    Ok(Some(bytes)) => Some((Ok(bytes), resp)),
                    Ok(None) => None,
                    Err(e) => Some((Err(e), resp)),
                }
            });
            let mut events = std::pin::pin!(sse_stream::SseStream::from_bytes_stream(chunks));
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| format!("the event stream from {url} broke: {e}"))?;
                let (Some(name), Some(data)) = (event.event.as_deref(), event.data.as_deref())
                else {
                    continue; // keep-alive comments
                };
                let data: Value = serde_json::from_str(data).unwrap_or(Value::Null);
                if !on_event(name, data)? {
                    return Ok(());
                }
            }
            Err(format!("the event stream from {url} ended before its last event").into())
        })
    }

    fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(String, reqwest::RequestBuilder), BoxError> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method, &url)
            .bearer_auth(&self.token)
            .header(SURFACE_HEADER, "cli");
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&b)?);
        }
        Ok((url, req))
    }

    fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, BoxError> {
        let (url, req) = self.request(method, path, body)?;
        self.rt.block_on(async {
            let resp = checked(&url, req.send().await, self.timeout).await?;
            let content_type = content_type(&resp);
            let bytes = resp.bytes().await.map_err(|e| self.cut_short(&url, e))?;
            // Every answer of the admin API is JSON: anything else (a proxy's page, another
            // service at a wrong --url) must not pass for an empty list or a change made.
            serde_json::from_slice(&bytes).map_err(|_| {
                not_the_api(
                    &url,
                    &format!("something that is not JSON ({content_type})"),
                )
                .into()
            })
        })
    }
}

impl AdminClient {
    /// The error for an answer whose body stopped coming: in words for a timeout, with the URL
    /// shown without its user part or query either way.
    fn cut_short(&self, url: &str, e: reqwest::Error) -> BoxError {
        unreachable("the admin API", url, e, &waited(self.timeout)).into()
    }
}

/// The answer timeout from `--timeout` (`flag`), else $BRIDLE_ADMIN_TIMEOUT (`env`), else
/// [`DEFAULT_TIMEOUT`]; a value that is not a whole number of seconds, or zero (it would fail
/// every request), is refused naming where it came from.
fn answer_timeout(flag: Option<u64>, env: Option<String>) -> Result<Duration, BoxError> {
    let secs = match (flag, env) {
        (Some(secs), _) => secs,
        (None, Some(v)) if !v.trim().is_empty() => v.trim().parse::<u64>().map_err(|_| {
            format!(
                "$BRIDLE_ADMIN_TIMEOUT is `{}`, not a number of seconds",
                v.trim().escape_debug()
            )
        })?,
        _ => return Ok(DEFAULT_TIMEOUT),
    };
    if secs == 0 {
        return Err("the admin API timeout must be at least 1 second".into());
    }
    Ok(Duration::from_secs(secs))
}

/// What a timeout waiting for the admin API's answer says.
fn waited(timeout: Duration) -> String {
    format!(
        "{} s (--timeout SECS or $BRIDLE_ADMIN_TIMEOUT waits longer)",
        timeout.as_secs()
    )
}

/// The error for an answer the admin API would not give (`what`: a success that is not JSON,
/// or JSON Lines for an export; a refusal without its problem document), shown with the URL
/// without its user part or query. Most often --url names the MCP listener, on another port.
fn not_the_api(url: &str, what: &str) -> String {
    let at = url.split_once('?').map_or(url, |(at, _)| at);
    format!(
        "{} answered {what}, so it is not the admin API: is --url the admin listener (http://HOST:PORT; `bridle serve` prints it as \"admin API on ...\"; the MCP endpoint listens on another port), and is the gateway behind any proxy running?",
        bridle_rules::redact_url(at)
    )
}

/// Why `what` at `url` gave no answer, in words, with the URL shown without a user part or
/// query (the HTTP client's own text repeats the whole URL); `waited` is what a timeout waiting
/// for the answer says (how long, and how to wait longer where that can be set).
pub(crate) fn unreachable(what: &str, url: &str, e: reqwest::Error, waited: &str) -> String {
    let why = if e.is_timeout() && e.is_connect() {
        "no connection in time; is the address right?".to_string()
    } else if e.is_connect() {
        "nothing listens there; is the gateway running?".to_string()
    } else if e.is_timeout() {
        format!("no answer within {waited}")
    } else {
        e.without_url().to_string()
    };
    // The query is the request's own (paging), not where the gateway is: left out.
    let at = url.split_once('?').map_or(url, |(at, _)| at);
    format!(
        "{what} at {} cannot be reached: {why}",
        bridle_rules::redact_url(at)
    )
}

/// The answer when it is a success; otherwise the API's problem (status, code and detail) as
/// the error, or that the API could not be reached.
async fn checked(
    url: &str,
    sent: Result<reqwest::Response, reqwest::Error>,
    timeout: Duration,
) -> Result<reqwest::Response, BoxError> {
    let resp = sent.map_err(|e| unreachable("the admin API", url, e, &waited(timeout)))?;
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let bytes = resp.bytes().await?;
    // Every refusal of the admin API is a problem document with a `code`: an error without one
    // came from something else at --url (the MCP listener, a proxy), not from the API.
    let is_problem = serde_json::from_slice::<Value>(&bytes)
        .is_ok_and(|v| v.get("code").is_some_and(Value::is_string));
    if !is_problem {
        return Err(not_the_api(url, &status.to_string()).into());
    }
    Err(refusal(status.as_u16(), &bytes).into())
}

/// The sentence for a refusal of the admin API: its status, code and detail, then each of its
/// problems (a document's, with their lines) on a line of its own. A problem's field and
/// message are written as [`crate::printable`] writes a line, so one cannot start a line of
/// its own.
fn refusal(status: u16, body: &[u8]) -> String {
    let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut out = format!(
        "the admin API refused ({status} {}): {}",
        value["code"].as_str().unwrap_or("?"),
        value["detail"].as_str().unwrap_or("no details")
    );
    for problem in value["errors"].as_array().into_iter().flatten() {
        out.push_str("\n  ");
        match (problem["line"].as_u64(), problem["column"].as_u64()) {
            (Some(line), Some(column)) => out.push_str(&format!("line {line}, column {column}: ")),
            (Some(line), None) => out.push_str(&format!("line {line}: ")),
            _ => {}
        }
        if let Some(field) = problem["field"].as_str().filter(|f| !f.is_empty()) {
            out.push_str(&crate::printable(field));
            out.push_str(": ");
        }
        out.push_str(&crate::printable(
            problem["message"].as_str().unwrap_or("no details"),
        ));
    }
    out
}

/// A path segment, percent-encoded (names are plain, but say so rather than assume).
pub(crate) fn seg(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The admin API's base for `url`: as given, or with the API's own path added when `url` names
/// only the listener (`http://127.0.0.1:7879` or `.../`). A URL with any other path is kept,
/// for a gateway behind a reverse proxy that mounts the API elsewhere.
fn api_base(url: &str) -> String {
    let url = url.trim().trim_end_matches('/');
    let bare = url
        .split_once("://")
        .is_some_and(|(_, rest)| !rest.contains('/'));
    if bare {
        format!("{url}/admin/api/v1")
    } else {
        url.to_string()
    }
}

/// A response's content type as sent, or `no content type`, for saying what came instead of
/// the API's answer.
fn content_type(resp: &reqwest::Response) -> String {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no content type")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::{AdminClient, DEFAULT_TIMEOUT, answer_timeout, api_base, refusal};
    use std::time::Duration;

    /// Before, the client had no timeout: a gateway that took the connection and never
    /// answered held the command for ever.
    #[test]
    fn an_admin_api_that_never_answers_ends_in_a_timeout_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        // Accepts and holds the connection, reading nothing and answering nothing, until the
        // client gives up and closes it.
        std::thread::spawn(move || {
            if let Ok((mut conn, _)) = listener.accept() {
                let mut sink = Vec::new();
                let _ = std::io::Read::read_to_end(&mut conn, &mut sink);
            }
        });
        let client = AdminClient::new(&url, "t".repeat(32), std::time::Duration::from_millis(200))
            .expect("client");
        let e = client.get("/agents").expect_err("no answer").to_string();
        assert!(e.contains("no answer within"), "{e}");
        assert!(e.contains("--timeout"), "{e}");
    }

    /// Before, only the detail was printed: a document with several problems said "the
    /// document is invalid (2 problems)" and not which.
    #[test]
    fn a_refusal_lists_each_problem_on_a_line_of_its_own() {
        let body = serde_json::json!({
            "code": "stored_document_invalid",
            "detail": "the stored document of project `demo` does not load (invalid_document)",
            "errors": [
                {"code": "invalid_id", "message": "invalid guardrail id `A\nerror: forged\u{1b}[2J`",
                 "field": "guardrails[1].id", "line": 19},
                {"code": "parse_error", "message": "unclosed bracket", "line": 3, "column": 9},
                {"code": "x", "message": "no place"},
            ],
        });
        let text = refusal(409, body.to_string().as_bytes());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "the admin API refused (409 stored_document_invalid): the stored document of \
                 project `demo` does not load (invalid_document)",
                "  line 19: guardrails[1].id: invalid guardrail id `A\\nerror: forged\\u{1b}[2J`",
                "  line 3, column 9: unclosed bracket",
                "  no place",
            ]
        );
        // A body that is not a problem still says what it can.
        assert_eq!(
            refusal(502, b"<html>"),
            "the admin API refused (502 ?): no details"
        );
    }

    #[test]
    fn the_answer_timeout_comes_from_the_flag_then_the_environment() {
        assert_eq!(answer_timeout(None, None).unwrap(), DEFAULT_TIMEOUT);
        assert_eq!(
            answer_timeout(None, Some(" ".into())).unwrap(),
            DEFAULT_TIMEOUT
        );
        assert_eq!(
            answer_timeout(None, Some("30".into())).unwrap(),
            Duration::from_secs(30)
        );
        assert_eq!(
            answer_timeout(Some(5), Some("30".into())).unwrap(),
            Duration::from_secs(5)
        );
        let e = answer_timeout(None, Some("ten\nminutes".into())).unwrap_err();
        assert!(
            e.to_string()
                .contains("`ten\\nminutes`, not a number of seconds"),
            "{e}"
        );
        for zero in [
            answer_timeout(Some(0), None),
            answer_timeout(None, Some("0".into())),
        ] {
            assert!(zero.unwrap_err().to_string().contains("at least 1 second"));
        }
    }

    #[test]
    fn a_listener_url_gets_the_api_path_and_any_other_path_is_kept() {
        for given in [
            "http://127.0.0.1:7879",
            "http://127.0.0.1:7879/",
            " http://127.0.0.1:7879/admin/api/v1/ ",
        ] {
            assert_eq!(api_base(given), "http://127.0.0.1:7879/admin/api/v1");
        }
        assert_eq!(
            api_base("https://ops.example/bridle/admin/api/v1"),
            "https://ops.example/bridle/admin/api/v1"
        );
        assert_eq!(
            api_base("https://ops.example/bridle"),
            "https://ops.example/bridle"
        );
    }
}
