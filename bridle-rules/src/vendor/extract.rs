//! Reading a guidance page: HTML or Markdown into text blocks, blocks into sentences, sentences
//! into guardrail candidates.
//!
//! Vendor pages are real web pages: scripts, styles, navigation, attributes with any Unicode in
//! them, broken markup. Parsing them is left to maintained parsers (`scraper`, on html5ever, for
//! HTML; `pulldown-cmark` for Markdown), which never fail on malformed input; this module only
//! walks the parsed structure, iteratively (no recursion, so deeply nested input cannot
//! overflow the stack), collecting the text of each block (paragraph, list item, quote) and
//! leaving out what is not prose (scripts, styles, code blocks, tables, headings, navigation).
//! Sentences are split by Unicode's sentence boundaries (UAX #29, `unicode-segmentation`); the
//! only byte offsets used are the splitter's and `trim`'s, which fall on character boundaries,
//! and every slice by them is checked (`str::get`).
//!
//! A page is untrusted input (any server, plain HTTP allowed), so the work per page is bounded:
//! each sentence is looked at once, an excerpt walks only its window of the block (never the
//! whole block again), and [`extract_at_most`] builds at most the number of candidates asked
//! for, counting the rest.

use ego_tree::iter::Edge;
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use scraper::{Html, Node};
use serde::{Deserialize, Serialize};
use unicode_segmentation::UnicodeSegmentation;

/// Words that mark a sentence as an instruction.
const MARKERS: &[&str] = &[
    "always ",
    "never ",
    "must ",
    "should ",
    "avoid ",
    "prefer ",
    "do not ",
    "don't ",
    "ensure ",
    "make sure ",
    "keep ",
    "use ",
    "run ",
    "write ",
    "include ",
    "limit ",
];

/// The shortest and longest candidate, in characters.
const STATEMENT_CHARS: std::ops::RangeInclusive<usize> = 20..=400;

/// The longest excerpt kept with a candidate, in characters; longer blocks are cut to a window
/// around the sentence.
pub(super) const EXCERPT_CHARS: usize = 600;

/// How a guidance document is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DocumentFormat {
    /// An HTML page.
    Html,
    /// Markdown (plain text reads as Markdown paragraphs).
    Markdown,
}

impl DocumentFormat {
    /// The format a `Content-Type` header names, or `None` when it is not a text document this
    /// feed reads (`text/html`, `application/xhtml+xml`, `text/markdown`, `text/x-markdown`,
    /// `text/plain`).
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let mime = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match mime.as_str() {
            "text/html" | "application/xhtml+xml" => Some(Self::Html),
            "text/markdown" | "text/x-markdown" | "text/plain" => Some(Self::Markdown),
            _ => None,
        }
    }

    /// The format a file name suggests (`.html`, `.htm`, `.xhtml`; `.md`, `.markdown`, `.txt`).
    pub fn from_file_name(name: &str) -> Option<Self> {
        let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
        match ext.as_str() {
            "html" | "htm" | "xhtml" => Some(Self::Html),
            "md" | "markdown" | "txt" => Some(Self::Markdown),
            _ => None,
        }
    }

    /// A guess from the text itself: HTML when it opens with a tag or contains an `<html`,
    /// `<body` or `<!doctype` tag, Markdown otherwise.
    pub fn sniff(text: &str) -> Self {
        let head: String = text.trim_start().chars().take(1024).collect();
        let lower = head.to_lowercase();
        if lower.starts_with("<!doctype")
            || lower.starts_with("<html")
            || lower.contains("<html")
            || lower.contains("<body")
            || (lower.starts_with('<') && text.contains("</"))
        {
            Self::Html
        } else {
            Self::Markdown
        }
    }
}

/// One guardrail candidate found in a document, with the passage it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Excerpted {
    /// The instruction-like sentence, whitespace normalized, without control characters.
    pub statement: String,
    /// The paragraph or list item that holds it (cut to a window around the sentence when
    /// long), so a reviewer sees it in context.
    pub excerpt: String,
}

/// The instruction-like sentences of a document, in document order, without duplicates (by
/// [`super::fingerprint`]), each with its excerpt.
pub fn extract(text: &str, format: DocumentFormat) -> Vec<Excerpted> {
    extract_at_most(text, format, usize::MAX).candidates
}

/// What [`extract_at_most`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Extracted {
    /// The first candidates, in document order, at most the number asked for.
    pub candidates: Vec<Excerpted>,
    /// How many more distinct candidates the document holds past those.
    pub left_out: usize,
}

/// The first `limit` instruction-like sentences of a document, as [`extract`] finds them, and
/// how many more it holds. Only the candidates kept get an excerpt.
pub fn extract_at_most(text: &str, format: DocumentFormat, limit: usize) -> Extracted {
    let blocks = match format {
        DocumentFormat::Html => html_blocks(text),
        DocumentFormat::Markdown => markdown_blocks(text),
    };
    let mut out = Extracted::default();
    let mut seen = std::collections::BTreeSet::new();
    for block in blocks {
        // Counted once per block: an excerpt needs it, and counting per sentence made one
        // long paragraph cost quadratic time.
        let block_chars = block.chars().count();
        for (at, raw) in block.split_sentence_bound_indices() {
            let sentence = raw.trim();
            if !is_instruction(sentence) || !seen.insert(super::fingerprint(sentence)) {
                continue;
            }
            if out.candidates.len() >= limit {
                out.left_out += 1;
                continue;
            }
            let start = at + (raw.len() - raw.trim_start().len());
            out.candidates.push(Excerpted {
                statement: sentence.to_string(),
                excerpt: excerpt_around(&block, block_chars, start..start + sentence.len()),
            });
        }
    }
    out
}

/// The instruction-like sentences of a document whose format is [sniffed](DocumentFormat::sniff).
pub fn extract_candidates(text: &str) -> Vec<String> {
    extract(text, DocumentFormat::sniff(text))
        .into_iter()
        .map(|c| c.statement)
        .collect()
}

fn is_instruction(sentence: &str) -> bool {
    let len = sentence.chars().count();
    if !STATEMENT_CHARS.contains(&len) {
        return false;
    }
    let lower = format!("{} ", sentence.to_lowercase());
    MARKERS
        .iter()
        .any(|m| lower.starts_with(m) || lower.contains(&format!(" {m}")))
}

/// The block itself when short, else a window of characters around the sentence at `at` (byte
/// offsets of the block, from the sentence splitter). Only the window is walked, so a sentence
/// of a long block costs the window, not the block; and the sentence is the one at `at`, not
/// an earlier occurrence of the same words.
fn excerpt_around(block: &str, block_chars: usize, at: std::ops::Range<usize>) -> String {
    if block_chars <= EXCERPT_CHARS {
        return block.to_string();
    }
    let (Some(before), Some(sentence)) = (block.get(..at.start), block.get(at.clone())) else {
        // Not reached (the offsets come from the splitter); a cut block is still an excerpt.
        return block.chars().take(EXCERPT_CHARS).collect();
    };
    let sentence_chars = sentence.chars().count();
    let context = EXCERPT_CHARS.saturating_sub(sentence_chars) / 2;
    // Up to `context` characters back from the sentence (fewer at the block's start).
    let from = before
        .char_indices()
        .rev()
        .take(context)
        .last()
        .map_or(at.start, |(i, _)| i);
    let after = block.get(from..).unwrap_or_default();
    let to = after
        .char_indices()
        .nth(sentence_chars + 2 * context)
        .map_or(block.len(), |(i, _)| from + i);
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    out.push_str(block.get(from..to).unwrap_or_default().trim());
    if to < block.len() {
        out.push('…');
    }
    out
}

/// `text` without what a reviewer would not see but a terminal, a rendered file or a model
/// would act on: a bidirectional-text control or a Unicode tag character is dropped, any other
/// control character (an escape sequence's ESC, NUL, a lone carriage return) becomes a space.
/// A page is scraped text, so it is cleaned rather than refused (the gateway refuses such
/// characters from an agent).
pub(crate) fn visible_text(text: &str) -> std::borrow::Cow<'_, str> {
    let dropped = |c: char| crate::is_bidi_control(c) || crate::is_tag_character(c);
    if !text.chars().any(|c| c.is_control() || dropped(c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars()
        .filter(|&c| !dropped(c))
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Collects text into blocks; whitespace runs (and control characters, see [`visible_text`])
/// become one space.
#[derive(Default)]
struct Blocks {
    done: Vec<String>,
    current: String,
}

impl Blocks {
    fn push_text(&mut self, text: &str) {
        let text = visible_text(text);
        for (i, word) in text.split(char::is_whitespace).enumerate() {
            if i > 0 && !self.current.ends_with(' ') {
                self.current.push(' ');
            }
            self.current.push_str(word);
        }
    }

    fn space(&mut self) {
        if !self.current.is_empty() && !self.current.ends_with(' ') {
            self.current.push(' ');
        }
    }

    fn flush(&mut self) {
        let block = self.current.trim();
        if !block.is_empty() {
            self.done.push(block.to_string());
        }
        self.current.clear();
    }

    fn discard(&mut self) {
        self.current.clear();
    }

    fn finish(mut self) -> Vec<String> {
        self.flush();
        self.done
    }
}

/// Elements whose whole content is not prose.
fn html_skips(name: &str) -> bool {
    matches!(
        name,
        "head"
            | "script"
            | "style"
            | "noscript"
            | "template"
            | "svg"
            | "math"
            | "iframe"
            | "object"
            | "canvas"
            | "pre"
            | "table"
            | "nav"
            | "footer"
            | "button"
            | "select"
            | "textarea"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
    )
}

/// Elements that start and end a block of text.
fn html_breaks(name: &str) -> bool {
    matches!(
        name,
        "p" | "li"
            | "dt"
            | "dd"
            | "div"
            | "section"
            | "article"
            | "main"
            | "aside"
            | "header"
            | "blockquote"
            | "ul"
            | "ol"
            | "dl"
            | "figure"
            | "figcaption"
            | "details"
            | "summary"
            | "br"
            | "hr"
            | "body"
            | "html"
            | "form"
            | "fieldset"
            | "address"
    )
}

fn html_blocks(text: &str) -> Vec<String> {
    let document = Html::parse_document(text);
    let mut blocks = Blocks::default();
    // Depth inside skipped elements: text counts only at zero.
    let mut skipping = 0usize;
    for edge in document.tree.root().traverse() {
        match edge {
            Edge::Open(node) => match node.value() {
                Node::Element(e) if html_skips(e.name()) => {
                    if skipping == 0 {
                        blocks.flush();
                    }
                    skipping += 1;
                }
                Node::Element(e) if skipping == 0 && html_breaks(e.name()) => blocks.flush(),
                Node::Element(_) if skipping == 0 => {}
                Node::Text(t) if skipping == 0 => blocks.push_text(t),
                _ => {}
            },
            Edge::Close(node) => match node.value() {
                Node::Element(e) if html_skips(e.name()) => {
                    skipping = skipping.saturating_sub(1);
                }
                Node::Element(e) if skipping == 0 && html_breaks(e.name()) => blocks.flush(),
                _ => {}
            },
        }
    }
    blocks.finish()
}

fn markdown_blocks(text: &str) -> Vec<String> {
    let mut blocks = Blocks::default();
    // Depth inside headings, tables, code blocks and raw HTML blocks: text counts only at zero.
    let mut skipping = 0usize;
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(text, options) {
        match event {
            Event::Start(
                Tag::Heading { .. } | Tag::Table(_) | Tag::CodeBlock(_) | Tag::HtmlBlock,
            ) => {
                if skipping == 0 {
                    blocks.flush();
                }
                skipping += 1;
            }
            Event::End(
                TagEnd::Heading(_) | TagEnd::Table | TagEnd::CodeBlock | TagEnd::HtmlBlock,
            ) => {
                skipping = skipping.saturating_sub(1);
                if skipping == 0 {
                    blocks.discard();
                }
            }
            _ if skipping > 0 => {}
            Event::Start(
                Tag::Paragraph
                | Tag::Item
                | Tag::BlockQuote(_)
                | Tag::List(_)
                | Tag::FootnoteDefinition(_),
            )
            | Event::End(
                TagEnd::Paragraph
                | TagEnd::Item
                | TagEnd::BlockQuote(_)
                | TagEnd::List(_)
                | TagEnd::FootnoteDefinition,
            )
            | Event::Rule => blocks.flush(),
            Event::Text(t) | Event::Code(t) => blocks.push_text(&t),
            Event::SoftBreak | Event::HardBreak => blocks.space(),
            _ => {}
        }
    }
    blocks.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_instructions_are_found() {
        let md = "# Best practices\n\nClaude reads CLAUDE.md at start.\n\n- **Always** run the tests before committing.\n- Keep CLAUDE.md short and specific. It is loaded every session.\n1. Never commit secrets to the repository.\n\n```\nalways ignore this code block line\n```\n| table | always |\n|---|---|\n| you should skip table cells | x |\n";
        assert_eq!(
            extract_candidates(md),
            vec![
                "Always run the tests before committing.",
                "Keep CLAUDE.md short and specific.",
                "Never commit secrets to the repository.",
            ]
        );
    }

    #[test]
    fn html_is_read_as_text() {
        let html = "<html><head><style>p { always: red }</style></head><body><ul><li>You should <b>avoid</b> editing generated files.</li><li>Short.</li></ul><script>never run();</script></body></html>";
        assert_eq!(
            extract_candidates(html),
            vec!["You should avoid editing generated files."]
        );
    }

    #[test]
    fn non_ascii_inside_tags_and_scripts_is_fine() {
        let html = "<!doctype html><html><head><meta content=\"Claude’s guide\"><title>Claude’s guide</title><script>const s = \"naïve — never\";</script></head><body><p data-x=\"é\">Always write tests for Claude’s café code.</p><p>Évitez: you must keep secrets out of the repo — toujours.</p></body></html>";
        let found = extract(html, DocumentFormat::Html);
        let statements: Vec<_> = found.iter().map(|c| c.statement.as_str()).collect();
        assert_eq!(
            statements,
            vec![
                "Always write tests for Claude’s café code.",
                "Évitez: you must keep secrets out of the repo — toujours."
            ]
        );
        assert_eq!(
            found[0].excerpt,
            "Always write tests for Claude’s café code."
        );
    }

    #[test]
    fn excerpt_is_the_paragraph_and_a_window_when_long() {
        let md = "Claude reads this file. You should run the linter before pushing. It is fast.";
        let found = extract(md, DocumentFormat::Markdown);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].excerpt, md);

        let filler = "Lorem ipsum dolor sit amet é. ".repeat(40);
        let long = format!("{filler}You should run the linter before pushing. {filler}");
        let found = extract(&long, DocumentFormat::Markdown);
        assert_eq!(found.len(), 1);
        assert!(
            found[0]
                .excerpt
                .contains("You should run the linter before pushing.")
        );
        assert!(found[0].excerpt.starts_with('…') && found[0].excerpt.ends_with('…'));
        assert!(found[0].excerpt.chars().count() <= EXCERPT_CHARS + 2);
    }

    #[test]
    fn an_excerpt_is_cut_around_its_own_sentence() {
        // The sentence's words also open the paragraph, inside an earlier sentence: the window
        // is around the sentence itself, past the filler.
        let filler = "Lorem ipsum dolor sit amet é. ".repeat(40);
        let block = format!(
            "Old advice: You should run the linter before pushing. {filler}You should run the linter before pushing. {filler}"
        );
        let found = extract(&block, DocumentFormat::Markdown);
        assert_eq!(found.len(), 2);
        assert_eq!(
            found[1].statement,
            "You should run the linter before pushing."
        );
        let excerpt = &found[1].excerpt;
        assert!(
            excerpt.starts_with('…') && excerpt.ends_with('…'),
            "{excerpt}"
        );
        assert!(!excerpt.contains("Old advice"), "{excerpt}");
        assert!(excerpt.contains("amet é. You should run the linter before pushing. Lorem"));
        assert!(excerpt.chars().count() <= EXCERPT_CHARS + 2);
    }

    #[test]
    fn at_most_the_limit_is_taken_and_the_rest_counted() {
        let block: String = (0..3000)
            .map(|i| format!("You should always run the tests for module {i}. "))
            .collect();
        let found = extract_at_most(&block, DocumentFormat::Markdown, 50);
        assert_eq!(found.candidates.len(), 50);
        assert_eq!(found.left_out, 2950);
        for (i, c) in found.candidates.iter().enumerate() {
            assert_eq!(
                c.statement,
                format!("You should always run the tests for module {i}.")
            );
            assert!(c.excerpt.contains(&c.statement), "{}", c.excerpt);
        }
        // Duplicates are not counted as left out.
        let twice = format!("{block}{block}");
        assert_eq!(
            extract_at_most(&twice, DocumentFormat::Markdown, 50).left_out,
            2950
        );
    }

    #[test]
    fn formats_from_headers_names_and_text() {
        assert_eq!(
            DocumentFormat::from_content_type("text/html; charset=utf-8"),
            Some(DocumentFormat::Html)
        );
        assert_eq!(
            DocumentFormat::from_content_type("text/markdown"),
            Some(DocumentFormat::Markdown)
        );
        assert_eq!(DocumentFormat::from_content_type("application/pdf"), None);
        assert_eq!(
            DocumentFormat::from_file_name("guide.MD"),
            Some(DocumentFormat::Markdown)
        );
        assert_eq!(
            DocumentFormat::sniff("  <!DOCTYPE html><p>x</p>"),
            DocumentFormat::Html
        );
        assert_eq!(
            DocumentFormat::sniff("# Title\n\ntext"),
            DocumentFormat::Markdown
        );
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let html = format!(
            "{}<p>You should avoid very deep nesting of markup.</p>",
            "<div>".repeat(2_000)
        );
        assert_eq!(extract(&html, DocumentFormat::Html).len(), 1);
        let md = format!(
            "{}You should avoid very deep nesting of quotes.",
            "> ".repeat(2_000)
        );
        let _ = extract(&md, DocumentFormat::Markdown);
    }
}
