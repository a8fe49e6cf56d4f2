//! Where a provider posts, and how that place and its answers are shown: the endpoint URL
//! joined onto the configured base URL (its query kept), the URL as errors and logs name it
//! ([`redact_url`]: no user part, no query), and the credentials a request carries
//! ([`Credentials`]), which an error quoting a service's answer must not repeat.
//!
//! Provider errors reach applications, their logs and the model. A base URL can hold
//! credentials (`https://user:key@gateway/v1`, a gateway's `?key=`), and services echo what
//! they refuse (the key, the request line, the query), so no URL is shown unredacted and no
//! answer is quoted before every credential in it is replaced by `[redacted]`. Both are worked
//! out once per provider, when it is built.

use std::sync::Arc;

use base64::Engine as _;
use kberg_agent::ProviderError;

/// What a hidden value is shown as.
pub(crate) const REDACTED: &str = "[redacted]";

/// Credentials shorter than this are not hidden: they would match ordinary words of a message.
const MIN_HIDDEN_CHARS: usize = 4;

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

/// `url` as errors and logs show it: its user part (everything before the last `@` of the
/// authority) shown as `***@`, its query as `?***` and a fragment as `#***`. Text without a
/// scheme is read as starting with the authority, so `user:key@host/v1` is hidden too.
/// Redacting a redacted URL changes nothing.
pub(crate) fn redact_url(url: &str) -> String {
    let s = url.trim();
    let (head, rest) = match s.find("://") {
        Some(i) => s.split_at(i + 3),
        None => ("", s),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut out = String::with_capacity(s.len());
    out.push_str(head);
    match authority.rfind('@') {
        Some(at) => {
            out.push_str("***@");
            out.push_str(&authority[at + 1..]);
        }
        None => out.push_str(authority),
    }
    match tail.find(['?', '#']) {
        Some(i) => {
            out.push_str(&tail[..i]);
            out.push_str(&tail[i..i + 1]);
            out.push_str("***");
        }
        None => out.push_str(tail),
    }
    out
}

/// The credentials a provider's requests carry, as a service could quote them back; see
/// [`Credentials::new`].
#[derive(Default)]
pub(crate) struct Credentials {
    /// Longest first, so a value is never left half replaced by a shorter one inside it.
    hidden: Vec<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({} hidden)", self.hidden.len())
    }
}

impl Credentials {
    /// The credentials of requests to `url` (the endpoint under `base`, as configured) with
    /// the header values `secrets` (an API key): each secret; the URL's user, password and
    /// whole user part and its query and each query value, as written and percent-decoded;
    /// and the `Authorization: Basic` value the HTTP client makes of a user part (base64 of
    /// `user:password`, decoded). Each also as it reads inside a JSON string. Values shorter
    /// than four characters are left.
    pub(crate) fn new(base: &str, url: &str, secrets: &[&str]) -> Self {
        let mut found: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        for text in [base, url] {
            found.extend(written_parts(text));
        }
        if let Ok(u) = reqwest::Url::parse(url) {
            if !u.username().is_empty() || u.password().is_some() {
                // As reqwest sends it: both halves percent-decoded, `user:` when there is no
                // password.
                let user = percent_decoded(u.username());
                let pass = u.password().map(percent_decoded).unwrap_or_default();
                found.push(
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}")),
                );
                found.push(user);
                found.push(pass);
            }
            found.extend(u.query_pairs().map(|(_, v)| v.into_owned()));
        }
        let mut hidden = Vec::with_capacity(found.len() * 2);
        for value in found {
            // A JSON error body escapes `"`, `\` and control characters, and some servers `/`.
            if let Ok(quoted) = serde_json::to_string(&value) {
                let escaped = &quoted[1..quoted.len() - 1];
                if escaped != value {
                    hidden.push(escaped.to_string());
                }
                if escaped.contains('/') {
                    hidden.push(escaped.replace('/', "\\/"));
                }
            }
            hidden.push(value);
        }
        hidden.retain(|h| h.chars().count() >= MIN_HIDDEN_CHARS);
        hidden.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        hidden.dedup();
        Self { hidden }
    }

    /// `text` with every credential replaced by `[redacted]`. Scrubbing scrubbed text changes
    /// nothing (a `[redacted]` already there is kept as it is).
    pub(crate) fn scrub(&self, text: &str) -> String {
        if !self.hidden.iter().any(|h| text.contains(h.as_str())) {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        'scan: while let Some(c) = rest.chars().next() {
            if rest.starts_with(REDACTED) {
                out.push_str(REDACTED);
                rest = &rest[REDACTED.len()..];
                continue;
            }
            for h in &self.hidden {
                if rest.starts_with(h.as_str()) {
                    out.push_str(REDACTED);
                    rest = &rest[h.len()..];
                    continue 'scan;
                }
            }
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
        out
    }

    /// `e` with every text in it scrubbed: whatever a reply said (an in-band error, a line that
    /// is not the documented shape) reaches the caller without a credential.
    pub(crate) fn scrub_error(&self, e: ProviderError) -> ProviderError {
        let s = |t: String| self.scrub(&t);
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
            // The other variants hold no text from outside.
            other => other,
        }
    }
}

/// The user part of `text` (whole and each `:`-separated half) and its query (whole, and each
/// value, or each item without `=`), as written; text without a scheme is read as starting
/// with the authority.
fn written_parts(text: &str) -> Vec<String> {
    let s = text.trim();
    let rest = s.find("://").map_or(s, |i| &s[i + 3..]);
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let mut parts = Vec::new();
    if let Some(at) = rest[..authority_end].rfind('@') {
        let user = &rest[..at];
        parts.push(user);
        parts.extend(user.split(':'));
    }
    let tail = &rest[authority_end..];
    if let Some(q) = tail.find('?') {
        let query = &tail[q + 1..];
        let query = query.split('#').next().unwrap_or(query);
        parts.push(query);
        parts.extend(
            query
                .split('&')
                .map(|item| item.split_once('=').map_or(item, |(_, v)| v)),
        );
    }
    parts.into_iter().map(str::to_string).collect()
}

/// `s` with `%XX` escapes decoded (lossily, as the HTTP client decodes a URL's user part).
fn percent_decoded(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The URL a provider posts to, as errors and logs show it, and the credentials its requests
/// carry; worked out once, when the provider is built.
pub(crate) struct Target {
    /// The full URL posted to.
    pub url: String,
    /// `url` redacted.
    pub shown: String,
    /// What an answer quoted in an error must not repeat.
    pub credentials: Arc<Credentials>,
}

impl Target {
    /// The endpoint `path` under `base`, for requests carrying the header values `secrets`.
    pub(crate) fn new(base: &str, path: &str, secrets: &[&str]) -> Self {
        let url = join(base, path);
        Self {
            shown: redact_url(&url),
            credentials: Arc::new(Credentials::new(base, &url, secrets)),
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
    fn the_user_part_the_query_and_the_fragment_are_hidden() {
        for (url, shown) in [
            (
                format!("https://user:{CANARY}@h.example/v1?key={CANARY}"),
                "https://***@h.example/v1?***",
            ),
            (
                format!("https://{CANARY}@h.example:8443"),
                "https://***@h.example:8443",
            ),
            (
                format!("https://me@corp:{CANARY}@h.example/v1"),
                "https://***@h.example/v1",
            ),
            (
                format!("https://h.example/v1#token={CANARY}"),
                "https://h.example/v1#***",
            ),
            (format!("user:{CANARY}@h:1/v1"), "***@h:1/v1"),
            (
                "http://127.0.0.1:11434".to_string(),
                "http://127.0.0.1:11434",
            ),
            ("https://h/x@y".to_string(), "https://h/x@y"),
        ] {
            assert_eq!(redact_url(&url), shown, "{url}");
            assert_eq!(redact_url(shown), shown, "redacting twice changes nothing");
        }
    }

    #[test]
    fn every_form_of_a_credential_is_scrubbed() {
        let base = format!("http://bot:{CANARY}%2Fp@h:1/v1?api-version=2024-02-01&key={CANARY}-q");
        let url = join(&base, "/chat/completions");
        let c = Credentials::new(&base, &url, &["sk-key-0001", "abc"]);
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("bot:{CANARY}/p"));
        let quoted = format!(
            "key sk-key-0001, basic {basic}, user bot:{CANARY}/p, written {CANARY}%2Fp, \
             json {CANARY}\\/p, query key={CANARY}-q, short abc"
        );
        let scrubbed = c.scrub(&quoted);
        assert!(!scrubbed.contains(CANARY), "{scrubbed}");
        assert!(!scrubbed.contains("sk-key"), "{scrubbed}");
        assert!(!scrubbed.contains(&basic), "{scrubbed}");
        // Too short to hide without hiding words.
        assert!(scrubbed.contains("short abc"), "{scrubbed}");
        assert_eq!(
            c.scrub(&scrubbed),
            scrubbed,
            "scrubbing twice changes nothing"
        );
        assert_eq!(c.scrub("nothing here"), "nothing here");
        let e = c.scrub_error(ProviderError::malformed(quoted));
        assert!(!e.to_string().contains(CANARY), "{e}");
    }

    #[test]
    fn a_redacted_marker_is_kept_whatever_is_hidden() {
        let c = Credentials::new("http://h?t=dacted", "http://h/x?t=dacted", &[]);
        assert_eq!(c.scrub("[redacted] dacted"), "[redacted] [redacted]");
    }
}
