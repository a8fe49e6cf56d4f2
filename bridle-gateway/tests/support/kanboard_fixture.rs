//! The Kanboard tools over the stand-in, as the tests of one agent's calls use them.

use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::kanboard::{self, Credential, KanboardClient, KanboardTools, StaticAccess};
use kberg_core::ToolRegistry;

use super::kanboard_standin::KanboardStandIn;

/// A registry with the Kanboard tools over `kb`, for the agent `claude` as the Kanboard user
/// `claude-bot` (token `claude-kb-token`, to be added with [`KanboardStandIn::add_user`]) with
/// `projects` mapped.
pub fn claude_tools(kb: &KanboardStandIn, projects: &[i64]) -> ToolRegistry {
    let access = StaticAccess::new().agent(
        "claude",
        Credential::User {
            username: "claude-bot".into(),
            token: "claude-kb-token".into(),
        },
        projects.iter().copied(),
    );
    let client = KanboardClient::new(
        kb.endpoint.parse().expect("the stand-in's URL"),
        Duration::from_secs(10),
    )
    .expect("a client");
    let tools = ToolRegistry::new();
    kanboard::register(&tools, KanboardTools::new(client, Arc::new(access)))
        .expect("the Kanboard tools register");
    tools
}
