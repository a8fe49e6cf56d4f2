//! Schema versions and the step-by-step migrations between them.
//!
//! A document names its format in `schema_version`. Loading an older document runs each step
//! `n -> n + 1` in order on the generic YAML tree, then reads the result as the current types;
//! saving always writes the current version. A document newer than this build is refused (see
//! [`crate::RulesError::TooNew`]) rather than half-read.
//!
//! Versions:
//! - **1**: the shape first sketched in the Bridle plan: no `schema_version` (or `1`), no
//!   `revision`, no `project.name`; `project.stack` and `project.conventions` are free text;
//!   `applies_to` may be a single string; vendor suggestions are plain strings.
//! - **2** (current): `revision`; `project.name`; `stack` and `conventions` are lists, one entry
//!   each; `applies_to` is always a list; vendor suggestions are `{id, statement, source_ref}`.

use serde_json::{Map, Value};

use crate::model::CURRENT_SCHEMA_VERSION;

/// One migration step failed; the message says which field and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationFailure {
    /// The version the step starts from.
    pub from: u32,
    /// Why.
    pub message: String,
}

/// Runs every step from `from` up to [`CURRENT_SCHEMA_VERSION`] on a document tree.
/// `project` names the project (version 1 documents do not carry their own name).
pub fn migrate(doc: &mut Value, from: u32, project: &str) -> Result<(), MigrationFailure> {
    let mut version = from;
    while version < CURRENT_SCHEMA_VERSION {
        match version {
            1 => v1_to_v2(doc, project).map_err(|message| MigrationFailure {
                from: version,
                message,
            })?,
            other => {
                return Err(MigrationFailure {
                    from: other,
                    message: format!("no migration step from schema_version {other}"),
                });
            }
        }
        version += 1;
        tracing::debug!(project, version, "migrated rules document");
    }
    Ok(())
}

/// Splits free text into list entries: one per line, or per comma when it is a single line.
/// Leading list markers (`-`, `*`) are dropped.
fn split_entries(text: &str) -> Vec<Value> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let parts: Vec<&str> = if lines.len() == 1 {
        lines[0].split(',').collect()
    } else {
        lines
    };
    parts
        .into_iter()
        .map(|p| p.trim().trim_start_matches(['-', '*']).trim())
        .filter(|p| !p.is_empty())
        .map(|p| Value::String(p.to_string()))
        .collect()
}

/// A lowercase id made of the first words of a statement.
pub(crate) fn slug(text: &str, max_words: usize) -> String {
    let out = text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(max_words)
        .map(str::to_ascii_lowercase)
        .collect::<Vec<_>>()
        .join("-");
    if out.is_empty() {
        "item".to_string()
    } else {
        out
    }
}

fn list_from_text(obj: &mut Map<String, Value>, key: &str) -> Result<(), String> {
    match obj.get(key) {
        None | Some(Value::Null) => {
            obj.insert(key.to_string(), Value::Array(Vec::new()));
        }
        Some(Value::String(s)) => {
            let entries = split_entries(s);
            obj.insert(key.to_string(), Value::Array(entries));
        }
        Some(Value::Array(_)) => {}
        Some(_) => return Err(format!("project.{key} must be text or a list")),
    }
    Ok(())
}

fn v1_to_v2(doc: &mut Value, project: &str) -> Result<(), String> {
    let root = doc
        .as_object_mut()
        .ok_or("the document must be a mapping")?;
    root.insert("schema_version".into(), Value::from(2u32));
    root.entry("revision").or_insert(Value::from(0u64));

    let proj = root
        .entry("project")
        .or_insert_with(|| Value::Object(Map::new()));
    let proj = proj.as_object_mut().ok_or("project must be a mapping")?;
    proj.entry("name")
        .or_insert_with(|| Value::String(project.to_string()));
    if let Some(Value::Null) = proj.get("overview") {
        proj.insert("overview".into(), Value::String(String::new()));
    }
    list_from_text(proj, "stack")?;
    list_from_text(proj, "conventions")?;

    if let Some(Value::Array(guardrails)) = root.get_mut("guardrails") {
        for (i, g) in guardrails.iter_mut().enumerate() {
            let g = g
                .as_object_mut()
                .ok_or(format!("guardrails[{i}] must be a mapping"))?;
            if let Some(Value::String(one)) = g.get("applies_to") {
                let one = one.clone();
                g.insert("applies_to".into(), Value::Array(vec![Value::String(one)]));
            }
        }
    }

    if let Some(Value::Object(profiles)) = root.get_mut("agent_profiles") {
        for (agent, profile) in profiles.iter_mut() {
            let Some(profile) = profile.as_object_mut() else {
                return Err(format!("agent_profiles.{agent} must be a mapping"));
            };
            if let Some(Value::Array(suggestions)) = profile.get_mut("vendor_guardrail_suggestions")
            {
                let mut used = std::collections::BTreeSet::new();
                for s in suggestions.iter_mut() {
                    if let Value::String(statement) = s {
                        let base = format!("{agent}-{}", slug(statement, 5));
                        let mut id = base.clone();
                        let mut n = 2;
                        while !used.insert(id.clone()) {
                            id = format!("{base}-{n}");
                            n += 1;
                        }
                        let mut m = Map::new();
                        m.insert("id".into(), Value::String(id));
                        m.insert("statement".into(), Value::String(statement.clone()));
                        *s = Value::Object(m);
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v1_becomes_v2() {
        let mut doc = json!({
            "project": {"overview": "A shop", "stack": "Rust, Axum ,SQLite", "conventions": "- small commits\n- tests first\n"},
            "guardrails": [{"id": "a", "statement": "s", "severity": "guidance", "applies_to": "claude",
                            "provenance": {"source": "user"}}],
            "agent_profiles": {"claude": {"vendor_guardrail_suggestions": ["Keep CLAUDE.md short", "Keep CLAUDE.md short"]}}
        });
        migrate(&mut doc, 1, "shop").unwrap();
        assert_eq!(doc["schema_version"], 2);
        assert_eq!(doc["revision"], 0);
        assert_eq!(doc["project"]["name"], "shop");
        assert_eq!(doc["project"]["stack"], json!(["Rust", "Axum", "SQLite"]));
        assert_eq!(
            doc["project"]["conventions"],
            json!(["small commits", "tests first"])
        );
        assert_eq!(doc["guardrails"][0]["applies_to"], json!(["claude"]));
        let s = &doc["agent_profiles"]["claude"]["vendor_guardrail_suggestions"];
        assert_eq!(s[0]["id"], "claude-keep-claude-md-short");
        assert_eq!(s[1]["id"], "claude-keep-claude-md-short-2");
    }

    #[test]
    fn bad_shapes_fail_with_a_reason() {
        let mut doc = json!(["not", "a", "mapping"]);
        let e = migrate(&mut doc, 1, "p").unwrap_err();
        assert_eq!(e.from, 1);
        let mut doc = json!({"project": {"stack": 5}});
        assert!(
            migrate(&mut doc, 1, "p")
                .unwrap_err()
                .message
                .contains("stack")
        );
        let mut doc = json!({});
        assert!(migrate(&mut doc, 0, "p").is_err());
    }

    #[test]
    fn slugs_are_ids() {
        assert_eq!(slug("Do NOT touch the DB!", 3), "do-not-touch");
        assert_eq!(slug("!!!", 3), "item");
    }
}
