//! Where the loop's tools live: [`ToolSurface`].
//!
//! The loop lists tools and calls them through this trait and nothing else, so the same loop
//! drives an in-process [`ToolRegistry`] ([`LocalSurface`]) and a remote MCP server
//! ([`crate::McpSurface`], feature `mcp`) with the same outcomes. Every refusal comes back as a
//! [`ToolResult`] carrying a kberg-core [`ErrorCode`]: in process straight from the gate's
//! [`GateError`](kberg_core::GateError), remotely from the `code` a Kberg server puts in an
//! error result's structured content. A [`SurfaceError`] is reserved for the surface itself
//! failing (the connection dropped), which ends the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use kberg_core::{
    CallOptions, Caller, Content, ErrorCode, ResourceBody, Role, ToolOutput, ToolRegistry,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::message::ToolDefinition;
use crate::progress::{LocalProgressPeer, ProgressSink};

/// What one tool call produced, as the loop hands it to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The result as text: what the model is given. Blocks the tool meant for the user only
    /// are not in it (they are [`ToolResult::user_text`]); a line at its end says how many
    /// there were, so the model knows the user was shown something.
    pub text: String,
    /// The blocks the tool meant for the user only (MCP annotations with an `audience` that
    /// leaves the assistant out), as text in the same form, one after another on their own
    /// lines: for the app to show, since the model is not given them. Empty when there are
    /// none.
    pub user_text: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// The stable code of a failure (`None` on success, or when a remote server gave none).
    pub code: Option<ErrorCode>,
    /// Structured content, if any.
    pub structured: Option<Value>,
}

impl ToolResult {
    /// A successful text result.
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            user_text: String::new(),
            is_error: false,
            code: None,
            structured: None,
        }
    }

    /// A failed result with a code.
    pub fn error(code: ErrorCode, text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            user_text: String::new(),
            is_error: true,
            code: Some(code),
            structured: None,
        }
    }

    /// The code the loop acts on: the given code, `tool_failed` for an error without one.
    pub fn effective_code(&self) -> Option<ErrorCode> {
        match (self.is_error, self.code) {
            (_, Some(c)) => Some(c),
            (true, None) => Some(ErrorCode::ToolFailed),
            (false, None) => None,
        }
    }

    /// Reads a tool result in MCP's shape: an error result's structured `code` (as kberg-server
    /// writes it from [`kberg_core::GateError::details`]) becomes [`ToolResult::code`], and a
    /// result with no block for the model is read as its structured content, as a remote
    /// server's result is.
    pub fn from_output(out: ToolOutput) -> Self {
        let code = if out.is_error {
            out.structured.as_ref().and_then(code_of)
        } else {
            None
        };
        let (text, user_text) = output_text(&out.content).texts(out.structured.as_ref());
        Self {
            text,
            user_text,
            is_error: out.is_error,
            code,
            structured: out.structured,
        }
    }
}

/// The error code in a structured error result, if it is one of kberg-core's.
pub(crate) fn code_of(structured: &Value) -> Option<ErrorCode> {
    serde_json::from_value(structured.get("code")?.clone()).ok()
}

/// One block of a tool result, as the model is shown it ([`blocks_text`]): whichever surface
/// the result came from, in process or over MCP, it reads the same.
pub(crate) enum Block<'a> {
    /// Text, as it is.
    Text(&'a str),
    /// An image or audio clip: named with its kind and MIME type (a chat turn's tool result is
    /// text).
    Media { kind: &'a str, mime: &'a str },
    /// A link to a resource the client may read: its name, URI and description.
    Link {
        name: &'a str,
        uri: &'a str,
        description: Option<&'a str>,
    },
    /// A resource's contents in the result: its text (a file's contents, as many servers
    /// return them), or `None` for bytes that are not text, which are named only.
    Resource {
        uri: &'a str,
        mime: Option<&'a str>,
        text: Option<std::borrow::Cow<'a, str>>,
    },
    /// A kind of block this version does not know.
    Other(&'a str),
}

/// A tool result's blocks as text ([`blocks_text`]): what the model is given, and what the
/// tool meant for the user only.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    /// The blocks for the model (or for everyone).
    model: String,
    /// The blocks for the user only.
    user: String,
    /// How many blocks were for the user only.
    withheld: usize,
}

impl Shown {
    /// What the model and the user are given of a result with these blocks and `structured`
    /// content: the model its blocks, or the structured content as JSON when no block is for
    /// it (a tool may answer in structured content alone), then a line saying how many blocks
    /// were left to the user, if any were; the user the blocks for the user only.
    pub(crate) fn texts(self, structured: Option<&Value>) -> (String, String) {
        let mut model = self.model;
        if model.is_empty()
            && let Some(s) = structured
        {
            model = s.to_string();
        }
        if self.withheld > 0 {
            if !model.is_empty() {
                model.push('\n');
            }
            let blocks = if self.withheld == 1 {
                "block"
            } else {
                "blocks"
            };
            model.push_str(&format!("[{} {blocks}{WITHHELD_TAIL}", self.withheld));
        }
        (model, self.user)
    }
}

/// How the line that counts the blocks for the user only ends ([`Shown::texts`]).
const WITHHELD_TAIL: &str = " for the user only, not shown to you]";

/// Where the line counting the blocks for the user only starts in a result's `text`, when
/// that is its last line (the line break before it included): a result cut to a bound keeps
/// that line after the cut.
pub(crate) fn withheld_line_at(text: &str) -> Option<usize> {
    let start = text.rfind('\n').unwrap_or(0);
    let counted = text[start..]
        .trim_start_matches('\n')
        .strip_prefix('[')?
        .strip_suffix(WITHHELD_TAIL)?;
    let count = counted
        .strip_suffix(" blocks")
        .or_else(|| counted.strip_suffix(" block"))?;
    (!count.is_empty() && count.len() <= 20 && count.bytes().all(|b| b.is_ascii_digit()))
        .then_some(start)
}

/// Tool result blocks as the text a model reads, one block after another on their own lines,
/// each with whether it is for the model (MCP's `audience` names the assistant, or no one).
/// No block the model is meant to see is dropped: an embedded resource's text is read with its
/// URI above it, and what cannot be shown as text is named, so the model knows something came
/// back. A block for the user only goes to [`Shown::user`] instead, and the model is told how
/// many there were ([`Shown::texts`]).
pub(crate) fn blocks_text<'a>(blocks: impl IntoIterator<Item = (Block<'a>, bool)>) -> Shown {
    let mut shown = Shown::default();
    for (block, for_model) in blocks {
        if !for_model {
            shown.withheld += 1;
        }
        let s = if for_model {
            &mut shown.model
        } else {
            &mut shown.user
        };
        if !s.is_empty() {
            s.push('\n');
        }
        push_block(s, block);
    }
    shown
}

/// One block as the model (or the user) reads it.
fn push_block(s: &mut String, block: Block<'_>) {
    match block {
        Block::Text(t) => s.push_str(t),
        Block::Media { kind, mime } => s.push_str(&format!("[{kind} {mime}]")),
        Block::Link {
            name,
            uri,
            description,
        } => {
            s.push_str(&format!("[resource link {name}: {uri}]"));
            if let Some(d) = description.filter(|d| !d.trim().is_empty()) {
                s.push(' ');
                s.push_str(d.trim());
            }
        }
        Block::Resource { uri, mime, text } => {
            let mime = mime.map(|m| format!(" ({m})")).unwrap_or_default();
            match text {
                Some(text) => {
                    s.push_str(&format!("[resource {uri}{mime}]\n"));
                    s.push_str(&text);
                }
                None => s.push_str(&format!("[resource {uri}{mime}: binary, not shown]")),
            }
        }
        Block::Other(kind) => s.push_str(&format!("[{kind}]")),
    }
}

/// Whether a resource of MIME type `mime` holds text (`text/*`, JSON, XML, YAML, TOML,
/// JavaScript): bytes sent under it are shown as text when they are UTF-8.
pub(crate) fn is_text_mime(mime: Option<&str>) -> bool {
    let Some(mime) = mime else {
        return false;
    };
    let essence = mime
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence.starts_with("text/")
        || essence.ends_with("+json")
        || essence.ends_with("+xml")
        || matches!(
            essence.as_str(),
            "application/json"
                | "application/xml"
                | "application/yaml"
                | "application/x-yaml"
                | "application/toml"
                | "application/javascript"
                | "application/x-sh"
                | "application/sql"
        )
}

/// kberg-core content blocks as the text a model reads ([`blocks_text`]).
pub(crate) fn output_text(content: &[Content]) -> Shown {
    blocks_text(content.iter().map(|c| {
        let block = match c.block() {
            Content::Text(t) => Block::Text(t),
            Content::Image { mime_type, .. } => Block::Media {
                kind: "image",
                mime: mime_type,
            },
            Content::Audio { mime_type, .. } => Block::Media {
                kind: "audio",
                mime: mime_type,
            },
            Content::ResourceLink {
                uri,
                name,
                description,
                ..
            } => Block::Link {
                name,
                uri,
                description: description.as_deref(),
            },
            Content::Resource(r) => Block::Resource {
                uri: &r.uri,
                mime: r.mime_type.as_deref(),
                text: match &r.body {
                    ResourceBody::Text(t) => Some(std::borrow::Cow::Borrowed(t.as_str())),
                    ResourceBody::Blob(bytes) if is_text_mime(r.mime_type.as_deref()) => {
                        std::str::from_utf8(bytes)
                            .ok()
                            .map(std::borrow::Cow::Borrowed)
                    }
                    ResourceBody::Blob(_) => None,
                },
            },
            _ => Block::Other("content"),
        };
        (block, c.is_for(Role::Assistant))
    }))
}

/// Why the surface itself failed (not a tool refusal: those are [`ToolResult`]s).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SurfaceError {
    /// Connecting to the remote server failed.
    #[error("could not connect to the MCP server: {0}")]
    Connect(String),
    /// The connection failed or closed during a request.
    #[error("the MCP server connection failed: {0}")]
    Transport(String),
    /// The server answered with something that is not MCP's documented shape.
    #[error("the MCP server's answer is malformed: {0}")]
    Malformed(String),
}

impl SurfaceError {
    /// A stable string naming the variant.
    pub fn code(&self) -> &'static str {
        match self {
            SurfaceError::Connect(_) => "surface_connect",
            SurfaceError::Transport(_) => "surface_transport",
            SurfaceError::Malformed(_) => "surface_malformed",
        }
    }
}

/// The tools a run may use, wherever they live.
#[async_trait]
pub trait ToolSurface: Send + Sync {
    /// The tools the model is shown (already projected for the caller).
    async fn tools(&self) -> Result<Vec<ToolDefinition>, SurfaceError>;

    /// Calls one tool. Refusals and tool failures are `Ok` results with a code; `Err` means the
    /// surface itself failed. When `cancel` fires the call is abandoned and answers
    /// [`ErrorCode::Cancelled`].
    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<ToolResult, SurfaceError>;

    /// [`ToolSurface::call`], with the tool's progress reports handed to `progress` while it
    /// runs (the surface asks the tool for them, as an MCP client does with a progress token).
    /// A surface that cannot relay progress makes the plain call: that is the default.
    async fn call_with_progress(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
        progress: ProgressSink,
    ) -> Result<ToolResult, SurfaceError> {
        let _ = progress;
        self.call(name, arguments, cancel).await
    }

    /// Why `name`, a tool that is not in [`ToolSurface::tools`], cannot be called (a refusal's
    /// reason, a missing capability), as the failed result to give the model, without running
    /// anything. `None` when the surface cannot tell; the loop then says the tool is unknown.
    async fn explain_unlisted(&self, name: &str) -> Option<ToolResult> {
        let _ = name;
        None
    }
}

/// An in-process [`ToolRegistry`] seen by one [`Caller`]: the list is
/// [`ToolRegistry::list`] (so a Compact projection shows only small-model-safe tools the caller
/// can run) and each call passes the registry's gate.
#[derive(Debug, Clone)]
pub struct LocalSurface {
    registry: ToolRegistry,
    caller: Caller,
}

impl LocalSurface {
    /// The registry as `caller` sees it.
    pub fn new(registry: ToolRegistry, caller: impl Into<Caller>) -> Self {
        Self {
            registry,
            caller: caller.into(),
        }
    }

    /// The caller.
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    async fn call_with(&self, name: &str, arguments: Value, opts: CallOptions) -> ToolResult {
        match self
            .registry
            .call(&self.caller, name, arguments, opts)
            .await
        {
            Ok(out) => ToolResult::from_output(out),
            Err(e) => gate_result(&e),
        }
    }
}

/// A progress token unique in this process, for a call whose progress is wanted.
fn progress_token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("kberg-agent-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Whether a tool with this `_meta` is for the model: not when it is an MCP App's tool whose
/// `ui.visibility` leaves out `model` (a tool only the app's view calls, such as a refresh).
/// MCP Apps asks hosts not to give the model such a tool; a visibility that is not a list of
/// names is read as the default, for both.
pub(crate) fn for_the_model(meta: Option<&serde_json::Map<String, Value>>) -> bool {
    match meta
        .and_then(|m| m.get("ui"))
        .and_then(|ui| ui.get("visibility"))
    {
        Some(Value::Array(who)) => who.iter().any(|w| w == "model"),
        _ => true,
    }
}

#[async_trait]
impl ToolSurface for LocalSurface {
    async fn tools(&self) -> Result<Vec<ToolDefinition>, SurfaceError> {
        Ok(self
            .registry
            .list(&self.caller)
            .into_iter()
            .filter(|s| for_the_model(Some(&s.meta)))
            .map(|s| {
                let read_only = s.hints().read_only_hint.unwrap_or(false);
                ToolDefinition::new(s.name, s.description, s.input_schema).read_only(read_only)
            })
            .collect())
    }

    async fn call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<ToolResult, SurfaceError> {
        Ok(self
            .call_with(name, arguments, CallOptions::with_cancel(cancel))
            .await)
    }

    /// The tool gets a progress token and a client channel that passes its
    /// [`progress`](kberg_core::ToolContext::progress) reports to `progress` (and nothing else:
    /// elicitation, sampling and roots stay unsupported, as on a plain call).
    async fn call_with_progress(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
        progress: ProgressSink,
    ) -> Result<ToolResult, SurfaceError> {
        let token = Value::String(progress_token());
        let peer = LocalProgressPeer {
            token: token.clone(),
            sink: progress,
        };
        let opts = CallOptions::with_cancel(cancel)
            .with_progress_token(token)
            .with_peer(Arc::new(peer));
        Ok(self.call_with(name, arguments, opts).await)
    }

    async fn explain_unlisted(&self, name: &str) -> Option<ToolResult> {
        // Steps 1-3 of the gate, without running: the refusal's reason, `not_in_surface` or the
        // missing capability. A tool that would pass them is still not listed, so it is answered
        // as unknown rather than run.
        match self
            .registry
            .check(&self.caller, name, &Value::Object(Default::default()))
        {
            Err(e) if e.code() != ErrorCode::InvalidArguments => Some(gate_result(&e)),
            _ => None,
        }
    }
}

fn gate_result(e: &kberg_core::GateError) -> ToolResult {
    ToolResult {
        text: e.to_string(),
        user_text: String::new(),
        is_error: true,
        code: Some(e.code()),
        structured: Some(e.details()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kberg_core::GateError;
    use serde_json::json;

    /// A tool is kept from the model only when its visibility is a list without `model`;
    /// anything else (none, a malformed one) is read as MCP Apps' default, for both.
    #[test]
    fn only_a_visibility_without_the_model_hides_a_tool() {
        let meta = |v: Value| json!({"ui": {"visibility": v}}).as_object().cloned();
        assert!(!for_the_model(meta(json!(["app"])).as_ref()));
        assert!(!for_the_model(meta(json!([])).as_ref()));
        for shown in [
            json!(["model"]),
            json!(["app", "model"]),
            json!("app"),
            json!(null),
        ] {
            assert!(for_the_model(meta(shown.clone()).as_ref()), "{shown}");
        }
        assert!(for_the_model(json!({"ui": "x"}).as_object()));
        assert!(for_the_model(None));
    }

    #[test]
    fn only_the_counting_line_is_found() {
        assert_eq!(
            withheld_line_at("a\n[1 block for the user only, not shown to you]"),
            Some(1)
        );
        assert_eq!(
            withheld_line_at("[12 blocks for the user only, not shown to you]"),
            Some(0)
        );
        for not_it in [
            "a",
            "a\n[x blocks for the user only, not shown to you]",
            "a\n[ blocks for the user only, not shown to you]",
            "[1 block for the user only, not shown to you] and more",
            &format!(
                "[{} blocks for the user only, not shown to you]",
                "9".repeat(30)
            ),
        ] {
            assert_eq!(withheld_line_at(not_it), None, "{not_it}");
        }
    }

    #[test]
    fn text_types_are_told_from_binary_ones() {
        for mime in [
            "text/plain",
            "text/x-rust; charset=utf-8",
            "Application/JSON",
            "application/vnd.api+json",
            "image/svg+xml",
            "application/x-yaml",
        ] {
            assert!(is_text_mime(Some(mime)), "{mime}");
        }
        for mime in [
            "image/png",
            "application/octet-stream",
            "application/pdf",
            "",
        ] {
            assert!(!is_text_mime(Some(mime)), "{mime}");
        }
        assert!(!is_text_mime(None));
    }

    #[test]
    fn bytes_of_a_text_type_that_are_not_utf8_are_named() {
        let text = output_text(&[
            Content::Resource(kberg_core::ResourceContents::blob(
                "file:///notes.txt",
                Some("text/plain"),
                vec![0xff, 0xfe, b'a'],
            )),
            Content::Resource(kberg_core::ResourceContents::blob(
                "file:///ok.txt",
                Some("text/plain"),
                b"plain words".to_vec(),
            )),
            Content::ResourceLink {
                uri: "file:///a".into(),
                name: "a".into(),
                title: None,
                description: Some("  ".into()),
                mime_type: None,
                size: None,
                icons: vec![],
            },
        ]);
        let (text, user) = text.texts(None);
        assert_eq!(user, "");
        assert_eq!(
            text,
            "[resource file:///notes.txt (text/plain): binary, not shown]\n\
             [resource file:///ok.txt (text/plain)]\nplain words\n\
             [resource link a: file:///a]"
        );
    }

    #[test]
    fn gate_output_keeps_its_code() {
        let e = GateError::Refused {
            tool: "drop_db".into(),
            reason: "never offered".into(),
        };
        let r = ToolResult::from_output(e.to_output());
        assert!(r.is_error);
        assert_eq!(r.code, Some(ErrorCode::Refused));
        assert!(r.text.contains("never offered"));
    }

    #[test]
    fn error_without_code_is_tool_failed() {
        let r =
            ToolResult::from_output(ToolOutput::error_with("boom", json!({"code": "x-unknown"})));
        assert_eq!(r.code, None);
        assert_eq!(r.effective_code(), Some(ErrorCode::ToolFailed));
        let ok = ToolResult::from_output(
            ToolOutput::text("fine").with_structured(json!({"code": "refused"})),
        );
        assert_eq!(ok.effective_code(), None);
    }
}
