//! Code-aware chunking: a source file cut into the units a reader would cite, each small enough
//! for the embedder to read whole.
//!
//! Where a grammar applies (Rust, Python, JavaScript, TypeScript, Go, Java, C, C++, C#, Ruby,
//! PHP) the file is parsed with tree-sitter and cut along its syntax tree (see [`syntax`]): a
//! function, a type, an `impl` block or a module is one chunk, its type read from the syntax
//! node; containers (`impl`, `class`, `trait`, `interface`, `namespace`, `mod`) are opened so that
//! each method is a chunk of its own that carries the container's header line as context; doc
//! comments, attributes and decorators stay with the item they introduce; tiny neighbours (`use`,
//! `mod` declarations, constants) are merged into one `block`. Markdown is cut by headings
//! ([`text`]). Anything else is cut into token-sized `window`s.
//!
//! Sizes are in the embedder's own tokens: the caller passes the embedder's token counter and its
//! input window ([`ChunkConfig::max_tokens`]), and no chunk's [`Chunk::embedding_text`] is longer
//! than that budget (an item that does not fit is cut at line boundaries, each part keeping the
//! item's signature as context; a single line longer than the budget is cut by characters).
//!
//! A type's chunk carries an outline of the containers of its file that give it members
//! ([`ChunkConfig::outline_types`], [`Chunk::outline`]): a three-line `struct Router<T>` says
//! nothing of inserting or matching routes, its `impl` does. Small named items can also be kept
//! whole and alone rather than merged with a neighbour ([`ChunkConfig::keep_small_items`]); that
//! one is off by default. Both defaults follow `benches/benches/memory_retrieval.rs` (figures in
//! `benches/README.md`).
//!
//! Parsing is robust rather than exact: tree-sitter recovers from syntax errors, and whatever the
//! tree looks like every non-blank line of the file ends up in exactly one chunk.

mod outline;
mod summary;
pub mod syntax;
pub mod text;

use serde::{Deserialize, Serialize};

pub use summary::summary_text;

/// What a chunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkType {
    /// A function or method.
    Function,
    /// A type: struct, enum, trait, union, class, interface, type alias.
    Type,
    /// A Rust `impl` block (its header and associated items other than methods).
    Impl,
    /// A module or namespace.
    Module,
    /// Other code: imports, constants, statements (small neighbours merged).
    Block,
    /// A Markdown section, from one heading to the next.
    Section,
    /// A window of lines from a file no grammar applies to.
    Window,
}

impl ChunkType {
    /// The payload string (`function`, `type`, `impl`, `module`, `block`, `section`, `window`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChunkType::Function => "function",
            ChunkType::Type => "type",
            ChunkType::Impl => "impl",
            ChunkType::Module => "module",
            ChunkType::Block => "block",
            ChunkType::Section => "section",
            ChunkType::Window => "window",
        }
    }

    /// How much a chunk of this type says about what it is: merged chunks keep the strongest.
    fn rank(self) -> u8 {
        match self {
            ChunkType::Function => 5,
            ChunkType::Type => 4,
            ChunkType::Impl => 3,
            ChunkType::Module => 2,
            ChunkType::Section => 1,
            ChunkType::Block | ChunkType::Window => 0,
        }
    }
}

/// A language the chunker understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Language {
    /// `.rs`
    Rust,
    /// `.py`, `.pyi`
    Python,
    /// `.js`, `.jsx`, `.mjs`, `.cjs`
    JavaScript,
    /// `.ts`, `.mts`, `.cts`
    TypeScript,
    /// `.tsx`
    Tsx,
    /// `.go`
    Go,
    /// `.java`
    Java,
    /// `.c`, `.h`
    C,
    /// `.cc`, `.cpp`, `.cxx`, `.hpp`, `.hh`, `.hxx`
    Cpp,
    /// `.cs`
    CSharp,
    /// `.rb`
    Ruby,
    /// `.php`
    Php,
    /// `.md`, `.markdown`
    Markdown,
}

impl Language {
    /// The language of a file, from its extension.
    pub fn of_path(path: &str) -> Option<Self> {
        let name = path.rsplit('/').next().unwrap_or(path);
        let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
        Some(match ext.as_str() {
            "rs" => Language::Rust,
            "py" | "pyi" => Language::Python,
            "js" | "jsx" | "mjs" | "cjs" => Language::JavaScript,
            "ts" | "mts" | "cts" => Language::TypeScript,
            "tsx" => Language::Tsx,
            "go" => Language::Go,
            "java" => Language::Java,
            "c" | "h" => Language::C,
            "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => Language::Cpp,
            "cs" => Language::CSharp,
            "rb" => Language::Ruby,
            "php" => Language::Php,
            "md" | "markdown" => Language::Markdown,
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
            Language::Tsx => "tsx",
            Language::Go => "go",
            Language::Java => "java",
            Language::C => "c",
            Language::Cpp => "cpp",
            Language::CSharp => "csharp",
            Language::Ruby => "ruby",
            Language::Php => "php",
            Language::Markdown => "markdown",
        }
    }
}

/// `path` (a file's path in its repository, or any one-line name read from it) as text that a
/// model, an agent or a panel reads shows it: each control character (a newline and a tab
/// too), bidirectional control (U+202A to U+202E, U+2066 to U+2069, ...) and line or paragraph
/// separator written as its escape (`\n`, `\u{1b}`, `\u{202e}`), every other character as it
/// is. A file name may hold any of them: a newline would start a line of its own in an answer
/// (a forged result or header line), an ESC sequence drive a terminal, an override reorder
/// what is shown. An ordinary name, whatever its script, is returned as it is (borrowed).
pub fn shown_path(path: &str) -> std::borrow::Cow<'_, str> {
    escaped_where(path, |c| {
        c == '\n' || c == '\t' || kberg_core::escaped_when_quoted(c)
    })
}

/// A chunk's code as text that a model, an agent or a panel reads shows it: its lines and
/// indentation as they are, and each character [`kberg_core::escaped_when_quoted`] names (ESC,
/// a lone CR, BEL, the bidirectional controls of a "Trojan Source" line, U+2028) written as its
/// escape. A repository's file may hold any of them: an override makes code read differently
/// from how it runs, an ESC sequence drives a terminal, a CR rewrites the line shown. Code
/// without them, whatever its script, is returned as it is (borrowed). (A file's CRLF line
/// ends are already plain line ends in a chunk.)
pub fn shown_code(code: &str) -> std::borrow::Cow<'_, str> {
    escaped_where(code, kberg_core::escaped_when_quoted)
}

/// `text` with each character `escaped` names written as its escape (`\n`, `\u{1b}`), the
/// others as they are; borrowed when there is none.
fn escaped_where(text: &str, escaped: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(&escaped) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The most characters of one line a chunk carries as a header line (a container's or a long
/// item's first line) or as a heading in its context. Each part of a long item and each member
/// of a container gets a copy, and the token counter reads it again for each: a line of a
/// repository's file may be the whole file (256 KiB), and copied to each of its thousands of
/// one-line parts it would cost gigabytes and a count of every copy. Code lines are far shorter;
/// a longer one is cut at a character boundary, which still names what follows.
pub(crate) const MAX_HEADER_LINE_CHARS: usize = 200;

/// `line` cut to [`MAX_HEADER_LINE_CHARS`] characters.
pub(crate) fn header_line(line: &str) -> &str {
    match line.char_indices().nth(MAX_HEADER_LINE_CHARS) {
        Some((cut, _)) => &line[..cut],
        None => line,
    }
}

/// Chunk sizes, in the embedder's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkConfig {
    /// The most tokens a chunk's [`Chunk::embedding_text`] may take. The pattern index lowers it
    /// to the embedder's [`crate::Embedder::max_input_tokens`] when that is smaller.
    pub max_tokens: usize,
    /// Chunks under this many tokens are merged with a neighbour when the sum fits.
    pub min_tokens: usize,
    /// How many lines consecutive windows share (files no grammar applies to, and parts of a
    /// long item).
    pub overlap_lines: usize,
    /// Whether a named item (function, type, impl, module) under `min_tokens` stays a chunk of
    /// its own. When set, only `block`s (imports, constants, statements) merge, with each other
    /// or into a neighbouring item; when not (the default), any small span merges with its
    /// neighbour.
    pub keep_small_items: bool,
    /// Whether a `type` chunk's embedded text ends with its outline: the containers of the same
    /// file that give the type methods, with their members' names ([`Chunk::outline`]).
    pub outline_types: bool,
}

impl Default for ChunkConfig {
    fn default() -> Self {
        Self {
            max_tokens: 256,
            min_tokens: 48,
            overlap_lines: 2,
            keep_small_items: false,
            outline_types: true,
        }
    }
}

/// Counts the tokens a text takes in the embedder's input (see
/// [`crate::Embedder::count_tokens`]).
pub type TokenCounter<'a> = &'a (dyn Fn(&str) -> usize + Sync);

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
    /// The names of the enclosing items, outermost first, ending with this chunk's own item:
    /// `["impl Store", "fn load"]`. Empty for blocks and windows at top level.
    pub context: Vec<String>,
    /// The header lines of the enclosing containers (`impl Store {`), given to the embedder
    /// before the text so a method is read in its container's light.
    pub header: String,
    /// For a `type`: the containers of its file that give it members, one a line with the
    /// members' names (`impl<T> Router<T>: new, insert, at`), given to the embedder after the
    /// text. Empty for other chunks, and lines that would not fit the budget are left out.
    pub outline: String,
}

impl Chunk {
    /// The context as one string: `impl Store > fn load`.
    pub fn context_path(&self) -> String {
        self.context.join(" > ")
    }

    /// What is embedded for this chunk: the file path, the containers' header lines, the text,
    /// and a type's outline.
    pub fn embedding_text(&self, path: &str) -> String {
        embedding_text_with_outline(path, &self.header, &self.text, &self.outline)
    }

    /// The second text embedded for this chunk: the path, the enclosing names, and each item's
    /// signature and documentation ([`summary_text`]); `None` for Markdown sections, windows,
    /// and chunks with neither signature nor documentation.
    pub fn summary_text(&self, path: &str) -> Option<String> {
        match self.chunk_type {
            ChunkType::Section | ChunkType::Window => None,
            _ => summary_text(path, &self.context_path(), &self.text),
        }
    }
}

fn embedding_text_with_outline(path: &str, header: &str, text: &str, outline: &str) -> String {
    let head = embedding_text(path, header, text);
    if outline.is_empty() {
        head
    } else {
        format!("{head}\n{outline}")
    }
}

fn embedding_text(path: &str, header: &str, text: &str) -> String {
    // The path is the text's first line: one line, whatever the file's name holds.
    let path = shown_path(path);
    if header.is_empty() {
        format!("{path}\n{text}")
    } else {
        format!("{path}\n{header}\n{text}")
    }
}

/// Cuts a file into chunks. `path` picks the grammar; `count` is the embedder's token counter.
/// Blank-only chunks are dropped; every other line is in exactly one chunk.
pub fn chunk_file(
    path: &str,
    text: &str,
    config: &ChunkConfig,
    count: TokenCounter<'_>,
) -> Vec<Chunk> {
    let config = ChunkConfig {
        max_tokens: config.max_tokens.max(16),
        min_tokens: config.min_tokens.min(config.max_tokens / 2),
        ..*config
    };
    let lines = Lines::new(path, text, count);
    let chunks = match Language::of_path(path) {
        Some(Language::Markdown) => text::markdown(&lines, &config),
        Some(lang) => syntax::chunk(lang, &lines, &config).unwrap_or_else(|| {
            text::windows(&lines, 0, lines.len(), &[], "", &config, ChunkType::Window)
        }),
        None => text::windows(&lines, 0, lines.len(), &[], "", &config, ChunkType::Window),
    };
    let mut chunks: Vec<Chunk> = chunks
        .into_iter()
        .flat_map(|s| s.fit(&lines, &config))
        .map(|s| s.finish(&lines, &config))
        .collect();
    if config.outline_types {
        outline::outline_types(path, &mut chunks, config.max_tokens, count);
    }
    chunks
}

/// A file's lines with their token costs, shared by the cutters.
pub(crate) struct Lines<'a> {
    path: &'a str,
    source: &'a str,
    lines: Vec<&'a str>,
    /// Tokens of each line (plus one for its line break).
    cost: Vec<usize>,
    count: TokenCounter<'a>,
}

impl<'a> Lines<'a> {
    fn new(path: &'a str, source: &'a str, count: TokenCounter<'a>) -> Self {
        let lines: Vec<&str> = source.lines().collect();
        let cost = lines
            .iter()
            .map(|l| if l.trim().is_empty() { 1 } else { count(l) + 1 })
            .collect();
        Self {
            path,
            source,
            lines,
            cost,
            count,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lines.len()
    }

    pub(crate) fn line(&self, i: usize) -> &'a str {
        self.lines.get(i).copied().unwrap_or("")
    }

    pub(crate) fn source(&self) -> &'a str {
        self.source
    }

    /// Tokens of lines `start..end` (additive estimate; [`Span::finish`] checks exactly).
    pub(crate) fn cost(&self, start: usize, end: usize) -> usize {
        self.cost[start.min(self.cost.len())..end.min(self.cost.len())]
            .iter()
            .sum()
    }

    /// Tokens the path line and `header` add to every chunk.
    pub(crate) fn overhead(&self, header: &str) -> usize {
        let h = if header.is_empty() {
            0
        } else {
            (self.count)(header) + 1
        };
        (self.count)(&shown_path(self.path)) + 1 + h
    }

    pub(crate) fn blank(&self, start: usize, end: usize) -> bool {
        (start..end.min(self.len())).all(|i| self.line(i).trim().is_empty())
    }
}

/// A chunk before its text is cut out: lines `start..end` (0-based, exclusive end).
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) ty: ChunkType,
    pub(crate) context: Vec<String>,
    pub(crate) header: String,
}

impl Span {
    /// The span itself when its lines fit the budget with its header, else cut into windows
    /// of whole lines that do. The cutters size what they cut, but some spans grow by what
    /// they gather (a run of comments at the end of a body, the lines above a container's
    /// first member, punctuation lines no syntax node claimed); [`Span::finish`] would drop
    /// every line of those past the budget.
    fn fit(self, lines: &Lines<'_>, config: &ChunkConfig) -> Vec<Span> {
        let budget = config
            .max_tokens
            .saturating_sub(lines.overhead(&self.header));
        if self.end <= self.start + 1 || lines.cost(self.start, self.end) <= budget {
            return vec![self];
        }
        text::windows(
            lines,
            self.start,
            self.end,
            &self.context,
            &self.header,
            config,
            self.ty,
        )
    }

    /// Cuts the text out and makes sure the embedded text fits the budget: the additive line
    /// estimate is checked against the exact count, and trailing characters are dropped from
    /// the text until it fits (only a line longer than the whole budget gets there).
    fn finish(self, lines: &Lines<'_>, config: &ChunkConfig) -> Chunk {
        let mut text = (self.start..self.end)
            .map(|i| lines.line(i))
            .collect::<Vec<_>>()
            .join("\n");
        let mut header = self.header;
        let fits = |h: &str, t: &str| {
            (lines.count)(&embedding_text(lines.path, h, t)) <= config.max_tokens
        };
        if !fits(&header, &text) {
            if !fits("", "") || !fits(&header, "") {
                header.clear();
            }
            // Binary search on a character prefix of the text.
            let chars: Vec<(usize, char)> = text.char_indices().collect();
            let (mut lo, mut hi) = (0usize, chars.len());
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                let cut = chars.get(mid).map_or(text.len(), |c| c.0);
                if fits(&header, &text[..cut]) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            let cut = chars.get(lo).map_or(text.len(), |c| c.0);
            text.truncate(cut);
        }
        Chunk {
            text,
            start_line: self.start + 1,
            end_line: self.end,
            chunk_type: self.ty,
            context: self.context,
            header,
            outline: String::new(),
        }
    }
}

/// Merges neighbours within one list of spans while the sum fits the budget: consecutive
/// `block`s, and a span under `min_tokens` with its neighbour; with
/// [`ChunkConfig::keep_small_items`], two named items (function, type, impl, module) never
/// merge, so only a small block joins a neighbouring item.
pub(crate) fn merge_small(spans: Vec<Span>, lines: &Lines<'_>, config: &ChunkConfig) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans {
        if let Some(last) = out.last_mut() {
            let budget = config
                .max_tokens
                .saturating_sub(lines.overhead(&last.header));
            let fits = lines.cost(last.start, s.end) <= budget && last.header == s.header;
            let small = |x: &Span| lines.cost(x.start, x.end) < config.min_tokens;
            let both_blocks = last.ty == ChunkType::Block && s.ty == ChunkType::Block;
            let named = |x: &Span| {
                matches!(
                    x.ty,
                    ChunkType::Function | ChunkType::Type | ChunkType::Impl | ChunkType::Module
                )
            };
            let both_named = named(last) && named(&s);
            let small_merges =
                (small(last) || small(&s)) && !(config.keep_small_items && both_named);
            if fits && (both_blocks || small_merges) {
                if s.ty.rank() > last.ty.rank() {
                    last.ty = s.ty;
                    last.context = s.context;
                } else if last.context.is_empty() {
                    last.context = s.context;
                }
                last.end = s.end;
                continue;
            }
        }
        out.push(s);
    }
    out
}

#[cfg(test)]
mod tests;
