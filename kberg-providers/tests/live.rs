//! The live tier: the agent scenarios against a real model server, opt-in by environment.
//!
//! - `KBERG_LIVE_OPENAI_URL` (an OpenAI-compatible API base such as `http://127.0.0.1:8080/v1`)
//!   with `KBERG_LIVE_MODEL` (the model name that server knows), and optionally
//!   `KBERG_LIVE_API_KEY`;
//! - `KBERG_LIVE_OLLAMA_URL` (e.g. `http://127.0.0.1:11434`), with `KBERG_LIVE_MODEL` (default
//!   `qwen2.5`).
//!
//! `KBERG_LIVE_N_CTX`, when set, is the server's context window, which its refusal of a
//! longer conversation must name.
//!
//! Two more switches describe the server and the model:
//! - `KBERG_LIVE_STREAM_TOOLS=0`: the server cannot stream a turn that offers tools with an
//!   automatic tool choice (llama-cpp-python's server says "Automatic streaming tool choice is not
//!   supported" and breaks the stream off), so the streamed variants run without streaming;
//! - `KBERG_LIVE_REQUIRE_ANSWER=1`: the model is capable enough (say a 7B instruct model) that the
//!   run must end with its answer. Tiny models (the 135M one `scripts/live-tier.sh` runs) keep
//!   calling tools until the turn limit; without this switch that is reported, not failed.
//!
//! The tests are `#[ignore]`d: `cargo test` lists them as ignored rather than passing them
//! without a server. `scripts/live-tier.sh` (part of the test command) starts a real server and
//! runs them with `--ignored`; run by hand, `cargo test -p kberg-providers --features
//! ollama,openai --test live -- --ignored` needs the variables above and fails, naming them,
//! when none is set. A real model is not scripted,
//! so the assertions are the loop's guarantees, which hold for any model: a multi-turn tool
//! conversation round-trips through the real server (our tool calls and results in the shape it
//! accepts), a write the caller holds runs, a write the caller lacks never runs, the stored
//! conversation is well formed, the run ends by one of the loop's own bounds rather than an error,
//! and cancelling while the model generates stops the run.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kberg_agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, ChatOptions, InferenceProvider, LocalSurface,
    Message, RunOutcome, StopReason,
};
use kberg_core::{Caller, Principal};
use kberg_providers::HttpOptions;
use kberg_providers::ollama::{OllamaConfig, OllamaProvider};
use kberg_providers::openai::{OpenAiConfig, OpenAiProvider};
use tokio_util::sync::CancellationToken;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn switch(name: &str, default: bool) -> bool {
    match env(name).as_deref() {
        Some("0" | "false" | "no") => false,
        Some(_) => true,
        None => default,
    }
}

/// The live providers configured in the environment, with their labels.
fn providers() -> Vec<(String, Arc<dyn InferenceProvider>)> {
    let http = HttpOptions::default().timeout(Duration::from_secs(300));
    let mut out: Vec<(String, Arc<dyn InferenceProvider>)> = Vec::new();
    if let Some(url) = env("KBERG_LIVE_OPENAI_URL") {
        match env("KBERG_LIVE_MODEL") {
            Some(model) => {
                let mut c = OpenAiConfig::new(model)
                    .base_url(url.clone())
                    .http(http.clone());
                if let Some(k) = env("KBERG_LIVE_API_KEY") {
                    c = c.api_key(k);
                }
                out.push((format!("openai at {url}"), Arc::new(OpenAiProvider::new(c))));
            }
            None => panic!(
                "KBERG_LIVE_OPENAI_URL is set but KBERG_LIVE_MODEL is not: name the model the server serves"
            ),
        }
    }
    if let Some(url) = env("KBERG_LIVE_OLLAMA_URL") {
        let model = env("KBERG_LIVE_MODEL").unwrap_or_else(|| "qwen2.5".into());
        let c = OllamaConfig::new(model).base_url(url.clone()).http(http);
        out.push((format!("ollama at {url}"), Arc::new(OllamaProvider::new(c))));
    }
    assert!(
        !out.is_empty(),
        "the live tier needs a model server: set KBERG_LIVE_OPENAI_URL and KBERG_LIVE_MODEL, or KBERG_LIVE_OLLAMA_URL (scripts/live-tier.sh starts one)"
    );
    out
}

/// The streaming modes to run the tool scenarios in.
fn stream_modes() -> Vec<bool> {
    if switch("KBERG_LIVE_STREAM_TOOLS", true) {
        vec![false, true]
    } else {
        eprintln!(
            "KBERG_LIVE_STREAM_TOOLS=0: the server cannot stream turns that offer tools; streamed variants skipped"
        );
        vec![false]
    }
}

/// Greedy sampling with a fixed seed, so a run against the same server and model repeats, and a
/// bound on each turn's length (a short answer or one call needs far less).
fn options() -> ChatOptions {
    ChatOptions {
        temperature: Some(0.0),
        seed: Some(7),
        max_tokens: Some(200),
        ..ChatOptions::default()
    }
}

/// The configuration of the scenarios: few turns, so a model that never stops calling tools is
/// stopped by the turn limit well inside a small context window.
fn config(stream: bool) -> AgentConfig {
    AgentConfig::default()
        .system_prompt(SYSTEM)
        .options(options())
        .max_turns(4)
        .stream(stream)
}

const SYSTEM: &str = "You manage the user's notes with the tools you are given. Call a tool when the user asks for an action; when a tool answers, reply to the user in one short sentence.";

fn describe(label: &str, out: &RunOutcome) {
    eprintln!(
        "{label}: stop {} after {} turn(s), {} repair(s), calls {:?}, text {:?}",
        out.stop.code(),
        out.turns,
        out.repair_turns,
        out.calls
            .iter()
            .map(|c| (c.name.as_str(), c.outcome.as_str(), c.arguments.to_string()))
            .collect::<Vec<_>>(),
        out.text
    );
}

/// The run ended by one of the loop's own bounds, not by a provider or surface error.
fn assert_clean_stop(label: &str, out: &RunOutcome) {
    assert!(
        matches!(
            out.stop,
            StopReason::Answered
                | StopReason::TurnLimit
                | StopReason::RepeatedFailure { .. }
                | StopReason::RepairLimit { .. }
                // The model wrote no answer in words after being asked (a grammar-constrained
                // server keeps writing calls): a stop of the loop's own too.
                | StopReason::NoAnswer
        ),
        "{label}: {:?}",
        out.stop
    );
    if switch("KBERG_LIVE_REQUIRE_ANSWER", false) {
        assert!(
            out.answered(),
            "{label}: the model did not answer: {:?}",
            out.stop
        );
    }
}

/// Every call in the stored conversation is followed by exactly one result with its id.
fn assert_well_formed(label: &str, out: &RunOutcome) {
    let mut open: HashSet<String> = HashSet::new();
    for m in &out.messages {
        match m {
            Message::Assistant { tool_calls, .. } => {
                assert!(
                    open.is_empty(),
                    "{label}: calls left without results: {open:?}"
                );
                for c in tool_calls {
                    assert!(
                        open.insert(c.id.clone()),
                        "{label}: duplicate call id {}",
                        c.id
                    );
                }
            }
            Message::Tool { call_id, .. } => {
                assert!(
                    open.remove(call_id),
                    "{label}: a result for no call: {call_id}"
                );
            }
            _ => {}
        }
    }
    assert!(
        open.is_empty(),
        "{label}: calls left without results: {open:?}"
    );
}

#[tokio::test]
#[ignore = "needs a model server; scripts/live-tier.sh starts one and runs these with --ignored"]
async fn live_granted_write_runs() {
    for (label, provider) in providers() {
        for stream in stream_modes() {
            let label = format!("{label} (stream {stream})");
            let agent = Agent::from_arcs(Arc::clone(&provider), Arc::new(support::app_surface()))
                .with_config(config(stream));
            let out = agent
                .run(
                    vec![Message::user("Add a note titled \"milk\" with priority 2.")],
                    &CancellationToken::new(),
                )
                .await;
            describe(&label, &out);
            assert_clean_stop(&label, &out);
            assert_well_formed(&label, &out);
            assert!(
                out.calls
                    .iter()
                    .any(|c| c.name == "add_note" && c.outcome == CallOutcome::Ok),
                "{label}: the note was not added: {:?}",
                out.calls
            );
            // The server took the conversation back with our call and its result in it.
            assert!(out.turns >= 2, "{label}: only {} turn(s)", out.turns);
        }
    }
}

#[tokio::test]
#[ignore = "needs a model server; scripts/live-tier.sh starts one and runs these with --ignored"]
async fn live_missing_capability_never_runs() {
    for (label, provider) in providers() {
        // The same app, seen by a caller without `notes.write`.
        let surface = LocalSurface::new(
            kberg_testkit::notes::registry(),
            Caller::new(Principal::new("reader")),
        );
        let agent =
            Agent::from_arcs(Arc::clone(&provider), Arc::new(surface)).with_config(config(false));
        let out = agent
            .run(
                vec![Message::user("Add a note titled \"milk\" with priority 2.")],
                &CancellationToken::new(),
            )
            .await;
        describe(&label, &out);
        assert_clean_stop(&label, &out);
        assert_well_formed(&label, &out);
        assert!(
            out.calls
                .iter()
                .all(|c| c.name != "add_note" || c.outcome != CallOutcome::Ok),
            "{label}: a write ran without its capability: {:?}",
            out.calls
        );
    }
}

#[tokio::test]
#[ignore = "needs a model server; scripts/live-tier.sh starts one and runs these with --ignored"]
async fn live_cancellation_stops_the_run() {
    let stream = switch("KBERG_LIVE_STREAM_TOOLS", true);
    for (label, provider) in providers() {
        let agent = Agent::from_arcs(Arc::clone(&provider), Arc::new(support::app_surface()))
            .with_config(config(stream));
        let cancel = CancellationToken::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let c = cancel.clone();
        let run = tokio::spawn(async move {
            agent
                .run_with_events(
                    vec![Message::user("Write a long story about notes.")],
                    &c,
                    tx,
                )
                .await
        });
        // Streaming: cancel as soon as the model starts to answer (or a tool runs). Otherwise
        // cancel while the first request is in flight.
        while let Some(ev) = rx.recv().await {
            match ev {
                AgentEvent::TextDelta { .. } | AgentEvent::ToolCalled { .. } => cancel.cancel(),
                AgentEvent::TurnStarted { .. } if !stream => {
                    let cancel = cancel.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        cancel.cancel();
                    });
                }
                _ => {}
            }
        }
        let out = run.await.expect("the run task");
        describe(&label, &out);
        assert!(
            matches!(out.stop, StopReason::Cancelled | StopReason::Answered),
            "{label}: {:?}",
            out.stop
        );
        assert_well_formed(&label, &out);
    }
}

/// A conversation longer than the server's context window is refused, and the refusal, in
/// the server's own words and shape, is read as `context_too_long` (not sent again) naming
/// the window when the server gives it. `scripts/live-tier.sh` starts its server with
/// `--n_ctx 8192`: some 12,000 tokens do not fit.
#[tokio::test]
#[ignore = "needs a model server; scripts/live-tier.sh starts one and runs these with --ignored"]
async fn live_a_conversation_past_the_window_is_context_too_long() {
    let long = "the quick brown fox jumps over the lazy dog. ".repeat(1_300);
    let request = kberg_agent::ChatRequest {
        messages: vec![Message::user(long)],
        options: options(),
        ..kberg_agent::ChatRequest::default()
    };
    for (label, provider) in providers() {
        let e = provider
            .chat(&request, &CancellationToken::new())
            .await
            .expect_err("a conversation past the window is refused");
        eprintln!("{label}: {e}");
        let kberg_agent::ProviderError::ContextTooLong { limit, .. } = &e else {
            panic!("{label}: {e:?}");
        };
        if let Some(n) = env("KBERG_LIVE_N_CTX") {
            assert_eq!(limit.map(|l| l.to_string()), Some(n), "{label}: {e}");
        }
    }
}
