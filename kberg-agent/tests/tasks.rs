//! The remote surface and tasks: a kberg-server over Streamable HTTP on 127.0.0.1 whose tools
//! run only as tasks (the MCP tasks extension). The surface declares the extension on every
//! call, waits for the task (polling `tasks/get`), and answers with its result, so the agent
//! loop sees an ordinary tool result; a cancelled call cancels the task (also when it is
//! cancelled before the server's answer naming the task arrived); a task whose tool asks for
//! input the agent cannot give, and a task that fails, are `tool_failed`. The tools signal the
//! test and wait for its release, so nothing depends on timing.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::time::Duration;

use kberg_agent::{
    Agent, CallOutcome, McpSurface, Message, ProgressSink, ScriptedProvider, ToolSurface,
};
use kberg_core::{
    ErrorCode, Principal, TaskStatus, TaskSupport, ToolBuilder, ToolOutput, ToolRegistry,
};
use kberg_server::{McpApp, OpenAccess};
use kberg_testkit::eventually::eventually_async;
use kberg_testkit::serve::{RunningServer, loopback};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

struct Server {
    url: String,
    app: McpApp,
    started: mpsc::UnboundedReceiver<()>,
    release: watch::Sender<bool>,
    /// Stops the server when the fixture drops.
    _server: RunningServer,
}

async fn server() -> Server {
    let tools = ToolRegistry::new();
    let (started_tx, started) = mpsc::unbounded_channel();
    let (release, release_rx) = watch::channel(false);
    tools
        .register(
            ToolBuilder::new("index_repo")
                .description("Indexes the repository (a task)")
                .task_support(TaskSupport::Required)
                .raw_handler(json!({"type": "object"}), move |_a, _ctx| {
                    let started = started_tx.clone();
                    let mut release = release_rx.clone();
                    async move {
                        let _ = started.send(());
                        let _ = release.wait_for(|r| *r).await;
                        Ok(ToolOutput::text("indexed 42 files"))
                    }
                }),
        )
        .unwrap();
    tools
        .register(
            ToolBuilder::new("ask_human")
                .description("Asks the user (a task)")
                .task_support(TaskSupport::Required)
                .raw_handler(json!({"type": "object"}), |_a, ctx| async move {
                    ctx.elicit("ok?", json!({"type": "object"})).await?;
                    Ok(ToolOutput::text("asked"))
                }),
        )
        .unwrap();
    tools
        .register(
            ToolBuilder::new("crash")
                .description("Fails inside the server (a task)")
                .task_support(TaskSupport::Required)
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async {
                    if true {
                        panic!("crash on purpose");
                    }
                    Ok(ToolOutput::default())
                }),
        )
        .unwrap();
    let app = McpApp::builder("tasks", "1.0.0").tools(tools).build();
    let server = RunningServer::start(
        app.clone(),
        loopback().auth(OpenAccess::as_principal(Principal::new("agent"))),
    )
    .await;
    Server {
        url: server.url.clone(),
        app,
        started,
        release,
        _server: server,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_loop_waits_for_a_task_and_reads_its_result() {
    let mut s = server().await;
    let remote = McpSurface::connect_http(&s.url).await.unwrap();
    let agent = Agent::new(
        ScriptedProvider::new([
            ScriptedProvider::call("c1", "index_repo", json!({})),
            ScriptedProvider::text("Indexed."),
        ]),
        remote,
    );
    let run = tokio::spawn(async move {
        agent
            .run(vec![Message::user("index it")], &CancellationToken::new())
            .await
    });
    tokio::time::timeout(WAIT, s.started.recv())
        .await
        .expect("the task started")
        .expect("open");
    // The task is the server's, kept for the agent's principal, and running.
    let tasks = s.app.tasks().list("agent");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(tasks[0].status, TaskStatus::Working);
    s.release.send_replace(true);
    let out = tokio::time::timeout(WAIT, run)
        .await
        .expect("the run ends")
        .expect("joined");
    assert_eq!(out.calls.len(), 1, "{out:?}");
    assert_eq!(out.calls[0].outcome, CallOutcome::Ok, "{out:?}");
    // The model was handed the task's result.
    let handed = format!("{:?}", out.messages);
    assert!(handed.contains("indexed 42 files"), "{handed}");
}

/// The task's creation and each poll that finds it working are signs of work told to the
/// call's progress sink (so the loop's idle timeout does not cut off a task being worked on),
/// though the tool sends no report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_of_a_working_task_are_signs_of_work() {
    let mut s = server().await;
    let remote = McpSurface::connect_http(&s.url).await.unwrap();
    let sink = ProgressSink::new(|_| {});
    let call = {
        let sink = sink.clone();
        async move {
            remote
                .call_with_progress("index_repo", json!({}), CancellationToken::new(), sink)
                .await
        }
    };
    let call = tokio::spawn(call);
    tokio::time::timeout(WAIT, s.started.recv())
        .await
        .expect("the task started")
        .expect("open");
    let first = eventually_async("the task's creation marks the call active", || async {
        sink.last_active()
    })
    .await;
    eventually_async("a poll that finds the task working", || async {
        sink.last_active().filter(|at| *at > first)
    })
    .await;
    s.release.send_replace(true);
    let result = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call ends")
        .expect("joined")
        .unwrap();
    assert_eq!(result.text, "indexed 42 files", "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_call_cancels_the_task() {
    let mut s = server().await;
    let remote = McpSurface::connect_http(&s.url).await.unwrap();
    let cancel = CancellationToken::new();
    let call = {
        let cancel = cancel.clone();
        async move { remote.call("index_repo", json!({}), cancel).await }
    };
    let call = tokio::spawn(call);
    tokio::time::timeout(WAIT, s.started.recv())
        .await
        .expect("the task started")
        .expect("open");
    let id = s.app.tasks().list("agent")[0].id.clone();
    cancel.cancel();
    let r = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call ends")
        .expect("joined")
        .expect("a result");
    assert_eq!(r.code, Some(ErrorCode::Cancelled), "{r:?}");
    let t = tokio::time::timeout(WAIT, s.app.tasks().wait("agent", &id))
        .await
        .expect("the task ends")
        .expect("kept");
    assert_eq!(t.status, TaskStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_asks_or_fails_is_a_clear_failure() {
    let s = server().await;
    let remote = McpSurface::connect_http(&s.url).await.unwrap();
    let r = tokio::time::timeout(
        WAIT,
        remote.call("ask_human", json!({}), CancellationToken::new()),
    )
    .await
    .expect("the call ends")
    .expect("a result");
    assert!(r.is_error, "{r:?}");
    assert_eq!(r.code, Some(ErrorCode::ToolFailed), "{r:?}");
    // This client declares no elicitation, so the tool's question fails inside the task and
    // the task completes with that error: nothing is left waiting.
    assert!(
        r.text.contains("does not support elicitation"),
        "{}",
        r.text
    );
    let asked = s.app.tasks().list("agent");
    assert_eq!(asked[0].status, TaskStatus::Completed, "{asked:?}");

    let r = tokio::time::timeout(
        WAIT,
        remote.call("crash", json!({}), CancellationToken::new()),
    )
    .await
    .expect("the call ends")
    .expect("a result");
    assert_eq!(r.code, Some(ErrorCode::ToolFailed), "{r:?}");
    assert!(!r.text.contains("on purpose"), "{}", r.text);
}

/// A call whose future is dropped while it waits for its task (the run aborted, not cancelled)
/// cancels the task on the server, as a call dropped before its answer is cancelled there: a
/// task nobody waits for must not run on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_that_waits_for_its_task_cancels_the_task() {
    let mut s = server().await;
    let remote = std::sync::Arc::new(McpSurface::connect_http(&s.url).await.unwrap());
    let sink = ProgressSink::new(|_| {});
    let call = {
        let (remote, sink) = (std::sync::Arc::clone(&remote), sink.clone());
        async move {
            remote
                .call_with_progress("index_repo", json!({}), CancellationToken::new(), sink)
                .await
        }
    };
    let call = tokio::spawn(call);
    tokio::time::timeout(WAIT, s.started.recv())
        .await
        .expect("the task started")
        .expect("open");
    let id = s.app.tasks().list("agent")[0].id.clone();
    // The call has the server's answer naming the task and waits for it (its creation marked
    // the call active): drop the call's future.
    eventually_async("the call waits for its task", || async {
        sink.last_active()
    })
    .await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    let t = tokio::time::timeout(WAIT, s.app.tasks().wait("agent", &id))
        .await
        .expect("the task ends without being released")
        .expect("kept");
    assert_eq!(t.status, TaskStatus::Cancelled);
    drop(remote);
}
