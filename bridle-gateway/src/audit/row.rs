//! The stored form of an entry and the hash chain over it.
//!
//! [`Row`] is an entry flattened to the table's columns, and the one form that is hashed: the
//! hash covers the canonical JSON array of every column except the hashes themselves, prefixed by
//! the previous entry's hash, so editing any column, renumbering, inserting or removing a row
//! breaks the chain at that row. [`StoredEntry`] is the typed form read back by queries.
//!
//! Text from outside (the tool name an agent called, its client's name) may hold a NUL
//! character, which PostgreSQL text cannot store: one such entry would fail the whole batch of
//! tool calls written with it, losing every other agent's entries in it. So a NUL is stored as
//! U+FFFD in every column, in both backends, before the row is hashed.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::entry::{
    Change, ClientName, Entry, Kind, Outcome, Source, SourceType, Surface, ToolCallInfo,
};
use super::error::AuditError;

/// The hash a chain starts from (before its first entry ever).
pub(crate) const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Domain separation for the hash, so it cannot be confused with another SHA-256 of the tree.
const HASH_DOMAIN: &[u8] = b"bridle-audit-v1\n";

/// One entry as stored: every column of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub id: i64,
    pub at_ms: i64,
    pub source_type: String,
    pub actor: String,
    pub surface: Option<String>,
    pub agent_type: Option<String>,
    pub session: Option<String>,
    pub client_name: Option<String>,
    pub client_version: Option<String>,
    pub source_url: Option<String>,
    pub kind: String,
    pub project: Option<String>,
    pub subject: Option<String>,
    pub agent: Option<String>,
    pub before_rev: Option<String>,
    pub after_rev: Option<String>,
    pub digest: Option<String>,
    pub outcome: String,
    pub code: Option<String>,
    pub tool_kind: Option<String>,
    pub capability: Option<String>,
    pub duration_us: Option<i64>,
    pub detail: Option<String>,
    pub prev_hash: String,
    pub hash: String,
}

/// The columns in table order, for SELECT and INSERT.
pub(crate) const COLUMNS: &str = "id, at_ms, source_type, actor, surface, agent_type, session, \
     client_name, client_version, source_url, kind, project, subject, agent, before_rev, \
     after_rev, digest, outcome, code, tool_kind, capability, duration_us, detail, prev_hash, hash";

impl Row {
    /// Flattens `entry` as entry `id`, recorded at `at_ms`, after the entry whose hash is `prev`,
    /// and computes its hash.
    pub fn from_entry(entry: &Entry, id: i64, at_ms: i64, prev: &str) -> Row {
        let (surface, agent_type, session, client, url) = match &entry.source {
            Source::User { surface, .. } => {
                (Some(surface.as_str().to_string()), None, None, None, None)
            }
            Source::Agent {
                agent_type,
                session,
                client,
                ..
            } => (
                None,
                agent_type.clone(),
                session.clone(),
                client.clone(),
                None,
            ),
            Source::Vendor { url, .. } => (None, None, None, None, url.clone()),
            Source::System { .. } => (None, None, None, None, None),
        };
        let (outcome, code) = match &entry.outcome {
            Outcome::Ok => ("ok".to_string(), None),
            Outcome::Error(c) => ("error".to_string(), Some(c.clone())),
        };
        let mut row = Row {
            id,
            at_ms,
            source_type: entry.source.source_type().as_str().to_string(),
            actor: entry.source.actor().to_string(),
            surface,
            agent_type,
            session,
            client_name: client.as_ref().map(|c| c.name.clone()),
            client_version: client.and_then(|c| c.version),
            source_url: url,
            kind: entry.kind.as_str().to_string(),
            project: entry.project.clone(),
            subject: entry.subject.clone(),
            agent: entry.agent.clone(),
            before_rev: entry.change.before.clone(),
            after_rev: entry.change.after.clone(),
            digest: entry.change.digest.clone(),
            outcome,
            code,
            tool_kind: entry.tool.as_ref().map(|t| t.tool_kind.clone()),
            capability: entry.tool.as_ref().and_then(|t| t.capability.clone()),
            duration_us: entry
                .tool
                .as_ref()
                .map(|t| i64::try_from(t.duration_us).unwrap_or(i64::MAX)),
            detail: entry.detail.clone(),
            prev_hash: prev.to_string(),
            hash: String::new(),
        };
        row.replace_nul();
        row.hash = row.compute_hash();
        row
    }

    /// Every text column with each NUL character replaced by U+FFFD (see the module's note).
    fn replace_nul(&mut self) {
        fn text(s: &mut String) {
            if s.contains('\0') {
                *s = s.replace('\0', "\u{FFFD}");
            }
        }
        for s in [
            &mut self.source_type,
            &mut self.actor,
            &mut self.kind,
            &mut self.outcome,
        ] {
            text(s);
        }
        for s in [
            &mut self.surface,
            &mut self.agent_type,
            &mut self.session,
            &mut self.client_name,
            &mut self.client_version,
            &mut self.source_url,
            &mut self.project,
            &mut self.subject,
            &mut self.agent,
            &mut self.before_rev,
            &mut self.after_rev,
            &mut self.digest,
            &mut self.code,
            &mut self.tool_kind,
            &mut self.capability,
            &mut self.detail,
        ]
        .into_iter()
        .flatten()
        {
            text(s);
        }
    }

    /// The canonical content: every column but the hashes, as one JSON array in column order
    /// (serialized straight from the fields, no intermediate JSON tree).
    fn canonical(&self) -> String {
        #[derive(Serialize)]
        struct Canonical<'a>(
            i64,
            i64,
            &'a str,
            &'a str,
            &'a Option<String>,
            &'a Option<String>,
            &'a Option<String>,
            &'a Option<String>,
            &'a Option<String>,
            &'a Option<String>,
            &'a str,
            &'a Option<String>,
            &'a Option<String>,
            &'a Option<String>,
            &'a Option<String>,
            &'a Option<String>,
            &'a Option<String>,
            &'a str,
            &'a Option<String>,
            &'a Option<String>,
            &'a Option<String>,
            Option<i64>,
            &'a Option<String>,
        );
        let c = Canonical(
            self.id,
            self.at_ms,
            &self.source_type,
            &self.actor,
            &self.surface,
            &self.agent_type,
            &self.session,
            &self.client_name,
            &self.client_version,
            &self.source_url,
            &self.kind,
            &self.project,
            &self.subject,
            &self.agent,
            &self.before_rev,
            &self.after_rev,
            &self.digest,
            &self.outcome,
            &self.code,
            &self.tool_kind,
            &self.capability,
            self.duration_us,
            &self.detail,
        );
        // Serializing strings, integers and options into a String cannot fail.
        serde_json::to_string(&c).unwrap_or_default()
    }

    /// SHA-256 (hex) of the domain tag, the stored previous hash and the canonical content.
    pub fn compute_hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(HASH_DOMAIN);
        h.update(self.prev_hash.as_bytes());
        h.update(b"\n");
        h.update(self.canonical().as_bytes());
        hex(&h.finalize())
    }

    /// Reads a row selected with [`COLUMNS`].
    pub fn from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
        Ok(Row {
            id: r.get(0)?,
            at_ms: r.get(1)?,
            source_type: r.get(2)?,
            actor: r.get(3)?,
            surface: r.get(4)?,
            agent_type: r.get(5)?,
            session: r.get(6)?,
            client_name: r.get(7)?,
            client_version: r.get(8)?,
            source_url: r.get(9)?,
            kind: r.get(10)?,
            project: r.get(11)?,
            subject: r.get(12)?,
            agent: r.get(13)?,
            before_rev: r.get(14)?,
            after_rev: r.get(15)?,
            digest: r.get(16)?,
            outcome: r.get(17)?,
            code: r.get(18)?,
            tool_kind: r.get(19)?,
            capability: r.get(20)?,
            duration_us: r.get(21)?,
            detail: r.get(22)?,
            prev_hash: r.get(23)?,
            hash: r.get(24)?,
        })
    }

    /// Inserts the row (the caller holds the transaction).
    pub fn insert(&self, conn: &rusqlite::Connection) -> rusqlite::Result<()> {
        let mut st = conn.prepare_cached(
            "INSERT INTO gateway_audit (id, at_ms, source_type, actor, surface, agent_type, session,
             client_name, client_version, source_url, kind, project, subject, agent, before_rev,
             after_rev, digest, outcome, code, tool_kind, capability, duration_us, detail,
             prev_hash, hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
             ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25)",
        )?;
        st.execute(rusqlite::params![
            self.id,
            self.at_ms,
            self.source_type,
            self.actor,
            self.surface,
            self.agent_type,
            self.session,
            self.client_name,
            self.client_version,
            self.source_url,
            self.kind,
            self.project,
            self.subject,
            self.agent,
            self.before_rev,
            self.after_rev,
            self.digest,
            self.outcome,
            self.code,
            self.tool_kind,
            self.capability,
            self.duration_us,
            self.detail,
            self.prev_hash,
            self.hash,
        ])?;
        Ok(())
    }

    /// The typed entry; a column that no version of the gateway writes is reported as corrupt.
    pub fn into_stored(self) -> Result<StoredEntry, AuditError> {
        let id = self.id;
        let corrupt = |field: &'static str| AuditError::Corrupt { id, field };
        let source = match self
            .source_type
            .parse::<SourceType>()
            .map_err(|()| corrupt("source_type"))?
        {
            SourceType::User => Source::User {
                admin: self.actor,
                surface: self
                    .surface
                    .as_deref()
                    .and_then(|s| s.parse::<Surface>().ok())
                    .ok_or_else(|| corrupt("surface"))?,
            },
            SourceType::Agent => Source::Agent {
                agent: self.actor,
                agent_type: self.agent_type,
                session: self.session,
                client: self.client_name.map(|name| ClientName {
                    name,
                    version: self.client_version,
                }),
            },
            SourceType::Vendor => Source::Vendor {
                feed: self.actor,
                url: self.source_url,
            },
            SourceType::System => Source::System {
                component: self.actor,
            },
        };
        let kind = self.kind.parse::<Kind>().map_err(|()| corrupt("kind"))?;
        let outcome = match (self.outcome.as_str(), self.code) {
            ("ok", None) => Outcome::Ok,
            ("error", Some(code)) => Outcome::Error(code),
            _ => return Err(corrupt("outcome")),
        };
        let tool = match self.tool_kind {
            Some(tool_kind) => Some(ToolCallInfo {
                tool_kind,
                capability: self.capability,
                duration_us: self
                    .duration_us
                    .and_then(|d| u64::try_from(d).ok())
                    .unwrap_or(0),
            }),
            None => None,
        };
        let at =
            DateTime::<Utc>::from_timestamp_millis(self.at_ms).ok_or_else(|| corrupt("at_ms"))?;
        Ok(StoredEntry {
            id: u64::try_from(id).map_err(|_| corrupt("id"))?,
            at,
            source,
            kind,
            project: self.project,
            subject: self.subject,
            agent: self.agent,
            change: Change {
                before: self.before_rev,
                after: self.after_rev,
                digest: self.digest,
            },
            outcome,
            tool,
            detail: self.detail,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

/// One recorded entry, as queries and exports return it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredEntry {
    /// Its position in the log (increasing by one, never reused).
    pub id: u64,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// Who acted.
    pub source: Source,
    /// What happened.
    pub kind: Kind,
    /// The project concerned.
    pub project: Option<String>,
    /// What was acted on (tool, secret, proposal, upstream).
    pub subject: Option<String>,
    /// The agent concerned.
    pub agent: Option<String>,
    /// What changed.
    pub change: Change,
    /// How it ended.
    pub outcome: Outcome,
    /// The tool-call part of a `tool_call` entry.
    pub tool: Option<ToolCallInfo>,
    /// A sentence the gateway wrote about it.
    pub detail: Option<String>,
    /// The previous entry's hash.
    pub prev_hash: String,
    /// This entry's hash (SHA-256, hex).
    pub hash: String,
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_is_covered_by_the_hash() {
        let e = Entry::user("alice", Surface::Cli, Kind::Approval)
            .project("demo")
            .change(Change::revisions("r1", "r2"));
        let row = Row::from_entry(&e, 7, 1_000, GENESIS);
        assert_eq!(row.hash, row.compute_hash());
        let mut edited = row.clone();
        edited.project = Some("other".into());
        assert_ne!(edited.compute_hash(), row.hash);
        let mut renumbered = row.clone();
        renumbered.id = 8;
        assert_ne!(renumbered.compute_hash(), row.hash);
        let mut relinked = row.clone();
        relinked.prev_hash = "1".repeat(64);
        assert_ne!(relinked.compute_hash(), row.hash);
    }

    #[test]
    fn rows_round_trip_to_typed_entries() {
        let e = Entry::agent("claude", Kind::Proposal)
            .agent_type("claude")
            .session("s-1")
            .client("claude-code", Some("2.1.0".into()))
            .project("demo")
            .outcome(Outcome::error("stale_revision"));
        let stored = Row::from_entry(&e, 1, 1_700_000_000_000, GENESIS)
            .into_stored()
            .expect("a row the gateway wrote reads back");
        assert_eq!(stored.source, e.source);
        assert_eq!(stored.kind, Kind::Proposal);
        assert_eq!(stored.agent.as_deref(), Some("claude"));
        assert_eq!(stored.outcome, Outcome::error("stale_revision"));
    }

    #[test]
    fn a_row_no_gateway_writes_is_corrupt() {
        let mut row = Row::from_entry(&Entry::system("audit", Kind::RetentionTrim), 3, 0, GENESIS);
        row.kind = "made_up".into();
        assert!(matches!(
            row.into_stored(),
            Err(AuditError::Corrupt {
                id: 3,
                field: "kind"
            })
        ));
    }

    #[test]
    fn hex_is_lower_case() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
    }
}
