//! The [`PromptRegistry`]: reusable prompt templates with declared arguments.
//!
//! A prompt declares its arguments once; `get` checks that every required argument is present
//! (and that no undeclared one is passed) before the handler builds the messages, so a handler
//! never sees incomplete input. Arguments may list values for `completion/complete`.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::error::CoreError;
use crate::tool::{Content, check_name};

/// Who says a prompt message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The user.
    User,
    /// The assistant.
    Assistant,
}

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
        /// The name asked for.
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
        /// The undeclared argument.
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
}

/// Arguments as passed to a prompt.
pub type PromptArgs = BTreeMap<String, String>;

type PromptFuture = Pin<Box<dyn Future<Output = Result<PromptResult, String>> + Send>>;
type Handler = Arc<dyn Fn(PromptArgs) -> PromptFuture + Send + Sync>;

#[derive(Clone)]
struct Entry {
    spec: PromptSpec,
    handler: Handler,
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
        check_name(&spec.name)?;
        let handler: Handler = Arc::new(move |a| Box::pin(handler(a)) as PromptFuture);
        let mut guard = self.entries.write().unwrap_or_else(|p| p.into_inner());
        if guard.contains_key(&spec.name) {
            return Err(CoreError::Duplicate { name: spec.name });
        }
        let mut next = HashMap::clone(&guard);
        next.insert(spec.name.clone(), Entry { spec, handler });
        *guard = Arc::new(next);
        drop(guard);
        self.version.send_modify(|v| *v += 1);
        Ok(())
    }

    /// Removes a prompt. Returns whether it existed.
    pub fn remove(&self, name: &str) -> bool {
        let mut guard = self.entries.write().unwrap_or_else(|p| p.into_inner());
        if !guard.contains_key(name) {
            return false;
        }
        let mut next = HashMap::clone(&guard);
        next.remove(name);
        *guard = Arc::new(next);
        drop(guard);
        self.version.send_modify(|v| *v += 1);
        true
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

    /// Renders a prompt after checking its arguments.
    pub async fn get(&self, name: &str, args: PromptArgs) -> Result<PromptResult, PromptError> {
        let entry =
            self.snapshot()
                .get(name)
                .cloned()
                .ok_or_else(|| PromptError::UnknownPrompt {
                    name: name.to_string(),
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
                argument: extra.clone(),
            });
        }
        (entry.handler)(args)
            .await
            .map_err(|message| PromptError::Failed {
                prompt: name.to_string(),
                message,
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
            name: prompt.to_string(),
        })?;
        let arg = entry
            .spec
            .arguments
            .iter()
            .find(|a| a.name == argument)
            .ok_or_else(|| PromptError::UnknownArgument {
                prompt: prompt.to_string(),
                argument: argument.to_string(),
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
