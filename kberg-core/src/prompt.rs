//! The [`PromptRegistry`]: reusable prompt templates with declared arguments.
//!
//! A prompt declares its arguments once; `get` checks that every required argument is present
//! (and that no undeclared one is passed) before the handler builds the messages, so a handler
//! never sees incomplete input. Arguments may list values for `completion/complete`.
//!
//! A prompt registered with [`PromptRegistry::register_with_context`] also receives a
//! [`ToolContext`], so it can ask the client something while it renders (`elicit`, `sample`,
//! `roots`, or `kberg_server::input::ask`). On the stateless protocol such a question ends the
//! rendering with [`PromptError::InputRequired`], which the server answers as an
//! `input_required` result; the prompt is rendered again when the client re-sends `prompts/get`
//! with the answers.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use futures::FutureExt;
use serde_json::Value;
use tokio::sync::watch;

use crate::content::{Content, Role};
use crate::context::{CallOptions, PeerError, ToolContext};
use crate::error::CoreError;
use crate::principal::{Caller, Principal};
use crate::tool::{ToolError, check_name, quoted_name};

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptMessage {
    /// Who says it.
    pub role: Role,
    /// What is said.
    pub content: Content,
}

impl PromptMessage {
    /// A user text message.
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: Content::Text(text.into()),
        }
    }

    /// An assistant text message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: Content::Text(text.into()),
        }
    }
}

/// A declared prompt argument.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PromptArgument {
    /// Its name.
    pub name: String,
    /// Human title.
    pub title: Option<String>,
    /// What it means.
    pub description: Option<String>,
    /// Whether `get` requires it.
    pub required: bool,
    /// Values offered by `completion/complete`.
    pub completions: Vec<String>,
}

impl PromptArgument {
    /// A required argument.
    pub fn required(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: Some(description.into()),
            required: true,
            ..Self::default()
        }
    }

    /// An optional argument.
    pub fn optional(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            required: false,
            ..Self::required(name, description)
        }
    }

    /// Values to offer as completions.
    pub fn with_completions<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        values: I,
    ) -> Self {
        self.completions = values.into_iter().map(Into::into).collect();
        self
    }
}

/// What a client is told about a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PromptSpec {
    /// Unique name.
    pub name: String,
    /// Human title.
    pub title: Option<String>,
    /// What it is for.
    pub description: Option<String>,
    /// Declared arguments.
    pub arguments: Vec<PromptArgument>,
    /// Icons a client may show for it.
    pub icons: Vec<crate::content::Icon>,
}

impl PromptSpec {
    /// A prompt with a name and description.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: Some(description.into()),
            ..Self::default()
        }
    }

    /// Adds an argument.
    pub fn argument(mut self, a: PromptArgument) -> Self {
        self.arguments.push(a);
        self
    }

    /// Sets the title.
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.title = Some(t.into());
        self
    }

    /// Adds an icon a client may show for it.
    pub fn icon(mut self, icon: crate::content::Icon) -> Self {
        self.icons.push(icon);
        self
    }
}

/// The messages a prompt produced.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptResult {
    /// Optional description of this rendering.
    pub description: Option<String>,
    /// The messages.
    pub messages: Vec<PromptMessage>,
}

/// Why `get` failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PromptError {
    /// No prompt of that name.
    #[error("there is no prompt named `{name}`")]
    UnknownPrompt {
        /// The name asked for, cut short past 128 bytes ([`crate::quoted_name`]).
        name: String,
    },
    /// A required argument is missing.
    #[error("prompt `{prompt}` needs the argument `{argument}`")]
    MissingArgument {
        /// The prompt.
        prompt: String,
        /// The missing argument.
        argument: String,
    },
    /// An argument the prompt does not declare.
    #[error("prompt `{prompt}` has no argument `{argument}`")]
    UnknownArgument {
        /// The prompt.
        prompt: String,
        /// The undeclared argument, cut short past 128 bytes ([`crate::quoted_name`]).
        argument: String,
    },
    /// The handler failed.
    #[error("prompt `{prompt}` failed: {message}")]
    Failed {
        /// The prompt.
        prompt: String,
        /// Why.
        message: String,
    },
    /// Stateless protocol (2026-07-28): the prompt asked the client something and the answer
    /// must come in a new round trip. The server answers `prompts/get` with an
    /// `input_required` result carrying `requests` and renders the prompt again when the client
    /// re-sends the request with the answers.
    #[error("prompt `{prompt}` needs input from the client")]
    InputRequired {
        /// The prompt.
        prompt: String,
        /// The pending requests (key -> `{method, params}`), as the handler's
        /// [`PeerError::InputRequired`] carried them.
        requests: Value,
    },
}

/// Arguments as passed to a prompt.
pub type PromptArgs = BTreeMap<String, String>;

type PromptFuture = Pin<Box<dyn Future<Output = Result<PromptResult, ToolError>> + Send>>;
type Handler = Arc<dyn Fn(PromptArgs, ToolContext) -> PromptFuture + Send + Sync>;

#[derive(Clone)]
struct Entry {
    spec: PromptSpec,
    handler: Handler,
}

/// The changes of one [`PromptRegistry::edit`], applied to a copy of the prompt list that is
/// published when the edit ends.
pub struct PromptEdit {
    entries: HashMap<String, Entry>,
    changed: bool,
}

impl std::fmt::Debug for PromptEdit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptEdit")
            .field("prompts", &self.entries.len())
            .field("changed", &self.changed)
            .finish()
    }
}

impl PromptEdit {
    /// Registers a prompt, as [`PromptRegistry::register`] does.
    pub fn register<F, Fut>(&mut self, spec: PromptSpec, handler: F) -> Result<(), CoreError>
    where
        F: Fn(PromptArgs) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<PromptResult, String>> + Send + 'static,
    {
        self.insert(spec, plain_handler(handler))
    }

    /// Registers a prompt with a context, as [`PromptRegistry::register_with_context`] does.
    pub fn register_with_context<F, Fut>(
        &mut self,
        spec: PromptSpec,
        handler: F,
    ) -> Result<(), CoreError>
    where
        F: Fn(PromptArgs, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<PromptResult, ToolError>> + Send + 'static,
    {
        self.insert(spec, context_handler(handler))
    }

    /// Removes a prompt; returns whether it existed (in this edit too).
    pub fn remove(&mut self, name: &str) -> bool {
        let removed = self.entries.remove(name).is_some();
        self.changed |= removed;
        removed
    }

    /// The spec of a prompt as the edit stands.
    pub fn spec(&self, name: &str) -> Option<&PromptSpec> {
        self.entries.get(name).map(|e| &e.spec)
    }

    fn insert(&mut self, spec: PromptSpec, handler: Handler) -> Result<(), CoreError> {
        check_name(&spec.name)?;
        if self.entries.contains_key(&spec.name) {
            return Err(CoreError::Duplicate { name: spec.name });
        }
        self.entries
            .insert(spec.name.clone(), Entry { spec, handler });
        self.changed = true;
        Ok(())
    }
}

fn plain_handler<F, Fut>(handler: F) -> Handler
where
    F: Fn(PromptArgs) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<PromptResult, String>> + Send + 'static,
{
    Arc::new(move |a, _ctx| {
        let fut = handler(a);
        Box::pin(async move { fut.await.map_err(ToolError::failed) }) as PromptFuture
    })
}

fn context_handler<F, Fut>(handler: F) -> Handler
where
    F: Fn(PromptArgs, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<PromptResult, ToolError>> + Send + 'static,
{
    Arc::new(move |a, ctx| Box::pin(handler(a, ctx)) as PromptFuture)
}

/// The app's prompts. Cheap to clone (shared).
#[derive(Clone)]
pub struct PromptRegistry {
    entries: Arc<RwLock<Arc<HashMap<String, Entry>>>>,
    version: Arc<watch::Sender<u64>>,
}

impl std::fmt::Debug for PromptRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptRegistry")
            .field("prompts", &self.snapshot().len())
            .finish()
    }
}

impl Default for PromptRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl PromptRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            entries: Arc::default(),
            version: Arc::new(watch::channel(0).0),
        }
    }

    fn snapshot(&self) -> Arc<HashMap<String, Entry>> {
        Arc::clone(&self.entries.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Registers a prompt whose handler builds messages from the (checked) arguments.
    pub fn register<F, Fut>(&self, spec: PromptSpec, handler: F) -> Result<(), CoreError>
    where
        F: Fn(PromptArgs) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<PromptResult, String>> + Send + 'static,
    {
        self.insert(spec, plain_handler(handler))
    }

    /// Registers a prompt whose handler also receives a [`ToolContext`]: the caller, the
    /// cancellation token and the channel back to the client, so it can ask the user
    /// (`ctx.elicit`), the client's model (`ctx.sample`) or list roots while it renders.
    ///
    /// Return a [`PeerError`] with `?` (it converts into [`ToolError::Peer`]): on the stateless
    /// protocol a question the client has not answered yet surfaces from
    /// [`PromptRegistry::get_with`] as [`PromptError::InputRequired`]; any other client failure
    /// and [`ToolError::Failed`] become [`PromptError::Failed`].
    pub fn register_with_context<F, Fut>(
        &self,
        spec: PromptSpec,
        handler: F,
    ) -> Result<(), CoreError>
    where
        F: Fn(PromptArgs, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<PromptResult, ToolError>> + Send + 'static,
    {
        self.insert(spec, context_handler(handler))
    }

    fn insert(&self, spec: PromptSpec, handler: Handler) -> Result<(), CoreError> {
        self.edit(|e| e.insert(spec, handler))
    }

    /// Removes a prompt. Returns whether it existed.
    pub fn remove(&self, name: &str) -> bool {
        let Ok(done) = self.edit(|e| Ok::<_, std::convert::Infallible>(e.remove(name)));
        done
    }

    /// Changes the prompt list in one step: `f` registers and removes prompts on a
    /// [`PromptEdit`], and what it did is published together when it returns `Ok` (nothing when
    /// it returns `Err`). A listing sees the list from before or from after, never a part of the
    /// changes, and the list's version moves once, so clients hear of one change.
    ///
    /// ```
    /// use kberg_core::{PromptMessage, PromptRegistry, PromptResult, PromptSpec};
    ///
    /// let prompts = PromptRegistry::new();
    /// let hello = |_args| async {
    ///     Ok(PromptResult { description: None, messages: vec![PromptMessage::user("hello")] })
    /// };
    /// prompts
    ///     .edit(|e| {
    ///         e.register(PromptSpec::new("greet", "Say hello"), hello)?;
    ///         e.register(PromptSpec::new("welcome", "Say hello too"), hello)
    ///     })
    ///     .unwrap();
    /// assert_eq!(prompts.list().len(), 2);
    /// ```
    pub fn edit<R, E>(&self, f: impl FnOnce(&mut PromptEdit) -> Result<R, E>) -> Result<R, E> {
        let mut guard = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let mut edit = PromptEdit {
            entries: HashMap::clone(&guard),
            changed: false,
        };
        let r = f(&mut edit)?;
        if edit.changed {
            *guard = Arc::new(edit.entries);
            drop(guard);
            self.version.send_modify(|v| *v += 1);
        }
        Ok(r)
    }

    /// A receiver whose value changes whenever the prompt list changes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Every prompt, sorted by name.
    pub fn list(&self) -> Vec<PromptSpec> {
        let mut v: Vec<PromptSpec> = self.snapshot().values().map(|e| e.spec.clone()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Renders a prompt after checking its arguments, with no caller identity and no client
    /// channel (a context-taking prompt that asks the client gets [`PeerError::NotSupported`]).
    pub async fn get(&self, name: &str, args: PromptArgs) -> Result<PromptResult, PromptError> {
        let caller = Caller::new(Principal::anonymous());
        self.get_with(&caller, name, args, CallOptions::default())
            .await
    }

    /// Renders a prompt after checking its arguments, for `caller`, with the per-request
    /// options (cancellation, the client channel, `_meta`) a context-taking prompt sees.
    pub async fn get_with(
        &self,
        caller: &Caller,
        name: &str,
        args: PromptArgs,
        opts: CallOptions,
    ) -> Result<PromptResult, PromptError> {
        let entry =
            self.snapshot()
                .get(name)
                .cloned()
                .ok_or_else(|| PromptError::UnknownPrompt {
                    name: quoted_name(name).into_owned(),
                })?;
        for a in &entry.spec.arguments {
            if a.required && !args.contains_key(&a.name) {
                return Err(PromptError::MissingArgument {
                    prompt: name.to_string(),
                    argument: a.name.clone(),
                });
            }
        }
        if let Some(extra) = args
            .keys()
            .find(|k| !entry.spec.arguments.iter().any(|a| &a.name == *k))
        {
            return Err(PromptError::UnknownArgument {
                prompt: name.to_string(),
                argument: quoted_name(extra).into_owned(),
            });
        }
        let ctx = ToolContext::new(caller.clone(), opts);
        // A handler's panic is contained as a tool's is (the request is answered, its payload
        // not shown): the handler is called, not only awaited, inside the guard.
        let handler = entry.handler;
        let rendered = AssertUnwindSafe(async move { handler(args, ctx).await })
            .catch_unwind()
            .await
            .unwrap_or_else(|_panic| {
                tracing::error!(prompt = %name, "prompt handler panicked");
                Err(ToolError::failed(
                    "the prompt stopped unexpectedly (internal error)",
                ))
            });
        rendered.map_err(|e| match e {
            ToolError::Peer(PeerError::InputRequired { requests }) => PromptError::InputRequired {
                prompt: name.to_string(),
                requests,
            },
            other => PromptError::Failed {
                prompt: name.to_string(),
                message: other.to_string(),
            },
        })
    }

    /// Completion values for a prompt argument that start with `prefix` (case-insensitive),
    /// at most 100 as MCP allows.
    pub fn complete(
        &self,
        prompt: &str,
        argument: &str,
        prefix: &str,
    ) -> Result<Vec<String>, PromptError> {
        let snap = self.snapshot();
        let entry = snap.get(prompt).ok_or_else(|| PromptError::UnknownPrompt {
            name: quoted_name(prompt).into_owned(),
        })?;
        let arg = entry
            .spec
            .arguments
            .iter()
            .find(|a| a.name == argument)
            .ok_or_else(|| PromptError::UnknownArgument {
                prompt: prompt.to_string(),
                argument: quoted_name(argument).into_owned(),
            })?;
        let p = prefix.to_lowercase();
        Ok(arg
            .completions
            .iter()
            .filter(|v| v.to_lowercase().starts_with(&p))
            .take(100)
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use crate::context::ClientPeer;

    /// A client channel that answers `elicitation/create` from a fixed answer, or, without one,
    /// asks for another round trip the way the stateless server peer does.
    struct FixedPeer {
        answer: Option<Value>,
    }

    #[async_trait]
    impl ClientPeer for FixedPeer {
        async fn notify(&self, _method: &str, _params: Value) -> Result<(), PeerError> {
            Ok(())
        }

        async fn request(
            &self,
            method: &str,
            params: Value,
            _cancel: CancellationToken,
        ) -> Result<Value, PeerError> {
            match &self.answer {
                Some(a) => Ok(a.clone()),
                None => Err(PeerError::InputRequired {
                    requests: json!({"q": {"method": method, "params": params}}),
                }),
            }
        }

        fn supports(&self, capability: &str) -> bool {
            capability == "elicitation"
        }
    }

    fn asking_registry() -> PromptRegistry {
        let r = PromptRegistry::new();
        r.register_with_context(
            PromptSpec::new("ask", "Asks the user for context"),
            |_args, ctx| async move {
                let answer = ctx
                    .elicit(
                        "What context?",
                        json!({"type": "object", "properties": {"context": {"type": "string"}}}),
                    )
                    .await?;
                let context = answer["content"]["context"]
                    .as_str()
                    .ok_or("the answer has no context")?
                    .to_string();
                Ok(PromptResult {
                    description: None,
                    messages: vec![PromptMessage::user(format!(
                        "{context} (for {})",
                        ctx.caller().principal().id
                    ))],
                })
            },
        )
        .expect("registers");
        r
    }

    fn opts(answer: Option<Value>) -> CallOptions {
        CallOptions::default().with_peer(Arc::new(FixedPeer { answer }))
    }

    #[tokio::test]
    async fn a_context_prompt_renders_from_the_clients_answer() {
        let r = asking_registry();
        let caller = Caller::new(Principal::new("alice"));
        let answer = json!({"action": "accept", "content": {"context": "release notes"}});
        let out = r
            .get_with(&caller, "ask", PromptArgs::new(), opts(Some(answer)))
            .await
            .expect("renders");
        assert_eq!(
            out.messages,
            vec![PromptMessage::user("release notes (for alice)")]
        );
    }

    #[tokio::test]
    async fn an_unanswered_question_comes_back_as_input_required() {
        let r = asking_registry();
        let caller = Caller::new(Principal::new("alice"));
        let err = r
            .get_with(&caller, "ask", PromptArgs::new(), opts(None))
            .await
            .expect_err("needs input");
        match err {
            PromptError::InputRequired { prompt, requests } => {
                assert_eq!(prompt, "ask");
                assert_eq!(requests["q"]["method"], "elicitation/create");
                assert_eq!(requests["q"]["params"]["message"], "What context?");
            }
            other => panic!("expected InputRequired, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn without_a_client_channel_a_context_prompt_fails_cleanly() {
        let r = asking_registry();
        let err = r.get("ask", PromptArgs::new()).await.expect_err("no peer");
        assert!(
            matches!(&err, PromptError::Failed { prompt, message }
                if prompt == "ask" && message.contains("elicitation")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn a_malformed_answer_is_a_failure_not_a_panic() {
        let r = asking_registry();
        let caller = Caller::new(Principal::new("alice"));
        let err = r
            .get_with(&caller, "ask", PromptArgs::new(), opts(Some(json!(12345))))
            .await
            .expect_err("bad answer");
        assert!(
            matches!(&err, PromptError::Failed { message, .. } if message.contains("no context")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn context_prompts_check_arguments_and_names_like_plain_ones() {
        let r = asking_registry();
        let caller = Caller::new(Principal::new("alice"));
        let mut args = PromptArgs::new();
        args.insert("extra".into(), "x".into());
        assert!(matches!(
            r.get_with(&caller, "ask", args, opts(None)).await,
            Err(PromptError::UnknownArgument { .. })
        ));
        assert!(matches!(
            r.register_with_context(PromptSpec::new("ask", "again"), |_a, _c| async {
                Ok(PromptResult {
                    description: None,
                    messages: vec![],
                })
            }),
            Err(CoreError::Duplicate { .. })
        ));
        let plain = PromptRegistry::new();
        plain
            .register(PromptSpec::new("plain", "No context"), |_a| async {
                Err("broken".to_string())
            })
            .expect("registers");
        assert_eq!(
            plain
                .get_with(&caller, "plain", PromptArgs::new(), opts(None))
                .await,
            Err(PromptError::Failed {
                prompt: "plain".into(),
                message: "broken".into()
            })
        );
    }
}
