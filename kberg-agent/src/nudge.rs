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

/// A call a tool timeout cut off (see [`crate::AgentConfig::tool_idle_timeout`]).
pub(crate) fn tool_timeout(name: &str, limit: crate::agent::Limit) -> String {
    let what = match limit {
        crate::agent::Limit::Idle(d) => format!("showed no sign of work for {}", seconds(d)),
        crate::agent::Limit::Total(d) => format!("did not finish within {}", seconds(d)),
    };
    format!(
        "The tool `{name}` {what}, so the call was cancelled. Whether it did anything before it stopped is unknown."
    )
}

/// A duration in seconds, as a person writes it: `60 seconds`, `0.25 seconds`.
fn seconds(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s == 1.0 {
        "1 second".to_string()
    } else if d.subsec_nanos() == 0 {
        format!("{} seconds", d.as_secs())
    } else {
        format!("{} seconds", (s * 1000.0).round() / 1000.0)
    }
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

/// The answer to call-like text that does not parse because the message was cut off at the
/// token limit (`max_tokens`, when the run sets one).
pub(crate) fn text_call_cut_off(max_tokens: Option<u32>) -> String {
    format!(
        "Your last message was cut off at {} while you wrote a tool call, so the call is incomplete and was not run. Write it again with shorter arguments, as one JSON object: {{\"name\": \"<tool>\", \"arguments\": {{...}}}}; split a long text over several calls.",
        limit_of(max_tokens)
    )
}

/// One call's result in a focused answer turn: the call as `name(arguments)` and what it
/// returned (or why it failed).
pub(crate) fn focused_result(
    name: &str,
    arguments: &serde_json::Value,
    ok: bool,
    content: &str,
) -> String {
    let args = match arguments {
        serde_json::Value::Object(m) if m.is_empty() => String::new(),
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => format!("{k}: {s}"),
                v => format!("{k}: {v}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        v => v.to_string(),
    };
    let verb = if ok { "returned" } else { "failed" };
    format!("{name}({args}) {verb}:\n{}", content.trim())
}

/// A focused answer turn's one message: the results, then the request to answer from them.
pub(crate) fn focused_answer(results: &[String]) -> String {
    format!(
        "Here is what the app's tools returned for my request:\n\n{}\n\nUsing only these results, answer my request above in one or two short sentences, in plain words. Do not write JSON.",
        results.join("\n\n")
    )
}

/// The answer to a turn cut off at the output limit while the model still thought, before it
/// wrote anything; `tools`: whether the next turn offers tools.
pub(crate) fn thinking_cut_off(max_tokens: Option<u32>, tools: bool) -> String {
    let act = if tools {
        "call the tool you need, or answer the user"
    } else {
        "answer the user in plain words"
    };
    format!(
        "Your last reply was cut off at {} while you were still thinking, before you wrote anything, so nothing was done. Think briefly this time, then act: {act}.",
        limit_of(max_tokens)
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

/// The answer to a call whose argument is a handle no result showed.
pub(crate) fn unknown_handle(tool: &str, argument: &str, handle: &str, known: &str) -> String {
    format!(
        "The call to `{tool}` was not run: `{argument}` is `{handle}`, but no result in this conversation showed `{handle}`. The handles you were shown are {known}: write one exactly as shown."
    )
}

/// The answer to a call whose id argument is a handle's number without its `#`.
pub(crate) fn handle_without_hash(
    tool: &str,
    argument: &str,
    value: &str,
    handle: &str,
    again: &str,
) -> String {
    format!(
        "The call to `{tool}` was not run: `{argument}` \"{value}\" is not an id. Ids are shown as handles such as {handle}: write the handle with its # sign. If you meant {handle}, call it again as: {again}"
    )
}

/// The answer to a write whose id argument has no source.
pub(crate) fn ungrounded_id(
    tool: &str,
    argument: &str,
    value: &str,
    finder: Option<&str>,
    request: &str,
) -> String {
    let next = match finder {
        Some(f) => format!(
            "Call `{f}` first with words from the user's request that name what to change, then call `{tool}` with the `{argument}` it returns. The user asked: \"{request}\""
        ),
        None => format!("Use a `{argument}` from the user's request or from a tool result."),
    };
    format!(
        "Not run: `{argument}` {value} does not come from the user's request or from a tool result, so it is a guess. {next}"
    )
}

/// The answer to a write whose number argument is not in the user's words.
pub(crate) fn ungrounded_value(tool: &str, argument: &str, value: &str, request: &str) -> String {
    format!(
        "Not run: `{argument}` {value} is not a value the user gave. The user asked: \"{request}\"\nIf the user asked for this change, call `{tool}` again with the value from the request. Otherwise do not change anything: answer the user."
    )
}

/// The request to look the answer up before answering.
pub(crate) fn look_first(read_tools: &[String]) -> String {
    format!(
        "You answered without calling a tool, so your answer is not based on the app's data. If the request needs the app's data or a change, call a tool now (for example {}). If it needs neither, repeat your answer.",
        read_tools
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(" or ")
    )
}

/// The answer to a write nobody asked for, after the requested one succeeded.
pub(crate) fn unrequested_write(tool: &str, done: &str, request: &str) -> String {
    format!(
        "Not run: the user's request is done (`{done}` succeeded), and this call to `{tool}` changes something the user did not ask for. The user asked: \"{request}\"\nDo not call another tool. Tell the user, in words, what was done."
    )
}

/// The answer to a call past [`crate::AgentConfig::max_calls_per_turn`] in one message.
pub(crate) fn too_many_calls(tool: &str, limit: usize) -> String {
    format!(
        "The call to `{tool}` was not run: too many calls in one message (at most {limit} are run per message). Make the calls that are still needed in your next message."
    )
}

/// The answer to a call whose arguments were cut off at the token limit (`max_tokens`, when the
/// run sets one).
pub(crate) fn call_cut_off(name: &str, max_tokens: Option<u32>) -> String {
    format!(
        "The call to `{name}` was not run: your message was cut off at {} before its arguments were complete. Send the call again with shorter arguments; split a long text over several calls.",
        limit_of(max_tokens)
    )
}

/// The token limit a message was cut off at, in words.
fn limit_of(max_tokens: Option<u32>) -> String {
    max_tokens.map_or_else(
        || "the length limit".to_string(),
        |n| format!("the limit of {n} tokens"),
    )
}

/// What the model is shown in place of a tool result removed to fit its context window
/// ([`crate::AgentConfig::elide_results_on_overflow`]).
pub(crate) fn result_elided() -> String {
    "(this result was removed to fit the model's context window; call the tool again if you need it)"
        .to_string()
}

/// Ends a tool result cut at [`crate::AgentConfig::max_result_chars`].
pub(crate) fn result_cut(more: usize) -> String {
    format!("\n[The result was cut here: {more} more characters are not shown.]")
}

/// The answer to a write listed after a read in the same turn.
pub(crate) fn write_after_read(tool: &str, read: &str) -> String {
    format!(
        "Not run yet: this call to `{tool}` came after `{read}` in the same message, so it was written before you saw that result. Read the result of `{read}` above, then call `{tool}` again with values from it if the user's request still needs it."
    )
}
