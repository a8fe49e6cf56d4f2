//! A task-augmented call that omits its arguments is judged as the same direct call is: null
//! arguments are an empty object, both in the checks before the task exists and in the run.

use kberg_core::{
    CallOptions, Caller, Principal, Started, TaskConfig, TaskOutcome, TaskStatus, TaskStore,
    TaskSupport, ToolBuilder, ToolOutput, ToolRegistry,
};
use serde_json::{Value, json};

/// A task-capable tool whose arguments must be an object, answering with the arguments it got.
fn registry() -> ToolRegistry {
    let tools = ToolRegistry::new();
    tools
        .register(
            ToolBuilder::new("echo")
                .description("Echoes its arguments, as a task")
                .task_support(TaskSupport::Optional)
                .raw_handler(json!({"type": "object"}), |a, _ctx| async move {
                    Ok(ToolOutput::text(a.to_string()))
                }),
        )
        .expect("register echo");
    tools
}

#[tokio::test]
async fn a_task_without_arguments_runs_with_an_empty_object() {
    let tools = registry();
    let ann = Caller::new(Principal::new("ann"));
    // The check transports run before answering agrees with the call.
    assert!(tools.check(&ann, "echo", &Value::Null).is_ok());
    let direct = tools
        .call(&ann, "echo", Value::Null, CallOptions::default())
        .await
        .expect("a direct call without arguments runs");
    assert_eq!(direct.all_text(), "{}");

    let store = TaskStore::new(tools, TaskConfig::default());
    let started = store
        .start(&ann, "echo", Value::Null, CallOptions::default(), false)
        .await
        .expect("started");
    let task = match started {
        Started::Task(t) => *t,
        other => panic!("expected a task, got {other:?}"),
    };
    let done = store.wait("ann", &task.id).await.expect("task");
    assert_eq!(done.status, TaskStatus::Completed);
    match &done.outcome {
        Some(TaskOutcome::Completed(out)) => assert_eq!(out.all_text(), "{}"),
        other => panic!("not completed: {other:?}"),
    }
}
