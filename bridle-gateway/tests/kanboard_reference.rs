//! A task's `reference` is what makes a repeated `create_task` find the task instead of making
//! a second one. `create_task` writes and looks it up without surrounding blanks; a reference
//! set by `update_task` is written the same way, or a later create with the same reference
//! would not find it. Against the wire-faithful Kanboard stand-in on 127.0.0.1.

#![cfg(feature = "kanboard")]
#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod support;

use bridle_gateway::kanboard::KANBOARD_WRITE;
use kberg_core::{CallOptions, Caller, Grants, Principal};
use serde_json::{Value, json};
use support::kanboard_fixture::claude_tools;
use support::kanboard_standin::KanboardStandIn;

#[tokio::test]
async fn a_reference_set_by_update_task_is_found_by_a_later_create() {
    let kb = KanboardStandIn::start().await;
    let claude = kb.add_user("claude-bot", "claude-kb-token");
    let shop = kb.add_project("Shop", &[1, claude]);
    let tools = claude_tools(&kb, &[shop]);
    let caller = Caller::new(Principal::new("claude").with_grants(Grants::of([KANBOARD_WRITE])));
    let call = |tool: &'static str, args: Value| {
        let (tools, caller) = (tools.clone(), caller.clone());
        async move {
            let out = tools
                .call(&caller, tool, args, CallOptions::default())
                .await
                .unwrap();
            assert!(!out.is_error, "{tool}: {}", out.all_text());
            out.structured.unwrap()
        }
    };

    let created = call(
        "create_task",
        json!({"project_id": shop, "title": "Fix login"}),
    )
    .await;
    let task_id = created["task_id"].as_i64().unwrap();
    call(
        "update_task",
        json!({"task_id": task_id, "reference": "  ISSUE-42 \n"}),
    )
    .await;
    let task = call("get_task", json!({"task_id": task_id})).await;
    assert_eq!(task["reference"], "ISSUE-42", "{task}");
    let again = call(
        "create_task",
        json!({"project_id": shop, "title": "Fix login", "reference": "ISSUE-42"}),
    )
    .await;
    assert_eq!(again["created"], false, "{again}");
    assert_eq!(again["task"]["id"], json!(task_id), "{again}");
    assert_eq!(kb.task_count(shop), 1);
}
