//! Scrubbing an injected credential out of what an upstream answers.
//!
//! Some upstreams relay their backend's error bodies verbatim, and some backends echo the token
//! they rejected (Gitea: `access token does not exist [sha: <the token>]`). The gateway knows the
//! exact value it injected into the connection, so before a result reaches an agent every text it
//! carries is searched for it and the value replaced with `[redacted]`: text blocks, resource links
//! (URI, name, title, description, MIME type, icons), embedded resources (URI, MIME type, text, the
//! bytes of a blob, and its `_meta`), the MIME type of images and audio, a block's annotations (its
//! timestamp; the block within is searched as any other) and `_meta`, and every string and object
//! key of the structured content and of the result's `_meta`. The blocks are walked by kberg-core's
//! `Content::strings_mut`, whose match is exhaustive, so no kind of block is passed on unsearched.
//! The bytes of images and audio are media, not text, and are left as sent. The reasons an upstream
//! is unavailable (shown to agents in a refusal and to operators) go through [`scrub_text`] the
//! same way, as does what its tool listing says of each tool (title, description, schemas, `_meta`,
//! icons: `scrub_spec`; a tool whose name holds the value is not offered), and so does everything
//! the upstream sends the calling agent while the call runs (`ScrubbingPeer`: its log messages,
//! progress messages, and the questions it relays, such as an elicitation's text). This is a last
//! line of defence, not a licence to log secrets: the credential never enters a log line or an
//! audit entry in the first place.
//!
//! A value with characters that URLs and JSON write differently (`/`, `+`, `=` in a base64 API
//! key) is searched for in those forms too: percent-encoded (an HTTP library's error naming
//! the URL it called with the key in its query or user part), JSON-escaped (`\/`, `\u002b`,
//! a backend's error body relayed as text) and form-encoded (`+` for a space), each
//! character written either way, so a value only partly encoded is found too. The search is
//! the aggregator's ([`kberg_server::aggregate::redact_encoded`]): the aggregator that runs the
//! upstream finds the value it is given in the same forms in the child's stderr, in what it
//! relays and in its errors, so one implementation decides what counts as the value.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use kberg_core::{CancellationToken, ClientPeer, Content, PeerError, ToolOutput};
use kberg_server::aggregate::{redact_encoded, redact_encoded_bytes};
use serde_json::Value;

use super::credential::Credential;

/// What a scrubbed value becomes: the aggregator's marker, so both read the same.
pub const REDACTED: &str = kberg_server::aggregate::REDACTED;

/// What of `secret` is searched for: the value itself; the value without its surrounding
/// whitespace (a value stored with a trailing blank goes out in a header as stored, and HTTP
/// drops a field value's surrounding whitespace, so the upstream reads, and quotes, the value
/// without it); and, for a value of several lines (a PEM key), each of its lines (trimmed) of
/// at least [`MIN_REDACTED_LEN`](kberg_server::aggregate::MIN_REDACTED_LEN) bytes, as the
/// aggregator redacts a child's stderr: an upstream that quotes one line of the value quotes
/// part of it. All are searched for at once, and occurrences that overlap (a part inside a
/// longer one) are replaced as one, so none is left half replaced. Empty for an empty value.
fn parts(secret: &str) -> Vec<&str> {
    let mut parts = vec![secret, secret.trim()];
    if secret.contains('\n') {
        parts.extend(
            secret
                .lines()
                .map(str::trim)
                .filter(|l| l.len() >= kberg_server::aggregate::MIN_REDACTED_LEN),
        );
    }
    parts.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    parts.dedup();
    parts.retain(|p| !p.is_empty());
    parts
}

/// Replaces every occurrence of `secret` (and of each line of it, see `parts`) in `out`;
/// returns whether anything was replaced.
pub fn scrub_output(out: &mut ToolOutput, secret: &str) -> bool {
    let parts = parts(secret);
    let mut hit = false;
    for block in &mut out.content {
        hit |= scrub_content(block, &parts);
    }
    if let Some(v) = &mut out.structured {
        hit |= scrub_value(v, &parts);
    }
    if let Some(meta) = &mut out.meta {
        hit |= scrub_map(meta, &parts);
    }
    hit
}

/// Replaces every occurrence of `secret` (and of each line of it, see `parts`) in what an
/// upstream's tool listing says of a tool: its title, description, input and output schemas and
/// `_meta` (their strings and keys), and its icons. Returns `None` when the tool's name holds it,
/// which cannot be changed without breaking the call: such a tool is not offered. Else whether
/// anything was replaced.
pub(crate) fn scrub_spec(spec: &mut kberg_core::ToolSpec, secret: &str) -> Option<bool> {
    let parts = parts(secret);
    if holds(&spec.name, &parts) {
        return None;
    }
    let mut hit = false;
    if let Some(title) = &mut spec.title {
        hit |= scrub_string(title, &parts);
    }
    hit |= scrub_string(&mut spec.description, &parts);
    hit |= scrub_value(&mut spec.input_schema, &parts);
    if let Some(schema) = &mut spec.output_schema {
        hit |= scrub_value(schema, &parts);
    }
    hit |= scrub_map(&mut spec.meta, &parts);
    for icon in &mut spec.icons {
        icon.strings_mut(&mut |s| hit |= scrub_string(s, &parts));
    }
    Some(hit)
}

/// [`scrub_value`] of an object held as a map (a `_meta`).
fn scrub_map(map: &mut serde_json::Map<String, Value>, parts: &[&str]) -> bool {
    let mut v = Value::Object(std::mem::take(map));
    let hit = scrub_value(&mut v, parts);
    if let Value::Object(scrubbed) = v {
        *map = scrubbed;
    }
    hit
}

/// `text` with every occurrence of `secret` (and of each line of it, see `parts`) replaced
/// by [`REDACTED`] (as it is when `secret` is empty).
pub fn scrub_text(text: &str, secret: &str) -> String {
    redact_encoded(text, &parts(secret)).into_owned()
}

/// Replaces every occurrence of `secret` (and of each line of it, see `parts`) in every string
/// and object key of `v`; returns whether anything was replaced. For answers the gateway
/// reads itself before building what an agent sees (Kanboard's JSON-RPC answers).
#[cfg(feature = "kanboard")]
pub(crate) fn scrub_json(v: &mut Value, secret: &str) -> bool {
    scrub_value(v, &parts(secret))
}

/// Replaces `parts` in `s` in place; returns whether any was there.
fn scrub_string(s: &mut String, parts: &[&str]) -> bool {
    match redact_encoded(s, parts) {
        Cow::Borrowed(_) => false,
        Cow::Owned(scrubbed) => {
            *s = scrubbed;
            true
        }
    }
}

/// Whether `text` holds one of `parts`, as it is or in an encoded form.
fn holds(text: &str, parts: &[&str]) -> bool {
    matches!(redact_encoded(text, parts), Cow::Owned(_))
}

/// Replaces `parts` in every string and resource byte of `block` (kberg-core's
/// [`Content::strings_mut`], which reaches every kind of block); returns whether any was there.
fn scrub_content(block: &mut Content, parts: &[&str]) -> bool {
    let mut hit = false;
    let mut bytes_hit = false;
    block.strings_mut(
        &mut |s| hit |= scrub_string(s, parts),
        // A blob is text often enough (a file read as bytes) to hold an echoed token.
        &mut |b| bytes_hit |= scrub_bytes(b, parts),
    );
    hit | bytes_hit
}

/// Replaces every occurrence of `parts`, as they are or encoded, in `bytes` by
/// [`REDACTED`]'s bytes; returns whether any was there.
fn scrub_bytes(bytes: &mut Vec<u8>, parts: &[&str]) -> bool {
    match redact_encoded_bytes(bytes, parts) {
        Cow::Borrowed(_) => false,
        Cow::Owned(scrubbed) => {
            *bytes = scrubbed;
            true
        }
    }
}

/// The calling agent's channel, as a forwarded call's upstream uses it: every notification and
/// request passes with the injected credential scrubbed out of its parameters (an upstream
/// that logs its backend's error, or reports progress, quoting the token it was given).
/// What the agent answers goes back unchanged.
pub(crate) struct ScrubbingPeer {
    inner: Arc<dyn ClientPeer>,
    secret: Credential,
    namespace: Arc<str>,
}

impl ScrubbingPeer {
    /// `inner` with `secret` scrubbed from what passes to it; `namespace` names the upstream in
    /// the warning a scrub writes.
    pub(crate) fn new(inner: Arc<dyn ClientPeer>, secret: Credential, namespace: &str) -> Self {
        Self {
            inner,
            secret,
            namespace: namespace.into(),
        }
    }

    fn scrubbed(&self, method: &str, mut params: Value) -> Value {
        if scrub_value(&mut params, &parts(self.secret.expose())) {
            tracing::warn!(namespace = %self.namespace, method, "the upstream sent its credential to the client; scrubbed");
        }
        params
    }
}

#[async_trait]
impl ClientPeer for ScrubbingPeer {
    async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError> {
        let params = self.scrubbed(method, params);
        self.inner.notify(method, params).await
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        cancel: CancellationToken,
    ) -> Result<Value, PeerError> {
        let params = self.scrubbed(method, params);
        self.inner.request(method, params, cancel).await
    }

    fn supports(&self, capability: &str) -> bool {
        self.inner.supports(capability)
    }
}

/// Replaces `parts` in every string and object key of `v`; returns whether any was there.
fn scrub_value(v: &mut Value, parts: &[&str]) -> bool {
    if parts.is_empty() {
        return false;
    }
    match v {
        Value::String(s) => scrub_string(s, parts),
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |hit, item| scrub_value(item, parts) | hit),
        Value::Object(map) => {
            let mut hit = map
                .values_mut()
                .fold(false, |hit, item| scrub_value(item, parts) | hit);
            // A key is text the agent reads too (an upstream may key a map by token). Only a
            // map with such a key is rebuilt; should two keys become one, the later one stays.
            if map.keys().any(|k| holds(k, parts)) {
                let entries = std::mem::take(map);
                for (k, item) in entries {
                    map.insert(redact_encoded(&k, parts).into_owned(), item);
                }
                hit = true;
            }
            hit
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kberg_core::ResourceContents;
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

    /// A block with MCP annotations (who it is for) is searched as the block itself is.
    #[test]
    fn annotated_blocks_are_scrubbed_too() {
        use kberg_core::{Annotations, Role};
        let mut out =
            ToolOutput::contents(vec![Content::text("your token is s3cr3t").annotated(
                Annotations::for_audience([Role::User]).with_last_modified("s3cr3t"),
            )]);
        assert!(scrub_output(&mut out, "s3cr3t"));
        assert_eq!(
            out.content[0],
            Content::text("your token is [redacted]").annotated(
                Annotations::for_audience([Role::User]).with_last_modified("[redacted]")
            )
        );
        assert!(!scrub_output(&mut out, "s3cr3t"));
    }

    #[test]
    fn links_embedded_resources_and_keys_are_scrubbed_too() {
        let mut out = ToolOutput::contents(vec![
            Content::ResourceLink {
                uri: "https://git.example/raw?token=s3cr3t".into(),
                name: "s3cr3t.txt".into(),
                title: Some("The s3cr3t".into()),
                description: Some("as s3cr3t".into()),
                mime_type: Some("text/s3cr3t".into()),
                size: Some(6),
                icons: vec![kberg_core::Icon::new("https://icons.example/?t=s3cr3t")],
            },
            Content::Resource(ResourceContents::text(
                "mem://s3cr3t",
                Some("text/plain"),
                "token s3cr3t",
            )),
            Content::Resource(ResourceContents::blob(
                "mem://blob",
                None,
                b"\x00s3cr3t\x01s3cr3".to_vec(),
            )),
            Content::Image {
                data: vec![1, 2, 3],
                mime_type: "image/png".into(),
            },
        ])
        .with_structured(json!({"by_token": {"s3cr3t": {"owner": "x"}, "other": 1}}));
        assert!(scrub_output(&mut out, "s3cr3t"));
        assert_eq!(
            out.content[0],
            Content::ResourceLink {
                uri: "https://git.example/raw?token=[redacted]".into(),
                name: "[redacted].txt".into(),
                title: Some("The [redacted]".into()),
                description: Some("as [redacted]".into()),
                mime_type: Some("text/[redacted]".into()),
                size: Some(6),
                icons: vec![kberg_core::Icon::new("https://icons.example/?t=[redacted]")],
            }
        );
        assert_eq!(
            out.content[1],
            Content::Resource(ResourceContents::text(
                "mem://[redacted]",
                Some("text/plain"),
                "token [redacted]",
            ))
        );
        assert_eq!(
            out.content[2],
            Content::Resource(ResourceContents::blob(
                "mem://blob",
                None,
                b"\x00[redacted]\x01s3cr3".to_vec(),
            ))
        );
        assert_eq!(
            out.content[3],
            Content::Image {
                data: vec![1, 2, 3],
                mime_type: "image/png".into(),
            }
        );
        assert_eq!(
            out.structured,
            Some(json!({"by_token": {"[redacted]": {"owner": "x"}, "other": 1}}))
        );
        assert!(!scrub_output(&mut out, "s3cr3t"));
    }

    /// What an upstream says in a `_meta` (the result's, a block's, an embedded resource's)
    /// reaches the agent's client as well, keys and strings alike.
    #[test]
    fn every_meta_of_a_result_is_scrubbed_too() {
        let mut out = ToolOutput::contents(vec![
            Content::text("ok").with_meta("seen", json!({"s3cr3t": ["by s3cr3t", 1]})),
            Content::Resource(
                ResourceContents::text("mem://a", None, "a")
                    .meta("ui", json!({"domain": "s3cr3t"})),
            ),
        ])
        .with_meta("token", json!("s3cr3t"));
        assert!(scrub_output(&mut out, "s3cr3t"));
        let shown = serde_json::to_string(&out).unwrap();
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert_eq!(
            out.meta.clone().map(|m| Value::Object(*m)),
            Some(json!({"token": "[redacted]"}))
        );
        assert_eq!(
            out.content[0].meta(),
            json!({"seen": {"[redacted]": ["by [redacted]", 1]}}).as_object()
        );
        assert!(!scrub_output(&mut out, "s3cr3t"));
    }

    #[test]
    fn a_listed_spec_loses_the_secret_and_a_name_holding_it_is_withheld() {
        let mut spec = kberg_core::ToolSpec::new(
            "up__describe",
            "uses s3cr3t",
            json!({"type": "object", "properties": {"s3cr3t": {"default": "s3cr3t"}}}),
            kberg_core::ToolKind::Read,
        );
        spec.title = Some("as s3cr3t".into());
        spec.output_schema = Some(json!({"description": "x s3cr3t"}));
        spec.meta = json!({"ui": {"resourceUri": "ui://up/s3cr3t"}, "s3cr3t": 1})
            .as_object()
            .cloned()
            .unwrap();
        spec.icons = vec![kberg_core::Icon::new("https://icons.example/?t=s3cr3t")];
        assert_eq!(scrub_spec(&mut spec, "s3cr3t"), Some(true));
        assert_eq!(spec.icons[0].src, "https://icons.example/?t=[redacted]");
        assert_eq!(
            Value::Object(spec.meta.clone()),
            json!({"ui": {"resourceUri": "ui://up/[redacted]"}, "[redacted]": 1})
        );
        assert_eq!(spec.title.as_deref(), Some("as [redacted]"));
        assert_eq!(spec.description, "uses [redacted]");
        assert_eq!(
            spec.input_schema,
            json!({"type": "object", "properties": {"[redacted]": {"default": "[redacted]"}}})
        );
        assert_eq!(
            spec.output_schema,
            Some(json!({"description": "x [redacted]"}))
        );
        assert_eq!(scrub_spec(&mut spec, "s3cr3t"), Some(false));
        spec.name = "up__s3cr3t".into();
        assert_eq!(scrub_spec(&mut spec, "s3cr3t"), None);
    }

    #[test]
    fn reasons_are_scrubbed() {
        assert_eq!(
            scrub_text("listing its tools failed: `token s3cr3t` may not", "s3cr3t"),
            "listing its tools failed: `token [redacted]` may not"
        );
        assert_eq!(scrub_text("no secret here", ""), "no secret here");
    }

    /// A client that notes what reaches it and answers every request with `{"ok": true}`.
    #[derive(Default)]
    struct Noted(std::sync::Mutex<Vec<(String, Value)>>);

    #[async_trait]
    impl ClientPeer for Noted {
        async fn notify(&self, method: &str, params: Value) -> Result<(), PeerError> {
            self.0.lock().unwrap().push((method.into(), params));
            Ok(())
        }
        async fn request(
            &self,
            method: &str,
            params: Value,
            _cancel: CancellationToken,
        ) -> Result<Value, PeerError> {
            self.0.lock().unwrap().push((method.into(), params));
            Ok(json!({"ok": true, "echo": "s3cr3t"}))
        }
        fn supports(&self, capability: &str) -> bool {
            capability == "elicitation"
        }
    }

    #[tokio::test]
    async fn what_an_upstream_sends_the_client_loses_the_secret_and_the_answer_is_unchanged() {
        let noted = Arc::new(Noted::default());
        let peer = ScrubbingPeer::new(noted.clone(), Credential::new("s3cr3t"), "gitea");
        peer.notify(
            "notifications/message",
            json!({"level": "error", "data": {"s3cr3t": "token s3cr3t rejected"}}),
        )
        .await
        .unwrap();
        let answer = peer
            .request(
                "elicitation/create",
                json!({"message": "Use s3cr3t?", "requestedSchema": {"type": "object"}}),
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(answer, json!({"ok": true, "echo": "s3cr3t"}));
        assert!(peer.supports("elicitation") && !peer.supports("sampling"));
        let seen = noted.0.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                (
                    "notifications/message".to_string(),
                    json!({"level": "error", "data": {"[redacted]": "token [redacted] rejected"}})
                ),
                (
                    "elicitation/create".to_string(),
                    json!({"message": "Use [redacted]?", "requestedSchema": {"type": "object"}})
                ),
            ]
        );
    }

    /// A value with `/`, `+`, `=` or a space reaches answers encoded: percent-encoded in a URL
    /// (either case, or only some of its characters), JSON-escaped, form-encoded, or a mix.
    #[test]
    fn encoded_forms_of_the_secret_are_scrubbed_too() {
        let secret = "ab/cd+ef=gh i%";
        for quoted in [
            "ab%2Fcd%2Bef%3Dgh%20i%25",
            "ab%2fcd%2bef%3dgh+i%25",
            "ab%2Fcd+ef=gh i%",
            "ab\\/cd\\u002bef\\u003Dgh i%",
            "ab/cd+ef=gh i%",
        ] {
            let said = format!("for url 'https://api.example/?key={quoted}' (401)");
            assert_eq!(
                scrub_text(&said, secret),
                "for url 'https://api.example/?key=[redacted]' (401)",
                "{quoted}"
            );
            let mut out =
                ToolOutput::text(said.clone()).with_structured(json!({ quoted: [said.clone()] }));
            assert!(scrub_output(&mut out, secret), "{quoted}");
            let shown = format!("{} {}", out.all_text(), out.structured.unwrap_or_default());
            assert!(!shown.contains(quoted), "{quoted}: {shown}");
            let mut blob = said.clone().into_bytes();
            assert!(scrub_bytes(&mut blob, &[secret]), "{quoted}");
            assert!(!String::from_utf8_lossy(&blob).contains(quoted), "{quoted}");
        }
        // Another value's encoded form, a part of the value, and a plain value's text stay.
        for other in ["ab%2Fcd%2Bef%3Dgh%20j", "ab%2Fcd", "abcdef"] {
            assert_eq!(scrub_text(other, secret), other);
        }
        assert_eq!(scrub_text("x ab%2Dcd y", "ab-cd"), "x ab%2Dcd y");
        assert_eq!(scrub_text("é ab/cd é", "ab/cd"), "é [redacted] é");
        // Encoded whole or in part, each is the value.
        for form in [
            "ab%2Fc%2Bd%3D",
            "ab%2fc%2bd%3d",
            "ab/c%2Bd%3D",
            "ab%2Fc+d%3d",
            "ab\\/c%2Bd=",
        ] {
            assert_eq!(scrub_text(form, "ab/c+d="), REDACTED, "{form}");
        }
    }

    #[test]
    fn each_line_of_a_secret_of_several_lines_is_scrubbed_too() {
        let pem = "-----BEGIN KEY-----\nMIIEowIBAAKCAQEAcanary1\nshort\n-----END KEY-----\n";
        let said = "bad key line MIIEowIBAAKCAQEAcanary1 near the short end";
        assert_eq!(
            scrub_text(said, pem),
            "bad key line [redacted] near the short end",
            "a line under the minimum length is left alone"
        );
        assert_eq!(scrub_text(&format!("key: {pem}"), pem), "key: [redacted]");
        let mut out = ToolOutput::text(said).with_structured(json!({"k": said}));
        assert!(scrub_output(&mut out, pem));
        assert!(!out.all_text().contains("canary1"));
        assert!(!out.structured.unwrap().to_string().contains("canary1"));
        assert_eq!(scrub_text("nothing", ""), "nothing");
    }
}
