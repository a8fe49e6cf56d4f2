//! Scope: the first-class "where" argument (`book`, `library`, `inbox`).
//!
//! Many tools act within a context the user has already chosen: the open book, the current
//! inbox. Making a small model repeat that context on every call wastes tokens and invites
//! mistakes, and letting it name any context is a permission hole. So the app declares its
//! scopes ([`ScopeSpec`], on the [`ToolRegistry`](crate::ToolRegistry)); each caller carries a
//! [`ScopeSet`]: the scopes it may use and the one it is in. A tool that takes a scope marks the
//! argument (a field of type [`Scope`], or [`ToolBuilder::scope_field`](crate::ToolBuilder::scope_field)
//! for a hand-written schema). The gate then fills that argument with the caller's current scope
//! when the model leaves it out, refuses a scope the app never declared (`scope_unknown`) or the
//! caller may not use (`scope_forbidden`), and the projected schema drops the argument from
//! `required` (and, for the `Compact` projection, hides it entirely).

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::CoreError;

/// The JSON Schema keyword marking a string property as the tool's scope argument.
pub const SCOPE_SCHEMA_KEYWORD: &str = "x-kberg-scope";

/// A scope the app declares: a stable name and a description for humans and models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScopeSpec {
    /// The stable name (`library`, `book:moby-dick`, `inbox`).
    pub name: String,
    /// What it is.
    pub description: String,
}

impl ScopeSpec {
    /// A scope with a name and description.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
        }
    }
}

/// Which declared scopes a caller may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Allowed {
    /// Every declared scope.
    Any,
    /// Exactly these.
    #[serde(untagged)]
    Only(BTreeSet<String>),
}

impl Default for Allowed {
    fn default() -> Self {
        Allowed::Only(BTreeSet::new())
    }
}

/// The scopes one caller may use, and the one it is in. The default allows none: a principal
/// uses scoped tools only after the app says which scopes are its own.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ScopeSet {
    allowed: Allowed,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    current: Option<String>,
}

impl ScopeSet {
    /// No scope allowed (the default).
    pub fn none() -> Self {
        Self::default()
    }

    /// Every scope the app declares.
    pub fn any() -> Self {
        Self {
            allowed: Allowed::Any,
            current: None,
        }
    }

    /// Exactly these scopes.
    pub fn only<I, S>(scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            allowed: Allowed::Only(scopes.into_iter().map(Into::into).collect()),
            current: None,
        }
    }

    /// Sets the current scope, the one filled in when a tool's scope argument is left out. It
    /// must also be allowed to be used: a current scope that is not allowed is refused at call
    /// time like any other.
    pub fn with_current(mut self, scope: impl Into<String>) -> Self {
        self.current = Some(scope.into());
        self
    }

    /// The current scope.
    pub fn current(&self) -> Option<&str> {
        self.current.as_deref()
    }

    /// Whether `scope` may be used (declaration is checked separately).
    pub fn allows(&self, scope: &str) -> bool {
        match &self.allowed {
            Allowed::Any => true,
            Allowed::Only(set) => set.contains(scope),
        }
    }

    /// The scopes allowed when they are an explicit list (`None` for "any declared").
    pub fn allowed(&self) -> Option<Vec<&str>> {
        match &self.allowed {
            Allowed::Any => None,
            Allowed::Only(set) => Some(set.iter().map(String::as_str).collect()),
        }
    }

    /// Only the scopes allowed by both; the current scope is kept if still allowed, else
    /// `limit`'s current. Never widens.
    pub fn narrowed(&self, limit: &ScopeSet) -> ScopeSet {
        let allowed = match (&self.allowed, &limit.allowed) {
            (Allowed::Any, other) | (other, Allowed::Any) => other.clone(),
            (Allowed::Only(a), Allowed::Only(b)) => {
                Allowed::Only(a.intersection(b).cloned().collect())
            }
        };
        let mut out = ScopeSet {
            allowed,
            current: None,
        };
        let current = limit.current.clone().or_else(|| self.current.clone());
        out.current = current.filter(|c| out.allows(c));
        out
    }
}

/// A scope-typed tool argument. In the schema it is a string marked `x-kberg-scope`; the gate
/// fills it with the caller's current scope when the model leaves it out and checks it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct Scope(String);

impl Scope {
    /// The scope's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Scope(String::deserialize(d)?))
    }
}

impl schemars::JsonSchema for Scope {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Scope".into()
    }

    fn json_schema(_gen: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "The scope to work in. Leave it out to use your current scope.",
            SCOPE_SCHEMA_KEYWORD: true,
        })
    }
}

/// Finds the scope property of an input schema: a top-level property marked
/// `x-kberg-scope` (directly or through a local `$ref`).
pub(crate) fn find_scope_field(schema: &serde_json::Value) -> Option<String> {
    let props = schema.get("properties")?.as_object()?;
    props.iter().find_map(|(k, sub)| {
        let target = match sub.get("$ref").and_then(|r| r.as_str()) {
            Some(r) => r.strip_prefix('#').and_then(|p| schema.pointer(p))?,
            None => sub,
        };
        (target.get(SCOPE_SCHEMA_KEYWORD) == Some(&serde_json::Value::Bool(true)))
            .then(|| k.clone())
    })
}

/// The schema a caller is shown for a scoped tool: the scope argument is optional (the gate
/// fills it), and hidden entirely when `hide` (the `Compact` projection).
pub(crate) fn project_scope(schema: &mut serde_json::Value, field: &str, hide: bool) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    if let Some(req) = obj.get_mut("required").and_then(|r| r.as_array_mut()) {
        req.retain(|v| v.as_str() != Some(field));
    }
    if hide && let Some(props) = obj.get_mut("properties").and_then(|p| p.as_object_mut()) {
        props.remove(field);
    }
}

/// Checks a scope name: 1 to 128 characters, no whitespace or control characters.
pub(crate) fn check_scope_name(name: &str) -> Result<(), CoreError> {
    let reason = if name.is_empty() {
        Some("a scope name must not be empty")
    } else if name.len() > 128 {
        Some("a scope name must be at most 128 characters")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("a scope name may not contain whitespace or control characters")
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

    #[test]
    fn narrowing_never_widens() {
        let p = ScopeSet::only(["a", "b"]).with_current("a");
        let s = p.narrowed(&ScopeSet::only(["b", "c"]));
        assert!(s.allows("b") && !s.allows("a") && !s.allows("c"));
        assert_eq!(s.current(), None);
        let s = ScopeSet::any().narrowed(&ScopeSet::only(["x"]).with_current("x"));
        assert_eq!(s.current(), Some("x"));
        assert!(!s.allows("y"));
        assert!(!ScopeSet::none().allows("a"));
        assert_eq!(ScopeSet::any().allowed(), None);
    }

    #[test]
    fn serde_round_trip() {
        for s in [
            ScopeSet::any().with_current("x"),
            ScopeSet::only(["a"]),
            ScopeSet::none(),
        ] {
            let v = serde_json::to_value(&s).unwrap();
            assert_eq!(serde_json::from_value::<ScopeSet>(v).unwrap(), s);
        }
    }
}
