//! The canonical rules document: one per project, the single source of truth that every agent's
//! instruction file is rendered from.
//!
//! The shape follows the Bridle plan: `project` (overview, stack, conventions), `guardrails`
//! (project policy, each with a severity and a provenance), `patterns`, `agent_profiles` (what
//! each agent is, and vendor suggestions kept apart from policy until a human promotes them) and
//! `permissions` (what each agent may do in Bridle itself). `schema_version` says which version
//! of this shape a file follows (see [`crate::migrate`]); `revision` counts accepted changes so a
//! stale edit is refused instead of silently overwriting a newer one.
//!
//! Maps are `BTreeMap`s and lists keep their order, so a saved document and every render are
//! byte-for-byte deterministic.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The newest `schema_version` this build reads and writes.
pub const CURRENT_SCHEMA_VERSION: u32 = 2;

/// The largest `revision` a document may have: 2^63 - 1. The databases store revisions as
/// signed 64-bit integers, so a larger one (a hand edit) could not be stored or would be
/// stored as a different number; such a document is refused as invalid.
pub const MAX_REVISION: u64 = i64::MAX as u64;

/// The applies-to entry meaning "every agent".
pub const ALL_AGENTS: &str = "all_agents";

/// One project's canonical rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Bridle rules document")]
pub struct RulesDocument {
    /// Version of the document format. Older versions are migrated on load.
    pub schema_version: u32,
    /// Counts accepted changes. An edit based on an older revision is refused as a conflict.
    #[serde(default)]
    pub revision: u64,
    /// What the project is.
    pub project: ProjectInfo,
    /// Project policy: statements every agent is told, each with a severity and provenance.
    #[serde(default)]
    pub guardrails: Vec<Guardrail>,
    /// Architecture patterns the project uses.
    #[serde(default)]
    pub patterns: Patterns,
    /// Per agent type: what it is and vendor suggestions pending review (never policy).
    #[serde(default)]
    pub agent_profiles: BTreeMap<String, AgentProfile>,
    /// Per agent type: what it may do through Bridle.
    #[serde(default)]
    pub permissions: BTreeMap<String, AgentPermissions>,
}

impl RulesDocument {
    /// An empty document for a new project, at the current schema version.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            schema_version: CURRENT_SCHEMA_VERSION,
            revision: 0,
            project: ProjectInfo {
                name: name.into(),
                overview: String::new(),
                stack: Vec::new(),
                conventions: Vec::new(),
            },
            guardrails: Vec::new(),
            patterns: Patterns::default(),
            agent_profiles: BTreeMap::new(),
            permissions: BTreeMap::new(),
        }
    }

    /// The guardrail with this id.
    pub fn guardrail(&self, id: &str) -> Option<&Guardrail> {
        self.guardrails.iter().find(|g| g.id == id)
    }

    /// The permissions of an agent type (all false when the document names none).
    pub fn permissions_of(&self, agent: &str) -> AgentPermissions {
        self.permissions.get(agent).cloned().unwrap_or_default()
    }
}

/// What the project is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectInfo {
    /// The project's name, as shown in rendered files (the title of each): one line, without
    /// control characters.
    pub name: String,
    /// A paragraph on what the project is and does.
    #[serde(default)]
    pub overview: String,
    /// Languages, frameworks and tools, one entry each.
    #[serde(default)]
    pub stack: Vec<String>,
    /// Coding conventions, one statement each.
    #[serde(default)]
    pub conventions: Vec<String>,
}

/// How strongly a guardrail binds an agent.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// The agent may deviate, but should not.
    Guidance,
    /// The agent must follow it; before expanding scope it calls `request_scope_approval`.
    HardInstruction,
    /// The gateway itself enforces it; the agent cannot get around it.
    Enforcement,
}

impl Severity {
    /// The spelling used in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Guidance => "guidance",
            Severity::HardInstruction => "hard-instruction",
            Severity::Enforcement => "enforcement",
        }
    }
}

/// Where a change came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A person edited the document.
    User,
    /// An agent proposed it and a person approved it.
    Agent,
    /// A vendor's published guidance suggested it and a person approved it.
    Vendor,
}

impl Source {
    /// The spelling used in documents and the change log.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::User => "user",
            Source::Agent => "agent",
            Source::Vendor => "vendor",
        }
    }

    /// Parses the spelling used in documents.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Source::User),
            "agent" => Some(Source::Agent),
            "vendor" => Some(Source::Vendor),
            _ => None,
        }
    }
}

/// Who a guardrail came from and who accepted it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// Where it came from.
    pub source: Source,
    /// The agent that proposed it (`claude`, or a configured agent name), if agent-proposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_by: Option<String>,
    /// The agent session it was proposed in, if agent-proposed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_session: Option<String>,
    /// The vendor document it was taken from (a URL or file), if vendor-seeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<String>,
    /// The review-queue proposal it was promoted from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<u64>,
    /// The person who approved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// When it was approved (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<String>,
}

impl Provenance {
    /// Provenance of a statement a person wrote into the document.
    pub fn user() -> Self {
        Self {
            source: Source::User,
            proposed_by: None,
            agent_session: None,
            source_ref: None,
            proposal: None,
            approved_by: None,
            approved_at: None,
        }
    }
}

/// One project policy statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Guardrail {
    /// Stable id, unique in the document (`no-unrequested-refactors`).
    pub id: String,
    /// The statement agents are given.
    pub statement: String,
    /// How strongly it binds.
    pub severity: Severity,
    /// Agent types it applies to; `all_agents` for every agent.
    #[serde(default = "all_agents")]
    pub applies_to: Vec<String>,
    /// Who it came from and who accepted it.
    pub provenance: Provenance,
}

fn all_agents() -> Vec<String> {
    vec![ALL_AGENTS.to_string()]
}

impl Guardrail {
    /// Whether this guardrail applies to an agent type.
    pub fn applies_to_agent(&self, agent: &str) -> bool {
        self.applies_to
            .iter()
            .any(|a| a == ALL_AGENTS || a == agent)
    }
}

/// Architecture patterns.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Patterns {
    /// Well-known patterns the project follows (`MVC`, `hexagonal`, ...).
    #[serde(default)]
    pub standard: Vec<String>,
    /// The project's own patterns.
    #[serde(default)]
    pub custom: Vec<CustomPattern>,
}

/// A project-specific pattern, with example repositories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CustomPattern {
    /// Its name (`modified-mvc`).
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub description: String,
    /// Repositories that show it.
    #[serde(default)]
    pub example_repos: Vec<ExampleRepo>,
}

/// A repository that shows a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExampleRepo {
    /// Where it is.
    pub url: String,
    /// The tag its indexed chunks carry.
    pub reference_tag: String,
    /// The pattern's tag.
    pub arch_tag: String,
    /// When it was last indexed (RFC 3339), if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_indexed: Option<String>,
}

/// What an agent type is, and what its vendor suggests (pending review, not policy).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentProfile {
    /// What the agent can do (`mcp`, `subagents`, ...).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The instruction-file convention it reads, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction_format: Option<String>,
    /// Suggestions taken from the vendor's published guidance. They are not policy: they become
    /// a guardrail only when a person approves them.
    #[serde(default)]
    pub vendor_guardrail_suggestions: Vec<VendorSuggestion>,
}

/// A vendor's suggested guardrail, kept apart from policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VendorSuggestion {
    /// Stable id.
    pub id: String,
    /// The suggested statement.
    pub statement: String,
    /// The document it was taken from, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<String>,
}

/// Read and write access to an integration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadWrite {
    /// May read.
    #[serde(default)]
    pub read: bool,
    /// May write.
    #[serde(default)]
    pub write: bool,
}

/// Authority over the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RulesPermission {
    /// May propose changes (they go to the review queue).
    #[serde(default)]
    pub propose: bool,
    /// Reserved for a human reviewer's own client. Bridle never offers approving as an agent
    /// tool, whatever this says.
    #[serde(default)]
    pub approve: bool,
}

/// Access to secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretsPermission {
    /// May read secret values (never granted by default).
    #[serde(default)]
    pub read: bool,
}

/// Scope check-ins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopePermission {
    /// May ask a person to approve a scope expansion (`request_scope_approval`).
    #[serde(default = "yes")]
    pub request: bool,
}

fn yes() -> bool {
    true
}

impl Default for ScopePermission {
    fn default() -> Self {
        Self { request: true }
    }
}

/// Access to Bridle's memory. Recalling memories and searching pattern examples need no
/// permission (they are reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryPermission {
    /// May store memories (`remember`).
    #[serde(default)]
    pub write: bool,
    /// May re-index pattern example repositories (`refresh_pattern_example`).
    #[serde(default)]
    pub index: bool,
}

/// What one agent type may do through Bridle.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentPermissions {
    /// Gitea access.
    #[serde(default)]
    pub gitea: ReadWrite,
    /// Kanboard access.
    #[serde(default)]
    pub kanboard: ReadWrite,
    /// Authority over the rules.
    #[serde(default)]
    pub rules: RulesPermission,
    /// Secret access.
    #[serde(default)]
    pub secrets: SecretsPermission,
    /// Scope check-ins.
    #[serde(default)]
    pub scope: ScopePermission,
    /// Memory access.
    #[serde(default)]
    pub memory: MemoryPermission,
    /// Access to the tools of other upstream MCP servers the gateway routes to, by the
    /// upstream's namespace (`docs: {read: true, write: false}`). `gitea` and `kanboard` have
    /// their own fields above; an entry here under either name is ignored.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, ReadWrite>,
}

impl AgentPermissions {
    /// The Kberg capability ids these permissions grant. Reading rules needs no capability.
    pub fn capability_ids(&self) -> Vec<&'static str> {
        let mut ids = Vec::new();
        if self.gitea.write {
            ids.push(crate::capabilities::GITEA_WRITE);
        }
        if self.kanboard.write {
            ids.push(crate::capabilities::KANBOARD_WRITE);
        }
        if self.rules.propose {
            ids.push(crate::capabilities::RULES_PROPOSE);
        }
        if self.scope.request {
            ids.push(crate::capabilities::SCOPE_REQUEST);
        }
        if self.secrets.read {
            ids.push(crate::capabilities::SECRETS_READ);
        }
        if self.memory.write {
            ids.push(crate::capabilities::MEMORY_WRITE);
        }
        if self.memory.index {
            ids.push(crate::capabilities::MEMORY_INDEX);
        }
        ids
    }

    /// Read and write access to the tools of the upstream under `namespace`: the `gitea` and
    /// `kanboard` fields for those names, else the `tools` entry (none: no access).
    pub fn upstream(&self, namespace: &str) -> ReadWrite {
        match namespace {
            "gitea" => self.gitea,
            "kanboard" => self.kanboard,
            other => self.tools.get(other).copied().unwrap_or_default(),
        }
    }

    /// The capability id that writing through the upstream under `namespace` needs:
    /// `<namespace>.write` (`gitea.write`, `kanboard.write`, `docs.write`).
    pub fn upstream_write_capability(namespace: &str) -> String {
        format!("{namespace}.write")
    }

    /// The write capabilities of the upstreams in `tools` this agent may write to (the
    /// `gitea` and `kanboard` ones come from [`AgentPermissions::capability_ids`]).
    pub fn tool_capability_ids(&self) -> Vec<String> {
        self.tools
            .iter()
            .filter(|(ns, rw)| rw.write && !matches!(ns.as_str(), "gitea" | "kanboard"))
            .map(|(ns, _)| Self::upstream_write_capability(ns))
            .collect()
    }
}
