//! The [`ToolRegistry`] and the dispatch gate every tool call passes through.
//!
//! The registry is a copy-on-write snapshot behind an atomic pointer: a call loads the current
//! snapshot without taking a lock, so readers never wait for a writer, and a tool removed while
//! a call is running finishes that call (the call holds its own reference) while later calls see
//! it gone. Writers serialize on a mutex and publish a new snapshot; each change bumps a version
//! observable through [`ToolRegistry::changes`], which a transport turns into
//! `notifications/tools/list_changed`.
//!
//! [`ToolRegistry::call`] is the gate. Its order is fixed and documented because it is a
//! security property: a caller who may not call a tool learns that, never a critique of
//! arguments it was not entitled to send.
//!
//! 1. the tool exists (a registered refusal answers with its reason);
//! 2. it is visible in the caller's projection;
//! 3. a write tool's capability is granted (directly or through a deprecated id);
//! 4. the arguments validate against the schema compiled at registration. Before that the gate
//!    takes out what belongs to it: a preview tool's `commit_token`, and the scope argument,
//!    which it fills from the caller's current scope and checks (`scope_required`,
//!    `scope_unknown`, `scope_forbidden`); after it, every [handle](crate::Handle) argument is
//!    resolved to the app's internal id (`handle_invalid`, `handle_expired`);
//! 5. confirm / preview: a preview tool without a token runs as a dry run and answers with a
//!    commit token; with one, the token is redeemed (single use, bound to tool, principal and
//!    arguments). Then the app's [`ConfirmPolicy`] may hold the call for a human: asked through
//!    the client (elicitation) or filed as a ticket (`pending_human_confirm`);
//! 6. the tool runs with the call's cancellation token; if the token fires first the call is
//!    dropped and answers `cancelled` (so does a tool that stops with an error once it fired);
//!    a panicking tool answers `tool_failed`;
//! 7. an [`AuditEvent`] is recorded, whatever the outcome, with the argument digest and any
//!    ticket or commit-token fingerprint.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use futures::FutureExt;
use serde_json::Value;
use tokio::sync::watch;

use serde_json::json;

use crate::audit::{AuditEvent, AuditOutcome, AuditSink};
use crate::capability::{Authorization, CapabilityCatalog, WriteCapability};
use crate::confirm::{
    ConfirmConfig, ConfirmPolicy, ConfirmRequest, ConfirmTicket, MemoryTicketStore, TicketDesk,
    TicketStatus, TicketStore, new_ticket_id,
};
use crate::context::{CallExtras, CallOptions, PeerError, ToolContext};
use crate::digest::{argument_digest, canonical_digest, canonical_json, redact};
use crate::error::{CoreError, GateError};
use crate::handle::{HandleCodec, HandleError, HandleSite, handle_sites, resolve_sites};
use crate::preview::{
    COMMIT_TOKEN_FIELD, CallPhase, CommitConfig, CommitTokens, preview_envelope_schema,
    preview_output, project_commit_field, token_fingerprint,
};
use crate::principal::{Caller, SurfaceProjection};
use crate::scope::{ScopeSpec, find_scope_field, project_scope};
use crate::tool::{Tool, ToolError, ToolKind, ToolOutput, ToolSpec, check_name};
use crate::validate::{CompiledSchema, FieldError};

/// A registered tool with its compiled schemas.
struct Entry {
    spec: ToolSpec,
    tool: Arc<dyn Tool>,
    input: CompiledSchema,
    output: Option<CompiledSchema>,
    /// What the `Full` projection lists (commit token added, scope optional).
    listed_full: ToolSpec,
    /// What the `Compact` projection lists (the scope argument hidden too).
    listed_compact: ToolSpec,
    /// Where handle arguments sit.
    handles: Vec<HandleSite>,
}

#[derive(Default, Clone)]
struct Snapshot {
    tools: HashMap<Arc<str>, Arc<Entry>>,
    /// Each tool's place in the listing: registration order, or the app's explicit order
    /// ([`ToolRegistry::set_tool_order`]). Small models act differently on a differently
    /// ordered listing, so the app decides it.
    ranks: HashMap<Arc<str>, u64>,
    /// The rank the next registered tool gets.
    next_rank: u64,
    refusals: HashMap<Arc<str>, Arc<str>>,
    capabilities: Arc<CapabilityCatalog>,
    scopes: Arc<BTreeMap<String, ScopeSpec>>,
}

/// The app's settings for the primitives: handles, confirmation, commit tokens.
#[derive(Clone)]
struct Guards {
    handles: Option<Arc<HandleCodec>>,
    confirm: Option<Arc<dyn ConfirmPolicy>>,
    confirm_config: ConfirmConfig,
    tickets: Arc<dyn TicketStore>,
    commit: CommitConfig,
}

impl Default for Guards {
    fn default() -> Self {
        Self {
            handles: None,
            confirm: None,
            confirm_config: ConfirmConfig::default(),
            tickets: Arc::new(MemoryTicketStore::new()),
            commit: CommitConfig::default(),
        }
    }
}

struct Inner {
    current: ArcSwap<Snapshot>,
    writer: Mutex<()>,
    version: watch::Sender<u64>,
    audit: ArcSwap<Option<Arc<dyn AuditSink>>>,
    guards: ArcSwap<Guards>,
    commits: CommitTokens,
    /// Bumped whenever a ticket is filed or decided.
    tickets_version: watch::Sender<u64>,
}

/// A call that runs because a human approved its ticket.
struct Approved<'a> {
    ticket: &'a str,
    approver: &'a str,
    phase: CallPhase,
}

/// What the gate records about a call beyond who and what.
#[derive(Default)]
struct Trail {
    args_digest: Option<String>,
    ticket: Option<String>,
    approved_by: Option<String>,
    commit_token: Option<String>,
    phase: CallPhase,
    scope: Option<String>,
}

/// The app's tools, refusals and capabilities, and the gate. Cheap to clone (shared).
#[derive(Clone)]
pub struct ToolRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.current.load();
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

/// A [`ToolRegistry`] that does not keep it alive.
#[derive(Clone)]
pub(crate) struct WeakRegistry(Weak<Inner>);

impl WeakRegistry {
    pub(crate) fn upgrade(&self) -> Option<ToolRegistry> {
        self.0.upgrade().map(|inner| ToolRegistry { inner })
    }
}

/// A page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// The cursor of the next page, if there is one.
    pub next_cursor: Option<String>,
}

/// A cursor that this registry did not hand out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pagination cursor")]
pub struct InvalidCursor;

pub(crate) fn encode_cursor(key: &str) -> String {
    let mut s = String::with_capacity(2 + key.len() * 2);
    s.push_str("k1");
    for b in key.bytes() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

pub(crate) fn decode_cursor(cursor: &str) -> Result<String, InvalidCursor> {
    let hex = cursor.strip_prefix("k1").ok_or(InvalidCursor)?;
    if hex.len() % 2 != 0 {
        return Err(InvalidCursor);
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(hex.get(i..i + 2).ok_or(InvalidCursor)?, 16)
                .map_err(|_| InvalidCursor)
        })
        .collect::<Result<Vec<u8>, _>>()?;
    String::from_utf8(bytes).map_err(|_| InvalidCursor)
}

/// Pages a sorted list by key: items strictly after the cursor's key.
pub(crate) fn paginate<T: Clone>(
    sorted: &[T],
    key: impl Fn(&T) -> &str,
    cursor: Option<&str>,
    limit: usize,
) -> Result<Page<T>, InvalidCursor> {
    let start = match cursor {
        None => 0,
        Some(c) => {
            let after = decode_cursor(c)?;
            sorted.partition_point(|t| key(t) <= after.as_str())
        }
    };
    let limit = limit.max(1);
    let end = (start + limit).min(sorted.len());
    let items = sorted[start..end].to_vec();
    let next_cursor = if end < sorted.len() {
        items.last().map(|t| encode_cursor(key(t)))
    } else {
        None
    };
    Ok(Page { items, next_cursor })
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        let (version, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                current: ArcSwap::from_pointee(Snapshot::default()),
                writer: Mutex::new(()),
                version,
                audit: ArcSwap::from_pointee(None),
                guards: ArcSwap::from_pointee(Guards::default()),
                commits: CommitTokens::default(),
                tickets_version: watch::channel(0).0,
            }),
        }
    }

    fn lock_writer(&self) -> MutexGuard<'_, ()> {
        // The guard protects no data of its own (the snapshot is swapped atomically), so a
        // poisoned lock carries no torn state.
        self.inner
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `f` to a copy of the snapshot and publishes it if `f` succeeds.
    fn update<R>(
        &self,
        f: impl FnOnce(&mut Snapshot) -> Result<R, CoreError>,
    ) -> Result<R, CoreError> {
        let _guard = self.lock_writer();
        let mut next = Snapshot::clone(&self.inner.current.load());
        let r = f(&mut next)?;
        self.inner.current.store(Arc::new(next));
        self.inner.version.send_modify(|v| *v += 1);
        Ok(r)
    }

    /// Sets where audit events go (replacing any previous sink).
    pub fn set_audit_sink(&self, sink: Arc<dyn AuditSink>) {
        self.inner.audit.store(Arc::new(Some(sink)));
    }

    fn update_guards(&self, f: impl FnOnce(&mut Guards)) {
        let _guard = self.lock_writer();
        let mut next = Guards::clone(&self.inner.guards.load());
        f(&mut next);
        self.inner.guards.store(Arc::new(next));
    }

    /// Sets the codec that mints and resolves this app's [handles](crate::Handle). Without one,
    /// a tool with a handle argument answers `tool_failed`.
    pub fn set_handle_codec(&self, codec: HandleCodec) {
        let codec = Arc::new(codec);
        self.update_guards(|g| g.handles = Some(codec));
    }

    /// The handle codec, if set (to mint handles outside a tool call).
    pub fn handle_codec(&self) -> Option<Arc<HandleCodec>> {
        self.inner.guards.load().handles.clone()
    }

    /// Sets how long commit tokens live and how many are kept.
    pub fn set_commit_config(&self, config: CommitConfig) {
        self.update_guards(|g| g.commit = config);
    }

    /// Sets the policy that decides which calls need a human (replacing any previous one).
    pub fn set_confirm_policy(&self, policy: impl ConfirmPolicy + 'static) {
        let policy: Arc<dyn ConfirmPolicy> = Arc::new(policy);
        self.update_guards(|g| g.confirm = Some(policy));
    }

    /// Removes the confirm policy: no call waits for a human.
    pub fn clear_confirm_policy(&self) {
        self.update_guards(|g| g.confirm = None);
    }

    /// Sets ticket lifetime and who may decide tickets.
    pub fn set_confirm_config(&self, config: ConfirmConfig) {
        self.update_guards(|g| g.confirm_config = config);
    }

    /// Sets where tickets are kept (default: in memory). Use a persistent store (for example
    /// `SqliteTicketStore`, feature `sqlite`) for tickets to survive a restart.
    pub fn set_ticket_store(&self, store: Arc<dyn TicketStore>) {
        self.update_guards(|g| g.tickets = store);
    }

    /// The app's window on confirm tickets: list, approve, deny, fetch results.
    pub fn tickets(&self) -> TicketDesk {
        TicketDesk::new(self.clone())
    }

    pub(crate) fn ticket_changes(&self) -> watch::Receiver<u64> {
        self.inner.tickets_version.subscribe()
    }

    pub(crate) fn tickets_changed(&self) {
        self.inner.tickets_version.send_modify(|v| *v += 1);
    }

    /// A handle that does not keep the registry alive (for tools registered in it).
    pub(crate) fn downgrade(&self) -> WeakRegistry {
        WeakRegistry(Arc::downgrade(&self.inner))
    }

    pub(crate) fn ticket_store(&self) -> Arc<dyn TicketStore> {
        Arc::clone(&self.inner.guards.load().tickets)
    }

    pub(crate) fn confirm_config(&self) -> ConfirmConfig {
        self.inner.guards.load().confirm_config.clone()
    }

    /// Declares a scope tools can work in. A name is declared once.
    pub fn declare_scope(&self, scope: ScopeSpec) -> Result<(), CoreError> {
        check_scope_name(&scope.name)?;
        let _guard = self.lock_writer();
        let mut next = Snapshot::clone(&self.inner.current.load());
        if next.scopes.contains_key(&scope.name) {
            return Err(CoreError::Duplicate { name: scope.name });
        }
        Arc::make_mut(&mut next.scopes).insert(scope.name.clone(), scope);
        // Scopes do not change the tool list, so no version bump.
        self.inner.current.store(Arc::new(next));
        Ok(())
    }

    /// Removes a declared scope; later calls naming it answer `scope_unknown`. Returns whether
    /// it was declared.
    pub fn remove_scope(&self, name: &str) -> bool {
        let _guard = self.lock_writer();
        let mut next = Snapshot::clone(&self.inner.current.load());
        let removed = Arc::make_mut(&mut next.scopes).remove(name).is_some();
        if removed {
            self.inner.current.store(Arc::new(next));
        }
        removed
    }

    /// The declared scopes, sorted by name.
    pub fn scopes(&self) -> Vec<ScopeSpec> {
        self.inner.current.load().scopes.values().cloned().collect()
    }

    /// Declares a write capability. An id can be declared once; a deprecated capability's
    /// replacement must be declared first.
    pub fn declare(&self, capability: WriteCapability) -> Result<(), CoreError> {
        let _guard = self.lock_writer();
        let mut next = Snapshot::clone(&self.inner.current.load());
        Arc::make_mut(&mut next.capabilities).declare(capability)?;
        // Capabilities do not change the tool list, so no version bump.
        self.inner.current.store(Arc::new(next));
        Ok(())
    }

    /// The declared capabilities.
    pub fn capabilities(&self) -> Vec<WriteCapability> {
        self.inner.current.load().capabilities.all()
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
            .map(prepare)
            .collect::<Result<Vec<_>, _>>()?;
        self.update(|s| {
            for e in entries {
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
            }
            Ok(())
        })
    }

    /// Removes a tool. Calls already running finish; later calls answer `unknown_tool`.
    /// Returns whether it was registered.
    pub fn remove(&self, name: &str) -> bool {
        self.update(|s| {
            s.ranks.remove(name);
            Ok(s.tools.remove(name).is_some())
        })
        .unwrap_or(false)
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

    /// A receiver whose value changes whenever the tool list changes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.version.subscribe()
    }

    /// The number of registered tools.
    pub fn len(&self) -> usize {
        self.inner.current.load().tools.len()
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The spec of a registered tool, whatever the caller.
    pub fn spec(&self, name: &str) -> Option<ToolSpec> {
        self.inner
            .current
            .load()
            .tools
            .get(name)
            .map(|e| e.spec.clone())
    }

    /// The tools `caller` is shown, in registration order (or the order set with
    /// [`ToolRegistry::set_tool_order`]). See [`SurfaceProjection`] for what each projection
    /// lists. The schemas are projected: a preview tool shows the optional
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
        let snap = self.inner.current.load();
        let compact = caller.projection() == SurfaceProjection::Compact;
        let mut v: Vec<(u64, ToolSpec)> = snap
            .tools
            .iter()
            .filter(|(_, e)| listed(&snap.capabilities, e, caller))
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

    /// One page of [`ToolRegistry::list`]. Cursors are opaque and stay valid across changes.
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
        let snap = self.inner.current.load();
        let (entry, _) = admit(&snap, caller, name)?;
        let mut args = args.clone();
        if entry.spec.previews {
            take_commit_token(&entry, &mut args)?;
        }
        apply_scope(&snap, &entry, caller, &mut args)?;
        validate_args(&entry, &args)?;
        Ok(entry.spec.clone())
    }

    /// The gate: checks, runs and audits one call. See the module documentation for the order.
    /// `args` of `null` are treated as an empty object (clients may omit arguments).
    pub async fn call(
        &self,
        caller: &Caller,
        name: &str,
        args: Value,
        opts: CallOptions,
    ) -> Result<ToolOutput, GateError> {
        self.gate(caller, name, args, opts, None).await
    }

    /// Runs an approved ticket's call through the gate, skipping only the confirm step.
    pub(crate) async fn run_approved(
        &self,
        ticket: &ConfirmTicket,
        approver: &str,
    ) -> Result<ToolOutput, GateError> {
        let caller = ticket.caller();
        self.gate(
            &caller,
            &ticket.tool,
            ticket.arguments.clone(),
            CallOptions::default(),
            Some(Approved {
                ticket: &ticket.id,
                approver,
                phase: ticket.phase,
            }),
        )
        .await
    }

    async fn gate(
        &self,
        caller: &Caller,
        name: &str,
        args: Value,
        opts: CallOptions,
        approved: Option<Approved<'_>>,
    ) -> Result<ToolOutput, GateError> {
        let args = if args.is_null() {
            Value::Object(Default::default())
        } else {
            args
        };
        // Everything the audit event needs is gathered only when a sink is set: the common
        // unaudited call pays for none of it.
        let audit: Option<Arc<dyn AuditSink>> = self.inner.audit.load().as_ref().clone();
        let clock = audit.as_ref().map(|_| (Instant::now(), SystemTime::now()));
        let guards = self.inner.guards.load_full();
        let mut trail = Trail::default();
        if let Some(a) = &approved {
            trail.ticket = Some(a.ticket.to_string());
            trail.approved_by = Some(a.approver.to_string());
        }
        let snap = self.inner.current.load_full();
        let admitted = admit(&snap, caller, name);
        let (kind, capability, deprecated) = match &admitted {
            _ if audit.is_none() => ("", None, None),
            Ok((e, via)) => (
                e.spec.kind.label(),
                e.spec.kind.capability().map(str::to_string),
                via.clone(),
            ),
            Err(_) => match snap.tools.get(name) {
                Some(e) => (
                    e.spec.kind.label(),
                    e.spec.kind.capability().map(str::to_string),
                    None,
                ),
                None => ("unknown", None, None),
            },
        };
        let front = admitted.and_then(|(entry, _)| {
            prepare_call(
                &snap,
                &guards,
                entry,
                caller,
                args,
                audit.is_some(),
                &mut trail,
            )
        });
        drop(snap);
        let result = match front {
            Err(e) => Err(e),
            Ok(call) => {
                self.confirm_and_run(call, caller, opts, &guards, approved.as_ref(), &mut trail)
                    .await
            }
        };
        if let (Some(sink), Some((started, at))) = (audit.as_ref(), clock) {
            let p = caller.principal();
            sink.record(&AuditEvent {
                at,
                principal: p.id.clone(),
                agent: p.agent.clone(),
                tool: name.to_string(),
                kind,
                capability,
                via_deprecated: deprecated,
                outcome: match &result {
                    Ok(_) => AuditOutcome::Ok,
                    Err(e) => AuditOutcome::Error(e.code()),
                },
                duration: started.elapsed(),
                args_digest: trail.args_digest,
                ticket: trail.ticket,
                approved_by: trail.approved_by,
                commit_token: trail.commit_token,
                phase: trail.phase,
                scope: trail.scope,
            });
        }
        result
    }

    /// Gate steps 5 and 6: commit token, confirmation, run, preview wrapping.
    ///
    /// A commit token is checked first (so a bad one is refused before a human is bothered) and
    /// spent at the last moment the call is decided: when a ticket is filed (a replay then
    /// cannot file a second one) or just before the tool runs. A call that stops to ask the
    /// client (`input_required` on the stateless protocol) leaves it unspent, so the re-sent
    /// call with the answer can still commit.
    async fn confirm_and_run(
        &self,
        call: PreparedCall,
        caller: &Caller,
        opts: CallOptions,
        guards: &Guards,
        approved: Option<&Approved<'_>>,
        trail: &mut Trail,
    ) -> Result<ToolOutput, GateError> {
        let PreparedCall {
            entry,
            args,
            resolved,
            binding,
            commit_token,
        } = call;
        let name = entry.spec.name.as_str();
        let principal = caller.principal().id.as_str();
        let digest = binding.as_deref().unwrap_or_default();
        // Preview / commit.
        let phase = match (approved, entry.spec.previews, &commit_token) {
            (Some(a), _, _) => a.phase,
            (None, false, _) => CallPhase::Direct,
            (None, true, None) => CallPhase::Preview,
            (None, true, Some(token)) => {
                trail.commit_token = Some(token_fingerprint(token));
                self.inner
                    .commits
                    .check(token, name, principal, digest)
                    .map_err(|r| r.into_gate_error(name))?;
                CallPhase::Commit
            }
        };
        trail.phase = phase;
        let spend = || match (approved, &commit_token) {
            (None, Some(token)) if phase == CallPhase::Commit => self
                .inner
                .commits
                .redeem(token, name, principal, digest)
                .map_err(|r| r.into_gate_error(name)),
            _ => Ok(()),
        };
        // Human confirmation (never for a preview, which changes nothing).
        if approved.is_none()
            && phase != CallPhase::Preview
            && let Some(policy) = &guards.confirm
            && let Some(req) = policy.check(&entry.spec, resolved.as_ref().unwrap_or(&args), caller)
        {
            let asked = if req.asks_client() {
                self.ask_client(&entry, &args, caller, &opts, &req).await
            } else {
                None
            };
            match asked {
                Some(answer) => answer?,
                None => {
                    spend()?;
                    return Err(self.file_ticket(&entry, args, caller, guards, &req, phase, trail));
                }
            }
        }
        spend()?;
        let extras = CallExtras {
            phase,
            scope: trail.scope.clone(),
            ticket: approved.map(|a| a.ticket.to_string()),
            handles: guards.handles.clone(),
        };
        let out = run(
            Arc::clone(&entry),
            resolved.unwrap_or(args),
            caller,
            opts,
            extras,
        )
        .await?;
        if phase != CallPhase::Preview || out.is_error {
            return Ok(out);
        }
        let (token, expires_at) = self
            .inner
            .commits
            .issue(name, principal, digest, &guards.commit)
            .map_err(|e| {
                tracing::error!(error = %e, "no randomness for a commit token");
                GateError::ToolFailed {
                    tool: name.to_string(),
                    message: "a commit token could not be issued (internal error)".into(),
                }
            })?;
        trail.commit_token = Some(token_fingerprint(&token));
        Ok(preview_output(out, name, &token, expires_at))
    }

    /// Asks the human through the client (elicitation). `None` when the client cannot be asked
    /// (no channel, no elicitation support, or the request failed): the caller files a ticket.
    /// `Some(Ok)` means approved.
    async fn ask_client(
        &self,
        entry: &Entry,
        args: &Value,
        caller: &Caller,
        opts: &CallOptions,
        req: &ConfirmRequest,
    ) -> Option<Result<(), GateError>> {
        let name = entry.spec.name.clone();
        let peer = opts.peer.as_ref()?;
        if !peer.supports("elicitation") {
            return None;
        }
        let ctx = ToolContext::new(caller.clone(), opts.clone());
        let mut shown = canonical_json(&redact(args, &entry.spec.sensitive_fields));
        if shown.len() > MAX_SHOWN_ARGS {
            let cut = (0..=MAX_SHOWN_ARGS)
                .rev()
                .find(|i| shown.is_char_boundary(*i))
                .unwrap_or(0);
            shown.truncate(cut);
            shown.push('…');
        }
        let who = caller
            .principal()
            .agent
            .clone()
            .unwrap_or_else(|| caller.principal().id.clone());
        let message = format!(
            "{who} wants to run `{name}` ({}) with {shown}. Allow it?",
            req.reason()
        );
        let schema = json!({
            "type": "object",
            "properties": {"approve": {"type": "boolean", "title": "Allow this call"}},
            "required": ["approve"]
        });
        match ctx.elicit(&message, schema).await {
            Ok(answer) => {
                let accepted = answer.get("action").and_then(Value::as_str) == Some("accept")
                    && answer.pointer("/content/approve") == Some(&Value::Bool(true));
                tracing::info!(tool = %name, accepted, "confirmation asked through the client");
                Some(if accepted {
                    Ok(())
                } else {
                    Err(GateError::ConfirmDeclined { tool: name })
                })
            }
            Err(PeerError::InputRequired { requests }) => Some(Err(GateError::InputRequired {
                tool: name,
                requests,
            })),
            Err(PeerError::Cancelled) => Some(Err(GateError::Cancelled { tool: name })),
            Err(e) => {
                tracing::warn!(tool = %name, error = %e, "elicitation failed; filing a ticket");
                None
            }
        }
    }

    /// Files a ticket for a call a human must approve; the answer for the caller.
    #[allow(clippy::too_many_arguments)]
    fn file_ticket(
        &self,
        entry: &Entry,
        args: Value,
        caller: &Caller,
        guards: &Guards,
        req: &ConfirmRequest,
        phase: CallPhase,
        trail: &mut Trail,
    ) -> GateError {
        let name = entry.spec.name.clone();
        let failed = |what: String| {
            tracing::error!(tool = %name, error = %what, "confirm ticket not filed");
            GateError::ToolFailed {
                tool: name.clone(),
                message: "the call needs a person's approval, but the request could not be filed (internal error)".into(),
            }
        };
        let id = match new_ticket_id() {
            Ok(id) => id,
            Err(e) => return failed(e.0),
        };
        let now = SystemTime::now();
        let ticket = ConfirmTicket {
            id: id.clone(),
            tool: name.clone(),
            arguments: args,
            reason: req.reason().to_string(),
            phase,
            principal: caller.principal().clone(),
            grants: caller.grants().clone(),
            projection: caller.projection(),
            scopes: caller.scopes().clone(),
            created_at: now,
            expires_at: now + guards.confirm_config.ttl,
            status: TicketStatus::Pending,
            decided_by: None,
            decided_at: None,
            note: None,
            outcome: None,
        };
        if let Err(e) = guards.tickets.insert(&ticket) {
            return failed(e.0);
        }
        tracing::info!(tool = %name, ticket = %id, principal = %caller.principal().id, "call held for a person's approval");
        self.tickets_changed();
        trail.ticket = Some(id.clone());
        GateError::PendingHumanConfirm {
            tool: name,
            ticket: id,
            reason: req.reason().to_string(),
        }
    }
}

/// The longest argument text shown in a confirmation question.
const MAX_SHOWN_ARGS: usize = 600;

/// A call past the synchronous gate steps.
struct PreparedCall {
    entry: Arc<Entry>,
    /// The arguments as asked (scope filled, commit token removed, handles opaque).
    args: Value,
    /// The arguments the tool receives when they differ from `args` (handles resolved); `None`
    /// when the tool takes no handles, so the common call never copies its arguments.
    resolved: Option<Value>,
    /// The digest a commit token is bound to (unredacted), for preview tools.
    binding: Option<String>,
    /// The commit token the caller sent.
    commit_token: Option<String>,
}

/// Gate step 4 and the argument work around it: take out the commit token, fill and check the
/// scope, digest, validate, resolve handles.
fn prepare_call(
    snap: &Snapshot,
    guards: &Guards,
    entry: Arc<Entry>,
    caller: &Caller,
    mut args: Value,
    digest_for_audit: bool,
    trail: &mut Trail,
) -> Result<PreparedCall, GateError> {
    let commit_token = if entry.spec.previews {
        take_commit_token(&entry, &mut args)?
    } else {
        None
    };
    trail.scope = apply_scope(snap, &entry, caller, &mut args)?;
    if digest_for_audit {
        trail.args_digest = Some(argument_digest(&args, &entry.spec.sensitive_fields));
    }
    validate_args(&entry, &args)?;
    let binding = entry.spec.previews.then(|| canonical_digest(&args));
    let mut resolved = None;
    if !entry.handles.is_empty() {
        let name = entry.spec.name.clone();
        let Some(codec) = &guards.handles else {
            tracing::error!(tool = %name, "tool takes handles but no handle codec is set");
            return Err(GateError::ToolFailed {
                tool: name,
                message: "this app has not configured handles (internal error)".into(),
            });
        };
        let mut copy = args.clone();
        resolve_sites(&mut copy, &entry.handles, codec, &caller.principal().id).map_err(
            |(pointer, e)| match e {
                HandleError::Expired => GateError::HandleExpired {
                    tool: name,
                    pointer,
                },
                _ => GateError::HandleInvalid {
                    tool: name,
                    pointer,
                },
            },
        )?;
        resolved = Some(copy);
    }
    Ok(PreparedCall {
        entry,
        args,
        resolved,
        binding,
        commit_token,
    })
}

/// Removes a preview tool's `commit_token` from the arguments.
fn take_commit_token(entry: &Entry, args: &mut Value) -> Result<Option<String>, GateError> {
    let Some(obj) = args.as_object_mut() else {
        return Ok(None);
    };
    match obj.remove(COMMIT_TOKEN_FIELD) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(t)) => Ok(Some(t)),
        Some(other) => Err(GateError::InvalidArguments {
            tool: entry.spec.name.clone(),
            errors: vec![FieldError {
                pointer: format!("/{COMMIT_TOKEN_FIELD}"),
                expected: "a string".into(),
                found: format!("{other}"),
                message: format!("`{COMMIT_TOKEN_FIELD}` must be the string a preview gave you."),
            }],
        }),
    }
}

/// Fills a scoped tool's scope argument from the caller's current scope and checks it.
fn apply_scope(
    snap: &Snapshot,
    entry: &Entry,
    caller: &Caller,
    args: &mut Value,
) -> Result<Option<String>, GateError> {
    let Some(field) = entry.spec.scope_field.as_deref() else {
        return Ok(None);
    };
    let Some(obj) = args.as_object_mut() else {
        // Not an object: validation refuses it.
        return Ok(None);
    };
    let tool = || entry.spec.name.clone();
    let scope = match obj.get(field) {
        None | Some(Value::Null) => match caller.scopes().current() {
            Some(current) => {
                obj.insert(field.to_string(), Value::String(current.to_string()));
                current.to_string()
            }
            None => {
                return Err(GateError::ScopeRequired {
                    tool: tool(),
                    field: field.to_string(),
                });
            }
        },
        Some(Value::String(s)) => s.clone(),
        // Another type: validation names it.
        Some(_) => return Ok(None),
    };
    if !snap.scopes.contains_key(&scope) {
        return Err(GateError::ScopeUnknown {
            tool: tool(),
            scope,
        });
    }
    if !caller.scopes().allows(&scope) {
        tracing::warn!(principal = %caller.principal().id, tool = %entry.spec.name, scope = %scope, "scope refused");
        return Err(GateError::ScopeForbidden {
            tool: tool(),
            scope,
        });
    }
    Ok(Some(scope))
}

fn check_scope_name(name: &str) -> Result<(), CoreError> {
    let reason = if name.is_empty() {
        Some("a scope name must not be empty")
    } else if name.len() > 128 {
        Some("a scope name must be at most 128 characters")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("a scope name may not contain whitespace or control characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CoreError::InvalidName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

fn prepare(tool: Arc<dyn Tool>) -> Result<Entry, CoreError> {
    let spec = tool.spec();
    check_name(&spec.name)?;
    let input = CompiledSchema::compile(spec.input_schema.clone()).map_err(|reason| {
        CoreError::InvalidSchema {
            tool: spec.name.clone(),
            which: "input",
            reason,
        }
    })?;
    let output =
        match &spec.output_schema {
            None => None,
            Some(s) => Some(CompiledSchema::compile(s.clone()).map_err(|reason| {
                CoreError::InvalidSchema {
                    tool: spec.name.clone(),
                    which: "output",
                    reason,
                }
            })?),
        };
    let mut spec = spec;
    let props = spec
        .input_schema
        .get("properties")
        .and_then(Value::as_object);
    let invalid = |reason: String| CoreError::InvalidSchema {
        tool: spec.name.clone(),
        which: "input",
        reason,
    };
    if spec.previews && props.is_some_and(|p| p.contains_key(COMMIT_TOKEN_FIELD)) {
        return Err(invalid(format!(
            "`{COMMIT_TOKEN_FIELD}` is reserved for the gate on a tool that previews"
        )));
    }
    match &spec.scope_field {
        Some(field) if !props.is_some_and(|p| p.contains_key(field)) => {
            return Err(invalid(format!(
                "the scope field `{field}` is not one of the schema's properties"
            )));
        }
        Some(_) => {}
        None => spec.scope_field = find_scope_field(&spec.input_schema),
    }
    let handles = handle_sites(&spec.input_schema);
    let mut listed_full = spec.clone();
    if spec.previews {
        project_commit_field(&mut listed_full.input_schema);
        if let Some(out) = &mut listed_full.output_schema {
            *out = json!({"type": "object", "anyOf": [out.clone(), preview_envelope_schema()]});
        }
    }
    let mut listed_compact = listed_full.clone();
    if let Some(field) = &spec.scope_field {
        project_scope(&mut listed_full.input_schema, field, false);
        project_scope(&mut listed_compact.input_schema, field, true);
    }
    Ok(Entry {
        spec,
        tool,
        input,
        output,
        listed_full,
        listed_compact,
        handles,
    })
}

fn listed(caps: &CapabilityCatalog, e: &Entry, caller: &Caller) -> bool {
    match caller.projection() {
        SurfaceProjection::Full => true,
        SurfaceProjection::Compact => {
            e.spec.small_model_safe
                && match &e.spec.kind {
                    ToolKind::Read => true,
                    ToolKind::Write(c) => !matches!(
                        caps.authorizes(caller.grants(), c.id()),
                        Authorization::Denied
                    ),
                }
        }
    }
}

/// Gate steps 1-3. Returns the entry and the deprecated capability id used, if any.
fn admit(
    snap: &Snapshot,
    caller: &Caller,
    name: &str,
) -> Result<(Arc<Entry>, Option<String>), GateError> {
    let Some(entry) = snap.tools.get(name) else {
        return Err(match snap.refusals.get(name) {
            Some(reason) => GateError::Refused {
                tool: name.to_string(),
                reason: reason.to_string(),
            },
            None => GateError::UnknownTool {
                tool: name.to_string(),
            },
        });
    };
    if caller.projection() == SurfaceProjection::Compact && !entry.spec.small_model_safe {
        return Err(GateError::NotInSurface {
            tool: name.to_string(),
        });
    }
    let mut via = None;
    if let ToolKind::Write(cap) = &entry.spec.kind {
        match snap.capabilities.authorizes(caller.grants(), cap.id()) {
            Authorization::Direct => {}
            Authorization::Deprecated(old) => {
                tracing::warn!(
                    principal = %caller.principal().id,
                    tool = name,
                    deprecated = old,
                    replacement = cap.id(),
                    "call authorized through a deprecated capability id"
                );
                via = Some(old.to_string());
            }
            Authorization::Denied => {
                return Err(GateError::CapabilityRequired {
                    tool: name.to_string(),
                    capability: cap.id().to_string(),
                });
            }
        }
    }
    Ok((Arc::clone(entry), via))
}

fn validate_args(entry: &Entry, args: &Value) -> Result<(), GateError> {
    if entry.input.is_valid(args) {
        return Ok(());
    }
    let mut errors = entry.input.diagnose(args);
    if errors.is_empty() {
        // is_valid and iter_errors disagree only on a validator bug; never let a call through.
        errors.push(FieldError {
            pointer: String::new(),
            expected: "arguments matching the schema".into(),
            found: "arguments that do not".into(),
            message: "The arguments do not match the tool's schema.".into(),
        });
    }
    Err(GateError::InvalidArguments {
        tool: entry.spec.name.clone(),
        errors,
    })
}

async fn run(
    entry: Arc<Entry>,
    args: Value,
    caller: &Caller,
    opts: CallOptions,
    extras: CallExtras,
) -> Result<ToolOutput, GateError> {
    let preview = extras.phase == CallPhase::Preview;
    // The name is copied into an error only on the paths that produce one.
    let name = || entry.spec.name.clone();
    let cancel = opts.cancel.clone();
    if cancel.is_cancelled() {
        return Err(GateError::Cancelled { tool: name() });
    }
    let ctx = ToolContext::new(caller.clone(), opts).with_extras(extras);
    let span = tracing::debug_span!("tool_call", tool = %entry.spec.name, principal = %caller.principal().id);
    let fut = AssertUnwindSafe(entry.tool.call(args, ctx)).catch_unwind();
    // The tool is polled first: a tool that finishes at once never registers a cancellation
    // waiter; one that is pending is dropped as soon as the token fires.
    let outcome = tokio::select! {
        biased;
        r = tracing::Instrument::instrument(fut, span) => r,
        () = cancel.cancelled() => return Err(GateError::Cancelled { tool: name() }),
    };
    // A tool that noticed the cancellation and stopped with an error was cancelled, whatever
    // words it chose: the caller gets the stable code.
    if cancel.is_cancelled() && !matches!(outcome, Ok(Ok(_))) {
        return Err(GateError::Cancelled { tool: name() });
    }
    match outcome {
        Err(_panic) => {
            tracing::error!(tool = %entry.spec.name, "tool panicked");
            Err(GateError::ToolFailed {
                tool: name(),
                message: "the tool stopped unexpectedly (internal error)".into(),
            })
        }
        Ok(Err(ToolError::Failed { message })) => Err(GateError::ToolFailed {
            tool: name(),
            message,
        }),
        Ok(Err(ToolError::Peer(PeerError::Cancelled))) => {
            Err(GateError::Cancelled { tool: name() })
        }
        Ok(Err(ToolError::Peer(PeerError::InputRequired { requests }))) => {
            Err(GateError::InputRequired {
                tool: name(),
                requests,
            })
        }
        Ok(Err(ToolError::Peer(e))) => Err(GateError::ToolFailed {
            tool: name(),
            message: e.to_string(),
        }),
        Ok(Ok(out)) => {
            if let (Some(schema), Some(structured), false, false) =
                (&entry.output, &out.structured, out.is_error, preview)
                && !schema.is_valid(structured)
            {
                tracing::error!(tool = %entry.spec.name, "structured result does not match the output schema");
                return Err(GateError::ToolFailed {
                    tool: name(),
                    message: "the tool's result does not match its declared output schema (internal error)".into(),
                });
            }
            Ok(out)
        }
    }
}
