//! Whether a write's arguments come from the conversation.
//!
//! Small models fill a write's arguments with values nobody gave them: an invented id
//! (`note_id: 1` where the app's ids are two-digit numbers), or a field copied from the record
//! they just read (the note's old priority instead of the one the user asked for), or a whole
//! write the user never asked for (a priority set while answering a question). Each such write
//! runs and changes the app's data. The loop can catch them before they run, without knowing the
//! task, by checking where each value could have come from:
//!
//! - an id argument (named `id`, ending in `_id` or `Id`, or named with
//!   [`crate::AgentConfig::id_source`]) must appear in the user's words or in a tool result that
//!   succeeded in this run (ids come from searches), as a whole token: `n-17` is not in "note
//!   n-170", nor the start of a uuid in the uuid, since a cut id names another record. The word
//!   "one" standing alone ("the one about taxes") grounds no id, only within a number phrase
//!   ("twenty-one");
//! - a number argument must appear in the user's words (digits, or English number words up to
//!   ninety-nine: "forty-two", "five").
//!
//! - with [`crate::AgentConfig::ground_write_text`], a text argument (a string the schema
//!   declares as such, without `enum` or `format`) must appear in the user's words, as whole
//!   words (`"Call mom"` in `Add a note titled "Call mom"`), unless the app names it with
//!   [`crate::AgentConfig::composed_argument`] (a summary the model writes itself).
//!
//! Flags and other values are not checked. A write that fails the check is not run; the model
//! is told which value has no source and shown the user's request, and may try again (see
//! [`crate::AgentConfig::ground_write_arguments`]).
//!
//! The same sources define which writes the user asked for
//! ([`Grounds::new_user_values`], [`crate::AgentConfig::stop_unrequested_writes`]): a write
//! carries values from the user's words, and once a write succeeded, a further one is
//! requested only when it carries a value from the user's words that no successful write of
//! the run carried yet.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::message::Message;

/// Where a write's values may come from: the numbers and text of the user's messages, and of
/// the tool results that succeeded.
#[derive(Debug, Default)]
pub(crate) struct Grounds {
    user_numbers: Vec<f64>,
    /// The user's numbers that may be ids: [`Grounds::user_numbers`] but for the word "one"
    /// standing alone ("the one about taxes" names no note 1).
    user_id_numbers: Vec<f64>,
    user_text: String,
    /// The user's words as [`words_of`] spells them, with a space at each end.
    user_words: String,
    result_text: String,
}

/// An argument with no source in the conversation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ungrounded {
    /// The argument's name.
    pub argument: String,
    /// The value as the model wrote it (JSON).
    pub value: String,
    /// Whether it is an id argument (ids may also come from tool results).
    pub is_id: bool,
    /// Whether it is a text argument ([`Grounds::check_text`]).
    pub is_text: bool,
}

/// Whether an argument name is an id by its spelling.
pub(crate) fn is_id_name(arg: &str) -> bool {
    arg == "id" || arg.ends_with("_id") || arg.ends_with("Id")
}

impl Grounds {
    /// The grounds in `messages`: `user_messages` are the indices of the user's own messages
    /// (not the loop's notes to the model), tool results count when they did not fail.
    #[cfg(test)]
    pub(crate) fn of(messages: &[Message], user_messages: usize) -> Self {
        let mut g = Grounds::default();
        g.add(messages, 0, user_messages);
        g
    }

    /// Adds the grounds of `messages[from..]`: `user_messages` are the indices, from the start
    /// of `messages`, of the user's own messages (not the loop's notes to the model); tool
    /// results count when they did not fail. A conversation that only grows is gathered once,
    /// its new messages added as they come.
    pub(crate) fn add(&mut self, messages: &[Message], from: usize, user_messages: usize) {
        for (i, m) in messages.iter().enumerate().skip(from) {
            match m {
                Message::User { content, .. } if i < user_messages => {
                    self.user_numbers.extend(numbers_in(content));
                    self.user_id_numbers.extend(id_numbers_in(content));
                    self.user_text.push_str(&content.to_lowercase());
                    self.user_text.push('\n');
                    self.user_words.push(' ');
                    self.user_words.push_str(&words_of(content));
                    self.user_words.push(' ');
                }
                Message::Tool {
                    content,
                    is_error: false,
                    ..
                } => {
                    self.result_text.push_str(&content.to_lowercase());
                    self.result_text.push('\n');
                }
                _ => {}
            }
        }
    }

    /// The first top-level argument of `arguments` with no source, if any. `id_args` are the
    /// argument names an app declared as ids beside those spelled as ids.
    pub(crate) fn check(
        &self,
        arguments: &Value,
        id_args: &HashMap<String, String>,
    ) -> Option<Ungrounded> {
        let args = arguments.as_object()?;
        args.iter().find_map(|(name, value)| {
            let is_id = is_id_name(name) || id_args.contains_key(name);
            let grounded = if is_id {
                self.id_grounded(name, value)
            } else {
                self.number_grounded(value)
            };
            (!grounded).then(|| Ungrounded {
                argument: name.clone(),
                value: value.to_string(),
                is_id,
                is_text: false,
            })
        })
    }

    /// The first text argument of `arguments` that is not in the user's words, if any. A text
    /// argument is one the tool's `schema` declares with `"type": "string"` and neither `enum`
    /// nor `format`, that is not an id (by name or in `id_args`, checked by [`Grounds::check`])
    /// and not named in `composed`. An empty string, or one without letters or digits, passes.
    pub(crate) fn check_text(
        &self,
        arguments: &Value,
        schema: &Value,
        id_args: &HashMap<String, String>,
        composed: &HashSet<String>,
    ) -> Option<Ungrounded> {
        let args = arguments.as_object()?;
        let props = schema.get("properties")?.as_object()?;
        args.iter().find_map(|(name, value)| {
            let Value::String(text) = value else {
                return None;
            };
            let prop = props.get(name)?;
            let is_text = prop.get("type").and_then(Value::as_str) == Some("string")
                && prop.get("enum").is_none()
                && prop.get("format").is_none();
            if !is_text
                || is_id_name(name)
                || id_args.contains_key(name)
                || composed.contains(name)
                || self.text_grounded(text)
            {
                return None;
            }
            Some(Ungrounded {
                argument: name.clone(),
                value: value.to_string(),
                is_id: false,
                is_text: true,
            })
        })
    }

    /// Whether `text` appears in the user's words as whole words (case, punctuation and
    /// spacing aside).
    fn text_grounded(&self, text: &str) -> bool {
        let words = words_of(text);
        words.is_empty() || self.user_words.contains(&format!(" {words} "))
    }

    /// The values of `arguments` (top level, and the items of a list) that come from the
    /// user's words, each as a key: a number the user gave, or a text in the user's words.
    /// Ids and numbers that only a result shows are not among them, nor the arguments named in
    /// `skip` (text the model composes).
    pub(crate) fn user_values(&self, arguments: &Value, skip: &HashSet<String>) -> HashSet<String> {
        let mut out = HashSet::new();
        let Some(args) = arguments.as_object() else {
            return out;
        };
        let mut add = |value: &Value| match value {
            Value::Number(n) => {
                if let Some(x) = n.as_f64().filter(|x| self.user_numbers.contains(x)) {
                    out.insert(format!("n:{x}"));
                }
            }
            Value::String(s) => {
                if let Ok(x) = s.trim().parse::<f64>() {
                    if self.user_numbers.contains(&x) {
                        out.insert(format!("n:{x}"));
                    }
                } else {
                    let words = words_of(s);
                    if !words.is_empty() && self.text_grounded(s) {
                        out.insert(format!("t:{words}"));
                    }
                }
            }
            _ => {}
        };
        for (name, value) in args {
            if skip.contains(name) {
                continue;
            }
            match value {
                Value::Array(items) => items.iter().for_each(&mut add),
                v => add(v),
            }
        }
        out
    }

    /// The values of `arguments` from the user's words that are not in `used` (the user values
    /// of the writes that succeeded): a write after a successful one is requested only when
    /// this is not empty.
    pub(crate) fn new_user_values(
        &self,
        arguments: &Value,
        used: &HashSet<String>,
        skip: &HashSet<String>,
    ) -> usize {
        self.user_values(arguments, skip)
            .iter()
            .filter(|v| !used.contains(*v))
            .count()
    }

    /// Whether the id `value` of argument `name` has a source: the user's words, or a result
    /// that shows it labelled as an id.
    pub(crate) fn id_has_source(&self, name: &str, value: &Value) -> bool {
        self.id_grounded(name, value)
    }

    /// An id is grounded when the user said it (a number, or a whole token of the user's
    /// text), or a result that succeeded shows it labelled as an id (`note_id 17`, `"id": 17`,
    /// `note 17`): a bare number in a result (a priority, a count) is not an id.
    fn id_grounded(&self, name: &str, value: &Value) -> bool {
        let text = match value {
            Value::Number(n) => {
                if n.as_f64()
                    .is_some_and(|x| self.user_id_numbers.contains(&x))
                {
                    return true;
                }
                n.to_string()
            }
            Value::String(s) => {
                let s = s.trim().to_lowercase();
                if s.is_empty() {
                    return true;
                }
                // A string id is the user's only as a whole token: `n-17` is not in "note
                // n-170", nor `o` in "one" (a cut id names another record).
                if s.parse::<f64>()
                    .is_ok_and(|x| self.user_id_numbers.contains(&x))
                    || (s.parse::<f64>().is_err()
                        && tokens_at(&self.user_text, &s).next().is_some())
                {
                    return true;
                }
                s
            }
            _ => return true,
        };
        labelled_in(&self.result_text, &name.to_lowercase(), &text)
    }

    fn number_grounded(&self, value: &Value) -> bool {
        match value {
            Value::Number(n) => n.as_f64().is_none_or(|x| self.user_numbers.contains(&x)),
            _ => true,
        }
    }
}

/// Whether `c` is part of an id wherever it stands: a letter, a digit or `_`.
fn is_id_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `c` joins the id characters on either side of it into one id (`n-170`, a uuid,
/// `17.5`); elsewhere (a sentence's full stop, a dash between words) it ends the id.
fn is_id_joiner(c: char) -> bool {
    matches!(c, '-' | '.')
}

/// Whether an id token ends where `chars` (the characters beside it, going away from it)
/// begin: at the end of the text, at a character that is no part of an id, or at a joiner
/// that joins nothing.
fn token_ends(mut chars: impl Iterator<Item = char>) -> bool {
    match chars.next() {
        None => true,
        Some(c) if is_id_char(c) => false,
        Some(c) if is_id_joiner(c) => !chars.next().is_some_and(is_id_char),
        Some(_) => true,
    }
}

/// Where `text` holds `value` as a whole token: bounded on each side by the text's end or a
/// character that cannot continue an id, so `n-17` is not found in `n-170`, nor `e29b` in a
/// uuid. The occurrences are those `str::match_indices` finds (not overlapping), so the search
/// stays linear in the text whatever the value.
fn tokens_at<'t>(text: &'t str, value: &'t str) -> impl Iterator<Item = usize> + 't {
    text.match_indices(value)
        .map(|(at, _)| at)
        .filter(move |&at| {
            !value.is_empty()
                && token_ends(text[..at].chars().rev())
                && token_ends(text[at + value.len()..].chars())
        })
}

/// The most separators (quotes, colons, equals signs, spaces, `#`) between an id's label and
/// the id.
const MAX_SEPARATORS: usize = 4;

/// How many characters of a label are read: a longer word counts as a label only by its end
/// (`..._id`), which is all that can tell an id's label from another word that long.
const MAX_LABEL: usize = 64;

/// Whether `text` holds `value` as a whole token ([`tokens_at`]) right after a label naming
/// an id: the argument's name, its stem (`note` for `note_id`), or a word ending in `id`, with
/// at most [`MAX_SEPARATORS`] quotes, colons, equals signs, spaces or `#` between. Each
/// occurrence is looked at only that far back (and [`MAX_LABEL`] characters of label), so a
/// result with many occurrences is read in time linear in its length.
fn labelled_in(text: &str, name: &str, value: &str) -> bool {
    let stem = name
        .strip_suffix("_id")
        .or_else(|| name.strip_suffix("id"))
        .unwrap_or(name);
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let is_separator = |c: char| matches!(c, ' ' | ':' | '=' | '"' | '\'' | '#');
    tokens_at(text, value).any(|at| {
        let mut back = text[..at].char_indices().rev().peekable();
        let mut separators = 0;
        while back.next_if(|&(_, c)| is_separator(c)).is_some() {
            separators += 1;
            if separators > MAX_SEPARATORS {
                return false;
            }
        }
        let label_end = back.peek().map_or(0, |&(i, c)| i + c.len_utf8());
        let mut label_start = label_end;
        let mut cut = false;
        for (n, (i, c)) in back.enumerate() {
            if !is_word(c) {
                break;
            }
            if n == MAX_LABEL {
                cut = true;
                break;
            }
            label_start = i;
        }
        let label = &text[label_start..label_end];
        !label.is_empty() && (label.ends_with("id") || !cut && (label == name || label == stem))
    })
}

/// `text` in lower case with every run of characters other than letters and digits made one
/// space, trimmed: `"Call Mom."` and `call  mom` are both `call mom`. HTML escapes of
/// punctuation are punctuation first (`Milk &#34;`, even escaped twice as `Milk &amp;#34`, is
/// `milk`): servers that constrain calls to a grammar write quotes that way.
pub(crate) fn words_of(text: &str) -> String {
    let lower = unescape_punctuation(&text.to_lowercase());
    lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// How many levels of `&amp;` [`unescape_punctuation`] undoes: text escaped twice (one
/// `&amp;`, as in `&amp;#34`) and a little more. Deeper escaping keeps its `amp` words.
const AMP_LEVELS: usize = 3;

/// `text` (lower case) with up to [`AMP_LEVELS`] levels of `&amp;` undone, then the escapes of
/// punctuation (`&#34;`, `&#x27;`, `&quot;`, `&apos;`, `&lt;`, `&gt;`, the final `;` optional)
/// made a space. Escapes of letters or digits are left alone, so no word appears that the text
/// did not hold.
fn unescape_punctuation(text: &str) -> String {
    let mut s = text.to_string();
    // A fixed number of passes, not "until none is left": `&` then `amp;` repeated k times
    // would take k passes over the whole text (quadratic, on user and model text alike).
    for _ in 0..AMP_LEVELS {
        if !s.contains("&amp;") {
            break;
        }
        s = s.replace("&amp;", "&");
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '#'))
            .unwrap_or(after.len());
        let name = &after[..name_len];
        let code = if let Some(hex) = name.strip_prefix("#x") {
            u32::from_str_radix(hex, 16).ok()
        } else if let Some(dec) = name.strip_prefix('#') {
            dec.parse::<u32>().ok()
        } else {
            match name {
                "quot" => Some(34),
                "apos" => Some(39),
                "lt" => Some(60),
                "gt" => Some(62),
                _ => None,
            }
        };
        match code.and_then(char::from_u32) {
            Some(c) if c.is_ascii_punctuation() => {
                out.push(' ');
                let skip = name_len + usize::from(after[name_len..].starts_with(';'));
                rest = &after[skip..];
            }
            _ => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The numbers in `text`: runs of digits (with one decimal point), and English number words
/// from zero to ninety-nine ("five", "forty-two", "forty two").
pub(crate) fn numbers_in(text: &str) -> Vec<f64> {
    numbers_said(text, true)
}

/// The numbers in `text` that may be ids: those of [`numbers_in`] but for the word "one"
/// standing alone, which is more often a pronoun ("the one about taxes") than a number, while
/// small models take it for id 1. In a number phrase ("twenty-one") it counts.
fn id_numbers_in(text: &str) -> Vec<f64> {
    numbers_said(text, false)
}

/// The numbers in `text` ([`numbers_in`]), the word "one" alone among them only with
/// `lone_one`.
fn numbers_said(text: &str, lone_one: bool) -> Vec<f64> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() {
            let start = i;
            // Digits inside a word (`q1`, `v2`) are part of the word, not a number said.
            let in_word = i > 0 && chars[i - 1].is_alphabetic();
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            if i + 1 < chars.len() && chars[i] == '.' && chars[i + 1].is_ascii_digit() {
                i += 1;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let s: String = chars[start..i].iter().collect();
            let word_follows = chars.get(i).is_some_and(|c| c.is_alphabetic());
            if in_word || word_follows {
                continue;
            }
            if let Ok(x) = s.parse::<f64>() {
                out.push(x);
            }
            continue;
        }
        i += 1;
    }
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .collect();
    let mut w = 0;
    while w < words.len() {
        if let Some(tens) = tens_word(words[w]) {
            match words.get(w + 1).copied().and_then(unit_word) {
                Some(unit) if unit > 0 && unit < 10 => {
                    out.push(f64::from(tens + unit));
                    w += 2;
                }
                _ => {
                    out.push(f64::from(tens));
                    w += 1;
                }
            }
            continue;
        }
        if let Some(unit) = unit_word(words[w])
            && (unit != 1 || lone_one)
        {
            out.push(f64::from(unit));
        }
        w += 1;
    }
    out
}

fn unit_word(w: &str) -> Option<u32> {
    const UNITS: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    UNITS
        .iter()
        .position(|u| *u == w)
        .and_then(|p| u32::try_from(p).ok())
}

fn tens_word(w: &str) -> Option<u32> {
    const TENS: [&str; 8] = [
        "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
    TENS.iter()
        .position(|t| *t == w)
        .and_then(|p| u32::try_from(p).ok())
        .map(|p| (p + 2) * 10)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_in_digits_and_words() {
        assert_eq!(numbers_in("note 42 to 5."), vec![42.0, 5.0]);
        assert_eq!(numbers_in("note forty-two to five"), vec![42.0, 5.0]);
        assert_eq!(numbers_in("forty two, twenty, 3.5"), vec![3.5, 42.0, 20.0]);
        assert!(numbers_in("no numbers here, someone").is_empty());
        // Digits that are part of a word are not numbers the user gave.
        assert!(numbers_in("tag it \"q1\", version v2, 3rd").is_empty());
    }

    #[test]
    fn grounds_added_message_by_message_are_the_grounds_of_the_whole() {
        let mut messages = vec![
            Message::system("sys"),
            Message::user("set note 42 to forty-two"),
        ];
        let mut so_far = Grounds::default();
        so_far.add(&messages, 0, 2);
        for (text, is_error) in [("id n-17 found", false), ("failed: n-99", true)] {
            messages.push(Message::Tool {
                call_id: "c".into(),
                name: "t".into(),
                content: text.into(),
                is_error,
            });
            messages.push(Message::user("a note from the loop: 7"));
            so_far.add(&messages, messages.len() - 2, 2);
        }
        assert_eq!(
            format!("{so_far:?}"),
            format!("{:?}", Grounds::of(&messages, 2))
        );
        assert!(so_far.id_has_source("note_id", &json!("n-17")));
        assert!(!so_far.id_has_source("note_id", &json!("n-99")));
        assert!(
            so_far
                .check(&json!({"priority": 7}), &HashMap::new())
                .is_some()
        );
    }

    fn grounds(user: &str, results: &[(&str, bool)]) -> Grounds {
        let mut messages = vec![Message::system("sys"), Message::user(user)];
        for (text, is_error) in results {
            messages.push(Message::Tool {
                call_id: "c".into(),
                name: "t".into(),
                content: (*text).into(),
                is_error: *is_error,
            });
        }
        messages.push(Message::user("a note from the loop: 99"));
        Grounds::of(&messages, 2)
    }

    #[test]
    fn ids_come_from_the_user_or_a_result_that_succeeded() {
        let none = HashMap::new();
        let g = grounds(
            "Set my Dentist note to 5",
            &[
                ("note_id 17: Dentist (priority 2)", false),
                ("There is no note with note_id 1.", true),
            ],
        );
        assert_eq!(g.check(&json!({"note_id": 17, "priority": 5}), &none), None);
        // An id that only appears in a failure, or in the loop's own note, has no source.
        let bad = g
            .check(&json!({"note_id": 1, "priority": 5}), &none)
            .unwrap();
        assert!(bad.is_id && bad.argument == "note_id" && bad.value == "1");
        assert!(
            g.check(&json!({"note_id": 99, "priority": 5}), &none)
                .is_some()
        );
        // A number a result shows as something else (a priority) is not an id.
        let g2 = grounds(
            "Set my Dentist note to 5",
            &[("note_id 17 (priority 1)", false)],
        );
        assert!(
            g2.check(&json!({"note_id": 1, "priority": 5}), &none)
                .unwrap()
                .is_id
        );
        let g3 = grounds(
            "Set it to 5",
            &[(r#"[{"id": 23, "title": "x"}, {"note": 24}]"#, false)],
        );
        assert_eq!(
            g3.check(&json!({"note_id": 23, "priority": 5}), &none),
            None
        );
        assert_eq!(
            g3.check(&json!({"note_id": 24, "priority": 5}), &none),
            None
        );
        assert!(
            g3.check(&json!({"note_id": 2, "priority": 5}), &none)
                .is_some()
        );
        // A number that only appears in a result (the old priority) has no source.
        let stale = g
            .check(&json!({"note_id": 17, "priority": 2}), &none)
            .unwrap();
        assert!(!stale.is_id && stale.argument == "priority");
        // Strings are ids only by name; text is never checked.
        assert_eq!(
            g.check(&json!({"note_id": "17", "title": "X"}), &none),
            None
        );
        let named = HashMap::from([("note".to_string(), "search".to_string())]);
        assert!(g.check(&json!({"note": 5}), &named).is_none());
        assert!(g.check(&json!({"note": 6}), &named).unwrap().is_id);
    }

    #[test]
    fn a_string_id_is_grounded_only_as_a_whole_token() {
        let none = HashMap::new();
        let id = |g: &Grounds, v: Value| g.check(&json!({"note_id": v}), &none);
        let g = grounds("Set the priority of note n-170 to 5", &[]);
        assert_eq!(id(&g, json!("n-170")), None);
        assert_eq!(id(&g, json!(" N-170 ")), None);
        // Part of the id the user gave is another id: no source.
        for cut in ["n-17", "n", "o", "-170", "n-1", "70", "0 to"] {
            assert!(id(&g, json!(cut)).is_some_and(|u| u.is_id), "{cut}");
        }
        let uuid = "550e8400-e29b-41d4-a716-446655440000";
        let g = grounds(&format!("Delete note {uuid}."), &[]);
        assert_eq!(id(&g, json!(uuid)), None);
        assert_eq!(id(&g, json!(uuid.to_uppercase())), None);
        for cut in [&uuid[..32], &uuid[..8], &uuid[9..], "e29b"] {
            assert!(id(&g, json!(cut)).is_some(), "{cut}");
        }
        // Ids at either end of the text and beside punctuation are whole.
        let g = grounds("n-17, then (n-18); n-19", &[]);
        for whole in ["n-17", "n-18", "n-19"] {
            assert_eq!(id(&g, json!(whole)), None, "{whole}");
        }
        // A result's labelled id is matched the same way.
        let g = grounds("Set it to 5", &[("note_id: n-170 (priority 2)", false)]);
        assert_eq!(id(&g, json!("n-170")), None);
        for cut in ["n", "n-17"] {
            assert!(id(&g, json!(cut)).is_some(), "{cut}");
        }
    }

    #[test]
    fn a_label_is_looked_for_only_a_few_characters_back() {
        // 200 KB of `=`: each is an occurrence of the id `=` with no label before it. Each one
        // used to trim the whole text before it, 200,000 times.
        let flood = "=".repeat(200_000);
        let g = grounds("Set it to 5", &[(&flood, false)]);
        assert!(!g.id_has_source("note_id", &json!("=")));
        // Labelled after the flood, it is found.
        let g = grounds("Set it to 5", &[(&format!("{flood} note_id: ="), false)]);
        assert!(g.id_has_source("note_id", &json!("=")));
        // A label longer than the look-back still counts by its end (`..._id`).
        let long = format!(
            "{}_id: 7 and {} 8",
            "x".repeat(100_000),
            "y".repeat(100_000)
        );
        let g = grounds("Set it to 5", &[(&long, false)]);
        assert!(g.id_has_source("note_id", &json!(7)));
        assert!(!g.id_has_source("note_id", &json!(8)));
        // Five separators are too many; four are not.
        let g = grounds("Set it to 5", &[("note_id: \"#9; id =\"'#10", false)]);
        assert!(g.id_has_source("note_id", &json!(9)));
        assert!(!g.id_has_source("note_id", &json!(10)));
    }

    #[test]
    fn the_word_one_alone_grounds_no_id() {
        let none = HashMap::new();
        let g = grounds("Set the one about taxes to priority 5", &[]);
        for v in [json!(1), json!("1")] {
            let u = g.check(&json!({"note_id": v, "priority": 5}), &none);
            assert!(u.is_some_and(|u| u.is_id && u.argument == "note_id"));
        }
        // Inside a number phrase, or as digits, it is a number the user gave.
        let g = grounds("Set note twenty-one to 5, and note 1 too", &[]);
        assert_eq!(g.check(&json!({"note_id": 21, "priority": 5}), &none), None);
        assert_eq!(g.check(&json!({"note_id": 1, "priority": 5}), &none), None);
        // As a value that is not an id, "one" is still 1.
        let g = grounds("Set note 42 to priority one", &[]);
        assert_eq!(g.check(&json!({"note_id": 42, "priority": 1}), &none), None);
    }

    #[test]
    fn nested_amp_escapes_are_undone_only_a_few_levels_deep() {
        // Escaped twice and three times: decoded.
        assert_eq!(words_of("Milk &amp;#34"), "milk");
        assert_eq!(words_of("Milk &amp;amp;#34;"), "milk");
        assert_eq!(words_of("Milk &amp;amp;amp;quot;"), "milk");
        // 200 KB of `&` then `amp;` repeated: a few passes, then the rest stays as written (it
        // used to take one pass over the whole text per `amp;`).
        let k = 50_000;
        let text = format!("&{}", "amp;".repeat(k));
        let expected = vec!["amp"; k - AMP_LEVELS].join(" ");
        assert_eq!(words_of(&text), expected);
    }

    #[test]
    fn text_must_be_the_users_whole_words_unless_composed() {
        let none = HashMap::new();
        let composed = HashSet::new();
        let schema = json!({"type": "object", "properties": {
            "note_id": {"type": "string"},
            "tag": {"type": "string"},
            "color": {"type": "string", "enum": ["red"]},
            "due": {"type": "string", "format": "date"},
            "priority": {"type": "integer"},
        }});
        let g = grounds(
            "Tag note 17 with \"Work-Urgent\".",
            &[("note_id 17 tags: health", false)],
        );
        assert_eq!(words_of("  Work-Urgent. "), "work urgent");
        assert_eq!(words_of("Milk &#34;"), "milk");
        assert_eq!(words_of("Milk &amp;#34"), "milk");
        assert_eq!(
            words_of("&quot;Work&quot; &#x27;urgent&#39;"),
            "work urgent"
        );
        // An escape of a letter, or no escape at all, stays as written.
        assert_eq!(words_of("a &#65; b & c &nbsp;"), "a 65 b c nbsp");
        for ok in ["work urgent", "WORK", "urgent!", "", "--"] {
            assert_eq!(
                g.check_text(
                    &json!({"note_id": "x", "tag": ok}),
                    &schema,
                    &none,
                    &composed
                ),
                None,
                "{ok}"
            );
        }
        // Copied from a result, part of a word, or words not side by side: no source.
        for bad in ["health", "wor", "urgent work"] {
            let u = g
                .check_text(&json!({"tag": bad}), &schema, &none, &composed)
                .unwrap();
            assert!(u.is_text && !u.is_id && u.argument == "tag", "{bad}");
        }
        // Ids, enums, formats, non-strings, undeclared and composed arguments are not checked.
        let skip = json!({"note_id": "abc", "color": "red", "due": "2026-12-03", "priority": 9, "other": "x"});
        assert_eq!(g.check_text(&skip, &schema, &none, &composed), None);
        let named = HashMap::from([("tag".to_string(), "search".to_string())]);
        assert_eq!(
            g.check_text(&json!({"tag": "health"}), &schema, &named, &composed),
            None
        );
        let composed = HashSet::from(["tag".to_string()]);
        assert_eq!(
            g.check_text(&json!({"tag": "health"}), &schema, &none, &composed),
            None
        );
    }

    #[test]
    fn a_write_is_requested_when_it_carries_a_new_value_from_the_user() {
        let none = HashSet::new();
        let g = grounds(
            "Tag note 63 with both work and urgent",
            &[("note_id 63 tags: health; note_id 17", false)],
        );
        let first = json!({"note_id": 63, "tag": "work"});
        assert_eq!(
            g.user_values(&first, &none),
            HashSet::from(["n:63".to_string(), "t:work".to_string()])
        );
        let used = g.user_values(&first, &none);
        assert_eq!(
            g.new_user_values(&json!({"note_id": 63, "tag": "urgent"}), &used, &none),
            1
        );
        assert_eq!(
            g.new_user_values(
                &json!({"note_id": "63", "tag": ["work", "urgent"]}),
                &used,
                &none
            ),
            1
        );
        // Values from a result (an id, a tag) and the user's values again: nothing new.
        assert_eq!(
            g.new_user_values(&json!({"note_id": 17, "tag": "work"}), &used, &none),
            0
        );
        assert_eq!(
            g.new_user_values(&json!({"note_id": 63, "tag": "health"}), &used, &none),
            0
        );
        // Composed arguments are not the user's values.
        let skip = HashSet::from(["tag".to_string()]);
        assert_eq!(
            g.new_user_values(&json!({"note_id": 63, "tag": "urgent"}), &used, &skip),
            0
        );
    }
}
