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
/// `[redacted]`, each character [`kberg_core::escaped_when_quoted`] written as its escape, then cut to
/// `max_chars` characters. Scrubbed before it is cut, so a credential at the cut is replaced
/// whole rather than left half shown; the cut counts escapes as written and falls between two
/// of them, never inside one.
pub(crate) fn quote(credentials: &UrlCredentials, text: &str, max_chars: usize) -> String {
    kberg_core::quote_escaped(&credentials.scrub(text), max_chars).0
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
