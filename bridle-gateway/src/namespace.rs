//! Mounting a tool set under a namespace: every tool of a private registry offered in the
//! gateway's registry as `<namespace>__<tool>`, the same naming the upstream MCP servers get, so
//! two tool sets never collide (Kanboard's `list_projects` beside the gateway's own).
//!
//! A mounted tool forwards the real caller to the private registry, so its gate checks again
//! what the tool set itself declares (a write's capability, the arguments); the public gate has
//! already checked the same spec first.

use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::{
    CallOptions, Caller, CoreError, Principal, Tool, ToolContext, ToolError, ToolOutput,
    ToolRegistry, ToolSpec,
};
use serde_json::Value;

/// The options for passing a call on to another registry: the same cancellation, client
/// channel, progress token, `_meta`, origin (session and client, shared) and client identity
/// as the call being handled.
pub(crate) fn forwarded_options(ctx: &ToolContext) -> CallOptions {
    // The client usually comes with the origin; copy it only when it came on its own.
    let origin_client = ctx.origin().is_some_and(|o| o.client.is_some());
    let mut opts = CallOptions::with_cancel(ctx.cancellation().clone());
    if let Some(peer) = ctx.peer() {
        opts = opts.with_peer(Arc::clone(peer));
    }
    if let Some(token) = ctx.meta().and_then(|m| m.get("progressToken")) {
        opts = opts.with_progress_token(token.clone());
    }
    if let Some(meta) = ctx.meta() {
        opts = opts.with_meta(meta.clone());
    }
    if let Some(client) = ctx.client().filter(|_| !origin_client) {
        opts = opts.with_client(client.clone());
    }
    if let Some(origin) = ctx.origin() {
        opts = opts.with_origin(Arc::clone(origin));
    }
    opts
}

struct Mounted {
    spec: ToolSpec,
    inner: String,
    private: ToolRegistry,
}

#[async_trait]
impl Tool for Mounted {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let opts = forwarded_options(&ctx);
        match self
            .private
            .call(ctx.caller(), &self.inner, args, opts)
            .await
        {
            Ok(out) => Ok(out),
            Err(e) => Ok(e.to_output()),
        }
    }
}

/// Registers every tool of `private` in `public` as `<namespace>__<tool>`, declaring the write
/// capabilities they use. Returns the names registered.
pub fn mount(
    public: &ToolRegistry,
    private: &ToolRegistry,
    namespace: &str,
) -> Result<Vec<String>, CoreError> {
    for cap in private.capabilities() {
        match public.declare(cap) {
            Ok(()) | Err(CoreError::DuplicateCapability { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let everyone = Caller::new(Principal::new("bridle-gateway/mount"));
    let mut names = Vec::new();
    for spec in private.list(&everyone) {
        let inner = spec.name.clone();
        let Some(mut spec) = private.spec(&inner) else {
            continue;
        };
        spec.name = format!("{namespace}__{inner}");
        names.push(spec.name.clone());
        // Its refusals name the tool as the agent called it (see `crate::error`).
        public.register(crate::error::NamedRefusals::new(Mounted {
            spec,
            inner,
            private: private.clone(),
        }))?;
    }
    Ok(names)
}
