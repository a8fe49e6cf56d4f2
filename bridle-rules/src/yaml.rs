//! Reading and writing rules documents as YAML.
//!
//! Loading is in three steps: parse to a generic tree to learn `schema_version`; migrate an
//! older tree step by step (see [`crate::migrate`]); read the result as the typed document and
//! validate it against the known agents (see [`crate::validate`]). A current-version document is
//! read straight from the text so that every error carries the line, the column and the field.
//! Saving always writes the current version, in a stable field order.

use std::path::Path;

use serde_json::Value;

use crate::agents::AgentCatalog;
use crate::error::{Position, RulesError};
use crate::migrate;
use crate::model::{CURRENT_SCHEMA_VERSION, RulesDocument};
use crate::validate;

/// A document as loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The document, at the current schema version.
    pub document: RulesDocument,
    /// The version it was migrated from, when it was older.
    pub migrated_from: Option<u32>,
}

/// Parses, migrates and validates a document. `file` labels errors; `project` names the
/// project for documents too old to carry a name.
pub fn load_str(
    text: &str,
    file: &Path,
    project: &str,
    catalog: &AgentCatalog,
) -> Result<Loaded, RulesError> {
    let tree: Value = serde_saphyr::from_str(text).map_err(|e| parse_error(file, text, &e))?;
    let version = match tree.get("schema_version") {
        // The plan's first sketch had no version: that is version 1.
        None => 1,
        Some(v) => v
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| *v >= 1)
            .ok_or_else(|| RulesError::Parse {
                file: file.to_path_buf(),
                position: Position {
                    line: line_of_key(text, "schema_version"),
                    column: Some(1),
                    field: Some("schema_version".into()),
                },
                message: format!("schema_version must be a positive integer, found {v}"),
            })?,
    };
    if version > CURRENT_SCHEMA_VERSION {
        return Err(RulesError::TooNew {
            file: file.to_path_buf(),
            found: version,
            supported: CURRENT_SCHEMA_VERSION,
        });
    }
    let (document, migrated_from) = if version == CURRENT_SCHEMA_VERSION {
        let doc: RulesDocument =
            serde_saphyr::from_str(text).map_err(|e| parse_error(file, text, &e))?;
        (doc, None)
    } else {
        let mut tree = tree;
        migrate::migrate(&mut tree, version, project).map_err(|f| RulesError::Migration {
            file: file.to_path_buf(),
            from: f.from,
            message: f.message,
        })?;
        let doc: RulesDocument =
            serde_json::from_value(tree).map_err(|e| RulesError::Migration {
                file: file.to_path_buf(),
                from: version,
                message: format!("the migrated document does not fit the current shape: {e}"),
            })?;
        (doc, Some(version))
    };
    let problems = validate::validate(&document, catalog, Some(text));
    if !problems.is_empty() {
        return Err(RulesError::Invalid {
            file: file.to_path_buf(),
            problems,
        });
    }
    Ok(Loaded {
        document,
        migrated_from,
    })
}

/// Writes a document as YAML, at the current schema version.
pub fn to_yaml(doc: &RulesDocument) -> Result<String, RulesError> {
    let mut doc = doc.clone();
    doc.schema_version = CURRENT_SCHEMA_VERSION;
    serde_saphyr::to_string(&doc).map_err(|e| RulesError::Serialize(e.to_string()))
}

/// Turns a serde-saphyr error into a [`RulesError::Parse`] with line, column and field.
pub(crate) fn parse_error(file: &Path, text: &str, e: &serde_saphyr::Error) -> RulesError {
    let location = e.location();
    let line = location.map(|l| l.line()).filter(|l| *l > 0);
    let column = location.map(|l| l.column()).filter(|c| *c > 0);
    let mut message = e.without_snippet().to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    let field = line.and_then(|l| field_path_at(text, l));
    RulesError::Parse {
        file: file.to_path_buf(),
        position: Position {
            line,
            column,
            field,
        },
        message,
    }
}

/// The 1-based line of the first top-level `key:`.
pub(crate) fn line_of_key(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .position(|l| {
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        .map(|i| i as u64 + 1)
}

/// The shape of one YAML line, as far as locating fields needs.
struct LineShape<'a> {
    /// Column of a leading `- `, if the line starts a list item.
    dash: Option<usize>,
    /// Column where the key starts.
    key_col: usize,
    /// The key, if the line has one.
    key: Option<&'a str>,
    /// Whether the key has no value on the same line (it opens a nested block).
    opens_block: bool,
}

fn shape(line: &str) -> Option<LineShape<'_>> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let mut rest = &line[indent..];
    if rest.is_empty() || rest.starts_with('#') {
        return None;
    }
    let mut dash = None;
    let mut key_col = indent;
    if rest == "-" || rest.starts_with("- ") {
        dash = Some(indent);
        let after = rest[1..].trim_start_matches(' ');
        key_col = indent + (rest.len() - after.len());
        rest = after;
    }
    let key = rest
        .find(':')
        .filter(|i| rest[i + 1..].is_empty() || rest[i + 1..].starts_with(' '))
        .map(|i| rest[..i].trim_matches(['"', '\'']));
    let opens_block = key.is_some()
        && rest
            .split_once(':')
            .is_some_and(|(_, v)| v.trim().is_empty() || v.trim_start().starts_with('#'));
    Some(LineShape {
        dash,
        key_col,
        key,
        opens_block,
    })
}

/// A best-effort field path (`guardrails[].severity`) for a 1-based line of block-style YAML,
/// found by walking up to each enclosing key.
pub(crate) fn field_path_at(text: &str, line: u64) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let idx = usize::try_from(line).ok()?.checked_sub(1)?;
    let first = shape(lines.get(idx)?)?;
    let mut segments: Vec<&str> = Vec::new();
    segments.push(first.key.unwrap_or("[]"));
    let mut cur = first.key_col;
    let mut in_item = false;
    if let Some(d) = first.dash {
        if first.key.is_some() {
            segments.push("[]");
        }
        cur = d;
        in_item = true;
    }
    for l in lines[..idx].iter().rev() {
        let Some(s) = shape(l) else { continue };
        if !in_item && s.dash.is_some() && s.key_col == cur {
            // A sibling key that starts the list item we are in.
            segments.push("[]");
            cur = s.dash.unwrap_or(0);
            in_item = true;
            continue;
        }
        let encloses = if in_item {
            s.key_col <= cur
        } else {
            s.key_col < cur
        };
        if encloses && s.opens_block {
            if let Some(k) = s.key {
                segments.push(k);
            }
            cur = s.key_col;
            in_item = false;
            if let Some(d) = s.dash {
                segments.push("[]");
                cur = d;
                in_item = true;
            }
        }
        if cur == 0 && !in_item {
            break;
        }
    }
    segments.reverse();
    let mut path = String::new();
    for s in segments {
        if s == "[]" {
            path.push_str("[]");
        } else {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(s);
        }
    }
    Some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_paths_follow_indentation() {
        let text = "schema_version: 2\nproject:\n  name: x\n  stack:\n    - rust\nguardrails:\n  - id: a\n    severity: guidance\n- id: b\n  severity: nope\n";
        assert_eq!(field_path_at(text, 3).as_deref(), Some("project.name"));
        assert_eq!(field_path_at(text, 5).as_deref(), Some("project.stack[]"));
        assert_eq!(
            field_path_at(text, 8).as_deref(),
            Some("guardrails[].severity")
        );
        assert_eq!(field_path_at(text, 7).as_deref(), Some("guardrails[].id"));
        assert_eq!(field_path_at(text, 1).as_deref(), Some("schema_version"));
        assert_eq!(field_path_at(text, 99), None);
        let compact = "guardrails:\n- id: a\n  severity: x\n";
        assert_eq!(
            field_path_at(compact, 3).as_deref(),
            Some("guardrails[].severity")
        );
    }
}
