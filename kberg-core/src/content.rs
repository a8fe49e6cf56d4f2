//! What a tool or a resource hands back: content blocks, tool results, resource contents.
//!
//! This is the bottom layer of the crate: plain data that every other module builds or reads
//! and that imports nothing of its own crate. Its JSON form is the MCP one (`CallToolResult`,
//! `ContentBlock`, `ResourceContents`, bytes as base64) and there is exactly one codec for it:
//! the serde derive below, with the block's `type` as its tag. The confirm tickets store
//! results in this form, and kberg-server hands it to rmcp.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The body of a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceBody {
    /// UTF-8 text (`text` on the wire).
    Text(String),
    /// Binary data (`blob` on the wire, base64).
    Blob(#[serde(with = "base64_bytes")] Vec<u8>),
}

/// The contents of one resource, as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceContents {
    /// The URI read.
    pub uri: String,
    /// MIME type, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Text or bytes.
    #[serde(flatten)]
    pub body: ResourceBody,
    /// Its `_meta` (MCP Apps' `ui` of a view: its content security policy, its border).
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Map<String, Value>>,
}

impl ResourceContents {
    /// Text contents.
    pub fn text(uri: impl Into<String>, mime: Option<&str>, text: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            mime_type: mime.map(str::to_string),
            body: ResourceBody::Text(text.into()),
            meta: None,
        }
    }

    /// Binary contents.
    pub fn blob(uri: impl Into<String>, mime: Option<&str>, bytes: Vec<u8>) -> Self {
        Self {
            uri: uri.into(),
            mime_type: mime.map(str::to_string),
            body: ResourceBody::Blob(bytes),
            meta: None,
        }
    }

    /// These contents with one key of their `_meta` set (replacing what it held).
    ///
    /// ```
    /// use kberg_core::ResourceContents;
    /// use serde_json::json;
    /// let mime = Some("text/html;profile=mcp-app");
    /// let view = ResourceContents::text("ui://clock/app.html", mime, "<p>12:00</p>")
    ///     .meta("ui", json!({"prefersBorder": true}));
    /// assert_eq!(serde_json::to_value(&view).unwrap()["_meta"]["ui"]["prefersBorder"], true);
    /// ```
    pub fn meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.meta
            .get_or_insert_with(serde_json::Map::new)
            .insert(key.into(), value);
        self
    }
}

/// An icon a client may show for a tool, a resource, a template, a prompt or a resource link
/// (MCP's `Icon`). Clients fetch `src` themselves (an `https:` URL or a `data:` URI).
///
/// ```
/// use kberg_core::{Icon, IconTheme};
/// let icon = Icon::new("https://example.com/clock.svg")
///     .with_mime_type("image/svg+xml")
///     .with_sizes(["any"])
///     .with_theme(IconTheme::Dark);
/// assert_eq!(
///     serde_json::to_value(&icon).unwrap(),
///     serde_json::json!({"src": "https://example.com/clock.svg", "mimeType": "image/svg+xml",
///                        "sizes": ["any"], "theme": "dark"})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Icon {
    /// Where the icon is: a URL or a `data:` URI.
    pub src: String,
    /// Its MIME type, when the server's is missing or generic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The sizes it comes in (`48x48`, or `any` for a scalable one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<Vec<String>>,
    /// The theme it is drawn for; none: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theme: Option<IconTheme>,
}

impl Icon {
    /// An icon at `src`.
    pub fn new(src: impl Into<String>) -> Self {
        Self {
            src: src.into(),
            mime_type: None,
            sizes: None,
            theme: None,
        }
    }

    /// With its MIME type.
    pub fn with_mime_type(mut self, mime: impl Into<String>) -> Self {
        self.mime_type = Some(mime.into());
        self
    }

    /// With the sizes it comes in.
    pub fn with_sizes(mut self, sizes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.sizes = Some(sizes.into_iter().map(Into::into).collect());
        self
    }

    /// With the theme it is drawn for.
    pub fn with_theme(mut self, theme: IconTheme) -> Self {
        self.theme = Some(theme);
        self
    }

    /// The icons of an entry's `icons` field as a peer sent it: each that is not an icon of
    /// this protocol revision (no `src`, an unknown theme) is left out, rather than failing
    /// the whole entry it belongs to.
    pub fn read_all(icons: Option<&Value>) -> Vec<Icon> {
        icons
            .and_then(Value::as_array)
            .map(|all| {
                all.iter()
                    .filter_map(|i| Icon::deserialize(i).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Hands each of its strings to `text`, to change in place (a scrubber's walk).
    pub fn strings_mut(&mut self, text: &mut dyn FnMut(&mut String)) {
        text(&mut self.src);
        if let Some(m) = self.mime_type.as_mut() {
            text(m);
        }
        for s in self.sizes.iter_mut().flatten() {
            text(s);
        }
    }
}

/// The theme an [`Icon`] is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum IconTheme {
    /// For a light background.
    Light,
    /// For a dark background.
    Dark,
}

/// Who says a prompt message, or who a content block is for ([`Annotations::audience`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user.
    User,
    /// The assistant (the model).
    Assistant,
}

/// MCP's `annotations` on a content block: hints for the client about who the block is for,
/// how much it matters and when it changed. A block without them is for everyone.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Annotations {
    /// Who the block is for: the user, the model, or both. `None`: everyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<Vec<Role>>,
    /// How much the block matters, from 0 (least) to 1 (most important).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<f64>,
    /// When what the block shows last changed (an ISO 8601 timestamp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
}

impl Annotations {
    /// Annotations naming only who the block is for.
    ///
    /// ```
    /// use kberg_core::{Annotations, Content, Role};
    ///
    /// let shown = Content::text("Your site is live.")
    ///     .annotated(Annotations::for_audience([Role::User]));
    /// assert!(!shown.is_for(Role::Assistant));
    /// ```
    pub fn for_audience(audience: impl IntoIterator<Item = Role>) -> Self {
        Self {
            audience: Some(audience.into_iter().collect()),
            ..Self::default()
        }
    }

    /// With a priority (0 to 1).
    pub fn with_priority(mut self, priority: f64) -> Self {
        self.priority = Some(priority);
        self
    }

    /// With the time what the block shows last changed.
    pub fn with_last_modified(mut self, at: impl Into<String>) -> Self {
        self.last_modified = Some(at.into());
        self
    }
}

/// One block of a tool result or prompt message. Serializes as an MCP `ContentBlock`
/// (`{"type": "text", "text": …}`, `{"type": "image", "data": <base64>, "mimeType": …}`, …).
///
/// A block with MCP `annotations` or a `_meta` is [`Content::Annotated`]: read it through
/// [`Content::block`], [`Content::annotations`] and [`Content::meta`], which see through
/// them.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Content {
    /// Plain text.
    Text(String),
    /// An image (raw bytes; transports encode them).
    Image {
        /// The bytes.
        data: Vec<u8>,
        /// e.g. `image/png`.
        mime_type: String,
    },
    /// Audio (raw bytes).
    Audio {
        /// The bytes.
        data: Vec<u8>,
        /// e.g. `audio/wav`.
        mime_type: String,
    },
    /// A link to a resource the client may read.
    ResourceLink {
        /// Its URI.
        uri: String,
        /// Its name.
        name: String,
        /// Optional title, for people.
        title: Option<String>,
        /// Optional description.
        description: Option<String>,
        /// Optional MIME type.
        mime_type: Option<String>,
        /// Its size in bytes, if known.
        size: Option<u64>,
        /// Icons a client may show for it.
        icons: Vec<Icon>,
    },
    /// A resource's contents embedded in the result.
    Resource(ResourceContents),
    /// A block with its annotations (who it is for, its priority) or its `_meta` (what it
    /// says to the client, such as an MCP App's view). Made by [`Content::annotated`] and
    /// [`Content::with_meta`], which never nest one in another; the wire form is the block's
    /// with an `annotations` field (when there are any) and a `_meta` one.
    Annotated {
        /// The block itself (never `Annotated`).
        block: Box<Content>,
        /// Its annotations (all `None` for a block with only a `_meta`).
        annotations: Annotations,
        /// Its `_meta`, if it has one.
        meta: Option<serde_json::Map<String, Value>>,
    },
}

impl Content {
    /// A text block.
    pub fn text(s: impl Into<String>) -> Self {
        Content::Text(s.into())
    }

    /// A link to the resource `uri` named `name`, with no title, description, MIME type or
    /// size.
    pub fn resource_link(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Content::ResourceLink {
            uri: uri.into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            size: None,
            icons: Vec::new(),
        }
    }

    /// This block with `annotations`, replacing any it had (its `_meta` is kept).
    pub fn annotated(self, annotations: Annotations) -> Self {
        let (block, _, meta) = self.into_parts();
        Content::Annotated {
            block: Box::new(block),
            annotations,
            meta,
        }
    }

    /// This block with one key of its `_meta` set (replacing what it held); its annotations
    /// are kept.
    ///
    /// ```
    /// use kberg_core::Content;
    /// use serde_json::json;
    /// let block = Content::text("12:00").with_meta("example.com/at", json!(1));
    /// assert_eq!(block.block(), &Content::text("12:00"));
    /// assert_eq!(serde_json::to_value(&block).unwrap()["_meta"], json!({"example.com/at": 1}));
    /// ```
    pub fn with_meta(self, key: impl Into<String>, value: Value) -> Self {
        let (block, annotations, meta) = self.into_parts();
        let mut meta = meta.unwrap_or_default();
        meta.insert(key.into(), value);
        Content::Annotated {
            block: Box::new(block),
            annotations: annotations.unwrap_or_default(),
            meta: Some(meta),
        }
    }

    /// The block, its annotations (when it has any) and its `_meta`.
    fn into_parts(
        self,
    ) -> (
        Content,
        Option<Annotations>,
        Option<serde_json::Map<String, Value>>,
    ) {
        match self {
            Content::Annotated {
                block,
                annotations,
                meta,
            } => {
                let annotations = (annotations != Annotations::default()).then_some(annotations);
                (block.into_block(), annotations, meta)
            }
            other => (other, None, None),
        }
    }

    /// The block without its annotations and `_meta`.
    pub fn block(&self) -> &Content {
        match self {
            Content::Annotated { block, .. } => block.block(),
            other => other,
        }
    }

    /// [`Content::block`], to change it.
    pub fn block_mut(&mut self) -> &mut Content {
        match self {
            Content::Annotated { block, .. } => block.block_mut(),
            other => other,
        }
    }

    /// The block, its annotations and `_meta` dropped.
    pub fn into_block(self) -> Content {
        match self {
            Content::Annotated { block, .. } => block.into_block(),
            other => other,
        }
    }

    /// Its annotations, if it has any.
    pub fn annotations(&self) -> Option<&Annotations> {
        match self {
            Content::Annotated { annotations, .. } if *annotations != Annotations::default() => {
                Some(annotations)
            }
            _ => None,
        }
    }

    /// Its `_meta`, if it has one.
    pub fn meta(&self) -> Option<&serde_json::Map<String, Value>> {
        match self {
            Content::Annotated { meta, .. } => meta.as_ref(),
            _ => None,
        }
    }

    /// Hands every string of the block to `text` (its text, a link's URI, name, title,
    /// description, MIME type and icons, a resource's URI, MIME type and text, annotations'
    /// timestamp, and every key and string value of a `_meta`, the block's or its resource's)
    /// and a resource's bytes to `bytes`, to change them in place; an image's or audio clip's
    /// bytes are not handed on (they are media, not text). For a scrubber that must reach
    /// everything a block says: this match is exhaustive, so a kind of block added here is added
    /// to it.
    ///
    /// ```
    /// use kberg_core::Content;
    /// let mut link = Content::ResourceLink {
    ///     uri: "https://h/?t=s3cret".into(),
    ///     name: "s3cret".into(),
    ///     title: None,
    ///     description: None,
    ///     mime_type: None,
    ///     size: None,
    ///     icons: vec![],
    /// }
    /// .with_meta("seen", serde_json::json!({"s3cret": ["at s3cret"]}));
    /// link.strings_mut(&mut |s| *s = s.replace("s3cret", "***"), &mut |_| {});
    /// assert!(!format!("{link:?}").contains("s3cret"));
    /// ```
    pub fn strings_mut(
        &mut self,
        text: &mut dyn FnMut(&mut String),
        bytes: &mut dyn FnMut(&mut Vec<u8>),
    ) {
        match self {
            Content::Text(t) => text(t),
            Content::Image { mime_type, .. } | Content::Audio { mime_type, .. } => {
                text(mime_type);
            }
            Content::ResourceLink {
                uri,
                name,
                title,
                description,
                mime_type,
                size: _,
                icons,
            } => {
                for icon in icons {
                    icon.strings_mut(text);
                }
                for s in [
                    Some(uri),
                    Some(name),
                    title.as_mut(),
                    description.as_mut(),
                    mime_type.as_mut(),
                ]
                .into_iter()
                .flatten()
                {
                    text(s);
                }
            }
            Content::Resource(r) => {
                text(&mut r.uri);
                if let Some(m) = r.mime_type.as_mut() {
                    text(m);
                }
                match &mut r.body {
                    ResourceBody::Text(t) => text(t),
                    ResourceBody::Blob(b) => bytes(b),
                }
                if let Some(meta) = r.meta.as_mut() {
                    map_strings_mut(meta, text);
                }
            }
            Content::Annotated {
                block,
                annotations,
                meta,
            } => {
                block.strings_mut(text, bytes);
                if let Some(at) = annotations.last_modified.as_mut() {
                    text(at);
                }
                if let Some(meta) = meta.as_mut() {
                    map_strings_mut(meta, text);
                }
            }
        }
    }

    /// Whether the block is for `role`: it names no audience, or names `role` among it.
    pub fn is_for(&self, role: Role) -> bool {
        self.annotations()
            .and_then(|a| a.audience.as_ref())
            .is_none_or(|audience| audience.contains(&role))
    }
}

/// Every key and string value in `meta`, handed to `text` to change in place (a key that
/// changes is moved to its new name).
fn map_strings_mut(meta: &mut serde_json::Map<String, Value>, text: &mut dyn FnMut(&mut String)) {
    let entries = std::mem::take(meta);
    for (mut key, mut value) in entries {
        text(&mut key);
        value_strings_mut(&mut value, text);
        meta.insert(key, value);
    }
}

fn value_strings_mut(v: &mut Value, text: &mut dyn FnMut(&mut String)) {
    match v {
        Value::String(s) => text(s),
        Value::Array(items) => items.iter_mut().for_each(|i| value_strings_mut(i, text)),
        Value::Object(map) => map_strings_mut(map, text),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The wire form of a [`Content`] block: the derive that is this crate's one JSON codec for
/// content. Borrowed when serializing, owned when deserializing. Every kind of block may carry
/// `annotations` and a `_meta` ([`Extras`]), read into [`Content::Annotated`].
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentWire<'a> {
    Text {
        text: Cow<'a, str>,
        #[serde(flatten)]
        extras: Extras<'a>,
    },
    Image {
        #[serde(with = "base64_bytes_cow")]
        data: Cow<'a, [u8]>,
        #[serde(rename = "mimeType")]
        mime_type: Cow<'a, str>,
        #[serde(flatten)]
        extras: Extras<'a>,
    },
    Audio {
        #[serde(with = "base64_bytes_cow")]
        data: Cow<'a, [u8]>,
        #[serde(rename = "mimeType")]
        mime_type: Cow<'a, str>,
        #[serde(flatten)]
        extras: Extras<'a>,
    },
    ResourceLink {
        uri: Cow<'a, str>,
        name: Cow<'a, str>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        title: Option<Cow<'a, str>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<Cow<'a, str>>,
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<Cow<'a, str>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<u64>,
        #[serde(default, skip_serializing_if = "<[Icon]>::is_empty")]
        icons: Cow<'a, [Icon]>,
        #[serde(flatten)]
        extras: Extras<'a>,
    },
    Resource {
        resource: Cow<'a, ResourceContents>,
        #[serde(flatten)]
        extras: Extras<'a>,
    },
}

/// What every kind of block may carry besides itself.
#[derive(Default, Serialize, Deserialize)]
struct Extras<'a> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    annotations: Option<Cow<'a, Annotations>>,
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    meta: Option<Cow<'a, serde_json::Map<String, Value>>>,
}

impl<'a> ContentWire<'a> {
    /// The block's `annotations` and `_meta`.
    fn extras(&mut self) -> &mut Extras<'a> {
        match self {
            ContentWire::Text { extras, .. }
            | ContentWire::Image { extras, .. }
            | ContentWire::Audio { extras, .. }
            | ContentWire::ResourceLink { extras, .. }
            | ContentWire::Resource { extras, .. } => extras,
        }
    }
}

impl<'a> From<&'a Content> for ContentWire<'a> {
    fn from(c: &'a Content) -> Self {
        match c {
            Content::Text(t) => ContentWire::Text {
                text: t.into(),
                extras: Extras::default(),
            },
            Content::Image { data, mime_type } => ContentWire::Image {
                data: Cow::Borrowed(data),
                mime_type: mime_type.into(),
                extras: Extras::default(),
            },
            Content::Audio { data, mime_type } => ContentWire::Audio {
                data: Cow::Borrowed(data),
                mime_type: mime_type.into(),
                extras: Extras::default(),
            },
            Content::ResourceLink {
                uri,
                name,
                title,
                description,
                mime_type,
                size,
                icons,
            } => ContentWire::ResourceLink {
                uri: uri.into(),
                name: name.into(),
                title: title.as_deref().map(Cow::Borrowed),
                description: description.as_deref().map(Cow::Borrowed),
                mime_type: mime_type.as_deref().map(Cow::Borrowed),
                size: *size,
                icons: Cow::Borrowed(icons),
                extras: Extras::default(),
            },
            Content::Resource(r) => ContentWire::Resource {
                resource: Cow::Borrowed(r),
                extras: Extras::default(),
            },
            Content::Annotated { block, meta, .. } => {
                let mut wire = ContentWire::from(block.block());
                *wire.extras() = Extras {
                    annotations: c.annotations().map(Cow::Borrowed),
                    meta: meta.as_ref().map(Cow::Borrowed),
                };
                wire
            }
        }
    }
}

impl From<ContentWire<'_>> for Content {
    fn from(mut w: ContentWire<'_>) -> Self {
        let Extras { annotations, meta } = std::mem::take(w.extras());
        let block = match w {
            ContentWire::Text { text, .. } => Content::Text(text.into_owned()),
            ContentWire::Image {
                data, mime_type, ..
            } => Content::Image {
                data: data.into_owned(),
                mime_type: mime_type.into_owned(),
            },
            ContentWire::Audio {
                data, mime_type, ..
            } => Content::Audio {
                data: data.into_owned(),
                mime_type: mime_type.into_owned(),
            },
            ContentWire::ResourceLink {
                uri,
                name,
                title,
                description,
                mime_type,
                size,
                icons,
                ..
            } => Content::ResourceLink {
                uri: uri.into_owned(),
                name: name.into_owned(),
                title: title.map(Cow::into_owned),
                description: description.map(Cow::into_owned),
                mime_type: mime_type.map(Cow::into_owned),
                size,
                icons: icons.into_owned(),
            },
            ContentWire::Resource { resource, .. } => Content::Resource(resource.into_owned()),
        };
        if annotations.is_none() && meta.is_none() {
            return block;
        }
        Content::Annotated {
            block: Box::new(block),
            annotations: annotations.map(Cow::into_owned).unwrap_or_default(),
            meta: meta.map(Cow::into_owned),
        }
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ContentWire::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        ContentWire::deserialize(d).map(Content::from)
    }
}

/// What a tool call produced. Serializes as an MCP `CallToolResult` (`content`,
/// `structuredContent`, `isError`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolOutput {
    /// Content blocks, for the model.
    pub content: Vec<Content>,
    /// Structured result, for programs (matches the output schema when one is declared).
    #[serde(
        rename = "structuredContent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub structured: Option<Value>,
    /// Whether this is an error result (the model sees it; the call itself completed).
    #[serde(rename = "isError", default)]
    pub is_error: bool,
    /// The result's `_meta`, for the client rather than the model (an MCP App's view reads
    /// it); `None` for none. Boxed: most results have none, and a result is moved often.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Box<serde_json::Map<String, Value>>>,
}

impl ToolOutput {
    /// A single text block.
    pub fn text(s: impl Into<String>) -> Self {
        Self {
            content: vec![Content::Text(s.into())],
            ..Self::default()
        }
    }

    /// Content blocks.
    pub fn contents(content: Vec<Content>) -> Self {
        Self {
            content,
            ..Self::default()
        }
    }

    /// An error result with a sentence and structured details.
    pub fn error_with(message: impl Into<String>, details: Value) -> Self {
        Self {
            content: vec![Content::Text(message.into())],
            structured: Some(details),
            is_error: true,
            meta: None,
        }
    }

    /// Adds structured content.
    pub fn with_structured(mut self, v: Value) -> Self {
        self.structured = Some(v);
        self
    }

    /// Sets one key of the result's `_meta` (replacing what it held).
    pub fn with_meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.meta
            .get_or_insert_with(Box::default)
            .insert(key.into(), value);
        self
    }

    /// All text blocks joined by newlines.
    pub fn all_text(&self) -> String {
        let mut s = String::new();
        for c in &self.content {
            if let Content::Text(t) = c.block() {
                if !s.is_empty() {
                    s.push('\n');
                }
                s.push_str(t);
            }
        }
        s
    }
}

/// A tool result as JSON, in the MCP `CallToolResult` shape (bytes as base64): the serde form
/// of [`ToolOutput`].
pub fn output_to_json(out: &ToolOutput) -> Value {
    serde_json::to_value(out).unwrap_or_else(|e| {
        // Every field is a string, bytes, a bool or already a JSON value: this cannot fail.
        tracing::error!(error = %e, "a tool result did not serialize");
        Value::Null
    })
}

/// The inverse of [`output_to_json`]: a `CallToolResult` read back, or why it is not one.
pub fn output_from_json(v: &Value) -> Result<ToolOutput, String> {
    ToolOutput::deserialize(v).map_err(|e| e.to_string())
}

/// Bytes as standard base64 strings.
mod base64_bytes {
    use super::*;

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = Cow::<str>::deserialize(d)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(|e| serde::de::Error::custom(format!("not base64: {e}")))
    }
}

/// [`base64_bytes`] for the borrowed wire form.
mod base64_bytes_cow {
    use super::*;

    // serde hands a `with` module the field as it is declared: a reference to the `Cow`.
    #[allow(clippy::ptr_arg)]
    pub(super) fn serialize<S: Serializer>(bytes: &Cow<'_, [u8]>, s: S) -> Result<S::Ok, S::Error> {
        super::base64_bytes::serialize(bytes, s)
    }

    pub(super) fn deserialize<'de, 'a, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Cow<'a, [u8]>, D::Error> {
        super::base64_bytes::deserialize(d).map(Cow::Owned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn every_kind() -> ToolOutput {
        ToolOutput {
            content: vec![
                Content::text("hi"),
                Content::Image {
                    data: vec![1, 2, 255],
                    mime_type: "image/png".into(),
                },
                Content::Audio {
                    data: vec![0],
                    mime_type: "audio/wav".into(),
                },
                Content::ResourceLink {
                    uri: "app://x".into(),
                    name: "x".into(),
                    title: None,
                    description: None,
                    mime_type: Some("text/plain".into()),
                    size: None,
                    icons: vec![],
                },
                Content::Resource(ResourceContents::blob("app://b", None, vec![9, 8])),
                Content::Resource(
                    ResourceContents::text("app://t", Some("text/plain"), "t")
                        .meta("ui", json!({"prefersBorder": true})),
                ),
            ],
            structured: Some(json!({"n": 1})),
            is_error: true,
            meta: json!({"app/seen": 2}).as_object().cloned().map(Box::new),
        }
    }

    #[test]
    fn outputs_round_trip_through_json() {
        let out = every_kind();
        assert_eq!(output_from_json(&output_to_json(&out)).unwrap(), out);
        assert!(output_from_json(&json!({"content": [{"type": "video"}]})).is_err());
        assert!(
            output_from_json(
                &json!({"content": [{"type": "image", "data": "!!", "mimeType": "x"}]})
            )
            .is_err()
        );
        assert!(output_from_json(&json!({})).is_err());
    }

    #[test]
    fn the_wire_shape_is_mcps() {
        let v = output_to_json(&every_kind());
        assert_eq!(v["content"][0], json!({"type": "text", "text": "hi"}));
        assert_eq!(
            v["content"][1],
            json!({"type": "image", "data": "AQL/", "mimeType": "image/png"})
        );
        assert_eq!(
            v["content"][3],
            json!({"type": "resource_link", "uri": "app://x", "name": "x", "mimeType": "text/plain"})
        );
        assert_eq!(
            v["content"][4],
            json!({"type": "resource", "resource": {"uri": "app://b", "blob": "CQg="}})
        );
        assert_eq!(
            v["content"][5]["resource"],
            json!({"uri": "app://t", "mimeType": "text/plain", "text": "t",
                   "_meta": {"ui": {"prefersBorder": true}}})
        );
        assert_eq!(v["structuredContent"], json!({"n": 1}));
        assert_eq!(v["isError"], true);
        assert_eq!(v["_meta"], json!({"app/seen": 2}));
        let bare = output_to_json(&ToolOutput::text("x"));
        assert!(bare.get("_meta").is_none(), "{bare}");
    }

    /// MCP's `annotations` on a block (who it is for, its priority, when it changed) are read
    /// and written again as they came, on every kind of block, and never nest.
    #[test]
    fn annotations_survive_the_round_trip() {
        let v = json!({"content": [
            {"type": "text", "text": "done", "annotations": {"audience": ["user"], "priority": 0.7}},
            {"type": "image", "data": "AQI=", "mimeType": "image/png",
             "annotations": {"audience": ["user", "assistant"], "lastModified": "2025-01-12T15:00:58Z"}},
            {"type": "resource_link", "uri": "u", "name": "n", "annotations": {"priority": 1.0}},
            {"type": "resource", "resource": {"uri": "u", "text": "t"},
             "annotations": {"audience": ["assistant"]}},
            {"type": "text", "text": "plain"}
        ], "isError": false});
        let out = output_from_json(&v).unwrap();
        assert_eq!(output_to_json(&out), v);
        let first = &out.content[0];
        assert_eq!(first.block(), &Content::text("done"));
        assert_eq!(
            first.annotations().and_then(|a| a.audience.clone()),
            Some(vec![Role::User])
        );
        assert!(first.is_for(Role::User));
        assert!(!first.is_for(Role::Assistant));
        assert!(out.content[1].is_for(Role::Assistant));
        assert!(
            out.content[2].is_for(Role::Assistant),
            "no audience: for everyone"
        );
        assert!(!out.content[3].is_for(Role::User));
        assert_eq!(out.content[4].annotations(), None);
        assert_eq!(out.all_text(), "done\nplain");

        // Annotating an annotated block replaces its annotations: blocks never nest.
        let twice = Content::text("x")
            .annotated(Annotations::for_audience([Role::User]))
            .annotated(Annotations::for_audience([Role::Assistant]));
        assert_eq!(twice.block(), &Content::text("x"));
        assert_eq!(
            serde_json::to_value(&twice).unwrap(),
            json!({"type": "text", "text": "x", "annotations": {"audience": ["assistant"]}})
        );
        // An audience that is not MCP's is refused like any malformed block.
        assert!(
            output_from_json(&json!({"content": [
                {"type": "text", "text": "x", "annotations": {"audience": ["robot"]}}
            ]}))
            .is_err()
        );
    }

    /// A block's `_meta`, a resource link's title and size, and an embedded resource's
    /// `_meta` are read and written again as they came, beside annotations or alone.
    #[test]
    fn block_meta_and_link_fields_survive_the_round_trip() {
        let v = json!({"content": [
            {"type": "text", "text": "12:00", "_meta": {"example.com/block": 1}},
            {"type": "text", "text": "for you", "annotations": {"audience": ["user"]},
             "_meta": {"k": "v"}},
            {"type": "resource_link", "uri": "ui://clock/app.html", "name": "app",
             "title": "The clock", "size": 18,
             "icons": [{"src": "data:image/png;base64,AA==", "sizes": ["16x16"],
                        "theme": "light"}]},
            {"type": "resource", "resource": {"uri": "u", "text": "t", "_meta": {"ui": {}}}}
        ], "isError": false});
        let out = output_from_json(&v).unwrap();
        assert_eq!(out.content[0].block(), &Content::text("12:00"));
        assert_eq!(out.content[0].annotations(), None);
        assert_eq!(
            out.content[0].meta(),
            json!({"example.com/block": 1}).as_object()
        );
        assert!(!out.content[1].is_for(Role::Assistant));
        assert_eq!(
            out.content[2],
            Content::ResourceLink {
                uri: "ui://clock/app.html".into(),
                name: "app".into(),
                title: Some("The clock".into()),
                description: None,
                mime_type: None,
                size: Some(18),
                icons: vec![
                    Icon::new("data:image/png;base64,AA==")
                        .with_sizes(["16x16"])
                        .with_theme(IconTheme::Light)
                ],
            }
        );
        assert_eq!(output_to_json(&out), v);
        // Annotating keeps the `_meta`, and the `_meta` keeps the annotations.
        let both = Content::text("x")
            .with_meta("a", json!(1))
            .annotated(Annotations::default().with_priority(1.0))
            .with_meta("b", json!(2));
        assert_eq!(
            serde_json::to_value(&both).unwrap(),
            json!({"type": "text", "text": "x", "annotations": {"priority": 1.0},
                   "_meta": {"a": 1, "b": 2}})
        );
        assert_eq!(both.clone().into_block(), Content::text("x"));
    }

    /// Icons as a peer sent them: one that is not an icon of this revision is left out, the
    /// others kept; a field that is not a list gives none.
    #[test]
    fn icons_that_do_not_read_are_left_out() {
        let sent = json!([
            {"src": "https://i.example/a.png"},
            {"mimeType": "image/png"},
            {"src": "https://i.example/b.png", "theme": "sepia"},
            {"src": 5},
            "https://i.example/c.png",
            {"src": "https://i.example/d.svg", "sizes": ["any"], "theme": "dark"}
        ]);
        assert_eq!(
            Icon::read_all(Some(&sent)),
            [
                Icon::new("https://i.example/a.png"),
                Icon::new("https://i.example/d.svg")
                    .with_sizes(["any"])
                    .with_theme(IconTheme::Dark),
            ]
        );
        for not_a_list in [json!({"src": "x"}), json!("x"), Value::Null] {
            assert!(Icon::read_all(Some(&not_a_list)).is_empty());
        }
        assert!(Icon::read_all(None).is_empty());
    }

    /// Every key and string of a `_meta` reaches `strings_mut`, the block's and an embedded
    /// resource's alike.
    #[test]
    fn strings_mut_reaches_every_meta() {
        let mut blocks = [
            Content::text("x")
                .with_meta("s3cret", json!({"k": ["at s3cret", 1, {"s3cret": null}]})),
            Content::Resource(ResourceContents::text("u", None, "t").meta("m", json!("s3cret"))),
        ];
        for b in &mut blocks {
            b.strings_mut(&mut |s| *s = s.replace("s3cret", "***"), &mut |_| {});
            let shown = serde_json::to_string(&*b).unwrap();
            assert!(!shown.contains("s3cret"), "{shown}");
        }
    }

    #[test]
    fn older_stored_forms_still_read() {
        // Tickets filed before the derive wrote explicit nulls for absent optional fields.
        let v = json!({"content": [
            {"type": "resource_link", "uri": "u", "name": "n", "description": null, "mimeType": null},
            {"type": "resource", "resource": {"uri": "u", "mimeType": null, "text": "t"}}
        ], "isError": false});
        let out = output_from_json(&v).unwrap();
        assert_eq!(out.content[0], Content::resource_link("u", "n"));
        assert_eq!(
            out.content[1],
            Content::Resource(ResourceContents::text("u", None, "t"))
        );
    }
}
