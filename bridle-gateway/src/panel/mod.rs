//! The web panel: server-rendered pages for admins, a thin client of the admin API.
//!
//! Every page handler calls the admin API itself, in process: the API's axum router is invoked
//! with [`tower::ServiceExt::oneshot`], carrying the logged-in admin's bearer credential, which
//! the panel keeps server-side in the session and never hands to the browser. So the panel has
//! no private path to the stores, every change it makes is recorded exactly as an API change
//! would be, with the panel as its surface (`admin:<name>@panel`), a revoked credential ends the
//! session on the next request, and a page whose endpoint the API does not have says so instead
//! of failing.
//!
//! The parts, bottom-up:
//! - [`config`]: [`PanelConfig`] (base path, session lifetimes, TLS, allowed origins; who may
//!   only watch is the admin API's to say);
//! - `session`: the server-side session store behind the session cookie;
//! - `guard`: the security layers (security headers and CSP, the cross-site request check, the
//!   session check);
//! - `api`: the in-process admin API client and its problem-details failures;
//! - `view`: the templates (minijinja, compiled in) and what every page shares;
//! - `assets`: the stylesheet, the small script and the vendored htmx and its SSE extension,
//!   compiled in;
//! - `pages`: one module per area (login, overview, projects, queue, scope, integrations,
//!   agents, sessions, secrets, patterns, memory, audit) and the live streams (`live`; an index
//!   run's progress is in `patterns`).
//!
//! [`router`] assembles them under the configured base path (default `/panel`); the admin
//! listener ([`crate::admin::AdminServer`]) merges it beside the API.
//!
//! Failed log-ins are counted in the admin API's own throttle (the one of the
//! [`AdminState`] the panel is built over, with its [`AdminState::login_limits`]), so an
//! attacker who alternates between the log-in form and the API's bearer check gets no more
//! tries than one of them alone would allow.

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use crate::admin::AdminState;

mod api;
mod assets;
pub mod config;
mod guard;
mod pages;
mod session;
mod view;

pub use assets::{HTMX_SSE_VERSION, HTMX_VERSION};
pub use config::{PanelConfig, PanelConfigError};

/// What every page handler reads.
#[derive(Clone)]
pub(crate) struct Panel {
    pub(crate) config: Arc<PanelConfig>,
    pub(crate) sessions: Arc<session::SessionStore>,
    /// The admin API's throttle: refused log-ins and refused bearer tokens in one table.
    pub(crate) throttle: Arc<crate::admin::throttle::LoginThrottle>,
    pub(crate) api: api::AdminApi,
    pub(crate) views: Arc<view::Views>,
    pub(crate) credentials: Arc<dyn crate::admin::AdminCredentials>,
    /// The agent types a project can be previewed for (the renderer's catalog, read once).
    pub(crate) agent_types: Arc<Vec<String>>,
}

impl std::fmt::Debug for Panel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Panel")
            .field("base_path", &self.config.base_path)
            .finish_non_exhaustive()
    }
}

/// The panel's routes under `config.base_path`, calling the admin API built from `state`.
/// Merge it into the router that serves the API (it has no fallback of its own at the top
/// level; unknown paths under the base path get the panel's HTML 404). Failed log-ins count
/// in `state`'s throttle, within its [`AdminState::login_limits`], together with the bearer
/// tokens the API refuses: build the API's router from the same `state`.
pub fn router(config: PanelConfig, state: &AdminState) -> Result<Router, PanelConfigError> {
    config.check()?;
    if !state.login_limits.is_usable() {
        return Err(PanelConfigError::Zero("login_limits"));
    }
    let base = config.base_path.clone();
    let agent_types = state
        .ctx
        .renderer
        .catalog()
        .names()
        .into_iter()
        .map(str::to_string)
        .collect();
    let panel = Panel {
        sessions: Arc::new(session::SessionStore::new(&config)),
        throttle: Arc::clone(&state.throttle),
        config: Arc::new(config),
        api: api::AdminApi::new(crate::admin::router(state.clone())),
        views: Arc::new(view::Views::new()?),
        credentials: Arc::clone(&state.credentials),
        agent_types: Arc::new(agent_types),
    };

    let signed_in = pages::routes().route_layer(axum::middleware::from_fn_with_state(
        panel.clone(),
        guard::require_session,
    ));
    let inner = Router::new()
        .merge(signed_in)
        .route("/login", get(pages::login::form).post(pages::login::submit))
        .route("/logout", post(pages::login::logout))
        .merge(assets::routes())
        .fallback(pages::not_found)
        .method_not_allowed_fallback(pages::method_not_allowed)
        .with_state(panel.clone());
    // The overview is the base path itself; `base/` (which a nested router does not match)
    // leads there.
    let home = base.clone();
    Ok(Router::new()
        .route(
            &format!("{base}/"),
            get(move || async move { axum::response::Redirect::to(&home) }),
        )
        .method_not_allowed_fallback(pages::method_not_allowed)
        .nest(&base, inner)
        .layer(axum::middleware::from_fn_with_state(
            panel.clone(),
            guard::refuse_cross_site,
        ))
        .layer(axum::middleware::from_fn_with_state(
            panel,
            guard::security_headers,
        )))
}
