//! Write capabilities, the catalog that declares them, and the grants a caller holds.
//!
//! A [`WriteCapability`] is the app's public, finite vocabulary of permissions: every tool that
//! changes state names one, and a caller may run it only when its [`Grants`] hold that id. Ids are
//! a contract: an id is declared once and never reassigned. Renaming is a new capability plus
//! the old one marked deprecated with `replaced_by`; a grant of the old id keeps working for the
//! new one (logged as deprecated), so no client silently loses a permission.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;

/// A named permission that write tools are bound to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WriteCapability {
    id: Arc<str>,
    description: Arc<str>,
    replaced_by: Option<Arc<str>>,
}

impl WriteCapability {
    /// A capability with a stable id and a description shown to humans granting it.
    pub fn new(id: impl Into<Arc<str>>, description: impl Into<Arc<str>>) -> Self {
        Self {
            id: id.into(),
            description: description.into(),
            replaced_by: None,
        }
    }

    /// Marks this capability deprecated in favour of `replacement`. A grant of this id keeps
    /// authorizing the replacement's tools.
    pub fn deprecated(mut self, replacement: impl Into<Arc<str>>) -> Self {
        self.replaced_by = Some(replacement.into());
        self
    }

    /// The stable id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The human description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The id that replaces this one, when deprecated.
    pub fn replaced_by(&self) -> Option<&str> {
        self.replaced_by.as_deref()
    }
}

/// The declared capabilities of one app.
///
/// Besides holding declarations, it precomputes for every capability the set of ids whose grant
/// authorizes it (itself plus every deprecated id whose replacement chain leads to it), so the
/// gate's check is a couple of hash lookups.
#[derive(Debug, Clone, Default)]
pub struct CapabilityCatalog {
    declared: HashMap<Arc<str>, WriteCapability>,
    /// capability id -> deprecated ids that also authorize it.
    aliases: HashMap<Arc<str>, Vec<Arc<str>>>,
}

impl CapabilityCatalog {
    /// Declares a capability. Declaring an id twice is an error; a deprecated capability's
    /// replacement must already be declared.
    pub fn declare(&mut self, cap: WriteCapability) -> Result<(), CoreError> {
        if cap.id.is_empty() {
            return Err(CoreError::InvalidName {
                name: String::new(),
                reason: "a capability id must not be empty",
            });
        }
        if self.declared.contains_key(&cap.id) {
            return Err(CoreError::DuplicateCapability {
                id: cap.id.to_string(),
            });
        }
        if let Some(rep) = &cap.replaced_by {
            if rep == &cap.id || !self.declared.contains_key(rep) {
                return Err(CoreError::BadReplacement {
                    id: cap.id.to_string(),
                    replaced_by: rep.to_string(),
                });
            }
            // Every capability reachable through the replacement chain accepts this id.
            let mut target = Some(rep.clone());
            while let Some(t) = target {
                self.aliases
                    .entry(t.clone())
                    .or_default()
                    .push(cap.id.clone());
                target = self.declared.get(&t).and_then(|c| c.replaced_by.clone());
            }
        }
        self.declared.insert(cap.id.clone(), cap);
        Ok(())
    }

    /// Looks a capability up by id.
    pub fn get(&self, id: &str) -> Option<&WriteCapability> {
        self.declared.get(id)
    }

    /// Every declared capability, sorted by id.
    pub fn all(&self) -> Vec<WriteCapability> {
        let mut v: Vec<_> = self.declared.values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Whether `grants` authorize `capability`, directly or through a deprecated id. Returns the
    /// deprecated id used, if any, so the caller can log it.
    #[inline(always)]
    pub(crate) fn authorizes<'g>(&self, grants: &'g Grants, capability: &str) -> Authorization<'g> {
        if grants.contains(capability) {
            return Authorization::Direct;
        }
        if let Some(aliases) = self.aliases.get(capability) {
            for a in aliases {
                if let Some(held) = grants.get(a) {
                    return Authorization::Deprecated(held);
                }
            }
        }
        Authorization::Denied
    }
}

pub(crate) enum Authorization<'g> {
    Direct,
    Deprecated(&'g str),
    Denied,
}

/// The set of capability ids a caller holds.
///
/// Grants belong to an authenticated principal, not to a transport session: the 2026-07-28 MCP
/// revision has no session on Streamable HTTP, so a session may only *narrow* a principal's
/// grants (see [`crate::Caller::narrowed`]).
///
/// Kept as a sorted list without duplicates (serialized as a JSON array, sorted): a caller holds
/// a handful of ids, and the gate checks one of them on every write call, which a short list
/// answers with a length comparison and one byte comparison per id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Grants {
    #[serde(deserialize_with = "sorted_ids")]
    ids: Vec<String>,
}

/// Up to this many ids are searched in order; more are searched by bisection.
const SCAN_MAX: usize = 8;

/// A deserialized list of ids, sorted and without duplicates, whatever order it came in.
fn sorted_ids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let mut ids = Vec::<String>::deserialize(d)?;
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

impl Grants {
    /// No capability: the caller may run Read tools only.
    pub fn none() -> Self {
        Self::default()
    }

    /// Grants exactly these ids.
    pub fn of<I, S>(ids: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut ids: Vec<String> = ids.into_iter().map(Into::into).collect();
        ids.sort_unstable();
        ids.dedup();
        Self { ids }
    }

    /// Adds one id.
    pub fn grant(&mut self, id: impl Into<String>) -> &mut Self {
        let id = id.into();
        if let Err(at) = self.ids.binary_search(&id) {
            self.ids.insert(at, id);
        }
        self
    }

    /// Removes one id.
    pub fn revoke(&mut self, id: &str) -> &mut Self {
        if let Some(at) = self.position(id) {
            self.ids.remove(at);
        }
        self
    }

    /// Whether this exact id is held.
    #[inline]
    pub fn contains(&self, id: &str) -> bool {
        self.get(id).is_some()
    }

    /// The held id equal to `id`, borrowed from the grants.
    #[inline]
    pub(crate) fn get(&self, id: &str) -> Option<&str> {
        self.position(id).map(|at| self.ids[at].as_str())
    }

    /// Where `id` sits in the list, if it is held.
    #[inline]
    fn position(&self, id: &str) -> Option<usize> {
        if self.ids.len() <= SCAN_MAX {
            self.ids.iter().position(|held| held == id)
        } else {
            self.ids.binary_search_by(|held| held.as_str().cmp(id)).ok()
        }
    }

    /// The ids held by both.
    pub fn intersection(&self, other: &Grants) -> Grants {
        Grants {
            ids: self
                .ids
                .iter()
                .filter(|id| other.contains(id))
                .cloned()
                .collect(),
        }
    }

    /// The ids, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.ids.iter().map(String::as_str)
    }

    /// Whether no id is held.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

impl<S: Into<String>> FromIterator<S> for Grants {
    fn from_iter<T: IntoIterator<Item = S>>(iter: T) -> Self {
        Grants::of(iter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_declaration_is_an_error() {
        let mut c = CapabilityCatalog::default();
        c.declare(WriteCapability::new("notes.write", "edit notes"))
            .unwrap();
        let err = c
            .declare(WriteCapability::new("notes.write", "other"))
            .unwrap_err();
        assert!(matches!(err, CoreError::DuplicateCapability { .. }));
    }

    #[test]
    fn replacement_must_exist() {
        let mut c = CapabilityCatalog::default();
        let err = c
            .declare(WriteCapability::new("old", "x").deprecated("new"))
            .unwrap_err();
        assert!(matches!(err, CoreError::BadReplacement { .. }));
        let err = c
            .declare(WriteCapability::new("self", "x").deprecated("self"))
            .unwrap_err();
        assert!(matches!(err, CoreError::BadReplacement { .. }));
    }

    #[test]
    fn deprecated_grant_authorizes_replacement_chain() {
        let mut c = CapabilityCatalog::default();
        c.declare(WriteCapability::new("v3", "x")).unwrap();
        c.declare(WriteCapability::new("v2", "x").deprecated("v3"))
            .unwrap();
        c.declare(WriteCapability::new("v1", "x").deprecated("v2"))
            .unwrap();
        let g = Grants::of(["v1"]);
        assert!(matches!(
            c.authorizes(&g, "v3"),
            Authorization::Deprecated("v1")
        ));
        assert!(matches!(
            c.authorizes(&g, "v2"),
            Authorization::Deprecated("v1")
        ));
        assert!(matches!(c.authorizes(&g, "v1"), Authorization::Direct));
        // A grant of the new id does not authorize the old one's tools.
        let g = Grants::of(["v3"]);
        assert!(matches!(c.authorizes(&g, "v1"), Authorization::Denied));
    }

    #[test]
    fn intersection_narrows() {
        let a = Grants::of(["a", "b"]);
        let b = Grants::of(["b", "c"]);
        assert_eq!(a.intersection(&b), Grants::of(["b"]));
    }

    #[test]
    fn grants_are_a_set_in_any_order() {
        let g = Grants::of(["b", "a", "b"]);
        assert_eq!(g.iter().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(g, Grants::of(["a", "b"]));
        let mut g = Grants::none();
        g.grant("z").grant("a").grant("z");
        assert_eq!(g.iter().collect::<Vec<_>>(), ["a", "z"]);
        g.revoke("z").revoke("missing");
        assert_eq!(g.iter().collect::<Vec<_>>(), ["a"]);
        assert!(!g.contains("z"));
    }

    #[test]
    fn grants_serialize_sorted_and_read_any_order() {
        let g: Grants = serde_json::from_str(r#"["c", "a", "c", "b"]"#).unwrap();
        assert_eq!(g, Grants::of(["a", "b", "c"]));
        assert_eq!(serde_json::to_string(&g).unwrap(), r#"["a","b","c"]"#);
        assert!(serde_json::from_str::<Grants>(r#"{"a": 1}"#).is_err());
    }

    #[test]
    fn long_grant_lists_are_searched_by_bisection() {
        let ids: Vec<String> = (0..100).map(|i| format!("cap.{i:03}")).collect();
        let g = Grants::of(ids.iter().rev().cloned());
        assert!(ids.iter().all(|id| g.contains(id)));
        assert!(!g.contains("cap.100") && !g.contains("cap") && !g.contains(""));
        let mut g = g;
        g.revoke("cap.050");
        assert!(!g.contains("cap.050") && g.contains("cap.051"));
    }
}
