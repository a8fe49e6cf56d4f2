//! The tool-use loop.
//!
//! [`Agent::run`] alternates model turns and tool calls until the model answers without calling
//! a tool, or a limit stops it: the turn limit, the token budget, cancellation, or the repair
//! bounds. Each stop is a [`StopReason`] in the [`RunOutcome`], beside the final text, every call
//! with its outcome code, and the number of repair turns.
//!
//! The repair turn is the heart of it. A call whose arguments fail validation is answered with the
//! gate's per-field diagnostic, which names each field and what was expected, and the model gets
//! another turn to correct it. Refusals and missing capabilities are answered as final, with a
//! sentence telling the model not to try again. Both are bounded: a model that sends the same
//! failing call again, or needs more repair turns than allowed, is stopped with a clear outcome.
//!
//! Small models also loop: after a write succeeds they send the very same call again, turn after
//! turn. A call identical (same tool, same arguments) to a write that already succeeded in this
//! run is not run again ([`CallOutcome::Duplicate`]); the model is given the earlier result and
//! its next turn is an answer-only turn (tool choice `none`, no text-call recovery), so the run
//! ends with an answer and the write happened once. Read-only tools are run again (polling is
//! legitimate). [`AgentConfig::dedupe_writes`] turns this off for apps whose writes are meant to
//! repeat with identical arguments.
//!
//! Before a call runs, calls written into the text by small models are recovered (only for tools
//! on the surface; see [`crate::recover_calls`]) and unambiguous argument mistakes are corrected
//! (see [`crate::coerce_arguments`]); both are recorded in the outcome.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kberg_core::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::coerce::{Coercion, coerce_arguments};
use crate::message::{
    ChatOptions, ChatRequest, ChatResponse, Message, ToolCall, ToolChoice, Usage,
};
use crate::provider::{InferenceProvider, ProviderError, collect_stream};
use crate::recover::recover_calls;
use crate::surface::{SurfaceError, ToolSurface};

/// How a run is bounded and what each turn asks for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The most model turns in one run (default 8).
    pub max_turns: u32,
    /// Stop once this many tokens (input + output, summed over turns) are spent.
    pub token_budget: Option<u64>,
    /// The most repair turns (turns that follow a retryable failure) in one run (default 3).
    pub max_repair_turns: u32,
    /// Stop when the same call (same tool, same arguments) has failed this many times
    /// (default 2: the model is told once, and stopped if it sends the call again).
    pub max_identical_failures: u32,
    /// A system prompt put first when the conversation has none.
    pub system_prompt: Option<String>,
    /// Options for every turn.
    pub options: ChatOptions,
    /// Use the provider's streaming form and emit [`AgentEvent::TextDelta`]s (default false).
    pub stream: bool,
    /// Recover calls a model wrote into its text (default true).
    pub recover_text_calls: bool,
    /// Correct unambiguous argument mistakes (default true).
    pub coerce_arguments: bool,
    /// The tool choice of the run's first turn only, when set (later turns use
    /// `options.tool_choice`). [`ToolChoice::Required`] here is the usual way to make a small
    /// model act on a request it would otherwise only talk about, without forcing every later
    /// turn to call a tool too.
    pub first_turn_tool_choice: Option<ToolChoice>,
    /// Never run an identical call of a tool that is not read-only twice in one run, and answer
    /// the model's repeat with the earlier result followed by an answer-only turn (default true).
    pub dedupe_writes: bool,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_turns: 8,
            token_budget: None,
            max_repair_turns: 3,
            max_identical_failures: 2,
            system_prompt: None,
            options: ChatOptions::default(),
            stream: false,
            recover_text_calls: true,
            coerce_arguments: true,
            first_turn_tool_choice: None,
            dedupe_writes: true,
        }
    }
}

impl AgentConfig {
    /// Sets the turn limit.
    pub fn max_turns(mut self, n: u32) -> Self {
        self.max_turns = n;
        self
    }

    /// Sets the token budget.
    pub fn token_budget(mut self, tokens: u64) -> Self {
        self.token_budget = Some(tokens);
        self
    }

    /// Sets the repair-turn limit.
    pub fn max_repair_turns(mut self, n: u32) -> Self {
        self.max_repair_turns = n;
        self
    }

    /// Sets how often one identical call may fail before the run stops (at least 1).
    pub fn max_identical_failures(mut self, n: u32) -> Self {
        self.max_identical_failures = n.max(1);
        self
    }

    /// Sets the system prompt.
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// Sets the per-turn options.
    pub fn options(mut self, options: ChatOptions) -> Self {
        self.options = options;
        self
    }

    /// Streams turns (emitting text deltas).
    pub fn stream(mut self, on: bool) -> Self {
        self.stream = on;
        self
    }

    /// Turns text-call recovery on or off.
    pub fn recover_text_calls(mut self, on: bool) -> Self {
        self.recover_text_calls = on;
        self
    }

    /// Turns argument coercion on or off.
    pub fn coerce_arguments(mut self, on: bool) -> Self {
        self.coerce_arguments = on;
        self
    }

    /// Sets the first turn's tool choice.
    pub fn first_turn_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.first_turn_tool_choice = Some(choice);
        self
    }

    /// Turns the deduplication of repeated identical writes on or off.
    pub fn dedupe_writes(mut self, on: bool) -> Self {
        self.dedupe_writes = on;
        self
    }
}

/// How one call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The tool ran and succeeded.
    Ok,
    /// The call was not run: the identical write already succeeded earlier in the run, and the
    /// model was given that result.
    Duplicate,
    /// The call was refused or failed with this code.
    Failed(ErrorCode),
}

impl CallOutcome {
    /// `ok`, or the error code's stable string.
    pub fn as_str(&self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Duplicate => "duplicate",
            CallOutcome::Failed(c) => c.as_str(),
        }
    }
}

/// One tool call of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The turn it was made in (1-based).
    pub turn: u32,
    /// The call's id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments as executed (after coercion).
    pub arguments: Value,
    /// How it ended.
    pub outcome: CallOutcome,
    /// Whether it was recovered from the message text.
    pub recovered_from_text: bool,
    /// Corrections the loop made to the arguments.
    pub coercions: Vec<Coercion>,
}

/// Why a run stopped.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StopReason {
    /// The model answered without calling a tool.
    #[error("the model answered")]
    Answered,
    /// The turn limit was reached.
    #[error("the turn limit was reached")]
    TurnLimit,
    /// The token budget was spent.
    #[error("the token budget was spent")]
    TokenBudget,
    /// The run was cancelled.
    #[error("the run was cancelled")]
    Cancelled,
    /// The model kept sending a call that had already failed.
    #[error("the model sent the same failing call to `{tool}` again ({code})")]
    RepeatedFailure {
        /// The tool.
        tool: String,
        /// The code the call failed with.
        code: ErrorCode,
    },
    /// More repair turns were needed than allowed.
    #[error("the model needed more than {limit} repair turns")]
    RepairLimit {
        /// The limit.
        limit: u32,
    },
    /// The provider failed.
    #[error("the provider failed: {0}")]
    Provider(#[source] ProviderError),
    /// The tool surface failed.
    #[error("the tool surface failed: {0}")]
    Surface(#[source] SurfaceError),
}

impl StopReason {
    /// A stable string naming the reason.
    pub fn code(&self) -> &'static str {
        match self {
            StopReason::Answered => "answered",
            StopReason::TurnLimit => "turn_limit",
            StopReason::TokenBudget => "token_budget",
            StopReason::Cancelled => "cancelled",
            StopReason::RepeatedFailure { .. } => "repeated_failure",
            StopReason::RepairLimit { .. } => "repair_limit",
            StopReason::Provider(_) => "provider_error",
            StopReason::Surface(_) => "surface_error",
        }
    }
}

/// What a run did and why it stopped.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Why it stopped.
    pub stop: StopReason,
    /// The model's last text (its answer when `stop` is [`StopReason::Answered`]).
    pub text: String,
    /// Every tool call, in order.
    pub calls: Vec<CallRecord>,
    /// Turns that followed a retryable failure.
    pub repair_turns: u32,
    /// Model turns taken.
    pub turns: u32,
    /// Tokens spent over all turns.
    pub usage: Usage,
    /// The whole conversation, to persist or to resume with another run.
    pub messages: Vec<Message>,
}

impl RunOutcome {
    /// Whether the model answered.
    pub fn answered(&self) -> bool {
        matches!(self.stop, StopReason::Answered)
    }
}

/// What happens during a run, for an app's UI.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AgentEvent {
    /// A model turn starts (1-based).
    TurnStarted {
        /// The turn.
        turn: u32,
    },
    /// Text arrived (streaming runs emit it piece by piece; others once per turn).
    TextDelta {
        /// The text.
        text: String,
    },
    /// A tool is about to be called.
    ToolCalled {
        /// The call, with the arguments as they will be sent.
        call: ToolCall,
        /// Whether it was recovered from the text.
        recovered_from_text: bool,
        /// Corrections made to the arguments.
        coercions: Vec<Coercion>,
    },
    /// A tool call finished.
    ToolResult {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// How it ended.
        outcome: CallOutcome,
        /// The text the model is given.
        text: String,
    },
}

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
    /// Writes that succeeded in this run (tool, arguments) -> the result the model was given.
    done_writes: HashMap<(String, String), String>,
    /// The next turn is answer-only: the model repeated a write that already succeeded.
    answer_now: bool,
    repair_turns: u32,
    turns: u32,
    usage: Usage,
    text: String,
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
            done_writes: HashMap::new(),
            answer_now: false,
            repair_turns: 0,
            turns: 0,
            usage: Usage::default(),
            text: String::new(),
        };
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
        }
    }
}

/// The answer to a repeated identical write: the earlier result, and what to do instead.
fn duplicate_note(name: &str, earlier: &str) -> String {
    format!(
        "Not run again: this exact call to `{name}` already succeeded earlier in this conversation. Its result was: {earlier}\nDo not repeat it. Tell the user what was done."
    )
}

/// Added to a final refusal so a small model stops trying.
fn final_note(name: &str) -> String {
    format!(
        "\nThis is final: do not call `{name}` again. Continue without it, or tell the user what you could not do."
    )
}

impl Run<'_> {
    fn emit(&self, make: impl FnOnce() -> AgentEvent) {
        if let Some(tx) = self.events {
            let _ = tx.send(make());
        }
    }

    async fn drive(&mut self) -> StopReason {
        let tools = tokio::select! {
            biased;
            () = self.cancel.cancelled() => return StopReason::Cancelled,
            t = self.agent.surface.tools() => t,
        };
        match tools {
            Ok(tools) => {
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
            Err(e) => return StopReason::Surface(e),
        }
        let config = &self.agent.config;
        let mut repair_pending = false;
        loop {
            if self.cancel.is_cancelled() {
                return StopReason::Cancelled;
            }
            if self.turns >= config.max_turns {
                return StopReason::TurnLimit;
            }
            if repair_pending {
                if self.repair_turns >= config.max_repair_turns {
                    return StopReason::RepairLimit {
                        limit: config.max_repair_turns,
                    };
                }
                self.repair_turns += 1;
            }
            self.turns += 1;
            let turn = self.turns;
            self.emit(|| AgentEvent::TurnStarted { turn });
            let answer_only = std::mem::take(&mut self.answer_now);
            let turn_choice = if answer_only {
                Some(ToolChoice::None)
            } else if turn == 1 {
                config.first_turn_tool_choice.clone()
            } else {
                None
            };
            let overridden = turn_choice.is_some();
            if let Some(choice) = turn_choice {
                self.request.options.tool_choice = choice;
            }
            let response = self.model_turn().await;
            if overridden {
                self.request
                    .options
                    .tool_choice
                    .clone_from(&config.options.tool_choice);
            }
            let response = match response {
                Ok(r) => r,
                Err(ProviderError::Cancelled) => return StopReason::Cancelled,
                Err(e) => return StopReason::Provider(e),
            };
            self.usage.add(response.usage);
            let ChatResponse {
                text, tool_calls, ..
            } = response;
            let (calls, recovered, text_flags) =
                self.calls_of(text.as_str(), tool_calls, !answer_only);
            if calls.is_empty() {
                self.text.clone_from(&text);
                self.request.messages.push(Message::assistant(text));
                return StopReason::Answered;
            }
            if let Some(budget) = config.token_budget
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
            if let Some(stop) = stop {
                return stop;
            }
            repair_pending = retryable;
        }
    }

    async fn model_turn(&self) -> Result<ChatResponse, ProviderError> {
        let provider = &self.agent.provider;
        let fut = async {
            if self.agent.config.stream {
                let stream = provider.chat_stream(&self.request, self.cancel).await?;
                collect_stream(stream, |t| {
                    self.emit(|| AgentEvent::TextDelta {
                        text: t.to_string(),
                    });
                })
                .await
            } else {
                let r = provider.chat(&self.request, self.cancel).await?;
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
    /// (then the flag is set). The list says, per call, whether its arguments were recovered
    /// from a JSON string.
    fn calls_of(
        &self,
        text: &str,
        structured: Vec<ToolCall>,
        recover: bool,
    ) -> (Vec<ToolCall>, bool, Vec<bool>) {
        if !structured.is_empty() || !recover || !self.agent.config.recover_text_calls {
            return (structured, false, Vec::new());
        }
        let visible: HashSet<&str> = self.schemas.keys().map(String::as_str).collect();
        let recovered = recover_calls(text, &visible);
        if !recovered.is_empty() {
            tracing::debug!(
                count = recovered.len(),
                "recovered tool calls from the text"
            );
        }
        let flags = recovered.iter().map(|c| c.arguments_were_text).collect();
        let calls = recovered
            .into_iter()
            .map(|c| ToolCall {
                id: String::new(),
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        (calls, true, flags)
    }

    /// Runs one turn's calls in order. Returns a stop reason if the run must end, and whether a
    /// retryable failure asks for a repair turn.
    async fn run_calls(
        &mut self,
        turn: u32,
        text: String,
        mut calls: Vec<ToolCall>,
        recovered: bool,
        text_flags: Vec<bool>,
    ) -> (Option<StopReason>, bool) {
        let mut coercions_per_call = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter_mut().enumerate() {
            if call.id.is_empty() {
                call.id = format!("call_{turn}_{}", i + 1);
            }
            let mut coercions = Vec::new();
            if text_flags.get(i).copied().unwrap_or(false) {
                coercions.push(Coercion {
                    pointer: String::new(),
                    from: "a JSON string".into(),
                    to: "an object".into(),
                });
            }
            if self.agent.config.coerce_arguments
                && let Some(schema) = self.schemas.get(&call.name)
            {
                coercions.extend(coerce_arguments(&mut call.arguments, schema));
            }
            coercions_per_call.push(coercions);
        }
        // A recovered call's text was the call itself; the stored turn carries it as a call.
        let content = if recovered { String::new() } else { text };
        self.request.messages.push(Message::Assistant {
            content,
            tool_calls: calls.clone(),
        });

        let config = &self.agent.config;
        let mut stop = None;
        let mut retryable = false;
        for (call, coercions) in calls.into_iter().zip(coercions_per_call) {
            if stop.is_some() {
                // Every call in a stored turn gets a result, even the ones not run.
                let text = format!("The call to `{}` was not run: the run stopped.", call.name);
                self.record(
                    turn,
                    call,
                    CallOutcome::Failed(ErrorCode::Cancelled),
                    text,
                    recovered,
                    coercions,
                );
                continue;
            }
            // serde_json's maps are ordered by key here (no `preserve_order`), so the arguments'
            // text is canonical: the same arguments in another order make the same key.
            let write_key = (config.dedupe_writes && !self.read_only.contains(&call.name))
                .then(|| (call.name.clone(), call.arguments.to_string()));
            if let Some(earlier) = write_key.as_ref().and_then(|k| self.done_writes.get(k)) {
                let text = duplicate_note(&call.name, earlier);
                tracing::debug!(tool = %call.name, "a repeated identical write was not run again");
                self.answer_now = true;
                self.record(
                    turn,
                    call,
                    CallOutcome::Duplicate,
                    text,
                    recovered,
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
                        recovered,
                        coercions,
                    );
                    stop = Some(StopReason::Surface(e));
                    continue;
                }
            };
            let Some(code) = result.effective_code() else {
                if let Some(key) = write_key {
                    self.done_writes.insert(key, result.text.clone());
                }
                self.record(
                    turn,
                    call,
                    CallOutcome::Ok,
                    result.text,
                    recovered,
                    coercions,
                );
                continue;
            };
            let mut text = result.text;
            match code {
                ErrorCode::Cancelled => {
                    stop = Some(StopReason::Cancelled);
                }
                c if !c.is_retryable() => text.push_str(&final_note(&call.name)),
                _ => retryable = true,
            }
            if code != ErrorCode::Cancelled {
                let key = (call.name.clone(), call.arguments.to_string());
                let n = self.failures.entry(key).or_insert(0);
                *n += 1;
                if *n >= config.max_identical_failures && stop.is_none() {
                    stop = Some(StopReason::RepeatedFailure {
                        tool: call.name.clone(),
                        code,
                    });
                }
            }
            self.record(
                turn,
                call,
                CallOutcome::Failed(code),
                text,
                recovered,
                coercions,
            );
        }
        (stop, retryable)
    }

    fn record(
        &mut self,
        turn: u32,
        call: ToolCall,
        outcome: CallOutcome,
        text: String,
        recovered: bool,
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
        });
    }
}
