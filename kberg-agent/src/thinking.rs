//! A reasoning model's thinking, told apart from its answer.
//!
//! Reasoning models (DeepSeek-R1 and its distills, Qwen3, QwQ, Phi-4-reasoning) think before
//! they answer, inside `<think>` ... `</think>`. A server with a reasoning parser hands the
//! thinking on apart from the answer (Ollama's `thinking`, llama.cpp's `reasoning_content`);
//! one without (vLLM without `--reasoning-parser`, llama-cpp-python, older builds) leaves it in
//! the text, and some chat templates open the block themselves, so the text starts inside it
//! and only the closing tag shows. Left in the text, the thinking would be the user's answer,
//! sent back with every later turn, and searched for calls written as text: a call the model
//! only considered there would run.
//!
//! [`split`] takes a turn's whole text apart; [`ThinkingFilter`] does the same piece by piece
//! for a stream, so that an app shows the answer as it comes. A stream cannot know that text
//! was thinking until a closing tag without an opening one arrives, so such text is passed on
//! as answer as it comes; the turn's whole text is still split at its end.

/// The tags a thinking block opens and closes with.
const TAGS: &[(&str, &str)] = &[("<think>", "</think>"), ("<thinking>", "</thinking>")];

/// A turn's text taken apart: what the model thought, and what it answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Split {
    /// The thinking, without its tags (blocks joined by a newline).
    pub thinking: String,
    /// The rest of the text, trimmed at its start where a block was taken out.
    pub answer: String,
}

/// Takes `text` apart: every `<think>` ... `</think>` block (or `<thinking>`) is thinking, as is
/// everything before a closing tag that no opening tag precedes (a template opened the block),
/// and after an opening tag never closed (the turn ended while the model thought). `None` when
/// the text holds no tag.
pub(crate) fn split(text: &str) -> Option<Split> {
    if !TAGS
        .iter()
        .any(|(open, close)| text.contains(open) || text.contains(close))
    {
        return None;
    }
    let mut out = Split::default();
    let mut rest = text;
    let mut first = true;
    loop {
        let next_open = TAGS
            .iter()
            .filter_map(|(open, close)| rest.find(open).map(|at| (at, *open, *close)))
            .min_by_key(|(at, ..)| *at);
        let next_close = TAGS
            .iter()
            .filter_map(|(_, close)| rest.find(close).map(|at| (at, *close)))
            .min_by_key(|(at, _)| *at);
        match (next_open, next_close) {
            // A closing tag before any opening one, at the start: the template opened it.
            (open, Some((at, close))) if first && open.is_none_or(|(o, ..)| o > at) => {
                push_thinking(&mut out.thinking, &rest[..at]);
                rest = &rest[at + close.len()..];
            }
            (Some((at, open, close)), _) => {
                out.answer.push_str(&rest[..at]);
                let inside = &rest[at + open.len()..];
                match inside.find(close) {
                    Some(end) => {
                        push_thinking(&mut out.thinking, &inside[..end]);
                        rest = &inside[end + close.len()..];
                    }
                    None => {
                        push_thinking(&mut out.thinking, inside);
                        rest = "";
                    }
                }
            }
            _ => {
                out.answer.push_str(rest);
                break;
            }
        }
        first = false;
    }
    out.answer = out.answer.trim().to_string();
    Some(out)
}

fn push_thinking(thinking: &mut String, block: &str) {
    let block = block.trim();
    if block.is_empty() {
        return;
    }
    if !thinking.is_empty() {
        thinking.push('\n');
    }
    thinking.push_str(block);
}

/// One piece of a streamed turn's text, as answer or thinking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text of the answer.
    Answer(String),
    /// Text of the thinking.
    Thinking(String),
}

/// Splits a stream's text pieces into answer and thinking as they arrive, a tag split across
/// pieces included (the start of a possible tag is held back until the next piece tells).
#[derive(Debug, Default)]
pub(crate) struct ThinkingFilter {
    /// Inside a block: the tag that closes it.
    inside: Option<&'static str>,
    /// Text held back because it may be the start of a tag.
    held: String,
    /// A block closed and no answer text came since: whitespace is not passed on yet (the
    /// answer starts after the blank lines that follow the block, as [`split`] trims it).
    after_block: bool,
}

impl ThinkingFilter {
    /// The pieces `text` makes, in order.
    pub(crate) fn feed(&mut self, text: &str) -> Vec<Piece> {
        let mut buffer = std::mem::take(&mut self.held);
        buffer.push_str(text);
        let mut out = Vec::new();
        let mut rest = buffer.as_str();
        loop {
            let wanted: Vec<(&'static str, Option<&'static str>)> = match self.inside {
                Some(close) => vec![(close, None)],
                None => TAGS
                    .iter()
                    .map(|(open, close)| (*open, Some(*close)))
                    .collect(),
            };
            let found = wanted
                .iter()
                .filter_map(|(tag, then)| rest.find(tag).map(|at| (at, *tag, *then)))
                .min_by_key(|(at, ..)| *at);
            match found {
                Some((at, tag, then)) => {
                    self.emit(&mut out, &rest[..at]);
                    rest = &rest[at + tag.len()..];
                    self.after_block = self.inside.is_some();
                    self.inside = then;
                }
                None => {
                    // Hold back a tail that may be the start of a tag.
                    let keep = wanted
                        .iter()
                        .map(|(tag, _)| partial_tag_at_end(rest, tag))
                        .max()
                        .unwrap_or(0);
                    let (now, later) = rest.split_at(rest.len() - keep);
                    self.emit(&mut out, now);
                    self.held = later.to_string();
                    break;
                }
            }
        }
        out
    }

    /// What is left at the stream's end.
    pub(crate) fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        let held = std::mem::take(&mut self.held);
        self.emit(&mut out, &held);
        out
    }

    fn emit(&mut self, out: &mut Vec<Piece>, text: &str) {
        let text = if self.inside.is_none() && self.after_block {
            let answer = text.trim_start();
            self.after_block = answer.is_empty();
            answer
        } else {
            text
        };
        if text.is_empty() {
            return;
        }
        out.push(if self.inside.is_some() {
            Piece::Thinking(text.to_string())
        } else {
            Piece::Answer(text.to_string())
        });
    }
}

/// How many bytes at the end of `text` are the start of `tag` (0 when none).
fn partial_tag_at_end(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| text.ends_with(&tag[..n]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_of(text: &str) -> (String, String) {
        let s = split(text).unwrap_or(Split {
            thinking: String::new(),
            answer: text.to_string(),
        });
        (s.thinking, s.answer)
    }

    #[test]
    fn blocks_are_thinking_and_the_rest_the_answer() {
        assert_eq!(
            split_of("<think>\nmaybe x\n</think>\n\nThe answer."),
            ("maybe x".into(), "The answer.".into())
        );
        assert_eq!(
            split_of("<thinking>a</thinking>b<think>c</think> d"),
            ("a\nc".into(), "b d".into())
        );
        // Opened by the template.
        assert_eq!(
            split_of("I consider it.\n</think>\nYes."),
            ("I consider it.".into(), "Yes.".into())
        );
        // Cut off while thinking.
        assert_eq!(
            split_of("<think>still thinking about"),
            ("still thinking about".into(), String::new())
        );
        // An empty block.
        assert_eq!(
            split_of("<think>\n\n</think>\n\nHi."),
            (String::new(), "Hi.".into())
        );
        assert_eq!(split("No tags here."), None);
        // A closing tag later in the answer, after a block, is left as text.
        assert_eq!(
            split_of("<think>t</think>Use </think> to close."),
            ("t".into(), "Use </think> to close.".into())
        );
    }

    fn streamed(pieces: &[&str]) -> (String, String) {
        let mut f = ThinkingFilter::default();
        let mut all: Vec<Piece> = pieces.iter().flat_map(|p| f.feed(p)).collect();
        all.extend(f.finish());
        let mut thinking = String::new();
        let mut answer = String::new();
        for p in all {
            match p {
                Piece::Thinking(t) => thinking.push_str(&t),
                Piece::Answer(a) => answer.push_str(&a),
            }
        }
        (thinking, answer)
    }

    proptest::proptest! {
        /// Any text, cut anywhere (multi-byte characters and tag fragments included): neither
        /// side panics, and the stream's pieces are the same however the text is cut.
        #[test]
        fn the_pieces_do_not_depend_on_the_cuts(
            text in "(<think>|</think>|<thinking>|</thinking>|<thi|</|<|>|é|x| |\n){0,24}",
            cuts in proptest::collection::vec(0usize..64, 0..6),
        ) {
            let _ = split(&text);
            let mut at: Vec<usize> = cuts
                .into_iter()
                .map(|c| c % (text.len() + 1))
                .filter(|&c| text.is_char_boundary(c))
                .collect();
            at.sort_unstable();
            let mut pieces = Vec::new();
            let mut from = 0;
            for c in at {
                pieces.push(&text[from..c]);
                from = c;
            }
            pieces.push(&text[from..]);
            proptest::prop_assert_eq!(streamed(&pieces), streamed(&[text.as_str()]));
        }
    }

    #[test]
    fn a_stream_is_split_whatever_its_pieces() {
        let text = "<think>weigh a and b</think>\n\nThe answer is a.";
        // Every way of cutting the text in two and in single characters.
        for cut in 0..=text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(
                streamed(&[a, b]),
                ("weigh a and b".into(), "The answer is a.".into()),
                "{cut}"
            );
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(
            streamed(&pieces),
            ("weigh a and b".into(), "The answer is a.".into())
        );
        // A `<` that starts no tag is passed on once the stream tells.
        assert_eq!(streamed(&["a <", "b"]), (String::new(), "a <b".into()));
        assert_eq!(streamed(&["x <thi"]), (String::new(), "x <thi".into()));
        // Unclosed.
        assert_eq!(
            streamed(&["<think>on and ", "on"]),
            ("on and on".into(), String::new())
        );
    }
}
