//! Canonical JSON and argument digests.
//!
//! Two primitives need to say "the same arguments" without keeping the arguments: a commit token
//! is bound to the digest of what was previewed, and the audit log records a digest of every
//! call's arguments instead of the values. Both need one spelling of a JSON value, so that key
//! order or whitespace never makes equal arguments look different: object keys sorted by their
//! UTF-8 bytes, no whitespace, strings and numbers as `serde_json` writes them. That is stable
//! for the values a tool call carries (it is not a full RFC 8785 implementation: numbers keep
//! `serde_json`'s spelling).
//!
//! The audit digest is taken after [redaction](redact): fields a tool declares sensitive are
//! replaced by a fixed marker first, so a low-entropy secret (a PIN, a password) cannot be
//! recovered from the log by guessing values and hashing them.

use std::io::{self, Write};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// What a redacted field's value is replaced by.
pub const REDACTED: &str = "[redacted]";

/// The canonical spelling of `value`: keys sorted, no whitespace.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out).expect("writing to a Vec cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Writes the canonical spelling of `value` to `w` without building it in memory first.
fn write_canonical<W: Write>(value: &Value, w: &mut W) -> io::Result<()> {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            w.write_all(b"{")?;
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    w.write_all(b",")?;
                }
                serde_json::to_writer(&mut *w, k)?;
                w.write_all(b":")?;
                write_canonical(v, w)?;
            }
            w.write_all(b"}")
        }
        Value::Array(items) => {
            w.write_all(b"[")?;
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    w.write_all(b",")?;
                }
                write_canonical(v, w)?;
            }
            w.write_all(b"]")
        }
        scalar => Ok(serde_json::to_writer(&mut *w, scalar)?),
    }
}

/// Feeds written bytes into a SHA-256.
struct Hasher(Sha256);

impl Write for Hasher {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    s
}

/// Lower-case hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex SHA-256 of the canonical JSON of `value`, hashed as it is written.
pub(crate) fn canonical_digest(value: &Value) -> String {
    let mut h = Hasher(Sha256::new());
    write_canonical(value, &mut h).expect("hashing cannot fail");
    hex(&h.0.finalize())
}

/// SHA-256 (hex) of the canonical JSON of `args` after redacting the `sensitive` fields.
/// This is the `args_digest` of an [`AuditEvent`](crate::AuditEvent).
pub fn argument_digest(args: &Value, sensitive: &[String]) -> String {
    if sensitive.is_empty() {
        canonical_digest(args)
    } else {
        canonical_digest(&redact(args, sensitive))
    }
}

/// A copy of `args` with every sensitive field replaced by [`REDACTED`].
///
/// A sensitive field is named by a JSON pointer (`/password`, `/auth/token`); a bare name
/// (`password`) means the top-level field; a `*` segment matches every key or index at that
/// level (`/accounts/*/pin`). Fields that are absent are left absent.
pub fn redact(args: &Value, sensitive: &[String]) -> Value {
    let mut out = args.clone();
    for field in sensitive {
        let segments = pointer_segments(field);
        redact_at(&mut out, &segments);
    }
    out
}

/// Splits a sensitive-field spec into pointer segments (RFC 6901 unescaping).
pub(crate) fn pointer_segments(field: &str) -> Vec<String> {
    match field.strip_prefix('/') {
        Some(rest) => rest
            .split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect(),
        None => vec![field.to_string()],
    }
}

fn redact_at(value: &mut Value, segments: &[String]) {
    let Some((first, rest)) = segments.split_first() else {
        *value = Value::String(REDACTED.to_string());
        return;
    };
    match value {
        Value::Object(map) => {
            if first == "*" {
                for v in map.values_mut() {
                    redact_at(v, rest);
                }
            } else if let Some(v) = map.get_mut(first.as_str()) {
                redact_at(v, rest);
            }
        }
        Value::Array(items) => {
            if first == "*" {
                for v in items.iter_mut() {
                    redact_at(v, rest);
                }
            } else if let Some(v) = first.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                redact_at(v, rest);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"x":"s","y":[1,2]},"b":1}"#);
        assert_eq!(argument_digest(&a, &[]), argument_digest(&b, &[]));
        assert_eq!(
            argument_digest(&a, &[]),
            sha256_hex(canonical_json(&a).as_bytes())
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            canonical_json(&serde_json::json!({"k\"ey": "v\u{e9}", "n": [1.5, -2, null]})),
            r#"{"k\"ey":"vé","n":[1.5,-2,null]}"#
        );
        assert_ne!(
            argument_digest(&a, &[]),
            argument_digest(&json!({"b": 2}), &[])
        );
    }

    #[test]
    fn redaction_hides_values_but_keeps_shape() {
        let args = json!({"user": "ann", "password": "hunter2",
            "accounts": [{"pin": "1234", "n": 1}, {"pin": "9999", "n": 2}], "a/b": "x"});
        let r = redact(
            &args,
            &[
                "password".into(),
                "/accounts/*/pin".into(),
                "/a~1b".into(),
                "/missing/x".into(),
            ],
        );
        assert_eq!(r["password"], REDACTED);
        assert_eq!(r["accounts"][0]["pin"], REDACTED);
        assert_eq!(r["accounts"][1]["pin"], REDACTED);
        assert_eq!(r["accounts"][1]["n"], 2);
        assert_eq!(r["a/b"], REDACTED);
        assert_eq!(r["user"], "ann");
        assert!(r.get("missing").is_none());
        // Two calls differing only in a secret share a digest: the log cannot tell them apart.
        let other = json!({"user": "ann", "password": "letmein",
            "accounts": [{"pin": "0000", "n": 1}, {"pin": "1111", "n": 2}], "a/b": "y"});
        let sensitive = ["password".into(), "/accounts/*/pin".into(), "/a~1b".into()];
        assert_eq!(
            argument_digest(&args, &sensitive),
            argument_digest(&other, &sensitive)
        );
    }
}
