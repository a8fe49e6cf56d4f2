//! Who is calling: the authenticated [`Principal`] and the [`Caller`] the gate checks.
//!
//! A principal is what connection auth resolves credentials to: an identity, the grants the app
//! gives it, and the surface projection it sees. It is independent of any transport session, so
//! the same principal behaves identically over a stateful MCP session, a stateless request, stdio
//! or an in-process agent loop. A [`Caller`] is a principal as seen by one call path; a transport
//! session or a sub-agent may narrow it (fewer grants, a smaller surface), never widen it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::capability::Grants;
use crate::scope::ScopeSet;

/// Which tools a caller is shown and may call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SurfaceProjection {
    /// Every offered tool. Write tools whose capability is not granted are listed too, so a
    /// capable client (or the human behind it) sees what could be granted; calling one answers
    /// `capability_required` naming the capability.
    #[default]
    Full,
    /// Only tools marked `small_model_safe`, and of those only the ones the caller can actually
    /// run: write tools whose capability is not granted are hidden. A small model is never shown
    /// a tool it could not use, which keeps the list short and avoids futile calls.
    Compact,
}

impl SurfaceProjection {
    /// The narrower of two projections.
    pub fn narrowest(self, other: SurfaceProjection) -> SurfaceProjection {
        match (self, other) {
            (SurfaceProjection::Full, SurfaceProjection::Full) => SurfaceProjection::Full,
            _ => SurfaceProjection::Compact,
        }
    }
}

/// An authenticated identity with its grants and projection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    /// Stable identity (a user, an agent, a token's owner).
    pub id: String,
    /// The agent type or client name, when known (`claude`, `codex`, ...). Informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Capabilities this principal holds.
    #[serde(default)]
    pub grants: Grants,
    /// The surface it is shown.
    #[serde(default)]
    pub projection: SurfaceProjection,
}

impl Principal {
    /// A principal with no grants and the full projection.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            agent: None,
            grants: Grants::none(),
            projection: SurfaceProjection::Full,
        }
    }

    /// The principal of an app that runs open (for example on loopback without auth).
    pub fn anonymous() -> Self {
        Self::new("anonymous")
    }

    /// Sets the grants.
    pub fn with_grants(mut self, grants: Grants) -> Self {
        self.grants = grants;
        self
    }

    /// Sets the projection.
    pub fn with_projection(mut self, projection: SurfaceProjection) -> Self {
        self.projection = projection;
        self
    }

    /// Sets the agent label.
    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }
}

/// A principal as one call path sees it: the effective grants and projection, possibly
/// narrowed by a session. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    principal: Arc<Principal>,
    grants: Arc<Grants>,
    projection: SurfaceProjection,
    scopes: Arc<ScopeSet>,
}

impl Caller {
    /// The caller with exactly the principal's grants and projection.
    pub fn new(principal: impl Into<Arc<Principal>>) -> Self {
        let principal = principal.into();
        Self {
            grants: Arc::new(principal.grants.clone()),
            projection: principal.projection,
            principal,
            scopes: Arc::default(),
        }
    }

    /// Sets the scopes this caller may use and its current one (see [`ScopeSet`]). The app
    /// decides them per principal or per session; the default allows none.
    pub fn with_scopes(mut self, scopes: ScopeSet) -> Self {
        self.scopes = Arc::new(scopes);
        self
    }

    /// Sets the current scope (it must still be one the caller may use).
    pub fn with_current_scope(mut self, scope: impl Into<String>) -> Self {
        self.scopes = Arc::new(ScopeSet::clone(&self.scopes).with_current(scope));
        self
    }

    /// Narrows the scopes to those also in `limit`. Never widens.
    pub fn narrowed_scopes(mut self, limit: &ScopeSet) -> Self {
        self.scopes = Arc::new(self.scopes.narrowed(limit));
        self
    }

    /// The scopes this caller may use and its current one.
    pub fn scopes(&self) -> &ScopeSet {
        &self.scopes
    }

    /// Narrows the effective grants to those also in `limit` and the projection to the narrower
    /// one. Never widens.
    pub fn narrowed(mut self, limit: &Grants, projection: SurfaceProjection) -> Self {
        self.grants = Arc::new(self.grants.intersection(limit));
        self.projection = self.projection.narrowest(projection);
        self
    }

    /// The principal behind this caller.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }

    /// The effective grants.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// The effective projection.
    pub fn projection(&self) -> SurfaceProjection {
        self.projection
    }
}

impl From<Principal> for Caller {
    fn from(p: Principal) -> Self {
        Caller::new(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrowing_never_widens() {
        let p = Principal::new("a").with_grants(Grants::of(["x", "y"]));
        let c = Caller::new(p).narrowed(&Grants::of(["y", "z"]), SurfaceProjection::Full);
        assert_eq!(c.grants(), &Grants::of(["y"]));
        assert_eq!(c.projection(), SurfaceProjection::Full);
        assert_eq!(c.principal().grants, Grants::of(["x", "y"]));
        let c = c.narrowed(&Grants::of(["x", "y", "z"]), SurfaceProjection::Compact);
        assert_eq!(c.grants(), &Grants::of(["y"]));
        assert_eq!(c.projection(), SurfaceProjection::Compact);
        let c = c.narrowed(&Grants::of(["y"]), SurfaceProjection::Full);
        assert_eq!(c.projection(), SurfaceProjection::Compact);
    }
}
