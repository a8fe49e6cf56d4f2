//! Where a provider posts, and how that place and its answers are shown: the endpoint URL
//! joined onto the configured base URL (its query kept), the URL as errors and logs name it
//! ([`redact_url`]: no user part, query or fragment), and the credentials a request carries
//! ([`UrlCredentials`]), which an error quoting a service's answer must not repeat.
//!
//! Provider errors reach applications, their logs and the model. A base URL can hold
//! credentials (`https://user:key@gateway/v1`, a gateway's `?key=`), and services echo what
//! they refuse (the key, the request line, the query), so no URL is shown unredacted and no
//! answer is quoted before every credential in it is replaced by `[redacted]`. Both are worked
//! out once per provider, when it is built, by kberg-core's rule (the one the embedders of
//! bridle-memory apply too). An answer is quoted with its control characters (a terminal's
//! escape sequences, a carriage return, bidirectional overrides) written as escapes
//! ([`quoted`]), so printing an error cannot drive a terminal or forge a log line.

use std::sync::Arc;

use kberg_agent::ProviderError;
pub(crate) use kberg_core::{UrlCredentials, redact_url};

/// `base` trimmed, and without a trailing `/` when it has no query or fragment (a `/` inside
/// a query value is part of the value).
pub(crate) fn tidy_base(base: &str) -> String {
    let base = base.trim();
    if base.contains(['?', '#']) {
        base.to_string()
    } else {
        base.trim_end_matches('/').to_string()
    }
}

/// The endpoint `path` (starting with `/`) under `base`: appended to the base's path (without
/// its trailing `/`), the base's query kept as the query (Azure OpenAI's `?api-version=`, a
/// gateway's `?key=`), its fragment dropped. A base that does not parse as a URL is joined as
/// text; sending to it then fails with an error naming it redacted.
pub(crate) fn join(base: &str, path: &str) -> String {
    let base = base.trim();
    match reqwest::Url::parse(base) {
        Ok(mut url) if !url.cannot_be_a_base() => {
            let joined = format!("{}{path}", url.path().trim_end_matches('/'));
            url.set_path(&joined);
            url.set_fragment(None);
            url.into()
        }
        _ => format!("{}{path}", base.trim_end_matches('/')),
    }
}

/// The most characters of one text of an error (a detail, a hint). Error answers' own words
/// are cut at 300 when read; this bounds what a stream quotes too (an error event, a line that
/// is not the documented shape, which may be megabytes long) with room for the sentence around
/// a quote.
const MAX_ERROR_TEXT_CHARS: usize = 1_000;

/// `text` as quoted: see [`quoted`], at most [`MAX_ERROR_TEXT_CHARS`] characters.
fn bounded(text: String) -> String {
    quoted(&text, MAX_ERROR_TEXT_CHARS)
}

/// `text` as an error may quote it: control characters escaped and cut to at most `max`
/// characters with `...` when cut ([`kberg_core::quoted`]). Quoting a quoted text changes
/// nothing.
pub(crate) use kberg_core::quoted;

/// `e` with every text in it scrubbed of `credentials`, then [`quoted`] (control characters
/// escaped, cut to a bounded length): whatever a reply said (an in-band error, a line that is
/// not the documented shape) reaches the caller without a credential, without a control
/// character that would drive a terminal or forge a log line, and without megabytes of it.
/// Scrubbed before it is cut, so no credential is left half shown at the cut.
pub(crate) fn scrub_error(credentials: &UrlCredentials, e: ProviderError) -> ProviderError {
    let s = |t: String| bounded(credentials.scrub(&t));
    match e {
        ProviderError::Unreachable { url, hint } => ProviderError::Unreachable {
            url: s(url),
            hint: s(hint),
        },
        ProviderError::ModelNotFound { model, hint } => ProviderError::ModelNotFound {
            model,
            hint: s(hint),
        },
        ProviderError::Unauthorized { status, detail } => ProviderError::Unauthorized {
            status,
            detail: s(detail),
        },
        ProviderError::RateLimited {
            attempts,
            retry_after,
            detail,
        } => ProviderError::RateLimited {
            attempts,
            retry_after,
            detail: s(detail),
        },
        ProviderError::ServerError {
            status,
            attempts,
            detail,
        } => ProviderError::ServerError {
            status,
            attempts,
            detail: s(detail),
        },
        ProviderError::Rejected { status, detail } => ProviderError::Rejected {
            status,
            detail: s(detail),
        },
        ProviderError::Malformed { detail } => ProviderError::Malformed { detail: s(detail) },
        ProviderError::Truncated { detail } => ProviderError::Truncated { detail: s(detail) },
        ProviderError::ContextTooLong {
            requested,
            limit,
            detail,
        } => ProviderError::ContextTooLong {
            requested,
            limit,
            detail: window_detail(credentials, &detail),
        },
        // The other variants hold no text from outside.
        other => other,
    }
}

/// A context-window refusal's detail, the server's words then what to do
/// ([`crate::window::Overflow::error`] joins them with "; "; no hint holds one), as
/// [`scrub_error`] quotes it: scrubbed of `credentials` as a whole, then, when it is long, the
/// words cut and never the hint. A server that quotes the whole request in its refusal would
/// otherwise push what to do past the bound.
fn window_detail(credentials: &UrlCredentials, detail: &str) -> String {
    let scrubbed = credentials.scrub(detail);
    let Some((words, hint)) = scrubbed.rsplit_once("; ") else {
        return bounded(scrubbed);
    };
    let hint = quoted(hint, MAX_ERROR_TEXT_CHARS / 2);
    // The words' own cut adds "..." (three characters), the join two.
    let room = MAX_ERROR_TEXT_CHARS - hint.chars().count() - 5;
    format!("{}; {hint}", quoted(words, room))
}

/// The URL a provider posts to, as errors and logs show it, and the credentials its requests
/// carry; worked out once, when the provider is built.
pub(crate) struct Target {
    /// The full URL posted to.
    pub url: String,
    /// `url` redacted.
    pub shown: String,
    /// What an answer quoted in an error must not repeat.
    pub credentials: Arc<UrlCredentials>,
}

impl Target {
    /// The endpoint `path` under `base`, for requests carrying the header values `secrets`.
    pub(crate) fn new(base: &str, path: &str, secrets: &[&str]) -> Self {
        let url = join(base, path);
        Self {
            shown: redact_url(&url),
            credentials: Arc::new(UrlCredentials::of_urls(&[base, &url], secrets)),
            url,
        }
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.shown)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "canary-7Hq2";

    #[test]
    fn the_path_joins_the_path_and_the_query_stays_the_query() {
        for (base, path, joined) in [
            (
                "https://r.openai.azure.com/openai/deployments/d?api-version=2024-02-01",
                "/chat/completions",
                "https://r.openai.azure.com/openai/deployments/d/chat/completions?api-version=2024-02-01",
            ),
            (
                "http://127.0.0.1:8080/v1/",
                "/chat/completions",
                "http://127.0.0.1:8080/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:11434",
                "/api/chat",
                "http://127.0.0.1:11434/api/chat",
            ),
            (
                "https://gw.example/?key=a/b#frag",
                "/v1/messages",
                "https://gw.example/v1/messages?key=a/b",
            ),
            (
                "https://u:p@gw.example/v1#frag",
                "/chat/completions",
                "https://u:p@gw.example/v1/chat/completions",
            ),
            // Not a URL: joined as text, refused when sent.
            ("not a url/", "/api/chat", "not a url/api/chat"),
        ] {
            assert_eq!(join(base, path), joined, "{base}");
        }
    }

    #[test]
    fn a_base_keeps_a_slash_inside_its_query() {
        assert_eq!(tidy_base(" http://h/v1/ "), "http://h/v1");
        assert_eq!(tidy_base("http://h/v1?key=ab/"), "http://h/v1?key=ab/");
    }

    #[test]
    fn controls_are_quoted_as_escapes_within_the_bound() {
        let hostile = "a\u{1b}[31mb\r\nc\0\u{202e}d\u{2066}e\u{2069}\tf\u{7f}\u{85}";
        let q = quoted(hostile, 1000);
        assert_eq!(
            q,
            "a\\u{1b}[31mb\\r\nc\\u{0}\\u{202e}d\\u{2066}e\\u{2069}\tf\\u{7f}\\u{85}"
        );
        assert_eq!(quoted(&q, 1000), q, "quoting twice changes nothing");
        // The cut falls between two escapes, counting them as written.
        let esc = "\u{1b}".repeat(100);
        assert_eq!(quoted(&esc, 20), format!("{}...", "\\u{1b}".repeat(3)));
        assert_eq!(quoted(&esc, 24), format!("{}...", "\\u{1b}".repeat(4)));
        assert_eq!(quoted("é€😀x", 3), "é€😀...");
        assert_eq!(quoted("é€😀", 3), "é€😀");
        assert_eq!(quoted("", 3), "");
    }

    #[test]
    fn an_error_quoting_a_credential_is_scrubbed() {
        let base = format!("http://bot:{CANARY}%2Fp@h:1/v1?api-version=2024-02-01&key={CANARY}-q");
        let target = Target::new(&base, "/chat/completions", &["sk-key-0001"]);
        assert_eq!(
            target.shown, "http://***@h:1/v1/chat/completions?***",
            "{target:?}"
        );
        let quoted = format!(
            "key sk-key-0001, user bot:{CANARY}/p, written {CANARY}%2Fp, query key={CANARY}-q"
        );
        let e = scrub_error(&target.credentials, ProviderError::malformed(quoted));
        assert!(!e.to_string().contains(CANARY), "{e}");
        assert!(!e.to_string().contains("sk-key"), "{e}");
    }

    /// A context-window refusal whose words are long (a gateway quoting the whole request in
    /// an error under a 200) keeps what to do at its end: the words are cut, not the hint,
    /// and a credential in them is scrubbed before the cut.
    #[test]
    fn a_long_context_window_refusal_keeps_its_hint() {
        let target = Target::new("http://h:1/v1", "/chat/completions", &["sk-key-0001"]);
        let hint = "shorten the conversation, or give the model a larger window";
        let words = format!(
            "maximum context length exceeded; request: {} sk-key-0001 {}",
            "x".repeat(2_000),
            "sk-key-0001 ".repeat(50)
        );
        let e = crate::window::in_band(
            &serde_json::json!({"code": "context_length_exceeded"}),
            &words,
            hint,
        )
        .unwrap();
        let e = scrub_error(&target.credentials, e);
        let ProviderError::ContextTooLong { detail, .. } = &e else {
            panic!("{e:?}");
        };
        assert!(detail.ends_with(hint), "{detail}");
        assert!(
            detail.starts_with("maximum context length exceeded; request: x"),
            "{detail}"
        );
        assert!(
            detail.chars().count() <= MAX_ERROR_TEXT_CHARS,
            "{}",
            detail.len()
        );
        assert!(!detail.contains("sk-key"), "{detail}");
        // A short one is as it was.
        let e = crate::window::in_band(
            &serde_json::json!({"code": "context_length_exceeded"}),
            "too long; sk-key-0001",
            hint,
        )
        .unwrap();
        let e = scrub_error(&target.credentials, e);
        let ProviderError::ContextTooLong { detail, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(detail, &format!("too long; [redacted]; {hint}"));
    }
}
