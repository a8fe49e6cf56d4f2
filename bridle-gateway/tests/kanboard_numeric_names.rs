//! Names that are numbers: a swimlane called `2026`, a category `42`, a user whose username is
//! an employee number. The tools take a number written as a string for an id (models quote
//! ids), but a name that is a number and matches no id is still that name, against the
//! wire-faithful Kanboard stand-in on 127.0.0.1.

#![cfg(feature = "kanboard")]
#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod support;

use bridle_gateway::kanboard::KANBOARD_WRITE;
use kberg_core::{CallOptions, Caller, Grants, Principal, ToolOutput, ToolRegistry};
use serde_json::{Value, json};
use support::kanboard_fixture::claude_tools;
use support::kanboard_standin::KanboardStandIn;

async fn call(tools: &ToolRegistry, tool: &str, args: Value) -> ToolOutput {
    let caller = Caller::new(Principal::new("claude").with_grants(Grants::of([KANBOARD_WRITE])));
    tools
        .call(&caller, tool, args, CallOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_name_that_is_a_number_and_no_id_is_taken_as_the_name() {
    let kb = KanboardStandIn::start().await;
    let claude = kb.add_user("claude-bot", "claude-kb-token");
    let shop = kb.add_project("Shop", &[1, claude]);
    let employee = kb.add_user("100234", "employee-token");
    kb.add_member(shop, employee);
    let lane = kb.add_named("swimlane", shop, "2026");
    let category = kb.add_named("category", shop, "42");
    for n in [100234, 2026, 42] {
        assert!(
            ![1, claude, shop, employee, lane, category].contains(&n),
            "a name is also an id: the test would prove nothing"
        );
    }
    let tools = claude_tools(&kb, &[shop]);

    let out = call(
        &tools,
        "create_task",
        json!({"project_id": shop, "title": "Year-end audit", "swimlane": "2026", "category": "42", "owner": "100234"}),
    )
    .await;
    assert!(!out.is_error, "{}", out.all_text());
    let task_id = out.structured.unwrap()["task_id"].as_i64().unwrap();
    let task = call(&tools, "get_task", json!({"task_id": task_id})).await;
    assert!(!task.is_error, "{}", task.all_text());
    let task = task.structured.unwrap();
    assert_eq!(task["swimlane_id"], json!(lane), "{task}");
    assert_eq!(task["category_id"], json!(category), "{task}");
    assert_eq!(task["owner_id"], json!(employee), "{task}");

    // An id written as a string is still an id, and a number that is neither is refused with
    // the choices.
    let out = call(
        &tools,
        "assign_task",
        json!({"task_id": task_id, "user": claude.to_string()}),
    )
    .await;
    assert!(!out.is_error, "{}", out.all_text());
    assert_eq!(out.structured.unwrap()["owner_id"], json!(claude));
    let out = call(
        &tools,
        "assign_task",
        json!({"task_id": task_id, "user": "999999"}),
    )
    .await;
    assert!(out.is_error, "{}", out.all_text());
    let refusal = out.structured.unwrap();
    assert_eq!(refusal["code"], "unknown_name", "{refusal}");
    assert!(
        refusal["choices"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("100234 ({employee})"))),
        "{refusal}"
    );
}
