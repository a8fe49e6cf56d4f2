//! The MCP tasks extension over real HTTP on 127.0.0.1: task-augmented `tools/call`,
//! `tasks/get`, `tasks/update`, `tasks/cancel` on 2026-07-28 (stateless, the extension declared
//! per request) and on a 2025-11-25 session (declared at `initialize`, status notifications on
//! the session's stream), and every bad path a client can reach: unknown task ids, another
//! principal's task, cancel after completion, an expired task, too many tasks, a `required`
//! tool called without the extension, the methods the extension removed.
//!
//! Requests are written by hand in the shapes of the specification, with the `Mcp-Method` /
//! `Mcp-Name` headers a 2026-07-28 client sends (`Mcp-Name` is the task id for `tasks/*`).
//! The tools signal the test when they start and wait for the test's release, so nothing
//! depends on timing; waits poll with a deadline.

mod common;

use std::time::{Duration, Instant};

use common::{PROTO_NEW, PROTO_OLD, Raw, Resp};
use kberg_core::{
    Grants, Principal, TaskConfig, TaskSupport, ToolBuilder, ToolOutput, ToolRegistry,
    WriteCapability,
};
use kberg_server::{BearerTokens, McpApp};
use kberg_testkit::eventually_async_ok;
use kberg_testkit::serve::{RunningServer, loopback};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

const ALICE: &str = "alice-token";
const BOB: &str = "bob-token";
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A running server with the task tools; stopped when dropped.
struct Fixture {
    url: String,
    /// The `slow` tool's runs announce themselves here.
    started: tokio::sync::Mutex<mpsc::UnboundedReceiver<()>>,
    /// Dropped `slow` runs (cancelled before they finished) announce themselves here.
    dropped: tokio::sync::Mutex<mpsc::UnboundedReceiver<()>>,
    release: watch::Sender<bool>,
    /// Stops the server when the fixture drops.
    _server: RunningServer,
}

/// Tells the test when a `slow` run ends without finishing.
struct DropSignal(Option<mpsc::UnboundedSender<()>>);

impl DropSignal {
    /// The run finished: nothing to report.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

async fn start(config: TaskConfig) -> Fixture {
    let tools = ToolRegistry::new();
    let jobs = WriteCapability::new("jobs.run", "Run jobs");
    tools.declare(jobs.clone()).expect("declare");
    let (started_tx, started) = mpsc::unbounded_channel();
    let (dropped_tx, dropped) = mpsc::unbounded_channel();
    let (release, release_rx) = watch::channel(false);
    tools
        .register(
            ToolBuilder::new("slow")
                .description("Works until the test releases it")
                .task_support(TaskSupport::Optional)
                .raw_handler(json!({"type": "object"}), move |_a, _ctx| {
                    let started = started_tx.clone();
                    let dropped = dropped_tx.clone();
                    let mut release = release_rx.clone();
                    async move {
                        let mut guard = DropSignal(Some(dropped));
                        let _ = started.send(());
                        let _ = release.wait_for(|r| *r).await;
                        guard.disarm();
                        Ok(ToolOutput::text("released"))
                    }
                }),
        )
        .expect("register slow");
    tools
        .register(
            ToolBuilder::new("quick")
                .description("Answers at once")
                .task_support(TaskSupport::Optional)
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async {
                    Ok(ToolOutput::text("quick done"))
                }),
        )
        .expect("register quick");
    tools
        .register(
            ToolBuilder::new("asks")
                .description("Asks the user to confirm")
                .task_support(TaskSupport::Optional)
                .raw_handler(json!({"type": "object"}), |_a, ctx| async move {
                    let answer = ctx
                        .elicit(
                            "Go on?",
                            json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}),
                        )
                        .await?;
                    let ok = answer["action"] == "accept" && answer["content"]["ok"] == true;
                    Ok(ToolOutput::text(if ok { "confirmed" } else { "declined" }))
                }),
        )
        .expect("register asks");
    tools
        .register(
            ToolBuilder::new("boom")
                .description("Fails inside the server")
                .task_support(TaskSupport::Optional)
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async {
                    if true {
                        panic!("boom on purpose");
                    }
                    Ok(ToolOutput::default())
                }),
        )
        .expect("register boom");
    tools
        .register(
            ToolBuilder::new("job")
                .description("Runs only as a task and needs jobs.run")
                .task_support(TaskSupport::Required)
                .write(jobs)
                .raw_handler(json!({"type": "object"}), |_a, _ctx| async {
                    Ok(ToolOutput::text("job done"))
                }),
        )
        .expect("register job");
    let app = McpApp::builder("kberg-tasks-test", "0.1.0")
        .tools(tools)
        .task_config(config)
        .build();
    let auth = BearerTokens::new()
        .with_token(
            ALICE,
            Principal::new("alice").with_grants(Grants::of(["jobs.run"])),
        )
        .with_token(BOB, Principal::new("bob"));
    let server = RunningServer::start(app, loopback().auth(auth)).await;
    Fixture {
        url: server.url.clone(),
        started: tokio::sync::Mutex::new(started),
        dropped: tokio::sync::Mutex::new(dropped),
        release,
        _server: server,
    }
}

impl Fixture {
    fn client(&self, token: &str) -> Raw {
        Raw::new(&self.url, Some(token))
    }

    async fn wait_started(&self) {
        tokio::time::timeout(kberg_testkit::WAIT, self.started.lock().await.recv())
            .await
            .expect("the tool started")
            .expect("the tool's channel is open");
    }

    async fn wait_dropped(&self) {
        tokio::time::timeout(kberg_testkit::WAIT, self.dropped.lock().await.recv())
            .await
            .expect("the tool was stopped")
            .expect("the tool's channel is open");
    }
}

/// The `_meta` of a 2026-07-28 request, declaring elicitation and (with `tasks`) the extension.
fn meta(tasks: bool) -> Value {
    let mut caps = json!({"elicitation": {}});
    if tasks {
        caps["extensions"] = json!({TASKS: {}});
    }
    json!({
        "io.modelcontextprotocol/protocolVersion": PROTO_NEW,
        "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// A 2026-07-28 request; `name` is its `Mcp-Name` header (tool name or task id).
async fn send(c: &Raw, method: &str, name: Option<&str>, mut params: Value, tasks: bool) -> Value {
    params["_meta"] = meta(tasks);
    let mut headers = vec![("mcp-protocol-version", PROTO_NEW), ("mcp-method", method)];
    if let Some(n) = name {
        headers.push(("mcp-name", n));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let r: Resp = c.post_with(body.to_string(), &headers).await;
    r.reply(1)
}

async fn call(c: &Raw, tool: &str, tasks: bool) -> Value {
    send(
        c,
        "tools/call",
        Some(tool),
        json!({"name": tool, "arguments": {}}),
        tasks,
    )
    .await
}

async fn task_op(c: &Raw, method: &str, id: &str, extra: Value) -> Value {
    let mut params = json!({"taskId": id});
    if let (Some(p), Value::Object(e)) = (params.as_object_mut(), extra) {
        p.extend(e);
    }
    send(c, method, Some(id), params, true).await
}

async fn get(c: &Raw, id: &str) -> Value {
    task_op(c, "tasks/get", id, json!({})).await
}

/// Starts `tool` as a task and returns its id.
async fn start_task(c: &Raw, tool: &str) -> String {
    let r = call(c, tool, true).await;
    let res = &r["result"];
    assert_eq!(res["resultType"], "task", "{r}");
    res["taskId"].as_str().expect("taskId").to_string()
}

/// Polls `tasks/get` until `done` holds for the reply, or fails after
/// [`WAIT`](kberg_testkit::WAIT).
async fn poll(c: &Raw, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually_async_ok(&format!("task {id} to get there"), || async {
        let r = get(c, id).await;
        if done(&r) { Ok(r) } else { Err(r) }
    })
    .await
}

fn status_is(s: &'static str) -> impl Fn(&Value) -> bool {
    move |r| r["result"]["status"] == s
}

fn assert_not_found(r: &Value, id: &str) {
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["data"]["code"], "task_not_found", "{r}");
    assert_eq!(r["error"]["data"]["taskId"], id, "{r}");
}

#[tokio::test]
async fn a_task_is_created_at_once_polled_and_completed_with_its_result_inlined() {
    let f = start(TaskConfig::default()).await;
    let c = f.client(ALICE);
    let r = call(&c, "slow", true).await;
    let res = &r["result"];
    assert_eq!(res["resultType"], "task", "{r}");
    assert_eq!(res["status"], "working", "{r}");
    assert!(
        res.get("task").is_none() && res.get("result").is_none(),
        "{r}"
    );
    assert_eq!(res["ttlMs"], 15 * 60 * 1000, "{r}");
    assert_eq!(res["pollIntervalMs"], 500, "{r}");
    for k in ["createdAt", "lastUpdatedAt"] {
        let t = res[k].as_str().expect("timestamp");
        assert!(t.ends_with('Z') && t.contains('T'), "{k}: {t}");
    }
    let id = res["taskId"].as_str().expect("taskId").to_string();
    assert_eq!(id.len(), 32, "128 random bits in hex: {id}");

    // The task exists as soon as the call answered, and works until released.
    f.wait_started().await;
    let g = get(&c, &id).await;
    assert_eq!(g["result"]["resultType"], "complete", "{g}");
    assert_eq!(g["result"]["taskId"], id, "{g}");
    assert_eq!(g["result"]["status"], "working", "{g}");
    assert!(g["result"].get("result").is_none(), "{g}");

    f.release.send_replace(true);
    let done = poll(&c, &id, status_is("completed")).await;
    let result = &done["result"]["result"];
    assert_eq!(result["content"][0]["text"], "released", "{done}");
    assert_eq!(result["isError"], false, "{done}");
    assert!(done["result"].get("error").is_none(), "{done}");
}

#[tokio::test]
async fn without_the_extension_a_task_tool_answers_within_the_call() {
    let f = start(TaskConfig::default()).await;
    let c = f.client(ALICE);
    let r = call(&c, "quick", false).await;
    let res = &r["result"];
    assert_ne!(res["resultType"], "task", "{r}");
    assert!(res.get("taskId").is_none(), "{r}");
    assert_eq!(res["content"][0]["text"], "quick done", "{r}");
    // The task methods want the extension declared.
    let r = send(&c, "tasks/get", Some("x"), json!({"taskId": "x"}), false).await;
    assert_eq!(r["error"]["code"], -32021, "{r}");
}

#[tokio::test]
async fn unknown_task_ids_are_invalid_params_for_every_method() {
    let f = start(TaskConfig::default()).await;
    let c = f.client(ALICE);
    let id = "0123456789abcdef0123456789abcdef";
    assert_not_found(&get(&c, id).await, id);
    assert_not_found(&task_op(&c, "tasks/cancel", id, json!({})).await, id);
    assert_not_found(
        &task_op(
            &c,
            "tasks/update",
            id,
            json!({"inputResponses": {"k": {"action": "accept"}}}),
        )
        .await,
        id,
    );
}

#[tokio::test]
async fn another_principals_task_is_not_found_and_cannot_be_cancelled() {
    let f = start(TaskConfig::default()).await;
    let alice = f.client(ALICE);
    let bob = f.client(BOB);
    let id = start_task(&alice, "slow").await;
    f.wait_started().await;
    assert_not_found(&get(&bob, &id).await, &id);
    assert_not_found(&task_op(&bob, "tasks/cancel", &id, json!({})).await, &id);
    assert_not_found(
        &task_op(&bob, "tasks/update", &id, json!({"inputResponses": {}})).await,
        &id,
    );
    // Alice's task goes on.
    let g = get(&alice, &id).await;
    assert_eq!(g["result"]["status"], "working", "{g}");
    f.release.send_replace(true);
    poll(&alice, &id, status_is("completed")).await;
}

#[tokio::test]
async fn cancel_stops_the_tool_and_cancelling_again_or_after_completion_changes_nothing() {
    let f = start(TaskConfig::default()).await;
    let c = f.client(ALICE);
    let id = start_task(&c, "slow").await;
    f.wait_started().await;
    let ack = task_op(&c, "tasks/cancel", &id, json!({})).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    f.wait_dropped().await;
    let g = get(&c, &id).await;
    assert_eq!(g["result"]["status"], "cancelled", "{g}");
    assert!(g["result"].get("result").is_none(), "{g}");
    // Cancelling a cancelled task is the same empty ack.
    let again = task_op(&c, "tasks/cancel", &id, json!({})).await;
    assert_eq!(
        again["result"],
        json!({"resultType": "complete"}),
        "{again}"
    );

    // A completed task stays completed.
    let id = start_task(&c, "quick").await;
    poll(&c, &id, status_is("completed")).await;
    let ack = task_op(&c, "tasks/cancel", &id, json!({})).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let g = get(&c, &id).await;
    assert_eq!(g["result"]["status"], "completed", "{g}");
    assert_eq!(g["result"]["result"]["content"][0]["text"], "quick done");
}

#[tokio::test]
async fn an_expired_task_is_gone() {
    let f = start(TaskConfig::default().ttl(Duration::from_millis(300))).await;
    let c = f.client(ALICE);
    let r = call(&c, "quick", true).await;
    assert_eq!(r["result"]["ttlMs"], 300, "{r}");
    let id = r["result"]["taskId"].as_str().expect("taskId").to_string();
    let gone = poll(&c, &id, |r| r.get("error").is_some()).await;
    assert_not_found(&gone, &id);
    // A running task that expires is stopped.
    let id = start_task(&c, "slow").await;
    f.wait_started().await;
    let gone = poll(&c, &id, |r| r.get("error").is_some()).await;
    assert_not_found(&gone, &id);
    // The sweep that removed it cancelled it; the next access runs the sweep for sure.
    get(&c, &id).await;
    f.wait_dropped().await;
}

#[tokio::test]
async fn a_principal_over_its_task_limit_is_refused_with_a_stable_code() {
    let f = start(TaskConfig::default().max_per_principal(2)).await;
    let alice = f.client(ALICE);
    start_task(&alice, "slow").await;
    let second = start_task(&alice, "slow").await;
    let r = call(&alice, "slow", true).await;
    let res = &r["result"];
    assert_eq!(res["isError"], true, "{r}");
    assert_eq!(res["structuredContent"]["code"], "too_many_tasks", "{r}");
    assert_eq!(res["structuredContent"]["retryable"], true, "{r}");
    assert!(res.get("taskId").is_none(), "{r}");
    // Another principal has its own allowance.
    start_task(&f.client(BOB), "quick").await;
    // A cancelled task still counts until it expires: the limit bounds what is kept.
    task_op(&alice, "tasks/cancel", &second, json!({})).await;
    let r = call(&alice, "quick", true).await;
    assert_eq!(r["result"]["structuredContent"]["code"], "too_many_tasks");
}

#[tokio::test]
async fn a_required_task_tool_without_the_extension_is_refused_after_the_gate() {
    let f = start(TaskConfig::default()).await;
    // Bob may not run jobs: he learns that, not that the tool needs tasks.
    let r = call(&f.client(BOB), "job", false).await;
    assert_eq!(
        r["result"]["structuredContent"]["code"], "capability_required",
        "{r}"
    );
    // Alice may: without the extension the call is -32021 naming it.
    let r = call(&f.client(ALICE), "job", false).await;
    assert_eq!(r["error"]["code"], -32021, "{r}");
    assert!(
        r["error"]["data"]["requiredCapabilities"]["extensions"][TASKS].is_object(),
        "{r}"
    );
    // With it, a task.
    let c = f.client(ALICE);
    let id = start_task(&c, "job").await;
    let done = poll(&c, &id, status_is("completed")).await;
    assert_eq!(done["result"]["result"]["content"][0]["text"], "job done");
    // Bob gets no task either way.
    let r = call(&f.client(BOB), "job", true).await;
    assert_eq!(
        r["result"]["structuredContent"]["code"], "capability_required",
        "{r}"
    );
}

#[tokio::test]
async fn a_question_parks_the_task_until_tasks_update_answers_it() {
    let f = start(TaskConfig::default()).await;
    let c = f.client(ALICE);
    let id = start_task(&c, "asks").await;
    let parked = poll(&c, &id, status_is("input_required")).await;
    let requests = parked["result"]["inputRequests"]
        .as_object()
        .expect("inputRequests")
        .clone();
    assert_eq!(requests.len(), 1, "{parked}");
    let (key, question) = requests.iter().next().expect("one question");
    assert_eq!(question["method"], "elicitation/create", "{parked}");
    assert_eq!(question["params"]["message"], "Go on?", "{parked}");
    // An answer to a key nobody asked is ignored; the task keeps waiting.
    let ack = task_op(
        &c,
        "tasks/update",
        &id,
        json!({"inputResponses": {"not-asked": {"action": "accept"}}}),
    )
    .await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    assert_eq!(get(&c, &id).await["result"]["status"], "input_required");
    let ack = task_op(
        &c,
        "tasks/update",
        &id,
        json!({"inputResponses": {key: {"action": "accept", "content": {"ok": true}}}}),
    )
    .await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let done = poll(&c, &id, status_is("completed")).await;
    assert_eq!(done["result"]["result"]["content"][0]["text"], "confirmed");
    assert!(done["result"].get("inputRequests").is_none(), "{done}");
}

#[tokio::test]
async fn an_internal_failure_fails_the_task_with_a_json_rpc_error() {
    let f = start(TaskConfig::default()).await;
    let c = f.client(ALICE);
    let id = start_task(&c, "boom").await;
    let failed = poll(&c, &id, status_is("failed")).await;
    assert_eq!(failed["result"]["error"]["code"], -32603, "{failed}");
    let message = failed["result"]["error"]["message"]
        .as_str()
        .expect("message");
    assert!(
        !message.contains("on purpose"),
        "no panic payload: {message}"
    );
    assert!(failed["result"].get("result").is_none(), "{failed}");
}

#[tokio::test]
async fn the_methods_the_extension_removed_are_unknown() {
    let f = start(TaskConfig::default()).await;
    let c = f.client(ALICE);
    let id = start_task(&c, "quick").await;
    for method in ["tasks/result", "tasks/list"] {
        let r = task_op(&c, method, &id, json!({})).await;
        assert_eq!(r["error"]["code"], -32601, "{method}: {r}");
    }
}

#[tokio::test]
async fn a_2025_11_25_session_gets_tasks_and_their_status_notifications() {
    let f = start(TaskConfig::default()).await;
    let c = f.client(ALICE);
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": PROTO_OLD,
                "capabilities": {"extensions": {TASKS: {}}},
                "clientInfo": {"name": "tasks-test", "version": "0"}
            }}),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let caps = &r.reply(0)["result"]["capabilities"];
    assert!(caps["extensions"][TASKS].is_object(), "{caps}");
    assert!(caps.get("tasks").is_none(), "{caps}");
    let sid = r.header("mcp-session-id").expect("session id");
    let n = c
        .post(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            Some(&sid),
        )
        .await;
    assert_eq!(n.status, 202, "{}", n.text);

    // The session's stream, for the notifications.
    let mut stream = c
        .http
        .get(&c.url)
        .header("authorization", format!("Bearer {ALICE}"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", PROTO_OLD)
        .send()
        .await
        .expect("GET stream");
    assert_eq!(stream.status(), 200);

    let created = c.call_old(&sid, 1, "slow", json!({})).await;
    let res = &created["result"];
    assert_eq!(res["resultType"], "task", "{created}");
    let id = res["taskId"].as_str().expect("taskId").to_string();
    f.wait_started().await;
    let g = c
        .post(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"taskId": id}}),
            Some(&sid),
        )
        .await;
    assert_eq!(g.reply(2)["result"]["status"], "working", "{}", g.text);
    f.release.send_replace(true);

    // `notifications/tasks` with the completed task, result inlined.
    let deadline = Instant::now() + kberg_testkit::WAIT;
    let mut seen = String::new();
    let note = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, stream.chunk())
            .await
            .unwrap_or_else(|_| panic!("no completed notification; stream so far:\n{seen}"))
            .expect("stream read")
            .expect("stream open");
        seen.push_str(&String::from_utf8_lossy(&chunk));
        let found = seen
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m["method"] == "notifications/tasks" && m["params"]["status"] == "completed");
        if let Some(m) = found {
            break m;
        }
    };
    assert_eq!(note["params"]["taskId"], id, "{note}");
    assert_eq!(
        note["params"]["result"]["content"][0]["text"], "released",
        "{note}"
    );
}

/// A 2025-11-25 session of `c` that declared the tasks extension at `initialize`.
async fn tasks_session(c: &Raw) -> String {
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": PROTO_OLD,
                "capabilities": {"extensions": {TASKS: {}}},
                "clientInfo": {"name": "tasks-test", "version": "0"}
            }}),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let sid = r.header("mcp-session-id").expect("session id");
    let n = c
        .post(
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            Some(&sid),
        )
        .await;
    assert_eq!(n.status, 202, "{}", n.text);
    sid
}

#[tokio::test]
async fn malformed_task_requests_are_invalid_params_naming_the_field() {
    let f = start(TaskConfig::default()).await;
    let c = f.client(ALICE);
    let sid = tasks_session(&c).await;
    let cases = [
        ("tasks/get", json!({"taskId": 5}), "`taskId`"),
        ("tasks/cancel", json!({"taskId": 5}), "`taskId`"),
        ("tasks/get", json!({}), "missing field `taskId`"),
        (
            "tasks/update",
            json!({"taskId": "x", "inputResponses": 3}),
            "`inputResponses`",
        ),
        (
            "tasks/update",
            json!({"taskId": "x"}),
            "missing field `inputResponses`",
        ),
    ];
    for (id, (method, params, names)) in (1..).zip(cases) {
        let r = c
            .post(
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
                Some(&sid),
            )
            .await;
        let e = &r.reply(id)["error"];
        assert_eq!(e["code"], -32602, "{method} {params}: {}", r.text);
        let message = e["message"].as_str().expect("message");
        assert!(
            message.starts_with(&format!("invalid params for `{method}`: "))
                && message.contains(names),
            "{method} {params}: {message}"
        );
    }
    // A method nobody implements is still unknown, in the tasks namespace too.
    for (id, method) in [(20, "tasks/explode"), (21, "tasks/list")] {
        let r = c
            .post(
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"taskId": 5}}),
                Some(&sid),
            )
            .await;
        assert_eq!(r.reply(id)["error"]["code"], -32601, "{method}: {}", r.text);
    }
    // A well-formed request in the same session still works.
    let r = c
        .post(
            json!({"jsonrpc": "2.0", "id": 30, "method": "tasks/get", "params": {"taskId": "nope"}}),
            Some(&sid),
        )
        .await;
    assert_not_found(&r.reply(30), "nope");
    // The same on 2026-07-28, where the extension is declared per request.
    let r = send(&c, "tasks/get", Some("5"), json!({"taskId": 5}), true).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`taskId`")),
        "{r}"
    );
}
