//! The storage interface of the rules store: the rows it reads and writes, and one transaction
//! trait that SQLite and PostgreSQL each implement.
//!
//! [`RulesStore`](super::RulesStore) holds the workflow (checks, conflicts, promotion,
//! provenance) once; a backend only stores and fetches rows. A write transaction is serialized
//! against every other writer of the same database, in any process or replica (SQLite's
//! `BEGIN IMMEDIATE`, a PostgreSQL advisory lock), so a check made inside it still holds at
//! commit.

use crate::error::RulesError;
use crate::model::Source;

use super::request::{
    ChangeRecord, ChangeRequest, Origin, PendingCounts, Proposal, ProposalStatus, QueueFilter,
    ScopeTicket,
};

/// Where a store's documents live, and so which way round the YAML files and the database are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DocumentSource {
    /// The YAML files are the documents (people may edit them by hand); the database keeps a
    /// copy of each revision for diffs. The SQLite backend.
    Files,
    /// The database's newest revision is the document; the YAML files are written out from it
    /// after each change, for people who keep them in git. The PostgreSQL backend.
    Database,
}

/// A proposal to insert.
pub(crate) struct NewProposal<'a> {
    pub project: &'a str,
    pub origin: &'a Origin,
    pub change_json: String,
    pub summary: String,
    pub base_revision: Option<u64>,
    pub fingerprint: Option<&'a str>,
    pub created_at: String,
}

/// A proposal as stored.
pub(crate) struct ProposalRow {
    pub id: i64,
    pub project: String,
    pub source: String,
    pub proposed_by: String,
    pub agent_session: Option<String>,
    pub source_ref: Option<String>,
    pub base_revision: Option<i64>,
    pub change: String,
    pub summary: String,
    pub status: String,
    pub created_at: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<String>,
    pub decision_note: Option<String>,
    pub applied_revision: Option<i64>,
}

impl ProposalRow {
    /// The proposal, or [`RulesError::Unreadable`] when its change, status or source is one
    /// this build does not know (a newer build's, sharing the database).
    pub(crate) fn into_proposal(self) -> Result<Proposal, RulesError> {
        let id = self.id as u64;
        let unreadable = || RulesError::Unreadable {
            kind: "proposal",
            id: id.to_string(),
        };
        let change: ChangeRequest = serde_json::from_str(&self.change).map_err(|_| unreadable())?;
        let status = ProposalStatus::parse(&self.status).ok_or_else(unreadable)?;
        let source = Source::parse(&self.source).ok_or_else(unreadable)?;
        Ok(Proposal {
            id,
            project: self.project,
            origin: Origin {
                source,
                proposed_by: self.proposed_by,
                agent_session: self.agent_session,
                source_ref: self.source_ref,
            },
            base_revision: self.base_revision.map(|v| v as u64),
            change,
            summary: self.summary,
            status,
            created_at: self.created_at,
            decided_by: self.decided_by,
            decided_at: self.decided_at,
            decision_note: self.decision_note,
            applied_revision: self.applied_revision.map(|v| v as u64),
        })
    }
}

/// A row of [`RulesTx::proposal_page`]: its id, and the row or why it does not read.
pub(crate) type PageRow = (u64, Result<ProposalRow, RulesError>);

/// A decision on a proposal or a scope ticket.
pub(crate) struct Decision<'a> {
    pub status: &'static str,
    pub decided_by: &'a str,
    pub at: &'a str,
    pub note: Option<&'a str>,
    pub applied_revision: Option<u64>,
}

/// A change-log entry to record.
pub(crate) struct NewChange<'a> {
    pub project: &'a str,
    pub revision: u64,
    pub source: Source,
    pub actor: &'a str,
    pub summary: &'a str,
    pub proposal_id: Option<u64>,
    pub at: String,
}

/// A scope ticket to open.
pub(crate) struct NewTicket<'a> {
    pub project: &'a str,
    pub agent: &'a str,
    pub agent_session: Option<&'a str>,
    pub action: &'a str,
    pub reason: &'a str,
    pub created_at: String,
}

/// One transaction on a rules database: a write, or a read (one snapshot for all its
/// statements). Dropped without [`RulesTx::commit`], it is rolled back.
pub(crate) trait RulesTx {
    /// The newest stored revision of a project's document (its YAML text).
    fn latest_document(&mut self, project: &str) -> Result<Option<String>, RulesError>;
    /// The projects that have a stored revision, sorted.
    fn document_projects(&mut self) -> Result<Vec<String>, RulesError>;
    /// Stores a revision's text (replacing one of the same number).
    fn put_revision(&mut self, project: &str, revision: u64, text: &str) -> Result<(), RulesError>;
    /// A stored revision's text.
    fn revision(&mut self, project: &str, revision: u64) -> Result<Option<String>, RulesError>;
    /// The number of a project's newest stored revision (without its text).
    fn latest_revision(&mut self, project: &str) -> Result<Option<u64>, RulesError>;
    /// Inserts a proposal; `None` when its fingerprint was queued before.
    fn insert_proposal(&mut self, p: &NewProposal<'_>) -> Result<Option<u64>, RulesError>;
    /// One proposal.
    fn proposal(&mut self, id: u64) -> Result<Option<ProposalRow>, RulesError>;
    /// Proposal ids, ascending: pending ones (or all), of one project or of all.
    fn proposal_ids(
        &mut self,
        project: Option<&str>,
        include_decided: bool,
    ) -> Result<Vec<u64>, RulesError>;
    /// At most `limit` proposals matching `filter` with an id above `after`, ascending, each
    /// with its id: a row whose columns do not read is [`RulesError::Unreadable`] in its place.
    fn proposal_page(
        &mut self,
        filter: &QueueFilter,
        after: u64,
        limit: usize,
    ) -> Result<Vec<PageRow>, RulesError>;
    /// How many proposals of the project are pending (what [`RulesTx::proposal_ids`] of the
    /// project lists, counted).
    fn pending_proposals(&mut self, project: &str) -> Result<u64, RulesError>;
    /// How many proposals of the project `proposed_by` has pending.
    fn pending_proposals_by(&mut self, project: &str, proposed_by: &str)
    -> Result<u64, RulesError>;
    /// The pending proposals of the project that add the guardrail `id`, ascending.
    fn pending_guardrail_proposals(
        &mut self,
        project: &str,
        id: &str,
    ) -> Result<Vec<u64>, RulesError>;
    /// The ids of the project's proposals (in any state) that are `base` or start with
    /// `base-`: every id a new one made from `base` could collide with, in one query.
    fn guardrail_ids_from(&mut self, project: &str, base: &str) -> Result<Vec<String>, RulesError>;
    /// Records a proposal's decision.
    fn decide_proposal(&mut self, id: u64, d: &Decision<'_>) -> Result<(), RulesError>;
    /// Appends to the change log; returns the entry's id.
    fn record_change(&mut self, c: &NewChange<'_>) -> Result<u64, RulesError>;
    /// Change-log entries after an id, oldest first.
    fn changes(
        &mut self,
        project: Option<&str>,
        after: u64,
    ) -> Result<Vec<ChangeRecord>, RulesError>;
    /// The newest change-log id (0 when empty).
    fn last_change_id(&mut self) -> Result<u64, RulesError>;
    /// Opens a scope ticket; returns its id.
    fn insert_ticket(&mut self, t: &NewTicket<'_>) -> Result<u64, RulesError>;
    /// One scope ticket.
    fn ticket(&mut self, id: u64) -> Result<Option<ScopeTicket>, RulesError>;
    /// Scope-ticket ids, ascending: pending ones, or all.
    fn ticket_ids(&mut self, include_decided: bool) -> Result<Vec<u64>, RulesError>;
    /// How many scope tickets of a project are pending.
    fn pending_tickets(&mut self, project: &str) -> Result<u64, RulesError>;
    /// How many scope tickets of a project one agent has pending.
    fn pending_tickets_by(&mut self, project: &str, agent: &str) -> Result<u64, RulesError>;
    /// Records a scope ticket's decision.
    fn decide_ticket(&mut self, id: u64, d: &Decision<'_>) -> Result<(), RulesError>;
    /// The transaction's SQLite connection, on a SQLite backend: rows another module keeps in
    /// the same file (the vendor feed's ledger) are written on it, so they commit with the
    /// proposals they describe or not at all. `None` elsewhere.
    fn sqlite(&self) -> Option<&rusqlite::Connection> {
        None
    }
    /// The transaction's PostgreSQL connection, on a PostgreSQL backend, for the same purpose
    /// as [`RulesTx::sqlite`]. `None` elsewhere.
    #[cfg(feature = "postgres")]
    fn postgres(&self) -> Option<&crate::db::postgres::PgClient> {
        None
    }
    /// Commits (for a read, ends its snapshot).
    fn commit(self: Box<Self>) -> Result<(), RulesError>;
}

/// A rules database: hands out transactions.
pub(crate) trait RulesBackend: Send + Sync + std::fmt::Debug {
    /// A write transaction (serialized against every other writer) or a read.
    fn begin(&self, write: bool) -> Result<Box<dyn RulesTx + '_>, RulesError>;
    /// Which way round documents and files are.
    fn documents(&self) -> DocumentSource;
    /// A number that changes whenever a stored document may have changed (read on its own,
    /// before the documents it vouches for); `None` where there is none (documents are files).
    fn documents_version(&self) -> Result<Option<u64>, RulesError> {
        Ok(None)
    }
    /// Every project's newest stored document text, by project.
    fn latest_documents(&self) -> Result<Vec<(String, String)>, RulesError> {
        let mut tx = self.begin(false)?;
        let mut out = Vec::new();
        for project in tx.document_projects()? {
            if let Some(text) = tx.latest_document(&project)? {
                out.push((project, text));
            }
        }
        Ok(out)
    }
    /// The newest stored revision of a project's document, read on its own (a load that
    /// needs no other query: the database backend runs it as one statement, without a
    /// transaction around it).
    fn latest_document(&self, project: &str) -> Result<Option<String>, RulesError> {
        self.begin(false)?.latest_document(project)
    }
    /// How many proposals and scope tickets are pending across every project, counted by
    /// one statement ([`PENDING_COUNTS`]) without a transaction around it.
    fn pending_counts(&self) -> Result<PendingCounts, RulesError>;
}

/// The statement both backends count pending proposals and scope tickets with: `pending` as
/// [`RulesTx::proposal_ids`] and [`RulesTx::ticket_ids`] define it, in one snapshot.
pub(crate) const PENDING_COUNTS: &str = "SELECT (SELECT count(*) FROM proposals WHERE status = 'pending'), (SELECT count(*) FROM scope_requests WHERE status = 'pending')";

/// [`PendingCounts`] from the two counts [`PENDING_COUNTS`] returns (never negative).
pub(crate) fn pending_counts(proposals: i64, scope_tickets: i64) -> PendingCounts {
    PendingCounts {
        proposals: u64::try_from(proposals).unwrap_or(0),
        scope_tickets: u64::try_from(scope_tickets).unwrap_or(0),
    }
}

/// The SQL column list both backends read proposals with, in [`ProposalRow`]'s order.
pub(crate) const PROPOSAL_COLUMNS: &str = "id, project, source, proposed_by, agent_session, source_ref, base_revision, change, summary, status, created_at, decided_by, decided_at, decision_note, applied_revision";

/// The SQL column list both backends read scope tickets with.
pub(crate) const TICKET_COLUMNS: &str = "id, project, agent, agent_session, action, reason, status, created_at, decided_by, decided_at, note";
