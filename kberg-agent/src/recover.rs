//! Recovering tool calls that a model wrote into its text.
//!
//! Small local models often answer with the call as JSON in the message text (bare, in a
//! Markdown code fence, or in `<tool_call>` tags) while the structured `tool_calls` field stays
//! empty; the arguments are sometimes a JSON *string* rather than an object. This module finds
//! such calls, and only accepts one when it names a tool on the caller's surface: text that
//! merely looks like a call to a tool the caller cannot see is never executed.
//!
//! Only the first 256 KiB of a text are searched for JSON, and each place a value could start
//! is probed without building it and no deeper than serde_json's nesting limit, so a model's
//! text of millions of brackets, or of brackets nested thousands deep, costs a bounded amount
//! of work.

use std::collections::{HashMap, HashSet};

use serde::de::IgnoredAny;
use serde_json::{Map, Value};

/// A call found in the text.
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveredCall {
    /// The tool's name (always one of the visible names).
    pub name: String,
    /// The arguments, an object when they could be read as one.
    pub arguments: Value,
    /// Whether the arguments were a JSON string that had to be parsed.
    pub arguments_were_text: bool,
}

const NAME_KEYS: [&str; 4] = ["name", "tool", "tool_name", "function_name"];
const ARG_KEYS: [&str; 5] = ["arguments", "parameters", "args", "input", "params"];

/// Finds the calls in `text` that name a tool in `visible`, in order of appearance.
///
/// Tagged blocks (`<tool_call>…</tool_call>`) and code fences are read first; when they hold no
/// call, bare JSON objects anywhere in the text are tried. Calls to names outside `visible` are
/// ignored.
pub fn recover_calls(text: &str, visible: &HashSet<&str>) -> Vec<RecoveredCall> {
    scan(text, visible).0
}

/// [`recover_calls`] for the tools in `tools` (each name with its input schema), also reading a
/// call whose arguments are written flat beside the name (`{"name": "add_note", "title":
/// "milk"}`, as small models often write): when every key but the name, `type` and `id` is a
/// property the tool's schema declares, those keys are its arguments. A key the tool does not
/// declare still means the object is no call (`{"name": "add_note", "description": ...}`: the
/// model describing the tool). The loop recovers calls this way.
pub fn recover_calls_with_schemas(text: &str, tools: &HashMap<&str, &Value>) -> Vec<RecoveredCall> {
    scan(text, tools).0
}

/// The tools a text's calls may name, and what their schemas declare.
trait Listing {
    /// Whether `name` is a tool the caller may call.
    fn lists(&self, name: &str) -> bool;
    /// Whether the tool `name` declares the argument `key`.
    fn declares(&self, name: &str, key: &str) -> bool;
}

impl Listing for HashSet<&str> {
    fn lists(&self, name: &str) -> bool {
        self.contains(name)
    }

    /// Without schemas nothing is declared: flat arguments are never read.
    fn declares(&self, _name: &str, _key: &str) -> bool {
        false
    }
}

impl Listing for HashMap<&str, &Value> {
    fn lists(&self, name: &str) -> bool {
        self.contains_key(name)
    }

    fn declares(&self, name: &str, key: &str) -> bool {
        self.get(name)
            .and_then(|schema| schema.get("properties"))
            .and_then(Value::as_object)
            .is_some_and(|properties| properties.contains_key(key))
    }
}

/// The names of call-shaped objects in `text` (a tool-name key with an identifier as its value,
/// and an arguments key or nothing else) that name no tool in `visible`: calls the model wrote
/// to a tool it was not offered. Never run; the loop answers them with the reason.
pub fn unlisted_calls(text: &str, visible: &HashSet<&str>) -> Vec<String> {
    scan(text, visible).1
}

/// How much of a text is searched for JSON (256 KiB). A call, or a tool's JSON copied out, is
/// far shorter; each `{` or `[` starts a parse that may run to the end of what is searched, so
/// a longer text would cost that many passes over it. What lies past it is not searched for
/// calls, and [`has_words`] keeps it as text.
const MAX_JSON_SCAN: usize = 256 * 1024;

/// The part of `text` that is searched for JSON: its first [`MAX_JSON_SCAN`] bytes, cut at a
/// character boundary.
fn searched(text: &str) -> &str {
    &text[..kberg_core::char_floor(text, MAX_JSON_SCAN)]
}

/// The length of the JSON value `text` starts with, if one parses there. The probe builds
/// nothing, so a parse that fails late (an array of millions never closed) costs no memory,
/// and it stops at serde_json's nesting limit (128), as building the value would: a text of
/// nested brackets would otherwise be read to its end from each of them.
fn json_len(text: &str) -> Option<usize> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Skip>();
    match stream.next() {
        Some(Ok(_)) => Some(stream.byte_offset()),
        _ => None,
    }
}

/// A JSON value read and dropped as it goes. Unlike [`IgnoredAny`], which serde_json skips
/// without counting its depth, each array and object is entered through `deserialize_any`, so
/// the nesting limit applies.
struct Skip;

impl<'de> serde::Deserialize<'de> for Skip {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkipVisitor).map(|()| Skip)
    }
}

struct SkipVisitor;

impl<'de> serde::de::Visitor<'de> for SkipVisitor {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_entry::<IgnoredAny, Skip>()?.is_some() {}
        Ok(())
    }
}

fn scan(text: &str, visible: &dyn Listing) -> (Vec<RecoveredCall>, Vec<String>) {
    let text = searched(text);
    // Cheap exit for ordinary prose: every form needs a `{` and a name-like key.
    if !text.contains('{') {
        return (Vec::new(), Vec::new());
    }
    // Some servers' templates HTML-escape the prompt, and small models copy the escapes into
    // their calls (`{&#34;note_id&#34;: 5}`).
    let unescaped;
    let text = if text.contains("&#34;") || text.contains("&quot;") {
        unescaped = unescape_html(text);
        unescaped.as_str()
    } else {
        text
    };
    let mut out = Vec::new();
    let mut unlisted = Vec::new();
    for block in tagged_blocks(text).chain(fenced_blocks(text)) {
        for v in json_values(block) {
            collect(&v, visible, &mut out, &mut unlisted);
        }
    }
    if out.is_empty() && unlisted.is_empty() {
        prefixed_calls(text, visible, &mut out, &mut unlisted);
    }
    if out.is_empty() && unlisted.is_empty() {
        for v in json_values(text) {
            collect(&v, visible, &mut out, &mut unlisted);
        }
    }
    (out, unlisted)
}

fn unescape_html(text: &str) -> String {
    text.replace("&amp;", "&")
        .replace("&#34;", "\"")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
}

/// The `functions.<name>:` form followed by the arguments as JSON: what the
/// `chatml-function-calling` prompt format teaches a model to write.
fn prefixed_calls(
    text: &str,
    visible: &dyn Listing,
    out: &mut Vec<RecoveredCall>,
    unlisted: &mut Vec<String>,
) {
    let mut rest = text;
    while let Some(at) = rest.find("functions.") {
        let after = &rest[at + "functions.".len()..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(after.len());
        let name = &after[..name_len];
        let tail = after[name_len..].trim_start();
        rest = &after[name_len..];
        let Some(args_text) = tail.strip_prefix(':').map(str::trim_start) else {
            continue;
        };
        if name.is_empty() || !args_text.starts_with('{') {
            continue;
        }
        let Some(Ok(arguments @ Value::Object(_))) =
            json_len(args_text).map(|n| serde_json::from_str::<Value>(&args_text[..n]))
        else {
            continue;
        };
        if visible.lists(name) {
            out.push(RecoveredCall {
                name: name.to_string(),
                arguments,
                arguments_were_text: false,
            });
        } else {
            unlisted.push(name.to_string());
        }
    }
}

/// Whether a line is a `functions.<name>:` call header.
fn is_prefixed_call_line(line: &str) -> bool {
    line.strip_prefix("functions.").is_some_and(|r| {
        let name_len = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(r.len());
        name_len > 0 && r[name_len..].trim_start().starts_with(':')
    })
}

/// Whether `text` says something in words outside JSON: what is left once every JSON value
/// that parses, every line that starts like JSON (a broken or cut-off call), code-fence markers
/// and `<tool_call>` tags are taken out holds a letter. `{"ok": true, "id": 1}`, a call in a
/// fence, a call cut off by the token limit and an empty text are not answers. JSON is looked
/// for in the first 256 KiB only; the text past them counts as written.
pub fn has_words(text: &str) -> bool {
    let mut rest = String::with_capacity(text.len());
    let scanned = searched(text);
    let bytes = scanned.as_bytes();
    let mut i = 0;
    let mut kept_from = 0;
    while i < bytes.len() {
        if (bytes[i] == b'{' || bytes[i] == b'[')
            && let Some(n) = json_len(&scanned[i..])
        {
            rest.push_str(&text[kept_from..i]);
            i += n;
            kept_from = i;
            continue;
        }
        i += 1;
    }
    rest.push_str(&text[kept_from..]);
    rest.lines()
        .map(str::trim)
        .filter(|l| {
            !l.starts_with(['{', '[', '}', ']', '"'])
                && !l.starts_with("```")
                && !is_prefixed_call_line(l)
        })
        .map(|l| l.replace("<tool_call>", "").replace("</tool_call>", ""))
        .any(|l| l.chars().any(char::is_alphabetic))
}

/// When `text` looks like a call (a `{` followed by a tool-name key or a visible tool's name in
/// quotes) but no call in it parses, the first parse error, as serde_json words it. Only the
/// first 256 KiB are read.
pub fn malformed_call(text: &str, visible: &HashSet<&str>) -> Option<String> {
    let text = searched(text);
    let start = text.find('{')?;
    let rest = &text[start..];
    let named = NAME_KEYS.iter().any(|k| rest.contains(&format!("\"{k}\"")))
        || visible.iter().any(|n| rest.contains(&format!("\"{n}\"")));
    if !named || !scan(text, visible).0.is_empty() {
        return None;
    }
    let mut first_error = None;
    for (i, _) in rest.match_indices('{') {
        // Probed without building the value: only the first error is wanted.
        let mut stream = serde_json::Deserializer::from_str(&rest[i..]).into_iter::<Skip>();
        match stream.next() {
            // A whole object parsed: it is JSON, just not a call to a listed tool.
            Some(Ok(_)) if i == 0 => return None,
            Some(Err(e)) => {
                first_error = Some(e.to_string());
                break;
            }
            _ => {}
        }
    }
    first_error
}

/// The contents of `<tool_call>` … `</tool_call>` blocks.
fn tagged_blocks(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let start = rest.find("<tool_call>")? + "<tool_call>".len();
        let after = &rest[start..];
        let end = after.find("</tool_call>").unwrap_or(after.len());
        let block = &after[..end];
        rest = &after[end..];
        Some(block)
    })
}

/// The contents of Markdown code fences (any language tag).
fn fenced_blocks(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let open = rest.find("```")?;
        let after = &rest[open + 3..];
        // Skip the info string (```json) up to the end of the line.
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        let body = &after[body_start..];
        let end = body.find("```").unwrap_or(body.len());
        let block = &body[..end];
        rest = &body[(end + 3).min(body.len())..];
        Some(block)
    })
}

/// Every top-level JSON object or array that parses, scanning left to right. Each start is
/// probed first ([`json_len`]); a value is built only for one that parses.
fn json_values(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < bytes.len() {
        if (bytes[i] == b'{' || bytes[i] == b'[')
            && let Some(n) = json_len(&text[i..])
            && let Ok(v) = serde_json::from_str::<Value>(&text[i..i + n])
        {
            i += n;
            out.push(v);
            continue;
        }
        i += 1;
    }
    out
}

fn collect(
    v: &Value,
    visible: &dyn Listing,
    out: &mut Vec<RecoveredCall>,
    unlisted: &mut Vec<String>,
) {
    match v {
        Value::Array(items) => {
            for item in items {
                collect(item, visible, out, unlisted);
            }
        }
        Value::Object(obj) => {
            if let Some(calls) = obj.get("tool_calls") {
                collect(calls, visible, out, unlisted);
                return;
            }
            if let Some(f @ Value::Object(_)) = obj.get("function") {
                collect(f, visible, out, unlisted);
                return;
            }
            if let Some(call) = read_call(obj, visible) {
                out.push(call);
            } else if let Some(name) = unlisted_name(obj)
                && !visible.lists(name)
            {
                unlisted.push(name.to_string());
            }
        }
        _ => {}
    }
}

/// The name of a call-shaped object: an identifier under a name key, and either an arguments
/// key or no other key, so that ordinary JSON such as `{"name": "Ada", "age": 3}` is not taken
/// for a call.
fn unlisted_name(obj: &Map<String, Value>) -> Option<&str> {
    let (key, name) = NAME_KEYS
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str).map(|n| (*k, n)))?;
    let identifier = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    // With an arguments key any identifier is a call; a name alone only when it reads like a
    // tool's name (`delete_note`, not `ada`).
    let with_arguments = ARG_KEYS.iter().any(|k| obj.contains_key(*k));
    let name_only = obj.keys().all(|k| k == key || k == "type") && name.contains(['_', '.', '-']);
    (identifier && (with_arguments || name_only)).then_some(name)
}

/// The call an object in the text makes: a visible tool's name under a name key, and either an
/// arguments key, or beside the name (and a `type` or an `id`) nothing but arguments the tool
/// declares, written flat (only when the schemas are known, [`recover_calls_with_schemas`]).
/// An object that names a tool among other fields (`{"name": "add_note", "description":
/// "..."}`: the model describing a tool or quoting a record) calls nothing; read as a call
/// without arguments it would run a tool that needs none.
fn read_call(obj: &Map<String, Value>, visible: &dyn Listing) -> Option<RecoveredCall> {
    let (key, name) = NAME_KEYS
        .iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str).map(|n| (*k, n)))?;
    if !visible.lists(name) {
        tracing::debug!(
            tool = ?name,
            "ignoring a call in the text to a tool that is not on the surface"
        );
        return None;
    }
    let raw = ARG_KEYS.iter().find_map(|k| obj.get(*k));
    let mut flat = Map::new();
    if raw.is_none() {
        for (k, v) in obj {
            if k == key || k == "type" || k == "id" {
                continue;
            }
            if !visible.declares(name, k) {
                tracing::debug!(
                    tool = ?name,
                    field = ?k,
                    "ignoring an object in the text that names a tool among other fields"
                );
                return None;
            }
            flat.insert(k.clone(), v.clone());
        }
    }
    let (arguments, arguments_were_text) = match raw {
        None => (Value::Object(flat), false),
        Some(Value::Null) => (Value::Object(Map::new()), false),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => (v, true),
            // Not an object inside: hand the text on; validation will say what was expected.
            _ => (Value::String(s.clone()), false),
        },
        Some(other) => (other.clone(), false),
    };
    Some(RecoveredCall {
        name: name.to_string(),
        arguments,
        arguments_were_text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vis() -> HashSet<&'static str> {
        ["search_notes", "add_note"].into_iter().collect()
    }

    #[test]
    fn bare_object() {
        let c = recover_calls(
            r#"{"name": "search_notes", "arguments": {"query": "rust"}}"#,
            &vis(),
        );
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].name, "search_notes");
        assert_eq!(c[0].arguments, json!({"query": "rust"}));
        assert!(!c[0].arguments_were_text);
    }

    #[test]
    fn fenced_with_string_arguments() {
        let text = "Sure! I'll add it.\n```json\n{\"name\": \"add_note\", \"arguments\": \"{\\\"title\\\": \\\"milk\\\"}\"}\n```\nDone.";
        let c = recover_calls(text, &vis());
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].arguments, json!({"title": "milk"}));
        assert!(c[0].arguments_were_text);
    }

    #[test]
    fn tagged_and_openai_shapes() {
        let text = "<tool_call>\n{\"name\": \"search_notes\", \"arguments\": {\"query\": \"a\"}}\n</tool_call><tool_call>{\"type\":\"function\",\"function\":{\"name\":\"add_note\",\"parameters\":{\"title\":\"b\"}}}</tool_call>";
        let c = recover_calls(text, &vis());
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["search_notes", "add_note"]);
        assert_eq!(c[1].arguments, json!({"title": "b"}));
    }

    #[test]
    fn invisible_tools_are_never_recovered() {
        let text = r#"```json
{"name": "delete_everything", "arguments": {}}
```"#;
        assert!(recover_calls(text, &vis()).is_empty());
        // A mix keeps only the visible one.
        let text = r#"[{"name": "delete_everything"}, {"name": "search_notes", "arguments": {"query": "x"}}]"#;
        let c = recover_calls(text, &vis());
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].name, "search_notes");
    }

    #[test]
    fn prose_and_broken_json_recover_nothing() {
        assert!(recover_calls("The answer is 42.", &vis()).is_empty());
        assert!(recover_calls("{not json at all", &vis()).is_empty());
        assert!(recover_calls(r#"{"title": "no name key"}"#, &vis()).is_empty());
        assert!(recover_calls("``` unterminated fence {", &vis()).is_empty());
    }

    #[test]
    fn bare_object_inside_prose() {
        let text = r#"I will call {"name": "search_notes", "parameters": {"query": "q"}} now"#;
        let c = recover_calls(text, &vis());
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].arguments, json!({"query": "q"}));
    }

    #[test]
    fn calls_to_unlisted_tools_are_named_but_not_recovered() {
        let text = r#"{"name": "delete_note", "arguments": {"note_id": 3}}"#;
        assert!(recover_calls(text, &vis()).is_empty());
        assert_eq!(unlisted_calls(text, &vis()), ["delete_note"]);
        // Ordinary JSON with a name is not a call.
        assert!(unlisted_calls(r#"{"name": "Ada Lovelace", "age": 36}"#, &vis()).is_empty());
        assert!(unlisted_calls(r#"{"name": "ada", "age": 36}"#, &vis()).is_empty());
        // A listed tool is recovered, not named as unlisted.
        let text = r#"{"name": "add_note", "arguments": {"title": "t"}}"#;
        assert!(unlisted_calls(text, &vis()).is_empty());
    }

    #[test]
    fn json_that_names_a_tool_without_calling_it_is_not_a_call() {
        // The model describing a tool, or quoting a record that names one, in its answer.
        for text in [
            r#"{"name": "add_note", "description": "Adds a note with a title"}"#,
            r#"The tools are: [{"name": "search_notes", "description": "finds notes"}, {"name": "add_note", "description": "adds one"}]"#,
            r#"{"tool": "add_note", "status": "ok", "used": 3}"#,
        ] {
            assert!(recover_calls(text, &vis()).is_empty(), "{text}");
        }
        // A name alone, with a type or an id beside it, is still a call without arguments.
        for text in [
            r#"{"name": "search_notes"}"#,
            r#"{"type": "function", "name": "search_notes"}"#,
            r#"{"id": "call_1", "name": "search_notes"}"#,
        ] {
            assert_eq!(recover_calls(text, &vis()).len(), 1, "{text}");
        }
    }

    #[test]
    fn the_functions_prefix_form_and_html_escapes_are_recovered() {
        let text = "functions.search_notes:\n{&#34;query&#34;: &#34;milk&#34;}";
        let c = recover_calls(text, &vis());
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].arguments, json!({"query": "milk"}));
        assert_eq!(
            unlisted_calls("functions.delete_note:\n{\"note_id\": 3}", &vis()),
            ["delete_note"]
        );
        assert!(!has_words("functions.add_note:\n{&#34;title&#34;:&#34;x"));
        assert!(has_words("functions are fun: really"));
        assert!(recover_calls("functions.search_notes: not json", &vis()).is_empty());
    }

    #[test]
    fn only_json_is_not_an_answer() {
        assert!(!has_words(r#"{"ok": true, "id": 1}"#));
        assert!(!has_words("```json\n{\"name\": \"add_note\"}\n```"));
        assert!(!has_words("<tool_call>{\"a\": 1}</tool_call>"));
        assert!(!has_words("  "));
        assert!(!has_words("[1, 2] {\"a\": 1}"));
        // Cut off by the token limit, or broken: still not words.
        assert!(!has_words(
            "{\"name\": \"count_notes\"}\n{\"name\": \"count_notes\", \"argu"
        ));
        assert!(!has_words("{broken"));
        assert!(has_words("Your note 1 says: buy milk."));
        assert!(has_words(r#"{"ok": true} so it is done"#));
        assert!(has_words(
            "{\"name\": \"get_note\"}\nText: We are reading Dune"
        ));
    }

    #[test]
    fn malformed_calls_get_a_parse_error() {
        let comment = "{\"name\": \"add_note\", // the title\n \"arguments\": {\"title\": \"x\"}}";
        let e = malformed_call(comment, &vis()).unwrap();
        assert!(e.contains("line"), "{e}");
        // Doubled braces hold a call that parses from the inner brace: recovered, not malformed.
        let doubled = "{{\"name\": \"search_notes\", \"arguments\": {}}}";
        assert!(malformed_call(doubled, &vis()).is_none());
        assert_eq!(recover_calls(doubled, &vis()).len(), 1);
        let quote = "{\"name\": \"add_note\", \"arguments\": {\"title: \"x\"}}";
        assert!(malformed_call(quote, &vis()).is_some());
        // A call that parses, prose, and JSON without a name are not malformed calls.
        assert!(malformed_call(r#"{"name": "search_notes", "arguments": {}}"#, &vis()).is_none());
        assert!(malformed_call("Done, note 3 added.", &vis()).is_none());
        assert!(malformed_call(r#"{"ok": true, "id": 1}"#, &vis()).is_none());
        assert!(malformed_call(r#"{"name": "delete_note", "arguments": {}}"#, &vis()).is_none());
    }

    #[test]
    fn a_flood_of_brackets_is_read_only_so_far() {
        // 200 `[` then 8 million `1,`: no value ends, and each `[` used to start a parse of the
        // whole 16 MB into a vector of millions, some 128 times over.
        let flood = format!("{}{}", "[".repeat(200), "1,".repeat(8_000_000));
        assert!(recover_calls(&flood, &vis()).is_empty());
        assert!(unlisted_calls(&flood, &vis()).is_empty());
        assert!(!has_words(&flood));
        assert!(malformed_call(&flood, &vis()).is_none());
        // The same behind a call: the call is read, the flood after it is not an answer.
        let call = r#"{"name": "search_notes", "arguments": {"query": "q"}}"#;
        let text = format!("{call}\n{flood}");
        let c = recover_calls(&text, &vis());
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].arguments, json!({"query": "q"}));
        assert!(!has_words(&text));
        // Words after the searched part still count; a call there is not looked for.
        let far = format!("{}\n{call}\nDone, I searched.", "[1] ".repeat(100_000));
        assert!(has_words(&far));
        assert!(recover_calls(&far, &vis()).is_empty());
        // A call-like start whose brackets never close is answered as malformed, once.
        let named = format!(r#"{{"name": "add_note", "arguments": {flood}"#);
        assert!(malformed_call(&named, &vis()).is_some());
        assert!(recover_calls(&named, &vis()).is_empty());
    }

    fn schemas() -> (Value, Value) {
        (
            json!({"type": "object", "properties": {"query": {"type": "string"}}}),
            json!({"type": "object", "properties": {
                "title": {"type": "string"}, "priority": {"type": "integer"}}}),
        )
    }

    #[test]
    fn flat_arguments_the_tool_declares_are_read_as_its_arguments() {
        let (search, add) = schemas();
        let tools: HashMap<&str, &Value> = [("search_notes", &search), ("add_note", &add)].into();
        for (text, args) in [
            (
                r#"{"name": "add_note", "title": "milk", "priority": 2}"#,
                json!({"title": "milk", "priority": 2}),
            ),
            (
                r#"{"type": "function", "id": "c1", "name": "search_notes", "query": "q"}"#,
                json!({"query": "q"}),
            ),
            (
                r#"<tool_call>{"name": "add_note", "title": "x"}</tool_call>"#,
                json!({"title": "x"}),
            ),
            (r#"{"name": "search_notes"}"#, json!({})),
            // An arguments key still wins over anything beside it.
            (
                r#"{"name": "search_notes", "arguments": {"query": "a"}, "query": "b"}"#,
                json!({"query": "a"}),
            ),
        ] {
            let c = recover_calls_with_schemas(text, &tools);
            assert_eq!(c.len(), 1, "{text}");
            assert_eq!(c[0].arguments, args, "{text}");
        }
        // A key the tool does not declare means the object is no call: a description, a record.
        for text in [
            r#"{"name": "add_note", "description": "Adds a note with a title"}"#,
            r#"{"name": "add_note", "title": "milk", "description": "adds one"}"#,
            r#"{"name": "search_notes", "title": "milk"}"#,
            r#"{"tool": "add_note", "status": "ok", "used": 3}"#,
        ] {
            assert!(
                recover_calls_with_schemas(text, &tools).is_empty(),
                "{text}"
            );
        }
        // Without the schemas nothing flat is read.
        assert!(recover_calls(r#"{"name": "add_note", "title": "milk"}"#, &vis()).is_empty());
    }

    #[test]
    fn deep_nesting_is_probed_only_to_the_nesting_limit() {
        // Each `{` or `[` starts a probe; one that did not stop at the nesting limit ran to the
        // end of the text from every start: minutes for these 64 KiB, hours for 256 KiB.
        let size = 64 * 1024;
        let open = "{\"a\":".repeat(size / 5);
        let closed = format!("{}{}", "[".repeat(size / 2), "]".repeat(size / 2));
        let brackets = "[".repeat(size);
        for text in [&open, &closed, &brackets] {
            assert!(recover_calls(text, &vis()).is_empty());
            assert!(unlisted_calls(text, &vis()).is_empty());
            assert!(!has_words(text));
        }
        assert!(malformed_call(&open, &vis()).is_none());
        // A call after the flood is still found, and JSON nested as deep as the limit still
        // reads as a value.
        let call = r#"{"name": "search_notes", "arguments": {"query": "q"}}"#;
        let text = format!("{closed}\n{call}");
        assert_eq!(recover_calls(&text, &vis()).len(), 1);
        let deep = format!("{}1{}", "[".repeat(120), "]".repeat(120));
        assert!(!has_words(&format!("{deep} ok")[..deep.len()]));
        assert_eq!(json_values(&deep).len(), 1);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_text_never_panics(s in ".{0,200}") {
            let _ = recover_calls(&s, &vis());
        }

        #[test]
        fn recovered_names_are_always_visible(s in "[{}\\[\\]\":,a-z_ ]{0,120}") {
            for c in recover_calls(&s, &vis()) {
                proptest::prop_assert!(vis().contains(c.name.as_str()));
            }
        }
    }
}
