//! Why the audit log could not do what was asked, each with a stable code.

/// A failure of the audit log.
///
/// | code | meaning |
/// |---|---|
/// | `audit_database` | the database (SQLite or PostgreSQL) could not be opened, read or written |
/// | `audit_io` | the export could not be written, or the writer thread could not start |
/// | `audit_corrupt` | a stored row holds a value no gateway writes (it was edited by hand) |
/// | `audit_invalid_cursor` | a query cursor that this log did not hand out |
/// | `audit_schema` | the database's schema is newer than this build, or a step of it was edited |
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The database could not be opened, read or written.
    #[error("audit database: {0}")]
    Database(#[from] rusqlite::Error),
    /// The PostgreSQL database could not be reached, read or written (PostgreSQL's message and
    /// code; never the password).
    #[error("audit database: {0}")]
    Postgres(String),
    /// Writing an export, or starting the writer thread, failed.
    #[error("audit log I/O: {0}")]
    Io(#[from] std::io::Error),
    /// A stored row holds a value no gateway writes.
    #[error("audit entry {id} is corrupt: its `{field}` is not a value the gateway writes")]
    Corrupt {
        /// The entry's id.
        id: i64,
        /// The column.
        field: &'static str,
    },
    /// A query cursor this log did not hand out.
    #[error("invalid audit cursor `{0}`")]
    InvalidCursor(String),
    /// The database's schema is not one this build knows (newer, or a step edited since).
    #[error("audit database schema: {0}")]
    Schema(String),
}

impl AuditError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            AuditError::Database(_) | AuditError::Postgres(_) => "audit_database",
            AuditError::Io(_) => "audit_io",
            AuditError::Corrupt { .. } => "audit_corrupt",
            AuditError::InvalidCursor(_) => "audit_invalid_cursor",
            AuditError::Schema(_) => "audit_schema",
        }
    }
}
