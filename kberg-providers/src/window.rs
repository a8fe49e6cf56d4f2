//! Refusals of a conversation longer than the model's context window, told apart from other
//! refusals so that the agent loop (or an app) can shorten the conversation and send the turn
//! again instead of failing the run.
//!
//! No two servers say it alike, so it is recognised by each one's documented shape: OpenAI's
//! error `code` `context_length_exceeded`, llama.cpp server's error `type`
//! `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`, and the words of vLLM
//! ("This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"),
//! Anthropic ("prompt is too long: 215000 tokens > 200000 maximum"), LM Studio and Ollama
//! ("the input length exceeds the context length", or llama.cpp's error quoted as its own text).
//! The sizes are read where the server gives them; a refusal without them is still recognised.
//! It is recognised under a 4xx and also in an error object written into a 200 (a gateway or
//! proxy that answers every turn 200, or an error event of a stream already under way).

use kberg_agent::ProviderError;
use serde_json::Value;

/// Words that, in a refusal (an HTTP 4xx or an error in the reply), say the conversation did
/// not fit the context window. Lower case; matched against the lower-cased message.
const OVERFLOW_WORDS: &[&str] = &[
    // OpenAI, vLLM, Mistral: "This model's maximum context length is N tokens."
    "maximum context length",
    "context_length_exceeded",
    // OpenAI's newer wording: "Your input exceeds the context window of this model."
    "exceeds the context window",
    // llama.cpp server: "the request exceeds the available context size, try increasing it".
    "exceeds the available context size",
    "exceed_context_size_error",
    // Ollama's runners: "the input length exceeds the context length".
    "exceeds the context length",
    // Ollama on llama-server: "the prompt is longer than the context length currently
    // available to the model".
    "longer than the context length",
    // LM Studio: "... is greater than the context length".
    "greater than the context length",
    // Anthropic: "prompt is too long: 215000 tokens > 200000 maximum", and "input length and
    // `max_tokens` exceed context limit: 188240 + 21333 > 200000".
    "prompt is too long",
    "exceed context limit",
];

/// What a context-window refusal said about the sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow {
    /// The tokens the request needed.
    pub requested: Option<u64>,
    /// The context window.
    pub limit: Option<u64>,
}

impl Overflow {
    /// The provider error for this refusal: `detail` (the server's words) and `hint` (what to
    /// do, for this server, without a "; " in it), joined by "; ", which is how
    /// `endpoint::scrub_error` finds the hint to keep when it cuts a long refusal.
    pub(crate) fn error(self, detail: &str, hint: &str) -> ProviderError {
        ProviderError::ContextTooLong {
            requested: self.requested,
            limit: self.limit,
            detail: format!("{detail}; {hint}"),
        }
    }
}

/// Whether `reply` (the error body as JSON, when it is JSON) or `text` (its message) refuses
/// the conversation as longer than the context window, and the sizes it names.
pub(crate) fn overflow(reply: Option<&Value>, text: &str) -> Option<Overflow> {
    // Ollama quotes llama-server's JSON error as the text of its own.
    let quoted = text
        .trim_start()
        .starts_with('{')
        .then(|| serde_json::from_str::<Value>(text).ok())
        .flatten();
    let errors: Vec<&Value> = [reply, quoted.as_ref()]
        .into_iter()
        .flatten()
        .map(|v| v.get("error").filter(|e| e.is_object()).unwrap_or(v))
        .collect();
    let field = |name: &str| errors.iter().find_map(|e| e.get(name));
    let structured = field("code").and_then(Value::as_str) == Some("context_length_exceeded")
        || field("type").and_then(Value::as_str) == Some("exceed_context_size_error");
    let lower = text.to_ascii_lowercase();
    if !structured && !OVERFLOW_WORDS.iter().any(|w| lower.contains(w)) {
        return None;
    }
    let number = |name: &str| field(name).and_then(Value::as_u64);
    Some(Overflow {
        requested: number("n_prompt_tokens").or_else(|| {
            [
                "resulted in ",
                "you requested ",
                "your request has ",
                "prompt is too long: ",
            ]
            .iter()
            .find_map(|w| number_after(&lower, w))
        }),
        limit: number("n_ctx").or_else(|| {
            ["maximum context length is ", " tokens > ", " > "]
                .iter()
                .find_map(|w| number_after(&lower, w))
        }),
    })
}

/// The error for an error object written into a 200 (a gateway or proxy that answers every
/// turn 200, or an error event of a stream already under way), when it refuses the
/// conversation as longer than the context window: `error` is the object as the reply holds
/// it, `message` its words (scrubbed of credentials and cut with the rest of the error, by
/// `endpoint::scrub_error`), `hint` what to do, for this server.
pub(crate) fn in_band(error: &Value, message: &str, hint: &str) -> Option<ProviderError> {
    overflow(Some(error), message).map(|o| o.error(message.trim(), hint))
}

/// The number written right after the first `words` in `text`.
fn number_after(text: &str, words: &str) -> Option<u64> {
    let start = text.find(words)? + words.len();
    let digits: &str = &text[start..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(body: &Value) -> Option<Overflow> {
        let text = body
            .pointer("/error/message")
            .or_else(|| body.get("error").filter(|e| e.is_string()))
            .or_else(|| body.get("message"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        overflow(Some(body), text)
    }

    fn sizes(requested: Option<u64>, limit: Option<u64>) -> Option<Overflow> {
        Some(Overflow { requested, limit })
    }

    #[test]
    fn each_servers_refusal_is_recognised_with_its_sizes() {
        // OpenAI.
        let openai = json!({"error": {
            "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130419 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
        assert_eq!(of(&openai), sizes(Some(130_419), Some(128_000)));
        let openai_new = json!({"error": {
            "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}});
        assert_eq!(of(&openai_new), sizes(None, None));
        // vLLM, both wordings.
        let vllm = json!({"object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
            "type": "BadRequestError", "param": null, "code": 400});
        assert_eq!(of(&vllm), sizes(Some(5000), Some(4096)));
        let vllm_new = json!({"error": {"object": "error",
            "message": "This model's maximum context length is 2048 tokens. However, your request has 3000 input tokens. Please reduce the length of the input messages.",
            "type": "BadRequestError", "param": null, "code": 400}});
        assert_eq!(of(&vllm_new), sizes(Some(3000), Some(2048)));
        // llama.cpp server: the sizes are fields.
        let llama = json!({"error": {"code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error", "n_prompt_tokens": 5120, "n_ctx": 4096}});
        assert_eq!(of(&llama), sizes(Some(5120), Some(4096)));
        // Ollama quoting llama-server's error as its own text.
        let ollama_quoting = json!({"error": llama.to_string()});
        assert_eq!(of(&ollama_quoting), sizes(Some(5120), Some(4096)));
        // Ollama's runners.
        let ollama = json!({"error": "the input length exceeds the context length"});
        assert_eq!(of(&ollama), sizes(None, None));
        let ollama_llama_server = json!({"error": "the prompt is longer than the context length currently available to the model; shorten the prompt, adjust the context length in settings, or use a model with a longer context length"});
        assert_eq!(of(&ollama_llama_server), sizes(None, None));
        // Anthropic.
        let anthropic = json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "prompt is too long: 215000 tokens > 200000 maximum"}});
        assert_eq!(of(&anthropic), sizes(Some(215_000), Some(200_000)));
        let anthropic_output = json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, decrease input length or `max_tokens` and try again"}});
        assert_eq!(of(&anthropic_output), sizes(None, Some(200_000)));
        // A body that is not JSON.
        assert_eq!(
            overflow(None, "the input length exceeds the context length"),
            sizes(None, None)
        );
    }

    #[test]
    fn other_refusals_are_not_an_overflow() {
        for body in [
            json!({"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
                "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}),
            json!({"error": {"message": "Invalid 'messages[1].content': string too long.",
                "type": "invalid_request_error", "code": "string_above_max_length"}}),
            json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "messages: text content blocks must be non-empty"}}),
            json!({"error": "model \"qwen\" not found, try pulling it first"}),
            json!({"error": {"code": 400, "message": "bad", "type": "invalid_request_error"}}),
        ] {
            assert_eq!(of(&body), None, "{body}");
        }
    }

    #[test]
    fn sizes_that_are_not_numbers_are_left_out() {
        let odd = json!({"error": {"type": "exceed_context_size_error",
            "message": "the request exceeds the available context size",
            "n_prompt_tokens": "many", "n_ctx": -1}});
        assert_eq!(of(&odd), sizes(None, None));
        let huge = json!({"error": format!(
            "This model's maximum context length is {} tokens.", "9".repeat(40))});
        assert_eq!(of(&huge), sizes(None, None));
    }
}
