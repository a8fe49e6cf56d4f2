//! The gateway's own tools, one module per group: [`projects`] (listing projects, reading
//! rules), [`proposals`] (proposing rule changes for review), [`scope`] (scope-expansion
//! tickets). Approving is never an agent tool: those names are registered refusals.

pub mod projects;
pub mod proposals;
pub mod scope;

use std::sync::Arc;

use bridle_rules::RulesError;
use kberg_core::{ToolContext, ToolError, ToolOutput, ToolRegistry};

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
