//! The live tier: the agent scenarios against a real model server, opt-in by environment.
//!
//! - `KBERG_LIVE_OPENAI_URL` (an OpenAI-compatible API base such as `http://127.0.0.1:8080/v1`)
//!   with `KBERG_LIVE_MODEL` (the model name that server knows), and optionally
//!   `KBERG_LIVE_API_KEY`;
//! - `KBERG_LIVE_OLLAMA_URL` (e.g. `http://127.0.0.1:11434`), with `KBERG_LIVE_MODEL` (default
//!   `qwen2.5`).
//!
//! Without them each test prints why it is skipped and passes. A real model is not scripted, so
//! the assertions are about the loop's guarantees rather than exact words: a write the caller
//! holds finishes (after a repair turn if the model needs one), a write the caller lacks never
//! runs and the run ends cleanly, and cancelling while the model generates stops the run.

mod support;

use std::sync::Arc;
use std::time::Duration;

use kberg_agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, InferenceProvider, LocalSurface, Message,
    StopReason,
};
use kberg_core::{Caller, Principal};
use kberg_providers::HttpOptions;
use kberg_providers::ollama::{OllamaConfig, OllamaProvider};
use kberg_providers::openai::{OpenAiConfig, OpenAiProvider};
use tokio_util::sync::CancellationToken;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
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
    if out.is_empty() {
        eprintln!(
            "live tier skipped: set KBERG_LIVE_OPENAI_URL and KBERG_LIVE_MODEL, or KBERG_LIVE_OLLAMA_URL, to run it against a real server"
        );
    }
    out
}

const SYSTEM: &str = "You manage the user's notes with the tools you are given. Call a tool when the user asks for an action; when a tool answers, reply to the user in one short sentence.";

#[tokio::test]
async fn live_granted_write_finishes() {
    for (label, provider) in providers() {
        for stream in [false, true] {
            let agent = Agent::from_arcs(Arc::clone(&provider), Arc::new(support::app_surface()))
                .with_config(AgentConfig::default().system_prompt(SYSTEM).stream(stream));
            let out = agent
                .run(
                    vec![Message::user("Add a note titled \"milk\" with priority 2.")],
                    &CancellationToken::new(),
                )
                .await;
            eprintln!(
                "{label} (stream {stream}): stop {} after {} turn(s), {} repair(s), calls {:?}",
                out.stop.code(),
                out.turns,
                out.repair_turns,
                out.calls
                    .iter()
                    .map(|c| (c.name.as_str(), c.outcome.as_str()))
                    .collect::<Vec<_>>()
            );
            assert!(out.answered(), "{label}: {:?}", out.stop);
            assert!(
                out.calls
                    .iter()
                    .any(|c| c.name == "add_note" && c.outcome == CallOutcome::Ok),
                "{label}: the note was not added: {:?}",
                out.calls
            );
        }
    }
}

#[tokio::test]
async fn live_missing_capability_never_runs() {
    for (label, provider) in providers() {
        // The same app, seen by a caller without `notes.write`.
        let surface = LocalSurface::new(
            support::app_surface_registry(),
            Caller::new(Principal::new("reader")),
        );
        let agent = Agent::from_arcs(Arc::clone(&provider), Arc::new(surface))
            .with_config(AgentConfig::default().system_prompt(SYSTEM));
        let out = agent
            .run(
                vec![Message::user("Add a note titled \"milk\" with priority 2.")],
                &CancellationToken::new(),
            )
            .await;
        eprintln!(
            "{label}: stop {}, calls {:?}",
            out.stop.code(),
            out.calls
                .iter()
                .map(|c| (c.name.as_str(), c.outcome.as_str()))
                .collect::<Vec<_>>()
        );
        assert!(
            matches!(
                out.stop,
                StopReason::Answered | StopReason::RepeatedFailure { .. }
            ),
            "{label}: {:?}",
            out.stop
        );
        assert!(
            out.calls
                .iter()
                .all(|c| c.outcome != CallOutcome::Ok || c.name != "add_note")
        );
    }
}

#[tokio::test]
async fn live_cancellation_stops_the_run() {
    for (label, provider) in providers() {
        let agent = Agent::from_arcs(Arc::clone(&provider), Arc::new(support::app_surface()))
            .with_config(AgentConfig::default().system_prompt(SYSTEM).stream(true));
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
        // Cancel as soon as the model starts to answer (or the tool runs).
        while let Some(ev) = rx.recv().await {
            if matches!(
                ev,
                AgentEvent::TextDelta { .. } | AgentEvent::ToolCalled { .. }
            ) {
                cancel.cancel();
            }
        }
        let out = run.await.expect("the run task");
        eprintln!("{label}: stop {}", out.stop.code());
        assert!(
            matches!(out.stop, StopReason::Cancelled | StopReason::Answered),
            "{label}: {:?}",
            out.stop
        );
    }
}
