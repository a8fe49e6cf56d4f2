//! The [`TaskStore`] in process: the gate's checks come before a task exists, tasks run to a
//! result, several questions at once are answered one by one, a `task_after_input` tool
//! finishes inside its call or becomes a task when it first waits, and the bad paths (a tool
//! without task support, another principal, the limit) are refused with stable codes.
//! Waits are on the store's own signals (`wait`, `wait_for`) or on the tools' messages.

use std::time::Duration;

use kberg_core::{
    CallOptions, Caller, ErrorCode, GateError, Grants, Principal, Started, TaskConfig, TaskError,
    TaskOutcome, TaskStatus, TaskStore, TaskSupport, ToolBuilder, ToolOutput, ToolRegistry,
    WriteCapability,
};
use kberg_testkit::eventually_async_ok;
use serde_json::{Value, json};
use tokio::sync::mpsc;

fn caller(id: &str) -> Caller {
    Caller::new(Principal::new(id).with_grants(Grants::of(["jobs.run"])))
}

fn registry() -> ToolRegistry {
    let tools = ToolRegistry::new();
    let jobs = WriteCapability::new("jobs.run", "Run jobs");
    tools.declare(jobs.clone()).expect("declare");
    tools
        .register(
            ToolBuilder::new("double")
                .description("Doubles n, as a task")
                .task_support(TaskSupport::Optional)
                .write(jobs)
                .raw_handler(
                    json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
                    |a, _ctx| async move {
                        let n = a["n"].as_i64().unwrap_or_default();
                        Ok(ToolOutput::text(format!("{}", n * 2)))
                    },
                ),
        )
        .expect("register double");
    tools
        .register(
            ToolBuilder::new("plain")
                .description("Never a task")
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async {
                    Ok(ToolOutput::text("plain"))
                }),
        )
        .expect("register plain");
    tools
}

/// A client channel that supports elicitation (the questions go to the task, not here).
struct Elicits;

#[async_trait::async_trait]
impl kberg_core::ClientPeer for Elicits {
    async fn notify(&self, _method: &str, _params: Value) -> Result<(), kberg_core::PeerError> {
        Ok(())
    }
    async fn request(
        &self,
        _method: &str,
        _params: Value,
        _cancel: kberg_core::CancellationToken,
    ) -> Result<Value, kberg_core::PeerError> {
        Err(kberg_core::PeerError::InputRequired {
            requests: json!({"from-the-call": {"method": "elicitation/create", "params": {}}}),
        })
    }
    fn supports(&self, capability: &str) -> bool {
        capability == "elicitation"
    }
}

fn with_peer() -> CallOptions {
    CallOptions::default().with_peer(std::sync::Arc::new(Elicits))
}

fn task_of(s: Started) -> kberg_core::TaskSnapshot {
    match s {
        Started::Task(t) => *t,
        other => panic!("expected a task, got {other:?}"),
    }
}

fn text(s: &kberg_core::TaskSnapshot) -> String {
    match &s.outcome {
        Some(TaskOutcome::Completed(out)) => match out.content.first() {
            Some(kberg_core::Content::Text(text)) => text.clone(),
            other => panic!("no text: {other:?}"),
        },
        other => panic!("not completed: {other:?}"),
    }
}

#[tokio::test]
async fn a_task_runs_through_the_gate_to_its_result() {
    let store = TaskStore::new(registry(), TaskConfig::default());
    let alice = caller("alice");
    let started = store
        .start(
            &alice,
            "double",
            json!({"n": 21}),
            CallOptions::default(),
            false,
        )
        .await
        .expect("started");
    let first = task_of(started);
    assert_eq!(first.tool, "double");
    let done = store.wait("alice", &first.id).await.expect("task");
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(text(&done), "42");
    assert_eq!(store.list("alice").len(), 1);
    assert!(store.list("bob").is_empty());
}

#[tokio::test]
async fn the_gate_refuses_before_a_task_exists() {
    let store = TaskStore::new(registry(), TaskConfig::default());
    // No grant: capability_required, and no task.
    let nobody = Caller::new(Principal::new("nobody"));
    let r = store
        .start(
            &nobody,
            "double",
            json!({"n": 1}),
            CallOptions::default(),
            false,
        )
        .await
        .expect("answered");
    match r {
        Started::Finished(Err(e)) => assert_eq!(e.code(), ErrorCode::CapabilityRequired),
        other => panic!("expected a refusal, got {other:?}"),
    }
    // Bad arguments: invalid_arguments, and no task.
    let r = store
        .start(
            &caller("alice"),
            "double",
            json!({"n": "x"}),
            CallOptions::default(),
            false,
        )
        .await
        .expect("answered");
    assert!(
        matches!(
            r,
            Started::Finished(Err(GateError::InvalidArguments { .. }))
        ),
        "{r:?}"
    );
    assert!(store.list("alice").is_empty());
    assert!(store.list("nobody").is_empty());
    // A tool without task support.
    let e = store
        .start(
            &caller("alice"),
            "plain",
            json!({}),
            CallOptions::default(),
            false,
        )
        .await
        .expect_err("not a task tool");
    assert_eq!(e.code(), "task_not_supported");
}

#[tokio::test]
async fn two_questions_at_once_are_answered_one_by_one() {
    let tools = registry();
    tools
        .register(
            ToolBuilder::new("two_questions")
                .task_support(TaskSupport::Optional)
                .raw_handler(json!({"type": "object"}), |_a, ctx| async move {
                    let (a, b) = tokio::join!(
                        ctx.elicit("first?", json!({"type": "object"})),
                        ctx.elicit("second?", json!({"type": "object"})),
                    );
                    Ok(ToolOutput::text(format!(
                        "{} {}",
                        a?["action"], b?["action"]
                    )))
                }),
        )
        .expect("register");
    let store = TaskStore::new(tools, TaskConfig::default());
    let id = task_of(
        store
            .start(
                &caller("alice"),
                "two_questions",
                json!({}),
                with_peer(),
                false,
            )
            .await
            .expect("started"),
    )
    .id;
    store
        .wait_for("alice", &id, TaskStatus::InputRequired)
        .await
        .expect("task");
    // Both questions are asked in the tool's first poll; wait for the second to land.
    let parked = eventually_async_ok("the second question to land", || {
        let parked = store.get("alice", &id).expect("task");
        let seen = if parked.input_requests.len() >= 2 {
            Ok(parked)
        } else {
            Err(format!("{parked:?}"))
        };
        async move { seen }
    })
    .await;
    let keys: Vec<String> = parked.input_requests.keys().cloned().collect();
    store
        .answer(
            "alice",
            &id,
            [(keys[0].clone(), json!({"action": "accept"}))],
        )
        .expect("answered");
    let after = store.get("alice", &id).expect("task");
    assert_eq!(after.status, TaskStatus::InputRequired);
    assert_eq!(
        after.input_requests.keys().cloned().collect::<Vec<_>>(),
        vec![keys[1].clone()]
    );
    // Another principal cannot answer.
    let e = store
        .answer(
            "bob",
            &id,
            [(keys[1].clone(), json!({"action": "decline"}))],
        )
        .expect_err("not bob's");
    assert_eq!(e, TaskError::NotFound { id: id.clone() });
    store
        .answer(
            "alice",
            &id,
            [(keys[1].clone(), json!({"action": "decline"}))],
        )
        .expect("answered");
    let done = store.wait("alice", &id).await.expect("task");
    assert_eq!(text(&done), "\"accept\" \"decline\"");
}

#[tokio::test]
async fn a_task_after_input_tool_finishes_in_its_call_or_becomes_a_task_when_it_waits() {
    let tools = registry();
    let (go_tx, go_rx) = mpsc::unbounded_channel::<()>();
    let go_rx = std::sync::Arc::new(tokio::sync::Mutex::new(go_rx));
    tools
        .register(
            ToolBuilder::new("ask_then_work")
                .task_support(TaskSupport::Required)
                .task_after_input()
                .raw_handler(
                    json!({"type": "object", "properties": {"wait": {"type": "boolean"}}}),
                    move |a, ctx| {
                        let go = go_rx.clone();
                        async move {
                            if a["ask"] == true {
                                ctx.elicit("name?", json!({"type": "object"})).await?;
                            }
                            if a["wait"] == true {
                                go.lock().await.recv().await;
                            }
                            Ok(ToolOutput::text("worked"))
                        }
                    },
                ),
        )
        .expect("register");
    let store = TaskStore::new(tools, TaskConfig::default());
    let alice = caller("alice");
    // Finishes before it ever waits: a plain result, no task kept.
    let r = store
        .start(&alice, "ask_then_work", json!({}), with_peer(), false)
        .await
        .expect("answered");
    assert!(matches!(r, Started::Finished(Ok(_))), "{r:?}");
    // Asks in the call: the call's channel answers input_required, no task kept.
    let r = store
        .start(
            &alice,
            "ask_then_work",
            json!({"ask": true}),
            with_peer(),
            false,
        )
        .await
        .expect("answered");
    assert!(
        matches!(r, Started::Finished(Err(GateError::InputRequired { .. }))),
        "{r:?}"
    );
    assert!(store.list("alice").is_empty());
    // Waits: a task, which finishes once released.
    let first = task_of(
        store
            .start(
                &alice,
                "ask_then_work",
                json!({"wait": true}),
                with_peer(),
                false,
            )
            .await
            .expect("started"),
    );
    assert_eq!(
        store.get("alice", &first.id).expect("visible").status,
        TaskStatus::Working
    );
    go_tx.send(()).expect("the tool waits");
    let done = store.wait("alice", &first.id).await.expect("task");
    assert_eq!(text(&done), "worked");
}

#[tokio::test]
async fn the_limit_counts_kept_tasks_per_principal() {
    let store = TaskStore::new(
        registry(),
        TaskConfig::default()
            .max_per_principal(1)
            .ttl(Duration::from_secs(60)),
    );
    let id = task_of(
        store
            .start(
                &caller("alice"),
                "double",
                json!({"n": 1}),
                CallOptions::default(),
                false,
            )
            .await
            .expect("started"),
    )
    .id;
    store.wait("alice", &id).await.expect("done");
    let e = store
        .start(
            &caller("alice"),
            "double",
            json!({"n": 2}),
            CallOptions::default(),
            false,
        )
        .await
        .expect_err("over the limit");
    assert_eq!(e.code(), "too_many_tasks");
    assert!(e.to_string().contains("1 tasks"), "{e}");
    store
        .start(
            &caller("bob"),
            "double",
            json!({"n": 2}),
            CallOptions::default(),
            false,
        )
        .await
        .expect("bob has his own");
}

#[tokio::test]
async fn a_waiter_is_told_when_the_task_expires() {
    // A task whose tool never ends, and nothing else happening: its expiry is the only event.
    let tools = registry();
    tools
        .register(
            ToolBuilder::new("forever")
                .description("Never ends")
                .task_support(TaskSupport::Optional)
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async {
                    std::future::pending::<()>().await;
                    Ok(ToolOutput::text("never"))
                }),
        )
        .expect("register forever");
    let store = TaskStore::new(tools, TaskConfig::default().ttl(Duration::from_secs(2)));
    let id = task_of(
        store
            .start(
                &caller("alice"),
                "forever",
                json!({}),
                CallOptions::default(),
                false,
            )
            .await
            .expect("started"),
    )
    .id;
    assert_eq!(
        store.get("alice", &id).expect("alive").status,
        TaskStatus::Working
    );
    // The bound only keeps a broken build from hanging; the answer comes at the expiry.
    let waited = tokio::time::timeout(Duration::from_secs(120), store.wait("alice", &id))
        .await
        .expect("the waiter is woken at the expiry");
    assert_eq!(waited.expect_err("expired").code(), "task_not_found");
    let waited = tokio::time::timeout(
        Duration::from_secs(120),
        store.wait_for("alice", &id, TaskStatus::InputRequired),
    )
    .await
    .expect("gone at once");
    assert_eq!(waited.expect_err("expired").code(), "task_not_found");
}

#[test]
fn the_detailed_task_has_the_wire_shape() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let store = TaskStore::new(registry(), TaskConfig::default());
        let id = task_of(
            store
                .start(
                    &caller("alice"),
                    "double",
                    json!({"n": 2}),
                    CallOptions::default(),
                    false,
                )
                .await
                .expect("started"),
        )
        .id;
        let done = store.wait("alice", &id).await.expect("done");
        let j = Value::Object(done.detailed_json());
        assert_eq!(j["taskId"], id);
        assert_eq!(j["status"], "completed");
        assert_eq!(j["ttlMs"], 900_000);
        assert_eq!(j["pollIntervalMs"], 500);
        assert_eq!(j["result"]["content"][0]["text"], "4");
        assert_eq!(j["result"]["isError"], false);
        assert!(j.get("inputRequests").is_none() && j.get("error").is_none());
        assert!(j["createdAt"].as_str().expect("time").ends_with('Z'));
    });
}
