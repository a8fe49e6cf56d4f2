//! The [`ToolRegistry`]: where an app keeps its tools, and the door to the gate.
//!
//! The registry is a copy-on-write [`Catalog`] behind an atomic pointer: a call loads the
//! current catalog without taking a lock, so readers never wait for a writer, and a tool removed
//! while a call is running finishes that call (the call holds its own reference) while later
//! calls see it gone. Writers serialize on a mutex and publish a new catalog; each change to the
//! tool list bumps a version observable through [`ToolRegistry::changes`], which a transport
//! turns into `notifications/tools/list_changed`.
//!
//! The app configures the primitives once, with [`ToolRegistry::builder`]: the audit sink, the
//! handle codec, commit tokens, the confirm policy, tickets. [`ToolRegistry::call`] hands each
//! call to the gate (the `gate` module, which documents its order and refusals) with the
//! current catalog. An app that shows different callers different tools sets a
//! [`ToolVisibility`]; it lives in the catalog, so a listing and a call read the same one. This
//! is the top layer of the crate: it imports the gate and the catalog,
//! and nothing below imports it.

use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::watch;

use crate::audit::AuditSink;
use crate::capability::WriteCapability;
use crate::catalog::{Catalog, Entry, GateSettings, ToolVisibility};
use crate::confirm::{
    ConfirmConfig, ConfirmPolicy, ConfirmTicket, TicketDesk, TicketRunner, TicketStore,
};
use crate::content::ToolOutput;
use crate::context::CallOptions;
use crate::error::{CoreError, GateError};
use crate::gate::Gate;
use crate::handle::HandleCodec;
use crate::pagination::{InvalidCursor, Page, paginate};
use crate::preview::CommitConfig;
use crate::principal::{Caller, SurfaceProjection};
use crate::scope::{ScopeSpec, check_scope_name};
use crate::tool::{TaskSupport, Tool, ToolKind, ToolSpec, check_name};

/// The registry's shared state: the published catalog, its writer lock and version, the gate.
struct RegistryState {
    current: ArcSwap<Catalog>,
    writer: Mutex<()>,
    version: watch::Sender<u64>,
    gate: Gate,
}

/// The app's tools, refusals and capabilities, and the gate. Cheap to clone (shared).
#[derive(Clone)]
pub struct ToolRegistry {
    state: Arc<RegistryState>,
}

/// The changes of one [`ToolRegistry::edit`], applied to a copy of the catalog that is
/// published when the edit ends.
pub struct ToolEdit<'a> {
    catalog: &'a mut Catalog,
    changed: bool,
}

impl std::fmt::Debug for ToolEdit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolEdit")
            .field("tools", &self.catalog.tools.len())
            .field("changed", &self.changed)
            .finish()
    }
}

impl ToolEdit<'_> {
    /// Registers a tool, as [`ToolRegistry::register_arc`] does: fails on a duplicate or
    /// refused name, an invalid name, a schema that does not compile, or a write tool whose
    /// capability is not declared (and then changes nothing).
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), CoreError> {
        insert_entry(self.catalog, Entry::compile(tool)?)?;
        self.changed = true;
        Ok(())
    }

    /// Removes a tool; returns whether it was registered (in this edit too).
    pub fn remove(&mut self, name: &str) -> bool {
        self.catalog.ranks.remove(name);
        let removed = self.catalog.tools.remove(name).is_some();
        self.changed |= removed;
        removed
    }

    /// The spec of a tool as the edit stands.
    pub fn spec(&self, name: &str) -> Option<ToolSpec> {
        self.catalog.tools.get(name).map(|e| e.spec.clone())
    }
}

/// Adds a compiled tool to `s`: refused for a name taken (by a tool or a refusal) and for a
/// write tool whose capability is not declared.
fn insert_entry(s: &mut Catalog, e: Entry) -> Result<(), CoreError> {
    let name: Arc<str> = e.spec.name.as_str().into();
    if s.tools.contains_key(&name) || s.refusals.contains_key(&name) {
        return Err(CoreError::Duplicate {
            name: name.to_string(),
        });
    }
    if let ToolKind::Write(cap) = &e.spec.kind
        && s.capabilities.get(cap.id()).is_none()
    {
        return Err(CoreError::UndeclaredCapability {
            tool: name.to_string(),
            capability: cap.id().to_string(),
        });
    }
    s.ranks.insert(name.clone(), s.next_rank);
    s.next_rank += 1;
    s.tools.insert(name, Arc::new(e));
    Ok(())
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.current.load();
        f.debug_struct("ToolRegistry")
            .field("tools", &s.tools.len())
            .field("refusals", &s.refusals.len())
            .finish()
    }
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self::new()
    }
}

/// Configures a [`ToolRegistry`] before its first call: where audit events go, the handle
/// codec, commit tokens, which calls wait for a human and where their tickets are kept. Every
/// setting has a default (no audit, no handles, no confirmation, tickets in memory).
///
/// ```
/// use std::sync::Arc;
/// use kberg_core::{CommitConfig, MemoryAuditSink, ToolRegistry};
///
/// let audit = Arc::new(MemoryAuditSink::new());
/// let tools = ToolRegistry::builder()
///     .audit_sink(audit.clone())
///     .commit_config(CommitConfig::default().with_max_tokens(100))
///     .build();
/// assert!(tools.is_empty());
/// ```
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Default)]
pub struct ToolRegistryBuilder {
    settings: GateSettings,
    audit: Option<Arc<dyn AuditSink>>,
    visibility: Option<Arc<dyn ToolVisibility>>,
}

impl std::fmt::Debug for ToolRegistryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRegistryBuilder")
            .field("audit", &self.audit.is_some())
            .field("handles", &self.settings.handles.is_some())
            .field("confirm", &self.settings.confirm.is_some())
            .field("confirm_config", &self.settings.confirm_config)
            .field("commit", &self.settings.commit)
            .field("visibility", &self.visibility.is_some())
            .finish_non_exhaustive()
    }
}

impl ToolRegistryBuilder {
    /// Where audit events go (default: nowhere, and the gate gathers nothing for them).
    pub fn audit_sink(mut self, sink: Arc<dyn AuditSink>) -> Self {
        self.audit = Some(sink);
        self
    }

    /// The codec that mints and resolves this app's [handles](crate::Handle). Without one, a
    /// tool with a handle argument answers `tool_failed`.
    pub fn handle_codec(mut self, codec: HandleCodec) -> Self {
        self.settings.handles = Some(Arc::new(codec));
        self
    }

    /// How long commit tokens live and how many are kept.
    pub fn commit_config(mut self, config: CommitConfig) -> Self {
        self.settings.commit = config;
        self
    }

    /// The policy that decides which calls need a human (default: none do).
    pub fn confirm_policy(mut self, policy: impl ConfirmPolicy + 'static) -> Self {
        self.settings.confirm = Some(Arc::new(policy));
        self
    }

    /// Ticket lifetime and who may decide tickets.
    pub fn confirm_config(mut self, config: ConfirmConfig) -> Self {
        self.settings.confirm_config = config;
        self
    }

    /// Where tickets are kept (default: in memory). Use a persistent store (for example
    /// `SqliteTicketStore`, feature `sqlite`) for tickets to survive a restart.
    pub fn ticket_store(mut self, store: Arc<dyn TicketStore>) -> Self {
        self.settings.tickets = store;
        self
    }

    /// Which tools each caller may know of (default: every caller knows every tool). See
    /// [`ToolVisibility`]; [`ToolRegistry::set_tool_visibility`] changes it later.
    pub fn tool_visibility(mut self, visibility: impl ToolVisibility) -> Self {
        self.visibility = Some(Arc::new(visibility));
        self
    }

    /// The registry, empty of tools.
    pub fn build(mut self) -> ToolRegistry {
        let (version, _) = watch::channel(0);
        self.settings.audit = self.audit;
        let catalog = Catalog {
            visibility: self.visibility,
            settings: Arc::new(self.settings),
            ..Catalog::default()
        };
        ToolRegistry {
            state: Arc::new(RegistryState {
                current: ArcSwap::from_pointee(catalog),
                writer: Mutex::new(()),
                version,
                gate: Gate::new(),
            }),
        }
    }
}

#[async_trait]
impl TicketRunner for RegistryState {
    fn store(&self) -> Arc<dyn TicketStore> {
        Arc::clone(&self.current.load().settings.tickets)
    }

    fn config(&self) -> ConfirmConfig {
        self.current.load().settings.confirm_config.clone()
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.gate.ticket_changes()
    }

    fn changed(&self) {
        self.gate.tickets_changed();
    }

    async fn run_approved(
        &self,
        ticket: &ConfirmTicket,
        approver: &str,
    ) -> Result<ToolOutput, GateError> {
        self.gate
            .run_approved(self.current.load_full(), ticket, approver)
            .await
    }
}

impl ToolRegistry {
    /// An empty registry with default settings (see [`ToolRegistry::builder`]).
    pub fn new() -> Self {
        Self::builder().build()
    }

    /// Configures a registry: audit, handles, commit tokens, confirmation, tickets.
    pub fn builder() -> ToolRegistryBuilder {
        ToolRegistryBuilder::default()
    }

    fn lock_writer(&self) -> MutexGuard<'_, ()> {
        // The guard protects no data of its own (the catalog is swapped atomically), so a
        // poisoned lock carries no torn state.
        self.state
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `f` to a copy of the catalog and publishes it if `f` succeeds.
    fn update<R>(
        &self,
        f: impl FnOnce(&mut Catalog) -> Result<R, CoreError>,
    ) -> Result<R, CoreError> {
        let _guard = self.lock_writer();
        let mut next = Catalog::clone(&self.state.current.load());
        let r = f(&mut next)?;
        self.state.current.store(Arc::new(next));
        self.state.version.send_modify(|v| *v += 1);
        Ok(r)
    }

    /// The handle codec, if set (to mint handles outside a tool call).
    pub fn handle_codec(&self) -> Option<Arc<HandleCodec>> {
        self.state.current.load().settings.handles.clone()
    }

    /// The app's window on confirm tickets: list, approve, deny, fetch results.
    pub fn tickets(&self) -> TicketDesk {
        TicketDesk::new(Arc::clone(&self.state) as Arc<dyn TicketRunner>)
    }

    /// Declares a scope tools can work in. A name is declared once.
    pub fn declare_scope(&self, scope: ScopeSpec) -> Result<(), CoreError> {
        check_scope_name(&scope.name)?;
        let _guard = self.lock_writer();
        let mut next = Catalog::clone(&self.state.current.load());
        if next.scopes.contains_key(&scope.name) {
            return Err(CoreError::Duplicate { name: scope.name });
        }
        Arc::make_mut(&mut next.scopes).insert(scope.name.clone(), scope);
        // Scopes do not change the tool list, so no version bump.
        self.state.current.store(Arc::new(next));
        Ok(())
    }

    /// Removes a declared scope; later calls naming it answer `scope_unknown`. Returns whether
    /// it was declared.
    pub fn remove_scope(&self, name: &str) -> bool {
        let _guard = self.lock_writer();
        let mut next = Catalog::clone(&self.state.current.load());
        let removed = Arc::make_mut(&mut next.scopes).remove(name).is_some();
        if removed {
            self.state.current.store(Arc::new(next));
        }
        removed
    }

    /// The declared scopes, sorted by name.
    pub fn scopes(&self) -> Vec<ScopeSpec> {
        self.state.current.load().scopes.values().cloned().collect()
    }

    /// Declares a write capability. An id can be declared once; a deprecated capability's
    /// replacement must be declared first.
    pub fn declare(&self, capability: WriteCapability) -> Result<(), CoreError> {
        let _guard = self.lock_writer();
        let mut next = Catalog::clone(&self.state.current.load());
        Arc::make_mut(&mut next.capabilities).declare(capability)?;
        // Capabilities do not change the tool list, so no version bump.
        self.state.current.store(Arc::new(next));
        Ok(())
    }

    /// The declared capabilities.
    pub fn capabilities(&self) -> Vec<WriteCapability> {
        self.state.current.load().capabilities.all()
    }

    /// Registers a tool. Fails on a duplicate or refused name, an invalid name, a schema that
    /// does not compile, or a write tool whose capability is not declared.
    pub fn register(&self, tool: impl Tool) -> Result<(), CoreError> {
        self.register_arc(Arc::new(tool))
    }

    /// Registers a shared tool.
    pub fn register_arc(&self, tool: Arc<dyn Tool>) -> Result<(), CoreError> {
        self.register_all([tool])
    }

    /// Registers several tools at once, all or none: one snapshot copy for the whole batch.
    pub fn register_all(
        &self,
        tools: impl IntoIterator<Item = Arc<dyn Tool>>,
    ) -> Result<(), CoreError> {
        // Compile outside the writer lock: schema compilation is the slow part.
        let entries = tools
            .into_iter()
            .map(Entry::compile)
            .collect::<Result<Vec<_>, _>>()?;
        self.update(|s| {
            for e in entries {
                insert_entry(s, e)?;
            }
            Ok(())
        })
    }

    /// Removes a tool. Calls already running finish; later calls answer `unknown_tool`.
    /// Returns whether it was registered.
    pub fn remove(&self, name: &str) -> bool {
        let Ok(done) = self.edit(|e| Ok::<_, std::convert::Infallible>(e.remove(name)));
        done
    }

    /// Changes the tool list in one step: `f` registers and removes tools on a [`ToolEdit`],
    /// and what it did is published together when it returns `Ok` (nothing when it returns
    /// `Err`). A listing or call sees the list from before or from after, never a part of the
    /// changes (a tool replaced by a new version is never missing in between), and the list's
    /// version moves once, so clients hear of one change. Each registration reports its own
    /// error, so `f` decides whether one failure fails the whole edit.
    ///
    /// Schemas compile inside the edit, while other writers wait; calls and listings do not.
    ///
    /// ```
    /// use kberg_core::{Tool, ToolBuilder, ToolOutput, ToolRegistry};
    /// use std::sync::Arc;
    ///
    /// let registry = ToolRegistry::new();
    /// let ping = |name: &str| -> Arc<dyn Tool> {
    ///     Arc::new(ToolBuilder::new(name).description("Answer pong").raw_handler(
    ///         serde_json::json!({"type": "object"}),
    ///         |_args, _ctx| async { Ok(ToolOutput::text("pong")) },
    ///     ))
    /// };
    /// registry.register_arc(ping("old")).unwrap();
    /// registry
    ///     .edit(|e| {
    ///         e.remove("old");
    ///         e.register(ping("new"))
    ///     })
    ///     .unwrap();
    /// assert!(registry.spec("old").is_none() && registry.spec("new").is_some());
    /// ```
    pub fn edit<R, E>(&self, f: impl FnOnce(&mut ToolEdit<'_>) -> Result<R, E>) -> Result<R, E> {
        let _guard = self.lock_writer();
        let mut next = Catalog::clone(&self.state.current.load());
        let mut edit = ToolEdit {
            catalog: &mut next,
            changed: false,
        };
        let r = f(&mut edit)?;
        if edit.changed {
            self.state.current.store(Arc::new(next));
            self.state.version.send_modify(|v| *v += 1);
        }
        Ok(r)
    }

    /// Sets the listing order: the named tools first, in this order, then every other tool in
    /// its registration order. Names that are not registered are skipped. Tools registered
    /// later are listed after these.
    pub fn set_tool_order<S: AsRef<str>>(&self, names: impl IntoIterator<Item = S>) {
        let names: Vec<String> = names.into_iter().map(|n| n.as_ref().to_string()).collect();
        let _ = self.update(|s| {
            let mut rest: Vec<(u64, Arc<str>)> =
                s.ranks.iter().map(|(n, r)| (*r, n.clone())).collect();
            rest.sort_unstable();
            let mut next = 0;
            let mut placed = std::collections::HashSet::new();
            for n in &names {
                if let Some((key, _)) = s.tools.get_key_value(n.as_str())
                    && placed.insert(key.clone())
                {
                    s.ranks.insert(key.clone(), next);
                    next += 1;
                }
            }
            for (_, n) in rest {
                if !placed.contains(&n) {
                    s.ranks.insert(n, next);
                    next += 1;
                }
            }
            s.next_rank = next;
            Ok(())
        });
    }

    /// Registers a refusal: a name that is deliberately not offered, with a stable reason.
    /// It is never listed; calling it answers `refused` with the reason.
    pub fn refuse(
        &self,
        name: impl Into<String>,
        reason: impl Into<String>,
    ) -> Result<(), CoreError> {
        let name: String = name.into();
        check_name(&name)?;
        let reason: Arc<str> = reason.into().into();
        self.update(|s| {
            let key: Arc<str> = name.as_str().into();
            if s.tools.contains_key(&key) || s.refusals.contains_key(&key) {
                return Err(CoreError::Duplicate { name });
            }
            s.refusals.insert(key, reason);
            Ok(())
        })
    }

    /// Sets (or with `None` removes) which tools each caller may know of; see
    /// [`ToolVisibility`]. Takes effect for the next listing and call, and bumps the version
    /// ([`ToolRegistry::changes`]) since listings may differ.
    pub fn set_tool_visibility(&self, visibility: Option<Arc<dyn ToolVisibility>>) {
        let _ = self.update(|s| {
            s.visibility = visibility;
            Ok(())
        });
    }

    /// Tells listeners ([`ToolRegistry::changes`]) that some caller's listing changed although
    /// no tool did: what the app's [`ToolVisibility`] answers for someone changed (a mapping,
    /// a membership). The tools and their order stay as they are.
    pub fn visibility_changed(&self) {
        self.state.version.send_modify(|v| *v += 1);
    }

    /// A receiver whose value changes whenever the tool list changes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.state.version.subscribe()
    }

    /// The number of registered tools.
    pub fn len(&self) -> usize {
        self.state.current.load().tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The spec of a registered tool, whatever the caller (its [`ToolVisibility`] included: an
    /// app must not hand this to a caller the tool is hidden from).
    pub fn spec(&self, name: &str) -> Option<ToolSpec> {
        self.state
            .current
            .load()
            .tools
            .get(name)
            .map(|e| e.spec.clone())
    }

    /// Whether `name` is a registered tool that `caller` may know of (its [`ToolVisibility`]
    /// asked; no projection applied). `false` for an unknown name: a transport that must look
    /// a tool up outside a call (rmcp's `Mcp-Param-*` header check) answers a hidden tool
    /// exactly as it answers an unknown one.
    pub fn visible_to(&self, name: &str, caller: &Caller) -> bool {
        let catalog = self.state.current.load();
        catalog
            .tools
            .get(name)
            .is_some_and(|e| catalog.visible(e, caller))
    }

    /// Whether a registered tool may run as a task (a lookup; nothing is cloned), and whether
    /// it gathers its input inside the call first ([`ToolSpec::task_after_input`]).
    pub fn task_support(&self, name: &str) -> Option<(TaskSupport, bool)> {
        self.state
            .current
            .load()
            .tools
            .get(name)
            .map(|e| (e.spec.task_support, e.spec.task_after_input))
    }

    /// The tools `caller` is shown, in registration order (or the order set with
    /// [`ToolRegistry::set_tool_order`]). See [`SurfaceProjection`] for what each
    /// projection lists; a tool the app's [`ToolVisibility`] hides from `caller` is never
    /// listed. The schemas are projected: a preview tool shows the optional
    /// `commit_token` argument, a scoped tool's scope argument is optional (and hidden from
    /// the `Compact` projection).
    pub fn list(&self, caller: &Caller) -> Vec<ToolSpec> {
        self.ranked_list(caller)
            .into_iter()
            .map(|(_, s)| s)
            .collect()
    }

    /// The listing with each tool's rank key (zero-padded, so the keys sort as the ranks do:
    /// the pagination cursor).
    fn ranked_list(&self, caller: &Caller) -> Vec<(String, ToolSpec)> {
        let snap = self.state.current.load();
        let compact = caller.projection() == SurfaceProjection::Compact;
        let mut v: Vec<(u64, ToolSpec)> = snap
            .tools
            .iter()
            .filter(|(_, e)| snap.lists(e, caller))
            .map(|(name, e)| {
                let rank = snap.ranks.get(name).copied().unwrap_or(u64::MAX);
                let spec = if compact {
                    e.listed_compact.clone()
                } else {
                    e.listed_full.clone()
                };
                (rank, spec)
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        v.into_iter()
            .map(|(rank, spec)| (format!("{rank:020}"), spec))
            .collect()
    }

    /// One page of [`ToolRegistry::list`]. Cursors are opaque and stay valid across changes
    /// (of the tools and of what the [`ToolVisibility`] shows): a cursor names a place in the
    /// listing order, not an item, so the next page starts after it whatever was hidden since.
    pub fn list_page(
        &self,
        caller: &Caller,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ToolSpec>, InvalidCursor> {
        let page = paginate(
            &self.ranked_list(caller),
            |(k, _)| k.as_str(),
            cursor,
            limit,
        )?;
        Ok(Page {
            items: page.items.into_iter().map(|(_, s)| s).collect(),
            next_cursor: page.next_cursor,
        })
    }

    /// Runs steps 1-4 of the gate without running the tool: the spec of the tool `caller` may
    /// call with `args`, or the refusal. Used by transports that must answer before running
    /// (and by tests).
    pub fn check(&self, caller: &Caller, name: &str, args: &Value) -> Result<ToolSpec, GateError> {
        self.state
            .gate
            .check(&self.state.current.load(), caller, name, args)
    }

    /// The gate: checks, runs and audits one call. `args` of `null` are treated as an empty
    /// object (clients may omit arguments).
    ///
    /// The order is fixed, because it is a security property (a caller who may not call a tool
    /// never receives a critique of its arguments): the tool exists (or its refusal answers) →
    /// it is in the caller's projection → a write tool's capability is granted → the arguments
    /// validate (commit token taken out, scope filled and checked, handles resolved after) →
    /// preview / commit and human confirmation → the tool runs with the call's cancellation
    /// token → an [`AuditEvent`](crate::AuditEvent) is recorded when a sink is set. Each
    /// refusal is a [`GateError`] with a stable [`ErrorCode`](crate::ErrorCode).
    ///
    /// The synchronous checks (existence, projection, grant, arguments) run when `call` is
    /// invoked, against the registry's current tools; the returned future carries the rest
    /// (confirmation, the tool's run, the audit event) and does nothing until polled. (Written
    /// as a function returning the gate's future rather than an `async fn`, which would defer
    /// the checks and wrap that future in one more of its own size.)
    pub fn call<'a>(
        &'a self,
        caller: &'a Caller,
        name: &'a str,
        args: Value,
        opts: CallOptions,
    ) -> impl Future<Output = Result<ToolOutput, GateError>> + Send + 'a {
        self.state
            .gate
            .call(&self.state.current.load(), caller, name, args, opts, None)
    }
}
