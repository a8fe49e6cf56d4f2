//! Gate step 6: the tool runs, with the call's cancellation token.
//!
//! A call that came without a token (an in-process call with default options) has none to race
//! or check: the gate neither creates nor clones one, and the tool's context creates it only if
//! the tool asks ([`ToolContext::cancellation`]); nothing but the tool itself could fire it.
//!
//! A tool with a synchronous body ([`Tool::synchronous`](crate::Tool::synchronous)) is called
//! directly, borrowing the context. Any other tool's future is polled once at once, inside its
//! tracing span: most tools finish on that first poll and pay for nothing more (no
//! cancellation waiter, no instrumented wrapper, no state of the race in the gate's future). A
//! tool that is still pending is raced against the token: if the token fires first the future
//! is dropped and the call answers `cancelled`, as does a tool that stops with an error once
//! the token fired, whatever words it chose. A panicking tool answers `tool_failed`; a
//! structured result that does not match the declared output schema answers `tool_failed` too.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::catalog::Entry;
use crate::content::ToolOutput;
use crate::context::{PeerError, ToolContext};
use crate::error::GateError;
use crate::tool::{SyncHandler, ToolError, ToolFuture};

type Outcome = std::thread::Result<Result<ToolOutput, ToolError>>;

/// Runs a synchronous tool, borrowing the context: no boxed future, no copy of the
/// cancellation token.
#[inline]
fn run_sync(
    entry: &Entry,
    body: &SyncHandler,
    args: Value,
    ctx: &ToolContext,
) -> Result<ToolOutput, GateError> {
    if ctx.is_cancelled() {
        return Err(GateError::Cancelled {
            tool: entry.spec.name.clone(),
        });
    }
    let span = tool_span(entry, ctx);
    let outcome = {
        let _entered = span.enter();
        catch_unwind(AssertUnwindSafe(|| body(args, ctx)))
    };
    answer(entry, outcome, ctx.cancellation_if_any(), ctx.is_preview())
}

/// [`finish`], with the common outcome (a result, and no output schema to check it against)
/// mapped inline, without a call or a move of the outcome.
#[inline(always)]
fn answer(
    entry: &Entry,
    outcome: Outcome,
    cancel: Option<&CancellationToken>,
    preview: bool,
) -> Result<ToolOutput, GateError> {
    match outcome {
        Ok(Ok(out)) if entry.output.is_none() => Ok(out),
        outcome => finish(entry, outcome, cancel, preview),
    }
}

/// The run step of one call: the tool runs when this future is first polled, and what it did
/// becomes the gate's answer.
///
/// Written by hand rather than as an `async` block: its unstarted state is only the entry, the
/// arguments and the tool context, and the first poll (span, the tool's future, its outcome)
/// lives on the stack of that poll instead of in the future, so the future the gate returns
/// stays small and every move of it is cheap. Nothing in it needs pinning (`Unpin`).
pub(crate) struct RunCall {
    state: RunState,
}

enum RunState {
    /// Not polled yet, or a synchronous tool's call answered at its first poll: the arguments
    /// are taken out when it runs and leave `null` behind, which marks the call as run (before,
    /// they are always an object: the gate makes absent ones `{}`). The context is borrowed by
    /// the tool and dropped with the future.
    Start {
        entry: Arc<Entry>,
        args: Value,
        ctx: ToolContext,
    },
    /// A tool that was still at work after its first poll, raced against the call's token.
    Racing {
        entry: Arc<Entry>,
        cancel: Option<CancellationToken>,
        preview: bool,
        race: Race,
    },
    /// An async tool's call, answered.
    Done,
}

/// A pending tool's future raced against the token: `None` when the token fired first.
type Race = Pin<Box<dyn Future<Output = Option<Outcome>> + Send>>;

/// What the first poll of an async tool leaves when the tool is still at work: its token, the
/// preview flag and the race.
type Pending = (Option<CancellationToken>, bool, Race);

/// The run step of a call that passed the gate's checks (see [`RunCall`]).
pub(crate) fn run(entry: Arc<Entry>, args: Value, ctx: ToolContext) -> RunCall {
    RunCall {
        state: RunState::Start { entry, args, ctx },
    }
}

impl Future for RunCall {
    type Output = Result<ToolOutput, GateError>;

    /// A synchronous tool's poll is inlined into the caller's, so that its call has no frame
    /// of its own between the gate and the tool; every other poll is out of line.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let RunState::Start { entry, args, ctx } = &mut this.state
            && let Some(body) = &entry.sync
        {
            if args.is_null() {
                return Poll::Ready(polled_after_finish());
            }
            return Poll::Ready(run_sync(entry, body, std::mem::take(args), ctx));
        }
        this.poll_async(cx)
    }
}

impl RunCall {
    /// Every poll but a synchronous tool's.
    fn poll_async(&mut self, cx: &mut Context<'_>) -> Poll<Result<ToolOutput, GateError>> {
        if let RunState::Racing {
            entry,
            cancel,
            preview,
            race,
        } = &mut self.state
        {
            let done = match race.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(outcome)) => finish(entry, outcome, cancel.as_ref(), *preview),
                Poll::Ready(None) => Err(GateError::Cancelled {
                    tool: entry.spec.name.clone(),
                }),
            };
            self.state = RunState::Done;
            return Poll::Ready(done);
        }
        let RunState::Start { entry, args, ctx } =
            std::mem::replace(&mut self.state, RunState::Done)
        else {
            return Poll::Ready(polled_after_finish());
        };
        match first_poll(&entry, args, ctx, cx) {
            Ok(done) => Poll::Ready(done),
            Err((cancel, preview, race)) => {
                self.state = RunState::Racing {
                    entry,
                    cancel,
                    preview,
                    race,
                };
                // Polled at once, so that the token's waiter is registered.
                self.poll_async(cx)
            }
        }
    }
}

/// An async tool's first poll, inside its span: most tools finish on it and pay for nothing
/// more (no cancellation waiter, no instrumented wrapper, no race). A tool still at work is
/// raced against the token, in a boxed future of its own.
#[inline(always)]
fn first_poll(
    entry: &Arc<Entry>,
    args: Value,
    ctx: ToolContext,
    cx: &mut Context<'_>,
) -> Result<Result<ToolOutput, GateError>, Pending> {
    if ctx.is_cancelled() {
        return Ok(Err(GateError::Cancelled {
            tool: entry.spec.name.clone(),
        }));
    }
    let preview = ctx.is_preview();
    // A call that came without a token has nothing to race against (only the tool could
    // create and fire its token): it is neither cloned nor created here.
    let cancel = ctx.cancellation_if_any().cloned();
    let span = tool_span(entry, &ctx);
    // The tool's future must not borrow the entry (the run step owns it): a tool with a
    // detached body gives such a future itself; any other is wrapped in one that holds the
    // tool.
    // One entry into the span for both the making and the first poll of the tool's future.
    let (fut, first) = {
        let _entered = span.enter();
        // A detached body runs its closure's code before the future's (a raw handler that
        // reads its arguments first, then returns `async move { .. }`): a panic there is the
        // tool's panic as much as one inside the future, and must not unwind through the gate.
        let made = catch_unwind(AssertUnwindSafe(|| match &entry.detached {
            Some(body) => body(args, ctx),
            None => {
                let tool = Arc::clone(&entry.tool);
                Box::pin(async move { tool.call(args, ctx).await }) as ToolFuture
            }
        }));
        let mut fut: ToolFuture = match made {
            Ok(fut) => fut,
            Err(panic) => return Ok(answer(entry, Err(panic), cancel.as_ref(), preview)),
        };
        let first = poll_catching(fut.as_mut(), cx);
        (fut, first)
    };
    if let Poll::Ready(outcome) = first {
        return Ok(answer(entry, outcome, cancel.as_ref(), preview));
    }
    let rest = AssertUnwindSafe(fut).catch_unwind();
    let token = cancel.clone();
    let race: Race = Box::pin(async move {
        let rest = tracing::Instrument::instrument(rest, span);
        match token {
            Some(token) => tokio::select! {
                biased;
                r = rest => Some(r),
                () = token.cancelled() => None,
            },
            None => Some(rest.await),
        }
    });
    Err((cancel, preview, race))
}

/// The answer of a run step polled again after it answered: a bug in the caller, which gets an
/// error rather than a panic inside the gate.
#[cold]
pub(crate) fn polled_after_finish() -> Result<ToolOutput, GateError> {
    tracing::error!("a tool call's future was polled after it finished");
    Err(GateError::ToolFailed {
        tool: String::new(),
        message: "this call had already answered; its future was polled again (internal error)"
            .into(),
    })
}

/// The span a tool runs in.
#[inline(always)]
fn tool_span(entry: &Entry, ctx: &ToolContext) -> tracing::Span {
    tracing::debug_span!("tool_call", tool = %entry.spec.name, principal = %ctx.caller().principal().id)
}

/// Maps what the tool did onto the gate's answer.
fn finish(
    entry: &Entry,
    outcome: Outcome,
    cancel: Option<&CancellationToken>,
    preview: bool,
) -> Result<ToolOutput, GateError> {
    // The name is copied into an error only on the paths that produce one.
    let name = || entry.spec.name.clone();
    // A tool that noticed the cancellation and stopped with an error was cancelled.
    if !matches!(outcome, Ok(Ok(_))) && cancel.is_some_and(CancellationToken::is_cancelled) {
        return Err(GateError::Cancelled { tool: name() });
    }
    match outcome {
        Err(_panic) => {
            tracing::error!(tool = %entry.spec.name, "tool panicked");
            Err(GateError::ToolPanicked { tool: name() })
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

/// One poll of the tool's future; a panic is caught and reported as the outcome.
fn poll_catching<F>(fut: Pin<&mut F>, cx: &mut std::task::Context<'_>) -> Poll<Outcome>
where
    F: Future<Output = Result<ToolOutput, ToolError>> + ?Sized,
{
    match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
        Ok(Poll::Ready(r)) => Poll::Ready(Ok(r)),
        Ok(Poll::Pending) => Poll::Pending,
        Err(panic) => Poll::Ready(Err(panic)),
    }
}
