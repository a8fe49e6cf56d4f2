//! The crate's modules form layers (listed in ARCHITECTURE.md): a module may import only
//! modules of lower layers. This test reads the documented order and checks every `crate::`
//! path in the sources (outside comments and unit tests) against it, so the document and the
//! code cannot drift apart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn layers() -> HashMap<String, usize> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md"))
            .expect("ARCHITECTURE.md is at the workspace root");
    let begin = doc
        .find("<!-- kberg-core layers: begin -->")
        .expect("ARCHITECTURE.md has the kberg-core layers block");
    let end = doc[begin..]
        .find("<!-- kberg-core layers: end -->")
        .expect("the layers block ends")
        + begin;
    let mut out = HashMap::new();
    for line in doc[begin..end].lines() {
        let mut words = line.split_whitespace();
        let Some(Ok(layer)) = words.next().map(str::parse::<usize>) else {
            continue;
        };
        for module in words {
            assert!(
                out.insert(module.to_string(), layer).is_none(),
                "`{module}` is listed twice"
            );
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src is readable") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a source file belongs to (`gate/run.rs` belongs to `gate`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_string())
}

/// The modules named by `crate::x` paths in the code of a file, with their line numbers: comment
/// text and the unit-test module at the end are skipped.
fn imports(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push((i + 1, name));
        }
    }
    out
}

#[test]
fn no_module_imports_one_above_it() {
    let layers = layers();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let Some(&own) = layers.get(&module) else {
            problems.push(format!(
                "module `{module}` is not in ARCHITECTURE.md's layers"
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("a source file is readable");
        for (line, target) in imports(&text) {
            if target == module {
                continue;
            }
            let shown = format!(
                "{}:{line}",
                file.strip_prefix(&src).unwrap_or(file).display()
            );
            match layers.get(&target) {
                Some(&theirs) if theirs < own => {}
                Some(&theirs) => problems.push(format!(
                    "{shown}: `{module}` (layer {own}) imports `{target}` (layer {theirs})"
                )),
                None => problems.push(format!(
                    "{shown}: `crate::{target}` is not a module of the layers; name the module \
                     it comes from"
                )),
            }
        }
    }
    for module in layers.keys() {
        let file = src.join(format!("{module}.rs"));
        let dir = src.join(module).join("mod.rs");
        if !file.exists() && !dir.exists() {
            problems.push(format!(
                "ARCHITECTURE.md lists `{module}`, which does not exist"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "layer violations:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checker_sees_through_comments_and_finds_paths() {
    let found = imports(
        "use crate::error::GateError; // crate::registry\n/// [x](crate::gate)\nlet x = crate::content::Content::text(\"\");\n#[cfg(test)]\nuse crate::registry;",
    );
    assert_eq!(
        found,
        [(1, "error".to_string()), (3, "content".to_string())]
    );
}
