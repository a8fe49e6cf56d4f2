//! Correcting obvious argument mistakes before a call reaches the gate.
//!
//! Small models write `"3"` for an integer or `"true"` for a boolean. Where the tool's schema
//! makes the intent unambiguous (the field has exactly one scalar type, and the text reads as a
//! value of that type, and any `enum` still accepts it), the loop converts the value and records
//! a [`Coercion`] in the run's outcome. Anything less certain is left alone: the gate's
//! diagnostic and a repair turn handle it, which is slower but never guesses.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

/// One conversion the loop made to a model's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coercion {
    /// JSON pointer to the field (`""` for the arguments as a whole).
    pub pointer: String,
    /// The value as the model sent it.
    pub from: String,
    /// The value after conversion.
    pub to: String,
}

/// Converts the unambiguous mistakes in `args` against `schema`, returning what changed.
///
/// Handles: arguments sent as a JSON string holding an object; a string holding an integer,
/// number or boolean where the field has exactly that type; an integral float (`3.0`) where an
/// integer is expected. Recurses into nested objects and arrays whose schemas say their types.
pub fn coerce_arguments(args: &mut Value, schema: &Value) -> Vec<Coercion> {
    let mut out = Vec::new();
    if let Value::String(s) = args
        && let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(s)
    {
        out.push(Coercion {
            pointer: String::new(),
            from: "a JSON string".into(),
            to: "an object".into(),
        });
        *args = v;
    }
    walk(args, schema, &mut String::new(), &mut out);
    out
}

/// The keys of a JSON Schema object that a model copies when it echoes a tool's schema.
const SCHEMA_KEYS: [&str; 7] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "$schema",
    "title",
    "description",
];

/// Replaces arguments that are a copy of a JSON Schema (`{"type": "object", "properties":
/// {...}}`, what small models write for a tool that takes no arguments) with the values they
/// hold: each entry of `properties` that is a value rather than a schema (an object with a
/// `type`). Only when every key is a schema keyword, `type` is `"object"`, `properties` is an
/// object, and the tool's own schema has no property named `type` or `properties`, so a real
/// argument is never taken for a schema.
pub fn unwrap_schema_echo(args: &mut Value, schema: &Value) -> Option<Coercion> {
    let obj = args.as_object()?;
    let own = schema.get("properties").and_then(Value::as_object);
    if own.is_some_and(|p| p.contains_key("type") || p.contains_key("properties")) {
        return None;
    }
    if obj.get("type").and_then(Value::as_str) != Some("object")
        || !obj.keys().all(|k| SCHEMA_KEYS.contains(&k.as_str()))
    {
        return None;
    }
    let props = obj.get("properties")?.as_object()?;
    let values: Map<String, Value> = props
        .iter()
        .filter(|(_, v)| !v.as_object().is_some_and(|o| o.contains_key("type")))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let from = args.to_string();
    *args = Value::Object(values);
    Some(Coercion {
        pointer: String::new(),
        from,
        to: args.to_string(),
    })
}

/// Removes the top-level arguments a closed schema (`additionalProperties: false`) does not
/// declare, returning one [`Coercion`] per removed key. The loop does this for read-only tools
/// only (see [`crate::AgentConfig::drop_unknown_read_arguments`]): a read with an extra key is
/// still the read the model meant, a write is not.
pub fn drop_unknown_arguments(args: &mut Value, schema: &Value) -> Vec<Coercion> {
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    let (Some(props), Some(obj)) = (
        schema.get("properties").and_then(Value::as_object),
        args.as_object_mut(),
    ) else {
        return Vec::new();
    };
    if !closed {
        return Vec::new();
    }
    let unknown: Vec<String> = obj
        .keys()
        .filter(|k| !props.contains_key(*k))
        .cloned()
        .collect();
    unknown
        .into_iter()
        .filter_map(|k| {
            let v = obj.remove(&k)?;
            Some(Coercion {
                pointer: format!("/{}", k.replace('~', "~0").replace('/', "~1")),
                from: v.to_string(),
                to: "removed (not an argument of this tool)".into(),
            })
        })
        .collect()
}

fn single_type(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(t) => Some(t),
        Value::Array(ts) if ts.len() == 1 => ts[0].as_str(),
        _ => None,
    }
}

fn walk(v: &mut Value, schema: &Value, pointer: &mut String, out: &mut Vec<Coercion>) {
    match v {
        Value::Object(obj) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            walk_object(obj, props, pointer, out);
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) else {
                return;
            };
            for (i, item) in items.iter_mut().enumerate() {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&i.to_string());
                coerce_scalar(item, item_schema, pointer, out);
                walk(item, item_schema, pointer, out);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

fn walk_object(
    obj: &mut Map<String, Value>,
    props: &Map<String, Value>,
    pointer: &mut String,
    out: &mut Vec<Coercion>,
) {
    for (key, value) in obj.iter_mut() {
        let Some(prop_schema) = props.get(key) else {
            continue;
        };
        let len = pointer.len();
        pointer.push('/');
        pointer.push_str(&key.replace('~', "~0").replace('/', "~1"));
        coerce_scalar(value, prop_schema, pointer, out);
        walk(value, prop_schema, pointer, out);
        pointer.truncate(len);
    }
}

fn coerce_scalar(v: &mut Value, schema: &Value, pointer: &str, out: &mut Vec<Coercion>) {
    let Some(ty) = single_type(schema) else {
        return;
    };
    let converted = match (ty, &*v) {
        ("integer", Value::String(s)) => s.trim().parse::<i64>().ok().map(Value::from),
        ("integer", Value::Number(n)) if !n.is_i64() && !n.is_u64() => n
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| Value::from(f as i64)),
        ("number", Value::String(s)) => s
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number),
        ("boolean", Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        ("object", Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_object),
        ("array", Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(Value::is_array),
        _ => None,
    };
    let Some(new) = converted else {
        return;
    };
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.contains(&new)
    {
        return;
    }
    out.push(Coercion {
        pointer: pointer.to_string(),
        from: v.to_string(),
        to: new.to_string(),
    });
    *v = new;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "urgent": {"type": "boolean"},
                "title": {"type": "string"},
                "either": {"type": ["integer", "string"]},
                "level": {"type": "integer", "enum": [1, 2]},
                "tags": {"type": "array", "items": {"type": "integer"}},
                "inner": {"type": "object", "properties": {"n": {"type": "integer"}}}
            }
        })
    }

    #[test]
    fn unambiguous_strings_become_their_type() {
        let mut a = json!({
            "count": "3", "ratio": "0.5", "urgent": "True", "title": "7",
            "either": "4", "level": "5", "tags": ["1", 2], "inner": {"n": "9"}
        });
        let c = coerce_arguments(&mut a, &schema());
        assert_eq!(
            a,
            json!({
                "count": 3, "ratio": 0.5, "urgent": true, "title": "7",
                "either": "4", "level": "5", "tags": [1, 2], "inner": {"n": 9}
            })
        );
        let mut pointers: Vec<&str> = c.iter().map(|c| c.pointer.as_str()).collect();
        pointers.sort_unstable();
        assert_eq!(
            pointers,
            ["/count", "/inner/n", "/ratio", "/tags/0", "/urgent"]
        );
        let count = c.iter().find(|c| c.pointer == "/count").unwrap();
        assert_eq!(count.from, "\"3\"");
        assert_eq!(count.to, "3");
    }

    #[test]
    fn ambiguous_values_are_left_alone() {
        let mut a = json!({"count": "three", "ratio": "NaN", "urgent": "yes", "count2": "1"});
        let c = coerce_arguments(&mut a, &schema());
        assert!(c.is_empty());
        assert_eq!(a["count"], "three");
    }

    #[test]
    fn whole_arguments_as_text() {
        let mut a = json!("{\"count\": \"2\"}");
        let c = coerce_arguments(&mut a, &schema());
        assert_eq!(a, json!({"count": 2}));
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].pointer, "");
    }

    #[test]
    fn integral_float_for_integer() {
        let mut a = json!({"count": 3.0, "level": 2.5});
        coerce_arguments(&mut a, &schema());
        assert_eq!(a["count"], json!(3));
        assert_eq!(a["level"], json!(2.5));
    }

    proptest::proptest! {
        #[test]
        fn random_arguments_never_panic(s in ".{0,80}", n in proptest::num::f64::ANY) {
            let mut a = json!({"count": s.clone(), "ratio": s.clone(), "level": n, "tags": [s.clone()]});
            let _ = coerce_arguments(&mut a, &schema());
            let mut b = Value::String(s);
            let _ = coerce_arguments(&mut b, &schema());
        }
    }

    #[test]
    fn a_copied_schema_becomes_the_values_it_holds() {
        let none = json!({"type": "object", "properties": {}, "additionalProperties": false});
        let mut args = json!({"type": "object", "properties": {}, "additionalProperties": false});
        let c = unwrap_schema_echo(&mut args, &none).unwrap();
        assert_eq!(args, json!({}));
        assert_eq!(c.pointer, "");
        let search = json!({"type": "object", "properties": {"query": {"type": "string"}}});
        let mut args = json!({"type": "object", "properties": {"query": "dentist"}});
        unwrap_schema_echo(&mut args, &search).unwrap();
        assert_eq!(args, json!({"query": "dentist"}));
        // A property schema copied without a value is dropped, not sent as the value.
        let mut args = json!({"type": "object", "properties": {"query": {"type": "string"}}});
        unwrap_schema_echo(&mut args, &search).unwrap();
        assert_eq!(args, json!({}));
        // Real arguments, or a tool that takes a `type`, are left alone.
        let mut args = json!({"query": "dentist"});
        assert!(unwrap_schema_echo(&mut args, &search).is_none());
        let typed = json!({"type": "object", "properties": {"type": {"type": "string"}, "properties": {"type": "object"}}});
        let mut args = json!({"type": "object", "properties": {}});
        assert!(unwrap_schema_echo(&mut args, &typed).is_none());
        let mut args = json!({"type": "object", "query": "x"});
        assert!(unwrap_schema_echo(&mut args, &search).is_none());
    }

    #[test]
    fn unknown_keys_of_a_closed_schema_are_dropped() {
        let closed = json!({"type": "object", "properties": {"query": {"type": "string"}}, "additionalProperties": false});
        let mut args = json!({"query": "dentist", "type": "string"});
        let c = drop_unknown_arguments(&mut args, &closed);
        assert_eq!(args, json!({"query": "dentist"}));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].pointer, "/type");
        // An open schema keeps every key.
        let open = json!({"type": "object", "properties": {"query": {"type": "string"}}});
        let mut args = json!({"query": "dentist", "type": "string"});
        assert!(drop_unknown_arguments(&mut args, &open).is_empty());
        assert_eq!(args["type"], "string");
    }
}
