//! Running one turn's calls and keeping the books. Each prepared call is explained (an unlisted
//! tool, whether the call was structured or written as text: it is never sent), answered with an earlier result (a repeated read or write), held back (a write whose
//! values have no source), or sent to the surface; every call gets exactly one result in the
//! stored conversation and one [`crate::CallRecord`]. Failures are counted per identical call,
//! so a model looping on the same failing call is stopped, but only when nothing else in its
//! turn made progress. Read-only calls listed one after another are sent together
//! ([`crate::AgentConfig::concurrent_reads`]) and their results kept in order.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use kberg_core::ErrorCode;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::coerce::Coercion;
use crate::message::{Message, ToolCall};
use crate::nudge;
use crate::outcome::{AgentEvent, CallOutcome, CallRecord, StopReason};
use crate::progress::{ProgressReport, ProgressSink};
use crate::surface::{SurfaceError, ToolResult};

use super::{AnswerNow, PendingCall, Run, call_key};

impl Run<'_> {
    /// Runs one turn's calls in order. Returns a stop reason if the run must end, and whether a
    /// retryable failure asks for a repair turn.
    pub(super) async fn run_calls(
        &mut self,
        turn: u32,
        text: String,
        calls: Vec<ToolCall>,
        (recovered, cut_off): (bool, bool),
        text_flags: Vec<bool>,
    ) -> (Option<StopReason>, bool) {
        let pending = self.prepare(turn, calls, &text_flags, cut_off);
        if recovered && !pending.is_empty() {
            self.recovered_turns.push(self.request.messages.len());
            if self.config().compact_recovered_turns {
                self.interventions.turns_compacted += 1;
            }
        }
        // The model's text stays beside the calls, recovered ones included: the stored
        // conversation keeps what the model wrote.
        self.request.messages.push(Message::Assistant {
            content: text,
            tool_calls: pending.iter().map(|p| p.call.clone()).collect(),
        });

        let mut stop = None;
        // A call that reached the identical-failure bound ends the run only when nothing else
        // in its turn made progress: a model that repeats a failed call beside a new one (the
        // search it was told to make) is recovering.
        let mut repeated = None;
        let mut progressed = false;
        let mut retryable = false;
        // The first read of this turn that was sent: a write listed after it was written
        // before the model saw its result.
        let mut read_sent: Option<String> = None;
        let max_calls = self.config().max_calls_per_turn.max(1);
        // Read-only calls sent together, by the index of the first of each batch; their
        // results, by index, once sent.
        let mut batches = self.read_batches(&pending, max_calls);
        let mut prefetched: HashMap<usize, Result<ToolResult, SurfaceError>> = HashMap::new();
        for (
            index,
            PendingCall {
                call,
                coercions,
                unlisted,
                unknown_handle,
                cut_off,
            },
        ) in pending.into_iter().enumerate()
        {
            // A cancellation that came while an earlier call ran (one that did not look at its
            // token, or answered anyway) stops the turn here, before the next call is sent.
            if stop.is_none() && self.cancel.is_cancelled() {
                stop = Some(StopReason::Cancelled);
            }
            // A call sent together with one before it has its result already, and gets it even
            // after the run stopped (it ran).
            if stop.is_some() && !prefetched.contains_key(&index) {
                // Every call in a stored turn gets a result, even the ones not run.
                let text = format!("The call to `{}` was not run: the run stopped.", call.name);
                self.record(
                    turn,
                    call,
                    CallOutcome::Failed(ErrorCode::Cancelled),
                    text,
                    (recovered, false),
                    coercions,
                );
                continue;
            }
            if index >= max_calls {
                // The calls of a message run one after another: a model that writes thousands
                // would hold the run that long. Each is still answered, as every call in a
                // stored turn needs its result.
                tracing::debug!(tool = ?call.name, limit = max_calls, "a call past the per-turn limit was not run");
                let text = nudge::too_many_calls(&call.name, max_calls);
                self.record(
                    turn,
                    call,
                    CallOutcome::Failed(ErrorCode::TooManyCalls),
                    text,
                    (recovered, true),
                    coercions,
                );
                continue;
            }
            if unlisted {
                // A tool the surface did not list is never sent, whether the call was written as
                // text or came structured: a server may run tools it keeps off a caller's
                // listing, and the model was not offered it.
                let (code, text) = self.explain_unlisted(&call.name).await;
                if recovered {
                    self.interventions.unlisted_explained += 1;
                }
                tracing::debug!(tool = ?call.name, recovered, "a call to an unlisted tool was answered, not sent");
                progressed |= self.answer_unsent(
                    turn,
                    call,
                    (code, text),
                    recovered,
                    coercions,
                    &mut repeated,
                );
                continue;
            }
            if cut_off {
                // Sent, it would be refused as arguments that are no object: the model would
                // be told its arguments are wrong when they are unfinished.
                tracing::debug!(tool = ?call.name, "a call cut off at the token limit was not sent");
                retryable = true;
                let text = nudge::call_cut_off(&call.name, self.config().options.max_tokens);
                progressed |= self.answer_unsent(
                    turn,
                    call,
                    (ErrorCode::InvalidArguments, text),
                    recovered,
                    coercions,
                    &mut repeated,
                );
                continue;
            }
            if let Some(unknown) = unknown_handle {
                tracing::debug!(tool = ?call.name, handle = ?unknown.handle, "a call with a handle the run never issued was not sent");
                self.interventions.unknown_handles += 1;
                if unknown.meant.is_some() {
                    self.interventions.handles_without_hash += 1;
                }
                retryable = true;
                let text = self.unknown_handle(&call, &unknown);
                progressed |= self.answer_unsent(
                    turn,
                    call,
                    (ErrorCode::InvalidArguments, text),
                    recovered,
                    coercions,
                    &mut repeated,
                );
                continue;
            }
            let read = self.read_only.contains(&call.name);
            let guarded = if read {
                self.config().guard_repeated_reads
            } else {
                self.config().dedupe_writes
            };
            let key = guarded.then(|| call_key(&call));
            if let Some(earlier) = key.as_ref().and_then(|k| self.done.get(k)) {
                let text = if read {
                    self.interventions.reads_deduplicated += 1;
                    nudge::duplicate_read(&call.name, earlier)
                } else {
                    self.interventions.writes_deduplicated += 1;
                    nudge::duplicate_write(&call.name, earlier)
                };
                tracing::debug!(tool = ?call.name, read, "a repeated identical call was not run again");
                self.answer_now = AnswerNow::Repeat;
                self.record(
                    turn,
                    call,
                    CallOutcome::Duplicate,
                    text,
                    (recovered, false),
                    coercions,
                );
                continue;
            }
            if !read
                && self.config().hold_writes_after_reads
                && self.schemas.contains_key(&call.name)
                && let Some(read_name) = &read_sent
            {
                tracing::debug!(tool = ?call.name, read = ?read_name, "a write listed after a read in the same turn was held");
                self.interventions.writes_held += 1;
                let text = nudge::write_after_read(&call.name, read_name);
                self.record(
                    turn,
                    call,
                    CallOutcome::Held,
                    text,
                    (recovered, true),
                    coercions,
                );
                continue;
            }
            if let Some(text) = self.unrequested(&call) {
                tracing::debug!(tool = ?call.name, "a write nobody asked for was not run");
                self.interventions.unrequested_writes += 1;
                self.answer_now = AnswerNow::Done;
                self.record(
                    turn,
                    call,
                    CallOutcome::Unrequested,
                    text,
                    (recovered, true),
                    coercions,
                );
                continue;
            }
            if let Some((text, is_text, finder)) = self.ungrounded(&call) {
                tracing::debug!(tool = ?call.name, "a write whose values have no source was not run");
                // The next turn lists only the tool that finds ids, unless it already ran.
                if let Some(finder) = finder
                    && self.config().narrow_after_guessed_ids
                    && !self
                        .calls
                        .iter()
                        .any(|c| c.name == finder && c.outcome == CallOutcome::Ok)
                {
                    self.narrow_to = Some(finder);
                }
                if is_text {
                    self.interventions.ungrounded_texts += 1;
                } else {
                    self.interventions.ungrounded_writes += 1;
                }
                retryable = true;
                progressed |= self.answer_unsent(
                    turn,
                    call,
                    (ErrorCode::InvalidArguments, text),
                    recovered,
                    coercions,
                    &mut repeated,
                );
                continue;
            }
            if read && read_sent.is_none() {
                read_sent = Some(call.name.clone());
            }
            let result = match prefetched.remove(&index) {
                Some(result) => result,
                None => match batches.remove(&index) {
                    Some(batch) => {
                        // This call and the reads listed right after it, sent together.
                        for (_, call, coercions) in &batch {
                            self.emit(|| AgentEvent::ToolCalled {
                                call: call.clone(),
                                recovered_from_text: recovered,
                                coercions: coercions.clone(),
                            });
                        }
                        tracing::debug!(calls = batch.len(), "read-only calls sent together");
                        let mut sent = futures::future::join_all(
                            batch.iter().map(|(_, call, _)| self.send_call(call)),
                        )
                        .await
                        .into_iter();
                        // The batch's first call is this one.
                        let first = sent.next();
                        prefetched.extend(batch.iter().skip(1).map(|(i, ..)| *i).zip(sent));
                        match first {
                            Some(result) => result,
                            None => self.send_call(&call).await,
                        }
                    }
                    None => {
                        let call_for_event = call.clone();
                        let coercions_for_event = coercions.clone();
                        self.emit(|| AgentEvent::ToolCalled {
                            call: call_for_event,
                            recovered_from_text: recovered,
                            coercions: coercions_for_event,
                        });
                        self.send_call(&call).await
                    }
                },
            };
            let result = match result {
                Ok(r) => r,
                Err(e) => {
                    let text = format!("The call to `{}` could not be made: {e}", call.name);
                    self.record(
                        turn,
                        call,
                        CallOutcome::Failed(ErrorCode::ToolFailed),
                        text,
                        (recovered, false),
                        coercions,
                    );
                    stop.get_or_insert(StopReason::Surface(e));
                    continue;
                }
            };
            let Some(code) = result.effective_code() else {
                progressed = true;
                if let Some(key) = key {
                    self.done.insert(key, result.text.clone());
                }
                self.record(
                    turn,
                    call,
                    CallOutcome::Ok,
                    Answer {
                        text: result.text,
                        user_text: result.user_text,
                    },
                    (recovered, false),
                    coercions,
                );
                continue;
            };
            let mut text = result.text;
            let user_text = result.user_text;
            match code {
                ErrorCode::Cancelled => {
                    stop.get_or_insert(StopReason::Cancelled);
                }
                c if !c.is_retryable() => text.push_str(&nudge::final_refusal(&call.name)),
                _ => {
                    retryable = true;
                    if let Some(hint) = self.id_hint(&call, code) {
                        self.interventions.id_hints += 1;
                        text.push_str(&hint);
                    }
                }
            }
            if code != ErrorCode::Cancelled {
                progressed |= self.note_failure(&call, code, &mut repeated);
            }
            self.record(
                turn,
                call,
                CallOutcome::Failed(code),
                Answer { text, user_text },
                (recovered, false),
                coercions,
            );
        }
        if stop.is_none() && !progressed {
            stop = repeated;
        }
        (stop, retryable)
    }

    /// The read-only calls of `pending` sent together
    /// ([`crate::AgentConfig::concurrent_reads`]), keyed by the index of the first of each
    /// batch: each batch is a run of calls listed one after another that would be sent (a
    /// listed read-only tool, arguments whole, no unknown handle, within `max_calls`), at
    /// most `concurrent_reads` of them, two at least. A read identical to one sent before or
    /// to one listed earlier in the message is left out (when its turn comes it is answered
    /// with that read's result, or sent then), and the batch goes on past it.
    fn read_batches(
        &self,
        pending: &[PendingCall],
        max_calls: usize,
    ) -> HashMap<usize, Vec<(usize, ToolCall, Vec<Coercion>)>> {
        let limit = self.config().concurrent_reads.max(1);
        let guard = self.config().guard_repeated_reads;
        let mut batches = HashMap::new();
        if limit < 2 {
            return batches;
        }
        let mut batch: Vec<(usize, ToolCall, Vec<Coercion>)> = Vec::new();
        // Every read of the message so far: a copy of one, wherever it comes, is answered with
        // its result when it gets its turn, so it is never sent ahead.
        let mut keys = HashSet::new();
        let mut close = |batch: &mut Vec<(usize, ToolCall, Vec<Coercion>)>| {
            if batch.len() >= 2 {
                batches.insert(batch[0].0, std::mem::take(batch));
            }
            batch.clear();
        };
        for (index, p) in pending.iter().enumerate().take(max_calls) {
            let sendable = !p.unlisted
                && !p.cut_off
                && p.unknown_handle.is_none()
                && self.read_only.contains(&p.call.name);
            if !sendable {
                close(&mut batch);
                continue;
            }
            if guard {
                let key = call_key(&p.call);
                if self.done.contains_key(&key) || !keys.insert(key) {
                    continue;
                }
            }
            batch.push((index, p.call.clone(), p.coercions.clone()));
            if batch.len() == limit {
                close(&mut batch);
            }
        }
        close(&mut batch);
        batches
    }

    /// Sends `call` to the surface under the run's tool timeouts
    /// ([`crate::AgentConfig::tool_idle_timeout`], [`crate::AgentConfig::tool_timeout`]); a
    /// call they cut off answers `tool_timeout`, saying which limit it passed. The call asks
    /// for progress when the run has events (the reports become [`AgentEvent::ToolProgress`])
    /// or an idle timeout (a report is a sign of work).
    async fn send_call(&self, call: &ToolCall) -> Result<ToolResult, SurfaceError> {
        let config = self.config();
        let limits = Limits {
            idle: config.tool_idle_timeout,
            total: config.tool_timeout,
        };
        let cancel = self.cancel.child_token();
        let sink = (self.events.is_some() || limits.idle.is_some()).then(|| {
            let (events, call_id, name) =
                (self.events.cloned(), call.id.clone(), call.name.clone());
            ProgressSink::new(move |r: ProgressReport| {
                if let Some(events) = &events {
                    let _ = events.send(AgentEvent::ToolProgress {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        progress: r.progress,
                        total: r.total,
                        message: r.message,
                    });
                }
            })
        });
        let surface = &self.agent.surface;
        let arguments = call.arguments.clone();
        let sent = async {
            match &sink {
                Some(sink) => {
                    surface
                        .call_with_progress(&call.name, arguments, cancel.clone(), sink.clone())
                        .await
                }
                None => surface.call(&call.name, arguments, cancel.clone()).await,
            }
        };
        let sent = limits.bound(sent, sink.as_ref(), &cancel).await;
        // A report still on its way now would come after the call's result.
        if let Some(sink) = &sink {
            sink.close();
        }
        match sent {
            Sent::Answered(r) => r.map(|r| bounded(r, config.max_result_chars)),
            Sent::TimedOut(limit) => {
                tracing::debug!(tool = ?call.name, ?limit, "a tool call was cut off by a tool timeout");
                Ok(ToolResult::error(
                    ErrorCode::ToolTimeout,
                    nudge::tool_timeout(&call.name, limit),
                ))
            }
        }
    }

    /// Answers a call that is not sent with `code` and `text`, counted as a failure of that
    /// call (see [`Self::note_failure`]); whether the turn made progress.
    fn answer_unsent(
        &mut self,
        turn: u32,
        call: ToolCall,
        (code, text): (ErrorCode, String),
        recovered: bool,
        coercions: Vec<Coercion>,
        repeated: &mut Option<StopReason>,
    ) -> bool {
        let progressed = self.note_failure(&call, code, repeated);
        self.record(
            turn,
            call,
            CallOutcome::Failed(code),
            text,
            (recovered, true),
            coercions,
        );
        progressed
    }

    /// Counts a failure of `call`. When it reached the identical-failure bound, `repeated`
    /// names it (the first such call of the turn wins) and false is returned; otherwise true:
    /// the turn still made progress.
    fn note_failure(
        &mut self,
        call: &ToolCall,
        code: ErrorCode,
        repeated: &mut Option<StopReason>,
    ) -> bool {
        let n = self.failures.entry(call_key(call)).or_insert(0);
        *n += 1;
        if *n >= self.agent.config.max_identical_failures {
            repeated.get_or_insert(StopReason::RepeatedFailure {
                tool: call.name.clone(),
                code,
            });
            false
        } else {
            true
        }
    }

    fn record(
        &mut self,
        turn: u32,
        call: ToolCall,
        outcome: CallOutcome,
        answer: impl Into<Answer>,
        (recovered, not_sent): (bool, bool),
        coercions: Vec<Coercion>,
    ) {
        let Answer { text, user_text } = answer.into();
        self.emit(|| AgentEvent::ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            outcome,
            text: text.clone(),
            user_text: user_text.clone(),
        });
        self.request.messages.push(Message::Tool {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: text,
            // A call held back is no result: it grounds nothing, and like a failure it is left
            // out of later turns ([`crate::AgentConfig::forget_old_failures`]).
            is_error: matches!(
                outcome,
                CallOutcome::Failed(_) | CallOutcome::Held | CallOutcome::Unrequested
            ),
        });
        self.calls.push(CallRecord {
            turn,
            id: call.id,
            name: call.name,
            arguments: call.arguments,
            outcome,
            recovered_from_text: recovered,
            coercions,
            not_sent,
            user_text,
        });
    }
}

/// `result` with its text cut at `limit` characters ([`crate::AgentConfig::max_result_chars`]),
/// saying how much was left out: a tool's answer of megabytes would be sent again with every
/// later turn. The line saying that blocks were left to the user stays at the end.
fn bounded(mut result: ToolResult, limit: usize) -> ToolResult {
    let end = crate::surface::withheld_line_at(&result.text).unwrap_or(result.text.len());
    if let Some((cut, _)) = result.text[..end].char_indices().nth(limit) {
        let more = result.text[cut..end].chars().count();
        tracing::debug!(limit, more, "a tool result was cut");
        let withheld = result.text.split_off(end);
        result.text.truncate(cut);
        result.text.push_str(&nudge::result_cut(more));
        result.text.push_str(&withheld);
    }
    result
}

/// A call's answer as it is recorded: the text the model is given, and what the tool meant for
/// the user only ([`ToolResult::user_text`]). An answer the loop writes itself is all text.
struct Answer {
    text: String,
    user_text: String,
}

impl From<String> for Answer {
    fn from(text: String) -> Self {
        Self {
            text,
            user_text: String::new(),
        }
    }
}

/// What became of a call sent to the surface.
enum Sent {
    /// The surface answered.
    Answered(Result<ToolResult, SurfaceError>),
    /// A tool timeout cut the call off, and it was cancelled.
    TimedOut(Limit),
}

/// The tool timeout that cut a call off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// No sign of work for this long.
    Idle(Duration),
    /// Not finished after this long.
    Total(Duration),
}

/// How long a call that a timeout cancelled may take to wind up before it is dropped. A
/// surface answers a cancelled call at once; [`crate::McpSurface`] first waits (about three
/// seconds at most) for the server to learn of it. A dropped call is still cancelled there.
const WIND_UP: Duration = Duration::from_secs(5);

/// A run's tool timeouts.
#[derive(Debug, Clone, Copy)]
struct Limits {
    idle: Option<Duration>,
    total: Option<Duration>,
}

impl Limits {
    /// Awaits `call` within the limits. The idle wait starts anew from each sign of work the
    /// sink saw. Past a limit, `cancel` (the call's own token) fires and the call gets
    /// [`WIND_UP`] to answer: an answer that is a success stands (the tool finished as it was
    /// cut off), anything else is the timeout. As with `tokio::time::timeout`, the call is
    /// polled before a limit is checked, so a call that answers at once is never cut off,
    /// even by a zero limit.
    async fn bound(
        self,
        call: impl Future<Output = Result<ToolResult, SurfaceError>>,
        sink: Option<&ProgressSink>,
        cancel: &CancellationToken,
    ) -> Sent {
        let mut call = std::pin::pin!(call);
        let started = Instant::now();
        let total_at = self.total.map(|t| (started + t, Limit::Total(t)));
        // The nearest deadline, the idle one counted from the last sign of work.
        let deadline = || {
            let idle_at = self.idle.map(|i| {
                let active = sink
                    .and_then(ProgressSink::last_active)
                    .map_or(started, |a| a.max(started));
                (active + i, Limit::Idle(i))
            });
            [idle_at, total_at]
                .into_iter()
                .flatten()
                .min_by_key(|(at, _)| *at)
        };
        let Some(mut next) = deadline() else {
            return Sent::Answered(call.await);
        };
        let hit = loop {
            tokio::select! {
                biased;
                r = &mut call => return Sent::Answered(r),
                () = tokio::time::sleep_until(next.0) => {}
            }
            // The deadline slept to is reached, unless a sign of work meanwhile moved the idle
            // one on (the limits are set, so there still is one).
            next = deadline().unwrap_or(next);
            if next.0 <= Instant::now() {
                break next.1;
            }
        };
        cancel.cancel();
        match tokio::time::timeout(WIND_UP, &mut call).await {
            Ok(Ok(r)) if r.effective_code().is_none() => Sent::Answered(Ok(r)),
            _ => Sent::TimedOut(hit),
        }
    }
}
