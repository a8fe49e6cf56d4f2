//! A conversation that outgrows the model's context window: the provider refuses the turn
//! (`ProviderError::ContextTooLong`, as kberg-providers reads OpenAI's, llama.cpp's, vLLM's,
//! Anthropic's and Ollama's refusals) and the loop sends it again with the oldest tool results
//! removed, or stops with the error when that is off or nothing is left to remove.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kberg_agent::{
    Agent, AgentConfig, ChatRequest, ChatResponse, InferenceProvider, LocalSurface, Message,
    ProviderError, ScriptedProvider, StopReason,
};
use kberg_core::{Caller, Principal, ToolBuilder, ToolOutput, ToolRegistry};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The characters of one file the `read_file` tool answers with.
const FILE_CHARS: usize = 2_000;

/// The note the model is shown in place of a removed result (kberg-agent's own words).
const REMOVED: &str = "(this result was removed to fit the model's context window; call the tool again if you need it)";

#[derive(Deserialize, JsonSchema)]
struct ReadFile {
    path: String,
}

/// `read_file`, answering `FILE_CHARS` characters naming the path.
fn registry() -> ToolRegistry {
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("read_file")
                .description("Read a file")
                .handler(|a: ReadFile, _| async move {
                    let head = format!("contents of {}: ", a.path);
                    let pad = "x".repeat(FILE_CHARS - head.len());
                    Ok(ToolOutput::text(format!("{head}{pad}")))
                }),
        )
        .unwrap();
    tools
}

/// The characters of a request's messages, as the window counts them.
fn size(request: &ChatRequest) -> usize {
    request
        .messages
        .iter()
        .map(|m| match m {
            Message::System { content } | Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.to_string().len())
                        .sum::<usize>()
            }
            Message::Tool { content, .. } => content.len(),
        })
        .sum()
}

/// A model whose context window holds `window` characters: a longer request is refused as a
/// server refuses it (and recorded), a shorter one answered from the script.
#[derive(Clone)]
struct Windowed {
    window: usize,
    script: ScriptedProvider,
    sent: Arc<Mutex<Vec<ChatRequest>>>,
}

impl Windowed {
    fn new(window: usize, script: ScriptedProvider) -> Self {
        Self {
            window,
            script,
            sent: Arc::default(),
        }
    }

    /// Every request sent, refused ones included, with whether it fit.
    fn sent(&self) -> Vec<(ChatRequest, bool)> {
        let sent = self.sent.lock().unwrap();
        sent.iter()
            .map(|r| (r.clone(), size(r) <= self.window))
            .collect()
    }
}

#[async_trait]
impl InferenceProvider for Windowed {
    fn name(&self) -> &str {
        "windowed"
    }

    fn model(&self) -> &str {
        "windowed"
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        self.sent.lock().unwrap().push(request.clone());
        let needed = size(request);
        if needed > self.window {
            return Err(ProviderError::ContextTooLong {
                requested: Some(needed as u64),
                limit: Some(self.window as u64),
                detail: "the request exceeds the available context size".into(),
            });
        }
        self.script.chat(request, cancel).await
    }
}

/// Whether each request sent fit the window, in order.
fn fits(sent: &[(ChatRequest, bool)]) -> Vec<bool> {
    sent.iter().map(|(_, fit)| *fit).collect()
}

fn read(id: &str, path: &str) -> ChatResponse {
    ScriptedProvider::call(id, "read_file", json!({"path": path}))
}

/// Three files read one turn after another, then the answer.
fn three_reads() -> ScriptedProvider {
    ScriptedProvider::new([
        read("c1", "a.rs"),
        read("c2", "b.rs"),
        read("c3", "c.rs"),
        ScriptedProvider::text("The three files define the parser."),
    ])
}

fn agent(model: &Windowed, config: AgentConfig) -> Agent {
    Agent::new(
        model.clone(),
        LocalSurface::new(registry(), Caller::new(Principal::new("u"))),
    )
    .with_config(config)
}

/// The content of every tool result in `request`, in order.
fn results(request: &ChatRequest) -> Vec<String> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

fn whole(path: &str) -> impl Fn(&String) -> bool + '_ {
    move |r: &String| r.starts_with(&format!("contents of {path}: ")) && r.len() == FILE_CHARS
}

#[tokio::test]
async fn the_oldest_results_are_removed_until_the_turn_fits() {
    // Two results fit, three do not.
    let model = Windowed::new(5_000, three_reads());
    let out = agent(&model, AgentConfig::default())
        .run(
            vec![Message::user("What do a.rs, b.rs and c.rs define?")],
            &CancellationToken::new(),
        )
        .await;
    assert!(matches!(out.stop, StopReason::Answered), "{:?}", out.stop);
    assert_eq!(out.answer(), Some("The three files define the parser."));
    assert_eq!(out.interventions.results_elided, 1);

    let sent = model.sent();
    let fits = fits(&sent);
    assert_eq!(
        fits,
        [true, true, true, false, true],
        "one refusal, then sent again"
    );
    // The refused turn held the three results whole; the one sent again shows the oldest as
    // removed, the others whole, and every call as it was.
    let refused = results(&sent[3].0);
    assert!(whole("a.rs")(&refused[0]) && whole("c.rs")(&refused[2]));
    let again = &sent[4].0;
    let shown = results(again);
    assert_eq!(shown[0], REMOVED);
    assert!(whole("b.rs")(&shown[1]), "{}", &shown[1][..40]);
    assert!(whole("c.rs")(&shown[2]), "{}", &shown[2][..40]);
    let calls = again
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Assistant { tool_calls, .. } if !tool_calls.is_empty()))
        .count();
    assert_eq!(calls, 3);
    assert_eq!(out.turns, 4, "the turn sent again is one turn");

    // The stored conversation keeps every result.
    let stored: Vec<&String> = out
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool { content, .. } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(stored.len(), 3);
    for (r, path) in stored.iter().zip(["a.rs", "b.rs", "c.rs"]) {
        assert!(whole(path)(r), "{path}");
    }
}

#[tokio::test]
async fn what_was_removed_stays_removed_and_half_goes_each_time() {
    // Five reads; the window holds about two results.
    let script = ScriptedProvider::new([
        read("c1", "a.rs"),
        read("c2", "b.rs"),
        read("c3", "c.rs"),
        read("c4", "d.rs"),
        read("c5", "e.rs"),
        ScriptedProvider::text("Done reading."),
    ]);
    let model = Windowed::new(4_700, script);
    let out = agent(&model, AgentConfig::default().max_turns(10))
        .run(
            vec![Message::user("Read a.rs to e.rs.")],
            &CancellationToken::new(),
        )
        .await;
    assert!(matches!(out.stop, StopReason::Answered), "{:?}", out.stop);
    let sent = model.sent();
    // Turn 4 (three results) is refused and sent with the oldest removed; turn 5 (four
    // results, one removed) is refused and sent with the oldest of the three still shown
    // before the last turn (two, half of them rounded up: one more); turn 6 likewise.
    let shown: Vec<Vec<bool>> = sent
        .iter()
        .filter(|(_, fit)| *fit)
        .map(|(r, _)| results(r).iter().map(|c| c != REMOVED).collect())
        .collect();
    assert_eq!(
        shown,
        [
            vec![],
            vec![true],
            vec![true, true],
            vec![false, true, true],
            vec![false, false, true, true],
            vec![false, false, false, true, true],
        ]
    );
    assert_eq!(out.interventions.results_elided, 3);
    assert!(sent.iter().all(|(r, fit)| *fit || size(r) > 4_700));
}

#[tokio::test]
async fn with_removal_off_the_run_stops_with_the_providers_error() {
    let model = Windowed::new(5_000, three_reads());
    let out = agent(
        &model,
        AgentConfig::default().elide_results_on_overflow(false),
    )
    .run(vec![Message::user("Read them.")], &CancellationToken::new())
    .await;
    let StopReason::Provider(e) = &out.stop else {
        panic!("{:?}", out.stop);
    };
    assert_eq!(e.code(), "context_too_long");
    assert!(
        e.to_string()
            .contains("does not fit the model's context window (6"),
        "{e}"
    );
    assert_eq!(out.interventions.results_elided, 0);
    assert_eq!(model.sent().len(), 4, "nothing is sent again");
}

#[tokio::test]
async fn a_last_turn_too_long_alone_ends_the_run_after_removing_what_it_could() {
    // The window holds less than one result.
    let model = Windowed::new(1_500, three_reads());
    let out = agent(&model, AgentConfig::default())
        .run(vec![Message::user("Read them.")], &CancellationToken::new())
        .await;
    let StopReason::Provider(e) = &out.stop else {
        panic!("{:?}", out.stop);
    };
    assert_eq!(e.code(), "context_too_long");
    // Turn 2 holds only the last turn's result: refused, and nothing can be removed.
    let sent = model.sent();
    assert_eq!(sent.len(), 2, "{}", sent.len());
    assert_eq!(out.interventions.results_elided, 0);
    assert_eq!(out.turns, 2);
}

/// The user messages of `request`, in order.
fn user_texts(request: &ChatRequest) -> Vec<&str> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_focused_answer_turn_too_long_shows_the_oldest_results_as_removed() {
    // The fourth turn is the run's last, an answer-only turn sent in its short form: the
    // request, then one message with the three results. Two results fit, three do not.
    let model = Windowed::new(5_000, three_reads());
    let out = agent(&model, AgentConfig::default().max_turns(4))
        .run(
            vec![Message::user("What do a.rs, b.rs and c.rs define?")],
            &CancellationToken::new(),
        )
        .await;
    assert!(matches!(out.stop, StopReason::Answered), "{:?}", out.stop);
    assert_eq!(out.answer(), Some("The three files define the parser."));
    assert_eq!(out.interventions.answer_turns_focused, 1);
    assert_eq!(out.interventions.results_elided, 1);

    let sent = model.sent();
    let fits = fits(&sent);
    assert_eq!(fits, [true, true, true, false, true]);
    // Both short forms hold no tools and no results of their own, only the two user messages.
    for (request, _) in &sent[3..] {
        assert!(request.tools.is_empty());
        assert!(results(request).is_empty());
        assert_eq!(user_texts(request).len(), 2);
    }
    let refused = user_texts(&sent[3].0)[1];
    let again = user_texts(&sent[4].0)[1];
    for path in ["a.rs", "b.rs", "c.rs"] {
        assert!(refused.contains(&format!("contents of {path}: ")), "{path}");
    }
    // The oldest result is shown as removed (its call still named), the others whole.
    assert!(!again.contains("contents of a.rs: "), "{again}");
    assert!(again.contains("read_file(path: a.rs)"), "{again}");
    assert!(again.contains(REMOVED), "{again}");
    for path in ["b.rs", "c.rs"] {
        assert!(again.contains(&format!("contents of {path}: ")), "{path}");
    }
    assert_eq!(out.turns, 4, "the turn sent again is one turn");
}

#[tokio::test]
async fn a_focused_answer_turn_keeps_the_last_turns_result_and_then_stops() {
    // The window holds the third turn with the oldest result removed, but less than the short
    // form with the last turn's result alone: it is sent with every earlier result removed,
    // refused again, and the run ends with the error.
    let model = Windowed::new(2_170, three_reads());
    let out = agent(&model, AgentConfig::default().max_turns(4))
        .run(vec![Message::user("Read them.")], &CancellationToken::new())
        .await;
    let StopReason::Provider(e) = &out.stop else {
        panic!("{:?}", out.stop);
    };
    assert_eq!(e.code(), "context_too_long");
    let sent = model.sent();
    let fits = fits(&sent);
    assert_eq!(fits, [true, true, false, true, false, false, false]);
    let forms: Vec<usize> = sent[4..]
        .iter()
        .map(|(r, _)| {
            let text = user_texts(r)[1];
            ["a.rs", "b.rs", "c.rs"]
                .iter()
                .filter(|p| text.contains(&format!("contents of {p}: ")))
                .count()
        })
        .collect();
    assert_eq!(forms, [3, 2, 1], "half of the earlier results each time");
    let last = user_texts(&sent[6].0)[1];
    assert!(last.contains("contents of c.rs: "), "{last}");
    // One removed from the third turn, two from the short form.
    assert_eq!(out.interventions.results_elided, 3);
    assert_eq!(out.turns, 4);
}

#[tokio::test]
async fn a_result_the_last_turn_got_again_stays_in_the_focused_answer_turn() {
    // a.rs is read first and again in the last turn (the same text, shown once); b.rs between.
    // The short form with both does not fit: b.rs is removed, not a.rs, which the model works
    // from now.
    let script = ScriptedProvider::new([
        read("c1", "a.rs"),
        read("c2", "b.rs"),
        read("c3", "a.rs"),
        ScriptedProvider::text("a.rs defines the parser."),
    ]);
    let model = Windowed::new(4_200, script);
    let out = agent(
        &model,
        AgentConfig::default()
            .max_turns(4)
            .guard_repeated_reads(false),
    )
    .run(
        vec![Message::user("What does a.rs define?")],
        &CancellationToken::new(),
    )
    .await;
    assert!(matches!(out.stop, StopReason::Answered), "{:?}", out.stop);
    let sent = model.sent();
    let (again, fit) = sent.last().unwrap();
    assert!(fit);
    let text = user_texts(again)[1];
    assert!(text.contains("contents of a.rs: "), "{text}");
    assert!(!text.contains("contents of b.rs: "), "{text}");
    assert!(text.contains(REMOVED), "{text}");
    assert_eq!(out.interventions.answer_turns_focused, 1);
}
