//! Every Kanboard tool's success and failure paths, through the Kberg registry's gate, against
//! the wire-faithful Kanboard stand-in on 127.0.0.1.

#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bridle_gateway::kanboard::{
    self, Credential, KANBOARD_WRITE, KanboardClient, KanboardTools, StaticAccess,
};
use kberg_core::{CallOptions, Caller, ErrorCode, Grants, Principal, ToolOutput, ToolRegistry};
use serde_json::{Value, json};
use support::kanboard_standin::{APP_TOKEN, KanboardStandIn};

/// The board every test starts from.
struct Fixture {
    kb: KanboardStandIn,
    tools: ToolRegistry,
    shop: i64,
    secret: i64,
    claude_user: i64,
    codex_user: i64,
}

async fn fixture_with(endpoint: Option<&str>, timeout: Duration) -> Fixture {
    let kb = KanboardStandIn::start().await;
    let claude_user = kb.add_user("claude-bot", "claude-kb-token");
    let codex_user = kb.add_user("codex-bot", "codex-kb-token");
    let shop = kb.add_project("Shop", &[1, claude_user, codex_user]);
    let secret = kb.add_project("Secret", &[1]);
    kb.add_named("category", shop, "Bug");
    kb.add_named("swimlane", shop, "Urgent");
    let access = StaticAccess::new()
        .agent(
            "claude",
            Credential::User {
                username: "claude-bot".into(),
                token: "claude-kb-token".into(),
            },
            [shop],
        )
        .agent(
            "codex",
            Credential::AppToken {
                token: APP_TOKEN.into(),
                acting_user_id: None,
            },
            [shop],
        )
        .agent(
            "ghost",
            Credential::AppToken {
                token: APP_TOKEN.into(),
                acting_user_id: Some(999),
            },
            [shop],
        )
        .agent(
            "locked",
            Credential::User {
                username: "claude-bot".into(),
                token: "wrong-token".into(),
            },
            [shop],
        );
    let url = endpoint.map_or_else(|| kb.endpoint.clone(), str::to_string);
    let client = KanboardClient::new(url.parse().unwrap(), timeout).unwrap();
    let tools = ToolRegistry::new();
    kanboard::register(&tools, KanboardTools::new(client, Arc::new(access))).unwrap();
    Fixture {
        kb,
        tools,
        shop,
        secret,
        claude_user,
        codex_user,
    }
}

async fn fixture() -> Fixture {
    fixture_with(None, Duration::from_secs(10)).await
}

fn caller(name: &str, write: bool) -> Caller {
    let grants = if write {
        Grants::of([KANBOARD_WRITE])
    } else {
        Grants::none()
    };
    Caller::new(Principal::new(name).with_grants(grants))
}

impl Fixture {
    async fn call(&self, who: &str, tool: &str, args: Value) -> ToolOutput {
        self.tools
            .call(&caller(who, true), tool, args, CallOptions::default())
            .await
            .unwrap()
    }

    async fn ok(&self, who: &str, tool: &str, args: Value) -> Value {
        let out = self.call(who, tool, args).await;
        assert!(!out.is_error, "{tool}: {}", out.all_text());
        out.structured.unwrap()
    }

    async fn refused(&self, who: &str, tool: &str, args: Value) -> (String, String) {
        let out = self.call(who, tool, args).await;
        assert!(out.is_error, "{tool} should fail: {}", out.all_text());
        let code = out.structured.as_ref().unwrap()["code"]
            .as_str()
            .unwrap()
            .to_string();
        (code, out.all_text())
    }
}

#[tokio::test]
async fn read_tools_answer_compactly_and_stay_inside_the_mapping() {
    let f = fixture().await;
    let me = f.ok("claude", "whoami", json!({})).await;
    assert_eq!(me["kind"], "user");
    assert_eq!(me["user"]["username"], "claude-bot");
    assert_eq!(me["project_ids"], json!([f.shop]));
    let app = f.ok("codex", "whoami", json!({})).await;
    assert_eq!(app["kind"], "application");
    assert_eq!(app["user"], Value::Null);

    let projects = f.ok("claude", "list_projects", json!({})).await;
    assert_eq!(
        projects["projects"],
        json!([{"id": f.shop, "name": "Shop", "identifier": null, "description": null, "active": true, "url": {"board": format!("http://127.0.0.1/board/{}", f.shop)}}])
    );
    assert_eq!(
        f.ok("codex", "get_project", json!({"project_id": f.shop}))
            .await["name"],
        "Shop"
    );

    // A project outside the mapping is refused, even with an app token that could reach it.
    for tool in ["get_project", "project_context", "get_board", "list_tasks"] {
        let (code, text) = f
            .refused("codex", tool, json!({"project_id": f.secret}))
            .await;
        assert_eq!(code, "project_not_mapped", "{tool}");
        assert!(text.contains(&f.shop.to_string()), "{text}");
    }
    let (code, _) = f
        .refused(
            "codex",
            "search_tasks",
            json!({"project_id": f.secret, "query": "x"}),
        )
        .await;
    assert_eq!(code, "project_not_mapped");

    let ctx = f
        .ok("claude", "project_context", json!({"project_id": f.shop}))
        .await;
    let columns: Vec<&str> = ctx["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Backlog", "Ready", "Work in progress", "Done"]);
    assert_eq!(ctx["swimlanes"].as_array().unwrap().len(), 2);
    assert_eq!(ctx["categories"][0]["name"], "Bug");
    assert_eq!(
        ctx["assignable_users"],
        json!([{"id": 1, "name": "admin"}, {"id": f.claude_user, "name": "claude-bot"}, {"id": f.codex_user, "name": "codex-bot"}])
    );
    // One batch (one HTTP request holds the five procedures).
    let log = f.kb.log();
    let context_calls: Vec<_> = log
        .iter()
        .filter(|(_, m)| m == "getColumns" || m == "getAssignableUsers")
        .collect();
    assert_eq!(context_calls.len(), 2);

    // Missing objects.
    let (code, _) = f
        .refused("claude", "get_task", json!({"task_id": 999}))
        .await;
    assert_eq!(code, "task_not_found");
    assert!(
        f.ok("claude", "list_tasks", json!({"project_id": f.shop}))
            .await["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn create_move_close_reopen_assign_tag_comment_and_subtasks() {
    let f = fixture().await;
    let created = f
        .ok(
            "claude",
            "create_task",
            json!({"project_id": f.shop, "title": "Fix the cart", "column": "ready", "swimlane": "Urgent",
                   "category": "Bug", "owner": "claude-bot", "date_due": "2026-12-31T17:00:00Z",
                   "tags": ["cart"], "reference": "GH-12", "priority": 2}),
        )
        .await;
    assert_eq!(created["created"], true);
    let id = created["task_id"].as_i64().unwrap();

    // The same create again (a retry) finds the task by its reference: no duplicate.
    let again = f
        .ok(
            "claude",
            "create_task",
            json!({"project_id": f.shop, "title": "Fix the cart", "reference": "GH-12"}),
        )
        .await;
    assert_eq!(again["created"], false);
    assert_eq!(again["task"]["id"], id);
    assert_eq!(f.kb.task_count(f.shop), 1);

    let task = f
        .ok(
            "claude",
            "get_task",
            json!({"task_id": id, "tags": true, "comments": true, "subtasks": true}),
        )
        .await;
    assert_eq!(task["title"], "Fix the cart");
    assert_eq!(task["date_due"], "2026-12-31T17:00:00Z");
    assert_eq!(task["date_completed"], Value::Null);
    assert_eq!(task["owner_id"], f.claude_user);
    assert_eq!(task["status"], "open");
    assert_eq!(task["reference"], "GH-12");
    assert_eq!(task["tags"], json!(["cart"]));
    assert_eq!(task["comments"], json!([]));

    let updated = f
        .ok(
            "claude",
            "update_task",
            json!({"task_id": id, "title": "Fix the cart total", "date_due": "2027-01-15"}),
        )
        .await;
    assert_eq!(updated["updated"], true);
    let task = f.ok("claude", "get_task", json!({"task_id": id})).await;
    assert_eq!(task["date_due"], "2027-01-15T00:00:00Z");

    // Moving keeps the current swimlane unless told.
    let moved = f
        .ok(
            "claude",
            "move_task",
            json!({"task_id": id, "column": "Work in progress"}),
        )
        .await;
    assert_eq!(moved["column"], "Work in progress");
    let urgent = task["swimlane_id"].as_i64().unwrap();
    assert_eq!(moved["swimlane_id"], urgent);
    let board = f
        .ok("claude", "get_board", json!({"project_id": f.shop}))
        .await;
    let lane = board["swimlanes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "Urgent")
        .unwrap();
    let wip = lane["columns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["title"] == "Work in progress")
        .unwrap();
    assert_eq!(wip["tasks"][0]["id"], id);
    assert_eq!(wip["tasks"][0]["date_due"], "2027-01-15T00:00:00Z");

    let search = f
        .ok(
            "claude",
            "search_tasks",
            json!({"project_id": f.shop, "query": "status:open cart"}),
        )
        .await;
    assert_eq!(search["tasks"][0]["id"], id);
    let mine = f.ok("claude", "my_tasks", json!({})).await;
    assert_eq!(mine["user"], "claude-bot");
    assert_eq!(mine["tasks"][0]["id"], id);

    // Assign to another assignable user, by name; then unassign.
    let assigned = f
        .ok(
            "claude",
            "assign_task",
            json!({"task_id": id, "user": "codex-bot"}),
        )
        .await;
    assert_eq!(assigned["owner_id"], f.codex_user);
    assert!(
        f.ok("claude", "my_tasks", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let unassigned = f.ok("claude", "assign_task", json!({"task_id": id})).await;
    assert_eq!(unassigned["owner_id"], Value::Null);

    let tags = f
        .ok(
            "claude",
            "set_tags",
            json!({"task_id": id, "tags": ["cart", "checkout"]}),
        )
        .await;
    assert_eq!(tags["tags"], json!(["cart", "checkout"]));

    let comment = f
        .ok(
            "claude",
            "add_comment",
            json!({"task_id": id, "content": "Root cause: rounding."}),
        )
        .await;
    assert!(comment["comment_id"].as_i64().unwrap() > 0);

    let sub = f
        .ok("claude", "create_subtask", json!({"task_id": id, "title": "Write the test", "user": "claude-bot", "time_estimated": 1.5}))
        .await;
    let sub_id = sub["subtask_id"].as_i64().unwrap();
    f.ok(
        "claude",
        "update_subtask",
        json!({"subtask_id": sub_id, "task_id": id, "status": "done"}),
    )
    .await;
    let task = f
        .ok(
            "claude",
            "get_task",
            json!({"task_id": id, "tags": true, "comments": true, "subtasks": true}),
        )
        .await;
    assert_eq!(task["tags"], json!(["cart", "checkout"]));
    assert_eq!(task["comments"][0]["user"], "claude-bot");
    assert_eq!(task["comments"][0]["comment"], "Root cause: rounding.");
    assert_eq!(task["subtasks"][0]["status"], "done");
    assert_eq!(task["subtasks"][0]["user_id"], f.claude_user);

    let closed = f.ok("claude", "close_task", json!({"task_id": id})).await;
    assert_eq!(closed["status"], "closed");
    assert_eq!(closed["changed"], true);
    let again = f.ok("claude", "close_task", json!({"task_id": id})).await;
    assert_eq!(again["changed"], false);
    let closed_list = f
        .ok(
            "claude",
            "list_tasks",
            json!({"project_id": f.shop, "status": "closed"}),
        )
        .await;
    assert_eq!(closed_list["tasks"][0]["status"], "closed");
    assert!(closed_list["tasks"][0]["date_completed"].is_string());
    let reopened = f.ok("claude", "reopen_task", json!({"task_id": id})).await;
    assert_eq!(reopened["status"], "open");

    // Every request of claude's carried claude's own Kanboard user.
    assert!(f.kb.log().iter().all(|(who, _)| who == "claude-bot"));
}

#[tokio::test]
async fn overdue_tasks_and_dates_out() {
    let f = fixture().await;
    let id = f
        .ok("codex", "create_task", json!({"project_id": f.shop, "title": "Renew the certificate", "date_due": "2026-11-01"}))
        .await["task_id"]
        .as_i64()
        .unwrap();
    f.ok(
        "codex",
        "create_task",
        json!({"project_id": f.shop, "title": "No due date"}),
    )
    .await;
    let overdue = f.ok("codex", "overdue_tasks", json!({})).await;
    assert_eq!(
        overdue["tasks"],
        json!([{"id": id, "title": "Renew the certificate", "project_id": f.shop, "date_due": "2026-11-01T00:00:00Z", "assignee": null}])
    );
    let listed = f
        .ok("codex", "list_tasks", json!({"project_id": f.shop}))
        .await;
    let undated = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["title"] == "No due date")
        .unwrap();
    // Kanboard's 0 means unset.
    assert_eq!(undated["date_due"], Value::Null);
    f.kb.set_due(id, 0);
    assert!(
        f.ok("codex", "overdue_tasks", json!({"project_id": f.shop}))
            .await["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn bad_writes_get_named_errors_before_kanboard_says_false() {
    let f = fixture().await;
    let id = f
        .ok(
            "claude",
            "create_task",
            json!({"project_id": f.shop, "title": "Task"}),
        )
        .await["task_id"]
        .as_i64()
        .unwrap();

    // Unknown names come back with the valid choices.
    let out = f
        .call(
            "claude",
            "create_task",
            json!({"project_id": f.shop, "title": "T", "column": "Doing"}),
        )
        .await;
    let s = out.structured.unwrap();
    assert_eq!(s["code"], "unknown_name");
    assert_eq!(s["retryable"], false);
    assert_eq!(s["field"], "column");
    assert!(
        s["choices"][0].as_str().unwrap().starts_with("Backlog ("),
        "{s}"
    );
    assert_eq!(s["choices"].as_array().unwrap().len(), 4);
    for (tool, args, field) in [
        (
            "move_task",
            json!({"task_id": id, "column": "Nope"}),
            "column",
        ),
        (
            "move_task",
            json!({"task_id": id, "column": "Done", "swimlane": "Nope"}),
            "swimlane",
        ),
        (
            "assign_task",
            json!({"task_id": id, "user": "mallory"}),
            "user",
        ),
        (
            "update_task",
            json!({"task_id": id, "category": "Feature"}),
            "category",
        ),
        (
            "create_subtask",
            json!({"task_id": id, "title": "x", "user": 999}),
            "user",
        ),
    ] {
        let out = f.call("claude", tool, args).await;
        let s = out.structured.unwrap();
        assert_eq!(s["code"], "unknown_name", "{tool}");
        assert_eq!(s["field"], field, "{tool}");
    }

    // Dates: epoch seconds and other non-ISO text are refused before Kanboard sees them.
    let (code, text) = f
        .refused(
            "claude",
            "create_task",
            json!({"project_id": f.shop, "title": "T", "date_due": "1798736400"}),
        )
        .await;
    assert_eq!(code, "invalid_date");
    assert!(text.contains("ISO 8601"));
    let (code, _) = f
        .refused(
            "claude",
            "update_task",
            json!({"task_id": id, "date_due": "next friday"}),
        )
        .await;
    assert_eq!(code, "invalid_date");

    // Empty strings that the schema cannot catch after trimming.
    let (code, _) = f
        .refused(
            "claude",
            "create_task",
            json!({"project_id": f.shop, "title": "   "}),
        )
        .await;
    assert_eq!(code, "invalid_arguments");
    let (code, _) = f
        .refused("claude", "update_task", json!({"task_id": id}))
        .await;
    assert_eq!(code, "nothing_to_update");
    let (code, _) = f
        .refused(
            "claude",
            "update_subtask",
            json!({"subtask_id": 77, "task_id": id, "status": "done"}),
        )
        .await;
    assert_eq!(code, "subtask_not_found");
    // A blank title is refused as when creating, not sent to come back `false`.
    let sub_id = f
        .ok(
            "claude",
            "create_subtask",
            json!({"task_id": id, "title": "Keep me"}),
        )
        .await["subtask_id"]
        .as_i64()
        .unwrap();
    let (code, text) = f
        .refused(
            "claude",
            "update_subtask",
            json!({"subtask_id": sub_id, "task_id": id, "title": "   "}),
        )
        .await;
    assert_eq!(code, "invalid_arguments", "{text}");
    let task = f
        .ok(
            "claude",
            "get_task",
            json!({"task_id": id, "subtasks": true}),
        )
        .await;
    assert_eq!(task["subtasks"][0]["title"], "Keep me");

    // Tasks that do not exist or belong elsewhere.
    for tool in ["close_task", "reopen_task", "get_task"] {
        let (code, _) = f.refused("claude", tool, json!({"task_id": 4242})).await;
        assert_eq!(code, "task_not_found", "{tool}");
    }
    let hidden = {
        // A task in the unmapped project, made with the admin's rights.
        let client =
            KanboardClient::new(f.kb.endpoint.parse().unwrap(), Duration::from_secs(5)).unwrap();
        let admin = Credential::AppToken {
            token: APP_TOKEN.into(),
            acting_user_id: None,
        };
        client
            .call(
                &admin,
                "createTask",
                json!({"title": "Hidden", "project_id": f.secret}),
            )
            .await
            .unwrap()
            .as_i64()
            .unwrap()
    };
    let (code, _) = f
        .refused("codex", "get_task", json!({"task_id": hidden}))
        .await;
    assert_eq!(code, "task_not_found");
    let (code, _) = f
        .refused(
            "codex",
            "add_comment",
            json!({"task_id": hidden, "content": "hi"}),
        )
        .await;
    assert_eq!(code, "task_not_found");

    // The app token has no user: comments and "my tasks" say so.
    let (code, _) = f
        .refused(
            "codex",
            "add_comment",
            json!({"task_id": id, "content": "hi"}),
        )
        .await;
    assert_eq!(code, "no_kanboard_user");
    let (code, _) = f.refused("codex", "my_tasks", json!({})).await;
    assert_eq!(code, "no_kanboard_user");

    // The gate: bad arguments per field, and no write without the capability.
    let err = f
        .tools
        .call(
            &caller("claude", true),
            "create_task",
            json!({"project_id": "shop", "title": "T"}),
            CallOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArguments);
    let err = f
        .tools
        .call(
            &caller("claude", true),
            "create_task",
            json!({"project_id": f.shop, "title": ""}),
            CallOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArguments);
    let err = f
        .tools
        .call(
            &caller("claude", false),
            "close_task",
            json!({"task_id": id}),
            CallOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::CapabilityRequired);
    // Reads need no capability.
    let out = f
        .tools
        .call(
            &caller("claude", false),
            "get_task",
            json!({"task_id": id}),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(!out.is_error);

    // Deletes and administration are refusals with a reason.
    for tool in [
        "remove_task",
        "delete_task",
        "remove_project",
        "create_user",
    ] {
        let err = f
            .tools
            .call(
                &caller("claude", true),
                tool,
                json!({}),
                CallOptions::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::Refused, "{tool}");
        assert!(err.to_string().contains("close_task"), "{err}");
    }
}

#[tokio::test]
async fn credentials_are_checked_on_every_request() {
    let f = fixture().await;
    // No credentials configured for this agent.
    let (code, text) = f.refused("stranger", "whoami", json!({})).await;
    assert_eq!(code, "kanboard_not_configured");
    assert!(text.contains("stranger"));
    // A wrong token: 401 every time (and Kanboard locks the user after six).
    for _ in 0..7 {
        let (code, text) = f.refused("locked", "list_projects", json!({})).await;
        assert_eq!(code, "kanboard_unauthorized");
        assert!(!text.contains("wrong-token"), "{text}");
    }
    // The real user is now locked out by Kanboard itself: a stable error, not a hang.
    let (code, _) = f.refused("claude", "whoami", json!({})).await;
    assert_eq!(code, "kanboard_unauthorized");
}

/// An application token whose acting user does not exist in Kanboard (deleted, or a wrong
/// id): "me" is no user, so comments are not written in its name and "my tasks" does not
/// search for an empty assignee (which matches every user without a display name).
#[tokio::test]
async fn an_acting_user_kanboard_does_not_know_is_refused() {
    let f = fixture().await;
    let id = f
        .ok(
            "claude",
            "create_task",
            json!({"project_id": f.shop, "title": "Task"}),
        )
        .await["task_id"]
        .as_i64()
        .unwrap();
    for (tool, args) in [
        ("my_tasks", json!({})),
        ("add_comment", json!({"task_id": id, "content": "hi"})),
    ] {
        let (code, text) = f.refused("ghost", tool, args).await;
        assert_eq!(code, "no_kanboard_user", "{tool}: {text}");
        assert!(text.contains("999"), "{tool}: {text}");
    }
    assert!(
        !f.kb
            .log()
            .iter()
            .any(|(_, m)| m == "createComment" || m == "searchTasks"),
        "{:?}",
        f.kb.log()
    );
}

/// Kanboard's assignee filter matches a part of a username or display name: the tasks of a
/// user whose name holds the caller's (`claude-bot-2`) are not the caller's own.
#[tokio::test]
async fn my_tasks_are_only_the_callers_own() {
    let f = fixture().await;
    let mine = f
        .ok(
            "claude",
            "create_task",
            json!({"project_id": f.shop, "title": "Mine", "owner": "claude-bot"}),
        )
        .await["task_id"]
        .clone();
    let other = f.kb.add_user("claude-bot-2", "claude-2-kb-token");
    f.kb.add_member(f.shop, other);
    let theirs = f
        .ok(
            "claude",
            "create_task",
            json!({"project_id": f.shop, "title": "Theirs", "owner": "claude-bot-2"}),
        )
        .await["task_id"]
        .clone();
    let listed = f.ok("claude", "my_tasks", json!({})).await;
    let ids: Vec<&Value> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["id"])
        .collect();
    assert_eq!(ids, [&mine], "{listed} (the other user's task is {theirs})");
}

#[tokio::test]
async fn kanboard_access_rules_apply_to_the_agents_own_user() {
    let f = fixture().await;
    // A mapping that names a project its Kanboard user is not a member of: Kanboard's 403.
    let kb = &f.kb;
    let client = KanboardClient::new(kb.endpoint.parse().unwrap(), Duration::from_secs(5)).unwrap();
    let access = StaticAccess::new().agent(
        "claude",
        Credential::User {
            username: "claude-bot".into(),
            token: "claude-kb-token".into(),
        },
        [f.shop, f.secret],
    );
    let tools = ToolRegistry::new();
    kanboard::register(&tools, KanboardTools::new(client, Arc::new(access))).unwrap();
    let out = tools
        .call(
            &caller("claude", true),
            "get_board",
            json!({"project_id": f.secret}),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(out.structured.unwrap()["code"], "kanboard_forbidden");
    // list_projects reports the one it may not read and still lists the other.
    let out = tools
        .call(
            &caller("claude", true),
            "list_projects",
            json!({}),
            CallOptions::default(),
        )
        .await
        .unwrap();
    // A 403 ends Kanboard's whole batch, so the listing is refused as a whole.
    assert!(out.is_error);
    assert_eq!(out.structured.unwrap()["code"], "kanboard_forbidden");
    // The project it may read still works.
    let out = tools
        .call(
            &caller("claude", true),
            "get_board",
            json!({"project_id": f.shop}),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert!(!out.is_error, "{}", out.all_text());
}

#[tokio::test]
async fn dead_slow_and_wrong_url_kanboards_give_clear_errors() {
    // Wrong URL: Kanboard's front page (HTML, status 200).
    let f = fixture().await;
    let wrong = format!("{}/", f.kb.base);
    let w = fixture_with(Some(&wrong), Duration::from_secs(5)).await;
    let (code, text) = w.refused("claude", "list_projects", json!({})).await;
    assert_eq!(code, "kanboard_wrong_url");
    assert!(text.contains("/jsonrpc.php"), "{text}");

    // Dead: nothing listens on the port.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/jsonrpc.php", l.local_addr().unwrap())
    };
    let d = fixture_with(Some(&dead), Duration::from_secs(5)).await;
    let out = d.call("claude", "whoami", json!({})).await;
    let shape = out.structured.clone().unwrap();
    assert_eq!(shape["code"], "kanboard_unreachable");
    assert_eq!(shape["retryable"], true);
    let text = out.all_text();
    assert!(text.contains("the other tools keep working"), "{text}");

    // Slow: the stand-in never answers; the call ends at the limit. Nothing has to answer
    // within it, so it can be short.
    let slow = fixture_with(None, Duration::from_secs(1)).await;
    slow.kb.hang(true);
    let (code, _) = slow.refused("claude", "whoami", json!({})).await;
    assert_eq!(code, "kanboard_timeout");

    // A create that Kanboard applied but whose answer was lost: the error says how to retry,
    // and the retry with the same reference finds the task instead of making a second one.
    // Every request but the lost answer must be answered within the limit (the look-up by
    // reference first of all), so it is not a second here: a loaded machine can take that.
    let s = fixture_with(None, Duration::from_secs(5)).await;
    s.kb.hang_after("createTask");
    let (code, text) = s
        .refused(
            "claude",
            "create_task",
            json!({"project_id": s.shop, "title": "T", "reference": "R-1"}),
        )
        .await;
    assert_eq!(code, "kanboard_timeout");
    assert!(text.contains("same reference"), "{text}");
    assert_eq!(s.kb.task_count(s.shop), 1);
    let again = s
        .ok(
            "claude",
            "create_task",
            json!({"project_id": s.shop, "title": "T", "reference": "R-1"}),
        )
        .await;
    assert_eq!(again["created"], false);
    assert_eq!(s.kb.task_count(s.shop), 1);
    // The other tools keep working meanwhile.
    assert_eq!(s.ok("claude", "whoami", json!({})).await["kind"], "user");
}

/// A Kanboard URL configured with a user part or a query (where a credential may have been
/// pasted) is named without them in what an agent is told: the refusal of a dead Kanboard and
/// of a URL that does not serve the API.
#[tokio::test]
async fn configured_url_credentials_never_reach_an_agent() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dead = format!(
        "http://canary-user:canary-pass@127.0.0.1:{port}/jsonrpc.php?token=canary-query-token"
    );
    let d = fixture_with(Some(&dead), Duration::from_secs(5)).await;
    let out = d.call("claude", "whoami", json!({})).await;
    let shape = out.structured.clone().unwrap();
    assert_eq!(shape["code"], "kanboard_unreachable");
    let said = format!("{} {shape}", out.all_text());
    assert!(!said.contains("canary"), "{said}");
    assert!(
        said.contains(&format!("127.0.0.1:{port}/jsonrpc.php")),
        "{said}"
    );

    let f = fixture().await;
    let wrong = format!(
        "http://canary-user:canary-pass@{}/?token=canary-query-token",
        f.kb.base.trim_start_matches("http://")
    );
    let w = fixture_with(Some(&wrong), Duration::from_secs(5)).await;
    let out = w.call("claude", "list_projects", json!({})).await;
    let shape = out.structured.clone().unwrap();
    assert_eq!(shape["code"], "kanboard_wrong_url");
    let said = format!("{} {shape}", out.all_text());
    assert!(!said.contains("canary"), "{said}");
}
