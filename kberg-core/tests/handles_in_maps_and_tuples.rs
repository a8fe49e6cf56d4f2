//! Handles wherever a tool's arguments may hold them: every value of a map of handles and the
//! handle in a tuple are resolved before the tool runs; a handle where the gate would not find
//! it (under `patternProperties`, in a recursive type) is refused at registration, so no tool
//! ever receives a caller's raw string as an internal id.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns unwrap too

use std::collections::{BTreeMap, HashMap};

use kberg_core::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

struct Note;
impl HandleKind for Note {
    const KIND: &'static str = "note";
}

#[derive(Deserialize, JsonSchema)]
struct Filed {
    /// A note per label.
    by_label: HashMap<String, Handle<Note>>,
    /// A note and a position.
    pinned: Option<(Handle<Note>, u32)>,
}

/// A recursive type with a handle at every level: its handles nest without bound.
#[derive(JsonSchema)]
#[allow(dead_code)] // only its schema is used
struct Thread {
    note: Handle<Note>,
    #[serde(default)]
    replies: Vec<Thread>,
}

fn registry() -> ToolRegistry {
    let tools = ToolRegistry::builder()
        .handle_codec(HandleCodec::new("notes-app", &[42u8; 32]).unwrap())
        .build();
    tools
        .register(
            ToolBuilder::new("mint")
                .description("Hands out two notes")
                .handler(|_a: serde_json::Map<String, Value>, ctx| async move {
                    let a = ctx
                        .mint_handle::<Note>("row-1")
                        .map_err(|e| e.to_string())?;
                    let b = ctx
                        .mint_handle::<Note>("row-2")
                        .map_err(|e| e.to_string())?;
                    ToolOutput::json(&json!([a, b]))
                }),
        )
        .unwrap();
    tools
        .register(ToolBuilder::new("file").description("Files notes").handler(
            |a: Filed, _ctx| async move {
                let labels: BTreeMap<String, String> = a
                    .by_label
                    .into_iter()
                    .map(|(k, h)| (k, h.into_id()))
                    .collect();
                let pinned = a.pinned.map(|(h, at)| format!("{}@{at}", h.id()));
                ToolOutput::json(&json!({"labels": labels, "pinned": pinned}))
            },
        ))
        .unwrap();
    tools
}

async fn minted(tools: &ToolRegistry, who: &Caller) -> (String, String) {
    let out = tools
        .call(who, "mint", json!({}), CallOptions::default())
        .await
        .unwrap();
    let s = out.structured.unwrap();
    (
        s[0].as_str().unwrap().to_string(),
        s[1].as_str().unwrap().to_string(),
    )
}

#[tokio::test]
async fn every_value_of_a_map_and_the_handle_in_a_tuple_are_resolved() {
    let tools = registry();
    let ann = Caller::new(Principal::new("ann"));
    let (a, b) = minted(&tools, &ann).await;
    let out = tools
        .call(
            &ann,
            "file",
            json!({"by_label": {"home": a, "work": b}, "pinned": [b, 3]}),
            CallOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        out.structured.unwrap(),
        json!({"labels": {"home": "row-1", "work": "row-2"}, "pinned": "row-2@3"})
    );
}

#[tokio::test]
async fn a_raw_id_in_a_map_or_a_tuple_is_refused_before_the_tool_runs() {
    let tools = registry();
    let ann = Caller::new(Principal::new("ann"));
    let (a, _) = minted(&tools, &ann).await;
    let e = tools
        .call(
            &ann,
            "file",
            json!({"by_label": {"home": a, "x/y": "row-9"}}),
            CallOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::HandleInvalid, "{e}");
    assert_eq!(e.details()["pointer"], "/by_label/x~1y");
    let e = tools
        .call(
            &ann,
            "file",
            json!({"by_label": {}, "pinned": ["row-9", 1]}),
            CallOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::HandleInvalid, "{e}");
    assert_eq!(e.details()["pointer"], "/pinned/0");
}

fn refused(schema: Value) -> String {
    let tools = ToolRegistry::new();
    let r = tools.register(
        ToolBuilder::new("t")
            .description("Never runs")
            .raw_handler(schema, |_a, _ctx| async { Ok(ToolOutput::text("ran")) }),
    );
    match r {
        Err(e @ CoreError::InvalidSchema { .. }) => e.to_string(),
        other => panic!("expected invalid_schema, got {other:?}"),
    }
}

#[test]
fn a_handle_the_gate_would_not_find_is_refused_at_registration() {
    let handle = json!({"type": "string", HANDLE_SCHEMA_KEYWORD: "note"});
    let why = refused(json!({"type": "object", "properties": {"m": {
        "type": "object", "patternProperties": {"^n": handle}}}}));
    assert!(
        why.contains("patternProperties") && why.contains("/m"),
        "{why}"
    );
    let why = refused(json!({"type": "object", "properties": {"m": {
        "type": "object",
        "patternProperties": {"^x": {"type": "string"}},
        "additionalProperties": handle}}}));
    assert!(why.contains("additionalProperties"), "{why}");
    let why = refused(json!({"type": "object", "properties": {"a": {
        "type": "array", "contains": handle}}}));
    assert!(why.contains("contains"), "{why}");
    // A recursive type: handles at every depth, more than the gate follows.
    let why = refused(serde_json::to_value(schemars::schema_for!(Thread)).unwrap());
    assert!(why.contains("levels deep"), "{why}");
}
