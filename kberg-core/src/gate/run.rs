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
use std::task::Poll;

use futures::FutureExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::catalog::Entry;
use crate::content::ToolOutput;
use crate::context::{PeerError, ToolContext};
use crate::error::GateError;
use crate::tool::{SyncHandler, ToolError};

type Outcome = std::thread::Result<Result<ToolOutput, ToolError>>;

/// Runs a synchronous tool, borrowing the context: no boxed future, no copy of the
/// cancellation token.
fn run_sync(
    entry: &Entry,
    body: &SyncHandler,
    args: Value,
    ctx: ToolContext,
) -> Result<ToolOutput, GateError> {
    if ctx.is_cancelled() {
        return Err(GateError::Cancelled {
            tool: entry.spec.name.clone(),
        });
    }
    let span = tool_span(entry, &ctx);
    let outcome = {
        let _entered = span.enter();
        catch_unwind(AssertUnwindSafe(|| body(args, &ctx)))
    };
    finish(entry, outcome, ctx.cancellation_if_any(), ctx.is_preview())
}

/// Runs the tool and maps what it did onto the gate's answer.
///
/// Written as an `async move` block over the three values it owns (an `async fn` would keep
/// a second copy of its parameters in the future), and laid out so that nothing but the
/// token, the race's box and the entry lives across the race: the future the gate returns
/// stays a few hundred bytes, and every move of it is cheap.
// Not an `async fn` on purpose: see above.
#[allow(clippy::manual_async_fn)]
pub(crate) fn run(
    entry: Arc<Entry>,
    args: Value,
    ctx: ToolContext,
) -> impl Future<Output = Result<ToolOutput, GateError>> + Send + 'static {
    async move {
        if let Some(body) = &entry.sync {
            return run_sync(&entry, body, args, ctx);
        }
        if ctx.is_cancelled() {
            return Err(GateError::Cancelled {
                tool: entry.spec.name.clone(),
            });
        }
        let preview = ctx.is_preview();
        // A call that came without a token has nothing to race against (only the tool could
        // create and fire its token): it is neither cloned nor created here.
        let cancel = ctx.cancellation_if_any().cloned();
        // In a block of its own, so that the first poll's state (the span, the tool's future,
        // its outcome) is gone from the future before the race is awaited.
        let raced = {
            let span = tool_span(&entry, &ctx);
            let mut fut = entry.tool.call(args, ctx);
            let first = {
                let _entered = span.enter();
                std::future::poll_fn(|cx| Poll::Ready(poll_catching(fut.as_mut(), cx))).await
            };
            match first {
                Poll::Ready(outcome) => return finish(&entry, outcome, cancel.as_ref(), preview),
                // A tool still at work: raced against the token, in a boxed future of its
                // own so that the common, finished-at-once call does not carry the race's
                // state.
                Poll::Pending => {
                    let rest = AssertUnwindSafe(fut).catch_unwind();
                    let token = cancel.clone();
                    Box::pin(async move {
                        let rest = tracing::Instrument::instrument(rest, span);
                        match token {
                            Some(token) => tokio::select! {
                                biased;
                                r = rest => Some(r),
                                () = token.cancelled() => None,
                            },
                            None => Some(rest.await),
                        }
                    })
                }
            }
        };
        match raced.await {
            Some(outcome) => finish(&entry, outcome, cancel.as_ref(), preview),
            None => Err(GateError::Cancelled {
                tool: entry.spec.name.clone(),
            }),
        }
    }
}

/// The span a tool runs in.
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
