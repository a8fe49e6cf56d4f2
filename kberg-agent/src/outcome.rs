//! What a run reports: each call's outcome, why the run stopped, what the loop did for the model,
//! and the events a UI sees while it runs.
//!
//! [`RunOutcome::answered`] is true only when the model answered the user in words: a run whose
//! last text was a call or a tool's JSON stops with [`StopReason::NoAnswer`], so an app never
//! shows call JSON as if it were the answer.

use kberg_core::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::coerce::Coercion;
use crate::message::{FinishReason, Message, ToolCall, Usage};
use crate::provider::ProviderError;
use crate::surface::SurfaceError;

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
    /// The write was not run: it was listed after a read in the same turn, before the model
    /// saw the read's result, and the model was asked to call it again if still needed
    /// ([`AgentConfig::hold_writes_after_reads`](crate::AgentConfig)).
    Held,
    /// The write was not run: a write had already succeeded and this one carried no value
    /// from the user's words that the run's writes had not, so nobody asked for it
    /// ([`AgentConfig::stop_unrequested_writes`](crate::AgentConfig)).
    Unrequested,
}

impl CallOutcome {
    /// `ok`, or the error code's stable string.
    pub fn as_str(&self) -> &'static str {
        match self {
            CallOutcome::Ok => "ok",
            CallOutcome::Duplicate => "duplicate",
            CallOutcome::Failed(c) => c.as_str(),
            CallOutcome::Held => "held",
            CallOutcome::Unrequested => "unrequested",
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
    /// Whether the call was never sent to the surface: the tool is not listed, the call was
    /// past [`AgentConfig::max_calls_per_turn`](crate::AgentConfig) in its message, or a check
    /// held it back (a handle, a value with no source, [`CallOutcome::Held`],
    /// [`CallOutcome::Unrequested`]), and the model was told why.
    #[serde(default)]
    pub not_sent: bool,
    /// What the tool meant for the user only, which the model was not given
    /// ([`crate::ToolResult::user_text`]): for the app to show. Empty when there was none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_text: String,
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
    /// The model's last turn held no answer in words: only JSON (a call, a tool's result) or
    /// nothing, after it was asked once to answer in words (when
    /// [`AgentConfig::ask_for_words`](crate::AgentConfig) is on).
    #[error("the model did not answer in words")]
    NoAnswer,
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
            StopReason::NoAnswer => "no_answer",
        }
    }
}

/// What the loop did for the model in a run, by behaviour (each an
/// [`AgentConfig`](crate::AgentConfig) option). All zero means no behaviour changed the run.
/// A count missing from stored JSON (written before it existed) reads as zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Interventions {
    /// Identical calls within one turn dropped before running.
    pub calls_collapsed: u32,
    /// Identical repeats of a successful write not run again.
    pub writes_deduplicated: u32,
    /// Identical repeats of a successful read not run again.
    pub reads_deduplicated: u32,
    /// Answer-only turns because the turn limit or token budget was nearly spent.
    pub final_answer_turns: u32,
    /// Text calls to unlisted tools answered with the reason (never run).
    pub unlisted_explained: u32,
    /// Malformed call-like texts answered with a parse diagnostic.
    pub parse_diagnostics: u32,
    /// Times the model was asked to answer in words.
    pub words_requested: u32,
    /// Turns cut off at the output limit while the model still thought (no answer, no call),
    /// answered by telling it so and giving it the same kind of turn again.
    pub thinking_cut_off: u32,
    /// Failed calls with an id argument answered with a hint naming the tool that finds ids.
    pub id_hints: u32,
    /// Argument corrections made.
    pub coercions: u32,
    /// Arguments that were a copy of the tool's schema, replaced by the values they held.
    pub schema_echoes_unwrapped: u32,
    /// Writes not run because an id or number argument had no source in the conversation.
    pub ungrounded_writes: u32,
    /// Answers given before any tool ran, answered with a request to look first.
    pub look_first_requests: u32,
    /// Recovered turns shown to the model as their calls alone.
    pub turns_compacted: u32,
    /// Undeclared arguments removed from calls to read-only tools.
    pub read_arguments_dropped: u32,
    /// Calls split into one call per item of a list argument.
    pub calls_split: u32,
    /// Turns sent to the model without earlier turns' failed calls.
    pub failures_forgotten: u32,
    /// Long ids given a short handle in what the model is sent.
    pub handles_issued: u32,
    /// Handles the model wrote that were replaced by the ids they stand for.
    pub handles_resolved: u32,
    /// Calls not sent because an argument was a handle the run never issued, or an issued
    /// handle's number without its `#` (counted in [`Interventions::handles_without_hash`]
    /// too).
    pub unknown_handles: u32,
    /// Calls not sent because an id argument was an issued handle's number written without its
    /// `#` (`"1"` for `#1`); the model was shown the call with the handle.
    pub handles_without_hash: u32,
    /// Writes not run because a text argument was not in the user's words.
    pub ungrounded_texts: u32,
    /// Writes not run because a write had succeeded and nobody asked for this one.
    pub unrequested_writes: u32,
    /// Writes not run because they were listed after a read in the same turn.
    pub writes_held: u32,
    /// Answer-only turns sent in their short form: the run's results and the request, no tools
    /// ([`AgentConfig::focused_answer_turns`](crate::AgentConfig)).
    #[serde(default)]
    pub answer_turns_focused: u32,
    /// Turns sent with only the tool that finds ids listed, after a write with a guessed id
    /// ([`AgentConfig::narrow_after_guessed_ids`](crate::AgentConfig)).
    #[serde(default)]
    pub turns_narrowed: u32,
    /// Calls given an id of their own because another call of the conversation already had
    /// theirs (hosted APIs refuse two calls or two results with one id).
    #[serde(default)]
    pub call_ids_renamed: u32,
    /// Tool results replaced, in what the model is sent, by a note that they were removed to
    /// fit the model's context window
    /// ([`AgentConfig::elide_results_on_overflow`](crate::AgentConfig)).
    #[serde(default)]
    pub results_elided: u32,
}

/// What a run did and why it stopped.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Why it stopped.
    pub stop: StopReason,
    /// The model's last text. It is the answer when [`RunOutcome::answered`] is true; otherwise
    /// it is whatever the model wrote last (possibly a call or JSON), kept for diagnosis.
    pub text: String,
    /// Every tool call, in order.
    pub calls: Vec<CallRecord>,
    /// Turns that followed a retryable failure.
    pub repair_turns: u32,
    /// Model turns taken.
    pub turns: u32,
    /// Why the model's last turn ended, as its provider said. [`FinishReason::Length`] means
    /// its text was cut off at the token limit (`ChatOptions::max_tokens`, or the server's
    /// own): an answer that ends there is half of one, though the run counts it as answered.
    pub last_finish: FinishReason,
    /// Tokens spent over all turns.
    pub usage: Usage,
    /// The whole conversation, to persist or to resume with another run. An assistant turn
    /// whose calls were recovered from its text keeps that text beside the calls.
    pub messages: Vec<Message>,
    /// What the loop's small-model behaviours did.
    pub interventions: Interventions,
}

impl RunOutcome {
    /// Whether the model answered the user in words (the run stopped with
    /// [`StopReason::Answered`]; an answer that was only JSON is never counted).
    pub fn answered(&self) -> bool {
        matches!(self.stop, StopReason::Answered)
    }

    /// The model's answer in words, if it gave one.
    pub fn answer(&self) -> Option<&str> {
        self.answered().then_some(self.text.as_str())
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
    /// A reasoning model's thinking arrived: handed on by the server apart from the text
    /// ([`crate::ChatResponse::thinking`]), or written into the text inside `<think>` tags and
    /// taken out of the answer ([`AgentConfig::strip_thinking`](crate::AgentConfig)). Streaming
    /// runs emit it piece by piece, others once per turn.
    ThinkingDelta {
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
    /// A running tool reported progress (between the call's [`AgentEvent::ToolCalled`] and its
    /// [`AgentEvent::ToolResult`]; each report's `progress` exceeds the call's previous one).
    /// Only a run with events asks tools for progress.
    ToolProgress {
        /// The call's id.
        call_id: String,
        /// The tool.
        name: String,
        /// How far the tool is.
        progress: f64,
        /// The figure `progress` reaches when the tool is done, if the tool knows it.
        total: Option<f64>,
        /// What the tool is doing, in its own words.
        message: Option<String>,
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
        /// What the tool meant for the user only, which the model is not given
        /// ([`crate::ToolResult::user_text`]): for the app to show. Empty when there is none.
        user_text: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts stored before a behaviour existed read as zero, so a stored outcome stays
    /// readable when a count is added.
    #[test]
    fn stored_interventions_without_a_newer_count_read_as_zero() {
        let i: Interventions =
            serde_json::from_value(serde_json::json!({"words_requested": 2})).unwrap();
        assert_eq!(i.words_requested, 2);
        assert_eq!(i.thinking_cut_off, 0);
    }
}
