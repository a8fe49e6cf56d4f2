//! Per-caller tool visibility: a tool the app's `ToolVisibility` hides from a caller is missing
//! from that caller's listings and pages and answers its calls (and `check`, and a task start)
//! exactly as a name that was never registered, before any other step of the gate; other
//! callers are unaffected, a change of what it shows bumps the registry's version, and page
//! cursors stay valid across such a change.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use kberg_core::*;
use serde_json::{Value, json};

/// Who may know of which tool: tool name to the principals it is shown to. A tool not named
/// here is shown to everyone.
#[derive(Clone, Default)]
struct Mapping(Arc<RwLock<BTreeMap<String, BTreeSet<String>>>>);

impl Mapping {
    fn only(&self, tool: &str, principals: &[&str]) {
        self.0.write().unwrap().insert(
            tool.to_string(),
            principals.iter().map(|p| p.to_string()).collect(),
        );
    }
}

impl ToolVisibility for Mapping {
    fn visible(&self, tool: &ToolSpec, caller: &Caller) -> bool {
        match self.0.read().unwrap().get(&tool.name) {
            None => true,
            Some(who) => who.contains(&caller.principal().id),
        }
    }
}

fn notes_write() -> WriteCapability {
    WriteCapability::new("notes.write", "Create and edit notes")
}

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": false
    })
}

/// Five tools `t0`..`t4` (reads) and one write, `secret_write`, on a registry filtered by
/// `mapping`.
fn registry(mapping: &Mapping) -> ToolRegistry {
    let r = ToolRegistry::builder()
        .tool_visibility(mapping.clone())
        .build();
    r.declare(notes_write()).unwrap();
    for i in 0..5 {
        r.register(
            ToolBuilder::new(format!("t{i}"))
                .read()
                .raw_handler(schema(), |_, _| async { Ok(ToolOutput::text("ran")) }),
        )
        .unwrap();
    }
    r.register(
        ToolBuilder::new("secret_write")
            .write(notes_write())
            .raw_handler(schema(), |_, _| async { Ok(ToolOutput::text("wrote")) }),
    )
    .unwrap();
    r
}

fn caller(id: &str) -> Caller {
    Caller::new(Principal::new(id))
}

fn names(r: &ToolRegistry, c: &Caller) -> Vec<String> {
    r.list(c).into_iter().map(|s| s.name).collect()
}

/// What a call of `name` answers on a registry where no tool has that name.
async fn never_registered(name: &str, args: Value) -> (GateError, Value) {
    let r = ToolRegistry::new();
    let e = r
        .call(&caller("x"), name, args, CallOptions::default())
        .await
        .unwrap_err();
    let out = output_to_json(&e.to_output());
    (e, out)
}

#[tokio::test]
async fn a_hidden_tool_is_neither_listed_nor_callable_and_answers_as_an_unknown_one() {
    let mapping = Mapping::default();
    mapping.only("t2", &["alice"]);
    mapping.only("secret_write", &["alice"]);
    let r = registry(&mapping);
    let (alice, bob) = (caller("alice"), caller("bob"));

    assert_eq!(
        names(&r, &alice),
        ["t0", "t1", "t2", "t3", "t4", "secret_write"]
    );
    assert_eq!(names(&r, &bob), ["t0", "t1", "t3", "t4"]);
    let out = r
        .call(&alice, "t2", json!({"title": "x"}), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(out.all_text(), "ran");

    // Bob's call of a hidden tool: exactly what a never-registered name answers, whatever the
    // arguments (no critique of them) and whatever the capability (none is named).
    for (tool, args) in [
        ("t2", json!({"title": "x"})),
        ("t2", json!({"wrong": 1})),
        ("secret_write", json!({"title": "x"})),
        ("secret_write", json!("not an object")),
    ] {
        let e = r
            .call(&bob, tool, args.clone(), CallOptions::default())
            .await
            .unwrap_err();
        let (unknown, unknown_out) = never_registered(tool, args.clone()).await;
        assert_eq!(e.code(), ErrorCode::UnknownTool, "{tool}: {e}");
        assert_eq!(e.code().as_str(), "unknown_tool");
        assert_eq!(e.to_string(), unknown.to_string());
        assert_eq!(output_to_json(&e.to_output()), unknown_out, "{tool}");
        let checked = r.check(&bob, tool, &args).unwrap_err();
        assert_eq!(checked.to_string(), unknown.to_string());
    }
    // A write hidden from nobody still answers `capability_required` to a caller without it:
    // visibility is checked first, then the usual order.
    let e = r
        .call(&alice, "secret_write", json!({}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::CapabilityRequired);
}

#[tokio::test]
async fn a_change_of_mapping_is_seen_by_the_next_listing_and_call_and_bumps_the_version() {
    let mapping = Mapping::default();
    mapping.only("t1", &["alice", "carol"]);
    let r = registry(&mapping);
    let (alice, carol) = (caller("alice"), caller("carol"));
    let mut changes = r.changes();
    changes.mark_unchanged();
    assert!(names(&r, &alice).contains(&"t1".to_string()));

    // Alice is unmapped: she no longer lists it nor calls it; Carol, still mapped, does both.
    mapping.only("t1", &["carol"]);
    r.visibility_changed();
    assert!(changes.has_changed().unwrap(), "listeners are told");
    assert!(!names(&r, &alice).contains(&"t1".to_string()));
    let e = r
        .call(&alice, "t1", json!({"title": "x"}), CallOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::UnknownTool);
    assert!(names(&r, &carol).contains(&"t1".to_string()));
    let out = r
        .call(&carol, "t1", json!({"title": "x"}), CallOptions::default())
        .await
        .unwrap();
    assert_eq!(out.all_text(), "ran");

    // Without a filter every caller knows every tool again, and listeners are told.
    changes.mark_unchanged();
    r.set_tool_visibility(None);
    assert!(changes.has_changed().unwrap());
    assert_eq!(
        names(&r, &alice),
        ["t0", "t1", "t2", "t3", "t4", "secret_write"]
    );
    // And one set later applies as the builder's would.
    let later = Mapping::default();
    later.only("t0", &[]);
    r.set_tool_visibility(Some(Arc::new(later)));
    assert!(!names(&r, &carol).contains(&"t0".to_string()));
}

#[test]
fn page_cursors_stay_valid_while_tools_are_hidden_and_shown() {
    let mapping = Mapping::default();
    mapping.only("t1", &["alice"]);
    let r = registry(&mapping);
    let bob = caller("bob");
    let page_names =
        |p: &Page<ToolSpec>| p.items.iter().map(|s| s.name.clone()).collect::<Vec<_>>();

    let first = r.list_page(&bob, None, 2).unwrap();
    assert_eq!(page_names(&first), ["t0", "t2"]);
    let cursor = first.next_cursor.clone().expect("more to come");
    // While bob pages, t3 is hidden from him and t1 shown: the cursor still means "after t2".
    mapping.only("t3", &["alice"]);
    mapping.only("t1", &["alice", "bob"]);
    r.visibility_changed();
    let second = r.list_page(&bob, Some(&cursor), 2).unwrap();
    assert_eq!(page_names(&second), ["t4", "secret_write"]);
    assert_eq!(second.next_cursor, None);
    // A fresh listing shows what he may know of now.
    let all = r.list_page(&bob, None, 10).unwrap();
    assert_eq!(page_names(&all), ["t0", "t1", "t2", "t4", "secret_write"]);
    // A cursor that is not one is still refused as before.
    assert!(r.list_page(&bob, Some("not a cursor"), 2).is_err());
}

#[test]
fn the_compact_projection_applies_on_top_of_visibility() {
    let mapping = Mapping::default();
    let r = ToolRegistry::builder()
        .tool_visibility(mapping.clone())
        .build();
    for name in ["safe_shown", "safe_hidden", "unsafe"] {
        let b = ToolBuilder::new(name).read();
        let b = if name.starts_with("safe") {
            b.small_model_safe()
        } else {
            b
        };
        r.register(b.raw_handler(schema(), |_, _| async { Ok(ToolOutput::text("ran")) }))
            .unwrap();
    }
    mapping.only("safe_hidden", &["alice"]);
    let small = Caller::new(Principal::new("bob").with_projection(SurfaceProjection::Compact));
    assert_eq!(names(&r, &small), ["safe_shown"]);
    // Out of the surface but visible: `not_in_surface`; hidden: unknown, which reveals nothing.
    assert_eq!(
        r.check(&small, "unsafe", &json!({"title": "x"}))
            .unwrap_err()
            .code(),
        ErrorCode::NotInSurface
    );
    assert_eq!(
        r.check(&small, "safe_hidden", &json!({"title": "x"}))
            .unwrap_err()
            .code(),
        ErrorCode::UnknownTool
    );
}

#[tokio::test]
async fn a_hidden_tool_cannot_be_started_as_a_task() {
    let mapping = Mapping::default();
    let r = ToolRegistry::builder()
        .tool_visibility(mapping.clone())
        .build();
    r.register(
        ToolBuilder::new("long")
            .read()
            .task_support(TaskSupport::Optional)
            .raw_handler(schema(), |_, _| async { Ok(ToolOutput::text("ran")) }),
    )
    .unwrap();
    mapping.only("long", &["alice"]);
    let tasks = TaskStore::new(r, TaskConfig::default());
    let started = tasks
        .start(
            &caller("bob"),
            "long",
            json!({"title": "x"}),
            CallOptions::default(),
            false,
        )
        .await
        .unwrap();
    let (unknown, _) = never_registered("long", json!({"title": "x"})).await;
    match started {
        Started::Finished(Err(g)) => assert_eq!(g.to_string(), unknown.to_string()),
        other => panic!("expected the gate's refusal, got {other:?}"),
    }
    assert!(
        tasks
            .start(
                &caller("alice"),
                "long",
                json!({"title": "x"}),
                CallOptions::default(),
                false
            )
            .await
            .is_ok()
    );
}
