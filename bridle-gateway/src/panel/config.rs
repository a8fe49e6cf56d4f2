//! [`PanelConfig`]: where the panel is mounted, how long a session lives, and whether the
//! browser reaches it over TLS.
//!
//! Who may only watch is not the panel's to say: the admin API decides it for every client
//! ([`crate::admin::AdminState::read_only`], [`crate::admin::AdminState::watcher`], or
//! `admin.read_only` and `admin.watchers` in `bridle.yaml`), and the panel shows an admin whom
//! the API would refuse changes no forms.
//!
//! The defaults suit the admin listener on loopback over plain HTTP: the session cookie is then
//! `bridle-panel` without `Secure` (a browser may drop a `Secure` cookie on `http://`). Behind a
//! TLS-terminating reverse proxy set [`PanelConfig::behind_tls`]: the cookie becomes
//! `__Host-bridle-panel` with `Secure` (the `__Host-` prefix makes the browser refuse it unless it
//! is `Secure`, host-only and for `/`), and the proxy's public origin goes in
//! [`PanelConfig::allowed_origins`] when it differs from the `Host` the gateway sees.
//!
//! How many failed log-ins are tolerated is not the panel's to say either: they count in the
//! admin API's throttle, together with the bearer tokens it refuses, within
//! [`crate::admin::AdminState::login_limits`] (`admin.login_limits` in `bridle.yaml`).

use std::collections::BTreeSet;
use std::time::Duration;

/// How the panel is served.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PanelConfig {
    /// The path the panel is mounted under (default `/panel`): starts with `/`, does not end
    /// with one, and is not inside the admin API's path. Behind a reverse proxy that serves the
    /// gateway under a prefix, include the prefix (`/bridle/panel`) and forward paths unchanged.
    pub base_path: String,
    /// How long a session lives at most after log-in (default 8 hours).
    pub session_lifetime: Duration,
    /// How long a session lives without a request (default 30 minutes).
    pub idle_timeout: Duration,
    /// Whether browsers reach the panel over TLS (default `false`): the session cookie is then
    /// `__Host-` prefixed and `Secure`.
    pub behind_tls: bool,
    /// Origins (`scheme://host[:port]`) besides the request's own `Host` from which
    /// state-changing requests are accepted: a reverse proxy's public origin.
    pub allowed_origins: BTreeSet<String>,
    /// The most sessions held at once (default 256); past it the least recently used one ends.
    pub max_sessions: usize,
    /// The gateway's MCP URL as agents reach it, for the connect snippets shown with a new
    /// token (default: none, and the snippets say `http://127.0.0.1:7878/mcp`, the default
    /// listen address).
    pub mcp_url: Option<String>,
}

impl Default for PanelConfig {
    fn default() -> Self {
        Self {
            base_path: "/panel".into(),
            session_lifetime: Duration::from_secs(8 * 60 * 60),
            idle_timeout: Duration::from_secs(30 * 60),
            behind_tls: false,
            allowed_origins: BTreeSet::new(),
            max_sessions: 256,
            mcp_url: None,
        }
    }
}

/// Why a panel configuration is refused, or the panel could not be assembled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PanelConfigError {
    /// The base path is not a clean absolute path.
    #[error(
        "panel base path `{0}`: it must start with `/`, not end with `/`, use only letters, digits, `-`, `_`, `.` and `/`, and not be inside /admin/api"
    )]
    BasePath(String),
    /// An allowed origin is not `scheme://host[:port]`.
    #[error("panel allowed origin `{0}` is not `http(s)://host[:port]`")]
    Origin(String),
    /// A lifetime or limit is zero.
    #[error("panel {0} must be greater than zero")]
    Zero(&'static str),
    /// A compiled-in template does not parse (a build defect).
    #[error("panel template `{name}`: {message}")]
    Template {
        /// The template.
        name: &'static str,
        /// Why.
        message: String,
    },
}

impl PanelConfig {
    /// Mounts the panel under `base_path`.
    pub fn base_path(mut self, base_path: impl Into<String>) -> Self {
        self.base_path = base_path.into();
        self
    }

    /// Declares that browsers reach the panel over TLS (`__Host-` cookie, `Secure`).
    pub fn behind_tls(mut self, yes: bool) -> Self {
        self.behind_tls = yes;
        self
    }

    /// Accepts state-changing requests from this origin too (a reverse proxy's public one).
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins
            .insert(origin.into().trim_end_matches('/').to_string());
        self
    }

    /// The MCP URL the connect snippets name.
    pub fn mcp_url(mut self, url: impl Into<String>) -> Self {
        self.mcp_url = Some(url.into());
        self
    }

    /// Sets the absolute and idle lifetimes of a session.
    pub fn session_lifetimes(mut self, lifetime: Duration, idle: Duration) -> Self {
        self.session_lifetime = lifetime;
        self.idle_timeout = idle;
        self
    }

    /// The session cookie's name.
    pub fn cookie_name(&self) -> &'static str {
        if self.behind_tls {
            "__Host-bridle-panel"
        } else {
            "bridle-panel"
        }
    }

    pub(crate) fn check(&self) -> Result<(), PanelConfigError> {
        let b = &self.base_path;
        let clean = b.starts_with('/')
            && b.len() > 1
            && !b.ends_with('/')
            && !b.contains("//")
            && !b.split('/').any(|seg| seg == "." || seg == "..")
            && b.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
        if !clean || b.starts_with("/admin/api") {
            return Err(PanelConfigError::BasePath(b.clone()));
        }
        for origin in &self.allowed_origins {
            let rest = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            if !rest.is_some_and(|r| !r.is_empty() && !r.contains('/')) {
                return Err(PanelConfigError::Origin(origin.clone()));
            }
        }
        if self.session_lifetime.is_zero() {
            return Err(PanelConfigError::Zero("session_lifetime"));
        }
        if self.idle_timeout.is_zero() {
            return Err(PanelConfigError::Zero("idle_timeout"));
        }
        if self.max_sessions == 0 {
            return Err(PanelConfigError::Zero("max_sessions"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_paths_and_origins_are_checked() {
        assert!(PanelConfig::default().check().is_ok());
        assert!(
            PanelConfig::default()
                .base_path("/bridle/panel")
                .check()
                .is_ok()
        );
        for bad in [
            "",
            "/",
            "panel",
            "/panel/",
            "/a//b",
            "/a/../b",
            "/admin/api/v1/x",
            "/p?x",
        ] {
            assert!(
                PanelConfig::default().base_path(bad).check().is_err(),
                "{bad}"
            );
        }
        assert!(
            PanelConfig::default()
                .allow_origin("https://bridle.example")
                .check()
                .is_ok()
        );
        assert!(
            PanelConfig::default()
                .allow_origin("bridle.example")
                .check()
                .is_err()
        );
        assert_eq!(PanelConfig::default().cookie_name(), "bridle-panel");
        assert_eq!(
            PanelConfig::default().behind_tls(true).cookie_name(),
            "__Host-bridle-panel"
        );
    }
}
