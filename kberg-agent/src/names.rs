//! Tool names a hosted provider accepts.
//!
//! MCP lets a server name its tools freely (a space, a dot, a slash, any letter, any length),
//! but the hosted APIs refuse a request that lists a function whose name they do not allow:
//! OpenAI's function names must match `^[a-zA-Z0-9_-]{1,64}$`, Anthropic's tool names
//! `^[a-zA-Z0-9_-]{1,128}$` (earlier `{1,64}`). One oddly named tool on a server would answer
//! every turn of the run with a 400. So each run builds a [`ToolNames`] map from the tools its
//! surface listed: a name already within `^[a-zA-Z0-9_-]{1,64}$` (the narrowest of them) is
//! shown to the model as it is; any other is shown under an alias: each character outside that
//! set becomes `_`, the result is cut to 64 characters (`tool` when nothing is left), and when
//! that is a listed name or an earlier alias, a suffix of eight hex digits of a hash of the real
//! name (then `_2`, `_3`, ... in the rare case that too is taken) tells it apart. The map is the
//! same for the same listing, so a stored conversation resumes under the same aliases.
//!
//! The loop itself, the surface, [`crate::RunOutcome`] and the events only ever hold real
//! names; the request is translated as it is sent (the tools, the calls and results of the
//! conversation, a forced tool choice, a tool's name in backticks in a message's text) and the
//! model's calls, structured or written as text, are read back to the real name. A call to a
//! name the model invented that a provider would refuse is sent back under a safe form of it
//! that names no listed tool.
//!
//! The providers of `kberg-providers` apply the same map to each request they are given, so a
//! provider used without [`crate::Agent`] is not refused either; a request the loop already
//! translated lists only safe names, which such a map leaves as they are.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use futures::StreamExt;

use crate::message::{ChatRequest, ChatResponse, Message, ToolChoice};
use crate::provider::{ChatDelta, ChatStream};

/// The longest tool name shown to a model unchanged: OpenAI's limit, the narrowest.
pub const MAX_TOOL_NAME_LEN: usize = 64;
const MAX_NAME_LEN: usize = MAX_TOOL_NAME_LEN;

/// Whether every hosted provider accepts `name` as a tool's name: 1 to [`MAX_TOOL_NAME_LEN`]
/// ASCII letters, digits, `_` and `-`.
pub fn is_provider_safe(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A map between tools' real names and the provider-safe names a model is shown: the
/// listed names already safe unchanged, every other one under an alias (each character outside
/// `[a-zA-Z0-9_-]` made `_`, cut to 64 characters, and a suffix of a hash of the real name
/// where that is taken). [`crate::Agent`] builds one per run; a provider builds one per
/// request with [`ToolNames::for_request`], sends [`ToolNames::translate`]'s request and reads
/// the answer back with [`ToolNames::incoming`] (or [`ToolNames::incoming_stream`]).
///
/// ```
/// use kberg_agent::{ChatRequest, ChatResponse, ToolCall, ToolDefinition, ToolNames};
/// use serde_json::json;
///
/// let request = ChatRequest {
///     tools: vec![
///         ToolDefinition::new("files.read", "Reads a file", json!({"type": "object"})),
///         ToolDefinition::new("search", "Searches", json!({"type": "object"})),
///     ],
///     ..ChatRequest::default()
/// };
/// let names = ToolNames::for_request(&request);
/// let sent = names.translate(&request);
/// assert_eq!(sent.tools[0].name, "files_read");
/// assert_eq!(sent.tools[1].name, "search");
///
/// // The model calls the alias; the caller reads the real name.
/// let mut answer = ChatResponse {
///     tool_calls: vec![ToolCall { id: "c1".into(), name: "files_read".into(), arguments: json!({}) }],
///     ..ChatResponse::default()
/// };
/// names.incoming(&mut answer);
/// assert_eq!(answer.tool_calls[0].name, "files.read");
///
/// // A request that lists only safe names (one the loop already translated) goes as it is.
/// let again = ToolNames::for_request(&sent);
/// assert!(again.is_identity());
/// assert_eq!(again.translate(&sent).tools[0].name, "files_read");
/// ```
#[derive(Debug, Clone, Default)]
pub struct ToolNames {
    /// Real name -> alias, only for names that are not provider-safe.
    alias_of: HashMap<String, String>,
    /// Alias -> real name.
    real_of: HashMap<String, String>,
    /// Every name the model is shown: the safe real names and the aliases.
    shown: HashSet<String>,
}

impl ToolNames {
    /// The map for tools listed under `names`, in listing order (which decides which of two
    /// names that read alike keeps the plain alias).
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let names: Vec<&str> = names.into_iter().collect();
        let mut taken: HashSet<String> = names
            .iter()
            .filter(|n| is_provider_safe(n))
            .map(|n| (*n).to_string())
            .collect();
        let mut map = Self::default();
        for &real in names.iter().filter(|n| !is_provider_safe(n)) {
            if map.alias_of.contains_key(real) {
                continue;
            }
            let alias = alias_for(real, &taken);
            taken.insert(alias.clone());
            map.real_of.insert(alias.clone(), real.to_string());
            map.alias_of.insert(real.to_string(), alias);
        }
        map.shown = taken;
        map
    }

    /// The map for the tools `request` lists, in its order. A name listed twice counts once.
    pub fn for_request(request: &ChatRequest) -> Self {
        Self::new(request.tools.iter().map(|t| t.name.as_str()))
    }

    /// Whether every listed tool is shown under its own name.
    pub fn is_identity(&self) -> bool {
        self.alias_of.is_empty()
    }

    /// Whether `request` is sent as it is (the common case): no listed tool has an alias, and
    /// no call in the conversation names a tool a provider would refuse.
    pub fn sends_as_is(&self, request: &ChatRequest) -> bool {
        self.alias_of.is_empty()
            && !matches!(&request.options.tool_choice, ToolChoice::Tool(n) if !is_provider_safe(n))
            && request.messages.iter().all(|m| match m {
                Message::Assistant { tool_calls, .. } => {
                    tool_calls.iter().all(|c| is_provider_safe(&c.name))
                }
                Message::Tool { name, .. } => is_provider_safe(name),
                _ => true,
            })
    }

    /// The name a call to `name` carries in the conversation sent: a listed tool's shown name,
    /// or, for a name the model invented that a provider would refuse (OpenAI models write
    /// `multi_tool_use.parallel`), a safe form of it that names no listed tool. Sent back as
    /// it was, such a name has every later turn refused.
    fn on_wire(&self, name: &str) -> String {
        match self.alias_of.get(name) {
            Some(alias) => alias.clone(),
            None if is_provider_safe(name) => name.to_string(),
            None => alias_for(name, &self.shown),
        }
    }

    /// The name the model is shown for the tool really named `real`.
    pub fn to_model<'a>(&'a self, real: &'a str) -> &'a str {
        self.alias_of.get(real).map_or(real, String::as_str)
    }

    /// The real name of the tool the model called `name`: an alias read back, any other name
    /// (a real name, or one the model invented) unchanged.
    pub fn to_real<'a>(&'a self, name: &'a str) -> &'a str {
        self.real_of.get(name).map_or(name, String::as_str)
    }

    /// The aliases shown in place of real names.
    pub fn aliases(&self) -> impl Iterator<Item = &str> {
        self.real_of.keys().map(String::as_str)
    }

    /// `request` as the model is sent it: every real name that has an alias replaced by it.
    pub fn outgoing(&self, request: &ChatRequest) -> ChatRequest {
        let mut request = request.clone();
        for tool in &mut request.tools {
            tool.name = self.to_model(&tool.name).to_string();
        }
        if let ToolChoice::Tool(name) = &mut request.options.tool_choice {
            *name = self.on_wire(name);
        }
        for message in &mut request.messages {
            match message {
                Message::System { content } | Message::User { content } => {
                    self.quote_aliases(content);
                }
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    self.quote_aliases(content);
                    for call in tool_calls {
                        call.name = self.on_wire(&call.name);
                    }
                }
                Message::Tool { name, content, .. } => {
                    *name = self.on_wire(name);
                    self.quote_aliases(content);
                }
            }
        }
        request
    }

    /// `request` as the model is sent it: [`ToolNames::outgoing`]'s translation, or `request`
    /// itself, not copied, when [`ToolNames::sends_as_is`].
    pub fn translate<'r>(&self, request: &'r ChatRequest) -> Cow<'r, ChatRequest> {
        if self.sends_as_is(request) {
            Cow::Borrowed(request)
        } else {
            Cow::Owned(self.outgoing(request))
        }
    }

    /// The model's structured calls read back to real names.
    pub fn incoming(&self, response: &mut ChatResponse) {
        for call in &mut response.tool_calls {
            if let Some(real) = self.real_of.get(&call.name) {
                call.name.clone_from(real);
            }
        }
    }

    /// A streamed piece read back to real names: a tool call's name that is an alias becomes
    /// the real name. The providers send a call's name whole in one piece (again with later
    /// pieces at most), which is what this reads.
    pub fn incoming_delta(&self, delta: &mut ChatDelta) {
        if let ChatDelta::ToolCall {
            name: Some(name), ..
        } = delta
            && let Some(real) = self.real_of.get(name.as_str())
        {
            name.clone_from(real);
        }
    }

    /// `stream` with each piece read back by [`ToolNames::incoming_delta`]; `stream` itself
    /// when there are no aliases.
    pub fn incoming_stream(&self, stream: ChatStream) -> ChatStream {
        if self.real_of.is_empty() {
            return stream;
        }
        let names = self.clone();
        Box::pin(stream.map(move |piece| {
            piece.map(|mut delta| {
                names.incoming_delta(&mut delta);
                delta
            })
        }))
    }

    /// A real name in backticks, alone or as a call (`` `name` ``, `` `name(...)` ``: how the
    /// loop's notes name a tool), becomes its alias, so the model reads the name it can call.
    ///
    /// One pass over the text whatever the number of aliases: a server may list hundreds of
    /// dotted names, and every message is sent again each turn.
    fn quote_aliases(&self, text: &mut String) {
        if !text.contains('`') {
            return;
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        let mut changed = false;
        while let Some(open) = rest.find('`') {
            let after = &rest[open + 1..];
            out.push_str(&rest[..=open]);
            rest = after;
            let Some(end) = after.find(['`', '(']) else {
                break;
            };
            if let Some(alias) = self.alias_of.get(&after[..end]) {
                out.push_str(alias);
                rest = &after[end..];
                changed = true;
            }
        }
        if changed {
            out.push_str(rest);
            *text = out;
        }
    }
}

/// The alias of `real`, a name that is not provider-safe, given the names already `taken`.
fn alias_for(real: &str, taken: &HashSet<String>) -> String {
    let mut base: String = real
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_NAME_LEN)
        .collect();
    if base.is_empty() {
        base.push_str("tool");
    }
    if !taken.contains(&base) {
        return base;
    }
    let hash = format!("{:08x}", fnv1a(real));
    (1u64..)
        .map(|n| {
            let suffix = if n == 1 {
                format!("_{hash}")
            } else {
                format!("_{hash}_{n}")
            };
            // `base` is ASCII: any byte is a character boundary.
            let keep = MAX_NAME_LEN.saturating_sub(suffix.len()).min(base.len());
            format!("{}{suffix}", &base[..keep])
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or(base)
}

/// 32-bit FNV-1a: a hash that is the same on every platform and in every release, so an
/// alias is too.
fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_names_are_kept_and_others_get_safe_unique_aliases() {
        let long = "x".repeat(80);
        let names = [
            "search_notes",
            "fs.read_file",
            "fs_read_file",
            "notes/add",
            "añadir nota",
            "ctl\u{7}",
            long.as_str(),
            "",
        ];
        let map = ToolNames::new(names);
        let shown: Vec<&str> = names.iter().map(|n| map.to_model(n)).collect();
        assert_eq!(shown[0], "search_notes");
        assert_eq!(shown[2], "fs_read_file");
        assert!(shown[1].starts_with("fs_read_file_"), "{}", shown[1]);
        assert_eq!(shown[3], "notes_add");
        assert_eq!(shown[4], "a_adir_nota");
        assert_eq!(shown[5], "ctl_");
        assert_eq!(shown[6].len(), MAX_NAME_LEN);
        assert_eq!(shown[7], "tool");
        let unique: HashSet<&str> = shown.iter().copied().collect();
        assert_eq!(unique.len(), names.len());
        for (real, alias) in names.iter().zip(&shown) {
            assert!(is_provider_safe(alias), "{alias:?}");
            assert_eq!(map.to_real(alias), *real);
        }
        // The same listing gives the same aliases.
        let again = ToolNames::new(names);
        for n in names {
            assert_eq!(again.to_model(n), map.to_model(n));
        }
        assert!(ToolNames::new(["a", "b-c", "d_e"]).is_identity());
    }

    #[test]
    fn real_names_in_backticks_become_aliases() {
        let map = ToolNames::new(["fs.read_file", "search_notes", "a b"]);
        let mut text = "Call `fs.read_file` or `fs.read_file(path: x)`, not fs.read_file; `a b`, \
                        `search_notes`, `unclosed fs.read_file"
            .to_string();
        map.quote_aliases(&mut text);
        assert_eq!(
            text,
            "Call `fs_read_file` or `fs_read_file(path: x)`, not fs.read_file; `a_b`, \
             `search_notes`, `unclosed fs.read_file"
        );
        let mut plain = "no names here `x` `".to_string();
        map.quote_aliases(&mut plain);
        assert_eq!(plain, "no names here `x` `");
    }

    #[test]
    fn many_names_that_read_alike_stay_apart() {
        let names: Vec<String> = (0..300)
            .map(|i| format!("{}.{i}", "y".repeat(70)))
            .collect();
        let map = ToolNames::new(names.iter().map(String::as_str));
        let shown: HashSet<&str> = names.iter().map(|n| map.to_model(n)).collect();
        assert_eq!(shown.len(), names.len());
        assert!(shown.iter().all(|a| is_provider_safe(a)));
    }
}
