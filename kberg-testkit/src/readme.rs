//! A README's examples, kept compiling: a crate's `tests/readme.rs` holds each ```` ```rust ````
//! block of its README verbatim, inside a function that sets up what the README leaves out and
//! checks what the example claims, and one test calls [`assert_examples_in`] with the README and
//! that file's own text, so an example that drifts from the API fails to build or to match.
//!
//! A README line `// ...` (a comment starting with `...`) stands for code the example skips: in
//! the test, any lines may follow it before the example goes on.

/// The fenced blocks of `markdown` whose info string is `rust` or starts with `rust,`, each as
/// the line number of its fence (from 1) and its lines.
pub fn rust_blocks(markdown: &str) -> Vec<(usize, Vec<&str>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Vec<&str>)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => {
                let info = info.trim();
                if info == "rust" || info.starts_with("rust,") {
                    open = Some((n + 1, Vec::new()));
                }
            }
            (Some(_), Some(_)) => blocks.extend(open.take()),
            (Some((_, lines)), None) => lines.push(line),
            (None, None) => {}
        }
    }
    blocks
}

/// Whether `line` (trimmed) stands for skipped code.
fn elides(line: &str) -> bool {
    line.starts_with("// ...")
}

/// How many lines of `block` match `source` from `start`: consecutive, except that after an
/// eliding line the next line may come any number of lines later (every later place is tried,
/// so a line that also stands in the test's added code does not end the match early).
fn matched(block: &[&str], source: &[&str], start: usize) -> usize {
    let Some((want, rest)) = block.split_first() else {
        return 0;
    };
    if source.get(start) != Some(want) {
        return 0;
    }
    if rest.is_empty() {
        return 1;
    }
    let next = start + 1;
    let best_rest = if elides(want) {
        (next..source.len())
            .map(|at| matched(rest, source, at))
            .max()
            .unwrap_or(0)
    } else {
        matched(rest, source, next)
    };
    1 + best_rest
}

/// Panics unless every ```` ```rust ```` block of `readme` appears in `source`: its non-blank
/// lines, trimmed, as consecutive non-blank lines of `source` (trimmed), but for the lines an
/// eliding `// ...` comment lets the test add. The message names the block by the README line of
/// its fence and shows its first line that did not match.
pub fn assert_examples_in(readme: &str, source: &str) {
    let trimmed = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    };
    let source = trimmed(source);
    let source: Vec<&str> = source.iter().map(String::as_str).collect();
    let blocks = rust_blocks(readme);
    assert!(!blocks.is_empty(), "the README has no ```rust block");
    for (fence, lines) in blocks {
        let block: Vec<&str> = lines
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect();
        let best = (0..source.len())
            .map(|s| matched(&block, &source, s))
            .max()
            .unwrap_or(0);
        assert!(
            best == block.len(),
            "the README's example at line {fence} is not in the test verbatim; \
             its first line that differs: {:?}",
            block.get(best).copied().unwrap_or_default()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = "# x\n\n```rust\nlet a = 1;\n// ... more\nlet b = a;\n```\n\n```sh\nls\n```\n\n```rust,no_run\n  fn f() {}\n```\n";

    #[test]
    fn finds_the_rust_blocks_and_their_lines() {
        let blocks = rust_blocks(README);
        assert_eq!(blocks.len(), 2);
        assert_eq!(
            blocks[0],
            (3, vec!["let a = 1;", "// ... more", "let b = a;"])
        );
        assert_eq!(blocks[1], (13, vec!["  fn f() {}"]));
    }

    #[test]
    fn accepts_the_examples_with_other_indentation_and_filled_gaps() {
        let source = "fn one() {\n    let a = 1;\n    // ... more\n    let filled = 2;\n\n    let b = a;\n}\nfn f() {}\n";
        assert_examples_in(README, source);
    }

    #[test]
    fn a_line_the_test_also_added_does_not_end_the_match() {
        // `let b = a;` also stands in the filled gap; the example's own comes later.
        let source = "let a = 1;\n// ... more\nlet b = a;\nlet c = 0;\nlet b = a;\nfn f() {}\n";
        let readme = "```rust\nlet a = 1;\n// ... more\nlet b = a;\nfn f() {}\n```\n";
        assert_examples_in(readme, source);
    }

    #[test]
    #[should_panic(expected = "its first line that differs: \"let b = a;\"")]
    fn refuses_an_example_that_drifted() {
        assert_examples_in(
            README,
            "let a = 1;\n// ... more\nlet b = a + 1;\nfn f() {}\n",
        );
    }

    #[test]
    #[should_panic(expected = "line 3")]
    fn refuses_lines_added_where_the_readme_has_no_gap() {
        assert_examples_in(
            README,
            "let a = 1;\nlet extra = 0;\n// ... more\nlet b = a;\nfn f() {}\n",
        );
    }
}
