//! Cutting text that came from outside (a name a client sent, an upstream's error, a tool's
//! answer) before it is quoted in an answer, a log line or a model's context. Every crate of
//! the workspace cuts the same way: at a character boundary, so a cut never panics on
//! multi-byte text and never leaves half a character.

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
}
