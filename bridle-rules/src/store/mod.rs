//! The rules store: the review queue, decisions, scope tickets, the change log and the stored
//! revisions of every project's document, over a database backend.
//!
//! Two backends hold the same workflow ([`backend`] is their interface):
//!
//! - **SQLite** (the embedded default, [`RulesStore::open`]): documents stay plain files
//!   (`<data>/projects/<project>.yaml`) that people keep in git and edit by hand, and are the
//!   source of truth; `<data>/bridle.db` holds the workflow and a copy of each revision.
//! - **PostgreSQL** (feature `postgres`, [`RulesStore::open_postgres`]), for several gateway
//!   replicas on one database: the database's newest revision is the document, and the YAML
//!   files are written out from it after each change.
//!
//! Every change to a document goes through one path: a write transaction that is serialized
//! against every other writer (SQLite's `BEGIN IMMEDIATE`, a PostgreSQL advisory lock), a
//! revision check, the stored revision, the file, and a change-log row naming the source (user,
//! agent or vendor) and the actor. Agents and vendor feeds never write documents: they add
//! proposals, and only [`RulesStore::approve`] promotes one, with its provenance.

pub(crate) mod backend;
mod cache;
#[cfg(feature = "postgres")]
mod postgres;
mod request;
mod sqlite;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::agents::AgentCatalog;
use crate::error::{RulesError, check_name};
use crate::fsutil::{now_rfc3339, write_atomic};
use crate::model::{MAX_REVISION, RulesDocument, Severity, Source};
use crate::validate;
use crate::yaml::{self, Loaded};
use cache::SetKey;

pub use backend::DocumentSource;
use backend::{Decision, NewChange, NewProposal, NewTicket, RulesBackend, RulesTx};
pub use cache::Documents;
#[cfg(feature = "postgres")]
pub use postgres::POSTGRES_MIGRATIONS;
use request::apply;
pub use request::{
    ChangeRecord, ChangeRequest, Origin, PendingCounts, Proposal, ProposalStatus, QueueFilter,
    QueuePage, ScopeTicket, VendorReport,
};
pub use sqlite::SQLITE_MIGRATIONS;

/// The most documents [`RulesStore::unchanged_documents`] checks (a `stat` each) before it
/// leaves the check to [`RulesStore::documents`].
pub const UNCHANGED_CHECK_MAX: usize = 64;

/// The largest change one proposal may carry, as JSON (64 KiB): a guardrail statement, a
/// project overview or a pattern with its example repositories fits many times over. Past it,
/// [`RulesStore::propose`] stores nothing.
pub const MAX_PROPOSAL_BYTES: usize = 64 * 1024;

/// The most proposals (and, apart, scope tickets) of one project that may wait for a person at
/// once. An agent that may
/// propose could otherwise fill the review queue (and the database) without end; past it,
/// [`RulesStore::propose`] and vendor sourcing (whatever the feeds of several agent profiles
/// add up to) store nothing ([`RulesError::Rejected`]) until some are approved or rejected.
pub const MAX_PENDING_PROPOSALS: usize = 1000;

/// The most proposals of one project that one proposer (an agent, by the name it proposes
/// under; a vendor feed of one agent profile, as `vendor:<agent>`) may have waiting for a person
/// at once: 100, a tenth of [`MAX_PENDING_PROPOSALS`], so one agent (a prompt-injected one, say)
/// cannot fill the project's queue and lock out the other agents and the vendor feed. Past it,
/// [`RulesStore::propose`] and vendor sourcing store nothing ([`RulesError::TooManyPending`])
/// until some of that proposer's are approved or rejected.
pub const MAX_PENDING_PER_PROPOSER: usize = 100;

/// The projects folder and the database, with the agent catalog used to validate documents.
#[derive(Debug, Clone)]
pub struct RulesStore {
    projects_dir: PathBuf,
    db_path: PathBuf,
    catalog: AgentCatalog,
    backend: Arc<dyn RulesBackend>,
    #[cfg(feature = "postgres")]
    postgres: Option<crate::db::postgres::PgDatabase>,
    /// Parsed documents of unchanged files or database texts (shared by clones).
    documents: Arc<cache::DocumentCache>,
}

/// A document file to write once the transaction that stored its revision has committed
/// (the PostgreSQL backend, where the file is a copy of the database).
struct Export {
    path: PathBuf,
    text: String,
}

impl RulesStore {
    /// Opens (creating when missing) a store rooted at `data_dir`: `projects/` and `bridle.db`,
    /// migrating the database to this build's schema (a database written by a newer Bridle is
    /// refused with [`RulesError::DatabaseTooNew`]).
    pub fn open(data_dir: &Path, catalog: AgentCatalog) -> Result<Self, RulesError> {
        let projects_dir = data_dir.join("projects");
        std::fs::create_dir_all(&projects_dir).map_err(|e| RulesError::io(&projects_dir, e))?;
        let db_path = data_dir.join("bridle.db");
        let backend = sqlite::SqliteRules::open(&db_path)?;
        Ok(Self {
            projects_dir,
            db_path,
            catalog,
            backend: Arc::new(backend),
            #[cfg(feature = "postgres")]
            postgres: None,
            documents: Arc::default(),
        })
    }

    /// Opens a store whose workflow and documents live in PostgreSQL, migrating the database.
    /// `data_dir/projects/` receives a YAML copy of every document after each change; a YAML
    /// file there whose project the database does not have yet is imported once (so a data
    /// folder that ran on SQLite moves over with its documents).
    #[cfg(feature = "postgres")]
    pub fn open_postgres(
        data_dir: &Path,
        catalog: AgentCatalog,
        db: crate::db::postgres::PgDatabase,
    ) -> Result<Self, RulesError> {
        let projects_dir = data_dir.join("projects");
        std::fs::create_dir_all(&projects_dir).map_err(|e| RulesError::io(&projects_dir, e))?;
        let backend = postgres::PostgresRules::open(db.clone())?;
        let store = Self {
            projects_dir,
            db_path: data_dir.join("bridle.db"),
            catalog,
            backend: Arc::new(backend),
            postgres: Some(db),
            documents: Arc::default(),
        };
        store.import_files()?;
        store.export_all()?;
        Ok(store)
    }

    /// The PostgreSQL database, when the store uses one (for change notifications).
    #[cfg(feature = "postgres")]
    pub fn postgres(&self) -> Option<&crate::db::postgres::PgDatabase> {
        self.postgres.as_ref()
    }

    /// Which way round the documents and the YAML files are.
    pub fn document_source(&self) -> DocumentSource {
        self.backend.documents()
    }

    /// The agent catalog.
    pub fn catalog(&self) -> &AgentCatalog {
        &self.catalog
    }

    /// The SQLite file of the data folder (the rules database and the vendor-feed ledger with
    /// the SQLite backend; unused with PostgreSQL, where both are in the database).
    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    /// The projects folder.
    pub fn projects_dir(&self) -> &Path {
        &self.projects_dir
    }

    /// The file of a project.
    pub fn project_path(&self, project: &str) -> Result<PathBuf, RulesError> {
        check_name("project", project)?;
        Ok(self.projects_dir.join(format!("{project}.yaml")))
    }

    fn file_projects(&self) -> Result<Vec<String>, RulesError> {
        Ok(self.file_listing()?.1.to_vec())
    }

    /// The projects with a document file, sorted, with the folder's stamp read before them.
    /// The names are shared with the kept listing (no copy while the folder is unchanged).
    fn file_listing(&self) -> Result<(Option<cache::Stamp>, Arc<[String]>), RulesError> {
        let io = |e| RulesError::io(&self.projects_dir, e);
        // The folder's stamp first: while it is unchanged the kept listing is the listing.
        let before = cache::stamp(&self.projects_dir).map_err(io)?;
        if let Some(names) = before.and_then(|s| self.documents.listing(s)) {
            return Ok((before, names));
        }
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.projects_dir).map_err(io)? {
            let name = entry
                .map_err(io)?
                .file_name()
                .to_string_lossy()
                .into_owned();
            if let Some(stem) = name.strip_suffix(".yaml")
                && check_name("project", stem).is_ok()
            {
                out.push(stem.to_string());
            }
        }
        out.sort();
        let out: Arc<[String]> = out.into();
        // Kept only if the folder did not change while it was read.
        if let (Some(before), Ok(Some(after))) = (before, cache::stamp(&self.projects_dir))
            && before == after
        {
            self.documents.put_listing(before, &out);
        }
        Ok((before, out))
    }

    /// The projects that have a document, sorted.
    pub fn projects(&self) -> Result<Vec<String>, RulesError> {
        match self.document_source() {
            DocumentSource::Files => self.file_projects(),
            // From the shared set: one small query while no document changed.
            DocumentSource::Database => Ok(self
                .database_documents()?
                .projects()
                .map(str::to_owned)
                .collect()),
        }
    }

    /// Copies the YAML files of projects the database lacks into it (PostgreSQL).
    #[cfg(feature = "postgres")]
    fn import_files(&self) -> Result<(), RulesError> {
        let files = self.file_projects()?;
        if files.is_empty() {
            return Ok(());
        }
        let mut tx = self.backend.begin(true)?;
        let known = tx.document_projects()?;
        for project in files.iter().filter(|p| !known.contains(p)) {
            // Stored as written (an older schema_version stays one, for `upgrade`), once it
            // loads and validates.
            let loaded = self.load_file(project)?;
            let path = self.project_path(project)?;
            let text = std::fs::read_to_string(&path).map_err(|e| RulesError::io(&path, e))?;
            tx.put_revision(project, loaded.document.revision, &text)?;
            tx.record_change(&NewChange {
                project,
                revision: loaded.document.revision,
                source: Source::User,
                actor: "bridle",
                summary: "import the project's YAML file",
                proposal_id: None,
                at: now_rfc3339(),
            })?;
            tracing::info!(project, "project file imported into the database");
        }
        tx.commit()
    }

    /// Writes every project's newest document out as its YAML file (PostgreSQL), so the files
    /// of this data folder catch up with changes made on other replicas while it was down.
    pub fn export_all(&self) -> Result<(), RulesError> {
        if self.document_source() != DocumentSource::Database {
            return Ok(());
        }
        let mut tx = self.backend.begin(false)?;
        for project in tx.document_projects()? {
            if let Some(text) = tx.latest_document(&project)? {
                let path = self.project_path(&project)?;
                if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                    write_atomic(&path, text.as_bytes())?;
                }
            }
        }
        Ok(())
    }

    fn load_file(&self, project: &str) -> Result<Arc<Loaded>, RulesError> {
        let path = self.project_path(project)?;
        let missing = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::NotFound {
                self.documents.forget(project);
                RulesError::UnknownProject(project.to_string())
            } else {
                RulesError::io(&path, e)
            }
        };
        let before = cache::stamp(&path).map_err(missing)?;
        if let Some(loaded) = before.and_then(|s| self.documents.get(project, s)) {
            return Ok(loaded);
        }
        let text = std::fs::read_to_string(&path).map_err(missing)?;
        let loaded = Arc::new(yaml::load_str(&text, &path, project, &self.catalog)?);
        // Kept only if the file did not change while it was read.
        if let (Some(before), Ok(Some(after))) = (before, cache::stamp(&path))
            && before == after
        {
            self.documents.put(project, before, &loaded);
        }
        Ok(loaded)
    }

    /// Loads a project's document, in `tx` when the database holds documents.
    fn load_in(&self, tx: &mut dyn RulesTx, project: &str) -> Result<Loaded, RulesError> {
        let shared = match self.document_source() {
            DocumentSource::Files => self.load_file(project),
            DocumentSource::Database => {
                let path = self.project_path(project)?;
                let text = tx
                    .latest_document(project)?
                    .ok_or_else(|| RulesError::UnknownProject(project.to_string()))?;
                self.parse_database_text(project, &path, text)
            }
        };
        shared.map(Arc::unwrap_or_clone)
    }

    /// A document read from the database: parsed, or the document parsed from the same text
    /// before.
    fn parse_database_text(
        &self,
        project: &str,
        path: &Path,
        text: String,
    ) -> Result<Arc<Loaded>, RulesError> {
        self.documents.parsed_text(project, text, |text| {
            yaml::load_str(text, path, project, &self.catalog)
        })
    }

    /// Loads a project's document (migrating an older one in memory; see
    /// [`RulesStore::upgrade`] to rewrite it).
    pub fn load(&self, project: &str) -> Result<Loaded, RulesError> {
        self.load_shared(project).map(Arc::unwrap_or_clone)
    }

    /// [`Self::load`] without a copy: the document as the store keeps it. Files: one `stat` of
    /// the project's file while it is unchanged. Database: the project's entry in
    /// [`Self::documents`], so one query of the documents version while no document changed
    /// (a document that does not load is read again on its own, for its error).
    pub fn load_shared(&self, project: &str) -> Result<Arc<Loaded>, RulesError> {
        match self.document_source() {
            DocumentSource::Files => self.load_file(project),
            DocumentSource::Database => {
                check_name("project", project)?;
                match self.database_documents()?.shared(project) {
                    Some(Ok(loaded)) => Ok(loaded),
                    Some(Err(())) => self.load_database_text(project),
                    None => Err(RulesError::UnknownProject(project.to_string())),
                }
            }
        }
    }

    /// A project's newest stored text, parsed (or the document parsed from the same text
    /// before), read on its own.
    fn load_database_text(&self, project: &str) -> Result<Arc<Loaded>, RulesError> {
        let path = self.project_path(project)?;
        let text = self
            .backend
            .latest_document(project)?
            .ok_or_else(|| RulesError::UnknownProject(project.to_string()))?;
        self.parse_database_text(project, &path, text)
    }

    /// Every project's document as it is now, shared (see [`Documents`]): what a permission
    /// check reads. While no document changed, this hands out the same set again, after a
    /// `stat` of the projects folder and of each document file (files), or after one query of
    /// the documents version (database), without reading, parsing or copying any document.
    /// A file changed within the last two seconds is read again on every call until it has
    /// settled (see the document cache's rules).
    pub fn documents(&self) -> Result<Arc<Documents>, RulesError> {
        let began = std::time::Instant::now();
        let documents = match self.document_source() {
            DocumentSource::Files => self.file_documents(),
            DocumentSource::Database => self.database_documents(),
        };
        if documents.is_err() {
            // What was kept is not known to be current any more: nothing is recent.
            self.documents.put_set(None, began);
        }
        documents
    }

    /// The set [`Self::documents`] last found current, if it did so at most `max_age` ago and
    /// kept it; `None` otherwise. No I/O: for a check that may read a set as old as a moment
    /// ago, for example the permission check of a call whose request's authentication read the
    /// documents an instant before. A set [`Self::documents`] could not keep (a file that
    /// changed within the last two seconds) is never handed out here.
    pub fn recent_documents(&self, max_age: std::time::Duration) -> Option<Arc<Documents>> {
        self.documents.recent_set(max_age)
    }

    /// The kept set, if checking its files finds every one unchanged: one `stat` of the
    /// projects folder and one per document, no read. `None` when something changed, when no
    /// set is kept, when there are more than [`UNCHANGED_CHECK_MAX`] documents, or when the
    /// documents are in a database (checking there is a query): then [`Self::documents`]
    /// answers. What [`Self::documents`] would hand out whenever this hands out a set, at the
    /// cost of a few `stat`s: for a caller on an async thread that must not wait on a read.
    pub fn unchanged_documents(&self) -> Option<Arc<Documents>> {
        if self.document_source() != DocumentSource::Files {
            return None;
        }
        let read_at = std::time::Instant::now();
        let folder = cache::stamp(&self.projects_dir).ok()??;
        let names = self.documents.listing(folder)?;
        if names.len() > UNCHANGED_CHECK_MAX {
            return None;
        }
        let stamps = self.file_stamps(&names)?;
        // A kept key's stamps had all settled when it was kept, so equal stamps still have.
        self.documents.set(&SetKey::Files(folder, stamps), read_at)
    }

    /// The stamp of each named project's file, in order; `None` if one is gone or has none.
    fn file_stamps(&self, names: &[String]) -> Option<Vec<cache::Stamp>> {
        names
            .iter()
            .map(|name| cache::stamp(&self.project_path(name).ok()?).ok()?)
            .collect()
    }

    fn file_documents(&self) -> Result<Arc<Documents>, RulesError> {
        // The key is read before any document, so what is read is at least as new as it.
        let read_at = std::time::Instant::now();
        let (folder, names) = self.file_listing()?;
        // A file gone since the listing, or no stamp on this platform: read, not kept.
        let stamps = self.file_stamps(&names);
        // Kept only when every stamp has settled: a later change then shows in a stamp.
        let now = std::time::SystemTime::now();
        let settled = folder.is_some_and(|f| f.settled(now))
            && stamps.iter().flatten().all(|s| s.settled(now));
        let key = folder.zip(stamps).map(|(f, s)| SetKey::Files(f, s));
        if let Some(set) = key.as_ref().and_then(|k| self.documents.set(k, read_at)) {
            return Ok(set);
        }
        let set = Arc::new(Documents::new(
            names
                .iter()
                .map(|name| (name.clone(), self.load_file(name).map_err(Arc::new)))
                .collect(),
        ));
        // A load error may pass (a file being replaced, a permission fixed): not kept.
        let kept = key.filter(|_| settled && set.all_loaded());
        self.documents
            .put_set(kept.map(|k| (k, Arc::clone(&set))), read_at);
        Ok(set)
    }

    fn database_documents(&self) -> Result<Arc<Documents>, RulesError> {
        // The version first: every write raises it in its own transaction, so documents read
        // after it are at least as new as it says.
        let read_at = std::time::Instant::now();
        let key = self.backend.documents_version()?.map(SetKey::Database);
        if let Some(set) = key.as_ref().and_then(|k| self.documents.set(k, read_at)) {
            return Ok(set);
        }
        // Every newest text in one statement; only a text that changed is parsed again.
        let mut entries = Vec::new();
        for (name, text) in self.backend.latest_documents()? {
            let doc = self
                .project_path(&name)
                .and_then(|path| self.parse_database_text(&name, &path, text))
                .map_err(Arc::new);
            entries.push((name, doc));
        }
        let set = Arc::new(Documents::new(entries));
        // Kept with its errors too: here an error is a text that does not parse, and the
        // version moves with the text.
        self.documents
            .put_set(key.map(|k| (k, Arc::clone(&set))), read_at);
        Ok(set)
    }

    /// Whether a project has a document, in `tx`.
    fn exists_in(&self, tx: &mut dyn RulesTx, project: &str) -> Result<bool, RulesError> {
        match self.document_source() {
            DocumentSource::Files => Ok(self.project_path(project)?.exists()),
            DocumentSource::Database => Ok(tx.latest_document(project)?.is_some()),
        }
    }

    /// Writes the changed documents' files and commits. With files as the source of truth the
    /// files are written after every statement of the transaction and before its commit: a
    /// statement that fails (the change log's row, a proposal's decision) leaves the file as it
    /// was, and a file that cannot be written commits nothing. With the database, it commits,
    /// then writes the files that are copies of it.
    fn finish(&self, tx: Box<dyn RulesTx + '_>, exports: Vec<Export>) -> Result<(), RulesError> {
        match self.document_source() {
            DocumentSource::Files => {
                for e in &exports {
                    write_atomic(&e.path, e.text.as_bytes())?;
                }
                tx.commit()?;
            }
            DocumentSource::Database => {
                tx.commit()?;
                for e in exports {
                    // The database has the change; a file that cannot be written is caught up
                    // by the next change or the next start (`export_all`), so it is logged,
                    // not failed.
                    if let Err(err) = write_atomic(&e.path, e.text.as_bytes()) {
                        tracing::warn!(error = ?err.to_string(), "writing out a project file failed");
                    }
                }
            }
        }
        // What this write changed reaches every later check, also one that reads only the
        // recent set: the kept set is forgotten once the files are written, and a read that
        // began before now cannot put it back.
        self.documents.put_set(None, std::time::Instant::now());
        Ok(())
    }

    /// Creates a project's document. Fails if one exists.
    pub fn create(
        &self,
        project: &str,
        doc: &RulesDocument,
        actor: &str,
    ) -> Result<(), RulesError> {
        let path = self.project_path(project)?;
        let mut tx = self.backend.begin(true)?;
        if self.exists_in(&mut *tx, project)? {
            return Err(RulesError::Rejected(format!(
                "project `{project}` already exists"
            )));
        }
        let mut doc = doc.clone();
        doc.revision = 1;
        let exports = self.write_doc(&mut *tx, project, &path, &doc)?;
        record_change(
            &mut *tx,
            project,
            1,
            Source::User,
            actor,
            "create project",
            None,
        )?;
        self.finish(tx, exports)
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
        let mut tx = self.backend.begin(true)?;
        let current = self.load_in(&mut *tx, project)?.document;
        self.save_over(
            tx,
            project,
            &path,
            edited,
            base_revision,
            current.revision,
            actor,
            summary,
        )
    }

    /// [`Self::save_edit`], which may also replace a stored document that does not load: one
    /// that does not parse, breaks the format ([`RulesError::Parse`], [`RulesError::Invalid`])
    /// or cannot be migrated ([`RulesError::Migration`]), as a hand edit of the project's file
    /// may leave it. Such a document has no revision to check `base_revision` against, so the
    /// edit must be based on the newest revision known: the revision the broken text still
    /// names, if it can be read, or else the newest the store wrote (what the project's history
    /// and [`Self::document_at`] show). A stale base is a [`RulesError::Conflict`] naming that
    /// revision. A document of a newer schema ([`RulesError::TooNew`]) is never replaced: a
    /// newer build wrote it, and this one cannot tell what it would drop. A document that loads
    /// is saved as [`Self::save_edit`] saves it, so a repeated request is answered as any
    /// other edit.
    pub fn save_repair(
        &self,
        project: &str,
        edited: &RulesDocument,
        base_revision: u64,
        actor: &str,
        summary: &str,
    ) -> Result<SavedEdit, RulesError> {
        let path = self.project_path(project)?;
        let mut tx = self.backend.begin(true)?;
        let broken = match self.load_in(&mut *tx, project) {
            Ok(loaded) => {
                let revision = self.save_over(
                    tx,
                    project,
                    &path,
                    edited,
                    base_revision,
                    loaded.document.revision,
                    actor,
                    summary,
                )?;
                return Ok(SavedEdit {
                    revision,
                    replaced: None,
                });
            }
            Err(
                e @ (RulesError::Parse { .. }
                | RulesError::Invalid { .. }
                | RulesError::Migration { .. }),
            ) => e,
            Err(e) => return Err(e),
        };
        let Some(known) = self.known_revision(&mut *tx, project, &path)? else {
            // Neither the text nor the store names a revision: nothing to base an edit on.
            return Err(broken);
        };
        let summary = format!(
            "{summary} (replaced a stored document that did not load: {})",
            broken.code()
        );
        let revision = self.save_over(
            tx,
            project,
            &path,
            edited,
            base_revision,
            known,
            actor,
            &summary,
        )?;
        Ok(SavedEdit {
            revision,
            replaced: Some(broken),
        })
    }

    /// The revision a [`Self::save_repair`] of `project` must be based on while its stored
    /// document does not load: the one the broken text still names, if it can be read, or else
    /// the newest the store wrote. `None` when neither names one.
    pub fn repair_base(&self, project: &str) -> Result<Option<u64>, RulesError> {
        let path = self.project_path(project)?;
        let mut tx = self.backend.begin(false)?;
        self.known_revision(&mut *tx, project, &path)
    }

    /// See [`Self::repair_base`].
    fn known_revision(
        &self,
        tx: &mut dyn RulesTx,
        project: &str,
        path: &Path,
    ) -> Result<Option<u64>, RulesError> {
        let claimed = self
            .stored_text(tx, project, path)?
            .and_then(|text| claimed_revision(&text));
        Ok(claimed.max(tx.latest_revision(project)?))
    }

    /// The stored text of a project's document as it is, loaded or not: the file, or the
    /// newest revision in the database. `None` when there is none.
    fn stored_text(
        &self,
        tx: &mut dyn RulesTx,
        project: &str,
        path: &Path,
    ) -> Result<Option<String>, RulesError> {
        match self.document_source() {
            DocumentSource::Files => match std::fs::read_to_string(path) {
                Ok(text) => Ok(Some(text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                // Not UTF-8: the text names no revision that can be read.
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Ok(None),
                Err(e) => Err(RulesError::io(path, e)),
            },
            DocumentSource::Database => tx.latest_document(project),
        }
    }

    /// Writes `edited` as the revision after `current`, if the edit was based on `current`
    /// (else [`RulesError::Conflict`], nothing written), and records the change.
    #[allow(clippy::too_many_arguments)]
    fn save_over(
        &self,
        mut tx: Box<dyn RulesTx + '_>,
        project: &str,
        path: &Path,
        edited: &RulesDocument,
        base_revision: u64,
        current: u64,
        actor: &str,
        summary: &str,
    ) -> Result<u64, RulesError> {
        if current != base_revision {
            return Err(RulesError::Conflict {
                project: project.to_string(),
                expected: base_revision,
                actual: current,
            });
        }
        let mut doc = edited.clone();
        doc.revision = next_revision(path, current)?;
        let exports = self.write_doc(&mut *tx, project, path, &doc)?;
        record_change(
            &mut *tx,
            project,
            doc.revision,
            Source::User,
            actor,
            summary,
            None,
        )?;
        self.finish(tx, exports)?;
        Ok(doc.revision)
    }

    /// Rewrites an older document in the current schema version. Returns the version it was
    /// migrated from, or `None` when it already was current (then nothing is written).
    pub fn upgrade(&self, project: &str, actor: &str) -> Result<Option<u32>, RulesError> {
        let path = self.project_path(project)?;
        let mut tx = self.backend.begin(true)?;
        let loaded = self.load_in(&mut *tx, project)?;
        let Some(from) = loaded.migrated_from else {
            return Ok(None);
        };
        let mut doc = loaded.document;
        doc.revision = next_revision(&path, doc.revision)?;
        let exports = self.write_doc(&mut *tx, project, &path, &doc)?;
        record_change(
            &mut *tx,
            project,
            doc.revision,
            Source::User,
            actor,
            &format!("migrate from schema_version {from}"),
            None,
        )?;
        self.finish(tx, exports)?;
        Ok(Some(from))
    }

    /// Validates a document and stores its revision in the caller's transaction; returns the
    /// file to write, which [`Self::finish`] writes (before the commit with files as the source
    /// of truth, after it with the database).
    fn write_doc(
        &self,
        tx: &mut dyn RulesTx,
        project: &str,
        path: &Path,
        doc: &RulesDocument,
    ) -> Result<Vec<Export>, RulesError> {
        let problems = validate::validate(doc, &self.catalog, None);
        if !problems.is_empty() {
            return Err(RulesError::Invalid {
                file: path.to_path_buf(),
                problems,
            });
        }
        let text = yaml::to_yaml(doc)?;
        tx.put_revision(project, doc.revision, &text)?;
        Ok(vec![Export {
            path: path.to_path_buf(),
            text,
        }])
    }

    /// The document of a project as it was at `revision`, for revisions written since the
    /// store kept copies (older ones are [`RulesError::NotFound`] of kind `revision`).
    pub fn document_at(&self, project: &str, revision: u64) -> Result<RulesDocument, RulesError> {
        let path = self.project_path(project)?;
        let mut tx = self.backend.begin(false)?;
        // The current document answers for its own revision (with the files as the source,
        // a hand edit may differ from the copy the store kept of that revision). One that
        // does not load answers for none: the kept copies still show how it was, which is
        // what its repair starts from (see `save_repair`).
        match self.load_in(&mut *tx, project) {
            Ok(loaded) if loaded.document.revision == revision => return Ok(loaded.document),
            Ok(_) => {}
            Err(e) if e.kind() == crate::error::RulesErrorKind::Document => {}
            Err(e) => return Err(e),
        }
        let text = tx
            .revision(project, revision)?
            .ok_or_else(|| RulesError::NotFound {
                kind: "revision",
                id: format!("{project}@{revision}"),
            })?;
        Ok(yaml::load_str(&text, &path, project, &self.catalog)?.document)
    }

    /// The document a pending proposal would produce if it were approved now by `approver`
    /// (nothing is written). Fails as [`RulesStore::approve`] would.
    pub fn preview(&self, id: u64, approver: &str) -> Result<RulesDocument, RulesError> {
        let mut tx = self.backend.begin(false)?;
        let p = get_proposal(&mut *tx, id)?;
        if p.status != ProposalStatus::Pending {
            return Err(RulesError::AlreadyDecided {
                kind: "proposal",
                id: id.to_string(),
                status: p.status.as_str().into(),
            });
        }
        let mut doc = self.load_in(&mut *tx, &p.project)?.document;
        apply(&mut doc, &p, approver, &now_rfc3339())?;
        doc.revision = next_revision(&self.project_path(&p.project)?, doc.revision)?;
        Ok(doc)
    }

    /// Queues a change for review. The document is not touched. A change over
    /// [`MAX_PROPOSAL_BYTES`], or one more for a project that has [`MAX_PENDING_PROPOSALS`]
    /// waiting, is refused ([`RulesError::Rejected`]) with nothing stored; so is one more from a
    /// proposer with [`MAX_PENDING_PER_PROPOSER`] of the project's waiting
    /// ([`RulesError::TooManyPending`]).
    ///
    /// A guardrail whose id a pending proposal already adds is not queued again: the same
    /// change from the same proposer (a retry) answers the proposal waiting, anything else is
    /// refused ([`RulesError::Rejected`], naming that proposal).
    pub fn propose(
        &self,
        project: &str,
        origin: &Origin,
        change: &ChangeRequest,
        base_revision: Option<u64>,
    ) -> Result<Proposal, RulesError> {
        change.check(&self.catalog)?;
        let size = serde_json::to_string(change)
            .map_err(|e| RulesError::Serialize(e.to_string()))?
            .len();
        if size > MAX_PROPOSAL_BYTES {
            return Err(RulesError::Rejected(format!(
                "the proposed change is {size} bytes as JSON; at most {MAX_PROPOSAL_BYTES} are accepted"
            )));
        }
        let mut tx = self.backend.begin(true)?;
        let doc = self.load_in(&mut *tx, project)?.document;
        if let ChangeRequest::Guardrail { id, .. } = change
            && doc.guardrail(id).is_some()
        {
            return Err(RulesError::Rejected(format!(
                "guardrail `{id}` already exists in project `{project}`; propose a different id"
            )));
        }
        // A guardrail id already waiting for review: the same proposal again (a retry) is
        // answered with the one waiting; anything else under that id could never be approved
        // after it. Looked up in the write transaction, so concurrent retries queue one.
        if let ChangeRequest::Guardrail { id, .. } = change
            && let Some(&waiting) = tx.pending_guardrail_proposals(project, id)?.first()
        {
            match get_proposal(&mut *tx, waiting) {
                Ok(existing)
                    if existing.change == *change
                        && existing.origin.source == origin.source
                        && existing.origin.proposed_by == origin.proposed_by =>
                {
                    return Ok(existing);
                }
                // Another change, or one this build cannot read: not this one.
                Ok(_) | Err(RulesError::Unreadable { .. }) => {}
                Err(e) => return Err(e),
            }
            return Err(RulesError::Rejected(format!(
                "guardrail `{id}` is already proposed in project `{project}` (proposal {waiting}, waiting for review); propose a different id, or wait until a person decides that proposal"
            )));
        }
        // Counted in the write transaction, so concurrent proposers cannot pass the limits.
        check_proposer_room(&mut *tx, project, &origin.proposed_by)?;
        let pending = tx.pending_proposals(project)?;
        if pending >= MAX_PENDING_PROPOSALS as u64 {
            return Err(project_full(project, pending));
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
        let id = insert_proposal(&mut *tx, project, origin, change, base_revision, None)?
            .ok_or_else(|| RulesError::Rejected("the proposal was not stored".into()))?;
        let p = get_proposal(&mut *tx, id)?;
        tx.commit()?;
        // The proposer is the caller's text (an agent's name): written escaped, so a line break
        // in it cannot start a log line of its own.
        tracing::info!(project, proposal = id, by = ?origin.proposed_by, "proposal queued");
        Ok(p)
    }

    /// One proposal.
    pub fn proposal(&self, id: u64) -> Result<Proposal, RulesError> {
        get_proposal(&mut *self.backend.begin(false)?, id)
    }

    /// Proposals, newest last: the pending ones (or all, with `include_decided`), of one
    /// project or of all. One this build cannot read (a newer build's) is left out, with a
    /// warning naming it; [`Self::proposal`] of its id is [`RulesError::Unreadable`].
    pub fn queue(
        &self,
        project: Option<&str>,
        include_decided: bool,
    ) -> Result<Vec<Proposal>, RulesError> {
        let mut tx = self.backend.begin(false)?;
        let ids = tx.proposal_ids(project, include_decided)?;
        readable(ids.into_iter().map(|id| get_proposal(&mut *tx, id)))
    }

    /// The proposals matching `filter` with an id above `after` (all, without it), ascending,
    /// at most `limit` of them, and whether more follow: one page of the review queue, read
    /// with a statement or two however long the queue is (the rows themselves, filtered and
    /// cut in the database, in one snapshot). A row this build cannot read is left out, as in
    /// [`Self::queue`], and the page is filled from the rows after it.
    pub fn queue_page(
        &self,
        filter: &QueueFilter,
        after: Option<u64>,
        limit: usize,
    ) -> Result<QueuePage, RulesError> {
        let mut tx = self.backend.begin(false)?;
        let mut items = Vec::new();
        let mut after = after.unwrap_or(0);
        loop {
            // One more than the page, to know whether more follow.
            let want = (limit + 1).saturating_sub(items.len());
            let rows = tx.proposal_page(filter, after, want)?;
            let fetched = rows.len();
            let mut decoded = Vec::with_capacity(fetched);
            for (id, row) in rows {
                after = after.max(id);
                decoded.push(row.and_then(backend::ProposalRow::into_proposal));
            }
            items.extend(readable(decoded.into_iter())?);
            if fetched < want || items.len() > limit {
                break;
            }
        }
        let more = items.len() > limit;
        items.truncate(limit);
        Ok(QueuePage { items, more })
    }

    /// How many proposals and scope tickets wait for a person, across every project: the
    /// lengths of [`Self::queue`]`(None, false)` and [`Self::scope_tickets`]`(false)`, counted
    /// by one statement that reads no proposal or ticket (what a metrics scrape asks, however
    /// long the queues are).
    pub fn pending_counts(&self) -> Result<PendingCounts, RulesError> {
        self.backend.pending_counts()
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
        let mut tx = self.backend.begin(true)?;
        let p = get_proposal(&mut *tx, id)?;
        if p.status != ProposalStatus::Pending {
            return Err(RulesError::AlreadyDecided {
                kind: "proposal",
                id: id.to_string(),
                status: p.status.as_str().into(),
            });
        }
        let path = self.project_path(&p.project)?;
        let mut doc = self.load_in(&mut *tx, &p.project)?.document;
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
        doc.revision = next_revision(&path, doc.revision)?;
        let exports = self.write_doc(&mut *tx, &p.project, &path, &doc)?;
        tx.decide_proposal(
            id,
            &Decision {
                status: ProposalStatus::Approved.as_str(),
                decided_by: approved_by,
                at: &now,
                note: None,
                applied_revision: Some(doc.revision),
            },
        )?;
        record_change(
            &mut *tx,
            &p.project,
            doc.revision,
            p.origin.source,
            approved_by,
            &p.summary,
            Some(id),
        )?;
        let decided = get_proposal(&mut *tx, id)?;
        self.finish(tx, exports)?;
        tracing::info!(project = ?p.project, proposal = id, revision = doc.revision, "proposal approved");
        Ok(decided)
    }

    /// Rejects a proposal with a reason. The document is not touched.
    pub fn reject(&self, id: u64, rejected_by: &str, reason: &str) -> Result<Proposal, RulesError> {
        if reason.trim().is_empty() {
            return Err(RulesError::Rejected("a rejection says why".into()));
        }
        let mut tx = self.backend.begin(true)?;
        let p = get_proposal(&mut *tx, id)?;
        if p.status != ProposalStatus::Pending {
            return Err(RulesError::AlreadyDecided {
                kind: "proposal",
                id: id.to_string(),
                status: p.status.as_str().into(),
            });
        }
        tx.decide_proposal(
            id,
            &Decision {
                status: ProposalStatus::Rejected.as_str(),
                decided_by: rejected_by,
                at: &now_rfc3339(),
                note: Some(reason),
                applied_revision: None,
            },
        )?;
        let decided = get_proposal(&mut *tx, id)?;
        tx.commit()?;
        Ok(decided)
    }

    /// The change log, oldest first, of one project or of all, after change id `after`.
    pub fn changes(
        &self,
        project: Option<&str>,
        after: u64,
    ) -> Result<Vec<ChangeRecord>, RulesError> {
        self.backend.begin(false)?.changes(project, after)
    }

    /// The id of the newest change (0 when there is none). Cheap; a server polls it to learn
    /// that another process changed a document.
    pub fn last_change_id(&self) -> Result<u64, RulesError> {
        self.backend.begin(false)?.last_change_id()
    }

    /// Opens a scope-expansion ticket for a person to decide. As with proposals, the ticket's
    /// text is at most [`MAX_PROPOSAL_BYTES`] and a project holds at most
    /// [`MAX_PENDING_PROPOSALS`] pending tickets (past either, nothing is stored:
    /// [`RulesError::Rejected`]), of which one agent may have [`MAX_PENDING_PER_PROPOSER`], so
    /// one agent cannot fill the project's queue and lock the others out
    /// ([`RulesError::TooManyPendingScope`]).
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
        let size = action.len() + reason.len() + agent_session.map_or(0, str::len);
        if size > MAX_PROPOSAL_BYTES {
            return Err(RulesError::Rejected(format!(
                "the scope request's action, reason and session are {size} bytes; at most {MAX_PROPOSAL_BYTES} are accepted"
            )));
        }
        let mut tx = self.backend.begin(true)?;
        // Counted in the write transaction, so concurrent requests cannot pass the limit.
        let pending = tx.pending_tickets_by(project, agent)?;
        if pending >= MAX_PENDING_PER_PROPOSER as u64 {
            return Err(RulesError::TooManyPendingScope {
                project: project.to_string(),
                agent: agent.to_string(),
                pending,
            });
        }
        let pending = tx.pending_tickets(project)?;
        if pending >= MAX_PENDING_PROPOSALS as u64 {
            return Err(RulesError::Rejected(format!(
                "project `{project}` has {pending} scope requests waiting for a decision, the most it holds; ask again once some are decided"
            )));
        }
        let id = tx.insert_ticket(&NewTicket {
            project,
            agent,
            agent_session,
            action,
            reason,
            created_at: now_rfc3339(),
        })?;
        let t = get_ticket(&mut *tx, id)?;
        tx.commit()?;
        tracing::info!(project, agent, ticket = id, "scope approval requested");
        Ok(t)
    }

    /// One scope ticket.
    pub fn scope_ticket(&self, id: u64) -> Result<ScopeTicket, RulesError> {
        get_ticket(&mut *self.backend.begin(false)?, id)
    }

    /// Scope tickets: pending ones, or all. One this build cannot read is left out, with a
    /// warning naming it; [`Self::scope_ticket`] of its id is [`RulesError::Unreadable`].
    pub fn scope_tickets(&self, include_decided: bool) -> Result<Vec<ScopeTicket>, RulesError> {
        let mut tx = self.backend.begin(false)?;
        let ids = tx.ticket_ids(include_decided)?;
        readable(ids.into_iter().map(|id| get_ticket(&mut *tx, id)))
    }

    /// A person decides a scope ticket.
    pub fn decide_scope(
        &self,
        id: u64,
        approve: bool,
        decided_by: &str,
        note: Option<&str>,
    ) -> Result<ScopeTicket, RulesError> {
        let mut tx = self.backend.begin(true)?;
        let t = get_ticket(&mut *tx, id)?;
        if t.status != "pending" {
            return Err(RulesError::AlreadyDecided {
                kind: "scope ticket",
                id: id.to_string(),
                status: t.status,
            });
        }
        tx.decide_ticket(
            id,
            &Decision {
                status: if approve { "approved" } else { "denied" },
                decided_by,
                at: &now_rfc3339(),
                note,
                applied_revision: None,
            },
        )?;
        let t = get_ticket(&mut *tx, id)?;
        tx.commit()?;
        Ok(t)
    }

    /// Queues the vendor suggestions written in the document's `agent_profiles` for review, so
    /// a person can promote them. Idempotent, like [`RulesStore::queue_vendor_guidance`], and
    /// bounded as it is: all in one write transaction, none stored when a new one is refused.
    pub fn queue_profile_suggestions(&self, project: &str) -> Result<VendorReport, RulesError> {
        let mut tx = self.backend.begin(true)?;
        // Read in the write transaction, as every vendor queue does (see
        // `queue_vendor_page`).
        let doc = self.load_in(&mut *tx, project)?.document;
        let mut report = VendorReport::default();
        for (agent, profile) in &doc.agent_profiles {
            for s in &profile.vendor_guardrail_suggestions {
                let source_ref = s
                    .source_ref
                    .clone()
                    .unwrap_or_else(|| format!("agent_profiles.{agent}"));
                let origin = Origin::vendor(agent.as_str(), source_ref);
                let queued = self.queue_candidate(
                    &mut *tx,
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
        tx.commit()?;
        Ok(report)
    }

    /// Queues one vendor candidate unless it was queued before or is already policy.
    #[allow(clippy::too_many_arguments)] // Private: one call site per kind of vendor source.
    fn queue_candidate(
        &self,
        tx: &mut dyn RulesTx,
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
            _ => unique_guardrail_id(tx, doc, project, agent, statement)?,
        };
        let change = ChangeRequest::Guardrail {
            id,
            statement: statement.to_string(),
            severity: Severity::Guidance,
            applies_to: vec![agent.to_string()],
        };
        let queued = insert_proposal(
            tx,
            project,
            origin,
            &change,
            None,
            Some(&format!("vendor:{agent}:{fp}")),
        )?;
        // Checked once the statement is known to be new (one queued before is skipped, however
        // many wait), in the order and with the errors of `propose`; each count includes the
        // new row, and the caller's transaction is rolled back on the error.
        if queued.is_some() {
            let pending = tx.pending_proposals_by(project, &origin.proposed_by)?;
            if pending > MAX_PENDING_PER_PROPOSER as u64 {
                return Err(RulesError::TooManyPending {
                    project: project.to_string(),
                    proposer: origin.proposed_by.clone(),
                    pending: pending - 1,
                });
            }
            let pending = tx.pending_proposals(project)?;
            if pending > MAX_PENDING_PROPOSALS as u64 {
                return Err(project_full(project, pending - 1));
            }
        }
        Ok(queued)
    }

    /// Queues one vendor-seeded guardrail statement for an agent profile, from the document
    /// `source_ref` (a URL or file). Returns the new proposal's id, or `None` when the statement
    /// was queued before (in any state) or is already policy. A new statement past the feed's
    /// [`MAX_PENDING_PER_PROPOSER`] (as `vendor:<agent>`) is [`RulesError::TooManyPending`],
    /// and one for a project that has [`MAX_PENDING_PROPOSALS`] waiting is
    /// [`RulesError::Rejected`], as from [`RulesStore::propose`]; nothing stored. Control
    /// characters in the statement are dropped or become spaces, as the extractor does with a
    /// page's text.
    pub fn queue_vendor_statement(
        &self,
        project: &str,
        agent: &str,
        source_ref: &str,
        statement: &str,
    ) -> Result<Option<u64>, RulesError> {
        self.catalog.get(agent)?;
        let origin = Origin::vendor(agent, source_ref);
        let statement = crate::vendor::extract::visible_text(statement);
        let mut tx = self.backend.begin(true)?;
        let doc = self.load_in(&mut *tx, project)?.document;
        let queued =
            self.queue_candidate(&mut *tx, &doc, project, agent, &origin, &statement, None)?;
        tx.commit()?;
        Ok(queued)
    }

    /// Queues a fetched page's statements for an agent profile (the vendor feed's
    /// [`FeedLedger::ingest`](crate::vendor::FeedLedger::ingest)) as
    /// [`RulesStore::queue_vendor_guidance`] queues a text's: in one write transaction, a
    /// statement queued before or already policy skipped (`None` in its place), and a new one
    /// refused by a pending limit refusing them all. Before that transaction commits, `record`
    /// gets it and each statement's outcome, so the rows the caller keeps beside the proposals
    /// in the same database (their provenance, the source's validators) commit with them or
    /// not at all; an error from `record` stores nothing.
    pub(crate) fn queue_vendor_page<T>(
        &self,
        project: &str,
        agent: &str,
        source_ref: &str,
        statements: &[String],
        record: impl FnOnce(&mut dyn RulesTx, &[Option<u64>]) -> Result<T, RulesError>,
    ) -> Result<T, RulesError> {
        self.catalog.get(agent)?;
        let origin = Origin::vendor(agent, source_ref);
        let mut tx = self.backend.begin(true)?;
        // Read in the write transaction, so the policy a candidate is checked against and the
        // ids it must not take are the ones at commit.
        let doc = self.load_in(&mut *tx, project)?.document;
        let mut queued = Vec::with_capacity(statements.len());
        for statement in statements {
            let statement = crate::vendor::extract::visible_text(statement);
            queued.push(
                self.queue_candidate(&mut *tx, &doc, project, agent, &origin, &statement, None)?,
            );
        }
        let recorded = record(&mut *tx, &queued)?;
        tx.commit()?;
        Ok(recorded)
    }

    /// Queues the guardrail candidates found in a vendor's guidance text for an agent profile.
    /// Idempotent: a candidate queued before (in any state) or already in policy is skipped.
    /// Only the text's first [`MAX_CANDIDATES_PER_PAGE`](crate::vendor::MAX_CANDIDATES_PER_PAGE)
    /// candidates are looked at (all in one write transaction); the rest are counted as skipped
    /// ([`VendorReport::over_limit`]). A new candidate past the feed's
    /// [`MAX_PENDING_PER_PROPOSER`] (as `vendor:<agent>`) is [`RulesError::TooManyPending`],
    /// one past the project's [`MAX_PENDING_PROPOSALS`] is [`RulesError::Rejected`] (as from
    /// [`RulesStore::propose`]), and either way none of the text's is stored.
    pub fn queue_vendor_guidance(
        &self,
        project: &str,
        agent: &str,
        source_ref: &str,
        text: &str,
    ) -> Result<VendorReport, RulesError> {
        self.catalog.get(agent)?;
        let origin = Origin::vendor(agent, source_ref);
        let mut tx = self.backend.begin(true)?;
        let doc = self.load_in(&mut *tx, project)?.document;
        let found = crate::vendor::extract_at_most(
            text,
            crate::vendor::DocumentFormat::sniff(text),
            crate::vendor::MAX_CANDIDATES_PER_PAGE,
        );
        let mut report = VendorReport {
            queued: Vec::new(),
            skipped: found.left_out,
            over_limit: found.left_out,
        };
        for c in found.candidates {
            let statement = c.statement;
            match self.queue_candidate(&mut *tx, &doc, project, agent, &origin, &statement, None)? {
                Some(id) => report.queued.push(id),
                None => report.skipped += 1,
            }
        }
        tx.commit()?;
        tracing::info!(
            project,
            agent,
            source_ref,
            queued = report.queued.len(),
            skipped = report.skipped,
            over_limit = report.over_limit,
            "vendor guidance sourced"
        );
        Ok(report)
    }
}

/// What [`RulesStore::save_repair`] wrote.
#[derive(Debug)]
pub struct SavedEdit {
    /// The revision written.
    pub revision: u64,
    /// Why the stored document it replaced did not load; `None` when it loaded (an ordinary
    /// edit).
    pub replaced: Option<RulesError>,
}

/// The revision a stored text names at its top level, when the text parses as YAML at all
/// and `revision` is a number below [`MAX_REVISION`]: how far a document that does not load
/// had got. A larger number (a hand edit past the range, itself a reason the document does
/// not load) is no revision any edit could follow, so it is not taken.
fn claimed_revision(text: &str) -> Option<u64> {
    let tree: serde_json::Value = serde_saphyr::from_str(text).ok()?;
    tree.get("revision")?
        .as_u64()
        .filter(|revision| *revision < MAX_REVISION)
}

/// The revision after `revision`. Checked, because a hand-edited file can hold any number:
/// past [`MAX_REVISION`] the database would store a different number (or the sum would wrap
/// to 0 and replace an old revision), which breaks every later conflict check.
fn next_revision(path: &Path, revision: u64) -> Result<u64, RulesError> {
    revision
        .checked_add(1)
        .filter(|next| *next <= MAX_REVISION)
        .ok_or_else(|| RulesError::Invalid {
            file: path.to_path_buf(),
            problems: vec![crate::error::Problem {
                code: "revision_out_of_range",
                field: "revision".into(),
                line: None,
                message: format!(
                    "revision {revision} is the largest the store keeps ({MAX_REVISION}), so no change can follow it; set it back to the revision the document had"
                ),
            }],
        })
}

fn unique_guardrail_id(
    tx: &mut dyn RulesTx,
    doc: &RulesDocument,
    project: &str,
    agent: &str,
    statement: &str,
) -> Result<String, RulesError> {
    let base = format!("{agent}-{}", crate::migrate::slug(statement, 6));
    let base: String = base.chars().take(56).collect();
    let base = base.trim_end_matches('-').to_string();
    // One query for every id this base could collide with, then the first free one in memory:
    // a query per attempt made a page of sentences that share their first words cost cubic
    // time inside the write transaction.
    #[cfg(test)]
    ID_LOOKUPS.with(|n| n.set(n.get() + 1));
    let mut taken: std::collections::HashSet<String> =
        tx.guardrail_ids_from(project, &base)?.into_iter().collect();
    taken.extend(doc.guardrails.iter().map(|g| g.id.clone()));
    let mut id = base.clone();
    let mut n = 2u64;
    // Ends within `taken.len() + 1` tries: each taken id blocks at most one.
    while taken.contains(&id) {
        id = format!("{base}-{n}");
        n += 1;
    }
    Ok(id)
}

#[cfg(test)]
thread_local! {
    /// How many times this thread looked up the guardrail ids a new id could collide with (a
    /// store on SQLite runs on its caller's thread), so a test can bound the queries per page.
    pub(crate) static ID_LOOKUPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn insert_proposal(
    tx: &mut dyn RulesTx,
    project: &str,
    origin: &Origin,
    change: &ChangeRequest,
    base_revision: Option<u64>,
    fingerprint: Option<&str>,
) -> Result<Option<u64>, RulesError> {
    let change_json =
        serde_json::to_string(change).map_err(|e| RulesError::Serialize(e.to_string()))?;
    tx.insert_proposal(&NewProposal {
        project,
        origin,
        change_json,
        summary: change.summary(),
        base_revision,
        fingerprint,
        created_at: now_rfc3339(),
    })
}

/// The rows of a listing this build can read: one it cannot ([`RulesError::Unreadable`], a
/// newer build's, sharing the database) is left out with a warning naming it (never its
/// content), so the listing (the review queue a person works from) still answers; reading
/// that row on its own names the problem. Any other error fails the listing.
fn readable<T>(rows: impl Iterator<Item = Result<T, RulesError>>) -> Result<Vec<T>, RulesError> {
    let mut out = Vec::new();
    for row in rows {
        match row {
            Ok(row) => out.push(row),
            Err(RulesError::Unreadable { kind, id }) => {
                tracing::warn!(kind, id = ?id, "a stored row this build cannot read is left out of the listing");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The refusal of one more proposal for `project`, which has `pending` waiting for a person:
/// [`MAX_PENDING_PROPOSALS`], the most it holds. One error for agents and vendor sourcing.
fn project_full(project: &str, pending: u64) -> RulesError {
    RulesError::Rejected(format!(
        "project `{project}` has {pending} proposals waiting for review, the most it holds; propose again once some are approved or rejected"
    ))
}

/// Refuses one more proposal of `project` from `proposed_by` when it has
/// [`MAX_PENDING_PER_PROPOSER`] waiting.
fn check_proposer_room(
    tx: &mut dyn RulesTx,
    project: &str,
    proposed_by: &str,
) -> Result<(), RulesError> {
    let pending = tx.pending_proposals_by(project, proposed_by)?;
    if pending >= MAX_PENDING_PER_PROPOSER as u64 {
        return Err(RulesError::TooManyPending {
            project: project.to_string(),
            proposer: proposed_by.to_string(),
            pending,
        });
    }
    Ok(())
}

fn get_proposal(tx: &mut dyn RulesTx, id: u64) -> Result<Proposal, RulesError> {
    tx.proposal(id)?
        .ok_or_else(|| RulesError::NotFound {
            kind: "proposal",
            id: id.to_string(),
        })?
        .into_proposal()
}

fn get_ticket(tx: &mut dyn RulesTx, id: u64) -> Result<ScopeTicket, RulesError> {
    tx.ticket(id)?.ok_or_else(|| RulesError::NotFound {
        kind: "scope ticket",
        id: id.to_string(),
    })
}

fn record_change(
    tx: &mut dyn RulesTx,
    project: &str,
    revision: u64,
    source: Source,
    actor: &str,
    summary: &str,
    proposal_id: Option<u64>,
) -> Result<u64, RulesError> {
    tx.record_change(&NewChange {
        project,
        revision,
        source,
        actor,
        summary,
        proposal_id,
        at: now_rfc3339(),
    })
}
