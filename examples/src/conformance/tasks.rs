//! The fixtures of the suite's tasks-extension scenarios (`tasks-*`).
//!
//! Each scenario's description names the tools it calls and how they behave: `greet` answers at
//! once, `slow_compute` sleeps `seconds` seconds, `failing_job` reports a tool error after about
//! a second (and only runs as a task), `protocol_error_job` fails inside the server,
//! `confirm_delete` and `multi_input` ask the user one and two questions while running as a
//! task, and `test_tool_with_task` asks for a name inside the call first and only then becomes
//! a task. They are ordinary Kberg tools with a declared [`TaskSupport`]: running them as tasks
//! is kberg-core's and kberg-server's job, which is what the scenarios test.

use kberg_core::{CoreError, TaskSupport, ToolBuilder, ToolError, ToolOutput, ToolRegistry};
use kberg_server::input::{Question, ask};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{no_args, pause};

#[derive(Deserialize, JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
}

#[derive(Deserialize, JsonSchema)]
struct ComputeArgs {
    /// How long the computation takes, in seconds (0 answers at once).
    seconds: f64,
    /// A label echoed in the result.
    #[serde(default)]
    label: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
struct DeleteArgs {
    /// The file to delete once the user confirms.
    filename: String,
}

fn confirm_schema() -> Value {
    json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]})
}

fn name_schema() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})
}

/// Whether an elicitation result accepted with `content.confirm` true.
fn confirmed(answer: &Value) -> bool {
    answer["action"] == "accept" && answer["content"]["confirm"] == true
}

/// Registers the tasks fixtures.
pub(super) fn tools(tools: &ToolRegistry) -> Result<(), CoreError> {
    tools.register(
        ToolBuilder::new("greet")
            .description("Greets someone at once (never runs as a task)")
            .handler(|a: GreetArgs, _ctx| async move {
                Ok(ToolOutput::text(format!("Hello, {}!", a.name)))
            }),
    )?;
    tools.register(
        ToolBuilder::new("slow_compute")
            .description("Computes for `seconds` seconds, as a task when the client supports tasks")
            .task_support(TaskSupport::Optional)
            .handler(|a: ComputeArgs, _ctx| async move {
                if !a.seconds.is_finite() || a.seconds < 0.0 || a.seconds > 3600.0 {
                    return Err(ToolError::failed("seconds must be between 0 and 3600"));
                }
                if a.seconds > 0.0 {
                    // The gate drops this future when the task is cancelled.
                    tokio::time::sleep(std::time::Duration::from_secs_f64(a.seconds)).await;
                }
                let label = a.label.unwrap_or_else(|| "computation".into());
                Ok(ToolOutput::text(format!(
                    "{label}: done after {} s",
                    a.seconds
                )))
            }),
    )?;
    tools.register(
        ToolBuilder::new("failing_job")
            .description("Runs only as a task and reports a tool error after about a second")
            .task_support(TaskSupport::Required)
            .raw_handler(no_args(), |_a, _ctx| async {
                pause(1000).await;
                Err::<ToolOutput, _>(ToolError::failed("the job failed, as it always does"))
            }),
    )?;
    tools.register(
        ToolBuilder::new("protocol_error_job")
            .description("Runs as a task and fails inside the server (an internal error)")
            .task_support(TaskSupport::Optional)
            .raw_handler(no_args(), |_a, _ctx| async {
                pause(100).await;
                panic!("protocol_error_job fails on purpose");
            }),
    )?;
    tools.register(
        ToolBuilder::new("confirm_delete")
            .description("Asks the user to confirm, then deletes the file (as a task)")
            .task_support(TaskSupport::Optional)
            .handler(|a: DeleteArgs, ctx| async move {
                let answer = ctx
                    .elicit(&format!("Delete {}?", a.filename), confirm_schema())
                    .await?;
                Ok(ToolOutput::text(if confirmed(&answer) {
                    format!("Deleted {}", a.filename)
                } else {
                    format!("Kept {}", a.filename)
                }))
            }),
    )?;
    tools.register(
        ToolBuilder::new("multi_input")
            .description("Asks two questions at once (as a task) and answers with both")
            .task_support(TaskSupport::Optional)
            .raw_handler(no_args(), |_a, ctx| async move {
                let (name, confirm) = tokio::join!(
                    ctx.elicit("What is your name?", name_schema()),
                    ctx.elicit("Shall I go on?", confirm_schema()),
                );
                let (name, confirm) = (name?, confirm?);
                let name = name["content"]["name"].as_str().unwrap_or("stranger");
                Ok(ToolOutput::text(format!(
                    "{name} {} going on",
                    if confirmed(&confirm) { "is" } else { "is not" }
                )))
            }),
    )?;
    tools.register(
        ToolBuilder::new("test_tool_with_task")
            .description("Asks for a name inside the call, then greets as a task")
            .task_support(TaskSupport::Required)
            .task_after_input()
            .raw_handler(no_args(), |_a, ctx| async move {
                let answers = ask(
                    &ctx,
                    vec![Question::elicit(
                        "user_name",
                        "What is your name?",
                        name_schema(),
                    )],
                )
                .await?;
                let name = answers
                    .get("user_name")
                    .and_then(|r| r["content"]["name"].as_str())
                    .unwrap_or("stranger")
                    .to_string();
                // The greeting takes a moment: this is where the call becomes a task.
                pause(100).await;
                Ok(ToolOutput::text(format!("Hello, {name}!")))
            }),
    )?;
    Ok(())
}
