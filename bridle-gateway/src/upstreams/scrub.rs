//! Scrubbing an injected credential out of what an upstream answers.
//!
//! Some upstreams relay their backend's error bodies verbatim, and some backends echo the
//! token they rejected (Gitea: `access token does not exist [sha: <the token>]`). The gateway
//! knows the exact value it injected into the connection, so before a result reaches an agent
//! every text block and every string of the structured content is searched for it and the value
//! replaced with `[redacted]`. This is a last line of defence, not a licence to log secrets: the
//! credential never enters a log line or an audit entry in the first place.

use kberg_core::{Content, ToolOutput};
use serde_json::Value;

/// What a scrubbed value becomes.
pub const REDACTED: &str = "[redacted]";

/// Replaces every occurrence of `secret` in `out`; returns whether anything was replaced.
pub fn scrub_output(out: &mut ToolOutput, secret: &str) -> bool {
    if secret.is_empty() {
        return false;
    }
    let mut hit = false;
    for block in &mut out.content {
        if let Content::Text(text) = block
            && text.contains(secret)
        {
            *text = text.replace(secret, REDACTED);
            hit = true;
        }
    }
    if let Some(v) = &mut out.structured {
        hit |= scrub_value(v, secret);
    }
    hit
}

fn scrub_value(v: &mut Value, secret: &str) -> bool {
    match v {
        Value::String(s) if s.contains(secret) => {
            *s = s.replace(secret, REDACTED);
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |hit, item| scrub_value(item, secret) | hit),
        Value::Object(map) => map
            .values_mut()
            .fold(false, |hit, item| scrub_value(item, secret) | hit),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_secret_is_replaced_everywhere() {
        let mut out = ToolOutput::text("access token does not exist [sha: s3cr3t]")
            .with_structured(json!({"message": "s3cr3t", "list": ["a", "x s3cr3t x"], "n": 1}));
        assert!(scrub_output(&mut out, "s3cr3t"));
        assert_eq!(
            out.all_text(),
            "access token does not exist [sha: [redacted]]"
        );
        assert_eq!(
            out.structured,
            Some(json!({"message": "[redacted]", "list": ["a", "x [redacted] x"], "n": 1}))
        );
        assert!(!scrub_output(&mut out, "s3cr3t"));
        assert!(!scrub_output(&mut out, ""));
    }
}
