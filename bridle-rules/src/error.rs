//! The one error type of the crate, [`RulesError`], with a stable [`RulesError::code`] per
//! variant.
//!
//! The codes are a contract: the gateway hands them to agents and to scripts (`bridle render
//! --check` in CI), so a code never changes meaning. Load errors name the file, the line and
//! column, and the field, because a person fixing a YAML file needs all four.

use std::path::PathBuf;

/// Where in a document a problem is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Position {
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, when known.
    pub column: Option<u64>,
    /// The field path (`guardrails[2].severity`), when known.
    pub field: Option<String>,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "line {l}, column {c}")?,
            (Some(l), None) => write!(f, "line {l}")?,
            _ => write!(f, "unknown position")?,
        }
        if let Some(field) = &self.field {
            write!(f, ", field `{field}`")?;
        }
        Ok(())
    }
}

/// One thing wrong with a document that parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Stable code of the problem (`unknown_agent`, `duplicate_guardrail`, ...).
    pub code: &'static str,
    /// The field path it concerns.
    pub field: String,
    /// 1-based line of that field in the file, when it could be located.
    pub line: Option<u64>,
    /// What is wrong, in words.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(
                f,
                "line {l}, field `{}`: {} [{}]",
                self.field, self.message, self.code
            ),
            None => write!(
                f,
                "field `{}`: {} [{}]",
                self.field, self.message, self.code
            ),
        }
    }
}

fn problems_list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("\n  - {p}"))
        .collect::<String>()
}

/// Whose fault a [`RulesError`] is ([`RulesError::kind`]): what a caller is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RulesErrorKind {
    /// The caller's own request was wrong (an unknown project or id, a stale revision, a
    /// refused change, a name, a full queue). The message is about the request and safe to
    /// tell the caller, with a 4xx status or the error's code.
    Request,
    /// A rules document does not parse, breaks the format, is too new or cannot be migrated.
    /// The caller's fault when the caller submitted the document (the admin API's create and
    /// replace), the store's when the document was read from the store (every agent-facing
    /// call: agents never submit a document). The message may name the document's file.
    Document,
    /// The store itself failed: a file, the database, a template, writing YAML. The message
    /// names files and internals; the caller gets a generic sentence (a 5xx) with the code,
    /// and the operator's log gets the message.
    Store,
}

/// Why a rules operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RulesError {
    /// The YAML does not parse or does not match the document's shape.
    #[error("{file}: {position}: {message}")]
    Parse {
        /// The file (or a label for in-memory text).
        file: PathBuf,
        /// Line, column and field.
        position: Position,
        /// What the parser said.
        message: String,
    },
    /// The document parsed but breaks a rule of the format.
    #[error("{file}: the document is invalid:{}", problems_list(.problems))]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Every problem found, in document order.
        problems: Vec<Problem>,
    },
    /// The document was written by a newer Bridle than this one.
    #[error(
        "{file}: schema_version {found} is newer than this build supports ({supported}); upgrade Bridle"
    )]
    TooNew {
        /// The file.
        file: PathBuf,
        /// The version in the file.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// A migration step could not transform the document.
    #[error("{file}: migrating from schema_version {from} failed: {message}")]
    Migration {
        /// The file.
        file: PathBuf,
        /// The version the failing step starts from.
        from: u32,
        /// Why.
        message: String,
    },
    /// An edit was made against a revision that is no longer current.
    #[error(
        "revision conflict on project `{project}`: the edit was based on revision {expected}, the document is at revision {actual}; reload and re-apply"
    )]
    Conflict {
        /// The project.
        project: String,
        /// The revision the edit was based on.
        expected: u64,
        /// The revision on disk.
        actual: u64,
    },
    /// No such project.
    #[error("unknown project `{0}`")]
    UnknownProject(String),
    /// No such agent type (neither built in nor defined in the templates folder).
    #[error("unknown agent `{agent}`; known agents: {known}")]
    UnknownAgent {
        /// The name asked for.
        agent: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// No such proposal, or no such scope ticket.
    #[error("unknown {kind} `{id}`")]
    NotFound {
        /// `proposal` or `scope ticket`.
        kind: &'static str,
        /// The id asked for.
        id: String,
    },
    /// The proposal or ticket was already decided.
    #[error("{kind} `{id}` was already decided ({status})")]
    AlreadyDecided {
        /// `proposal` or `scope ticket`.
        kind: &'static str,
        /// Its id.
        id: String,
        /// Its status.
        status: String,
    },
    /// A proposal cannot be applied (for example a guardrail id that already exists).
    #[error("{0}")]
    Rejected(String),
    /// One proposer has as many proposals of a project waiting for review as one may have
    /// ([`MAX_PENDING_PER_PROPOSER`](crate::MAX_PENDING_PER_PROPOSER)); nothing was stored.
    #[error(
        "`{proposer}` has {pending} proposals waiting for review in project `{project}`, the most one proposer may have; propose again once some are approved or rejected"
    )]
    TooManyPending {
        /// The project.
        project: String,
        /// Who proposes (an agent's name, `vendor:<agent>` for a vendor feed).
        proposer: String,
        /// How many of its proposals wait.
        pending: u64,
    },
    /// One agent has as many scope requests of a project waiting for a decision as one may have
    /// ([`MAX_PENDING_PER_PROPOSER`](crate::MAX_PENDING_PER_PROPOSER)); nothing was stored.
    /// Code `too_many_pending`, as for proposals.
    #[error(
        "`{agent}` has {pending} scope requests waiting for a decision in project `{project}`, the most one agent may have; ask again once some are decided"
    )]
    TooManyPendingScope {
        /// The project.
        project: String,
        /// The agent asking.
        agent: String,
        /// How many of its requests wait.
        pending: u64,
    },
    /// A stored proposal or scope ticket this build cannot read: a newer build sharing the
    /// database wrote a kind of change or a status this one does not know. The message names
    /// the row, never its content.
    #[error(
        "{kind} `{id}` is stored in a form this build cannot read (a newer Bridle may have written it); read or decide it with that build, or upgrade this one"
    )]
    Unreadable {
        /// `proposal` or `scope ticket`.
        kind: &'static str,
        /// Its id.
        id: String,
    },
    /// A template failed to load or render.
    #[error("template `{name}`: {message}")]
    Template {
        /// The template name.
        name: String,
        /// What minijinja said.
        message: String,
    },
    /// The embedded database failed.
    #[error("database: {0}")]
    Database(#[from] rusqlite::Error),
    /// The database records a schema step this build does not know: a newer Bridle wrote it.
    #[error(
        "the `{store}` tables are at schema version {found}, newer than this build supports ({supported}); upgrade Bridle or use a database of this version"
    )]
    DatabaseTooNew {
        /// The store (`rules`, `vault`, ...).
        store: &'static str,
        /// The newest version the database records.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// A schema step recorded in the database has different SQL in this build.
    #[error(
        "schema step {version} (`{name}`) of the `{store}` tables was applied with different SQL than this build's; the database and this build disagree about the schema"
    )]
    MigrationChanged {
        /// The store.
        store: &'static str,
        /// The step's number.
        version: u32,
        /// The step's name.
        name: &'static str,
    },
    /// The PostgreSQL server failed or could not be reached (the message never holds the
    /// password).
    #[error("database: {0}")]
    Postgres(String),
    /// The database setting is not usable (a malformed URL, an unsupported scheme).
    #[error("database setting: {0}")]
    DatabaseConfig(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A document could not be written as YAML.
    #[error("writing YAML failed: {0}")]
    Serialize(String),
    /// A name (project, agent, guardrail id) has characters that are not allowed.
    #[error("invalid {what} `{name}`: {reason}")]
    InvalidName {
        /// `project`, `agent`, `guardrail id`, ...
        what: &'static str,
        /// The name.
        name: String,
        /// Why it is rejected.
        reason: &'static str,
    },
}

impl RulesError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            RulesError::Parse { .. } => "parse_error",
            RulesError::Invalid { .. } => "invalid_document",
            RulesError::TooNew { .. } => "schema_too_new",
            RulesError::Migration { .. } => "migration_failed",
            RulesError::Conflict { .. } => "revision_conflict",
            RulesError::UnknownProject(_) => "unknown_project",
            RulesError::UnknownAgent { .. } => "unknown_agent",
            RulesError::NotFound { .. } => "not_found",
            RulesError::AlreadyDecided { .. } => "already_decided",
            RulesError::Rejected(_) => "proposal_rejected",
            RulesError::TooManyPending { .. } | RulesError::TooManyPendingScope { .. } => {
                "too_many_pending"
            }
            RulesError::Unreadable { .. } => "unreadable_record",
            RulesError::Template { .. } => "template_error",
            RulesError::Database(_) | RulesError::Postgres(_) => "database_error",
            RulesError::DatabaseTooNew { .. } => "database_too_new",
            RulesError::MigrationChanged { .. } => "migration_changed",
            RulesError::DatabaseConfig(_) => "database_config",
            RulesError::Io { .. } => "io_error",
            RulesError::Serialize(_) => "serialize_error",
            RulesError::InvalidName { .. } => "invalid_name",
        }
    }

    /// Whose fault this error is, so that every place that answers a caller (the admin API,
    /// the agents' tools and resources) tells the caller the same kinds of errors in the
    /// store's own words and keeps the same others to the operator's log.
    ///
    /// The match is exhaustive: a new variant is classified here, once, for all of them.
    pub fn kind(&self) -> RulesErrorKind {
        match self {
            RulesError::Conflict { .. }
            | RulesError::UnknownProject(_)
            | RulesError::UnknownAgent { .. }
            | RulesError::NotFound { .. }
            | RulesError::AlreadyDecided { .. }
            | RulesError::Rejected(_)
            | RulesError::TooManyPending { .. }
            | RulesError::TooManyPendingScope { .. }
            // Names a stored row by its id, never its content: the caller asked for that row.
            | RulesError::Unreadable { .. }
            | RulesError::InvalidName { .. } => RulesErrorKind::Request,
            RulesError::Parse { .. }
            | RulesError::Invalid { .. }
            | RulesError::TooNew { .. }
            | RulesError::Migration { .. } => RulesErrorKind::Document,
            RulesError::Template { .. }
            | RulesError::Database(_)
            | RulesError::DatabaseTooNew { .. }
            | RulesError::MigrationChanged { .. }
            | RulesError::Postgres(_)
            | RulesError::DatabaseConfig(_)
            | RulesError::Io { .. }
            | RulesError::Serialize(_) => RulesErrorKind::Store,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RulesError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Checks a project, agent or id name: 1 to 64 of ASCII lowercase letters, digits, `-`, `_`,
/// `.`, starting with a letter or digit. Names become file names and URI segments, so nothing
/// else is allowed.
pub fn check_name(what: &'static str, name: &str) -> Result<(), RulesError> {
    let reason = if name.is_empty() {
        Some("must not be empty")
    } else if name.len() > 64 {
        Some("must be at most 64 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'))
    {
        Some("may only use lowercase ASCII letters, digits, `-`, `_` and `.`")
    } else if !name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        Some("must start with a letter or a digit")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(RulesError::InvalidName {
            what,
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One error of every variant, with the kind a person chose for it (written out here, not
    /// computed: `kind`'s exhaustive match is what makes a new variant be classified at all).
    fn every_variant() -> Vec<(RulesError, RulesErrorKind)> {
        let file = PathBuf::from("rules/shop.yaml");
        vec![
            (
                RulesError::Parse {
                    file: file.clone(),
                    position: Position::default(),
                    message: "expected a mapping".into(),
                },
                RulesErrorKind::Document,
            ),
            (
                RulesError::Invalid {
                    file: file.clone(),
                    problems: Vec::new(),
                },
                RulesErrorKind::Document,
            ),
            (
                RulesError::TooNew {
                    file: file.clone(),
                    found: 9,
                    supported: 1,
                },
                RulesErrorKind::Document,
            ),
            (
                RulesError::Migration {
                    file: file.clone(),
                    from: 1,
                    message: "no step".into(),
                },
                RulesErrorKind::Document,
            ),
            (
                RulesError::Conflict {
                    project: "shop".into(),
                    expected: 1,
                    actual: 2,
                },
                RulesErrorKind::Request,
            ),
            (
                RulesError::UnknownProject("shop".into()),
                RulesErrorKind::Request,
            ),
            (
                RulesError::UnknownAgent {
                    agent: "nobody".into(),
                    known: "claude".into(),
                },
                RulesErrorKind::Request,
            ),
            (
                RulesError::NotFound {
                    kind: "proposal",
                    id: "7".into(),
                },
                RulesErrorKind::Request,
            ),
            (
                RulesError::AlreadyDecided {
                    kind: "proposal",
                    id: "7".into(),
                    status: "approved".into(),
                },
                RulesErrorKind::Request,
            ),
            (RulesError::Rejected("no".into()), RulesErrorKind::Request),
            (
                RulesError::TooManyPending {
                    project: "shop".into(),
                    proposer: "claude".into(),
                    pending: 10,
                },
                RulesErrorKind::Request,
            ),
            (
                RulesError::TooManyPendingScope {
                    project: "shop".into(),
                    agent: "claude".into(),
                    pending: 10,
                },
                RulesErrorKind::Request,
            ),
            (
                RulesError::Unreadable {
                    kind: "proposal",
                    id: "7".into(),
                },
                RulesErrorKind::Request,
            ),
            (
                RulesError::Template {
                    name: "claude".into(),
                    message: "syntax error".into(),
                },
                RulesErrorKind::Store,
            ),
            (
                RulesError::Database(rusqlite::Error::QueryReturnedNoRows),
                RulesErrorKind::Store,
            ),
            (
                RulesError::DatabaseTooNew {
                    store: "rules",
                    found: 9,
                    supported: 1,
                },
                RulesErrorKind::Store,
            ),
            (
                RulesError::MigrationChanged {
                    store: "rules",
                    version: 1,
                    name: "init",
                },
                RulesErrorKind::Store,
            ),
            (
                RulesError::Postgres("connection refused".into()),
                RulesErrorKind::Store,
            ),
            (
                RulesError::DatabaseConfig("bad scheme".into()),
                RulesErrorKind::Store,
            ),
            (
                RulesError::io(file, std::io::Error::other("disk full")),
                RulesErrorKind::Store,
            ),
            (
                RulesError::Serialize("cannot".into()),
                RulesErrorKind::Store,
            ),
            (
                RulesError::InvalidName {
                    what: "project",
                    name: "A".into(),
                    reason: "uppercase",
                },
                RulesErrorKind::Request,
            ),
        ]
    }

    #[test]
    fn every_variant_has_its_kind() {
        let all = every_variant();
        // Every variant once: the list above covers the enum, not a part of it.
        let mut names: Vec<String> = all
            .iter()
            .map(|(e, _)| {
                format!("{e:?}")
                    .split([' ', '('])
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(
            names.len(),
            all.len(),
            "a variant is listed twice: {names:?}"
        );
        for (e, kind) in &all {
            assert_eq!(e.kind(), *kind, "{e:?}");
        }
    }

    #[test]
    fn store_failures_are_told_by_code_only() {
        // What a caller of a store failure sees is its code; the code must say which failure
        // without the message, so none of them is a code a request error uses.
        let all = every_variant();
        for (e, _) in all
            .iter()
            .filter(|(e, _)| e.kind() == RulesErrorKind::Store)
        {
            assert!(
                all.iter()
                    .filter(|(o, _)| o.kind() != RulesErrorKind::Store)
                    .all(|(o, _)| o.code() != e.code()),
                "{e:?}"
            );
        }
    }
}
