//! What one audit entry says: who acted ([`Source`]), what kind of thing happened ([`Kind`]),
//! what changed and how it ended, built with [`Entry`]'s per-source constructors.
//!
//! An entry never carries argument values or secret values: tool calls keep the tool, its kind,
//! capability, outcome and duration plus kberg-core's argument digest (SHA-256 of the arguments
//! after the tool's sensitive fields are redacted), and changes keep revisions or digests. The
//! free-text [`Entry::detail`] is for sentences the gateway writes itself (a rejection reason,
//! "removed 120 entries"), never for values that came from a request.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;

/// Through which admin surface a person acted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Surface {
    /// The web panel.
    Panel,
    /// The admin HTTP API called directly.
    Api,
    /// The `bridle` command line.
    Cli,
}

impl Surface {
    /// The stable string form (`panel`, `api`, `cli`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Surface::Panel => "panel",
            Surface::Api => "api",
            Surface::Cli => "cli",
        }
    }
}

impl FromStr for Surface {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "panel" => Ok(Surface::Panel),
            "api" => Ok(Surface::Api),
            "cli" => Ok(Surface::Cli),
            _ => Err(()),
        }
    }
}

/// The client an agent connected with, as it named itself (`clientInfo`): recorded beside the
/// agent, never trusted for anything.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ClientName {
    /// The client's name (`claude-code`, `codex-cli`, ...).
    pub name: String,
    /// The client's version.
    pub version: Option<String>,
}

/// Who acted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Source {
    /// A person (an admin), through one of the admin surfaces.
    User {
        /// The admin's name.
        admin: String,
        /// Through which surface.
        surface: Surface,
    },
    /// A connected agent.
    Agent {
        /// The agent's name (its principal id).
        agent: String,
        /// The agent type (`claude`, `codex`, ...), when known.
        agent_type: Option<String>,
        /// The MCP session, when known.
        session: Option<String>,
        /// The client it connected with, when known.
        client: Option<ClientName>,
    },
    /// A vendor feed (a sourcing run bringing in rules or patterns).
    Vendor {
        /// The feed's name.
        feed: String,
        /// The URL the material came from.
        url: Option<String>,
    },
    /// The gateway itself (retention, lost entries, upstream health, ...).
    System {
        /// The part of the gateway that acted (`audit`, `upstreams`, ...).
        component: String,
    },
}

impl Source {
    /// The source type as stored: `user`, `agent`, `vendor` or `system`.
    pub fn source_type(&self) -> SourceType {
        match self {
            Source::User { .. } => SourceType::User,
            Source::Agent { .. } => SourceType::Agent,
            Source::Vendor { .. } => SourceType::Vendor,
            Source::System { .. } => SourceType::System,
        }
    }

    /// Who acted, by name: the admin, the agent, the feed or the component.
    pub fn actor(&self) -> &str {
        match self {
            Source::User { admin, .. } => admin,
            Source::Agent { agent, .. } => agent,
            Source::Vendor { feed, .. } => feed,
            Source::System { component } => component,
        }
    }
}

/// The four kinds of [`Source`], for filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceType {
    /// [`Source::User`].
    User,
    /// [`Source::Agent`].
    Agent,
    /// [`Source::Vendor`].
    Vendor,
    /// [`Source::System`].
    System,
}

impl SourceType {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            SourceType::User => "user",
            SourceType::Agent => "agent",
            SourceType::Vendor => "vendor",
            SourceType::System => "system",
        }
    }
}

impl FromStr for SourceType {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "user" => Ok(SourceType::User),
            "agent" => Ok(SourceType::Agent),
            "vendor" => Ok(SourceType::Vendor),
            "system" => Ok(SourceType::System),
            _ => Err(()),
        }
    }
}

macro_rules! kinds {
    ($( $(#[$doc:meta])* $variant:ident => $s:literal, )*) => {
        /// What happened. The string form ([`Kind::as_str`]) is stored and is the contract.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
        #[serde(rename_all = "snake_case")]
        #[non_exhaustive]
        pub enum Kind {
            $( $(#[$doc])* $variant, )*
        }

        impl Kind {
            /// Every kind, in declaration order.
            pub const ALL: &'static [Kind] = &[$(Kind::$variant,)*];

            /// The stable string form.
            pub const fn as_str(self) -> &'static str {
                match self { $( Kind::$variant => $s, )* }
            }
        }

        impl FromStr for Kind {
            type Err = ();
            fn from_str(s: &str) -> Result<Self, ()> {
                match s { $( $s => Ok(Kind::$variant), )* _ => Err(()) }
            }
        }
    };
}

kinds! {
    /// A tool call that reached the gate, refused or run.
    ToolCall => "tool_call",
    /// A project's rules document replaced or edited.
    RulesChange => "rules_change",
    /// A change proposed for review (by an agent or a vendor feed).
    Proposal => "proposal",
    /// A proposal or ticket approved.
    Approval => "approval",
    /// A proposal or ticket rejected or denied.
    Rejection => "rejection",
    /// A scope ticket opened.
    ScopeRequest => "scope_request",
    /// A secret created or imported.
    SecretCreate => "secret_create",
    /// A secret rotated to a new version.
    SecretRotate => "secret_rotate",
    /// A secret version revoked (destroyed).
    SecretRevoke => "secret_revoke",
    /// A secret injected into an upstream request.
    SecretUse => "secret_use",
    /// An agent created.
    AgentCreate => "agent_create",
    /// An agent's type or projects changed.
    AgentUpdate => "agent_update",
    /// An agent's token rotated.
    AgentRotate => "agent_rotate",
    /// An agent's token revoked.
    AgentRevoke => "agent_revoke",
    /// An agent deleted (its tokens revoked, its sessions ended).
    AgentDelete => "agent_delete",
    /// A session ended by an operator.
    SessionEnd => "session_end",
    /// An upstream added, removed, enabled, disabled or remapped.
    UpstreamChange => "upstream_change",
    /// A pattern or example repository added, removed or reindexed.
    PatternChange => "pattern_change",
    /// Memory purged.
    MemoryPurge => "memory_purge",
    /// Session memories embedded again by the configured embedding model.
    MemoryReembed => "memory_reembed",
    /// A vendor sourcing run.
    SourcingRun => "sourcing_run",
    /// Old entries removed by retention (the entry says how many and through which id).
    RetentionTrim => "retention_trim",
    /// Tool-call entries that could not be recorded (the entry says how many and why).
    EntriesLost => "entries_lost",
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the recorded action ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "status", content = "code", rename_all = "snake_case")]
pub enum Outcome {
    /// It succeeded.
    Ok,
    /// It failed or was refused, with its stable code.
    Error(String),
}

impl Outcome {
    /// A failure with a stable code (`capability_required`, `stale_revision`, ...).
    pub fn error(code: impl Into<String>) -> Self {
        Outcome::Error(code.into())
    }
}

/// What changed: the revisions before and after, or a digest of the content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Change {
    /// The revision before the change.
    pub before: Option<String>,
    /// The revision after the change.
    pub after: Option<String>,
    /// A digest (or fingerprint) of what changed, never the content itself.
    pub digest: Option<String>,
}

impl Change {
    /// A change from revision `before` to revision `after`.
    pub fn revisions(before: impl Into<String>, after: impl Into<String>) -> Self {
        Change {
            before: Some(before.into()),
            after: Some(after.into()),
            digest: None,
        }
    }

    /// A change known by a digest or fingerprint of its content.
    pub fn digest(digest: impl Into<String>) -> Self {
        Change {
            digest: Some(digest.into()),
            ..Change::default()
        }
    }
}

/// The tool-call part of a `tool_call` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ToolCallInfo {
    /// `read`, `write` or `unknown`.
    pub tool_kind: String,
    /// The capability of a write tool.
    pub capability: Option<String>,
    /// Time spent in the gate, tool included, in microseconds.
    pub duration_us: u64,
}

/// One entry to record, before it has an id, a time and a place in the chain.
///
/// Start from the constructor of its source ([`Entry::user`], [`Entry::agent`],
/// [`Entry::vendor`], [`Entry::system`] or [`Entry::tool_call`]) and add what applies:
///
/// ```
/// use bridle_gateway::audit::{Change, Entry, Kind, Surface};
///
/// let entry = Entry::user("alice", Surface::Api, Kind::Approval)
///     .project("demo")
///     .subject("proposal #12")
///     .change(Change::revisions("r7", "r8"));
/// assert_eq!(entry.kind(), Kind::Approval);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    pub(crate) source: Source,
    pub(crate) kind: Kind,
    pub(crate) project: Option<String>,
    pub(crate) subject: Option<String>,
    pub(crate) agent: Option<String>,
    pub(crate) change: Change,
    pub(crate) outcome: Outcome,
    pub(crate) tool: Option<ToolCallInfo>,
    pub(crate) detail: Option<String>,
}

impl Entry {
    /// An entry of any source.
    pub fn new(source: Source, kind: Kind) -> Self {
        let agent = match &source {
            Source::Agent { agent, .. } => Some(agent.clone()),
            _ => None,
        };
        Entry {
            source,
            kind,
            project: None,
            subject: None,
            agent,
            change: Change::default(),
            outcome: Outcome::Ok,
            tool: None,
            detail: None,
        }
    }

    /// An admin's action through `surface`.
    pub fn user(admin: impl Into<String>, surface: Surface, kind: Kind) -> Self {
        Entry::new(
            Source::User {
                admin: admin.into(),
                surface,
            },
            kind,
        )
    }

    /// An agent's action; add its type, session and client with [`Entry::agent_type`],
    /// [`Entry::session`] and [`Entry::client`].
    pub fn agent(agent: impl Into<String>, kind: Kind) -> Self {
        Entry::new(
            Source::Agent {
                agent: agent.into(),
                agent_type: None,
                session: None,
                client: None,
            },
            kind,
        )
    }

    /// An action of a vendor feed, with the URL the material came from.
    pub fn vendor(feed: impl Into<String>, url: Option<String>, kind: Kind) -> Self {
        Entry::new(
            Source::Vendor {
                feed: feed.into(),
                url,
            },
            kind,
        )
    }

    /// An action of the gateway itself.
    pub fn system(component: impl Into<String>, kind: Kind) -> Self {
        Entry::new(
            Source::System {
                component: component.into(),
            },
            kind,
        )
    }

    /// A tool call by `agent`: the tool, its kind (`read`, `write`, `unknown`), capability,
    /// outcome and duration. Argument values never go in; add the redacted argument digest with
    /// [`Entry::change`] ([`Change::digest`]) if wanted.
    pub fn tool_call(
        agent: impl Into<String>,
        tool: impl Into<String>,
        tool_kind: impl Into<String>,
        capability: Option<String>,
        outcome: Outcome,
        duration: Duration,
    ) -> Self {
        let mut e = Entry::agent(agent, Kind::ToolCall).subject(tool);
        e.tool = Some(ToolCallInfo {
            tool_kind: tool_kind.into(),
            capability,
            duration_us: u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
        });
        e.outcome = outcome;
        e
    }

    /// The use of a secret injected into an upstream request on `agent`'s behalf: the secret's
    /// name and version as the subject, the upstream and request id in the detail, and the
    /// value only as its keyed fingerprint (never the value). A call-path entry: queue it with
    /// [`crate::audit::AuditLog::record_tool_call`].
    pub fn secret_use(
        agent: impl Into<String>,
        secret: &str,
        version: u64,
        upstream: &str,
        request_id: &str,
        fingerprint: Option<String>,
    ) -> Self {
        let mut e = Entry::agent(agent, Kind::SecretUse)
            .subject(format!("{secret} v{version}"))
            .detail(format!(
                "injected into upstream {upstream}, request {request_id}"
            ));
        if let Some(f) = fingerprint {
            e = e.change(Change::digest(f));
        }
        e
    }

    /// The agent type of an agent source (ignored for other sources).
    pub fn agent_type(mut self, agent_type: impl Into<String>) -> Self {
        if let Source::Agent { agent_type: t, .. } = &mut self.source {
            *t = Some(agent_type.into());
        }
        self
    }

    /// The MCP session of an agent source (ignored for other sources).
    pub fn session(mut self, session: impl Into<String>) -> Self {
        if let Source::Agent { session: s, .. } = &mut self.source {
            *s = Some(session.into());
        }
        self
    }

    /// The client an agent source connected with (ignored for other sources).
    pub fn client(mut self, name: impl Into<String>, version: Option<String>) -> Self {
        if let Source::Agent { client, .. } = &mut self.source {
            *client = Some(ClientName {
                name: name.into(),
                version,
            });
        }
        self
    }

    /// The project concerned.
    pub fn project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// What was acted on: a tool name, a secret name, a proposal id, an upstream.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// The agent concerned when the actor is someone else (an admin creating an agent); for an
    /// agent source it is the agent itself, set by the constructor.
    pub fn about_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    /// What changed.
    pub fn change(mut self, change: Change) -> Self {
        self.change = change;
        self
    }

    /// How it ended (default [`Outcome::Ok`]).
    pub fn outcome(mut self, outcome: Outcome) -> Self {
        self.outcome = outcome;
        self
    }

    /// A sentence the gateway writes about the action (a rejection reason, a count). Never a
    /// value taken from a request or a secret.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// The entry's source.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The entry's kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }
}
