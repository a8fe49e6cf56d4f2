//! Following an upstream's task: a forwarded tool call that the upstream answered with a task
//! (the MCP tasks extension, which the aggregator declares to its upstreams).
//!
//! The aggregator's client tells every upstream it supports tasks, so an upstream tool that runs
//! as a task (or only as one) works through the aggregator. The forwarded call then follows the
//! task to its end: `tasks/get` at the upstream's `pollIntervalMs` (kept between 50 ms and
//! 5 s), each poll an ordinary forwarded request (with its slot and its call timeout, so a long
//! task is not cut short by the timeout of one request); the upstream's questions
//! (`input_required`) are relayed to the calling client through the call's client channel and
//! answered upstream with `tasks/update`, each key once: the extension lets an upstream
//! acknowledge an update before its `tasks/get` shows it, and its keys are unique over the
//! task's life, so a key already answered is never asked again (the client would otherwise see
//! the same question twice); a cancelled call cancels the upstream task (`tasks/cancel`), and so
//! does a task still unfinished once its time to live (`ttlMs`, as the upstream last gave it, at
//! most `MAX_CALL_TIMEOUT`, a task without one followed that long) has passed since the
//! aggregator was given it, also while its question waits for the client's answer: the call
//! then ends `upstream_timeout`. A status this protocol revision does not have (a later
//! revision's) is the task going on: polled like `working`. The questions reach the client
//! cleaned of the upstream's credentials, as every request the client relay passes on (see
//! `relay`). A completed task's result passes through unchanged; a failed or cancelled
//! upstream task is the tool's failure (`tool_failed`), its message redacted and cut (at 1,000
//! characters) as every error that quotes an upstream.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kberg_core::{PeerError, SpawnOnDrop, ToolContext, ToolError, ToolOutput};
use rmcp::model::{
    CallToolResult, CancelTaskParams, CancelTaskRequest, ClientRequest, GetTaskParams,
    GetTaskRequest, InputRequests, InputResponses, ServerResult, Task, TaskPayload,
    UpdateTaskParams, UpdateTaskRequest,
};
use serde_json::Value;

use super::config::MAX_CALL_TIMEOUT;
use super::error::UpstreamError;
use super::forward::{forward, quoted, result_kind};
use super::front::Upstream;
use super::relay::redact_relayed;

/// Bounds of the polling interval, whatever the upstream suggests.
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(5);
const DEFAULT_POLL: Duration = Duration::from_millis(500);

fn interval(poll_interval_ms: Option<u64>) -> Duration {
    poll_interval_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_POLL)
        .clamp(MIN_POLL, MAX_POLL)
}

/// How long a task is followed: its time to live as the upstream last gave it (it may change
/// over the task's life), and no task longer than [`MAX_CALL_TIMEOUT`], the longest a forwarded
/// call may wait; a task without one ("unlimited") is followed that long too.
fn time_to_live(ttl_ms: Option<u64>) -> Duration {
    ttl_ms
        .map_or(MAX_CALL_TIMEOUT, Duration::from_millis)
        .min(MAX_CALL_TIMEOUT)
}

/// A view of the task `id` in a status this protocol revision does not have (a later
/// revision's), which the client library cannot read as a task: its `pollIntervalMs` and
/// `ttlMs`, when it is one. A status this revision has in a view it cannot read (`completed`
/// without its result) is a malformed answer, not this.
fn unknown_status(view: &Value, id: &str) -> Option<(Option<u64>, Option<u64>)> {
    const KNOWN: [&str; 5] = [
        "working",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ];
    let status = view.get("status").and_then(Value::as_str)?;
    (view.get("taskId").and_then(Value::as_str) == Some(id) && !KNOWN.contains(&status)).then(
        || {
            (
                view.get("pollIntervalMs").and_then(Value::as_u64),
                view.get("ttlMs").and_then(Value::as_u64),
            )
        },
    )
}

/// How following a task ended without a result.
pub(super) enum Followed {
    /// The aggregator's own problem with the upstream (unavailable, timeout, bad answer).
    Upstream(UpstreamError),
    /// The tool failed (or was cancelled), as the gate should answer.
    Tool(ToolError),
}

impl From<UpstreamError> for Followed {
    fn from(e: UpstreamError) -> Self {
        match e {
            UpstreamError::Cancelled => Followed::Tool(ToolError::Peer(PeerError::Cancelled)),
            e @ (UpstreamError::Unavailable { .. }
            | UpstreamError::Timeout { .. }
            | UpstreamError::TaskTimeout { .. }
            | UpstreamError::InvalidResult { .. }) => Followed::Upstream(e),
            other => Followed::Tool(ToolError::failed(other.to_string())),
        }
    }
}

/// Follows the upstream task `task` to its end and answers with its result. If the call ends
/// first (cancelled, dropped, failed), the upstream task is cancelled.
pub(super) async fn follow(
    up: &Arc<Upstream>,
    task: Task,
    ctx: &ToolContext,
) -> Result<ToolOutput, Followed> {
    let id = task.task_id.clone();
    // Cancels the upstream task when dropped armed: the gate drops a cancelled call's future,
    // so the cancellation must not depend on the future running on.
    let mut guard = {
        let (up, id) = (Arc::clone(up), id.clone());
        SpawnOnDrop::new(async move { cancel(&up, &id).await })
    };
    // The keys of the questions answered so far (unique over the task's life).
    let mut answered: HashSet<String> = HashSet::new();
    // The task's life is reckoned from when the aggregator was given it, on its own clock (the
    // upstream's `createdAt` is another machine's).
    let given = tokio::time::Instant::now();
    let mut ttl = time_to_live(task.ttl_ms);
    let mut wait = Duration::ZERO;
    let mut polled = false;
    loop {
        // Polled while the task lives, the last poll at its end.
        if polled {
            let left = ttl.saturating_sub(given.elapsed());
            if left.is_zero() {
                // Not finished in its time: the guard, still armed, cancels it upstream.
                return Err(timed_out(up, ttl));
            }
            wait = wait.min(left);
        }
        polled = true;
        if !wait.is_zero() {
            tokio::select! {
                biased;
                () = ctx.cancellation().cancelled() => {
                    return Err(UpstreamError::Cancelled.into());
                }
                () = tokio::time::sleep(wait) => {}
            }
        }
        let get =
            ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(id.clone())));
        let detailed = match forward(up, get, Some(ctx)).await {
            Ok(ServerResult::GetTaskResult(r)) => r.task,
            // A status of a later revision: the task goes on, polled until its time to live.
            Ok(ServerResult::CustomResult(view)) if unknown_status(&view.0, &id).is_some() => {
                let (poll, task_ttl) = unknown_status(&view.0, &id).unwrap_or_default();
                wait = interval(poll);
                ttl = time_to_live(task_ttl);
                continue;
            }
            Ok(other) => {
                return Err(UpstreamError::InvalidResult {
                    namespace: up.namespace().to_string(),
                    expected: "a task",
                    found: result_kind(up, &other),
                }
                .into());
            }
            Err(e) => return Err(e.into()),
        };
        wait = interval(detailed.task.poll_interval_ms);
        ttl = time_to_live(detailed.task.ttl_ms);
        if detailed.task.status.is_terminal() {
            guard.disarm();
        }
        match detailed.payload {
            TaskPayload::Completed { result } => {
                // The parser's error quotes the value it could not read: the upstream's text.
                let result: CallToolResult = serde_json::from_value(Value::Object(result))
                    .map_err(|e| UpstreamError::InvalidResult {
                        namespace: up.namespace().to_string(),
                        expected: "a tool result",
                        found: quoted(up, &e.to_string()),
                    })?;
                return Ok(super::tools::to_output(up, result));
            }
            TaskPayload::Failed { error } => {
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message");
                // The upstream's own words, shown to the caller: redacted and cut as every
                // error that quotes an upstream is (nothing but the upstream bounds them).
                return Err(Followed::Tool(ToolError::failed(format!(
                    "its task on the server `{}` failed: {}",
                    up.namespace(),
                    quoted(up, message)
                ))));
            }
            TaskPayload::Cancelled => {
                return Err(Followed::Tool(ToolError::failed(format!(
                    "its task on the server `{}` was cancelled there",
                    up.namespace()
                ))));
            }
            TaskPayload::InputRequired { mut input_requests } => {
                // A key answered before is the upstream's view not yet updated: wait for it.
                input_requests.retain(|key, _| !answered.contains(key));
                if input_requests.is_empty() {
                    continue;
                }
                // The client's answers are waited for only while the task lives: a client
                // that never answers would otherwise hold the call (and the upstream task)
                // as long as it takes. Past its time the guard, still armed, cancels it.
                let left = ttl.saturating_sub(given.elapsed());
                if left.is_zero() {
                    return Err(timed_out(up, ttl));
                }
                let responses = tokio::time::timeout(left, relay(up, input_requests, ctx))
                    .await
                    .map_err(|_| timed_out(up, ttl))??;
                answered.extend(responses.keys().cloned());
                let update = ClientRequest::UpdateTaskRequest(UpdateTaskRequest::new(
                    UpdateTaskParams::new(id.clone(), responses),
                ));
                forward(up, update, Some(ctx)).await?;
                wait = Duration::ZERO;
            }
            // Working (a status of a later revision is met above): keep polling.
            _ => {}
        }
    }
}

/// The end of a task still unfinished once its time to live `ttl` has passed.
fn timed_out(up: &Upstream, ttl: Duration) -> Followed {
    UpstreamError::TaskTimeout {
        namespace: up.namespace().to_string(),
        after: ttl,
    }
    .into()
}

/// Asks the calling client the upstream task's questions, one after the other.
async fn relay(
    up: &Upstream,
    requests: InputRequests,
    ctx: &ToolContext,
) -> Result<InputResponses, Followed> {
    let mut responses = InputResponses::new();
    for (key, request) in requests {
        let v = serde_json::to_value(&request).unwrap_or(Value::Null);
        let method = v["method"].as_str().unwrap_or_default().to_string();
        let mut params = v.get("params").cloned().unwrap_or(Value::Null);
        redact_relayed(&up.redactions, up.namespace(), &method, &mut params);
        let Some(peer) = ctx.peer() else {
            return Err(Followed::Tool(ToolError::Peer(PeerError::NotSupported(
                method,
            ))));
        };
        match peer
            .request(&method, params, ctx.cancellation().clone())
            .await
        {
            Ok(answer) => {
                responses.insert(key, answer);
            }
            Err(PeerError::InputRequired { .. }) => {
                return Err(Followed::Tool(ToolError::failed(format!(
                    "the server `{}` asks {method} during its task, and the client of this call answers only in a new round trip (2026-07-28), which cannot be relayed",
                    up.namespace()
                ))));
            }
            Err(e) => return Err(Followed::Tool(ToolError::Peer(e))),
        }
    }
    Ok(responses)
}

/// Cancels the upstream task, best effort (the call that followed it is over either way).
async fn cancel(up: &Upstream, id: &str) {
    let request = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(
        id.to_string(),
    )));
    if let Err(e) = forward(up, request, None).await {
        // The id is the upstream's text: quoted (redacted, cut) as everything it says, and
        // written escaped (a line break in it cannot start a log line).
        tracing::debug!(namespace = up.namespace(), task = ?quoted(up, id), error = ?e.to_string(), "the upstream task was not cancelled");
    }
}
