//! Showing a URL without the credentials it may carry.
//!
//! A source URL can hold an access token: `https://bot:<token>@git.example/team/app.git` for a
//! private example repository, `https://user:<token>@docs.internal/guide` for vendor guidance
//! behind basic auth, or a `?private_token=...` query. The real URL is needed only to fetch;
//! everywhere it is shown (a proposal's summary and provenance, a feed's views, errors and log
//! lines, audit entries) it goes through [`redact_url`] first.
//!
//! The rule is kberg-core's `redact_source`, which bridle-memory's `repo::redact_url` applies
//! wherever memory shows a source (listings, search hits, errors), so a reviewer reads a URL as
//! the index will later show it. This crate depends on no kberg crate (the rules model stands
//! on its own), so the rule is here again, once for the whole crate; bridle-gateway's tests
//! hold the two to the same output.

/// The most characters of one URL a summary shows; a longer one is cut with `…`.
const SHOWN_URL_CHARS: usize = 120;

/// `url` with its user part (everything before the last `@` of the authority, where a token
/// goes) shown as `***@`, its query as `?***` and a fragment as `#***`. Text without `://` (a
/// file path, an scp-like `git@host:repo`) is returned trimmed and otherwise unchanged.
/// Redacting a redacted URL changes nothing.
///
/// ```
/// use bridle_rules::redact_url;
///
/// assert_eq!(
///     redact_url("https://user:s3cret@docs.example/guide"),
///     "https://***@docs.example/guide"
/// );
/// assert_eq!(redact_url("https://h/page?token=s3cret"), "https://h/page?***");
/// assert_eq!(redact_url("https://h/callback#token=s3cret"), "https://h/callback#***");
/// assert_eq!(redact_url("docs/guide.md"), "docs/guide.md");
/// ```
pub fn redact_url(url: &str) -> String {
    let s = url.trim();
    let Some(scheme_end) = s.find("://") else {
        return s.to_string();
    };
    let (head, rest) = s.split_at(scheme_end + 3);
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
    // The query, or a fragment when it comes first (`#a?b` is all fragment).
    match tail.find(['?', '#']) {
        Some(i) => {
            out.push_str(&tail[..i]);
            out.push_str(&tail[i..=i]);
            out.push_str("***");
        }
        None => out.push_str(tail),
    }
    out
}

/// A URL as a one-line summary shows it: [`redact_url`], then control characters as spaces
/// and at most [`SHOWN_URL_CHARS`] characters (a longer one ends in `…`).
pub(crate) fn shown_url(url: &str) -> String {
    let hidden = redact_url(url);
    let mut shown: String = hidden
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(SHOWN_URL_CHARS)
        .collect();
    if hidden.chars().count() > SHOWN_URL_CHARS {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "canary-redact-token-9Lk3";

    #[test]
    fn the_user_part_the_query_and_the_fragment_are_hidden() {
        for (url, shown) in [
            (
                format!("https://user:{CANARY}@docs.internal/guide"),
                "https://***@docs.internal/guide",
            ),
            (
                format!("https://{CANARY}@git.example/b.git"),
                "https://***@git.example/b.git",
            ),
            (
                format!("ssh://bot:{CANARY}@git.example:2222/team/c.git"),
                "ssh://***@git.example:2222/team/c.git",
            ),
            (
                format!("https://git.example/d.git?private_token={CANARY}"),
                "https://git.example/d.git?***",
            ),
            // An `@` in the user part itself: everything up to the last one before the host.
            (
                format!("https://me@corp:{CANARY}@git.example/e.git"),
                "https://***@git.example/e.git",
            ),
            (format!("  http://u:{CANARY}@h:8080  "), "http://***@h:8080"),
            // A fragment can hold a token too (`#access_token=`), and a `?` inside it is not
            // a query.
            (
                format!("https://docs.example/cb#access_token={CANARY}"),
                "https://docs.example/cb#***",
            ),
            (
                format!("https://docs.example/cb#a?token={CANARY}"),
                "https://docs.example/cb#***",
            ),
            (
                format!("https://docs.example/cb?token={CANARY}#top"),
                "https://docs.example/cb?***",
            ),
        ] {
            assert_eq!(redact_url(&url), shown, "{url}");
            assert_eq!(redact_url(shown), shown, "redacting twice changes nothing");
        }
        // An `@` after the authority is part of the path, not a user part.
        assert_eq!(
            redact_url("https://git.example/x@y"),
            "https://git.example/x@y"
        );
        assert_eq!(redact_url("git@host:team/a.git"), "git@host:team/a.git");
        assert_eq!(redact_url("/srv/guides/a.md"), "/srv/guides/a.md");
    }

    #[test]
    fn a_shown_url_is_cut_and_stays_on_one_line() {
        let long = format!("https://git.example/{}.git", "a".repeat(500));
        let shown = shown_url(&long);
        assert_eq!(shown.chars().count(), SHOWN_URL_CHARS + 1);
        assert!(shown.ends_with('…'), "{shown}");
        assert_eq!(shown_url("https://h/a\nb.git"), "https://h/a b.git");
        assert_eq!(
            shown_url(&format!("https://x:{CANARY}@h/a.git")),
            "https://***@h/a.git"
        );
    }
}
