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
//! 4. the arguments validate against the schema compiled at registration;
//! 5. the tool runs with the call's cancellation token; if the token fires first the call is
//!    dropped and answers `cancelled`; a panicking tool answers `tool_failed`;
//! 6. an [`AuditEvent`] is recorded, whatever the outcome.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use futures::FutureExt;
use serde_json::Value;
use tokio::sync::watch;

use crate::audit::{AuditEvent, AuditOutcome, AuditSink};
use crate::capability::{Authorization, CapabilityCatalog, WriteCapability};
use crate::context::{CallOptions, PeerError, ToolContext};
use crate::error::{CoreError, GateError};
use crate::principal::{Caller, SurfaceProjection};
use crate::tool::{Tool, ToolError, ToolKind, ToolOutput, ToolSpec, check_name};
use crate::validate::{CompiledSchema, FieldError};

/// A registered tool with its compiled schemas.
struct Entry {
    spec: ToolSpec,
    tool: Arc<dyn Tool>,
    input: CompiledSchema,
    output: Option<CompiledSchema>,
}

#[derive(Default, Clone)]
struct Snapshot {
    tools: HashMap<Arc<str>, Arc<Entry>>,
    refusals: HashMap<Arc<str>, Arc<str>>,
    capabilities: Arc<CapabilityCatalog>,
}

struct Inner {
    current: ArcSwap<Snapshot>,
    writer: Mutex<()>,
    version: watch::Sender<u64>,
    audit: ArcSwap<Option<Arc<dyn AuditSink>>>,
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
                s.tools.insert(name, Arc::new(e));
            }
            Ok(())
        })
    }

    /// Removes a tool. Calls already running finish; later calls answer `unknown_tool`.
    /// Returns whether it was registered.
    pub fn remove(&self, name: &str) -> bool {
        self.update(|s| Ok(s.tools.remove(name).is_some()))
            .unwrap_or(false)
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

    /// The tools `caller` is shown, sorted by name. See [`SurfaceProjection`] for what each
    /// projection lists.
    pub fn list(&self, caller: &Caller) -> Vec<ToolSpec> {
        let snap = self.inner.current.load();
        let mut v: Vec<ToolSpec> = snap
            .tools
            .values()
            .filter(|e| listed(&snap.capabilities, e, caller))
            .map(|e| e.spec.clone())
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// One page of [`ToolRegistry::list`]. Cursors are opaque and stay valid across changes.
    pub fn list_page(
        &self,
        caller: &Caller,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ToolSpec>, InvalidCursor> {
        paginate(&self.list(caller), |s| s.name.as_str(), cursor, limit)
    }

    /// Runs steps 1-4 of the gate without running the tool: the spec of the tool `caller` may
    /// call with `args`, or the refusal. Used by transports that must answer before running
    /// (and by tests).
    pub fn check(&self, caller: &Caller, name: &str, args: &Value) -> Result<ToolSpec, GateError> {
        let snap = self.inner.current.load();
        let (entry, _) = admit(&snap, caller, name)?;
        validate_args(&entry, args)?;
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
        let started = Instant::now();
        let at = SystemTime::now();
        let args = if args.is_null() {
            Value::Object(Default::default())
        } else {
            args
        };
        let snap = self.inner.current.load_full();
        let admitted = admit(&snap, caller, name);
        let (kind, capability, deprecated) = match &admitted {
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
        drop(snap);
        let result = match admitted {
            Err(e) => Err(e),
            Ok((entry, _)) => match validate_args(&entry, &args) {
                Err(e) => Err(e),
                Ok(()) => run(entry, args, caller, opts).await,
            },
        };
        let audit = self.inner.audit.load();
        if let Some(sink) = audit.as_ref() {
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
            });
        }
        result
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
    Ok(Entry {
        spec,
        tool,
        input,
        output,
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
) -> Result<ToolOutput, GateError> {
    let name = entry.spec.name.clone();
    let cancel = opts.cancel.clone();
    if cancel.is_cancelled() {
        return Err(GateError::Cancelled { tool: name });
    }
    let ctx = ToolContext::new(caller.clone(), opts);
    let span = tracing::debug_span!("tool_call", tool = %name, principal = %caller.principal().id);
    let fut = AssertUnwindSafe(entry.tool.call(args, ctx)).catch_unwind();
    let outcome = tokio::select! {
        biased;
        () = cancel.cancelled() => return Err(GateError::Cancelled { tool: name }),
        r = tracing::Instrument::instrument(fut, span) => r,
    };
    match outcome {
        Err(_panic) => {
            tracing::error!(tool = %name, "tool panicked");
            Err(GateError::ToolFailed {
                tool: name,
                message: "the tool stopped unexpectedly (internal error)".into(),
            })
        }
        Ok(Err(ToolError::Failed { message })) => Err(GateError::ToolFailed {
            tool: name,
            message,
        }),
        Ok(Err(ToolError::Peer(PeerError::Cancelled))) => Err(GateError::Cancelled { tool: name }),
        Ok(Err(ToolError::Peer(PeerError::InputRequired { requests }))) => {
            Err(GateError::InputRequired {
                tool: name,
                requests,
            })
        }
        Ok(Err(ToolError::Peer(e))) => Err(GateError::ToolFailed {
            tool: name,
            message: e.to_string(),
        }),
        Ok(Ok(out)) => {
            if let (Some(schema), Some(structured), false) =
                (&entry.output, &out.structured, out.is_error)
                && !schema.is_valid(structured)
            {
                tracing::error!(tool = %name, "structured result does not match the output schema");
                return Err(GateError::ToolFailed {
                    tool: name,
                    message: "the tool's result does not match its declared output schema (internal error)".into(),
                });
            }
            Ok(out)
        }
    }
}
