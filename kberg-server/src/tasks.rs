//! The MCP tasks extension (`io.modelcontextprotocol/tasks`) on the wire.
//!
//! kberg-core's [`TaskStore`](kberg_core::TaskStore) owns the tasks; this module turns them into
//! rmcp's types and back, for both protocol generations (the extension is declared in the
//! client's `initialize` capabilities on 2025-11-25, and in each request's `_meta` on
//! 2026-07-28; rmcp checks the declaration for `tasks/get`, `tasks/update` and `tasks/cancel`
//! and answers `-32021` without it). What a client sees:
//!
//! - a `tools/call` of a tool with task support, from a client that declared the extension,
//!   answers with a `CreateTaskResult` (`resultType: "task"`, the task fields flat at the top);
//!   a tool whose support is `required`, called by a client that did not, is refused with
//!   `-32021` naming the extension (after the gate's checks, so a caller who may not call the
//!   tool learns only that);
//! - `tasks/get` answers the detailed task (`inputRequests` while `input_required`, the inlined
//!   `result` once completed, `error` once failed); `tasks/update` delivers answers to its input
//!   requests and `tasks/cancel` cancels it, both with an empty `{resultType: "complete"}` ack;
//! - an unknown task id, an expired task and another principal's task are all `-32602` with
//!   `data.code = "task_not_found"`; a principal over its task limit gets a refusal result with
//!   code `too_many_tasks`;
//! - `tasks/result` and `tasks/list`, which the extension removed, are `-32601`;
//! - on a 2025-11-25 session each change of a task the session started is sent as
//!   `notifications/tasks`. On 2026-07-28 rmcp's `subscriptions/listen` cannot carry task
//!   notifications yet, so clients poll `tasks/get` (at the `pollIntervalMs` they are given).

use kberg_core::{ErrorCode, Refusal, TaskError, TaskSnapshot};
use rmcp::ErrorData as McpError;
use rmcp::model::{CreateTaskResult, GetTaskResult, Task};
use serde_json::{Value, json};

use crate::convert;

/// The `CreateTaskResult` of a task just started.
pub(crate) fn created(s: &TaskSnapshot) -> Result<CreateTaskResult, McpError> {
    let task: Task = convert::from_json("a task", Value::Object(s.task_json()))?;
    Ok(CreateTaskResult::new(task))
}

/// The `tasks/get` answer for a task.
pub(crate) fn detailed(s: &TaskSnapshot) -> Result<GetTaskResult, McpError> {
    let mut m = s.detailed_json();
    m.insert("resultType".into(), json!("complete"));
    convert::from_json("a task", Value::Object(m))
}

/// A task operation's refusal as a JSON-RPC error: `-32602` with the stable code in `data`.
pub(crate) fn error(e: &TaskError) -> McpError {
    let mut data = json!({"code": e.code()});
    if let TaskError::NotFound { id } = e {
        data["taskId"] = json!(id);
    }
    McpError::invalid_params(e.to_string(), Some(data))
}

/// A `tools/call` that could not start its task, as the caller's refusal result.
pub(crate) fn refusal(e: &TaskError, tool: &str) -> Refusal {
    let code = match e {
        TaskError::TooManyTasks { .. } => ErrorCode::TooManyTasks,
        _ => ErrorCode::ToolFailed,
    };
    Refusal::new(code, tool, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_tasks_are_invalid_params_with_a_stable_code() {
        let e = error(&TaskError::NotFound { id: "t1".into() });
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        let data = e.data.expect("data");
        assert_eq!(data["code"], "task_not_found");
        assert_eq!(data["taskId"], "t1");
    }
}
