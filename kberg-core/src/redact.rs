//! Showing a URL without the credentials it may carry, and hiding those credentials in text
//! that quotes them.
//!
//! A URL can hold credentials: a user part (`https://user:key@gateway/v1`, a private
//! repository's `https://bot:token@git.example/team/app.git`), a query (`?key=`,
//! `?private_token=`) or a fragment. Wherever such a URL is shown (an error, a log line, a
//! listing, a model's context) it goes through [`redact_url`], or [`redact_source`] for text that
//! may also be a local path or an scp-like git source. And since services echo what they refuse
//! (the key, the request line, the query), whatever is quoted back about a request to it (an
//! error answer, git's output) goes through [`UrlCredentials::scrub`] first. The rules live here
//! once, for the model providers, the embedders and example repositories alike; this module
//! parses URLs as text (kberg-core has no HTTP crate) and never fails on what it is given.

use base64::Engine as _;

use crate::digest::REDACTED;

/// Credentials shorter than this are not hidden: they would match ordinary words of a message.
const MIN_HIDDEN_CHARS: usize = 4;

/// The pieces of a URL's text that hold credentials, split as [`redact_url`] reads them.
struct Split<'a> {
    /// The scheme and `://`, or nothing.
    head: &'a str,
    /// Everything before the last `@` (see [`Split::of`]).
    user: Option<&'a str>,
    /// The authority after the user part, and the path.
    host_and_path: &'a str,
    /// The first `?` or `#` after the authority and everything after it.
    hidden_tail: &'a str,
}

impl<'a> Split<'a> {
    /// `text` trimmed and split; `None` when it has no scheme and `schemeless` is false (a
    /// path or an scp-like source, which holds nothing to hide).
    ///
    /// The user part runs to the last `@` of the text, not of the authority: a token pasted
    /// into a URL unencoded may hold a `/`, `?` or `#` (`https://bot:ab/cd@host/x`), and an
    /// authority ended at the first of them would show the token's tail. An `@` in a path, a
    /// query or a fragment cannot be told from one ending such a user part, so the text
    /// before it is hidden too: more than needed, never less.
    fn of(text: &'a str, schemeless: bool) -> Option<Self> {
        let (head, rest) = Self::head_of(text, schemeless)?;
        let (user, after_user) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let hidden_at = after_user.find(['?', '#']).unwrap_or(after_user.len());
        let (host_and_path, hidden_tail) = after_user.split_at(hidden_at);
        Some(Self {
            head,
            user,
            host_and_path,
            hidden_tail,
        })
    }

    /// `text` split as a URL parser reads it, the authority ending at the first `/`, `?` or
    /// `#`: how an HTTP client or git may split a user part that holds one of them, and so
    /// which values it may send and a service quote back. Only [`UrlCredentials`] uses it,
    /// to hide those values as well; [`of`](Self::of) decides what is shown.
    fn as_parsed(text: &'a str, schemeless: bool) -> Option<Self> {
        let (head, rest) = Self::head_of(text, schemeless)?;
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (user, host) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let hidden_at = tail.find(['?', '#']).unwrap_or(tail.len());
        let path_end = authority_end + hidden_at;
        Some(Self {
            head,
            user,
            host_and_path: &rest[authority_end - host.len()..path_end],
            hidden_tail: &rest[path_end..],
        })
    }

    /// The scheme and `://` (or nothing, when `schemeless`) and the rest of trimmed `text`.
    ///
    /// A `://` counts as the head's only after a scheme (a letter, then letters, digits, `+`,
    /// `-` or `.`): text without a scheme may hold one further on, in a password
    /// (`bot:ab://cd@host`), a query (`user:key@host/cb?next=https://x`) or a fragment, and
    /// everything up to it would be shown as the head. Such text is read from its start, as
    /// the authority, also a source's (`/srv/x?u=https://bot:key@host` hides up to its last
    /// `@`: more than needed, never less). Text with no `://` at all has a head only when
    /// `schemeless`; a source's is a path or an scp-like source, shown as it is.
    fn head_of(text: &'a str, schemeless: bool) -> Option<(&'a str, &'a str)> {
        let s = text.trim();
        match s.find("://") {
            Some(i) if is_scheme(&s[..i]) => Some(s.split_at(i + 3)),
            Some(_) => Some(("", s)),
            None if schemeless => Some(("", s)),
            None => None,
        }
    }

    /// The values of `text` read both ways ([`of`](Self::of) and
    /// [`as_parsed`](Self::as_parsed)).
    fn values_both_ways(text: &'a str, schemeless: bool) -> Vec<String> {
        let mut found = Vec::new();
        for split in [
            Self::of(text, schemeless),
            Self::as_parsed(text, schemeless),
        ]
        .into_iter()
        .flatten()
        {
            found.extend(values_of(&split));
        }
        found
    }

    /// The query: after a `?` that comes before any `#`, up to the fragment.
    fn query(&self) -> Option<&'a str> {
        let q = self.hidden_tail.strip_prefix('?')?;
        Some(q.split('#').next().unwrap_or(q))
    }

    /// The text as it may be shown.
    fn redacted(&self) -> String {
        let mut out = String::with_capacity(self.head.len() + self.host_and_path.len() + 8);
        out.push_str(self.head);
        if self.user.is_some() {
            out.push_str("***@");
        }
        out.push_str(self.host_and_path);
        if let Some(mark) = self.hidden_tail.chars().next() {
            out.push(mark);
            out.push_str("***");
        }
        out
    }
}

/// `url` as errors and logs show it: its user part (everything before the last `@`, where a
/// key or token goes) as `***@`, its query as `?***` and a fragment as `#***`. A token pasted
/// unencoded may hold a `/`, so the user part is not taken to end at the first `/`; an `@` in
/// the path or query hides what comes before it too (more than needed, never less). Text
/// without a scheme is read as starting with the authority, so `user:key@host/v1` is hidden
/// too; use [`redact_source`] for text that may be a path or an scp-like git source. The result
/// is trimmed, and redacting a redacted URL changes nothing.
///
/// ```
/// use kberg_core::redact_url;
///
/// assert_eq!(
///     redact_url("https://user:s3cret@gw.example/v1?key=s3cret"),
///     "https://***@gw.example/v1?***"
/// );
/// assert_eq!(redact_url("https://h.example/cb#token=s3cret"), "https://h.example/cb#***");
/// assert_eq!(redact_url("user:s3cret@h.example:8080/v1"), "***@h.example:8080/v1");
/// assert_eq!(redact_url("https://bot:ab/cd@h.example/r.git"), "https://***@h.example/r.git");
/// assert_eq!(redact_url("http://127.0.0.1:11434"), "http://127.0.0.1:11434");
/// ```
pub fn redact_url(url: &str) -> String {
    match Split::of(url, true) {
        Some(split) => split.redacted(),
        None => url.trim().to_string(),
    }
}

/// `source` (a repository or document source: a URL, an scp-like `git@host:team/app.git` or a
/// local path) as it may be shown: a URL with a scheme as [`redact_url`] shows it, any other
/// text trimmed and otherwise unchanged, since an scp-like source's user is an SSH login name
/// rather than a secret and a path has no authority.
///
/// ```
/// use kberg_core::redact_source;
///
/// assert_eq!(
///     redact_source("https://x-access-token:s3cret@git.example/team/app.git"),
///     "https://***@git.example/team/app.git"
/// );
/// assert_eq!(redact_source("git@git.example:team/app.git"), "git@git.example:team/app.git");
/// assert_eq!(redact_source("/srv/repos/app"), "/srv/repos/app");
/// ```
pub fn redact_source(source: &str) -> String {
    match Split::of(source, false) {
        Some(split) => split.redacted(),
        None => source.trim().to_string(),
    }
}

/// The credentials a request to a URL carries, as a service (or git) could quote them back,
/// and [`scrub`](Self::scrub), which hides them in text. Worked out once, when the client is
/// built; its `Debug` shows only how many values it hides.
///
/// The values: each extra secret (an API key sent in a header); the URL's user part (whole,
/// and its user and password, each as written and percent-decoded); its query and each query
/// value (as written and decoded); the `Authorization: Basic` value an HTTP client makes of the
/// user part (base64 of the decoded `user:password`); and each of those as it reads inside a
/// JSON string (`"`, `\` and control characters escaped, and `/` as `\/`). Values shorter than
/// four characters are left out, as they would match ordinary words.
///
/// ```
/// use kberg_core::UrlCredentials;
///
/// let credentials =
///     UrlCredentials::new("https://bot:s3cret%2Fpass@gw.example/v1?key=q-s3cret", &["sk-abc123"]);
/// assert_eq!(
///     credentials.scrub("refused sk-abc123 for bot:s3cret/pass at /v1?key=q-s3cret"),
///     "refused [redacted] for [redacted] at /v1?[redacted]"
/// );
/// // Scrubbing scrubbed text changes nothing.
/// assert_eq!(credentials.scrub("[redacted] ok"), "[redacted] ok");
/// assert!(UrlCredentials::new("http://127.0.0.1:11434/api", &[]).is_empty());
/// ```
#[derive(Clone, Default)]
pub struct UrlCredentials {
    /// Longest first, so a value is never left half replaced by a shorter one inside it.
    hidden: Vec<String>,
}

impl std::fmt::Debug for UrlCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UrlCredentials({} hidden)", self.hidden.len())
    }
}

impl UrlCredentials {
    /// The credentials of requests to `url`, which carry the extra values `secrets` (an API
    /// key). Text without a scheme is read as starting with the authority, as [`redact_url`]
    /// reads it.
    pub fn new(url: &str, secrets: &[&str]) -> Self {
        Self::of_urls(&[url], secrets)
    }

    /// [`new`](Self::new) for several texts of one URL, such as a base URL as configured and
    /// the endpoint URL under it as an HTTP client writes it (which may escape its user part or
    /// query differently): the values of each.
    pub fn of_urls(urls: &[&str], secrets: &[&str]) -> Self {
        let mut found: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        for url in urls {
            found.extend(Split::values_both_ways(url, true));
        }
        Self::hiding(found)
    }

    /// The credentials a clone or fetch of `source` carries, read as [`redact_source`] reads
    /// it: those of a URL with a scheme, none of a path or an scp-like source.
    pub fn of_source(source: &str) -> Self {
        Self::hiding(Split::values_both_ways(source, false))
    }

    /// The values hidden, longest first (for a caller that merges them into a list of its
    /// own, such as an aggregator's per-upstream redactions).
    pub fn values(&self) -> &[String] {
        &self.hidden
    }

    /// Whether there is nothing to hide.
    pub fn is_empty(&self) -> bool {
        self.hidden.is_empty()
    }

    /// `text` with every credential replaced by `[redacted]`, in one pass, longest value
    /// first. Scrubbing scrubbed text changes nothing: a `[redacted]` already there is kept as
    /// it is, whatever the credentials.
    pub fn scrub(&self, text: &str) -> String {
        if !self.hidden.iter().any(|h| text.contains(h.as_str())) {
            return text.to_string();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        'scan: while let Some(c) = rest.chars().next() {
            if let Some(after) = rest.strip_prefix(REDACTED) {
                out.push_str(REDACTED);
                rest = after;
                continue;
            }
            for h in &self.hidden {
                if let Some(after) = rest.strip_prefix(h.as_str()) {
                    out.push_str(REDACTED);
                    rest = after;
                    continue 'scan;
                }
            }
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
        out
    }

    /// The values `found`, each also as it reads inside a JSON string, without the short
    /// ones, longest first.
    fn hiding(found: Vec<String>) -> Self {
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
}

/// The credential values in a split URL, before short ones are dropped: the user part and
/// its halves, the Basic value made of them, the query and its values, as written and decoded.
fn values_of(split: &Split<'_>) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(user_part) = split.user {
        found.push(user_part.to_string());
        // An HTTP client splits at the first `:` and decodes both halves; `user:` when there is
        // no password.
        let (user, pass) = user_part.split_once(':').unwrap_or((user_part, ""));
        let (user_decoded, pass_decoded) = (percent_decoded(user), percent_decoded(pass));
        if user_part.contains(':') {
            found.push(format!("{user_decoded}:{pass_decoded}"));
        }
        if !user_decoded.is_empty() || !pass_decoded.is_empty() {
            found.push(
                base64::engine::general_purpose::STANDARD
                    .encode(format!("{user_decoded}:{pass_decoded}")),
            );
        }
        found.extend([
            user.to_string(),
            pass.to_string(),
            user_decoded,
            pass_decoded,
        ]);
    }
    if let Some(query) = split.query() {
        found.push(query.to_string());
        for item in query.split('&') {
            let value = item.split_once('=').map_or(item, |(_, v)| v);
            found.push(value.to_string());
            found.push(percent_decoded(value));
            // As a form decodes it (`+` a space), which is how a server reads a query.
            found.push(percent_decoded(&value.replace('+', " ")));
        }
    }
    found
}

/// Whether `s` is a URL scheme (RFC 3986: a letter, then letters, digits, `+`, `-` or `.`).
fn is_scheme(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
}

/// `s` with `%XX` escapes decoded (lossily, as an HTTP client decodes a URL's user part).
fn percent_decoded(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "canary-7Hq2";

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
            (
                format!("https://h.example/v1#a?key={CANARY}"),
                "https://h.example/v1#***",
            ),
            (format!("user:{CANARY}@h:1/v1"), "***@h:1/v1"),
            (
                "http://127.0.0.1:11434".to_string(),
                "http://127.0.0.1:11434",
            ),
            (format!("  http://u:{CANARY}@h:8080  "), "http://***@h:8080"),
        ] {
            assert_eq!(redact_url(&url), shown, "{url}");
            assert_eq!(redact_url(shown), shown, "redacting twice changes nothing");
            if url.contains("://") {
                assert_eq!(redact_source(&url), shown, "a URL is a URL either way");
            }
        }
    }

    /// URLs whose user part holds what a URL may not (an unencoded `/`, `?`, `#` or `@`, as a
    /// token pasted into a URL often does), and an `@` past the host, with how they are shown.
    /// The same table is in bridle-rules' `redact` tests, whose copy of the rule must agree.
    const UNENCODED_USER_PARTS: &[(&str, &str)] = &[
        (
            "https://bot:ab/cd-canary@h.example/repo.git",
            "https://***@h.example/repo.git",
        ),
        ("https://bot:canary/x@h.example", "https://***@h.example"),
        (
            "https://canary/tok=@h.example:8443/r?q=1",
            "https://***@h.example:8443/r?***",
        ),
        ("https://bot:can?ary@h.example/r", "https://***@h.example/r"),
        (
            "https://bot:can#ary@h.example/r#top",
            "https://***@h.example/r#***",
        ),
        (
            "https://me@corp:ab/cd@h.example/r",
            "https://***@h.example/r",
        ),
        // Which `@` ends a user part with a `/` in it cannot be told from one in the path or
        // the query, so everything up to the last `@` is hidden: more than needed, never less.
        ("https://h.example/x@y", "https://***@y"),
        (
            "https://h.example/x?mail=a@b.example",
            "https://***@b.example",
        ),
        ("https://h.example/x#a@b", "https://***@b"),
    ];

    #[test]
    fn a_user_part_with_a_slash_or_a_query_mark_is_hidden_whole() {
        for (url, shown) in UNENCODED_USER_PARTS {
            assert_eq!(redact_url(url), *shown, "{url}");
            assert_eq!(redact_source(url), *shown, "{url}");
            assert_eq!(redact_url(shown), *shown, "redacting twice changes nothing");
        }
        assert_eq!(redact_url("bot:ab/cd-canary@h:1/v1"), "***@h:1/v1");
        // What git or a server quotes back of such a URL is scrubbed too, the user part read
        // either way.
        let c = UrlCredentials::of_source("https://bot:ab/cd-canary@h.example/r.git");
        let said = c.scrub("fatal: 'https://bot:ab/cd-canary@h.example/r.git' ab/cd-canary");
        assert!(!said.contains("cd-canary"), "{said}");
        let c = UrlCredentials::new("https://h.example/x?token=canary@7Hq2", &[]);
        let said = c.scrub("refused token=canary@7Hq2");
        assert!(!said.contains("canary@7Hq2"), "{said}");
    }

    #[test]
    fn a_later_scheme_mark_does_not_show_what_comes_before_it() {
        // Text without a scheme that holds a `://` further on: in a password, a query value
        // or a fragment. What comes before it is not a scheme, and must not be shown as one.
        for (url, shown) in [
            (
                format!("user:{CANARY}@h.example/cb?next=https://x.example"),
                "***@h.example/cb?***",
            ),
            (format!("bot:{CANARY}://cd@h.example/x"), "***@h.example/x"),
            (
                format!("h.example/cb#{CANARY}https://x.example"),
                "h.example/cb#***",
            ),
            (
                format!("h.example/cb?key={CANARY}&next=https://x.example"),
                "h.example/cb?***",
            ),
        ] {
            assert_eq!(redact_url(&url), shown, "{url}");
            assert_eq!(redact_url(shown), shown, "redacting twice changes nothing");
            // A fragment is never sent, so it is not among the values a service could quote.
            if !url.contains('#') {
                let said = UrlCredentials::new(&url, &[]).scrub(&format!("refused {url}"));
                assert!(!said.contains(CANARY), "{url}: {said}");
            }
        }
        // A scheme is still a scheme, whatever case.
        assert_eq!(
            redact_url(&format!("HTTPS://u:{CANARY}@h.example/x")),
            "HTTPS://***@h.example/x"
        );
        assert_eq!(
            redact_url(&format!("git+ssh://u:{CANARY}@h.example/x")),
            "git+ssh://***@h.example/x"
        );
        // A source with a `://` after no scheme is read from its start too: nothing before
        // its last `@` is shown, a password holding `://` included.
        for (source, shown) in [
            (
                format!("/srv/x?u=https://bot:{CANARY}@h.example/r"),
                "***@h.example/r",
            ),
            (format!("bot:{CANARY}://cd@h.example/x"), "***@h.example/x"),
            (format!("bot:ab://{CANARY}@h.example/x"), "***@h.example/x"),
        ] {
            assert_eq!(redact_source(&source), shown, "{source}");
            let said = UrlCredentials::new(&source, &[]).scrub(&format!("refused {source}"));
            assert!(!said.contains(CANARY), "{source}: {said}");
        }
        assert_eq!(redact_source("/srv/a://b"), "/srv/a://b");
    }

    #[test]
    fn a_source_without_a_scheme_is_shown_as_it_is() {
        for (source, shown) in [
            (
                "https://bot:s3cret-token@git.example/x.git",
                "https://***@git.example/x.git",
            ),
            (
                "https://s3cret-token@git.example/x.git",
                "https://***@git.example/x.git",
            ),
            (
                "https://git.example/x.git?private_token=s3cret-token",
                "https://git.example/x.git?***",
            ),
            ("  https://git.example/x.git  ", "https://git.example/x.git"),
            ("git@git.example:team/x.git", "git@git.example:team/x.git"),
            (
                "deploy@git.example:team/x.git",
                "deploy@git.example:team/x.git",
            ),
            ("/srv/repos/x", "/srv/repos/x"),
            ("", ""),
            ("https://", "https://"),
            ("https://@", "https://***@"),
        ] {
            assert_eq!(redact_source(source), shown, "{source}");
        }
        assert!(UrlCredentials::of_source("deploy@git.example:team/x.git").is_empty());
        assert!(UrlCredentials::of_source("/srv/repos/x").is_empty());
        assert_eq!(
            redact_url("deploy@git.example:team/x.git"),
            "***@git.example:team/x.git"
        );
    }

    #[test]
    fn every_form_of_a_credential_is_scrubbed() {
        let base = format!("http://bot:{CANARY}%2Fp@h:1/v1?api-version=2024-02-01&key={CANARY}-q");
        let url =
            format!("http://bot:{CANARY}%2Fp@h:1/v1/chat?api-version=2024-02-01&key={CANARY}-q");
        let c = UrlCredentials::of_urls(&[&base, &url], &["sk-key-0001", "abc"]);
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
        assert!(!format!("{c:?}").contains(CANARY));
    }

    #[test]
    fn query_values_are_hidden_as_written_and_as_a_form_decodes_them() {
        let c = UrlCredentials::new("https://h/x?token=a+b%21cd&flag", &[]);
        assert_eq!(
            c.scrub("a+b%21cd a b!cd a+b!cd flag"),
            "[redacted] [redacted] [redacted] [redacted]"
        );
        // A user part without a password is sent as `user:`.
        let c = UrlCredentials::new("https://tok-en@h/x", &[]);
        let basic = base64::engine::general_purpose::STANDARD.encode("tok-en:");
        assert_eq!(c.scrub(&basic), REDACTED);
        assert!(UrlCredentials::new("https://:@h/x", &[]).is_empty());
    }

    #[test]
    fn a_source_s_credentials_are_those_of_its_url() {
        let source = "https://bot:s3cret-token@git.example/x.git?private_token=q-s3cret";
        let said = "fatal: unable to access 'https://bot:s3cret-token@git.example/x.git/?private_token=q-s3cret': 403";
        let scrubbed = UrlCredentials::of_source(source).scrub(said);
        assert!(!scrubbed.contains("s3cret"), "{scrubbed}");
        assert!(scrubbed.contains("git.example/x.git"), "{scrubbed}");
    }

    #[test]
    fn a_redacted_marker_is_kept_whatever_is_hidden() {
        let c = UrlCredentials::of_urls(&["http://h?t=dacted", "http://h/x?t=dacted"], &[]);
        assert_eq!(c.scrub("[redacted] dacted"), "[redacted] [redacted]");
    }
}
