//! Which agents know of an upstream's tools: only those whose projects the upstream serves.
//!
//! The front tools of every upstream sit in the gateway's one public registry, so without a
//! filter every agent would list every upstream's tools, including those of an upstream mapped
//! to none of its projects (calling one was refused, but the listing told the agent it exists,
//! and an agent must never learn of a project it may not use). [`UpstreamVisibility`] is the
//! registry's [`ToolVisibility`]: a front tool `<namespace>__<tool>` is shown to a configured
//! agent when its upstream serves every project (no mapping) or one of the projects the agent
//! may use, read live from the route's mapping and the agent registry, so an admin's change of
//! either holds from the next listing and call. A hidden tool answers `unknown_tool`, as one
//! that does not exist. Tools of no upstream (the gateway's own, the mounted tool sets) are
//! left to the other checks.
//!
//! This is a lookup only (the mapping and the agent's project list, in memory): whether a
//! mapped project lets the agent's type read or write through the upstream is the front tool's
//! check, which reads the project documents off the async threads.

use std::collections::BTreeMap;
use std::sync::Arc;

use kberg_core::{Caller, ToolSpec, ToolVisibility};
use kberg_server::aggregate::DEFAULT_SEPARATOR;

use super::route::Route;
use crate::context::GatewayContext;

/// The public registry's filter over the upstreams' front tools (see the module docs).
pub(crate) struct UpstreamVisibility {
    pub(crate) routes: BTreeMap<String, Arc<Route>>,
    pub(crate) gw: Arc<GatewayContext>,
}

impl UpstreamVisibility {
    /// Whether the configured agent `agent` may know of the tools of `route`.
    fn shows(&self, route: &Route, agent: &str) -> bool {
        // Read in place: this runs for every upstream tool of every listing and call. An agent
        // that is not configured may use no project, so it learns of no upstream.
        self.gw
            .agents
            .inspect(agent, |config| route.serves_any(|p| config.may_use(p)))
            .unwrap_or(false)
    }
}

impl ToolVisibility for UpstreamVisibility {
    fn visible(&self, tool: &ToolSpec, caller: &Caller) -> bool {
        // A namespace never contains the separator, so the first one ends it.
        let Some((namespace, _)) = tool.name.split_once(DEFAULT_SEPARATOR) else {
            return true;
        };
        match self.routes.get(namespace) {
            Some(route) => self.shows(route, &caller.principal().id),
            None => true,
        }
    }
}
