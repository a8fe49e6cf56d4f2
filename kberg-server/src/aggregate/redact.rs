//! One upstream's credentials, kept out of what the aggregator passes on from it.
//!
//! The aggregator puts credentials into its upstreams (a child's environment, an endpoint's
//! headers and URL), and an upstream may say them back: a server that prints its configuration
//! at start, one that logs its backend's error quoting the rejected token, a compromised one.
//! [`Redactions`] is the one list of values hidden from everything an upstream sends on through
//! the aggregator, each occurrence replaced by [`REDACTED`]:
//!
//! - a child's stderr lines, as logged (see `stderr`);
//! - what is relayed to the aggregator's clients while a forwarded call runs: log messages
//!   (`notifications/message`, every string of its `data` and its `logger`), progress messages,
//!   and the params of the upstream's requests of its client (`sampling/createMessage`,
//!   `elicitation/create`, and a task's `input_required` questions), every string and object
//!   key at any depth. Numbers, booleans and the structure are left as they were.
//!
//! What is hidden depends on the transport. A child process: the values configured with
//! [`UpstreamConfig::stderr_redact`](super::UpstreamConfig::stderr_redact) (whatever their
//! length), else every value of its configured environment (`env`, not what it inherits) of at
//! least [`MIN_REDACTED_LEN`] bytes. A Streamable HTTP endpoint: every header value and each of
//! its whitespace-separated words after an authentication scheme (the token of
//! `Bearer <token>`, not `Bearer`, an ordinary word), and the URL's user name,
//! password, query and query values, as parsed and as written; each part of at least four
//! characters (a shorter one would match ordinary words); and besides them the values given
//! with `stderr_redact` (whatever their length), forms of the credential no header shows
//! whole (a header template that glues the token to other text). A value of several lines (a PEM key)
//! is hidden whole and line by line, each trimmed line of at least [`MIN_REDACTED_LEN`] bytes,
//! since stderr is read a line at a time and an upstream may quote one line of it.
//!
//! A value is hidden also where the upstream quotes it encoded, whole or only some of its
//! characters: percent-encoded in either case (an HTTP library's error naming the URL that
//! carried the key), JSON-escaped (`\/`, `\u002b`: a backend's error body relayed as text) or
//! form-encoded (`+` for a space), each character written either way ([`redact_encoded`],
//! which the gateway's scrub of upstream answers uses too). A value of letters, digits and
//! `-._~` alone, which no encoder changes, is searched for as it is.
//!
//! The list is built once per upstream (its configuration does not change between
//! connections), not per message; an empty list costs one length check per message. Every
//! occurrence of every value is looked for in the original text and overlapping or adjacent
//! ones are replaced as one, so a value that contains another (or overlaps it) is replaced
//! whole, never left half shown.
//!
//! Error messages and refusals that quote an upstream (the client library's error, the
//! upstream's own message, a failed task's message, the reason a connection failed), and the
//! `code` of an error result a [`ForwardHook`](super::ForwardHook) is told, are redacted with
//! the same list and the same marker: one policy for everything an upstream says.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use super::config::{UpstreamConfig, UpstreamTransport};

/// What a redacted credential becomes, in stderr lines, relayed messages and errors.
pub const REDACTED: &str = "[redacted]";

/// Environment values (and lines of a value of several lines) shorter than this are not
/// redacted: they are switches (`1`, `true`, `debug`), not credentials, and replacing them would
/// mangle every line.
pub const MIN_REDACTED_LEN: usize = 6;

/// The shortest part of an HTTP upstream's headers and URL that is redacted, in characters.
const MIN_HTTP_PART_CHARS: usize = 4;

/// The values hidden from what one upstream sends on (see the module docs), longest first.
/// Cheap to clone: the stderr reader and the client relay share one list.
#[derive(Clone, Default)]
pub(super) struct Redactions(Arc<RedactionList>);

/// The list behind [`Redactions`] and whether the upstream was heard saying a value of it.
#[derive(Default)]
struct RedactionList {
    values: Box<[String]>,
    said: AtomicBool,
}

impl std::fmt::Debug for Redactions {
    // The values are the credentials: only their number is shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactions({} values)", self.0.values.len())
    }
}

impl Redactions {
    /// The list for the upstream `config` describes.
    pub(super) fn of(config: &UpstreamConfig) -> Self {
        match &config.transport {
            UpstreamTransport::Stdio { env, .. } => {
                Self::stdio(config.stderr_redact.as_deref(), env)
            }
            // The values the app names too: forms of the credential that no header shows
            // whole (a template that glued the token to other text, the token as stored).
            UpstreamTransport::Http { url, headers } => {
                let mut values = http_values(url, headers);
                values.extend(config.stderr_redact.iter().flatten().cloned());
                Self::new(values)
            }
        }
    }

    /// A child's list: the `configured` values, else those of `env` of at least
    /// [`MIN_REDACTED_LEN`] bytes.
    pub(super) fn stdio(configured: Option<&[String]>, env: &[(String, String)]) -> Self {
        let whole: Vec<String> = match configured {
            Some(values) => values.to_vec(),
            None => env
                .iter()
                .map(|(_, v)| v)
                .filter(|v| v.len() >= MIN_REDACTED_LEN)
                .cloned()
                .collect(),
        };
        Self::new(whole)
    }

    /// `whole` values, each of several lines also as its lines; longest first, without empty
    /// values (which would match everywhere) or duplicates.
    fn new(whole: Vec<String>) -> Self {
        let mut values: Vec<String> = Vec::with_capacity(whole.len());
        for value in whole {
            if value.contains(['\n', '\r']) {
                values.extend(
                    value
                        .split(['\n', '\r'])
                        .map(str::trim)
                        .filter(|line| line.len() >= MIN_REDACTED_LEN)
                        .map(str::to_string),
                );
            }
            if !value.trim().is_empty() {
                values.push(value);
            }
        }
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Self(Arc::new(RedactionList {
            values: values.into(),
            said: AtomicBool::new(false),
        }))
    }

    /// Notes that the upstream said one of its credentials, in `what` (its stderr, a relayed
    /// log message, ...), never the value: the first time at WARN, since an operator should
    /// learn that an upstream echoes its credential (a chatty server, or a compromised one),
    /// then at DEBUG, so a server that says it in every line does not flood the log.
    pub(super) fn said(&self, namespace: &str, what: &str) {
        if self.0.said.swap(true, Ordering::Relaxed) {
            tracing::debug!(
                namespace,
                what,
                "an upstream's credential was redacted from what it said"
            );
        } else {
            tracing::warn!(
                namespace,
                what,
                "upstream `{namespace}` said one of its own credentials ({what}); it was redacted, and later ones are noted at DEBUG"
            );
        }
    }

    /// The values, longest first.
    pub(super) fn values(&self) -> &[String] {
        &self.0.values
    }

    /// `text` with every occurrence of a value, as it is or in an encoded form (see
    /// [`redact_encoded`]), replaced by [`REDACTED`]; borrowed when there was none.
    pub(super) fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        redact_encoded(text, &self.0.values)
    }

    /// Redacts `s` in place; returns whether anything was replaced.
    pub(super) fn string(&self, s: &mut String) -> bool {
        match self.text(s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(redacted) => {
                *s = redacted;
                true
            }
        }
    }

    /// Redacts every string and object key in `v`, at any depth; returns whether anything was
    /// replaced. Nothing else changes, except that two keys redacted to the same text become
    /// one (the later one stays).
    pub(super) fn value(&self, v: &mut Value) -> bool {
        if self.0.values.is_empty() {
            return false;
        }
        match v {
            Value::String(s) => self.string(s),
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |hit, item| self.value(item) | hit),
            Value::Object(map) => {
                let mut hit = map
                    .values_mut()
                    .fold(false, |hit, item| self.value(item) | hit);
                // A key is text the client shows too (an upstream may key a map by its
                // token). Only a map with such a key is rebuilt.
                if map.keys().any(|k| matches!(self.text(k), Cow::Owned(_))) {
                    let entries = std::mem::take(map);
                    for (k, item) in entries {
                        map.insert(self.text(&k).into_owned(), item);
                    }
                    hit = true;
                }
                hit
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }
}

/// `text` with every occurrence of each of `values` replaced by [`REDACTED`], the value as it
/// is or written the way encoders write it, each of its bytes either way: percent-encoded
/// (`%2F`, `%2f`), JSON-escaped (`\/` for `/`, `\u00XX` for an ASCII byte) or form-encoded
/// (`+` for a space). An upstream quotes a credential so when it names a URL that carries it
/// (an HTTP library's error), relays a backend's JSON body as text, or encodes only some of
/// its characters (a user-part encoder leaves `+` and `=`, a path's leaves `/`): whoever reads
/// any of these forms has the value.
///
/// A value of letters, digits and `-._~` alone (no encoder changes it) is searched for as it
/// is, by the fast substring search. The others are found by a scan of the text's bytes
/// when the text holds a byte that starts an escape (`%`, `\`, or `+` for a value with a
/// space); text without one can hold them only as they are, and is searched the fast way
/// too. Every occurrence is found in the original text, at every position (so
/// overlapping ones count), and overlapping or adjacent occurrences, of one value or of
/// several, are replaced as one, so no part of a value is left shown beside the marker. Cuts
/// fall only on character boundaries. Empty values are ignored (they would match
/// everywhere). Borrowed when nothing was found.
pub fn redact_encoded<'a, S: AsRef<str>>(text: &'a str, values: &[S]) -> Cow<'a, str> {
    let hay = text.as_bytes();
    let mut hits: Vec<(usize, usize)> = Vec::new();
    for value in values {
        let value = value.as_ref();
        if value.is_empty() {
            continue;
        }
        if encodable(value) && may_hold_escape(hay, value.as_bytes()) {
            encoded_hits(
                hay,
                value.as_bytes(),
                |i| text.is_char_boundary(i),
                &mut hits,
            );
        } else {
            // A value is whole characters, so where it is found as it is falls on
            // character boundaries.
            let mut from = 0;
            while let Some(at) = text.get(from..).and_then(|rest| rest.find(value)) {
                let start = from + at;
                hits.push((start, start + value.len()));
                // On by one character, not the whole value: an occurrence overlapping this
                // one ("abab" in "ababab") counts too.
                from = start
                    + text
                        .get(start..)
                        .and_then(|rest| rest.chars().next())
                        .map_or(1, char::len_utf8);
            }
        }
    }
    match replace_hits(hay, hits) {
        None => Cow::Borrowed(text),
        // Cut only at character boundaries and given ASCII, the rest stays UTF-8; should it
        // not, the text is shown with the bad bytes replaced rather than not at all.
        Some(out) => Cow::Owned(
            String::from_utf8(out)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        ),
    }
}

/// [`redact_encoded`] for bytes that need not be text (a blob an upstream answers, often a
/// file read as bytes): every occurrence of each of `values`, as it is or encoded, replaced by
/// [`REDACTED`]'s bytes, at any position. Borrowed when nothing was found.
pub fn redact_encoded_bytes<'a, S: AsRef<str>>(bytes: &'a [u8], values: &[S]) -> Cow<'a, [u8]> {
    let mut hits: Vec<(usize, usize)> = Vec::new();
    for value in values {
        let written_differently = encodable(value.as_ref());
        let value = value.as_ref().as_bytes();
        // Every form of a value is at least as long as the value.
        if value.is_empty() || value.len() > bytes.len() {
            continue;
        }
        if written_differently && may_hold_escape(bytes, value) {
            encoded_hits(bytes, value, |_| true, &mut hits);
        } else {
            hits.extend(
                bytes
                    .windows(value.len())
                    .enumerate()
                    .filter(|(_, w)| *w == value)
                    .map(|(i, _)| (i, i + value.len())),
            );
        }
    }
    match replace_hits(bytes, hits) {
        None => Cow::Borrowed(bytes),
        Some(out) => Cow::Owned(out),
    }
}

/// Whether some encoder writes `value` differently: it holds a byte other than a letter, a
/// digit, `-`, `.`, `_` or `~` (what percent-encoding leaves as it is).
pub(super) fn encodable(value: &str) -> bool {
    value
        .bytes()
        .any(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')))
}

/// Whether `hay` holds a byte that starts an encoded form of one of `value`'s bytes: `%`, `\`,
/// or `+` when `value` has a space. Text without one can hold `value` only as it is, which
/// the substring search finds faster than the scan.
fn may_hold_escape(hay: &[u8], value: &[u8]) -> bool {
    let space = value.contains(&b' ');
    hay.iter()
        .any(|&b| b == b'%' || b == b'\\' || (space && b == b'+'))
}

/// Adds to `hits` every occurrence of `value` in `hay` (see [`encoded_match`]) that starts and
/// ends where `boundary` allows, tried at every position.
fn encoded_hits(
    hay: &[u8],
    value: &[u8],
    boundary: impl Fn(usize) -> bool,
    hits: &mut Vec<(usize, usize)>,
) {
    let Some(&first) = value.first() else {
        return;
    };
    for (i, &b) in hay.iter().enumerate() {
        // Most positions cannot start one: the first byte as it is, or an escape's first byte.
        let may_start = b == first || b == b'%' || b == b'\\' || (first == b' ' && b == b'+');
        if may_start
            && boundary(i)
            && let Some(end) = encoded_match(hay, i, value, &boundary)
        {
            hits.push((i, end));
        }
    }
}

/// The end of the longest occurrence of `value` in `hay` that starts at `start` and ends
/// where `boundary` allows, each of its bytes written as it is or in one of the forms encoders
/// give it: `%XX` (either case), a JSON escape (`\u00XX` for an ASCII byte, `\/` for `/`), `+`
/// for a space. The forms are followed side by side (a `%` of the value may be itself or the
/// start of `%25`), with no recursion.
fn encoded_match(
    hay: &[u8],
    start: usize,
    value: &[u8],
    boundary: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut ends = vec![start];
    for &b in value {
        let mut next = Vec::with_capacity(ends.len() + 1);
        for &p in &ends {
            let rest = hay.get(p..).unwrap_or_default();
            forms_at(rest, b, |n| next.push(p + n));
        }
        next.sort_unstable();
        next.dedup();
        if next.is_empty() {
            return None;
        }
        ends = next;
    }
    ends.into_iter().rev().find(|&end| boundary(end))
}

/// Calls `each` with the length of every form of byte `b` that `rest` starts with: `b` as it
/// is, `%XX` (either case), a JSON escape (`\u00XX` for an ASCII byte, `\/` for `/`), `+` for
/// a space. The one list of forms [`encoded_match`] and [`begins_encoded`] follow.
#[inline]
fn forms_at(rest: &[u8], b: u8, mut each: impl FnMut(usize)) {
    if rest.first() == Some(&b) {
        each(1);
    }
    if let [b'%', h, l, ..] = rest
        && hex_pair(*h, *l) == Some(b)
    {
        each(3);
    }
    if b.is_ascii() {
        if let [b'\\', b'u', a, c, h, l, ..] = rest
            && hex_pair(*a, *c) == Some(0)
            && hex_pair(*h, *l) == Some(b)
        {
            each(6);
        }
        if b == b'/' && rest.starts_with(b"\\/") {
            each(2);
        }
        if b == b' ' && rest.first() == Some(&b'+') {
            each(1);
        }
    }
}

/// The length of the longest end of `hay` that begins an occurrence of `value` (as it is or
/// encoded, see [`encoded_match`]) without finishing it: what a line cut short holds of a value
/// the cut went through. `None` when no end of `hay` does. A whole occurrence is not counted
/// (the redaction of the kept text finds it). Read only where a line was cut, so it tries
/// every start near the end rather than being quick.
pub(super) fn encoded_tail(hay: &[u8], value: &[u8]) -> Option<usize> {
    // The longest form of a byte is six bytes (`\u00XX`).
    let earliest = hay.len().saturating_sub(value.len().saturating_mul(6));
    (earliest..hay.len()).find_map(|start| {
        let tail = hay.get(start..)?;
        begins_encoded(tail, value).then_some(tail.len())
    })
}

/// Whether all of `tail` is the beginning (not the whole) of `value` written as it is or
/// encoded, ending anywhere, also inside one byte's escape (`%2`, `\u00`).
fn begins_encoded(tail: &[u8], value: &[u8]) -> bool {
    let mut ends = vec![0usize];
    for &b in value {
        let mut next = Vec::with_capacity(ends.len() + 1);
        for &p in &ends {
            let rest = tail.get(p..).unwrap_or_default();
            if rest.is_empty() || begins_form(rest, b) {
                // The tail ends here or inside this byte's form.
                return true;
            }
            forms_at(rest, b, |n| next.push(p + n));
        }
        next.sort_unstable();
        next.dedup();
        if next.is_empty() {
            return false;
        }
        ends = next;
    }
    // The whole value: an occurrence, not a beginning.
    false
}

/// Whether `rest` (what is left of a cut text) is a proper beginning of one of the escapes
/// that write byte `b`: `%X` or `%`, `\u00X` down to `\`, or `\` of `\/`.
fn begins_form(rest: &[u8], b: u8) -> bool {
    let hex = |digit: u8, nibble: u8| (digit as char).to_digit(16) == Some(u32::from(nibble));
    match rest {
        [b'%'] => true,
        [b'%', h] => hex(*h, b >> 4),
        _ if !b.is_ascii() => false,
        [b'\\'] | [b'\\', b'u'] => true,
        [b'\\', b'u', z] => hex(*z, 0),
        [b'\\', b'u', z, y] => hex(*z, 0) && hex(*y, 0),
        [b'\\', b'u', z, y, h] => hex(*z, 0) && hex(*y, 0) && hex(*h, b >> 4),
        _ => false,
    }
}

/// The byte two hex digits (either case) write.
fn hex_pair(high: u8, low: u8) -> Option<u8> {
    let digit = |c: u8| (c as char).to_digit(16);
    u8::try_from(digit(high)? * 16 + digit(low)?).ok()
}

/// `hay` with each run of overlapping or adjacent `hits` (start, end) replaced by
/// [`REDACTED`]'s bytes; `None` when there are none.
fn replace_hits(hay: &[u8], mut hits: Vec<(usize, usize)>) -> Option<Vec<u8>> {
    if hits.is_empty() {
        return None;
    }
    hits.sort_unstable();
    let mut out = Vec::with_capacity(hay.len());
    let mut kept_from = 0;
    let mut hits = hits.into_iter().peekable();
    while let Some((start, mut end)) = hits.next() {
        while let Some(&(next_start, next_end)) = hits.peek() {
            if next_start > end {
                break;
            }
            end = end.max(next_end);
            hits.next();
        }
        out.extend_from_slice(hay.get(kept_from..start).unwrap_or_default());
        out.extend_from_slice(REDACTED.as_bytes());
        kept_from = end.max(kept_from);
    }
    out.extend_from_slice(hay.get(kept_from..).unwrap_or_default());
    Some(out)
}

/// What of an HTTP upstream's configuration is a credential: header values and their words
/// (but an authentication scheme),
/// and the URL's user part and query (parsed, and as written before percent-encoding), each of
/// at least [`MIN_HTTP_PART_CHARS`] characters. Shared with [`UpstreamTransport::redact`], so
/// errors and relayed messages hide the same parts.
pub(super) fn http_values(url: &str, headers: &[(String, String)]) -> Vec<String> {
    let mut hidden: Vec<String> = Vec::new();
    for (_, v) in headers {
        hidden.push(v.clone());
        // A value of several words is `<auth-scheme> <credentials>` (RFC 9110, 11.4): the
        // scheme (`Bearer`, `Basic`, Gitea's `token`) is an ordinary word that upstreams say
        // in plain messages ("access token does not exist"), so only the words after it are
        // hidden on their own.
        let words: Vec<&str> = v.split_whitespace().collect();
        let credentials = if words.len() > 1 {
            &words[1..]
        } else {
            &words[..]
        };
        hidden.extend(credentials.iter().map(|w| w.to_string()));
    }
    // The URL's user part, its halves and the Basic value made of them, its query and query
    // values: as written, decoded, and as a JSON string quotes them.
    hidden.extend(
        kberg_core::UrlCredentials::new(url, &[])
            .values()
            .iter()
            .cloned(),
    );
    hidden.retain(|h| h.chars().count() >= MIN_HTTP_PART_CHARS);
    hidden
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_child_hides_its_long_environment_values_or_the_configured_ones() {
        let env = env(&[("TOKEN", "s3cret-token-value"), ("LEVEL", "debug")]);
        assert_eq!(
            Redactions::stdio(None, &env).values(),
            ["s3cret-token-value"]
        );
        let configured = ["tok".to_string(), String::new()];
        assert_eq!(Redactions::stdio(Some(&configured), &env).values(), ["tok"]);
        assert!(Redactions::stdio(Some(&[]), &env).values().is_empty());
    }

    #[test]
    fn an_error_quoting_the_credentials_is_redacted_with_the_same_list() {
        let config = UpstreamConfig::new(
            "up",
            UpstreamTransport::http(
                "https://bot:s3cret-pass@mcp.example/v1?api_key=s3cret-key&region=eu#frag",
            )
            .header("authorization", "Bearer s3cret-token"),
        );
        let said = "HTTP 401: invalid token s3cret-token for https://bot:s3cret-pass@mcp.example/v1?api_key=s3cret-key";
        let shown = Redactions::of(&config).text(said);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.starts_with("HTTP 401: invalid token [redacted] for https://"),
            "{shown}"
        );
        let config = UpstreamConfig::new(
            "up",
            UpstreamTransport::stdio("server")
                .env("API_TOKEN", "s3cret-env")
                .env("LEVEL", "1"),
        );
        assert_eq!(
            Redactions::of(&config).text("bad token s3cret-env, level 1"),
            "bad token [redacted], level 1"
        );
    }

    #[test]
    fn an_endpoint_hides_the_values_named_for_it_too() {
        let config = UpstreamConfig::new(
            "up",
            UpstreamTransport::http("https://mcp.example/v1").header("x-api-key", "key-s3cret"),
        );
        assert_eq!(Redactions::of(&config).text("bad s3cret"), "bad s3cret");
        let r = Redactions::of(&config.stderr_redact(["s3cret".to_string()]));
        assert_eq!(
            r.text("bad s3cret, key-s3cret"),
            "bad [redacted], [redacted]"
        );
    }

    #[test]
    fn an_endpoint_hides_its_header_values_words_and_url_credentials() {
        let config = UpstreamConfig::new(
            "up",
            UpstreamTransport::http("https://bot:pa%20ss@mcp.example/v1?api_key=k3y-value&x=1")
                .header("authorization", "Bearer s3cret-token")
                .header("x-id", "ab"),
        );
        let r = Redactions::of(&config);
        for hidden in [
            "Bearer s3cret-token",
            "s3cret-token",
            "k3y-value",
            "api_key=k3y-value&x=1",
            "pa%20ss",
            "pa ss",
            "bot:pa%20ss",
        ] {
            assert!(r.values().contains(&hidden.to_string()), "{hidden}: {r:?}");
        }
        // Too short to tell from ordinary text, or the scheme: an ordinary word.
        assert!(
            !r.values()
                .iter()
                .any(|v| v == "ab" || v == "bot" || v == "1" || v == "Bearer")
        );
        assert_eq!(
            r.text("a Bearer token, not s3cret-token"),
            "a Bearer token, not [redacted]"
        );
        // The list never shows in a debug print.
        assert!(!format!("{r:?}").contains("s3cret"));
    }

    #[test]
    fn every_occurrence_is_replaced_and_a_value_containing_another_whole() {
        let r = Redactions::new(vec!["abcdef".into(), "abcdefghij".into(), "ghijkl".into()]);
        assert_eq!(r.text("x abcdefghij y abcdef"), "x [redacted] y [redacted]");
        // Overlapping values are one run, replaced once, with no part of either left.
        assert_eq!(r.text("<abcdefghijkl>"), "<[redacted]>");
        let r = Redactions::new(vec!["abab".into()]);
        assert_eq!(r.text("ababab!"), "[redacted]!");
        assert!(matches!(r.text("nothing here"), Cow::Borrowed(_)));
        assert!(matches!(
            Redactions::default().text("abab"),
            Cow::Borrowed("abab")
        ));
        // Text around multi-byte characters stays whole.
        assert_eq!(r.text("é abab ü"), "é [redacted] ü");
    }

    #[test]
    fn a_value_of_several_lines_is_hidden_whole_and_line_by_line() {
        let pem = "-----BEGIN KEY-----\r\nMIIEvQIBADANBgkq\n  c2VjcmV0LWxpbmU=\nab==\n-----END KEY-----\n";
        let r = Redactions::stdio(None, &env(&[("KEY", pem)]));
        assert_eq!(r.text(&format!("key: {pem}.")), "key: [redacted].");
        assert_eq!(
            r.text("line c2VjcmV0LWxpbmU= quoted"),
            "line [redacted] quoted"
        );
        assert_eq!(r.text("ab== is short"), "ab== is short");
    }

    /// A value with characters encoders write differently reaches what an upstream says
    /// encoded, whole or only some of its characters (a URL's query, a backend's JSON body).
    #[test]
    fn a_partly_encoded_value_is_redacted_in_text_and_in_json() {
        let r = Redactions::new(vec!["ab/c+d=".into()]);
        for quoted in [
            "ab%2Fc+d%3d",
            "ab\\/c%2Bd=",
            "ab%2fc%2bd%3D",
            "ab\\u002Fc\\u002bd=",
            "ab/c+d=",
        ] {
            let said = format!("GET https://api.example/v1?key={quoted}&x=1 failed");
            assert_eq!(
                r.text(&said),
                "GET https://api.example/v1?key=[redacted]&x=1 failed",
                "{quoted}"
            );
            let mut v = json!({"logger": format!("up {quoted}"),
                               "data": {"error": said, "tried": [quoted], quoted: 1, "n": 3}});
            assert!(r.value(&mut v), "{quoted}");
            assert_eq!(
                v,
                json!({"logger": "up [redacted]",
                       "data": {"error": "GET https://api.example/v1?key=[redacted]&x=1 failed",
                                "tried": ["[redacted]"], "[redacted]": 1, "n": 3}}),
                "{quoted}"
            );
        }
        // Another value's encoding, a part of the value, and an escape that writes another
        // byte stay as they are; nothing found is nothing copied.
        for other in ["ab%2Fc+d%3E", "ab%2Fc", "ab%2Dc+d=", "100% of ab\\c"] {
            assert!(matches!(r.text(other), Cow::Borrowed(_)), "{other}");
        }
        // A value no encoder changes is searched for as it is: an escape of one of its
        // characters is some other text.
        let plain = Redactions::new(vec!["ab-cd".into()]);
        assert_eq!(plain.text("x ab%2Dcd ab-cd"), "x ab%2Dcd [redacted]");
        // Overlapping and adjacent occurrences, in any form, are one run; the text around
        // multi-byte characters stays whole.
        let r = Redactions::new(vec!["a/a/".into()]);
        assert_eq!(r.text("é a/a%2Fa\\/ é"), "é [redacted] é");
        assert_eq!(r.text("a%2fa/a%2Fa/!"), "[redacted]!");
        // A value with a space, form-encoded.
        let r = Redactions::new(vec!["pa ss".into()]);
        assert_eq!(r.text("user=bot&pass=pa+ss"), "user=bot&pass=[redacted]");
    }

    #[test]
    fn the_encoded_search_works_on_bytes_too() {
        let blob = b"\x00key=ab%2Fc+d%3d\xff ab-cd!";
        assert_eq!(
            redact_encoded_bytes(blob, &["ab/c+d=", "ab-cd"]).as_ref(),
            b"\x00key=[redacted]\xff [redacted]!"
        );
        assert!(matches!(
            redact_encoded_bytes(b"\x00nothing", &["ab/c+d=", ""]),
            Cow::Borrowed(_)
        ));
        assert!(matches!(
            redact_encoded_bytes(b"ab", &["ab/c"]),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn json_strings_and_keys_are_redacted_at_any_depth_and_nothing_else() {
        let r = Redactions::new(vec!["s3cret-token".into()]);
        let mut v = json!({
            "level": "info",
            "data": {"note": "plain", "n": 7, "ok": true, "none": null,
                     "deep": [{"auth": "Bearer s3cret-token"}, "s3cret-token"],
                     "s3cret-token": 1},
        });
        assert!(r.value(&mut v));
        assert_eq!(
            v,
            json!({
                "level": "info",
                "data": {"note": "plain", "n": 7, "ok": true, "none": null,
                         "deep": [{"auth": "Bearer [redacted]"}, "[redacted]"],
                         "[redacted]": 1},
            })
        );
        let mut clean = json!({"a": ["b", {"c": "d"}]});
        let before = clean.clone();
        assert!(!r.value(&mut clean));
        assert_eq!(clean, before);
    }
}
