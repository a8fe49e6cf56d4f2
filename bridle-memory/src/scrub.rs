//! Quoting what a service said about a request without the credentials the request carried.
//!
//! The HTTP embedders and the Qdrant store both quote text they did not write into their
//! errors: an error answer, the HTTP or gRPC client's error text (which can name the URL with
//! its user part and query), a status message. Services echo what they refuse, and a proxy in
//! front of one may echo the request line or its headers, so that text can hold the API key or
//! the URL's credentials. Both clients work out the credentials once with [`credentials`] and
//! quote through [`quote`]: kberg-core's [`UrlCredentials`] rule (the key, the URL's user part
//! and query values, the `Basic` value made of the user part, each also as written inside a JSON
//! string), then a bound on the length.

use kberg_core::UrlCredentials;

/// The credentials requests to a service carry: `api_key`, and those of each text of its URL
/// in `urls` (the URL as configured and, where the client writes it differently, as the client
/// writes it).
pub(crate) fn credentials(urls: &[&str], api_key: Option<&str>) -> UrlCredentials {
    UrlCredentials::of_urls(urls, api_key.as_slice())
}

/// `text` as an error may quote it: every credential in `credentials` replaced by
/// `[redacted]`, then cut to `max_chars` characters. Scrubbed before it is cut, so a credential
/// at the cut is replaced whole rather than left half shown.
pub(crate) fn quote(credentials: &UrlCredentials, text: &str, max_chars: usize) -> String {
    credentials.scrub(text).chars().take(max_chars).collect()
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
}
