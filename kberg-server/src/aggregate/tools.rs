//! Tool forwarding: the upstream's tools as [`ForwardedTool`]s in the aggregator's registry.
//!
//! [`sync_tools`] makes the registry match the upstream's tool list (new tools registered under
//! their namespaced names, gone ones removed, changed ones replaced; ones that cannot be
//! registered skipped with the reason) and has prompts and resources synchronized first, when
//! they are forwarded. A forwarded tool's call passes Kberg's gate like any other, then goes
//! upstream through [`forward`]; what goes wrong on the way is answered with the same refusal
//! shape every other refusal has (`upstream_unavailable`, `upstream_timeout`,
//! `upstream_invalid_result`), and the upstream's result passes through unchanged. An upstream
//! that answers with a task is followed to the task's end ([`super::tasks`]). A
//! [`ForwardHook`]'s span covers the whole call, a followed task included, and the hook is told
//! how the call ended once it has: a task that fails is a failure, not the answer that created
//! it.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::{
    Content, CoreError, ErrorCode, PeerError, Refusal, Tool, ToolContext, ToolError, ToolKind,
    ToolOutput, ToolSpec, check_name,
};
use rmcp::model::GetMeta;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ContentBlock,
    ServerResult, TextContent,
};
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde_json::Value;
use tracing::Instrument;

use super::error::UpstreamError;
use super::forward::{forward, quoted, result_kind};
use super::front::{Aggregation, Upstream};
use super::hook::{ForwardHook, ForwardOutcome, OutgoingCall};
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
        if let Some(meta) = &t.meta {
            spec.meta = tool_meta(up, meta.0.clone());
        }
        spec.icons = icons(t.icons.as_deref());
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
                    skipped.push((quoted(up, &remote), quoted(up, &reason)));
                }
            }
        }
        Ok::<(), std::convert::Infallible>(())
    });
    // Every skipped tool is logged, the one whose name the registry cannot take too.
    for (remote, reason) in &skipped {
        tracing::warn!(namespace = up.namespace(), tool = ?remote, ?reason, "upstream tool skipped");
    }
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
        let Some(hook) = &self.up.hook else {
            let answer = forward(&self.up, request, Some(&ctx)).await;
            return self.answer(answer, &ctx).await.0;
        };
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
        // Told how the call ended once it has ended: a task the upstream runs it as is followed
        // to its end inside the span first. A call the gate drops (cancelled) tells it on drop.
        let mut report = Report {
            hook: hook.as_ref(),
            span: span.clone(),
            done: false,
        };
        let (answer, ended) = async {
            let answer = forward(&self.up, request, Some(&ctx)).await;
            self.answer(answer, &ctx).await
        }
        .instrument(span)
        .await;
        // The code is the upstream's own text, and a hook puts it where the caller never looks
        // (a span attribute sent to a collector): redacted like every other thing the upstream
        // says.
        let code = match &ended {
            Ended::ToolError(Some(c)) => Some(self.up.redactions.text(c)),
            _ => None,
        };
        if matches!(code, Some(std::borrow::Cow::Owned(_))) {
            self.up.redactions.said(ns, "a tool error's code");
        }
        let outcome = match ended {
            Ended::Answered => ForwardOutcome::Answered,
            Ended::ToolError(_) => ForwardOutcome::ToolError {
                code: code.as_deref(),
            },
            Ended::Refused(code) => ForwardOutcome::Refused { code },
            Ended::Failed(code) => ForwardOutcome::Failed { code },
        };
        report.finished(outcome);
        answer
    }
}

/// How a forwarded call ended, for its hook: [`ForwardOutcome`] with the tool error's code as
/// the upstream sent it (redacted before the hook sees it).
enum Ended {
    Answered,
    ToolError(Option<String>),
    Refused(i32),
    Failed(&'static str),
}

impl Ended {
    /// A tool result of the upstream's (given directly, or as its task's result).
    fn of_result(out: &ToolOutput) -> Self {
        if out.is_error {
            Ended::ToolError(
                out.structured
                    .as_ref()
                    .and_then(|s| s.get("code"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
            )
        } else {
            Ended::Answered
        }
    }

    /// The aggregator's own answer, by its stable code.
    fn of_upstream(e: &UpstreamError) -> Self {
        match e {
            UpstreamError::Refused { code, .. } => Ended::Refused(*code),
            e => Ended::Failed(e.code().as_str()),
        }
    }
}

/// Tells the hook how its call ended, once: `cancelled` when the call's future is dropped
/// before it ended (the gate drops a cancelled call's future).
struct Report<'h> {
    hook: &'h dyn ForwardHook,
    span: tracing::Span,
    done: bool,
}

impl Report<'_> {
    fn finished(&mut self, outcome: ForwardOutcome<'_>) {
        self.done = true;
        self.hook.finished(&self.span, outcome);
    }
}

impl Drop for Report<'_> {
    fn drop(&mut self) {
        if !self.done && !std::thread::panicking() {
            self.done = true;
            self.hook.finished(
                &self.span,
                ForwardOutcome::Failed {
                    code: ErrorCode::Cancelled.as_str(),
                },
            );
        }
    }
}

impl ForwardedTool {
    /// The call's answer from the upstream's, a task followed to its end, and how it ended.
    async fn answer(
        &self,
        answer: Result<ServerResult, UpstreamError>,
        ctx: &ToolContext,
    ) -> (Result<ToolOutput, ToolError>, Ended) {
        let name = &self.spec.name;
        let ns = self.up.namespace();
        match answer {
            Ok(ServerResult::CallToolResult(r)) => {
                let out = to_output(&self.up, r);
                let ended = Ended::of_result(&out);
                (Ok(out), ended)
            }
            // The upstream runs the call as a task: follow it to its end.
            Ok(ServerResult::CreateTaskResult(t)) => {
                match super::tasks::follow(&self.up, t.task, ctx).await {
                    Ok(out) => {
                        let ended = Ended::of_result(&out);
                        (Ok(out), ended)
                    }
                    Err(Followed::Upstream(e)) => (Ok(refusal(name, &e)), Ended::of_upstream(&e)),
                    // The task failed or was cancelled upstream, or the call was cancelled:
                    // as the gate answers it.
                    Err(Followed::Tool(e)) => {
                        let code = match &e {
                            ToolError::Peer(PeerError::Cancelled) => ErrorCode::Cancelled,
                            _ => ErrorCode::ToolFailed,
                        };
                        (Err(e), Ended::Failed(code.as_str()))
                    }
                }
            }
            Ok(other) => {
                let e = UpstreamError::InvalidResult {
                    namespace: ns.to_string(),
                    expected: "a tool result",
                    found: result_kind(&self.up, &other),
                };
                (Ok(refusal(name, &e)), Ended::of_upstream(&e))
            }
            Err(
                e @ (UpstreamError::Unavailable { .. }
                | UpstreamError::Timeout { .. }
                | UpstreamError::InvalidResult { .. }),
            ) => (Ok(refusal(name, &e)), Ended::of_upstream(&e)),
            // The gate answers this as `cancelled`.
            Err(UpstreamError::Cancelled) => (
                Err(ToolError::Peer(PeerError::Cancelled)),
                Ended::of_upstream(&UpstreamError::Cancelled),
            ),
            // The upstream's own refusal or failure: the gate answers `tool_failed` with it.
            Err(e) => {
                let ended = Ended::of_upstream(&e);
                (Err(ToolError::failed(e.to_string())), ended)
            }
        }
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
        .into_iter()
        .map(|block| match block {
            // The most common block, plain text with nothing else to carry, is taken as it is
            // (every call's answer passes here); any other goes through MCP's JSON shape.
            ContentBlock::Text(TextContent {
                text,
                meta: None,
                annotations: None,
                ..
            }) => Content::Text(text),
            other => upstream_content(up, serde_json::to_value(&other).unwrap_or(Value::Null)),
        })
        .collect();
    ToolOutput {
        content,
        structured: r.structured_content,
        is_error: r.is_error.unwrap_or(false),
        meta: r.meta.map(|m| Box::new(m.0)),
    }
}

/// An upstream's icons (of a tool, a prompt) as Kberg's.
pub(super) fn icons(icons: Option<&[rmcp::model::Icon]>) -> Vec<kberg_core::Icon> {
    let icons = icons.map(|i| serde_json::to_value(i).unwrap_or(Value::Null));
    kberg_core::Icon::read_all(icons.as_ref())
}

/// Beside MCP Apps' `ui.resourceUri`, the keys of a tool's `_meta` that name the view an app
/// shows for it: that key's older flat form `ui/resourceUri`, and the ChatGPT apps'
/// `openai/outputTemplate`.
const VIEW_KEYS: [&str; 2] = ["ui/resourceUri", "openai/outputTemplate"];

/// An upstream tool's `_meta` as the aggregator's clients see it: as it came, except that when
/// the upstream's resources are forwarded, the view it names is the forwarded view's URI, the
/// one a host reads it by through the aggregator ([`namespaced_uri`]), and that an upstream
/// Kberg server's `kberg/capability` is dropped: what the aggregator's own gate asks of a
/// forwarded call is its write rules', which kberg-server adds again.
fn tool_meta(
    up: &Upstream,
    mut meta: serde_json::Map<String, Value>,
) -> serde_json::Map<String, Value> {
    meta.remove(crate::convert::CAPABILITY_META);
    if up.resources.is_some() {
        for (key, value) in meta.iter_mut() {
            let view = match key.as_str() {
                "ui" => value.get_mut("resourceUri"),
                k if VIEW_KEYS.contains(&k) => Some(value),
                _ => None,
            };
            if let Some(Value::String(uri)) = view {
                *uri = namespaced_uri(up.namespace(), uri);
            }
        }
    }
    meta
}

/// A content block an upstream sent (in a tool result or a prompt message) as the
/// aggregator's clients see it: [`content_of`], and when the upstream's resources are
/// forwarded, a resource link's or an embedded resource's URI under the upstream's namespace
/// (`ev+demo://...`), the URI a client reads it by through the aggregator. Without resource
/// forwarding the upstream's URI is kept: no namespaced URI would answer either.
pub(super) fn upstream_content(up: &Upstream, v: Value) -> Content {
    let mut content = content_of(v);
    if up.resources.is_some() {
        match content.block_mut() {
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
