//! Code-aware chunking: a source file cut into the units a reader would cite.
//!
//! Where the language is known the unit is a top-level item, found without a parser:
//!
//! - Rust, Go, JavaScript and TypeScript (brace languages): a small lexer tracks brace depth
//!   while skipping strings, character literals and comments; an item ends when the depth comes
//!   back to zero at a `}` or `;`. Leading comments, doc comments, attributes and decorators stay
//!   with the item they introduce.
//! - Python: an item is a top-level `def`/`class` (with its decorators) and the indented lines
//!   that follow it.
//!
//! The first significant line names the [`ChunkType`]: `function`, `type` (struct, enum, trait,
//! class, interface, type alias), `impl` (a Rust impl block), `module` (mod, namespace), or
//! `block` (imports, constants, statements: consecutive small ones are merged). An item longer
//! than [`ChunkConfig::max_lines`] is cut into parts of that size, keeping its type. Any other
//! file (Markdown, config, an unknown language) is cut into overlapping `window`s.
//!
//! This is deliberately robust rather than exact: unbalanced braces (a syntax error, a macro
//! trick) degrade to larger chunks, never to a panic or lost lines.

use serde::{Deserialize, Serialize};

/// What a chunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkType {
    /// A function or method at top level.
    Function,
    /// A type: struct, enum, trait, union, class, interface, type alias.
    Type,
    /// A Rust `impl` block.
    Impl,
    /// A module or namespace.
    Module,
    /// Other top-level code: imports, constants, statements.
    Block,
    /// A window of lines from a file whose language is not known.
    Window,
}

impl ChunkType {
    /// The payload string (`function`, `type`, `impl`, `module`, `block`, `window`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChunkType::Function => "function",
            ChunkType::Type => "type",
            ChunkType::Impl => "impl",
            ChunkType::Module => "module",
            ChunkType::Block => "block",
            ChunkType::Window => "window",
        }
    }
}

/// A language the chunker understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// `.rs`
    Rust,
    /// `.py`
    Python,
    /// `.js`, `.jsx`, `.mjs`, `.cjs`
    JavaScript,
    /// `.ts`, `.tsx`, `.mts`, `.cts`
    TypeScript,
    /// `.go`
    Go,
}

impl Language {
    /// The language of a file, from its extension.
    pub fn of_path(path: &str) -> Option<Self> {
        let ext = path.rsplit_once('.')?.1.to_ascii_lowercase();
        Some(match ext.as_str() {
            "rs" => Language::Rust,
            "py" | "pyi" => Language::Python,
            "js" | "jsx" | "mjs" | "cjs" => Language::JavaScript,
            "ts" | "tsx" | "mts" | "cts" => Language::TypeScript,
            "go" => Language::Go,
            _ => return None,
        })
    }

    /// The payload string.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Go => "go",
        }
    }
}

/// Chunk sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkConfig {
    /// An item longer than this is cut into parts of this many lines.
    pub max_lines: usize,
    /// The window size for files of unknown language.
    pub window_lines: usize,
    /// How many lines consecutive windows share.
    pub overlap_lines: usize,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            max_lines: 120,
            window_lines: 60,
            overlap_lines: 10,
        }
    }
}

/// A piece of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The lines, joined by `\n`.
    pub text: String,
    /// First line, 1-based.
    pub start_line: usize,
    /// Last line, 1-based, inclusive.
    pub end_line: usize,
    /// What it is.
    pub chunk_type: ChunkType,
}

/// Cuts a file into chunks. `path` picks the language; blank-only chunks are dropped.
pub fn chunk_file(path: &str, text: &str, config: &ChunkConfig) -> Vec<Chunk> {
    let lines: Vec<&str> = text.lines().collect();
    let config = ChunkConfig {
        max_lines: config.max_lines.max(1),
        window_lines: config.window_lines.max(1),
        overlap_lines: config
            .overlap_lines
            .min(config.window_lines.saturating_sub(1)),
    };
    let items = match Language::of_path(path) {
        Some(Language::Python) => python_items(&lines),
        Some(lang) => brace_items(&lines, lang),
        None => return windows(&lines, &config),
    };
    let items = merge_blocks(items, &lines, config.max_lines);
    let mut out = Vec::new();
    for (start, end, ty) in items {
        // Cut long items; each part keeps the item's type.
        let mut s = start;
        while s < end {
            let e = (s + config.max_lines).min(end);
            push(&mut out, &lines, s, e, ty);
            s = e;
        }
    }
    out
}

fn push(out: &mut Vec<Chunk>, lines: &[&str], start: usize, end: usize, ty: ChunkType) {
    let slice = &lines[start..end];
    if slice.iter().all(|l| l.trim().is_empty()) {
        return;
    }
    out.push(Chunk {
        text: slice.join("\n"),
        start_line: start + 1,
        end_line: end,
        chunk_type: ty,
    });
}

fn windows(lines: &[&str], c: &ChunkConfig) -> Vec<Chunk> {
    let mut out = Vec::new();
    let step = c.window_lines - c.overlap_lines;
    let mut s = 0;
    while s < lines.len() {
        let e = (s + c.window_lines).min(lines.len());
        push(&mut out, lines, s, e, ChunkType::Window);
        if e == lines.len() {
            break;
        }
        s += step;
    }
    out
}

/// Merges runs of `block` items separated only by blank lines while they fit in `max_lines`.
fn merge_blocks(
    items: Vec<(usize, usize, ChunkType)>,
    lines: &[&str],
    max_lines: usize,
) -> Vec<(usize, usize, ChunkType)> {
    let mut out: Vec<(usize, usize, ChunkType)> = Vec::with_capacity(items.len());
    for it in items {
        if let Some(last) = out.last_mut()
            && last.2 == ChunkType::Block
            && it.2 == ChunkType::Block
            && last.1 <= it.0
            && lines[last.1..it.0].iter().all(|l| l.trim().is_empty())
            && it.1 - last.0 <= max_lines
        {
            last.1 = it.1;
            continue;
        }
        out.push(it);
    }
    out
}

/// A line that only introduces the next item (comment, attribute, decorator) or is blank.
fn is_preamble(line: &str) -> bool {
    let t = line.trim_start();
    t.is_empty()
        || t.starts_with("//")
        || t.starts_with("/*")
        || t.starts_with('*')
        || t.starts_with("#[")
        || t.starts_with("#![")
        || t.starts_with('@')
}

/// Brace depth bookkeeping across lines, skipping strings and comments.
#[derive(Default)]
struct BraceLexer {
    depth: i64,
    in_block_comment: bool,
    /// Inside a string that spans lines: its closing quote.
    in_string: Option<char>,
}

impl BraceLexer {
    /// Feeds one line; returns the last significant character outside strings and comments.
    fn feed(&mut self, line: &str, lang: Language) -> Option<char> {
        let chars: Vec<char> = line.chars().collect();
        let mut last = None;
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let next = chars.get(i + 1).copied();
            if self.in_block_comment {
                if c == '*' && next == Some('/') {
                    self.in_block_comment = false;
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            if let Some(q) = self.in_string {
                if c == '\\' {
                    i += 2;
                    continue;
                }
                if c == q {
                    self.in_string = None;
                    last = Some(c);
                }
                i += 1;
                continue;
            }
            match c {
                '/' if next == Some('/') => break,
                '/' if next == Some('*') => {
                    self.in_block_comment = true;
                    i += 2;
                    continue;
                }
                '"' | '`' => self.in_string = Some(c),
                '\'' => {
                    if lang == Language::Rust {
                        // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the former
                        // has a closing quote within a few characters.
                        if next == Some('\\') {
                            if let Some(end) = chars[i + 2..].iter().position(|&x| x == '\'') {
                                i += end + 3;
                                last = Some('\'');
                                continue;
                            }
                        } else if chars.get(i + 2) == Some(&'\'') {
                            i += 3;
                            last = Some('\'');
                            continue;
                        }
                    } else {
                        self.in_string = Some('\'');
                    }
                }
                '{' | '(' | '[' => self.depth += 1,
                '}' | ')' | ']' => self.depth -= 1,
                _ => {}
            }
            if !c.is_whitespace() {
                last = Some(c);
            }
            i += 1;
        }
        // Ordinary quotes do not span lines in these languages (Rust strings may; keep them
        // open only there and for template literals).
        if matches!(self.in_string, Some('\''))
            || (lang != Language::Rust && self.in_string == Some('"'))
        {
            self.in_string = None;
        }
        last
    }
}

fn brace_items(lines: &[&str], lang: Language) -> Vec<(usize, usize, ChunkType)> {
    let mut items = Vec::new();
    let mut lex = BraceLexer::default();
    let mut start: Option<usize> = None;
    let mut head: Option<usize> = None;
    for (i, line) in lines.iter().enumerate() {
        let depth_before = lex.depth;
        let in_comment_before = lex.in_block_comment || lex.in_string.is_some();
        let last = lex.feed(line, lang);
        if start.is_none() {
            if line.trim().is_empty() {
                continue;
            }
            start = Some(i);
        }
        if head.is_none() && depth_before <= 0 && !in_comment_before && !is_preamble(line) {
            head = Some(i);
        }
        let closed = lex.depth <= 0
            && !lex.in_block_comment
            && lex.in_string.is_none()
            && head.is_some()
            && (matches!(last, Some('}') | Some(';'))
                || (lang == Language::Go
                    || lang == Language::JavaScript
                    || lang == Language::TypeScript)
                    && depth_before <= 0
                    && last.is_some());
        if closed {
            if lex.depth < 0 {
                lex.depth = 0;
            }
            let s = start.unwrap_or(i);
            let ty = head.map_or(ChunkType::Block, |h| classify(lines[h], lang));
            items.push((s, i + 1, ty));
            start = None;
            head = None;
        }
    }
    if let Some(s) = start {
        let ty = head.map_or(ChunkType::Block, |h| classify(lines[h], lang));
        items.push((s, lines.len(), ty));
    }
    items
}

fn python_items(lines: &[&str]) -> Vec<(usize, usize, ChunkType)> {
    let mut items: Vec<(usize, usize, ChunkType)> = Vec::new();
    // The item being built: its first line and type.
    let mut current: Option<(usize, ChunkType)> = None;
    // The first line of comments/decorators waiting for the statement they introduce.
    let mut pending: Option<usize> = None;
    let mut open_brackets: i64 = 0;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        let top = open_brackets <= 0 && !t.is_empty() && !line.starts_with([' ', '\t']);
        if top {
            if t.starts_with('#') || t.starts_with('@') {
                pending.get_or_insert(i);
            } else {
                let ty = if t.starts_with("class ") {
                    ChunkType::Type
                } else if t.starts_with("def ") || t.starts_with("async def ") {
                    ChunkType::Function
                } else {
                    ChunkType::Block
                };
                let begin = pending.take().unwrap_or(i);
                let continues_block = ty == ChunkType::Block
                    && matches!(current, Some((_, ChunkType::Block)))
                    && begin == i;
                if !continues_block {
                    if let Some((s, cty)) = current.take() {
                        items.push((s, begin, cty));
                    }
                    current = Some((begin, ty));
                }
            }
        } else if current.is_none() && pending.is_none() && !t.is_empty() {
            current = Some((i, ChunkType::Block));
        }
        for c in t.chars() {
            match c {
                '(' | '[' | '{' => open_brackets += 1,
                ')' | ']' | '}' => open_brackets -= 1,
                '#' => break,
                _ => {}
            }
        }
    }
    match (current, pending) {
        (Some((s, ty)), _) => items.push((s, lines.len(), ty)),
        (None, Some(p)) => items.push((p, lines.len(), ChunkType::Block)),
        (None, None) => {}
    }
    // Trim trailing blank lines of each item.
    items
        .into_iter()
        .map(|(s, mut e, t)| {
            while e > s + 1 && lines[e - 1].trim().is_empty() {
                e -= 1;
            }
            (s, e, t)
        })
        .collect()
}

/// Names the item by its first significant line.
fn classify(line: &str, lang: Language) -> ChunkType {
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == '(' || c == '<' || c == '{')
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w);
    match lang {
        Language::Rust => {
            if has("fn") {
                ChunkType::Function
            } else if has("impl") {
                ChunkType::Impl
            } else if has("struct") || has("enum") || has("trait") || has("type") || has("union") {
                ChunkType::Type
            } else if has("mod") {
                ChunkType::Module
            } else {
                ChunkType::Block
            }
        }
        Language::Go => {
            if has("func") {
                ChunkType::Function
            } else if has("type") {
                ChunkType::Type
            } else {
                ChunkType::Block
            }
        }
        Language::JavaScript | Language::TypeScript => {
            if has("function") || has("function*") || line.contains("=>") {
                ChunkType::Function
            } else if has("class")
                || has("interface")
                || has("enum")
                || (has("type") && line.contains('='))
            {
                ChunkType::Type
            } else if has("namespace") || has("module") {
                ChunkType::Module
            } else {
                ChunkType::Block
            }
        }
        Language::Python => ChunkType::Block,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(chunks: &[Chunk]) -> Vec<(ChunkType, usize, usize)> {
        chunks
            .iter()
            .map(|c| (c.chunk_type, c.start_line, c.end_line))
            .collect()
    }

    #[test]
    fn rust_items() {
        let src = r#"use std::fmt;
use std::io;

/// A point.
#[derive(Debug)]
pub struct Point {
    x: i32,
}

impl Point {
    fn new() -> Self {
        let brace = '{';
        let s = "}}}";
        Self { x: 0 }
    }
}

// Adds.
pub fn add<'a>(a: &'a str) -> &'a str {
    /* } */
    a
}

mod inner {
    fn f() {}
}
"#;
        let c = chunk_file("src/lib.rs", src, &ChunkConfig::default());
        assert_eq!(
            kinds(&c),
            vec![
                (ChunkType::Block, 1, 2),
                (ChunkType::Type, 4, 8),
                (ChunkType::Impl, 10, 16),
                (ChunkType::Function, 18, 22),
                (ChunkType::Module, 24, 26),
            ]
        );
        assert!(c[1].text.starts_with("/// A point."));
    }

    #[test]
    fn go_and_ts_items() {
        let go = "package main\n\nimport \"fmt\"\n\ntype User struct {\n\tName string\n}\n\nfunc (u User) Hello() string {\n\treturn \"}\" + u.Name\n}\n";
        let c = chunk_file("main.go", go, &ChunkConfig::default());
        assert_eq!(
            kinds(&c),
            vec![
                (ChunkType::Block, 1, 3),
                (ChunkType::Type, 5, 7),
                (ChunkType::Function, 9, 11)
            ]
        );
        let ts = "import { x } from './x';\n\nexport interface Repo {\n  id: number;\n}\n\nexport const load = async (id: number) => {\n  return `${id}}`;\n};\n\nexport class Service {\n  run() { return 1; }\n}\n";
        let c = chunk_file("a.ts", ts, &ChunkConfig::default());
        assert_eq!(
            kinds(&c),
            vec![
                (ChunkType::Block, 1, 1),
                (ChunkType::Type, 3, 5),
                (ChunkType::Function, 7, 9),
                (ChunkType::Type, 11, 13)
            ]
        );
    }

    #[test]
    fn python_items_keep_decorators() {
        let py = "import os\nimport sys\n\n@dataclass\nclass A:\n    x: int\n\n    def m(self):\n        return (1,\n2)\n\n\ndef f():\n    pass\n\nX = 1\n";
        let c = chunk_file("m.py", py, &ChunkConfig::default());
        assert_eq!(
            kinds(&c),
            vec![
                (ChunkType::Block, 1, 2),
                (ChunkType::Type, 4, 10),
                (ChunkType::Function, 13, 14),
                (ChunkType::Block, 16, 16)
            ]
        );
    }

    #[test]
    fn long_items_and_unknown_files_are_cut() {
        let body: String = (0..50).map(|i| format!("    let x{i} = {i};\n")).collect();
        let src = format!("fn big() {{\n{body}}}\n");
        let cfg = ChunkConfig {
            max_lines: 20,
            window_lines: 10,
            overlap_lines: 3,
        };
        let c = chunk_file("a.rs", &src, &cfg);
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|c| c.chunk_type == ChunkType::Function));
        assert_eq!(c[2].end_line, 52);
        let md: String = (0..25).map(|i| format!("line {i}\n")).collect();
        let w = chunk_file("README.md", &md, &cfg);
        assert_eq!(
            kinds(&w),
            vec![
                (ChunkType::Window, 1, 10),
                (ChunkType::Window, 8, 17),
                (ChunkType::Window, 15, 24),
                (ChunkType::Window, 22, 25)
            ]
        );
    }

    #[test]
    fn unbalanced_input_loses_no_line() {
        let src = "fn broken() {\n  if x {\n\nfn after() {}\n";
        let c = chunk_file("x.rs", src, &ChunkConfig::default());
        let covered: usize = c.iter().map(|c| c.end_line - c.start_line + 1).sum();
        assert_eq!(covered, 4);
        assert!(chunk_file("e.rs", "", &ChunkConfig::default()).is_empty());
    }
}
