//! The read tools: who am I, projects, a project's names and ids, the board, tasks.
//!
//! Each answer is compact JSON (ids, names, ISO dates, `open`/`closed`) rather than Kanboard's
//! full rows, so a small model's context holds a whole board. Projects outside the caller's
//! mapping are refused; a task of such a project is reported as not found.

use std::sync::Arc;

use kberg_core::{CoreError, ToolBuilder, ToolContext, ToolOutput, ToolRegistry};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::client::{Credential, as_id};
use super::{KanboardTools, Session, dates, json_output, refusal, task_summary};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ProjectArgs {
    /// The Kanboard project id (see `list_projects`).
    pub project_id: i64,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct OptionalProjectArgs {
    /// Only this Kanboard project (default: all of yours).
    #[serde(default)]
    pub project_id: Option<i64>,
}

/// Open or closed tasks.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TaskStatus {
    /// Open tasks (the default).
    #[default]
    Open,
    /// Closed tasks.
    Closed,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ListTasksArgs {
    /// The Kanboard project id.
    pub project_id: i64,
    /// `open` (default) or `closed`.
    #[serde(default)]
    pub status: TaskStatus,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SearchArgs {
    /// The Kanboard project id.
    pub project_id: i64,
    /// A Kanboard filter, for example `status:open assignee:alice column:"In progress"`.
    pub query: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct GetTaskArgs {
    /// The task id.
    pub task_id: i64,
    /// Include the subtasks.
    #[serde(default)]
    pub subtasks: bool,
    /// Include the comments.
    #[serde(default)]
    pub comments: bool,
    /// Include the tags.
    #[serde(default)]
    pub tags: bool,
}

/// Runs a tool body with the caller's session; a refusal is returned as the tool's result.
macro_rules! with_session {
    ($tools:expr, $ctx:expr, |$s:ident| $body:expr) => {{
        let $s = match Session::open(&$tools, &$ctx).await {
            Ok(s) => s,
            Err(out) => return Ok(out),
        };
        let result: Result<ToolOutput, ToolOutput> = async { $body }.await;
        Ok(result.unwrap_or_else(|out| out))
    }};
}
pub(crate) use with_session;

fn project_summary(p: &Value) -> Value {
    json!({
        "id": p.get("id").and_then(as_id),
        "name": p.get("name"),
        "identifier": p.get("identifier").and_then(Value::as_str).filter(|s| !s.is_empty()),
        "description": p.get("description"),
        "active": p.get("is_active").and_then(as_id) != Some(0),
        "url": p.get("url"),
    })
}

/// The projects to read: the one asked for (checked), or all of the caller's.
fn projects_of(s: &Session, asked: Option<i64>) -> Result<Vec<i64>, ToolOutput> {
    match asked {
        Some(p) => {
            s.check_project(p)?;
            Ok(vec![p])
        }
        None => Ok(s.projects().iter().copied().collect()),
    }
}

fn tasks_of(v: &Value) -> Vec<Value> {
    v.as_array()
        .map(|items| items.iter().map(|t| task_summary(t, None)).collect())
        .unwrap_or_default()
}

pub(crate) fn register(
    registry: &ToolRegistry,
    tools: &Arc<KanboardTools>,
) -> Result<(), CoreError> {
    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("whoami")
            .description("Who you are in Kanboard (a user, or the application token), the Kanboard version, and the Kanboard projects you may use.")
            .small_model_safe()
            .handler(move |_a: NoArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        let version = s.call("getVersion", Value::Null).await?;
                        let kind = match s.credential() {
                            Credential::AppToken { .. } => "application",
                            Credential::User { .. } => "user",
                        };
                        let me = s.me().await?;
                        Ok(json_output(&json!({
                            "kind": kind,
                            "user": me.map(|(id, name)| json!({"id": id, "username": name})),
                            "kanboard_version": version,
                            "project_ids": s.projects(),
                        })))
                    })
                }
            }),
    )?;

    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("list_projects")
            .description("List the Kanboard projects you may use (id, name, identifier, description).")
            .small_model_safe()
            .handler(move |_a: NoArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        let ids: Vec<i64> = s.projects().iter().copied().collect();
                        let calls: Vec<(&str, Value)> = ids
                            .iter()
                            .map(|id| ("getProjectById", json!({"project_id": id})))
                            .collect();
                        let answers = s.batch(&calls).await?;
                        let projects: Vec<Value> = ids
                            .iter()
                            .zip(answers)
                            .map(|(id, a)| match a {
                                Ok(p) if p.is_object() => project_summary(&p),
                                Ok(_) => json!({"id": id, "error": {"code": "project_not_found", "message": format!("Kanboard has no project {id}")}}),
                                Err(e) => json!({"id": id, "error": {"code": e.code(), "message": e.to_string()}}),
                            })
                            .collect();
                        Ok(json_output(&json!({"projects": projects})))
                    })
                }
            }),
    )?;

    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("get_project")
            .description("Get one Kanboard project by id.")
            .small_model_safe()
            .handler(move |a: ProjectArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        s.check_project(a.project_id)?;
                        let p = s
                            .call("getProjectById", json!({"project_id": a.project_id}))
                            .await?;
                        if !p.is_object() {
                            return Err(refusal(
                                "project_not_found",
                                format!("Kanboard has no project {}", a.project_id),
                            ));
                        }
                        Ok(json_output(&project_summary(&p)))
                    })
                }
            }),
    )?;

    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("project_context")
            .description("A project's columns, swimlanes, categories, tags and assignable users, with their ids. Call it once before creating or moving tasks; other tools accept these names or ids.")
            .small_model_safe()
            .handler(move |a: ProjectArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        let c = s.context(a.project_id).await?;
                        Ok(json_output(&serde_json::to_value(&c).unwrap_or(Value::Null)))
                    })
                }
            }),
    )?;

    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("get_board")
            .description("A project's board, compact: each swimlane's columns with their open tasks (id, title, owner, due date, priority).")
            .small_model_safe()
            .handler(move |a: ProjectArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        s.check_project(a.project_id)?;
                        let board = s.call("getBoard", json!({"project_id": a.project_id})).await?;
                        let swimlanes: Vec<Value> = board
                            .as_array()
                            .map(|lanes| lanes.iter().map(|lane| json!({
                                "id": lane.get("id").and_then(as_id),
                                "name": lane.get("name"),
                                "columns": lane.get("columns").and_then(Value::as_array).map(|cols| cols.iter().map(|c| json!({
                                    "id": c.get("id").and_then(as_id),
                                    "title": c.get("title"),
                                    "tasks": c.get("tasks").and_then(Value::as_array).map(|ts| ts.iter().map(|t| json!({
                                        "id": t.get("id").and_then(as_id),
                                        "title": t.get("title"),
                                        "owner_id": t.get("owner_id").and_then(as_id).filter(|o| *o != 0),
                                        "date_due": t.get("date_due").and_then(dates::from_kanboard),
                                        "priority": t.get("priority").and_then(as_id),
                                    })).collect::<Vec<_>>()).unwrap_or_default(),
                                })).collect::<Vec<_>>()).unwrap_or_default(),
                            })).collect())
                            .unwrap_or_default();
                        Ok(json_output(&json!({"project_id": a.project_id, "swimlanes": swimlanes})))
                    })
                }
            }),
    )?;

    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("list_tasks")
            .description("List a project's open (default) or closed tasks.")
            .small_model_safe()
            .handler(move |a: ListTasksArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        s.check_project(a.project_id)?;
                        let status_id = match a.status {
                            TaskStatus::Open => 1,
                            TaskStatus::Closed => 0,
                        };
                        let tasks = s
                            .call(
                                "getAllTasks",
                                json!({"project_id": a.project_id, "status_id": status_id}),
                            )
                            .await?;
                        Ok(json_output(&json!({"tasks": tasks_of(&tasks)})))
                    })
                }
            }),
    )?;

    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("search_tasks")
            .description("Search a project's tasks with Kanboard's filter syntax: `status:open` or `status:closed`, `assignee:<username>` (or `nobody`), `column:\"In progress\"`, `swimlane:<name>`, `category:<name>`, `tag:<name>`, `due:today` / `due:<2026-12-31` / `due:>=2026-12-01`, `created:`, `modified:`, `priority:2`, `ref:<reference>`, `title:<text>` or plain words for the title; combine terms with spaces (all must match).")
            .small_model_safe()
            .handler(move |a: SearchArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        s.check_project(a.project_id)?;
                        let tasks = s.call("searchTasks", json!({"project_id": a.project_id, "query": a.query})).await?;
                        Ok(json_output(&json!({"tasks": tasks_of(&tasks)})))
                    })
                }
            }),
    )?;

    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("get_task")
            .description("Get a task by id, optionally with its subtasks, comments and tags.")
            .small_model_safe()
            .handler(move |a: GetTaskArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        let task = s.task(a.task_id).await?;
                        let mut out = task_summary(&task, None);
                        out["description"] = task.get("description").cloned().unwrap_or(Value::Null);
                        let p = json!({"task_id": a.task_id});
                        let mut calls = Vec::new();
                        if a.subtasks { calls.push(("getAllSubtasks", p.clone())); }
                        if a.comments { calls.push(("getAllComments", p.clone())); }
                        if a.tags { calls.push(("getTaskTags", p)); }
                        let answers = s.batch(&calls).await?;
                        for ((method, _), answer) in calls.iter().zip(answers) {
                            let value = match answer {
                                Err(e) => json!({"error": {"code": e.code(), "message": e.to_string()}}),
                                Ok(v) => match *method {
                                    "getAllSubtasks" => json!(v.as_array().map(|items| items.iter().map(|st| json!({
                                        "id": st.get("id").and_then(as_id),
                                        "title": st.get("title"),
                                        "status": match st.get("status").and_then(as_id) { Some(2) => "done", Some(1) => "in_progress", _ => "todo" },
                                        "user_id": st.get("user_id").and_then(as_id).filter(|u| *u != 0),
                                    })).collect::<Vec<_>>()).unwrap_or_default()),
                                    "getAllComments" => json!(v.as_array().map(|items| items.iter().map(|c| json!({
                                        "id": c.get("id").and_then(as_id),
                                        "user": c.get("username"),
                                        "comment": c.get("comment"),
                                        "date_creation": c.get("date_creation").and_then(dates::from_kanboard),
                                    })).collect::<Vec<_>>()).unwrap_or_default()),
                                    _ => json!(v.as_object().map(|m| m.values().cloned().collect::<Vec<_>>()).unwrap_or_default()),
                                },
                            };
                            let key = match *method { "getAllSubtasks" => "subtasks", "getAllComments" => "comments", _ => "tags" };
                            out[key] = value;
                        }
                        Ok(json_output(&out))
                    })
                }
            }),
    )?;

    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("my_tasks")
            .description("Your open tasks (assigned to your Kanboard user) in your projects, or in one.")
            .small_model_safe()
            .handler(move |a: OptionalProjectArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        let projects = projects_of(&s, a.project_id)?;
                        let Some((user_id, username)) = s.me().await? else {
                            return Err(refusal("no_kanboard_user", "this gateway reaches Kanboard with the application token and no acting user, so there is no \"me\"; use search_tasks with `assignee:<username>`"));
                        };
                        // By id: Kanboard's `assignee:<name>` matches a part of any username or
                        // display name (`bob` finds `bobby`'s tasks too); digits are the owner.
                        let query = format!("status:open assignee:{user_id}");
                        let calls: Vec<(&str, Value)> = projects.iter().map(|p| ("searchTasks", json!({"project_id": p, "query": query}))).collect();
                        let answers = s.batch(&calls).await?;
                        let mut tasks = Vec::new();
                        for a in answers {
                            match a {
                                Ok(v) => tasks.extend(
                                    tasks_of(&v)
                                        .into_iter()
                                        .filter(|t| t["owner_id"] == json!(user_id)),
                                ),
                                Err(e) => return Err(refusal(e.code(), e.to_string())),
                            }
                        }
                        Ok(json_output(&json!({"user": username, "tasks": tasks})))
                    })
                }
            }),
    )?;

    let t = Arc::clone(tools);
    registry.register(
        ToolBuilder::new("overdue_tasks")
            .description("Open tasks whose due date has passed, in your projects or in one.")
            .small_model_safe()
            .handler(move |a: OptionalProjectArgs, ctx: ToolContext| {
                let t = Arc::clone(&t);
                async move {
                    with_session!(t, ctx, |s| {
                        let projects = projects_of(&s, a.project_id)?;
                        let calls: Vec<(&str, Value)> = projects
                            .iter()
                            .map(|p| ("getOverdueTasksByProject", json!({"project_id": p})))
                            .collect();
                        let answers = s.batch(&calls).await?;
                        let mut tasks = Vec::new();
                        for a in answers {
                            let v = a.map_err(|e| refusal(e.code(), e.to_string()))?;
                            for t in v.as_array().into_iter().flatten() {
                                tasks.push(json!({
                                    "id": t.get("id").and_then(as_id),
                                    "title": t.get("title"),
                                    "project_id": t.get("project_id").and_then(as_id),
                                    "date_due": t.get("date_due").and_then(dates::from_kanboard),
                                    "assignee": t.get("assignee_username"),
                                }));
                            }
                        }
                        Ok(json_output(&json!({"tasks": tasks})))
                    })
                }
            }),
    )?;
    Ok(())
}
