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
//! one value is expected (one call per item), copy their own earlier turns (sent their calls
//! alone, without earlier failures; [`hints`] holds these answers), and miscopy long ids (shown
//! as short handles, see [`id_handles`]).
//!
//! Tools whose names a hosted provider refuses are shown to the model under aliases built per
//! run from the listing, and its calls read back to the real names ([`crate::names`]); the run
//! holds real names only.
//!
//! Before a call runs, calls written into the text are recovered (only for tools on the surface;
//! see [`crate::recover_calls`]) and unambiguous argument mistakes are corrected (see
//! [`crate::coerce_arguments`]); both are recorded in the outcome.
//!
//! The loop is split by job: this module holds the agent and one run's state; [`turn`] is the
//! turn loop and its stop reasons, [`history`] what the model is sent (as distinct from what is
//! stored), [`repair`] how what the model wrote becomes calls, [`dispatch`] running them and the
//! failure bookkeeping, [`hints`] what the model is told instead of or beside a result, and
//! [`id_handles`] the run's short handles for long ids.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kberg_core::canonical_json;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::coerce::Coercion;
use crate::config::AgentConfig;
use crate::message::{ChatRequest, FinishReason, Message, ToolCall, ToolDefinition, Usage};
use crate::outcome::{AgentEvent, CallRecord, Interventions, RunOutcome, StopReason};
use crate::provider::InferenceProvider;
use crate::surface::ToolSurface;

mod dispatch;
mod hints;
mod history;
mod id_handles;
mod repair;
mod turn;

pub(crate) use self::dispatch::Limit;

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
    /// An argument is a handle the run never issued: answered, never sent.
    unknown_handle: Option<id_handles::UnknownHandle>,
    /// The model's message was cut off at the token limit while it wrote these arguments (they
    /// are the JSON text as far as it got): answered, never sent.
    cut_off: bool,
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
    /// A write the user did not ask for was held: the request is done.
    Done,
}

/// The grounds of a run's conversation ([`crate::ground::Grounds`]) and how many of its
/// messages they hold.
#[derive(Default)]
struct GroundsSoFar {
    grounds: crate::ground::Grounds,
    seen: usize,
}

impl std::ops::Deref for GroundsSoFar {
    type Target = crate::ground::Grounds;

    fn deref(&self) -> &Self::Target {
        &self.grounds
    }
}

struct Run<'a> {
    agent: &'a Agent,
    cancel: &'a CancellationToken,
    events: Option<&'a UnboundedSender<AgentEvent>>,
    request: ChatRequest,
    /// The names the model is shown for the listed tools ([`crate::names`]): built from the
    /// listing at the run's start; the run itself holds real names only.
    names: crate::names::ToolNames,
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
    /// Whether a turn cut off while the model thought was given again (once a run).
    thinking_resumed: bool,
    /// The word that the last turn was cut off while the model thought, for the next turn
    /// only: an answer-only turn in its short form is rebuilt from the run's results, so it
    /// carries the word itself ([`crate::AgentConfig::focused_answer_turns`]).
    cut_off_note: Option<String>,
    /// Whether the model was asked to look before answering.
    asked_to_look: bool,
    /// The one tool the next turn lists ([`AgentConfig::narrow_after_guessed_ids`]).
    narrow_to: Option<String>,
    /// How many of the conversation's first messages are the caller's (the rest are the run's):
    /// the user's own words, for [`crate::ground`].
    user_messages: usize,
    /// Indices of assistant messages whose calls were recovered from the text: sent to the
    /// model as the calls alone when [`AgentConfig::compact_recovered_turns`] is on.
    recovered_turns: Vec<usize>,
    /// Short handles for the long ids in the conversation ([`AgentConfig::id_handles`]).
    handles: id_handles::IdHandles,
    /// Where the conversation's values come from, kept between the writes it checks.
    grounds: std::sync::Mutex<GroundsSoFar>,
    /// How many of the conversation's tool results, oldest first, the model is sent as a note
    /// that they were removed ([`AgentConfig::elide_results_on_overflow`]).
    elided_results: usize,
    /// How many of an answer-only turn's short form's results, oldest first, are shown as
    /// removed ([`AgentConfig::elide_results_on_overflow`]).
    focused_elided: usize,
    repair_turns: u32,
    turns: u32,
    /// Why the last model turn ended.
    last_finish: FinishReason,
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
            names: crate::names::ToolNames::default(),
            schemas: HashMap::new(),
            read_only: HashSet::new(),
            calls: Vec::new(),
            failures: HashMap::new(),
            done: HashMap::new(),
            answer_now: AnswerNow::No,
            pending_stop: None,
            asked_for_words: false,
            thinking_resumed: false,
            cut_off_note: None,
            asked_to_look: false,
            narrow_to: None,
            user_messages: 0,
            recovered_turns: Vec::new(),
            handles: id_handles::IdHandles::default(),
            grounds: std::sync::Mutex::default(),
            elided_results: 0,
            focused_elided: 0,
            repair_turns: 0,
            turns: 0,
            last_finish: FinishReason::Stop,
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
            last_finish: run.last_finish,
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

    fn install_tools(&mut self, mut tools: Vec<ToolDefinition>) {
        // A name listed twice (a server whose list pages repeat an entry) is offered once, as
        // first listed: hosted APIs refuse a request whose tools repeat a name, and a later
        // entry must not turn a write into a read.
        let mut seen = std::collections::HashSet::new();
        tools.retain(|t| seen.insert(t.name.clone()));
        // Names a hosted provider refuses are shown under aliases, mapped back on the way in.
        self.names = crate::names::ToolNames::new(tools.iter().map(|t| t.name.as_str()));
        if !self.names.is_identity() {
            tracing::debug!(
                aliases = ?self.names,
                "tools whose names a provider may refuse are shown under aliases"
            );
        }
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
}
