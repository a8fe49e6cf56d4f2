//! # bridle-rules
//!
//! One canonical ruleset per project, rendered for every coding agent, changed only through
//! approval.
//!
//! - [`RulesDocument`] is the document (serde + a published JSON Schema, see [`json_schema`]),
//!   read and written as YAML by [`load_str`] / [`to_yaml`], with `schema_version` and
//!   step-by-step [migrations](migrate).
//! - [`Renderer`] turns it into each agent's native instruction file (`CLAUDE.md`,
//!   `AGENTS.md`, `GEMINI.md`, `.cursor/rules/*.mdc`, ...) with minijinja templates that a
//!   templates folder can override or extend ([`AgentCatalog::load`]).
//! - [`RulesStore`] keeps the documents as files and the review queue, decisions, scope tickets
//!   and change log in SQLite. Agents and vendor feeds [propose](RulesStore::propose); only a
//!   person [approves](RulesStore::approve).
//!
//! ```
//! use bridle_rules::*;
//!
//! let dir = tempfile::tempdir()?;
//! let store = RulesStore::open(dir.path(), AgentCatalog::builtin())?;
//! store.create("shop", &RulesDocument::new("Shop"), "alice")?;
//!
//! // An agent proposes; the document does not change until a person approves.
//! let p = store.propose(
//!     "shop",
//!     &Origin::agent("claude", Some("s-1".into())),
//!     &ChangeRequest::Guardrail {
//!         id: "tests-first".into(),
//!         statement: "Write a failing test before fixing a bug.".into(),
//!         severity: Severity::HardInstruction,
//!         applies_to: vec!["all_agents".into()],
//!     },
//!     None,
//! )?;
//! assert!(store.load("shop")?.document.guardrails.is_empty());
//! store.approve(p.id, "alice")?;
//!
//! let doc = store.load("shop")?.document;
//! let out = Renderer::builtin().render("shop", &doc, "claude")?;
//! assert_eq!(out.path, "CLAUDE.md");
//! assert!(out.content.contains("tests-first"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod agents;
pub mod db;
mod error;
pub mod fsutil;
pub mod migrate;
mod model;
mod redact;
mod render;
mod store;
mod validate;
pub mod vendor;
mod yaml;

pub use agents::{AgentCatalog, AgentTarget, BUILTIN_AGENTS, Style};
pub use error::{Position, Problem, RulesError, RulesErrorKind, check_name};
pub use model::{
    ALL_AGENTS, AgentPermissions, AgentProfile, CURRENT_SCHEMA_VERSION, CustomPattern, ExampleRepo,
    Guardrail, MAX_REVISION, MemoryPermission, Patterns, ProjectInfo, Provenance, ReadWrite,
    RulesDocument, RulesPermission, ScopePermission, SecretsPermission, Severity, Source,
    VendorSuggestion,
};
pub use redact::redact_url;
pub use render::{
    DIFF_DEADLINE, GENERATED_MARK, Rendered, Renderer, provenance_text, unified_diff,
};
#[cfg(feature = "postgres")]
pub use store::POSTGRES_MIGRATIONS;
pub use store::{
    ChangeRecord, ChangeRequest, DocumentSource, Documents, MAX_PENDING_PER_PROPOSER,
    MAX_PENDING_PROPOSALS, MAX_PROPOSAL_BYTES, Origin, PendingCounts, Proposal, ProposalStatus,
    QueueFilter, QueuePage, RulesStore, SQLITE_MIGRATIONS, SavedEdit, ScopeTicket,
    UNCHANGED_CHECK_MAX, VendorReport,
};
pub use validate::{MAX_LINE_CHARS, is_bidi_control, is_one_line, is_tag_character, validate};
pub use yaml::{Loaded, load_str, to_yaml};

/// The Kberg write-capability ids that agent permissions turn into. A gateway declares them
/// and binds its tools to them; [`AgentPermissions::capability_ids`] says which an agent holds.
pub mod capabilities {
    /// Propose rule changes (`propose_guardrail`, `add_pattern`, `update_rules`).
    pub const RULES_PROPOSE: &str = "rules.propose";
    /// Ask a person to approve a scope expansion (`request_scope_approval`).
    pub const SCOPE_REQUEST: &str = "scope.request";
    /// Write to Gitea through the gateway.
    pub const GITEA_WRITE: &str = "gitea.write";
    /// Write to Kanboard through the gateway.
    pub const KANBOARD_WRITE: &str = "kanboard.write";
    /// Read secret values.
    pub const SECRETS_READ: &str = "secrets.read";
    /// Store session memories (`remember`).
    pub const MEMORY_WRITE: &str = "memory.write";
    /// Re-index pattern example repositories (`refresh_pattern_example`).
    pub const MEMORY_INDEX: &str = "memory.index";
}

/// The JSON Schema of [`RulesDocument`] (draft 2020-12), as published in
/// `schema/rules.schema.json` for editors.
pub fn json_schema() -> serde_json::Value {
    let schema = schemars::schema_for!(RulesDocument);
    // A schemars schema is plain JSON data; converting it cannot fail.
    serde_json::to_value(schema).unwrap_or(serde_json::Value::Null)
}
