//! The registered tools as one immutable snapshot: what the gate looks a call up in.
//!
//! A [`Catalog`] holds every tool with its schemas compiled at registration, the refusals, the
//! declared capabilities and the declared scopes. The [`ToolRegistry`](crate::ToolRegistry)
//! publishes a new catalog on every change (copy on write, behind an atomic pointer), so a call
//! reads one consistent catalog without a lock and a tool removed mid-call finishes that call.
//! Compiling a tool ([`Entry::compile`]) is where a schema that does not compile, a reserved
//! argument name or a missing scope field is refused, so such a tool never reaches a caller.
//!
//! The catalog also carries the app's [`ToolVisibility`], if it set one: which registered tools
//! a given caller may know of at all. A tool it hides is left out of that caller's listings and
//! answers that caller's calls exactly as a tool that was never registered, so its existence is
//! not revealed. Without one (the common case) every check is a single `None` test.
//!
//! The app's [`GateSettings`] (audit sink, confirm policy, handle codec, tickets, commit tokens)
//! travel in the same snapshot: a call reads its tools and its settings with one atomic load,
//! and a settings change publishes a new catalog like a tool change does (without bumping the
//! tool list's version).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};

use crate::audit::AuditSink;
use crate::capability::{Authorization, CapabilityCatalog};
use crate::confirm::{ConfirmConfig, ConfirmPolicy, MemoryTicketStore, TicketStore};
use crate::error::CoreError;
use crate::handle::{HandleCodec, HandleSite, handle_sites};
use crate::preview::{
    COMMIT_TOKEN_FIELD, CommitConfig, preview_envelope_schema, project_commit_field,
};
use crate::principal::{Caller, SurfaceProjection};
use crate::scope::{ScopeSpec, find_scope_field, project_scope};
use crate::tool::{AsyncHandler, SyncHandler, Tool, ToolKind, ToolSpec, check_name};
use crate::validate::CompiledSchema;

/// Which registered tools a caller may know of: the app's per-caller filter over the catalog.
///
/// A tool for which [`ToolVisibility::visible`] answers `false` is not in that caller's
/// listing (`tools/list`, its pages, [`ToolRegistry::list`](crate::ToolRegistry::list)) and a
/// call of it is refused `unknown_tool` with the same message a name that was never registered
/// gets. The check runs before every other step of the gate, so a hidden tool's projection,
/// capability or schema is never revealed either. It runs on every listing of every tool and on
/// every call, on the caller's thread: keep it a lookup, never I/O.
///
/// Any `Fn(&ToolSpec, &Caller) -> bool` is one:
///
/// ```
/// use kberg_core::{Caller, Principal, ToolBuilder, ToolOutput, ToolRegistry, ToolSpec};
/// use serde_json::json;
///
/// let tools = ToolRegistry::builder()
///     .tool_visibility(|tool: &ToolSpec, caller: &Caller| {
///         !tool.name.starts_with("admin_") || caller.principal().id == "root"
///     })
///     .build();
/// tools.register(ToolBuilder::new("admin_purge").read().raw_handler(
///     json!({"type": "object"}),
///     |_, _| async { Ok(ToolOutput::text("purged")) },
/// ))?;
/// assert!(tools.list(&Caller::new(Principal::new("guest"))).is_empty());
/// assert_eq!(tools.list(&Caller::new(Principal::new("root"))).len(), 1);
/// # Ok::<(), kberg_core::CoreError>(())
/// ```
///
/// A filter that panics unwinds through the caller's listing or call: kberg-server answers
/// such a request `-32603` with `data.code = "internal_error"`.
pub trait ToolVisibility: Send + Sync + 'static {
    /// Whether `caller` may know of `tool` (list it, call it).
    fn visible(&self, tool: &ToolSpec, caller: &Caller) -> bool;
}

impl<F> ToolVisibility for F
where
    F: Fn(&ToolSpec, &Caller) -> bool + Send + Sync + 'static,
{
    fn visible(&self, tool: &ToolSpec, caller: &Caller) -> bool {
        self(tool, caller)
    }
}

/// A registered tool with its compiled schemas and what the gate precomputed about it.
pub(crate) struct Entry {
    pub(crate) spec: ToolSpec,
    pub(crate) tool: Arc<dyn Tool>,
    pub(crate) input: CompiledSchema,
    pub(crate) output: Option<CompiledSchema>,
    /// What the `Full` projection lists (commit token added, scope optional).
    pub(crate) listed_full: ToolSpec,
    /// What the `Compact` projection lists (the scope argument hidden too).
    pub(crate) listed_compact: ToolSpec,
    /// Where handle arguments sit.
    pub(crate) handles: Vec<HandleSite>,
    /// Whether a call needs anything from the gate beyond admission and validation (a commit
    /// token, a scope, handles): `false` lets the gate skip those steps entirely.
    pub(crate) plain: bool,
    /// The tool's synchronous body ([`Tool::synchronous`]), which the gate runs directly.
    pub(crate) sync: Option<SyncHandler>,
    /// The tool's body whose future borrows nothing ([`Tool::detached`]), which the gate calls
    /// instead of [`Tool::call`].
    pub(crate) detached: Option<AsyncHandler>,
}

/// A map by tool name. Hashed with foldhash (seeded per process): every call looks its tool up
/// by name, and SipHash was a tenth of the gate's own cost. Keys are inserted by the app only,
/// so callers cannot grow collision chains.
pub(crate) type ByName<V> = HashMap<Arc<str>, V, foldhash::fast::RandomState>;

/// The app's settings for the gate's primitives: audit, handles, confirmation, tickets, commit
/// tokens. Set once by the registry's builder.
#[derive(Clone)]
pub(crate) struct GateSettings {
    pub(crate) handles: Option<Arc<HandleCodec>>,
    pub(crate) confirm: Option<Arc<dyn ConfirmPolicy>>,
    pub(crate) confirm_config: ConfirmConfig,
    pub(crate) tickets: Arc<dyn TicketStore>,
    pub(crate) commit: CommitConfig,
    /// Where audit events go.
    pub(crate) audit: Option<Arc<dyn AuditSink>>,
}

impl Default for GateSettings {
    fn default() -> Self {
        Self {
            handles: None,
            confirm: None,
            confirm_config: ConfirmConfig::default(),
            tickets: Arc::new(MemoryTicketStore::new()),
            commit: CommitConfig::default(),
            audit: None,
        }
    }
}

/// One consistent view of the registered tools, refusals, capabilities and scopes, and the
/// gate's settings.
#[derive(Default, Clone)]
pub(crate) struct Catalog {
    pub(crate) tools: ByName<Arc<Entry>>,
    /// Each tool's place in the listing: registration order, or the app's explicit order
    /// ([`crate::ToolRegistry::set_tool_order`]). Small models act differently on a differently
    /// ordered listing, so the app decides it.
    pub(crate) ranks: ByName<u64>,
    /// The rank the next registered tool gets.
    pub(crate) next_rank: u64,
    pub(crate) refusals: ByName<Arc<str>>,
    pub(crate) capabilities: Arc<CapabilityCatalog>,
    pub(crate) scopes: Arc<BTreeMap<String, ScopeSpec>>,
    /// The app's per-caller filter, if it set one ([`ToolVisibility`]).
    pub(crate) visibility: Option<Arc<dyn ToolVisibility>>,
    /// The gate's settings, read with the tools in one atomic load.
    pub(crate) settings: Arc<GateSettings>,
}

impl Catalog {
    /// Whether `caller` may know of `e` at all (see [`ToolVisibility`]); a hidden tool answers
    /// as an unknown one.
    #[inline]
    pub(crate) fn visible(&self, e: &Entry, caller: &Caller) -> bool {
        match &self.visibility {
            None => true,
            Some(v) => v.visible(&e.spec, caller),
        }
    }

    /// Whether `caller` is shown `e` in a listing (see [`SurfaceProjection`] and
    /// [`ToolVisibility`]).
    pub(crate) fn lists(&self, e: &Entry, caller: &Caller) -> bool {
        if !self.visible(e, caller) {
            return false;
        }
        match caller.projection() {
            SurfaceProjection::Full => true,
            SurfaceProjection::Compact => {
                e.spec.small_model_safe
                    && match &e.spec.kind {
                        ToolKind::Read => true,
                        ToolKind::Write(c) => !matches!(
                            self.capabilities.authorizes(caller.grants(), c.id()),
                            Authorization::Denied
                        ),
                    }
            }
        }
    }
}

impl Entry {
    /// Compiles a tool's schemas and derives its projected listings. Fails on an invalid name,
    /// a schema that does not compile, a preview tool that declares `commit_token` itself, or
    /// a scope field that is not one of the schema's properties.
    pub(crate) fn compile(tool: Arc<dyn Tool>) -> Result<Entry, CoreError> {
        let mut spec = tool.spec();
        check_name(&spec.name)?;
        let invalid = |which: &'static str, reason: String| CoreError::InvalidSchema {
            tool: spec.name.clone(),
            which,
            reason,
        };
        let input = CompiledSchema::compile(spec.input_schema.clone())
            .map_err(|reason| invalid("input", reason))?;
        let output = match &spec.output_schema {
            None => None,
            Some(s) => Some(
                CompiledSchema::compile(s.clone()).map_err(|reason| invalid("output", reason))?,
            ),
        };
        let props = spec
            .input_schema
            .get("properties")
            .and_then(Value::as_object);
        if spec.previews && props.is_some_and(|p| p.contains_key(COMMIT_TOKEN_FIELD)) {
            return Err(invalid(
                "input",
                format!("`{COMMIT_TOKEN_FIELD}` is reserved for the gate on a tool that previews"),
            ));
        }
        let scope_field = match &spec.scope_field {
            Some(field) if !props.is_some_and(|p| p.contains_key(field)) => {
                return Err(invalid(
                    "input",
                    format!("the scope field `{field}` is not one of the schema's properties"),
                ));
            }
            Some(field) => Some(field.clone()),
            None => find_scope_field(&spec.input_schema),
        };
        spec.scope_field = scope_field;
        // A handle the gate could not find would reach the tool unresolved: refused here.
        let handles =
            handle_sites(&spec.input_schema).map_err(|reason| invalid("input", reason))?;
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
        let plain = !spec.previews && spec.scope_field.is_none() && handles.is_empty();
        let sync = tool.synchronous();
        let detached = tool.detached();
        Ok(Entry {
            spec,
            sync,
            detached,
            tool,
            input,
            output,
            listed_full,
            listed_compact,
            handles,
            plain,
        })
    }
}
