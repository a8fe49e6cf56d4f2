//! Tool forwarding: the upstream's tools as [`ForwardedTool`]s in the aggregator's registry.
//!
//! [`sync_tools`] makes the registry match the upstream's tool list (new tools registered under
//! their namespaced names, gone ones removed, changed ones replaced; ones that cannot be
//! registered skipped with the reason) and has prompts and resources synchronized first, when
//! they are forwarded. A forwarded tool's call passes Kberg's gate like any other, then goes
//! upstream through [`forward`]; what goes wrong on the way is answered with the same refusal
//! shape every other refusal has (`upstream_unavailable`, `upstream_timeout`,
//! `upstream_invalid_result`), and the upstream's result passes through unchanged. An upstream
//! that answers with a task is followed to the task's end ([`super::tasks`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::{
    Content, CoreError, ErrorCode, PeerError, Refusal, Tool, ToolContext, ToolError, ToolKind,
    ToolOutput, ToolSpec, check_name,
};
use rmcp::model::GetMeta;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ServerResult,
};
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde_json::Value;
use tracing::Instrument;

use super::error::UpstreamError;
use super::forward::{forward, quoted, result_kind};
use super::front::{Aggregation, Upstream};
use super::hook::{ForwardOutcome, OutgoingCall};
use super::prompts::sync_prompts;
use super::resources::{namespaced_uri, sync_resources};
use super::tasks::Followed;

/// Reads the upstream's tool list and makes the registry match it: new tools registered, gone
/// tools removed, changed tools replaced. Tools that cannot be registered are skipped (logged,
/// and reported by [`Aggregator::skipped`]).
pub(super) async fn sync_tools(
    shared: &Aggregation,
    up: &Arc<Upstream>,
    peer: &Peer<RoleClient>,
) -> Result<(), ServiceError> {
    if let Some(prompts) = &shared.prompts {
        sync_prompts(shared, prompts, up, peer).await;
    }
    if let Some(resources) = &shared.resources {
        sync_resources(resources, up, peer).await;
    }
    let tools = super::pages::tools(peer).await?;
    let mut wanted: BTreeMap<String, ToolSpec> = BTreeMap::new();
    let mut remote_of: BTreeMap<String, String> = BTreeMap::new();
    let mut skipped = Vec::new();
    for t in tools {
        let remote = t.name.to_string();
        let name = format!("{}{}{}", up.namespace(), shared.separator, remote);
        // A skipped tool is reported (logged, and to the app) in the upstream's own words, its
        // name and the reason quoting it: redacted and cut as its messages are.
        if let Err(e) = check_name(&name) {
            skipped.push((quoted(up, &remote), quoted(up, &e.to_string())));
            continue;
        }
        let kind = shared
            .rules
            .iter()
            .find(|(p, _)| p.matches(&name))
            .map(|(_, c)| ToolKind::Write(c.clone()))
            .unwrap_or(ToolKind::Read);
        let mut spec = ToolSpec::new(
            name.clone(),
            t.description.as_deref().unwrap_or_default(),
            Value::Object((*t.input_schema).clone()),
            kind,
        );
        spec.title = t.title.clone();
        spec.output_schema = t
            .output_schema
            .as_ref()
            .map(|s| Value::Object((**s).clone()));
        // The upstream's own hints travel with its tools: a gateway in front classifies reads
        // by `readOnlyHint`, and clients show them.
        if let Some(a) = t.annotations.as_ref() {
            spec.hints.read_only_hint = a.read_only_hint;
            spec.hints.destructive_hint = a.destructive_hint;
            spec.hints.idempotent_hint = a.idempotent_hint;
            spec.hints.open_world_hint = a.open_world_hint;
        }
        remote_of.insert(name.clone(), remote);
        wanted.insert(name, spec);
    }
    let mut registered = up.registered.lock().map(|r| r.clone()).unwrap_or_default();
    // Removed, changed and new tools in one edit, so that a listing never shows part of the
    // change (a changed tool is never missing in between) and clients hear of one change; a
    // tool that cannot be registered is skipped alone.
    let Ok(()) = shared.registry.edit(|e| {
        for name in registered.keys().cloned().collect::<Vec<_>>() {
            let keep = wanted
                .get(&name)
                .is_some_and(|w| e.spec(&name).as_ref() == Some(w));
            if !keep {
                e.remove(&name);
                registered.remove(&name);
            }
        }
        for (name, spec) in wanted {
            if registered.contains_key(&name) {
                continue;
            }
            let remote = remote_of.remove(&name).unwrap_or_default();
            let tool = ForwardedTool {
                spec,
                remote: remote.clone(),
                up: up.clone(),
            };
            match e.register(Arc::new(tool)) {
                Ok(()) => {
                    registered.insert(name, remote);
                }
                Err(err) => {
                    let reason = match &err {
                        CoreError::Duplicate { .. } => {
                            format!("`{name}` is already taken by another tool")
                        }
                        other => other.to_string(),
                    };
                    let (remote, reason) = (quoted(up, &remote), quoted(up, &reason));
                    tracing::warn!(namespace = up.namespace(), tool = %remote, %reason, "upstream tool skipped");
                    skipped.push((remote, reason));
                }
            }
        }
        Ok::<(), std::convert::Infallible>(())
    });
    if let Ok(mut r) = up.registered.lock() {
        *r = registered;
    }
    if let Ok(mut s) = up.skipped.lock() {
        *s = skipped;
    }
    Ok(())
}

/// An upstream tool registered in the aggregator's registry.
pub(super) struct ForwardedTool {
    spec: ToolSpec,
    remote: String,
    up: Arc<Upstream>,
}

#[async_trait]
impl Tool for ForwardedTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let ns = self.up.namespace();
        let mut params = CallToolRequestParams::new(self.remote.clone());
        params.arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => return Err(ToolError::failed("the arguments must be an object")),
        };
        let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let name = &self.spec.name;
        let answer = match &self.up.hook {
            None => forward(&self.up, request, Some(&ctx)).await,
            Some(hook) => {
                let call = OutgoingCall {
                    namespace: ns,
                    method: "tools/call",
                    tool: &self.remote,
                    caller_meta: ctx.meta().and_then(Value::as_object),
                };
                let mut meta = serde_json::Map::new();
                let span = hook.outgoing(&call, &mut meta);
                if !meta.is_empty() {
                    request
                        .get_meta_mut()
                        .extend(rmcp::model::RequestMetaObject::from(meta));
                }
                let answer = forward(&self.up, request, Some(&ctx))
                    .instrument(span.clone())
                    .await;
                // The code is the upstream's own text, and a hook puts it where the caller
                // never looks (a span attribute sent to a collector): redacted like every
                // other thing the upstream says.
                let code = tool_error_code(&answer).map(|c| self.up.redactions.text(c));
                if matches!(code, Some(std::borrow::Cow::Owned(_))) {
                    self.up.redactions.said(ns, "a tool error's code");
                }
                hook.finished(&span, outcome_of(&answer, code.as_deref()));
                answer
            }
        };
        match answer {
            Ok(ServerResult::CallToolResult(r)) => Ok(to_output(&self.up, r)),
            // The upstream runs the call as a task: follow it to its end.
            Ok(ServerResult::CreateTaskResult(t)) => {
                match super::tasks::follow(&self.up, t.task, &ctx).await {
                    Ok(out) => Ok(out),
                    Err(Followed::Upstream(e)) => Ok(refusal(name, &e)),
                    Err(Followed::Tool(e)) => Err(e),
                }
            }
            Ok(other) => Ok(refusal(
                name,
                &UpstreamError::InvalidResult {
                    namespace: ns.to_string(),
                    expected: "a tool result",
                    found: result_kind(&self.up, &other),
                },
            )),
            Err(
                e @ (UpstreamError::Unavailable { .. }
                | UpstreamError::Timeout { .. }
                | UpstreamError::InvalidResult { .. }),
            ) => Ok(refusal(name, &e)),
            // The gate answers this as `cancelled`.
            Err(UpstreamError::Cancelled) => Err(ToolError::Peer(PeerError::Cancelled)),
            // The upstream's own refusal or failure: the gate answers `tool_failed` with it.
            Err(e) => Err(ToolError::failed(e.to_string())),
        }
    }
}

/// The `structuredContent.code` of an answer that is a tool result flagged `isError`, as the
/// upstream sent it.
fn tool_error_code(answer: &Result<ServerResult, UpstreamError>) -> Option<&str> {
    match answer {
        Ok(ServerResult::CallToolResult(r)) if r.is_error == Some(true) => r
            .structured_content
            .as_ref()
            .and_then(|s| s.get("code"))
            .and_then(Value::as_str),
        _ => None,
    }
}

/// How a forwarded call's answer looks to a [`ForwardHook`](super::ForwardHook); `code` is the
/// answer's [`tool_error_code`], with the upstream's credentials redacted.
fn outcome_of<'a>(
    answer: &'a Result<ServerResult, UpstreamError>,
    code: Option<&'a str>,
) -> ForwardOutcome<'a> {
    match answer {
        Ok(ServerResult::CallToolResult(r)) if r.is_error == Some(true) => {
            ForwardOutcome::ToolError { code }
        }
        Ok(ServerResult::CallToolResult(_) | ServerResult::CreateTaskResult(_)) => {
            ForwardOutcome::Answered
        }
        Ok(_) => ForwardOutcome::Failed {
            code: ErrorCode::UpstreamInvalidResult.as_str(),
        },
        Err(UpstreamError::Refused { code, .. }) => ForwardOutcome::Refused { code: *code },
        Err(e) => ForwardOutcome::Failed {
            code: e.code().as_str(),
        },
    }
}

/// A forwarded call the aggregator answers itself, in the shape of every refusal (a stable
/// code, the sentence, the tool, and the `upstream`).
fn refusal(tool: &str, e: &UpstreamError) -> ToolOutput {
    let (lead, advice) = match e.code() {
        ErrorCode::UpstreamUnavailable => {
            ("is unavailable", " Try again later or use another tool.")
        }
        ErrorCode::UpstreamTimeout => ("timed out", " Try again later or use another tool."),
        _ => ("failed", ""),
    };
    let namespace = match e {
        UpstreamError::Unavailable { namespace, .. }
        | UpstreamError::Timeout { namespace, .. }
        | UpstreamError::TaskTimeout { namespace, .. }
        | UpstreamError::Refused { namespace, .. }
        | UpstreamError::InvalidResult { namespace, .. }
        | UpstreamError::Failed { namespace, .. } => Some(namespace.as_str()),
        _ => None,
    };
    let r = Refusal::new(
        e.code(),
        tool,
        format!("The tool `{tool}` {lead}: {e}.{advice}"),
    );
    match namespace {
        Some(ns) => r.with("upstream", ns),
        None => r,
    }
    .to_output()
}

/// An upstream result as Kberg output: content blocks, structured content and the error flag
/// pass through, the URIs of resource links and embedded resources namespaced as the
/// aggregator lists the upstream's resources ([`upstream_content`]).
pub(super) fn to_output(up: &Upstream, r: CallToolResult) -> ToolOutput {
    let content = r
        .content
        .iter()
        .map(|block| upstream_content(up, serde_json::to_value(block).unwrap_or(Value::Null)))
        .collect();
    ToolOutput {
        content,
        structured: r.structured_content,
        is_error: r.is_error.unwrap_or(false),
    }
}

/// A content block an upstream sent (in a tool result or a prompt message) as the
/// aggregator's clients see it: [`content_of`], and when the upstream's resources are
/// forwarded, a resource link's or an embedded resource's URI under the upstream's namespace
/// (`ev+demo://...`), the URI a client reads it by through the aggregator. Without resource
/// forwarding the upstream's URI is kept: no namespaced URI would answer either.
pub(super) fn upstream_content(up: &Upstream, v: Value) -> Content {
    let mut content = content_of(v);
    if up.resources.is_some() {
        match &mut content {
            Content::ResourceLink { uri, .. } => *uri = namespaced_uri(up.namespace(), uri),
            Content::Resource(contents) => {
                contents.uri = namespaced_uri(up.namespace(), &contents.uri);
            }
            _ => {}
        }
    }
    content
}

/// A content block in MCP's JSON shape as Kberg content (kberg-core's one codec); a block it
/// does not know is passed on as its JSON text, so nothing is silently lost.
pub(super) fn content_of(v: Value) -> Content {
    match serde_json::from_value::<Content>(v.clone()) {
        Ok(c) => c,
        Err(_) => Content::Text(v.to_string()),
    }
}
