//! [`McpApp`]: what an app serves, independent of how it is reached.
//!
//! An app is its three registries plus the identity it announces (name, version, title,
//! instructions). The same `McpApp` is served over HTTP and stdio at once if the app wants; the
//! registries are shared, so a tool registered at runtime appears on every transport and every
//! connected client is told (`list_changed`). Its [`TaskStore`] keeps the tasks of the tools
//! that run as tasks (the MCP tasks extension), for every transport alike.

use std::sync::Arc;

use kberg_core::{
    PromptRegistry, ResourceRegistry, Subscriber, TaskConfig, TaskStore, ToolRegistry,
};

/// Default page size of `tools/list`, `resources/list` and `resources/templates/list`.
pub const DEFAULT_PAGE_SIZE: usize = 100;

pub(crate) struct AppInner {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) title: Option<String>,
    pub(crate) instructions: Option<String>,
    pub(crate) tools: ToolRegistry,
    pub(crate) resources: ResourceRegistry,
    pub(crate) prompts: PromptRegistry,
    pub(crate) page_size: usize,
    /// How many resources one 2025-11-25 session, or one 2026-07-28 listen stream, may be
    /// subscribed to at once.
    pub(crate) max_resource_subscriptions: usize,
    pub(crate) tasks: TaskStore,
}

/// The tools, resources and prompts an app serves, and how it introduces itself. Cheap to
/// clone (shared).
#[derive(Clone)]
pub struct McpApp {
    pub(crate) inner: Arc<AppInner>,
}

impl std::fmt::Debug for McpApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpApp")
            .field("name", &self.inner.name)
            .field("version", &self.inner.version)
            .field("tools", &self.inner.tools)
            .field("resources", &self.inner.resources)
            .field("prompts", &self.inner.prompts)
            .finish()
    }
}

impl McpApp {
    /// Starts building an app that announces itself as `name` `version`.
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> McpAppBuilder {
        McpAppBuilder {
            inner: AppInner {
                name: name.into(),
                version: version.into(),
                title: None,
                instructions: None,
                tools: ToolRegistry::new(),
                resources: ResourceRegistry::new(),
                prompts: PromptRegistry::new(),
                page_size: DEFAULT_PAGE_SIZE,
                max_resource_subscriptions: Subscriber::DEFAULT_LIMIT,
                tasks: TaskStore::new(ToolRegistry::new(), TaskConfig::default()),
            },
            task_config: TaskConfig::default(),
        }
    }

    /// The app's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The app's version.
    pub fn version(&self) -> &str {
        &self.inner.version
    }

    /// The tool registry (shared: registering here shows on every transport).
    pub fn tools(&self) -> &ToolRegistry {
        &self.inner.tools
    }

    /// The resource registry (shared).
    pub fn resources(&self) -> &ResourceRegistry {
        &self.inner.resources
    }

    /// The prompt registry (shared).
    pub fn prompts(&self) -> &PromptRegistry {
        &self.inner.prompts
    }

    /// The app's tasks (tools declared with [`kberg_core::TaskSupport`] run as tasks for
    /// clients that support the tasks extension).
    pub fn tasks(&self) -> &TaskStore {
        &self.inner.tasks
    }
}

/// Builds an [`McpApp`]. Registries not given are empty (and can be filled later through the
/// app's accessors).
#[must_use]
pub struct McpAppBuilder {
    inner: AppInner,
    task_config: TaskConfig,
}

impl std::fmt::Debug for McpAppBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpAppBuilder")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl McpAppBuilder {
    /// Serves this tool registry.
    pub fn tools(mut self, tools: ToolRegistry) -> Self {
        self.inner.tools = tools;
        self
    }

    /// Serves this resource registry.
    pub fn resources(mut self, resources: ResourceRegistry) -> Self {
        self.inner.resources = resources;
        self
    }

    /// Serves this prompt registry.
    pub fn prompts(mut self, prompts: PromptRegistry) -> Self {
        self.inner.prompts = prompts;
        self
    }

    /// Instructions for the client's model, sent at `initialize` / `server/discover`.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.inner.instructions = Some(instructions.into());
        self
    }

    /// A human title.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.inner.title = Some(title.into());
        self
    }

    /// Items per page of the list methods (at least 1).
    pub fn page_size(mut self, n: usize) -> Self {
        self.inner.page_size = n.max(1);
        self
    }

    /// How many resources one client may be subscribed to at once: a 2025-11-25 session
    /// (`resources/subscribe`), or one 2026-07-28 `subscriptions/listen` stream (the URIs of
    /// its filter), on every transport. Default [`Subscriber::DEFAULT_LIMIT`] (1,000); 0 allows
    /// no subscription.
    ///
    /// Why a bound: a URI template makes every URI it matches subscribable, and each
    /// subscription costs the registry an entry (behind an aggregator, one subscription
    /// upstream), so without it one client could grow them without end. Past it, a
    /// `resources/subscribe` is refused with `-32602` and subscribes nothing; a listen filter
    /// is accepted with its first this-many URIs that exist (its acknowledgement lists them).
    pub fn max_resource_subscriptions(mut self, n: usize) -> Self {
        self.inner.max_resource_subscriptions = n;
        self
    }

    /// How long tasks live, the polling interval suggested to clients, and how many tasks a
    /// principal may hold (defaults: [`TaskConfig::default`]).
    pub fn task_config(mut self, config: TaskConfig) -> Self {
        self.task_config = config;
        self
    }

    /// Finishes the app.
    pub fn build(self) -> McpApp {
        let mut inner = self.inner;
        inner.tasks = TaskStore::new(inner.tools.clone(), self.task_config);
        McpApp {
            inner: Arc::new(inner),
        }
    }
}
