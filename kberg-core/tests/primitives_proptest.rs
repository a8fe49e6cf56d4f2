//! Property tests of the primitives' open-ended inputs: any string offered as a handle is
//! refused without panicking, any one-byte change to a genuine handle is refused, the canonical
//! form of arguments ignores key order and round-trips, and redaction never panics and never
//! leaves a sensitive value behind.

#![allow(clippy::unwrap_used)]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use kberg_core::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(("[a-e~/]{1,3}", inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn codec() -> HandleCodec {
    HandleCodec::new("prop-app", &[3u8; 32]).unwrap()
}

/// Rebuilds `v` with every object's keys inserted in reverse order.
fn reversed(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            let mut entries: Vec<_> = m.iter().collect();
            entries.reverse();
            for (k, x) in entries {
                out.insert(k.clone(), reversed(x));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
        x => x.clone(),
    }
}

proptest! {
    #[test]
    fn any_string_is_refused_without_panicking(s in "\\PC{0,80}", prefixed in any::<bool>()) {
        let c = codec();
        let text = if prefixed { format!("h1.{s}") } else { s };
        prop_assert!(c.resolve("ann", "note", &text).is_err());
    }

    #[test]
    fn random_bytes_after_the_prefix_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        let c = codec();
        let text = format!("h1.{}", URL_SAFE_NO_PAD.encode(&bytes));
        prop_assert_eq!(c.resolve("ann", "note", &text), Err(HandleError::Invalid));
    }

    #[test]
    fn any_one_byte_change_is_refused(
        id in "\\PC{0,40}",
        pos in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let c = codec();
        let h = c.mint("ann", "note", &id, None).unwrap();
        prop_assert_eq!(c.resolve("ann", "note", &h).unwrap(), id);
        let mut bytes = URL_SAFE_NO_PAD.decode(&h[3..]).unwrap();
        let i = pos.index(bytes.len());
        bytes[i] ^= flip;
        let altered = format!("h1.{}", URL_SAFE_NO_PAD.encode(&bytes));
        prop_assert_eq!(c.resolve("ann", "note", &altered), Err(HandleError::Invalid));
    }

    #[test]
    fn canonical_form_ignores_key_order_and_round_trips(v in json_value()) {
        let canon = canonical_json(&v);
        prop_assert_eq!(&canon, &canonical_json(&reversed(&v)));
        prop_assert_eq!(argument_digest(&v, &[]), argument_digest(&reversed(&v), &[]));
        let back: Value = serde_json::from_str(&canon).unwrap();
        prop_assert_eq!(back, v);
    }

    #[test]
    fn redaction_never_panics_and_hides_what_it_names(
        v in json_value(),
        fields in prop::collection::vec("(/[a-e~01*/]{0,3}){1,3}|[a-e]{1,2}", 0..4),
    ) {
        let r = redact(&v, &fields);
        // Top-level names that exist are always replaced.
        if let (Value::Object(orig), Value::Object(red)) = (&v, &r) {
            for f in fields.iter().filter(|f| !f.starts_with('/')) {
                if orig.contains_key(f.as_str()) {
                    prop_assert_eq!(&red[f.as_str()], &json!(REDACTED));
                }
            }
        }
        // Redacting twice changes nothing more.
        prop_assert_eq!(redact(&r, &fields), r.clone());
        let _ = argument_digest(&v, &fields);
    }
}
