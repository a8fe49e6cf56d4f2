//! Front tools: one per upstream tool, in the gateway's public registry, under the upstream's
//! namespace (`gitea__list_repos`).
//!
//! A front tool is what the gate sees: a Read tool when the upstream marks it
//! `readOnlyHint: true` or the configuration lists it under `reads`, else a Write tool bound to
//! `<namespace>.write`. Its handler then checks what the gate cannot know, in this order: the
//! caller is a configured agent; the upstream serves a project the agent may use and whose
//! `permissions.<type>.<namespace>` allows the call (`read` for reads, `write` for writes; the
//! grant is the union over projects, so each project is checked); the agent's credential
//! mapping resolves to a secret. Only then is the call forwarded, on the connection that carries
//! that agent's credential, and the use of the secret recorded.

use crate::logging::one_line;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use bridle_rules::Documents;
use kberg_core::{Tool, ToolContext, ToolError, ToolKind, ToolOutput, ToolRegistry, ToolSpec};
use serde_json::Value;

use super::credential::{Credential, SecretError, SecretUse};
use super::route::{Route, RouteError, write_capability};
use crate::config::AgentConfig;
use crate::context::GatewayContext;
use crate::error::{NamedRefusals, RefusalCode, refusal};

/// A tool of an upstream, as the gateway offers it.
pub(crate) struct FrontTool {
    pub(crate) spec: ToolSpec,
    pub(crate) route: Arc<Route>,
    pub(crate) gw: Arc<GatewayContext>,
}

/// The front spec for an upstream tool spec from a private registry.
pub(crate) fn front_spec(route: &Route, upstream: &ToolSpec) -> ToolSpec {
    let remote = upstream
        .name
        .strip_prefix(&format!("{}__", route.namespace))
        .unwrap_or(&upstream.name);
    let read = upstream.hints.read_only_hint == Some(true) || route.section.listed_as_read(remote);
    let mut spec = upstream.clone();
    spec.kind = if read {
        ToolKind::Read
    } else {
        ToolKind::Write(write_capability(&route.namespace))
    };
    spec
}

/// How old a documents set a forwarded call's permission check takes without checking it
/// again: the request's authentication found it current at the start of the same request.
const RECENT_DOCUMENTS: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the agent's type may make this call (a write when `write`) in some project the
/// upstream serves and the agent may use, by `documents`. No I/O.
fn permitted(
    gw: &GatewayContext,
    route: &Route,
    write: bool,
    agent: &str,
    documents: &Documents,
) -> Result<(), ToolOutput> {
    // Read in place: this runs on every forwarded call.
    gw.agents
        .inspect(agent, |config| {
            permitted_for(config, route, write, agent, documents)
        })
        .unwrap_or_else(|| {
            Err(refusal(
                RefusalCode::UnknownAgent,
                format!("`{agent}` is not a configured agent"),
            ))
        })
}

/// [`permitted`] for the configured agent `config`.
fn permitted_for(
    config: &AgentConfig,
    route: &Route,
    write: bool,
    agent: &str,
    documents: &Documents,
) -> Result<(), ToolOutput> {
    let ns = &route.namespace;
    let mut served = false;
    for (_, loaded) in documents
        .iter()
        .filter(|(p, _)| config.may_use(p) && route.serves(p))
    {
        served = true;
        let Ok(loaded) = loaded else {
            continue;
        };
        let rw = loaded
            .document
            .permissions_of(&config.agent_type)
            .upstream(ns);
        if (write && rw.write) || (!write && rw.read) {
            return Ok(());
        }
    }
    let action = if write { "write" } else { "read" };
    if !served {
        return Err(refusal(
            RefusalCode::ProjectNotAllowed,
            format!(
                "agent `{agent}` uses no project that the `{ns}` tools serve; ask an operator to add one"
            ),
        ));
    }
    Err(refusal(
        RefusalCode::CapabilityRequired,
        format!(
            "agent type `{ty}` may not {action} through `{ns}` in its projects (permissions.{ty}.{ns}.{action} is false)",
            ty = config.agent_type,
        ),
    ))
}

#[async_trait]
impl Tool for FrontTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let agent = ctx.caller().principal().id.clone();
        if let Some(client) = ctx.client() {
            self.gw.sessions.saw_client(&agent, client);
        }
        let ns = self.route.namespace.clone();
        if !self
            .route
            .enabled
            .load(std::sync::atomic::Ordering::Acquire)
        {
            return Ok(disabled_refusal(&ns));
        }
        let write = !matches!(self.spec.kind, ToolKind::Read);
        // The request's authentication (every request to the gateway has one) checked the
        // documents an instant ago: the set found current then, or by a later check, is taken
        // as it is, without the blocking pool. Only when that was more than a second ago (a
        // call that waited that long after its authentication) is the check made again.
        let check = match self.gw.store.recent_documents(RECENT_DOCUMENTS) {
            Some(documents) => permitted(&self.gw, &self.route, write, &agent, &documents),
            None => {
                let (gw, route, agent) =
                    (Arc::clone(&self.gw), Arc::clone(&self.route), agent.clone());
                tokio::task::spawn_blocking(move || {
                    let documents = gw.store.documents().unwrap_or_default();
                    permitted(&gw, &route, write, &agent, &documents)
                })
                .await
                .map_err(|e| ToolError::failed(format!("internal error: {e}")))?
            }
        };
        if let Err(out) = check {
            return Ok(out);
        }
        let (identity, secret) = match self.route.identity_for(&agent) {
            Ok(x) => x,
            Err(_) => {
                return Ok(refusal(
                    RefusalCode::CredentialMissing,
                    format!(
                        "no `{ns}` credential is mapped for agent `{agent}`; nothing was sent. Ask an operator to map one."
                    ),
                ));
            }
        };
        let connection = match self.route.connection(&identity, secret.as_deref()).await {
            Ok(c) => c,
            Err(e) => return Ok(route_refusal(&ns, &self.spec.name, e)),
        };
        if let Err(e) = self.route.ready(&connection).await {
            return Ok(route_refusal(&ns, &self.spec.name, e));
        }
        if let Some((name, version)) = &connection.secret {
            let used = SecretUse {
                name,
                version: *version,
                upstream: &ns,
                agent: &agent,
                request: &self.spec.name,
            };
            match self.route.secrets().record_use(&used).await {
                Ok(()) => {}
                // The version read for this call was revoked, or rotated out with no grace,
                // since: the vault refuses its use, and the agent is told the credential is
                // gone, as when that happened before the call started.
                Err(e @ (SecretError::Missing { .. } | SecretError::Empty { .. })) => {
                    tracing::info!(namespace = %ns, error = %one_line(&e), "the upstream credential was revoked or rotated out as a call started; call not sent");
                    return Ok(refusal(
                        RefusalCode::CredentialMissing,
                        format!(
                            "the `{ns}` credential for this agent was revoked or rotated out as the call started; nothing was sent (after a rotation, the same call made again uses the new version)"
                        ),
                    ));
                }
                Err(e) => {
                    tracing::warn!(namespace = %ns, error = %one_line(&e), "recording a secret use failed; call not sent");
                    return Ok(refusal(
                        RefusalCode::Internal,
                        "the gateway could not record the use of the upstream credential, so the call was not sent",
                    ));
                }
            }
        }
        let mut opts = crate::namespace::forwarded_options(&ctx);
        if let (Some(secret), Some(peer)) = (&connection.injected, ctx.peer()) {
            opts = opts.with_peer(Arc::new(super::scrub::ScrubbingPeer::new(
                Arc::clone(peer),
                secret.clone(),
                &ns,
            )));
        }
        let mut out = match connection
            .registry
            .call(&self.route.internal, &self.spec.name, args, opts)
            .await
        {
            Ok(out) => out,
            Err(e) => e.to_output(),
        };
        if let Some(secret) = &connection.injected
            && super::scrub::scrub_output(&mut out, secret.expose())
        {
            tracing::warn!(namespace = %ns, tool = %one_line(&self.spec.name), "the upstream echoed its credential; scrubbed from the result");
        }
        Ok(out)
    }
}

/// The refusal of a call to an upstream an operator disabled.
fn disabled_refusal(ns: &str) -> ToolOutput {
    refusal(
        RefusalCode::UpstreamDisabled,
        format!("the `{ns}` tools are disabled by an operator"),
    )
}

fn route_refusal(ns: &str, tool: &str, e: RouteError) -> ToolOutput {
    match e {
        RouteError::Disabled => disabled_refusal(ns),
        RouteError::NoMapping => refusal(
            RefusalCode::CredentialMissing,
            format!("no `{ns}` credential is mapped for this agent; nothing was sent"),
        ),
        RouteError::Secret(e) => {
            tracing::warn!(namespace = ns, error = %one_line(&e), "upstream credential unavailable");
            refusal(
                RefusalCode::CredentialMissing,
                format!(
                    "the `{ns}` credential for this agent is not available ({e}); nothing was sent"
                ),
            )
        }
        RouteError::Unavailable(reason) => kberg_core::ToolOutput::error_with(
            format!(
                "The tool `{tool}` is unavailable: its server `{ns}` is not connected ({reason}). Try again later or use another tool."
            ),
            serde_json::json!({
                "code": "upstream_unavailable",
                "message": format!("`{ns}` is not connected: {reason}"),
                "retryable": true,
                "tool": tool,
                "upstream": ns,
            }),
        ),
    }
}

/// Makes the public registry's front tools for `route` match the tools its listing connection
/// offers: new ones registered, gone ones removed, changed ones replaced. Returns the front
/// tool names now registered.
///
/// `injected` is the credential the listing connection carries: every agent that may use the
/// upstream reads these specs (with per-agent secrets, the listing connection carries one
/// agent's), so it is scrubbed out of them as out of a result, and a tool whose name holds it
/// is not offered (`withheld` keeps those, so each is reported once).
pub(crate) fn sync_front_tools(
    public: &ToolRegistry,
    route: &Arc<Route>,
    gw: &Arc<GatewayContext>,
    listing: &ToolRegistry,
    injected: Option<&Credential>,
    registered: &mut BTreeMap<String, ToolSpec>,
    withheld: &mut BTreeSet<String>,
) -> Vec<String> {
    let mut scrubbed = BTreeSet::new();
    let wanted: BTreeMap<String, ToolSpec> = listing
        .list(&route.internal)
        .into_iter()
        .filter_map(|s| {
            let mut spec = front_spec(route, &s);
            if let Some(secret) = injected {
                match super::scrub::scrub_spec(&mut spec, secret.expose()) {
                    None => {
                        if withheld.insert(s.name.clone()) {
                            tracing::warn!(namespace = %route.namespace, "an upstream tool whose name holds the upstream's credential is not offered");
                        }
                        return None;
                    }
                    Some(true) => {
                        scrubbed.insert(s.name.clone());
                    }
                    Some(false) => {}
                }
            }
            Some((s.name.clone(), spec))
        })
        .collect();
    for (name, spec) in registered.clone() {
        if wanted.get(&name) != Some(&spec) {
            public.remove(&name);
            registered.remove(&name);
        }
    }
    for (name, spec) in wanted {
        if registered.contains_key(&name) {
            continue;
        }
        let tool = FrontTool {
            spec: spec.clone(),
            route: Arc::clone(route),
            gw: Arc::clone(gw),
        };
        match public.register(NamedRefusals::new(tool)) {
            Ok(()) => {
                if scrubbed.contains(&name) {
                    tracing::warn!(namespace = %route.namespace, tool = %one_line(&name), "the upstream's tool listing quoted its credential; scrubbed from what agents are offered");
                }
                registered.insert(name, spec);
            }
            Err(e) => {
                tracing::warn!(namespace = %route.namespace, tool = %one_line(&name), error = %one_line(&e), "upstream tool not offered");
            }
        }
    }
    registered.keys().cloned().collect()
}
