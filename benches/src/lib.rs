//! Shared fixtures of the benchmarks: the 6-field note schema and arguments that the gate and
//! primitives benches call with, the write capability their tools are bound to, (in
//! [`loopback`]) the HTTP load generator of the wire-level benches, (in [`echo_servers`]) the
//! Kberg and bare-rmcp echo servers they measure, and (in [`legacy_chunk`])
//! the line-based chunker the retrieval benchmark compares the tree-sitter one with.

pub mod echo_servers;
pub mod legacy_chunk;
pub mod loopback;
pub mod tasks;

use kberg_core::WriteCapability;
use serde_json::{Value, json};

/// A 6-field object schema of the kind tool surfaces use: strings with bounds, an integer range,
/// an array, a boolean and an enum; three fields required; no extra fields.
pub fn note_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "body": {"type": "string"},
            "priority": {"type": "integer", "minimum": 0, "maximum": 5},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
            "pinned": {"type": "boolean"},
            "folder": {"enum": ["inbox", "work", "home"]}
        },
        "required": ["title", "body", "priority"],
        "additionalProperties": false
    })
}

/// Valid arguments for [`note_schema`], every field set.
pub fn note_args() -> Value {
    json!({
        "title": "Groceries",
        "body": "milk, eggs, bread",
        "priority": 2,
        "tags": ["home", "weekly"],
        "pinned": false,
        "folder": "home"
    })
}

/// The capability the benches' write tools are bound to.
pub fn notes_write() -> WriteCapability {
    WriteCapability::new("notes.write", "Create notes")
}

/// Dates the project documents of the data folder `dir` (and their folder) and its vault's
/// token-change marker an hour back, as the files of a deployment that has run a while are. The
/// rules store reads a document changed less than two seconds ago again on every check (its
/// settle rule), and the vault trusts its token cache only under a marker that settled the same
/// way, so a bench that measures right after writing either would otherwise time re-reads no
/// running gateway does.
pub fn settle_data_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let projects = dir.join("projects");
    for entry in std::fs::read_dir(&projects)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            std::fs::File::open(&path)?.set_modified(hour_ago)?;
        }
    }
    let marker = dir.join("vault.db-tokens");
    if marker.is_file() {
        std::fs::File::open(&marker)?.set_modified(hour_ago)?;
    }
    std::fs::File::open(&projects)?.set_modified(hour_ago)
}
