//! Tools: the app-side action surface.
//!
//! A tool is described once by a [`ToolSpec`] (name, description, schemas, [`ToolKind`],
//! annotations) and run by [`Tool::call`]. Most apps never implement [`Tool`] by hand: a
//! [`ToolBuilder`] turns an async closure into a tool, and when the closure takes a Rust struct
//! its input schema comes from `schemars`, so no schema is ever written by hand.
//!
//! The kind is the guardrail: a [`ToolKind::Read`] tool changes nothing and may be called by any
//! authenticated caller; a [`ToolKind::Write`] tool names the [`WriteCapability`] a caller must
//! be granted. The MCP hints (`readOnlyHint`, `destructiveHint`, `idempotentHint`) follow from the
//! kind unless the app sets them.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::capability::WriteCapability;
use crate::content::{Content, ToolOutput};
use crate::context::{PeerError, ToolContext};
use crate::error::CoreError;

/// Whether a tool changes state, and if so under which capability.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// No state change.
    Read,
    /// Mutates state; callable only with the capability granted.
    Write(WriteCapability),
}

impl ToolKind {
    /// The capability id of a write tool.
    pub fn capability(&self) -> Option<&str> {
        match self {
            ToolKind::Read => None,
            ToolKind::Write(c) => Some(c.id()),
        }
    }

    /// `read` or `write`, for logs and audit.
    pub fn label(&self) -> &'static str {
        match self {
            ToolKind::Read => "read",
            ToolKind::Write(_) => "write",
        }
    }
}

/// The MCP tool hints. `None` means "derive from the kind".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolHints {
    /// The tool does not modify its environment.
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    pub destructive_hint: Option<bool>,
    /// Calling it twice with the same arguments has no extra effect.
    pub idempotent_hint: Option<bool>,
    /// The tool reaches entities outside the app (the web, other services).
    pub open_world_hint: Option<bool>,
}

/// Everything a client is told about a tool, plus Kberg's own classification.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ToolSpec {
    /// Unique name (1 to 128 of `A-Z a-z 0-9 _ - .`).
    pub name: String,
    /// Human title.
    pub title: Option<String>,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    pub input_schema: Value,
    /// JSON Schema of the structured result, if the tool declares one.
    pub output_schema: Option<Value>,
    /// Read or Write(capability).
    pub kind: ToolKind,
    /// Whether it is offered to the `Compact` projection (small models).
    pub small_model_safe: bool,
    /// Hints as the app set them; see [`ToolSpec::hints`] for the effective ones.
    pub hints: ToolHints,
    /// The tool previews: its first call is a dry run answered with a commit token, and only a
    /// call carrying that token runs it for real. See [`crate::CallPhase`].
    pub previews: bool,
    /// Arguments redacted before the audit digest is taken: JSON pointers (`/password`,
    /// `/accounts/*/pin`) or top-level names. See [`crate::redact`].
    pub sensitive_fields: Vec<String>,
    /// The top-level argument that carries the scope, when the tool works in one. Set by
    /// [`ToolBuilder::scope_field`], or found from a [`crate::Scope`]-typed field.
    pub scope_field: Option<String>,
    /// Whether the tool may run as a task (the MCP tasks extension): never (the default), when
    /// the client supports tasks, or only as a task. See [`TaskSupport`].
    pub task_support: TaskSupport,
    /// A task tool that first runs inside the call: it may finish there or ask the client
    /// (in `input_required` round trips), and becomes a task the first time it waits on
    /// anything else. Set by [`ToolBuilder::task_after_input`].
    pub task_after_input: bool,
    /// The tool's `_meta` as clients are told it: keys for extensions, such as MCP Apps'
    /// `ui` (`{"resourceUri": "ui://..."}`, the interactive view a host shows for the tool).
    /// Empty for none. kberg-server adds its own `kberg/capability` to a Write tool's. Set by
    /// [`ToolBuilder::meta`].
    pub meta: serde_json::Map<String, Value>,
    /// Icons a client may show for the tool. Set by [`ToolBuilder::icon`].
    pub icons: Vec<crate::content::Icon>,
}

/// Whether a tool may run as a task: a call that answers at once with a task id while the tool
/// goes on working, its status and result read later (`tasks/get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskSupport {
    /// The tool always answers within the call (the default).
    #[default]
    Forbidden,
    /// The tool runs as a task when the client supports tasks, and within the call otherwise.
    Optional,
    /// The tool only runs as a task; a client that does not support tasks is refused.
    Required,
}

impl ToolSpec {
    /// A spec with the given name, description, schema and kind, and no hints set.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        kind: ToolKind,
    ) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema,
            output_schema: None,
            kind,
            small_model_safe: false,
            hints: ToolHints::default(),
            previews: false,
            sensitive_fields: Vec::new(),
            scope_field: None,
            task_support: TaskSupport::Forbidden,
            task_after_input: false,
            meta: serde_json::Map::new(),
            icons: Vec::new(),
        }
    }

    /// The effective hints: what the app set, and what follows from the kind elsewhere. A Read
    /// tool is read-only, not destructive and idempotent; a Write tool is not read-only,
    /// destructive and not idempotent (the MCP defaults), unless the app says otherwise.
    pub fn hints(&self) -> ToolHints {
        let read = matches!(self.kind, ToolKind::Read);
        ToolHints {
            read_only_hint: Some(self.hints.read_only_hint.unwrap_or(read)),
            destructive_hint: Some(self.hints.destructive_hint.unwrap_or(!read)),
            idempotent_hint: Some(self.hints.idempotent_hint.unwrap_or(read)),
            open_world_hint: self.hints.open_world_hint,
        }
    }
}

impl ToolOutput {
    /// A structured result, also rendered as JSON text for clients that only read content.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self, ToolError> {
        let v = serde_json::to_value(value)
            .map_err(|e| ToolError::failed(format!("result does not serialize: {e}")))?;
        Ok(Self {
            content: vec![Content::Text(v.to_string())],
            structured: Some(v),
            is_error: false,
            meta: None,
        })
    }
}

/// How a tool reports that it could not do its job.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The tool failed; the message is shown to the model.
    #[error("{message}")]
    Failed {
        /// What went wrong, in words the model can use.
        message: String,
    },
    /// Talking to the client failed (or, on the stateless protocol, needs another round trip).
    #[error(transparent)]
    Peer(#[from] PeerError),
}

impl ToolError {
    /// A failure with a message for the model.
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed {
            message: message.into(),
        }
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::failed(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError::failed(message)
    }
}

/// An app function exposed to models. Implement it directly for full control, or build one
/// with [`ToolBuilder`].
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The tool's description. Called once, at registration.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool. The gate calls this only after every check passed, so `args` match the
    /// input schema.
    async fn call(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError>;

    /// The tool's synchronous body, for a tool whose work never waits (a lookup, a
    /// computation over the app's state). Called once, at registration. When it returns one,
    /// the gate runs it directly, borrowing the call's context, with no boxed future and no
    /// copy of the context; [`call`](Tool::call) must do the same work (other paths, such as a
    /// tool run as a task, still use it). The default is none.
    fn synchronous(&self) -> Option<SyncHandler> {
        None
    }

    /// The tool's body as a function whose future owns all it needs (it borrows neither the
    /// tool nor anything else), for a tool that has one. Called once, at registration. When it
    /// returns one, the gate calls it instead of [`call`](Tool::call) and keeps the future in
    /// the call's own, with no second allocation to hold the tool; [`call`](Tool::call) must
    /// do the same work. The default is none: the gate then wraps [`call`](Tool::call) in a
    /// future that holds the tool.
    fn detached(&self) -> Option<AsyncHandler> {
        None
    }
}

/// The future of a tool's run that borrows nothing (see [`Tool::detached`]).
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send>>;

/// A tool body that gets the (validated) arguments and the call's context and returns a
/// future that borrows nothing. See [`Tool::detached`] and [`ToolBuilder::raw_handler`].
pub type AsyncHandler = Arc<dyn Fn(Value, ToolContext) -> ToolFuture + Send + Sync>;

/// A tool body that finishes without waiting: it gets the (validated) arguments and borrows
/// the call's context. See [`Tool::synchronous`] and [`ToolBuilder::raw_sync_handler`].
pub type SyncHandler =
    Arc<dyn Fn(Value, &ToolContext) -> Result<ToolOutput, ToolError> + Send + Sync>;

/// A tool made from a closure by [`ToolBuilder`].
pub struct FnTool {
    spec: ToolSpec,
    handler: AsyncHandler,
    /// Set for the synchronous handler kinds; `handler` then runs it in a ready future.
    sync: Option<SyncHandler>,
}

impl std::fmt::Debug for FnTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTool").field("spec", &self.spec).finish()
    }
}

// Written out instead of `#[async_trait]`: the handler already returns a boxed future, and
// handing it over as is saves the second allocation `async fn` would wrap it in.
impl Tool for FnTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn call<'life0, 'async_trait>(
        &'life0 self,
        args: Value,
        ctx: ToolContext,
    ) -> Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        (self.handler)(args, ctx)
    }

    fn synchronous(&self) -> Option<SyncHandler> {
        self.sync.clone()
    }

    fn detached(&self) -> Option<AsyncHandler> {
        Some(Arc::clone(&self.handler))
    }
}

/// Builds a [`FnTool`]: the one-line way to expose a function.
///
/// ```
/// use kberg_core::{ToolBuilder, ToolOutput, WriteCapability};
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct AddNote {
///     /// The note's title.
///     title: String,
/// }
///
/// let write = WriteCapability::new("notes.write", "Create and edit notes");
/// let tool = ToolBuilder::new("add_note")
///     .description("Create a note")
///     .write(write)
///     .handler(|args: AddNote, _ctx| async move {
///         Ok(ToolOutput::text(format!("created {}", args.title)))
///     });
/// ```
#[derive(Debug, Clone)]
pub struct ToolBuilder {
    spec: ToolSpec,
}

impl ToolBuilder {
    /// Starts a Read tool with this name and an empty description.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            spec: ToolSpec::new(name, "", Value::Null, ToolKind::Read),
        }
    }

    /// Sets the description the model reads.
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.spec.description = d.into();
        self
    }

    /// Sets the human title.
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.spec.title = Some(t.into());
        self
    }

    /// Marks the tool Read (the default).
    pub fn read(mut self) -> Self {
        self.spec.kind = ToolKind::Read;
        self
    }

    /// Marks the tool Write under `capability`.
    pub fn write(mut self, capability: WriteCapability) -> Self {
        self.spec.kind = ToolKind::Write(capability);
        self
    }

    /// Offers the tool to the `Compact` projection (small models).
    pub fn small_model_safe(mut self) -> Self {
        self.spec.small_model_safe = true;
        self
    }

    /// Overrides the derived `readOnlyHint`.
    pub fn read_only_hint(mut self, v: bool) -> Self {
        self.spec.hints.read_only_hint = Some(v);
        self
    }

    /// Overrides the derived `destructiveHint`.
    pub fn destructive_hint(mut self, v: bool) -> Self {
        self.spec.hints.destructive_hint = Some(v);
        self
    }

    /// Overrides the derived `idempotentHint`.
    pub fn idempotent_hint(mut self, v: bool) -> Self {
        self.spec.hints.idempotent_hint = Some(v);
        self
    }

    /// Sets `openWorldHint`.
    pub fn open_world_hint(mut self, v: bool) -> Self {
        self.spec.hints.open_world_hint = Some(v);
        self
    }

    /// Makes the tool preview first (a two-step write): the first call runs it with
    /// [`ToolContext::phase`] = `Preview` and answers with its output plus a commit token; the
    /// call repeated with the same arguments and `commit_token` runs it with `Commit`.
    pub fn previews(mut self) -> Self {
        self.spec.previews = true;
        self
    }

    /// Declares an argument sensitive: its value is redacted before the audit digest is taken
    /// and in the confirmation question shown to a human. A JSON pointer (`/auth/token`,
    /// `/items/*/pin`) or a top-level name.
    pub fn sensitive(mut self, field: impl Into<String>) -> Self {
        self.spec.sensitive_fields.push(field.into());
        self
    }

    /// Names the top-level argument that carries the scope (for a hand-written schema; a
    /// typed tool marks it by giving the field the type [`crate::Scope`]). The gate fills it
    /// with the caller's current scope when left out and refuses scopes the caller may not use.
    pub fn scope_field(mut self, field: impl Into<String>) -> Self {
        self.spec.scope_field = Some(field.into());
        self
    }

    /// Lets the tool run as a task (see [`TaskSupport`]). Long-running tools (indexing a
    /// repository, waiting for a human) declare [`TaskSupport::Optional`] so that a client
    /// that supports tasks gets a task id at once and polls for the result.
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.spec.task_support = support;
        self
    }

    /// For a task tool: run it inside the call first. It may finish there (a plain result) or
    /// ask the client questions (answered in `input_required` round trips on 2026-07-28); it
    /// becomes a task the first time it waits on anything else, and its questions from then on
    /// are the task's `inputRequests`.
    pub fn task_after_input(mut self) -> Self {
        self.spec.task_after_input = true;
        self
    }

    /// Sets one key of the tool's `_meta` (replacing what it held), for an extension clients
    /// read there: MCP Apps' view of the tool is
    /// `.meta("ui", json!({"resourceUri": "ui://clock/app.html"}))`, beside a resource of that
    /// URI serving the view (`text/html;profile=mcp-app`).
    ///
    /// ```
    /// use kberg_core::ToolBuilder;
    /// use serde_json::json;
    /// let tool = ToolBuilder::new("clock")
    ///     .meta("ui", json!({"resourceUri": "ui://clock/app.html"}))
    ///     .sync_handler(|_: serde_json::Value, _| Ok(kberg_core::ToolOutput::text("12:00")));
    /// # use kberg_core::Tool as _;
    /// assert_eq!(tool.spec().meta["ui"]["resourceUri"], "ui://clock/app.html");
    /// ```
    pub fn meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.spec.meta.insert(key.into(), value);
        self
    }

    /// Adds an icon a client may show for the tool.
    pub fn icon(mut self, icon: crate::content::Icon) -> Self {
        self.spec.icons.push(icon);
        self
    }

    /// Declares the structured result's schema, generated from `T`.
    pub fn output<T: JsonSchema>(mut self) -> Self {
        self.spec.output_schema = Some(schema_of::<T>());
        self
    }

    /// Declares the structured result's schema by hand.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.spec.output_schema = Some(schema);
        self
    }

    /// Finishes with a typed handler: the input schema is generated from `A`, and the handler
    /// receives the arguments deserialized into `A`.
    pub fn handler<A, F, Fut>(mut self, f: F) -> FnTool
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        self.spec.input_schema = schema_of::<A>();
        let f = Arc::new(f);
        let _marker: PhantomData<A> = PhantomData;
        let handler: AsyncHandler = Arc::new(move |args: Value, ctx: ToolContext| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                // The gate validated `args` against the schema generated from `A`; a mismatch
                // here means serde is stricter than the schema (custom deserializers).
                let typed: A = read_args(args)?;
                f(typed, ctx).await
            }) as ToolFuture
        });
        FnTool {
            spec: self.spec,
            handler,
            sync: None,
        }
    }

    /// Finishes with an untyped handler and a hand-written input schema (for schemas that are
    /// data, not types: loaded from a file, proxied from another server).
    pub fn raw_handler<F, Fut>(mut self, input_schema: Value, f: F) -> FnTool
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
    {
        self.spec.input_schema = input_schema;
        let handler: AsyncHandler = Arc::new(move |args, ctx| Box::pin(f(args, ctx)) as ToolFuture);
        FnTool {
            spec: self.spec,
            handler,
            sync: None,
        }
    }

    /// Finishes with a typed handler that completes without waiting: the input schema is
    /// generated from `A`, the handler receives the arguments deserialized into `A` and borrows
    /// the call's context. The gate runs it directly, with no boxed future (see
    /// [`Tool::synchronous`]); use [`handler`](Self::handler) for anything that awaits.
    ///
    /// ```
    /// use kberg_core::{ToolBuilder, ToolOutput};
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Add { a: i64, b: i64 }
    ///
    /// let tool = ToolBuilder::new("add")
    ///     .sync_handler(|x: Add, _ctx| Ok(ToolOutput::text((x.a + x.b).to_string())));
    /// ```
    pub fn sync_handler<A, F>(mut self, f: F) -> FnTool
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(A, &ToolContext) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
    {
        self.spec.input_schema = schema_of::<A>();
        let _marker: PhantomData<A> = PhantomData;
        self.finish_sync(Arc::new(move |args: Value, ctx: &ToolContext| {
            // As in `handler`: the gate validated `args` against the schema generated from `A`.
            let typed: A = read_args(args)?;
            f(typed, ctx)
        }))
    }

    /// Finishes with an untyped handler that completes without waiting, and a hand-written
    /// input schema. The gate runs it directly, with no boxed future (see
    /// [`Tool::synchronous`]).
    pub fn raw_sync_handler<F>(mut self, input_schema: Value, f: F) -> FnTool
    where
        F: Fn(Value, &ToolContext) -> Result<ToolOutput, ToolError> + Send + Sync + 'static,
    {
        self.spec.input_schema = input_schema;
        self.finish_sync(Arc::new(f))
    }

    fn finish_sync(self, sync: SyncHandler) -> FnTool {
        let body = Arc::clone(&sync);
        let handler: AsyncHandler = Arc::new(move |args, ctx: ToolContext| {
            Box::pin(std::future::ready(body(args, &ctx))) as ToolFuture
        });
        FnTool {
            spec: self.spec,
            handler,
            sync: Some(sync),
        }
    }
}

/// The JSON Schema `schemars` generates for `T` (draft 2020-12), as a JSON value.
///
/// Object schemas are made strict (`additionalProperties: false`) unless the type says
/// otherwise: a model that misspells an optional field is told so, instead of having the field
/// silently ignored.
pub fn schema_of<T: JsonSchema>() -> Value {
    let schema = schemars::schema_for!(T);
    let mut v = serde_json::to_value(schema).expect("a schemars schema serializes");
    if let Some(obj) = v.as_object_mut() {
        // MCP clients render the title themselves; the Rust type name is noise for a model.
        obj.remove("title");
        if obj.get("type") == Some(&Value::String("object".into()))
            && obj.contains_key("properties")
            && !obj.contains_key("additionalProperties")
        {
            obj.insert("additionalProperties".into(), Value::Bool(false));
        }
    }
    v
}

/// Reads a typed tool's validated arguments as `A`.
///
/// JSON Schema counts a whole number written with a fraction (`2.0`, as small models often
/// write integers) as an integer, so the gate lets it through; serde reads it into no integer
/// field. When the arguments hold such a number and the strict read fails, each one that an
/// `i64` or `u64` holds exactly is read again as that integer. Arguments without one are read
/// once, as they are.
fn read_args<A: DeserializeOwned>(mut args: Value) -> Result<A, ToolError> {
    let unreadable =
        |e: serde_json::Error| ToolError::failed(format!("the arguments could not be read: {e}"));
    if !has_whole_float(&args) {
        return serde_json::from_value(args).map_err(unreadable);
    }
    if let Ok(typed) = A::deserialize(&args) {
        return Ok(typed);
    }
    whole_floats_as_integers(&mut args);
    serde_json::from_value(args).map_err(unreadable)
}

/// A float with no fraction that an `i64` or `u64` holds exactly, as that integer.
fn whole_integer(n: &serde_json::Number) -> Option<serde_json::Number> {
    if !n.is_f64() {
        return None;
    }
    let f = n.as_f64()?;
    if f.fract() != 0.0 || !f.is_finite() {
        return None;
    }
    // The bounds are powers of two, exact as floats; within them the cast is exact.
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
        Some((f as i64).into())
    } else if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
        Some((f as u64).into())
    } else {
        None
    }
}

fn has_whole_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => whole_integer(n).is_some(),
        Value::Array(items) => items.iter().any(has_whole_float),
        Value::Object(map) => map.values().any(has_whole_float),
        _ => false,
    }
}

fn whole_floats_as_integers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            if let Some(i) = whole_integer(n) {
                *n = i;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_floats_as_integers),
        Value::Object(map) => map.values_mut().for_each(whole_floats_as_integers),
        _ => {}
    }
}

/// The longest tool or prompt name, in bytes (its characters are ASCII).
pub(crate) const MAX_NAME_LEN: usize = 128;

/// A name (or id) a caller asked for, as a refusal, an error and an audit record quote it: as
/// sent when it is no longer than a name may be (128 bytes), else cut to 128 bytes (at a
/// character boundary) and marked with `...`. No tool, prompt, scope or task has a longer name
/// or id, and a caller may send megabytes of one, which an answer (and any log line of it)
/// would otherwise repeat whole. Transports quote what a client named with it too (a tool
/// name in a refusal of their own, such as `too_many_calls`).
pub fn quoted_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.len() <= MAX_NAME_LEN {
        return std::borrow::Cow::Borrowed(name);
    }
    let cut = crate::text::char_floor(name, MAX_NAME_LEN);
    std::borrow::Cow::Owned(format!("{}...", &name[..cut]))
}

/// Checks a tool or prompt name against what MCP clients accept: 1 to 128 characters of
/// ASCII letters, digits, `_`, `-` and `.`.
pub fn check_name(name: &str) -> Result<(), CoreError> {
    let reason = if name.is_empty() {
        Some("a name must not be empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("a name must be at most 128 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        Some("a name may only use ASCII letters, digits, `_`, `-` and `.`")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CoreError::InvalidName {
            name: name.to_string(),
            reason,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// A title.
        title: String,
        count: Option<u32>,
    }

    #[test]
    fn typed_schema_comes_from_the_type() {
        let t = ToolBuilder::new("t").handler(|_a: Args, _c| async { Ok(ToolOutput::default()) });
        let s = t.spec();
        assert_eq!(s.input_schema["type"], "object");
        assert_eq!(s.input_schema["required"], serde_json::json!(["title"]));
        assert!(s.input_schema.get("title").is_none());
    }

    #[test]
    fn hints_follow_the_kind() {
        let r = ToolBuilder::new("r")
            .raw_handler(Value::Null, |_a, _c| async { Ok(ToolOutput::default()) });
        let h = r.spec().hints();
        assert_eq!(h.read_only_hint, Some(true));
        assert_eq!(h.destructive_hint, Some(false));
        assert_eq!(h.idempotent_hint, Some(true));
        let w = ToolBuilder::new("w")
            .write(WriteCapability::new("c", "d"))
            .destructive_hint(false)
            .raw_handler(Value::Null, |_a, _c| async { Ok(ToolOutput::default()) });
        let h = w.spec().hints();
        assert_eq!(h.read_only_hint, Some(false));
        assert_eq!(h.destructive_hint, Some(false));
        assert_eq!(h.idempotent_hint, Some(false));
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("notes.add_v2-x").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("has space").is_err());
        assert!(check_name(&"a".repeat(129)).is_err());
        assert!(check_name("emoji😀").is_err());
    }
}
