//! Argument validation: a tool's schema compiled once, and diagnostics a small model can act on.
//!
//! Validation is the `jsonschema` crate. Each schema is compiled when the tool is registered
//! (draft 2020-12 unless the schema's own `$schema` says otherwise), so a schema that does not
//! compile is a registration error. Keywords the compiler does not know are ignored, never a
//! reason to reject. When arguments are invalid, every offending field is reported as a
//! [`FieldError`]: a JSON pointer into the arguments, what the schema expected, what was found,
//! and one sentence saying both.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use jsonschema::error::{TypeKind, ValidationErrorKind};

/// One problem with one field of a tool call's arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    /// JSON pointer to the field (`""` is the arguments object itself, `/title`, `/items/2`).
    /// For a missing field it points where the field should be.
    pub pointer: String,
    /// What the schema expected, in words.
    pub expected: String,
    /// What was found, in words (`missing`, `the string "abc"`, ...).
    pub found: String,
    /// One sentence with both, naming the field.
    pub message: String,
}

/// The most backtracking steps a `pattern` may take to check one value. A pattern with
/// lookaround or back-references runs on a backtracking engine, and a tool's schema is not
/// always the app's own (an aggregated upstream declares its tools'): `^(a|aa)+(?=b)c` took
/// about 160 ms per 41-character string at the engine's default (a million), so arguments of
/// a few thousand such strings held a worker for minutes. A value whose check needs more is
/// refused as invalid arguments, saying so. Patterns without those features run on a
/// linear-time engine and are not limited; an ordinary lookahead needs a few steps per
/// character.
pub const MAX_PATTERN_BACKTRACKS: usize = 20_000;

/// The most [`FieldError`]s one diagnosis lists. Arguments can be wrong in as many places as
/// they have values (a few megabytes of array items are millions of them); a model fixes the
/// first few dozen and calls again, so the rest would only cost memory and a reply no one reads.
pub const MAX_FIELD_ERRORS: usize = 32;

/// Arguments of more values than this (counting every object, array and scalar in them) are
/// diagnosed by their first problem only. The validator builds every error it finds before the
/// first can be looked at, some hundreds of bytes each: a few megabytes of wrong array items
/// took the better part of a gigabyte and seconds to diagnose, for a list cut at
/// [`MAX_FIELD_ERRORS`] anyway.
pub const MAX_DIAGNOSED_VALUES: usize = 10_000;

/// The most options of an `enum` a diagnostic lists; the rest are counted. A schema may list
/// thousands (a tool proxied from another server declares what it likes), and every field
/// that misses one would repeat them all, twice, in the answer.
const MAX_SHOWN_OPTIONS: usize = 16;

/// The most characters of one schema value (an option, a constant, a pattern) a diagnostic
/// quotes.
const MAX_SHOWN_SCHEMA_CHARS: usize = 80;

/// `text` (a schema value as JSON) cut to [`MAX_SHOWN_SCHEMA_CHARS`] characters. Cut here
/// rather than with `crate::text`, as this module is a leaf of the crate's layers.
fn shown(mut text: String) -> String {
    if let Some((at, _)) = text.char_indices().nth(MAX_SHOWN_SCHEMA_CHARS) {
        text.truncate(at);
        text.push_str("...");
    }
    text
}

/// How many values `v` holds (itself, and everything in it at any depth), counted up to one
/// past `limit`.
fn count_values(v: &Value, limit: usize) -> usize {
    let mut seen = 1;
    let mut todo = vec![v];
    while let Some(v) = todo.pop() {
        let len = match v {
            Value::Array(items) => items.len(),
            Value::Object(map) => map.len(),
            _ => continue,
        };
        seen += len;
        if seen > limit {
            return limit + 1;
        }
        match v {
            Value::Array(items) => todo.extend(items),
            Value::Object(map) => todo.extend(map.values()),
            _ => {}
        }
    }
    seen
}

/// A compiled JSON Schema.
pub struct CompiledSchema {
    raw: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledSchema")
            .field("schema", &self.raw)
            .finish_non_exhaustive()
    }
}

impl CompiledSchema {
    /// Compiles `schema`. The error is the compiler's message.
    pub fn compile(schema: Value) -> Result<Self, String> {
        if !schema.is_object() && !schema.is_boolean() {
            return Err("a schema must be a JSON object or a boolean".into());
        }
        let validator = jsonschema::options()
            .with_pattern_options(
                jsonschema::PatternOptions::fancy_regex().backtrack_limit(MAX_PATTERN_BACKTRACKS),
            )
            .build(&schema)
            .map_err(|e| e.to_string())?;
        Ok(Self {
            raw: schema,
            validator,
        })
    }

    /// The schema as given.
    pub fn schema(&self) -> &Value {
        &self.raw
    }

    /// Whether `instance` is valid. Cheaper than [`CompiledSchema::diagnose`].
    #[inline]
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.validator.is_valid(instance)
    }

    /// The problems with `instance`, at most [`MAX_FIELD_ERRORS`] of them (the first ones the
    /// validator reports), or only the first when `instance` holds more than
    /// [`MAX_DIAGNOSED_VALUES`] values; empty exactly when it is valid.
    pub fn diagnose(&self, instance: &Value) -> Vec<FieldError> {
        let mut out = Vec::new();
        if count_values(instance, MAX_DIAGNOSED_VALUES) > MAX_DIAGNOSED_VALUES {
            // `validate` stops at the first error instead of building them all.
            if let Err(err) = self.validator.validate(instance) {
                let pointer = shown_pointer(err.instance_path().as_str().to_string());
                describe(&pointer, err.kind(), err.instance(), &mut out);
                out.truncate(MAX_FIELD_ERRORS);
            }
            return out;
        }
        for err in self.validator.iter_errors(instance) {
            if out.len() >= MAX_FIELD_ERRORS {
                break;
            }
            let pointer = shown_pointer(err.instance_path().as_str().to_string());
            let found_value = err.instance();
            describe(&pointer, err.kind(), found_value, &mut out);
        }
        out.truncate(MAX_FIELD_ERRORS);
        out
    }
}

fn field_name(pointer: &str) -> String {
    if pointer.is_empty() {
        "the arguments".to_string()
    } else {
        format!("`{}`", pointer.trim_start_matches('/').replace('/', "."))
    }
}

fn push(out: &mut Vec<FieldError>, pointer: String, expected: String, found: String) {
    let message = if found == "missing" {
        format!(
            "{} is required ({expected}) but is missing.",
            field_name(&pointer)
        )
    } else {
        format!(
            "{} must be {expected}, but it is {found}.",
            field_name(&pointer)
        )
    };
    out.push(FieldError {
        pointer,
        expected,
        found,
        message,
    });
}

/// A short description of a JSON value for a diagnostic, safe to put in a message whatever the
/// value's size: its type, and a number or boolean itself, a string cut at 40 characters, an
/// array's length.
///
/// ```
/// use kberg_core::describe_value;
/// use serde_json::json;
///
/// assert_eq!(describe_value(&json!(7)), "the integer 7");
/// assert_eq!(describe_value(&json!({"a": 1})), "an object");
/// assert!(describe_value(&json!("x".repeat(10_000))).len() < 60);
/// ```
pub fn describe_value(v: &Value) -> String {
    fn short(s: &str) -> String {
        if s.chars().count() > 40 {
            let cut: String = s.chars().take(37).collect();
            format!("{cut}...")
        } else {
            s.to_string()
        }
    }
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) if n.is_i64() || n.is_u64() => format!("the integer {n}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {:?}", short(s)),
        Value::Array(a) => format!("an array of {} item(s)", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

fn type_words(kind: &TypeKind) -> String {
    fn one(t: &str) -> &'static str {
        match t {
            "string" => "a string",
            "integer" => "an integer",
            "number" => "a number",
            "boolean" => "a boolean (true or false)",
            "array" => "an array",
            "object" => "an object",
            "null" => "null",
            _ => "a value of another type",
        }
    }
    match kind {
        TypeKind::Single(t) => one(&t.to_string()).to_string(),
        TypeKind::Multiple(set) => {
            let names: Vec<&str> = set.iter().map(|t| one(&t.to_string())).collect();
            names.join(" or ")
        }
    }
}

fn join_pointer(base: &str, key: &str) -> String {
    let escaped = key.replace('~', "~0").replace('/', "~1");
    shown_pointer(format!("{base}/{escaped}"))
}

/// The longest pointer a diagnosis quotes, in bytes.
const MAX_SHOWN_POINTER_BYTES: usize = 256;

/// `pointer` cut at [`MAX_SHOWN_POINTER_BYTES`] (at a character boundary) and marked `...`.
/// Its keys are the caller's: a key of a megabyte would come back in the pointer and in the
/// sentence naming the field, as values never do ([`describe_value`] cuts them).
fn shown_pointer(mut pointer: String) -> String {
    if pointer.len() > MAX_SHOWN_POINTER_BYTES {
        let mut cut = MAX_SHOWN_POINTER_BYTES;
        while !pointer.is_char_boundary(cut) {
            cut -= 1;
        }
        pointer.truncate(cut);
        pointer.push_str("...");
    }
    pointer
}

fn describe(pointer: &str, kind: &ValidationErrorKind, found: &Value, out: &mut Vec<FieldError>) {
    use ValidationErrorKind as K;
    let found_s = describe_value(found);
    match kind {
        K::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_string);
            push(
                out,
                join_pointer(pointer, &name),
                "a value".into(),
                "missing".into(),
            );
        }
        K::AdditionalProperties { unexpected } | K::UnevaluatedProperties { unexpected } => {
            for name in unexpected.iter().take(MAX_FIELD_ERRORS) {
                let p = join_pointer(pointer, name);
                let message = format!("{} is not a known field; remove it.", field_name(&p));
                out.push(FieldError {
                    pointer: p,
                    expected: "no such field".into(),
                    found: "an unexpected field".into(),
                    message,
                });
            }
        }
        K::Type { kind } => push(out, pointer.into(), type_words(kind), found_s),
        K::Enum { options } => {
            let opts = match &**options {
                Value::Array(a) => {
                    let mut listed: Vec<String> = a
                        .iter()
                        .take(MAX_SHOWN_OPTIONS)
                        .map(|o| shown(o.to_string()))
                        .collect();
                    if a.len() > MAX_SHOWN_OPTIONS {
                        listed.push(format!("or {} more", a.len() - MAX_SHOWN_OPTIONS));
                    }
                    listed.join(", ")
                }
                other => shown(other.to_string()),
            };
            push(out, pointer.into(), format!("one of {opts}"), found_s);
        }
        K::Constant { expected_value } => push(
            out,
            pointer.into(),
            format!("exactly {}", shown(expected_value.to_string())),
            found_s,
        ),
        K::Minimum { limit } => push(out, pointer.into(), format!("at least {limit}"), found_s),
        K::Maximum { limit } => push(out, pointer.into(), format!("at most {limit}"), found_s),
        K::ExclusiveMinimum { limit } => push(
            out,
            pointer.into(),
            format!("greater than {limit}"),
            found_s,
        ),
        K::ExclusiveMaximum { limit } => {
            push(out, pointer.into(), format!("less than {limit}"), found_s)
        }
        K::MinLength { limit } => push(
            out,
            pointer.into(),
            format!("a string of at least {limit} character(s)"),
            found_s,
        ),
        K::MaxLength { limit } => push(
            out,
            pointer.into(),
            format!("a string of at most {limit} character(s)"),
            found_s,
        ),
        K::MinItems { limit } => push(
            out,
            pointer.into(),
            format!("an array of at least {limit} item(s)"),
            found_s,
        ),
        K::MaxItems { limit } => push(
            out,
            pointer.into(),
            format!("an array of at most {limit} item(s)"),
            found_s,
        ),
        K::BacktrackLimitExceeded { .. } => push(
            out,
            pointer.into(),
            format!(
                "a string its `pattern` can be checked against within {MAX_PATTERN_BACKTRACKS} \
                 backtracking steps"
            ),
            found_s,
        ),
        K::Pattern { pattern } => push(
            out,
            pointer.into(),
            format!(
                "a string matching the pattern {}",
                shown(pattern.to_string())
            ),
            found_s,
        ),
        K::Format { format } => push(
            out,
            pointer.into(),
            format!("a string in {format} format"),
            found_s,
        ),
        K::UniqueItems => push(
            out,
            pointer.into(),
            "an array without duplicates".into(),
            found_s,
        ),
        K::MultipleOf { multiple_of } => push(
            out,
            pointer.into(),
            format!("a multiple of {multiple_of}"),
            found_s,
        ),
        _ => {
            // Composite keywords (anyOf, oneOf, not, ...) and rarer ones: the keyword names what
            // was expected; the crate's own message is precise enough.
            push(
                out,
                pointer.into(),
                format!("a value that satisfies `{}`", kind.keyword()),
                found_s,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> CompiledSchema {
        CompiledSchema::compile(json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1},
                "count": {"type": "integer", "minimum": 1},
                "mode": {"enum": ["fast", "slow"]},
                "tags": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["title", "count"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    /// A pattern that backtracks without end on a value is cut at the limit: the value is
    /// refused, saying why, instead of holding the caller for as long as the engine likes;
    /// lookarounds on ordinary values still match.
    #[test]
    fn a_pattern_that_backtracks_without_end_is_refused_at_the_limit() {
        let s = CompiledSchema::compile(json!({
            "type": "object",
            "properties": {
                "evil": {"type": "string", "pattern": "^(a|aa)+(?=b)c"},
                "code": {"type": "string", "pattern": "^(?=.*[0-9])[a-z0-9]+$"}
            }
        }))
        .unwrap();
        // Tens of thousands of steps: checked to the end at the engine's default (a million),
        // past the limit here.
        let hostile = json!({"evil": "a".repeat(22)});
        assert!(!s.is_valid(&hostile));
        let errs = s.diagnose(&hostile);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].pointer, "/evil");
        assert!(errs[0].expected.contains("backtracking steps"), "{errs:?}");
        assert!(s.is_valid(&json!({"code": "abc1"})));
        assert!(!s.is_valid(&json!({"code": "abcd"})));
        let long = format!("{}1", "a".repeat(10_000));
        assert!(s.is_valid(&json!({ "code": long })));
    }

    #[test]
    fn every_field_is_named() {
        let s = schema();
        let errs = s.diagnose(&json!({"count": "3", "mode": "medium", "extra": 1, "tags": [1]}));
        let pointers: Vec<&str> = errs.iter().map(|e| e.pointer.as_str()).collect();
        for p in ["/title", "/count", "/mode", "/extra", "/tags/0"] {
            assert!(pointers.contains(&p), "{p} missing from {pointers:?}");
        }
        let count = errs.iter().find(|e| e.pointer == "/count").unwrap();
        assert_eq!(count.expected, "an integer");
        assert_eq!(count.found, "the string \"3\"");
        let title = errs.iter().find(|e| e.pointer == "/title").unwrap();
        assert_eq!(title.found, "missing");
        assert!(title.message.contains("`title`"));
        let mode = errs.iter().find(|e| e.pointer == "/mode").unwrap();
        assert!(mode.expected.contains("\"fast\""));
    }

    #[test]
    fn non_object_arguments() {
        let errs = schema().diagnose(&json!([1, 2]));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].pointer, "");
        assert_eq!(errs[0].expected, "an object");
    }

    #[test]
    fn unknown_keywords_are_ignored() {
        let s = CompiledSchema::compile(json!({
            "type": "object",
            "x-ui-widget": "slider",
            "properties": {"a": {"type": "integer", "frobnicate": true}}
        }))
        .unwrap();
        assert!(s.is_valid(&json!({"a": 3})));
    }

    #[test]
    fn bad_schema_does_not_compile() {
        assert!(CompiledSchema::compile(json!({"type": 12})).is_err());
        assert!(CompiledSchema::compile(json!("string")).is_err());
    }

    #[test]
    fn a_large_instance_is_diagnosed_by_its_first_problem() {
        let s = CompiledSchema::compile(json!({
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "string"}}}
        }))
        .unwrap();
        // Every item wrong: the validator would build one error per item (hundreds of bytes
        // each) before the first was looked at.
        let big = json!({"tags": vec![1; MAX_DIAGNOSED_VALUES]});
        let errs = s.diagnose(&big);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].pointer, "/tags/0");
        assert_eq!(errs[0].expected, "a string");
        assert!(
            s.diagnose(&json!({"tags": vec!["a"; MAX_DIAGNOSED_VALUES]}))
                .is_empty()
        );
        // Below the bound every problem (up to MAX_FIELD_ERRORS) is still named.
        let small = json!({"tags": vec![1; 3]});
        assert_eq!(s.diagnose(&small).len(), 3);
        assert_eq!(count_values(&big, 10), 11);
        assert_eq!(count_values(&small, 10), 5);
    }

    #[test]
    fn a_huge_enum_or_constant_is_quoted_in_part() {
        let options: Vec<String> = (0..5_000).map(|i| format!("{i:0>200}")).collect();
        let long = "c".repeat(100_000);
        let s = CompiledSchema::compile(json!({
            "type": "object",
            "properties": {
                "mode": {"enum": options},
                "fixed": {"const": long},
                "code": {"type": "string", "pattern": format!("^{}$", "d".repeat(100_000))}
            }
        }))
        .unwrap();
        let errs = s.diagnose(&json!({"mode": "none", "fixed": "x", "code": "x"}));
        assert_eq!(errs.len(), 3, "{errs:?}");
        for e in &errs {
            assert!(
                e.message.len() < 4_000,
                "{}: {} bytes",
                e.pointer,
                e.message.len()
            );
        }
        let mode = errs.iter().find(|e| e.pointer == "/mode").unwrap();
        assert!(
            mode.expected.starts_with("one of \"0000"),
            "{}",
            mode.expected
        );
        assert!(mode.expected.ends_with("or 4984 more"), "{}", mode.expected);
        // A short enum is listed whole, as before.
        let errs = schema().diagnose(&json!({"title": "t", "count": 1, "mode": "medium"}));
        assert_eq!(errs[0].expected, r#"one of "fast", "slow""#);
    }

    #[test]
    fn a_huge_key_is_quoted_in_part() {
        let key = "é".repeat(50_000);
        // An unknown field, and a known kind of field of the wrong type.
        let errs = schema().diagnose(&json!({"title": "t", "count": 1, key.clone(): 1}));
        let open = CompiledSchema::compile(json!({
            "type": "object",
            "additionalProperties": {"type": "string"}
        }))
        .unwrap();
        let more = open.diagnose(&json!({key.clone(): 1}));
        assert_eq!((errs.len(), more.len()), (1, 1), "{errs:?} {more:?}");
        for e in errs.iter().chain(&more) {
            assert!(e.pointer.starts_with("/éé"), "{}", e.pointer);
            assert!(e.pointer.ends_with("..."), "{}", e.pointer);
            assert!(e.pointer.len() < 300, "{} bytes", e.pointer.len());
            assert!(e.message.len() < 400, "{} bytes", e.message.len());
        }
        // Short pointers are exact, as before.
        let errs = schema().diagnose(&json!({"title": "t", "count": 1, "a/b~": 1}));
        assert_eq!(errs[0].pointer, "/a~1b~0");
    }

    #[test]
    fn older_draft_is_honoured() {
        // In draft-04 exclusiveMaximum is a boolean modifier of maximum.
        let s = CompiledSchema::compile(json!({
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "number", "maximum": 5, "exclusiveMaximum": true
        }))
        .unwrap();
        assert!(!s.is_valid(&json!(5)));
        assert!(s.is_valid(&json!(4)));
    }
}
