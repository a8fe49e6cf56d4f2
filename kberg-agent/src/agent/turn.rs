//! The turn loop: one model turn after another until the run stops. Each turn is sent (see
//! [`super::history`]), its calls are prepared ([`super::repair`]) and run ([`super::dispatch`]);
//! a turn without calls is the answer, or text the loop answers back (a call that does not parse,
//! JSON instead of words, an answer given before looking). This is where the stop reasons are
//! decided, and where a turn becomes answer-only: after a repeat, a request for words, or when
//! the budget is nearly spent.

use crate::message::{ChatResponse, FinishReason, Message, ToolChoice};
use crate::nudge;
use crate::outcome::{AgentEvent, StopReason};
use crate::provider::ProviderError;
use crate::recover::{has_words, malformed_call};

use super::{AfterText, AnswerNow, Run};

impl Run<'_> {
    /// Whether this turn must be the last chance to answer: the turn limit or the token budget
    /// is nearly spent after a tool ran.
    fn budget_nearly_spent(&self) -> bool {
        let config = self.config();
        if !config.final_answer_turn || self.calls.is_empty() {
            return false;
        }
        let last_turn = self.turns + 1 >= config.max_turns;
        let tokens_low = config
            .token_budget
            .is_some_and(|b| self.usage.total().saturating_mul(5) >= b.saturating_mul(4));
        last_turn || tokens_low
    }

    pub(super) async fn drive(&mut self) -> StopReason {
        let tools = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return StopReason::Cancelled,
            t = self.agent.surface.tools() => t,
        };
        match tools {
            Ok(tools) => self.install_tools(tools),
            Err(e) => return StopReason::Surface(e),
        }
        let mut repair_pending = false;
        loop {
            let config = self.config();
            if self.cancel.is_cancelled() {
                return StopReason::Cancelled;
            }
            if self.turns >= config.max_turns {
                return self.pending_stop.take().unwrap_or(StopReason::TurnLimit);
            }
            if repair_pending {
                if self.repair_turns >= config.max_repair_turns {
                    return StopReason::RepairLimit {
                        limit: config.max_repair_turns,
                    };
                }
                self.repair_turns += 1;
            }
            let answer_now = std::mem::replace(&mut self.answer_now, AnswerNow::No);
            let final_turn = answer_now == AnswerNow::No && self.budget_nearly_spent();
            if final_turn {
                self.interventions.final_answer_turns += 1;
            }
            let answer_only = answer_now != AnswerNow::No || final_turn;
            self.turns += 1;
            let turn = self.turns;
            self.emit(|| AgentEvent::TurnStarted { turn });
            let turn_choice = if answer_only {
                Some(ToolChoice::None)
            } else if turn == 1 {
                self.config().first_turn_tool_choice.clone()
            } else {
                None
            };
            let response = self.model_turn(turn_choice).await;
            self.cut_off_note = None;
            let response = match response {
                Ok(r) => r,
                Err(ProviderError::Cancelled) => return StopReason::Cancelled,
                Err(e) => return StopReason::Provider(e),
            };
            self.usage.add(response.usage);
            let thought = !response.thinking.is_empty();
            let ChatResponse {
                text,
                mut tool_calls,
                finish,
                ..
            } = response;
            let cut_off = finish == FinishReason::Length;
            self.last_finish = finish;
            // The stored conversation holds real ids: a handle the model wrote in its text (a
            // call written as text, an answer naming an id) is the id it stands for.
            let text = if self.config().id_handles {
                let (text, n) = self.handles.expand(&text);
                self.interventions.handles_resolved += n;
                text
            } else {
                text
            };
            if answer_only && !tool_calls.is_empty() {
                // Some servers ignore tool choice `none` (llama-cpp-python's grammar-constrained
                // function calling does): an answer-only turn never runs a call.
                tracing::debug!(
                    count = tool_calls.len(),
                    "calls in an answer-only turn are not run"
                );
                tool_calls.clear();
            }
            let (calls, recovered, text_flags) =
                self.calls_of(text.as_str(), tool_calls, !answer_only);
            if calls.is_empty() {
                if cut_off && thought && text.trim().is_empty() && self.thinking_cut_off(answer_now)
                {
                    continue;
                }
                match self.no_calls(text, answer_only) {
                    AfterText::Stop(stop) => return stop,
                    AfterText::Again { repair } => {
                        repair_pending = repair;
                        continue;
                    }
                }
            }
            if let Some(budget) = self.config().token_budget
                && self.usage.total() >= budget
            {
                // The calls are not run: the budget is spent. Keep the text only, so the stored
                // conversation never holds a call without its result.
                self.text.clone_from(&text);
                self.request.messages.push(Message::assistant(text));
                return StopReason::TokenBudget;
            }
            if !text.is_empty() {
                self.text.clone_from(&text);
            }
            let (stop, retryable) = self
                .run_calls(turn, text, calls, (recovered, cut_off), text_flags)
                .await;
            match stop {
                // The model loops on a failing call: one answer-only turn to tell the user, and
                // the run ends with the repeat as its reason if no answer comes.
                Some(stop @ StopReason::RepeatedFailure { .. })
                    if self.config().final_answer_turn && self.pending_stop.is_none() =>
                {
                    self.pending_stop = Some(stop);
                    self.answer_now = AnswerNow::Repeat;
                    self.interventions.final_answer_turns += 1;
                    repair_pending = false;
                }
                Some(stop) => return stop,
                None => repair_pending = retryable,
            }
        }
    }

    /// A turn cut off at the output limit while the model still thought: it wrote neither an
    /// answer nor a call. Once a run (with [`crate::AgentConfig::ask_for_words`]), the model
    /// is told so and gets the same kind of turn again: an answer-only turn stays answer-only,
    /// any other offers the tools (asking it for words without tools would end a run that had
    /// not looked at anything yet). Returns whether it does.
    fn thinking_cut_off(&mut self, answer_now: AnswerNow) -> bool {
        if !self.config().ask_for_words || self.thinking_resumed {
            return false;
        }
        tracing::debug!("a turn was cut off while the model thought; giving it again");
        self.thinking_resumed = true;
        self.interventions.thinking_cut_off += 1;
        self.answer_now = answer_now;
        let tools = answer_now == AnswerNow::No && !self.budget_nearly_spent();
        let request = nudge::thinking_cut_off(self.config().options.max_tokens, tools);
        self.request
            .messages
            .push(Message::assistant(String::new()));
        self.request.messages.push(Message::user(request.clone()));
        self.cut_off_note = Some(request);
        true
    }

    /// A turn without calls: the answer, or a text the loop answers back (a malformed call, JSON
    /// instead of words).
    fn no_calls(&mut self, text: String, answer_only: bool) -> AfterText {
        self.text.clone_from(&text);
        let config = self.config();
        let visible = self.visible_names();
        let diagnostic =
            (config.diagnose_malformed_calls && config.recover_text_calls && !answer_only)
                .then(|| malformed_call(&text, &visible))
                .flatten();
        if let Some(error) = diagnostic {
            tracing::debug!(%error, "answering call-like text that does not parse");
            self.interventions.parse_diagnostics += 1;
            self.request.messages.push(Message::assistant(text));
            let diagnostic = if self.last_finish == FinishReason::Length {
                nudge::text_call_cut_off(self.config().options.max_tokens)
            } else {
                nudge::parse_diagnostic(&error)
            };
            self.request.messages.push(Message::user(diagnostic));
            return AfterText::Again { repair: true };
        }
        let in_words = has_words(&text);
        if in_words
            && !answer_only
            && let Some(request) = self.look_first()
        {
            tracing::debug!("an answer before any tool ran; asking the model to look first");
            self.request.messages.push(Message::assistant(text));
            self.request.messages.push(Message::user(request));
            return AfterText::Again { repair: false };
        }
        if in_words {
            self.request.messages.push(Message::assistant(text));
            return AfterText::Stop(StopReason::Answered);
        }
        if self.config().ask_for_words && !self.asked_for_words {
            tracing::debug!("the final text held only JSON; asking for an answer in words");
            self.asked_for_words = true;
            self.interventions.words_requested += 1;
            self.answer_now = AnswerNow::Words;
            self.request.messages.push(Message::assistant(text));
            self.request
                .messages
                .push(Message::user(nudge::words_request()));
            return AfterText::Again { repair: false };
        }
        self.request.messages.push(Message::assistant(text));
        AfterText::Stop(self.pending_stop.take().unwrap_or(StopReason::NoAnswer))
    }
}
