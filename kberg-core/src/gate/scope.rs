//! Gate step 4a: the scope argument, filled in and checked before validation.
//!
//! A scoped tool's caller may leave the scope argument out: the gate fills it with the caller's
//! current scope. Whatever the scope, it must be declared by the app (`scope_unknown`) and one
//! the caller may use (`scope_forbidden`); with no scope given and none current the call answers
//! `scope_required`. A scope of the wrong type is left for validation to name.

use serde_json::Value;

use crate::catalog::{Catalog, Entry};
use crate::error::GateError;
use crate::principal::Caller;
use crate::tool::quoted_name;
use crate::validate::{FieldError, describe_value};

/// Fills a scoped tool's scope argument from the caller's current scope and checks it. The
/// scope the call works in, or `None` for a tool without one.
pub(crate) fn apply_scope(
    catalog: &Catalog,
    entry: &Entry,
    caller: &Caller,
    args: &mut Value,
) -> Result<Option<String>, GateError> {
    let Some(field) = entry.spec.scope_field.as_deref() else {
        return Ok(None);
    };
    let tool = || entry.spec.name.clone();
    if !args.is_object() {
        // Refused, never run unscoped: validation refuses arguments that are not an object
        // only if the schema says `"type": "object"`, and the tool would otherwise run with
        // no scope at all, neither filled in nor checked.
        let found = describe_value(args);
        return Err(GateError::InvalidArguments {
            tool: tool(),
            errors: vec![FieldError {
                pointer: String::new(),
                expected: "an object".into(),
                message: format!("The arguments must be an object, but they are {found}."),
                found,
            }],
        });
    }
    let Some(obj) = args.as_object_mut() else {
        return Ok(None);
    };
    let scope = match obj.get(field) {
        None | Some(Value::Null) => match caller.scopes().current() {
            Some(current) => {
                obj.insert(field.to_string(), Value::String(current.to_string()));
                current.to_string()
            }
            None => {
                return Err(GateError::ScopeRequired {
                    tool: tool(),
                    field: field.to_string(),
                });
            }
        },
        Some(Value::String(s)) => s.clone(),
        // Another type is refused here, never let through unchecked: validation would name it
        // only if the schema gives the field a type, and a hand-written schema may leave it
        // open; the tool would then get a scope (`["book:secret"]`, `7`) no one checked.
        Some(other) => {
            let found = describe_value(other);
            return Err(GateError::InvalidArguments {
                tool: tool(),
                errors: vec![FieldError {
                    pointer: format!("/{}", field.replace('~', "~0").replace('/', "~1")),
                    expected: "a scope name (a string)".into(),
                    message: format!(
                        "`{field}` must be a scope name (a string), but it is {found}."
                    ),
                    found,
                }],
            });
        }
    };
    if !catalog.scopes.contains_key(&scope) {
        // Not a declared scope, so whatever the caller sent: quoted no longer than a scope's
        // name may be.
        return Err(GateError::ScopeUnknown {
            tool: tool(),
            scope: quoted_name(&scope).into_owned(),
        });
    }
    if !caller.scopes().allows(&scope) {
        tracing::warn!(principal = %caller.principal().id, tool = %entry.spec.name, scope = %scope, "scope refused");
        return Err(GateError::ScopeForbidden {
            tool: tool(),
            scope,
        });
    }
    Ok(Some(scope))
}
