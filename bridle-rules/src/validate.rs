//! The rules a document must keep beyond its shape.
//!
//! Serde checks the shape; this module checks meaning: agent names must be known (a typo would
//! silently drop an agent's permissions or guardrails), guardrail ids must be unique (approvals
//! and renders refer to them), and nothing may sit in policy without a person's approval (a
//! vendor suggestion or an agent proposal pasted into `guardrails:` is exactly the silent
//! promotion the review queue exists to prevent). Every problem is reported, not just the first.

use std::collections::BTreeSet;

use crate::agents::AgentCatalog;
use crate::error::{Problem, check_name};
use crate::model::{ALL_AGENTS, MAX_REVISION, RulesDocument, Source};

/// Every problem in a document, in document order. `text` (the YAML it came from, if any) is
/// used to put line numbers on problems.
pub fn validate(doc: &RulesDocument, catalog: &AgentCatalog, text: Option<&str>) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut push = |code: &'static str, field: String, needle: Option<String>, message: String| {
        let line = match (text, needle) {
            (Some(t), Some(n)) => find_line(t, &n),
            _ => None,
        };
        problems.push(Problem {
            code,
            field,
            line,
            message,
        });
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
    problems.sort_by_key(|p| p.line.unwrap_or(u64::MAX));
    problems
}

/// The 1-based line whose content (after indentation and a list dash) starts with `needle`.
fn find_line(text: &str, needle: &str) -> Option<u64> {
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
