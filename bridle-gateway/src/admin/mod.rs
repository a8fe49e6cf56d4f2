//! The admin API: every control of the gateway over one authenticated JSON API under
//! [`BASE_PATH`], served on its own listener (loopback by default) by [`AdminServer`].
//!
//! Admins use it (the command line and the web panel are its clients); agents never do: their
//! tokens are not admin credentials and get 401 here. Each resource is one module with its
//! routes, handlers and wire types; [`router`] puts them behind the admin-auth middleware and
//! the body limit, and answers unknown routes and wrong methods with the same problem details
//! as every other failure. Resources that need the vault and the agent registry (agents,
//! secrets) slot in the same way: a module with a `routes()` merged in [`authenticated`].
//!
//! Every change made through the API is recorded in the rules store (or the vault) with the
//! actor [`AdminActor::actor`] (`admin:<name>@<surface>`, the surface from the
//! [`SURFACE_HEADER`] header, `api` by default) and in the gateway's audit log as a `user`-source
//! entry naming the admin and the surface.

use std::sync::Arc;

use async_trait::async_trait;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, Method, Uri, header};
use axum::routing::get;

use crate::context::GatewayContext;
use crate::upstreams::{UpstreamPool, UpstreamReport};

pub mod agents;
pub mod audit_log;
pub mod auth;
pub mod credential;
mod decision;
pub mod error;
pub mod feeds;
pub mod index_runs;
pub mod integrations;
pub mod memory;
pub mod openapi;
pub mod page;
pub mod patterns;
pub mod projects;
pub mod queue;
pub mod scope;
pub mod secrets;
mod server;
pub mod sessions;
mod stream;
pub(crate) mod throttle;

pub use auth::{
    AdminAccess, AdminActor, AdminCredentials, AdminIdentity, AdminTokens, CredentialsError,
    MIN_TOKEN_FILE_CHARS, SURFACE_HEADER, TOKEN_PIPE_WAIT,
};
pub use error::{ApiError, FieldError, ProblemDetails};
pub use server::{AdminServeError, AdminServer};
pub use throttle::LoginLimits;

/// Where the API is mounted.
pub const BASE_PATH: &str = "/admin/api/v1";

/// The default largest request body (1 MiB): a rules document is a few kilobytes.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// The longest grace period a rotation gives the previous secret version or agent tokens
/// (`grace_secs`): 30 days. A longer one would keep a credential meant to be replaced valid
/// for good.
pub const MAX_GRACE_SECS: u64 = 30 * 24 * 60 * 60;

/// What the integrations resource reads (each upstream's status) and changes (whether one is
/// enabled).
#[async_trait]
pub trait IntegrationStatus: Send + Sync + 'static {
    /// One report per configured upstream, sorted by namespace.
    async fn reports(&self) -> Vec<UpstreamReport>;

    /// Turns an upstream on or off at run time; `Ok(false)` when it already was. An
    /// implementation that cannot says so with `Err`.
    async fn set_enabled(&self, namespace: &str, enabled: bool) -> Result<bool, String> {
        let _ = (namespace, enabled);
        Err("these integrations cannot be enabled or disabled at run time".into())
    }

    /// Changes which projects an upstream serves at run time (empty: all); returns the previous
    /// ones. An implementation that cannot says so with `Err`.
    fn set_projects(&self, namespace: &str, projects: Vec<String>) -> Result<Vec<String>, String> {
        let _ = (namespace, projects);
        Err("these integrations' project mappings cannot be changed at run time".into())
    }

    /// Tells the integrations that an agent's type or projects changed: what that agent may
    /// know of (project-mapped tools) may differ, so connected clients are told to list afresh.
    fn agent_changed(&self) {}
}

#[async_trait]
impl IntegrationStatus for UpstreamPool {
    async fn reports(&self) -> Vec<UpstreamReport> {
        UpstreamPool::reports(self).await
    }

    async fn set_enabled(&self, namespace: &str, enabled: bool) -> Result<bool, String> {
        UpstreamPool::set_enabled(self, namespace, enabled)
            .await
            .map_err(|e| e.to_string())
    }

    fn set_projects(&self, namespace: &str, projects: Vec<String>) -> Result<Vec<String>, String> {
        UpstreamPool::set_projects(self, namespace, projects).map_err(|e| e.to_string())
    }

    fn agent_changed(&self) {
        UpstreamPool::agent_changed(self);
    }
}

/// The most live event streams one admin may hold open at once by default.
pub const DEFAULT_STREAMS_PER_ADMIN: usize = 16;

/// How often an open event stream asks again, by default, whether the credential that opened
/// it still opens the API.
pub const DEFAULT_STREAM_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// What every admin handler reads: the gateway's stores and who may call.
#[derive(Clone)]
pub struct AdminState {
    pub(crate) ctx: Arc<GatewayContext>,
    /// The admins' credentials with [`AdminState::access`] applied: what every part of the
    /// admin listener verifies a token with.
    pub(crate) credentials: Arc<dyn AdminCredentials>,
    /// The credentials as given.
    admins: Arc<dyn AdminCredentials>,
    access: AdminAccess,
    /// Refused bearer tokens and failed panel log-ins, per client address and per token.
    pub(crate) throttle: Arc<throttle::LoginThrottle>,
    pub(crate) login_limits: LoginLimits,
    /// The live event streams open now, per admin.
    pub(crate) streams_open: Arc<stream::StreamSlots>,
    /// How often an open stream checks its credential again.
    pub(crate) stream_recheck: std::time::Duration,
    pub(crate) integrations: Option<Arc<dyn IntegrationStatus>>,
    /// Held through each change of an upstream (`bridle.yaml` rewritten, the pool changed, the
    /// audit entry written), so concurrent changes reach the file, the running upstream and
    /// the audit log in one order.
    pub(crate) integration_changes: Arc<tokio::sync::Mutex<()>>,
    pub(crate) vault: Option<Arc<crate::vault::Vault>>,
    pub(crate) memory: Option<bridle_memory::MemoryService>,
    pub(crate) vendor_feed: Option<Arc<bridle_rules::vendor::VendorFeed>>,
    /// One feed run at a time: a run on demand while another is under way is 409
    /// `feed_run_in_progress`.
    pub(crate) feed_runs: crate::feed::FeedRuns,
    pub(crate) body_limit: usize,
    /// Cancelled when the server shuts down, so live streams end and let it stop.
    pub(crate) streams: tokio_util::sync::CancellationToken,
    /// The gateway's metrics, whose indexing gauges an index run through the API keeps.
    pub(crate) metrics: Option<Arc<crate::ops::GatewayMetrics>>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("body_limit", &self.body_limit)
            .field("access", &self.access)
            .field("login_limits", &self.login_limits)
            .field("integrations", &self.integrations.is_some())
            .field("vault", &self.vault.is_some())
            .finish_non_exhaustive()
    }
}

impl AdminState {
    /// The API over a gateway's rules context, admitting the admins `credentials` accept.
    pub fn new(ctx: Arc<GatewayContext>, credentials: Arc<dyn AdminCredentials>) -> Self {
        let access = AdminAccess::default();
        let login_limits = LoginLimits::default();
        Self {
            ctx,
            credentials: Arc::new(auth::GovernedCredentials {
                admins: Arc::clone(&credentials),
                access: access.clone(),
            }),
            admins: credentials,
            access,
            throttle: Arc::new(throttle::LoginThrottle::new(login_limits)),
            login_limits,
            streams_open: Arc::new(stream::StreamSlots::new(DEFAULT_STREAMS_PER_ADMIN)),
            stream_recheck: DEFAULT_STREAM_RECHECK,
            integrations: None,
            integration_changes: Arc::new(tokio::sync::Mutex::new(())),
            vault: None,
            memory: None,
            vendor_feed: None,
            feed_runs: crate::feed::FeedRuns::default(),
            body_limit: DEFAULT_BODY_LIMIT,
            streams: tokio_util::sync::CancellationToken::new(),
            metrics: None,
        }
    }

    /// Sets who may change things ([`AdminAccess`]): the API refuses a change by anyone else
    /// with 403 `read_only`, and the web panel, asking the same credentials, shows them no
    /// forms.
    pub fn access(mut self, access: AdminAccess) -> Self {
        self.credentials = Arc::new(auth::GovernedCredentials {
            admins: Arc::clone(&self.admins),
            access: access.clone(),
        });
        self.access = access;
        self
    }

    /// Makes the whole API (and the panel over it) read-only: every change is refused 403
    /// `read_only`, whoever asks.
    pub fn read_only(self, yes: bool) -> Self {
        let mut access = self.access.clone();
        access.read_only = yes;
        self.access(access)
    }

    /// Lets this admin only read, through the API and the panel alike.
    pub fn watcher(self, admin: impl Into<String>) -> Self {
        let mut access = self.access.clone();
        access.watchers.insert(admin.into());
        self.access(access)
    }

    /// Sets how many refused admin credentials are tolerated per client address and per token
    /// (default [`LoginLimits::default`]: 10 and 5 in 15 minutes): the API's bearer tokens and
    /// the log-ins of a web panel built over this state count together, in one table.
    /// [`AdminServer::bind`] and the panel's `router` refuse zero limits.
    pub fn login_limits(mut self, limits: LoginLimits) -> Self {
        self.throttle = Arc::new(throttle::LoginThrottle::new(limits));
        self.login_limits = limits;
        self
    }

    /// Sets how many live event streams (`/sessions/events`, an index run's events) one admin
    /// may hold open at once, of every kind together (default [`DEFAULT_STREAMS_PER_ADMIN`]);
    /// past it a new one is refused 429 `too_many_streams`.
    pub fn max_streams_per_admin(mut self, streams: usize) -> Self {
        self.streams_open = Arc::new(stream::StreamSlots::new(streams));
        self
    }

    /// Sets how often an open event stream (`/sessions/events`, an index run's events) checks
    /// that its credential still opens the API (default [`DEFAULT_STREAM_RECHECK`]); one that
    /// no longer does (revoked, rotated away) ends the stream.
    pub fn stream_recheck(mut self, every: std::time::Duration) -> Self {
        self.stream_recheck = every.max(std::time::Duration::from_millis(1));
        self
    }

    /// Keeps these metrics' indexing gauges (`bridle_indexing_*`) during index runs started
    /// through the API; without it the runs are not counted.
    pub fn metrics(mut self, metrics: Arc<crate::ops::GatewayMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Reports the upstreams of this pool (the gateway's) under `integrations`; without it the
    /// list is empty.
    pub fn integrations(mut self, integrations: Arc<dyn IntegrationStatus>) -> Self {
        self.integrations = Some(integrations);
        self
    }

    /// Serves the secrets and agent-token resources from this vault; without it they answer
    /// 503 `vault_unavailable`.
    pub fn vault(mut self, vault: Arc<crate::vault::Vault>) -> Self {
        self.vault = Some(vault);
        self
    }

    /// Serves the memory resource from this service; without it it answers 503 `memory_off`.
    pub fn memory(mut self, memory: bridle_memory::MemoryService) -> Self {
        self.memory = Some(crate::memory::hosted(memory));
        self
    }

    /// Serves the vendor feed resource from this feed; without it it answers 503
    /// `vendor_feed_off`.
    pub fn vendor_feed(mut self, feed: Arc<bridle_rules::vendor::VendorFeed>) -> Self {
        self.vendor_feed = Some(feed);
        self
    }

    /// Shares the guard that lets one run of the feed go at a time with the gateway's interval
    /// runs (a run on demand while one is under way is 409 `feed_run_in_progress`).
    pub fn feed_runs(mut self, runs: crate::feed::FeedRuns) -> Self {
        self.feed_runs = runs;
        self
    }

    /// The context the handlers read (rules store, sessions, audit log).
    pub fn context(&self) -> &Arc<GatewayContext> {
        &self.ctx
    }

    /// The largest request body accepted (default [`DEFAULT_BODY_LIMIT`]); a larger one gets
    /// 413 `body_too_large`.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }
}

/// The authenticated resources, before the auth layer: each resource module adds its routes.
pub fn authenticated() -> Router<AdminState> {
    Router::new()
        .merge(projects::routes())
        .merge(queue::routes())
        .merge(scope::routes())
        .merge(integrations::routes())
        .merge(sessions::routes())
        .merge(secrets::routes())
        .merge(agents::routes())
        .merge(audit_log::routes())
        .merge(memory::routes())
        .merge(patterns::routes())
        .merge(index_runs::routes())
        .merge(feeds::routes())
}

/// The whole admin API as an axum router (paths include [`BASE_PATH`]), ready to serve or to
/// merge into another router.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .merge(
            authenticated().route_layer(axum::middleware::from_fn_with_state(
                state.clone(),
                auth::require_admin,
            )),
        )
        .route(
            &format!("{BASE_PATH}/openapi.json"),
            get(openapi::serve_document),
        )
        .fallback(unknown_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.body_limit))
        .layer(axum::middleware::map_response(private_answer))
        .with_state(state)
}

/// Marks every answer of the API as not to be stored by a cache (an issued token, a secret's
/// metadata, a session list: none belongs in a proxy's or browser's cache, event streams
/// included) and not to be sniffed as another type than it says.
async fn private_answer(mut response: axum::response::Response) -> axum::response::Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

async fn unknown_route(uri: Uri) -> ApiError {
    ApiError::UnknownRoute(uri.path().to_string())
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    tracing::debug!(%method, path = uri.path(), "method not allowed");
    ApiError::MethodNotAllowed
}

/// `BASE_PATH` joined with `path`.
pub(crate) fn path(p: &str) -> String {
    format!("{BASE_PATH}{p}")
}

/// Records a change an admin made (synchronously, after it was committed): a failed write is
/// 500 `audit_unavailable`, naming `what` as made.
pub(crate) fn record(
    ctx: &GatewayContext,
    entry: crate::audit::Entry,
    what: &str,
) -> Result<(), ApiError> {
    ctx.record_change(entry)
        .map(drop)
        .map_err(|e| ApiError::audit_failed(what, &e))
}

/// A rotation's `grace_secs` as a duration, or 422 `invalid_request` naming the field and
/// [`MAX_GRACE_SECS`].
pub(crate) fn grace_period(grace_secs: u64) -> Result<std::time::Duration, ApiError> {
    if grace_secs > MAX_GRACE_SECS {
        let message =
            format!("`grace_secs` is at most {MAX_GRACE_SECS} (30 days); {grace_secs} was given");
        return Err(ApiError::Invalid {
            code: "invalid_request",
            detail: message.clone(),
            errors: vec![FieldError {
                code: "too_large".into(),
                message,
                field: Some("grace_secs".into()),
                line: None,
                column: None,
            }],
        });
    }
    Ok(std::time::Duration::from_secs(grace_secs))
}

/// Loads a project's stored document for a request that submits none: a document that does
/// not load is answered `stored_document_invalid` ([`ApiError::stored`]), never as the
/// request's fault, with the revision a repair must be based on when it may be repaired.
pub(crate) fn load_stored(
    store: &bridle_rules::RulesStore,
    project: &str,
) -> Result<bridle_rules::Loaded, ApiError> {
    store.load(project).map_err(|e| {
        // A document a person may repair through the API: the answer names the revision to
        // base the repair on (a document of a newer build is never repaired).
        let repairable = matches!(
            e,
            bridle_rules::RulesError::Parse { .. }
                | bridle_rules::RulesError::Invalid { .. }
                | bridle_rules::RulesError::Migration { .. }
        );
        let mut answer = ApiError::stored(project, e);
        if repairable && let ApiError::StoredDocument { repair_base, .. } = &mut answer {
            // Best effort: without it the answer still says what is wrong.
            *repair_base = store.repair_base(project).ok().flatten();
        }
        answer
    })
}

/// `e`, from a store call that read project `project`'s stored document beside a document of
/// the request's (or one the store built from it): a document's error is the stored
/// document's (`stored_document_invalid`) when that does not load, and the request's (as
/// [`From`] answers it) when it does. The stored document is read again only on that error.
pub(crate) fn blame(
    store: &bridle_rules::RulesStore,
    project: &str,
    e: bridle_rules::RulesError,
) -> ApiError {
    if matches!(e.kind(), bridle_rules::RulesErrorKind::Document)
        && let Err(stored @ ApiError::StoredDocument { .. }) = load_stored(store, project)
    {
        return stored;
    }
    e.into()
}

/// Runs blocking store work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(crate::error::task_failed("a store task", &e)))?
}
