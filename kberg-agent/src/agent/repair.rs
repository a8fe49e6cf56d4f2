//! Call repair: turning what the model wrote into the calls to run. Calls written as text are
//! recovered (only for listed tools; text calls to other tools are kept aside to be explained,
//! never sent), identical calls within a turn collapse to one, and arguments are repaired where
//! the schema makes the intent unambiguous (a copied schema unwrapped, undeclared read arguments
//! dropped, scalar coercions, a list split into one call per item). Every repair is recorded.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::coerce::{Coercion, coerce_arguments, drop_unknown_arguments, unwrap_schema_echo};
use crate::message::{Message, ToolCall};
use crate::recover::{recover_calls_with_schemas, unlisted_calls};

use super::{PendingCall, Run, call_key};

impl Run<'_> {
    /// The calls to run this turn: the structured ones, or else those recovered from the text
    /// (then the flag is set), followed by text calls to unlisted tools when those are
    /// explained. The list says, per call, whether its arguments were recovered from a JSON
    /// string.
    pub(super) fn calls_of(
        &self,
        text: &str,
        structured: Vec<ToolCall>,
        recover: bool,
    ) -> (Vec<ToolCall>, bool, Vec<bool>) {
        let config = self.config();
        if !structured.is_empty() || !recover || !config.recover_text_calls {
            return (structured, false, Vec::new());
        }
        let visible = self.visible_names();
        let tools: HashMap<&str, &Value> = visible
            .iter()
            .filter_map(|n| Some((*n, self.schemas.get(self.names.to_real(n))?)))
            .collect();
        let recovered = recover_calls_with_schemas(text, &tools);
        let unlisted = if recovered.is_empty() && config.explain_unlisted_calls {
            unlisted_calls(text, &visible)
        } else {
            Vec::new()
        };
        if !recovered.is_empty() || !unlisted.is_empty() {
            tracing::debug!(
                count = recovered.len(),
                unlisted = unlisted.len(),
                "recovered tool calls from the text"
            );
        }
        let mut flags: Vec<bool> = recovered.iter().map(|c| c.arguments_were_text).collect();
        let mut calls: Vec<ToolCall> = recovered
            .into_iter()
            .map(|c| ToolCall {
                id: String::new(),
                name: self.names.to_real(&c.name).to_string(),
                arguments: c.arguments,
            })
            .collect();
        for name in unlisted {
            flags.push(false);
            calls.push(ToolCall {
                id: String::new(),
                name,
                arguments: Value::Object(Default::default()),
            });
        }
        (calls, true, flags)
    }

    /// The names a call written as text may use: the listed tools' real names and the aliases
    /// the model is shown for those a provider would refuse ([`crate::names`]).
    pub(super) fn visible_names(&self) -> HashSet<&str> {
        self.schemas
            .keys()
            .map(String::as_str)
            .chain(self.names.aliases())
            .collect()
    }

    /// Ids, coercions, and the in-turn collapse of identical calls. In a message cut off at
    /// the token limit (`cut_off`), a call whose arguments are JSON text that does not parse
    /// was cut while the model wrote them, and is marked so.
    pub(super) fn prepare(
        &mut self,
        turn: u32,
        calls: Vec<ToolCall>,
        text_flags: &[bool],
        cut_off: bool,
    ) -> Vec<PendingCall> {
        let collapse = self.config().collapse_calls_in_turn;
        let coerce = self.config().coerce_arguments;
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(calls.len());
        for (i, mut call) in calls.into_iter().enumerate() {
            // Handles first: `#1` and the id it stands for are the same call.
            let mut unknown_handle = None;
            if self.config().id_handles {
                match self.handles.resolve(&mut call.arguments) {
                    Ok(n) => {
                        self.interventions.handles_resolved += n;
                        unknown_handle = self.bare_handle(&call);
                    }
                    Err(unknown) => unknown_handle = Some(unknown),
                }
            }
            if collapse && !seen.insert(call_key(&call)) {
                self.interventions.calls_collapsed += 1;
                tracing::debug!(tool = ?call.name, "an identical call in the same turn was dropped");
                continue;
            }
            if call.id.is_empty() {
                call.id = format!("call_{turn}_{}", i + 1);
            }
            let unlisted = !self.schemas.contains_key(&call.name);
            // Providers hand on arguments that do not parse as the text itself.
            let call_cut_off = cut_off && call.arguments.is_string();
            let mut coercions = Vec::new();
            if text_flags.get(i).copied().unwrap_or(false) {
                coercions.push(Coercion {
                    pointer: String::new(),
                    from: "a JSON string".into(),
                    to: "an object".into(),
                });
            }
            if self.config().unwrap_schema_arguments
                && let Some(schema) = self.schemas.get(&call.name)
                && let Some(c) = unwrap_schema_echo(&mut call.arguments, schema)
            {
                tracing::debug!(tool = ?call.name, "arguments that copied the schema were unwrapped");
                self.interventions.schema_echoes_unwrapped += 1;
                coercions.push(c);
            }
            if self.config().drop_unknown_read_arguments
                && self.read_only.contains(&call.name)
                && let Some(schema) = self.schemas.get(&call.name)
            {
                let dropped = drop_unknown_arguments(&mut call.arguments, schema);
                self.interventions.read_arguments_dropped +=
                    u32::try_from(dropped.len()).unwrap_or(u32::MAX);
                coercions.extend(dropped);
            }
            if coerce && let Some(schema) = self.schemas.get(&call.name) {
                coercions.extend(coerce_arguments(&mut call.arguments, schema));
            }
            self.interventions.coercions += u32::try_from(coercions.len()).unwrap_or(u32::MAX);
            out.push(PendingCall {
                call,
                coercions,
                unlisted,
                unknown_handle,
                cut_off: call_cut_off,
            });
        }
        if self.config().split_array_arguments {
            out = self.split_arrays(out);
        }
        self.unique_ids(&mut out);
        out
    }

    /// Gives each call an id no other call of the conversation has. Models (and the servers in
    /// front of them) number calls as they like: every call `call_0`, one id for two calls of a
    /// message, the same ids again next turn, or an id this loop also makes up (`call_1_1`,
    /// `c1_2` for a split call). Two calls or two results with one id are refused by OpenAI's
    /// and Anthropic's APIs, and would mix up the results the loop itself finds by id (failed
    /// calls forgotten, answer-only turns). So the first call keeps its id and a later one gets
    /// the id with `_2`, `_3`, ... added, the first not yet used; its result goes under that id.
    fn unique_ids(&mut self, calls: &mut [PendingCall]) {
        let mut used: HashSet<String> = self
            .request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Assistant { tool_calls, .. } => Some(tool_calls),
                _ => None,
            })
            .flatten()
            .map(|c| c.id.clone())
            .collect();
        // Per id, the suffix to try next: every lower one is taken, so a message whose calls
        // all share one id is renamed in linear time, not by trying each taken suffix again.
        let mut next_suffix: HashMap<String, u64> = HashMap::new();
        for pending in calls {
            let id = &mut pending.call.id;
            if used.contains(id.as_str()) {
                let n = next_suffix.entry(id.clone()).or_insert(2);
                let fresh = (*n..)
                    .map(|k| (k, format!("{id}_{k}")))
                    .find(|(_, candidate)| !used.contains(candidate))
                    .map(|(k, candidate)| {
                        *n = k + 1;
                        candidate
                    })
                    .unwrap_or_default();
                tracing::debug!(tool = ?pending.call.name, id = ?id, new_id = ?fresh, "a call's id was already used; it was given one of its own");
                *id = fresh;
                self.interventions.call_ids_renamed += 1;
            }
            used.insert(id.clone());
        }
    }
}
