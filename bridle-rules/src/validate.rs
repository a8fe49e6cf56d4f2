//! The rules a document must keep beyond its shape.
//!
//! Serde checks the shape; this module checks meaning: agent names must be known (a typo would
//! silently drop an agent's permissions or guardrails), guardrail ids must be unique (approvals
//! and renders refer to them), names that title or head a rendered file (the project's, a
//! pattern's, an example's tags) must be one line, and nothing may sit in policy without a
//! person's approval (a vendor suggestion or an agent proposal pasted into `guardrails:` is
//! exactly the silent promotion the review queue exists to prevent). Every problem is reported, not just the first.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::agents::AgentCatalog;
use crate::error::{Problem, check_name};
use crate::model::{ALL_AGENTS, MAX_REVISION, RulesDocument, Source};

/// The most characters of a pattern's name or an example repository's reference or pattern
/// tag: each is a heading or part of one line of every rendered file.
pub const MAX_LINE_CHARS: usize = 200;

/// Whether `c` has no place in a one-line name: a control character (line feed, carriage
/// return, tab, ...) or a Unicode line or paragraph separator.
fn breaks_a_line(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// True for a bidirectional-text control (U+202A to U+202E, U+2066 to U+2069): it makes a
/// reader see another order of words than the one the text holds. Vendor text drops it; the
/// gateway refuses it in an agent's free text.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether `c` is a Unicode tag character (U+E0000 to U+E007F). Tag characters mirror ASCII
/// but show nothing: a reviewer, a page and a terminal show the text around them, while a model
/// reading the rules reads them as the letters they stand for, so an instruction written in
/// them would be approved unseen.
pub fn is_tag_character(c: char) -> bool {
    ('\u{e0000}'..='\u{e007f}').contains(&c)
}

/// Whether `text` may be a pattern's name or an example's tag: one line of at most
/// [`MAX_LINE_CHARS`] characters, without a control character or a line separator (each is a
/// heading or part of one line of every rendered file). Documents are held to it by
/// [`validate`], proposals when they are made.
///
/// ```
/// assert!(bridle_rules::is_one_line("Service layer"));
/// assert!(!bridle_rules::is_one_line("Service layer\n# Injected"));
/// ```
pub fn is_one_line(text: &str) -> bool {
    text.chars().count() <= MAX_LINE_CHARS && !text.chars().any(breaks_a_line)
}

/// Every problem in a document, in document order. `text` (the YAML it came from, if any) is
/// used to put line numbers on problems.
pub fn validate(doc: &RulesDocument, catalog: &AgentCatalog, text: Option<&str>) -> Vec<Problem> {
    // Each problem with the text its line starts with; the lines are found at the end, all in
    // one pass over the text per needle shape.
    let mut problems: Vec<Problem> = Vec::new();
    let mut needles: Vec<Option<String>> = Vec::new();
    let mut push = |code: &'static str, field: String, needle: Option<String>, message: String| {
        problems.push(Problem {
            code,
            field,
            line: None,
            message,
        });
        needles.push(needle);
    };
    let known = || catalog.names().join(", ");

    if doc.revision > MAX_REVISION {
        push(
            "revision_out_of_range",
            "revision".into(),
            Some("revision:".into()),
            format!(
                "revision {} is above the largest the store keeps ({MAX_REVISION}); set it back to the revision the document had",
                doc.revision
            ),
        );
    }

    if doc.project.name.trim().is_empty() {
        push(
            "missing_field",
            "project.name".into(),
            Some("name:".into()),
            "the project needs a name".into(),
        );
    } else if doc.project.name.chars().any(breaks_a_line) {
        // The name is the title heading of every rendered file: a line break would end the
        // heading there and make what follows a heading, list or rule of its own.
        push(
            "invalid_name",
            "project.name".into(),
            Some("name:".into()),
            "the project name must be one line, without line breaks, tabs or other control characters (it is the title of every rendered file)".into(),
        );
    }

    let mut ids = BTreeSet::new();
    for (i, g) in doc.guardrails.iter().enumerate() {
        let needle = Some(format!("id: {}", g.id));
        if let Err(e) = check_name("guardrail id", &g.id) {
            push(
                "invalid_id",
                format!("guardrails[{i}].id"),
                needle.clone(),
                e.to_string(),
            );
        }
        if !ids.insert(g.id.as_str()) {
            push(
                "duplicate_guardrail",
                format!("guardrails[{i}].id"),
                needle.clone(),
                format!("guardrail id `{}` is used more than once", g.id),
            );
        }
        if g.statement.trim().is_empty() {
            push(
                "missing_field",
                format!("guardrails[{i}].statement"),
                needle.clone(),
                format!("guardrail `{}` has an empty statement", g.id),
            );
        }
        if g.applies_to.is_empty() {
            push(
                "missing_field",
                format!("guardrails[{i}].applies_to"),
                needle.clone(),
                format!(
                    "guardrail `{}` applies to nobody; use [{ALL_AGENTS}] or agent names",
                    g.id
                ),
            );
        }
        for a in &g.applies_to {
            if a != ALL_AGENTS && !catalog.contains(a) {
                push(
                    "unknown_agent",
                    format!("guardrails[{i}].applies_to"),
                    needle.clone(),
                    format!("unknown agent `{a}` (known: {ALL_AGENTS}, {})", known()),
                );
            }
        }
        let p = &g.provenance;
        let unapproved = p.approved_by.is_none() || p.approved_at.is_none();
        match p.source {
            Source::Vendor if unapproved => push(
                "vendor_suggestion_in_policy",
                format!("guardrails[{i}].provenance"),
                needle.clone(),
                format!(
                    "guardrail `{}` is a vendor suggestion without an approval; vendor suggestions belong in agent_profiles.<agent>.vendor_guardrail_suggestions until a person approves them",
                    g.id
                ),
            ),
            Source::Agent if unapproved => push(
                "unapproved_agent_change",
                format!("guardrails[{i}].provenance"),
                needle.clone(),
                format!(
                    "guardrail `{}` was proposed by an agent but has no approval; agent proposals go through the review queue",
                    g.id
                ),
            ),
            _ => {}
        }
    }

    // A pattern's name is a heading of every rendered file and an example's tags are quoted
    // on one of its list lines: held to one line, as the project name is, and to a length a
    // heading can have.
    let not_one_line = |what: &str| {
        format!(
            "{what} must be one line of at most {MAX_LINE_CHARS} characters, without line breaks, tabs or other control characters (it is a heading or a line of every rendered file)"
        )
    };
    for (i, name) in doc.patterns.standard.iter().enumerate() {
        if !is_one_line(name) {
            push(
                "invalid_name",
                format!("patterns.standard[{i}]"),
                Some("standard:".into()),
                not_one_line("a standard pattern's name"),
            );
        }
    }
    for (i, c) in doc.patterns.custom.iter().enumerate() {
        if !is_one_line(&c.name) {
            push(
                "invalid_name",
                format!("patterns.custom[{i}].name"),
                Some("custom:".into()),
                not_one_line("a pattern's name"),
            );
        }
        for (j, r) in c.example_repos.iter().enumerate() {
            for (key, tag, what) in [
                (
                    "reference_tag",
                    &r.reference_tag,
                    "an example's reference tag",
                ),
                ("arch_tag", &r.arch_tag, "an example's pattern tag"),
                ("url", &r.url, "an example's URL"),
            ] {
                if !is_one_line(tag) {
                    push(
                        "invalid_name",
                        format!("patterns.custom[{i}].example_repos[{j}].{key}"),
                        Some("custom:".into()),
                        not_one_line(what),
                    );
                }
            }
        }
    }

    for (agent, profile) in &doc.agent_profiles {
        if !catalog.contains(agent) {
            push(
                "unknown_agent",
                format!("agent_profiles.{agent}"),
                Some(format!("{agent}:")),
                format!("unknown agent `{agent}` (known: {})", known()),
            );
        }
        let mut seen = BTreeSet::new();
        for (j, s) in profile.vendor_guardrail_suggestions.iter().enumerate() {
            if !seen.insert(s.id.as_str()) {
                push(
                    "duplicate_suggestion",
                    format!("agent_profiles.{agent}.vendor_guardrail_suggestions[{j}].id"),
                    Some(format!("id: {}", s.id)),
                    format!("suggestion id `{}` is used more than once", s.id),
                );
            }
        }
    }
    for agent in doc.permissions.keys() {
        if !catalog.contains(agent) {
            push(
                "unknown_agent",
                format!("permissions.{agent}"),
                Some(format!("{agent}:")),
                format!("unknown agent `{agent}` (known: {})", known()),
            );
        }
    }
    if let Some(text) = text {
        let lines = find_lines(text, needles.iter().flatten().map(String::as_str));
        for (p, needle) in problems.iter_mut().zip(&needles) {
            p.line = needle.as_deref().and_then(|n| lines.get(n).copied());
        }
    }
    problems.sort_by_key(|p| p.line.unwrap_or(u64::MAX));
    problems
}

/// The 1-based line of each needle: the first line whose content (after indentation and a
/// list dash) is the needle, or starts with it and a space, or (a needle ending in `:`, a key)
/// starts with it; needles on no line are left out.
///
/// A document with a problem in each of thousands of guardrails has thousands of needles, so
/// the text is not scanned once per needle. Which needle a line can match is decided by the
/// line itself, given the needle's shape: a key of `c` colons can only be the line's prefix up
/// to its `c`th colon, any other needle of `s` spaces only the line's prefix before its
/// `s + 1`th space. So the text is read once per shape, looking each line's prefix up.
fn find_lines<'n>(text: &str, needles: impl Iterator<Item = &'n str>) -> HashMap<&'n str, u64> {
    // (is a key, its colons or spaces) -> the needles of that shape.
    let mut shapes: BTreeMap<(bool, usize), HashSet<&'n str>> = BTreeMap::new();
    for n in needles {
        let shape = if n.ends_with(':') {
            (true, n.matches(':').count())
        } else {
            (false, n.matches(' ').count())
        };
        shapes.entry(shape).or_default().insert(n);
    }
    let contents: Vec<&str> = text
        .lines()
        .map(|l| {
            let t = l.trim_start();
            t.strip_prefix("- ").unwrap_or(t).trim_start()
        })
        .collect();
    let mut lines = HashMap::new();
    for ((key, count), mut wanted) in shapes {
        for (i, t) in contents.iter().enumerate() {
            if wanted.is_empty() {
                break;
            }
            let prefix = if key {
                t.match_indices(':').nth(count - 1).map(|(at, _)| &t[..=at])
            } else {
                Some(
                    t.match_indices(' ')
                        .nth(count)
                        .map_or(*t, |(at, _)| &t[..at]),
                )
            };
            if let Some(n) = prefix.and_then(|p| wanted.take(p)) {
                lines.insert(n, i as u64 + 1);
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a needle's line is, one needle at a time: the rule `find_lines` keeps.
    fn one_by_one(text: &str, needle: &str) -> Option<u64> {
        text.lines()
            .position(|l| {
                let t = l.trim_start();
                let t = t.strip_prefix("- ").unwrap_or(t).trim_start();
                t == needle
                    || t.starts_with(&format!("{needle} "))
                    || t.starts_with(needle) && needle.ends_with(':')
            })
            .map(|i| i as u64 + 1)
    }

    #[test]
    fn lines_are_found_as_one_needle_at_a_time_would() {
        let text = "name:x\nnames: y\n  - id: ab\n  - id:  a\n    id: a # the one\nid: a\nid: a b c\n- id: a b c d\nbad agent: {}\na: b: c\n-  id: z\nid: é ü\n";
        let needles = [
            "name:",
            "names:",
            "id: a",
            "id: ab",
            "id: a b",
            "id: a b c",
            "id: a b c d",
            "bad agent:",
            "a: b:",
            "a:",
            "id: z",
            "id: é",
            "id: é ü",
            "missing:",
            "id: q",
        ];
        let lines = find_lines(text, needles.iter().copied());
        for n in needles {
            assert_eq!(lines.get(n).copied(), one_by_one(text, n), "{n:?}");
        }
    }
}
