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
/// narrowed by a session. Cheap to clone: one reference count.
///
/// Every call carries a caller into the gate and the tool's context, so it is kept behind a
/// single [`Arc`]: a clone is one atomic increment and the value is one pointer wide. The
/// narrowing methods copy the shared state only when it is shared.
#[derive(Clone, PartialEq, Eq)]
pub struct Caller {
    inner: Arc<CallerState>,
}

/// What a [`Caller`] shares between its clones.
#[derive(Clone)]
struct CallerState {
    principal: Arc<Principal>,
    /// The grants once narrowed; `None` while they are the principal's own, so a caller built
    /// for each request copies no grant set.
    narrowed: Option<Grants>,
    projection: SurfaceProjection,
    scopes: ScopeSet,
}

impl CallerState {
    fn grants(&self) -> &Grants {
        self.narrowed.as_ref().unwrap_or(&self.principal.grants)
    }
}

// Equal when they mean the same: the effective grants compare, however they were reached.
impl PartialEq for CallerState {
    fn eq(&self, other: &Self) -> bool {
        self.principal == other.principal
            && self.grants() == other.grants()
            && self.projection == other.projection
            && self.scopes == other.scopes
    }
}

impl Eq for CallerState {}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("principal", &self.inner.principal)
            .field("grants", self.inner.grants())
            .field("projection", &self.inner.projection)
            .field("scopes", &self.inner.scopes)
            .finish()
    }
}

impl Caller {
    /// The caller with exactly the principal's grants and projection.
    pub fn new(principal: impl Into<Arc<Principal>>) -> Self {
        let principal = principal.into();
        Self {
            inner: Arc::new(CallerState {
                narrowed: None,
                projection: principal.projection,
                principal,
                scopes: ScopeSet::default(),
            }),
        }
    }

    /// The state to change, copied first if another clone shares it.
    fn state_mut(&mut self) -> &mut CallerState {
        Arc::make_mut(&mut self.inner)
    }

    /// Sets the scopes this caller may use and its current one (see [`ScopeSet`]). The app
    /// decides them per principal or per session; the default allows none.
    pub fn with_scopes(mut self, scopes: ScopeSet) -> Self {
        self.state_mut().scopes = scopes;
        self
    }

    /// Sets the current scope (it must still be one the caller may use).
    pub fn with_current_scope(mut self, scope: impl Into<String>) -> Self {
        let state = self.state_mut();
        state.scopes = std::mem::take(&mut state.scopes).with_current(scope);
        self
    }

    /// Narrows the scopes to those also in `limit`. Never widens.
    pub fn narrowed_scopes(mut self, limit: &ScopeSet) -> Self {
        let state = self.state_mut();
        state.scopes = state.scopes.narrowed(limit);
        self
    }

    /// The scopes this caller may use and its current one.
    pub fn scopes(&self) -> &ScopeSet {
        &self.inner.scopes
    }

    /// Narrows the effective grants to those also in `limit` and the projection to the narrower
    /// one. Never widens.
    pub fn narrowed(mut self, limit: &Grants, projection: SurfaceProjection) -> Self {
        let state = self.state_mut();
        state.narrowed = Some(state.grants().intersection(limit));
        state.projection = state.projection.narrowest(projection);
        self
    }

    /// The principal behind this caller.
    pub fn principal(&self) -> &Principal {
        &self.inner.principal
    }

    /// The effective grants.
    pub fn grants(&self) -> &Grants {
        self.inner.grants()
    }

    /// The effective projection.
    pub fn projection(&self) -> SurfaceProjection {
        self.inner.projection
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

    #[test]
    fn a_caller_is_one_pointer_and_narrowing_a_clone_leaves_the_original() {
        assert_eq!(std::mem::size_of::<Caller>(), std::mem::size_of::<usize>());
        let p = Principal::new("a").with_grants(Grants::of(["x", "y"]));
        let original = Caller::new(p).with_scopes(ScopeSet::only(["s1", "s2"]));
        let narrowed = original
            .clone()
            .narrowed(&Grants::of(["y"]), SurfaceProjection::Compact)
            .narrowed_scopes(&ScopeSet::only(["s2"]));
        assert_eq!(original.grants(), &Grants::of(["x", "y"]));
        assert_eq!(original.projection(), SurfaceProjection::Full);
        assert_eq!(original.scopes(), &ScopeSet::only(["s1", "s2"]));
        assert_eq!(narrowed.grants(), &Grants::of(["y"]));
        assert_eq!(narrowed.projection(), SurfaceProjection::Compact);
        assert_eq!(narrowed.scopes(), &ScopeSet::only(["s2"]));
        assert_ne!(original, narrowed);
        assert_eq!(original.clone(), original);
    }
}
