//! Gate step 4: the arguments. Before validation the gate takes out what belongs to it (a
//! preview tool's `commit_token`) and fills in and checks the scope; then it validates against
//! the schema compiled at registration; after validation it resolves every handle argument to
//! the app's internal id (`handle_invalid`, `handle_expired`).
//!
//! A tool that needs none of that (no preview, no scope, no handles: [`Entry::plain`]) has its
//! arguments validated and handed on untouched, never copied.

use std::sync::Arc;

use serde_json::Value;

use crate::catalog::GateSettings;
use crate::catalog::{Catalog, Entry};
use crate::digest::{argument_digest, canonical_digest};
use crate::error::GateError;
use crate::gate::Trail;
use crate::gate::scope::apply_scope;
use crate::handle::{HandleError, resolve_sites};
use crate::preview::COMMIT_TOKEN_FIELD;
use crate::principal::Caller;
use crate::validate::{FieldError, describe_value};

/// A call past the synchronous gate steps.
pub(crate) struct PreparedCall {
    /// The tool's entry: a reference count of the catalog's, taken only once the arguments
    /// passed, for the future that runs the call.
    pub(crate) entry: Arc<Entry>,
    /// The arguments as asked (scope filled, commit token removed, handles opaque).
    pub(crate) args: Value,
    /// The arguments the tool receives when they differ from `args` (handles resolved); `None`
    /// when the tool takes no handles, so the common call never copies its arguments.
    pub(crate) resolved: Option<Value>,
    /// The digest a commit token is bound to (unredacted), for preview tools.
    pub(crate) binding: Option<String>,
    /// The commit token the caller sent.
    pub(crate) commit_token: Option<String>,
}

/// Takes out the commit token, fills and checks the scope, digests (when audited), validates
/// and resolves handles.
pub(crate) fn prepare_call(
    catalog: &Catalog,
    settings: &GateSettings,
    entry: &Arc<Entry>,
    caller: &Caller,
    mut args: Value,
    digest_for_audit: bool,
    trail: &mut Trail,
) -> Result<PreparedCall, GateError> {
    if entry.plain {
        if digest_for_audit {
            trail.args_digest = Some(argument_digest(&args, &entry.spec.sensitive_fields));
        }
        validate_args(entry, &args)?;
        return Ok(PreparedCall {
            entry: Arc::clone(entry),
            args,
            resolved: None,
            binding: None,
            commit_token: None,
        });
    }
    let commit_token = if entry.spec.previews {
        take_commit_token(entry, &mut args)?
    } else {
        None
    };
    trail.scope = apply_scope(catalog, entry, caller, &mut args)?;
    if digest_for_audit {
        trail.args_digest = Some(argument_digest(&args, &entry.spec.sensitive_fields));
    }
    validate_args(entry, &args)?;
    let binding = entry.spec.previews.then(|| canonical_digest(&args));
    let mut resolved = None;
    if !entry.handles.is_empty() {
        let name = entry.spec.name.clone();
        let Some(codec) = &settings.handles else {
            tracing::error!(tool = %name, "tool takes handles but no handle codec is set");
            return Err(GateError::ToolFailed {
                tool: name,
                message: "this app has not configured handles (internal error)".into(),
            });
        };
        let mut copy = args.clone();
        resolve_sites(&mut copy, &entry.handles, codec, &caller.principal().id).map_err(
            |(pointer, e)| match e {
                HandleError::Expired => GateError::HandleExpired {
                    tool: name,
                    pointer,
                },
                _ => GateError::HandleInvalid {
                    tool: name,
                    pointer,
                },
            },
        )?;
        resolved = Some(copy);
    }
    Ok(PreparedCall {
        entry: Arc::clone(entry),
        args,
        resolved,
        binding,
        commit_token,
    })
}

/// Steps 4a and 4b without touching the caller's arguments, for [`check`](crate::ToolRegistry::check).
pub(crate) fn check_args(
    catalog: &Catalog,
    entry: &Entry,
    caller: &Caller,
    args: &Value,
) -> Result<(), GateError> {
    if entry.plain {
        return validate_args(entry, args);
    }
    let mut args = args.clone();
    if entry.spec.previews {
        take_commit_token(entry, &mut args)?;
    }
    apply_scope(catalog, entry, caller, &mut args)?;
    validate_args(entry, &args)
}

/// Removes a preview tool's `commit_token` from the arguments.
fn take_commit_token(entry: &Entry, args: &mut Value) -> Result<Option<String>, GateError> {
    let Some(obj) = args.as_object_mut() else {
        return Ok(None);
    };
    match obj.remove(COMMIT_TOKEN_FIELD) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(t)) => Ok(Some(t)),
        Some(other) => Err(GateError::InvalidArguments {
            tool: entry.spec.name.clone(),
            errors: vec![FieldError {
                pointer: format!("/{COMMIT_TOKEN_FIELD}"),
                expected: "a string".into(),
                found: describe_value(&other),
                message: format!("`{COMMIT_TOKEN_FIELD}` must be the string a preview gave you."),
            }],
        }),
    }
}

/// Validates the arguments against the tool's compiled schema (`invalid_arguments`).
#[inline]
pub(crate) fn validate_args(entry: &Entry, args: &Value) -> Result<(), GateError> {
    if entry.input.is_valid(args) {
        return Ok(());
    }
    let mut errors = entry.input.diagnose(args);
    if errors.is_empty() {
        // is_valid and iter_errors disagree only on a validator bug; never let a call through.
        errors.push(FieldError {
            pointer: String::new(),
            expected: "arguments matching the schema".into(),
            found: "arguments that do not".into(),
            message: "The arguments do not match the tool's schema.".into(),
        });
    }
    Err(GateError::InvalidArguments {
        tool: entry.spec.name.clone(),
        errors,
    })
}
