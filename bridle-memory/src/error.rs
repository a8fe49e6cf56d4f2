//! The one error type of bridle-memory.
//!
//! Every failure a caller can meet (a store that cannot open, an embedder that is down or answers
//! with the wrong dimension, a repository that cannot be fetched, a tag that does not exist) is a
//! [`MemoryError`] variant with a stable [`MemoryError::code`] string. The MCP tools put that code
//! in their structured error so programs match on it, and the sentence is written for a model to
//! act on.

use crate::patterns::LimitNames;

/// Why a memory operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The embedding service could not be reached or answered with an error status.
    #[error("the embedding service at {endpoint} is unavailable: {reason}")]
    EmbedderUnavailable {
        /// The URL that was called (or the model folder, for the in-process embedder).
        endpoint: String,
        /// What went wrong.
        reason: String,
    },
    /// The embedding service answered, but not with what was asked for.
    #[error("the embedding service answered unexpectedly: {0}")]
    EmbedderProtocol(String),
    /// Vectors of the wrong length: the embedder and the collection disagree.
    #[error("dimension mismatch: expected {expected}-dimensional vectors, got {actual}")]
    DimensionMismatch {
        /// The collection's (or the embedder's declared) dimension.
        expected: usize,
        /// What arrived.
        actual: usize,
    },
    /// The in-process model could not be loaded.
    #[error("the embedding model could not be loaded from {path}: {reason}")]
    ModelLoad {
        /// The model folder.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The vector store failed (I/O, database, server).
    #[error("the vector store failed: {0}")]
    Store(String),
    /// A collection that does not exist.
    #[error("collection `{0}` does not exist")]
    UnknownCollection(String),
    /// A collection exists with a different dimension or distance.
    #[error("collection `{name}` already exists with {existing}; asked for {requested}")]
    CollectionMismatch {
        /// The collection.
        name: String,
        /// Its existing configuration.
        existing: String,
        /// The requested one.
        requested: String,
    },
    /// The stored vectors were made by another embedding model than the one configured now
    /// (of the same dimension, or the store would have said so): their similarities to a query
    /// embedded by the new model mean nothing, so nothing is ranked until they are re-indexed.
    #[error(
        "what is stored was embedded by the model `{indexed}`, not by `{current}`, the one configured now: re-index it ({remedy}) before searching"
    )]
    ModelMismatch {
        /// The model recorded with the stored vectors.
        indexed: String,
        /// The model configured now.
        current: String,
        /// How to re-index (for pattern examples, `refresh_pattern_example`; for session
        /// memories, re-embedding them).
        remedy: String,
    },
    /// Bad input from the caller (an empty query, a malformed filter, a bad name).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A repository could not be fetched (unreachable, private, not a repository).
    #[error("the repository {source_repo} could not be fetched: {reason}{}", lasting_note(*.lasting))]
    RepoUnavailable {
        /// The URL or path given.
        source_repo: String,
        /// What git (or the file system) said.
        reason: String,
        /// Whether the failure lasts until a person changes something (the source, or the
        /// credential for it): a repository that does not exist or is not one, a local folder
        /// that is gone, a host that refuses the credential sent or asks for one none is kept
        /// for, a source whose credential was not stored. `false` for what may pass by itself
        /// (a host away or failing, a timeout), which the same call may get past later. The
        /// tools' refusals carry it as `retryable` ([`crate::tools::retryable`]).
        lasting: bool,
    },
    /// A repository with no file worth indexing.
    #[error(
        "the repository {source_repo} has no indexable files (code or text, not vendored, generated or binary)"
    )]
    NothingToIndex {
        /// The URL or path given.
        source_repo: String,
    },
    /// A repository over one of the limits that bound what indexing reads and holds in memory
    /// ([`crate::repo::FileRules::max_total_bytes`], [`crate::repo::FileRules::max_files`],
    /// [`crate::PatternIndexConfig::max_chunks`]) or what its clone takes on disk
    /// ([`crate::PatternIndexConfig::max_clone_bytes`]).
    /// Nothing is stored: the tag's previous index, if any, stays as it was.
    #[error(
        "the repository {source_repo} is too large to index: it has more than {limit} {what} (the limit {setting}); raise that limit or index a smaller repository. Nothing was stored and the tag's previous index is unchanged"
    )]
    IndexTooLarge {
        /// The URL or path given (its user part and query shown as `***`).
        source_repo: String,
        /// What passed the limit (`bytes of files to read`, `chunks`, `bytes on disk once
        /// cloned`).
        what: &'static str,
        /// The limit's value.
        limit: u64,
        /// The setting that raises it ([`crate::LimitNames`]).
        setting: String,
    },
    /// A pattern-example tag that was never indexed.
    #[error("no pattern example is indexed under reference tag `{0}`")]
    UnknownTag(String),
    /// A memory record that does not exist.
    #[error("no memory with id {0}")]
    UnknownMemory(u64),
    /// The project already holds as many memories as one project may
    /// ([`crate::SessionMemory::with_max_per_project`]); nothing was stored.
    #[error(
        "project `{project}` already holds {limit} memories, the most one project may; nothing was stored. Ask an operator to forget memories it no longer needs or to raise the limit"
    )]
    MemoryQuota {
        /// The project.
        project: String,
        /// The limit.
        limit: u64,
    },
}

impl MemoryError {
    /// The stable code of this error. Codes never change meaning; new ones may be added.
    ///
    /// | code | meaning |
    /// |---|---|
    /// | `embedder_unavailable` | the embedding service is down or refused the request |
    /// | `embedder_protocol` | the embedding service answered with an unexpected shape |
    /// | `dimension_mismatch` | the vectors do not have the collection's dimension |
    /// | `model_load` | the in-process model folder is missing or invalid |
    /// | `store` | the vector store failed |
    /// | `unknown_collection` | no such collection |
    /// | `collection_mismatch` | the collection exists with another dimension or distance |
    /// | `model_mismatch` | the stored vectors are another embedding model's |
    /// | `invalid_input` | the caller's input is malformed |
    /// | `repo_unavailable` | the repository could not be fetched (for good, or for now: see [`MemoryError::RepoUnavailable::lasting`](MemoryError::RepoUnavailable)) |
    /// | `nothing_to_index` | the repository has no indexable file |
    /// | `index_too_large` | the repository passes a limit of what indexing reads or holds |
    /// | `unknown_tag` | no pattern example under that reference tag |
    /// | `unknown_memory` | no memory with that id |
    /// | `memory_quota_exceeded` | the project holds as many memories as it may; nothing was stored |
    pub fn code(&self) -> &'static str {
        match self {
            MemoryError::EmbedderUnavailable { .. } => "embedder_unavailable",
            MemoryError::EmbedderProtocol(_) => "embedder_protocol",
            MemoryError::DimensionMismatch { .. } => "dimension_mismatch",
            MemoryError::ModelLoad { .. } => "model_load",
            MemoryError::Store(_) => "store",
            MemoryError::UnknownCollection(_) => "unknown_collection",
            MemoryError::CollectionMismatch { .. } => "collection_mismatch",
            MemoryError::ModelMismatch { .. } => "model_mismatch",
            MemoryError::InvalidInput(_) => "invalid_input",
            MemoryError::RepoUnavailable { .. } => "repo_unavailable",
            MemoryError::NothingToIndex { .. } => "nothing_to_index",
            MemoryError::IndexTooLarge { .. } => "index_too_large",
            MemoryError::UnknownTag(_) => "unknown_tag",
            MemoryError::UnknownMemory(_) => "unknown_memory",
            MemoryError::MemoryQuota { .. } => "memory_quota_exceeded",
        }
    }
}

/// What a lasting [`MemoryError::RepoUnavailable`] adds to its sentence, so that a reader knows
/// trying again will not help.
fn lasting_note(lasting: bool) -> &'static str {
    if lasting {
        ". Trying again will not help until the source or its credential is corrected"
    } else {
        ""
    }
}

impl MemoryError {
    /// [`MemoryError::Store`] for a blocking task (`what`) that ended without an answer: it
    /// panicked, or the runtime was shutting down. The task's own words are logged by kind only
    /// and never quoted: a panic's message may repeat the data it failed on (a string slicing
    /// panic quotes the string), and that data may be a credential for a clone or a stored
    /// text, which must reach neither a tool's answer nor a log line.
    pub(crate) fn stopped(what: &str, e: &tokio::task::JoinError) -> Self {
        tracing::error!(
            task = what,
            panicked = e.is_panic(),
            "a blocking task ended without an answer"
        );
        MemoryError::Store(format!("{what} stopped unexpectedly (internal error)"))
    }

    /// A lasting [`MemoryError::RepoUnavailable`] for a tree whose ignore file `file` was
    /// not read ([`crate::repo::SourceFiles::unsafe_ignore_file`]).
    pub(crate) fn unsafe_ignore_file(source_repo: String, file: &str) -> Self {
        MemoryError::RepoUnavailable {
            source_repo,
            reason: format!(
                "its ignore file `{}` is a link leading out of the repository or to something other than a file, or is larger than {} bytes; it is not read, and without it the repository would be indexed against its own ignore rules",
                file.escape_debug(),
                crate::repo::MAX_IGNORE_FILE_BYTES
            ),
            lasting: true,
        }
    }

    /// [`MemoryError::IndexTooLarge`] for a walk that read more than `limit` bytes.
    pub(crate) fn too_many_bytes(source_repo: String, limit: u64, names: &LimitNames) -> Self {
        MemoryError::IndexTooLarge {
            source_repo,
            what: "bytes of files to read",
            limit,
            setting: names.max_total_bytes.clone(),
        }
    }

    /// [`MemoryError::IndexTooLarge`] for more than `limit` indexable files.
    pub(crate) fn too_many_files(source_repo: String, limit: usize, names: &LimitNames) -> Self {
        MemoryError::IndexTooLarge {
            source_repo,
            what: "indexable files",
            limit: limit as u64,
            setting: names.max_files.clone(),
        }
    }

    /// [`MemoryError::IndexTooLarge`] for a clone that took more than `limit` bytes on disk.
    pub(crate) fn too_large_clone(source_repo: String, limit: u64, names: &LimitNames) -> Self {
        MemoryError::IndexTooLarge {
            source_repo,
            what: "bytes on disk once cloned",
            limit,
            setting: names.max_clone_bytes.clone(),
        }
    }

    /// [`MemoryError::IndexTooLarge`] for more than `limit` chunks.
    pub(crate) fn too_many_chunks(source_repo: String, limit: usize, names: &LimitNames) -> Self {
        MemoryError::IndexTooLarge {
            source_repo,
            what: "chunks",
            limit: limit as u64,
            setting: names.max_chunks.clone(),
        }
    }
}

impl From<rusqlite::Error> for MemoryError {
    fn from(e: rusqlite::Error) -> Self {
        MemoryError::Store(e.to_string())
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = MemoryError> = std::result::Result<T, E>;
