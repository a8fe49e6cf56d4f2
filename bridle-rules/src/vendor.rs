//! Vendor sourcing: turning an agent vendor's published guidance into guardrail candidates.
//!
//! Vendors publish advice for their agents as Markdown or HTML pages. A sourcing run reads one
//! (the caller fetches a URL or reads a file), keeps the sentences and list items that read as
//! instructions (`always`, `never`, `must`, `should`, `avoid`, `prefer`, `do not`, ...), and
//! [`crate::RulesStore::queue_vendor_guidance`] queues each as a proposal for review. Candidates
//! are identified by a [`fingerprint`] of their normalized text, so running the job twice
//! queues nothing new.

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

/// Strips HTML tags and entities enough to read a page's text.
fn strip_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_tag = false;
    let lower = text.to_ascii_lowercase();
    let mut skip_until: Option<&str> = None;
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < bytes.len() {
        if let Some(end) = skip_until {
            if lower[i..].starts_with(end) {
                i += end.len();
                skip_until = None;
            } else {
                i += 1;
            }
            continue;
        }
        if lower[i..].starts_with("<script") {
            skip_until = Some("</script>");
            continue;
        }
        if lower[i..].starts_with("<style") {
            skip_until = Some("</style>");
            continue;
        }
        let c = bytes[i];
        if c == b'<' {
            in_tag = true;
            // Block-level tags end a line of text.
            if [
                "<li", "<p", "<br", "<h", "</li", "</p", "<div", "</div", "<tr",
            ]
            .iter()
            .any(|t| lower[i..].starts_with(t))
            {
                out.push('\n');
            }
        } else if c == b'>' && in_tag {
            in_tag = false;
        } else if !in_tag {
            // Copy the whole UTF-8 character.
            let ch_len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + ch_len]);
            i += ch_len;
            continue;
        }
        i += 1;
    }
    out.replace("&nbsp;", " ")
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
}

/// Removes Markdown list markers, emphasis and inline code ticks.
fn clean(line: &str) -> String {
    let mut l = line.trim();
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = l.strip_prefix(marker) {
            l = rest;
        }
    }
    // Numbered items: `1. ` or `12) `.
    let digits = l.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && (l[digits..].starts_with(". ") || l[digits..].starts_with(") ")) {
        l = &l[digits + 2..];
    }
    l.replace("**", "")
        .replace("__", "")
        .replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The instruction-like sentences of a guidance document, in document order, without
/// duplicates.
pub fn extract_candidates(text: &str) -> Vec<String> {
    let looks_html = text.contains("</") && text.contains('>');
    let plain = if looks_html {
        strip_html(text)
    } else {
        text.to_string()
    };
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut in_code = false;
    for raw in plain.lines() {
        let t = raw.trim();
        if t.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || t.is_empty() || t.starts_with('#') || t.starts_with('|') {
            continue;
        }
        let line = clean(t);
        // A paragraph may hold several sentences; judge each.
        for sentence in split_sentences(&line) {
            let lower = format!("{} ", sentence.to_ascii_lowercase());
            let is_instruction = MARKERS
                .iter()
                .any(|m| lower.starts_with(m) || lower.contains(&format!(" {m}")));
            let len = sentence.chars().count();
            if is_instruction && (20..=400).contains(&len) && seen.insert(fingerprint(&sentence)) {
                out.push(sentence);
            }
        }
    }
    out
}

fn split_sentences(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = line.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        cur.push(*c);
        let at_end = matches!(c, '.' | '!' | '?')
            && chars.get(i + 1).is_none_or(|n| n.is_whitespace())
            && chars.get(i + 2).is_none_or(|n| n.is_uppercase());
        if at_end {
            let s = cur.trim().to_string();
            if !s.is_empty() {
                out.push(s);
            }
            cur.clear();
        }
    }
    let s = cur.trim().to_string();
    if !s.is_empty() {
        out.push(s);
    }
    out
}

/// A statement's identity for de-duplication: lowercase letters and digits, single spaces.
pub fn fingerprint(statement: &str) -> String {
    statement
        .to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_instructions_are_found() {
        let md = "# Best practices\n\nClaude reads CLAUDE.md at start.\n\n- **Always** run the tests before committing.\n- Keep CLAUDE.md short and specific. It is loaded every session.\n1. Never commit secrets to the repository.\n\n```\nalways ignore this code block line\n```\n| table | always |\n";
        let c = extract_candidates(md);
        assert_eq!(
            c,
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
    fn fingerprints_ignore_case_and_punctuation() {
        assert_eq!(
            fingerprint("Always run the TESTS!"),
            fingerprint("always run the tests")
        );
    }
}
