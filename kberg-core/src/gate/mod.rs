//! The dispatch gate every tool call passes through, whatever transport it came from.
//!
//! Its order is fixed and documented because it is a security property: a caller who may not
//! call a tool learns that, never a critique of arguments it was not entitled to send.
//!
//! 1. the tool exists and the app's [`ToolVisibility`] shows it to this caller (a hidden one
//!    answers as an unknown one; a registered refusal answers with its reason);
//! 2. it is visible in the caller's projection;
//! 3. a write tool's capability is granted (directly or through a deprecated id);
//! 4. the arguments validate against the schema compiled at registration ([`prepare`]). Before
//!    that the gate takes out what belongs to it: a preview tool's `commit_token`, and the scope
//!    argument, which it fills from the caller's current scope and checks ([`scope`]:
//!    `scope_required`, `scope_unknown`, `scope_forbidden`); after it, every
//!    [handle](crate::handle::Handle) argument is resolved to the app's internal id
//!    (`handle_invalid`, `handle_expired`);
//! 5. confirm / preview ([`commit`], [`confirm`]): a preview tool without a token runs as a dry
//!    run and answers with a commit token; with one, the token is redeemed (single use, bound to
//!    tool, principal and arguments). Then the app's [`ConfirmPolicy`] may hold the call for a
//!    human: asked through the client (elicitation) or filed as a ticket
//!    (`pending_human_confirm`);
//! 6. the tool runs with the call's cancellation token ([`run`]); if the token fires first the
//!    call is dropped and answers `cancelled` (so does a tool that stops with an error once it
//!    fired); a panicking tool answers `tool_failed`;
//! 7. an [`AuditEvent`] is recorded, whatever the outcome, with the argument digest and any
//!    ticket or commit-token fingerprint. Nothing of it is gathered when no sink is set.
//!
//! A refusal becomes the caller's tool result in [`refusal`]. The gate works on one
//! [`Catalog`] snapshot that the registry above it hands in, which carries the app's
//! [`GateSettings`] too; it knows nothing of how tools are stored.
//!
//! [`ConfirmPolicy`]: crate::confirm::ConfirmPolicy
//! [`ToolVisibility`]: crate::catalog::ToolVisibility

mod commit;
mod confirm;
mod prepare;
mod refusal;

pub use self::refusal::Refusal;
mod run;
mod scope;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use serde_json::Value;
use tokio::sync::watch;

use crate::audit::{AuditEvent, AuditOutcome, AuditSink};
use crate::capability::Authorization;
use crate::catalog::{Catalog, Entry, GateSettings};
use crate::confirm::{ConfirmPolicy, ConfirmRequest, ConfirmTicket};
use crate::content::ToolOutput;
use crate::context::{CallExtras, CallOptions, ToolContext};
use crate::error::GateError;
use crate::preview::{CallPhase, CommitTokens};
use crate::principal::{Caller, SurfaceProjection};
use crate::tool::{ToolKind, ToolSpec, quoted_name};

use self::commit::CommitStep;
use self::prepare::{PreparedCall, check_args, prepare_call, validate_args};

/// The gate's own state: the commit tokens it issued, and the version of the ticket list
/// (bumped whenever a ticket is filed or decided). Its settings come with each catalog.
pub(crate) struct Gate {
    commits: CommitTokens,
    tickets_version: watch::Sender<u64>,
}

/// A call that runs because a human approved its ticket.
pub(crate) struct Approved<'a> {
    pub(crate) ticket: &'a str,
    pub(crate) approver: &'a str,
    pub(crate) phase: CallPhase,
}

/// What is left of a call once its synchronous steps have run.
enum Step {
    /// Answered already (a refusal).
    Done(Result<ToolOutput, GateError>),
    /// The common call: only the tool's run is left.
    Run(Arc<Entry>, Value, CallExtras),
    /// Preview / commit, confirmation or an approved ticket: step 5, then the run.
    Confirm(PreparedCall, Arc<GateSettings>),
}

/// The future of a call that needs more than the run step.
type BoxedCall<'a> = Pin<Box<dyn Future<Output = Result<ToolOutput, GateError>> + Send + 'a>>;

/// The future of one call through the gate, as [`Gate::call`] returns it: answered already (a
/// refusal), the run step alone (the common call), or one boxed future for a call that needs
/// more (audit, preview or commit, confirmation, an approved ticket).
///
/// An enum rather than nested `Either`s: one discriminant to match on each poll, and nothing in
/// it needs pinning. Polled again after it answered, every arm answers `tool_failed` (see
/// [`run::polled_after_finish`]) rather than panicking or running the tool again: a boxed call
/// that answered becomes `Ready(None)`.
pub(crate) enum GateCall<'a> {
    /// The answer, until it is taken by the first poll.
    Ready(Option<Result<ToolOutput, GateError>>),
    /// The run step of the common call.
    Run(run::RunCall),
    /// Every other call.
    Boxed(BoxedCall<'a>),
}

impl Future for GateCall<'_> {
    type Output = Result<ToolOutput, GateError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match this {
            GateCall::Run(run) => Pin::new(run).poll(cx),
            GateCall::Boxed(fut) => {
                let answer = fut.as_mut().poll(cx);
                if answer.is_ready() {
                    // An `async` block resumed after it finished would panic.
                    *this = GateCall::Ready(None);
                }
                answer
            }
            GateCall::Ready(answer) => {
                Poll::Ready(answer.take().unwrap_or_else(run::polled_after_finish))
            }
        }
    }
}

/// What the gate records about a call beyond who and what.
#[derive(Default)]
pub(crate) struct Trail {
    pub(crate) args_digest: Option<String>,
    pub(crate) ticket: Option<String>,
    pub(crate) approved_by: Option<String>,
    pub(crate) commit_token: Option<String>,
    pub(crate) phase: CallPhase,
    pub(crate) scope: Option<String>,
}

impl Gate {
    /// A gate that has issued no commit token yet.
    pub(crate) fn new() -> Self {
        Self {
            commits: CommitTokens::default(),
            tickets_version: watch::channel(0).0,
        }
    }

    /// A receiver whose value changes whenever a ticket is filed or decided.
    pub(crate) fn ticket_changes(&self) -> watch::Receiver<u64> {
        self.tickets_version.subscribe()
    }

    /// Tells ticket watchers the list changed.
    pub(crate) fn tickets_changed(&self) {
        self.tickets_version.send_modify(|v| *v += 1);
    }

    /// Runs steps 1-4 without running the tool: the spec of the tool `caller` may call with
    /// `args`, or the refusal. Null `args` are an empty object, as in [`Gate::call`].
    pub(crate) fn check(
        &self,
        catalog: &Catalog,
        caller: &Caller,
        name: &str,
        args: &Value,
    ) -> Result<ToolSpec, GateError> {
        // The same arguments `call` would run with: a check that judged `null` itself would
        // refuse (e.g. against `{"type": "object"}`) a call that `call` accepts.
        let empty;
        let args = if args.is_null() {
            empty = Value::Object(Default::default());
            &empty
        } else {
            args
        };
        let (entry, _) = admit(catalog, caller, name)?;
        check_args(catalog, entry, caller, args)?;
        Ok(entry.spec.clone())
    }

    /// The whole gate for one call: checks, runs and audits it. `approved` is set when a
    /// human approved the call's ticket (the confirm step is then skipped).
    ///
    /// The synchronous steps (admission, arguments: 1 to 4) run now, against the borrowed
    /// `catalog`; the returned future carries only what is left (confirm, run, audit), so
    /// creating and moving it stays cheap and it holds no catalog snapshot. A refused call's
    /// future is ready at once; the common call (no audit sink, no preview or commit, no
    /// confirm policy, no approved ticket) is the run step's own future, which holds only the
    /// entry, the arguments and the tool context built here; every other call takes one
    /// boxed future. The tool itself runs only when the future is polled.
    pub(crate) fn call<'a>(
        &'a self,
        catalog: &Catalog,
        caller: &'a Caller,
        name: &'a str,
        mut args: Value,
        opts: CallOptions,
        approved: Option<Approved<'a>>,
    ) -> GateCall<'a> {
        // Absent arguments are an empty object (the run step relies on that: see
        // `run::RunCall`).
        if args.is_null() {
            args = Value::Object(Default::default());
        }
        let settings = &catalog.settings;
        let admitted = admit(catalog, caller, name);
        // The common call, straight through: no audit sink, no confirm policy, no approved
        // ticket, and a plain tool (no preview, scope or handles), so step 4 is the validation
        // alone and step 5 has nothing to do. No trail, no prepared call, no step to build.
        if approved.is_none()
            && settings.audit.is_none()
            && settings.confirm.is_none()
            && let Ok((entry, _)) = &admitted
            && entry.plain
        {
            return match validate_args(entry, &args) {
                Err(e) => GateCall::Ready(Some(Err(e))),
                Ok(()) => {
                    let extras = CallExtras {
                        phase: CallPhase::Direct,
                        scope: None,
                        ticket: None,
                        handles: settings.handles.clone(),
                    };
                    let ctx = ToolContext::for_call(caller.clone(), opts, extras);
                    GateCall::Run(run::run(Arc::clone(entry), args, ctx))
                }
            };
        }
        // Everything the audit event needs is gathered only when a sink is set: the common
        // unaudited call pays for none of it.
        let audit: Option<Arc<dyn AuditSink>> = settings.audit.clone();
        let clock = audit.as_ref().map(|_| (Instant::now(), SystemTime::now()));
        // The origin goes to the sink by reference count; opts itself moves into the run.
        let origin = audit.as_ref().and_then(|_| opts.origin.clone());
        let mut trail = Trail::default();
        if let Some(a) = &approved {
            trail.ticket = Some(a.ticket.to_string());
            trail.approved_by = Some(a.approver.to_string());
        }
        let labels = audit.as_ref().map(|_| match &admitted {
            Ok((e, via)) => (
                e.spec.kind.label(),
                e.spec.kind.capability().map(str::to_string),
                via.clone(),
            ),
            Err(_) => match catalog.tools.get(name) {
                Some(e) => (
                    e.spec.kind.label(),
                    e.spec.kind.capability().map(str::to_string),
                    None,
                ),
                None => ("unknown", None, None),
            },
        });
        let front = admitted.and_then(|(entry, _)| {
            prepare_call(
                catalog,
                settings,
                entry,
                caller,
                args,
                audit.is_some(),
                &mut trail,
            )
        });
        let step = match front {
            Err(e) => Step::Done(Err(e)),
            // The common call: no preview or commit, no confirm policy, no approved ticket.
            Ok(call)
                if approved.is_none()
                    && !call.entry.spec.previews
                    && settings.confirm.is_none() =>
            {
                let extras = CallExtras {
                    phase: CallPhase::Direct,
                    scope: trail.scope.clone(),
                    ticket: None,
                    handles: settings.handles.clone(),
                };
                let args = call.resolved.unwrap_or(call.args);
                Step::Run(call.entry, args, extras)
            }
            Ok(call) => Step::Confirm(call, Arc::clone(settings)),
        };
        let (Some(sink), Some((started, at)), Some((kind, capability, deprecated))) =
            (audit, clock, labels)
        else {
            return match step {
                Step::Done(r) => GateCall::Ready(Some(r)),
                Step::Run(entry, args, extras) => {
                    // The context is built here, once, and moved into the run step's future
                    // (not the options and extras it is made of).
                    let ctx = ToolContext::for_call(caller.clone(), opts, extras);
                    GateCall::Run(run::run(entry, args, ctx))
                }
                Step::Confirm(call, settings) => GateCall::Boxed(Box::pin(async move {
                    self.confirm_and_run(
                        call,
                        caller,
                        opts,
                        &settings,
                        approved.as_ref(),
                        &mut trail,
                    )
                    .await
                })),
            };
        };
        GateCall::Boxed(Box::pin(async move {
            let result = match step {
                Step::Done(r) => r,
                Step::Run(entry, args, extras) => {
                    let ctx = ToolContext::for_call(caller.clone(), opts, extras);
                    run::run(entry, args, ctx).await
                }
                Step::Confirm(call, settings) => {
                    self.confirm_and_run(
                        call,
                        caller,
                        opts,
                        &settings,
                        approved.as_ref(),
                        &mut trail,
                    )
                    .await
                }
            };
            let p = caller.principal();
            record_contained(
                sink.as_ref(),
                name,
                &AuditEvent {
                    at,
                    principal: p.id.clone(),
                    agent: p.agent.clone(),
                    tool: quoted_name(name).into_owned(),
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
                    origin,
                },
            );
            result
        }))
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
        settings: &GateSettings,
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
        let step = CommitStep {
            tokens: &self.commits,
            tool: entry.spec.name.as_str(),
            principal: caller.principal().id.as_str(),
            digest: binding.as_deref().unwrap_or_default(),
            // An approved call's arguments were filed without the token, so it has none.
            token: commit_token.as_deref().filter(|_| approved.is_none()),
        };
        let phase = match approved {
            Some(a) => a.phase,
            None => step.phase(entry.spec.previews, &mut trail.commit_token)?,
        };
        trail.phase = phase;
        // Human confirmation (never for a preview, which changes nothing). A policy that
        // panics refuses the call: whether it needed a human is unknown, so it does not run.
        if approved.is_none()
            && phase != CallPhase::Preview
            && let Some(policy) = &settings.confirm
            && let Some(req) = check_contained(
                policy.as_ref(),
                &entry.spec,
                resolved.as_ref().unwrap_or(&args),
                caller,
            )?
        {
            let asked = if req.asks_client() {
                confirm::ask_client(&entry, &args, caller, &opts, &req).await
            } else {
                None
            };
            match asked {
                Some(answer) => answer?,
                None => {
                    // Refused before the token is spent: a commit that finds no room for its
                    // ticket can be sent again, token and all, once a person decided others.
                    confirm::room_for_ticket(
                        &entry.spec.name,
                        caller,
                        settings,
                        SystemTime::now(),
                    )?;
                    step.spend()?;
                    let refusal =
                        confirm::file_ticket(&entry, args, caller, settings, &req, phase, trail);
                    if trail.ticket.is_some() {
                        self.tickets_changed();
                    }
                    return Err(refusal);
                }
            }
        }
        step.spend()?;
        let extras = CallExtras {
            phase,
            scope: trail.scope.clone(),
            ticket: approved.map(|a| a.ticket.to_string()),
            handles: settings.handles.clone(),
        };
        let ctx = ToolContext::for_call(caller.clone(), opts, extras);
        let out = run::run(Arc::clone(&entry), resolved.unwrap_or(args), ctx).await?;
        if phase != CallPhase::Preview || out.is_error {
            return Ok(out);
        }
        step.issue(out, &settings.commit, &mut trail.commit_token)
    }

    /// Runs an approved ticket's call through the gate, skipping only the confirm step.
    pub(crate) async fn run_approved(
        &self,
        catalog: Arc<Catalog>,
        ticket: &ConfirmTicket,
        approver: &str,
    ) -> Result<ToolOutput, GateError> {
        let caller = ticket.caller();
        self.call(
            &catalog,
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
}

/// Gate steps 1-3. Returns the entry and the deprecated capability id used, if any.
#[inline(always)]
fn admit<'c>(
    catalog: &'c Catalog,
    caller: &Caller,
    name: &str,
) -> Result<(&'c Arc<Entry>, Option<String>), GateError> {
    // A tool hidden from this caller answers exactly as one never registered.
    let Some(entry) = catalog
        .tools
        .get(name)
        .filter(|e| catalog.visible(e, caller))
    else {
        return Err(match catalog.refusals.get(name) {
            Some(reason) => GateError::Refused {
                tool: name.to_string(),
                reason: reason.to_string(),
            },
            None => GateError::UnknownTool {
                tool: quoted_name(name).into_owned(),
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
        match catalog.capabilities.authorizes(caller.grants(), cap.id()) {
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
    Ok((entry, via))
}

/// Records `event` with the app's sink, its panic contained as a tool's is: the call it records
/// has already run (or been refused), so a sink that panics is logged, not the caller's failure.
/// The panic's payload is not shown: it may quote anything the sink held.
fn record_contained(sink: &dyn AuditSink, tool: &str, event: &AuditEvent) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.record(event))).is_err() {
        tracing::error!(
            tool = %quoted_name(tool),
            "the audit sink panicked; the call's audit event was not recorded"
        );
    }
}

/// Asks the app's confirmation policy about a call, its panic contained: a policy that panics
/// refuses the call (`tool_failed`, saying "internal error") rather than unwinding through the
/// transport, where the request would never be answered. Neither the panic's payload nor the
/// arguments are shown.
fn check_contained(
    policy: &dyn ConfirmPolicy,
    spec: &ToolSpec,
    args: &Value,
    caller: &Caller,
) -> Result<Option<ConfirmRequest>, GateError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        policy.check(spec, args, caller)
    }))
    .map_err(|_panic| {
        tracing::error!(tool = %spec.name, "the confirmation policy panicked; the call was refused");
        GateError::ToolFailed {
            tool: spec.name.clone(),
            message: "the confirmation policy stopped unexpectedly (internal error); the call \
                      did not run"
                .into(),
        }
    })
}
