//! A line-based Server-Sent Events parser for provider streams.
//!
//! OpenAI-compatible servers and Anthropic stream their replies as `text/event-stream`. This is
//! the small part of the SSE format those streams use, fed one line at a time (the caller splits
//! lines and strips `\r\n` or `\n`): `event:` and `data:` fields (several `data:` lines join with
//! `\n`), `id:` and `retry:` read and ignored, comments (`:` lines, used for keep-alives) skipped,
//! and a blank line dispatching the event. This is a provider stream, not the MCP wire.

/// The error a stream ends with when one event's data passed its parser's bound.
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) fn event_too_large(parser: &SseParser) -> kberg_agent::ProviderError {
    kberg_agent::ProviderError::TooLarge {
        what: "streamed event",
        limit: parser.max_data(),
    }
}

/// What a provider's streamed reply does with each of its events.
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) trait SseReply: Send + 'static {
    /// Decodes one event's data.
    fn event(
        &mut self,
        data: &str,
        out: &mut Vec<kberg_agent::ChatDelta>,
    ) -> Result<(), kberg_agent::ProviderError>;

    /// When the body ends: `None` when the reply is complete, otherwise what it lacks (the
    /// stream then ends as truncated).
    fn missing_end(&self) -> Option<&'static str>;

    /// Decodes a body that is one JSON value, not events: the server answered the streamed
    /// request as a whole reply (one that does not stream, or an error object under a 200).
    /// A reply read here is complete.
    fn whole(
        &mut self,
        reply: &serde_json::Value,
        out: &mut Vec<kberg_agent::ChatDelta>,
    ) -> Result<(), kberg_agent::ProviderError>;
}

/// The line decoder of a provider's SSE reply: assembles events from lines, bounded, and hands
/// each to the reply. A body that is one JSON value instead (a server that does not stream,
/// an error object under a 200) is read whole, within the same bound, and handed to the
/// reply as such, so its answer or its error is not lost as a stream that ended early.
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) struct SseDecoder<R> {
    sse: SseParser,
    pub(crate) reply: R,
    /// A line other than an empty one was read.
    begun: bool,
    /// The body is one JSON value, not events (its first line opens an object, which no
    /// event line does): its text so far, read whole and decoded at its end.
    json: Option<String>,
}

#[cfg(any(feature = "openai", feature = "anthropic"))]
impl<R: SseReply> SseDecoder<R> {
    /// A decoder whose events join at most `max_data` bytes (one event holds at most what a
    /// whole non-streamed reply may).
    pub(crate) fn new(max_data: usize, reply: R) -> Self {
        Self {
            sse: SseParser::with_max_data(max_data),
            reply,
            begun: false,
            json: None,
        }
    }
}

#[cfg(any(feature = "openai", feature = "anthropic"))]
impl<R: SseReply> crate::http::LineDecoder for SseDecoder<R> {
    fn line(
        &mut self,
        line: &str,
        out: &mut Vec<kberg_agent::ChatDelta>,
    ) -> Result<(), kberg_agent::ProviderError> {
        if !self.begun && !line.is_empty() {
            self.begun = true;
            if line.trim_start().starts_with('{') {
                self.json = Some(String::new());
            }
        }
        if let Some(json) = &mut self.json {
            if json.len() + line.len() + 1 > self.sse.max_data() {
                return Err(event_too_large(&self.sse));
            }
            json.push_str(line);
            json.push('\n');
            return Ok(());
        }
        let event = self.sse.line(line);
        if self.sse.overflowed() {
            return Err(event_too_large(&self.sse));
        }
        match event {
            Some(ev) => self.reply.event(&ev.data, out),
            None => Ok(()),
        }
    }

    fn complete(&self) -> bool {
        self.reply.missing_end().is_none()
    }

    fn end(
        &mut self,
        out: &mut Vec<kberg_agent::ChatDelta>,
    ) -> Result<(), kberg_agent::ProviderError> {
        if let Some(json) = self.json.take() {
            let v: serde_json::Value = serde_json::from_str(&json).map_err(|e| {
                kberg_agent::ProviderError::malformed(format!(
                    "the stream is neither events nor one JSON reply ({e}): {json}"
                ))
            })?;
            self.reply.whole(&v, out)?;
        }
        if let Some(ev) = self.sse.flush() {
            self.reply.event(&ev.data, out)?;
        }
        match self.reply.missing_end() {
            None => Ok(()),
            Some(what) => Err(kberg_agent::ProviderError::Truncated {
                detail: format!("the stream ended without {what}"),
            }),
        }
    }
}

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the event had one.
    pub event: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// Assembles events from lines.
#[derive(Debug)]
pub struct SseParser {
    event: Option<String>,
    data: String,
    has_data: bool,
    /// The most bytes of `data:` one event may join.
    max_data: usize,
    /// An event's data passed `max_data`: what came after was dropped.
    overflowed: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self {
            event: None,
            data: String::new(),
            has_data: false,
            max_data: usize::MAX,
            overflowed: false,
        }
    }
}

impl SseParser {
    /// A parser with no event in progress and no bound on an event's data.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser whose events join at most `max` bytes of `data:` lines: a server that sends
    /// data lines without ever ending the event (no blank line) cannot grow it without bound.
    /// Past the bound the rest is dropped and [`overflowed`](Self::overflowed) says so.
    pub fn with_max_data(max: usize) -> Self {
        Self {
            max_data: max,
            ..Self::default()
        }
    }

    /// Whether an event's data passed the bound of [`with_max_data`](Self::with_max_data).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The bound of [`with_max_data`](Self::with_max_data).
    pub fn max_data(&self) -> usize {
        self.max_data
    }

    /// Feeds one line (without its end-of-line). Returns an event when the line completes one.
    pub fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                if self.data.len() + value.len() + 1 > self.max_data {
                    self.overflowed = true;
                    return None;
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` matter to reconnecting browsers, not to a one-shot reply.
            _ => {}
        }
        None
    }

    /// Dispatches an event still in progress when the stream ends without a blank line.
    pub fn flush(&mut self) -> Option<SseEvent> {
        self.dispatch()
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        if !self.has_data {
            // Per the format an event without data is not dispatched.
            self.event = None;
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event: self.event.take(),
            data: std::mem::take(&mut self.data),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_that_never_ends_is_bounded() {
        let mut p = SseParser::with_max_data(32);
        for _ in 0..10 {
            assert_eq!(p.line("data: 0123456789"), None);
        }
        assert!(p.overflowed());
        let ev = p.line("").expect("what fitted is dispatched");
        assert!(ev.data.len() <= 32, "{}", ev.data);
        assert!(!SseParser::new().overflowed());
    }

    fn parse(text: &str) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out: Vec<SseEvent> = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .filter_map(|l| p.line(l))
            .collect();
        out.extend(p.flush());
        out
    }

    #[test]
    fn events_fields_and_comments() {
        let evs = parse(
            ": keep-alive\r\nevent: message_start\r\ndata: {\"a\":1}\r\n\r\ndata: one\ndata: two\nid: 7\nretry: 100\n\ndata:tight\n\n",
        );
        assert_eq!(evs.len(), 3);
        assert_eq!(evs[0].event.as_deref(), Some("message_start"));
        assert_eq!(evs[0].data, "{\"a\":1}");
        assert_eq!(evs[1].event, None);
        assert_eq!(evs[1].data, "one\ntwo");
        assert_eq!(evs[2].data, "tight");
    }

    #[test]
    fn event_without_data_is_dropped_and_unterminated_is_flushed() {
        let evs = parse("event: ping\n\ndata: last");
        assert_eq!(evs.len(), 1);
        assert_eq!(
            evs[0].event, None,
            "the ping's name must not leak into the next event"
        );
        assert_eq!(evs[0].data, "last");
    }

    #[test]
    fn field_without_colon_and_empty_data() {
        let evs = parse("data\n\ndata:\n\n");
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].data, "");
        assert_eq!(evs[1].data, "");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_lines_never_panic(lines in proptest::collection::vec(".{0,40}", 0..30)) {
            let mut p = SseParser::new();
            for l in &lines {
                let _ = p.line(l);
            }
            let _ = p.flush();
        }
    }
}
