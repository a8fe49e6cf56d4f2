//! The app controls its listing: tools in registration order (or an explicit order) and each
//! schema's properties in the order they were declared, through `list`, `list_page` and the
//! serialized schema text a provider sends.

#![allow(clippy::unwrap_used)]

use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct SetPriority {
    note_id: u32,
    priority: u8,
    alpha: Option<String>,
}

fn registry() -> ToolRegistry {
    let r = ToolRegistry::new();
    for name in ["zeta", "alpha", "mid"] {
        r.register(ToolBuilder::new(name).raw_handler(
            json!({"type": "object", "properties": {"zz": {"type": "string"}, "aa": {"type": "string"}}}),
            |_, _| async move { Ok(ToolOutput::text("ok")) },
        ))
        .unwrap();
    }
    r
}

fn names(r: &ToolRegistry) -> Vec<String> {
    r.list(&Caller::new(Principal::new("p")))
        .into_iter()
        .map(|s| s.name)
        .collect()
}

#[test]
fn tools_are_listed_in_registration_order() {
    let r = registry();
    assert_eq!(names(&r), ["zeta", "alpha", "mid"]);
    r.remove("alpha");
    r.register(
        ToolBuilder::new("alpha")
            .handler(|_: serde_json::Value, _| async move { Ok(ToolOutput::text("ok")) }),
    )
    .unwrap();
    assert_eq!(names(&r), ["zeta", "mid", "alpha"]);
}

#[test]
fn an_explicit_order_puts_the_named_tools_first() {
    let r = registry();
    r.set_tool_order(["mid", "missing", "zeta", "mid"]);
    assert_eq!(names(&r), ["mid", "zeta", "alpha"]);
    r.register(
        ToolBuilder::new("late")
            .handler(|_: serde_json::Value, _| async move { Ok(ToolOutput::text("ok")) }),
    )
    .unwrap();
    assert_eq!(names(&r), ["mid", "zeta", "alpha", "late"]);
}

#[test]
fn pages_follow_the_listing_order() {
    let r = registry();
    let caller = Caller::new(Principal::new("p"));
    let first = r.list_page(&caller, None, 2).unwrap();
    let got: Vec<_> = first.items.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(got, ["zeta", "alpha"]);
    let cursor = first.next_cursor.unwrap();
    let second = r.list_page(&caller, Some(&cursor), 2).unwrap();
    let got: Vec<_> = second.items.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(got, ["mid"]);
    assert!(second.next_cursor.is_none());
    assert!(r.list_page(&caller, Some("not-a-cursor"), 2).is_err());
}

#[test]
fn schema_properties_keep_their_declared_order() {
    let r = registry();
    r.register(
        ToolBuilder::new("set_priority")
            .handler(|_: SetPriority, _| async move { Ok(ToolOutput::text("ok")) }),
    )
    .unwrap();
    let spec = r.spec("set_priority").unwrap();
    let keys: Vec<&str> = spec.input_schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["note_id", "priority", "alpha"]);
    // Hand-written schemas too, and the serialized text a provider sends.
    let text = r.spec("zeta").unwrap().input_schema.to_string();
    assert!(
        text.find("\"zz\"").unwrap() < text.find("\"aa\"").unwrap(),
        "{text}"
    );
}

/// A tool edit: a changed tool replaced in place (never missing from a listing), a new one
/// appended, one version step; a failed edit publishes nothing.
#[test]
fn a_tool_edit_is_published_whole_or_not_at_all() {
    let r = registry();
    let mut changes = r.changes();
    let before = *changes.borrow_and_update();
    let tool = |name: &str, field: &str| -> std::sync::Arc<dyn Tool> {
        std::sync::Arc::new(ToolBuilder::new(name).raw_handler(
            json!({"type": "object", "properties": {field: {"type": "string"}}}),
            |_, _| async move { Ok(ToolOutput::text("ok")) },
        ))
    };
    r.edit(|e| {
        assert!(e.remove("alpha"));
        e.register(tool("alpha", "changed"))?;
        e.register(tool("omega", "x"))
    })
    .unwrap();
    assert_eq!(*changes.borrow_and_update(), before + 1, "one version step");
    let names: Vec<String> = r
        .list(&Caller::new(Principal::new("p")))
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["zeta", "mid", "alpha", "omega"]);
    assert!(r.spec("alpha").unwrap().input_schema["properties"]["changed"].is_object());
    let err = r
        .edit(|e| {
            e.remove("zeta");
            e.register(tool("mid", "x"))
        })
        .unwrap_err();
    assert!(matches!(err, CoreError::Duplicate { .. }), "{err}");
    assert!(r.spec("zeta").is_some());
    assert!(!changes.has_changed().unwrap());
}
