//! Quoting what a service said about a request without the credentials the request carried.
//!
//! The HTTP embedders and the Qdrant store both quote text they did not write into their
//! errors: an error answer, the HTTP or gRPC client's error text (which can name the URL with
//! its user part and query), a status message. Services echo what they refuse, and a proxy in
//! front of one may echo the request line or its headers, so that text can hold the API key or
//! the URL's credentials. Both clients work out the credentials once with [`credentials`] and
//! quote through [`quote`]: kberg-core's [`UrlCredentials`] rule (the key, the URL's user part
//! and query values, the `Basic` value made of the user part, each also as written inside a JSON
//! string), then control characters written as escapes and a bound on the length.
//!
//! The quoted text is a service's, and whoever gets the error prints it: a terminal, a log, a
//! model's context. A hostile or broken service's ESC sequences would colour, move or rewrite
//! that terminal, a carriage return or NUL forge or hide a log line, bidirectional overrides
//! reorder what is shown; so each is written as its escape (`\u{1b}`, `\r`, `\u{202e}`),
//! with newlines, tabs and all other text as they are.

use kberg_core::UrlCredentials;

/// The credentials requests to a service carry: `api_key`, and those of each text of its URL
/// in `urls` (the URL as configured and, where the client writes it differently, as the client
/// writes it).
pub(crate) fn credentials(urls: &[&str], api_key: Option<&str>) -> UrlCredentials {
    UrlCredentials::of_urls(urls, api_key.as_slice())
}

/// `text` as an error may quote it: every credential in `credentials` replaced by
/// `[redacted]`, each character [`escaped_when_quoted`] written as its escape, then cut to
/// `max_chars` characters. Scrubbed before it is cut, so a credential at the cut is replaced
/// whole rather than left half shown; the cut counts escapes as written and falls between two
/// of them, never inside one.
pub(crate) fn quote(credentials: &UrlCredentials, text: &str, max_chars: usize) -> String {
    let scrubbed = credentials.scrub(text);
    let mut out = String::with_capacity(scrubbed.len().min(max_chars));
    let mut shown = 0usize;
    for c in scrubbed.chars() {
        let escape = escaped_when_quoted(c).then(|| c.escape_default());
        let len = escape.as_ref().map_or(1, ExactSizeIterator::len);
        if shown + len > max_chars {
            break;
        }
        shown += len;
        match escape {
            Some(e) => out.extend(e),
            None => out.push(c),
        }
    }
    out
}

/// Whether `c` is written as its escape in a quote: a control character other than a newline
/// or a tab, a bidirectional control (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to
/// U+2069) or a line or paragraph separator (U+2028, U+2029).
fn escaped_when_quoted(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_at_the_cut_is_replaced_whole() {
        let c = credentials(
            &["http://bot:s3cret-pass@h:1/?k=s3cret-q"],
            Some("s3cret-key"),
        );
        let quoted = quote(
            &c,
            "key s3cret-key, user bot:s3cret-pass, query s3cret-q",
            1000,
        );
        assert_eq!(quoted, "key [redacted], user [redacted], query [redacted]");
        // Cut in the middle of where the key was: nothing of it shows.
        assert_eq!(quote(&c, "key s3cret-key", 7), "key [re");
        assert!(credentials(&["http://127.0.0.1:6334"], None).is_empty());
    }

    #[test]
    fn controls_are_quoted_as_escapes_within_the_bound() {
        let none = credentials(&["http://127.0.0.1:6334"], None);
        let hostile = "a\u{1b}[31mb\r\nc\0\u{202e}d\u{2066}e\u{2069}\tf\u{7f}\u{85}";
        let q = quote(&none, hostile, 1000);
        assert_eq!(
            q,
            "a\\u{1b}[31mb\\r\nc\\u{0}\\u{202e}d\\u{2066}e\\u{2069}\tf\\u{7f}\\u{85}"
        );
        assert_eq!(quote(&none, &q, 1000), q, "quoting twice changes nothing");
        // The cut falls between two escapes, counting them as written.
        let esc = "\u{1b}".repeat(100);
        assert_eq!(quote(&none, &esc, 20), "\\u{1b}".repeat(3));
        assert_eq!(quote(&none, &esc, 24), "\\u{1b}".repeat(4));
        assert_eq!(quote(&none, "é€😀x", 3), "é€😀");
    }
}
