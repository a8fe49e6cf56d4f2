//! What becomes of a child-process upstream's standard error.
//!
//! A child inheriting the gateway's stderr writes around the gateway's own log: unstructured,
//! unattributed, and (with a server that prints its configuration or headers at start) possibly
//! carrying the credential the aggregator put in its environment. By default the aggregator
//! pipes it instead and turns each line into a `tracing` event under the target
//! [`STDERR_TARGET`], with the upstream's namespace, after replacing every credential that
//! occurs in it with `[redacted]`: the values of the child's configured environment, or those
//! configured to be redacted (a value of several lines, such as a PEM key, line by line). That
//! is the same list, computed once per upstream, that the client relay cleans the child's log
//! messages, progress messages and requests of (see `aggregate::redact`). Lines are cut at
//! [`MAX_STDERR_LINE`] bytes, so a child writing without newlines cannot grow the buffer.
//! Each line is logged quoted and escaped (`Debug`), as all outside text the crate logs: a CR,
//! ESC, line separator or bidirectional control in it cannot forge or rewrite a log line.

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr as ProcessStderr;

use super::redact::{REDACTED, Redactions, encodable, encoded_tail};

/// The `tracing` target of a child's stderr lines.
pub const STDERR_TARGET: &str = "kberg_server::aggregate::child_stderr";

/// The longest stderr line logged; the rest of a longer line is dropped (and counted).
pub const MAX_STDERR_LINE: usize = 4096;

/// What the aggregator does with a child-process upstream's standard error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChildStderr {
    /// Each line becomes a `tracing` INFO event under [`STDERR_TARGET`], with the configured
    /// environment's values redacted (the default).
    #[default]
    Log,
    /// The child writes to the aggregator's own stderr, unfiltered.
    Inherit,
    /// The child's stderr goes nowhere.
    Discard,
}

impl ChildStderr {
    pub(super) fn stdio(self) -> std::process::Stdio {
        match self {
            ChildStderr::Log => std::process::Stdio::piped(),
            ChildStderr::Inherit => std::process::Stdio::inherit(),
            ChildStderr::Discard => std::process::Stdio::null(),
        }
    }
}

/// One stderr line, as logged: lossy UTF-8, trailing whitespace trimmed, secrets redacted.
#[cfg(test)]
pub(super) fn clean_line(raw: &[u8], redact: &Redactions) -> String {
    cleaned(raw, redact).0
}

/// [`clean_line`]'s line, and whether anything was redacted from it.
fn cleaned(raw: &[u8], redact: &Redactions) -> (String, bool) {
    let line = String::from_utf8_lossy(raw);
    match redact.text(line.trim_end()) {
        std::borrow::Cow::Borrowed(kept) => (kept.to_string(), false),
        std::borrow::Cow::Owned(redacted) => (redacted, true),
    }
}

/// Reads `stderr` to its end, logging each line for `namespace`. Ends when the child closes it.
pub(super) async fn drain(namespace: String, stderr: ProcessStderr, redact: Redactions) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::with_capacity(256);
    let mut dropped = 0usize;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(chunk) => chunk,
        };
        let (take, ends) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = MAX_STDERR_LINE.saturating_sub(line.len());
        let kept = take.min(room);
        line.extend_from_slice(&chunk[..kept]);
        dropped += take - kept;
        reader.consume(take);
        if ends {
            emit(&namespace, &line, dropped, &redact);
            line.clear();
            dropped = 0;
        }
    }
    if !line.is_empty() {
        emit(&namespace, &line, dropped, &redact);
    }
}

/// The kept start of a line cut at [`MAX_STDERR_LINE`]: if it ends with the beginning of a
/// value to redact (a secret the cut went through), that beginning is cut off too and marked,
/// so no part of the secret is logged.
fn cut_tail(raw: &[u8], redact: &Redactions) -> Vec<u8> {
    let straddled = redact
        .values()
        .iter()
        // A value of several lines never ends a line; its lines are in the list on their own.
        .filter(|v| !v.contains(['\n', '\r']))
        .filter_map(|v| {
            // A value some encoder writes differently may be cut inside any mix of its forms
            // (`%2F`, `\/`), even inside one escape.
            if encodable(v) {
                return encoded_tail(raw, v.as_bytes());
            }
            let v = v.as_bytes();
            (1..v.len().min(raw.len() + 1))
                .rev()
                .find(|&k| raw.ends_with(&v[..k]))
        })
        .max();
    match straddled {
        Some(k) => {
            let mut kept = raw[..raw.len() - k].to_vec();
            kept.extend_from_slice(REDACTED.as_bytes());
            kept
        }
        None => raw.to_vec(),
    }
}

fn emit(namespace: &str, raw: &[u8], dropped: usize, redact: &Redactions) {
    let kept = if dropped > 0 {
        std::borrow::Cow::Owned(cut_tail(raw, redact))
    } else {
        std::borrow::Cow::Borrowed(raw)
    };
    let (line, hidden) = cleaned(&kept, redact);
    // A secret the cut went through counts too.
    if hidden || *kept != *raw {
        redact.said(namespace, "its stderr");
    }
    if line.is_empty() {
        return;
    }
    if dropped > 0 {
        tracing::info!(target: STDERR_TARGET, upstream = namespace, dropped_bytes = dropped, "{line:?}");
    } else {
        tracing::info!(target: STDERR_TARGET, upstream = namespace, "{line:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::super::redact::MIN_REDACTED_LEN;
    use super::*;

    #[test]
    fn configured_values_are_redacted_and_switches_are_not() {
        let env = vec![
            ("TOKEN".to_string(), "s3cret-token-value".to_string()),
            ("LEVEL".to_string(), "debug".to_string()),
        ];
        let redact = Redactions::stdio(None, &env);
        assert_eq!(redact.values(), ["s3cret-token-value"]);
        let line = clean_line(
            b"debug: Authorization: Bearer s3cret-token-value\r\n",
            &redact,
        );
        assert_eq!(line, "debug: Authorization: Bearer [redacted]");
    }

    #[test]
    fn a_value_containing_another_is_replaced_whole() {
        let env = vec![
            ("A".to_string(), "abcdef".to_string()),
            ("B".to_string(), "abcdefghij".to_string()),
        ];
        let redact = Redactions::stdio(None, &env);
        assert_eq!(clean_line(b"x abcdefghij y", &redact), "x [redacted] y");
    }

    #[test]
    fn configured_values_replace_the_environment_and_short_ones_count() {
        let env = vec![("URL".to_string(), "http://127.0.0.1:3000".to_string())];
        let redact = Redactions::stdio(Some(&["tok".to_string(), String::new()]), &env);
        assert_eq!(redact.values(), ["tok"]);
        assert_eq!(
            clean_line(b"GET http://127.0.0.1:3000 with tok", &redact),
            "GET http://127.0.0.1:3000 with [redacted]"
        );
    }

    #[test]
    fn a_secret_the_line_cut_went_through_is_not_logged_in_part() {
        let redact = Redactions::stdio(Some(&["s3cret-token-value".to_string()]), &[]);
        let mut raw = vec![b'x'; MAX_STDERR_LINE - 6];
        raw.extend_from_slice(b"s3cret");
        let kept = cut_tail(&raw, &redact);
        assert!(kept.ends_with(b"x[redacted]"));
        assert!(!String::from_utf8_lossy(&kept).contains("s3cret"));
        // A line that ends with no beginning of a secret is kept as it is.
        assert_eq!(cut_tail(b"plain line", &redact), b"plain line".to_vec());
    }

    #[test]
    fn a_secret_cut_inside_its_encoded_form_is_not_logged_in_part() {
        let redact = Redactions::stdio(Some(&["ab/cd+ef=gh".to_string()]), &[]);
        for tail in [
            &b"ab%2Fcd%2"[..],
            b"ab%2fcd+e",
            b"ab\\/c",
            b"ab\\u002",
            b"ab\\",
            b"ab%",
            b"a",
        ] {
            let mut raw = b"token=".to_vec();
            raw.extend_from_slice(tail);
            let kept = cut_tail(&raw, &redact);
            assert_eq!(
                kept,
                b"token=[redacted]".to_vec(),
                "{}",
                String::from_utf8_lossy(tail)
            );
        }
        // An end that begins no form of the value is kept as it is, as is a whole occurrence
        // (the line's own redaction replaces that).
        for raw in [
            &b"token=ab%3"[..],
            b"token=ab\\x",
            b"token=ab%2Fcd%2Bef%3Dgh",
        ] {
            assert_eq!(cut_tail(raw, &redact), raw.to_vec());
        }
    }

    #[test]
    fn a_value_of_several_lines_is_redacted_line_by_line() {
        let pem = "-----BEGIN PRIVATE KEY-----\r\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n  c2VjcmV0LWxpbmU=\nab==\n-----END PRIVATE KEY-----\n";
        let env = vec![("KEY".to_string(), pem.to_string())];
        for redact in [
            Redactions::stdio(None, &env),
            Redactions::stdio(Some(&[pem.to_string()]), &[]),
        ] {
            for line in pem.lines() {
                let logged = clean_line(format!("key: {line}\n").as_bytes(), &redact);
                let part = line.trim();
                if part.len() >= MIN_REDACTED_LEN {
                    assert!(
                        logged.ends_with("[redacted]") && !logged.contains(part),
                        "{logged}"
                    );
                } else {
                    // A line too short to tell from ordinary text is left.
                    assert_eq!(logged, format!("key: {part}"));
                }
            }
        }
    }

    #[test]
    fn invalid_utf8_is_kept_lossily() {
        assert_eq!(
            clean_line(b"bad \xff byte\n", &Redactions::default()),
            "bad \u{fffd} byte"
        );
    }
}
