//! What the loop tells the model when it steps in.
//!
//! Each sentence here is written for a small model: short, naming the tool and what to do next.
//! They live in one place so the wording can be measured and changed together (the task
//! benchmark in `benches/` compares the behaviours that send them).

/// The answer to a repeated identical write: the earlier result, and what to do instead.
pub(crate) fn duplicate_write(name: &str, earlier: &str) -> String {
    format!(
        "Not run again: this exact call to `{name}` already succeeded earlier in this conversation. Its result was: {earlier}\nDo not repeat it. Tell the user what was done."
    )
}

/// The answer to a repeated identical read.
pub(crate) fn duplicate_read(name: &str, earlier: &str) -> String {
    format!(
        "Not run again: you already called `{name}` with these arguments. Its result was: {earlier}\nUse this result: answer the user now, in words."
    )
}

/// Added to a final refusal so a small model stops trying.
pub(crate) fn final_refusal(name: &str) -> String {
    format!(
        "\nThis is final: do not call `{name}` again. Continue without it, or tell the user what you could not do."
    )
}

/// The tools the model may call, for a refusal of one it may not.
pub(crate) fn listed_tools(names: &[String]) -> String {
    if names.is_empty() {
        "\nNo tools are available to you.".to_string()
    } else {
        format!("\nThe tools you can call are: {}.", names.join(", "))
    }
}

/// The answer to call-like text that does not parse.
pub(crate) fn parse_diagnostic(error: &str) -> String {
    format!(
        "Your last message looks like a tool call but it is not valid JSON ({error}). To call a tool, write only one JSON object, with no comments: {{\"name\": \"<tool>\", \"arguments\": {{...}}}}. Otherwise answer the user in words."
    )
}

/// The request for an answer in words after a final text that was only JSON.
pub(crate) fn words_request() -> String {
    "Now answer the user in plain words, using the tool results above. Do not write JSON and do not call a tool.".to_string()
}

/// Added to a failed call that passed an id: where ids come from.
pub(crate) fn id_hint(argument: &str, source: &str) -> String {
    format!(
        "\nIf you do not know the right `{argument}`, call `{source}` first to find it. Never guess an id."
    )
}
