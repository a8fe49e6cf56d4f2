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

/// `url` with its user part (everything before the last `@`, where a token goes) shown as
/// `***@`, its query as `?***` and a fragment as `#***`. A token pasted unencoded may hold a
/// `/`, `?` or `#` (`https://bot:ab/cd@host/x`), so the user part is not taken to end at the
/// first of them; an `@` in the path, query or fragment cannot be told from one ending such a
/// user part, so what comes before it is hidden too (more than needed, never less). A `://`
/// after no scheme (in a password, `bot:ab://cd@host`) starts no scheme: such text is read
/// from its start. Text without `://` (a file path, an scp-like `git@host:repo`) is returned
/// trimmed and otherwise unchanged. Redacting a redacted URL changes nothing.
///
/// ```
/// use bridle_rules::redact_url;
///
/// assert_eq!(
///     redact_url("https://user:s3cret@docs.example/guide"),
///     "https://***@docs.example/guide"
/// );
/// assert_eq!(redact_url("https://bot:ab/cd@git.example/a.git"), "https://***@git.example/a.git");
/// assert_eq!(redact_url("https://h/page?token=s3cret"), "https://h/page?***");
/// assert_eq!(redact_url("https://h/callback#token=s3cret"), "https://h/callback#***");
/// assert_eq!(redact_url("docs/guide.md"), "docs/guide.md");
/// ```
pub fn redact_url(url: &str) -> String {
    let s = url.trim();
    let Some(scheme_end) = s.find("://") else {
        return s.to_string();
    };
    // A `://` after no scheme (in a password, `bot:ab://cd@host`, or a query) starts no head:
    // the text is read from its start, so nothing before its last `@` is shown.
    let (head, rest) = if is_scheme(&s[..scheme_end]) {
        s.split_at(scheme_end + 3)
    } else {
        ("", s)
    };
    let mut out = String::with_capacity(s.len());
    out.push_str(head);
    let after_user = match rest.rfind('@') {
        Some(at) => {
            out.push_str("***@");
            &rest[at + 1..]
        }
        None => rest,
    };
    // The query, or a fragment when it comes first (`#a?b` is all fragment).
    match after_user.find(['?', '#']) {
        Some(i) => {
            out.push_str(&after_user[..i]);
            out.push_str(&after_user[i..=i]);
            out.push_str("***");
        }
        None => out.push_str(after_user),
    }
    out
}

/// Whether `s` is a URL scheme (RFC 3986: a letter, then letters, digits, `+`, `-` or `.`).
fn is_scheme(s: &str) -> bool {
    let mut bytes = s.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
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
    fn a_scheme_mark_after_no_scheme_shows_nothing_before_it() {
        // A password holding `://`: what comes before it is not a scheme, and is hidden with
        // the rest of the user part; kberg-core's `redact_source` shows the same.
        for (url, shown) in [
            (
                format!("bot:{CANARY}://cd@git.example/x"),
                "***@git.example/x",
            ),
            (
                format!("bot:ab://{CANARY}@git.example/x"),
                "***@git.example/x",
            ),
            (
                format!("/srv/x?u=https://bot:{CANARY}@git.example/r"),
                "***@git.example/r",
            ),
        ] {
            assert_eq!(redact_url(&url), shown, "{url}");
            assert_eq!(redact_url(shown), shown, "redacting twice changes nothing");
        }
        assert_eq!(redact_url("/srv/a://b"), "/srv/a://b");
        assert_eq!(
            redact_url(&format!("GIT+SSH://u:{CANARY}@h/x")),
            "GIT+SSH://***@h/x"
        );
    }

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
        assert_eq!(redact_url("git@host:team/a.git"), "git@host:team/a.git");
        assert_eq!(redact_url("/srv/guides/a.md"), "/srv/guides/a.md");
    }

    /// URLs whose user part holds what a URL may not (an unencoded `/`, `?`, `#` or `@`, as a
    /// token pasted into a URL often does), and an `@` past the host, with how they are shown.
    /// The same table is in kberg-core's `redact` tests: the two rules must agree.
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
            assert_eq!(redact_url(shown), *shown, "redacting twice changes nothing");
            assert_eq!(shown_url(url), *shown, "{url}");
        }
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
