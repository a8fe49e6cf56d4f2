//! Unit tests of the chunker, with a whitespace token counter (one token per word).

use super::*;

fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

fn cut(path: &str, src: &str, max: usize) -> Vec<Chunk> {
    let cfg = ChunkConfig {
        max_tokens: max,
        min_tokens: 6,
        overlap_lines: 1,
        ..Default::default()
    };
    chunk_file(path, src, &cfg, &words)
}

fn kinds(chunks: &[Chunk]) -> Vec<(ChunkType, usize, usize, String)> {
    chunks
        .iter()
        .map(|c| (c.chunk_type, c.start_line, c.end_line, c.context_path()))
        .collect()
}

const RUST: &str = r#"use std::fmt;
use std::io;

/// A point on the plane, with a doc comment
/// that spans two lines.
#[derive(Debug)]
pub struct Point {
    x: i32,
    y: i32,
}

impl Point {
    /// Makes the origin point of the plane.
    pub fn origin() -> Self {
        let brace = '{';
        let s = "}}}";
        Self { x: 0, y: 0 }
    }

    /// The distance to another point, squared and summed.
    pub fn distance(&self, other: &Point) -> i32 {
        let dx = self.x - other.x;
        let dy = self.y - other.y;
        dx * dx + dy * dy
    }
}
"#;

#[test]
fn rust_methods_are_chunks_with_their_impl_as_context() {
    let c = cut("src/point.rs", RUST, 200);
    let k = kinds(&c);
    assert_eq!(k[0].0, ChunkType::Block, "{k:?}");
    assert_eq!((k[1].0, k[1].1, k[1].2), (ChunkType::Type, 4, 10), "{k:?}");
    assert_eq!(k[1].3, "pub struct Point");
    assert!(c[1].text.starts_with("/// A point"));
    let origin = c
        .iter()
        .find(|c| c.text.contains("fn origin"))
        .expect("origin");
    assert_eq!(origin.chunk_type, ChunkType::Function);
    assert_eq!(origin.context_path(), "impl Point > pub fn origin");
    // The impl's line opens the first method's text, so its header does not repeat it.
    assert!(origin.text.contains("impl Point {"));
    assert_eq!(origin.header, "");
    assert!(origin.text.contains("/// Makes the origin"));
    let dist = c
        .iter()
        .find(|c| c.text.contains("fn distance"))
        .expect("distance");
    assert_eq!(dist.context_path(), "impl Point > pub fn distance");
    assert_eq!(
        dist.end_line, 26,
        "the impl's closing brace joins its last method"
    );
    assert!(!std::ptr::eq(origin, dist));
}

#[test]
fn every_non_blank_line_is_in_exactly_one_chunk() {
    for (path, src) in [
        ("a.rs", RUST),
        ("a.py", PY),
        ("a.ts", TS),
        ("a.go", GO),
        ("a.md", MD),
        ("a.txt", MD),
    ] {
        for max in [16, 30, 200] {
            let c = cut(path, src, max);
            let lines: Vec<&str> = src.lines().collect();
            let mut seen = vec![0; lines.len()];
            for ch in &c {
                for l in ch.start_line..=ch.end_line {
                    seen[l - 1] += 1;
                }
            }
            for (i, l) in lines.iter().enumerate() {
                if !l.trim().is_empty() {
                    if path.ends_with(".txt") {
                        assert!(seen[i] >= 1, "{path} max {max}: line {} lost", i + 1);
                    } else {
                        assert_eq!(
                            seen[i],
                            1,
                            "{path} max {max}: line {} in {} chunks: {:?}",
                            i + 1,
                            seen[i],
                            kinds(&c)
                        );
                    }
                }
            }
            for ch in &c {
                assert!(
                    words(&ch.embedding_text(path)) <= max,
                    "{path} {max}: {ch:?}"
                );
            }
        }
    }
}

const PY: &str = "import os\nimport sys\n\n@dataclass\nclass Store:\n    \"\"\"Keeps things on disk.\"\"\"\n    path: str\n\n    def load(self, key):\n        with open(self.path) as f:\n            return f.read()\n\n    def save(self, key, value):\n        with open(self.path, 'w') as f:\n            f.write(value)\n\n\ndef main():\n    Store('x').load('k')\n";

#[test]
fn python_classes_open_into_methods() {
    let c = cut("store.py", PY, 200);
    let load = c
        .iter()
        .find(|c| c.text.contains("def load"))
        .expect("load");
    assert_eq!(load.chunk_type, ChunkType::Function);
    assert_eq!(load.context_path(), "class Store > def load");
    assert_eq!(load.header, "class Store:");
    let main = c
        .iter()
        .find(|c| c.text.contains("def main"))
        .expect("main");
    assert_eq!(main.context_path(), "def main");
    assert!(
        c.iter()
            .any(|c| c.text.contains("@dataclass") && c.text.contains("class Store"))
    );
}

const TS: &str = "import { x } from './x';\n\nexport interface Repo {\n  id: number;\n}\n\nexport const load = async (id: number) => {\n  return `${id}}`;\n};\n\nexport class Service {\n  constructor(private repo: Repo) {}\n  run(): number {\n    return this.repo.id + 1;\n  }\n}\n";

#[test]
fn typescript_items() {
    let c = cut("a.ts", TS, 200);
    let load = c
        .iter()
        .find(|c| c.text.contains("const load"))
        .expect("load");
    assert_eq!(load.chunk_type, ChunkType::Function, "{:?}", kinds(&c));
    let run = c.iter().find(|c| c.text.contains("run()")).expect("run");
    assert_eq!(run.chunk_type, ChunkType::Function);
    assert!(
        run.context_path().starts_with("class Service"),
        "{:?}",
        kinds(&c)
    );
}

const GO: &str = "package main\n\nimport \"fmt\"\n\ntype User struct {\n\tName string\n}\n\n// Hello greets the user by name, politely.\nfunc (u User) Hello() string {\n\treturn \"}\" + u.Name\n}\n";

#[test]
fn go_items_keep_their_comments() {
    let c = cut("main.go", GO, 200);
    let hello = c
        .iter()
        .find(|c| c.text.contains("func (u User)"))
        .expect("hello");
    assert_eq!(hello.chunk_type, ChunkType::Function);
    assert!(hello.text.starts_with("// Hello greets"));
    assert!(
        c.iter()
            .any(|c| c.chunk_type == ChunkType::Type && c.text.contains("type User"))
    );
}

const MD: &str = "# Title\n\nIntro text about the project and what it does for people.\n\n## Install\n\nRun the installer with the right flags for your system.\n\n```sh\n# not a heading\nmake install\n```\n\n## Use\n\nCall it from your program and read the answer carefully.\n";

#[test]
fn markdown_is_cut_by_headings() {
    let c = cut("README.md", MD, 200);
    assert!(c.iter().all(|c| c.chunk_type == ChunkType::Section));
    let install = c
        .iter()
        .find(|c| c.text.contains("make install"))
        .expect("install");
    assert_eq!(install.context_path(), "Title > Install");
    assert!(install.text.contains("# not a heading"));
}

#[test]
fn long_items_are_cut_into_parts_that_keep_the_signature() {
    let body: String = (0..50).map(|i| format!("    let x{i} = {i};\n")).collect();
    let src = format!("fn big() {{\n{body}}}\n");
    let c = cut("a.rs", &src, 40);
    assert!(c.len() > 3, "{:?}", kinds(&c));
    assert!(c.iter().all(|c| c.chunk_type == ChunkType::Function));
    assert_eq!(c.last().map(|c| c.end_line), Some(52));
    assert_eq!(c[1].header, "fn big() {");
    assert!(c.iter().all(|ch| words(&ch.embedding_text("a.rs")) <= 40));
    // A line longer than the budget is cut by characters.
    let long = format!("const X: &str = \"{}\";\n", "word ".repeat(100));
    let c = cut("b.rs", &long, 20);
    assert_eq!(c.len(), 1);
    assert!(words(&c[0].embedding_text("b.rs")) <= 20);
}

#[test]
fn broken_and_empty_input() {
    let src = "fn broken() {\n  if x {\n\nfn after() {}\n";
    let c = cut("x.rs", src, 200);
    let covered: usize = c.iter().map(|c| c.end_line - c.start_line + 1).sum();
    assert!(covered >= 3);
    assert!(cut("e.rs", "", 200).is_empty());
    assert!(cut("e.md", "", 200).is_empty());
}

#[test]
fn every_grammar_loads_and_finds_a_function() {
    for (path, src) in [
        ("a.js", "function add(a, b) {\n  return a + b;\n}\n"),
        (
            "a.tsx",
            "export function App() {\n  return <div>hi</div>;\n}\n",
        ),
        (
            "A.java",
            "class A {\n  int add(int a, int b) {\n    return a + b;\n  }\n}\n",
        ),
        ("a.c", "int add(int a, int b) {\n  return a + b;\n}\n"),
        (
            "a.cpp",
            "namespace n {\nint add(int a, int b) {\n  return a + b;\n}\n}\n",
        ),
        (
            "A.cs",
            "class A {\n  int Add(int a, int b) {\n    return a + b;\n  }\n}\n",
        ),
        ("a.rb", "class A\n  def add(a, b)\n    a + b\n  end\nend\n"),
        (
            "a.php",
            "<?php\nfunction add($a, $b) {\n  return $a + $b;\n}\n",
        ),
    ] {
        let c = cut(path, src, 200);
        assert!(
            c.iter().any(|c| c.chunk_type == ChunkType::Function
                && (c.context_path().contains("dd") || c.context_path().contains("App"))),
            "{path}: {:?}",
            kinds(&c)
        );
    }
}

const SMALL_ITEMS: &str = r#"use std::fmt;

/// The router.
pub struct Router<T> {
    root: Option<T>,
}

impl<T> Router<T> {
    pub fn new() -> Self {
        Self { root: None }
    }

    pub fn insert(&mut self, value: T) {
        self.root = Some(value);
    }
}

impl<T> fmt::Debug for Router<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Router")
    }
}

pub fn get() -> u8 { 1 }
pub fn len() -> u8 { 2 }
"#;

#[test]
fn small_named_items_stay_chunks_of_their_own_when_asked() {
    let config = |keep_small_items| ChunkConfig {
        max_tokens: 200,
        min_tokens: 20,
        overlap_lines: 1,
        keep_small_items,
        outline_types: false,
    };
    let c = chunk_file("src/router.rs", SMALL_ITEMS, &config(true), &words);
    let k = kinds(&c);
    let router = c
        .iter()
        .find(|c| c.context_path() == "pub struct Router")
        .unwrap_or_else(|| panic!("the struct is a chunk: {k:?}"));
    // The `use` block joins its neighbour, but the struct is no method's neighbour.
    assert!(router.text.contains("use std::fmt"), "{k:?}");
    assert!(!router.text.contains("fn new"), "{k:?}");
    let get = c.iter().find(|c| c.text.contains("fn get")).expect("get");
    assert!(!get.text.contains("fn len"), "{k:?}");
    // By default small neighbours merge.
    assert!(!ChunkConfig::default().keep_small_items);
    let merged = chunk_file("src/router.rs", SMALL_ITEMS, &config(false), &words);
    let get = merged
        .iter()
        .find(|c| c.text.contains("fn get"))
        .expect("get");
    assert!(get.text.contains("fn len"), "{:?}", kinds(&merged));
}

#[test]
fn a_type_chunk_carries_the_outline_of_its_impls() {
    let c = cut("src/router.rs", SMALL_ITEMS, 200);
    let router = c
        .iter()
        .find(|c| c.chunk_type == ChunkType::Type)
        .expect("type");
    assert_eq!(
        router.outline,
        "impl<T> Router<T>: new, insert\nimpl<T> fmt::Debug for Router<T>: fmt"
    );
    assert!(
        router
            .embedding_text("src/router.rs")
            .ends_with(&router.outline)
    );
    // Other chunks have none, and the snippet itself is the source's lines.
    assert!(
        c.iter()
            .filter(|c| c.chunk_type != ChunkType::Type)
            .all(|c| c.outline.is_empty())
    );
    assert!(!router.text.contains("insert"));
    // A Python class's head lists its methods the same way.
    let py = cut("a.py", PY, 200);
    let store = py
        .iter()
        .find(|c| c.chunk_type == ChunkType::Type)
        .unwrap_or_else(|| panic!("class head: {:?}", kinds(&py)));
    assert_eq!(store.outline, "class Store: load, save");
    // An outline that does not fit is left out, line by line, never the code.
    let tight = cut("src/router.rs", SMALL_ITEMS, 16);
    for ch in &tight {
        assert!(words(&ch.embedding_text("src/router.rs")) <= 16, "{ch:?}");
    }
}

/// Every line of `src` that is not blank, as the chunks' texts hold it (a chunk's text is its
/// lines joined, so no line is longer than the budget here and none may be cut).
fn lines_kept(c: &[Chunk]) -> Vec<String> {
    c.iter()
        .flat_map(|c| c.text.lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|l| !l.trim().is_empty())
        .collect()
}

#[test]
fn long_runs_of_comments_or_punctuation_are_cut_not_dropped() {
    let comments = "// a comment line of a few words\n".repeat(200);
    let braces = "}\n".repeat(400);
    for (path, src) in [
        // Comments at the end of a file, after its last item.
        ("tail.rs", format!("fn f() {{}}\n{comments}")),
        // Comments at the end of a container's body.
        (
            "body.rs",
            format!("impl X {{\n    fn a() {{}}\n{comments}}}\n"),
        ),
        // Comments above a container that is opened into its members.
        (
            "head.rs",
            format!("{comments}impl X {{\n    fn a() {{}}\n    fn b() {{}}\n}}\n"),
        ),
        // Lines of punctuation only that no syntax node claims.
        (
            "braces.rs",
            format!("fn f() {{\n    let x = 1;\n}}\n{braces}"),
        ),
        ("open.rs", "{\n".repeat(400)),
    ] {
        let c = cut(path, &src, 50);
        let want: Vec<String> = src
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        let got = lines_kept(&c);
        assert_eq!(
            got.len(),
            want.len(),
            "{path}: {} of {} lines kept: {:?}",
            got.len(),
            want.len(),
            kinds(&c)
        );
        assert_eq!(got, want, "{path}");
        for ch in &c {
            assert!(words(&ch.embedding_text(path)) <= 50, "{path}: {ch:?}");
        }
    }
}

#[test]
fn a_type_named_by_thousands_of_impls_is_outlined_without_counting_them_again_and_again() {
    let impls: String = (0..3000)
        .map(|i| format!("impl Trait{i} for Foo {{}}\n"))
        .collect();
    let src = format!("struct Foo;\n{impls}");
    let counted = std::sync::atomic::AtomicUsize::new(0);
    let count = |s: &str| {
        counted.fetch_add(s.len(), std::sync::atomic::Ordering::Relaxed);
        words(s)
    };
    let cfg = ChunkConfig {
        max_tokens: 200,
        min_tokens: 6,
        overlap_lines: 1,
        ..Default::default()
    };
    let c = chunk_file("a.rs", &src, &cfg, &count);
    let foo = c
        .iter()
        .find(|c| c.chunk_type == ChunkType::Type)
        .expect("type");
    // As many of its impls as fit, in file order.
    // (The first impl is small and joins the struct's own chunk.)
    assert!(
        foo.outline
            .starts_with("impl Trait1 for Foo\nimpl Trait2 for Foo\n"),
        "{foo:?}"
    );
    assert!(words(&foo.embedding_text("a.rs")) <= 200);
    assert!(
        words(&format!(
            "{}\nimpl Trait9999 for Foo",
            foo.embedding_text("a.rs")
        )) > 200
    );
    // The token counter reads the file a few times over, not once per impl.
    let read = counted.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        read < 40 * src.len(),
        "counted {read} bytes for a file of {}",
        src.len()
    );
}

/// A hostile file whose first line is most of the file (a heading, an item's signature, a
/// container's first line), followed by thousands of short lines: each part of it carried a copy
/// of that line as its header or context, so a file of 256 KiB cost gigabytes and the token
/// counter read every copy. Header lines and headings are cut to a bounded length now.
#[test]
fn a_line_as_long_as_the_file_is_not_copied_into_each_part() {
    let long = "w ".repeat(8 * 1024);
    let body = "b\n".repeat(2048);
    for (path, src) in [
        ("a.md", format!("# {long}\n{body}")),
        ("a.rs", format!("fn f() {{ // {long}\n{body}}}\n")),
        (
            "b.rs",
            format!("impl X {{ // {long}\n    fn a() {{\n{body}}}\n}}\n"),
        ),
        (
            "c.py",
            format!(
                "class A: # {long}\n    def a(self):\n{}",
                "        b\n".repeat(2048)
            ),
        ),
    ] {
        let counted = std::sync::atomic::AtomicUsize::new(0);
        let count = |s: &str| {
            counted.fetch_add(s.len(), std::sync::atomic::Ordering::Relaxed);
            words(s)
        };
        let c = chunk_file(path, &src, &ChunkConfig::default(), &count);
        let held: usize = c
            .iter()
            .map(|c| c.text.len() + c.header.len() + c.context_path().len())
            .sum();
        assert!(
            held < 2 * src.len(),
            "{path}: {} chunks hold {held} bytes for a file of {}",
            c.len(),
            src.len()
        );
        let read = counted.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            read < 40 * src.len(),
            "{path}: counted {read} bytes for a file of {}",
            src.len()
        );
        // The header still names the container, cut.
        if path == "b.rs" {
            let a = c.iter().find(|c| c.text.contains("fn a()")).expect("fn a");
            assert!(a.header.starts_with("impl X { // w w"), "{a:?}");
            assert!(a.header.chars().count() <= MAX_HEADER_LINE_CHARS, "{a:?}");
        }
    }
}

/// A file's name may hold a newline, ESC or a bidirectional control: before, it went into the
/// embedded text's path line (and the summary's) as it was, a line break starting a line of
/// its own. It is written escaped, so the path stays the one first line; an ordinary name,
/// whatever its script, is as it was.
#[test]
fn a_path_with_control_characters_is_one_escaped_line() {
    let odd = "src/a\nfn forged()\u{1b}[2J\u{202e}sr.rs";
    let shown = "src/a\\nfn forged()\\u{1b}[2J\\u{202e}sr.rs";
    assert_eq!(shown_path(odd), shown);
    assert_eq!(
        shown_path("a\tb\u{2066}c\u{2069}\r"),
        "a\\tb\\u{2066}c\\u{2069}\\r"
    );
    for plain in ["src/café/ünï_日本.rs", "docs/Ελληνικά.md", "a b.py"] {
        assert!(matches!(shown_path(plain), std::borrow::Cow::Borrowed(p) if p == plain));
    }
    let chunks = cut(
        odd,
        "/// Loads it.\npub fn load() -> u32 {\n    1\n}\n",
        100,
    );
    let first = &chunks[0];
    let text = first.embedding_text(odd);
    assert_eq!(text.lines().next(), Some(shown), "{text:?}");
    let summary = first.summary_text(odd).expect("a documented function");
    assert_eq!(summary.lines().next(), Some(shown), "{summary:?}");
    assert!(!text.contains('\u{1b}') && !summary.contains('\u{1b}'));
}
