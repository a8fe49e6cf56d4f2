//! Proposing: `propose_guardrail`, `add_pattern` and `update_rules` queue a change for review
//! under `rules.propose`, after checking the agent's per-project permission (grants are the union
//! over an agent's projects, so the tool checks the project itself). Nothing changes until a
//! person approves.

use std::sync::Arc;

use bridle_memory::repo::redact_url;
use bridle_rules::{
    ChangeRequest, CustomPattern, ExampleRepo, Origin, RulesError, Severity, capabilities,
};
use kberg_core::{
    ClientInfo, ToolBuilder, ToolContext, ToolError, ToolOutput, ToolRegistry, WriteCapability,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{
    Attempt, blocking, caller_agent, session_refusal, store_refusal, tag_refusal, text_refusal,
};
use crate::audit::Kind;
use crate::config::AgentConfig;
use crate::context::GatewayContext;
use crate::error::{GatewayError, NamedRefusals, RefusalCode, refusal, rules_refusal};

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
    /// Repository URL: `https://...`, `ssh://...` or `git@host:path` (a local path or
    /// `file://` is refused).
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

/// Queues a proposal for the caller after checking its per-project permission, then the
/// fields the store does not check; a refusal is recorded in the audit log ([`Attempt`]).
async fn propose(
    gw: Arc<GatewayContext>,
    ctx: ToolContext,
    project: String,
    session: Option<String>,
    change: ChangeRequest,
    base_revision: Option<u64>,
) -> Result<ToolOutput, ToolError> {
    let attempt = Attempt::new(&ctx, Kind::Proposal, &project, session.as_deref());
    let (name, agent) = match caller_agent(&gw, &ctx, &project) {
        Ok(a) => a,
        Err(out) => return Ok(attempt.answer(&gw, out)),
    };
    let client = ctx.client().cloned();
    blocking(move || {
        let out = queue(
            &gw,
            &project,
            &name,
            &agent,
            session,
            client.as_ref(),
            &change,
            base_revision,
        );
        attempt.answer(&gw, out)
    })
    .await
}

/// [`propose`]'s store work: the project's permission, the fields, the queue and the audit.
#[allow(clippy::too_many_arguments)] // One call site; the pieces of one proposal.
fn queue(
    gw: &GatewayContext,
    project: &str,
    name: &str,
    agent: &AgentConfig,
    session: Option<String>,
    client: Option<&ClientInfo>,
    change: &ChangeRequest,
    base_revision: Option<u64>,
) -> ToolOutput {
    let loaded = match gw.store.load_shared(project) {
        Ok(l) => l,
        Err(e) => return store_refusal(&e),
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
    if let Some(refused) = session_refusal(session.as_deref())
        .or_else(|| text_refusal(free_text(change)))
        .or_else(|| tag_refusal(free_text(change).into_iter().chain(names(change))))
        .or_else(|| local_example_repo(change))
    {
        return refused;
    }
    let origin = Origin::agent(name, session.clone());
    match gw.store.propose(project, &origin, change, base_revision) {
        Ok(p) => {
            let entry = crate::audit::agent_entry(
                name,
                &agent.agent_type,
                session.as_deref(),
                client,
                Kind::Proposal,
            )
            .project(project)
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
        Err(e) => store_refusal(&e),
    }
}

/// The free text of `change` (what it is, the text), for [`text_refusal`].
fn free_text(change: &ChangeRequest) -> Vec<(&'static str, &str)> {
    match change {
        ChangeRequest::Guardrail { statement, .. } => vec![("the statement", statement.as_str())],
        ChangeRequest::Pattern { custom, .. } => custom
            .iter()
            .map(|c| ("the pattern's description", c.description.as_str()))
            .collect(),
        ChangeRequest::UpdateProject {
            overview,
            stack,
            conventions,
        } => {
            let overview = overview.iter().map(|o| ("the overview", o.as_str()));
            let stack = stack
                .iter()
                .flatten()
                .map(|s| ("a stack entry", s.as_str()));
            let conventions = conventions
                .iter()
                .flatten()
                .map(|c| ("a convention", c.as_str()));
            overview.chain(stack).chain(conventions).collect()
        }
    }
}

/// The names and tags of `change` a person reviews and every agent's rules show (what it is,
/// the text), for [`tag_refusal`]: a pattern's name and its examples' reference tags.
fn names(change: &ChangeRequest) -> Vec<(&'static str, &str)> {
    let ChangeRequest::Pattern { standard, custom } = change else {
        return Vec::new();
    };
    let standard = standard.iter().map(|n| ("the pattern's name", n.as_str()));
    let custom = custom.iter().flat_map(|c| {
        std::iter::once(("the pattern's name", c.name.as_str())).chain(c.example_repos.iter().map(
            |r| {
                (
                    "an example repository's reference tag",
                    r.reference_tag.as_str(),
                )
            },
        ))
    });
    standard.chain(custom).collect()
}

/// The refusal of a proposal whose example repositories are not all network git URLs, if any.
///
/// An approved example repository is fetched and indexed on the gateway's host for every agent,
/// so a local path, `.` or a `file://` URL in an agent's proposal would index the host's own
/// files (its data directory, its secrets). Only `https://`, `ssh://` and `git@host:path` are
/// accepted from agents; a person can still add a local repository from the command line or the
/// admin API.
fn local_example_repo(change: &ChangeRequest) -> Option<ToolOutput> {
    let ChangeRequest::Pattern {
        custom: Some(custom),
        ..
    } = change
    else {
        return None;
    };
    let bad = custom
        .example_repos
        .iter()
        .find(|r| !bridle_memory::repo::is_network_source(&r.url))?;
    Some(rules_refusal(&RulesError::Rejected(format!(
        "example repository `{}` (reference tag `{}`) is not a network git URL: a proposed example repository must be an `https://`, `ssh://` or `git@host:path` URL; a local path or a `file://` URL is refused (a person can add a local repository from the command line or the admin API)",
        redact_url(&bad.url),
        bad.reference_tag
    ))))
}

/// Registers the three proposal tools under `rules.propose`.
pub fn register(tools: &ToolRegistry, ctx: &Arc<GatewayContext>) -> Result<(), GatewayError> {
    let propose_cap = WriteCapability::new(
        capabilities::RULES_PROPOSE,
        "Propose changes to a project's rules (a person approves them)",
    );
    tools.declare(propose_cap.clone())?;

    let s = Arc::clone(ctx);
    tools.register(NamedRefusals::new(
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
    ))?;

    let s = Arc::clone(ctx);
    tools.register(NamedRefusals::new(
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
    ))?;

    let s = Arc::clone(ctx);
    tools.register(NamedRefusals::new(
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
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly on any unexpected error.

    use kberg_core::{CallOptions, Caller, Principal};
    use serde_json::Value;

    use super::*;
    use crate::config::{GatewayConfig, demo_document, init_data_dir_with_token_files};

    /// A gateway with the demo project, its tools, and a caller for the agent `claude`.
    fn gateway() -> (tempfile::TempDir, Arc<GatewayContext>, ToolRegistry, Caller) {
        let tmp = tempfile::tempdir().unwrap();
        init_data_dir_with_token_files(tmp.path()).unwrap();
        let config = GatewayConfig::load(tmp.path()).unwrap();
        let gw = GatewayContext::open(tmp.path(), config).unwrap();
        gw.store.create("demo", &demo_document(), "test").unwrap();
        let tools = ToolRegistry::new();
        crate::tools::register_tools(&tools, &gw).unwrap();
        let agent_type = gw.agent("claude").unwrap().agent_type.clone();
        let caller = Caller::new(
            Principal::new("claude")
                .with_agent(agent_type)
                .with_grants(gw.grants_for("claude")),
        );
        (tmp, gw, tools, caller)
    }

    fn add_pattern(url: &str) -> Value {
        json!({"project": "demo", "name": "modified-mvc", "description": "MVC without DB access in controllers",
               "example_repos": [
                   {"url": "git@git.example.invalid:team/first.git", "reference_tag": "ex-0"},
                   {"url": url, "reference_tag": "ex-1"}]})
    }

    /// An agent's proposal cannot make the gateway index its own host's files: a local path,
    /// `.` or a `file://` URL is refused before anything is queued; an `https://` one is queued.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_proposed_example_repository_must_be_a_network_url() {
        let (_tmp, gw, tools, claude) = gateway();
        for url in [
            "/var/lib/bridle",
            ".",
            "file:///var/lib/bridle",
            "http://git.example.invalid/x.git",
        ] {
            let out = tools
                .call(
                    &claude,
                    "add_pattern",
                    add_pattern(url),
                    CallOptions::default(),
                )
                .await
                .unwrap();
            assert!(out.is_error, "{url}: {}", out.all_text());
            let s = out.structured.as_ref().unwrap();
            assert_eq!(s["code"], "proposal_rejected", "{url}: {s}");
            let message = s["message"].as_str().unwrap();
            assert!(message.contains(url), "{message}");
            assert!(message.contains("https://"), "{message}");
        }
        assert!(gw.store.queue(Some("demo"), true).unwrap().is_empty());

        let out = tools
            .call(
                &claude,
                "add_pattern",
                add_pattern("https://bot:s3cret-token@git.example.invalid/team/x.git"),
                CallOptions::default(),
            )
            .await
            .unwrap();
        assert!(!out.is_error, "{}", out.all_text());
        let queued = gw.store.queue(Some("demo"), false).unwrap();
        assert_eq!(queued.len(), 1);
    }

    /// The reviewer reads, in the proposal's one-line summary, which repositories approving it
    /// would clone and index; a token in a URL never reaches the summary, nor the agent's answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_summary_names_the_example_repositories_without_their_credentials() {
        const CANARY: &str = "canary-proposal-token-3Jk8";
        let (_tmp, gw, tools, claude) = gateway();
        let out = tools
            .call(
                &claude,
                "add_pattern",
                add_pattern(&format!(
                    "https://bot:{CANARY}@git.example.invalid/team/x.git"
                )),
                CallOptions::default(),
            )
            .await
            .unwrap();
        assert!(!out.is_error, "{}", out.all_text());
        let expected = "add custom pattern `modified-mvc` with example repositories `git@git.example.invalid:team/first.git`, `https://***@git.example.invalid/team/x.git`";
        assert_eq!(out.structured.as_ref().unwrap()["summary"], expected);
        assert!(out.all_text().contains(expected), "{}", out.all_text());
        assert!(!out.all_text().contains(CANARY));
        assert!(
            !out.structured
                .as_ref()
                .unwrap()
                .to_string()
                .contains(CANARY)
        );
        let queued = gw.store.queue(Some("demo"), false).unwrap();
        assert_eq!(queued[0].summary, expected);
    }

    fn summary_of(url: &str) -> String {
        ChangeRequest::Pattern {
            standard: None,
            custom: Some(CustomPattern {
                name: "p".into(),
                description: "d".into(),
                example_repos: vec![ExampleRepo {
                    url: url.to_string(),
                    reference_tag: "t".into(),
                    arch_tag: "p".into(),
                    last_indexed: None,
                }],
            }),
        }
        .summary()
    }

    proptest::proptest! {
        /// bridle-rules hides a URL's credentials in a summary by the rule bridle-memory's
        /// `redact_url` applies wherever it shows a source (bridle-rules cannot call it): for
        /// any URL short enough to be shown whole, the summary shows exactly what
        /// `redact_url` does.
        #[test]
        fn the_summary_hides_what_bridle_memory_hides(
            url in proptest::prop_oneof![
                "(https|ssh|file|http)://([a-z0-9:%@._-]{0,16}@)?[a-z0-9.:\\[\\]-]{1,12}[/a-z0-9@?=&#:._-]{0,40}",
                "[ -~]{0,100}",
            ]
        ) {
            let shown = redact_url(&url);
            proptest::prop_assume!(shown.chars().count() <= 120);
            proptest::prop_assert_eq!(
                summary_of(&url),
                format!("add custom pattern `p` with example repositories `{shown}`")
            );
        }
    }
}
