//! The gateway's own tools, one module per group: [`projects`] (listing projects, reading
//! rules), [`proposals`] (proposing rule changes for review), [`scope`] (scope-expansion
//! tickets). Approving is never an agent tool: those names are registered refusals.

pub mod projects;
pub mod proposals;
pub mod scope;

use std::sync::Arc;

use bridle_rules::{RulesError, RulesErrorKind};
use kberg_core::{ClientInfo, ToolContext, ToolError, ToolOutput, ToolRegistry};

use crate::audit::{Entry, Kind, Outcome};
use crate::config::AgentConfig;
use crate::context::GatewayContext;
use crate::error::{GatewayError, RefusalCode, refusal, rules_refusal};

/// The refusal every approval-shaped tool name answers with.
pub const HUMAN_ONLY: &str = "Approving and rejecting are human decisions in Bridle, never agent tools. A person decides in the review queue (`bridle rules approve <id>` or `bridle rules reject <id>`).";

/// Registers every group of the gateway's own tools, and the refusals.
pub fn register_tools(tools: &ToolRegistry, ctx: &Arc<GatewayContext>) -> Result<(), GatewayError> {
    projects::register(tools, ctx)?;
    proposals::register(tools, ctx)?;
    scope::register(tools, ctx)?;
    for name in [
        "approve_proposal",
        "reject_proposal",
        "approve_scope_request",
    ] {
        tools.refuse(name, HUMAN_ONLY)?;
    }
    Ok(())
}

/// The most characters of the `session` an agent names in a proposal or a scope request.
pub const MAX_SESSION_CHARS: usize = 128;

/// The refusal (`proposal_rejected`) of the `session` an agent named, unless it is a short
/// token: 1 to [`MAX_SESSION_CHARS`] ASCII letters, digits, `-`, `_`, `.`, `:`, `/`, `+`, `=`
/// or `@` (a UUID, a ULID, a JWT-like id).
///
/// The session is stored with the proposal or the ticket, written to the audit log, and an
/// approved guardrail's provenance carries it into every agent's rendered rules (`proposed by
/// agent claude in session ...`), while the reviewer's one-line summary never shows it. A line
/// break in it would add headings and instructions of the agent's own to the rules other
/// agents read, and the proposal's size limit counts only the change, not the session.
pub(crate) fn session_refusal(session: Option<&str>) -> Option<ToolOutput> {
    let session = session?;
    let token = (1..=MAX_SESSION_CHARS).contains(&session.len())
        && session
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=@".contains(&b));
    (!token).then(|| {
        rules_refusal(&RulesError::Rejected(format!(
            "the session must be 1 to {MAX_SESSION_CHARS} ASCII letters, digits, `-`, `_`, `.`, `:`, `/`, `+`, `=` or `@` (it is recorded in the provenance other agents read); omit it if you have no such id"
        )))
    })
}

/// The refusal (`proposal_rejected`) of the first of `fields` (what it is, the text) that holds
/// a control character other than a line feed, a tab or the carriage return of a CRLF line
/// end, or a bidirectional-text control (U+202A to U+202E, U+2066 to U+2069), if any.
///
/// This is the free text an agent writes into a change (a statement, a description, the
/// overview, stack and conventions, a scope request's action and reason). A person reviews it
/// where a control character shows as a space or not at all (the queue's one-line summary, a
/// page), or where a terminal acts on it (`bridle scope list`), while every agent's rendered
/// rules would hold it as sent; a bidirectional control makes the reviewer read another order
/// of words than the one an agent is given.
pub(crate) fn text_refusal<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<ToolOutput> {
    let hidden = |text: &str| {
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            let line_end = c == '\r' && chars.peek() == Some(&'\n');
            let shown = matches!(c, '\n' | '\t') || line_end;
            if (c.is_control() && !shown) || bridle_rules::is_bidi_control(c) {
                return Some(c);
            }
        }
        None
    };
    let (what, c) = fields
        .into_iter()
        .find_map(|(what, text)| hidden(text).map(|c| (what, c)))?;
    Some(rules_refusal(&RulesError::Rejected(format!(
        "{what} holds the control character U+{:04X}: free text may hold line feeds and tabs, but no other control character and no bidirectional-text control (a reviewer would not see it, the rules every agent reads would hold it)",
        u32::from(c)
    ))))
}

/// The refusal (`proposal_rejected`) of the first of `fields` (what it is, the text) that holds
/// a Unicode tag character (U+E0000 to U+E007F), if any.
///
/// Tag characters mirror ASCII but show nothing: the review queue, a page and a terminal show
/// the text around them, while a model reading the rules reads them as the letters they stand
/// for. An instruction written in them would be approved unseen into every agent's rules, so
/// nothing an agent proposes may hold one: its free text ([`text_refusal`]'s fields), a
/// pattern's name or an example's reference tag.
pub(crate) fn tag_refusal<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<ToolOutput> {
    let (what, c) = fields.into_iter().find_map(|(what, text)| {
        text.chars()
            .find(|&c| bridle_rules::is_tag_character(c))
            .map(|c| (what, c))
    })?;
    Some(rules_refusal(&RulesError::Rejected(format!(
        "{what} holds the Unicode tag character U+{:04X}: tag characters are invisible to the person who reviews a change while the models that read the rules read them as text, so nothing an agent proposes may hold one",
        u32::from(c)
    ))))
}

/// An agent's attempt at a change (a proposal, a scope request), kept to record its refusal.
///
/// The gate records every call, but a refusal the tool answers itself (a project the agent is
/// not configured for, rules that do not let its type act there, a field the store refuses)
/// is a result to the gate: its `tool_call` entry says `ok` and names no project. So the tool
/// records the refused change as an `agent` entry of its kind whose outcome is the refusal's
/// code, queued like a tool call (a flood of refusals never waits on the log). It holds only
/// what the gateway records of an accepted change: the project when it is a valid project
/// name, the session when [`session_refusal`] accepts it.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    agent: String,
    agent_type: Option<String>,
    session: Option<String>,
    client: Option<ClientInfo>,
    kind: Kind,
    project: String,
}

impl Attempt {
    /// The caller's attempt at a change of `kind` in `project`, naming `session`.
    pub(crate) fn new(ctx: &ToolContext, kind: Kind, project: &str, session: Option<&str>) -> Self {
        let principal = ctx.caller().principal();
        Self {
            agent: principal.id.clone(),
            agent_type: principal.agent.clone(),
            session: session
                .filter(|s| session_refusal(Some(s)).is_none())
                .map(str::to_string),
            client: ctx.client().cloned(),
            kind,
            project: project.to_string(),
        }
    }

    /// Returns `out`, recorded in the audit log first when it is a refusal.
    pub(crate) fn answer(&self, gw: &GatewayContext, out: ToolOutput) -> ToolOutput {
        if !out.is_error {
            return out;
        }
        let code = out
            .structured
            .as_ref()
            .and_then(|s| s["code"].as_str())
            .unwrap_or(RefusalCode::Internal.as_str());
        let mut entry = Entry::agent(self.agent.as_str(), self.kind).outcome(Outcome::error(code));
        if let Some(t) = &self.agent_type {
            entry = entry.agent_type(t.as_str());
        }
        if let Some(s) = &self.session {
            entry = entry.session(s.as_str());
        }
        if let Some(c) = &self.client {
            entry = entry.client(c.name.clone(), Some(c.version.clone()));
        }
        if bridle_rules::check_name("project", &self.project).is_ok() {
            entry = entry.project(self.project.as_str());
        }
        if let Some(log) = gw.audit() {
            // A full queue is counted and reported by the log.
            let _ = log.record_tool_call(entry);
        }
        out
    }
}

/// The refusal an agent gets for the rules store's error `e`: its stable code in the one
/// refusal shape ([`rules_refusal`]), with the store's own words when they are about the
/// agent's request (an unknown project, a conflict, a refused change, a name), and a plain
/// sentence when the store itself failed (a document that does not parse or breaks the
/// format, a file, the database, a template).
///
/// The store's words for its own failures are the operator's: they name the document's file
/// under the data directory, the database's own error text. They are logged here, in full,
/// and never told to an agent (as the admin API keeps them from its answers).
pub(crate) fn store_refusal(e: &RulesError) -> ToolOutput {
    if agent_facing(e) {
        return rules_refusal(e);
    }
    tracing::error!(error = ?e.to_string(), code = e.code(), "the rules store failed under an agent's call");
    shaped_store_failure(e)
}

/// Whether `e`'s message is about the agent's own request, and safe to tell it: the store's
/// one classification ([`RulesError::kind`]), shared with the admin API.
///
/// A document's errors ([`RulesErrorKind::Document`]) are never the agent's: agents submit
/// no document, so the one that fails is a stored one, named by its file under the data
/// directory.
pub(crate) fn agent_facing(e: &RulesError) -> bool {
    matches!(e.kind(), RulesErrorKind::Request)
}

/// The sentence an agent gets for a failure of the store itself (see [`store_refusal`]).
pub(crate) fn store_failure_message(e: &RulesError) -> String {
    format!(
        "the gateway's rules store failed ({}); an operator finds the details in the gateway's log",
        e.code()
    )
}

fn shaped_store_failure(e: &RulesError) -> ToolOutput {
    let message = store_failure_message(e);
    ToolOutput::error_with(
        message.clone(),
        serde_json::json!({"code": e.code(), "message": message, "retryable": false}),
    )
}

/// Runs blocking store work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::failed(crate::error::task_failed("the tool's store work", &e)))
}

/// The calling agent's configuration, and whether it may use `project`.
pub(crate) fn caller_agent(
    gw: &GatewayContext,
    ctx: &ToolContext,
    project: &str,
) -> Result<(String, AgentConfig), ToolOutput> {
    let name = ctx.caller().principal().id.clone();
    if let Some(client) = ctx.client() {
        gw.sessions.saw_client(&name, client);
    }
    let Some(agent) = gw.agent(&name) else {
        return Err(refusal(
            RefusalCode::UnknownAgent,
            format!("`{name}` is not a configured agent"),
        ));
    };
    if !agent.may_use(project) {
        return Err(refusal(
            RefusalCode::ProjectNotAllowed,
            format!("agent `{name}` is not configured for project `{project}`"),
        ));
    }
    Ok((name, agent))
}
