//! Glob-ish patterns for assigning write capabilities to upstream tools by name.
//!
//! Upstream servers do not say which of their tools write, so the operator does, with patterns
//! over the namespaced names (`fs__write_*`, `fs__move_file`). `*` matches any run of characters
//! (also none), `?` exactly one; every other character matches itself. No regex engine is needed
//! for that, and no pattern can be slow: matching is a linear two-pointer walk.

/// A compiled pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    chars: Vec<char>,
}

impl Pattern {
    /// Compiles `pattern`.
    pub fn new(pattern: &str) -> Self {
        Self {
            chars: pattern.chars().collect(),
        }
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        let text: Vec<char> = name.chars().collect();
        let p = &self.chars;
        let (mut ti, mut pi) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while ti < text.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == text[ti]) {
                ti += 1;
                pi += 1;
            } else if pi < p.len() && p[pi] == '*' {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        while pi < p.len() && p[pi] == '*' {
            pi += 1;
        }
        pi == p.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    #[test]
    fn stars_and_question_marks() {
        let p = Pattern::new("fs__write_*");
        assert!(p.matches("fs__write_file"));
        assert!(p.matches("fs__write_"));
        assert!(!p.matches("fs__read_file"));
        assert!(!p.matches("evil__fs__write_file"));
        assert!(Pattern::new("*__edit_*").matches("fs__edit_file"));
        assert!(Pattern::new("a?c").matches("abc"));
        assert!(!Pattern::new("a?c").matches("ac"));
        assert!(Pattern::new("*").matches(""));
        assert!(Pattern::new("exact").matches("exact"));
        assert!(!Pattern::new("exact").matches("exactly"));
        assert!(Pattern::new("*a*b*").matches("xxaxxbxx"));
        assert!(!Pattern::new("*a*b").matches("xxaxxbxx"));
    }
}
