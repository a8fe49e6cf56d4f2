//! The chunker bridle-memory used before its tree-sitter chunker, kept verbatim in behaviour as
//! the retrieval benchmark's baseline (`benches/memory_retrieval.rs`): top-level items found by a
//! brace-depth lexer (Rust, Go, JavaScript, TypeScript) or by indentation (Python), items over
//! 120 lines cut into parts, 60-line windows for every other file. Sizes are in lines, not in the
//! embedder's tokens, which is what the benchmark measures against.
#![allow(missing_docs)]

/// What a chunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
