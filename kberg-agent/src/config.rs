//! How a run is bounded, and which of the loop's small-model behaviours are on.
//!
//! Every behaviour that exists because small local models misbehave in a known way is an option
//! here, on by default where the task benchmark (`benches/README.md`, "Agent tasks") measured it
//! to help or to cost nothing, so an app can turn off what does not suit its tools. Each option's
//! documentation says what it does and what the model is told.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::message::{ChatOptions, ToolChoice};

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
    /// Use the provider's streaming form and emit [`crate::AgentEvent::TextDelta`]s (default
    /// false).
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
    /// An app whose writes are meant to repeat turns off
    /// [`AgentConfig::stop_unrequested_writes`] too: a repeat carries nothing new.
    pub dedupe_writes: bool,
    /// Run identical calls (same tool, same arguments) within one turn once (default true).
    /// Small models write the same call several times in one message; the copies are dropped
    /// before anything runs and counted in [`crate::Interventions::calls_collapsed`].
    pub collapse_calls_in_turn: bool,
    /// Treat a read repeated with identical arguments like a repeated write (default true): it
    /// is not run again, the model gets the earlier result and an answer-only turn. Turn it off
    /// for apps whose read tools are meant to be polled.
    pub guard_repeated_reads: bool,
    /// Make the last turn answer-only (tool choice `none`, no text-call recovery) when the turn
    /// limit or the token budget is nearly spent and a tool has run, so a run that used its
    /// tools ends with an answer rather than at the limit (default true).
    pub final_answer_turn: bool,
    /// Answer a call written as text to a tool that is not listed (refused, invisible or
    /// unknown) with the reason the gate gives and the names of the tools that are listed,
    /// instead of taking the text as the answer (default true). The tool is never run: the
    /// reason comes from [`crate::ToolSurface::explain_unlisted`], which checks without running.
    /// A structured call to an unlisted tool is answered the same way, and never sent, whatever
    /// this says.
    pub explain_unlisted_calls: bool,
    /// Answer call-like text that does not parse (a `//` comment, doubled braces, a missing
    /// quote) with a short parse diagnostic and a repair turn, instead of taking it as the
    /// answer (default true).
    pub diagnose_malformed_calls: bool,
    /// When the final text is only JSON (a tool's result copied out, a call) or empty, ask the
    /// model once, in an answer-only turn, to answer in words (default true). Without an answer
    /// in words the run stops with [`crate::StopReason::NoAnswer`] whatever this says. A turn
    /// cut off at the output limit while a reasoning model still thought (thinking, no text,
    /// no call) is first given once more, as the same kind of turn, with a word that it was
    /// cut off ([`crate::Interventions::thinking_cut_off`]).
    pub ask_for_words: bool,
    /// When a call that passed an id argument fails, tell the model which tool finds ids
    /// (default true): the tool named with [`AgentConfig::id_source`] for that argument, or else
    /// a listed read-only tool whose name starts with `search`, `find` or `list`.
    pub id_hints: bool,
    /// Per argument name, the tool that lists or searches its ids.
    pub id_sources: HashMap<String, String>,
    /// Replace arguments that are a copy of the tool's JSON Schema (`{"type": "object",
    /// "properties": {}}`, what small models write for a tool without arguments) with the
    /// values they hold (default true; see [`crate::unwrap_schema_echo`]).
    pub unwrap_schema_arguments: bool,
    /// Do not run a write whose id argument appears neither in the user's words nor in a tool
    /// result that succeeded, or whose number argument is not in the user's words; tell the
    /// model which value has no source, which tool finds ids, and what the user asked (default
    /// true). It stops invented ids, fields copied from a record just read, and writes nobody
    /// asked for. Turn it off for apps whose writes take numbers the model must compute.
    pub ground_write_arguments: bool,
    /// When the model answers before any tool has run and the surface lists a read-only tool,
    /// ask it once to look the answer up with a tool, or to repeat its answer if it needs no
    /// data (default true). Small models answer questions about the app's data from nothing.
    pub look_before_answering: bool,
    /// In the conversation sent to the model, show a turn whose calls were recovered from its
    /// text as the calls alone (each once), not the text it wrote (default true). Small models
    /// copy their previous message, repeated and stale calls included; the stored conversation
    /// ([`crate::RunOutcome::messages`]) keeps what the model wrote.
    pub compact_recovered_turns: bool,
    /// Remove, from a call to a read-only tool whose schema is closed
    /// (`additionalProperties: false`), the arguments it does not declare (default true; see
    /// [`crate::drop_unknown_arguments`]). Small models add schema keywords (`"type":
    /// "string"`) or fields of the record they read; a write with an unknown key still gets
    /// the gate's diagnostic, since what the model meant by it is unknown.
    pub drop_unknown_read_arguments: bool,
    /// Split a call whose one string argument holds a list of strings into one call per item
    /// (default true): `add_tag` with `"tag": ["work", "urgent"]` runs as two calls. Each call
    /// passes the gate on its own.
    pub split_array_arguments: bool,
    /// In the conversation sent to the model, leave out the failed calls of earlier turns and
    /// their results (default true): the model keeps the last turn's failures to repair, and
    /// no longer copies calls that failed before. The stored conversation keeps everything.
    pub forget_old_failures: bool,
    /// Show each long opaque id (a uuid, a hash, a path) in what the model is sent as a short
    /// handle (`#1`), and replace a handle in a call's arguments with the id it stands for before
    /// the call is checked or run (default **false**, from the measurement: on the task benchmark
    /// with uuid ids Qwen2.5-Coder-0.5B passed 12/20 without handles and 7/20 with them, since it
    /// copies uuids correctly and drops the `#` of a handle). For a model that miscopies long ids,
    /// which copies `#1`. The stored conversation, the outcome and the tools see only the real ids;
    /// a handle the run never issued is answered with a repair turn, never sent. Once a run has
    /// issued a handle, an argument that is exactly `#` and digits is read as a handle.
    pub id_handles: bool,
    /// Do not run a write whose text argument (a string the schema declares without `enum` or
    /// `format`, not an id) is not in the user's own words, as whole words; tell the model the
    /// value has no source and quote the request (default false: on a live model it changed no
    /// outcome, see `benches/README.md`, agent tasks round 5). It stops a tag or a title copied
    /// from a record just read and a note nobody asked for. Arguments the model is meant to write
    /// itself (a summary, a message) are named with [`AgentConfig::composed_argument`] and never
    /// checked.
    pub ground_write_text: bool,
    /// Text arguments the model composes itself, exempt from [`AgentConfig::ground_write_text`]
    /// and never counted as the user's values.
    pub composed_arguments: HashSet<String>,
    /// Once a write has succeeded in the run, do not run a further write that the user did not ask
    /// for, and make the next turn answer-only (default false: on a live model it cut tool calls by
    /// a fifth and changed no outcome, and it can hold a legitimate write, below; see
    /// `benches/README.md`, agent tasks round 5). A write is *requested* when it carries a value
    /// from the user's own words (a number the user gave, a text in the user's words, an id the
    /// user gave) that no write that succeeded in this run carried: "tag note 63 with work and
    /// urgent" requests two `add_tag` calls, one per tag, but after `set_priority` of note 42 to 5,
    /// an `add_tag` or `add_note` whose values come from a result, or reuse the 42 and the 5, is
    /// not requested. The model is told what succeeded and asked to answer in words. Leave it off
    /// for apps whose requests fan out over records a search finds ("tag all my health notes"): the
    /// second record's write reuses the user's values and would be held.
    pub stop_unrequested_writes: bool,
    /// Within one turn, do not run a write listed after a read that ran in that turn: the model
    /// wrote it before it saw the read's result (default false: on a live model it changed no
    /// outcome, see `benches/README.md`, agent tasks round 5). The model is told to call it again,
    /// with values from the result, if it is still needed. A read answered from an earlier result
    /// (a repeat, [`AgentConfig::guard_repeated_reads`]) does not hold a write: its result was
    /// seen.
    pub hold_writes_after_reads: bool,
    /// Send an answer-only turn (the last turn, one after a repeat, a request for words) as a
    /// short conversation: the caller's messages, then the results of the run's calls in one
    /// message, each once, and the request to answer from them, with no tools listed (default
    /// true: on the task benchmark it turned reads whose answer the model had already read
    /// into answers, see `benches/README.md`, agent tasks round 6). A model that writes its
    /// calls as text is told how to call tools by the tool listing itself, and ignores tool
    /// choice `none`; without the listing and its own earlier calls in view it answers in
    /// words. That message replaces, for the turn, what the loop's other notes told the model
    /// (a repeat's "answer now", the request for words): the run's results and the request say
    /// the same. The stored conversation keeps every turn and note as it happened.
    pub focused_answer_turns: bool,
    /// After a write was not run because its id argument had no source
    /// ([`AgentConfig::ground_write_arguments`]), send the next turn with only the tool that
    /// finds ids listed (the one named with [`AgentConfig::id_source`], else a read-only
    /// `search*`, `find*` or `list*` tool), unless that tool already ran in the run. A model
    /// that writes its calls as text copies its own guessed call again when the whole listing
    /// is in view; with one tool listed it calls that one. Calls to other tools in that turn
    /// are still handled as usual (default true: on the task benchmark it won two of five
    /// multi-step chains, see `benches/README.md`, agent tasks round 6).
    pub narrow_after_guessed_ids: bool,
    /// How long one tool call may go without a sign of work before it is cancelled (default
    /// 60 s; `None`: no limit). A sign of work is a progress report the call's sink passes on,
    /// or a poll of the call's task that answers `working`; each one starts the wait anew, so
    /// when this is set every call asks its tool for progress. A call cut off this way is
    /// answered `tool_timeout` (not retryable: what a write did before it stopped is unknown)
    /// and the run goes on, so the model can tell the user. Like
    /// [`AgentConfig::tool_timeout`], it follows the MCP specification's advice that a client
    /// bound every request it sends. The limits use tokio's timer, so a run with either set
    /// needs a runtime with time enabled (`enable_time` or `enable_all`, as `#[tokio::main]`
    /// does); on one without, tokio panics at the first call. A limit is checked after the
    /// call was first polled, as `tokio::time::timeout` does, so a zero limit cuts off every
    /// call that does not answer at once.
    pub tool_idle_timeout: Option<Duration>,
    /// The longest one tool call may take, whatever it reports (default 10 minutes; `None`: no
    /// limit). Past it the call is cancelled and answered `tool_timeout`.
    pub tool_timeout: Option<Duration>,
    /// The most calls run from one model message (default 16; at least 1). The calls of a
    /// message are sent in order (read-only ones a few at once,
    /// [`AgentConfig::concurrent_reads`]), so a model that writes thousands would hold the run
    /// that long; those past the limit (counted after identical calls collapse and lists
    /// split) are not sent, each answered `too_many_calls`, "not run: too many calls in one
    /// message", so every call still has its result. The model may make them in its next
    /// message.
    pub max_calls_per_turn: usize,
    /// The most read-only calls of one model message run at once (default 8; 1 runs every call
    /// after the one before). A model that asks for five files in one message then waits for
    /// the slowest, not for all five in turn. Only tools declared read-only (MCP
    /// `readOnlyHint`, a kberg-core read tool) run together, and only calls listed one after
    /// another: a write runs after every call listed before it has ended, and the calls listed
    /// after it start once it has, so a read may see what the write did. Results are recorded,
    /// and shown to the model, in the order of the calls; each call's
    /// [`crate::AgentEvent::ToolCalled`] comes before it is sent, so the events of calls run
    /// together come first, then their results in order. A read identical to one before it
    /// in the message is not run with it: it gets that read's result
    /// ([`AgentConfig::guard_repeated_reads`]). Each call's tool timeouts count from when it
    /// was sent: against a server that answers one request at a time, the later calls of a
    /// batch wait for the earlier ones within their own limits (set 1 for such a server
    /// whose reads are slow).
    pub concurrent_reads: usize,
    /// The most characters of one tool result the model is sent (default 100,000, some 25,000
    /// tokens; at least 1). A tool, or a remote server, may answer megabytes, which would be
    /// sent again with every later turn and kept in the run's conversation; past the bound the
    /// result is cut, with a note saying how much was left out. The cut result is what the
    /// model, [`crate::RunOutcome::messages`] and the run's events see.
    pub max_result_chars: usize,
    /// When the provider refuses a turn as longer than the model's context window
    /// ([`crate::ProviderError::ContextTooLong`]), send it again with the oldest tool results
    /// replaced by a note saying they were removed to fit and that the tool may be called again
    /// (default true). Each refusal removes half of the results still shown, oldest first, at
    /// least one, the caller's history included; every other message is sent as it was (the
    /// results of the last assistant turn, which the model works from, every call and every
    /// text), and a turn that still does not fit ends the run with the provider's error.
    /// What was removed stays removed for the rest of the run (the conversation only grows),
    /// and is counted in [`crate::Interventions::results_elided`]; the stored conversation
    /// keeps every result. An answer-only turn sent in its short form
    /// ([`AgentConfig::focused_answer_turns`]) is answered the same way: half of its results
    /// still shown, oldest first, are shown as removed (their calls still named), never those
    /// of the last assistant turn; the caller's own messages are sent as they are in that
    /// form. A local model's window (Ollama's `num_ctx`, a llama.cpp server's
    /// `--ctx-size`) is often a few thousand tokens, which a few file reads fill.
    pub elide_results_on_overflow: bool,
    /// Take a reasoning model's thinking out of its text (default true): every `<think>` ...
    /// `</think>` block (or `<thinking>`), what comes before a closing tag no opening tag
    /// precedes (chat templates that open the block themselves, as DeepSeek-R1's distills'
    /// do), and an unclosed block at the end. Servers without a reasoning parser (vLLM without
    /// `--reasoning-parser`, llama-cpp-python) leave the thinking in the text, where it would
    /// be the answer, be sent back with every turn, and be searched for calls written as text:
    /// a call the model only considered would run. The thinking goes to
    /// [`crate::AgentEvent::ThinkingDelta`]; the answer, the stored conversation and call
    /// recovery see the rest. Turn it off for a model whose answers use the tags as text.
    pub strip_thinking: bool,
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
            collapse_calls_in_turn: true,
            guard_repeated_reads: true,
            final_answer_turn: true,
            explain_unlisted_calls: true,
            diagnose_malformed_calls: true,
            ask_for_words: true,
            id_hints: true,
            id_sources: HashMap::new(),
            unwrap_schema_arguments: true,
            ground_write_arguments: true,
            look_before_answering: true,
            compact_recovered_turns: true,
            drop_unknown_read_arguments: true,
            split_array_arguments: true,
            forget_old_failures: true,
            id_handles: false,
            ground_write_text: false,
            composed_arguments: HashSet::new(),
            stop_unrequested_writes: false,
            hold_writes_after_reads: false,
            focused_answer_turns: true,
            narrow_after_guessed_ids: true,
            tool_idle_timeout: Some(Duration::from_secs(60)),
            tool_timeout: Some(Duration::from_secs(600)),
            max_calls_per_turn: 16,
            concurrent_reads: 8,
            max_result_chars: 100_000,
            elide_results_on_overflow: true,
            strip_thinking: true,
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

    /// Turns the collapsing of identical calls within one turn on or off.
    pub fn collapse_calls_in_turn(mut self, on: bool) -> Self {
        self.collapse_calls_in_turn = on;
        self
    }

    /// Turns the repeated-read guard on or off.
    pub fn guard_repeated_reads(mut self, on: bool) -> Self {
        self.guard_repeated_reads = on;
        self
    }

    /// Turns the final answer-only turn on or off.
    pub fn final_answer_turn(mut self, on: bool) -> Self {
        self.final_answer_turn = on;
        self
    }

    /// Turns the explanation of text calls to unlisted tools on or off.
    pub fn explain_unlisted_calls(mut self, on: bool) -> Self {
        self.explain_unlisted_calls = on;
        self
    }

    /// Turns the parse diagnostic for malformed call-like text on or off.
    pub fn diagnose_malformed_calls(mut self, on: bool) -> Self {
        self.diagnose_malformed_calls = on;
        self
    }

    /// Turns the request for an answer in words on or off.
    pub fn ask_for_words(mut self, on: bool) -> Self {
        self.ask_for_words = on;
        self
    }

    /// Turns the id hints on or off.
    pub fn id_hints(mut self, on: bool) -> Self {
        self.id_hints = on;
        self
    }

    /// Names the tool that lists or searches the ids an argument takes (`note_id` ->
    /// `search_notes`), for the id hint.
    pub fn id_source(mut self, argument: impl Into<String>, tool: impl Into<String>) -> Self {
        self.id_sources.insert(argument.into(), tool.into());
        self
    }

    /// Turns the unwrapping of schema-shaped arguments on or off.
    pub fn unwrap_schema_arguments(mut self, on: bool) -> Self {
        self.unwrap_schema_arguments = on;
        self
    }

    /// Turns the source check of write arguments on or off.
    pub fn ground_write_arguments(mut self, on: bool) -> Self {
        self.ground_write_arguments = on;
        self
    }

    /// Turns the request to look before answering on or off.
    pub fn look_before_answering(mut self, on: bool) -> Self {
        self.look_before_answering = on;
        self
    }

    /// Turns the compact form of recovered turns in what the model is sent on or off.
    pub fn compact_recovered_turns(mut self, on: bool) -> Self {
        self.compact_recovered_turns = on;
        self
    }

    /// Turns the removal of undeclared arguments of reads on or off.
    pub fn drop_unknown_read_arguments(mut self, on: bool) -> Self {
        self.drop_unknown_read_arguments = on;
        self
    }

    /// Turns the splitting of list arguments into one call per item on or off.
    pub fn split_array_arguments(mut self, on: bool) -> Self {
        self.split_array_arguments = on;
        self
    }

    /// Turns leaving earlier turns' failed calls out of what the model is sent on or off.
    pub fn forget_old_failures(mut self, on: bool) -> Self {
        self.forget_old_failures = on;
        self
    }

    /// Turns the removal of old tool results on a context-window refusal on or off (see
    /// [`AgentConfig::elide_results_on_overflow`]).
    pub fn elide_results_on_overflow(mut self, on: bool) -> Self {
        self.elide_results_on_overflow = on;
        self
    }

    /// Turns the taking out of a reasoning model's thinking on or off (see
    /// [`AgentConfig::strip_thinking`]).
    pub fn strip_thinking(mut self, on: bool) -> Self {
        self.strip_thinking = on;
        self
    }

    /// Turns short handles for long ids on or off (see [`AgentConfig::id_handles`]).
    pub fn id_handles(mut self, on: bool) -> Self {
        self.id_handles = on;
        self
    }

    /// Turns the source check of write text arguments on or off.
    pub fn ground_write_text(mut self, on: bool) -> Self {
        self.ground_write_text = on;
        self
    }

    /// Names a text argument the model composes itself (a summary, a message body), exempt
    /// from [`AgentConfig::ground_write_text`].
    pub fn composed_argument(mut self, argument: impl Into<String>) -> Self {
        self.composed_arguments.insert(argument.into());
        self
    }

    /// Turns holding back writes the user did not ask for on or off.
    pub fn stop_unrequested_writes(mut self, on: bool) -> Self {
        self.stop_unrequested_writes = on;
        self
    }

    /// Turns holding back writes listed after a read in the same turn on or off.
    pub fn hold_writes_after_reads(mut self, on: bool) -> Self {
        self.hold_writes_after_reads = on;
        self
    }

    /// Turns the short form of answer-only turns on or off (see
    /// [`AgentConfig::focused_answer_turns`]).
    pub fn focused_answer_turns(mut self, on: bool) -> Self {
        self.focused_answer_turns = on;
        self
    }

    /// Turns listing only the id finder after a guessed id on or off (see
    /// [`AgentConfig::narrow_after_guessed_ids`]).
    pub fn narrow_after_guessed_ids(mut self, on: bool) -> Self {
        self.narrow_after_guessed_ids = on;
        self
    }

    /// Sets how long a tool call may go without a sign of work (`None`: no limit; see
    /// [`AgentConfig::tool_idle_timeout`]).
    pub fn tool_idle_timeout(mut self, limit: Option<Duration>) -> Self {
        self.tool_idle_timeout = limit;
        self
    }

    /// Sets the longest a tool call may take (`None`: no limit; see
    /// [`AgentConfig::tool_timeout`]).
    pub fn tool_timeout(mut self, limit: Option<Duration>) -> Self {
        self.tool_timeout = limit;
        self
    }

    /// Sets the most calls run from one model message (at least 1; see
    /// [`AgentConfig::max_calls_per_turn`]).
    pub fn max_calls_per_turn(mut self, n: usize) -> Self {
        self.max_calls_per_turn = n.max(1);
        self
    }

    /// Sets the most read-only calls of one message run at once (at least 1, which runs every
    /// call after the one before; see [`AgentConfig::concurrent_reads`]).
    pub fn concurrent_reads(mut self, n: usize) -> Self {
        self.concurrent_reads = n.max(1);
        self
    }

    /// Sets the most characters of one tool result the model is sent (at least 1; see
    /// [`AgentConfig::max_result_chars`]).
    pub fn max_result_chars(mut self, n: usize) -> Self {
        self.max_result_chars = n.max(1);
        self
    }

    /// Every small-model behaviour off: the loop as it was before they existed (structured and
    /// recovered calls, repair turns, repeated-write guard, coercion only). For comparison.
    pub fn without_small_model_guards(mut self) -> Self {
        self.collapse_calls_in_turn = false;
        self.guard_repeated_reads = false;
        self.final_answer_turn = false;
        self.explain_unlisted_calls = false;
        self.diagnose_malformed_calls = false;
        self.ask_for_words = false;
        self.id_hints = false;
        self.unwrap_schema_arguments = false;
        self.ground_write_arguments = false;
        self.look_before_answering = false;
        self.compact_recovered_turns = false;
        self.drop_unknown_read_arguments = false;
        self.split_array_arguments = false;
        self.forget_old_failures = false;
        self.id_handles = false;
        self.ground_write_text = false;
        self.stop_unrequested_writes = false;
        self.hold_writes_after_reads = false;
        self.focused_answer_turns = false;
        self.narrow_after_guessed_ids = false;
        self
    }
}
