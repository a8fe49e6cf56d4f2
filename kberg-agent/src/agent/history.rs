//! What the model is sent each turn, as distinct from what the run stores. The stored
//! conversation ([`crate::RunOutcome::messages`]) keeps everything the model wrote and was told;
//! the request sent may show a turn recovered from text as its calls alone and leave out earlier
//! failed calls, because small models copy what they see. Sending (streamed or not, cancellable)
//! and the per-turn tool choice live here too.

use std::collections::HashMap;

use crate::message::{ChatOptions, ChatRequest, ChatResponse, Message, ToolChoice};
use crate::nudge;
use crate::outcome::{AgentEvent, CallOutcome, CallRecord};
use crate::provider::{ChatDelta, ProviderError, collect_stream_observed};
use crate::thinking;

use super::Run;

impl Run<'_> {
    pub(super) async fn model_turn(
        &mut self,
        choice: Option<ToolChoice>,
    ) -> Result<ChatResponse, ProviderError> {
        if self.config().id_handles {
            let new = self.handles.scan(&self.request.messages);
            self.interventions.handles_issued += u32::try_from(new).unwrap_or(u32::MAX);
        }
        if self.config().forget_old_failures && has_old_failures(&self.request.messages) {
            self.interventions.failures_forgotten += 1;
        }
        let mut focused = (choice == Some(ToolChoice::None) && self.config().focused_answer_turns)
            .then(|| self.focused_request())
            .flatten();
        if focused.is_some() {
            self.interventions.answer_turns_focused += 1;
        }
        let narrow = self
            .narrow_to
            .take()
            .filter(|_| choice != Some(ToolChoice::None));
        let overridden = choice.is_some();
        if let Some(choice) = choice {
            self.request.options.tool_choice = choice;
        }
        let mut narrowed = false;
        let r = loop {
            let r = match (&focused, &narrow) {
                (Some(request), _) => self.send(request).await,
                (None, Some(tool)) => {
                    let mut request = self.request_to_send().into_owned();
                    request.tools.retain(|t| &t.name == tool);
                    if request.tools.is_empty() {
                        self.send_turn().await
                    } else {
                        narrowed = true;
                        self.send(&request).await
                    }
                }
                (None, None) => self.send_turn().await,
            };
            match r {
                Err(ProviderError::ContextTooLong { .. }) if focused.is_some() => {
                    if !self.elide_more_focused() {
                        break r;
                    }
                    focused = self.focused_request();
                }
                Err(ProviderError::ContextTooLong { .. }) if self.elide_more() => {}
                r => break r,
            }
        };
        if narrowed {
            self.interventions.turns_narrowed += 1;
        }
        if overridden {
            let ChatOptions { tool_choice, .. } = &self.agent.config.options;
            self.request.options.tool_choice.clone_from(tool_choice);
        }
        r
    }

    /// After the provider refused a turn as longer than the context window: shows half of the
    /// tool results still shown before the last assistant turn (at least one, oldest first) as
    /// removed, and says whether there was one to remove
    /// ([`crate::AgentConfig::elide_results_on_overflow`]).
    fn elide_more(&mut self) -> bool {
        let elidable = elidable_results(&self.request.messages);
        let Some(more) = self.half_to_elide(elidable, self.elided_results) else {
            return false;
        };
        self.elided_results += more;
        tracing::info!(
            removed = more,
            removed_in_all = self.elided_results,
            "the turn does not fit the model's context window; sending it again without the oldest tool results"
        );
        true
    }

    /// [`Run::elide_more`] for an answer-only turn's short form
    /// ([`crate::AgentConfig::focused_answer_turns`]): shows half of its results still shown
    /// (at least one, oldest first) as removed, never those of the last assistant turn, and
    /// says whether there was one to remove.
    fn elide_more_focused(&mut self) -> bool {
        let elidable = self
            .focused_entries()
            .iter()
            .filter(|e| e.before_last_turn)
            .count();
        let Some(more) = self.half_to_elide(elidable, self.focused_elided) else {
            return false;
        };
        self.focused_elided += more;
        tracing::info!(
            removed = more,
            removed_in_all = self.focused_elided,
            "the answer turn does not fit the model's context window; sending it again without the oldest tool results"
        );
        true
    }

    /// How many more of `elidable` results, `elided` of them shown as removed already, to show
    /// as removed after a context-window refusal: half of those still shown, at least one,
    /// counted in [`crate::Interventions::results_elided`]. `None` when the option is off
    /// ([`crate::AgentConfig::elide_results_on_overflow`]) or none is left.
    fn half_to_elide(&mut self, elidable: usize, elided: usize) -> Option<usize> {
        let shown = elidable.saturating_sub(elided);
        if !self.config().elide_results_on_overflow || shown == 0 {
            return None;
        }
        let more = shown.div_ceil(2);
        self.interventions.results_elided = self
            .interventions
            .results_elided
            .saturating_add(u32::try_from(more).unwrap_or(u32::MAX));
        Some(more)
    }

    /// The request as the model is sent it: recovered turns as their calls alone when
    /// [`crate::AgentConfig::compact_recovered_turns`] is on, the oldest tool results as removed
    /// after a context-window refusal ([`crate::AgentConfig::elide_results_on_overflow`]), failed
    /// calls of earlier turns left out when [`crate::AgentConfig::forget_old_failures`] is on,
    /// long ids as handles when [`crate::AgentConfig::id_handles`] is on (the stored
    /// conversation is unchanged).
    fn request_to_send(&self) -> std::borrow::Cow<'_, ChatRequest> {
        let compact = self.config().compact_recovered_turns && !self.recovered_turns.is_empty();
        let handles = self.config().id_handles && !self.handles.is_empty();
        // The conversation is copied only when something in it is sent otherwise: with no
        // failed call before the last turn there is nothing to forget.
        let forget = self.config().forget_old_failures && has_old_failures(&self.request.messages);
        let elide = self.elided_results > 0;
        if !compact && !forget && !handles && !elide {
            return std::borrow::Cow::Borrowed(&self.request);
        }
        let mut request = self.request.clone();
        for &i in self.recovered_turns.iter().filter(|_| compact) {
            if let Some(Message::Assistant { content, .. }) = request.messages.get_mut(i) {
                content.clear();
            }
        }
        // In place, before anything is left out, so the oldest results are counted as they
        // were when they were removed.
        if elide {
            let note = nudge::result_elided();
            request
                .messages
                .iter_mut()
                .filter_map(|m| match m {
                    Message::Tool { content, .. } => Some(content),
                    _ => None,
                })
                .take(self.elided_results)
                .for_each(|content| content.clone_from(&note));
        }
        if forget {
            forget_old_failures(&mut request.messages);
        }
        if handles {
            self.handles.shorten_messages(&mut request.messages);
        }
        std::borrow::Cow::Owned(request)
    }

    /// The results an answer-only turn's short form shows: of each call the run sent, each
    /// distinct result once, in order, with whether it came before the last assistant turn.
    fn focused_entries(&self) -> Vec<FocusedEntry<'_>> {
        let sent: HashMap<&str, &CallRecord> = self
            .calls
            .iter()
            .filter(|c| {
                !c.not_sent && matches!(c.outcome, CallOutcome::Ok | CallOutcome::Failed(_))
            })
            .map(|c| (c.id.as_str(), c))
            .collect();
        let messages = &self.request.messages;
        let last_turn = messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
            .unwrap_or(0);
        // Each distinct result once, where it first came; one the last turn got again is that
        // turn's, and stays shown.
        let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
        let mut entries: Vec<FocusedEntry<'_>> = Vec::new();
        let first = self.user_messages.min(messages.len());
        for (i, m) in messages.iter().enumerate().skip(first) {
            let Message::Tool {
                call_id, content, ..
            } = m
            else {
                continue;
            };
            let Some(call) = sent.get(call_id.as_str()) else {
                continue;
            };
            match seen.entry((call.name.as_str(), content.as_str())) {
                std::collections::hash_map::Entry::Occupied(e) => {
                    if i > last_turn {
                        entries[*e.get()].before_last_turn = false;
                    }
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(entries.len());
                    entries.push(FocusedEntry {
                        call,
                        content,
                        before_last_turn: i < last_turn,
                    });
                }
            }
        }
        entries
    }

    /// An answer-only turn in its short form ([`crate::AgentConfig::focused_answer_turns`]): the
    /// caller's messages, then one message with the result of each call the run sent (each
    /// distinct result once, in order; the oldest shown as removed after a context-window
    /// refusal, [`Run::elide_more_focused`]) and the request to answer from them; no tools.
    /// `None` when no call of the run has a result to show.
    fn focused_request(&self) -> Option<ChatRequest> {
        let entries = self.focused_entries();
        if entries.is_empty() {
            return None;
        }
        let removed = nudge::result_elided();
        let mut elide = self.focused_elided;
        let results: Vec<String> = entries
            .iter()
            .map(|e| {
                let content = if e.before_last_turn && elide > 0 {
                    elide -= 1;
                    removed.as_str()
                } else {
                    e.content
                };
                nudge::focused_result(
                    &e.call.name,
                    &e.call.arguments,
                    e.call.outcome == CallOutcome::Ok,
                    content,
                )
            })
            .collect();
        let mut messages = self.request.messages[..self.user_messages].to_vec();
        // Some wires (Anthropic's) refuse a conversation holding tool calls or results without
        // the tools listed: a caller's history with either keeps the listing.
        let history_has_calls = messages.iter().any(|m| match m {
            Message::Tool { .. } => true,
            Message::Assistant { tool_calls, .. } => !tool_calls.is_empty(),
            _ => false,
        });
        let mut ask = nudge::focused_answer(&results);
        if let Some(note) = &self.cut_off_note {
            ask.push_str("\n\n");
            ask.push_str(note);
        }
        messages.push(Message::user(ask));
        let mut options = self.request.options.clone();
        options.tool_choice = ToolChoice::None;
        Some(ChatRequest {
            messages,
            tools: if history_has_calls {
                self.request.tools.clone()
            } else {
                Vec::new()
            },
            options,
        })
    }

    async fn send_turn(&self) -> Result<ChatResponse, ProviderError> {
        let request = self.request_to_send();
        self.send(request.as_ref()).await
    }

    /// Sends `request` under the names the model is shown ([`crate::names`]) and reads the
    /// calls of the answer back to the tools' real names.
    async fn send(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let translated;
        let request = if self.names.sends_as_is(request) {
            request
        } else {
            translated = self.names.outgoing(request);
            &translated
        };
        let mut response = self.send_as_is(request).await?;
        self.names.incoming(&mut response);
        Ok(response)
    }

    /// Sends `request` as it is. With [`crate::AgentConfig::strip_thinking`] the answer's text
    /// is its text without the model's thinking, which goes to the events on its own.
    async fn send_as_is(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let provider = &self.agent.provider;
        let strip = self.config().strip_thinking;
        let fut = async {
            if self.agent.config.stream {
                let stream = provider.chat_stream(request, self.cancel).await?;
                // The filter only tells the events apart; the answer is split whole below.
                let mut filter = thinking::ThinkingFilter::default();
                let listened = self.events.is_some();
                let mut response = collect_stream_observed(stream, |delta| match delta {
                    ChatDelta::Text(t) if strip && listened => {
                        filter.feed(t).iter().for_each(|p| self.emit_piece(p));
                    }
                    ChatDelta::Text(t) if !strip => self.emit_text(t),
                    ChatDelta::Thinking(t) => self.emit_thinking(t),
                    _ => {}
                })
                .await?;
                filter.finish().iter().for_each(|p| self.emit_piece(p));
                if strip && let Some(split) = thinking::split(&response.text) {
                    response.text = split.answer;
                }
                Ok(response)
            } else {
                let mut r = provider.chat(request, self.cancel).await?;
                self.emit_thinking(&r.thinking);
                if strip && let Some(split) = thinking::split(&r.text) {
                    self.emit_thinking(&split.thinking);
                    r.text = split.answer;
                }
                self.emit_text(&r.text);
                Ok(r)
            }
        };
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(ProviderError::Cancelled),
            r = fut => r,
        }
    }

    /// Emits a piece of a turn's text as its event.
    fn emit_piece(&self, piece: &thinking::Piece) {
        match piece {
            thinking::Piece::Answer(text) => self.emit_text(text),
            thinking::Piece::Thinking(text) => self.emit_thinking(text),
        }
    }

    /// Emits text of the answer; nothing for an empty one, or without a listener.
    fn emit_text(&self, text: &str) {
        if !text.is_empty() {
            self.emit(|| AgentEvent::TextDelta {
                text: text.to_string(),
            });
        }
    }

    /// Emits text of the thinking; nothing for an empty one, or without a listener.
    fn emit_thinking(&self, text: &str) {
        if !text.is_empty() {
            self.emit(|| AgentEvent::ThinkingDelta {
                text: text.to_string(),
            });
        }
    }
}

/// Leaves out of `messages` (what the model is sent) the failed calls of every assistant turn
/// but the last, with their results, and turns left with neither text nor calls
/// ([`crate::AgentConfig::forget_old_failures`]). Small models copy the calls they see; a call
/// that failed and was answered a turn ago is copied again.
fn forget_old_failures(messages: &mut Vec<Message>) {
    let Some(last) = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return;
    };
    let failed: std::collections::HashSet<String> = messages[..last]
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                call_id,
                is_error: true,
                ..
            } => Some(call_id.clone()),
            _ => None,
        })
        .collect();
    if failed.is_empty() {
        return;
    }
    let mut i = 0;
    messages.retain_mut(|m| {
        let keep = if i >= last {
            true
        } else {
            match m {
                Message::Tool { call_id, .. } => !failed.contains(call_id),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let had_calls = !tool_calls.is_empty();
                    tool_calls.retain(|c| !failed.contains(&c.id));
                    !(had_calls && tool_calls.is_empty() && content.trim().is_empty())
                }
                _ => true,
            }
        };
        i += 1;
        keep
    });
}

/// One result an answer-only turn's short form shows ([`Run::focused_entries`]).
struct FocusedEntry<'a> {
    call: &'a CallRecord,
    content: &'a str,
    /// It came before the last assistant turn, so it may be shown as removed.
    before_last_turn: bool,
}

/// How many tool results come before the last assistant message of `messages`: those
/// [`Run::elide_more`] may show as removed (the last turn's results are what the model works
/// from now).
fn elidable_results(messages: &[Message]) -> usize {
    let last = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
        .unwrap_or(0);
    messages[..last]
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count()
}

/// Whether [`forget_old_failures`] would leave something out of `messages`.
fn has_old_failures(messages: &[Message]) -> bool {
    messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
        .is_some_and(|last| {
            messages[..last]
                .iter()
                .any(|m| matches!(m, Message::Tool { is_error: true, .. }))
        })
}
