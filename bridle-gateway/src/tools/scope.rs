//! Scope tickets: `request_scope_approval` opens one under `scope.request` (a hard-instruction
//! guardrail asks an agent to check in before expanding its task) and `scope_status` reads the
//! decision. Tickets are private to the agent that opened them.

use std::sync::Arc;

use bridle_rules::capabilities;
use kberg_core::{ClientInfo, ToolBuilder, ToolOutput, ToolRegistry, WriteCapability};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{
    Attempt, blocking, caller_agent, session_refusal, store_refusal, tag_refusal, text_refusal,
};
use crate::audit::Kind;
use crate::config::AgentConfig;
use crate::context::GatewayContext;
use crate::error::{GatewayError, NamedRefusals, RefusalCode, refusal};

#[derive(Debug, Deserialize, JsonSchema)]
struct ScopeArgs {
    /// The project id.
    project: String,
    /// What you want to do beyond the task you were given.
    action: String,
    /// Why it is needed.
    reason: String,
    /// Your session id (optional).
    #[serde(default)]
    session: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct TicketArgs {
    /// The ticket id `request_scope_approval` returned.
    ticket: u64,
}

/// Registers `request_scope_approval` and `scope_status`.
pub fn register(tools: &ToolRegistry, ctx: &Arc<GatewayContext>) -> Result<(), GatewayError> {
    let scope_cap = WriteCapability::new(
        capabilities::SCOPE_REQUEST,
        "Ask a person to approve expanding the scope of a task",
    );
    tools.declare(scope_cap.clone())?;

    let s = Arc::clone(ctx);
    tools.register(NamedRefusals::new(
        ToolBuilder::new("request_scope_approval")
            .description("Before expanding the scope of your task (a hard-instruction guardrail asks for this), ask a person to approve. Returns a ticket; check it with scope_status and wait for `approved`.")
            .write(scope_cap)
            .small_model_safe()
            .handler(move |a: ScopeArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let attempt =
                        Attempt::new(&ctx, Kind::ScopeRequest, &a.project, a.session.as_deref());
                    let (name, agent) = match caller_agent(&s, &ctx, &a.project) {
                        Ok(x) => x,
                        Err(out) => return Ok(attempt.answer(&s, out)),
                    };
                    let client = ctx.client().cloned();
                    blocking(move || {
                        let out = open_ticket(&s, &a, &name, &agent, client.as_ref());
                        attempt.answer(&s, out)
                    })
                    .await
                }
            }),
    ))?;

    let s = Arc::clone(ctx);
    tools.register(NamedRefusals::new(
        ToolBuilder::new("scope_status")
            .description("Check the decision on a scope ticket you opened.")
            .small_model_safe()
            .handler(move |a: TicketArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let name = ctx.caller().principal().id.clone();
                    blocking(move || match s.store.scope_ticket(a.ticket) {
                        Ok(t) if t.agent == name => ToolOutput::text(format!(
                            "Scope ticket #{} is {}{}.",
                            t.id,
                            t.status,
                            t.note.as_deref().map(|n| format!(": {n}")).unwrap_or_default()
                        ))
                        .with_structured(json!({"ticket": t.id, "status": t.status, "note": t.note, "decided_by": t.decided_by})),
                        // Another agent's ticket is reported as missing: ids are not secrets, but
                        // tickets are private to the agent that opened them.
                        Ok(_) => refusal(RefusalCode::NotFound, format!("unknown scope ticket `{}`", a.ticket)),
                        Err(e) => store_refusal(&e),
                    })
                    .await
                }
            }),
    ))?;
    Ok(())
}

/// `request_scope_approval`'s store work: the project's permission, the session, the ticket
/// and the audit.
fn open_ticket(
    s: &GatewayContext,
    a: &ScopeArgs,
    name: &str,
    agent: &AgentConfig,
    client: Option<&ClientInfo>,
) -> ToolOutput {
    match s.store.load_shared(&a.project) {
        Ok(l) if !l.document.permissions_of(&agent.agent_type).scope.request => {
            return refusal(
                RefusalCode::CapabilityRequired,
                format!(
                    "agent type `{}` may not request scope approval in project `{}`",
                    agent.agent_type, a.project
                ),
            );
        }
        Ok(_) => {}
        Err(e) => return store_refusal(&e),
    }
    let free_text = [
        ("the action", a.action.as_str()),
        ("the reason", a.reason.as_str()),
    ];
    if let Some(refused) = session_refusal(a.session.as_deref())
        .or_else(|| text_refusal(free_text))
        .or_else(|| tag_refusal(free_text))
    {
        return refused;
    }
    match s
        .store
        .request_scope(&a.project, name, a.session.as_deref(), &a.action, &a.reason)
    {
        Ok(t) => {
            let entry = crate::audit::agent_entry(
                name,
                &agent.agent_type,
                a.session.as_deref(),
                client,
                Kind::ScopeRequest,
            )
            .project(&a.project)
            .subject(format!("scope ticket #{}", t.id));
            // The ticket is open; a failed record is logged by record_change.
            let _ = s.record_change(entry);
            ToolOutput::text(format!(
                "Scope ticket #{} is pending. Wait for a person to decide (check with scope_status); do not proceed until it is approved.",
                t.id
            ))
            .with_structured(json!({"ticket": t.id, "status": t.status}))
        }
        Err(e) => store_refusal(&e),
    }
}
