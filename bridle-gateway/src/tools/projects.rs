//! Reading: `list_projects` (the projects an agent may use, with their revision and rules
//! resource) and `get_rules` (a project's full rules rendered for the agent's type).

use std::sync::Arc;

use kberg_core::{ToolBuilder, ToolOutput, ToolRegistry};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{blocking, caller_agent, store_refusal};
use crate::context::{GatewayContext, rendering_type};
use crate::error::{GatewayError, NamedRefusals, RefusalCode, refusal};
use crate::resources::rules_uri;

#[derive(Debug, Deserialize, JsonSchema)]
struct GetRulesArgs {
    /// The project id (see `list_projects`).
    project: String,
    /// Render for another agent type than your own (optional).
    #[serde(default)]
    agent: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

/// Registers `list_projects` and `get_rules`.
pub fn register(tools: &ToolRegistry, ctx: &Arc<GatewayContext>) -> Result<(), GatewayError> {
    let s = Arc::clone(ctx);
    tools.register(NamedRefusals::new(
        ToolBuilder::new("list_projects")
            .description("List the projects you may use, with their current rules revision.")
            .small_model_safe()
            .handler(move |_a: NoArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let name = ctx.caller().principal().id.clone();
                    if let Some(client) = ctx.client() {
                        s.sessions.saw_client(&name, client);
                    }
                    blocking(move || {
                        let Some(agent) = s.agent(&name) else {
                            return refusal(RefusalCode::UnknownAgent, format!("`{name}` is not a configured agent"));
                        };
                        let projects = match s.store.projects() {
                            Ok(p) => p,
                            Err(e) => return store_refusal(&e),
                        };
                        let list: Vec<_> = projects
                            .into_iter()
                            .filter(|p| agent.may_use(p))
                            .map(|p| {
                                let rev = s.store.load_shared(&p).map(|l| l.document.revision).ok();
                                json!({"project": p, "revision": rev, "rules_resource": rules_uri(&p, &agent.agent_type)})
                            })
                            .collect();
                        match ToolOutput::json(&json!({"projects": list})) {
                            Ok(o) => o,
                            Err(e) => refusal(RefusalCode::Internal, e.to_string()),
                        }
                    })
                    .await
                }
            }),
    ))?;

    let s = Arc::clone(ctx);
    tools.register(NamedRefusals::new(
        ToolBuilder::new("get_rules")
            .description("Get a project's full rules, rendered for your agent type, with every guardrail's severity and provenance. Read them at the start of a session.")
            .small_model_safe()
            .handler(move |a: GetRulesArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let (_, agent) = match caller_agent(&s, &ctx, &a.project) {
                        Ok(x) => x,
                        Err(out) => return Ok(out),
                    };
                    let agent_type = a
                        .agent
                        .unwrap_or_else(|| rendering_type(&s, &agent, ctx.client()));
                    blocking(move || {
                        let loaded = match s.store.load_shared(&a.project) {
                            Ok(l) => l,
                            Err(e) => return store_refusal(&e),
                        };
                        let doc = &loaded.document;
                        let rendered = match s.renderer.render(&a.project, doc, &agent_type) {
                            Ok(r) => r,
                            Err(e) => return store_refusal(&e),
                        };
                        let guardrails: Vec<_> = doc
                            .guardrails
                            .iter()
                            .filter(|g| g.applies_to_agent(&agent_type))
                            .map(|g| json!({
                                "id": g.id,
                                "statement": g.statement,
                                "severity": g.severity.as_str(),
                                "applies_to": g.applies_to,
                                "provenance": g.provenance,
                            }))
                            .collect();
                        ToolOutput::text(rendered.content.clone()).with_structured(json!({
                            "project": a.project,
                            "agent": agent_type,
                            "file": rendered.path,
                            "revision": doc.revision,
                            "resource": rules_uri(&a.project, &agent_type),
                            "guardrails": guardrails,
                        }))
                    })
                    .await
                }
            }),
    ))?;
    Ok(())
}
