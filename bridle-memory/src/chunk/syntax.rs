//! Chunking along a tree-sitter syntax tree.
//!
//! The grammars are the maintained tree-sitter ones for each language (one `tree-sitter` runtime,
//! grammars linked through `tree-sitter-language`). Node kinds differ per grammar, but the shapes
//! are alike, so one walk serves all of them with a small table of kind names:
//!
//! - *prefix* nodes (comments other than inner `//!` docs, Rust `#[...]` attributes) wait for the
//!   item they introduce and start its chunk;
//! - *wrappers* (`export_statement`, `decorated_definition`, `template_declaration`, ...) are
//!   classified by what they wrap;
//! - *containers* (`impl`, `trait`, `class`, `interface`, `namespace`, `mod`, Ruby `module`) are
//!   opened when they hold methods or do not fit: their header and non-method members form one
//!   chunk, each method is its own chunk carrying the container's header line;
//! - every other node is one item (cut at line boundaries when it does not fit), and neighbours
//!   that are blocks or tiny are merged (`merge_small`).
//!
//! Chunks are whole lines and never overlap; the lines between two top-level nodes (blank lines)
//! belong to no chunk, and every other line belongs to one.

use tree_sitter::{Node, Parser};

use super::text::windows;
use super::{ChunkConfig, ChunkType, Language, Lines, Span, header_line, merge_small};

/// Deepest container nesting that is opened; deeper containers are kept as items.
const MAX_DEPTH: usize = 4;

fn grammar(lang: Language) -> Option<tree_sitter::Language> {
    Some(match lang {
        Language::Rust => tree_sitter_rust::LANGUAGE.into(),
        Language::Python => tree_sitter_python::LANGUAGE.into(),
        Language::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
        Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX.into(),
        Language::Go => tree_sitter_go::LANGUAGE.into(),
        Language::Java => tree_sitter_java::LANGUAGE.into(),
        Language::C => tree_sitter_c::LANGUAGE.into(),
        Language::Cpp => tree_sitter_cpp::LANGUAGE.into(),
        Language::CSharp => tree_sitter_c_sharp::LANGUAGE.into(),
        Language::Ruby => tree_sitter_ruby::LANGUAGE.into(),
        Language::Php => tree_sitter_php::LANGUAGE_PHP.into(),
        Language::Markdown => return None,
    })
}

/// The chunk type a node kind names, looking through nothing (see [`inner`]).
fn kind_type(kind: &str) -> ChunkType {
    match kind {
        "function_item"
        | "function_signature_item"
        | "function_definition"
        | "function_declaration"
        | "generator_function_declaration"
        | "method_definition"
        | "method_declaration"
        | "constructor_declaration"
        | "destructor_declaration"
        | "operator_declaration"
        | "local_function_statement"
        | "method"
        | "singleton_method"
        | "method_signature"
        | "abstract_method_signature"
        | "function_signature"
        | "macro_definition"
        | "compact_constructor_declaration"
        | "arrow_function"
        | "function_expression" => ChunkType::Function,
        "struct_item"
        | "enum_item"
        | "union_item"
        | "trait_item"
        | "type_item"
        | "class_definition"
        | "class_declaration"
        | "abstract_class_declaration"
        | "interface_declaration"
        | "type_alias_declaration"
        | "enum_declaration"
        | "type_declaration"
        | "struct_specifier"
        | "class_specifier"
        | "enum_specifier"
        | "union_specifier"
        | "type_definition"
        | "record_declaration"
        | "struct_declaration"
        | "annotation_type_declaration"
        | "trait_declaration"
        | "class"
        | "delegate_declaration"
        | "alias_declaration"
        | "concept_definition" => ChunkType::Type,
        "impl_item" => ChunkType::Impl,
        "mod_item"
        | "module"
        | "namespace_definition"
        | "namespace_declaration"
        | "file_scoped_namespace_declaration"
        | "internal_module"
        | "foreign_mod_item"
        | "linkage_specification" => ChunkType::Module,
        _ => ChunkType::Block,
    }
}

/// The node a wrapper stands for (`export default class ...` is a class).
fn inner(node: Node<'_>) -> Node<'_> {
    let mut n = node;
    for _ in 0..4 {
        let next = match n.kind() {
            "export_statement" => n.child_by_field_name("declaration"),
            "decorated_definition" => n.child_by_field_name("definition"),
            "template_declaration" | "ambient_declaration" | "declare_statement" => {
                let mut c = n.walk();
                n.named_children(&mut c)
                    .find(|x| kind_type(x.kind()) != ChunkType::Block || x.kind() == "declaration")
            }
            "lexical_declaration" | "variable_declaration" => {
                // `const load = async () => {...}` is a function.
                let mut c = n.walk();
                let decl = n
                    .named_children(&mut c)
                    .find(|x| x.kind() == "variable_declarator");
                decl.and_then(|d| d.child_by_field_name("value"))
                    .filter(|v| kind_type(v.kind()) == ChunkType::Function)
            }
            _ => None,
        };
        match next {
            Some(x) => n = x,
            None => break,
        }
    }
    n
}

fn is_prefix(node: Node<'_>, lines: &Lines<'_>) -> bool {
    let k = node.kind();
    if k == "attribute_item" || k == "decorator" || k == "attribute_list" {
        return true;
    }
    if !k.contains("comment") {
        return false;
    }
    // Inner docs (`//!`, `/*!`) describe the enclosing module, not the next item.
    let t = lines.line(node.start_position().row).trim_start();
    !(t.starts_with("//!") || t.starts_with("/*!"))
}

/// The body of a container, if it has one.
fn body(node: Node<'_>) -> Option<Node<'_>> {
    if let Some(b) = node.child_by_field_name("body") {
        return Some(b);
    }
    let mut c = node.walk();
    node.named_children(&mut c).find(|x| {
        matches!(
            x.kind(),
            "declaration_list"
                | "field_declaration_list"
                | "class_body"
                | "interface_body"
                | "enum_body"
                | "body_statement"
                | "block"
                | "statement_block"
        )
    })
}

/// Last line (0-based, inclusive) a node covers.
fn last_row(node: Node<'_>) -> usize {
    let end = node.end_position();
    if end.column == 0 && end.row > node.start_position().row {
        end.row - 1
    } else {
        end.row
    }
}

/// A short name for an item: its first line up to the end of its name (`pub fn load`,
/// `impl<T> Display for Store<T>`, `class Store`), or the first line cut at `{` / `(`.
fn label(node: Node<'_>, lines: &Lines<'_>) -> String {
    let item = inner(node);
    let row = item.start_position().row;
    let line = lines.line(row);
    let named = item
        .child_by_field_name("name")
        .or_else(|| item.child_by_field_name("declarator"))
        .or_else(|| item.child_by_field_name("type"));
    let mut text = match named {
        Some(n) if n.end_position().row == row && n.end_position().column <= line.len() => line
            .get(item.start_position().column..n.end_position().column)
            .unwrap_or(line)
            .to_string(),
        _ => line.to_string(),
    };
    // Cut at the first `{` / `(` after a visibility's own parenthesis (`pub(crate) enum
    // Position` is named `Position`, not `pub`).
    let from = if text.starts_with("pub(") {
        text.find(')').map_or(0, |i| i + 1)
    } else {
        0
    };
    if let Some(i) = text[from..].find(['{', '(']) {
        text.truncate(from + i);
    }
    let t = text.trim().trim_end_matches(':').trim();
    t.chars().take(100).collect()
}

/// Chunks `lines` as `lang`, or `None` when no grammar applies or the parser gives up.
pub(crate) fn chunk(lang: Language, lines: &Lines<'_>, config: &ChunkConfig) -> Option<Vec<Span>> {
    let grammar = grammar(lang)?;
    let mut parser = Parser::new();
    parser.set_language(&grammar).ok()?;
    let tree = parser.parse(lines.source(), None)?;
    let root = tree.root_node();
    let mut walker = Walker { lines, config };
    let spans = walker.list(root, 0, &[], "", 0, lines.len());
    Some(fill_gaps(spans, lines, config))
}

/// Gives every non-blank line a chunk: lines no named node claimed (a stray brace in a file
/// with syntax errors, tokens the parser skipped) join the chunk before them when they are only
/// punctuation, and become `block`s otherwise.
fn fill_gaps(mut spans: Vec<Span>, lines: &Lines<'_>, config: &ChunkConfig) -> Vec<Span> {
    spans.sort_by_key(|s| s.start);
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    let mut covered = 0;
    let punctuation = |i: usize| !lines.line(i).chars().any(char::is_alphanumeric);
    let fill = |out: &mut Vec<Span>, from: usize, to: usize| {
        let mut i = from;
        while i < to {
            if lines.line(i).trim().is_empty() {
                i += 1;
                continue;
            }
            if punctuation(i)
                && let Some(last) = out.last_mut()
            {
                last.end = last.end.max(i + 1);
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < to && (lines.line(j).trim().is_empty() || !punctuation(j)) {
                j += 1;
            }
            out.extend(windows(lines, i, j, &[], "", config, ChunkType::Block));
            i = j;
        }
    };
    for mut s in spans {
        // Spans of a tree with errors may overlap: keep the earlier one whole.
        if let Some(last) = out.last() {
            if s.end <= last.end {
                continue;
            }
            s.start = s.start.max(last.end);
        }
        if s.start > covered {
            fill(&mut out, covered, s.start);
        }
        covered = covered.max(s.end);
        out.push(s);
    }
    fill(&mut out, covered, lines.len());
    out.retain(|s| s.start < s.end);
    out
}

struct Walker<'l, 'a> {
    lines: &'l Lines<'a>,
    config: &'l ChunkConfig,
}

impl Walker<'_, '_> {
    /// The spans of `parent`'s named children, whose lines lie in `from..to`.
    fn list(
        &mut self,
        parent: Node<'_>,
        depth: usize,
        context: &[String],
        header: &str,
        from: usize,
        to: usize,
    ) -> Vec<Span> {
        let mut spans: Vec<Span> = Vec::new();
        let mut pending: Option<usize> = None;
        let mut next_free = from;
        let mut cursor = parent.walk();
        let children: Vec<Node<'_>> = parent.named_children(&mut cursor).collect();
        for child in children {
            let first = child.start_position().row.max(next_free);
            let last = last_row(child).min(to.saturating_sub(1));
            if first > last || first >= to {
                continue;
            }
            if is_prefix(child, self.lines) {
                pending.get_or_insert(first);
                next_free = last + 1;
                continue;
            }
            let start = pending.take().unwrap_or(first);
            spans.extend(self.item(child, depth, context, header, start, first, last + 1));
            next_free = last + 1;
        }
        if let Some(p) = pending {
            // Comments at the end of a list: a block of their own.
            spans.push(Span {
                start: p,
                end: next_free.min(to),
                ty: ChunkType::Block,
                context: context.to_vec(),
                header: header.to_string(),
            });
        }
        merge_small(spans, self.lines, self.config)
    }

    /// The spans of one item whose prefix starts at `start`, its node at `first`, ending before
    /// `end`.
    #[allow(clippy::too_many_arguments)]
    fn item(
        &mut self,
        node: Node<'_>,
        depth: usize,
        context: &[String],
        header: &str,
        start: usize,
        first: usize,
        end: usize,
    ) -> Vec<Span> {
        let item = inner(node);
        let ty = kind_type(item.kind());
        let mut own = context.to_vec();
        if ty != ChunkType::Block {
            own.push(label(node, self.lines));
        }
        let budget = self
            .config
            .max_tokens
            .saturating_sub(self.lines.overhead(header));
        let fits = self.lines.cost(start, end) <= budget;
        let container = matches!(ty, ChunkType::Type | ChunkType::Impl | ChunkType::Module);
        if container
            && depth < MAX_DEPTH
            && let Some(b) = body(item)
        {
            let mut c = b.walk();
            let has_methods = b
                .named_children(&mut c)
                .any(|m| kind_type(inner(m).kind()) == ChunkType::Function);
            let open = ty == ChunkType::Impl || ty == ChunkType::Module || has_methods || !fits;
            let body_first = b.start_position().row;
            if open && body_first < end {
                return self.open(node, b, depth, &own, header, ty, start, first, end);
            }
        }
        if fits {
            return vec![Span {
                start,
                end,
                ty,
                context: own,
                header: header.to_string(),
            }];
        }
        // Too long: parts at line boundaries, each after the first carrying the signature.
        let sig_row = item.start_position().row.max(first);
        let sig = header_line(self.lines.line(sig_row).trim_end()).to_string();
        let part_header = if header.is_empty() {
            sig
        } else {
            format!("{header}\n{sig}")
        };
        let head_budget = budget;
        // The first part needs no signature header (it contains it).
        let mut e = start + 1;
        while e < end && self.lines.cost(start, e + 1) <= head_budget {
            e += 1;
        }
        let mut spans = vec![Span {
            start,
            end: e,
            ty,
            context: own.clone(),
            header: header.to_string(),
        }];
        if e < end {
            spans.extend(windows(
                self.lines,
                e,
                end,
                &own,
                &part_header,
                self.config,
                ty,
            ));
        }
        spans
    }

    /// A container opened: its head (header lines and non-method members merged by
    /// [`merge_small`]) and each member as its own span with the container's header line.
    #[allow(clippy::too_many_arguments)]
    fn open(
        &mut self,
        node: Node<'_>,
        body: Node<'_>,
        depth: usize,
        own: &[String],
        header: &str,
        ty: ChunkType,
        start: usize,
        first: usize,
        end: usize,
    ) -> Vec<Span> {
        // The header is the container's own first line, after decorators and annotations.
        let own_row = inner(node).start_position().row.max(first);
        let line = header_line(self.lines.line(own_row).trim_end());
        let member_header = if header.is_empty() {
            line.to_string()
        } else {
            format!("{header}\n{line}")
        };
        // Members start after the body's opening line when it is on the header's line
        // (`impl X {`), or at the body's first line (Python's `block`).
        let body_row = body.start_position().row;
        let members_from = if body_row == own_row {
            own_row + 1
        } else {
            body_row
        };
        let mut members = self.list(body, depth + 1, own, &member_header, members_from, end);
        // The header lines (and what precedes the first member) form the container's head.
        let head_end = members
            .first()
            .map_or(end, |m| m.start)
            .max(start + 1)
            .min(end);
        let head = Span {
            start,
            end: head_end,
            ty,
            context: own.to_vec(),
            header: header.to_string(),
        };
        // The closing lines after the last member join the last member.
        if let Some(last) = members.last_mut() {
            last.end = end;
        }
        // The head merges into the first member when it is small (the member keeps its type).
        let mut out = vec![head];
        out.append(&mut members);
        let budget_ok = |a: &Span, b: &Span| {
            self.lines.cost(a.start, b.end)
                <= self
                    .config
                    .max_tokens
                    .saturating_sub(self.lines.overhead(&b.header))
        };
        if out.len() > 1
            && self.lines.cost(out[0].start, out[0].end) < self.config.min_tokens
            && budget_ok(&out[0], &out[1])
        {
            let head = out.remove(0);
            out[0].start = head.start;
            if out[0].ty == ChunkType::Block {
                // A docstring or field list under the header is the container's own text.
                out[0].ty = head.ty;
                out[0].context = head.context;
            }
            // The member's text now holds the container's line: the header need not repeat it.
            out[0].header = header.to_string();
        }
        out
    }
}
