//! Read-only calls of one message run together (`AgentConfig::concurrent_reads`): a model that
//! asks for five files at once waits for the slowest, not for the sum. Writes, and reads
//! listed after a write, keep their order; every result is recorded in the order of the calls.
//!
//! Concurrency is shown with signals, not timings: the read tool waits until every read of the
//! message has started, which calls run one after another would never reach (the wait is
//! bounded, so such a run fails instead of hanging).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kberg_agent::{
    Agent, AgentConfig, AgentEvent, CallOutcome, ChatResponse, LocalSurface, Message,
    ScriptedProvider, StopReason, ToolCall,
};
use kberg_core::{
    Caller, Grants, Principal, ToolBuilder, ToolError, ToolOutput, ToolRegistry, WriteCapability,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[derive(Deserialize, JsonSchema)]
struct Path {
    path: String,
}

/// What the tools saw: the order calls started and finished in, and how many ran at once.
#[derive(Default)]
struct Seen {
    log: Vec<String>,
    running: usize,
    most: usize,
}

/// `read_file` (read-only) waits until `together` reads are running at once, or until the
/// call is cancelled; `write_file` (a write) runs at once. Both log when they start and end.
fn registry(seen: &Arc<Mutex<Seen>>, together: usize) -> ToolRegistry {
    registry_signalling(seen, together, Arc::new(tokio::sync::Notify::new()))
}

/// [`registry`], notifying the waiters of `started` each time a read starts.
fn registry_signalling(
    seen: &Arc<Mutex<Seen>>,
    together: usize,
    started: Arc<tokio::sync::Notify>,
) -> ToolRegistry {
    let tools = ToolRegistry::new();
    let (s1, n1) = (Arc::clone(seen), Arc::clone(&started));
    tools
        .register(
            ToolBuilder::new("read_file")
                .description("Read a file")
                .read()
                .handler(move |a: Path, ctx| {
                    let (seen, started) = (Arc::clone(&s1), Arc::clone(&n1));
                    async move {
                        {
                            let mut s = seen.lock().unwrap();
                            s.log.push(format!("start {}", a.path));
                            s.running += 1;
                            s.most = s.most.max(s.running);
                        }
                        started.notify_waiters();
                        let all_started = async {
                            loop {
                                let wait = started.notified();
                                if seen.lock().unwrap().most >= together {
                                    break;
                                }
                                wait.await;
                            }
                        };
                        let cancel = ctx.cancellation();
                        let outcome = tokio::select! {
                            () = all_started => Ok(ToolOutput::text(format!("contents of {}", a.path))),
                            () = cancel.cancelled() => Err(ToolError::failed("cancelled")),
                        };
                        let mut s = seen.lock().unwrap();
                        s.running -= 1;
                        s.log.push(format!("end {}", a.path));
                        outcome
                    }
                }),
        )
        .unwrap();
    let write = WriteCapability::new("files.write", "Write files");
    tools.declare(write.clone()).unwrap();
    let s2 = Arc::clone(seen);
    tools
        .register(
            ToolBuilder::new("write_file")
                .description("Write a file")
                .write(write)
                .handler(move |a: Path, _| {
                    let seen = Arc::clone(&s2);
                    async move {
                        let mut s = seen.lock().unwrap();
                        s.log.push(format!("start {}", a.path));
                        s.log.push(format!("end {}", a.path));
                        Ok(ToolOutput::text(format!("wrote {}", a.path)))
                    }
                }),
        )
        .unwrap();
    tools
}

fn call(id: &str, name: &str, path: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: json!({ "path": path }),
    }
}

/// One message with `calls`, then an answer.
fn script(calls: Vec<ToolCall>) -> ScriptedProvider {
    ScriptedProvider::new([
        ChatResponse {
            tool_calls: calls,
            finish: kberg_agent::FinishReason::ToolCalls,
            ..ChatResponse::default()
        },
        ScriptedProvider::text("Done."),
    ])
}

fn agent(script: &ScriptedProvider, tools: ToolRegistry, config: AgentConfig) -> Agent {
    let caller = Caller::new(Principal::new("a").with_grants(Grants::of(["files.write"])));
    Agent::new(script.clone(), LocalSurface::new(tools, caller)).with_config(
        config
            .ground_write_arguments(false)
            .stop_unrequested_writes(false)
            .look_before_answering(false),
    )
}

/// Runs `fut`, failing the test if it has not finished within a minute (calls that should run
/// together but ran one after another would wait for each other for ever).
async fn bounded<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), fut)
        .await
        .expect("the reads did not run together")
}

/// The tool results of the stored conversation, as (call id, text).
fn results(messages: &[Message]) -> Vec<(String, String)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                call_id, content, ..
            } => Some((call_id.clone(), content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn reads_of_one_message_run_together_and_are_recorded_in_order() {
    let seen = Arc::default();
    let script = script(vec![
        call("c1", "read_file", "a.rs"),
        call("c2", "read_file", "b.rs"),
        call("c3", "read_file", "c.rs"),
    ]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = bounded(
        agent(&script, registry(&seen, 3), AgentConfig::default()).run_with_events(
            vec![Message::user("read a, b and c")],
            &CancellationToken::new(),
            tx,
        ),
    )
    .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(seen.lock().unwrap().most, 3);
    let outcomes: Vec<&CallOutcome> = out.calls.iter().map(|c| &c.outcome).collect();
    assert_eq!(outcomes, [&CallOutcome::Ok; 3]);
    assert_eq!(
        results(&out.messages),
        [
            ("c1".into(), "contents of a.rs".into()),
            ("c2".into(), "contents of b.rs".into()),
            ("c3".into(), "contents of c.rs".into()),
        ]
    );
    // Every call is announced before it is sent, and its result comes after; results in the
    // order of the calls.
    let mut order = Vec::new();
    while let Ok(e) = rx.try_recv() {
        match e {
            AgentEvent::ToolCalled { call, .. } => order.push(format!("called {}", call.id)),
            AgentEvent::ToolResult { call_id, .. } => order.push(format!("result {call_id}")),
            _ => {}
        }
    }
    assert_eq!(
        order,
        [
            "called c1",
            "called c2",
            "called c3",
            "result c1",
            "result c2",
            "result c3"
        ]
    );
}

#[tokio::test]
async fn with_one_at_a_time_the_reads_run_in_order() {
    let seen = Arc::default();
    let script = script(vec![
        call("c1", "read_file", "a.rs"),
        call("c2", "read_file", "b.rs"),
    ]);
    let out = bounded(
        agent(
            &script,
            registry(&seen, 1),
            AgentConfig::default().concurrent_reads(1),
        )
        .run(
            vec![Message::user("read a and b")],
            &CancellationToken::new(),
        ),
    )
    .await;
    assert!(out.answered(), "{:?}", out.stop);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.most, 1);
    assert_eq!(
        seen.log,
        ["start a.rs", "end a.rs", "start b.rs", "end b.rs"]
    );
}

#[tokio::test]
async fn at_most_the_limit_run_together() {
    let seen = Arc::default();
    let script = script(vec![
        call("c1", "read_file", "a.rs"),
        call("c2", "read_file", "b.rs"),
        call("c3", "read_file", "c.rs"),
        call("c4", "read_file", "d.rs"),
    ]);
    let out = bounded(
        agent(
            &script,
            registry(&seen, 2),
            AgentConfig::default().concurrent_reads(2),
        )
        .run(vec![Message::user("read four")], &CancellationToken::new()),
    )
    .await;
    assert!(out.answered(), "{:?}", out.stop);
    assert_eq!(seen.lock().unwrap().most, 2);
    assert_eq!(results(&out.messages).len(), 4);
}

#[tokio::test]
async fn a_write_keeps_its_place_between_reads() {
    // Reads before the write run together; the write runs after both ended; the read after
    // the write starts after it (it may read what the write wrote).
    let seen = Arc::default();
    let script = script(vec![
        call("c1", "read_file", "a.rs"),
        call("c2", "read_file", "b.rs"),
        call("c3", "write_file", "out.rs"),
        call("c4", "read_file", "out.rs"),
    ]);
    let out = bounded(
        agent(&script, registry(&seen, 2), AgentConfig::default())
            .run(vec![Message::user("copy")], &CancellationToken::new()),
    )
    .await;
    assert!(out.answered(), "{:?}", out.stop);
    let log = seen.lock().unwrap().log.clone();
    let at = |entry: &str| log.iter().position(|l| l == entry).unwrap();
    assert!(at("end a.rs") < at("start out.rs") && at("end b.rs") < at("start out.rs"));
    // `out.rs` is both the write's and the last read's path: the write logs first.
    assert_eq!(
        &log[log.len() - 4..],
        ["start out.rs", "end out.rs", "start out.rs", "end out.rs"]
    );
    let ids: Vec<String> = results(&out.messages)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4"]);
}

#[tokio::test]
async fn an_identical_read_in_the_same_message_runs_once() {
    let seen = Arc::default();
    let script = script(vec![
        call("c1", "read_file", "a.rs"),
        call("c2", "read_file", "a.rs"),
        call("c3", "read_file", "b.rs"),
    ]);
    // Copies are collapsed before anything runs by default; without that, the second is
    // answered with the first's result.
    let out = bounded(
        agent(
            &script,
            registry(&seen, 2),
            AgentConfig::default().collapse_calls_in_turn(false),
        )
        .run(
            vec![Message::user("read a and b")],
            &CancellationToken::new(),
        ),
    )
    .await;
    let outcomes: Vec<&CallOutcome> = out.calls.iter().map(|c| &c.outcome).collect();
    assert_eq!(
        outcomes,
        [&CallOutcome::Ok, &CallOutcome::Duplicate, &CallOutcome::Ok]
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.log.iter().filter(|l| *l == "start a.rs").count(), 1);
    assert_eq!(seen.most, 2);
}

#[tokio::test]
async fn a_copy_of_a_read_past_the_first_batch_is_not_sent_ahead() {
    // Two at a time: a.rs and b.rs go together; the copy of a.rs is answered with the first
    // read's result when its turn comes, never sent with c.rs.
    let seen = Arc::default();
    let script = script(vec![
        call("c1", "read_file", "a.rs"),
        call("c2", "read_file", "b.rs"),
        call("c3", "read_file", "a.rs"),
        call("c4", "read_file", "c.rs"),
    ]);
    let out = bounded(
        agent(
            &script,
            registry(&seen, 2),
            AgentConfig::default()
                .collapse_calls_in_turn(false)
                .concurrent_reads(2),
        )
        .run(vec![Message::user("read")], &CancellationToken::new()),
    )
    .await;
    let outcomes: Vec<&CallOutcome> = out.calls.iter().map(|c| &c.outcome).collect();
    assert_eq!(
        outcomes,
        [
            &CallOutcome::Ok,
            &CallOutcome::Ok,
            &CallOutcome::Duplicate,
            &CallOutcome::Ok
        ]
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.log.iter().filter(|l| *l == "start a.rs").count(), 1);
}

#[tokio::test]
async fn a_run_cancelled_while_reads_run_together_stops_every_one() {
    // The reads wait for a third that never comes: the run is cancelled once both started.
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let script = script(vec![
        call("c1", "read_file", "a.rs"),
        call("c2", "read_file", "b.rs"),
    ]);
    let cancel = CancellationToken::new();
    let started = Arc::new(tokio::sync::Notify::new());
    let tools = registry_signalling(&seen, 3, Arc::clone(&started));
    let agent = agent(&script, tools, AgentConfig::default());
    let run = agent.run(vec![Message::user("read")], &cancel);
    let cancel_when_both_started = async {
        loop {
            let wait = started.notified();
            tokio::pin!(wait);
            wait.as_mut().enable();
            if seen.lock().unwrap().running == 2 {
                break;
            }
            wait.await;
        }
        cancel.cancel();
    };
    let (out, ()) = bounded(async { tokio::join!(run, cancel_when_both_started) }).await;
    assert!(matches!(out.stop, StopReason::Cancelled), "{:?}", out.stop);
    assert_eq!(seen.lock().unwrap().running, 0, "both reads ended");
    assert_eq!(results(&out.messages).len(), 2, "each call has its result");
}
