//! The rules store: one YAML file per project, and an embedded SQLite database for the review
//! queue, the decisions, scope tickets and the change log.
//!
//! Documents stay plain files (`<data>/projects/<project>.yaml`) so people can keep them in git
//! and edit them by hand; everything that is a workflow rather than policy lives in the
//! database. Every change to a document goes through one path: a SQLite `BEGIN IMMEDIATE`
//! transaction (which serializes writers across processes: the gateway and the command line),
//! a revision check, an atomic file write, and a change-log row naming the source (user, agent
//! or vendor) and the actor. Agents and vendor feeds never write documents: they add proposals,
//! and only [`RulesStore::approve`] promotes one, with its provenance.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agents::AgentCatalog;
use crate::error::{RulesError, check_name};
use crate::fsutil::{now_rfc3339, write_atomic};
use crate::model::{
    ALL_AGENTS, CustomPattern, Guardrail, Provenance, RulesDocument, Severity, Source,
};
use crate::validate;
use crate::yaml::{self, Loaded};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS proposals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project TEXT NOT NULL,
    source TEXT NOT NULL,
    proposed_by TEXT NOT NULL,
    agent_session TEXT,
    source_ref TEXT,
    base_revision INTEGER,
    change TEXT NOT NULL,
    summary TEXT NOT NULL,
    fingerprint TEXT,
    status TEXT NOT NULL DEFAULT 'pending',
    created_at TEXT NOT NULL,
    decided_by TEXT,
    decided_at TEXT,
    decision_note TEXT,
    applied_revision INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS proposals_fingerprint
    ON proposals(project, fingerprint) WHERE fingerprint IS NOT NULL;
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project TEXT NOT NULL,
    revision INTEGER NOT NULL,
    source TEXT NOT NULL,
    actor TEXT NOT NULL,
    summary TEXT NOT NULL,
    proposal_id INTEGER,
    at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS revisions (
    project TEXT NOT NULL,
    revision INTEGER NOT NULL,
    document TEXT NOT NULL,
    PRIMARY KEY (project, revision)
);
CREATE TABLE IF NOT EXISTS scope_requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    project TEXT NOT NULL,
    agent TEXT NOT NULL,
    agent_session TEXT,
    action TEXT NOT NULL,
    reason TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    created_at TEXT NOT NULL,
    decided_by TEXT,
    decided_at TEXT,
    note TEXT
);
";

/// A change someone asks for. Agents send these through MCP tools; vendor sourcing creates
/// guardrail ones; a person approves or rejects each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChangeRequest {
    /// Add a guardrail.
    Guardrail {
        /// Its id (unique in the document).
        id: String,
        /// The statement.
        statement: String,
        /// How strongly it binds.
        severity: Severity,
        /// Agent types it applies to (`all_agents` for every agent).
        applies_to: Vec<String>,
    },
    /// Add a standard pattern name, or a custom pattern.
    Pattern {
        /// A well-known pattern name, added to `patterns.standard`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        standard: Option<String>,
        /// A custom pattern, added to `patterns.custom`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        custom: Option<CustomPattern>,
    },
    /// Replace parts of the `project` section. Only the fields given change.
    UpdateProject {
        /// New overview.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        overview: Option<String>,
        /// New stack list.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stack: Option<Vec<String>>,
        /// New conventions list.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conventions: Option<Vec<String>>,
    },
}

impl ChangeRequest {
    /// One line describing the change.
    pub fn summary(&self) -> String {
        match self {
            ChangeRequest::Guardrail {
                id,
                severity,
                statement,
                ..
            } => format!("add {} guardrail `{id}`: {statement}", severity.as_str()),
            ChangeRequest::Pattern { standard, custom } => match (standard, custom) {
                (Some(s), _) => format!("add standard pattern `{s}`"),
                (None, Some(c)) => format!("add custom pattern `{}`", c.name),
                (None, None) => "add nothing".to_string(),
            },
            ChangeRequest::UpdateProject {
                overview,
                stack,
                conventions,
            } => {
                let mut parts = Vec::new();
                if overview.is_some() {
                    parts.push("overview");
                }
                if stack.is_some() {
                    parts.push("stack");
                }
                if conventions.is_some() {
                    parts.push("conventions");
                }
                format!("update project {}", parts.join(", "))
            }
        }
    }

    /// Checks the request on its own (names, non-empty fields, known agents).
    fn check(&self, catalog: &AgentCatalog) -> Result<(), RulesError> {
        match self {
            ChangeRequest::Guardrail {
                id,
                statement,
                applies_to,
                ..
            } => {
                check_name("guardrail id", id)?;
                if statement.trim().is_empty() {
                    return Err(RulesError::Rejected(
                        "a guardrail needs a non-empty statement".into(),
                    ));
                }
                if applies_to.is_empty() {
                    return Err(RulesError::Rejected(format!(
                        "applies_to must name at least one agent or `{ALL_AGENTS}`"
                    )));
                }
                for a in applies_to {
                    if a != ALL_AGENTS {
                        catalog.get(a)?;
                    }
                }
            }
            ChangeRequest::Pattern { standard, custom } => {
                if standard.is_some() == custom.is_some() {
                    return Err(RulesError::Rejected(
                        "a pattern proposal names exactly one of `standard` or `custom`".into(),
                    ));
                }
                if standard.as_deref().is_some_and(|s| s.trim().is_empty())
                    || custom.as_ref().is_some_and(|c| c.name.trim().is_empty())
                {
                    return Err(RulesError::Rejected("a pattern needs a name".into()));
                }
            }
            ChangeRequest::UpdateProject {
                overview,
                stack,
                conventions,
            } => {
                if overview.is_none() && stack.is_none() && conventions.is_none() {
                    return Err(RulesError::Rejected(
                        "an update names at least one of overview, stack, conventions".into(),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Who asks for a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// Agent or vendor (a person edits directly instead).
    pub source: Source,
    /// The agent name, or the vendor feed's name.
    pub proposed_by: String,
    /// The agent session, if any.
    pub agent_session: Option<String>,
    /// The vendor document (URL or file), if any.
    pub source_ref: Option<String>,
}

impl Origin {
    /// A change proposed by an agent in a session.
    pub fn agent(name: impl Into<String>, session: Option<String>) -> Self {
        Self {
            source: Source::Agent,
            proposed_by: name.into(),
            agent_session: session,
            source_ref: None,
        }
    }

    /// A change suggested by a vendor's published guidance.
    pub fn vendor(agent: impl Into<String>, source_ref: impl Into<String>) -> Self {
        Self {
            source: Source::Vendor,
            proposed_by: format!("vendor:{}", agent.into()),
            agent_session: None,
            source_ref: Some(source_ref.into()),
        }
    }
}

/// Where a proposal stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalStatus {
    /// Waiting for a person.
    Pending,
    /// Promoted into the document.
    Approved,
    /// Declined, with a reason.
    Rejected,
}

impl ProposalStatus {
    fn parse(s: &str) -> Self {
        match s {
            "approved" => ProposalStatus::Approved,
            "rejected" => ProposalStatus::Rejected,
            _ => ProposalStatus::Pending,
        }
    }

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ProposalStatus::Pending => "pending",
            ProposalStatus::Approved => "approved",
            ProposalStatus::Rejected => "rejected",
        }
    }
}

/// A queued change and its fate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Proposal {
    /// Its id.
    pub id: u64,
    /// The project.
    pub project: String,
    /// Who asked.
    pub origin: Origin,
    /// The revision it was based on, when the proposer gave one.
    pub base_revision: Option<u64>,
    /// The change.
    pub change: ChangeRequest,
    /// One line describing it.
    pub summary: String,
    /// Where it stands.
    pub status: ProposalStatus,
    /// When it was queued.
    pub created_at: String,
    /// Who decided.
    pub decided_by: Option<String>,
    /// When.
    pub decided_at: Option<String>,
    /// The rejection reason or approval note.
    pub decision_note: Option<String>,
    /// The document revision the approval produced.
    pub applied_revision: Option<u64>,
}

/// One entry of the change log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangeRecord {
    /// Its id (increases with every change, across projects).
    pub id: u64,
    /// The project.
    pub project: String,
    /// The document revision after the change.
    pub revision: u64,
    /// User, agent or vendor.
    pub source: Source,
    /// The person who made or approved the change.
    pub actor: String,
    /// What changed.
    pub summary: String,
    /// The proposal it came from, if any.
    pub proposal_id: Option<u64>,
    /// When.
    pub at: String,
}

/// A scope-expansion request and its decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScopeTicket {
    /// The ticket id.
    pub id: u64,
    /// The project.
    pub project: String,
    /// The agent that asked.
    pub agent: String,
    /// Its session.
    pub agent_session: Option<String>,
    /// What it wants to do.
    pub action: String,
    /// Why.
    pub reason: String,
    /// `pending`, `approved` or `denied`.
    pub status: String,
    /// When it was asked.
    pub created_at: String,
    /// Who decided.
    pub decided_by: Option<String>,
    /// When.
    pub decided_at: Option<String>,
    /// The decider's note.
    pub note: Option<String>,
}

/// What a vendor-sourcing run did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct VendorReport {
    /// Proposals queued by this run.
    pub queued: Vec<u64>,
    /// Candidates skipped because they were queued before or are already policy.
    pub skipped: usize,
}

/// The projects folder and the database, with the agent catalog used to validate documents.
#[derive(Debug, Clone)]
pub struct RulesStore {
    projects_dir: PathBuf,
    db_path: PathBuf,
    catalog: AgentCatalog,
}

impl RulesStore {
    /// Opens (creating when missing) a store rooted at `data_dir`: `projects/` and `bridle.db`.
    pub fn open(data_dir: &Path, catalog: AgentCatalog) -> Result<Self, RulesError> {
        let projects_dir = data_dir.join("projects");
        std::fs::create_dir_all(&projects_dir).map_err(|e| RulesError::io(&projects_dir, e))?;
        let store = Self {
            projects_dir,
            db_path: data_dir.join("bridle.db"),
            catalog,
        };
        store.connect()?.execute_batch(SCHEMA)?;
        Ok(store)
    }

    /// The agent catalog.
    pub fn catalog(&self) -> &AgentCatalog {
        &self.catalog
    }

    /// The database file.
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    fn connect(&self) -> Result<Connection, RulesError> {
        let conn = Connection::open(&self.db_path)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        Ok(conn)
    }

    /// The file of a project.
    pub fn project_path(&self, project: &str) -> Result<PathBuf, RulesError> {
        check_name("project", project)?;
        Ok(self.projects_dir.join(format!("{project}.yaml")))
    }

    /// The projects that have a document, sorted.
    pub fn projects(&self) -> Result<Vec<String>, RulesError> {
        let mut out = Vec::new();
        let rd = std::fs::read_dir(&self.projects_dir)
            .map_err(|e| RulesError::io(&self.projects_dir, e))?;
        for entry in rd {
            let entry = entry.map_err(|e| RulesError::io(&self.projects_dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".yaml")
                && check_name("project", stem).is_ok()
            {
                out.push(stem.to_string());
            }
        }
        out.sort();
        Ok(out)
    }

    /// Loads a project's document (migrating an older one in memory; see
    /// [`RulesStore::upgrade`] to rewrite it).
    pub fn load(&self, project: &str) -> Result<Loaded, RulesError> {
        let path = self.project_path(project)?;
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RulesError::UnknownProject(project.to_string()));
            }
            Err(e) => return Err(RulesError::io(&path, e)),
        };
        yaml::load_str(&text, &path, project, &self.catalog)
    }

    /// Creates a project's document. Fails if one exists.
    pub fn create(
        &self,
        project: &str,
        doc: &RulesDocument,
        actor: &str,
    ) -> Result<(), RulesError> {
        let path = self.project_path(project)?;
        let mut conn = self.connect()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if path.exists() {
            return Err(RulesError::Rejected(format!(
                "project `{project}` already exists"
            )));
        }
        let mut doc = doc.clone();
        doc.revision = 1;
        self.write_doc(&tx, project, &path, &doc)?;
        record_change(&tx, project, 1, Source::User, actor, "create project", None)?;
        tx.commit()?;
        Ok(())
    }

    /// Saves a person's edit. `base_revision` is the revision the edit started from; if the
    /// document moved on since, the edit is refused as a conflict and nothing is written.
    pub fn save_edit(
        &self,
        project: &str,
        edited: &RulesDocument,
        base_revision: u64,
        actor: &str,
        summary: &str,
    ) -> Result<u64, RulesError> {
        let path = self.project_path(project)?;
        let mut conn = self.connect()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let current = self.load(project)?.document;
        if current.revision != base_revision {
            return Err(RulesError::Conflict {
                project: project.to_string(),
                expected: base_revision,
                actual: current.revision,
            });
        }
        let mut doc = edited.clone();
        doc.revision = current.revision + 1;
        self.write_doc(&tx, project, &path, &doc)?;
        record_change(
            &tx,
            project,
            doc.revision,
            Source::User,
            actor,
            summary,
            None,
        )?;
        tx.commit()?;
        Ok(doc.revision)
    }

    /// Rewrites an older document in the current schema version. Returns the version it was
    /// migrated from, or `None` when it already was current (then nothing is written).
    pub fn upgrade(&self, project: &str, actor: &str) -> Result<Option<u32>, RulesError> {
        let path = self.project_path(project)?;
        let mut conn = self.connect()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let loaded = self.load(project)?;
        let Some(from) = loaded.migrated_from else {
            return Ok(None);
        };
        let mut doc = loaded.document;
        doc.revision += 1;
        self.write_doc(&tx, project, &path, &doc)?;
        record_change(
            &tx,
            project,
            doc.revision,
            Source::User,
            actor,
            &format!("migrate from schema_version {from}"),
            None,
        )?;
        tx.commit()?;
        Ok(Some(from))
    }

    /// Validates and writes a document, keeping a copy of the revision in the database (in the
    /// caller's transaction) so older revisions can be read back and diffed.
    fn write_doc(
        &self,
        tx: &Connection,
        project: &str,
        path: &Path,
        doc: &RulesDocument,
    ) -> Result<(), RulesError> {
        let problems = validate::validate(doc, &self.catalog, None);
        if !problems.is_empty() {
            return Err(RulesError::Invalid {
                file: path.to_path_buf(),
                problems,
            });
        }
        let text = yaml::to_yaml(doc)?;
        tx.execute(
            "INSERT OR REPLACE INTO revisions (project, revision, document) VALUES (?1, ?2, ?3)",
            params![project, doc.revision as i64, text],
        )?;
        write_atomic(path, text.as_bytes())
    }

    /// The document of a project as it was at `revision`, for revisions written since the
    /// store kept copies (older ones are [`RulesError::NotFound`] of kind `revision`).
    pub fn document_at(&self, project: &str, revision: u64) -> Result<RulesDocument, RulesError> {
        let path = self.project_path(project)?;
        let current = self.load(project)?.document;
        if current.revision == revision {
            return Ok(current);
        }
        let conn = self.connect()?;
        let text: Option<String> = conn
            .query_row(
                "SELECT document FROM revisions WHERE project = ?1 AND revision = ?2",
                params![project, revision as i64],
                |r| r.get(0),
            )
            .optional()?;
        let text = text.ok_or_else(|| RulesError::NotFound {
            kind: "revision",
            id: format!("{project}@{revision}"),
        })?;
        Ok(yaml::load_str(&text, &path, project, &self.catalog)?.document)
    }

    /// The document a pending proposal would produce if it were approved now by `approver`
    /// (nothing is written). Fails as [`RulesStore::approve`] would.
    pub fn preview(&self, id: u64, approver: &str) -> Result<RulesDocument, RulesError> {
        let p = self.proposal(id)?;
        if p.status != ProposalStatus::Pending {
            return Err(RulesError::AlreadyDecided {
                kind: "proposal",
                id: id.to_string(),
                status: p.status.as_str().into(),
            });
        }
        let mut doc = self.load(&p.project)?.document;
        apply(&mut doc, &p, approver, &now_rfc3339())?;
        doc.revision += 1;
        Ok(doc)
    }

    /// Queues a change for review. The document is not touched.
    pub fn propose(
        &self,
        project: &str,
        origin: &Origin,
        change: &ChangeRequest,
        base_revision: Option<u64>,
    ) -> Result<Proposal, RulesError> {
        change.check(&self.catalog)?;
        let doc = self.load(project)?.document;
        if let ChangeRequest::Guardrail { id, .. } = change
            && doc.guardrail(id).is_some()
        {
            return Err(RulesError::Rejected(format!(
                "guardrail `{id}` already exists in project `{project}`; propose a different id"
            )));
        }
        if let Some(base) = base_revision
            && base != doc.revision
        {
            return Err(RulesError::Conflict {
                project: project.to_string(),
                expected: base,
                actual: doc.revision,
            });
        }
        let conn = self.connect()?;
        let id = insert_proposal(&conn, project, origin, change, base_revision, None)?
            .ok_or_else(|| RulesError::Rejected("the proposal was not stored".into()))?;
        tracing::info!(project, proposal = id, by = %origin.proposed_by, "proposal queued");
        self.proposal(id)
    }

    /// One proposal.
    pub fn proposal(&self, id: u64) -> Result<Proposal, RulesError> {
        let conn = self.connect()?;
        get_proposal(&conn, id)
    }

    /// Proposals, newest last: the pending ones (or all, with `include_decided`), of one
    /// project or of all.
    pub fn queue(
        &self,
        project: Option<&str>,
        include_decided: bool,
    ) -> Result<Vec<Proposal>, RulesError> {
        let conn = self.connect()?;
        let mut stmt = conn.prepare(
            "SELECT id FROM proposals WHERE (?1 IS NULL OR project = ?1) AND (?2 OR status = 'pending') ORDER BY id",
        )?;
        let ids: Vec<i64> = stmt
            .query_map(params![project, include_decided], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        ids.into_iter()
            .map(|id| get_proposal(&conn, id as u64))
            .collect()
    }

    /// Approves a proposal: promotes the change into the document with its provenance, bumps
    /// the revision, and records the decision and the change. Returns the decided proposal;
    /// its `applied_revision` is the document's new revision.
    pub fn approve(&self, id: u64, approved_by: &str) -> Result<Proposal, RulesError> {
        if approved_by.trim().is_empty() {
            return Err(RulesError::Rejected(
                "an approval names who approves".into(),
            ));
        }
        let mut conn = self.connect()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let p = get_proposal(&tx, id)?;
        if p.status != ProposalStatus::Pending {
            return Err(RulesError::AlreadyDecided {
                kind: "proposal",
                id: id.to_string(),
                status: p.status.as_str().into(),
            });
        }
        let path = self.project_path(&p.project)?;
        let mut doc = self.load(&p.project)?.document;
        if let Some(base) = p.base_revision
            && base != doc.revision
        {
            return Err(RulesError::Conflict {
                project: p.project.clone(),
                expected: base,
                actual: doc.revision,
            });
        }
        let now = now_rfc3339();
        apply(&mut doc, &p, approved_by, &now)?;
        doc.revision += 1;
        self.write_doc(&tx, &p.project, &path, &doc)?;
        tx.execute(
            "UPDATE proposals SET status = 'approved', decided_by = ?1, decided_at = ?2, applied_revision = ?3 WHERE id = ?4",
            params![approved_by, now, doc.revision as i64, id as i64],
        )?;
        record_change(
            &tx,
            &p.project,
            doc.revision,
            p.origin.source,
            approved_by,
            &p.summary,
            Some(id),
        )?;
        tx.commit()?;
        tracing::info!(project = %p.project, proposal = id, revision = doc.revision, "proposal approved");
        self.proposal(id)
    }

    /// Rejects a proposal with a reason. The document is not touched.
    pub fn reject(&self, id: u64, rejected_by: &str, reason: &str) -> Result<Proposal, RulesError> {
        if reason.trim().is_empty() {
            return Err(RulesError::Rejected("a rejection says why".into()));
        }
        let mut conn = self.connect()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let p = get_proposal(&tx, id)?;
        if p.status != ProposalStatus::Pending {
            return Err(RulesError::AlreadyDecided {
                kind: "proposal",
                id: id.to_string(),
                status: p.status.as_str().into(),
            });
        }
        tx.execute(
            "UPDATE proposals SET status = 'rejected', decided_by = ?1, decided_at = ?2, decision_note = ?3 WHERE id = ?4",
            params![rejected_by, now_rfc3339(), reason, id as i64],
        )?;
        tx.commit()?;
        self.proposal(id)
    }

    /// The change log, oldest first, of one project or of all, after change id `after`.
    pub fn changes(
        &self,
        project: Option<&str>,
        after: u64,
    ) -> Result<Vec<ChangeRecord>, RulesError> {
        let conn = self.connect()?;
        let mut stmt = conn.prepare(
            "SELECT id, project, revision, source, actor, summary, proposal_id, at FROM changes
             WHERE (?1 IS NULL OR project = ?1) AND id > ?2 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![project, after as i64], |r| {
            let source: String = r.get(3)?;
            Ok(ChangeRecord {
                id: r.get::<_, i64>(0)? as u64,
                project: r.get(1)?,
                revision: r.get::<_, i64>(2)? as u64,
                source: Source::parse(&source).unwrap_or(Source::User),
                actor: r.get(4)?,
                summary: r.get(5)?,
                proposal_id: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
                at: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The id of the newest change (0 when there is none). Cheap; a server polls it to learn
    /// that another process changed a document.
    pub fn last_change_id(&self) -> Result<u64, RulesError> {
        let conn = self.connect()?;
        let id: Option<i64> = conn.query_row("SELECT max(id) FROM changes", [], |r| r.get(0))?;
        Ok(id.unwrap_or(0) as u64)
    }

    /// Opens a scope-expansion ticket for a person to decide.
    pub fn request_scope(
        &self,
        project: &str,
        agent: &str,
        agent_session: Option<&str>,
        action: &str,
        reason: &str,
    ) -> Result<ScopeTicket, RulesError> {
        self.load(project)?;
        if action.trim().is_empty() {
            return Err(RulesError::Rejected(
                "a scope request says what the agent wants to do".into(),
            ));
        }
        let conn = self.connect()?;
        conn.execute(
            "INSERT INTO scope_requests (project, agent, agent_session, action, reason, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![project, agent, agent_session, action, reason, now_rfc3339()],
        )?;
        let id = conn.last_insert_rowid() as u64;
        tracing::info!(project, agent, ticket = id, "scope approval requested");
        self.scope_ticket(id)
    }

    /// One scope ticket.
    pub fn scope_ticket(&self, id: u64) -> Result<ScopeTicket, RulesError> {
        let conn = self.connect()?;
        get_ticket(&conn, id)
    }

    /// Scope tickets: pending ones, or all.
    pub fn scope_tickets(&self, include_decided: bool) -> Result<Vec<ScopeTicket>, RulesError> {
        let conn = self.connect()?;
        let mut stmt = conn.prepare(
            "SELECT id FROM scope_requests WHERE (?1 OR status = 'pending') ORDER BY id",
        )?;
        let ids: Vec<i64> = stmt
            .query_map(params![include_decided], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        ids.into_iter()
            .map(|id| get_ticket(&conn, id as u64))
            .collect()
    }

    /// A person decides a scope ticket.
    pub fn decide_scope(
        &self,
        id: u64,
        approve: bool,
        decided_by: &str,
        note: Option<&str>,
    ) -> Result<ScopeTicket, RulesError> {
        let mut conn = self.connect()?;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let t = get_ticket(&tx, id)?;
        if t.status != "pending" {
            return Err(RulesError::AlreadyDecided {
                kind: "scope ticket",
                id: id.to_string(),
                status: t.status,
            });
        }
        tx.execute(
            "UPDATE scope_requests SET status = ?1, decided_by = ?2, decided_at = ?3, note = ?4 WHERE id = ?5",
            params![
                if approve { "approved" } else { "denied" },
                decided_by,
                now_rfc3339(),
                note,
                id as i64
            ],
        )?;
        tx.commit()?;
        self.scope_ticket(id)
    }

    /// Queues the vendor suggestions written in the document's `agent_profiles` for review, so
    /// a person can promote them. Idempotent, like [`RulesStore::queue_vendor_guidance`].
    pub fn queue_profile_suggestions(&self, project: &str) -> Result<VendorReport, RulesError> {
        let doc = self.load(project)?.document;
        let conn = self.connect()?;
        let mut report = VendorReport::default();
        for (agent, profile) in &doc.agent_profiles {
            for s in &profile.vendor_guardrail_suggestions {
                let source_ref = s
                    .source_ref
                    .clone()
                    .unwrap_or_else(|| format!("agent_profiles.{agent}"));
                let origin = Origin::vendor(agent.as_str(), source_ref);
                let queued = self.queue_candidate(
                    &conn,
                    &doc,
                    project,
                    agent,
                    &origin,
                    &s.statement,
                    Some(&s.id),
                )?;
                match queued {
                    Some(id) => report.queued.push(id),
                    None => report.skipped += 1,
                }
            }
        }
        Ok(report)
    }

    /// Queues one vendor candidate unless it was queued before or is already policy.
    #[allow(clippy::too_many_arguments)] // Private: one call site per kind of vendor source.
    fn queue_candidate(
        &self,
        conn: &Connection,
        doc: &RulesDocument,
        project: &str,
        agent: &str,
        origin: &Origin,
        statement: &str,
        preferred_id: Option<&str>,
    ) -> Result<Option<u64>, RulesError> {
        let fp = crate::vendor::fingerprint(statement);
        if doc
            .guardrails
            .iter()
            .any(|g| crate::vendor::fingerprint(&g.statement) == fp)
        {
            return Ok(None);
        }
        let id = match preferred_id {
            Some(id) if check_name("guardrail id", id).is_ok() && doc.guardrail(id).is_none() => {
                id.to_string()
            }
            _ => unique_guardrail_id(conn, doc, project, agent, statement)?,
        };
        let change = ChangeRequest::Guardrail {
            id,
            statement: statement.to_string(),
            severity: Severity::Guidance,
            applies_to: vec![agent.to_string()],
        };
        insert_proposal(
            conn,
            project,
            origin,
            &change,
            None,
            Some(&format!("vendor:{agent}:{fp}")),
        )
    }

    /// Queues one vendor-seeded guardrail statement for an agent profile, from the document
    /// `source_ref` (a URL or file). Returns the new proposal's id, or `None` when the statement
    /// was queued before (in any state) or is already policy.
    pub fn queue_vendor_statement(
        &self,
        project: &str,
        agent: &str,
        source_ref: &str,
        statement: &str,
    ) -> Result<Option<u64>, RulesError> {
        self.catalog.get(agent)?;
        let doc = self.load(project)?.document;
        let origin = Origin::vendor(agent, source_ref);
        let conn = self.connect()?;
        self.queue_candidate(&conn, &doc, project, agent, &origin, statement, None)
    }

    /// Queues the guardrail candidates found in a vendor's guidance text for an agent profile.
    /// Idempotent: a candidate queued before (in any state) or already in policy is skipped.
    pub fn queue_vendor_guidance(
        &self,
        project: &str,
        agent: &str,
        source_ref: &str,
        text: &str,
    ) -> Result<VendorReport, RulesError> {
        self.catalog.get(agent)?;
        let doc = self.load(project)?.document;
        let origin = Origin::vendor(agent, source_ref);
        let conn = self.connect()?;
        let mut report = VendorReport::default();
        for statement in crate::vendor::extract_candidates(text) {
            match self.queue_candidate(&conn, &doc, project, agent, &origin, &statement, None)? {
                Some(id) => report.queued.push(id),
                None => report.skipped += 1,
            }
        }
        tracing::info!(
            project,
            agent,
            source_ref,
            queued = report.queued.len(),
            skipped = report.skipped,
            "vendor guidance sourced"
        );
        Ok(report)
    }
}

fn unique_guardrail_id(
    conn: &Connection,
    doc: &RulesDocument,
    project: &str,
    agent: &str,
    statement: &str,
) -> Result<String, RulesError> {
    let base = format!("{agent}-{}", crate::migrate::slug(statement, 6));
    let base: String = base.chars().take(56).collect();
    let base = base.trim_end_matches('-').to_string();
    let mut id = base.clone();
    let mut n = 2;
    loop {
        let queued: bool = conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM proposals WHERE project = ?1 AND json_extract(change, '$.id') = ?2)",
            params![project, id],
            |r| r.get(0),
        )?;
        if !queued && doc.guardrail(&id).is_none() {
            return Ok(id);
        }
        id = format!("{base}-{n}");
        n += 1;
    }
}

fn insert_proposal(
    conn: &Connection,
    project: &str,
    origin: &Origin,
    change: &ChangeRequest,
    base_revision: Option<u64>,
    fingerprint: Option<&str>,
) -> Result<Option<u64>, RulesError> {
    let change_json =
        serde_json::to_string(change).map_err(|e| RulesError::Serialize(e.to_string()))?;
    let inserted = conn.execute(
        "INSERT OR IGNORE INTO proposals (project, source, proposed_by, agent_session, source_ref, base_revision, change, summary, fingerprint, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            project,
            origin.source.as_str(),
            origin.proposed_by,
            origin.agent_session,
            origin.source_ref,
            base_revision.map(|v| v as i64),
            change_json,
            change.summary(),
            fingerprint,
            now_rfc3339()
        ],
    )?;
    Ok((inserted == 1).then(|| conn.last_insert_rowid() as u64))
}

fn get_proposal(conn: &Connection, id: u64) -> Result<Proposal, RulesError> {
    let row = conn
        .query_row(
            "SELECT id, project, source, proposed_by, agent_session, source_ref, base_revision, change, summary, status,
                    created_at, decided_by, decided_at, decision_note, applied_revision
             FROM proposals WHERE id = ?1",
            params![id as i64],
            |r| {
                Ok((
                    (
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, String>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<String>>(5)?,
                        r.get::<_, Option<i64>>(6)?,
                        r.get::<_, String>(7)?,
                    ),
                    (
                        r.get::<_, String>(8)?,
                        r.get::<_, String>(9)?,
                        r.get::<_, String>(10)?,
                        r.get::<_, Option<String>>(11)?,
                        r.get::<_, Option<String>>(12)?,
                        r.get::<_, Option<String>>(13)?,
                        r.get::<_, Option<i64>>(14)?,
                    ),
                ))
            },
        )
        .optional()?;
    let Some((a, b)) = row else {
        return Err(RulesError::NotFound {
            kind: "proposal",
            id: id.to_string(),
        });
    };
    let change: ChangeRequest = serde_json::from_str(&a.7)
        .map_err(|e| RulesError::Serialize(format!("proposal {id} is unreadable: {e}")))?;
    Ok(Proposal {
        id: a.0 as u64,
        project: a.1,
        origin: Origin {
            source: Source::parse(&a.2).unwrap_or(Source::Agent),
            proposed_by: a.3,
            agent_session: a.4,
            source_ref: a.5,
        },
        base_revision: a.6.map(|v| v as u64),
        change,
        summary: b.0,
        status: ProposalStatus::parse(&b.1),
        created_at: b.2,
        decided_by: b.3,
        decided_at: b.4,
        decision_note: b.5,
        applied_revision: b.6.map(|v| v as u64),
    })
}

fn get_ticket(conn: &Connection, id: u64) -> Result<ScopeTicket, RulesError> {
    conn.query_row(
        "SELECT id, project, agent, agent_session, action, reason, status, created_at, decided_by, decided_at, note
         FROM scope_requests WHERE id = ?1",
        params![id as i64],
        |r| {
            Ok(ScopeTicket {
                id: r.get::<_, i64>(0)? as u64,
                project: r.get(1)?,
                agent: r.get(2)?,
                agent_session: r.get(3)?,
                action: r.get(4)?,
                reason: r.get(5)?,
                status: r.get(6)?,
                created_at: r.get(7)?,
                decided_by: r.get(8)?,
                decided_at: r.get(9)?,
                note: r.get(10)?,
            })
        },
    )
    .optional()?
    .ok_or_else(|| RulesError::NotFound {
        kind: "scope ticket",
        id: id.to_string(),
    })
}

fn record_change(
    conn: &Connection,
    project: &str,
    revision: u64,
    source: Source,
    actor: &str,
    summary: &str,
    proposal_id: Option<u64>,
) -> Result<(), RulesError> {
    conn.execute(
        "INSERT INTO changes (project, revision, source, actor, summary, proposal_id, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            project,
            revision as i64,
            source.as_str(),
            actor,
            summary,
            proposal_id.map(|v| v as i64),
            now_rfc3339()
        ],
    )?;
    Ok(())
}

/// Promotes an approved proposal into the document.
fn apply(
    doc: &mut RulesDocument,
    p: &Proposal,
    approved_by: &str,
    now: &str,
) -> Result<(), RulesError> {
    match &p.change {
        ChangeRequest::Guardrail {
            id,
            statement,
            severity,
            applies_to,
        } => {
            if doc.guardrail(id).is_some() {
                return Err(RulesError::Rejected(format!(
                    "guardrail `{id}` was added to project `{}` since this proposal was made; reject it and propose under another id",
                    p.project
                )));
            }
            doc.guardrails.push(Guardrail {
                id: id.clone(),
                statement: statement.clone(),
                severity: *severity,
                applies_to: applies_to.clone(),
                provenance: Provenance {
                    source: p.origin.source,
                    proposed_by: Some(p.origin.proposed_by.clone()),
                    agent_session: p.origin.agent_session.clone(),
                    source_ref: p.origin.source_ref.clone(),
                    proposal: Some(p.id),
                    approved_by: Some(approved_by.to_string()),
                    approved_at: Some(now.to_string()),
                },
            });
            // A promoted vendor suggestion leaves the profile's pending list.
            for profile in doc.agent_profiles.values_mut() {
                profile.vendor_guardrail_suggestions.retain(|s| s.id != *id);
            }
        }
        ChangeRequest::Pattern { standard, custom } => {
            if let Some(s) = standard {
                if doc.patterns.standard.iter().any(|x| x == s) {
                    return Err(RulesError::Rejected(format!(
                        "pattern `{s}` is already listed"
                    )));
                }
                doc.patterns.standard.push(s.clone());
            }
            if let Some(c) = custom {
                if doc.patterns.custom.iter().any(|x| x.name == c.name) {
                    return Err(RulesError::Rejected(format!(
                        "custom pattern `{}` already exists",
                        c.name
                    )));
                }
                doc.patterns.custom.push(c.clone());
            }
        }
        ChangeRequest::UpdateProject {
            overview,
            stack,
            conventions,
        } => {
            if let Some(o) = overview {
                doc.project.overview = o.clone();
            }
            if let Some(s) = stack {
                doc.project.stack = s.clone();
            }
            if let Some(c) = conventions {
                doc.project.conventions = c.clone();
            }
        }
    }
    Ok(())
}
