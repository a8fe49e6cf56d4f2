//! The control-character scenarios every provider runs: a server's words quoted in an error
//! (an error answer, an in-stream error, a line that is not the documented shape) reach the
//! caller and the log with their control characters escaped, so an application printing the
//! error cannot be made to colour, rewrite or reorder its terminal or log lines by a hostile
//! endpoint.

use kberg_agent::ProviderError;
use kberg_testkit::scripted::{Reply, ScriptedServer};

use super::MakeProvider;
use super::credentials::{failed_turn, this_threads_log};

/// What a hostile server writes: a colour escape, a carriage return and a newline that forge a
/// line of their own, a NUL, and bidirectional overrides that reverse what follows.
pub const HOSTILE: &str = "boom \u{1b}[31mred\u{1b}[0m\r\nforged: all good\0 \u{202e}desrever\u{202c} \u{2066}iso\u{2069} end";

/// Whether `c` may reach a terminal as it is: ordinary text, a newline, a tab.
fn shown_as_is(c: char) -> bool {
    !(c.is_control() && c != '\n' && c != '\t'
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
}

/// Fails naming `what` when `text` holds a control character other than a newline or a tab.
pub fn assert_escaped(what: &str, text: &str) {
    let raw: Vec<char> = text.chars().filter(|c| !shown_as_is(*c)).collect();
    assert!(
        raw.is_empty(),
        "{what} holds control characters {raw:?}: {text:?}"
    );
}

fn assert_quoted_escaped(e: &ProviderError) {
    let text = e.to_string();
    assert_escaped("the error", &text);
    // The words are still there, the controls readable as escapes, the newline kept.
    for shown in [
        "boom \\u{1b}[31mred\\u{1b}[0m\\r\nforged: all good\\u{0} \\u{202e}desrever\\u{202c}",
        "\\u{2066}iso\\u{2069} end",
    ] {
        assert!(text.contains(shown), "{text:?}");
    }
}

/// [`HOSTILE`] as a JSON error answer.
pub fn hostile_json() -> String {
    serde_json::json!({"error": {"message": HOSTILE, "type": "invalid_request_error"}}).to_string()
}

/// 400, 401, 404 and 500 answers carrying [`HOSTILE`] (as JSON to a non-streamed turn, as text
/// to a streamed one), then `in_band` (200 replies quoting it, answered to `stream` turns in
/// order; each carries it inside JSON, as a server's error does): every error quotes it escaped, and the log at DEBUG holds no raw control
/// character. `make` builds the provider without retries.
pub async fn scenario_controls_are_escaped(make: MakeProvider<'_>, in_band: Vec<(Reply, bool)>) {
    let mut replies = Vec::new();
    let mut streams = Vec::new();
    for status in [400, 401, 404, 500] {
        let mut json = Reply::json(status, &serde_json::json!({}));
        json.chunks = vec![(std::time::Duration::ZERO, hostile_json())];
        let mut text = Reply::stream("text/plain", vec![HOSTILE.to_string()]);
        text.status = status;
        replies.extend([json, text]);
        streams.extend([false, true]);
    }
    for (reply, stream) in in_band {
        replies.push(reply);
        streams.push(stream);
    }
    let server = ScriptedServer::start(replies).await;
    let p = make(server.url());
    let (logs, _logging) = this_threads_log();
    for stream in streams {
        let e = failed_turn(p.as_ref(), stream).await;
        assert_quoted_escaped(&e);
    }
    let log = logs.text();
    assert!(log.contains("boom"), "the error answers are logged: {log}");
    assert_escaped("the log", &log);
    // The newline kept in the error's words is escaped in the log: no line of the server's.
    assert!(
        !log.lines().any(|l| l.starts_with("forged")),
        "a server's words started a log line: {log}"
    );

    // A body of nothing but controls is cut between two escapes, never inside one, at the
    // bound of 300 characters an error answer's words are cut at.
    let mut controls = Reply::stream("text/plain", vec!["\u{1b}".repeat(10_000)]);
    controls.status = 400;
    let server = ScriptedServer::start(vec![controls]).await;
    let e = failed_turn(make(server.url()).as_ref(), false).await;
    let text = e.to_string();
    assert_escaped("the error", &text);
    let escape = "\\u{1b}";
    assert!(
        text.contains(&format!("{}...", escape.repeat(50))),
        "{text}"
    );
    assert!(!text.contains(&escape.repeat(51)), "{text}");
}
