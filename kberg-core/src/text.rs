//! Cutting text that came from outside (a name a client sent, an upstream's error, a tool's
//! answer) before it is quoted in an answer, a log line or a model's context. Every crate of
//! the workspace cuts the same way: at a character boundary, so a cut never panics on
//! multi-byte text and never leaves half a character. An error that quotes what a server said
//! escapes its control characters the same way everywhere too ([`quote_escaped`]).

/// The largest byte index of `text` no greater than `max` that is a character boundary
/// (`text.len()` when `text` is no longer than `max`), so `&text[..char_floor(text, max)]`
/// is the longest prefix of at most `max` bytes.
///
/// ```
/// let text = "héllo";
/// assert_eq!(kberg_core::char_floor(text, 2), 1); // `é` takes bytes 1 and 2
/// assert_eq!(kberg_core::char_floor(text, 99), text.len());
/// ```
pub fn char_floor(text: &str, max: usize) -> usize {
    if max >= text.len() {
        return text.len();
    }
    // Index 0 is always a boundary, so this ends.
    (0..=max)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0)
}

/// Cuts `text` after its first `max` characters and appends `marker` where it was cut.
/// Answers whether it was cut; a text of `max` characters or fewer is left as it is.
///
/// ```
/// let mut text = String::from("ünïcode text");
/// assert!(kberg_core::cut_chars(&mut text, 3, "..."));
/// assert_eq!(text, "ünï...");
/// ```
pub fn cut_chars(text: &mut String, max: usize, marker: &str) -> bool {
    match text.char_indices().nth(max) {
        Some((at, _)) => {
            text.truncate(at);
            text.push_str(marker);
            true
        }
        None => false,
    }
}

/// Whether `c` is written as its escape where outside text is quoted in an error: a control
/// character other than a newline or a tab (ESC starts the sequences that colour, move and
/// rewrite a terminal, CR returns to the start of the line, NUL ends a C string), a
/// bidirectional control (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069: they
/// reorder what is shown) or a line or paragraph separator (U+2028, U+2029). An application
/// prints the errors it gets, to a terminal or a log, and a hostile server's words must not
/// drive the one or forge lines in the other.
pub fn escaped_when_quoted(c: char) -> bool {
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

/// `text` as an error may quote it: each character [`escaped_when_quoted`] written as its
/// escape (`\u{1b}`, `\r`, `\u{202e}`), newlines, tabs and all other text as they are, and at
/// most `max` characters of it. The count takes escapes as written and the cut falls between
/// two of them, never inside one, so the quote stays within its bound and shows no half
/// escape; quoting a quoted text changes nothing. Answers the quote and whether it was cut
/// (the caller adds its own marker).
///
/// ```
/// let (q, cut) = kberg_core::quote_escaped("red\u{1b}[31m\r\nok", 100);
/// assert_eq!(q, "red\\u{1b}[31m\\r\nok");
/// assert!(!cut);
/// let (q, cut) = kberg_core::quote_escaped("\u{1b}\u{1b}", 8);
/// assert_eq!((q.as_str(), cut), ("\\u{1b}", true));
/// ```
pub fn quote_escaped(text: &str, max: usize) -> (String, bool) {
    let mut out = String::with_capacity(text.len().min(max));
    let mut shown = 0usize;
    for c in text.chars() {
        let escape = escaped_when_quoted(c).then(|| c.escape_default());
        let len = escape.as_ref().map_or(1, ExactSizeIterator::len);
        if shown + len > max {
            return (out, true);
        }
        shown += len;
        match escape {
            Some(e) => out.extend(e),
            None => out.push(c),
        }
    }
    (out, false)
}

/// [`quote_escaped`] with `...` after a quote that was cut: how an error quotes what a server,
/// a child process or a library said.
///
/// ```
/// assert_eq!(kberg_core::quoted("abcdef", 3), "abc...");
/// assert_eq!(kberg_core::quoted("a\u{1b}", 10), "a\\u{1b}");
/// ```
pub fn quoted(text: &str, max: usize) -> String {
    let (mut out, cut) = quote_escaped(text, max);
    if cut {
        out.push_str("...");
    }
    out
}

/// `n` followed by the noun that agrees with it, for counts in messages: `1 token`,
/// `2 tokens`, `0 tokens` (never "token(s)").
///
/// ```
/// assert_eq!(kberg_core::counted(1, "token", "tokens"), "1 token");
/// assert_eq!(kberg_core::counted(0, "session", "sessions"), "0 sessions");
/// ```
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_is_always_a_boundary_at_or_below_the_limit() {
        let text = "a€b😀c";
        for max in 0..=text.len() + 2 {
            let end = char_floor(text, max);
            assert!(end <= max.min(text.len()));
            assert!(text.is_char_boundary(end));
            // No longer boundary fits.
            assert!((end + 1..=max.min(text.len())).all(|i| !text.is_char_boundary(i)));
        }
    }

    #[test]
    fn cutting_counts_characters_not_bytes() {
        let mut short = String::from("😀😀");
        assert!(!cut_chars(&mut short, 2, "..."));
        assert_eq!(short, "😀😀");
        let mut long = String::from("😀😀😀");
        assert!(cut_chars(&mut long, 2, "…"));
        assert_eq!(long, "😀😀…");
        let mut empty = String::from("abc");
        assert!(cut_chars(&mut empty, 0, "..."));
        assert_eq!(empty, "...");
    }

    #[test]
    fn quoting_escapes_controls_within_the_bound() {
        let hostile = "a\u{1b}[31mb\r\nc\0\u{202e}d\u{2066}e\u{2069}\tf\u{7f}\u{85}\u{2028}";
        let (q, cut) = quote_escaped(hostile, 1000);
        assert!(!cut);
        assert_eq!(
            q,
            "a\\u{1b}[31mb\\r\nc\\u{0}\\u{202e}d\\u{2066}e\\u{2069}\tf\\u{7f}\\u{85}\\u{2028}"
        );
        assert_eq!(
            quote_escaped(&q, 1000).0,
            q,
            "quoting twice changes nothing"
        );
        let esc = "\u{1b}".repeat(100);
        assert_eq!(quote_escaped(&esc, 20), ("\\u{1b}".repeat(3), true));
        assert_eq!(quote_escaped(&esc, 24), ("\\u{1b}".repeat(4), true));
        assert_eq!(quote_escaped("é€😀x", 3), ("é€😀".to_string(), true));
        assert_eq!(quote_escaped("é€😀", 3), ("é€😀".to_string(), false));
    }
}
