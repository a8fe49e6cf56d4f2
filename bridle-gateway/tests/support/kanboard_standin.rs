//! A Kanboard stand-in that speaks Kanboard's wire: JSON-RPC 2.0 over HTTP POST at
//! `/jsonrpc.php` on 127.0.0.1, built from Kanboard's API reference (procedure names,
//! parameter names and order, defaults) and the request/response pairs recorded from a real
//! Kanboard (`kanboard-jsonrpc-samples.json` in the shared reference folder).
//!
//! What it reproduces, because the tools must handle it:
//! - HTTP Basic auth: `jsonrpc:<app token>` (every procedure, no user) or
//!   `<username>:<api token or password>` (that user's projects only); wrong or missing
//!   credentials answer HTTP 401 with a JSON-RPC error and `id: null`; after six failed logins
//!   a user is locked out and even the right password answers 401.
//! - A user reaching a project it is not a member of, or an admin-only procedure, answers HTTP
//!   403 with a JSON-RPC error and `id: null` (for a whole batch too).
//! - Errors with HTTP 200: `-32700 Parse error`, `-32601 Method not found`, `-32602 Invalid
//!   params` (`Wrong number of arguments`, `Too many arguments`); positional or named params;
//!   unknown named params ignored.
//! - `false` for a write that fails validation (empty title, an owner who is not assignable,
//!   a date that is not `Y-m-d` / `Y-m-d H:i`, a move into another project, a comment in
//!   another user's name), `null` for a missing object (a non-numeric id reads as missing).
//! - Batches (an array of calls, answered in an array), dates stored and sent back as unix
//!   seconds with `0` for unset.
//! - An HTML page with status 200 for any other path, as Kanboard's front controller does.
//!
//! Tests can make it hang (to test timeouts) and read the log of which user called what.

#![allow(dead_code)] // Each test binary uses a different part of the stand-in.
#![allow(clippy::unwrap_used)] // Test support: a poisoned lock is a failed test.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::post;
use base64::Engine as _;
use serde_json::{Map, Value, json};

pub const VERSION: &str = "main.2cba210dbad4e110d4efdec97d71a38b5df48dad";
pub const APP_TOKEN: &str = "app-token-0123456789abcdef";
/// Base of the stand-in's clock (unix seconds), like the recorded instance's.
const NOW: i64 = 1_795_986_704;

#[derive(Debug, Clone)]
pub struct User {
    pub id: i64,
    pub username: String,
    pub name: String,
    pub admin: bool,
    pub token: String,
    failed: u32,
}

#[derive(Debug, Clone)]
struct Project {
    id: i64,
    name: String,
    identifier: String,
    description: Option<String>,
    members: Vec<i64>,
}

#[derive(Debug, Clone)]
struct Column {
    id: i64,
    project_id: i64,
    title: String,
}

#[derive(Debug, Clone)]
struct Named {
    id: i64,
    project_id: i64,
    name: String,
}

#[derive(Debug, Clone)]
struct Task {
    id: i64,
    title: String,
    description: String,
    project_id: i64,
    column_id: i64,
    swimlane_id: i64,
    owner_id: i64,
    creator_id: i64,
    category_id: i64,
    is_active: i64,
    priority: i64,
    score: i64,
    reference: String,
    date_due: i64,
    date_completed: Option<i64>,
    position: i64,
    color_id: String,
}

#[derive(Debug, Clone)]
struct Subtask {
    id: i64,
    task_id: i64,
    title: String,
    status: i64,
    user_id: i64,
    time_estimated: f64,
}

#[derive(Debug, Clone)]
struct Comment {
    id: i64,
    task_id: i64,
    user_id: i64,
    comment: String,
}

#[derive(Debug, Default)]
struct Board {
    users: Vec<User>,
    projects: Vec<Project>,
    columns: Vec<Column>,
    swimlanes: Vec<Named>,
    categories: Vec<Named>,
    tags: Vec<Named>,
    task_tags: Vec<(i64, i64)>,
    tasks: Vec<Task>,
    subtasks: Vec<Subtask>,
    comments: Vec<Comment>,
    next_id: i64,
    /// (username or `jsonrpc`, method) of every call that passed authentication.
    log: Vec<(String, String)>,
}

impl Board {
    fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }
}

/// Who is calling.
#[derive(Debug, Clone)]
enum Who {
    App,
    User(User),
}

impl Who {
    fn label(&self) -> String {
        match self {
            Who::App => "jsonrpc".into(),
            Who::User(u) => u.username.clone(),
        }
    }
}

/// Why a call ends the whole HTTP exchange (Kanboard answers these with a status, `id: null`).
enum Abort {
    Forbidden,
}

type Outcome = Result<Result<Value, (i64, &'static str, Option<&'static str>)>, Abort>;

struct Shared {
    board: Mutex<Board>,
    hang: AtomicBool,
    /// A procedure that is carried out but never answered (a lost answer).
    hang_after: Mutex<Option<String>>,
}

/// A running stand-in; stops when dropped.
pub struct KanboardStandIn {
    /// `http://127.0.0.1:<port>/jsonrpc.php`.
    pub endpoint: String,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for KanboardStandIn {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl KanboardStandIn {
    /// Starts a stand-in with an `admin` (id 1) and no projects.
    pub async fn start() -> Self {
        let mut board = Board {
            next_id: 1,
            ..Board::default()
        };
        board.users.push(User {
            id: 1,
            username: "admin".into(),
            name: String::new(),
            admin: true,
            token: "admin-token".into(),
            failed: 0,
        });
        let shared = Arc::new(Shared {
            board: Mutex::new(board),
            hang: AtomicBool::new(false),
            hang_after: Mutex::new(None),
        });
        let app = Router::new()
            .route("/jsonrpc.php", post(rpc))
            .fallback(|| async { Html(LOGIN_PAGE) })
            .with_state(Arc::clone(&shared));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            endpoint: format!("http://{addr}/jsonrpc.php"),
            base: format!("http://{addr}"),
            shared,
            server,
        }
    }

    /// Adds a user (role `app-user`) with an API token; returns its id.
    pub fn add_user(&self, username: &str, token: &str) -> i64 {
        let mut b = self.shared.board.lock().unwrap();
        let id = b.users.iter().map(|u| u.id).max().unwrap_or(0) + 1;
        b.users.push(User {
            id,
            username: username.into(),
            name: String::new(),
            admin: false,
            token: token.into(),
            failed: 0,
        });
        id
    }

    /// Makes a user a member of a project.
    pub fn add_member(&self, project_id: i64, user_id: i64) {
        let mut b = self.shared.board.lock().unwrap();
        if let Some(p) = b.projects.iter_mut().find(|p| p.id == project_id) {
            p.members.push(user_id);
        }
    }

    /// Adds a project with Kanboard's default columns and swimlane, and these members;
    /// returns its id.
    pub fn add_project(&self, name: &str, members: &[i64]) -> i64 {
        let mut b = self.shared.board.lock().unwrap();
        let id = b.projects.iter().map(|p| p.id).max().unwrap_or(0) + 1;
        b.projects.push(Project {
            id,
            name: name.into(),
            identifier: String::new(),
            description: None,
            members: members.to_vec(),
        });
        for title in ["Backlog", "Ready", "Work in progress", "Done"] {
            let cid = b.id();
            b.columns.push(Column {
                id: cid,
                project_id: id,
                title: title.into(),
            });
        }
        let sid = b.id();
        b.swimlanes.push(Named {
            id: sid,
            project_id: id,
            name: "Default swimlane".into(),
        });
        id
    }

    /// Adds a swimlane, category or tag (`kind`: `swimlane`, `category`, `tag`).
    pub fn add_named(&self, kind: &str, project_id: i64, name: &str) -> i64 {
        let mut b = self.shared.board.lock().unwrap();
        let id = b.id();
        let n = Named {
            id,
            project_id,
            name: name.into(),
        };
        match kind {
            "swimlane" => b.swimlanes.push(n),
            "category" => b.categories.push(n),
            _ => b.tags.push(n),
        }
        id
    }

    /// Sets a task's due date (unix seconds) directly, as if set long ago.
    pub fn set_due(&self, task_id: i64, secs: i64) {
        let mut b = self.shared.board.lock().unwrap();
        if let Some(t) = b.tasks.iter_mut().find(|t| t.id == task_id) {
            t.date_due = secs;
        }
    }

    /// Makes every following request hang (never answered) or answer again.
    pub fn hang(&self, on: bool) {
        self.shared.hang.store(on, Ordering::SeqCst);
    }

    /// Carries out `method` on its next call but never answers it (once).
    pub fn hang_after(&self, method: &str) {
        *self.shared.hang_after.lock().unwrap() = Some(method.to_string());
    }

    /// Who called which procedure, in order.
    pub fn log(&self) -> Vec<(String, String)> {
        self.shared.board.lock().unwrap().log.clone()
    }

    /// The number of tasks in a project (open and closed).
    pub fn task_count(&self, project_id: i64) -> usize {
        let b = self.shared.board.lock().unwrap();
        b.tasks
            .iter()
            .filter(|t| t.project_id == project_id)
            .count()
    }
}

const LOGIN_PAGE: &str = "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"UTF-8\"><title>Login</title></head><body><form method=\"post\" action=\"/?controller=AuthController&amp;action=check\"><label for=\"form-username\">Username</label><input type=\"text\" name=\"username\" id=\"form-username\"></form></body></html>";

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "error": {"code": 401, "message": "Unauthorized"}, "id": null})
            .to_string(),
    )
        .into_response()
}

fn forbidden() -> Response {
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "application/json")],
        json!({"jsonrpc": "2.0", "error": {"code": 403, "message": "Forbidden"}, "id": null})
            .to_string(),
    )
        .into_response()
}

fn json_response(v: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn authenticate(board: &mut Board, headers: &HeaderMap) -> Option<Who> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, pass) = decoded.split_once(':')?;
    if user == "jsonrpc" {
        return (pass == APP_TOKEN).then_some(Who::App);
    }
    let u = board.users.iter_mut().find(|u| u.username == user)?;
    if u.failed >= 6 {
        return None;
    }
    if u.token == pass {
        u.failed = 0;
        Some(Who::User(u.clone()))
    } else {
        u.failed += 1;
        None
    }
}

async fn rpc(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if shared.hang.load(Ordering::SeqCst) {
        std::future::pending::<()>().await;
    }
    let response = respond(&shared, &headers, &body);
    let lost = {
        let mut hang_after = shared.hang_after.lock().unwrap();
        let method = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_string));
        let lost = hang_after.is_some() && *hang_after == method;
        if lost {
            *hang_after = None;
        }
        lost
    };
    if lost {
        std::future::pending::<()>().await;
    }
    response
}

fn respond(shared: &Shared, headers: &HeaderMap, body: &Bytes) -> Response {
    let mut board = shared.board.lock().unwrap();
    let Some(who) = authenticate(&mut board, headers) else {
        return unauthorized();
    };
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return json_response(
            &json!({"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}),
        );
    };
    match request {
        Value::Array(calls) => {
            let mut answers = Vec::new();
            for call in &calls {
                match answer(&mut board, &who, call) {
                    Err(Abort::Forbidden) => return forbidden(),
                    Ok(Some(a)) => answers.push(a),
                    Ok(None) => {}
                }
            }
            json_response(&Value::Array(answers))
        }
        call => match answer(&mut board, &who, &call) {
            Err(Abort::Forbidden) => forbidden(),
            Ok(Some(a)) => json_response(&a),
            Ok(None) => (StatusCode::OK, "").into_response(),
        },
    }
}

/// One call's answer object (`None` for a notification).
fn answer(board: &mut Board, who: &Who, call: &Value) -> Result<Option<Value>, Abort> {
    let id = call.get("id").cloned();
    let Some(method) = call.get("method").and_then(Value::as_str) else {
        return Ok(Some(
            json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": id}),
        ));
    };
    board.log.push((who.label(), method.to_string()));
    let outcome = dispatch(board, who, method, call.get("params"))?;
    let Some(id) = id else {
        return Ok(None);
    };
    Ok(Some(match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "result": result, "id": id}),
        Err((code, message, data)) => {
            let mut error = json!({"code": code, "message": message});
            if let Some(d) = data {
                error["data"] = json!(d);
            }
            json!({"jsonrpc": "2.0", "error": error, "id": id})
        }
    }))
}

/// Procedure signatures: parameter names in order, and how many are required.
fn signature(method: &str) -> Option<(&'static [&'static str], usize)> {
    Some(match method {
        "getVersion" | "getMe" | "getMyProjects" | "getAllProjects" => (&[], 0),
        "getUser" => (&["user_id"], 1),
        "getProjectById"
        | "getColumns"
        | "getActiveSwimlanes"
        | "getAllCategories"
        | "getTagsByProject"
        | "getBoard"
        | "getOverdueTasksByProject" => (&["project_id"], 1),
        "getAssignableUsers" => (&["project_id", "prepend_unassigned"], 1),
        "getAllTasks" => (&["project_id", "status_id"], 1),
        "searchTasks" => (&["project_id", "query"], 2),
        "getTask" | "closeTask" | "openTask" | "getTaskTags" | "getAllComments"
        | "getAllSubtasks" => (&["task_id"], 1),
        "getTaskByReference" => (&["project_id", "reference"], 2),
        "createTask" => (
            &[
                "title",
                "project_id",
                "color_id",
                "column_id",
                "owner_id",
                "creator_id",
                "date_due",
                "description",
                "category_id",
                "score",
                "swimlane_id",
                "priority",
                "recurrence_status",
                "recurrence_trigger",
                "recurrence_factor",
                "recurrence_timeframe",
                "recurrence_basedate",
                "reference",
                "tags",
            ],
            2,
        ),
        "updateTask" => (
            &[
                "id",
                "title",
                "color_id",
                "owner_id",
                "date_due",
                "description",
                "category_id",
                "score",
                "priority",
                "recurrence_status",
                "recurrence_trigger",
                "recurrence_factor",
                "recurrence_timeframe",
                "recurrence_basedate",
                "reference",
                "tags",
            ],
            1,
        ),
        "moveTaskPosition" => (
            &[
                "project_id",
                "task_id",
                "column_id",
                "position",
                "swimlane_id",
            ],
            4,
        ),
        "setTaskTags" => (&["project_id", "task_id", "tags"], 3),
        "createComment" => (
            &["task_id", "user_id", "content", "reference", "visibility"],
            3,
        ),
        "createSubtask" => (
            &[
                "task_id",
                "title",
                "user_id",
                "time_estimated",
                "time_spent",
                "status",
            ],
            2,
        ),
        "updateSubtask" => (
            &[
                "id",
                "task_id",
                "title",
                "user_id",
                "time_estimated",
                "time_spent",
                "status",
                "position",
            ],
            2,
        ),
        _ => return None,
    })
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

/// Kanboard's date parsing for writes: `Y-m-d` or `Y-m-d H:i`; anything else is invalid.
fn parse_date(v: Option<&Value>) -> Result<Option<i64>, ()> {
    let Some(v) = v else { return Ok(None) };
    let Some(s) = v.as_str() else { return Err(()) };
    if s.is_empty() {
        return Ok(Some(0));
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(Some(
            d.and_hms_opt(0, 0, 0).ok_or(())?.and_utc().timestamp(),
        ));
    }
    if let Ok(d) = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M") {
        return Ok(Some(d.and_utc().timestamp()));
    }
    Err(())
}

fn is_member(board: &Board, who: &Who, project_id: i64) -> bool {
    match who {
        Who::App => true,
        Who::User(u) => {
            u.admin
                || board
                    .projects
                    .iter()
                    .any(|p| p.id == project_id && p.members.contains(&u.id))
        }
    }
}

fn task_json(board: &Board, t: &Task) -> Value {
    json!({
        "id": t.id, "title": t.title, "description": t.description, "date_creation": NOW,
        "color_id": t.color_id, "project_id": t.project_id, "column_id": t.column_id,
        "owner_id": t.owner_id, "position": t.position, "is_active": t.is_active,
        "date_completed": t.date_completed, "score": t.score, "date_due": t.date_due,
        "category_id": t.category_id, "creator_id": t.creator_id, "date_modification": NOW,
        "reference": t.reference, "date_started": 0, "time_spent": 0, "time_estimated": 0,
        "swimlane_id": t.swimlane_id, "date_moved": NOW, "recurrence_status": 0,
        "priority": t.priority, "external_provider": null, "external_uri": null,
        "url": format!("http://127.0.0.1/task/{}", t.id),
        "color": {"name": "Yellow", "background": "rgb(245, 247, 196)", "border": "rgb(223, 227, 45)"},
        "nb_comments": board.comments.iter().filter(|c| c.task_id == t.id).count(),
    })
}

fn project_json(p: &Project) -> Value {
    json!({
        "id": p.id, "name": p.name, "is_active": 1, "token": "", "last_modified": NOW,
        "is_public": 0, "is_private": 0, "is_everybody_allowed": 0,
        "default_swimlane": "Default swimlane", "show_default_swimlane": 1,
        "description": p.description, "identifier": p.identifier, "start_date": "",
        "end_date": "", "owner_id": 0, "priority_default": 0, "priority_start": 0,
        "priority_end": 3, "url": {"board": format!("http://127.0.0.1/board/{}", p.id)},
    })
}

fn assignable(board: &Board, project_id: i64, user_id: i64) -> bool {
    board.users.iter().any(|u| u.id == user_id)
        && board
            .projects
            .iter()
            .any(|p| p.id == project_id && p.members.contains(&user_id))
}

fn dispatch(board: &mut Board, who: &Who, method: &str, params: Option<&Value>) -> Outcome {
    let Some((names, required)) = signature(method) else {
        return Ok(Err((-32601, "Method not found", None)));
    };
    // Positional params are mapped to names; named params keep only known names.
    let mut p: Map<String, Value> = Map::new();
    match params {
        Some(Value::Array(items)) => {
            if items.len() > names.len() {
                return Ok(Err((-32602, "Invalid params", Some("Too many arguments"))));
            }
            for (name, v) in names.iter().zip(items) {
                p.insert((*name).to_string(), v.clone());
            }
        }
        Some(Value::Object(o)) => {
            for name in names {
                if let Some(v) = o.get(*name) {
                    p.insert((*name).to_string(), v.clone());
                }
            }
        }
        _ => {}
    }
    if names[..required].iter().any(|n| !p.contains_key(*n)) {
        return Ok(Err((
            -32602,
            "Invalid params",
            Some("Wrong number of arguments"),
        )));
    }
    let get = |k: &str| p.get(k);
    let pid = int(get("project_id"));
    let tid = int(get("task_id"));
    // Project-scoped procedures check membership first (a missing project is simply empty).
    let check_project = |board: &Board, project: Option<i64>| -> Result<(), Abort> {
        match project {
            Some(id) if !is_member(board, who, id) => Err(Abort::Forbidden),
            _ => Ok(()),
        }
    };
    let task_project = |board: &Board, task: Option<i64>| {
        task.and_then(|id| {
            board
                .tasks
                .iter()
                .find(|t| t.id == id)
                .map(|t| t.project_id)
        })
    };
    let ok = |v: Value| -> Outcome { Ok(Ok(v)) };
    match method {
        "getVersion" => ok(json!(VERSION)),
        "getMe" => match who {
            Who::User(u) => ok(
                json!({"id": u.id, "username": u.username, "role": if u.admin { "app-admin" } else { "app-user" }, "is_ldap_user": false, "name": u.name, "email": "", "notifications_enabled": 0}),
            ),
            Who::App => Err(Abort::Forbidden),
        },
        "getMyProjects" => match who {
            Who::User(u) => {
                let list: Vec<Value> = board
                    .projects
                    .iter()
                    .filter(|p| u.admin || p.members.contains(&u.id))
                    .map(project_json)
                    .collect();
                ok(json!(list))
            }
            Who::App => Err(Abort::Forbidden),
        },
        "getAllProjects" => match who {
            Who::User(u) if !u.admin => Err(Abort::Forbidden),
            _ => ok(json!(
                board.projects.iter().map(project_json).collect::<Vec<_>>()
            )),
        },
        "getUser" => {
            if let Who::User(u) = who
                && !u.admin
            {
                return Err(Abort::Forbidden);
            }
            let id = int(get("user_id"));
            ok(board
                .users
                .iter()
                .find(|u| Some(u.id) == id)
                .map_or(Value::Null, |u| json!({"id": u.id, "username": u.username, "name": u.name, "role": if u.admin { "app-admin" } else { "app-user" }})))
        }
        "getProjectById" => {
            check_project(board, pid)?;
            ok(board
                .projects
                .iter()
                .find(|p| Some(p.id) == pid)
                .map_or(Value::Null, project_json))
        }
        "getColumns" => {
            check_project(board, pid)?;
            let list: Vec<Value> = board
                .columns
                .iter()
                .filter(|c| Some(c.project_id) == pid)
                .enumerate()
                .map(|(i, c)| json!({"id": c.id, "title": c.title, "position": i + 1, "project_id": c.project_id, "task_limit": 0, "description": "", "hide_in_dashboard": 0}))
                .collect();
            ok(json!(list))
        }
        "getActiveSwimlanes" | "getAllCategories" | "getTagsByProject" => {
            check_project(board, pid)?;
            let source = match method {
                "getActiveSwimlanes" => &board.swimlanes,
                "getAllCategories" => &board.categories,
                _ => &board.tags,
            };
            let list: Vec<Value> = source
                .iter()
                .filter(|n| Some(n.project_id) == pid)
                .enumerate()
                .map(|(i, n)| json!({"id": n.id, "name": n.name, "position": i + 1, "is_active": 1, "project_id": n.project_id, "description": "", "color_id": null}))
                .collect();
            ok(json!(list))
        }
        "getAssignableUsers" => {
            check_project(board, pid)?;
            let mut map = Map::new();
            if let Some(project) = board.projects.iter().find(|p| Some(p.id) == pid) {
                for u in board
                    .users
                    .iter()
                    .filter(|u| project.members.contains(&u.id))
                {
                    let name = if u.name.is_empty() {
                        &u.username
                    } else {
                        &u.name
                    };
                    map.insert(u.id.to_string(), json!(name));
                }
            }
            ok(Value::Object(map))
        }
        "getBoard" => {
            check_project(board, pid)?;
            let lanes: Vec<Value> = board
                .swimlanes
                .iter()
                .filter(|s| Some(s.project_id) == pid)
                .map(|s| {
                    let columns: Vec<Value> = board
                        .columns
                        .iter()
                        .filter(|c| Some(c.project_id) == pid)
                        .map(|c| {
                            let tasks: Vec<Value> = board
                                .tasks
                                .iter()
                                .filter(|t| t.column_id == c.id && t.swimlane_id == s.id && t.is_active == 1)
                                .map(|t| task_json(board, t))
                                .collect();
                            json!({"id": c.id, "title": c.title, "project_id": c.project_id, "nb_open_tasks": tasks.len(), "tasks": tasks})
                        })
                        .collect();
                    json!({"id": s.id, "name": s.name, "project_id": s.project_id, "columns": columns})
                })
                .collect();
            ok(json!(lanes))
        }
        "getAllTasks" => {
            check_project(board, pid)?;
            let status = int(get("status_id")).unwrap_or(1);
            let list: Vec<Value> = board
                .tasks
                .iter()
                .filter(|t| Some(t.project_id) == pid && t.is_active == status)
                .map(|t| task_json(board, t))
                .collect();
            ok(json!(list))
        }
        "searchTasks" => {
            check_project(board, pid)?;
            let query = get("query").and_then(Value::as_str).unwrap_or_default();
            ok(json!(search(board, pid.unwrap_or(0), query)))
        }
        "getOverdueTasksByProject" => {
            check_project(board, pid)?;
            let now = NOW + 86_400 * 30;
            let list: Vec<Value> = board
                .tasks
                .iter()
                .filter(|t| Some(t.project_id) == pid && t.is_active == 1 && t.date_due != 0 && t.date_due < now)
                .map(|t| {
                    let owner = board.users.iter().find(|u| u.id == t.owner_id);
                    json!({"id": t.id, "title": t.title, "date_due": t.date_due, "project_id": t.project_id, "project_name": "", "assignee_username": owner.map(|u| u.username.clone()), "assignee_name": owner.map(|u| u.name.clone())})
                })
                .collect();
            ok(json!(list))
        }
        "getTask" => {
            check_project(board, task_project(board, tid))?;
            ok(board
                .tasks
                .iter()
                .find(|t| Some(t.id) == tid)
                .map_or(Value::Null, |t| task_json(board, t)))
        }
        "getTaskByReference" => {
            check_project(board, pid)?;
            let reference = get("reference").and_then(Value::as_str).unwrap_or_default();
            ok(board
                .tasks
                .iter()
                .find(|t| {
                    Some(t.project_id) == pid && !reference.is_empty() && t.reference == reference
                })
                .map_or(Value::Null, |t| task_json(board, t)))
        }
        "createTask" => {
            check_project(board, pid)?;
            let Some(project_id) = pid.filter(|p| board.projects.iter().any(|x| x.id == *p)) else {
                return ok(json!(false));
            };
            let title = get("title")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let owner = int(get("owner_id")).unwrap_or(0);
            if title.is_empty() || (owner != 0 && !assignable(board, project_id, owner)) {
                return ok(json!(false));
            }
            let Ok(due) = parse_date(get("date_due")) else {
                return ok(json!(false));
            };
            let first_col = board
                .columns
                .iter()
                .find(|c| c.project_id == project_id)
                .map_or(0, |c| c.id);
            let first_lane = board
                .swimlanes
                .iter()
                .find(|s| s.project_id == project_id)
                .map_or(0, |s| s.id);
            let column_id = int(get("column_id"))
                .filter(|c| *c != 0)
                .unwrap_or(first_col);
            let swimlane_id = int(get("swimlane_id"))
                .filter(|s| *s != 0)
                .unwrap_or(first_lane);
            if !board
                .columns
                .iter()
                .any(|c| c.id == column_id && c.project_id == project_id)
            {
                return ok(json!(false));
            }
            let id = board.tasks.iter().map(|t| t.id).max().unwrap_or(0) + 1;
            let position = board
                .tasks
                .iter()
                .filter(|t| t.column_id == column_id)
                .count() as i64
                + 1;
            let creator = match who {
                Who::User(u) => u.id,
                Who::App => int(get("creator_id")).unwrap_or(0),
            };
            board.tasks.push(Task {
                id,
                title,
                description: get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                project_id,
                column_id,
                swimlane_id,
                owner_id: owner,
                creator_id: creator,
                category_id: int(get("category_id")).unwrap_or(0),
                is_active: 1,
                priority: int(get("priority")).unwrap_or(0),
                score: int(get("score")).unwrap_or(0),
                reference: get("reference")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                date_due: due.unwrap_or(0),
                date_completed: None,
                position,
                color_id: get("color_id")
                    .and_then(Value::as_str)
                    .filter(|c| !c.is_empty())
                    .unwrap_or("yellow")
                    .to_string(),
            });
            if let Some(tags) = get("tags").and_then(Value::as_array).cloned() {
                set_tags(board, project_id, id, &tags);
            }
            ok(json!(id))
        }
        "updateTask" => {
            let task_id = int(get("id"));
            check_project(board, task_project(board, task_id))?;
            let Some(project_id) = task_project(board, task_id) else {
                return ok(json!(false));
            };
            if let Some(owner) = int(get("owner_id"))
                && owner != 0
                && !assignable(board, project_id, owner)
            {
                return ok(json!(false));
            }
            if get("title").and_then(Value::as_str) == Some("") {
                return ok(json!(false));
            }
            let Ok(due) = parse_date(get("date_due")) else {
                return ok(json!(false));
            };
            let tags = get("tags").and_then(Value::as_array).cloned();
            let t = board
                .tasks
                .iter_mut()
                .find(|t| Some(t.id) == task_id)
                .unwrap();
            if let Some(v) = get("title").and_then(Value::as_str) {
                t.title = v.into();
            }
            if let Some(v) = get("description").and_then(Value::as_str) {
                t.description = v.into();
            }
            if let Some(v) = int(get("owner_id")) {
                t.owner_id = v;
            }
            if let Some(v) = int(get("category_id")) {
                t.category_id = v;
            }
            if let Some(v) = int(get("priority")) {
                t.priority = v;
            }
            if let Some(v) = get("reference").and_then(Value::as_str) {
                t.reference = v.into();
            }
            if let Some(d) = due {
                t.date_due = d;
            }
            if let Some(tags) = tags {
                set_tags(board, project_id, task_id.unwrap_or(0), &tags);
            }
            ok(json!(true))
        }
        "moveTaskPosition" => {
            check_project(board, pid)?;
            let (Some(project_id), Some(task_id)) = (pid, tid) else {
                return ok(json!(false));
            };
            let column_id = int(get("column_id")).unwrap_or(0);
            let position = int(get("position")).unwrap_or(0);
            let swimlane_id = int(get("swimlane_id")).unwrap_or(0);
            let valid = board
                .tasks
                .iter()
                .any(|t| t.id == task_id && t.project_id == project_id)
                && board
                    .columns
                    .iter()
                    .any(|c| c.id == column_id && c.project_id == project_id)
                && board
                    .swimlanes
                    .iter()
                    .any(|s| s.id == swimlane_id && s.project_id == project_id)
                && position >= 1;
            if !valid {
                return ok(json!(false));
            }
            let t = board.tasks.iter_mut().find(|t| t.id == task_id).unwrap();
            t.column_id = column_id;
            t.swimlane_id = swimlane_id;
            t.position = position;
            ok(json!(true))
        }
        "closeTask" | "openTask" => {
            check_project(board, task_project(board, tid))?;
            let Some(t) = board.tasks.iter_mut().find(|t| Some(t.id) == tid) else {
                return ok(json!(false));
            };
            if method == "closeTask" {
                t.is_active = 0;
                t.date_completed = Some(NOW + 60);
            } else {
                t.is_active = 1;
                t.date_completed = None;
            }
            ok(json!(true))
        }
        "setTaskTags" => {
            check_project(board, pid)?;
            let (Some(project_id), Some(task_id)) = (pid, tid) else {
                return ok(json!(false));
            };
            if !board
                .tasks
                .iter()
                .any(|t| t.id == task_id && t.project_id == project_id)
            {
                return ok(json!(false));
            }
            let tags = get("tags")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            set_tags(board, project_id, task_id, &tags);
            ok(json!(true))
        }
        "getTaskTags" => {
            check_project(board, task_project(board, tid))?;
            let mut map = Map::new();
            for (task, tag) in &board.task_tags {
                if Some(*task) == tid
                    && let Some(n) = board.tags.iter().find(|n| n.id == *tag)
                {
                    map.insert(n.id.to_string(), json!(n.name));
                }
            }
            ok(Value::Object(map))
        }
        "createComment" => {
            check_project(board, task_project(board, tid))?;
            let user_id = int(get("user_id")).unwrap_or(0);
            let content = get("content")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let own = match who {
                Who::User(u) => u.id == user_id,
                Who::App => board.users.iter().any(|u| u.id == user_id),
            };
            let Some(task_id) = tid.filter(|t| board.tasks.iter().any(|x| x.id == *t)) else {
                return ok(json!(false));
            };
            if !own || content.is_empty() {
                return ok(json!(false));
            }
            let id = board.comments.len() as i64 + 1;
            board.comments.push(Comment {
                id,
                task_id,
                user_id,
                comment: content,
            });
            ok(json!(id))
        }
        "getAllComments" => {
            check_project(board, task_project(board, tid))?;
            let list: Vec<Value> = board
                .comments
                .iter()
                .filter(|c| Some(c.task_id) == tid)
                .map(|c| {
                    let u = board.users.iter().find(|u| u.id == c.user_id);
                    json!({"id": c.id, "date_creation": NOW + 1, "date_modification": NOW + 1, "task_id": c.task_id, "user_id": c.user_id, "comment": c.comment, "visibility": "app-user", "username": u.map(|u| u.username.clone()), "name": null, "email": null, "avatar_path": null})
                })
                .collect();
            ok(json!(list))
        }
        "createSubtask" => {
            check_project(board, task_project(board, tid))?;
            let title = get("title")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let Some(task_id) = tid.filter(|t| board.tasks.iter().any(|x| x.id == *t)) else {
                return ok(json!(false));
            };
            if title.is_empty() {
                return ok(json!(false));
            }
            let id = board.subtasks.len() as i64 + 1;
            board.subtasks.push(Subtask {
                id,
                task_id,
                title,
                status: int(get("status")).unwrap_or(0),
                user_id: int(get("user_id")).unwrap_or(0),
                time_estimated: get("time_estimated").and_then(Value::as_f64).unwrap_or(0.0),
            });
            ok(json!(id))
        }
        "updateSubtask" => {
            check_project(board, task_project(board, tid))?;
            let id = int(get("id"));
            let Some(st) = board
                .subtasks
                .iter_mut()
                .find(|s| Some(s.id) == id && Some(s.task_id) == tid)
            else {
                return ok(json!(false));
            };
            if let Some(t) = get("title").and_then(Value::as_str) {
                if t.is_empty() {
                    return ok(json!(false));
                }
                st.title = t.into();
            }
            if let Some(s) = int(get("status")) {
                st.status = s;
            }
            if let Some(u) = int(get("user_id")) {
                st.user_id = u;
            }
            ok(json!(true))
        }
        "getAllSubtasks" => {
            check_project(board, task_project(board, tid))?;
            let list: Vec<Value> = board
                .subtasks
                .iter()
                .filter(|s| Some(s.task_id) == tid)
                .enumerate()
                .map(|(i, s)| {
                    let u = board.users.iter().find(|u| u.id == s.user_id);
                    let status_name = ["Todo", "In progress", "Done"]
                        .get(usize::try_from(s.status).unwrap_or(0))
                        .copied()
                        .unwrap_or("Todo");
                    json!({"id": s.id, "title": s.title, "status": s.status, "time_estimated": s.time_estimated, "time_spent": 0, "task_id": s.task_id, "user_id": s.user_id, "position": i + 1, "username": u.map(|u| u.username.clone()), "name": null, "status_name": status_name})
                })
                .collect();
            ok(json!(list))
        }
        _ => Ok(Err((-32601, "Method not found", None))),
    }
}

fn set_tags(board: &mut Board, project_id: i64, task_id: i64, tags: &[Value]) {
    board.task_tags.retain(|(t, _)| *t != task_id);
    for name in tags
        .iter()
        .filter_map(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        let tag_id = match board
            .tags
            .iter()
            .find(|n| n.project_id == project_id && n.name == name)
        {
            Some(n) => n.id,
            None => {
                let id = board.id();
                board.tags.push(Named {
                    id,
                    project_id,
                    name: name.into(),
                });
                id
            }
        };
        board.task_tags.push((task_id, tag_id));
    }
}

/// A subset of Kanboard's filter language: `status:open|closed`, `assignee:` (as Kanboard's
/// `TaskAssigneeFilter`: digits are an owner id, `nobody` and `anybody`, anything else a
/// case-insensitive part of a username or display name, so `assignee:bob` also finds the
/// tasks of `bobby`), `column:<title>`, `ref:<reference>`, and other words matched against the
/// title.
fn search(board: &Board, project_id: i64, query: &str) -> Vec<Value> {
    let mut terms: Vec<(String, String)> = Vec::new();
    let mut rest = query.trim();
    while !rest.is_empty() {
        let (key, after) = match rest.split_once(':') {
            Some((k, a)) if !k.contains(' ') && !k.is_empty() => (k.to_lowercase(), a),
            _ => (String::new(), rest),
        };
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            match q.split_once('"') {
                Some((v, n)) => (v.to_string(), n),
                None => (q.to_string(), ""),
            }
        } else {
            match after.split_once(' ') {
                Some((v, n)) => (v.to_string(), n),
                None => (after.to_string(), ""),
            }
        };
        terms.push((key, value));
        rest = next.trim_start();
    }
    board
        .tasks
        .iter()
        .filter(|t| t.project_id == project_id)
        .filter(|t| {
            terms.iter().all(|(k, v)| match k.as_str() {
                "status" => (v == "open") == (t.is_active == 1),
                "assignee" => match v.as_str() {
                    _ if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) => {
                        v.parse() == Ok(t.owner_id)
                    }
                    "nobody" => t.owner_id == 0,
                    "anybody" => t.owner_id > 0,
                    _ => {
                        let part = v.to_lowercase();
                        board.users.iter().any(|u| {
                            u.id == t.owner_id
                                && (u.username.to_lowercase().contains(&part)
                                    || u.name.to_lowercase().contains(&part))
                        })
                    }
                },
                "column" => board
                    .columns
                    .iter()
                    .any(|c| c.id == t.column_id && c.title.eq_ignore_ascii_case(v)),
                "ref" | "reference" => t.reference == *v,
                _ => t.title.to_lowercase().contains(&v.to_lowercase()),
            })
        })
        .map(|t| task_json(board, t))
        .collect()
}
