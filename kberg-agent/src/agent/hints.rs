//! What the loop tells the model about a call before or instead of running it: why an
//! unlisted tool cannot be called, which tool finds an id, and whether a write's values have a
//! source in the conversation ([`crate::ground`]). Split from the loop so each answer's logic
//! sits beside the others.

use kberg_core::ErrorCode;

use serde_json::Value;

use std::collections::HashSet;

use super::id_handles::UnknownHandle;
use super::{GroundsSoFar, PendingCall, Run};
use crate::coerce::Coercion;
use crate::ground::is_id_name;
use crate::message::{Message, ToolCall};
use crate::nudge;
use crate::outcome::{CallOutcome, CallRecord};
use crate::surface::ToolResult;

impl Run<'_> {
    /// The answer to a text call to a tool that is not listed: the surface's reason (a refusal,
    /// a missing capability) or `unknown_tool`, then the names the model may call.
    pub(super) async fn explain_unlisted(&self, name: &str) -> (ErrorCode, String) {
        let explained = self.agent.surface.explain_unlisted(name).await;
        let (code, mut text) = match explained {
            Some(ToolResult {
                text,
                code: Some(code),
                ..
            }) => (code, text),
            Some(ToolResult { text, .. }) => (ErrorCode::UnknownTool, text),
            None => (
                ErrorCode::UnknownTool,
                format!("`{name}` is not a tool you can call."),
            ),
        };
        text.push_str(&nudge::final_refusal(name));
        // The names the model is shown, aliases included ([`crate::names`]).
        let names: Vec<String> = self
            .request
            .tools
            .iter()
            .map(|t| self.names.to_model(&t.name).to_string())
            .collect();
        text.push_str(&nudge::listed_tools(&names));
        (code, text)
    }

    /// The hint for a failed call that passed an id: the tool that finds ids for it.
    pub(super) fn id_hint(&self, call: &ToolCall, code: ErrorCode) -> Option<String> {
        let config = self.config();
        if !config.id_hints
            || !matches!(
                code,
                ErrorCode::ToolFailed | ErrorCode::HandleInvalid | ErrorCode::HandleExpired
            )
        {
            return None;
        }
        let args = call.arguments.as_object()?;
        args.keys().find_map(|arg| {
            let source = match config.id_sources.get(arg) {
                Some(tool) => Some(tool.clone()),
                None if is_id_name(arg) => self.finder_tool(&call.name),
                None => None,
            }?;
            (source != call.name).then(|| nudge::id_hint(arg, &source))
        })
    }

    /// The answer to a call whose argument is a handle the run never issued: the handles it
    /// was shown, and the tool that finds ids when one is known for the argument.
    pub(super) fn unknown_handle(&self, call: &ToolCall, unknown: &UnknownHandle) -> String {
        let argument = unknown
            .pointer
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or_default();
        if let Some(meant) = &unknown.meant {
            let mut fixed = call.arguments.clone();
            if let Some(slot) = fixed.pointer_mut(&unknown.pointer) {
                *slot = Value::String(meant.clone());
            }
            let again = serde_json::json!({"name": call.name, "arguments": fixed});
            return nudge::handle_without_hash(
                &call.name,
                argument,
                &unknown.handle,
                meant,
                &again.to_string(),
            );
        }
        let mut text = nudge::unknown_handle(
            &call.name,
            argument,
            &unknown.handle,
            &self.handles.listing(),
        );
        let source = match self.config().id_sources.get(argument) {
            Some(tool) => Some(tool.clone()),
            None if is_id_name(argument) => self.finder_tool(&call.name),
            None => None,
        };
        if let Some(source) = source.filter(|s| *s != call.name) {
            text.push_str(&nudge::id_hint(argument, &source));
        }
        text
    }

    /// An id argument of `call` that holds only the number of an issued handle, without its
    /// `#`: the argument is an id (by name or [`crate::AgentConfig::id_source`]), the tool's
    /// schema takes it as a string, and the value is neither in the user's words nor labelled
    /// as an id in a result (so it is no real id of the app's).
    pub(super) fn bare_handle(&self, call: &ToolCall) -> Option<UnknownHandle> {
        let config = self.config();
        let props = self
            .schemas
            .get(&call.name)?
            .get("properties")?
            .as_object()?;
        let grounds = self.grounds();
        self.handles.bare_handle(&call.arguments, |name, value| {
            (is_id_name(name) || config.id_sources.contains_key(name))
                && props
                    .get(name)
                    .and_then(|p| p.get("type"))
                    .and_then(Value::as_str)
                    == Some("string")
                && !grounds.id_has_source(name, value)
        })
    }

    /// A listed read-only tool that finds things: `search*` first, then `find*`, then `list*`.
    pub(super) fn finder_tool(&self, except: &str) -> Option<String> {
        ["search", "find", "list"].iter().find_map(|prefix| {
            self.request
                .tools
                .iter()
                .filter(|t| t.read_only && t.name != except)
                .find(|t| t.name.starts_with(prefix))
                .map(|t| t.name.clone())
        })
    }

    /// The answer to a write whose id or number argument has no source in the conversation
    /// (when [`crate::AgentConfig::ground_write_arguments`] is on), or whose text argument is
    /// not in the user's words (when [`crate::AgentConfig::ground_write_text`] is on), with
    /// whether it was the text and, for an id, the tool that finds ids; `None` when it may run.
    pub(super) fn ungrounded(&self, call: &ToolCall) -> Option<(String, bool, Option<String>)> {
        let config = self.config();
        if !(config.ground_write_arguments || config.ground_write_text)
            || self.read_only.contains(&call.name)
        {
            return None;
        }
        let grounds = self.grounds();
        let values = config
            .ground_write_arguments
            .then(|| grounds.check(&call.arguments, &config.id_sources))
            .flatten();
        let bad = values.or_else(|| {
            let schema = self.schemas.get(&call.name)?;
            config
                .ground_write_text
                .then(|| {
                    grounds.check_text(
                        &call.arguments,
                        schema,
                        &config.id_sources,
                        &config.composed_arguments,
                    )
                })
                .flatten()
        })?;
        let is_text = bad.is_text;
        let finder = if bad.is_id {
            config
                .id_sources
                .get(&bad.argument)
                .cloned()
                .or_else(|| self.finder_tool(&call.name))
        } else {
            None
        };
        let text = if bad.is_id {
            nudge::ungrounded_id(
                &call.name,
                &bad.argument,
                &bad.value,
                finder.as_deref(),
                &self.user_request(),
            )
        } else {
            nudge::ungrounded_value(&call.name, &bad.argument, &bad.value, &self.user_request())
        };
        Some((text, is_text, finder))
    }

    /// The answer to a write nobody asked for ([`crate::AgentConfig::stop_unrequested_writes`]):
    /// a write already succeeded in this run, and `call`, a listed write, carries no value from
    /// the user's words that the successful writes did not. `None` when it may run.
    pub(super) fn unrequested(&self, call: &ToolCall) -> Option<String> {
        let config = self.config();
        // A tool that is not listed never runs: the surface's refusal says why.
        if !config.stop_unrequested_writes
            || self.read_only.contains(&call.name)
            || !self.schemas.contains_key(&call.name)
        {
            return None;
        }
        let done: Vec<&CallRecord> = self
            .calls
            .iter()
            .filter(|c| c.outcome == CallOutcome::Ok && !self.read_only.contains(&c.name))
            .collect();
        let last = done.last()?;
        let grounds = self.grounds();
        let skip = &config.composed_arguments;
        let used: HashSet<String> = done
            .iter()
            .flat_map(|c| grounds.user_values(&c.arguments, skip))
            .collect();
        (grounds.new_user_values(&call.arguments, &used, skip) == 0)
            .then(|| nudge::unrequested_write(&call.name, &last.name, &self.user_request()))
    }

    /// The conversation's grounds ([`crate::ground::Grounds::add`]), gathered once and brought
    /// up to date with the messages added since the last write was checked (the run only
    /// appends to its conversation; one that shrank is gathered again).
    fn grounds(&self) -> std::sync::MutexGuard<'_, GroundsSoFar> {
        let mut so_far = self
            .grounds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let messages = &self.request.messages;
        if so_far.seen > messages.len() {
            *so_far = GroundsSoFar::default();
        }
        let from = so_far.seen;
        so_far.grounds.add(messages, from, self.user_messages);
        so_far.seen = messages.len();
        so_far
    }

    /// The user's last own message (not one of the loop's notes), for reminders.
    fn user_request(&self) -> String {
        self.request.messages[..self.user_messages.min(self.request.messages.len())]
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content, .. } => Some(content.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The request to look first, when the model answered before any tool ran, the option is
    /// on, it was not asked yet, and a read-only tool is listed.
    pub(super) fn look_first(&mut self) -> Option<String> {
        let looked = !self.calls.is_empty()
            || self
                .request
                .messages
                .iter()
                .any(|m| matches!(m, Message::Tool { .. }));
        if !self.config().look_before_answering || self.asked_to_look || looked {
            return None;
        }
        let reads: Vec<String> = self
            .request
            .tools
            .iter()
            .filter(|t| t.read_only)
            .take(2)
            .map(|t| t.name.clone())
            .collect();
        if reads.is_empty() {
            return None;
        }
        self.asked_to_look = true;
        self.interventions.look_first_requests += 1;
        Some(nudge::look_first(&reads))
    }

    /// Calls whose one string argument holds a list of strings, split into one call per item
    /// ([`crate::AgentConfig::split_array_arguments`]): `add_tag` with `"tag": ["work",
    /// "urgent"]` becomes two calls. Only when exactly one argument is such a list and the
    /// tool's schema says that argument is a string.
    pub(super) fn split_arrays(&mut self, calls: Vec<PendingCall>) -> Vec<PendingCall> {
        let mut out = Vec::with_capacity(calls.len());
        for pending in calls {
            let Some(arg) = self.split_argument(&pending.call) else {
                out.push(pending);
                continue;
            };
            let items = match &pending.call.arguments[&arg] {
                Value::Array(items) => items.clone(),
                _ => Vec::new(),
            };
            self.interventions.calls_split += 1;
            tracing::debug!(tool = ?pending.call.name, count = items.len(), "a list for a one-value argument was split into calls");
            for (n, item) in items.into_iter().enumerate() {
                let mut call = pending.call.clone();
                call.id = format!("{}_{}", pending.call.id, n + 1);
                let from = call.arguments[&arg].to_string();
                call.arguments[&arg] = item;
                let mut coercions = pending.coercions.clone();
                coercions.push(Coercion {
                    pointer: format!("/{arg}"),
                    from,
                    to: format!("one call per item (this one: {})", call.arguments[&arg]),
                });
                out.push(PendingCall {
                    call,
                    coercions,
                    unlisted: pending.unlisted,
                    unknown_handle: pending.unknown_handle.clone(),
                    cut_off: pending.cut_off,
                });
            }
        }
        out
    }

    fn split_argument(&self, call: &ToolCall) -> Option<String> {
        let props = self
            .schemas
            .get(&call.name)?
            .get("properties")?
            .as_object()?;
        let args = call.arguments.as_object()?;
        let mut lists = args.iter().filter(|(_, v)| v.is_array());
        let (name, value) = lists.next()?;
        if lists.next().is_some() {
            return None;
        }
        let is_string = props
            .get(name)
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            == Some("string");
        let items = value.as_array()?;
        (is_string && items.len() >= 2 && items.len() <= 8 && items.iter().all(Value::is_string))
            .then(|| name.clone())
    }
}
