//! Short handles for long ids, per run.
//!
//! A small model that must copy a uuid, a hash or a path from one tool result into a later call
//! gets it wrong: it drops a character, swaps two, or invents a plausible one. Three characters
//! it copies right. So the text the model is sent shows each long opaque id as a short stable
//! handle (`#1`, `#2`, ... in order of first appearance), and a call's arguments have each
//! handle replaced by the value it stands for before anything checks or runs the call. The
//! stored conversation, the outcome's call records and what the tool receives always hold the
//! real values; only the request sent to the model holds handles (see
//! [`crate::AgentConfig::id_handles`]).
//!
//! These are the loop's own, issued for ids found in text; they are unrelated to the live-object
//! handles an app issues through `kberg_core`.
//!
//! What counts as a long id is decided by shape alone, from the runs of id-like characters
//! (letters, digits, `-`, `_`, `.`, `/`, `~`) in a text: a uuid; a run of at least 12 hex digits
//! holding both digits and letters (a hash); a path of at least three segments; or a token of at
//! least 16 letters, digits, `-` and `_` holding at least two digits and two letters (a ULID, a
//! prefixed key). Words, numbers, dates and short ids are left alone: the model copies them well.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

use crate::message::Message;

/// The handles of one run: each long id seen, in order, and its handle.
#[derive(Debug, Default)]
pub(super) struct IdHandles {
    values: Vec<String>,
    by_value: HashMap<String, usize>,
    /// How many of the conversation's messages were scanned for ids.
    scanned: usize,
}

/// A handle in a call's arguments that this run never issued, or a handle's number written
/// without its `#`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UnknownHandle {
    /// The argument holding it (a JSON pointer, `/note_id`).
    pub pointer: String,
    /// The handle (or the bare number) as the model wrote it.
    pub handle: String,
    /// For a bare number: the issued handle it is the number of (`#1` for `"1"`).
    pub meant: Option<String>,
}

/// The sentence added to the first result that shows a handle, in what the model is sent.
pub(super) const HANDLE_NOTE: &str = "\n(Long ids are shown as short handles such as #1. To pass one, write its handle exactly as shown, e.g. \"#1\".)";

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '~')
}

/// The spans of the long ids in `text`, in order.
fn long_ids(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        match (start, is_id_char(c)) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                start = None;
                // A sentence's full stop or a list's comma is not part of the id.
                let token = text[s..i].trim_end_matches(['.', '-', '_']);
                if is_long_id(token) {
                    out.push((s, s + token.len()));
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether `token` (a run of id characters) is a long opaque id by its shape.
pub(super) fn is_long_id(token: &str) -> bool {
    is_uuid(token) || is_hash(token) || is_path(token) || is_opaque(token)
}

fn is_uuid(t: &str) -> bool {
    t.len() == 36
        && t.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

fn is_hash(t: &str) -> bool {
    t.len() >= 12
        && t.chars().all(|c| c.is_ascii_hexdigit())
        && t.chars().any(|c| c.is_ascii_digit())
        && t.chars().any(|c| c.is_ascii_alphabetic())
}

fn is_path(t: &str) -> bool {
    // `//` is a URL's authority or an empty segment, not a path a model copies.
    if t.contains("//") || t.matches('/').count() < 2 {
        return false;
    }
    let rooted = t.starts_with('/') || t.starts_with("~/") || t.starts_with("./");
    t.len() >= if rooted { 12 } else { 16 }
}

fn is_opaque(t: &str) -> bool {
    t.len() >= 16
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && t.chars().filter(char::is_ascii_digit).count() >= 2
        && t.chars().filter(char::is_ascii_alphabetic).count() >= 2
}

/// The handle number of `s` when it is exactly a handle (`#7`, spaces around allowed).
fn handle_number(s: &str) -> Option<usize> {
    let digits = s.trim().strip_prefix('#')?;
    if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl IdHandles {
    /// The handle of the value issued `index`-th (from 0).
    fn handle(index: usize) -> String {
        format!("#{}", index + 1)
    }

    /// Whether no handle was issued.
    pub(super) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Issues a handle for each long id in `text` not seen before; returns how many were new.
    pub(super) fn issue(&mut self, text: &str) -> usize {
        let before = self.values.len();
        for (s, e) in long_ids(text) {
            let value = &text[s..e];
            if !self.by_value.contains_key(value) {
                self.by_value.insert(value.to_string(), self.values.len());
                self.values.push(value.to_string());
            }
        }
        self.values.len() - before
    }

    /// Issues handles for the ids in the messages not scanned yet: the user's and the tools'
    /// (never the system prompt's, nor the model's own text). Returns how many were new.
    pub(super) fn scan(&mut self, messages: &[Message]) -> usize {
        let mut new = 0;
        for m in messages.iter().skip(self.scanned) {
            match m {
                Message::User { content } | Message::Tool { content, .. } => {
                    new += self.issue(content);
                }
                Message::System { .. } | Message::Assistant { .. } => {}
            }
        }
        self.scanned = messages.len();
        new
    }

    /// `text` with each id that has a handle replaced by it.
    pub(super) fn shorten<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let spans: Vec<_> = long_ids(text)
            .into_iter()
            .filter_map(|(s, e)| self.by_value.get(&text[s..e]).map(|&i| (s, e, i)))
            .collect();
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (s, e, i) in spans {
            out.push_str(&text[at..s]);
            out.push_str(&Self::handle(i));
            at = e;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }

    /// `text` with each handle this run issued replaced by its value (a `#` with digits, not
    /// inside a word). Returns the text and how many handles were expanded.
    pub(super) fn expand(&self, text: &str) -> (String, u32) {
        if self.values.is_empty() || !text.contains('#') {
            return (text.to_string(), 0);
        }
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut n = 0;
        let mut at = 0;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'#' && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()) {
                let end = bytes[i + 1..]
                    .iter()
                    .position(|b| !b.is_ascii_digit())
                    .map_or(bytes.len(), |p| i + 1 + p);
                let followed_by_word = bytes.get(end).is_some_and(|b| b.is_ascii_alphabetic());
                if let Some(index) = handle_number(&text[i..end])
                    .and_then(|n| n.checked_sub(1))
                    .filter(|&k| k < self.values.len() && !followed_by_word)
                {
                    out.push_str(&text[at..i]);
                    out.push_str(&self.values[index]);
                    n += 1;
                    at = end;
                }
                i = end.max(i + 1);
                continue;
            }
            i += 1;
        }
        out.push_str(&text[at..]);
        (out, n)
    }

    /// Replaces each argument that is exactly a handle (`"#1"`) with the value it stands for.
    /// Returns how many were replaced, or the first handle this run never issued (then the
    /// arguments are unchanged). Without any handle issued, nothing is a handle.
    pub(super) fn resolve(&self, arguments: &mut Value) -> Result<u32, UnknownHandle> {
        if self.values.is_empty() {
            return Ok(0);
        }
        let mut unknown = None;
        let mut found = Vec::new();
        walk_strings(arguments, &mut String::new(), &mut |pointer, s| {
            if let Some(n) = handle_number(s) {
                match n.checked_sub(1).and_then(|i| self.values.get(i)) {
                    Some(v) => found.push((pointer.to_string(), v.clone())),
                    None => {
                        unknown.get_or_insert(UnknownHandle {
                            pointer: pointer.to_string(),
                            handle: s.trim().to_string(),
                            meant: None,
                        });
                    }
                }
            }
        });
        if let Some(u) = unknown {
            return Err(u);
        }
        for (pointer, value) in &found {
            if let Some(slot) = arguments.pointer_mut(pointer) {
                *slot = Value::String(value.clone());
            }
        }
        Ok(u32::try_from(found.len()).unwrap_or(u32::MAX))
    }

    /// The first top-level argument that is only the number of an issued handle, without its
    /// `#` (`"note_id": "1"` after `#1` was shown), when `is_bare` says that argument takes
    /// an id as a string and the value has no source of its own in the conversation. Small
    /// models drop the `#` of a handle they copy; such a value is no id, so the call is
    /// answered with the handle it most likely meant instead of being run or guessed at.
    pub(super) fn bare_handle(
        &self,
        arguments: &Value,
        is_bare: impl Fn(&str, &Value) -> bool,
    ) -> Option<UnknownHandle> {
        if self.values.is_empty() {
            return None;
        }
        arguments.as_object()?.iter().find_map(|(name, value)| {
            let digits = match value {
                Value::String(s) => s.trim().to_string(),
                Value::Number(n) if n.is_u64() => n.to_string(),
                _ => return None,
            };
            let n = handle_number(&format!("#{digits}"))?;
            (n >= 1 && n <= self.values.len() && is_bare(name, value)).then(|| UnknownHandle {
                pointer: format!("/{}", name.replace('~', "~0").replace('/', "~1")),
                handle: digits,
                meant: Some(Self::handle(n - 1)),
            })
        })
    }

    /// The handles issued, for a message naming them (`#1, #2, #3`; at most the last ten).
    pub(super) fn listing(&self) -> String {
        let from = self.values.len().saturating_sub(10);
        (from..self.values.len())
            .map(Self::handle)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What the model is sent: every message but the system prompt with its ids shown as
    /// handles (text, call arguments, results), and [`HANDLE_NOTE`] after the first result that
    /// shows one.
    pub(super) fn shorten_messages(&self, messages: &mut [Message]) {
        if self.values.is_empty() {
            return;
        }
        let mut noted = false;
        for m in messages {
            match m {
                Message::System { .. } => {}
                Message::User { content } => shorten_in_place(self, content),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    shorten_in_place(self, content);
                    for call in tool_calls {
                        walk_strings_mut(&mut call.arguments, &mut |s| shorten_in_place(self, s));
                    }
                }
                Message::Tool { content, .. } => {
                    let before = content.len();
                    shorten_in_place(self, content);
                    if !noted && content.len() != before {
                        content.push_str(HANDLE_NOTE);
                        noted = true;
                    }
                }
            }
        }
    }
}

fn shorten_in_place(handles: &IdHandles, s: &mut String) {
    if let Cow::Owned(short) = handles.shorten(s) {
        *s = short;
    }
}

/// Calls `f` with each string in `value` and its JSON pointer.
fn walk_strings(value: &Value, pointer: &mut String, f: &mut impl FnMut(&str, &str)) {
    match value {
        Value::String(s) => f(pointer, s),
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{i}"));
                walk_strings(v, pointer, f);
                pointer.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&k.replace('~', "~0").replace('/', "~1"));
                walk_strings(v, pointer, f);
                pointer.truncate(len);
            }
        }
        _ => {}
    }
}

fn walk_strings_mut(value: &mut Value, f: &mut impl FnMut(&mut String)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter_mut().for_each(|v| walk_strings_mut(v, f)),
        Value::Object(map) => map.values_mut().for_each(|v| walk_strings_mut(v, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UUID: &str = "3f2a9c1e-7b4d-4e8a-9f10-2c6d8e4b5a71";
    const SHA: &str = "9fceb02d0ae598e95dc970b74767f19372d61af8";

    #[test]
    fn long_ids_by_shape_and_short_things_left_alone() {
        for id in [
            UUID,
            SHA,
            "a1b2c3d4e5f6",
            "/home/ana/notes/plan.md",
            "~/notes/2026/plan.md",
            "docs/guides/getting-started.md",
            "01HF3ZQ8W6K2M4N7P9R1S3T5V7",
            "note_8f3kd93ks0ab",
        ] {
            assert!(is_long_id(id), "{id}");
        }
        for word in [
            "17",
            "2026-12-01",
            "10:30",
            "deadbeef",
            "abcdefabcdefabcdef",
            "groceries",
            "getting-started-with-rust",
            "/a/b",
            "JSON/YAML/TOML",
            "//example.com/a/b/c",
            "#1",
        ] {
            assert!(!is_long_id(word), "{word}");
        }
    }

    #[test]
    fn ids_get_stable_handles_in_order_and_text_is_shortened() {
        let mut h = IdHandles::default();
        let text = format!(r#"[{{"id": "{UUID}", "title": "Dentist"}}, {{"commit": "{SHA}"}}]"#);
        assert_eq!(h.issue(&text), 2);
        assert_eq!(
            h.issue(&format!("again {UUID}.")),
            0,
            "the same id keeps its handle"
        );
        assert_eq!(
            h.shorten(&text),
            r##"[{"id": "#1", "title": "Dentist"}, {"commit": "#2"}]"##
        );
        assert_eq!(h.shorten(&format!("see {UUID}.")), "see #1.");
        assert_eq!(h.shorten("nothing here"), "nothing here");
        assert_eq!(h.listing(), "#1, #2");
    }

    #[test]
    fn handles_in_arguments_are_resolved_and_unknown_ones_named() {
        let mut h = IdHandles::default();
        let mut args = json!({"note_id": "#1", "tag": "#urgent"});
        assert_eq!(
            h.resolve(&mut args),
            Ok(0),
            "no handle issued: nothing is one"
        );
        h.issue(UUID);
        h.issue(SHA);
        let mut args = json!({"note_id": " #1 ", "refs": ["#2", "x"], "tag": "#urgent"});
        assert_eq!(h.resolve(&mut args), Ok(2));
        assert_eq!(
            args,
            json!({"note_id": UUID, "refs": [SHA, "x"], "tag": "#urgent"})
        );
        let mut args = json!({"note_id": "#1", "other": {"x/y": "#9"}});
        assert_eq!(
            h.resolve(&mut args),
            Err(UnknownHandle {
                pointer: "/other/x~1y".into(),
                handle: "#9".into(),
                meant: None,
            })
        );
        assert_eq!(args["note_id"], "#1", "unchanged when a handle is unknown");
    }

    #[test]
    fn a_handle_number_without_its_hash_is_named_only_where_the_caller_says_so() {
        let mut h = IdHandles::default();
        let args = json!({"note_id": "1", "tag": "2"});
        assert_eq!(h.bare_handle(&args, |_, _| true), None, "no handle issued");
        h.issue(UUID);
        h.issue(SHA);
        let found = h.bare_handle(&json!({"note_id": 2}), |n, _| n == "note_id");
        assert_eq!(
            found,
            Some(UnknownHandle {
                pointer: "/note_id".into(),
                handle: "2".into(),
                meant: Some("#2".into()),
            })
        );
        assert_eq!(
            h.bare_handle(&args, |n, _| n == "tag")
                .unwrap()
                .meant
                .as_deref(),
            Some("#2")
        );
        for args in [
            json!({"note_id": "3"}),
            json!({"note_id": "0"}),
            json!({"note_id": "#1"}),
            json!({"note_id": "1a"}),
            json!({"note_id": -1}),
        ] {
            assert_eq!(h.bare_handle(&args, |_, _| true), None, "{args}");
        }
        assert_eq!(h.bare_handle(&json!({"note_id": "1"}), |_, _| false), None);
    }

    #[test]
    fn text_expands_only_issued_handles_outside_words() {
        let mut h = IdHandles::default();
        h.issue(UUID);
        let (text, n) = h.expand(r##"{"note_id": "#1"} and #2, a#1, #1st, #12"##);
        assert_eq!(n, 1);
        assert_eq!(
            text,
            format!(r##"{{"note_id": "{UUID}"}} and #2, a#1, #1st, #12"##)
        );
        assert_eq!(IdHandles::default().expand("#1"), ("#1".into(), 0));
    }

    #[test]
    fn messages_are_scanned_once_and_shortened_except_the_system_prompt() {
        let mut h = IdHandles::default();
        let mut messages = vec![
            Message::system(format!("root {UUID}")),
            Message::user("tag my dentist note"),
            Message::Tool {
                call_id: "c1".into(),
                name: "search".into(),
                content: format!(r#"{{"id": "{UUID}"}}"#),
                is_error: false,
            },
        ];
        assert_eq!(h.scan(&messages), 1);
        assert_eq!(h.scan(&messages), 0);
        messages.push(Message::Assistant {
            content: String::new(),
            tool_calls: vec![crate::message::ToolCall {
                id: "c2".into(),
                name: "add_tag".into(),
                arguments: json!({"note_id": UUID}),
            }],
        });
        h.shorten_messages(&mut messages);
        assert!(matches!(&messages[0], Message::System { content } if content.contains(UUID)));
        let Message::Tool { content, .. } = &messages[2] else {
            panic!("a tool message")
        };
        assert_eq!(content, &format!(r##"{{"id": "#1"}}{HANDLE_NOTE}"##));
        let Message::Assistant { tool_calls, .. } = &messages[3] else {
            panic!("an assistant message")
        };
        assert_eq!(tool_calls[0].arguments, json!({"note_id": "#1"}));
    }
}
