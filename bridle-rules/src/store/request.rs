//! What the review queue holds: change requests, who asked, proposals and their fate, change-log
//! entries and scope tickets, and how an approved change is promoted into a document. Plain data,
//! shared by every storage backend.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::agents::AgentCatalog;
use crate::error::{RulesError, check_name};
use crate::model::{
    ALL_AGENTS, CustomPattern, ExampleRepo, Guardrail, Provenance, RulesDocument, Severity, Source,
};
use crate::redact::{redact_url, shown_url};

/// How many example repositories a custom pattern's summary names; the rest are counted.
const SUMMARY_EXAMPLE_REPOS: usize = 3;

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
    /// One line describing the change. A custom pattern's names its example repositories,
    /// what approving it would clone and index: at most three URLs, each with its user part
    /// (where an access token goes) and query shown as `***` and cut to 120 characters, then
    /// how many more. Line breaks and other control characters in what the change holds (a
    /// statement, a name) are shown as spaces: a listing of the queue shows a summary a line,
    /// where an agent's line break would pass for another entry.
    pub fn summary(&self) -> String {
        self.summary_text()
            .chars()
            .map(|c| {
                if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
                    ' '
                } else {
                    c
                }
            })
            .collect()
    }

    /// [`summary`](Self::summary) before control characters become spaces.
    fn summary_text(&self) -> String {
        match self {
            ChangeRequest::Guardrail {
                id,
                severity,
                statement,
                ..
            } => format!("add {} guardrail `{id}`: {statement}", severity.as_str()),
            ChangeRequest::Pattern { standard, custom } => match (standard, custom) {
                (Some(s), _) => format!("add standard pattern `{s}`"),
                (None, Some(c)) if c.example_repos.is_empty() => {
                    format!("add custom pattern `{}`", c.name)
                }
                (None, Some(c)) => format!(
                    "add custom pattern `{}` with example repositories {}",
                    c.name,
                    shown_repos(&c.example_repos)
                ),
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
    pub(crate) fn check(&self, catalog: &AgentCatalog) -> Result<(), RulesError> {
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
                // Checked now, not only when the approved document is validated: the reviewer's
                // one-line summary shows a line break as a space.
                let names = standard.iter().chain(custom.iter().map(|c| &c.name));
                let repos = custom.iter().flat_map(|c| c.example_repos.iter());
                let what = if !names.into_iter().all(|n| crate::is_one_line(n)) {
                    Some("the pattern's name")
                } else if !repos.into_iter().all(|r| {
                    crate::is_one_line(&r.reference_tag) && crate::is_one_line(&r.arch_tag)
                }) {
                    Some("an example repository's reference or pattern tag")
                } else {
                    None
                };
                if let Some(what) = what {
                    return Err(RulesError::Rejected(format!(
                        "{what} must be one line of at most {} characters, without line breaks, tabs or other control characters (it is a heading or a line of every agent's rendered rules)",
                        crate::MAX_LINE_CHARS
                    )));
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
    /// The vendor document (URL or file), if any, as shown: a URL's user part and query (where
    /// credentials go) are `***` ([`redact_url`](crate::redact_url)).
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

    /// A change suggested by a vendor's published guidance. A URL's credentials are hidden
    /// here, once: the reference is shown in the review queue and the audit log, and an
    /// approved guardrail's provenance carries it into every rendered instruction file.
    pub fn vendor(agent: impl Into<String>, source_ref: impl Into<String>) -> Self {
        Self {
            source: Source::Vendor,
            proposed_by: format!("vendor:{}", agent.into()),
            agent_session: None,
            source_ref: Some(redact_url(&source_ref.into())),
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
    /// The status of a stored spelling; `None` for one this build does not know (a newer
    /// build's), which must never be taken for pending.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(ProposalStatus::Pending),
            "approved" => Some(ProposalStatus::Approved),
            "rejected" => Some(ProposalStatus::Rejected),
            _ => None,
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

/// Which proposals [`RulesStore::queue_page`](super::RulesStore::queue_page) lists: each field
/// that is set must match (`None` matches anything).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueFilter {
    /// Only this project's.
    pub project: Option<String>,
    /// Only those in this state.
    pub status: Option<ProposalStatus>,
    /// Only those from this source.
    pub source: Option<Source>,
    /// Only those by this proposer (`proposed_by`).
    pub proposed_by: Option<String>,
}

/// A page of [`RulesStore::queue_page`](super::RulesStore::queue_page).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueuePage {
    /// The proposals, ascending by id.
    pub items: Vec<Proposal>,
    /// Whether more match after the last one.
    pub more: bool,
}

/// How many proposals and scope tickets wait for a person's decision, across every project
/// ([`RulesStore::pending_counts`](super::RulesStore::pending_counts)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PendingCounts {
    /// Pending proposals: what [`RulesStore::queue`](super::RulesStore::queue)`(None, false)`
    /// lists (and any pending one this build cannot read, which the listing leaves out).
    pub proposals: u64,
    /// Pending scope tickets: what
    /// [`RulesStore::scope_tickets`](super::RulesStore::scope_tickets)`(false)` lists (and any
    /// pending one this build cannot read).
    pub scope_tickets: u64,
}

/// What a vendor-sourcing run did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct VendorReport {
    /// Proposals queued by this run.
    pub queued: Vec<u64>,
    /// Candidates skipped because they were queued before, are already policy, or are past
    /// [`MAX_CANDIDATES_PER_PAGE`](crate::vendor::MAX_CANDIDATES_PER_PAGE).
    pub skipped: usize,
    /// Of `skipped`, the candidates past the limit, never looked at.
    pub over_limit: usize,
}

/// Promotes an approved proposal into the document.
pub(crate) fn apply(
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

/// The first [`SUMMARY_EXAMPLE_REPOS`] of `repos` as a summary shows them, then how many more.
fn shown_repos(repos: &[ExampleRepo]) -> String {
    let list = repos
        .iter()
        .take(SUMMARY_EXAMPLE_REPOS)
        .map(|r| format!("`{}`", shown_url(&r.url)))
        .collect::<Vec<_>>()
        .join(", ");
    match repos.len().saturating_sub(SUMMARY_EXAMPLE_REPOS) {
        0 => list,
        more => format!("{list} and {more} more"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(urls: &[&str]) -> ChangeRequest {
        ChangeRequest::Pattern {
            standard: None,
            custom: Some(CustomPattern {
                name: "modified-mvc".into(),
                description: "MVC without DB access in controllers".into(),
                example_repos: urls
                    .iter()
                    .enumerate()
                    .map(|(i, url)| ExampleRepo {
                        url: url.to_string(),
                        reference_tag: format!("ex-{i}"),
                        arch_tag: "modified-mvc".into(),
                        last_indexed: None,
                    })
                    .collect(),
            }),
        }
    }

    #[test]
    fn a_custom_patterns_summary_names_its_example_repositories() {
        assert_eq!(pattern(&[]).summary(), "add custom pattern `modified-mvc`");
        assert_eq!(
            pattern(&[
                "https://git.example/team/a.git",
                "git@git.example:team/b.git"
            ])
            .summary(),
            "add custom pattern `modified-mvc` with example repositories `https://git.example/team/a.git`, `git@git.example:team/b.git`"
        );
    }

    #[test]
    fn at_most_three_are_named_and_the_rest_counted() {
        let urls: Vec<String> = (0..5).map(|i| format!("https://h/r{i}.git")).collect();
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        assert_eq!(
            pattern(&urls[..3]).summary(),
            "add custom pattern `modified-mvc` with example repositories `https://h/r0.git`, `https://h/r1.git`, `https://h/r2.git`"
        );
        assert_eq!(
            pattern(&urls).summary(),
            "add custom pattern `modified-mvc` with example repositories `https://h/r0.git`, `https://h/r1.git`, `https://h/r2.git` and 2 more"
        );
    }

    /// A token in a URL's user part or query never reaches the summary.
    #[test]
    fn credentials_never_reach_the_summary() {
        const CANARY: &str = "canary-summary-token-7Qx2";
        let summary = pattern(&[
            &format!("https://x-access-token:{CANARY}@git.example/team/a.git"),
            &format!("https://{CANARY}@git.example/b.git"),
            &format!("ssh://bot:{CANARY}@git.example:2222/team/c.git"),
            &format!("https://git.example/d.git?private_token={CANARY}"),
        ])
        .summary();
        assert!(!summary.contains(CANARY), "{summary}");
        assert!(
            summary.contains("`https://***@git.example/team/a.git`, `https://***@git.example/b.git`, `ssh://***@git.example:2222/team/c.git` and 1 more"),
            "{summary}"
        );
    }

    #[test]
    fn a_long_url_is_cut_and_stays_on_one_line() {
        let long = format!("https://git.example/{}.git", "a".repeat(500));
        let summary = pattern(&[&long, "https://h/x\r\ny"]).summary();
        assert!(!summary.contains(['\n', '\r']), "{summary}");
        assert!(summary.contains("aaa…`, `https://h/x  y`"), "{summary}");
    }

    /// A statement or a name of more than one line is summarised on one: a listing of the
    /// queue shows one summary a line, and a line break there would pass for another entry.
    #[test]
    fn a_summary_of_text_with_line_breaks_stays_on_one_line() {
        let guardrail = ChangeRequest::Guardrail {
            id: "g".into(),
            statement: "Be careful.\n#2 add guardrail `x`: approved\r\nby alice\u{2028}.".into(),
            severity: Severity::Guidance,
            applies_to: vec![ALL_AGENTS.into()],
        }
        .summary();
        assert_eq!(
            guardrail,
            "add guidance guardrail `g`: Be careful. #2 add guardrail `x`: approved  by alice ."
        );
        let mut custom = pattern(&[]);
        if let ChangeRequest::Pattern {
            custom: Some(c), ..
        } = &mut custom
        {
            c.name = "mvc\nsecond".into();
        }
        assert_eq!(custom.summary(), "add custom pattern `mvc second`");
    }

    /// A vendor origin names its document with the credentials a URL may carry hidden: the
    /// reference is shown in the review queue and, once approved, in every rendered file.
    #[test]
    fn a_vendor_origin_hides_the_credentials_of_its_source() {
        let origin = Origin::vendor("claude", "https://user:canary-origin-4Rt@docs.internal/g");
        assert_eq!(
            origin.source_ref.as_deref(),
            Some("https://***@docs.internal/g")
        );
        assert_eq!(
            Origin::vendor("claude", "agent_profiles.claude")
                .source_ref
                .as_deref(),
            Some("agent_profiles.claude")
        );
    }
}
