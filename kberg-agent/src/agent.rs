//! The tool-use loop.
//!
//! [`Agent::run`] alternates model turns and tool calls until the model answers in words, or a
//! limit stops it: the turn limit, the token budget, cancellation, or the repair bounds. Each
//! stop is a [`StopReason`] in the [`RunOutcome`], beside the final text, every call with its
//! outcome code, the number of repair turns and what the loop did for the model
//! ([`crate::Interventions`]).
//!
//! The repair turn is the heart of it. A call whose arguments fail validation is answered with the
//! gate's per-field diagnostic, which names each field and what was expected, and the model gets
//! another turn to correct it. Refusals and missing capabilities are answered as final, with a
//! sentence telling the model not to try again. Both are bounded: a model that sends the same
//! failing call again, or needs more repair turns than allowed, is stopped with a clear outcome.
//!
//! Small local models misbehave in ways the loop has to absorb, each handled by an
//! [`AgentConfig`] option (see its fields): they write one call several times in a message
//! (collapsed), repeat a write or a read that already succeeded (not run again; the next turn is
//! answer-only), never stop calling tools (the last turn is answer-only), write calls to tools
//! they were not offered (answered with the gate's reason and the listed names, never run), write
//! call JSON that does not parse (answered with the parse error), copy a tool's JSON out as their
//! answer (asked once for words), invent ids or copy stale values into a write (not run: see
//! [`crate::ground`]), answer before looking anything up (asked once to look first), copy a
//! tool's schema or extra keys into a read's arguments (unwrapped, dropped), pass a list where
//! one value is expected (one call per item), and copy their own earlier turns (sent their calls
//! alone, without earlier failures; [`hints`] holds these answers).
//!
//! Before a call runs, calls written into the text are recovered (only for tools on the surface;
//! see [`crate::recover_calls`]) and unambiguous argument mistakes are corrected (see
//! [`crate::coerce_arguments`]); both are recorded in the outcome.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kberg_core::{ErrorCode, canonical_json};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::coerce::{Coercion, coerce_arguments, drop_unknown_arguments, unwrap_schema_echo};
use crate::config::AgentConfig;
use crate::message::{
    ChatOptions, ChatRequest, ChatResponse, Message, ToolCall, ToolChoice, ToolDefinition, Usage,
};
use crate::nudge;
use crate::outcome::{AgentEvent, CallOutcome, CallRecord, Interventions, RunOutcome, StopReason};
use crate::provider::{InferenceProvider, ProviderError, collect_stream};
use crate::recover::{has_words, malformed_call, recover_calls, unlisted_calls};
use crate::surface::ToolSurface;

mod hints;

/// The tool-use loop over one provider and one tool surface.
#[derive(Clone)]
pub struct Agent {
    provider: Arc<dyn InferenceProvider>,
    surface: Arc<dyn ToolSurface>,
    config: AgentConfig,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("provider", &self.provider.name())
            .field("model", &self.provider.model())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// One call of a turn, before it runs.
pub(super) struct PendingCall {
    call: ToolCall,
    coercions: Vec<Coercion>,
    /// Not on the surface: answered with the reason, never sent.
    unlisted: bool,
}

/// What follows a turn without calls.
enum AfterText {
    /// The run ends.
    Stop(StopReason),
    /// The model was answered and gets another turn (a repair turn when it was told its call
    /// did not parse).
    Again { repair: bool },
}

/// Why the next turn is answer-only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AnswerNow {
    No,
    /// The model repeated a call that already succeeded.
    Repeat,
    /// The model was asked to answer in words.
    Words,
}

struct Run<'a> {
    agent: &'a Agent,
    cancel: &'a CancellationToken,
    events: Option<&'a UnboundedSender<AgentEvent>>,
    request: ChatRequest,
    schemas: HashMap<String, Value>,
    /// Tools declared read-only.
    read_only: HashSet<String>,
    calls: Vec<CallRecord>,
    failures: HashMap<(String, String), u32>,
    /// Calls that succeeded in this run (tool, canonical arguments) -> the result the model was
    /// given: writes always, reads when [`AgentConfig::guard_repeated_reads`] is on.
    done: HashMap<(String, String), String>,
    answer_now: AnswerNow,
    /// The stop reason held back while the model gets an answer-only turn after looping.
    pending_stop: Option<StopReason>,
    asked_for_words: bool,
    /// Whether the model was asked to look before answering.
    asked_to_look: bool,
    /// How many of the conversation's first messages are the caller's (the rest are the run's):
    /// the user's own words, for [`crate::ground`].
    user_messages: usize,
    /// Indices of assistant messages whose calls were recovered from the text: sent to the
    /// model as the calls alone when [`AgentConfig::compact_recovered_turns`] is on.
    recovered_turns: Vec<usize>,
    repair_turns: u32,
    turns: u32,
    usage: Usage,
    text: String,
    interventions: Interventions,
}

impl Agent {
    /// An agent with the default configuration.
    pub fn new(
        provider: impl InferenceProvider + 'static,
        surface: impl ToolSurface + 'static,
    ) -> Self {
        Self::from_arcs(Arc::new(provider), Arc::new(surface))
    }

    /// An agent over shared provider and surface.
    pub fn from_arcs(provider: Arc<dyn InferenceProvider>, surface: Arc<dyn ToolSurface>) -> Self {
        Self {
            provider,
            surface,
            config: AgentConfig::default(),
        }
    }

    /// Replaces the configuration.
    pub fn with_config(mut self, config: AgentConfig) -> Self {
        self.config = config;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Runs the loop over `messages` (a new conversation, or a stored one to resume).
    pub async fn run(&self, messages: Vec<Message>, cancel: &CancellationToken) -> RunOutcome {
        self.run_inner(messages, cancel, None).await
    }

    /// Runs the loop, sending [`AgentEvent`]s to `events` as they happen. A closed receiver is
    /// ignored.
    pub async fn run_with_events(
        &self,
        messages: Vec<Message>,
        cancel: &CancellationToken,
        events: UnboundedSender<AgentEvent>,
    ) -> RunOutcome {
        self.run_inner(messages, cancel, Some(&events)).await
    }

    async fn run_inner(
        &self,
        mut messages: Vec<Message>,
        cancel: &CancellationToken,
        events: Option<&UnboundedSender<AgentEvent>>,
    ) -> RunOutcome {
        if let Some(system) = &self.config.system_prompt
            && !matches!(messages.first(), Some(Message::System { .. }))
        {
            messages.insert(0, Message::system(system.clone()));
        }
        let span = tracing::info_span!(
            "agent_run",
            provider = self.provider.name(),
            model = self.provider.model()
        );
        let mut run = Run {
            agent: self,
            cancel,
            events,
            request: ChatRequest {
                messages,
                tools: Vec::new(),
                options: self.config.options.clone(),
            },
            schemas: HashMap::new(),
            read_only: HashSet::new(),
            calls: Vec::new(),
            failures: HashMap::new(),
            done: HashMap::new(),
            answer_now: AnswerNow::No,
            pending_stop: None,
            asked_for_words: false,
            asked_to_look: false,
            user_messages: 0,
            recovered_turns: Vec::new(),
            repair_turns: 0,
            turns: 0,
            usage: Usage::default(),
            text: String::new(),
            interventions: Interventions::default(),
        };
        run.user_messages = run.request.messages.len();
        let stop = run.drive().instrument(span).await;
        tracing::debug!(stop = stop.code(), turns = run.turns, "agent run finished");
        RunOutcome {
            stop,
            text: run.text,
            calls: run.calls,
            repair_turns: run.repair_turns,
            turns: run.turns,
            usage: run.usage,
            messages: run.request.messages,
            interventions: run.interventions,
        }
    }
}

/// A call's key for the repeat guards: the tool and its arguments in canonical spelling, so the
/// same arguments in another key order are the same call.
fn call_key(call: &ToolCall) -> (String, String) {
    (call.name.clone(), canonical_json(&call.arguments))
}

impl Run<'_> {
    fn emit(&self, make: impl FnOnce() -> AgentEvent) {
        if let Some(tx) = self.events {
            let _ = tx.send(make());
        }
    }

    fn config(&self) -> &AgentConfig {
        &self.agent.config
    }

    fn install_tools(&mut self, tools: Vec<ToolDefinition>) {
        self.schemas = tools
            .iter()
            .map(|t| (t.name.clone(), t.parameters.clone()))
            .collect();
        self.read_only = tools
            .iter()
            .filter(|t| t.read_only)
            .map(|t| t.name.clone())
            .collect();
        self.request.tools = tools;
    }

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

    async fn drive(&mut self) -> StopReason {
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
            let response = match response {
                Ok(r) => r,
                Err(ProviderError::Cancelled) => return StopReason::Cancelled,
                Err(e) => return StopReason::Provider(e),
            };
            self.usage.add(response.usage);
            let ChatResponse {
                text,
                mut tool_calls,
                ..
            } = response;
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
                .run_calls(turn, text, calls, recovered, text_flags)
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

    /// A turn without calls: the answer, or a text the loop answers back (a malformed call, JSON
    /// instead of words).
    fn no_calls(&mut self, text: String, answer_only: bool) -> AfterText {
        self.text.clone_from(&text);
        let config = self.config();
        let visible: HashSet<&str> = self.schemas.keys().map(String::as_str).collect();
        let diagnostic =
            (config.diagnose_malformed_calls && config.recover_text_calls && !answer_only)
                .then(|| malformed_call(&text, &visible))
                .flatten();
        if let Some(error) = diagnostic {
            tracing::debug!(%error, "answering call-like text that does not parse");
            self.interventions.parse_diagnostics += 1;
            self.request.messages.push(Message::assistant(text));
            self.request
                .messages
                .push(Message::user(nudge::parse_diagnostic(&error)));
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

    async fn model_turn(
        &mut self,
        choice: Option<ToolChoice>,
    ) -> Result<ChatResponse, ProviderError> {
        if self.config().forget_old_failures && hints::has_old_failures(&self.request.messages) {
            self.interventions.failures_forgotten += 1;
        }
        let overridden = choice.is_some();
        if let Some(choice) = choice {
            self.request.options.tool_choice = choice;
        }
        let r = self.send_turn().await;
        if overridden {
            let ChatOptions { tool_choice, .. } = &self.agent.config.options;
            self.request.options.tool_choice.clone_from(tool_choice);
        }
        r
    }

    /// The request as the model is sent it: recovered turns as their calls alone when
    /// [`AgentConfig::compact_recovered_turns`] is on, failed calls of earlier turns left out
    /// when [`AgentConfig::forget_old_failures`] is on (the stored conversation is unchanged).
    fn request_to_send(&self) -> std::borrow::Cow<'_, ChatRequest> {
        let compact = self.config().compact_recovered_turns && !self.recovered_turns.is_empty();
        if !compact && !self.config().forget_old_failures {
            return std::borrow::Cow::Borrowed(&self.request);
        }
        let mut request = self.request.clone();
        for &i in self.recovered_turns.iter().filter(|_| compact) {
            if let Some(Message::Assistant { content, .. }) = request.messages.get_mut(i) {
                content.clear();
            }
        }
        if self.config().forget_old_failures {
            hints::forget_old_failures(&mut request.messages);
        }
        std::borrow::Cow::Owned(request)
    }

    async fn send_turn(&self) -> Result<ChatResponse, ProviderError> {
        let provider = &self.agent.provider;
        let request = self.request_to_send();
        let request = request.as_ref();
        let fut = async {
            if self.agent.config.stream {
                let stream = provider.chat_stream(request, self.cancel).await?;
                collect_stream(stream, |t| {
                    self.emit(|| AgentEvent::TextDelta {
                        text: t.to_string(),
                    });
                })
                .await
            } else {
                let r = provider.chat(request, self.cancel).await?;
                if !r.text.is_empty() {
                    self.emit(|| AgentEvent::TextDelta {
                        text: r.text.clone(),
                    });
                }
                Ok(r)
            }
        };
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(ProviderError::Cancelled),
            r = fut => r,
        }
    }

    /// The calls to run this turn: the structured ones, or else those recovered from the text
    /// (then the flag is set), followed by text calls to unlisted tools when those are
    /// explained. The list says, per call, whether its arguments were recovered from a JSON
    /// string.
    fn calls_of(
        &self,
        text: &str,
        structured: Vec<ToolCall>,
        recover: bool,
    ) -> (Vec<ToolCall>, bool, Vec<bool>) {
        let config = self.config();
        if !structured.is_empty() || !recover || !config.recover_text_calls {
            return (structured, false, Vec::new());
        }
        let visible: HashSet<&str> = self.schemas.keys().map(String::as_str).collect();
        let recovered = recover_calls(text, &visible);
        let unlisted = if recovered.is_empty() && config.explain_unlisted_calls {
            unlisted_calls(text, &visible)
        } else {
            Vec::new()
        };
        if !recovered.is_empty() || !unlisted.is_empty() {
            tracing::debug!(
                count = recovered.len(),
                unlisted = unlisted.len(),
                "recovered tool calls from the text"
            );
        }
        let mut flags: Vec<bool> = recovered.iter().map(|c| c.arguments_were_text).collect();
        let mut calls: Vec<ToolCall> = recovered
            .into_iter()
            .map(|c| ToolCall {
                id: String::new(),
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        for name in unlisted {
            flags.push(false);
            calls.push(ToolCall {
                id: String::new(),
                name,
                arguments: Value::Object(Default::default()),
            });
        }
        (calls, true, flags)
    }

    /// Ids, coercions, and the in-turn collapse of identical calls.
    fn prepare(
        &mut self,
        turn: u32,
        calls: Vec<ToolCall>,
        text_flags: &[bool],
    ) -> Vec<PendingCall> {
        let collapse = self.config().collapse_calls_in_turn;
        let coerce = self.config().coerce_arguments;
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(calls.len());
        for (i, mut call) in calls.into_iter().enumerate() {
            if collapse && !seen.insert(call_key(&call)) {
                self.interventions.calls_collapsed += 1;
                tracing::debug!(tool = %call.name, "an identical call in the same turn was dropped");
                continue;
            }
            if call.id.is_empty() {
                call.id = format!("call_{turn}_{}", i + 1);
            }
            let unlisted = !self.schemas.contains_key(&call.name);
            let mut coercions = Vec::new();
            if text_flags.get(i).copied().unwrap_or(false) {
                coercions.push(Coercion {
                    pointer: String::new(),
                    from: "a JSON string".into(),
                    to: "an object".into(),
                });
            }
            if self.config().unwrap_schema_arguments
                && let Some(schema) = self.schemas.get(&call.name)
                && let Some(c) = unwrap_schema_echo(&mut call.arguments, schema)
            {
                tracing::debug!(tool = %call.name, "arguments that copied the schema were unwrapped");
                self.interventions.schema_echoes_unwrapped += 1;
                coercions.push(c);
            }
            if self.config().drop_unknown_read_arguments
                && self.read_only.contains(&call.name)
                && let Some(schema) = self.schemas.get(&call.name)
            {
                let dropped = drop_unknown_arguments(&mut call.arguments, schema);
                self.interventions.read_arguments_dropped +=
                    u32::try_from(dropped.len()).unwrap_or(u32::MAX);
                coercions.extend(dropped);
            }
            if coerce && let Some(schema) = self.schemas.get(&call.name) {
                coercions.extend(coerce_arguments(&mut call.arguments, schema));
            }
            self.interventions.coercions += u32::try_from(coercions.len()).unwrap_or(u32::MAX);
            out.push(PendingCall {
                call,
                coercions,
                unlisted,
            });
        }
        if self.config().split_array_arguments {
            out = self.split_arrays(out);
        }
        out
    }

    /// Runs one turn's calls in order. Returns a stop reason if the run must end, and whether a
    /// retryable failure asks for a repair turn.
    async fn run_calls(
        &mut self,
        turn: u32,
        text: String,
        calls: Vec<ToolCall>,
        recovered: bool,
        text_flags: Vec<bool>,
    ) -> (Option<StopReason>, bool) {
        let pending = self.prepare(turn, calls, &text_flags);
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
        for PendingCall {
            call,
            coercions,
            unlisted,
        } in pending
        {
            if stop.is_some() {
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
            if unlisted && recovered {
                let (code, text) = self.explain_unlisted(&call.name).await;
                self.interventions.unlisted_explained += 1;
                progressed |= self.note_failure(&call, code, &mut repeated);
                self.record(
                    turn,
                    call,
                    CallOutcome::Failed(code),
                    text,
                    (true, true),
                    coercions,
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
                tracing::debug!(tool = %call.name, read, "a repeated identical call was not run again");
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
            if let Some(text) = self.ungrounded(&call) {
                tracing::debug!(tool = %call.name, "a write whose values have no source was not run");
                self.interventions.ungrounded_writes += 1;
                retryable = true;
                let code = ErrorCode::InvalidArguments;
                progressed |= self.note_failure(&call, code, &mut repeated);
                self.record(
                    turn,
                    call,
                    CallOutcome::Failed(code),
                    text,
                    (recovered, true),
                    coercions,
                );
                continue;
            }
            let call_for_event = call.clone();
            let coercions_for_event = coercions.clone();
            self.emit(|| AgentEvent::ToolCalled {
                call: call_for_event,
                recovered_from_text: recovered,
                coercions: coercions_for_event,
            });
            let result = self
                .agent
                .surface
                .call(
                    &call.name,
                    call.arguments.clone(),
                    self.cancel.child_token(),
                )
                .await;
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
                    stop = Some(StopReason::Surface(e));
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
                    result.text,
                    (recovered, false),
                    coercions,
                );
                continue;
            };
            let mut text = result.text;
            match code {
                ErrorCode::Cancelled => {
                    stop = Some(StopReason::Cancelled);
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
                text,
                (recovered, false),
                coercions,
            );
        }
        if stop.is_none() && !progressed {
            stop = repeated;
        }
        (stop, retryable)
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
        text: String,
        (recovered, not_sent): (bool, bool),
        coercions: Vec<Coercion>,
    ) {
        self.emit(|| AgentEvent::ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            outcome,
            text: text.clone(),
        });
        self.request.messages.push(Message::Tool {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: text,
            is_error: matches!(outcome, CallOutcome::Failed(_)),
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
        });
    }
}
