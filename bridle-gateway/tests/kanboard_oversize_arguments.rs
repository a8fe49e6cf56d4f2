//! An argument of a megabyte (a model that looped, or pasted a file where a name goes) that the
//! Kanboard tools refuse is quoted in the refusal cut short, not whole: the refusal goes back
//! into the agent's context, once as text and again in its structured details. Against the
//! wire-faithful Kanboard stand-in on 127.0.0.1.

#![cfg(feature = "kanboard")]
#![allow(clippy::unwrap_used)] // Tests fail loudly on any unexpected error.

mod support;

use bridle_gateway::kanboard::KANBOARD_WRITE;
use kberg_core::{CallOptions, Caller, Grants, Principal};
use serde_json::json;
use support::kanboard_fixture::claude_tools;
use support::kanboard_standin::KanboardStandIn;

#[tokio::test]
async fn a_refused_argument_of_a_megabyte_is_quoted_cut_short() {
    let kb = KanboardStandIn::start().await;
    let claude = kb.add_user("claude-bot", "claude-kb-token");
    let shop = kb.add_project("Shop", &[1, claude]);
    let tools = claude_tools(&kb, &[shop]);
    let caller = Caller::new(Principal::new("claude").with_grants(Grants::of([KANBOARD_WRITE])));

    let huge = "é".repeat(512 * 1024);
    for (args, code) in [
        (
            json!({"project_id": shop, "title": "t", "date_due": huge}),
            "invalid_date",
        ),
        (
            json!({"project_id": shop, "title": "t", "column": huge}),
            "unknown_name",
        ),
    ] {
        let out = tools
            .call(&caller, "create_task", args, CallOptions::default())
            .await
            .unwrap();
        assert!(out.is_error, "{}", out.all_text());
        let details = out.structured.clone().unwrap();
        assert_eq!(details["code"], code, "{details}");
        let size = out.all_text().len() + details.to_string().len();
        assert!(size < 8 * 1024, "{code}: a refusal of {size} bytes");
        assert!(
            out.all_text().contains("bytes in all"),
            "{}",
            out.all_text()
        );
    }
    assert_eq!(kb.task_count(shop), 0);
}
