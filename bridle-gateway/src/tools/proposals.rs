//! Proposing: `propose_guardrail`, `add_pattern` and `update_rules` queue a change for review
//! under `rules.propose`, after checking the agent's per-project permission (grants are the union
//! over an agent's projects, so the tool checks the project itself). Nothing changes until a
//! person approves.

use std::sync::Arc;

use bridle_rules::{ChangeRequest, CustomPattern, ExampleRepo, Origin, Severity, capabilities};
use kberg_core::{ToolBuilder, ToolContext, ToolError, ToolOutput, ToolRegistry, WriteCapability};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{blocking, caller_agent};
use crate::context::GatewayContext;
use crate::error::{GatewayError, RefusalCode, refusal, rules_refusal};

#[derive(Debug, Deserialize, JsonSchema)]
struct ProposeGuardrailArgs {
    /// The project id.
    project: String,
    /// A new, unique id: lowercase letters, digits and dashes (`tests-before-fix`).
    id: String,
    /// The rule, as one clear sentence.
    statement: String,
    /// `guidance`, `hard-instruction` or `enforcement`.
    severity: Severity,
    /// Agent types it applies to; omit for every agent.
    #[serde(default)]
    applies_to: Option<Vec<String>>,
    /// Your session id, recorded in the provenance (optional).
    #[serde(default)]
    session: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct ExampleRepoArgs {
    /// Repository URL.
    url: String,
    /// Tag of the indexed example.
    reference_tag: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct AddPatternArgs {
    /// The project id.
    project: String,
    /// The pattern's name (`hexagonal`, or your own `modified-mvc`).
    name: String,
    /// For a project-specific pattern: what it is. Omit for a well-known pattern.
    #[serde(default)]
    description: Option<String>,
    /// Example repositories for a project-specific pattern.
    #[serde(default)]
    example_repos: Vec<ExampleRepoArgs>,
    /// Your session id (optional).
    #[serde(default)]
    session: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct UpdateRulesArgs {
    /// The project id.
    project: String,
    /// The revision you read (from `get_rules`); a newer document refuses the update.
    base_revision: u64,
    /// New overview.
    #[serde(default)]
    overview: Option<String>,
    /// New stack list.
    #[serde(default)]
    stack: Option<Vec<String>>,
    /// New conventions list.
    #[serde(default)]
    conventions: Option<Vec<String>>,
    /// Your session id (optional).
    #[serde(default)]
    session: Option<String>,
}

/// Queues a proposal for the caller after checking its per-project permission.
async fn propose(
    gw: Arc<GatewayContext>,
    ctx: ToolContext,
    project: String,
    session: Option<String>,
    change: ChangeRequest,
    base_revision: Option<u64>,
) -> Result<ToolOutput, ToolError> {
    let (name, agent) = match caller_agent(&gw, &ctx, &project) {
        Ok(a) => a,
        Err(out) => return Ok(out),
    };
    let client = ctx.client().cloned();
    blocking(move || {
        let loaded = match gw.store.load_shared(&project) {
            Ok(l) => l,
            Err(e) => return rules_refusal(&e),
        };
        let doc = &loaded.document;
        if !doc.permissions_of(&agent.agent_type).rules.propose {
            return refusal(
                RefusalCode::CapabilityRequired,
                format!(
                    "agent type `{}` may not propose rule changes in project `{project}`",
                    agent.agent_type
                ),
            );
        }
        let origin = Origin::agent(name.clone(), session.clone());
        match gw.store.propose(&project, &origin, &change, base_revision) {
            Ok(p) => {
                let entry = crate::audit::agent_entry(
                    &name,
                    &agent.agent_type,
                    session.as_deref(),
                    client.as_ref(),
                    crate::audit::Kind::Proposal,
                )
                .project(&project)
                .subject(format!("proposal #{}", p.id))
                .change(crate::audit::Change {
                    before: Some(doc.revision.to_string()),
                    ..Default::default()
                });
                // The proposal is queued; a failed record is logged by record_change.
                let _ = gw.record_change(entry);
                let text = format!(
                    "Proposal #{} queued for review: {}. A person decides; nothing changes until it is approved.",
                    p.id, p.summary
                );
                ToolOutput::text(text).with_structured(json!({
                    "proposal": p.id,
                    "status": p.status.as_str(),
                    "summary": p.summary,
                }))
            }
            Err(e) => rules_refusal(&e),
        }
    })
    .await
}

/// Registers the three proposal tools under `rules.propose`.
pub fn register(tools: &ToolRegistry, ctx: &Arc<GatewayContext>) -> Result<(), GatewayError> {
    let propose_cap = WriteCapability::new(
        capabilities::RULES_PROPOSE,
        "Propose changes to a project's rules (a person approves them)",
    );
    tools.declare(propose_cap.clone())?;

    let s = Arc::clone(ctx);
    tools.register(
        ToolBuilder::new("propose_guardrail")
            .description("Propose a new guardrail for a project. It goes to a review queue; a person approves or rejects it. It is not policy until approved.")
            .write(propose_cap.clone())
            .small_model_safe()
            .handler(move |a: ProposeGuardrailArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let change = ChangeRequest::Guardrail {
                        id: a.id,
                        statement: a.statement,
                        severity: a.severity,
                        applies_to: a
                            .applies_to
                            .unwrap_or_else(|| vec![bridle_rules::ALL_AGENTS.to_string()]),
                    };
                    propose(s, ctx, a.project, a.session, change, None).await
                }
            }),
    )?;

    let s = Arc::clone(ctx);
    tools.register(
        ToolBuilder::new("add_pattern")
            .description("Propose an architecture pattern for a project: a well-known one by name, or a project-specific one with a description and example repositories. A person reviews it.")
            .write(propose_cap.clone())
            .handler(move |a: AddPatternArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let change = match a.description {
                        None if a.example_repos.is_empty() => ChangeRequest::Pattern {
                            standard: Some(a.name),
                            custom: None,
                        },
                        description => ChangeRequest::Pattern {
                            standard: None,
                            custom: Some(CustomPattern {
                                example_repos: a
                                    .example_repos
                                    .into_iter()
                                    .map(|r| ExampleRepo {
                                        url: r.url,
                                        reference_tag: r.reference_tag,
                                        arch_tag: a.name.clone(),
                                        last_indexed: None,
                                    })
                                    .collect(),
                                name: a.name,
                                description: description.unwrap_or_default(),
                            }),
                        },
                    };
                    propose(s, ctx, a.project, a.session, change, None).await
                }
            }),
    )?;

    let s = Arc::clone(ctx);
    tools.register(
        ToolBuilder::new("update_rules")
            .description("Propose new text for a project's overview, stack or conventions, based on the revision you read. A person reviews it; a stale revision is refused.")
            .write(propose_cap)
            .handler(move |a: UpdateRulesArgs, ctx| {
                let s = Arc::clone(&s);
                async move {
                    let change = ChangeRequest::UpdateProject {
                        overview: a.overview,
                        stack: a.stack,
                        conventions: a.conventions,
                    };
                    propose(s, ctx, a.project, a.session, change, Some(a.base_revision)).await
                }
            }),
    )?;
    Ok(())
}
