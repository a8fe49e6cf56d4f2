//! Property tests of validation: random JSON arguments against random-but-valid schemas never
//! panic, `is_valid` agrees with the diagnostics being empty, every diagnostic points into the
//! arguments, and the gate never lets an invalid call through.

#![allow(clippy::unwrap_used)]

use kberg_core::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-z0-9 ]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-e]{1,2}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn scalar_schema() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!({"type": "string"})),
        (0u64..5).prop_map(|n| json!({"type": "string", "minLength": n, "maxLength": n + 4})),
        Just(json!({"type": "integer"})),
        (-10i64..10).prop_map(|n| json!({"type": "integer", "minimum": n})),
        Just(json!({"type": "number", "exclusiveMaximum": 100})),
        Just(json!({"type": "boolean"})),
        Just(json!({"enum": ["a", "b", 1, null]})),
        Just(json!({"type": ["string", "null"]})),
        Just(json!({"type": "string", "pattern": "^[a-z]+$"})),
        Just(json!({"x-unknown-keyword": {"anything": true}})),
    ]
}

fn schema() -> impl Strategy<Value = Value> {
    scalar_schema().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            (inner.clone(), 0u64..3)
                .prop_map(|(items, min)| json!({"type": "array", "items": items, "minItems": min})),
            (
                prop::collection::btree_map("[a-e]{1,2}", inner.clone(), 0..4),
                any::<bool>(),
                any::<bool>(),
            )
                .prop_map(|(props, strict, require_first)| {
                    let required: Vec<Value> = if require_first {
                        props.keys().take(1).map(|k| json!(k)).collect()
                    } else {
                        vec![]
                    };
                    let mut s =
                        json!({"type": "object", "properties": props, "required": required});
                    if strict {
                        s["additionalProperties"] = json!(false);
                    }
                    s
                }),
            prop::collection::vec(inner, 1..3).prop_map(|v| json!({"anyOf": v})),
        ]
    })
}

fn resolves(root: &Value, pointer: &str) -> bool {
    // A diagnostic's pointer names the offending field, or where a missing/extra field would be:
    // its parent must exist in the instance.
    if root.pointer(pointer).is_some() {
        return true;
    }
    match pointer.rfind('/') {
        Some(i) => root.pointer(&pointer[..i]).is_some(),
        None => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn diagnostics_agree_with_is_valid(schema in schema(), instance in json_value()) {
        let compiled = CompiledSchema::compile(schema).expect("generated schemas compile");
        let valid = compiled.is_valid(&instance);
        let diags = compiled.diagnose(&instance);
        prop_assert_eq!(valid, diags.is_empty(), "diags: {:?}", diags);
        for d in &diags {
            prop_assert!(resolves(&instance, &d.pointer), "pointer {} not in {}", d.pointer, instance);
            prop_assert!(!d.message.is_empty());
            prop_assert!(!d.expected.is_empty());
        }
    }

    #[test]
    fn the_gate_never_runs_invalid_arguments(props in prop::collection::btree_map("[a-e]{1,2}", scalar_schema(), 0..4), args in json_value()) {
        let schema = json!({"type": "object", "properties": props, "additionalProperties": false});
        let compiled = CompiledSchema::compile(schema.clone()).unwrap();
        let registry = ToolRegistry::new();
        registry
            .register(ToolBuilder::new("t").raw_handler(schema, |_, _| async { Ok(ToolOutput::text("ran")) }))
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let caller = Caller::new(Principal::new("p"));
        let result = rt.block_on(registry.call(&caller, "t", args.clone(), CallOptions::default()));
        let effective = if args.is_null() { json!({}) } else { args };
        match result {
            Ok(out) => {
                prop_assert!(compiled.is_valid(&effective));
                prop_assert_eq!(out.all_text(), "ran");
            }
            Err(e) => {
                prop_assert_eq!(e.code(), ErrorCode::InvalidArguments);
                prop_assert!(!compiled.is_valid(&effective));
            }
        }
    }
}
