//! The one request path to an upstream: every forwarded tool call, prompt and resource request
//! goes through [`forward`].
//!
//! A request waits for one of the upstream's in-flight slots, is sent on the current
//! connection, and waits for its answer at most the upstream's call timeout (the wait for a
//! slot counts). While a tool call is in flight it is registered ([`ActiveCall`]) so the client
//! relay can find the client to ask (abandoned unanswered, it stays registered as nobody's for
//! the call timeout, so the relay does not take its questions for another call's), and its
//! progress token routes progress back
//! ([`ProgressRoute`]). An upstream can answer faster than its caller records the request
//! (a question on the request's own stream, progress at once): each send is tracked from
//! before it starts until it is recorded ([`SendRecord`]), and the relay waits for the sends
//! begun before a message came ([`Upstream::sends_recorded`]) before it looks the call up. A request that ends without an answer (timeout, cancellation, the
//! caller dropped) is cancelled upstream with `notifications/cancelled`; a transport failure
//! wakes the supervisor. A tool call to an upstream that supports tasks may have started a
//! task by the time the caller gives up: its answer is still awaited, by a watcher spawned then
//! (for [`LATE_TASK_GRACE`]), and a task it names is cancelled, so no upstream task runs on
//! unwatched; the caller reads an answer that comes in time itself ([`Answer`]).

use std::sync::atomic::Ordering;

use kberg_core::ToolContext;
use rmcp::model::{
    CancelTaskParams, CancelTaskRequest, CancelledNotification, CancelledNotificationParam,
    ClientNotification, ClientRequest, ProgressToken, RequestId, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use tokio_util::sync::CancellationToken;

use super::error::UpstreamError;
use super::front::{ActiveEntry, Upstream};

/// Removes a forwarded call's progress route when the call ends, however it ends.
struct ProgressRoute<'a> {
    up: &'a Upstream,
    token: ProgressToken,
}

/// Keeps a forwarded call in [`Upstream::active`] while it is in flight. A call that ends
/// unanswered after its request was sent stays there, abandoned, for the upstream's call
/// timeout: the upstream may still be at work on it (a cancellation is a request to stop, not
/// a guarantee), and a question it asks for it must not be taken for another call's.
struct ActiveCall<'a> {
    up: &'a Upstream,
    id: u64,
    sent: bool,
    answered: bool,
}

impl<'a> ActiveCall<'a> {
    fn register(up: &'a Upstream, ctx: &ToolContext) -> Self {
        let id = up.next_active.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = up.active.lock() {
            m.insert(
                id,
                ActiveEntry {
                    ctx: Some(ctx.clone()),
                    upstream_id: None,
                    abandoned_until: None,
                },
            );
        }
        Self {
            up,
            id,
            sent: false,
            answered: false,
        }
    }

    /// The call's request went upstream under `upstream_id`.
    fn sent(&mut self, upstream_id: &RequestId) {
        self.sent = true;
        if let Ok(mut m) = self.up.active.lock()
            && let Some(e) = m.get_mut(&self.id)
        {
            e.upstream_id = Some(upstream_id.clone());
        }
    }
}

impl Drop for ActiveCall<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.up.active.lock() {
            if self.answered || !self.sent {
                m.remove(&self.id);
            } else {
                abandon(
                    &mut m,
                    self.id,
                    tokio::time::Instant::now(),
                    self.up.config.call_timeout,
                );
            }
        }
    }
}

/// Marks call `id` abandoned until `now + timeout`. Abandoned calls whose time is up leave here
/// too, so an upstream that never asks anything (whose relay never looks) does not collect them.
fn abandon(
    calls: &mut std::collections::HashMap<u64, ActiveEntry>,
    id: u64,
    now: tokio::time::Instant,
    timeout: std::time::Duration,
) {
    calls.retain(|_, e| e.abandoned_until.is_none_or(|until| until > now));
    if let Some(e) = calls.get_mut(&id) {
        e.ctx = None;
        // The configuration caps the timeout; a far deadline is kept far without overflowing.
        let until = now
            .checked_add(timeout)
            .or_else(|| now.checked_add(super::config::MAX_CALL_TIMEOUT))
            .unwrap_or(now);
        e.abandoned_until = Some(until);
    }
}

/// A request between the start of its send and its record (progress route, upstream id) in
/// [`Upstream::sending`]; dropped once recorded, or when the send failed.
struct SendRecord<'a> {
    up: &'a Upstream,
    seq: u64,
}

impl<'a> SendRecord<'a> {
    fn begin(up: &'a Upstream) -> Self {
        let seq = up.next_send.fetch_add(1, Ordering::SeqCst);
        up.sending.send_modify(|s| {
            s.insert(seq);
        });
        Self { up, seq }
    }
}

impl Drop for SendRecord<'_> {
    fn drop(&mut self) {
        self.up.sending.send_modify(|s| {
            s.remove(&self.seq);
        });
    }
}

impl Upstream {
    /// Waits until every request whose send began before this call is recorded (or failed).
    /// A message the upstream sends about a request comes after that request's send began, so
    /// once this returns, the relay finds the request's call and progress route if they exist.
    /// The sends waited for are only those already begun, each recorded as soon as rmcp
    /// queued it, so the wait is short and bounded.
    pub(super) async fn sends_recorded(&self) {
        let before = self.next_send.load(Ordering::SeqCst);
        let mut pending = self.sending.subscribe();
        let _ = pending
            .wait_for(|s| s.first().is_none_or(|first| *first >= before))
            .await;
    }
}

impl Drop for ProgressRoute<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.up.progress.lock() {
            m.remove(&self.token);
        }
    }
}
/// Sends one request to the upstream's current connection and waits for its answer, at most
/// the upstream's call timeout. When `ctx` is given, the upstream's progress for this request
/// reaches it and its cancellation cancels the request. A request that ends without an answer
/// (timeout, cancellation, the caller dropped) is cancelled upstream with
/// `notifications/cancelled`; a transport failure wakes the supervisor.
pub(super) async fn forward(
    up: &Upstream,
    request: ClientRequest,
    ctx: Option<&ToolContext>,
) -> Result<ServerResult, UpstreamError> {
    let ns = up.namespace();
    // What the client library or the upstream says may carry the upstream's credentials (a
    // URL with a token, an error body echoing a header): redacted before callers see it, then
    // cut short, since nothing but the upstream bounds how long its message is.
    let redact = |text: &str| quoted(up, text);
    let unavailable = |reason: String| UpstreamError::Unavailable {
        namespace: ns.to_string(),
        reason: redact(&reason),
    };
    let timeout = |after| UpstreamError::Timeout {
        namespace: ns.to_string(),
        after,
    };
    if up.current_peer().is_none() {
        // Not connected: answer at once rather than queue for a slot.
        return Err(unavailable(up.reason()));
    }
    let limit = up.config.call_timeout;
    let never = CancellationToken::new();
    let cancelled = ctx.map_or(&never, |c| c.cancellation());
    let started = tokio::time::Instant::now();
    // Wait for a slot: the upstream never has more than `max_in_flight` of our requests. The
    // wait counts against the call timeout; nothing was sent yet, so nothing to cancel upstream.
    let _slot = tokio::select! {
        biased;
        () = cancelled.cancelled() => return Err(UpstreamError::Cancelled),
        p = tokio::time::timeout(limit, up.in_flight.acquire()) => match p {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(unavailable("the aggregator is shutting down".into())),
            Err(_) => {
                tracing::warn!(namespace = up.namespace(), timeout = ?limit, "no free upstream slot within the call timeout");
                return Err(timeout(limit));
            }
        },
    };
    // A slot freed just as the wait ran out leaves nothing of the call's time: answer the
    // timeout here instead of sending a request that cannot be awaited.
    if started.elapsed() >= limit {
        tracing::warn!(namespace = up.namespace(), timeout = ?limit, "no free upstream slot within the call timeout");
        return Err(timeout(limit));
    }
    let mut active = ctx.map(|c| ActiveCall::register(up, c));
    // The connection may have changed while this request waited.
    let Some((peer, generation)) = up.current_peer() else {
        return Err(unavailable(up.reason()));
    };
    let may_start_task = matches!(request, ClientRequest::CallToolRequest(_))
        && peer
            .peer_info()
            .is_some_and(|i| i.capabilities.supports_tasks());
    let record = SendRecord::begin(up);
    let handle = match peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(h) => h,
        Err(e) => {
            up.report_broken(generation);
            return Err(unavailable(transport_failure(&e)));
        }
    };
    // Sends `notifications/cancelled` upstream if this request ends without an answer.
    let mut unanswered = CancelUnanswered {
        peer: Some(peer.clone()),
        id: handle.id.clone(),
        reason: "the caller cancelled the request",
    };
    let _route = ProgressRoute {
        up,
        token: handle.progress_token.clone(),
    };
    if let Some(ctx) = ctx
        && let Ok(mut m) = up.progress.lock()
    {
        m.insert(handle.progress_token.clone(), ctx.clone());
    }
    // Recorded after the progress route, so that a call the relay finds by its request id has
    // its route already: an upstream that asks first and reports progress after is never lost.
    if let Some(a) = &mut active {
        a.sent(&handle.id);
    }
    drop(record);
    let left = limit.saturating_sub(started.elapsed());
    // The answer is read straight from the request's channel, on this task. A tool call that
    // may have started a task is watched if this call ends unanswered (see `LateTaskWatch`);
    // nothing is spawned for a call that is answered.
    let late = if may_start_task {
        unanswered.peer.take().map(|peer| LateTaskWatch {
            peer,
            id: handle.id.clone(),
        })
    } else {
        None
    };
    let response = Answer {
        rx: Some(handle.rx),
        late,
    };
    let outcome = tokio::select! {
        biased;
        () = cancelled.cancelled() => return Err(UpstreamError::Cancelled),
        r = tokio::time::timeout(left, response) => r,
    };
    let Ok(outcome) = outcome else {
        unanswered.reason = "the request timed out";
        tracing::warn!(namespace = up.namespace(), timeout = ?limit, "upstream request timed out");
        return Err(timeout(limit));
    };
    unanswered.peer = None;
    if let Some(a) = &mut active {
        a.answered = true;
    }
    // What the upstream said before its answer (the last progress, a closing log line) reaches
    // the caller first, and while the call's progress route still stands (see `order`): all of
    // it dispatched, and what went to this call's client delivered. The answer is not held past
    // the call's time or its cancellation: then it goes as it is.
    let relayed = async {
        up.relay_order.handled().await;
        if let Some(peer) = ctx.and_then(ToolContext::peer) {
            up.relay_order.delivered(peer).await;
        }
    };
    tokio::select! {
        biased;
        () = relayed => {}
        () = cancelled.cancelled() => {}
        () = tokio::time::sleep(limit.saturating_sub(started.elapsed())) => {
            tracing::debug!(namespace = ns, "an answer went ahead of messages still being relayed");
        }
    }
    match outcome {
        Ok(r) => Ok(r),
        Err(ServiceError::McpError(e)) => Err(UpstreamError::Refused {
            namespace: ns.to_string(),
            code: e.code.0,
            message: redact(&e.message),
        }),
        // An HTTP upstream that refuses one request at the HTTP level (a `500` from a handler
        // that crashed, a `413` for a body over its limit) is reported the same way as a
        // transport that broke, but its connection serves on. Reconnecting for a refused
        // request would cut off every other call running there.
        Err(ServiceError::TransportSend(e)) if answered_this_request(&e) => {
            Err(UpstreamError::Failed {
                namespace: ns.to_string(),
                message: redact(&format!("it refused the request ({})", e.error)),
            })
        }
        Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
            up.report_broken(generation);
            Err(unavailable(transport_failure(&e)))
        }
        Err(e) => Err(UpstreamError::Failed {
            namespace: ns.to_string(),
            message: redact(&e.to_string()),
        }),
    }
}

/// Whether a send error is the upstream's answer to this one request: an HTTP status it
/// refused the request with (`500`, `413`), or an answer that could not be read as one. The
/// connection serves on after it, unlike after a failure to reach the upstream at all, a
/// refused credential or an expired session, which need a new connection.
fn answered_this_request(e: &rmcp::transport::DynamicTransportError) -> bool {
    use rmcp::transport::streamable_http_client::{HttpStatusError, StreamableHttpError};
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e.error.as_ref());
    while let Some(now) = cause {
        if now.is::<HttpStatusError>() {
            return true;
        }
        if let Some(http) = now.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            return matches!(
                http,
                StreamableHttpError::HttpStatus(_)
                    | StreamableHttpError::UnexpectedServerResponse(_)
                    | StreamableHttpError::ResponseBodyTooLarge { .. }
                    | StreamableHttpError::UnexpectedContentType(_)
                    | StreamableHttpError::Deserialize(_)
            );
        }
        cause = now.source();
    }
    false
}

/// What failed, in words that name no client-library type: a transport's send error is told
/// by its cause (`HTTP 500`, `Transport channel closed`), not by rmcp's wrapper, whose text
/// names the transport's Rust type.
fn transport_failure(e: &ServiceError) -> String {
    match e {
        ServiceError::TransportSend(e) => format!("the request could not be sent: {}", e.error),
        ServiceError::TransportClosed => "its connection closed".to_string(),
        other => other.to_string(),
    }
}

/// How long an abandoned tool call's answer is still awaited to learn whether it started a
/// task (a task is answered at once; a call still unanswered by then is a long synchronous one,
/// and is cancelled as usual).
const LATE_TASK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long the cancellation of an abandoned upstream task is awaited.
const LATE_TASK_CANCEL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The answer channel of one forwarded request, as rmcp's request handle holds it.
type AnswerRx = tokio::sync::oneshot::Receiver<Result<ServerResult, ServiceError>>;

/// The answer of one forwarded request, read from rmcp's channel on the caller's task.
///
/// Dropped unanswered (the caller cancelled, timed out, or was dropped), a tool call that may
/// have started a task is handed to a watcher ([`LateTaskWatch`]); a call that was answered
/// costs no watcher.
struct Answer {
    /// `None` only once handed to the watcher, in `drop`.
    rx: Option<AnswerRx>,
    late: Option<LateTaskWatch>,
}

impl std::future::Future for Answer {
    type Output = Result<ServerResult, ServiceError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let Some(rx) = self.rx.as_mut() else {
            return std::task::Poll::Ready(Err(ServiceError::TransportClosed));
        };
        let answer = std::task::ready!(std::pin::Pin::new(rx).poll(cx));
        // Answered (or the connection closed): nothing is left to watch.
        self.late = None;
        std::task::Poll::Ready(answer.unwrap_or(Err(ServiceError::TransportClosed)))
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if let (Some(late), Some(rx)) = (self.late.take(), self.rx.take()) {
            late.hand_over(rx);
        }
    }
}

/// Watches a tool call to an upstream that supports tasks once its caller has given up on it:
/// its answer is still awaited, on a watcher task, for at most [`LATE_TASK_GRACE`]. An answer
/// that is a task gets the task cancelled; no answer gets the request cancelled
/// (`notifications/cancelled`). (Cancelling the request at once could lose the answer naming a
/// task the upstream already started.) An answer already waiting when the caller gave up (its
/// cancellation won the race with the answer) is read at once, so a task it names is cancelled
/// too. The caller's side holds the call timeout; the watcher has no deadline but the grace.
struct LateTaskWatch {
    peer: Peer<RoleClient>,
    id: RequestId,
}

impl LateTaskWatch {
    /// Hands the unanswered request's channel to a watcher task.
    fn hand_over(self, answer: AnswerRx) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Self { peer, id } = self;
        rt.spawn(async move {
            let late = match tokio::time::timeout(LATE_TASK_GRACE, answer).await {
                Ok(r) => r.ok(),
                Err(_) => {
                    let note = CancelledNotification::new(CancelledNotificationParam::new(
                        Some(id),
                        Some("the caller gave up on the request".into()),
                    ));
                    let _ = peer
                        .send_notification(ClientNotification::CancelledNotification(note))
                        .await;
                    None
                }
            };
            if let Some(Ok(ServerResult::CreateTaskResult(t))) = late {
                cancel_task(&peer, t.task.task_id).await;
            }
        });
    }
}

/// Cancels an upstream task nobody waits for any more.
async fn cancel_task(peer: &Peer<RoleClient>, task_id: String) {
    let cancel =
        ClientRequest::CancelTaskRequest(CancelTaskRequest::new(CancelTaskParams::new(task_id)));
    // Bounded like any request to an upstream: one that never answers holds nothing for ever.
    match tokio::time::timeout(LATE_TASK_CANCEL_TIMEOUT, peer.send_request(cancel)).await {
        Ok(Ok(_)) => {}
        // The upstream's words (its refusal's message, the task id it chose) are not logged:
        // this watcher holds no redaction list, and they may quote its credential.
        Ok(Err(ServiceError::McpError(e))) => {
            tracing::debug!(
                code = e.code.0,
                "an abandoned upstream task's cancellation was refused"
            );
        }
        Ok(Err(_)) => {
            tracing::debug!("an abandoned upstream task was not cancelled: the connection failed");
        }
        Err(_) => {
            tracing::debug!("an abandoned upstream task's cancellation was not answered in time");
        }
    }
}

/// Tells the upstream a forwarded request was abandoned, when dropped while still armed.
struct CancelUnanswered {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
    reason: &'static str,
}

impl Drop for CancelUnanswered {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let note = CancelledNotification::new(CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some(self.reason.into()),
        ));
        rt.spawn(async move {
            let _ = peer
                .send_notification(ClientNotification::CancelledNotification(note))
                .await;
        });
    }
}

/// The top-level keys of an unexpected result, to say what came instead. They are the
/// upstream's own text, of its choosing and as many as it likes: [`quoted`] as its messages.
pub(super) fn result_kind(up: &Upstream, r: &ServerResult) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| {
            v.as_object()
                .map(|o| quoted(up, &o.keys().cloned().collect::<Vec<_>>().join(", ")))
        })
        .unwrap_or_else(|| "unreadable".into())
}

/// What the upstream (or the client library about its answer) said, as an error quotes it:
/// its credentials redacted, then cut to at most [`MAX_QUOTED_CHARS`] characters.
pub(super) fn quoted(up: &Upstream, text: &str) -> String {
    cut(up.redactions.text(text).into_owned())
}

/// The longest message of an upstream's quoted in a refusal, in characters.
const MAX_QUOTED_CHARS: usize = 1_000;

/// `text` cut to at most [`MAX_QUOTED_CHARS`] characters, marked with `...` where it was cut.
fn cut(mut text: String) -> String {
    kberg_core::cut_chars(&mut text, MAX_QUOTED_CHARS, "...");
    text
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use kberg_core::{Caller, Principal, ToolContext};

    use super::*;

    #[tokio::test]
    async fn abandoned_calls_leave_when_their_time_is_up() {
        let start = tokio::time::Instant::now();
        let minute = Duration::from_secs(60);
        let live = || ActiveEntry {
            ctx: Some(ToolContext::detached(Caller::new(Principal::new("a")))),
            upstream_id: None,
            abandoned_until: None,
        };
        let mut calls: HashMap<u64, ActiveEntry> = (0..1000).map(|i| (i, live())).collect();
        for i in 0..999 {
            abandon(&mut calls, i, start, minute);
        }
        assert_eq!(
            calls.len(),
            1000,
            "abandoned, still counted within the timeout"
        );
        assert!(calls[&0].ctx.is_none() && calls[&999].ctx.is_some());
        // The next abandonment after the timeout takes the expired ones out, live ones stay.
        abandon(&mut calls, 999, start + minute, minute);
        assert_eq!(calls.len(), 1, "{}", calls.len());
        assert!(calls[&999].abandoned_until.is_some());
    }

    #[tokio::test]
    async fn a_timeout_past_what_an_instant_holds_does_not_panic() {
        let now = tokio::time::Instant::now();
        let mut calls: HashMap<u64, ActiveEntry> = HashMap::from([(
            1,
            ActiveEntry {
                ctx: Some(ToolContext::detached(Caller::new(Principal::new("a")))),
                upstream_id: None,
                abandoned_until: None,
            },
        )]);
        abandon(&mut calls, 1, now, Duration::MAX);
        assert!(calls[&1].abandoned_until.is_some_and(|u| u > now));
    }
}
