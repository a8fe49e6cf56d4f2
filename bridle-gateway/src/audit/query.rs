//! Reading the log back: filters, paging with a cursor, and export as JSON Lines.
//!
//! Cursors are opaque to callers: `a<id>` (oldest first) or `d<id>` (newest first), the id of
//! the last entry of the page. A cursor of the other direction, or anything else, is
//! [`AuditError::InvalidCursor`].

use std::io::Write;

use chrono::{DateTime, Utc};
use rusqlite::Connection;
use rusqlite::types::Value as SqlValue;

use super::entry::{Kind, SourceType};
use super::error::AuditError;
use super::row::{COLUMNS, Row, StoredEntry};

/// The most entries one page holds.
pub const MAX_PAGE: usize = 1000;

/// Which entries to read. Every filter set must match (they combine with AND).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditQuery {
    /// Entries at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Entries before this time.
    pub to: Option<DateTime<Utc>>,
    /// Entries of this source type.
    pub source: Option<SourceType>,
    /// Entries by this actor (admin, agent, feed or component name).
    pub actor: Option<String>,
    /// Entries concerning this agent (its own actions, and admins' actions on it).
    pub agent: Option<String>,
    /// Entries of this project.
    pub project: Option<String>,
    /// Entries of this kind.
    pub kind: Option<Kind>,
    /// Newest first (default oldest first).
    pub newest_first: bool,
    /// At most this many entries per page (1 to [`MAX_PAGE`], default 100).
    pub limit: usize,
    /// Where the previous page ended.
    pub cursor: Option<String>,
}

impl Default for AuditQuery {
    fn default() -> Self {
        AuditQuery {
            from: None,
            to: None,
            source: None,
            actor: None,
            agent: None,
            project: None,
            kind: None,
            newest_first: false,
            limit: 100,
            cursor: None,
        }
    }
}

impl AuditQuery {
    /// Every entry, oldest first, 100 a page.
    pub fn all() -> Self {
        AuditQuery::default()
    }

    /// Entries at or after `from` and before `to`.
    pub fn between(mut self, from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Self {
        self.from = from;
        self.to = to;
        self
    }

    /// Entries of one source type.
    pub fn source(mut self, source: SourceType) -> Self {
        self.source = Some(source);
        self
    }

    /// Entries by one actor.
    pub fn actor(mut self, actor: impl Into<String>) -> Self {
        self.actor = Some(actor.into());
        self
    }

    /// Entries concerning one agent.
    pub fn agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// Entries of one project.
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// Entries of one kind.
    pub fn kind(mut self, kind: Kind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// Newest first.
    pub fn newest_first(mut self) -> Self {
        self.newest_first = true;
        self
    }

    /// The page size (clamped to 1..=[`MAX_PAGE`]).
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = n;
        self
    }

    /// Continue after a page's [`AuditPage::next_cursor`].
    pub fn after(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }
}

/// One page of entries.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AuditPage {
    /// The entries, in the query's order.
    pub entries: Vec<StoredEntry>,
    /// The cursor of the next page, when there may be one.
    pub next_cursor: Option<String>,
}

fn parse_cursor(cursor: &str, newest_first: bool) -> Result<i64, AuditError> {
    let want = if newest_first { 'd' } else { 'a' };
    let mut chars = cursor.chars();
    match (chars.next(), chars.as_str().parse::<i64>()) {
        (Some(c), Ok(id)) if c == want && id >= 0 => Ok(id),
        _ => Err(AuditError::InvalidCursor(cursor.chars().take(64).collect())),
    }
}

/// A bound value of a query.
pub(crate) enum Arg {
    Int(i64),
    Text(String),
}

/// A query as SQL with numbered placeholders (`?1` for SQLite, `$1` for PostgreSQL) and its
/// arguments, in either dialect.
pub(crate) struct Select {
    pub sql: String,
    pub args: Vec<Arg>,
    limit: usize,
    newest_first: bool,
}

/// The SELECT of one page of `query`, placeholders written `{mark}N`.
pub(crate) fn select(query: &AuditQuery, mark: char) -> Result<Select, AuditError> {
    let limit = query.limit.clamp(1, MAX_PAGE);
    let mut sql = format!("SELECT {COLUMNS} FROM gateway_audit WHERE 1 = 1");
    let mut args: Vec<Arg> = Vec::new();
    let mut filter = |sql: &mut String, clause: &str, v: Arg| {
        // A NUL is stored as U+FFFD (see `row`), so a filter names it the same way (and
        // PostgreSQL, which refuses NUL in text, still answers).
        let v = match v {
            Arg::Text(t) if t.contains('\0') => Arg::Text(t.replace('\0', "\u{FFFD}")),
            other => other,
        };
        args.push(v);
        sql.push_str(&format!(" AND {clause} {mark}{}", args.len()));
    };
    if let Some(from) = query.from {
        filter(&mut sql, "at_ms >=", Arg::Int(from.timestamp_millis()));
    }
    if let Some(to) = query.to {
        filter(&mut sql, "at_ms <", Arg::Int(to.timestamp_millis()));
    }
    if let Some(s) = query.source {
        filter(&mut sql, "source_type =", Arg::Text(s.as_str().into()));
    }
    if let Some(a) = &query.actor {
        filter(&mut sql, "actor =", Arg::Text(a.clone()));
    }
    if let Some(a) = &query.agent {
        filter(&mut sql, "agent =", Arg::Text(a.clone()));
    }
    if let Some(p) = &query.project {
        filter(&mut sql, "project =", Arg::Text(p.clone()));
    }
    if let Some(k) = query.kind {
        filter(&mut sql, "kind =", Arg::Text(k.as_str().into()));
    }
    if let Some(c) = &query.cursor {
        let id = parse_cursor(c, query.newest_first)?;
        let op = if query.newest_first { "id <" } else { "id >" };
        filter(&mut sql, op, Arg::Int(id));
    }
    sql.push_str(if query.newest_first {
        " ORDER BY id DESC"
    } else {
        " ORDER BY id ASC"
    });
    // One more than the page, to know whether another page follows.
    sql.push_str(&format!(" LIMIT {}", limit + 1));
    Ok(Select {
        sql,
        args,
        limit,
        newest_first: query.newest_first,
    })
}

/// The page made of the rows `select` returned, in order.
pub(crate) fn finish(
    select: &Select,
    rows: impl IntoIterator<Item = Result<Row, AuditError>>,
) -> Result<AuditPage, AuditError> {
    let mut entries = Vec::with_capacity(select.limit);
    let mut more = false;
    for row in rows {
        if entries.len() == select.limit {
            more = true;
            break;
        }
        entries.push(row?.into_stored()?);
    }
    let dir = if select.newest_first { 'd' } else { 'a' };
    let next_cursor = match entries.last() {
        Some(last) if more => Some(format!("{dir}{}", last.id)),
        _ => None,
    };
    Ok(AuditPage {
        entries,
        next_cursor,
    })
}

/// One page of `query`, from SQLite.
pub(crate) fn page(conn: &Connection, query: &AuditQuery) -> Result<AuditPage, AuditError> {
    let select = select(query, '?')?;
    let args: Vec<SqlValue> = select
        .args
        .iter()
        .map(|a| match a {
            Arg::Int(i) => SqlValue::Integer(*i),
            Arg::Text(t) => SqlValue::Text(t.clone()),
        })
        .collect();
    let mut st = conn.prepare(&select.sql)?;
    let rows = st.query_map(rusqlite::params_from_iter(args.iter()), Row::from_sql)?;
    finish(&select, rows.map(|r| r.map_err(AuditError::from)))
}

/// Writes every entry `query` matches (from its cursor on, whatever its page size) to `out`,
/// one JSON object per line, reading it a page at a time with `page`; returns how many.
pub(crate) fn export(
    mut page: impl FnMut(&AuditQuery) -> Result<AuditPage, AuditError>,
    query: &AuditQuery,
    out: &mut dyn Write,
) -> Result<u64, AuditError> {
    let mut q = query.clone();
    q.limit = MAX_PAGE;
    let mut written = 0u64;
    loop {
        let page = page(&q)?;
        for e in &page.entries {
            let mut line = serde_json::to_vec(e).map_err(std::io::Error::other)?;
            line.push(b'\n');
            out.write_all(&line)?;
            written += 1;
        }
        match page.next_cursor {
            Some(c) => q.cursor = Some(c),
            None => break,
        }
    }
    out.flush()?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_checked() {
        assert_eq!(parse_cursor("a12", false).ok(), Some(12));
        assert_eq!(parse_cursor("d12", true).ok(), Some(12));
        for bad in ["d12", "12", "a", "a-1", "x12", ""] {
            let err = parse_cursor(bad, false).expect_err(bad);
            assert_eq!(err.code(), "audit_invalid_cursor");
        }
    }
}
