//! What a type's chunk says about the rest of its file: the containers that give it methods.
//!
//! A small type reads as little to an embedder: `pub struct Router<T> { root: Node<T> }` says
//! nothing of inserting or matching routes, which its `impl` blocks further down the file do.
//! Methods are chunks of their own (each carrying its container's header), so the type's own
//! chunk loses them. Its outline puts them back as one line per container that names the type,
//! `impl<T> Router<T>: new, insert, at, remove` or `impl Display for Position`, appended to the
//! type's embedded text. The containers are found among the file's chunks by their context
//! (`impl<T> Router<T> > pub fn insert`), so one rule serves every grammar: a Rust `impl` of the
//! type, and the members of an opened class, trait or interface (whose context starts with the
//! type's own label).

use super::{Chunk, ChunkType, embedding_text_with_outline};

/// The name a label gives its item: `pub struct Router<T>` → `Router`, `class Store(Base)` →
/// `Store`, `pub fn insert` → `insert`.
fn item_name(label: &str) -> &str {
    // A visibility with a path (`pub(crate)`, `pub(in super)`) is not the name's parenthesis.
    let label = match label.strip_prefix("pub(") {
        Some(rest) => rest.split_once(')').map_or(rest, |(_, r)| r),
        None => label,
    };
    let head = label
        .split(['<', '(', ':', '[', '{', '='])
        .next()
        .unwrap_or(label);
    head.split_whitespace().next_back().unwrap_or(head)
}

/// The type a Rust `impl` label is for: `impl<'a, T: Clone> Display for Router<'a, T>` →
/// `Router`; `None` for any other label.
fn impl_target(label: &str) -> Option<&str> {
    let rest = label.strip_prefix("impl")?;
    if !(rest.starts_with('<') || rest.starts_with(' ')) {
        return None;
    }
    // Skip the impl's own generic parameters (which may nest: `<T: Into<String>>`).
    let mut depth = 0usize;
    let mut after = rest.len();
    for (i, c) in rest.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            ' ' if depth == 0 => {
                after = i;
                break;
            }
            _ => {}
        }
        if depth == 0 && c == '>' {
            after = i + 1;
            break;
        }
    }
    let ty = rest[after..].trim();
    let ty = ty.rsplit_once(" for ").map_or(ty, |(_, t)| t).trim();
    let mut ty = ty.trim_start_matches('&');
    if ty.starts_with('\'') {
        // `&'a Router`: the reference's lifetime.
        ty = ty.split_once(' ').map_or("", |(_, t)| t);
    }
    let ty = ty.trim_start_matches("mut ").trim();
    let name = ty.split(['<', ' ', '{']).next().unwrap_or(ty);
    // A path (`fmt::Display for crate::Version`) names its last segment.
    let name = name.rsplit("::").next().unwrap_or(name);
    (!name.is_empty()).then_some(name)
}

/// The outline lines of the type whose context is `own` (its label last), from the chunks of
/// its file: each container naming the type, with the names of its members in file order.
fn outline_of(own: &[String], chunks: &[Chunk]) -> Vec<String> {
    let Some(label) = own.last() else {
        return Vec::new();
    };
    let name = item_name(label);
    if name.is_empty() {
        return Vec::new();
    }
    // (container label, member names), in the order the file has them.
    let mut containers: Vec<(String, Vec<String>)> = Vec::new();
    for c in chunks {
        // Where in this chunk's context a container of the type sits.
        let at = if c.context.len() > own.len() && c.context[..own.len()] == *own {
            // A member of the type itself (an opened class, trait, interface).
            Some(own.len() - 1)
        } else {
            c.context.iter().position(|l| impl_target(l) == Some(name))
        };
        let Some(at) = at else {
            continue;
        };
        let container = &c.context[at];
        if container == label && c.context.len() == own.len() {
            // The type's own chunk.
            continue;
        }
        let i = match containers.iter().position(|(l, _)| l == container) {
            Some(i) => i,
            None => {
                containers.push((container.clone(), Vec::new()));
                containers.len() - 1
            }
        };
        if let Some(member) = c.context.get(at + 1) {
            let m = item_name(member).to_string();
            if !m.is_empty() && !containers[i].1.contains(&m) {
                containers[i].1.push(m);
            }
        }
    }
    containers
        .into_iter()
        .map(|(label, members)| {
            if members.is_empty() {
                label
            } else {
                format!("{label}: {}", members.join(", "))
            }
        })
        .collect()
}

/// Gives every `type` chunk of one file its outline, as many lines of it as fit the budget
/// beside the chunk's embedded text.
pub(crate) fn outline_types(
    path: &str,
    chunks: &mut [Chunk],
    max_tokens: usize,
    count: super::TokenCounter<'_>,
) {
    let outlines: Vec<Vec<String>> = chunks
        .iter()
        .map(|c| {
            if c.chunk_type == ChunkType::Type {
                outline_of(&c.context, chunks)
            } else {
                Vec::new()
            }
        })
        .collect();
    for (c, lines) in chunks.iter_mut().zip(outlines) {
        // The most lines that fit, found by halving: a type that thousands of containers name
        // would otherwise have its text counted again for every line left out.
        let fits = |n: usize| {
            let outline = lines[..n].join("\n");
            let text = embedding_text_with_outline(path, &c.header, &c.text, &outline);
            (count(&text) <= max_tokens).then_some(outline)
        };
        let (mut lo, mut hi) = (0, lines.len());
        let mut best = String::new();
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            match fits(mid) {
                Some(outline) => {
                    best = outline;
                    lo = mid;
                }
                None => hi = mid - 1,
            }
        }
        c.outline = best;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_impl_targets() {
        assert_eq!(item_name("pub struct Router<T>"), "Router");
        assert_eq!(item_name("pub(crate) enum Position"), "Position");
        assert_eq!(item_name("class Store(Base)"), "Store");
        assert_eq!(item_name("pub fn insert"), "insert");
        assert_eq!(impl_target("impl<T> Router<T>"), Some("Router"));
        assert_eq!(impl_target("impl Display for Position"), Some("Position"));
        assert_eq!(
            impl_target("impl<'k, T: Into<String>> fmt::Debug for crate::Params<'k, T>"),
            Some("Params")
        );
        assert_eq!(
            impl_target("impl<'a> From<&'a str> for &'a Router"),
            Some("Router")
        );
        assert_eq!(impl_target("implement_me"), None);
        assert_eq!(impl_target("fn impl_x"), None);
    }
}
