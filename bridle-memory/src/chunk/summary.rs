//! An item's summary: a short second text embedded for a chunk beside its code.
//!
//! A small embedding model reads a chunk as a whole, and a short item's few words of
//! documentation weigh little against its code (`fn get` is mostly `self.vec.iter().find(..)`).
//! The summary keeps what says what the code is for: the file, the enclosing names, each
//! item's signature (its lines at the chunk's outer indentation, a signature cut over several
//! lines joined) and its documentation (doc comments at any depth, so a field's or variant's
//! doc counts; a Python docstring; comment lines just above an item). With
//! [`crate::PatternIndexConfig::summaries`] the pipeline embeds both texts and stores their
//! normalised sum as the chunk's vector ([`crate::PatternIndex::index`]), so every store
//! searches it like any other vector.

/// The summary of a chunk of `path` with enclosing names `context` (`impl Params > pub fn
/// get`) and source `text`; `None` when nothing in the text is a signature or documentation
/// (a window of prose, a chunk of imports).
pub fn summary_text(path: &str, context: &str, text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut outer = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent(l))
        .min()?;
    let mut said: Vec<String> = Vec::new();
    let mut docstring: Option<&str> = None;
    let mut after_doc = false;
    let mut i = 0;
    // A method chunk starts with its containers' headers (`pub struct Params`, `impl Params`)
    // at the outer indentation, with no body of their own, and the item is indented below
    // them. The headers are said as they are, and the item's own level counts as outer.
    let headers = lines
        .iter()
        .take_while(|l| {
            let t = l.trim();
            t.is_empty() || (indent(l) == outer && !t.ends_with(['{', ':', '(', ',']))
        })
        .count();
    let body: Vec<&&str> = lines[headers..]
        .iter()
        .filter(|l| !l.trim().is_empty())
        .collect();
    if let Some(inner) = body.first().map(|l| indent(l))
        && headers > 0
        && inner > outer
        && body
            .iter()
            .all(|l| indent(l) >= inner || is_noise(l.trim()))
    {
        for header in lines[..headers].iter().map(|l| l.trim()) {
            if !header.is_empty() && !is_noise(header) {
                said.push(header.to_string());
            }
        }
        outer = inner;
        i = headers;
    }
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim();
        i += 1;
        if let Some(quote) = docstring {
            let body = t.replace(quote, "");
            if !body.trim().is_empty() {
                said.push(body.trim().to_string());
            }
            if t.contains(quote) {
                docstring = None;
            }
            continue;
        }
        if t.is_empty() {
            continue;
        }
        if let Some(quote) = ["\"\"\"", "'''"].into_iter().find(|q| t.starts_with(q)) {
            let rest = &t[3..];
            let body = rest.replace(quote, "");
            if !body.trim().is_empty() {
                said.push(body.trim().to_string());
            }
            if !rest.contains(quote) {
                docstring = Some(quote);
            }
            continue;
        }
        if let Some(doc) = doc_comment(t, indent(line) == outer) {
            if !doc.is_empty() {
                said.push(doc.to_string());
            }
            after_doc = true;
            continue;
        }
        // A documented item's signature counts at any depth (a method inside an `impl` or a
        // class of a merged chunk: a line that opens a body or takes parameters); other nested
        // lines, documented fields and variants among them, are its body.
        let documented = std::mem::take(&mut after_doc)
            && (t.contains('(') || t.ends_with('{') || t.ends_with(':'));
        if (indent(line) != outer && !documented) || is_noise(t) {
            continue;
        }
        // A signature, joined over its lines while a parenthesis is open.
        let mut sig = t.to_string();
        let mut open = depth(t);
        let mut joined = 0;
        while open > 0 && i < lines.len() && joined < 8 {
            let next = lines[i].trim();
            i += 1;
            joined += 1;
            if doc_comment(next, true).is_some() {
                continue;
            }
            open += depth(next);
            if !sig.ends_with('(') {
                sig.push(' ');
            }
            sig.push_str(next);
        }
        let sig = sig
            .trim_end_matches(['{', ':', ' '])
            .trim_end_matches(" where")
            .to_string();
        if !sig.is_empty() {
            said.push(sig);
        }
    }
    if said.is_empty() {
        return None;
    }
    // The path is the summary's first line: one line, whatever the file's name holds.
    let mut out = super::shown_path(path).into_owned();
    if !context.is_empty() {
        out.push('\n');
        out.push_str(context);
    }
    for s in said {
        out.push('\n');
        out.push_str(&s);
    }
    Some(out)
}

/// The text of a documentation comment line (`/// x`, `//! x`, `/** x`, ` * x`, and `# x` or
/// `// x` when `outer`, i.e. a comment above an item rather than inside its body).
fn doc_comment(t: &str, outer: bool) -> Option<&str> {
    for marker in ["///", "//!", "/**", "*/"] {
        if let Some(rest) = t.strip_prefix(marker) {
            return Some(rest.trim_end_matches("*/").trim());
        }
    }
    if t == "*" {
        return Some("");
    }
    if let Some(rest) = t.strip_prefix("* ") {
        return Some(rest.trim_end_matches("*/").trim());
    }
    if outer {
        if let Some(rest) = t.strip_prefix("//") {
            return Some(rest.trim());
        }
        let directive = t.starts_with("#[") || t.starts_with("#!") || t.starts_with("#include");
        if let Some(rest) = t.strip_prefix('#').filter(|_| !directive) {
            return Some(rest.trim());
        }
    }
    None
}

/// Lines at the outer indentation that say nothing of what the code does: closing brackets,
/// attributes, imports.
fn is_noise(t: &str) -> bool {
    t.chars().all(|c| "{}()[];,".contains(c))
        || t == "end"
        || t.starts_with("#[")
        || t.starts_with("#!")
        || [
            "use ",
            "import ",
            "from ",
            "#include",
            "package ",
            "extern crate ",
        ]
        .iter()
        .any(|p| t.starts_with(p))
}

/// Parentheses opened minus closed on a line.
fn depth(t: &str) -> i32 {
    t.chars().fold(0, |d, c| match c {
        '(' => d + 1,
        ')' => d - 1,
        _ => d,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_is_its_names_signature_and_doc() {
        let text = "    /// Returns the value of the first parameter registered under the given key.\n    pub fn get(&self, key: impl AsRef<str>) -> Option<&'v str> {\n        let key = key.as_ref();\n        self.vec.iter().find(|p| p.key == key).map(|p| p.value)\n    }";
        assert_eq!(
            summary_text("src/params.rs", "impl Params > pub fn get", text).as_deref(),
            Some(
                "src/params.rs\nimpl Params > pub fn get\nReturns the value of the first parameter registered under the given key.\npub fn get(&self, key: impl AsRef<str>) -> Option<&'v str>"
            )
        );
    }

    #[test]
    fn a_documented_method_inside_its_impl_keeps_its_signature() {
        let text = "pub struct Params {\n    vec: Vec<(String, String)>,\n}\n\nimpl Params {\n    /// Returns the value under the key.\n    pub fn get(&self, key: &str) -> Option<&str> {\n        self.find(key)\n    }\n}";
        assert_eq!(
            summary_text("src/params.rs", "impl Params > pub fn get", text).as_deref(),
            Some(
                "src/params.rs\nimpl Params > pub fn get\npub struct Params\nimpl Params\nReturns the value under the key.\npub fn get(&self, key: &str) -> Option<&str>"
            )
        );
    }

    #[test]
    fn a_method_below_its_containers_headers_keeps_its_signature() {
        let text = "pub struct Params\nimpl Params\n    /// Returns the value under the key.\n    pub fn get(&self, key: &str) -> Option<&str> {\n        self.find(key)\n    }\n}";
        assert_eq!(
            summary_text("src/params.rs", "impl Params > pub fn get", text).as_deref(),
            Some(
                "src/params.rs\nimpl Params > pub fn get\npub struct Params\nimpl Params\nReturns the value under the key.\npub fn get(&self, key: &str) -> Option<&str>"
            )
        );
    }

    #[test]
    fn variants_docs_count_and_their_code_does_not() {
        let text = "#[derive(Debug)]\npub(crate) enum Position {\n    /// The major number.\n    Major,\n    Minor,\n}\n\nuse std::fmt;";
        assert_eq!(
            summary_text("src/error.rs", "pub(crate) enum Position", text).as_deref(),
            Some(
                "src/error.rs\npub(crate) enum Position\npub(crate) enum Position\nThe major number."
            )
        );
    }

    #[test]
    fn a_signature_over_several_lines_is_joined() {
        let text = "fn parse(\n    input: &str,\n    // the mode\n    strict: bool,\n) -> Result<Version, Error> {\n    todo\n}";
        assert_eq!(
            summary_text("a.rs", "", text).as_deref(),
            Some("a.rs\nfn parse(input: &str, strict: bool, ) -> Result<Version, Error>")
        );
    }

    #[test]
    fn python_docstrings_and_comments_above_count() {
        let text = "    # Called by the connection.\n    def send(self, event):\n        \"\"\"Convert a high-level event into bytes.\n\n        Returns the data.\n        \"\"\"\n        data = []\n        return data";
        assert_eq!(
            summary_text("h11/_connection.py", "class Connection > def send", text).as_deref(),
            Some(
                "h11/_connection.py\nclass Connection > def send\nCalled by the connection.\ndef send(self, event)\nConvert a high-level event into bytes.\nReturns the data."
            )
        );
        let one_line = "def f():\n    \"\"\"Does f.\"\"\"\n    pass";
        assert_eq!(
            summary_text("m.py", "def f", one_line).as_deref(),
            Some("m.py\ndef f\ndef f()\nDoes f.")
        );
    }

    #[test]
    fn javadoc_counts_and_imports_do_not() {
        let text = "/**\n * Opens a store.\n */\npublic Store open() {\n  return null;\n}";
        assert_eq!(
            summary_text("S.java", "", text).as_deref(),
            Some("S.java\nOpens a store.\npublic Store open()")
        );
        assert_eq!(
            summary_text("a.rs", "", "use std::io;\nuse std::fmt;\n}"),
            None
        );
        assert_eq!(summary_text("a.rs", "", "   \n"), None);
    }
}
