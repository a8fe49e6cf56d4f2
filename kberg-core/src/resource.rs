//! The [`ResourceRegistry`]: live objects a client lists, reads and subscribes to.
//!
//! Resources are registered and removed at runtime, either one URI at a time or as a URI
//! template (`notes://{id}`) whose reader receives the matched variables. Subscriptions belong to
//! a [`Subscriber`]: the transport creates one per session (2025-11-25) or per listen stream
//! (2026-07-28), subscribes it to URIs, and receives [`ResourceEvent`]s on it. Dropping the
//! subscriber ends all its subscriptions, so they end with their caller.
//! [`ResourceRegistry::notify_updated`] delivers one event to every current subscriber of that
//! URI that may still see it, and to nobody else.
//!
//! What one subscriber costs is bounded whatever its client does. It holds at most
//! [`Subscriber::limit`] subscriptions ([`Subscriber::DEFAULT_LIMIT`] unless set with
//! [`Subscriber::with_limit`]): a template matches endless URIs, and every subscription is an
//! entry in the registry's shared map (and, behind an aggregator, one subscription upstream).
//! And its undelivered updates are coalesced: an update of a URI that already has one waiting
//! is not queued again, so a subscriber whose reader stalls (a client that stopped reading its
//! stream) holds at most one waiting update per subscribed URI, however often they change.
//! [`ResourceEvent::Removed`] events are always queued.
//!
//! Which resources a caller may know of is the app's [`ResourceVisibility`]: a transport lists,
//! reads and subscribes on a caller's behalf through the `*_for` methods
//! ([`ResourceRegistry::list_for`], [`ResourceRegistry::read_for`],
//! [`ResourceRegistry::subscriber_for`]), and a resource hidden from that caller answers
//! exactly as one never registered. What a caller may see can change while it is subscribed
//! (an admin takes a project away from an agent), so the visibility is asked again for each
//! subscriber at each update, and a subscription to what is no longer shown ends rather than
//! leak the resource's updates. The methods without a caller see everything: they are for
//! the app itself. Whoever produces a resource's updates elsewhere (an aggregator relaying
//! an upstream server's) can watch which URIs have subscribers with
//! [`ResourceRegistry::subscription_changes`] and [`ResourceRegistry::subscribed_uris`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use async_trait::async_trait;
use futures::FutureExt;
use tokio::sync::{Notify, watch};

use crate::content::ResourceContents;
use crate::error::CoreError;
use crate::pagination::{InvalidCursor, Page, paginate};
use crate::principal::Caller;

/// Which resources a caller may know of: the resources counterpart of the tools'
/// `ToolVisibility`. A resource hidden from a caller is left out of its listings, and reading
/// or subscribing to it answers [`ResourceError::NotFound`], as for a URI never registered, so
/// a caller learns nothing of what it may not see.
///
/// Any `Fn(&str, &Caller) -> bool` is a visibility that decides on resource URIs (a URI a
/// template matches included) and shows every template in listings:
///
/// ```
/// use kberg_core::{Caller, Principal, ResourceDescriptor, ResourceRegistry};
///
/// let resources = ResourceRegistry::new();
/// resources.register_text(ResourceDescriptor::new("notes://alice/todo", "todo"), "milk").unwrap();
/// resources.register_text(ResourceDescriptor::new("notes://bob/todo", "todo"), "eggs").unwrap();
/// // Each principal sees its own notes only.
/// resources.set_visibility(|uri: &str, caller: &Caller| {
///     uri.strip_prefix("notes://")
///         .and_then(|rest| rest.split('/').next())
///         .is_some_and(|owner| owner == caller.principal().id)
/// });
/// let alice = Caller::new(Principal::new("alice"));
/// let page = resources.list_for(&alice, None, 10).unwrap();
/// assert_eq!(page.items.len(), 1);
/// assert_eq!(page.items[0].uri, "notes://alice/todo");
/// ```
///
/// A filter that panics unwinds through the caller's listing, read or subscription:
/// kberg-server answers such a request `-32603` with `data.code = "internal_error"`. Asked
/// again when an update is notified (what a caller may see can change while it is
/// subscribed), its panic does not unwind through the app's
/// [`ResourceRegistry::notify_updated`]: it counts as hiding the resource.
pub trait ResourceVisibility: Send + Sync + 'static {
    /// Whether `caller` may list, read and subscribe to the resource at `uri` (a registered
    /// URI, or one that a template matches).
    fn resource(&self, uri: &str, caller: &Caller) -> bool;

    /// Whether `caller` is shown the template `uri_template` in template listings. Every URI
    /// the template matches is still checked with [`resource`](Self::resource) when it is
    /// read or subscribed to. By default every template is shown.
    fn template(&self, uri_template: &str, caller: &Caller) -> bool {
        let _ = (uri_template, caller);
        true
    }
}

impl<F> ResourceVisibility for F
where
    F: Fn(&str, &Caller) -> bool + Send + Sync + 'static,
{
    fn resource(&self, uri: &str, caller: &Caller) -> bool {
        self(uri, caller)
    }
}

/// What a client is told about a resource.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ResourceDescriptor {
    /// Unique URI.
    pub uri: String,
    /// Short name.
    pub name: String,
    /// Human title.
    pub title: Option<String>,
    /// What it is.
    pub description: Option<String>,
    /// MIME type.
    pub mime_type: Option<String>,
    /// Size in bytes, if known.
    pub size: Option<u64>,
    /// Its `_meta` as clients are told it (MCP Apps' `ui` of a view: its content security
    /// policy, its border); empty for none.
    pub meta: serde_json::Map<String, serde_json::Value>,
    /// Icons a client may show for it.
    pub icons: Vec<crate::content::Icon>,
}

impl ResourceDescriptor {
    /// A descriptor with a URI and a name.
    pub fn new(uri: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            name: name.into(),
            ..Self::default()
        }
    }

    /// Sets the description.
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = Some(d.into());
        self
    }

    /// Sets the MIME type.
    pub fn mime_type(mut self, m: impl Into<String>) -> Self {
        self.mime_type = Some(m.into());
        self
    }

    /// Sets the title.
    pub fn title(mut self, t: impl Into<String>) -> Self {
        self.title = Some(t.into());
        self
    }

    /// Sets the size.
    pub fn size(mut self, s: u64) -> Self {
        self.size = Some(s);
        self
    }

    /// Sets one key of its `_meta` (replacing what it held).
    pub fn meta(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.meta.insert(key.into(), value);
        self
    }

    /// Adds an icon a client may show for it.
    pub fn icon(mut self, icon: crate::content::Icon) -> Self {
        self.icons.push(icon);
        self
    }
}

/// What a client is told about a URI template.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ResourceTemplate {
    /// RFC 6570 template; `{name}` matches one path segment, `{+name}` matches the rest.
    pub uri_template: String,
    /// Short name.
    pub name: String,
    /// Human title.
    pub title: Option<String>,
    /// What it is.
    pub description: Option<String>,
    /// MIME type of the resources it produces.
    pub mime_type: Option<String>,
    /// Its `_meta` as clients are told it; empty for none.
    pub meta: serde_json::Map<String, serde_json::Value>,
    /// Icons a client may show for it.
    pub icons: Vec<crate::content::Icon>,
}

impl ResourceTemplate {
    /// A template with a name.
    pub fn new(uri_template: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            uri_template: uri_template.into(),
            name: name.into(),
            ..Self::default()
        }
    }

    /// Sets the description.
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = Some(d.into());
        self
    }

    /// Sets the MIME type.
    pub fn mime_type(mut self, m: impl Into<String>) -> Self {
        self.mime_type = Some(m.into());
        self
    }

    /// Sets one key of its `_meta` (replacing what it held).
    pub fn meta(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        self.meta.insert(key.into(), value);
        self
    }

    /// Adds an icon a client may show for it.
    pub fn icon(mut self, icon: crate::content::Icon) -> Self {
        self.icons.push(icon);
        self
    }
}

/// Why a resource operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceError {
    /// No resource or template matches the URI.
    #[error("resource not found: {uri}")]
    NotFound {
        /// The URI asked for.
        uri: String,
    },
    /// The reader failed.
    #[error("reading {uri} failed: {message}")]
    ReadFailed {
        /// The URI.
        uri: String,
        /// Why.
        message: String,
    },
    /// A pagination cursor this registry did not hand out.
    #[error("invalid pagination cursor")]
    InvalidCursor,
    /// The subscriber already holds as many subscriptions as its [`Subscriber::limit`];
    /// nothing was subscribed. Unsubscribing from another URI makes room.
    #[error(
        "cannot subscribe to {uri}: at most {limit} resource subscriptions are allowed at once"
    )]
    TooManySubscriptions {
        /// The URI asked for.
        uri: String,
        /// The subscriber's limit.
        limit: usize,
    },
}

impl From<InvalidCursor> for ResourceError {
    fn from(_: InvalidCursor) -> Self {
        ResourceError::InvalidCursor
    }
}

/// Variables matched from a URI template.
pub type TemplateVars = BTreeMap<String, String>;

/// Produces a resource's contents on demand.
#[async_trait]
pub trait ResourceReader: Send + Sync + 'static {
    /// Reads `uri`; `vars` holds the template variables (empty for a plain resource).
    async fn read(
        &self,
        uri: &str,
        vars: &TemplateVars,
    ) -> Result<Vec<ResourceContents>, ResourceError>;
}

type ReadFuture =
    Pin<Box<dyn Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send>>;

struct FnReader<F>(F);

#[async_trait]
impl<F> ResourceReader for FnReader<F>
where
    F: Fn(String, TemplateVars) -> ReadFuture + Send + Sync + 'static,
{
    async fn read(
        &self,
        uri: &str,
        vars: &TemplateVars,
    ) -> Result<Vec<ResourceContents>, ResourceError> {
        (self.0)(uri.to_string(), vars.clone()).await
    }
}

/// Wraps an async closure as a [`ResourceReader`].
pub fn reader_fn<F, Fut>(f: F) -> Arc<dyn ResourceReader>
where
    F: Fn(String, TemplateVars) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
{
    Arc::new(FnReader(move |uri, vars| {
        Box::pin(f(uri, vars)) as ReadFuture
    }))
}

/// A change a subscriber is told about.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResourceEvent {
    /// The resource at this URI changed; read it again.
    Updated {
        /// The URI.
        uri: String,
    },
    /// The resource was removed, or the subscriber's caller may no longer see it (see
    /// [`ResourceRegistry::notify_updated`]); the subscription to it has ended.
    Removed {
        /// The URI.
        uri: String,
    },
}

#[derive(Clone)]
struct Static {
    descriptor: ResourceDescriptor,
    reader: Arc<dyn ResourceReader>,
}

#[derive(Clone)]
struct Template {
    template: ResourceTemplate,
    parts: Arc<Vec<Part>>,
    reader: Arc<dyn ResourceReader>,
}

#[derive(Debug, Clone)]
enum Part {
    Literal(String),
    Segment(String),
    Rest(String),
}

fn parse_template(t: &str) -> Result<Vec<Part>, CoreError> {
    let bad = |reason| CoreError::InvalidTemplate {
        template: t.to_string(),
        reason,
    };
    let mut parts = Vec::new();
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            parts.push(Part::Literal(rest[..open].to_string()));
        }
        let close = rest[open..].find('}').ok_or(bad("unclosed `{`"))? + open;
        let expr = &rest[open + 1..close];
        let (rest_kind, name) = match expr.strip_prefix('+') {
            Some(n) => (true, n),
            None => (false, expr),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(bad(
                "a variable is `{name}` or `{+name}` with a simple name",
            ));
        }
        if matches!(parts.last(), Some(Part::Segment(_) | Part::Rest(_))) {
            return Err(bad("two variables must be separated by a literal"));
        }
        parts.push(if rest_kind {
            Part::Rest(name.to_string())
        } else {
            Part::Segment(name.to_string())
        });
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return Err(bad("unmatched `}`"));
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest.to_string()));
    }
    Ok(parts)
}

fn match_template(parts: &[Part], uri: &str) -> Option<TemplateVars> {
    let mut vars = TemplateVars::new();
    let mut rest = uri;
    for (i, part) in parts.iter().enumerate() {
        match part {
            Part::Literal(l) => rest = rest.strip_prefix(l.as_str())?,
            Part::Segment(name) | Part::Rest(name) => {
                let stop = match parts.get(i + 1) {
                    Some(Part::Literal(l)) => rest.find(l.as_str())?,
                    _ => rest.len(),
                };
                let value = &rest[..stop];
                if value.is_empty() || (matches!(part, Part::Segment(_)) && value.contains('/')) {
                    return None;
                }
                vars.insert(name.clone(), value.to_string());
                rest = &rest[stop..];
            }
        }
    }
    rest.is_empty().then_some(vars)
}

#[derive(Default, Clone)]
struct Entries {
    statics: BTreeMap<String, Static>,
    templates: Vec<Template>,
    /// The app's per-caller filter, if it set one.
    visibility: Option<Arc<dyn ResourceVisibility>>,
}

impl Entries {
    /// Whether `caller` may know of the resource at `uri` (see [`ResourceVisibility`]).
    fn shows(&self, uri: &str, caller: &Caller) -> bool {
        self.visibility
            .as_ref()
            .is_none_or(|v| v.resource(uri, caller))
    }

    /// One page of the resources `caller` may know of (every one without a caller).
    fn list(
        &self,
        caller: Option<&Caller>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ResourceDescriptor>, ResourceError> {
        let all: Vec<ResourceDescriptor> = self
            .statics
            .values()
            .filter(|s| caller.is_none_or(|c| self.shows(&s.descriptor.uri, c)))
            .map(|s| s.descriptor.clone())
            .collect();
        Ok(paginate(&all, |d| d.uri.as_str(), cursor, limit)?)
    }

    /// One page of the templates `caller` is shown (every one without a caller).
    fn list_templates(
        &self,
        caller: Option<&Caller>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ResourceTemplate>, ResourceError> {
        let shown = |t: &str| match (caller, &self.visibility) {
            (Some(c), Some(v)) => v.template(t, c),
            _ => true,
        };
        let mut all: Vec<ResourceTemplate> = self
            .templates
            .iter()
            .filter(|t| shown(&t.template.uri_template))
            .map(|t| t.template.clone())
            .collect();
        all.sort_by(|a, b| a.uri_template.cmp(&b.uri_template));
        Ok(paginate(&all, |t| t.uri_template.as_str(), cursor, limit)?)
    }

    /// Whether `uri` names a registered resource or matches a template.
    fn exists(&self, uri: &str) -> bool {
        self.statics.contains_key(uri)
            || self
                .templates
                .iter()
                .any(|t| match_template(&t.parts, uri).is_some())
    }
}

#[derive(Default)]
struct Subscriptions {
    by_uri: HashMap<String, HashSet<u64>>,
    members: HashMap<u64, Member>,
}

/// Whether the app's `visibility` shows `uri` to `caller`, asked where nobody can answer for
/// its panic (an app's `notify_updated`): a visibility that panics hides the resource, and
/// the panic is logged without its payload, which may quote anything the filter held.
fn shows_contained(visibility: &dyn ResourceVisibility, uri: &str, caller: &Caller) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        visibility.resource(uri, caller)
    }))
    .unwrap_or_else(|_panic| {
        tracing::error!(
            uri,
            "the resource visibility panicked; the subscriber was not told of the update, and \
             its subscription ended"
        );
        false
    })
}

/// A live subscriber as the registry sees it.
struct Member {
    mailbox: Arc<Mailbox>,
    /// How many URIs it is subscribed to (its entries in `by_uri`), counted here because a
    /// removal ends subscriptions without the subscriber's doing.
    subscribed: usize,
    /// Whose behalf it subscribes on (`None`: the app's own, which sees everything), asked
    /// again at each update: what a caller may see can change while it is subscribed.
    caller: Option<Caller>,
}

/// A subscriber's undelivered events, and the wake-up of its reader.
///
/// Why not a channel: an unbounded one grows for as long as updates come to a reader that
/// stalled, and a bounded one would make the app's `notify_updated` wait for it or drop
/// events. Here an update of a URI that already has one waiting is not queued again, so what
/// waits is bounded by the URIs subscribed to (plus the removals, each of which ended a
/// subscription), and notifying never waits for anyone.
#[derive(Default)]
struct Mailbox {
    pending: Mutex<Pending>,
    /// Signalled after every event queued. The queue, not this, says whether an event waits:
    /// a reader checks it before waiting, so a wake-up that finds it empty costs one more loop.
    wake: Notify,
}

#[derive(Default)]
struct Pending {
    /// Events in the order they happened, each with its sequence number.
    events: VecDeque<(u64, ResourceEvent)>,
    /// The URIs whose `Updated` is waiting in `events`, with that event's sequence number.
    updated: HashMap<String, u64>,
    next_seq: u64,
}

impl Mailbox {
    fn pending(&self) -> MutexGuard<'_, Pending> {
        // Only an allocation failure could panic while it is held, and each change is one
        // push or insert; a poisoned lock still holds a usable queue.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `Updated` for `uri` unless one already waits (it tells the reader the same:
    /// read the resource again).
    fn updated(&self, uri: &str) {
        let mut p = self.pending();
        if p.updated.contains_key(uri) {
            return;
        }
        let seq = p.push(ResourceEvent::Updated {
            uri: uri.to_string(),
        });
        p.updated.insert(uri.to_string(), seq);
        drop(p);
        self.wake.notify_one();
    }

    /// Queues `Removed` for `uri`. An `Updated` already waiting stays before it; one that comes
    /// after (the client subscribed again) is queued anew.
    fn removed(&self, uri: &str) {
        let mut p = self.pending();
        p.updated.remove(uri);
        p.push(ResourceEvent::Removed {
            uri: uri.to_string(),
        });
        drop(p);
        self.wake.notify_one();
    }

    fn pop(&self) -> Option<ResourceEvent> {
        let mut p = self.pending();
        let (seq, event) = p.events.pop_front()?;
        if let ResourceEvent::Updated { uri } = &event
            && p.updated.get(uri) == Some(&seq)
        {
            p.updated.remove(uri);
        }
        Some(event)
    }

    fn len(&self) -> usize {
        self.pending().events.len()
    }
}

impl Pending {
    fn push(&mut self, event: ResourceEvent) -> u64 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.events.push_back((seq, event));
        seq
    }
}

/// The registry's lists, its subscriptions, and the versions transports watch.
struct ResourceState {
    entries: RwLock<Arc<Entries>>,
    subs: Mutex<Subscriptions>,
    next_subscriber: AtomicU64,
    version: watch::Sender<u64>,
    /// Bumped whenever a URI gains its first subscriber or loses its last.
    interest: watch::Sender<u64>,
}

/// The changes of one [`ResourceRegistry::edit`], applied to a copy of the lists that is
/// published when the edit ends.
pub struct ResourceEdit {
    entries: Entries,
    /// Resources removed, whose subscribers are told once the edit is published.
    removed: BTreeSet<String>,
    changed: bool,
}

impl std::fmt::Debug for ResourceEdit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceEdit")
            .field("resources", &self.entries.statics.len())
            .field("templates", &self.entries.templates.len())
            .field("changed", &self.changed)
            .finish()
    }
}

impl ResourceEdit {
    /// Sets (or, with `None`, clears) the app's [`ResourceVisibility`], as
    /// [`ResourceRegistry::set_visibility`] does.
    pub fn set_visibility(&mut self, visibility: Option<Arc<dyn ResourceVisibility>>) {
        self.entries.visibility = visibility;
        self.changed = true;
    }

    /// Registers a resource with a reader, as [`ResourceRegistry::register`] does.
    pub fn register(
        &mut self,
        descriptor: ResourceDescriptor,
        reader: Arc<dyn ResourceReader>,
    ) -> Result<(), CoreError> {
        check_uri(&descriptor.uri)?;
        if self.entries.statics.contains_key(&descriptor.uri) {
            return Err(CoreError::Duplicate {
                name: descriptor.uri,
            });
        }
        self.insert(descriptor, reader);
        Ok(())
    }

    /// Registers or replaces a resource, as [`ResourceRegistry::register_or_replace`] does.
    pub fn register_or_replace(
        &mut self,
        descriptor: ResourceDescriptor,
        reader: Arc<dyn ResourceReader>,
    ) -> Result<bool, CoreError> {
        check_uri(&descriptor.uri)?;
        let replaced = self.entries.statics.contains_key(&descriptor.uri);
        self.insert(descriptor, reader);
        Ok(replaced)
    }

    /// Registers a resource whose contents are fixed text.
    pub fn register_text(
        &mut self,
        descriptor: ResourceDescriptor,
        text: impl Into<String>,
    ) -> Result<(), CoreError> {
        let text: Arc<str> = text.into().into();
        let mime = descriptor.mime_type.clone();
        self.register(
            descriptor,
            reader_fn(move |uri, _| {
                let text = Arc::clone(&text);
                let mime = mime.clone();
                async move { Ok(vec![ResourceContents::text(uri, mime.as_deref(), &*text)]) }
            }),
        )
    }

    /// Registers a URI template, as [`ResourceRegistry::register_template`] does.
    pub fn register_template(
        &mut self,
        template: ResourceTemplate,
        reader: Arc<dyn ResourceReader>,
    ) -> Result<(), CoreError> {
        let parts = Arc::new(parse_template(&template.uri_template)?);
        self.insert_template(template, parts, reader)
    }

    /// Removes a resource; returns whether it existed (in this edit too). Its subscribers are
    /// told once the edit is published.
    pub fn remove(&mut self, uri: &str) -> bool {
        let removed = self.entries.statics.remove(uri).is_some();
        if removed {
            self.removed.insert(uri.to_string());
            self.changed = true;
        }
        removed
    }

    /// Removes a template; returns whether it existed (in this edit too).
    pub fn remove_template(&mut self, uri_template: &str) -> bool {
        let before = self.entries.templates.len();
        self.entries
            .templates
            .retain(|t| t.template.uri_template != uri_template);
        let removed = before != self.entries.templates.len();
        self.changed |= removed;
        removed
    }

    fn insert(&mut self, descriptor: ResourceDescriptor, reader: Arc<dyn ResourceReader>) {
        // A resource registered again in the same edit is not removed after all.
        self.removed.remove(&descriptor.uri);
        self.entries
            .statics
            .insert(descriptor.uri.clone(), Static { descriptor, reader });
        self.changed = true;
    }

    fn insert_template(
        &mut self,
        template: ResourceTemplate,
        parts: Arc<Vec<Part>>,
        reader: Arc<dyn ResourceReader>,
    ) -> Result<(), CoreError> {
        if self
            .entries
            .templates
            .iter()
            .any(|t| t.template.uri_template == template.uri_template)
        {
            return Err(CoreError::Duplicate {
                name: template.uri_template,
            });
        }
        self.entries.templates.push(Template {
            template,
            parts,
            reader,
        });
        self.changed = true;
        Ok(())
    }
}

/// Reads `uri` from one snapshot of the lists: a registered URI first, then the first
/// template that matches.
async fn read_in(e: Arc<Entries>, uri: &str) -> Result<Vec<ResourceContents>, ResourceError> {
    if let Some(s) = e.statics.get(uri) {
        let reader = Arc::clone(&s.reader);
        drop(e);
        return read_contained(reader, uri, TemplateVars::new()).await;
    }
    for t in &e.templates {
        if let Some(vars) = match_template(&t.parts, uri) {
            let reader = Arc::clone(&t.reader);
            return read_contained(reader, uri, vars).await;
        }
    }
    Err(ResourceError::NotFound {
        uri: uri.to_string(),
    })
}

/// Runs a reader with its panic contained, as the gate contains a tool's: a reader that panics
/// fails the read (`ReadFailed`) instead of unwinding through the transport, where the request
/// would never be answered. The panic's payload is not shown: it may quote anything the reader
/// held.
async fn read_contained(
    reader: Arc<dyn ResourceReader>,
    uri: &str,
    vars: TemplateVars,
) -> Result<Vec<ResourceContents>, ResourceError> {
    let read = AssertUnwindSafe(async { reader.read(uri, &vars).await });
    match read.catch_unwind().await {
        Ok(answer) => answer,
        Err(_panic) => {
            tracing::error!(uri, "resource reader panicked");
            Err(ResourceError::ReadFailed {
                uri: uri.to_string(),
                message: "the reader stopped unexpectedly (internal error)".into(),
            })
        }
    }
}

/// A resource URI must not be empty.
fn check_uri(uri: &str) -> Result<(), CoreError> {
    if uri.is_empty() {
        return Err(CoreError::InvalidName {
            name: String::new(),
            reason: "a resource URI must not be empty",
        });
    }
    Ok(())
}

/// The app's resources and templates, and who is subscribed to what. Cheap to clone (shared).
#[derive(Clone)]
pub struct ResourceRegistry {
    inner: Arc<ResourceState>,
}

impl std::fmt::Debug for ResourceRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = self.snapshot();
        f.debug_struct("ResourceRegistry")
            .field("resources", &e.statics.len())
            .field("templates", &e.templates.len())
            .finish()
    }
}

impl Default for ResourceRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl ResourceRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        let (version, _) = watch::channel(0);
        let (interest, _) = watch::channel(0);
        Self {
            inner: Arc::new(ResourceState {
                entries: RwLock::new(Arc::new(Entries::default())),
                subs: Mutex::new(Subscriptions::default()),
                next_subscriber: AtomicU64::new(1),
                version,
                interest,
            }),
        }
    }

    fn snapshot(&self) -> Arc<Entries> {
        // Readers clone an Arc and release the lock at once; a poisoned lock still holds a
        // complete Arc (it is swapped whole), so recovering it is sound.
        Arc::clone(
            &self
                .inner
                .entries
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    /// Changes the resource and template lists in one step: `f` registers and removes on a
    /// [`ResourceEdit`], and what it did is published together when it returns `Ok` (nothing
    /// when it returns `Err`). A listing sees the lists from before or from after, never a part
    /// of the changes, and the lists' version moves once, so clients hear of one change. The
    /// subscribers of a resource the edit removed hear of it after it is published.
    ///
    /// ```
    /// use kberg_core::{ResourceDescriptor, ResourceRegistry};
    ///
    /// let resources = ResourceRegistry::new();
    /// resources
    ///     .register_text(ResourceDescriptor::new("notes://old", "old"), "old text")
    ///     .unwrap();
    /// resources
    ///     .edit(|e| {
    ///         e.remove("notes://old");
    ///         e.register_text(ResourceDescriptor::new("notes://new", "new"), "new text")
    ///     })
    ///     .unwrap();
    /// let page = resources.list(None, 10).unwrap();
    /// assert_eq!(page.items.len(), 1);
    /// assert_eq!(page.items[0].uri, "notes://new");
    /// ```
    pub fn edit<R, E>(&self, f: impl FnOnce(&mut ResourceEdit) -> Result<R, E>) -> Result<R, E> {
        let mut guard = self
            .inner
            .entries
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut edit = ResourceEdit {
            entries: Entries::clone(&guard),
            removed: BTreeSet::new(),
            changed: false,
        };
        let r = f(&mut edit)?;
        if !edit.changed {
            return Ok(r);
        }
        *guard = Arc::new(edit.entries);
        drop(guard);
        self.inner.version.send_modify(|v| *v += 1);
        self.tell_removed(edit.removed);
        Ok(r)
    }

    /// Tells the subscribers of each removed resource, and ends their subscriptions to it.
    fn tell_removed(&self, removed: BTreeSet<String>) {
        let mut subs = self.subs();
        let mut interest = false;
        for uri in removed {
            if let Some(ids) = subs.by_uri.remove(&uri) {
                for id in ids {
                    if let Some(member) = subs.members.get_mut(&id) {
                        member.subscribed = member.subscribed.saturating_sub(1);
                        member.mailbox.removed(&uri);
                    }
                }
                interest = true;
            }
        }
        drop(subs);
        if interest {
            self.interest_changed();
        }
    }

    fn subs(&self) -> MutexGuard<'_, Subscriptions> {
        // Subscription maps are updated in single statements; a panic elsewhere cannot tear them.
        self.inner
            .subs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a resource with a reader. A URI can be registered once.
    pub fn register(
        &self,
        descriptor: ResourceDescriptor,
        reader: Arc<dyn ResourceReader>,
    ) -> Result<(), CoreError> {
        self.edit(|e| e.register(descriptor, reader))
    }

    /// Registers a resource, or replaces the one registered under the same URI (its descriptor
    /// and reader) while keeping its subscriptions. Returns whether one was replaced.
    pub fn register_or_replace(
        &self,
        descriptor: ResourceDescriptor,
        reader: Arc<dyn ResourceReader>,
    ) -> Result<bool, CoreError> {
        self.edit(|e| e.register_or_replace(descriptor, reader))
    }

    /// Registers a resource whose contents are fixed text.
    pub fn register_text(
        &self,
        descriptor: ResourceDescriptor,
        text: impl Into<String>,
    ) -> Result<(), CoreError> {
        self.edit(|e| e.register_text(descriptor, text))
    }

    /// Registers a URI template.
    pub fn register_template(
        &self,
        template: ResourceTemplate,
        reader: Arc<dyn ResourceReader>,
    ) -> Result<(), CoreError> {
        // Parsed before the writer lock is taken.
        let parts = Arc::new(parse_template(&template.uri_template)?);
        self.edit(|e| e.insert_template(template, parts, reader))
    }

    /// Removes a resource. Its subscribers receive [`ResourceEvent::Removed`] and their
    /// subscriptions to it end; the list is marked changed. Returns whether it existed.
    pub fn remove(&self, uri: &str) -> bool {
        let Ok(done) = self.edit(|e| Ok::<_, std::convert::Infallible>(e.remove(uri)));
        done
    }

    /// Removes a template. Returns whether it existed.
    pub fn remove_template(&self, uri_template: &str) -> bool {
        let Ok(done) =
            self.edit(|e| Ok::<_, std::convert::Infallible>(e.remove_template(uri_template)));
        done
    }

    /// Sets the app's [`ResourceVisibility`]: from now on the `*_for` methods show each caller
    /// only what it allows. Clients are told the list changed, since what each sees may have.
    pub fn set_visibility(&self, visibility: impl ResourceVisibility) {
        let visibility: Arc<dyn ResourceVisibility> = Arc::new(visibility);
        let Ok(()) = self.edit(|e| {
            e.set_visibility(Some(visibility));
            Ok::<_, std::convert::Infallible>(())
        });
    }

    /// A receiver whose value changes whenever the resource or template list changes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.version.subscribe()
    }

    /// One page of resources, sorted by URI: every resource, whatever the app's
    /// [`ResourceVisibility`] (for the app itself; a transport lists with
    /// [`list_for`](Self::list_for)).
    pub fn list(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ResourceDescriptor>, ResourceError> {
        self.snapshot().list(None, cursor, limit)
    }

    /// One page of the resources `caller` may know of, sorted by URI.
    pub fn list_for(
        &self,
        caller: &Caller,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ResourceDescriptor>, ResourceError> {
        self.snapshot().list(Some(caller), cursor, limit)
    }

    /// One page of templates, sorted by template: every template (for the app itself; a
    /// transport lists with [`list_templates_for`](Self::list_templates_for)).
    pub fn list_templates(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ResourceTemplate>, ResourceError> {
        self.snapshot().list_templates(None, cursor, limit)
    }

    /// One page of the templates `caller` is shown, sorted by template.
    pub fn list_templates_for(
        &self,
        caller: &Caller,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<ResourceTemplate>, ResourceError> {
        self.snapshot().list_templates(Some(caller), cursor, limit)
    }

    /// Whether a URI names a registered resource or matches a template.
    pub fn exists(&self, uri: &str) -> bool {
        self.snapshot().exists(uri)
    }

    /// Whether a URI names a resource (registered, or matched by a template) that `caller`
    /// may know of.
    pub fn exists_for(&self, caller: &Caller, uri: &str) -> bool {
        let e = self.snapshot();
        e.exists(uri) && e.shows(uri, caller)
    }

    /// Reads a resource on `caller`'s behalf: one hidden from it answers
    /// [`ResourceError::NotFound`], as an unknown one does.
    pub async fn read_for(
        &self,
        caller: &Caller,
        uri: &str,
    ) -> Result<Vec<ResourceContents>, ResourceError> {
        let e = self.snapshot();
        if !e.shows(uri, caller) {
            return Err(ResourceError::NotFound {
                uri: uri.to_string(),
            });
        }
        read_in(e, uri).await
    }

    /// Reads a resource: a registered URI first, then the first template that matches. Every
    /// resource is readable this way, whatever the app's [`ResourceVisibility`] (for the app
    /// itself; a transport reads with [`read_for`](Self::read_for)).
    pub async fn read(&self, uri: &str) -> Result<Vec<ResourceContents>, ResourceError> {
        read_in(self.snapshot(), uri).await
    }

    /// A new subscriber that may subscribe to every resource (for the app itself; a transport
    /// subscribes on a caller's behalf with [`subscriber_for`](Self::subscriber_for)).
    /// Subscribe it to URIs (at most [`Subscriber::DEFAULT_LIMIT`] at once unless
    /// [`Subscriber::with_limit`] says otherwise); receive events from it; drop it to end every
    /// subscription it holds.
    pub fn subscriber(&self) -> Subscriber {
        self.new_subscriber(None)
    }

    /// A new subscriber on `caller`'s behalf: subscribing it to a resource hidden from the
    /// caller answers [`ResourceError::NotFound`], as for an unknown one.
    pub fn subscriber_for(&self, caller: Caller) -> Subscriber {
        self.new_subscriber(Some(caller))
    }

    fn new_subscriber(&self, caller: Option<Caller>) -> Subscriber {
        let id = self.inner.next_subscriber.fetch_add(1, Ordering::Relaxed);
        let mailbox = Arc::new(Mailbox::default());
        self.subs().members.insert(
            id,
            Member {
                mailbox: Arc::clone(&mailbox),
                subscribed: 0,
                caller: caller.clone(),
            },
        );
        Subscriber {
            id,
            registry: self.clone(),
            mailbox,
            caller,
            limit: Subscriber::DEFAULT_LIMIT,
        }
    }

    /// Tells every current subscriber of `uri` that it changed. Returns how many were told.
    ///
    /// A subscriber that has not yet read its last update of `uri` counts as told: that update
    /// is not queued twice, and reading it tells the subscriber to read the resource again,
    /// which covers this change too. Notifying never waits for a subscriber's reader.
    ///
    /// A subscriber on a caller's behalf is told only while the app's [`ResourceVisibility`]
    /// still shows it the resource (asked once per subscriber and update): one no longer shown
    /// it (say, a project was taken away from an agent) is not told, and its subscription
    /// ends with [`ResourceEvent::Removed`], as if the resource were gone, which for that
    /// caller it is. A visibility that panics counts as hiding the resource; its panic does not
    /// unwind through this call.
    pub fn notify_updated(&self, uri: &str) -> usize {
        let entries = self.snapshot();
        let Some(visibility) = entries.visibility.as_ref() else {
            let subs = self.subs();
            let Some(ids) = subs.by_uri.get(uri) else {
                return 0;
            };
            let mut told = 0;
            for id in ids {
                if let Some(member) = subs.members.get(id) {
                    member.mailbox.updated(uri);
                    told += 1;
                }
            }
            return told;
        };
        // The app's visibility is asked with the subscriptions' lock released: it may call
        // back into this registry.
        let watching: Vec<(u64, Arc<Mailbox>, Option<Caller>)> = {
            let subs = self.subs();
            let Some(ids) = subs.by_uri.get(uri) else {
                return 0;
            };
            ids.iter()
                .filter_map(|id| {
                    let member = subs.members.get(id)?;
                    Some((*id, Arc::clone(&member.mailbox), member.caller.clone()))
                })
                .collect()
        };
        let mut told = 0;
        let mut hidden = Vec::new();
        for (id, mailbox, caller) in watching {
            if caller.is_none_or(|c| shows_contained(visibility.as_ref(), uri, &c)) {
                mailbox.updated(uri);
                told += 1;
            } else {
                hidden.push(id);
            }
        }
        if !hidden.is_empty() {
            self.end_hidden(uri, &hidden);
        }
        told
    }

    /// Ends the subscriptions to `uri` of the subscribers `ids`, which may no longer see it.
    fn end_hidden(&self, uri: &str, ids: &[u64]) {
        let mut guard = self.subs();
        let subs = &mut *guard;
        let Some(watching) = subs.by_uri.get_mut(uri) else {
            return;
        };
        for id in ids {
            if watching.remove(id)
                && let Some(member) = subs.members.get_mut(id)
            {
                member.subscribed = member.subscribed.saturating_sub(1);
                member.mailbox.removed(uri);
            }
        }
        let last = watching.is_empty();
        if last {
            subs.by_uri.remove(uri);
        }
        drop(guard);
        if last {
            self.interest_changed();
        }
    }

    /// The number of subscribers watching `uri`.
    pub fn subscriber_count(&self, uri: &str) -> usize {
        self.subs().by_uri.get(uri).map_or(0, HashSet::len)
    }

    /// Every URI with at least one subscriber, sorted.
    pub fn subscribed_uris(&self) -> Vec<String> {
        let mut uris: Vec<String> = self.subs().by_uri.keys().cloned().collect();
        uris.sort();
        uris
    }

    /// A receiver whose value changes whenever a URI gains its first subscriber or loses its
    /// last (read the set with [`ResourceRegistry::subscribed_uris`]). Lets a producer of
    /// updates (e.g. a relay subscribing to another server) watch only what someone watches.
    pub fn subscription_changes(&self) -> watch::Receiver<u64> {
        self.inner.interest.subscribe()
    }

    fn interest_changed(&self) {
        self.inner.interest.send_modify(|v| *v = v.wrapping_add(1));
    }
}

/// One party's subscriptions and the events they produce. Dropping it unsubscribes it from
/// everything.
pub struct Subscriber {
    id: u64,
    registry: ResourceRegistry,
    mailbox: Arc<Mailbox>,
    /// Whose behalf it subscribes on (`None`: the app's own, which sees everything).
    caller: Option<Caller>,
    /// How many URIs it may be subscribed to at once.
    limit: usize,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("id", &self.id)
            .field("limit", &self.limit)
            .finish()
    }
}

impl Subscriber {
    /// How many URIs a subscriber may be subscribed to at once unless
    /// [`with_limit`](Self::with_limit) says otherwise: 1,000. A client subscribing on its own
    /// rarely watches more than a few dozen resources; the bound is there because a template
    /// makes every URI it matches subscribable, and each subscription costs the registry an
    /// entry (and an aggregator one subscription upstream).
    pub const DEFAULT_LIMIT: usize = 1000;

    /// Sets how many URIs this subscriber may be subscribed to at once (0: none). Subscriptions
    /// it already holds are kept; the limit applies to the next ones.
    ///
    /// ```
    /// use kberg_core::{ResourceDescriptor, ResourceError, ResourceRegistry};
    ///
    /// let resources = ResourceRegistry::new();
    /// resources.register_text(ResourceDescriptor::new("notes://a", "a"), "A").unwrap();
    /// resources.register_text(ResourceDescriptor::new("notes://b", "b"), "B").unwrap();
    /// let sub = resources.subscriber().with_limit(1);
    /// sub.subscribe("notes://a").unwrap();
    /// sub.subscribe("notes://a").unwrap(); // already subscribed: no new subscription
    /// assert!(matches!(
    ///     sub.subscribe("notes://b"),
    ///     Err(ResourceError::TooManySubscriptions { limit: 1, .. })
    /// ));
    /// ```
    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// How many URIs this subscriber may be subscribed to at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Subscribes to `uri`. The URI must name a registered resource or match a template, and
    /// for a subscriber on a caller's behalf, one the caller may know of
    /// ([`ResourceVisibility`]). Subscribing twice is the same as once. A new subscription
    /// past the subscriber's [`limit`](Self::limit) answers
    /// [`ResourceError::TooManySubscriptions`] and subscribes nothing.
    pub fn subscribe(&self, uri: &str) -> Result<(), ResourceError> {
        let known = match &self.caller {
            None => self.registry.exists(uri),
            Some(caller) => self.registry.exists_for(caller, uri),
        };
        if !known {
            return Err(ResourceError::NotFound {
                uri: uri.to_string(),
            });
        }
        let first = {
            let mut guard = self.registry.subs();
            let subs = &mut *guard;
            if subs
                .by_uri
                .get(uri)
                .is_some_and(|ids| ids.contains(&self.id))
            {
                return Ok(());
            }
            // The member lives as long as this subscriber (made with it, removed by its drop).
            let Some(member) = subs.members.get_mut(&self.id) else {
                return Ok(());
            };
            if member.subscribed >= self.limit {
                return Err(ResourceError::TooManySubscriptions {
                    uri: uri.to_string(),
                    limit: self.limit,
                });
            }
            member.subscribed += 1;
            let ids = subs.by_uri.entry(uri.to_string()).or_default();
            ids.insert(self.id);
            ids.len() == 1
        };
        if first {
            self.registry.interest_changed();
        }
        Ok(())
    }

    /// Ends the subscription to `uri`. Returns whether there was one.
    pub fn unsubscribe(&self, uri: &str) -> bool {
        let (had, last) = {
            let mut guard = self.registry.subs();
            let subs = &mut *guard;
            let Some(ids) = subs.by_uri.get_mut(uri) else {
                return false;
            };
            let had = ids.remove(&self.id);
            let last = ids.is_empty();
            if last {
                subs.by_uri.remove(uri);
            }
            if had && let Some(member) = subs.members.get_mut(&self.id) {
                member.subscribed = member.subscribed.saturating_sub(1);
            }
            (had, last)
        };
        if last {
            self.registry.interest_changed();
        }
        had
    }

    /// The next event, waiting until there is one. Never `None` in fact: the subscriber keeps
    /// its registry alive, so events can always come. Cancel-safe: an event is taken off the
    /// queue only when this returns it.
    pub async fn next(&mut self) -> Option<ResourceEvent> {
        loop {
            if let Some(event) = self.mailbox.pop() {
                return Some(event);
            }
            self.mailbox.wake.notified().await;
        }
    }

    /// The next event if one is waiting.
    pub fn try_next(&mut self) -> Option<ResourceEvent> {
        self.mailbox.pop()
    }

    /// How many events wait to be read: at most one `Updated` per subscribed URI, plus the
    /// `Removed` events not read yet.
    pub fn pending(&self) -> usize {
        self.mailbox.len()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let before = {
            let mut subs = self.registry.subs();
            subs.members.remove(&self.id);
            let before = subs.by_uri.len();
            subs.by_uri.retain(|_, ids| {
                ids.remove(&self.id);
                !ids.is_empty()
            });
            before != subs.by_uri.len()
        };
        if before {
            self.registry.interest_changed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::ResourceBody;

    #[test]
    fn templates_match() {
        let p = parse_template("notes://{folder}/{id}.md").unwrap();
        let v = match_template(&p, "notes://work/42.md").unwrap();
        assert_eq!(v["folder"], "work");
        assert_eq!(v["id"], "42");
        assert!(match_template(&p, "notes://a/b/42.md").is_none());
        assert!(match_template(&p, "notes://work/.md").is_none());
        let p = parse_template("file:///{+path}").unwrap();
        assert_eq!(
            match_template(&p, "file:///a/b/c").unwrap()["path"],
            "a/b/c"
        );
        assert!(parse_template("x://{a}{b}").is_err());
        assert!(parse_template("x://{a").is_err());
        assert!(parse_template("x://{a b}").is_err());
    }

    #[test]
    fn subscription_interest_is_observable() {
        let reg = ResourceRegistry::new();
        reg.register_text(ResourceDescriptor::new("x://a", "a"), "A")
            .unwrap();
        reg.register_text(ResourceDescriptor::new("x://b", "b"), "B")
            .unwrap();
        let mut interest = reg.subscription_changes();
        interest.mark_unchanged();
        let one = reg.subscriber();
        let two = reg.subscriber();
        one.subscribe("x://a").unwrap();
        assert!(interest.has_changed().unwrap());
        interest.mark_unchanged();
        // A second subscriber of the same URI changes nothing.
        two.subscribe("x://a").unwrap();
        assert!(!interest.has_changed().unwrap());
        assert_eq!(reg.subscribed_uris(), vec!["x://a".to_string()]);
        assert!(one.unsubscribe("x://a"));
        assert!(!interest.has_changed().unwrap());
        two.subscribe("x://b").unwrap();
        assert!(interest.has_changed().unwrap());
        interest.mark_unchanged();
        drop(two);
        assert!(interest.has_changed().unwrap());
        assert!(reg.subscribed_uris().is_empty());
        interest.mark_unchanged();
        drop(one);
        assert!(!interest.has_changed().unwrap());
    }

    #[tokio::test]
    async fn replacing_keeps_subscriptions() {
        let reg = ResourceRegistry::new();
        reg.register_text(ResourceDescriptor::new("x://a", "a"), "old")
            .unwrap();
        let mut sub = reg.subscriber();
        sub.subscribe("x://a").unwrap();
        let replaced = reg
            .register_or_replace(
                ResourceDescriptor::new("x://a", "a").title("New"),
                reader_fn(
                    |uri, _| async move { Ok(vec![ResourceContents::text(uri, None, "new")]) },
                ),
            )
            .unwrap();
        assert!(replaced);
        assert_eq!(reg.subscriber_count("x://a"), 1);
        assert_eq!(reg.notify_updated("x://a"), 1);
        assert_eq!(
            sub.try_next(),
            Some(ResourceEvent::Updated {
                uri: "x://a".into()
            })
        );
        let read = reg.read("x://a").await.unwrap();
        assert_eq!(read[0].body, ResourceBody::Text("new".into()));
        assert!(
            !reg.register_or_replace(
                ResourceDescriptor::new("x://c", "c"),
                reader_fn(|uri, _| async move { Ok(vec![ResourceContents::text(uri, None, "c")]) }),
            )
            .unwrap()
        );
    }

    /// A visibility that shows each principal the URIs under its own name, and templates
    /// only to `admin`.
    struct Owners;

    impl ResourceVisibility for Owners {
        fn resource(&self, uri: &str, caller: &Caller) -> bool {
            uri.strip_prefix("notes://")
                .and_then(|rest| rest.split('/').next())
                .is_some_and(|owner| owner == caller.principal().id)
        }

        fn template(&self, _uri_template: &str, caller: &Caller) -> bool {
            caller.principal().id == "admin"
        }
    }

    fn caller(id: &str) -> Caller {
        Caller::new(crate::Principal::new(id))
    }

    fn owned_notes() -> ResourceRegistry {
        let r = ResourceRegistry::new();
        r.register_text(ResourceDescriptor::new("notes://alice/a", "a"), "alice's")
            .unwrap();
        r.register_text(ResourceDescriptor::new("notes://bob/b", "b"), "bob's")
            .unwrap();
        r.register_template(
            ResourceTemplate::new("notes://{owner}/{id}", "note"),
            reader_fn(|uri, _| async move {
                Ok(vec![ResourceContents::text(uri, None, "from the template")])
            }),
        )
        .unwrap();
        r.set_visibility(Owners);
        r
    }

    #[tokio::test]
    async fn a_hidden_resource_answers_as_an_unknown_one() {
        let r = owned_notes();
        let alice = caller("alice");
        let uris = |page: Page<ResourceDescriptor>| {
            page.items.into_iter().map(|d| d.uri).collect::<Vec<_>>()
        };
        assert_eq!(
            uris(r.list_for(&alice, None, 10).unwrap()),
            ["notes://alice/a"]
        );
        // The app itself still sees everything.
        assert_eq!(r.list(None, 10).unwrap().items.len(), 2);
        assert!(r.read_for(&alice, "notes://alice/a").await.is_ok());
        let hidden = r.read_for(&alice, "notes://bob/b").await.unwrap_err();
        let unknown = r.read_for(&alice, "other://x").await.unwrap_err();
        assert_eq!(
            hidden,
            ResourceError::NotFound {
                uri: "notes://bob/b".into()
            }
        );
        assert!(matches!(unknown, ResourceError::NotFound { .. }));
        // A URI a template matches is checked too.
        assert!(r.read_for(&alice, "notes://alice/new").await.is_ok());
        assert!(matches!(
            r.read_for(&alice, "notes://bob/new").await,
            Err(ResourceError::NotFound { .. })
        ));
        assert!(r.exists_for(&alice, "notes://alice/new"));
        assert!(!r.exists_for(&alice, "notes://bob/new"));
    }

    #[tokio::test]
    async fn a_caller_cannot_subscribe_to_what_it_may_not_see() {
        let r = owned_notes();
        let sub = r.subscriber_for(caller("alice"));
        assert!(sub.subscribe("notes://alice/a").is_ok());
        assert!(matches!(
            sub.subscribe("notes://bob/b"),
            Err(ResourceError::NotFound { .. })
        ));
        assert!(matches!(
            sub.subscribe("notes://bob/new"),
            Err(ResourceError::NotFound { .. })
        ));
        assert_eq!(r.subscribed_uris(), ["notes://alice/a"]);
        // The app's own subscriber is not filtered.
        assert!(r.subscriber().subscribe("notes://bob/b").is_ok());
    }

    #[test]
    fn templates_are_listed_as_the_visibility_says() {
        let r = owned_notes();
        assert!(
            r.list_templates_for(&caller("alice"), None, 10)
                .unwrap()
                .items
                .is_empty()
        );
        assert_eq!(
            r.list_templates_for(&caller("admin"), None, 10)
                .unwrap()
                .items
                .len(),
            1
        );
        // A closure decides on resources and shows every template.
        r.set_visibility(|_: &str, _: &Caller| false);
        assert_eq!(
            r.list_templates_for(&caller("alice"), None, 10)
                .unwrap()
                .items
                .len(),
            1
        );
        assert!(
            r.list_for(&caller("alice"), None, 10)
                .unwrap()
                .items
                .is_empty()
        );
    }

    #[test]
    fn setting_a_visibility_tells_clients_the_list_changed() {
        let r = ResourceRegistry::new();
        let mut changes = r.changes();
        changes.mark_unchanged();
        r.set_visibility(|_: &str, _: &Caller| true);
        assert!(changes.has_changed().unwrap());
    }
}
