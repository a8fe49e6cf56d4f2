//! What a task looks like from outside: its status, how it ended, and the snapshot the store
//! hands out, with the MCP tasks extension's JSON shape (`Task` fields, and the detailed task
//! of `tasks/get` and `notifications/tasks`).

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};

use crate::content::ToolOutput;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskStatus {
    /// The tool is running.
    Working,
    /// The tool waits for answers from the client (see [`TaskSnapshot::input_requests`]).
    InputRequired,
    /// The tool finished; its result (possibly an error result) is in the task.
    Completed,
    /// The server failed internally while running the tool.
    Failed,
    /// The task was cancelled.
    Cancelled,
}

impl TaskStatus {
    /// Whether the task is over (completed, failed or cancelled).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The MCP wire name (`working`, `input_required`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// How a finished task ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TaskOutcome {
    /// The tool's result (an error result when the tool reported an error).
    Completed(ToolOutput),
    /// An internal failure, as a JSON-RPC error.
    Failed {
        /// JSON-RPC error code.
        code: i64,
        /// What went wrong, in words safe to show.
        message: String,
    },
}

/// One task as it stands.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TaskSnapshot {
    /// The task id.
    pub id: String,
    /// The tool it runs.
    pub tool: String,
    /// Its status.
    pub status: TaskStatus,
    /// A sentence on the current state, when there is one.
    pub status_message: Option<String>,
    /// When it was created.
    pub created_at: SystemTime,
    /// When its state last changed.
    pub updated_at: SystemTime,
    /// How long it is kept from its creation.
    pub ttl: Duration,
    /// The suggested polling interval.
    pub poll_interval: Duration,
    /// The questions waiting for the client, by key (`{method, params}`); empty unless
    /// `input_required`.
    pub input_requests: Map<String, Value>,
    /// How it ended, once terminal (a cancelled task has none).
    pub outcome: Option<TaskOutcome>,
}

impl TaskSnapshot {
    /// The MCP tasks extension's task fields: `taskId`, `status`, `statusMessage`,
    /// `createdAt`, `lastUpdatedAt` (RFC 3339, UTC), `ttlMs`, `pollIntervalMs` (integer
    /// milliseconds).
    pub fn task_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("taskId".into(), json!(self.id));
        m.insert("status".into(), json!(self.status.as_str()));
        if let Some(s) = &self.status_message {
            m.insert("statusMessage".into(), json!(s));
        }
        m.insert("createdAt".into(), json!(rfc3339(self.created_at)));
        m.insert("lastUpdatedAt".into(), json!(rfc3339(self.updated_at)));
        m.insert("ttlMs".into(), json!(millis(self.ttl)));
        m.insert("pollIntervalMs".into(), json!(millis(self.poll_interval)));
        m
    }

    /// The detailed task (the task fields, plus `inputRequests` while `input_required`, the
    /// inlined `result` once completed, or the `error` once failed): the shape of a
    /// `tasks/get` answer and of a `notifications/tasks` notification.
    pub fn detailed_json(&self) -> Map<String, Value> {
        let mut m = self.task_json();
        if self.status == TaskStatus::InputRequired {
            m.insert(
                "inputRequests".into(),
                Value::Object(self.input_requests.clone()),
            );
        }
        match &self.outcome {
            Some(TaskOutcome::Completed(out)) => {
                let result = serde_json::to_value(out).unwrap_or_else(|_| json!({}));
                m.insert("result".into(), result);
            }
            Some(TaskOutcome::Failed { code, message }) => {
                m.insert("error".into(), json!({"code": code, "message": message}));
            }
            None => {}
        }
        m
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
