//! The agent loop's own cost per turn, and the cost of recovering a call a model wrote as text.
//!
//! `loop/agent_run` runs a whole conversation through `Agent::run`: 4 tool-call turns and a final
//! answer, against an in-process registry, with a provider that answers instantly from prepared
//! responses (no network, no model). `loop/bare_baseline` makes exactly the same provider calls
//! and the same gate calls by hand, without the loop. The difference divided by the 5 turns is
//! the loop's own cost per turn (goal < 50 µs): building the conversation, listing the surface,
//! coercion, recovery checks, bookkeeping.
//!
//! `reads/together` runs a turn of four read-only calls to a tool that takes 2 ms (a file read
//! over a network MCP server, say) and the answer, with the default `concurrent_reads`;
//! `reads/one_at_a_time` the same with `concurrent_reads(1)`, as every call ran before. The
//! ratio is what a model asking for several things at once waits less.
//!
//! `recover/fenced_string_args` recovers a call from typical small-model text (prose, a Markdown
//! fence, arguments as a JSON string); `recover/serde_baseline` parses the same JSON (and its
//! argument string) with serde_json alone.

use std::collections::HashSet;
use std::hint::black_box;

use async_trait::async_trait;
use criterion::{Criterion, criterion_group, criterion_main};
use kberg_agent::{
    Agent, AgentConfig, CallOutcome, ChatRequest, ChatResponse, FinishReason, InferenceProvider,
    LocalSurface, Message, ProviderError, ToolCall, recover_calls,
};
use kberg_core::{
    CallOptions, Caller, Grants, Principal, ToolBuilder, ToolOutput, ToolRegistry, WriteCapability,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TOOL_TURNS: usize = 4;

/// The titles of the notes the tool-call turns add, one per turn: four different calls, as the
/// loop answers a call repeated word for word with its first result instead of running it.
const TITLES: [&str; TOOL_TURNS] = ["Groceries", "Chores", "Errands", "Bills"];

/// The user's request. It names every value of the calls the provider answers with: the loop
/// refuses a write whose values the user never gave (the grounding check, on by default), and
/// the bench measures calls that run.
const REQUEST: &str = "Add four notes with the body milk, eggs, bread: Groceries (priority 0), \
                       Chores (priority 1), Errands (priority 2) and Bills (priority 3)";

/// Answers with the next tool call until the conversation holds `TOOL_TURNS` results, then with
/// text. Stateless, so every benchmark iteration replays the same conversation.
struct Instant {
    calls: Vec<ChatResponse>,
    answer: ChatResponse,
}

#[async_trait]
impl InferenceProvider for Instant {
    fn name(&self) -> &str {
        "instant"
    }

    fn model(&self) -> &str {
        "none"
    }

    async fn chat(
        &self,
        request: &ChatRequest,
        _cancel: &CancellationToken,
    ) -> Result<ChatResponse, ProviderError> {
        let results = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Tool { .. }))
            .count();
        Ok(self.calls.get(results).unwrap_or(&self.answer).clone())
    }
}

/// The arguments of turn `turn`'s call.
fn args(turn: usize) -> Value {
    json!({"title": TITLES[turn], "body": "milk, eggs, bread", "priority": turn})
}

fn provider() -> Instant {
    Instant {
        calls: (0..TOOL_TURNS)
            .map(|turn| ChatResponse {
                tool_calls: vec![ToolCall {
                    id: format!("call_{turn}"),
                    name: "add_note".into(),
                    arguments: args(turn),
                }],
                finish: FinishReason::ToolCalls,
                ..ChatResponse::default()
            })
            .collect(),
        answer: ChatResponse {
            text: "Added the note.".into(),
            ..ChatResponse::default()
        },
    }
}

fn registry() -> ToolRegistry {
    let tools = ToolRegistry::new();
    let write = WriteCapability::new("notes.write", "Create notes");
    tools.declare(write.clone()).expect("declared once");
    let schema = json!({
        "type": "object",
        "properties": {
            "title": {"type": "string"}, "body": {"type": "string"},
            "priority": {"type": "integer", "minimum": 0, "maximum": 5}
        },
        "required": ["title", "body", "priority"],
        "additionalProperties": false
    });
    tools
        .register(
            ToolBuilder::new("add_note")
                .description("Create a note")
                .write(write)
                .raw_handler(schema, |_, _| async { Ok(ToolOutput::text("created")) }),
        )
        .expect("registered once");
    for i in 0..8 {
        tools
            .register(
                ToolBuilder::new(format!("read_{i}"))
                    .description("Read something")
                    .raw_handler(json!({"type": "object"}), |_, _| async {
                        Ok(ToolOutput::text("ok"))
                    }),
            )
            .expect("registered once");
    }
    tools
}

fn caller() -> Caller {
    Caller::new(Principal::new("bench").with_grants(Grants::of(["notes.write"])))
}

fn bench_loop(c: &mut Criterion) {
    // The loop's tool timeouts use tokio's timer.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let tools = registry();
    let agent = Agent::new(provider(), LocalSurface::new(tools.clone(), caller()));
    let bare = provider();
    let who = caller();
    let cancel = CancellationToken::new();
    // What is timed is a run whose four calls all ran: checked once, outside the timing.
    let out = rt.block_on(agent.run(vec![Message::user(REQUEST)], &cancel));
    let ran: Vec<_> = out.calls.iter().map(|c| c.outcome).collect();
    assert!(
        out.answered() && ran == [CallOutcome::Ok; TOOL_TURNS],
        "{:?} {ran:?}",
        out.stop
    );
    let mut group = c.benchmark_group("loop");
    group.bench_function("agent_run", |b| {
        b.iter(|| {
            let out = rt.block_on(agent.run(vec![Message::user(REQUEST)], &cancel));
            assert!(out.answered(), "{:?}", out.stop);
            black_box(out)
        })
    });
    // The same runs without the tool timeouts: no progress sink, no timer per call (what every
    // call cost before the loop had them).
    let unbounded = Agent::new(provider(), LocalSurface::new(tools.clone(), caller())).with_config(
        AgentConfig::default()
            .tool_idle_timeout(None)
            .tool_timeout(None),
    );
    group.bench_function("agent_run_without_tool_timeouts", |b| {
        b.iter(|| {
            let out = rt.block_on(unbounded.run(vec![Message::user(REQUEST)], &cancel));
            assert!(out.answered(), "{:?}", out.stop);
            black_box(out)
        })
    });
    group.bench_function("bare_baseline", |b| {
        b.iter(|| {
            rt.block_on(async {
                // The same provider calls, with a conversation as long as the loop's at each
                // turn, and the same gate calls.
                let mut request = ChatRequest {
                    messages: vec![Message::user(REQUEST)],
                    ..ChatRequest::default()
                };
                for turn in 0..TOOL_TURNS {
                    let r = bare.chat(&request, &cancel).await.expect("instant");
                    let out = tools
                        .call(&who, "add_note", args(turn), CallOptions::default())
                        .await
                        .expect("runs");
                    request.messages.push(r.to_message());
                    request.messages.push(Message::Tool {
                        call_id: format!("call_{turn}"),
                        name: "add_note".into(),
                        content: out.all_text(),
                        is_error: false,
                    });
                }
                black_box(bare.chat(&request, &cancel).await.expect("instant"))
            })
        })
    });
    group.finish();
}

/// How long the `read_file` tool of [`bench_reads`] takes.
const READ_LATENCY: std::time::Duration = std::time::Duration::from_millis(2);

/// The read-only calls of [`bench_reads`]'s one tool-call turn.
const READS: usize = 4;

fn bench_reads(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("read_file")
                .description("Read a file")
                .read()
                .raw_handler(
                    json!({"type": "object", "properties": {"path": {"type": "string"}},
                        "required": ["path"]}),
                    |a, _| async move {
                        tokio::time::sleep(READ_LATENCY).await;
                        Ok(ToolOutput::text(format!("contents of {}", a["path"])))
                    },
                ),
        )
        .expect("registers");
    let reads = || Instant {
        calls: vec![ChatResponse {
            tool_calls: (0..READS)
                .map(|i| ToolCall {
                    id: format!("call_{i}"),
                    name: "read_file".into(),
                    arguments: json!({"path": format!("src/file_{i}.rs")}),
                })
                .collect(),
            finish: FinishReason::ToolCalls,
            ..ChatResponse::default()
        }],
        answer: ChatResponse {
            text: "Read them.".into(),
            ..ChatResponse::default()
        },
    };
    let together = Agent::new(reads(), LocalSurface::new(tools.clone(), caller()));
    let one_at_a_time = Agent::new(reads(), LocalSurface::new(tools.clone(), caller()))
        .with_config(AgentConfig::default().concurrent_reads(1));
    let cancel = CancellationToken::new();
    for agent in [&together, &one_at_a_time] {
        let out = rt.block_on(agent.run(vec![Message::user("read the four files")], &cancel));
        let ran: Vec<_> = out.calls.iter().map(|c| c.outcome).collect();
        assert!(
            out.answered() && ran == [CallOutcome::Ok; READS],
            "{:?} {ran:?}",
            out.stop
        );
    }
    let mut group = c.benchmark_group("reads");
    group.sample_size(20);
    for (name, agent) in [("together", &together), ("one_at_a_time", &one_at_a_time)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let out =
                    rt.block_on(agent.run(vec![Message::user("read the four files")], &cancel));
                black_box(out)
            })
        });
    }
    group.finish();
}

fn bench_recover(c: &mut Criterion) {
    let text = "Sure! I'll add that note for you now.\n\n```json\n{\"name\": \"add_note\", \"arguments\": \"{\\\"title\\\": \\\"Groceries\\\", \\\"body\\\": \\\"milk, eggs, bread\\\", \\\"priority\\\": 2}\"}\n```\n\nLet me know if you need anything else.";
    let json_only = "{\"name\": \"add_note\", \"arguments\": \"{\\\"title\\\": \\\"Groceries\\\", \\\"body\\\": \\\"milk, eggs, bread\\\", \\\"priority\\\": 2}\"}";
    let visible: HashSet<&str> = ["add_note", "search_notes", "list_notes"]
        .into_iter()
        .collect();
    assert_eq!(recover_calls(text, &visible).len(), 1);
    let mut group = c.benchmark_group("recover");
    group.bench_function("fenced_string_args", |b| {
        b.iter(|| black_box(recover_calls(black_box(text), &visible)))
    });
    group.bench_function("serde_baseline", |b| {
        b.iter(|| {
            let v: Value = serde_json::from_str(black_box(json_only)).expect("valid");
            let args: Value =
                serde_json::from_str(v["arguments"].as_str().expect("a string")).expect("valid");
            black_box((v, args))
        })
    });
    group.bench_function("plain_prose", |b| {
        let prose = "You have three notes about groceries; the newest one is from today.";
        b.iter(|| black_box(recover_calls(black_box(prose), &visible)))
    });
    group.finish();
}

criterion_group!(benches, bench_loop, bench_reads, bench_recover);
criterion_main!(benches);
