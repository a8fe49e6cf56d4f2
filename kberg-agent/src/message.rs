//! The conversation: what the loop sends to a provider and what it gets back.
//!
//! These types are provider-neutral. Each provider translates them to its own wire shape (Ollama
//! chat messages, OpenAI chat completions, Anthropic content blocks) and back, so the loop never
//! learns any wire. They serialize with serde, so an app can persist a conversation and resume it
//! later by handing the stored messages to [`crate::Agent::run`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The instructions.
        content: String,
    },
    /// What the user said.
    User {
        /// The text.
        content: String,
    },
    /// What the model answered: text, tool calls, or both.
    Assistant {
        /// The text (may be empty when the model only called tools).
        #[serde(default)]
        content: String,
        /// The tool calls, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, answering the assistant call with the same id.
    Tool {
        /// The id of the call this answers.
        call_id: String,
        /// The tool's name (some wires, e.g. Ollama's, identify results by name).
        name: String,
        /// The result as text, for the model.
        content: String,
        /// Whether the call failed (refusal, invalid arguments, tool error).
        #[serde(default)]
        is_error: bool,
    },
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Message::System {
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::Assistant {
            content: content.into(),
            tool_calls: Vec::new(),
        }
    }

    /// The role as a lowercase word (`system`, `user`, `assistant`, `tool`).
    pub fn role(&self) -> &'static str {
        match self {
            Message::System { .. } => "system",
            Message::User { .. } => "user",
            Message::Assistant { .. } => "assistant",
            Message::Tool { .. } => "tool",
        }
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id. Providers that do not assign ids (Ollama) get one from the loop.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments (normally an object).
    pub arguments: Value,
}

/// A tool as the model is shown it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolDefinition {
    /// The tool's name. [`crate::Agent`] shows a name that a hosted provider would refuse (other
    /// than 1 to 64 ASCII letters, digits, `_` and `-`) under a safe alias for the run, and
    /// reads the model's calls back to this name (see the crate README).
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
    /// The tool declares that it does not modify its environment (MCP `readOnlyHint`). The loop
    /// never runs an identical call of a tool that is not read-only twice in one run (see
    /// [`crate::AgentConfig::dedupe_writes`]); unknown means not read-only.
    #[serde(default)]
    pub read_only: bool,
}

impl ToolDefinition {
    /// A tool that is not declared read-only.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            read_only: false,
        }
    }

    /// Declares whether the tool is read-only.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }
}

/// Tokens spent by one turn (or summed over a run).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub input_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
}

impl Usage {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Adds another usage to this one.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }
}

/// How the model should choose tools, where the provider supports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// The model must not call a tool.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool.
    Tool(String),
}

/// Sampling and output options for one turn. Unset fields use the provider's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatOptions {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// The most tokens to generate in this turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// A fixed seed, for providers that support reproducible sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// How tools may be chosen.
    #[serde(default)]
    pub tool_choice: ToolChoice,
}

/// One chat turn's input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    pub tools: Vec<ToolDefinition>,
    /// Options for this turn.
    pub options: ChatOptions,
}

/// Why the model stopped generating, as the provider reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// A natural end of the answer.
    #[default]
    Stop,
    /// The model asked for tools.
    ToolCalls,
    /// The token limit for the turn was reached.
    Length,
    /// Anything else the provider said, verbatim.
    Other(String),
}

/// One chat turn's output: the assistant message and what it cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The text the model produced.
    pub text: String,
    /// The tool calls it made, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens spent, when the provider reports them.
    pub usage: Usage,
    /// Why generation ended.
    pub finish: FinishReason,
    /// The model's thinking, when the server handed it on apart from the text (a reasoning
    /// model behind a server with a reasoning parser: `reasoning_content`, Ollama's
    /// `thinking`); empty otherwise. It is shown to the app, never sent back to the model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thinking: String,
}

impl ChatResponse {
    /// The response as an assistant message.
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            content: self.text.clone(),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conversation_round_trips_through_json() {
        let conv = vec![
            Message::system("be brief"),
            Message::user("add a note"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "add_note".into(),
                    arguments: json!({"title": "x"}),
                }],
            },
            Message::Tool {
                call_id: "c1".into(),
                name: "add_note".into(),
                content: "created x".into(),
                is_error: false,
            },
            Message::assistant("done"),
        ];
        let text = serde_json::to_string(&conv).unwrap();
        let back: Vec<Message> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, conv);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v[2]["role"], "assistant");
        assert_eq!(v[2]["tool_calls"][0]["name"], "add_note");
        assert_eq!(v[3]["call_id"], "c1");
    }

    #[test]
    fn usage_adds_and_saturates() {
        let mut u = Usage {
            input_tokens: 10,
            output_tokens: 5,
        };
        u.add(Usage {
            input_tokens: 1,
            output_tokens: 2,
        });
        assert_eq!(u.total(), 18);
        u.add(Usage {
            input_tokens: u64::MAX,
            output_tokens: 0,
        });
        assert_eq!(u.input_tokens, u64::MAX);
    }
}
