//! Prompt forwarding: the upstream's prompts, namespaced like its tools, in the aggregator's
//! [`PromptRegistry`], and `prompts/get` forwarded to the upstream.
//!
//! The list is read on each (re)connection and list change; a prompt whose description did not
//! change stays registered, so a concurrent `prompts/get` never finds it missing. A failure
//! here is logged and leaves the upstream's tools unaffected; a forwarded `prompts/get` that
//! goes wrong answers `<code>: <sentence>` with the stable upstream code.

use std::collections::BTreeSet;
use std::sync::Arc;

use kberg_core::{
    PromptArgs, PromptArgument, PromptMessage, PromptRegistry, PromptResult, PromptSpec, Role,
};
use rmcp::model::{ClientRequest, GetPromptRequest, GetPromptRequestParams, ServerResult};
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;

use super::error::UpstreamError;
use super::forward::{forward, quoted, result_kind};
use super::front::{Aggregation, Upstream};
use super::tools::upstream_content;

/// Reads the upstream's prompts (when it offers any) and registers them namespaced; the previous
/// set is replaced. A failure here is logged and leaves tools unaffected.
pub(super) async fn sync_prompts(
    shared: &Aggregation,
    prompts: &PromptRegistry,
    up: &Arc<Upstream>,
    peer: &Peer<RoleClient>,
) {
    let offers = peer
        .peer_info()
        .is_some_and(|i| i.capabilities.prompts.is_some());
    let listed = if offers {
        match super::pages::prompts(peer).await {
            Ok(p) => p,
            Err(e) => {
                // An upstream's error may quote the credential it was sent.
                let error = quoted(up, &e.to_string());
                tracing::warn!(namespace = up.namespace(), ?error, "listing prompts failed");
                return;
            }
        }
    } else {
        Vec::new()
    };
    let old = up
        .registered_prompts
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    let mut wanted = Vec::new();
    for p in listed {
        let name = format!("{}{}{}", up.namespace(), shared.separator, p.name);
        let mut spec = PromptSpec::new(name.clone(), p.description.clone().unwrap_or_default());
        spec.description = p.description.clone();
        spec.title = p.title.clone();
        spec.icons = super::tools::icons(p.icons.as_deref());
        for a in p.arguments.iter().flatten() {
            let mut arg = if a.required.unwrap_or(false) {
                PromptArgument::required(a.name.clone(), a.description.clone().unwrap_or_default())
            } else {
                PromptArgument::optional(a.name.clone(), a.description.clone().unwrap_or_default())
            };
            arg.description = a.description.clone();
            arg.title = a.title.clone();
            spec = spec.argument(arg);
        }
        wanted.push((name, spec, p.name.clone()));
    }
    let mut now = BTreeSet::new();
    // One edit: a listing never shows part of the change, and clients hear of one change.
    // Prompts whose description did not change stay registered as they are.
    let Ok(()) = prompts.edit(|e| {
        for name in &old {
            let unchanged = wanted
                .iter()
                .any(|(n, spec, _)| n == name && e.spec(name) == Some(spec));
            if unchanged {
                now.insert(name.clone());
            } else {
                e.remove(name);
            }
        }
        for (name, spec, remote) in wanted {
            if now.contains(&name) {
                continue;
            }
            let upstream = up.clone();
            let registered = e.register(spec, move |args| {
                let remote = remote.clone();
                let upstream = upstream.clone();
                async move { forward_prompt(&upstream, &remote, args).await }
            });
            match registered {
                Ok(()) => {
                    now.insert(name);
                }
                Err(err) => {
                    // The upstream's words (its prompt's name, quoted by the error).
                    let (name, error) = (quoted(up, &name), quoted(up, &err.to_string()));
                    tracing::warn!(namespace = up.namespace(), prompt = ?name, ?error, "upstream prompt skipped");
                }
            }
        }
        Ok::<(), std::convert::Infallible>(())
    });
    if let Ok(mut r) = up.registered_prompts.lock() {
        *r = now;
    }
}

async fn forward_prompt(
    up: &Upstream,
    remote: &str,
    args: PromptArgs,
) -> Result<PromptResult, String> {
    let ns = up.namespace();
    let arguments: serde_json::Map<String, Value> = args
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let params = GetPromptRequestParams::new(remote).with_arguments(arguments);
    let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(params));
    let result = match forward(up, request, None).await {
        Ok(ServerResult::GetPromptResult(r)) => r,
        Ok(other) => {
            return Err(UpstreamError::InvalidResult {
                namespace: ns.to_string(),
                expected: "a prompt",
                found: result_kind(up, &other),
            }
            .coded_message());
        }
        Err(e) => return Err(e.coded_message()),
    };
    let v = serde_json::to_value(&result)
        .map_err(|e| format!("the server `{ns}` sent an unreadable prompt: {e}"))?;
    let messages = v
        .get("messages")
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .map(|msg| PromptMessage {
                    role: if msg.get("role").and_then(Value::as_str) == Some("assistant") {
                        Role::Assistant
                    } else {
                        Role::User
                    },
                    content: upstream_content(
                        up,
                        msg.get("content").cloned().unwrap_or(Value::Null),
                    ),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(PromptResult {
        description: v
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string),
        messages,
    })
}
