//! The write tools (each needs `kanboard.write`) and the refusals for deletes and
//! administration.
//!
//! Each write tool runs in a write session ([`Session::for_write`]): the project it changes,
//! or the project of the task it changes, must be one the caller may change, not only read
//! (`capability_required` otherwise, before anything is sent). The capability alone is not
//! enough: it is the union over the caller's projects.
//!
//! Kanboard answers a write it did not like with `false` and no reason, so every write is
//! checked first (the task exists in a mapped project, names resolve, the owner is assignable,
//! dates parse) and a `false` that still comes back is reported as `kanboard_rejected` naming
//! what was checked. Nothing is retried: `create_task` takes an optional `reference`, and a
//! create repeated with the same reference finds the task instead of making a second one.

use std::sync::Arc;

use kberg_core::{CoreError, ToolBuilder, ToolContext, ToolOutput, ToolRegistry, WriteCapability};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::client::as_id;
use super::read::with_session;
use super::resolve::{NameOrId, ResolveError};
use super::{KanboardTools, Session, dates, json_output, refusal, refusal_with, task_summary};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct CreateTaskArgs {
    /// The Kanboard project id.
    project_id: i64,
    /// The title.
    #[schemars(length(min = 1))]
    title: String,
    /// The description (Markdown).
    #[serde(default)]
    description: Option<String>,
    /// The column, by name or id (default: the first).
    #[serde(default)]
    column: Option<NameOrId>,
    /// The swimlane, by name or id (default: the first).
    #[serde(default)]
    swimlane: Option<NameOrId>,
    /// The category, by name or id.
    #[serde(default)]
    category: Option<NameOrId>,
    /// The assignee, by username or id (must be assignable in the project).
    #[serde(default)]
    owner: Option<NameOrId>,
    /// Due date, ISO 8601 (`2026-12-31` or `2026-12-31T17:00`).
    #[serde(default)]
    date_due: Option<String>,
    /// Priority (the project's range, usually 0 to 3).
    #[serde(default)]
    priority: Option<i64>,
    /// Tags (names; new ones are created).
    #[serde(default)]
    tags: Option<Vec<String>>,
    /// Your own unique reference for this task (an issue number, a ticket key). A create
    /// repeated with the same reference returns the existing task instead of a duplicate.
    #[serde(default)]
    reference: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct UpdateTaskArgs {
    /// The task id.
    task_id: i64,
    /// New title.
    #[serde(default)]
    #[schemars(length(min = 1))]
    title: Option<String>,
    /// New description.
    #[serde(default)]
    description: Option<String>,
    /// New category, by name or id.
    #[serde(default)]
    category: Option<NameOrId>,
    /// New due date, ISO 8601; an empty string clears it.
    #[serde(default)]
    date_due: Option<String>,
    /// New priority.
    #[serde(default)]
    priority: Option<i64>,
    /// New reference.
    #[serde(default)]
    reference: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct MoveTaskArgs {
    /// The task id.
    task_id: i64,
    /// The target column, by name or id.
    column: NameOrId,
    /// The target swimlane, by name or id (default: the task's current one).
    #[serde(default)]
    swimlane: Option<NameOrId>,
    /// The position in the column, from 1 (default: 1, the top).
    #[serde(default)]
    #[schemars(range(min = 1))]
    position: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct TaskArgs {
    /// The task id.
    task_id: i64,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct AssignArgs {
    /// The task id.
    task_id: i64,
    /// The assignee, by username or id; omit or `null` to unassign.
    #[serde(default)]
    user: Option<NameOrId>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SetTagsArgs {
    /// The task id.
    task_id: i64,
    /// The complete list of tags (replaces the current ones; `[]` removes all).
    tags: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct CommentArgs {
    /// The task id.
    task_id: i64,
    /// The comment (Markdown).
    #[schemars(length(min = 1))]
    content: String,
}

/// A subtask's state.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SubtaskStatus {
    /// Not started.
    Todo,
    /// In progress.
    InProgress,
    /// Done.
    Done,
}

impl SubtaskStatus {
    fn code(self) -> i64 {
        match self {
            SubtaskStatus::Todo => 0,
            SubtaskStatus::InProgress => 1,
            SubtaskStatus::Done => 2,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct CreateSubtaskArgs {
    /// The parent task id.
    task_id: i64,
    /// The subtask's title.
    #[schemars(length(min = 1))]
    title: String,
    /// Who does it, by username or id.
    #[serde(default)]
    user: Option<NameOrId>,
    /// Estimated hours.
    #[serde(default)]
    time_estimated: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct UpdateSubtaskArgs {
    /// The subtask id.
    subtask_id: i64,
    /// Its parent task id.
    task_id: i64,
    /// New title.
    #[serde(default)]
    #[schemars(length(min = 1))]
    title: Option<String>,
    /// New state.
    #[serde(default)]
    status: Option<SubtaskStatus>,
    /// New assignee, by username or id.
    #[serde(default)]
    user: Option<NameOrId>,
}

fn resolve_refusal(e: &ResolveError) -> ToolOutput {
    refusal_with(
        "unknown_name",
        e.to_string(),
        json!({"field": e.what, "given": e.given, "choices": e.choices}),
    )
}

fn date_arg(field: &'static str, v: &str) -> Result<String, ToolOutput> {
    dates::to_kanboard(field, v).map_err(|e| refusal("invalid_date", e.to_string()))
}

/// Kanboard said `false` after every check passed.
fn rejected(what: &str, checked: &str) -> ToolOutput {
    refusal(
        "kanboard_rejected",
        format!(
            "Kanboard refused to {what} and gave no reason; {checked} were checked and are valid, so Kanboard's own rules (permissions of your Kanboard user, a project setting) refused it"
        ),
    )
}

fn task_project(task: &Value) -> i64 {
    task.get("project_id").and_then(as_id).unwrap_or(0)
}

/// `true` from Kanboard, or the rejection.
fn expect_true(v: &Value, what: &str, checked: &str) -> Result<(), ToolOutput> {
    if v == &json!(true) {
        Ok(())
    } else {
        Err(rejected(what, checked))
    }
}

async fn create_task(s: &Session, a: CreateTaskArgs) -> Result<ToolOutput, ToolOutput> {
    s.check_project(a.project_id)?;
    let title = a.title.trim();
    if title.is_empty() {
        return Err(refusal("invalid_arguments", "`title` must not be empty"));
    }
    let reference = a
        .reference
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    if let Some(reference) = reference {
        let existing = s
            .call(
                "getTaskByReference",
                json!({"project_id": a.project_id, "reference": reference}),
            )
            .await?;
        if existing.is_object() {
            return Ok(json_output(&json!({
                "created": false,
                "note": "a task with this reference already exists; it was not created again",
                "task": task_summary(&existing, None),
            })));
        }
    }
    let mut params = Map::new();
    params.insert("project_id".into(), json!(a.project_id));
    params.insert("title".into(), json!(title));
    if a.column.is_some() || a.swimlane.is_some() || a.category.is_some() || a.owner.is_some() {
        let ctx = s.context(a.project_id).await?;
        if let Some(c) = &a.column {
            params.insert(
                "column_id".into(),
                json!(ctx.column(c).map_err(|e| resolve_refusal(&e))?),
            );
        }
        if let Some(c) = &a.swimlane {
            params.insert(
                "swimlane_id".into(),
                json!(ctx.swimlane(c).map_err(|e| resolve_refusal(&e))?),
            );
        }
        if let Some(c) = &a.category {
            params.insert(
                "category_id".into(),
                json!(ctx.category(c).map_err(|e| resolve_refusal(&e))?),
            );
        }
        if let Some(c) = &a.owner {
            params.insert(
                "owner_id".into(),
                json!(ctx.user(c).map_err(|e| resolve_refusal(&e))?),
            );
        }
    }
    if let Some(d) = &a.date_due {
        params.insert("date_due".into(), json!(date_arg("date_due", d)?));
    }
    if let Some(d) = &a.description {
        params.insert("description".into(), json!(d));
    }
    if let Some(p) = a.priority {
        params.insert("priority".into(), json!(p));
    }
    if let Some(t) = &a.tags {
        params.insert("tags".into(), json!(t));
    }
    if let Some(r) = reference {
        params.insert("reference".into(), json!(r));
    }
    let id = match s.call("createTask", Value::Object(params)).await {
        Ok(id) => id,
        Err(mut out) if reference.is_some() => {
            // A timeout may have created it: the same call again finds it by reference.
            if let Some(kberg_core::Content::Text(t)) = out.content.first_mut() {
                t.push_str(" Repeat the same create_task with the same reference: an existing task is found, not duplicated.");
            }
            return Err(out);
        }
        Err(out) => return Err(out),
    };
    match as_id(&id) {
        Some(task_id) if task_id > 0 => {
            Ok(json_output(&json!({"created": true, "task_id": task_id})))
        }
        _ => Err(rejected(
            "create the task",
            "the project, title, column, swimlane, category, owner and due date",
        )),
    }
}

async fn update_task(s: &Session, a: UpdateTaskArgs) -> Result<ToolOutput, ToolOutput> {
    let task = s.task(a.task_id).await?;
    let mut params = Map::new();
    params.insert("id".into(), json!(a.task_id));
    if let Some(t) = &a.title {
        let t = t.trim();
        if t.is_empty() {
            return Err(refusal("invalid_arguments", "`title` must not be empty"));
        }
        params.insert("title".into(), json!(t));
    }
    if let Some(d) = &a.description {
        params.insert("description".into(), json!(d));
    }
    if let Some(c) = &a.category {
        let ctx = s.context(task_project(&task)).await?;
        params.insert(
            "category_id".into(),
            json!(ctx.category(c).map_err(|e| resolve_refusal(&e))?),
        );
    }
    if let Some(d) = &a.date_due {
        params.insert("date_due".into(), json!(date_arg("date_due", d)?));
    }
    if let Some(p) = a.priority {
        params.insert("priority".into(), json!(p));
    }
    if let Some(r) = &a.reference {
        // As create_task writes and looks it up: untrimmed, a later create with the same
        // reference would not find this task and make a second one.
        params.insert("reference".into(), json!(r.trim()));
    }
    if params.len() == 1 {
        return Err(refusal(
            "nothing_to_update",
            "name at least one of title, description, category, date_due, priority, reference (use move_task, assign_task, set_tags for the rest)",
        ));
    }
    let ok = s.call("updateTask", Value::Object(params)).await?;
    expect_true(
        &ok,
        "update the task",
        "the task, title, category and due date",
    )?;
    Ok(json_output(&json!({"updated": true, "task_id": a.task_id})))
}

async fn move_task(s: &Session, a: MoveTaskArgs) -> Result<ToolOutput, ToolOutput> {
    let task = s.task(a.task_id).await?;
    let project_id = task_project(&task);
    let ctx = s.context(project_id).await?;
    let column_id = ctx.column(&a.column).map_err(|e| resolve_refusal(&e))?;
    let swimlane_id = match &a.swimlane {
        Some(sw) => ctx.swimlane(sw).map_err(|e| resolve_refusal(&e))?,
        None => task.get("swimlane_id").and_then(as_id).unwrap_or(0),
    };
    let position = a.position.unwrap_or(1).max(1);
    let ok = s
        .call(
            "moveTaskPosition",
            json!({"project_id": project_id, "task_id": a.task_id, "column_id": column_id, "position": position, "swimlane_id": swimlane_id}),
        )
        .await?;
    expect_true(
        &ok,
        "move the task",
        "the task, column, swimlane and position",
    )?;
    Ok(json_output(&json!({
        "moved": true,
        "task_id": a.task_id,
        "column_id": column_id,
        "column": ctx.column_name(column_id),
        "swimlane_id": swimlane_id,
        "position": position,
    })))
}

async fn set_status(s: &Session, task_id: i64, close: bool) -> Result<ToolOutput, ToolOutput> {
    let task = s.task(task_id).await?;
    let open = task.get("is_active").and_then(as_id) != Some(0);
    if open != close {
        // Already in the asked state: Kanboard would answer `false` for no reason.
        return Ok(json_output(
            &json!({"task_id": task_id, "status": if close { "closed" } else { "open" }, "changed": false}),
        ));
    }
    let (method, what) = if close {
        ("closeTask", "close the task")
    } else {
        ("openTask", "reopen the task")
    };
    let ok = s.call(method, json!({"task_id": task_id})).await?;
    expect_true(&ok, what, "the task")?;
    Ok(json_output(
        &json!({"task_id": task_id, "status": if close { "closed" } else { "open" }, "changed": true}),
    ))
}

async fn close_task(s: &Session, a: TaskArgs) -> Result<ToolOutput, ToolOutput> {
    set_status(s, a.task_id, true).await
}

async fn reopen_task(s: &Session, a: TaskArgs) -> Result<ToolOutput, ToolOutput> {
    set_status(s, a.task_id, false).await
}

async fn assign_task(s: &Session, a: AssignArgs) -> Result<ToolOutput, ToolOutput> {
    let task = s.task(a.task_id).await?;
    let owner_id = match &a.user {
        Some(u) => {
            let ctx = s.context(task_project(&task)).await?;
            ctx.user(u).map_err(|e| resolve_refusal(&e))?
        }
        None => 0,
    };
    let ok = s
        .call("updateTask", json!({"id": a.task_id, "owner_id": owner_id}))
        .await?;
    expect_true(
        &ok,
        "assign the task",
        "the task and the assignee (an assignable user)",
    )?;
    Ok(json_output(
        &json!({"task_id": a.task_id, "owner_id": (owner_id != 0).then_some(owner_id)}),
    ))
}

async fn set_tags(s: &Session, a: SetTagsArgs) -> Result<ToolOutput, ToolOutput> {
    let task = s.task(a.task_id).await?;
    let tags: Vec<&str> = a
        .tags
        .iter()
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .collect();
    let ok = s
        .call(
            "setTaskTags",
            json!({"project_id": task_project(&task), "task_id": a.task_id, "tags": tags}),
        )
        .await?;
    expect_true(&ok, "set the tags", "the task")?;
    Ok(json_output(&json!({"task_id": a.task_id, "tags": tags})))
}

async fn add_comment(s: &Session, a: CommentArgs) -> Result<ToolOutput, ToolOutput> {
    s.task(a.task_id).await?;
    let content = a.content.trim();
    if content.is_empty() {
        return Err(refusal("invalid_arguments", "`content` must not be empty"));
    }
    let Some((user_id, _)) = s.me().await? else {
        return Err(refusal(
            "no_kanboard_user",
            "comments are written as a Kanboard user, and this gateway reaches Kanboard with the application token and no acting user; an administrator must give this agent a user token",
        ));
    };
    let id = s
        .call(
            "createComment",
            json!({"task_id": a.task_id, "user_id": user_id, "content": content}),
        )
        .await?;
    match as_id(&id) {
        Some(comment_id) if comment_id > 0 => Ok(json_output(
            &json!({"comment_id": comment_id, "task_id": a.task_id}),
        )),
        _ => Err(rejected("add the comment", "the task and the content")),
    }
}

async fn create_subtask(s: &Session, a: CreateSubtaskArgs) -> Result<ToolOutput, ToolOutput> {
    let task = s.task(a.task_id).await?;
    let title = a.title.trim();
    if title.is_empty() {
        return Err(refusal("invalid_arguments", "`title` must not be empty"));
    }
    let mut params = json!({"task_id": a.task_id, "title": title});
    if let Some(u) = &a.user {
        let ctx = s.context(task_project(&task)).await?;
        params["user_id"] = json!(ctx.user(u).map_err(|e| resolve_refusal(&e))?);
    }
    if let Some(h) = a.time_estimated {
        params["time_estimated"] = json!(h);
    }
    let id = s.call("createSubtask", params).await?;
    match as_id(&id) {
        Some(subtask_id) if subtask_id > 0 => Ok(json_output(
            &json!({"subtask_id": subtask_id, "task_id": a.task_id}),
        )),
        _ => Err(rejected("create the subtask", "the task, title and user")),
    }
}

async fn update_subtask(s: &Session, a: UpdateSubtaskArgs) -> Result<ToolOutput, ToolOutput> {
    let task = s.task(a.task_id).await?;
    let subtasks = s
        .call("getAllSubtasks", json!({"task_id": a.task_id}))
        .await?;
    let exists = subtasks.as_array().is_some_and(|items| {
        items
            .iter()
            .any(|st| st.get("id").and_then(as_id) == Some(a.subtask_id))
    });
    if !exists {
        return Err(refusal(
            "subtask_not_found",
            format!("task #{} has no subtask #{}", a.task_id, a.subtask_id),
        ));
    }
    let mut params = json!({"id": a.subtask_id, "task_id": a.task_id});
    if let Some(t) = &a.title {
        let t = t.trim();
        if t.is_empty() {
            return Err(refusal("invalid_arguments", "`title` must not be empty"));
        }
        params["title"] = json!(t);
    }
    if let Some(st) = a.status {
        params["status"] = json!(st.code());
    }
    if let Some(u) = &a.user {
        let ctx = s.context(task_project(&task)).await?;
        params["user_id"] = json!(ctx.user(u).map_err(|e| resolve_refusal(&e))?);
    }
    if params.as_object().is_some_and(|o| o.len() == 2) {
        return Err(refusal(
            "nothing_to_update",
            "name at least one of title, status, user",
        ));
    }
    let ok = s.call("updateSubtask", params).await?;
    expect_true(
        &ok,
        "update the subtask",
        "the task, subtask, title and user",
    )?;
    Ok(json_output(
        &json!({"updated": true, "subtask_id": a.subtask_id}),
    ))
}

/// Registers one write tool whose body takes the caller's write session and the typed
/// arguments.
macro_rules! write_tool {
    ($registry:expr, $tools:expr, $cap:expr, $name:literal, $desc:literal, $args:ty, $body:expr) => {{
        let t = Arc::clone($tools);
        $registry.register(
            ToolBuilder::new($name)
                .description($desc)
                .write($cap.clone())
                .small_model_safe()
                .handler(move |a: $args, ctx: ToolContext| {
                    let t = Arc::clone(&t);
                    async move {
                        with_session!(t, ctx, |s| {
                            let s = s.for_write(&ctx).await;
                            $body(&s, a).await
                        })
                    }
                }),
        )?;
    }};
}

/// Procedures a coding agent must not reach through Bridle, and why.
const REFUSED: &[&str] = &[
    "remove_task",
    "delete_task",
    "remove_project",
    "delete_project",
    "remove_subtask",
    "remove_comment",
    "create_project",
    "update_project",
    "create_user",
    "remove_user",
    "add_project_user",
    "remove_project_user",
];

pub(crate) fn register(
    registry: &ToolRegistry,
    tools: &Arc<KanboardTools>,
    cap: &WriteCapability,
) -> Result<(), CoreError> {
    write_tool!(
        registry,
        tools,
        cap,
        "create_task",
        "Create a task in a project. Column, swimlane, category and owner may be names or ids (see project_context); dates are ISO 8601. Give a `reference` so that repeating the call after an error finds the task instead of duplicating it.",
        CreateTaskArgs,
        create_task
    );
    write_tool!(
        registry,
        tools,
        cap,
        "update_task",
        "Change a task's title, description, category, due date (ISO 8601, empty to clear), priority or reference. Use move_task, assign_task and set_tags for the rest.",
        UpdateTaskArgs,
        update_task
    );
    write_tool!(
        registry,
        tools,
        cap,
        "move_task",
        "Move a task to a column (name or id), optionally another swimlane (default: its current one) and a position (default: the top).",
        MoveTaskArgs,
        move_task
    );
    write_tool!(
        registry,
        tools,
        cap,
        "close_task",
        "Close a task (it leaves the board; reopen_task brings it back).",
        TaskArgs,
        close_task
    );
    write_tool!(
        registry,
        tools,
        cap,
        "reopen_task",
        "Reopen a closed task.",
        TaskArgs,
        reopen_task
    );
    write_tool!(
        registry,
        tools,
        cap,
        "assign_task",
        "Assign a task to a user of its project (username or id), or unassign it (no user).",
        AssignArgs,
        assign_task
    );
    write_tool!(
        registry,
        tools,
        cap,
        "set_tags",
        "Replace a task's tags with this list (new tags are created in the project).",
        SetTagsArgs,
        set_tags
    );
    write_tool!(
        registry,
        tools,
        cap,
        "add_comment",
        "Comment on a task, as your Kanboard user.",
        CommentArgs,
        add_comment
    );
    write_tool!(
        registry,
        tools,
        cap,
        "create_subtask",
        "Add a subtask to a task, optionally assigned (username or id) with estimated hours.",
        CreateSubtaskArgs,
        create_subtask
    );
    write_tool!(
        registry,
        tools,
        cap,
        "update_subtask",
        "Change a subtask's title, state (todo, in_progress, done) or assignee.",
        UpdateSubtaskArgs,
        update_subtask
    );

    let reason = "Deleting and administering Kanboard (projects, users, members) are done by a person in Kanboard itself, never by an agent through Bridle. To take a task off the board, use close_task.";
    for name in REFUSED {
        registry.refuse(*name, reason)?;
    }
    Ok(())
}
